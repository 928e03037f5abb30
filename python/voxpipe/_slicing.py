"""Slicer handling for ``dataobj[...]``: which slicers are accepted and what shape comes back
follow nibabel's fileslice.canonical_slicers; the selection itself becomes per-axis
(start, step, count) ranges that the C++ reader plans byte extents from.

Differences from nibabel (docs/nifti.md): negative integer indices below ``-len`` raise instead of
wrapping a second time, and non-integer floats are refused as NumPy refuses them.
"""

from __future__ import annotations

import operator

import numpy as np


def _is_fancy(sliceobj) -> bool:
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


def plan(sliceobj, shape):
    """Returns (ranges, out_shape).

    ranges: per on-disk axis (start, step, count);
    out_shape: the shape of the result after integer axes are dropped and None axes added.
    """
    if not isinstance(sliceobj, tuple):
        sliceobj = (sliceobj,)
    if _is_fancy(sliceobj):
        raise ValueError("Cannot handle fancy indexing")
    ndim = len(shape)
    ranges = []
    out_shape = []
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


def read_shape(ranges):
    return tuple(count for _, _, count in ranges)


def empty_for(shape, dtype):
    """An uninitialised F-ordered array: NumPy allocates it (huge pages for large arrays) and the
    reader's threads are the first to touch it."""
    return np.empty(shape, dtype=dtype, order="F")
