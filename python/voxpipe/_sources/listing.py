"""DICOM files on object stores (S3, GCS, Azure, HTTP(S)) for ``vp.dicom.scan`` and
``vp.load_dicom``: a prefix is listed as a folder is scanned (recursively, in key order), each
object is fetched whole, concurrently, pinned to the ETag its listing gave, and the bytes obstore
returns go to the same scan and assembly as local files (``_core.dicom_scan_buffers``), which
parses and decodes them in place, without a copy.

A URL that ends with "/" (or names a bucket only) names a prefix; any other names an object, or,
when there is no object by that name, the prefix below it (as a path names a file or a folder).
Zero-byte objects under a prefix are left out (they are the "folder" markers consoles write).
Listing a prefix needs a store that lists (S3, GCS, Azure; an HTTP server only with WebDAV):
on a plain HTTP server, name the objects. The stores come from ``_remote.store_for``, configured
by ``storage_options`` as ``vp.load(url, storage_options=)`` configures them; one store serves
every object under a listed prefix (and every object URL in one folder), so their requests share
its connections.

Memory: every object fetched is held until the scan has parsed it; after it, only the objects of
the series found stay, held by those series (their pixel data are decoded from them on
``get_data``) and released with them. At most ``FETCHES`` GETs are in flight.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any, NamedTuple, TypeVar

from . import remote as _remote
from .._foundation.errors import InvalidArgumentError, VoxpipeFileNotFoundError

# GETs (and listings) in flight at once: enough to hide a request's latency (tens of ms on an
# object store) behind the others' transfers, few enough to stay polite to the store. The
# many-file loaders fetch as many.
FETCHES = 8

_T = TypeVar("_T")
_R = TypeVar("_R")


class Listed(NamedTuple):
    """An object found under a prefix, not fetched yet: the version its listing saw."""
    url: str
    store: Any
    path: str  # its name in `store`
    etag: str | None
    size: int | None = None  # as listed: the GET's answer must be of this size


def is_remote(paths: object) -> bool:
    """Whether ``paths`` (a path, a URL, or a list of them) names objects on a store; a list that
    mixes URLs and local paths raises InvalidArgumentError (one scan reads one kind)."""
    if isinstance(paths, str):
        return _remote.is_url(paths)
    if isinstance(paths, (bytes, bytearray)) or not isinstance(paths, Iterable):
        return False
    urls = [_remote.is_url(p) for p in paths]
    if any(urls) and not all(urls):
        raise InvalidArgumentError("expected either URLs or local paths, but received a list "
                                   "that mixes them: scan each kind on its own")
    return bool(urls) and all(urls)


def _store_at(folder_url: str, storage_options: Mapping[str, Any] | None,
              stores: dict[str, Any]) -> Any:
    """The store whose root is ``folder_url`` (no trailing "/"), made once per folder."""
    store = stores.get(folder_url)
    if store is None:
        # store_for gives the store of a URL's folder: that of any name inside this one.
        store = stores[folder_url] = _remote.store_for(folder_url + "/.", storage_options)[0]
    return store


def _object_at(url: str, storage_options: Mapping[str, Any] | None,
               stores: dict[str, Any]) -> tuple[Any, str]:
    """(the store holding the object ``url``, its name there): its folder's store, or for a URL
    with a query (a presigned URL) a store of its own, the query sent as the query."""
    if _remote.has_query(url):
        return _remote.store_for(url, storage_options)
    folder, _, name = url.rpartition("/")
    return _store_at(folder, storage_options, stores), name


def _get(url: str, store: Any, path: str, etag: str | None,
         storage_options: Mapping[str, Any] | None, size: int | None = None
         ) -> _remote.RemoteObject:
    """The whole object ``path`` of ``store`` in one GET; with ``etag`` and ``size`` (as
    listed), only that version: an answer of another ETag or size is an error, never data."""
    return _remote.get_whole(url, store, path, etag=etag, size=size,
                             storage_options=storage_options, since="listed")


def _list(prefix_url: str, recursive: bool, storage_options: Mapping[str, Any] | None,
          stores: dict[str, Any]) -> list[Listed]:
    """The objects under ``prefix_url`` (its subfolders too when ``recursive``), in key order,
    as a folder's files are scanned. Zero-byte objects are left out: they are the "folder"
    markers consoles and tools write (listed without their trailing "/"), and no DICOM file is
    empty. VoxpipeFileNotFoundError naming the URL when nothing is listed."""
    obstore = _remote.client()
    folder = prefix_url.rstrip("/")
    store = _store_at(folder, storage_options, stores)
    def listing() -> list[Any]:
        if recursive:
            return [m for chunk in obstore.list(store, chunk_size=1000) for m in chunk]
        return list(obstore.list_with_delimiter(store)["objects"])

    metas = _remote.unchained(listing, lambda exc: _remote.store_error(
        prefix_url, exc, None, "list the objects under it"))
    found = sorted((m for m in metas if int(m["size"]) > 0), key=lambda m: m["path"])
    if not found:
        raise VoxpipeFileNotFoundError(f"{prefix_url}: no objects under this prefix",
                                       path=prefix_url)
    return [Listed(f"{folder}/{m['path']}", store, m["path"], m.get("e_tag"), int(m["size"]))
            for m in found]


def _parallel(fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    """fn(item) for each item, at most FETCHES at once, in order. The first error propagates,
    and what has not started is cancelled (as on Ctrl-C); what is in flight ends on its own,
    within its request's timeout."""
    if len(items) <= 1:
        return [fn(item) for item in items]
    pool = ThreadPoolExecutor(max_workers=min(FETCHES, len(items)),
                              thread_name_prefix="voxpipe-dicom-fetch")
    try:
        futures: list[Future[_R]] = [pool.submit(fn, item) for item in items]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for f in futures:  # the first error in the order given, for a stable message
            if f in done and f.exception() is not None:
                raise f.exception()  # type: ignore[misc]
        return [f.result() for f in futures]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def fetch_listed(listed: Sequence[Listed],
                 storage_options: Mapping[str, Any] | None) -> list[_remote.RemoteObject]:
    """The listed objects, fetched concurrently, each the version its listing saw: an object
    replaced since raises VoxpipeIOError, never other bytes."""
    return _parallel(lambda o: _get(o.url, o.store, o.path, o.etag, storage_options, o.size),
                     listed)


def _is_prefix(url: str) -> bool:
    """A URL that ends with "/", or names a bucket only (s3://bucket), names a prefix."""
    return url.endswith("/") or "/" not in url.partition("://")[2]


def fetch_all(sources: Sequence[str], storage_options: Mapping[str, Any] | None,
              recursive: bool = True) -> list[_remote.RemoteObject]:
    """The objects ``sources`` name (object URLs, prefixes), fetched: each prefix's objects in
    key order where the prefix stands, each object once however often it is named (the list
    holds it as many times)."""
    stores: dict[str, Any] = {}
    for url in sources:  # the stores, made here: each once, before the requests start
        if not url.partition("://")[2].strip("/"):
            raise InvalidArgumentError(f"expected a URL of an object or a prefix "
                                       f"(SCHEME://BUCKET/KEY), but received {url!r}", path=url)
        if _is_prefix(url):
            _store_at(url.rstrip("/"), storage_options, stores)
        else:
            _object_at(url, storage_options, stores)

    def resolve(url: str) -> _remote.RemoteObject | list[Listed]:
        if _is_prefix(url):
            return _list(url, recursive, storage_options, stores)
        store, name = _object_at(url, storage_options, stores)
        try:
            return _get(url, store, name, None, storage_options)
        except VoxpipeFileNotFoundError as missing:
            if _remote.has_query(url):  # a presigned URL names one object, never a prefix
                raise
            try:  # no object by that name: the prefix below it, as a path names a folder
                return _list(url + "/", recursive, storage_options, stores)
            except VoxpipeFileNotFoundError:
                raise VoxpipeFileNotFoundError(
                    f"{url}: no such object, and no objects under it as a prefix: "
                    f"{missing.__cause__}", path=url) from missing.__cause__

    unique = list(dict.fromkeys(sources))
    resolved = dict(zip(unique, _parallel(resolve, unique)))
    listed = {o.url: o for r in resolved.values() if isinstance(r, list) for o in r}
    fetched = {o.url: o for o in fetch_listed(list(listed.values()), storage_options)}
    out: list[_remote.RemoteObject] = []
    for url in sources:
        r = resolved[url]
        out.extend([fetched[o.url] for o in r] if isinstance(r, list) else [r])
    return out


def fetch_pinned(urls: Sequence[str], etags: Sequence[str | None],
                 storage_options: Mapping[str, Any] | None) -> list[_remote.RemoteObject]:
    """The objects at ``urls``, each the version of its ETag (a series reopened after pickling:
    the versions it was read from, or VoxpipeIOError)."""
    stores: dict[str, Any] = {}
    listed = []
    for url, etag in zip(urls, etags):
        store, name = _object_at(url, storage_options, stores)
        listed.append(Listed(url, store, name, etag))
    return fetch_listed(listed, storage_options)
