"""Slicer handling for ``dataobj[...]``: which slicers are accepted and what shape comes back
follow nibabel's fileslice.canonical_slicers; the selection itself becomes per-axis
(start, step, count) ranges that the C++ reader plans byte extents from.

Differences from nibabel (docs/nifti.md): negative integer indices below ``-len`` raise instead of
wrapping a second time, and non-integer floats are refused as NumPy refuses them.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._foundation import pool as _pool
from ..._foundation.types import Array

# A read's selection: per axis (start, step, count).
Range = tuple[int, int, int]


def _is_fancy(sliceobj: tuple[Any, ...]) -> bool:
    for slicer in sliceobj:
        if getattr(slicer, "ndim", 0) > 0:
            return True
        if isinstance(slicer, slice) or slicer is None or slicer is Ellipsis:
            continue
        try:
            operator.index(slicer)
        except TypeError:
            return True
    return False


def plan(sliceobj: Any, shape: Sequence[int]) -> tuple[list[Range], tuple[int, ...]]:
    """Returns (ranges, out_shape).

    ranges: per on-disk axis (start, step, count);
    out_shape: the shape of the result after integer axes are dropped and None axes added.
    """
    if not isinstance(sliceobj, tuple):
        sliceobj = (sliceobj,)
    if _is_fancy(sliceobj):
        raise ValueError("Cannot handle fancy indexing")
    ndim = len(shape)
    ranges: list[Range] = []
    out_shape: list[int] = []
    n_real = 0
    for i, slicer in enumerate(sliceobj):
        if slicer is None:
            out_shape.append(1)
            continue
        if slicer is Ellipsis:
            remaining = sliceobj[i + 1 :]
            if any(r is Ellipsis for r in remaining):
                raise ValueError("More than one Ellipsis in slicing expression")
            n_real_remaining = sum(1 for r in remaining if r is not None)
            n_ellided = ndim - n_real - n_real_remaining
            for _ in range(n_ellided):
                dim = shape[n_real]
                ranges.append((0, 1, dim))
                out_shape.append(dim)
                n_real += 1
            continue
        if n_real >= ndim:
            raise IndexError("too many indices for array")
        dim = shape[n_real]
        n_real += 1
        if isinstance(slicer, slice):
            start, stop, step = slicer.indices(dim)
            count = len(range(start, stop, step))
            ranges.append((start if count else 0, step, count))
            out_shape.append(count)
        else:
            index = operator.index(slicer)
            if index < 0:
                index += dim
                if index < 0:
                    raise ValueError(f"Integer index {index - dim} too small")
            elif index >= dim:
                raise ValueError(f"Integer index {index} too large")
            ranges.append((index, 1, 1))
    for k in range(n_real, ndim):
        ranges.append((0, 1, shape[k]))
        out_shape.append(shape[k])
    return ranges, tuple(out_shape)


def read_shape(ranges: Sequence[Range]) -> tuple[int, ...]:
    return tuple(count for _, _, count in ranges)


def empty_for(shape: tuple[int, ...], dtype: npt.DTypeLike,
              subtype: type[np.ndarray[Any, Any]] = np.ndarray) -> Array:
    """An uninitialised F-ordered array of `subtype` for a read's output: over a recycled buffer
    of the pool when large (pool.py; huge pages where the kernel offers them), otherwise from
    NumPy."""
    return _pool.empty(shape, dtype, "F", subtype)


# What nibabel's ArrayProxy does with a slicer decides what kind of array comes back, so the
# functions below follow nibabel's fileslice (5.4.2) step for step. They run after plan(), on
# slicers it accepted.

_SKIP_THRESH = 256  # fileslice.SKIP_THRESH: gaps up to this many bytes are read, not skipped
_FULL = slice(None)


def _real_slicers(sliceobj: Any, shape: Sequence[int]) -> list[slice | int]:
    """fileslice.canonical_slicers without its None entries: per on-disk axis, a non-negative
    int or the slice as given."""
    if not isinstance(sliceobj, tuple):
        sliceobj = (sliceobj,)
    out: list[slice | int] = []
    for i, slicer in enumerate(sliceobj):
        if slicer is None:
            continue
        if slicer is Ellipsis:
            n_rest = sum(1 for r in sliceobj[i + 1 :] if r is not None)
            out.extend([_FULL] * (len(shape) - len(out) - n_rest))
        elif isinstance(slicer, slice):
            out.append(slicer)
        else:
            index = operator.index(slicer)
            out.append(index + shape[len(out)] if index < 0 else index)
    out.extend([_FULL] * (len(shape) - len(out)))
    return out


def reads_whole(sliceobj: Any, shape: Sequence[int]) -> bool:
    """Whether nibabel reads `sliceobj` as the whole array (array_from_file, memory-mapped where
    it can) rather than through fileslice: no None, and every axis ``:`` or ``0|None:len:1|None``
    (canonical_slicers(sliceobj) == canonical_slicers(()))."""
    if any(s is None for s in (sliceobj if isinstance(sliceobj, tuple) else (sliceobj,))):
        return False
    for slicer, dim in zip(_real_slicers(sliceobj, shape), shape):
        if not isinstance(slicer, slice):
            return False
        if slicer != _FULL and not (slicer.stop == dim and slicer.start in (None, 0)
                                    and slicer.step in (None, 1)):
            return False
    return True


def _fill(slicer: slice, dim: int) -> slice:
    """fileslice.fill_slicer, with out-of-range bounds clamped as NumPy clamps them."""
    start, stop, step = slicer.indices(dim)
    return slice(start, None if step < 0 and stop < 0 else stop, step)


def _positive(slicer: slice) -> slice:
    """fileslice._positive_slice: the same elements with a positive step."""
    start, stop, step = slicer.start, slicer.stop, slicer.step
    if step > 0:
        return slicer
    if stop is None:
        stop = -1
    n = (stop - start) / step
    n = int(n) - 1 if int(n) == n else int(n)
    return slice(start + n * step, start + 1, -step)


def _heuristic(slicer: slice | int, dim: int, stride: int) -> str | None:
    """fileslice.threshold_heuristic."""
    if isinstance(slicer, int):
        return "full" if (dim - 1) * stride <= _SKIP_THRESH else None
    if abs(slicer.step) * stride > _SKIP_THRESH:
        return None
    p = _positive(slicer)
    return "full" if (dim - (p.stop - p.start)) * stride <= _SKIP_THRESH else "contiguous"


def _read_slicer(slicer: slice | int, dim: int, all_full: bool, is_slowest: bool,
                 stride: int) -> slice | int:
    """The part of fileslice.optimize_slicer that decides what is read."""
    if isinstance(slicer, slice):
        if slicer == _FULL:
            return _FULL
        slicer = _fill(slicer, dim)
        if slicer in (slice(0, dim, 1), slice(dim - 1, None, -1)):
            return _FULL
    if all_full:
        action = _heuristic(slicer, dim, stride)
        if is_slowest and action == "full":
            action = "contiguous" if isinstance(slicer, slice) else None
        if action == "full":
            return _FULL
        # (an int is never "contiguous": _heuristic gives it "full" or None)
        if action == "contiguous" and isinstance(slicer, slice) and slicer.step not in (-1, 1):
            p = _positive(slicer)
            return slice(p.start, p.stop, 1)
    if not isinstance(slicer, slice) or slicer.step > 0:
        return slicer
    return _positive(slicer)


def nibabel_segments(sliceobj: Any, shape: Sequence[int], itemsize: int) -> int:
    """How many byte segments nibabel's fileslice reads for `sliceobj` (optimize_read_slicers,
    then slicers2segments). Its result wraps bytes (read-only) for one segment and an anonymous
    mmap (writable) for more."""
    reads: list[slice | int] = []
    all_full, stride = True, itemsize
    for k, (slicer, dim) in enumerate(zip(_real_slicers(sliceobj, shape), shape)):
        read = _read_slicer(slicer, dim, all_full, k == len(shape) - 1, stride)
        reads.append(read)
        all_full = all_full and read == _FULL
        stride *= dim
    count, all_full = 1, True
    for read, dim in zip(reads, shape):
        if isinstance(read, int):
            all_full = False
            continue
        filled = _fill(read, dim)
        if not (all_full and filled.step == 1):
            count *= len(range(filled.start, -1 if filled.stop is None else filled.stop,
                               filled.step))
        all_full = all_full and filled == slice(0, dim, 1)
    return count
