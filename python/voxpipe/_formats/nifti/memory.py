"""The memory a NIfTI proxy reads through: a data file mapped as nibabel's array_from_file maps
it (unscaled, uncompressed data read whole with mmap enabled), an output array viewed as the
bytes the core's reader decodes into, and the lock a forked child takes before it gives its
proxies readers of their own."""

from __future__ import annotations

import os
import threading
from typing import Any, Literal, Union

import numpy as np
import numpy.typing as npt

from ..._foundation.native import core as _core
from ..._foundation.types import Array

# nibabel's mmap argument: True or "c" (copy-on-write), "r" (read-only), False (no map).
MmapMode = Union[bool, Literal["c", "r"]]


def as_bytes_view(arr: Array) -> npt.NDArray[np.uint8]:
    """A flat uint8 view of an F-contiguous array's memory (any dtype, structured included)."""
    flat = arr.reshape(-1, order="F")
    return flat.view(np.uint8)


def map_data(image: _core.NiftiImage, dtype: np.dtype[Any], shape: tuple[int, ...],
             mode: Literal["c", "r"]) -> np.memmap[Any, np.dtype[Any]] | None:
    """The whole data of the opened `image` as an np.memmap of its data file (F order, `mode`
    "c" copy-on-write or "r" read-only), or None where the file cannot be mapped. A short or
    missing file gives None here and a voxpipe error from the read that follows. The file
    mapped is the one opened (VoxpipeIOError otherwise, as for reads); what happens to it
    afterwards shows in the map, as in nibabel's (cut shorter, a touch of the part cut away is
    SIGBUS)."""
    try:
        # Non-blocking: opening a FIFO put in the file's place does not wait for a writer.
        f = open(image.data_path, "rb", opener=_open_nonblocking)
    except OSError:
        return None
    with f:
        # One fstat; a FIFO or another file is not the file opened.
        _core.check_data_file(image, f.fileno())
        try:
            return np.memmap(f, dtype=dtype, mode=mode, shape=shape, order="F",
                             offset=image.data_offset)
        except (AttributeError, TypeError, ValueError, OSError):
            return None


def _open_nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NONBLOCK)


# Per process: a child gets a fresh lock (the parent's could be held by a thread that is not
# copied).
_fork_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _fork_lock
    _fork_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def fork_lock() -> threading.Lock:
    """This process's lock for replacing readers inherited across fork."""
    return _fork_lock
