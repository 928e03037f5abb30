"""Recycled outputs: arrays over buffers of the core's pool (voxpipe/buffer_pool.hpp).

A stream of loads (iter_load, load_many, repeated load_batch, a Dataset's items) would otherwise
allocate a new output for every file and fault each of its pages in, which on a VM costs about
as much CPU as inflating the data. An array made here is an ordinary, independent NumPy array
over a buffer of the pool; when the last array over it is freed the buffer goes back to the pool
(the pool keeps at most its limit of released buffers, 512 MiB unless VOXPIPE_POOL_BYTES or
``set_pool_limit`` says otherwise) and the next output of a fitting size reuses it, already
faulted in. Nothing is overwritten while any array still references it.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .native import core as _core
from .types import Array

# Below this an output comes from NumPy as usual: the allocator's own free lists serve small
# arrays, and the pool is for the volumes whose fresh pages cost.
POOL_FROM = 1 << 20


def empty(shape: tuple[int, ...], dtype: npt.DTypeLike, order: Literal["C", "F"] = "F",
          subtype: type[np.ndarray[Any, Any]] = np.ndarray) -> Array:
    """An uninitialised array of `subtype`, from the pool when it is at least POOL_FROM bytes."""
    dt = np.dtype(dtype)
    nbytes = dt.itemsize
    for n in shape:
        nbytes *= int(n)
    if nbytes < POOL_FROM:
        if subtype is np.ndarray:
            return np.empty(shape, dtype=dt, order=order)
        return np.ndarray.__new__(subtype, shape, dtype=dt, order=order)
    return np.ndarray.__new__(subtype, shape, dtype=dt, buffer=_core.pool_buffer(nbytes),
                              order=order)


def pool_stats() -> dict[str, int]:
    """The recycled-output pool: ``limit`` (most bytes of released buffers kept),
    ``pooled_bytes`` and ``pooled_buffers`` (kept now), ``reused`` and ``allocated`` (how many
    outputs came from a kept buffer and how many from a new mapping)."""
    return dict(_core.pool_stats())


def set_pool_limit(nbytes: int) -> int:
    """Keep at most `nbytes` of released output buffers for reuse (0: keep none); frees what no
    longer fits and returns the previous limit. The default is 512 MiB, or VOXPIPE_POOL_BYTES
    (bytes, with an optional K, M or G) when set."""
    if int(nbytes) < 0:
        raise ValueError(f"the pool limit must be >= 0, not {nbytes}")
    return int(_core.set_pool_limit(int(nbytes)))


def clear_pool() -> None:
    """Free every released buffer the pool keeps (the limit stays)."""
    _core.clear_pool()
