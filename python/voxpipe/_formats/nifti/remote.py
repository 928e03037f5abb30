"""NIfTI objects in object storage: the core image of a .nii/.nii.gz object, or of a .hdr/.img
pair of objects, read by byte ranges through a source's pinned RemoteFile."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..._foundation.native import core as _core
from ..._sources import remote as _remote


def open_image(url: str, storage_options: Mapping[str, Any] | None = None, etag: str | None = None,
               data_url: str | None = None, data_etag: str | None = None,
               filesystem: Any = None) -> tuple[Any, _remote.RemoteFile]:
    """(core image, header RemoteFile) of the object at `url` (through `filesystem`, an fsspec
    filesystem, when given); a .hdr URL's data are its .img object (`data_url`, by default the
    pair's partner name)."""
    header = _remote.RemoteFile(url, storage_options, etag=etag, filesystem=filesystem)
    if _core.is_pair_path(url.split("?", 1)[0]):
        if data_url is None:
            head, sep, query = url.partition("?")
            data_url = pair_partner_url(head) + sep + query
        header.partner = _remote.RemoteFile(data_url, storage_options, etag=data_etag,
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
