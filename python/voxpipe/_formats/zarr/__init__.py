"""NIfTI-Zarr: a NIfTI header and its voxels in a Zarr v2/v3 store with OME-NGFF metadata
(``*.zarr``, local or in object storage), read chunk by chunk and written in bounded memory."""

from __future__ import annotations

import os
from typing import Any

from .. import registry
from ..nifti import check_open_args
from ..nifti.write import prepare
from .proxy import load as load_store
from .write import Codec, ZarrFormat, write as write_store

__all__ = ["FORMAT"]


def _load(location: Any, *, mmap: Any = True, keep_file_open: bool | None = None,
          threads: int = 0, index: Any = None, storage_options: Any = None, filesystem: Any = None,
          level: int = 0) -> Any:
    check_open_args(mmap, keep_file_open)
    if filesystem is not None or index not in (None, False):
        raise TypeError("a NIfTI-Zarr store takes neither filesystem= nor index=")
    return load_store(location, storage_options=storage_options, threads=threads, level=level)


def _save(img: Any, filename: Any, affine: Any = None, *, header: Any = None,
          level: int | None = None, version: int | None = None, threads: int = 0,
          chunks: Any = None, shards: Any = None, levels: int = 1, codec: Codec = "zstd",
          zarr_format: ZarrFormat = 3, overwrite: bool = True, storage_options: Any = None,
          **_: Any) -> None:
    hdr, values, _keeps_stored = prepare(img, affine, header, version, False)
    # Stored values read block by block from the proxy (bounded memory), or the array.
    write_store(os.fspath(filename), hdr, values, chunks=chunks, shards=shards, levels=levels,
                codec=codec, level=level, zarr_format=zarr_format, threads=threads,
                overwrite=overwrite, storage_options=storage_options)


FORMAT = registry.register(registry.Format("nifti-zarr", suffixes=(".zarr",), load=_load,
                                           save=_save))
