"""Writes to object storage (S3, GCS, Azure), each visible only once complete.

An object goes up in one PUT when it is small, else as a multipart upload of parts of
``part_size`` bytes (default PART_SIZE), at most ``max_concurrency`` (default MAX_CONCURRENCY) in
flight: memory is bounded by about part_size x (max_concurrency + 1) whatever the object's size.
The requests are obstore's (``obstore.put`` with ``use_multipart``, ``chunk_size`` and
``max_concurrency``): completing a multipart upload is atomic, and obstore aborts the upload when
a part fails or the input raises (checked against moto: no upload is left listed), so a failed
write leaves neither an object nor hidden parts. A process killed mid-upload cannot abort: its
upload stays listed, hidden and billed until ``voxpipe clean`` (clean() below) or a bucket
lifecycle rule removes it.

Writers stream into an upload (StreamingUpload: the core's write_nifti_stream hands it the bytes
of a .nii/.nii.gz as it writes them, the upload runs on its own thread, and back-pressure holds
the writer while one part waits), so an object needs no local copy.

Not replacing an existing object (``overwrite=False``) must hold against a second writer too.
An object written in one PUT carries ``If-None-Match: *`` (obstore's ``mode="create"``). obstore
sends a multipart upload's completion without that condition (a non-overwrite mode makes it
buffer the whole input for one PUT instead: memory of the object's size, and S3 refuses a PUT
above 5 GiB), and it has no call that completes an upload with one. So a large object goes up
under a temporary name beside it (NAME + TEMP_MARK + a random suffix) and is then copied onto
NAME server-side only if NAME does not exist (obstore's ``copy(..., overwrite=False)``: for S3,
object_store's "multipart" copy-if-not-exists, a one-part copy whose completion carries
If-None-Match, which AWS and moto honour), and the temporary object is deleted. Of two writers,
one creates NAME and the other gets "already exists". S3 copies at most 5 GiB in one part: above
that, overwrite=False is a check before the upload (two writers racing could both write; the
last one wins).

A NIfTI-Zarr store on a bucket is written object by object at its final prefix (StoreUpload:
chunks as the encoder makes them), its root metadata (``zarr.json``; ``.zgroup`` and
``.zattrs`` for Zarr v2) last: until then a reader finds no store there (docs/python.md,
"Writing to object storage"). Object stores cannot rename a prefix, and a
copy of every chunk onto the final prefix would double the store's writes for no gain in what a
reader sees. While the store is written, a marker object ``STORE.voxpipe-incomplete`` beside it
says so (the writer's host, process and start time): clean() finds the stores of writers that
died by it.
"""

from __future__ import annotations

import collections
import datetime
import itertools
import json
import os
import socket
import tempfile
import threading
import uuid
import warnings
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from .._foundation.errors import InvalidArgumentError, VoxpipeIOError
from .._foundation.optional import require
from .._foundation.redact import redact
from . import remote

# Parts of this size (S3 takes 5 MiB to 5 GiB, the last part smaller, at most 10000 parts: a
# larger object gets larger parts, see part_size_for).
PART_SIZE = 16 << 20
# Parts in flight at once, per object.
MAX_CONCURRENCY = 8
# Objects of a NIfTI-Zarr store uploaded at once.
STORE_CONCURRENCY = 16

_MIN_PART = 5 << 20
_MAX_PARTS = 10000
# The largest object S3 copies in one request part (UploadPartCopy).
_MAX_COPY = 5 << 30

# The temporary object of a non-overwriting upload is NAME + TEMP_MARK + 16 hex digits; the marker
# of a store being written is STORE + INCOMPLETE_MARK.
TEMP_MARK = ".voxpipe-upload-"
INCOMPLETE_MARK = ".voxpipe-incomplete"

# The root metadata of a Zarr store, written last (v3, then v2's).
ROOT_METADATA = ("zarr.json", ".zgroup", ".zattrs", ".zmetadata")


class ObjectExistsError(VoxpipeIOError, FileExistsError):
    """The object (or store) to create exists and overwrite was not allowed."""
    code = "io"


def part_size_for(size: int, part_size: int | None = None) -> int:
    """The part size for an object of ``size`` bytes: ``part_size`` (default PART_SIZE), at
    least the 5 MiB S3 takes, and large enough that the object fits in 10000 parts."""
    part = PART_SIZE if part_size is None else int(part_size)
    if part < _MIN_PART:
        raise InvalidArgumentError(f"expected a part size of at least {_MIN_PART} bytes (S3's "
                                   f"smallest), but received {part}", field="part_size")
    least = -(-size // _MAX_PARTS)
    return max(part, -(-least // (1 << 20)) << 20)


def _options_for(url: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``storage_options`` with, for S3, object_store's conditional copy ("multipart": a copy
    whose completion carries If-None-Match) unless the caller or the environment chose one."""
    if url.partition("://")[0].lower() not in ("s3", "s3a"):
        return dict(storage_options) if storage_options else None
    options = dict(storage_options or {})
    given = {k.lower() for k in options}
    if not ({"copy_if_not_exists", "aws_copy_if_not_exists"} & given
            or "AWS_COPY_IF_NOT_EXISTS" in os.environ):
        options["copy_if_not_exists"] = "multipart"
    return options


def _write_error(url: str, exc: Exception, what: str = "write") -> Exception:
    if isinstance(exc, (VoxpipeIOError, InvalidArgumentError)):
        return exc
    if type(exc).__name__ == "AlreadyExistsError" or "412 Precondition Failed" in str(exc):
        return ObjectExistsError(f"{url}: already exists (overwrite replaces it)", path=url)
    return remote.store_error(url, exc, None, what=what)


def exists(url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
    """Whether the object ``url`` exists (one HEAD); for a Zarr store (a name ending in
    ``.zarr``), whether its root metadata does."""
    if url.rstrip("/").endswith(".zarr"):
        base = url.rstrip("/")
        return any(exists(f"{base}/{name}", storage_options) for name in ("zarr.json", ".zgroup"))
    obstore = remote.client()
    store, name = remote.store_for(url, storage_options)

    def head() -> bool:
        try:
            obstore.head(store, name)
            return True
        except FileNotFoundError:
            return False

    return remote.unchained(head, lambda exc: remote.store_error(url, exc, None))


def _chunks(f: IO[bytes], size: int) -> Iterator[bytes]:
    """The bytes of ``f`` in chunks of ``size``: obstore cuts them into parts of chunk_size."""
    while True:
        block = f.read(size)
        if not block:
            return
        yield block


def upload_file(path: str, url: str, storage_options: Mapping[str, Any] | None = None, *,
                overwrite: bool = True, part_size: int | None = None,
                max_concurrency: int | None = None) -> None:
    """Write the local file ``path`` as the object ``url``, visible only once complete: one PUT
    for a file of at most one part, else a parallel multipart upload (module docstring). Without
    ``overwrite``, ObjectExistsError (a FileExistsError) when the object exists, also when
    another writer creates it meanwhile. Any failure aborts the upload; VoxpipeIOError names the
    URL and the server's answer."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        upload_stream(f, url, storage_options, size=size, overwrite=overwrite,
                      part_size=part_size, max_concurrency=max_concurrency)


def upload_stream(data: IO[bytes] | Iterable[Any], url: str,
                  storage_options: Mapping[str, Any] | None = None, *, size: int | None = None,
                  max_size: int | None = None, overwrite: bool = True,
                  part_size: int | None = None, max_concurrency: int | None = None) -> None:
    """upload_file for the bytes of a binary file object or an iterable of buffers (read as the
    upload goes: never more than the parts in flight in memory). ``size`` (when known) sizes
    the parts; without it, an input that ends within one part goes up in one PUT, a longer one
    in multipart. ``max_size``: at most how many bytes will come, when ``size`` is not known
    (how to create a large object without overwrite depends on it, module docstring). An
    exception the input raises aborts the upload and reaches the caller."""
    if remote.has_query(url):
        raise InvalidArgumentError(f"{redact(url)}: a URL with a query (a presigned URL) "
                                   f"is read, not written, by voxpipe", path=redact(url))
    obstore = remote.client()
    options = _options_for(url, storage_options)
    store, name = remote.store_for(url, options)
    part = part_size_for(size if size is not None else max_size or 0, part_size)
    inflight = MAX_CONCURRENCY if max_concurrency is None else max(1, int(max_concurrency))
    source = _chunks(data, part) if hasattr(data, "read") else iter(data)  # type: ignore[arg-type]
    if size is None:
        # Up to one part read ahead: an input that ends there is one PUT.
        head: list[Any] = []
        got = 0
        for chunk in source:
            head.append(chunk)
            got += len(chunk)
            if got > part:
                break
        else:
            size = got
        source = itertools.chain(head, source)
    if size is not None and size <= part:
        # One PUT: the whole object in memory (at most one part), conditional when creating.
        body = b"".join(source)
        remote.unchained(
            lambda: obstore.put(store, name, body, mode="overwrite" if overwrite else "create",
                                use_multipart=False),
            lambda exc: _write_error(url, exc))
        return
    url_scheme = url.partition("://")[0].lower()
    largest = size if size is not None else max_size
    conditional_copy = not overwrite and not (url_scheme in ("s3", "s3a") and largest is not None
                                              and largest > _MAX_COPY)
    if not overwrite and exists(url, storage_options):
        # Checked first in both cases: a refusal costs one HEAD, not an upload.
        raise ObjectExistsError(f"{url}: already exists (overwrite replaces it)", path=url)
    target = name + TEMP_MARK + uuid.uuid4().hex[:16] if conditional_copy else name

    failed: list[BaseException] = []

    def watched() -> Iterator[Any]:
        """The input's own exception, as it raised it, reaches the caller (obstore aborts the
        upload and raises it, but then the message is no longer ours to tell apart)."""
        try:
            yield from source
        except BaseException as exc:
            failed.append(exc)
            raise

    def put() -> None:
        obstore.put(store, target, watched(), use_multipart=True, chunk_size=part,
                    max_concurrency=inflight)

    remote.unchained(put, lambda exc: failed[0] if failed else _write_error(url, exc))
    if not conditional_copy:
        return
    try:
        remote.unchained(lambda: obstore.copy(store, target, name, overwrite=False),
                         lambda exc: _write_error(url, exc))
    finally:
        # The copy's outcome is what the caller hears; a temporary object that cannot be
        # deleted is said in a warning (clean() removes it later).
        try:
            obstore.delete(store, target)
        except Exception as exc:
            error = remote.store_error(f"{url.rsplit('/', 1)[0]}/{target}", exc, None,
                                       what="delete the temporary object")
            warnings.warn(f"{error} (`voxpipe clean` removes it)", stacklevel=2)


def put_bytes(data: Any, url: str, storage_options: Mapping[str, Any] | None = None, *,
              overwrite: bool = True) -> None:
    """``data`` (a buffer) as the object ``url``: upload_stream over its bytes."""
    view = memoryview(data).cast("B")
    step = PART_SIZE
    upload_stream((view[i:i + step] for i in range(0, len(view), step)), url, storage_options,
                  size=len(view), overwrite=overwrite)


class _Abandoned(Exception):
    """What the input of an abandoned StreamingUpload raises, so that obstore aborts it."""


class StreamingUpload:
    """A sink that a writer streams an object into (the core's write_nifti_stream: vp.save's
    .nii/.nii.gz to a URL, ``voxpipe convert IN URL``): write(bytes) hands the bytes to an
    upload running on its own thread (upload_stream: one PUT, or multipart with parts going up
    while the writer goes on), and blocks while ``max_buffered`` bytes (default: one part) wait
    to be taken: memory stays bounded by them and the parts in flight. commit() ends the input
    and returns once the object is complete; abort() ends it with an error, so that the upload
    is aborted (and nothing appears). The upload's failure is kept as ``error`` and raised by the
    next write() or by commit()."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None, *,
                 overwrite: bool = True, max_size: int | None = None,
                 part_size: int | None = None, max_concurrency: int | None = None,
                 max_buffered: int | None = None):
        self.url = url
        self.error: BaseException | None = None
        self._limit = max_buffered or part_size_for(max_size or 0, part_size)
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._state = "open"  # then "end" (commit) or "abort"
        self._cond = threading.Condition()
        self._thread = threading.Thread(
            target=self._run, name="voxpipe-upload", daemon=True,
            args=(storage_options, overwrite, max_size, part_size, max_concurrency))
        self._thread.start()

    def _run(self, storage_options: Mapping[str, Any] | None, overwrite: bool,
             max_size: int | None, part_size: int | None, max_concurrency: int | None) -> None:
        try:
            upload_stream(self._input(), self.url, storage_options, max_size=max_size,
                          overwrite=overwrite, part_size=part_size,
                          max_concurrency=max_concurrency)
        except BaseException as exc:
            with self._cond:
                if not isinstance(exc, _Abandoned):
                    self.error = exc
                self._state = "abort"
                self._cond.notify_all()

    def _input(self) -> Iterator[bytes]:
        while True:
            with self._cond:
                while not self._chunks and self._state == "open":
                    self._cond.wait()
                if self._chunks:
                    chunk = self._chunks.popleft()
                    self._buffered -= len(chunk)
                    self._cond.notify_all()
                elif self._state == "end":
                    return
                else:
                    raise _Abandoned(f"{self.url}: the write was abandoned")
            yield chunk

    def write(self, data: Any) -> None:
        chunk = bytes(data)
        with self._cond:
            while self._buffered >= self._limit and self._state == "open":
                self._cond.wait()
            if self._state != "open":
                raise self.error or _Abandoned(f"{self.url}: the upload has ended")
            self._chunks.append(chunk)
            self._buffered += len(chunk)
            self._cond.notify_all()

    def commit(self) -> None:
        with self._cond:
            if self._state == "open":
                self._state = "end"
                self._cond.notify_all()
        self._thread.join()
        if self.error is not None:
            raise self.error
        if self._state == "abort":
            raise _Abandoned(f"{self.url}: the upload was abandoned")

    def abort(self) -> None:
        with self._cond:
            if self._state == "open":
                self._state = "abort"
                self._chunks.clear()
                self._cond.notify_all()
        self._thread.join()


class LocalOutput:
    """A local temporary folder to write an output into before it goes up to ``url``:
    ``path(name)`` is where the file that becomes ``url`` (or an object beside it: a pair's
    .img) is written; commit() uploads the files written, and the folder is removed when the
    ``with`` block ends, whatever happened. The upload reads the file as it goes: memory stays
    bounded, disk holds the output once (in $TMPDIR)."""

    def __init__(self, url: str):
        self.url = url
        self.folder = tempfile.mkdtemp(prefix="voxpipe-upload-")

    def path(self, url: str | None = None) -> str:
        name = (url or self.url).split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        return os.path.join(self.folder, name)

    def __enter__(self) -> LocalOutput:
        return self

    def __exit__(self, *exc: object) -> None:
        import shutil
        shutil.rmtree(self.folder, ignore_errors=True)


# -- NIfTI-Zarr stores ---------------------------------------------------------------------------

def _store_files(folder: str) -> list[str]:
    """The files of a local store, relative, with '/' separators, root metadata last."""
    files = []
    for root, _dirs, names in os.walk(folder):
        for n in names:
            rel = os.path.relpath(os.path.join(root, n), folder)
            files.append(rel.replace(os.sep, "/"))
    files.sort(key=lambda r: (r in ROOT_METADATA, ROOT_METADATA.index(r)
                              if r in ROOT_METADATA else 0, r))
    return files


def _list(store: Any, prefix: str) -> list[dict[str, Any]]:
    obstore = remote.client()
    out: list[dict[str, Any]] = []
    for batch in obstore.list(store, prefix=prefix or None):
        out.extend(batch)
    return out


class StoreUpload:
    """A NIfTI-Zarr store written to the prefix ``url`` object by object, its root metadata
    last. Entering: without ``overwrite`` an existing store is ObjectExistsError; a marker
    object ``URL.voxpipe-incomplete`` is written; with ``overwrite`` the old store is deleted,
    its root metadata first (from then on there is no store there). put(key, data) sends one
    object (a chunk, as the encoder makes it) on an upload pool, from any thread, blocking while
    ``max_pending`` objects wait or go up (memory: those objects). finish(folder) waits for
    them, sends the files of the local store ``folder`` not sent yet (the metadata), the root
    metadata last (now the store exists), and deletes the marker. Leaving on an error deletes
    what was written, root metadata first, then the marker; a writer that dies leaves the
    marker, which clean() finds."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None, *,
                 overwrite: bool = True, max_concurrency: int | None = None,
                 max_pending: int | None = None):
        self.url = url.rstrip("/")
        self._options = storage_options
        self._overwrite = overwrite
        self._workers = STORE_CONCURRENCY if max_concurrency is None else max(1, int(max_concurrency))
        self._slots = threading.BoundedSemaphore(max_pending or 2 * self._workers)
        self._written: list[str] = []
        self._sent: set[str] = set()
        self._errors: list[BaseException] = []
        self._pending: list[Any] = []
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def __enter__(self) -> StoreUpload:
        base = self.url
        if not self._overwrite and exists(base, self._options):
            raise ObjectExistsError(f"{base}: a Zarr store exists there (overwrite replaces it)",
                                    path=base)
        self._store, root = remote.store_for(base + "/" + ROOT_METADATA[0], self._options)
        self._prefix = root[:-len(ROOT_METADATA[0])]  # "" or "path/in/store/"
        marker = json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                             "started": datetime.datetime.now(datetime.timezone.utc).isoformat()})
        put_bytes(marker.encode(), base + INCOMPLETE_MARK, self._options)
        try:
            if self._overwrite:
                _delete_store(self._store, base, self._prefix)
        except BaseException:
            _delete(base + INCOMPLETE_MARK, self._options)
            raise
        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="voxpipe-upload")
        return self

    def _send(self, key: str, data: Any) -> None:
        try:
            put_bytes(data, f"{self.url}/{key}", self._options)
            with self._lock:
                self._written.append(key)
        except BaseException as exc:
            with self._lock:
                self._errors.append(exc)
        finally:
            self._slots.release()

    def put(self, key: str, data: Any) -> None:
        """Send ``data`` as the store's object ``key`` ("0/c/3/0/0/0")."""
        with self._lock:
            if self._errors:
                raise self._errors[0]
            self._sent.add(key)
        self._slots.acquire()
        assert self._pool is not None
        future = self._pool.submit(self._send, key, data)
        with self._lock:
            self._pending.append(future)

    def _wait(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for f in pending:
            f.result()
        if self._errors:
            raise self._errors[0]

    def finish(self, folder: str) -> None:
        """Send what the local store ``folder`` holds and put() did not, root metadata last."""
        self._wait()
        files = [f for f in _store_files(folder) if f not in self._sent]
        body = [f for f in files if f not in ROOT_METADATA]
        last = [f for f in files if f in ROOT_METADATA]

        def one(rel: str) -> None:
            upload_file(os.path.join(folder, *rel.split("/")), f"{self.url}/{rel}",
                        self._options, max_concurrency=2)
            with self._lock:
                self._written.append(rel)

        assert self._pool is not None
        for _ in self._pool.map(one, body):
            pass
        for rel in last:  # zarr.json (v2: .zgroup, .zattrs) last: now the store exists
            one(rel)
        _delete(self.url + INCOMPLETE_MARK, self._options)

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        assert self._pool is not None
        if kind is not None:
            try:
                self._wait()
            except BaseException:
                pass
        self._pool.shutdown(wait=True)
        if kind is None:
            return
        # What this writer put there goes, the root metadata first (no reader meets a store
        # losing its chunks), the marker last; where a delete fails the marker stays, and
        # clean() finds the rest.
        obstore = remote.client()
        try:
            for rel in sorted(self._written, key=lambda r: r not in ROOT_METADATA):
                obstore.delete(self._store, self._prefix + rel)
            _delete(self.url + INCOMPLETE_MARK, self._options)
        except Exception:
            pass


def upload_store(folder: str, url: str, storage_options: Mapping[str, Any] | None = None, *,
                 overwrite: bool = True, max_concurrency: int | None = None) -> None:
    """The local Zarr store ``folder`` as the store ``url`` (a prefix), as StoreUpload writes
    one: a reader finds no store there until the root metadata, written last, is there."""
    with StoreUpload(url, storage_options, overwrite=overwrite,
                     max_concurrency=max_concurrency) as up:
        up.finish(folder)


def _delete(url: str, storage_options: Mapping[str, Any] | None) -> None:
    obstore = remote.client()
    store, name = remote.store_for(url, storage_options)
    remote.unchained(lambda: obstore.delete(store, name),
                     lambda exc: _write_error(url, exc, "delete"))


def _delete_store(store: Any, base: str, prefix_name: str) -> None:
    """Delete the store at ``prefix_name`` of ``store``: its root metadata first (a reader then
    finds no store), then every object under it."""
    obstore = remote.client()
    for meta in ROOT_METADATA:
        remote.unchained(lambda: obstore.delete(store, prefix_name + meta),
                         lambda exc: _write_error(base, exc, "delete the old store at"))
    paths = [o["path"] for o in _list(store, prefix_name)]
    if paths:
        remote.unchained(lambda: obstore.delete(store, paths),
                         lambda exc: _write_error(base, exc, "delete the old store at"))


# -- leftovers of writers that died ------------------------------------------------------------

def clean(url: str, storage_options: Mapping[str, Any] | None = None, *,
          older_than: float = 3600.0, dry_run: bool = False) -> list[str]:
    """Remove what writers that died left under the prefix ``url`` (``s3://b/derived/``) and
    return one line per thing found (``"removed ..."``, or ``"would remove ..."`` with
    ``dry_run``), each older than ``older_than`` seconds (a live writer's are younger):

    - temporary objects of non-overwriting uploads (``NAME.voxpipe-upload-HEX``);
    - incomplete stores: a marker ``STORE.voxpipe-incomplete`` and every object under
      ``STORE/`` (the store has no root metadata yet, or one a dead writer was replacing);
    - (S3) multipart uploads started under the prefix and never completed nor aborted, listed
      through boto3 where it is installed (obstore cannot list them), configured from the same
      storage_options and environment (endpoint, keys, region).
    """
    if not url.endswith("/"):
        url += "/"
    obstore = remote.client()
    # A store rooted at the prefix: the listing's paths are relative to it.
    store, _ = remote.store_for(url + "x", storage_options)
    prefix = url.partition("://")[2].partition("/")[2]
    bucket_url = url
    now = datetime.datetime.now(datetime.timezone.utc)
    cutoff = now - datetime.timedelta(seconds=float(older_than))
    verb = "would remove" if dry_run else "removed"
    report: list[str] = []
    listing = _list(store, "")
    names = {o["path"]: o for o in listing}
    for path, o in sorted(names.items()):
        if o["last_modified"] > cutoff:
            continue
        if TEMP_MARK in path.rsplit("/", 1)[-1]:
            if not dry_run:
                remote.unchained(lambda: obstore.delete(store, path),
                                 lambda exc: _write_error(bucket_url + path, exc, "delete"))
            report.append(f"{verb} {bucket_url}{path} (temporary object of an upload)")
        elif path.endswith(INCOMPLETE_MARK):
            base = path[:-len(INCOMPLETE_MARK)]
            inside = [p for p in names if p.startswith(base + "/")]
            if not dry_run:
                # The root metadata first: a partial store is never seen as one while it goes.
                first = [p for p in inside if p in {f"{base}/{m}" for m in ROOT_METADATA}]
                for group in (first, [p for p in inside if p not in first], [path]):
                    if group:
                        remote.unchained(lambda: obstore.delete(store, group),
                                         lambda exc: _write_error(bucket_url + base, exc,
                                                                  "delete"))
            report.append(f"{verb} {bucket_url}{base} (incomplete store, {len(inside)} objects)")
    report.extend(_clean_uploads(url, prefix, storage_options, cutoff, dry_run, verb))
    return report


def _boto3_client(url: str, storage_options: Mapping[str, Any] | None) -> Any:
    boto3 = require("boto3", "s3", "listing unfinished multipart uploads", "boto3")
    o = {k.lower().removeprefix("aws_"): v for k, v in (storage_options or {}).items()}
    kwargs: dict[str, Any] = {}
    if o.get("endpoint") or o.get("endpoint_url"):
        kwargs["endpoint_url"] = o.get("endpoint") or o.get("endpoint_url")
    for ours, theirs in (("access_key_id", "aws_access_key_id"),
                         ("secret_access_key", "aws_secret_access_key"),
                         ("session_token", "aws_session_token"), ("token", "aws_session_token"),
                         ("region", "region_name"), ("default_region", "region_name")):
        if o.get(ours):
            kwargs[theirs] = o[ours]
    return boto3.client("s3", **kwargs)


def _clean_uploads(url: str, prefix: str, storage_options: Mapping[str, Any] | None,
                   cutoff: datetime.datetime, dry_run: bool, verb: str) -> list[str]:
    if url.partition("://")[0].lower() not in ("s3", "s3a"):
        return []
    bucket = url.partition("://")[2].partition("/")[0]
    try:
        s3 = _boto3_client(url, storage_options)
    except Exception:
        return [f"not listed: unfinished multipart uploads under {url} (install boto3 to list "
                f"them, or give the bucket a lifecycle rule AbortIncompleteMultipartUpload)"]
    report = []
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    while True:
        try:
            page = s3.list_multipart_uploads(**kwargs)
        except Exception as exc:
            raise VoxpipeIOError(f"{url}: cannot list multipart uploads: {type(exc).__name__}: "
                                 f"{redact(str(exc))}", path=url) from None
        for u in page.get("Uploads", []):
            if u["Initiated"] > cutoff:
                continue
            if not dry_run:
                try:
                    s3.abort_multipart_upload(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"])
                except Exception as exc:
                    raise VoxpipeIOError(f"{url}{u['Key']}: cannot abort its upload: "
                                         f"{type(exc).__name__}: {redact(str(exc))}",
                                         path=url) from None
            report.append(f"{verb} s3://{bucket}/{u['Key']} (unfinished multipart upload "
                          f"started {u['Initiated'].isoformat()})")
        if not page.get("IsTruncated"):
            return report
        kwargs["KeyMarker"] = page.get("NextKeyMarker", "")
        kwargs["UploadIdMarker"] = page.get("NextUploadIdMarker", "")
