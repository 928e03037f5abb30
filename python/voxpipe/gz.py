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
from typing import TypedDict

from . import _core
from ._types import StrPath

__all__ = ["IndexInfo", "build_index"]


class IndexInfo(TypedDict):
    """What ``build_index`` wrote."""

    index_path: str
    compressed_size: int
    uncompressed_size: int
    points: int
    index_bytes: int


def build_index(path: StrPath, *, spacing: int = 4 * 2**20, output: StrPath | None = None,
                cache: bool = False, exact: bool = True, threads: int = 0) -> IndexInfo:
    """Inflate ``path`` once and write its seek index.

    ``spacing``: uncompressed bytes between seek points (0: none besides the volume points).
    NIfTI files (``.nii.gz``, ``.hdr.gz``/``.img.gz``) also get a point at the start of the data
    and at every volume of a 4D+ image, so that ``img.dataobj[..., t]`` inflates one volume.
    ``output``: where to write the index; by default ``FILE.gz.gzidx`` next to the file, or the
    user cache directory (``$VOXPIPE_CACHE_DIR``, ``$XDG_CACHE_HOME/voxpipe`` or
    ``~/.cache/voxpipe``) with ``cache=True``. ``vp.load`` finds either automatically.

    ``exact=True`` inflates the file once on one thread and places every point exactly.
    ``exact=False`` takes the index from a parallel inflate on ``threads`` threads (0: all
    cores), at almost no cost over the inflate itself: points fall where the parallel chunks
    start (about every 8 MiB of compressed data), not at volume starts.

    Returns a dict: index_path, compressed_size, uncompressed_size, points, index_bytes.

    >>> info = vp.gz.build_index("demo_bold.nii.gz", output="demo_bold.gzidx")
    >>> info["points"]                          # one per volume
    60
    >>> vp.load("demo_bold.nii.gz", index="demo_bold.gzidx").dataobj.random_access
    True
    """
    path = os.fspath(path)
    if spacing < 0:
        raise ValueError(f"spacing must be >= 0, but is {spacing}")
    info: IndexInfo = _core.build_index(path, int(spacing),
                                        os.fspath(output) if output is not None else "",
                                        bool(cache), bool(exact), int(threads))
    return info
