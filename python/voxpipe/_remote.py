"""Objects on S3, GCS, Azure and HTTP(S) servers, read through obstore (the Python binding of
Rust's object_store: request signing, credential chains, retries with backoff and timeouts are
its, not voxpipe's).

Two ways in: fetch() gets a whole object in one GET (what many-file loaders and DICOM series
read), and RemoteFile opens one for reads by byte ranges: its first request (64 KiB from the
start) tells the size and ETag and holds the header; the core (voxpipe/remote.hpp) then fetches
the ranges a read needs, coalesced and concurrently, through RemoteFile's fetcher. Every request
after the first carries If-Match with the ETag it saw, so an image never mixes bytes of two
versions of an object: a change fails the read. The bytes obstore returns reach the decoder
without a copy.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from . import _core
from ._optional import require
from .errors import InvalidArgumentError, VoxpipeError, VoxpipeFileNotFoundError, VoxpipeIOError

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


def _split(url: str) -> tuple[str, str]:
    """(the store's URL: the object's folder, the object's name within it)."""
    scheme, _, rest = url.partition("://")
    folder, sep, name = rest.rpartition("/")
    if not sep or not folder or not name:
        raise InvalidArgumentError(f"expected a URL of an object (SCHEME://BUCKET/KEY), but "
                                   f"received {url!r}", path=url)
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
    try:
        store = obstore_store.from_url(store_url, config=options or None,
                                       client_options=client or None, retry_config=retry)
    except Exception as exc:  # obstore's configuration errors: an unknown key, a bad value
        raise InvalidArgumentError(f"{url}: storage_options: {exc}", path=url) from exc
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
    obstore = client()
    store, name = store_for(url, storage_options)
    try:
        result = obstore.get(store, name, options={"if_match": etag} if etag else None)
        meta = result.meta
        data = result.bytes()
    except Exception as exc:  # obstore's errors: denied, unauthenticated, timeout, 5xx after retries
        raise store_error(url, exc, etag) from exc
    size = int(meta["size"])
    if len(data) != size:  # a body cut short that the client did not notice
        raise VoxpipeIOError(f"{url}: expected {size} bytes, but the response holds {len(data)}",
                             path=url)
    return RemoteObject(url, data, size, meta.get("e_tag"), meta.get("version"),
                        dict(storage_options) if storage_options else None)


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

    def __init__(self, url: str, store: Any, name: str, etag: str | None):
        self.url, self._store, self._name, self.etag = url, store, name, etag

    def get(self, offset: int, size: int) -> Any:
        obstore = client()
        options: dict[str, Any] = {"range": (offset, offset + size)}
        if self.etag:
            options["if_match"] = self.etag
        try:
            data = obstore.get(self._store, self._name, options=options).bytes()
        except Exception as exc:  # the core's fetcher takes the URL off the message it names
            raise store_error(self.url, exc, self.etag) from exc
        return data

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
        try:
            try:
                result = obstore.get(store, name, options=options)
            except Exception as exc:
                if type(exc).__name__ != "NotSupportedError":
                    raise
                # A server that ignores Range (obstore refuses its 200 answer to a ranged GET):
                # the whole object in one GET, read from memory.
                options.pop("range")
                result = obstore.get(store, name, options=options)
            meta = result.meta
            head = result.bytes()
        except Exception as exc:
            raise store_error(url, exc, etag) from exc
        self.size = int(meta["size"])
        self.etag = meta.get("e_tag")
        self.version = meta.get("version")
        if etag and self.etag and self.etag != etag:
            raise VoxpipeIOError(_changed(url, etag), path=url)
        expected = self.size if len(head) > HEAD_BYTES else min(HEAD_BYTES, self.size)
        if len(head) < expected:
            raise VoxpipeIOError(f"{url}: expected {expected} bytes from byte 0, but the response "
                                 f"held {len(head)}", path=url)
        self.head = head
        fetcher = _RangeFetcher(url, store, name, self.etag)
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
    def index_args(self) -> tuple[str, str]:
        """The Reader's index choice for a gzip object opened with index=None: ("path", a GZIDX
        file) from the local cache entry of this URL and ETag, else from the sidecar object next
        to it (URL + ".gzidx", fetched once into that cache entry); ("none", "") without one.
        The core checks the index against the object's size and last 64 KiB."""
        with self._index_lock:
            if self._index_args is None:
                self._index_args = self._find_index()
            return self._index_args

    def forget_index(self) -> None:
        """Drop the index index_args chose (the core found it stale): reads go without one."""
        with self._index_lock:
            if self._index_args and self._index_args[0] == "path":
                try:
                    os.unlink(self._index_args[1])
                except OSError:
                    pass
            self._index_args = ("none", "")

    def cache_path(self) -> str:
        return index_cache_path(self.url, self.etag)

    def _find_index(self) -> tuple[str, str]:
        if not self.etag:
            return ("none", "")  # no version to key a cache entry by
        path = self.cache_path()
        if os.path.isfile(path):
            return ("path", path)
        try:
            if self.filesystem is not None:  # the user's filesystem reaches the sidecar too
                data = self.filesystem.cat_file(self.url + ".gzidx")
            else:
                data = fetch(self.url + ".gzidx", self.storage_options).data
        except (OSError, VoxpipeError):
            return ("none", "")  # missing or unreadable: read without it, as locally
        _write_atomic(path, data)
        return ("path", path)


def open_image(url: str, storage_options: Mapping[str, Any] | None = None, etag: str | None = None,
               data_url: str | None = None, data_etag: str | None = None,
               filesystem: Any = None) -> tuple[Any, RemoteFile]:
    """(core image, header RemoteFile) of the object at `url` (through `filesystem`, an fsspec
    filesystem, when given); a .hdr URL's data are its .img object (`data_url`, by default the
    pair's partner name)."""
    header = RemoteFile(url, storage_options, etag=etag, filesystem=filesystem)
    if _core.is_pair_path(url.split("?", 1)[0]):
        if data_url is None:
            head, sep, query = url.partition("?")
            data_url = pair_partner_url(head) + sep + query
        header.partner = RemoteFile(data_url, storage_options, etag=data_etag,
                                    filesystem=filesystem)
        core = _core.open_remote(header.input, header.partner.input)
    else:
        core = _core.open_remote(header.input)
    return core, header


def pair_partner_url(url: str) -> str:
    """The .img URL of a .hdr URL and the reverse (the case of the extension kept)."""
    stem, dot, ext = url.rpartition(".")
    gz = ""
    if ext.lower() == "gz":
        stem, dot, ext = stem.rpartition(".")
        gz = url[-3:]
    other = {"hdr": "img", "img": "hdr"}[ext.lower()]
    return f"{stem}.{other.upper() if ext.isupper() else other}{gz}"


def _reason(exc: Exception) -> str:
    """obstore's message without the debug dump it appends (the request chain, repeated)."""
    return str(exc).split("\n\nDebug source:", 1)[0].strip()


def store_error(url: str, exc: Exception, etag: str | None, what: str = "read",
                since: str = "opened") -> VoxpipeError:
    """The voxpipe error for an obstore failure to ``what`` (read, list the objects under it)
    ``url``, naming it and the server's answer: a 404 is VoxpipeFileNotFoundError; a failed
    If-Match (with ``etag``) says the object changed since it was ``since``; anything else is
    VoxpipeIOError."""
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


def _open_for_core(url: str) -> Any:
    """The core's URL handler: the object opened with the environment's configuration; a Zarr
    store (local or not) as the .nii of its NIfTI-Zarr image."""
    from . import _zarr  # imports this module
    if _zarr.is_nifti_zarr(url):
        return _zarr._open_for_core(url)
    return RemoteFile(url).input


def _write_zarr_for_core(source: str, output: str, options: Sequence[tuple[str, str]]) -> None:
    from . import _zarr_write
    _zarr_write._write_for_core(source, output, options)


def _zarr_compression_for_core(location: str) -> str:
    from . import _zarr  # imports this module
    return _zarr._compression_for_core(location)


def _put_file_for_core(path: str, url: str) -> None:
    with open(path, "rb") as f:
        put(url, f.read())


def _fetch_all_for_core(url: str) -> list[tuple[str, Any]]:
    """The objects a URL names (an object, or those under a prefix), fetched whole."""
    from . import _remote_dicom  # imports this module
    return [(o.url, o.data) for o in _remote_dicom.fetch_all([url], None)]


# Calls that take paths (the core's open, build_index, the CLI's commands under
# `python -m voxpipe`) read URLs, and read and write Zarr stores, through these.
_core.set_url_handlers(_open_for_core, index_cache_path, _put_file_for_core, _fetch_all_for_core,
                       _write_zarr_for_core, _zarr_compression_for_core)


def put(url: str, data: Any, storage_options: Mapping[str, Any] | None = None) -> None:
    """Write ``data`` as the object at ``url`` (one PUT)."""
    obstore = client()
    store, name = store_for(url, storage_options)
    try:
        obstore.put(store, name, memoryview(data))
    except Exception as exc:
        raise VoxpipeIOError(f"{url}: cannot write: {type(exc).__name__}: {_reason(exc)}",
                             path=url) from exc
