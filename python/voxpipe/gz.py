"""gzip tools: seek indexes for single-member .gz files.

A seek index records places where inflation can resume (deflate block starts, each with the
32 KiB of output before it). With one, any part of a ``.nii.gz`` is read by inflating only from
the nearest point. voxpipe writes and reads the GZIDX format of indexed_gzip and rapidgzip, so
each tool can use the others' indexes; voxpipe's own index files carry a trailer that ties them
to the exact file (size, mtime and a checksum of its tail), so a changed file is never read
through a stale index. Files written by voxpipe itself (sized gzip members) need no index.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TypedDict

from ._foundation.native import core as _core
from ._formats.nifti.remote import open_image
from ._sources import remote as _remote
from ._foundation.types import StrPath
from ._foundation.errors import VoxpipeIOError

__all__ = ["IndexInfo", "build_index"]


class IndexInfo(TypedDict):
    """What ``build_index`` wrote."""

    index_path: str
    compressed_size: int
    uncompressed_size: int
    points: int
    index_bytes: int


def build_index(path: StrPath, *, spacing: int = 4 * 2**20, output: StrPath | None = None,
                cache: bool = False, exact: bool = True, threads: int = 0,
                storage_options: Mapping[str, Any] | None = None) -> IndexInfo:
    """Inflate ``path`` once and write its seek index.

    ``spacing``: uncompressed bytes between seek points (0: none besides the volume points).
    NIfTI files (``.nii.gz``, ``.hdr.gz``/``.img.gz``) also get a point at the start of the data
    and at every volume of a 4D+ image, so that ``img.dataobj[..., t]`` inflates one volume.
    ``output``: where to write the index; by default ``FILE.gz.gzidx`` next to the file, or the
    user cache directory (``$VOXPIPE_CACHE_DIR``, ``$XDG_CACHE_HOME/voxpipe`` or
    ``~/.cache/voxpipe``) with ``cache=True``. ``vp.load`` finds either automatically.

    ``exact=True`` places every point exactly: chunks of the file are inflated on ``threads``
    threads (0: all cores), in one pass, and the points placed in stream order, as one
    front-to-back pass would place them (an object read over the network with fewer than 3
    threads takes the front-to-back pass itself).
    ``exact=False`` takes the index from a parallel inflate on ``threads`` threads (0: all
    cores), at almost no cost over the inflate itself: points fall where the parallel chunks
    start (about every 8 MiB of compressed data), not at volume starts.

    ``path`` may be the URL of a ``.nii.gz`` object (``s3://``, ``gs://``, ``az://``,
    ``http(s)://``; ``storage_options`` as for ``vp.load``): the object is read once, front to
    back, as ``vp.load(url).get_fdata()`` reads it (8 MiB ranged GETs, up to 8 in flight and at
    most 64 MiB ahead of the decoders, decoded as they arrive; about the time of that whole
    read), every request pinned to the ETag read first, so an object replaced during the build
    fails it (``VoxpipeIOError``, no index written). The index goes next to it as the object
    URL + ``.gzidx`` (one PUT; ``index_path`` is then that URL), or only to the local cache with
    ``cache=True`` (keyed by the URL and the object's ETag), or to the local file ``output``.
    ``vp.load(url)`` finds the first two.

    Returns a dict: index_path, compressed_size, uncompressed_size, points, index_bytes.

    >>> info = vp.gz.build_index("demo_bold.nii.gz", output="demo_bold.gzidx")
    >>> info["points"]                          # one per volume
    60
    >>> vp.load("demo_bold.nii.gz", index="demo_bold.gzidx").dataobj.random_access
    True
    """
    if spacing < 0:
        raise ValueError(f"spacing must be >= 0, but is {spacing}")
    if _remote.is_url(path):
        return _build_remote_index(str(path), spacing, output, cache, exact, threads,
                                   storage_options)
    if storage_options:
        raise TypeError("storage_options applies to URLs (s3://, gs://, az://, https://...) only")
    path = os.fspath(path)
    info: IndexInfo = _core.build_index(path, int(spacing),
                                        os.fspath(output) if output is not None else "",
                                        bool(cache), bool(exact), int(threads))
    return info


def _build_remote_index(url: str, spacing: int, output: StrPath | None, cache: bool, exact: bool,
                        threads: int, storage_options: Mapping[str, Any] | None) -> IndexInfo:
    """build_index for an object: built into the local cache entry of this version (or
    `output`), then, unless `cache` or `output`, written next to the object."""
    core, remote = open_image(url, storage_options)
    data = remote.data_file
    if not data.etag and output is None:
        raise VoxpipeIOError(f"{data.url}: the server gives no ETag, so an index cannot "
                             f"be tied to this version of the object: pass output=",
                             path=data.url)
    local = os.fspath(output) if output is not None else data.cache_path()
    if output is None:
        os.makedirs(os.path.dirname(local), exist_ok=True)
    info: IndexInfo = _core.build_remote_index(core, local, int(spacing), bool(exact), int(threads))
    if output is None and not cache:
        with open(local, "rb") as f:
            _remote.put(data.url + ".gzidx", f.read(), storage_options)
        info["index_path"] = data.url + ".gzidx"
    return info
