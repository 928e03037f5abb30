"""Objects on S3, GCS, Azure and HTTP(S) servers, read through obstore (the Python binding of
Rust's object_store: request signing, credential chains, retries with backoff and timeouts are
its, not voxpipe's).

This is the first step of remote reading: an object is fetched whole, in one GET, and decoded
from memory (the bytes obstore returns are handed to the decoder without a copy). One GET also
makes every read of the image consistent: all its bytes are of the one version of the object
whose ETag the image records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ._optional import require
from .errors import InvalidArgumentError, VoxpipeFileNotFoundError, VoxpipeIOError

# The schemes obstore's from_url maps to a store (file:// stays a local path for voxpipe).
_SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "abfss", "adl", "azure", "http", "https")

# Options that configure obstore's HTTP client rather than the store (ClientConfig's keys).
_CLIENT_OPTIONS = frozenset({
    "allow_http", "allow_invalid_certificates", "connect_timeout", "default_content_type",
    "default_headers", "pool_idle_timeout", "pool_max_idle_per_host", "proxy_url",
    "proxy_ca_certificate", "proxy_excludes", "root_certificate", "randomize_addresses",
    "read_timeout", "timeout", "user_agent",
})

# Deadlines and retries are object_store's defaults unless storage_options sets them: every
# request has a timeout (30 s, 5 s to connect), so nothing waits forever on a server that stopped
# answering, and throttling, 5xx answers and dropped connections are retried with backoff a
# bounded number of times (up to 10 retries within 3 minutes). Client options are passed only
# when given: passing any replaces those the environment sets (AWS_ALLOW_HTTP, ...).


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
    """The bytes an in-memory image was opened from: a RemoteObject's data, or `source`."""
    return source.data if isinstance(source, RemoteObject) else source


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


def _store(url: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    obstore_store = require("obstore.store", "s3", "reading from object storage", "obstore")
    store_url, name = _split(url)
    options = dict(storage_options or {})
    client = {k: options.pop(k) for k in list(options) if k in _CLIENT_OPTIONS}
    try:
        store = obstore_store.from_url(store_url, config=options or None,
                                       client_options=client or None)
    except Exception as exc:  # obstore's configuration errors: an unknown key, a bad value
        raise InvalidArgumentError(f"{url}: storage_options: {exc}", path=url) from exc
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
    obstore = require("obstore", "s3", "reading from object storage", "obstore")
    store, name = _store(url, storage_options)
    try:
        result = obstore.get(store, name, options={"if_match": etag} if etag else None)
        meta = result.meta
        data = result.bytes()
    except FileNotFoundError as exc:
        raise VoxpipeFileNotFoundError(f"{url}: cannot read: {exc}", path=url) from exc
    except Exception as exc:  # obstore's errors: denied, unauthenticated, timeout, 5xx after retries
        if etag and type(exc).__name__ == "PreconditionError":
            raise VoxpipeIOError(f"{url}: the object changed since it was opened (expected ETag "
                                 f"{etag}): {exc}", path=url) from exc
        raise VoxpipeIOError(f"{url}: cannot read: {type(exc).__name__}: {exc}", path=url) from exc
    size = int(meta["size"])
    if len(data) != size:  # a body cut short that the client did not notice
        raise VoxpipeIOError(f"{url}: expected {size} bytes, but the response holds {len(data)}",
                             path=url)
    return RemoteObject(url, data, size, meta.get("e_tag"), meta.get("version"),
                        dict(storage_options) if storage_options else None)
