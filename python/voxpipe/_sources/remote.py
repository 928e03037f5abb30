"""Objects on S3, GCS, Azure and HTTP(S) servers, read through obstore (the Python binding of
Rust's object_store: request signing, credential chains, retries with backoff and timeouts are
its, not voxpipe's).

Two ways in: fetch() gets a whole object in one GET (what many-file loaders and DICOM series
read), and RemoteFile opens one for reads by byte ranges: its first request (64 KiB from the
start) tells the size and ETag and holds the header; the core (voxpipe/remote.hpp) then fetches
the ranges a read needs, coalesced and concurrently, through RemoteFile's fetcher. Every request
after the first carries If-Match with the ETag it saw, so an image never mixes bytes of two
versions of an object: a change fails the read.

Nothing a server sends is trusted. Every answer's ETag and object size (Content-Range's total)
must be those the object was opened (or listed) with, and its range the one asked for: a server
or cache that ignores If-Match and answers with another version is "the object changed", never
data. Bodies are read in chunks into a buffer of the size expected, so that a Content-Length that
lies, an endless body or a body longer than its range is an error after at most one chunk past
the expected end, and a whole-object GET whose answer claims more than this machine's memory
(max_object_bytes) fails before anything is allocated. (obstore's own ``bytes()`` reserves what
the answer claims: a claim of 10**15 bytes aborts the process.)

An http(s) URL with a query (a presigned URL: ``...?X-Amz-Signature=...``, an Azure SAS) is read
as it is: the store is the object's URL, query included, so the query reaches the server as the
query and is never part of an object's name; its credentials never appear in a message
(_foundation/redact.py).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, TypeVar

import numpy as np

from .._foundation.native import core as _core
from .._foundation.optional import require
from .._foundation.redact import redact
from .._foundation.errors import (InvalidArgumentError, VoxpipeError, VoxpipeFileNotFoundError,
                                  VoxpipeIOError)

_T = TypeVar("_T")

# The schemes obstore's from_url maps to a store (file:// stays a local path for voxpipe).
_SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "abfss", "adl", "azure", "http", "https")

# Options that configure obstore's HTTP client rather than the store (ClientConfig's keys).
_CLIENT_OPTIONS = frozenset({
    "allow_http", "allow_invalid_certificates", "connect_timeout", "default_content_type",
    "default_headers", "pool_idle_timeout", "pool_max_idle_per_host", "proxy_url",
    "proxy_ca_certificate", "proxy_excludes", "root_certificate", "randomize_addresses",
    "read_timeout", "timeout", "user_agent", "http1_only", "http2_only",
    "http2_keep_alive_interval", "http2_keep_alive_timeout", "http2_keep_alive_while_idle",
})

# Deadlines and retries are object_store's defaults unless storage_options sets them: every
# request has a timeout (30 s, 5 s to connect), so nothing waits forever on a server that stopped
# answering, and throttling, 5xx answers and dropped connections are retried with backoff a
# bounded number of times (up to 10 retries within 3 minutes; storage_options["retry_config"]:
# obstore's RetryConfig, e.g. {"max_retries": 2, "retry_timeout": timedelta(seconds=5)}). Client
# options are passed only when given: passing any replaces those the environment sets
# (AWS_ALLOW_HTTP, ...).


class RemoteObject(NamedTuple):
    """The bytes of one object (obstore's Bytes: a buffer, not copied), what identifies the
    version read, and how the store was reached (what an image from a URL pickles as)."""
    url: str
    data: Any
    size: int
    etag: str | None
    version: str | None
    storage_options: Mapping[str, Any] | None = None
    last_modified: Any = None  # the answer's Last-Modified (a datetime), where it has one

    def __repr__(self) -> str:  # the URL without its credentials, the size rather than the bytes
        return (f"RemoteObject(url={redact(self.url)!r}, size={self.size}, etag={self.etag!r}, "
                f"version={self.version!r})")


def buffer_of(source: Any) -> Any:
    """The bytes an in-memory image was opened from: a RemoteObject's data, the first bytes of
    a RemoteFile (its header), or `source`."""
    if isinstance(source, RemoteObject):
        return source.data
    if isinstance(source, RemoteFile):
        return source.head
    return source


def is_url(source: object) -> bool:
    """Whether ``source`` is a string naming an object on a store voxpipe reads remotely."""
    if not isinstance(source, str):
        return False
    scheme, sep, _ = source.partition("://")
    return bool(sep) and scheme.lower() in _SCHEMES


def has_query(url: str) -> bool:
    """Whether ``url`` is an http(s) URL with a query (a presigned URL, a SAS). Elsewhere ("s3://",
    "gs://", ...) a "?" belongs to the object's key, as the stores' own tools read it."""
    return url.partition("://")[0].lower() in ("http", "https") and "?" in url


def _split(url: str) -> tuple[str, str]:
    """(the store's URL: the object's folder, the object's name within it); for a URL with a
    query (has_query), (the URL itself, ""): obstore sends its store's URL, query included, for
    the empty name."""
    scheme, _, rest = url.partition("://")
    folder, sep, name = rest.split("?", 1)[0].rpartition("/") if has_query(url) \
        else rest.rpartition("/")
    if not sep or not folder or not name:
        raise InvalidArgumentError(f"expected a URL of an object (SCHEME://BUCKET/KEY), but "
                                   f"received {url!r}", path=url)
    if has_query(url):
        return url, ""
    return f"{scheme}://{folder}", name


# obstore runs its requests on a tokio runtime, whose threads a forked child does not have: a
# request there waits forever, timeouts included (tokio-rs/tokio#4301). The process that first
# used it is recorded, so that a forked child fails at once, saying what to do.
_client_pid: int | None = None


def client() -> Any:
    """The obstore module, once this process is known to be able to make requests with it."""
    global _client_pid
    obstore = require("obstore", "s3", "reading from object storage", "obstore")
    if _client_pid is None:
        _client_pid = os.getpid()
    elif _client_pid != os.getpid():
        raise VoxpipeIOError(
            "this process was forked from one that had already read objects through obstore, "
            "which cannot make requests in such a process (its runtime's threads are not "
            "copied by fork): start worker processes with 'spawn' or 'forkserver' (e.g. "
            "DataLoader(..., multiprocessing_context='spawn')), or read the first object in "
            "the workers")
    return obstore


# Stores by (folder URL, options, the environment's store variables): one HTTP client, and its
# pooled connections, per folder.
_ENV_PREFIXES = ("AWS_", "GOOGLE_", "AZURE_", "OBJECT_STORE_")
_stores: dict[tuple[str, str], Any] = {}
_stores_lock = threading.Lock()


def store_for(url: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    """(an obstore store for the folder of ``url``, the object's name in it), configured by
    ``storage_options`` as fetch() describes; InvalidArgumentError for options obstore refuses."""
    obstore_store = require("obstore.store", "s3", "reading from object storage", "obstore")
    store_url, name = _split(url)
    # The environment configures stores too: a change of it is a new store.
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES))
    key = (store_url, repr((sorted((storage_options or {}).items()), env)))
    with _stores_lock:
        if key in _stores:
            return _stores[key], name
    options = dict(storage_options or {})
    client = {k: options.pop(k) for k in list(options) if k in _CLIENT_OPTIONS}
    retry = options.pop("retry_config", None)  # max_retries, retry_timeout, backoff
    def make() -> Any:
        if not name:  # a URL that carries its own authorisation: sent as it is, never signed
            if options:
                raise ValueError(f"a URL with a query is read as it is (a presigned URL), with "
                                 f"HTTP client options only, but received {sorted(options)}")
            return obstore_store.HTTPStore.from_url(store_url, client_options=client or None,
                                                    retry_config=retry)
        return obstore_store.from_url(store_url, config=options or None,
                                      client_options=client or None, retry_config=retry)

    # obstore's configuration errors: an unknown key, a bad value
    store = unchained(make, lambda exc: InvalidArgumentError(f"{url}: storage_options: {exc}",
                                                             path=url))
    with _stores_lock:
        if len(_stores) >= 64:
            _stores.clear()
        _stores[key] = store
    return store, name


def fetch(url: str, storage_options: Mapping[str, Any] | None = None, *,
          etag: str | None = None) -> RemoteObject:
    """The whole object at ``url``, in one GET; with ``etag``, only that version of it (the
    request carries If-Match: an object replaced since raises VoxpipeIOError, never other bytes).

    ``storage_options``: obstore's store configuration (``S3Config``, ``GCSConfig``,
    ``AzureConfig`` keys, e.g. ``endpoint``, ``region``, ``access_key_id``,
    ``skip_signature=True`` for anonymous access) and HTTP client options (``allow_http``,
    ``timeout``, ...). Without them the environment configures the store as it configures the
    clouds' own tools (``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP``, credential files, ...).
    Raises VoxpipeFileNotFoundError for a missing object or bucket and VoxpipeIOError for any
    other failure (denied, timed out, retries exhausted), each naming the URL and the server's
    answer."""
    store, name = store_for(url, storage_options)
    return get_whole(url, store, name, etag=etag, storage_options=storage_options)


def max_object_bytes() -> int:
    """The most bytes one object fetched whole may have: this machine's physical memory. An
    answer that claims more is refused before anything is allocated."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: what a 64-bit process can map
        return 1 << 47


def get_whole(url: str, store: Any, name: str, *, etag: str | None = None,
              size: int | None = None, storage_options: Mapping[str, Any] | None = None,
              since: str = "opened") -> RemoteObject:
    """The object ``name`` of ``store`` (``url``) in one GET. With ``etag`` and ``size`` (what
    a listing or an earlier read saw), only that version: another ETag or size in the answer
    says the object changed since it was ``since``. A size the answer claims beyond
    max_object_bytes() is refused before anything is allocated; the body must hold exactly
    that size."""
    obstore = client()
    # obstore's errors: denied, unauthenticated, timeout, 5xx after retries
    result = unchained(lambda: obstore.get(store, name,
                                           options={"if_match": etag} if etag else None),
                       lambda exc: store_error(url, exc, etag, since=since))
    meta = result.meta
    _check_version(url, meta, etag, size, since)
    claimed = int(meta["size"])
    if claimed > max_object_bytes():
        raise VoxpipeIOError(f"{url}: the response claims {claimed} bytes, more than this "
                             f"machine's memory ({max_object_bytes()} bytes): refused",
                             path=url, field="Content-Length")
    data = _read_body(result, url, 0, claimed, etag, since)
    return RemoteObject(url, data, claimed, meta.get("e_tag") or etag, meta.get("version"),
                        dict(storage_options) if storage_options else None,
                        meta.get("last_modified"))


# Bodies are read in chunks of this size (the last may be shorter): as fast as obstore's
# bytes() (a 100 MiB object from the tests' HTTP server: 0.11-0.12 s either way), and what a
# server can make voxpipe hold beyond the bytes it expects.
_BODY_CHUNK = 1 << 20


def _read_body(result: Any, url: str, offset: int, expected: int, etag: str | None,
               since: str = "opened") -> Any:
    """The body of obstore's GetResult ``result``, which must hold exactly ``expected`` bytes
    (the object's bytes from ``offset``): VoxpipeIOError for fewer, and for more as soon as a
    chunk goes past them (the rest is never read: the connection is dropped). One chunk is
    returned as it came; more are copied into one buffer of ``expected`` bytes, allocated
    without being touched, so that pages are used only as bytes arrive."""
    def receive() -> tuple[Any, int]:
        out: Any = None
        got = 0
        for chunk in result.stream(min_chunk_size=min(max(expected, 1), _BODY_CHUNK)):
            n = len(chunk)
            if got + n > expected:
                raise VoxpipeIOError(f"{url}: expected {expected} bytes from byte {offset}, but "
                                     f"the response holds more: refused", path=url,
                                     field="Content-Length", offset=offset + expected)
            if got == 0 and n == expected:
                out = chunk
            else:
                if out is None:
                    out = np.empty(expected, np.uint8)
                out[got:got + n] = np.frombuffer(chunk, np.uint8)
            got += n
        return out, got

    # store_error: the connection failed mid-body (obstore resumes it first); voxpipe's own
    # errors as they are
    out, got = unchained(receive, lambda exc: store_error(url, exc, etag, since=since))
    if got != expected:  # a body cut short that the client did not notice
        raise VoxpipeIOError(f"{url}: expected {expected} bytes from byte {offset}, but the "
                             f"response holds {got}", path=url, offset=offset + got)
    return out if out is not None else b""


def _check_version(url: str, meta: Mapping[str, Any], etag: str | None, size: int | None,
                   since: str = "opened") -> None:
    """VoxpipeIOError "the object changed" unless an answer's ETag is ``etag`` and the object
    size it states (Content-Length of a whole answer, Content-Range's total of a ranged one) is
    ``size`` (each when known): a server, or a cache in front of one, that ignores If-Match
    answers with another version's bytes and says so only here."""
    got_etag = meta.get("e_tag")
    if etag and got_etag != etag:
        raise VoxpipeIOError(f"{_changed(url, etag, since)}: the response is of ETag {got_etag}",
                             path=url, field="ETag")
    if size is not None and int(meta["size"]) != size:
        raise VoxpipeIOError(f"{_changed(url, etag, since)}: the response is of an object of "
                             f"{int(meta['size'])} bytes, not {size}", path=url,
                             field="Content-Range")


def get_range(url: str, store: Any, name: str, offset: int, size: int, etag: str | None,
              object_size: int | None) -> Any:
    """Bytes [offset, offset + size) of the version of the object (``etag``, ``object_size``)
    in one ranged GET pinned to it (If-Match), every part of the answer checked: its ETag and
    total (_check_version), its range and its body's length."""
    obstore = client()
    if object_size is not None:
        size = max(0, min(size, object_size - offset))
    options: dict[str, Any] = {"range": (offset, offset + size)}
    if etag:
        options["if_match"] = etag
    # (the core's fetcher takes the URL off the message it names)
    result = unchained(lambda: obstore.get(store, name, options=options),
                       lambda exc: store_error(url, exc, etag))
    meta, got = result.meta, tuple(result.range)
    _check_version(url, meta, etag, object_size)
    if got != (offset, offset + size):
        raise VoxpipeIOError(f"{url}: expected bytes {offset}-{offset + size - 1}, but the "
                             f"response holds bytes {got[0]}-{got[1] - 1}: refused", path=url,
                             field="Content-Range", offset=offset)
    return _read_body(result, url, offset, size, etag)


# The first request of a ranged open: the NIfTI header and its extensions in the common case (a
# gzip object's first 64 KiB inflate to far more than a header).
HEAD_BYTES = 64 << 10

# Ranges of one read go out together on these threads (obstore releases the GIL while a request
# runs). A forked child (a DataLoader worker) makes its own: the parent's threads are not there.
_FETCH_THREADS = 16
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _fetch_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_FETCH_THREADS, thread_name_prefix="voxpipe-fetch")
        return _pool


def _forget_pool_after_fork() -> None:
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_after_fork)


def _changed(url: str, etag: str | None, since: str = "opened") -> str:
    return f"{url}: the object changed since it was {since} (expected ETag {etag})"


class _RangeFetcher:
    """What the core calls to fetch ranges of one version of an object: one buffer per
    (offset, size), fetched concurrently, each request pinned to the ETag (If-Match). Holds no
    reference to the RemoteFile, which holds the core's input, which holds this."""

    def __init__(self, url: str, store: Any, name: str, etag: str | None, size: int):
        self.url, self._store, self._name, self.etag, self.size = url, store, name, etag, size

    def get(self, offset: int, size: int) -> Any:
        return get_range(self.url, self._store, self._name, offset, size, self.etag, self.size)

    def __call__(self, ranges: Sequence[tuple[int, int]]) -> list[Any]:
        if len(ranges) == 1:
            return [self.get(*ranges[0])]
        return list(_fetch_pool().map(lambda r: self.get(*r), ranges))


class _FsspecFetcher:
    """The core's fetcher over an fsspec filesystem: cat_ranges, one buffer per range."""

    def __init__(self, fs: Any, path: str):
        self._fs, self._path = fs, path

    def __call__(self, ranges: Sequence[tuple[int, int]]) -> list[Any]:
        try:
            return list(self._fs.cat_ranges([self._path] * len(ranges), [o for o, _ in ranges],
                                            [o + n for o, n in ranges]))
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"cannot read: {exc}") from exc
        except Exception as exc:
            raise OSError(f"cannot read: {type(exc).__name__}: {exc}") from exc


class RemoteFile:
    """An object opened for reads by byte ranges: the first request reads HEAD_BYTES from its
    start and records its size, ETag and version; ``input`` (a _core.RemoteInput) fetches what
    the core's reads need, each request pinned to that ETag. With ``etag`` (an image unpickled
    elsewhere), the object must still be that version."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None, *,
                 etag: str | None = None, filesystem: Any = None):
        self.url = url
        self.storage_options = dict(storage_options) if storage_options else None
        self.filesystem = filesystem
        self._index_args: tuple[str, str] | None = None
        self._index_lock = threading.Lock()
        # The .img object of a .hdr object (set by whoever opens the pair).
        self.partner: RemoteFile | None = None
        if filesystem is not None:
            self._open_fsspec(filesystem, etag)
            return
        store, name = store_for(url, storage_options)
        obstore = client()
        options: dict[str, Any] = {"range": (0, HEAD_BYTES)}
        if etag:
            options["if_match"] = etag
        # None: a server that ignores Range (obstore refuses its 200 answer to a ranged GET)
        result = unchained(lambda: obstore.get(store, name, options=options),
                           lambda exc: None if type(exc).__name__ == "NotSupportedError"
                           else store_error(url, exc, etag))
        if result is not None:
            meta, got = result.meta, tuple(result.range)
        else:  # the whole object in one GET, read from memory
            whole = get_whole(url, store, name, etag=etag)
            meta = {"size": whole.size, "e_tag": whole.etag, "version": whole.version}
            got, head = None, whole.data
        self.size = int(meta["size"])
        self.etag = meta.get("e_tag")
        self.version = meta.get("version")
        if etag and self.etag and self.etag != etag:
            raise VoxpipeIOError(_changed(url, etag), path=url)
        if got is not None:
            expected = min(HEAD_BYTES, self.size)
            if got != (0, expected):
                raise VoxpipeIOError(f"{url}: expected bytes 0-{expected - 1}, but the response "
                                     f"holds bytes {got[0]}-{got[1] - 1}: refused", path=url,
                                     field="Content-Range")
            head = _read_body(result, url, 0, expected, etag)
        self.head = head
        fetcher = _RangeFetcher(url, store, name, self.etag, self.size)
        self.input = _core.RemoteInput(url, self.size, fetcher, initial=head,
                                       version=self.etag or "")

    def _open_fsspec(self, fs: Any, etag: str | None) -> None:
        """Open through a user's fsspec filesystem: its info() (size, ETag), then the first
        bytes; ranges through its cat_ranges (concurrent where the filesystem is async). fsspec
        has no conditional reads: the version is checked when opened (an unpickled image whose
        object changed fails), not on every request."""
        url = self.url
        try:
            info = fs.info(url)
            self.size = int(info["size"])
            self.etag = info.get("ETag") or info.get("etag") or info.get("e_tag")
            if etag and self.etag != etag:
                raise VoxpipeIOError(_changed(url, etag), path=url)
            self.version = info.get("VersionId")
            head = fs.cat_file(url, start=0, end=min(HEAD_BYTES, self.size))
        except VoxpipeError:
            raise
        except FileNotFoundError as exc:
            raise VoxpipeFileNotFoundError(f"{url}: cannot read: {exc}", path=url) from exc
        except Exception as exc:
            raise VoxpipeIOError(f"{url}: cannot read: {type(exc).__name__}: {exc}",
                                 path=url) from exc
        self.head = head
        self.input = _core.RemoteInput(url, self.size, _FsspecFetcher(fs, url), initial=head,
                                       version=self.etag or "")

    @property
    def data_file(self) -> RemoteFile:
        """The object the data are read from: the partner of a pair's header, else this."""
        return self.partner or self

    # -- seek indexes -----------------------------------------------------------------------
    def index_args(self) -> tuple[Any, ...]:
        """The Reader's index choice for a gzip object opened with index=None: ("path", a GZIDX
        file) from the local cache entry of this URL and ETag; else, from the sidecar object
        next to it (URL + ".gzidx"), ("path", its URL, a _core.RemoteInput of it) when its
        trailer is a table of contents (version 2: the core reads it, then only the windows a
        read starts from, each checked by its CRC32), or ("path", the cache entry) once a
        sidecar without one (voxpipe's version 1, indexed_gzip's, rapidgzip's) or a small one
        has been fetched whole into it; ("none", "") without one. The core checks the index
        against the object's size and last 64 KiB."""
        with self._index_lock:
            if self._index_args is None:
                self._index_args = self._find_index()
            return self._index_args

    def forget_index(self) -> None:
        """Drop the index index_args chose (the core found it stale): reads go without one."""
        with self._index_lock:
            if self._index_args and len(self._index_args) == 2 \
                    and self._index_args[0] == "path":
                try:
                    os.unlink(self._index_args[1])
                except OSError:
                    pass
            self._index_args = ("none", "")

    def cache_path(self) -> str:
        return index_cache_path(self.url, self.etag)

    def _find_index(self) -> tuple[Any, ...]:
        if not self.etag:
            return ("none", "")  # no version to key a cache entry by
        path = self.cache_path()
        if os.path.isfile(path):
            return ("path", path)
        if has_query(self.url) and self.filesystem is None:
            return ("none", "")  # a presigned URL authorises its object only, not a sidecar
        try:
            if self.filesystem is not None:  # the user's filesystem reaches the sidecar too
                data = self.filesystem.cat_file(self.url + ".gzidx")
            else:
                found = _open_sidecar(self.url + ".gzidx", self.storage_options)
                if not isinstance(found, RemoteSidecar):
                    data = found
                else:
                    return ("path", found.url, found.input)
        except (OSError, VoxpipeError):
            return ("none", "")  # missing or unreadable: read without it, as locally
        _write_atomic(path, data)
        return ("path", path)


# The end of a sidecar fetched first: a version-2 trailer (its table of contents: key, points,
# each window's CRC32; src/gz/index_file.cpp) of up to ~2,900 points, 18 bytes a point (a
# 300-volume series: 7 KB), in one request; the core reads the same bytes first.
INDEX_TAIL = 64 << 10
_TOC_MAGIC = b"VPKEY\x02"
_MAX_TOC = 64 << 20  # the core's bound on a trailer


class RemoteSidecar(NamedTuple):
    """A sidecar read by ranges: its URL and the core's input over it (pinned to its ETag)."""
    url: str
    input: Any


class _TailFetcher(_RangeFetcher):
    """A sidecar's fetcher that serves ranges within the end already fetched (``tail``, from
    byte ``start``) from memory: the core reads its table of contents without a request."""

    def __init__(self, url: str, store: Any, name: str, etag: str | None, size: int,
                 start: int, tail: Any):
        super().__init__(url, store, name, etag, size)
        self._start, self._tail = start, memoryview(tail).cast("B")

    def get(self, offset: int, size: int) -> Any:
        if offset >= self._start and offset + size <= self.size:
            return self._tail[offset - self._start:offset - self._start + size]
        return super().get(offset, size)


def _open_sidecar(url: str, storage_options: Mapping[str, Any] | None) -> Any:
    """The sidecar object at ``url``: a RemoteSidecar when its trailer is a table of contents
    (one ranged GET of its end, INDEX_TAIL bytes, which tells its size and ETag; a larger
    trailer costs one more), else its bytes (one more GET, pinned to that ETag, unless the end
    fetched is the whole object). VoxpipeFileNotFoundError when there is none."""
    store, name = store_for(url, storage_options)
    obstore = client()
    result = unchained(lambda: obstore.get(store, name,
                                           options={"range": {"suffix": INDEX_TAIL}}),
                       lambda exc: store_error(url, exc, None))
    meta = result.meta
    size, etag = int(meta["size"]), meta.get("e_tag")
    start, end = tuple(result.range)
    if (start, end) != (max(0, size - INDEX_TAIL), size):
        raise VoxpipeIOError(f"{url}: expected the last {min(size, INDEX_TAIL)} bytes, but the "
                             f"response holds bytes {start}-{end - 1}: refused", path=url,
                             field="Content-Range")
    tail = _read_body(result, url, start, end - start, etag)
    if start == 0:
        return tail  # the whole sidecar
    view = memoryview(tail).cast("B")
    length = int.from_bytes(view[-8:-4], "little")
    if not etag or length < len(_TOC_MAGIC) or length > min(size, _MAX_TOC):
        return get_whole(url, store, name, etag=etag, size=size).data
    fetcher = _TailFetcher(url, store, name, etag, size, start, tail)
    head = view[len(view) - length:] if length <= len(view) else \
        memoryview(fetcher.get(size - length, len(_TOC_MAGIC))).cast("B")
    if bytes(head[:len(_TOC_MAGIC)]) != _TOC_MAGIC:
        return get_whole(url, store, name, etag=etag, size=size).data
    # Windows are fetched one by one, 32 KiB each (not the 64 KiB a data read asks at least).
    return RemoteSidecar(url, _core.RemoteInput(url, size, fetcher, min_request=32 << 10,
                                                version=etag))


def _reason(exc: Exception) -> str:
    """obstore's message without the debug dump it appends (the request chain, repeated)."""
    return str(exc).split("\n\nDebug source:", 1)[0].strip()


def unchained(call: Callable[[], _T],
              failure: Callable[[Exception], BaseException | None]) -> _T:
    """``call()``; an exception it raises is replaced by ``failure(exc)``, raised without
    ``exc`` chained to it (``failure`` returning None: ``call`` gave None).

    Not ``raise failure(exc) from exc``, nor from inside the ``except``: obstore's text names
    the request's URL with its credentials (a presigned URL's signature), and a chained or
    context exception travels with the error into tracebacks and into pickles (tblib's, which
    dask.distributed installs, keep ``__cause__`` and ``__context__``). And the name that holds
    the error is cleared as it leaves: a frame of its own traceback holding it would make a
    cycle that keeps the frames' readers and images alive until the garbage collector runs."""
    try:
        return call()
    except Exception as exc:
        error = failure(exc)
    if error is None:
        return None  # type: ignore[return-value]
    try:
        raise error
    finally:
        error = None


def store_error(url: str, exc: Exception, etag: str | None, what: str = "read",
                since: str = "opened") -> VoxpipeError:
    """The voxpipe error for an obstore failure to ``what`` (read, list the objects under it)
    ``url``, naming it and the server's answer: a 404 is VoxpipeFileNotFoundError; a failed
    If-Match (with ``etag``) says the object changed since it was ``since``; anything else is
    VoxpipeIOError.

    Raise it with unchained(), never ``from exc``. The message carries the server's answer,
    redacted."""
    if isinstance(exc, VoxpipeError):
        return exc
    # A listing of a missing bucket is a generic error carrying the server's 404.
    if isinstance(exc, FileNotFoundError) or "404 Not Found" in str(exc):
        return VoxpipeFileNotFoundError(f"{url}: cannot {what}: {_reason(exc)}", path=url)
    # A 412 is obstore's PreconditionError, or, met while it resumes a cut-off body, inside a
    # GenericError.
    if etag and (type(exc).__name__ == "PreconditionError"
                 or "412 Precondition Failed" in str(exc)):
        return VoxpipeIOError(f"{_changed(url, etag, since)}: {_reason(exc)}", path=url)
    return VoxpipeIOError(f"{url}: cannot {what}: {type(exc).__name__}: {_reason(exc)}",
                          path=url)


def cache_dir() -> str:
    """The user cache directory of seek indexes, as for files (src/gz/seek_index.hpp):
    $VOXPIPE_CACHE_DIR, else $XDG_CACHE_HOME/voxpipe, else ~/.cache/voxpipe."""
    if os.environ.get("VOXPIPE_CACHE_DIR"):
        return os.environ["VOXPIPE_CACHE_DIR"]
    if os.environ.get("XDG_CACHE_HOME"):
        return os.path.join(os.environ["XDG_CACHE_HOME"], "voxpipe")
    return os.path.join(os.path.expanduser("~"), ".cache", "voxpipe")


def index_cache_path(url: str, etag: str | None) -> str:
    """The cache entry of the seek index of one version of an object: its name, then a hash of
    its URL and ETag (a new version is a new entry; the old one is never read for it)."""
    digest = hashlib.sha256(f"{url}\0{etag}".encode()).hexdigest()[:16]
    name = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return os.path.join(cache_dir(), f"{name}-{digest}.gzidx")


def _write_atomic(path: str, data: Any) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    try:
        with open(tmp, "wb") as f:
            f.write(memoryview(data))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def put(url: str, data: Any, storage_options: Mapping[str, Any] | None = None) -> None:
    """Write ``data`` as the object at ``url`` (one PUT)."""
    obstore = client()
    store, name = store_for(url, storage_options)
    unchained(lambda: obstore.put(store, name, memoryview(data)),
              lambda exc: VoxpipeIOError(f"{url}: cannot write: {type(exc).__name__}: "
                                         f"{_reason(exc)}", path=url))
