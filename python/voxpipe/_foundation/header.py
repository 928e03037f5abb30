"""NIfTI headers: nibabel's own header classes, and the dtype vocabulary the core speaks.

Headers are nibabel's (``nibabel.Nifti1Header`` and relatives): the C++ core applies nibabel's
load-time checks and fixes and hands over the fixed block, which nibabel's class wraps unchecked.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from nibabel.filebasedimages import FileBasedHeader
# nibabel's classes, named here for the modules that build headers.
from nibabel.nifti1 import Nifti1Header as Nifti1Header, Nifti1PairHeader as Nifti1PairHeader
from nibabel.nifti2 import Nifti2Header as Nifti2Header, Nifti2PairHeader as Nifti2PairHeader

RGB24 = np.dtype([("R", "u1"), ("G", "u1"), ("B", "u1")])
RGBA32 = np.dtype([("R", "u1"), ("G", "u1"), ("B", "u1"), ("A", "u1")])

# NIfTI datatype code <-> NumPy dtype (nibabel's _dtdefs, without float128/complex256, which
# nibabel cannot read on platforms without IEEE binary128 long double).
_CODE_TO_DTYPE: dict[int, np.dtype[Any]] = {
    2: np.dtype("u1"), 4: np.dtype("i2"), 8: np.dtype("i4"), 16: np.dtype("f4"),
    32: np.dtype("c8"), 64: np.dtype("f8"), 128: RGB24, 256: np.dtype("i1"),
    512: np.dtype("u2"), 768: np.dtype("u4"), 1024: np.dtype("i8"), 1280: np.dtype("u8"),
    1792: np.dtype("c16"), 2304: RGBA32,
}
# The one form a dtype takes across the binding (python/src/conversions.hpp): NumPy's dtype name,
# and rgb24/rgba32 for NIfTI's RGB structures, which NumPy names only "void24"/"void32".
_RGB_NAMES: dict[np.dtype[Any], str] = {RGB24: "rgb24", RGBA32: "rgba32"}
NAME_TO_DTYPE: dict[str, np.dtype[Any]] = {
    **{dt.name: dt for dt in _CODE_TO_DTYPE.values() if dt.fields is None},
    **{name: dt for dt, name in _RGB_NAMES.items()}}


def core_dtype_name(dtype: npt.DTypeLike) -> str:
    """The name the core takes for a dtype NIfTI can store (byte order aside)."""
    dt = np.dtype(dtype)
    name = _RGB_NAMES.get(dt) if dt.fields is not None else dt.name
    if name is None or name not in NAME_TO_DTYPE:
        raise ValueError(f'data dtype "{dt}" not supported')
    return name


def convert_header(header: FileBasedHeader, klass: type[Nifti1Header]) -> Nifti1Header:
    """`header` as an instance of the header class `klass`: a copy when it already is one,
    otherwise nibabel's conversion (``klass.from_header``: the fields both versions have, in
    native byte order), as nibabel converts an image between single-file, pair and version."""
    converted: Nifti1Header = klass.from_header(header)
    return converted
