"""Type aliases of the public API, defined once and used by every module's annotations.

Arrays whose dtype follows a run-time argument (``dtype=None``: the file's own) are
``numpy.typing.NDArray[Any]``, as NumPy's own ``np.asarray(x, dtype)`` is typed.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol, Union

if TYPE_CHECKING:  # typing.TypeAlias is Python 3.10+; the annotations are not evaluated
    from typing import TypeAlias

import numpy as np
import numpy.typing as npt
from nibabel import Nifti1Image, Nifti1Pair, Nifti2Image, Nifti2Pair

# What vp.load returns: nibabel's own classes (Nifti2Image and Nifti1Image derive from the
# pair classes; all four are listed so that a reader sees every class a load can give).
NiftiImage: TypeAlias = Union[Nifti1Image, Nifti2Image, Nifti1Pair, Nifti2Pair]

# A file name, as os.fspath takes it.
StrPath: TypeAlias = Union[str, "os.PathLike[str]"]

# An array of the dtype a run-time argument chooses.
Array: TypeAlias = npt.NDArray[Any]
Float64Array: TypeAlias = npt.NDArray[np.float64]


class TorchDeviceLike(Protocol):
    """A ``torch.device`` (described, so that typing voxpipe never needs torch)."""

    @property
    def type(self) -> str: ...

    @property
    def index(self) -> int | None: ...


# Where a load puts its data: None or "cpu" (the host), "cuda", "cuda:N", or a torch.device.
Device: TypeAlias = Union[str, TorchDeviceLike, None]


class Grid(Protocol):
    """Anything with a voxel grid: an image, a ``vp.dicom.Series``, a namespace."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def affine(self) -> npt.ArrayLike | None: ...


# A grid given as a file name or as anything with .shape and .affine.
GridLike: TypeAlias = Union[StrPath, Grid]
