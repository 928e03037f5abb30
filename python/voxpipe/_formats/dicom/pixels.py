"""DICOM pixel data as NumPy arrays: pydicom's ``pixel_array`` and ``apply_modality_lut``.

The C++ pixel layer (src/dicom/pixels.cpp and codecs/) decodes straight into an array NumPy
allocates here, frames in parallel, with the GIL released. Values equal pydicom 3's with its
default options (docs/dicom.md lists what differs).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Union

import numpy as np
import numpy.typing as npt

from ..._foundation.errors import CorruptDataWarning
from ..._foundation.native import core as _core
from ..._foundation.types import Array, StrPath

if TYPE_CHECKING:  # typing.TypeAlias is Python 3.10+; the annotations are not evaluated
    from typing import TypeAlias

# A parsed file (a FileDataset's, which has checked that it lies at its path), or a path.
FileOrPath: TypeAlias = Union["_core.DicomFile", StrPath]

_FLOATS = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}


def _file_of(file: FileOrPath) -> _core.DicomFile:
    """The parsed core file, or that of a path (parsed here)."""
    if isinstance(file, _core.DicomFile):
        return file
    return _core.read_dicom(os.fspath(file))


ON_CORRUPT = ("raise", "warn")


def check_on_corrupt(on_corrupt: str) -> str:
    """``on_corrupt``: 'raise' (damage a decoder detects is a CorruptError) or 'warn' (what the
    decoder recovers, with a CorruptDataWarning)."""
    if on_corrupt not in ON_CORRUPT:
        raise ValueError(f"on_corrupt must be 'raise' or 'warn', not {on_corrupt!r}")
    return on_corrupt


def warn_all(messages: Iterable[str], stacklevel: int = 3) -> None:
    """The core's decode warnings as Python warnings (the library prints nothing)."""
    for message in messages:
        warnings.warn(message, CorruptDataWarning, stacklevel=stacklevel + 1)


def _frames(info: _core.DicomPixelInfo, index: int | None) -> tuple[int, int, list[int]]:
    if index is None:
        return 0, info.number_of_frames, list(info.shape)
    n = info.number_of_frames
    if not isinstance(index, (int, np.integer)) or isinstance(index, bool):
        raise TypeError(f"index must be an int or None, not {type(index).__name__}")
    if index < 0:
        raise ValueError("'index' must be greater than or equal to 0")
    if index >= n:
        raise IndexError(f"frame index {index} is out of range: the pixel data has {n} frames")
    shape = list(info.shape)
    if n > 1:
        shape = shape[1:]
    return int(index), 1, shape


def pixel_info(file: FileOrPath) -> _core.DicomPixelInfo:
    """The checked Image Pixel module: rows, columns, samples_per_pixel, bits_allocated,
    bits_stored, pixel_representation, planar_configuration, number_of_frames, photometric,
    photometric_out, dtype (pixel_array's), shape, codec."""
    return _core.dicom_pixel_info(_file_of(file))


def pixel_array(file: FileOrPath, index: int | None = None, *, as_rgb: bool = True,
                threads: int | None = None, info: _core.DicomPixelInfo | None = None,
                on_corrupt: str = "raise") -> Array:
    """The pixel data as pydicom's ``pixel_array`` gives it: shape (rows, columns[, samples]) or
    (frames, rows, columns[, samples]), dtype from BitsAllocated and PixelRepresentation (float
    for Float / Double Float Pixel Data), BitsStored applied, YBR_FULL/YBR_FULL_422 converted to
    RGB unless ``as_rgb=False``. ``index`` decodes one frame only (pydicom's
    ``pixel_array(path, index=...)``). Frames are decoded on ``threads`` threads (default: all
    cores). ``on_corrupt``: damage a decoder detects in a compressed frame (libjpeg's "Corrupt
    JPEG data", OpenJPEG's damage warnings) raises CorruptError ('raise', the default) or gives
    what the decoder recovers with a CorruptDataWarning ('warn')."""
    check_on_corrupt(on_corrupt)
    core_file = _file_of(file)
    if info is None:
        info = _core.dicom_pixel_info(core_file)
    first, count, shape = _frames(info, index)
    out = np.empty(shape, dtype=info.dtype)
    warn_all(_core.dicom_decode_frames(core_file, info, first, count,
                                       out.reshape(-1).view(np.uint8), as_rgb=as_rgb,
                                       threads=threads or 0, on_corrupt=on_corrupt))
    return out


def modality_array(file: FileOrPath, dtype: npt.DTypeLike | None = np.float64,
                   index: int | None = None, *, as_rgb: bool = True,
                   threads: int | None = None, info: _core.DicomPixelInfo | None = None,
                   on_corrupt: str = "raise") -> Array:
    """The pixel data with the modality transform applied, as pydicom's
    ``apply_modality_lut(ds.pixel_array, ds)`` (the Modality LUT Sequence where there is one,
    else Rescale Slope and Intercept when both are present), computed in float64 and returned as
    ``dtype`` (float64 or float32: the float64 values rounded once). ``on_corrupt`` as in
    ``pixel_array``."""
    check_on_corrupt(on_corrupt)
    dt = np.dtype(dtype)
    if dt not in _FLOATS:
        raise ValueError(f"dtype must be float32 or float64, not {dt}")
    core_file = _file_of(file)
    if info is None:
        info = _core.dicom_pixel_info(core_file)
    first, count, shape = _frames(info, index)
    out = np.empty(shape, dtype=dt)
    warn_all(_core.dicom_decode_frames(core_file, info, first, count,
                                       out.reshape(-1).view(np.uint8), as_rgb=as_rgb,
                                       threads=threads or 0, modality=_FLOATS[dt],
                                       on_corrupt=on_corrupt))
    return out
