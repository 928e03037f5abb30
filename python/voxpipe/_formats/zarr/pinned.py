"""NIfTI-Zarr stores on object storage pinned to the version opened: the store is listed when it
is opened (every object's key, ETag and size), and every object read afterwards, metadata and
chunks alike, is fetched with If-Match the ETag listed for it, its answer checked as any pinned
object's (_sources/remote.py: ETag, size, range, body length). So a read never mixes two versions
of a store: an object rewritten or removed since the open is VoxpipeIOError "the object changed
since it was opened", naming its URL (the store's URL and the object's key), and so is one that
was absent at the open (a chunk read as the fill value then) and is there now.

Why a listing, and not If-Unmodified-Since the open time: that condition has a resolution of one
second (HTTP dates; S3 and moto compare whole seconds), so a chunk rewritten within the second of
the open passes it; and the open time must be the server's clock, which obstore does not expose
(no Date header; the root metadata's Last-Modified is when it was written, and zarr's own writers
write the root metadata first, the chunks after, so it bounds nothing). ETags compare exactly,
with no clock. A listing costs one request per 1000 objects (S3, GCS and Azure page so) and holds
about 200 bytes per object: at most MAX_LISTED_OBJECTS are listed, beyond which the store is
refused (LimitError) rather than read unpinned.

Over http(s), where a server lists only through WebDAV (static servers answer 405 or 501, which
the client retries for seconds), there is no listing: each object is pinned to the version its
first read saw (ETag and size, If-Match on every later read), and that first read must find it
last modified no later than the open, as this machine's clock tells the time: If-Unmodified-Since
evaluated here on the answer's Last-Modified rather than sent (the same comparison, also with
servers that ignore the header; obstore exposes no Date header to take the server's clock from).
So a chunk rewritten more than a second after the open (Last-Modified has whole seconds), on a
server whose clock agrees with this machine's, is an error; one rewritten within that second, or
while this machine's clock is ahead by more, is not seen; while it is behind, a store written
less than that difference before the open is refused as changed. Objects absent when first read
must stay absent.

The digest of the objects known at the end of the open (all of them where listed; the metadata
and header read over http(s)) is what a proxy's pickle and Dask token carry: a task that reopens
the store elsewhere lists (reads) it again and must find the same digest.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from datetime import datetime, timezone
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # zarr is an optional extra: imported when a store is opened
    from zarr.abc.store import ByteRequest
    from zarr.core.buffer import Buffer, BufferPrototype
    from zarr.storage import ObjectStore

from ..._foundation.errors import LimitError, VoxpipeFileNotFoundError, VoxpipeIOError
from ..._sources import remote as _remote

# The most objects a store listed at open may have: 200 list requests, about 200 MB of listing
# held. A NIfTI-Zarr of 1000 volumes of 64 chunks each has 64,000.
MAX_LISTED_OBJECTS = 200_000


class Listed(NamedTuple):
    """An object of a store as its listing at open (or its first read) saw it."""
    etag: str | None
    size: int


class Listing:
    """The objects of a store: key -> Listed, or None for one absent. ``listed``: every object
    at open (a listing); else those read so far, each as first read (a server that cannot
    list), none modified after ``opened_at`` (this machine's clock, UTC)."""

    def __init__(self, url: str, objects: dict[str, Listed | None], listed: bool) -> None:
        self.url = url
        self.objects = objects
        self.listed = listed
        self.opened_at = datetime.now(timezone.utc)
        self._lock = threading.Lock()
        self.digest = ""
        if listed:
            self.freeze()

    def freeze(self) -> None:
        """Take the digest of the objects known now (at the end of the open)."""
        h = hashlib.sha256()
        with self._lock:
            for key in sorted(self.objects):
                h.update(f"{key}\0{self.objects[key]}\n".encode())
        self.digest = h.hexdigest()

    def root_etag(self) -> str | None:
        """The ETag of the group's metadata (zarr.json, or .zgroup in Zarr v2)."""
        for key in ("zarr.json", ".zgroup"):
            found = self.objects.get(key)
            if found is not None:
                return found.etag
        return None

    def state(self) -> tuple[str, str | None, str]:
        """What pins the store, picklable: (how: "listing" or "first-read", the root
        metadata's ETag, the digest)."""
        return ("listing" if self.listed else "first-read", self.root_etag(), self.digest)

    def check_same(self, name: str, earlier: tuple[Any, ...]) -> None:
        """VoxpipeIOError where this open found other objects than the one whose state() is
        ``earlier`` (a pickled proxy reopened after the store changed)."""
        if self.state() != tuple(earlier):
            raise VoxpipeIOError(f"{name}: the store changed since it was opened (its objects "
                                 f"are not those the image was opened with)", path=name,
                                 field="identity")

    def record(self, where: str, key: str, seen: Listed | None,
               last_modified: datetime | None) -> None:
        """Record the first read of ``key`` (None: absent): VoxpipeIOError where it was
        modified after the open, or another read recorded another version of it."""
        if last_modified is not None and last_modified > self.opened_at:
            raise VoxpipeIOError(f"{self.url}: the store changed since it was opened: {key} "
                                 f"was modified at {last_modified.isoformat()}, after the open "
                                 f"at {self.opened_at.isoformat()}", path=where, field=key)
        with self._lock:
            earlier = self.objects.setdefault(key, seen)
        if earlier != seen:
            raise _changed(where, key, earlier, seen)


def _changed(where: str, key: str, was: Listed | None, now: Listed | None) -> VoxpipeIOError:
    """The error for the object ``key`` (at ``where``: the store's URL, "/", the key) found as
    ``now`` (None: absent), listed or first read as ``was``."""
    how = "removed" if now is None else "added" if was is None else "rewritten"
    store = where[:-len(key) - 1]
    return VoxpipeIOError(f"{store}: the store changed since it was opened: {key} was {how}",
                          path=where, field=key)


def list_store(url: str, store: Any) -> Listing:
    """The listing of every object under the store ``store`` (at ``url``), in pages of 1000."""
    obstore = _remote.client()
    objects: dict[str, Listed | None] = {}

    def listing() -> None:
        for page in obstore.list(store, chunk_size=1000):
            for meta in page:
                objects[str(meta["path"])] = Listed(meta.get("e_tag"), int(meta["size"]))
            if len(objects) > MAX_LISTED_OBJECTS:
                raise LimitError(f"{url}: expected a store of at most {MAX_LISTED_OBJECTS} "
                                 f"objects, which voxpipe lists to pin its reads to the version "
                                 f"opened, but it has more", path=url, field="listing")

    _remote.unchained(listing, lambda exc: _remote.store_error(url, exc, None,
                                                               "list the objects under it"))
    if not objects:
        raise VoxpipeFileNotFoundError(f"{url}: no Zarr store there (no objects under it)",
                                       path=url)
    return Listing(url, objects, True)


def _head(where: str, store: Any, key: str) -> Any:
    """obstore's metadata of ``key``, or None where there is none (404)."""
    obstore = _remote.client()
    return _remote.unchained(lambda: obstore.head(store, key),
                             lambda exc: None if isinstance(exc, FileNotFoundError)
                             else _remote.store_error(where, exc, None))


def _fetch(listing: Listing, store: Any, key: str, byte_range: ByteRequest | None) -> Any:
    """The bytes of ``key`` for ``byte_range`` (None: all) of the version ``listing`` pins (an
    object absent then: a 404 now is None, anything else "added")."""
    where = f"{listing.url}/{key}"
    if not listing.listed and key not in listing.objects:  # its first read
        if byte_range is None:
            try:
                obj = _remote.get_whole(where, store, key)
            except VoxpipeFileNotFoundError:
                listing.record(where, key, None, None)
                return None
            listing.record(where, key, Listed(obj.etag, obj.size), obj.last_modified)
            return obj.data
        meta = _head(where, store, key)
        listing.record(where, key, None if meta is None else Listed(meta.get("e_tag"),
                                                                    int(meta["size"])),
                       None if meta is None else meta.get("last_modified"))
    listed = listing.objects.get(key)
    if listed is None:  # absent at open: a HEAD (zarr's GET of it), answered 404 still
        if _head(where, store, key) is None:
            return None
        raise _changed(where, key, None, Listed(None, 0))
    try:
        return _get_listed(where, store, key, listed, byte_range)
    except VoxpipeFileNotFoundError:  # there at open, gone now
        raise _changed(where, key, listed, None) from None


def _get_listed(where: str, store: Any, key: str, listed: Listed,
                byte_range: ByteRequest | None) -> Any:
    from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

    etag, size = listed
    if byte_range is None:
        return _remote.get_whole(where, store, key, etag=etag, size=size).data
    if isinstance(byte_range, RangeByteRequest):
        start, end = byte_range.start, min(byte_range.end, size)
    elif isinstance(byte_range, OffsetByteRequest):
        start, end = byte_range.offset, size
    elif isinstance(byte_range, SuffixByteRequest):
        start, end = max(0, size - byte_range.suffix), size
    else:
        raise TypeError(f"Unexpected byte_range, got {byte_range}.")
    if start >= end:
        return b""
    return _remote.get_range(where, store, key, start, end - start, etag, size)


def _store_class() -> type[ObjectStore[Any]]:
    from zarr.core.buffer.core import default_buffer_prototype
    from zarr.storage import ObjectStore

    class PinnedObjectStore(ObjectStore[Any]):
        """zarr's ObjectStore whose reads are pinned to ``listing`` (module docstring); reads
        go through voxpipe's checked GETs, on threads (obstore releases the GIL)."""

        listing: Listing

        def _get_pinned(self, key: str, prototype: BufferPrototype | None,
                        byte_range: ByteRequest | None) -> Buffer | None:
            if prototype is None:
                prototype = default_buffer_prototype()
            data = _fetch(self.listing, self.store, key, byte_range)
            return None if data is None else prototype.buffer.from_bytes(memoryview(data))

        async def get(self, key: str, prototype: BufferPrototype,
                      byte_range: ByteRequest | None = None) -> Buffer | None:
            return await asyncio.to_thread(self._get_pinned, key, prototype, byte_range)

        async def get_partial_values(
                self, prototype: BufferPrototype,
                key_ranges: Iterable[tuple[str, ByteRequest | None]]) -> list[Buffer | None]:
            return await asyncio.gather(*(asyncio.to_thread(self._get_pinned, key, prototype, r)
                                          for key, r in key_ranges))

        def with_read_only(self, read_only: bool = False) -> PinnedObjectStore:
            new = super().with_read_only(read_only)
            new.listing = self.listing  # the same version, however zarr reopens the store
            return new

        async def exists(self, key: str) -> bool:
            if self.listing.listed:
                return self.listing.objects.get(key) is not None
            return bool(await super().exists(key))

    return PinnedObjectStore


_StoreClass: type[ObjectStore[Any]] | None = None


def pinned_store(url: str, storage_options: Mapping[str, Any] | None) -> Any:
    """A read-only zarr store over the store at ``url`` pinned to the version there now (its
    ``listing``: listed now, or, over http(s), filled as objects are first read; the open
    calls its freeze() once it has read the metadata)."""
    global _StoreClass
    if _StoreClass is None:
        _StoreClass = _store_class()
    root = url.rstrip("/")
    store, _ = _remote.store_for(root + "/zarr.json", storage_options)
    pinned = _StoreClass(store, read_only=True)
    # An HTTP server lists only through WebDAV, which static servers answer with 405 or 501
    # (retried by the client for seconds): over http(s), objects are pinned as first read.
    http = root.partition("://")[0].lower() in ("http", "https")
    listing = Listing(root, {}, False) if http else list_store(root, store)
    pinned.listing = listing  # type: ignore[attr-defined]
    return pinned
