"""Spline interpolation with scipy.ndimage's values and signatures, on every core.

``vp.map_coordinates`` and ``vp.affine_transform`` take the arguments of
``scipy.ndimage.map_coordinates`` and ``scipy.ndimage.affine_transform`` (plus ``threads``) and
return the same values: B-spline orders 0 to 5, the prefilter, every boundary mode, integer
outputs rounded and clipped as scipy does, complex inputs (real and imaginary parts interpolated
apart, as scipy does), and scipy's exception types for the arguments scipy refuses. The work
runs in C++ with the GIL released, over the input's own memory (any layout, no copy), in
parallel over the output; ``affine_transform`` makes its coordinates row by row and never holds
them all. See docs/resample.md.
"""

from __future__ import annotations

import operator
import sys
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from .native import core as _core
from . import pool as _pool
from .types import Array
from .errors import InvalidArgumentError, ResampleArgumentError, ResampleTypeError

__all__ = ["affine_transform", "map_coordinates"]

# scipy.ndimage's boundary modes (_ni_support._extend_mode_to_code); any other is its
# RuntimeError.
_MODES = ("nearest", "wrap", "reflect", "grid-mirror", "mirror", "constant", "grid-wrap",
          "grid-constant")


def _order(order: int) -> int:
    """The spline order, checked first as scipy checks it (RuntimeError there)."""
    order = operator.index(order)
    if order < 0 or order > 5:
        raise ResampleArgumentError(
            f"order: spline order not supported: expected 0 to 5, but received {order}",
            field="order")
    return order


def _mode(mode: str) -> str:
    if not isinstance(mode, str) or mode not in _MODES:
        raise ResampleArgumentError(
            f"mode: boundary mode not supported: expected one of {', '.join(_MODES)}, but "
            f"received {mode!r}", field="mode")
    return mode


def _threads(threads: int | None) -> int:
    if threads is None:
        return 0
    n = operator.index(threads)
    if n < 0:
        raise InvalidArgumentError(f"threads: expected None or a count >= 0, but received {n}",
                                   field="threads")
    return n


def _real_array(a: npt.ArrayLike, name: str) -> Array:
    """`a` as an array the core reads in place: integer, float32 or float64, native byte order."""
    a = np.asarray(a)
    if a.dtype == np.bool_:
        return a.view(np.uint8)
    if a.dtype.kind not in "iuf" or (a.dtype.kind == "f" and a.dtype.itemsize not in (4, 8)):
        raise InvalidArgumentError(
            f"{name}: expected an integer, float32 or float64 array, but received {a.dtype}",
            field=name)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return a


def _pad_value(input: npt.ArrayLike, mode: str, cval: float, order: int,
               prefilter: bool) -> float | None:
    """grid-constant's prefilter padding: scipy pads with np.pad on the input's dtype, so cval
    is cast to it there (7.5 becomes 7 in an integer input; NumPy's own errors included)."""
    if mode != "grid-constant" or not prefilter or operator.index(order) <= 1:
        return None
    dtype = np.asarray(input).dtype
    return float(np.pad(np.zeros(1, dtype), 1, mode="constant", constant_values=cval)[0])


def _allocate(shape: tuple[int, ...], dtype: npt.DTypeLike) -> Array:
    dtype = np.dtype(dtype)
    if not (dtype.kind in "iub" or (dtype.kind == "f" and dtype.itemsize in (4, 8))
            or (dtype.kind == "c" and dtype.itemsize in (8, 16))):
        # scipy's "data type not supported" (float16, long double) is a RuntimeError; a complex
        # dtype comes here only for a complex input.
        raise ResampleArgumentError(
            f"output: expected an integer, float32 or float64 dtype (complex64 or complex128 "
            f"for a complex input), but received {dtype}", field="output")
    nbytes = dtype.itemsize
    for n in shape:
        if n < 0:
            raise InvalidArgumentError(
                f"output_shape: expected non-negative dimensions, but received {shape}",
                field="output_shape")
        nbytes *= n
    if nbytes > sys.maxsize:
        raise InvalidArgumentError(
            f"output_shape: {shape} of {dtype} needs {nbytes} bytes, more than any array can hold",
            field="output_shape")
    # Empty, not zeros: every element is written. Large outputs recycle released buffers
    # (_foundation/pool.py: fresh memory is expensive).
    return _pool.empty(shape, dtype, "C")


def _output(output: Array | npt.DTypeLike | None, input: Array,
            shape: tuple[int, ...]) -> tuple[Array, Array]:
    """(array returned to the caller, array the core writes): scipy's _get_output rules for a
    real input."""
    if output is None:
        out = _allocate(shape, input.dtype)
    elif isinstance(output, np.ndarray):
        _output_shape(output, shape)
        out = output
    else:
        if isinstance(output, str) and not issubclass(np.dtype(output).type, np.number):
            raise ResampleArgumentError(
                f"output: expected a numeric dtype, but received {output!r}", field="output")
        out = _allocate(shape, output)
    if out.dtype.kind == "c":
        raise ResampleArgumentError(
            f"output: a complex output needs a complex input, but received {out.dtype} for a "
            f"{input.dtype} input", field="output")
    target = out
    if out.dtype == np.bool_:
        raise InvalidArgumentError("output: bool outputs are not supported", field="output")
    if not out.dtype.isnative:
        target = np.empty(out.shape, dtype=out.dtype.newbyteorder("="))
    return out, target


def _output_shape(output: Array, shape: tuple[int, ...]) -> None:
    if output.shape != tuple(shape):
        raise ResampleArgumentError(
            f"output: expected shape {tuple(shape)}, but received {output.shape}",
            field="output")


def _complex_output(output: Array | npt.DTypeLike | None, input: Array,
                    shape: tuple[int, ...]) -> Array:
    """The complex array a complex input's result is written to: scipy's _get_output rules with
    complex_output=True. A dtype given as a type or np.dtype that is not complex is promoted
    (with scipy's warning); given as a string, or as an array, it must be complex."""
    if output is None:
        return _allocate(shape, np.promote_types(input.dtype, np.complex64))
    if isinstance(output, np.ndarray):
        _output_shape(output, shape)
        if output.dtype.kind != "c":
            raise ResampleArgumentError(
                f"output: a complex input needs a complex output array, but received "
                f"{output.dtype}", field="output")
        return output
    dtype = np.dtype(output)
    if dtype.kind != "c":
        if isinstance(output, str):
            raise ResampleArgumentError(
                f"output: a complex input needs a complex output dtype, but received "
                f"{output!r}", field="output")
        # stacklevel 3: the caller of map_coordinates / affine_transform, as scipy's.
        warnings.warn("promoting specified output dtype to complex", UserWarning, stacklevel=3)
        dtype = np.promote_types(dtype, np.complex64)
    return _allocate(shape, dtype)


def _finish(out: Array, target: Array) -> Array:
    if target is not out:
        out[...] = target
    return out


_FAST_DOC = """``fast``: False (the default) gives scipy's values bit for bit. True lets orders 3 to 5 sum
    the spline taps separably with fused multiply-adds (on CPUs with AVX2 and FMA), about 1.4x
    faster for cubic: values then differ from scipy's by a few ulps (of the order of 1e-15 of
    the data range), and an integer output can differ by one where a value lies that close to
    a half."""


def map_coordinates(input: npt.ArrayLike, coordinates: npt.ArrayLike,
                    output: Array | npt.DTypeLike | None = None, order: int = 3, mode: str = "constant",
                    cval: float = 0.0, prefilter: bool = True, *, threads: int | None = None,
                    fast: bool = False) -> Array:
    """Map the input array to new coordinates by spline interpolation (scipy's semantics).

    ``coordinates[k]`` are array indices along axis k; the result has shape
    ``coordinates.shape[1:]``. ``output`` is None (the input's dtype), a dtype, or an array to
    fill. A complex input has its real and imaginary parts interpolated apart, as scipy does,
    into a complex output. ``order`` 0 to 5, ``mode`` one of constant, grid-constant, nearest,
    reflect, grid-mirror, mirror, wrap, grid-wrap. ``threads``: None for all cores.

    {fast}

    >>> import scipy.ndimage as ndi
    >>> vol = np.random.default_rng(0).random((20, 20, 20), dtype=np.float32)
    >>> coords = np.random.default_rng(1).uniform(-1, 20, (3, 1000))
    >>> np.array_equal(vp.map_coordinates(vol, coords, order=3),
    ...                ndi.map_coordinates(vol, coords, order=3))
    True
    """
    # scipy's checks, in scipy's order and with its exception types.
    order = _order(order)
    input = np.asarray(input)
    coordinates = np.asarray(coordinates)
    if coordinates.dtype.kind == "c":
        raise ResampleTypeError("coordinates: complex coordinates are not supported",
                                field="coordinates")
    if input.ndim < 1 or coordinates.ndim < 2:
        raise ResampleArgumentError(
            f"coordinates: expected an input of at least 1 dimension and coordinates of at "
            f"least 2, but received {input.ndim} and {coordinates.ndim}", field="coordinates")
    if coordinates.shape[0] != input.ndim:
        raise ResampleArgumentError(
            f"coordinates: expected {input.ndim} rows (one per input axis), but received "
            f"{coordinates.shape[0]}", field="coordinates")
    if input.dtype.kind == "c":
        # scipy: the real and imaginary parts apart, into the views of one complex output.
        out = _complex_output(output, input, coordinates.shape[1:])
        for part, out_part, value in ((input.real, out.real, np.real(cval)),
                                      (input.imag, out.imag, np.imag(cval))):
            map_coordinates(part, coordinates, out_part, order, mode, value, prefilter,
                            threads=threads, fast=fast)
        return out
    pad = _pad_value(input, mode, cval, order, prefilter)
    input = _real_array(input, "input")
    if coordinates.dtype not in (np.float32, np.float64) or not coordinates.dtype.isnative:
        coordinates = coordinates.astype(np.float64)
    out, target = _output(output, input, coordinates.shape[1:])
    _core.resample_map_coordinates(input, coordinates, target, order, _mode(mode),
                                   float(cval), bool(prefilter), _threads(threads), pad,
                                   bool(fast))
    return _finish(out, target)


def _offsets(offset: Any, rank: int) -> list[float]:
    if isinstance(offset, str):
        raise InvalidArgumentError("offset: expected a number or a sequence", field="offset")
    if np.iterable(offset):  # scipy's _normalize_sequence
        values = list(offset)
        if len(values) != rank:
            raise ResampleArgumentError(
                f"offset: expected {rank} entries (the input's rank), but received "
                f"{len(values)}", field="offset")
        array = np.asarray(values, dtype=np.float64)
        if array.ndim != 1:
            raise ResampleArgumentError(
                f"offset: expected one number per axis, but received shape {array.shape}",
                field="offset")
        floats: list[float] = array.tolist()
        return floats
    return [float(offset)] * rank


def affine_transform(input: npt.ArrayLike, matrix: npt.ArrayLike,
                     offset: float | npt.ArrayLike = 0.0,
                     output_shape: Iterable[int] | None = None,
                     output: Array | npt.DTypeLike | None = None, order: int = 3,
                     mode: str = "constant", cval: float = 0.0, prefilter: bool = True, *,
                     threads: int | None = None, fast: bool = False) -> Array:
    """Apply an affine transformation (scipy's semantics): output[o] = input[matrix @ o + offset].

    ``matrix``: (ndim, output ndim), a homogeneous (ndim + 1, ndim + 1) or (ndim, ndim + 1)
    matrix whose last column is the offset, or a 1-D diagonal. Coordinates are generated per
    output row on the fly, never held for the whole output.

    {fast}
    """
    # scipy's checks, in scipy's order and with its exception types.
    order = _order(order)
    input = np.asarray(input)
    if output_shape is None:
        output_shape = output.shape if isinstance(output, np.ndarray) else input.shape
    output_shape = tuple(operator.index(n) for n in output_shape)
    if input.ndim < 1 or len(output_shape) < 1:
        raise ResampleArgumentError("output_shape: input and output rank must be > 0",
                                    field="output_shape")
    if input.dtype.kind == "c":
        # scipy: the real and imaginary parts apart, into the views of one complex output.
        out = _complex_output(output, input, output_shape)
        for part, out_part, value in ((input.real, out.real, np.real(cval)),
                                      (input.imag, out.imag, np.imag(cval))):
            affine_transform(part, matrix, offset, output_shape, out_part, order, mode, value,
                             prefilter, threads=threads, fast=fast)
        return out
    pad = _pad_value(input, mode, cval, order, prefilter)
    input = _real_array(input, "input")
    out, target = _output(output, input, output_shape)
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.ndim not in (1, 2) or matrix.shape[0] < 1:
        raise ResampleArgumentError(
            f"matrix: expected a 1-D or 2-D matrix, but received shape {matrix.shape}",
            field="matrix")
    nd = input.ndim
    if matrix.ndim == 2 and matrix.shape[1] == nd + 1 and matrix.shape[0] in (nd, nd + 1):
        if matrix.shape[0] == nd + 1:
            expected = [0] * nd + [1]
            if not np.all(matrix[nd] == expected):
                raise InvalidArgumentError(
                    f"matrix: expected a homogeneous matrix whose bottom row is {expected}, but "
                    f"received {matrix[nd].tolist()}", field="matrix")
        offset = matrix[:nd, nd]
        matrix = matrix[:nd, :nd]
    if matrix.shape[0] != nd:
        raise ResampleArgumentError(
            f"matrix: expected {nd} rows (the input's rank), but received {matrix.shape[0]}",
            field="matrix")
    if matrix.ndim == 2 and matrix.shape[1] != len(output_shape):
        raise ResampleArgumentError(
            f"matrix: expected {len(output_shape)} columns (the output's rank), but received "
            f"{matrix.shape[1]}", field="matrix")
    offsets = _offsets(offset, nd)
    _core.resample_affine_transform(input, matrix.ravel().tolist(), matrix.ndim == 1, offsets,
                                    target, order, _mode(mode), float(cval),
                                    bool(prefilter), _threads(threads), pad, bool(fast))
    return _finish(out, target)


for _f in (map_coordinates, affine_transform):
    if _f.__doc__:  # None under python -OO
        _f.__doc__ = _f.__doc__.format(fast=_FAST_DOC)
del _f
