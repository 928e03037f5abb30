"""Readers of spatial transform files, with nitransforms' conventions and values.

A transform maps a point of the *reference* space (the output grid) to the point of the *moving*
image whose value lands there, in RAS+ millimetres, as ``nitransforms``' ``.matrix``; a matrix
read here equals nitransforms 25.1.0's for the same file (``nitransforms.linear.load(path,
fmt=..., reference=..., moving=...).matrix``) to 1e-12 relative. See docs/resample.md,
"Transforms"::

    import voxpipe as vp
    m = vp.transforms.load_affine("sub-01_from-T1w_to-MNI_xfm.txt")       # ITK, (4, 4)
    hmc = vp.transforms.load_affines("bold_hmc.txt")                       # ITK, (N, 4, 4)
    flirt = vp.transforms.load_affine("epi2struct.mat", reference="T1w.nii.gz", moving="epi.nii.gz")
    field, affine = vp.transforms.load_field("warp.nii.gz")                # ITK/ANTs, RAS mm
"""

from __future__ import annotations

import os
from typing import Any, Literal

import numpy as np

from ._foundation.native import core as _core
from ._images.image import load
from ._foundation.types import Float64Array, GridLike, StrPath
from ._foundation.errors import InvalidArgumentError

__all__ = ["load_affine", "load_affines", "load_field"]

_FORMATS = {None: "auto", "auto": "auto", "itk": "itk", "fsl": "fsl", "matrix": "matrix"}


def _grid(img: GridLike | None, name: str) -> tuple[list[int], list[float]] | None:
    """(shape, affine values) of a path, a voxpipe or nibabel image, or anything with
    ``.shape`` and ``.affine``; None stays None."""
    if img is None:
        return None
    grid: Any = img
    if isinstance(img, (str, os.PathLike)):
        grid = load(os.fspath(img))
    try:
        shape = tuple(int(n) for n in grid.shape)
        affine = np.asarray(grid.affine, dtype=np.float64)
    except (AttributeError, TypeError) as e:
        raise InvalidArgumentError(
            f"{name}: expected a path or an image with .shape and .affine, but received "
            f"{type(img).__name__}", field=name) from e
    if len(shape) < 3 or affine.shape != (4, 4):
        raise InvalidArgumentError(
            f"{name}: expected at least 3 axes and a 4x4 affine, but received shape {shape} and "
            f"affine of shape {affine.shape}", field=name)
    return list(shape[:3]), affine.reshape(-1).tolist()


def load_affines(path: StrPath, format: Literal["auto", "itk", "fsl", "matrix"] | None = None,
                 reference: GridLike | None = None,
                 moving: GridLike | None = None) -> Float64Array:
    """Every linear transform a file holds, as an (N, 4, 4) float64 array, in file order.

    ``path`` is an ITK text file (one or several transforms), an FSL FLIRT/MCFLIRT matrix, a
    plain 4x4 (or 3x4) RAS matrix, a text file listing one such file per line (relative to the
    list's folder), or a folder of them (MCFLIRT's ``MAT_0000``, ...), read in name order.
    ``format`` is None (from the content: ITK by its header line; 4 rows of numbers are FSL's
    when ``reference`` is given and the name ends in ``.mat`` or starts with ``MAT_``, else a
    plain matrix), ``"itk"``, ``"fsl"`` or ``"matrix"``. FSL matrices need ``reference`` (FLIRT's
    ``-ref``) and ``moving`` (its ``-in``; the reference when None): each a path or an image.
    Raises FormatError naming the file, line and field for anything not read exactly.
    """
    if format not in _FORMATS:
        raise InvalidArgumentError(
            f"format: expected None, 'itk', 'fsl' or 'matrix', but received {format!r}",
            field="format")
    return _core.transform_read_affines(os.fspath(path), _FORMATS[format],
                                        _grid(reference, "reference"), _grid(moving, "moving"))


def load_affine(path: StrPath, format: Literal["auto", "itk", "fsl", "matrix"] | None = None,
                reference: GridLike | None = None,
                moving: GridLike | None = None) -> Float64Array:
    """The one linear transform of a file, (4, 4) float64; FormatError when it holds more or
    fewer (as :func:`load_affines` otherwise)."""
    m = load_affines(path, format, reference, moving)
    if m.shape[0] != 1:
        from ._foundation.errors import FormatError

        raise FormatError(f"{os.fspath(path)}: expected one transform, but found {m.shape[0]}",
                          path=os.fspath(path))
    first: Float64Array = m[0]
    return first


def load_field(path: StrPath,
               format: Literal["itk", "ras"] = "itk") -> tuple[Float64Array, Float64Array]:
    """A displacement field NIfTI as ``(field, affine)``: field (X, Y, Z, 3) float64 in RAS mm,
    affine the 4x4 voxel-to-RAS of its grid.

    ``format="itk"``: ITK/ANTs fields, shape (X, Y, Z, 1, 3) with LPS vectors (the first two
    components change sign), as nitransforms' ``ITKDisplacementsField``; ``format="ras"``:
    nitransforms' own (X, Y, Z, 3) RAS vectors, as ``DenseFieldTransform`` reads them.
    """
    if format not in ("itk", "ras"):
        raise InvalidArgumentError(f"format: expected 'itk' or 'ras', but received {format!r}",
                                   field="format")
    return _core.transform_read_field(os.fspath(path), format)
