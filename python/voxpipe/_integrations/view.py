"""``vp.view``: a PNG of an image, drawn by the same code as ``voxpipe view``.

The picture (three orthogonal slices through the centre, or an axial mosaic, in the closest RAS
orientation, neurological convention, percentile window, orientation letters) is described in
docs/view.md and include/voxpipe/view.hpp. This module only reads the volume: one volume of the
image through ``img.dataobj`` (the values nibabel gives, cast to float32) and ``img.affine``.
"""

from __future__ import annotations

import os
from typing import Any, Protocol, Union, overload

import numpy as np
from nibabel.filebasedimages import FileBasedImage

from .._foundation.native import core as _core
from .._foundation.types import StrPath
from .._foundation.errors import InvalidArgumentError

_NIFTI_SUFFIXES = (".nii", ".hdr", ".img")


class ImageLike(Protocol):
    """What vp.view reads from an image: nibabel's images (voxpipe's, nibabel's own,
    vp.load_dicom's) have both; nib.load is typed as returning a FileBasedImage, which
    view also takes."""

    @property
    def dataobj(self) -> Any: ...

    @property
    def affine(self) -> Any: ...


def _is_nifti_name(path: str) -> bool:
    name = path.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return name.endswith(_NIFTI_SUFFIXES)


def _load(path: StrPath) -> ImageLike:
    """A NIfTI file with vp.load, anything else (a folder, DICOM files) with vp.load_dicom: the
    rule ``voxpipe view`` follows."""
    from .._formats.dicom.series import load_dicom
    from .._images.image import load

    p = os.fspath(path)
    if _is_nifti_name(p) and not os.path.isdir(p):
        return load(p)
    return load_dicom(p)


def _volume(img: ImageLike, volume: int | None) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Volume ``volume`` (default 0) of the image as a Fortran-ordered float32 3-D array."""
    dataobj = img.dataobj
    shape = tuple(int(n) for n in dataobj.shape)
    volumes = int(np.prod(shape[3:], dtype=np.int64)) if len(shape) > 3 else 1
    t = 0 if volume is None else volume
    if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
        raise InvalidArgumentError(f"volume: expected an integer, but received {t!r}")
    t = int(t)
    if not 0 <= t < volumes:
        raise InvalidArgumentError(
            f"volume: expected a volume in 0..{volumes - 1}, but received {t}")
    if len(shape) > 3:
        # Only that volume is read: the axes beyond the third, first of them fastest.
        index = np.unravel_index(t, shape[3:], order="F")
        data = np.asanyarray(dataobj[(slice(None),) * 3 + tuple(int(i) for i in index)])
    else:
        data = np.asanyarray(dataobj)
    if data.dtype.kind not in "biuf":  # complex, RGB: as the CLI, no silent real part
        raise InvalidArgumentError(f"dtype: cannot convert {data.dtype} to float32")
    data = np.asarray(data, dtype=np.float32)
    while data.ndim < 3:
        data = data[..., np.newaxis]
    return np.asfortranarray(data)


# An image, or the path of one (a NIfTI file, or a DICOM folder or file).
ViewInput = Union[FileBasedImage, ImageLike, StrPath]


@overload
def view(img: ViewInput, filename: None = None, *, volume: int | None = None,
         mosaic: bool = False) -> bytes: ...


@overload
def view(img: ViewInput, filename: StrPath, *, volume: int | None = None,
         mosaic: bool = False) -> None: ...


def view(img: ViewInput, filename: StrPath | None = None, *, volume: int | None = None,
         mosaic: bool = False) -> bytes | None:
    """Draw ``img`` as a PNG, as ``voxpipe view`` does: three orthogonal slices through the
    centre (sagittal, coronal, axial), or with ``mosaic=True`` up to 36 axial slices.

    ``img``: any nibabel image (voxpipe's or nibabel's; a DICOM series from ``vp.load_dicom``)
    or a path (a NIfTI file, or a DICOM folder or file). ``volume``: which volume of a 4-D image
    (default 0). The volume is shown in its closest RAS orientation without resampling,
    neurological convention (the subject's left on the left), square millimetre pixels, grey
    levels spanning the 1st to 99th percentile of its finite values, with orientation letters.

    Returns the PNG's bytes, or writes them to ``filename`` (replacing a file there, atomically)
    and returns None. Raises InvalidArgumentError for a volume the image does not have, and the
    errors of reading the image."""
    if isinstance(img, (str, os.PathLike)):
        name = os.fspath(img)
        image = _load(img)
    else:
        image = img  # type: ignore[assignment]  # nib.load's FileBasedImage: read as ImageLike
        name = str(getattr(img, "get_filename", lambda: None)() or "")
    data = _volume(image, volume)
    affine = [float(x) for x in np.asarray(image.affine, dtype=np.float64).reshape(16)]
    if filename is None:
        png: bytes = _core.view_png(data, affine, bool(mosaic), name)
        return png
    _core.view_write(data, affine, bool(mosaic), name, os.fspath(filename))
    return None
