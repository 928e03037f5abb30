"""Streaming resampling of 3-D and 4-D NIfTI series onto a reference grid (``vp.resample``).

The moving image is read volume by volume from its file (an array or an in-memory image is read
in place), each volume is interpolated on the thread pool with scipy.ndimage's values, and the
results go straight into a Fortran-ordered array or into an output ``.nii``/``.nii.gz`` file
that is never held whole. Transforms follow nitransforms' convention: they map reference points
(RAS+ mm) to moving points, and a list is a chain applied in list order. See docs/resample.md,
"Streaming resampling".
"""

from __future__ import annotations

import operator
import os
import re
import types
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict, Union

if TYPE_CHECKING:  # typing.TypeAlias is Python 3.10+; the annotations are not evaluated
    from typing import TypeAlias

import numpy as np
import numpy.typing as npt
from nibabel.dataobj_images import DataobjImage

from .._foundation.native import core as _core
from .._foundation import progress as _progress
from .._foundation.header import Nifti1Header, Nifti2Header
from nibabel import Nifti1Image, Nifti2Image

from .._images.image import load
from .._sources import remote as _remote
from .._sources import upload as _upload
from .._foundation.types import Array, Float64Array, GridLike, NiftiImage, StrPath
from .._foundation.errors import InvalidArgumentError

__all__ = ["resample"]

# One transform: a (4, 4) affine, an (N, 4, 4) stack, a (field, affine) pair or a file; or a
# chain of them (a list), applied in list order.
Transform: TypeAlias = Union[StrPath, npt.ArrayLike, tuple[npt.ArrayLike, npt.ArrayLike]]
Transforms: TypeAlias = Union[Transform, Sequence[Transform]]

_NIFTI_NAME = re.compile(r"\.(nii|nii\.gz|hdr|hdr\.gz)$", re.IGNORECASE)

# One transform, read: ("affine", (4, 4)), ("affines", (N, 4, 4)) or ("field", (field, affine)).
_Element: TypeAlias = Union[tuple[Literal["affine", "affines"], Float64Array],
                            tuple[Literal["field"], tuple[Float64Array, Float64Array]]]
# What the core takes: a chain's step (kind, 16 affine values, field index) and a field with
# its 16 affine values.
_Step: TypeAlias = tuple[int, list[float], int]
_Field: TypeAlias = tuple[Float64Array, list[float]]


class _Options(TypedDict):
    """The core's resampling options, the same for a file and an array."""

    order: int
    mode: str
    cval: float
    prefilter: bool
    dtype: str
    threads: int
    memory_limit: int
    reference_header: bytes
    fast: bool


def _invalid(field: str, message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{field}: {message}", field=field)


def _moving_path(moving: object) -> str | None:
    """The file of a path or a file-backed image; None for an array or an in-memory image."""
    if isinstance(moving, (str, os.PathLike)):
        return os.fspath(moving)
    get = getattr(moving, "get_filename", None)
    name = get() if callable(get) else None
    return os.fspath(name) if name else None


def _moving_array(moving: Any, moving_affine: npt.ArrayLike | None
                  ) -> tuple[Array, Float64Array, Any]:
    """(data, affine, header or None) of an in-memory image or an array and its affine; data is
    the caller's array itself (any layout) unless its dtype must change for the core."""
    if isinstance(moving, np.ndarray) or not hasattr(moving, "affine"):
        if moving_affine is None:
            raise _invalid("moving_affine", "expected the (4, 4) voxel-to-RAS affine of the "
                           "moving array (moving_affine=...), but received None; an array has "
                           "no affine of its own")
        data, affine, header = moving, moving_affine, None
    else:
        if moving_affine is not None:
            raise _invalid("moving_affine", "expected None with an image (it carries its own "
                           "affine); pass moving_affine only with an array")
        affine, header = moving.affine, getattr(moving, "header", None)
        dataobj = getattr(moving, "dataobj", None)
        if dataobj is None:
            raise _invalid("moving", "expected a path, an image or an array, but received "
                           + type(moving).__name__)
        data = np.asanyarray(dataobj)  # an in-memory image's array; a proxy's scaled values
    if affine is None:
        raise _invalid("moving", "expected an image with an affine, but its affine is None")
    affine = np.asarray(affine, dtype=np.float64)
    if affine.shape != (4, 4):
        raise _invalid("moving_affine" if moving_affine is not None else "moving",
                       f"expected a (4, 4) affine, but received shape {affine.shape}")
    data = np.asanyarray(data)
    if data.ndim not in (3, 4):
        raise _invalid("moving", f"expected a 3-D or 4-D image, but received shape {data.shape}")
    kind, size = data.dtype.kind, data.dtype.itemsize
    if kind == "b":
        data = data.view(np.uint8)
    elif kind == "f" and size < 4:
        data = data.astype(np.float32)  # exact
    elif kind == "f" and size > 8:
        data = data.astype(np.float64)  # get_fdata's values
    elif kind not in "iuf":
        raise _invalid("moving", f"expected real (integer or float) voxels, but received "
                       f"dtype {data.dtype}")
    if not data.dtype.isnative:
        data = data.astype(data.dtype.newbyteorder("="))
    return data, affine, header


def _reference(reference: GridLike
               ) -> tuple[tuple[int, ...], Float64Array, Nifti1Header | None]:
    """(shape, affine, header or None) of a path, an image, or anything with .shape/.affine."""
    grid = load(reference) if isinstance(reference, (str, os.PathLike)) else reference
    try:
        shape = tuple(int(n) for n in grid.shape)
        affine = np.array(grid.affine, dtype=np.float64)
    except AttributeError:
        raise _invalid("reference", "expected a path or an image (.shape and .affine), but "
                       "received " + type(grid).__name__) from None
    if len(shape) < 3 or affine.shape != (4, 4):
        raise _invalid("reference", f"expected a grid of 3 (or more) axes and a 4x4 affine, but "
                       f"received shape {shape} and affine shape {affine.shape}")
    header = getattr(grid, "header", None)
    kind = type(header).__name__ if header is not None else ""
    if header is None or kind not in ("Nifti1Header", "Nifti1PairHeader", "Nifti2Header",
                                      "Nifti2PairHeader"):
        return shape[:3], affine, None
    # The same fields and byte order, as a single-file header of the same version.
    klass: type[Nifti1Header] = Nifti2Header if kind.startswith("Nifti2") else Nifti1Header
    copy = klass(header.binaryblock, header.endianness, check=False)
    copy.extensions[:] = header.extensions[:]
    return shape[:3], affine, copy


def _field(value: tuple[npt.ArrayLike, npt.ArrayLike]) -> tuple[Float64Array, Float64Array]:
    """(F-ordered (X, Y, Z, 3) float64 field, affine) from a (field, affine) pair."""
    field = np.asarray(value[0], dtype=np.float64)
    if field.ndim == 5 and field.shape[3] == 1:
        field = field[:, :, :, 0, :]
    if field.ndim != 4 or field.shape[3] != 3:
        raise _invalid("transforms", f"expected a displacement field of shape (X, Y, Z, 3), but "
                       f"received {field.shape}")
    affine = np.asarray(value[1], dtype=np.float64)
    if affine.shape != (4, 4):
        raise _invalid("transforms", f"expected a field affine of shape (4, 4), but received "
                       f"{affine.shape}")
    return np.asfortranarray(field), affine


def _is_matrix_list(value: list[Any]) -> bool:
    """A list of 4 rows of numbers is one matrix; any other list is a chain."""
    return (len(value) == 4 and all(isinstance(r, (list, tuple)) for r in value)
            and all(np.isscalar(v) for r in value for v in r))


def _element(value: Any, moving_path: GridLike, reference: GridLike) -> _Element:
    """One transform: ("affine", (4,4)), ("affines", (N,4,4)) or ("field", (field, affine))."""
    if isinstance(value, (str, os.PathLike)):
        from .. import transforms  # written beside this module; imported when a file is given

        path = os.fspath(value)
        if _NIFTI_NAME.search(path):
            # ITK/ANTs fields are 5-D (X, Y, Z, 1, 3) LPS; nitransforms' own are (X, Y, Z, 3) RAS.
            fmt: Literal["itk", "ras"] = "ras" if len(load(path).shape) == 4 else "itk"
            return ("field", _field(transforms.load_field(path, format=fmt)))
        value = transforms.load_affines(path, reference=reference, moving=moving_path)
    if isinstance(value, tuple) and len(value) == 2 and np.ndim(value[0]) >= 4:
        return ("field", _field(value))
    a = np.asarray(value, dtype=np.float64)
    if a.shape == (4, 4):
        return ("affine", a)
    if a.ndim == 3 and a.shape[1:] == (4, 4):
        return ("affine", a[0]) if a.shape[0] == 1 else ("affines", a)
    raise _invalid("transforms", f"expected a (4, 4) affine, an (N, 4, 4) stack, a (field, "
                   f"affine) pair, a file name or a list of these, but received shape {a.shape}")


def _field_step(i: int) -> Callable[[int], _Step]:
    """Every volume's step through field i."""
    return lambda t: (1, [], i)


def _affine_step(m: list[float]) -> Callable[[int], _Step]:
    """Every volume's step through one affine (16 values, row-major)."""
    return lambda t: (0, m, -1)


def _volume_step(ms: list[list[float]]) -> Callable[[int], _Step]:
    """Volume t's step through affine t of a per-volume stack."""
    return lambda t: (0, ms[t], -1)


def _chains(transforms: Transforms, moving_path: GridLike, reference: GridLike,
            volumes: int) -> tuple[list[list[_Step]], list[_Field]]:
    """(chains as lists of core steps, fields) for the core."""
    if isinstance(transforms, list) and not _is_matrix_list(transforms):
        items = transforms
    else:
        items = [transforms]
    elements = [_element(v, moving_path, reference) for v in items]
    counts = {e[1].shape[0] for e in elements if e[0] == "affines"}
    if len(counts) > 1:
        raise _invalid("transforms", f"expected per-volume stacks of one length, but received "
                       f"lengths {sorted(counts)}")
    n = counts.pop() if counts else 1
    if n != 1 and n != volumes:
        raise _invalid("transforms", f"expected 1 affine or one per volume ({volumes}), but "
                       f"received {n}")
    fields: list[_Field] = []
    # Per element: a function of the volume index giving the core step.
    steps: list[Callable[[int], _Step]] = []
    for e in elements:
        if e[0] == "field":
            fields.append((e[1][0], e[1][1].ravel().tolist()))
            steps.append(_field_step(len(fields) - 1))
        elif e[0] == "affine":
            steps.append(_affine_step(e[1].ravel().tolist()))
        else:
            steps.append(_volume_step([x.ravel().tolist() for x in e[1]]))
    chains = [[s(t) for s in steps] for t in range(n)]
    return chains, fields


def _dtype(dtype: npt.DTypeLike | None, out: object) -> np.dtype[Any]:
    if dtype is None:
        dtype = out.dtype if isinstance(out, np.ndarray) else np.float32
    dtype = np.dtype(dtype)
    if dtype.kind not in "iuf" or (dtype.kind == "f" and dtype.itemsize not in (4, 8)):
        raise _invalid("dtype", f"expected an integer, float32 or float64 dtype, but received "
                       f"{dtype}")
    return dtype


def _count(value: int | None, field: str) -> int:
    if value is None:
        return 0
    n = operator.index(value)
    if n < 0:
        raise _invalid(field, f"expected None or a number >= 0, but received {n}")
    return n


def resample(moving: StrPath | DataobjImage | npt.ArrayLike, reference: GridLike,
             transforms: Transforms, order: int = 3, mode: str = "constant",
             cval: float = 0.0, prefilter: bool = True, dtype: npt.DTypeLike | None = None,
             out: StrPath | Array | None = None, threads: int | None = None,
             memory_limit: int | None = None, *,
             progress: Callable[[int, int], object] | _progress.Mode | None = None,
             moving_affine: npt.ArrayLike | None = None, fast: bool = False,
             storage_options: Mapping[str, Any] | None = None) -> NiftiImage:
    """Resample a 3-D or 4-D image onto ``reference``'s grid through ``transforms``, volume by
    volume, in bounded memory.

    ``moving``: a path or an image loaded from a file (voxpipe or nibabel); volumes are read
    from the file one at a time, scaled as ``get_fdata`` scales them. Or an image in memory
    (its ``np.asanyarray(img.dataobj)`` and ``.affine``), or a 3-D or 4-D array of any real
    dtype and layout with ``moving_affine=`` (4, 4) (required for an array): volume t is read
    in place as the view ``[..., t]``, its values converted to float64. ``reference``: a path or
    an image (anything with ``.shape`` and ``.affine``: the first 3 axes make the grid).

    ``transforms`` map reference points to moving points in RAS+ mm (nitransforms' convention):
    a (4, 4) affine for every volume; an (N, 4, 4) stack, one per volume (N = the volume count);
    a displacement field ``(field, affine)`` with field (X, Y, Z, 3) in RAS mm; a file name (a
    NIfTI is read with ``voxpipe.transforms.load_field``: ITK/ANTs when 5-D (X, Y, Z, 1, 3),
    nitransforms' RAS when 4-D; anything else with ``voxpipe.transforms.load_affines``); or a
    list of these, a chain applied in list order (nitransforms' TransformChain). Fields must
    come before any per-volume stack in a chain.

    ``order``, ``mode``, ``cval``, ``prefilter``: as scipy.ndimage (float64 computation; an
    affine-only chain gives scipy.ndimage.affine_transform's values bit for bit).
    ``dtype``: of the output; None gives float32 (or ``out``'s dtype), not nitransforms' moving
    dtype: interpolated int16 data rounded back to int16 loses the sub-integer values a
    resampled series carries, and float64 doubles the size for digits the data do not have.
    Pass ``dtype=img.get_data_dtype()`` for nitransforms' choice on unscaled data.

    ``out``: None (a new Fortran-ordered array), an F-contiguous array of shape reference grid
    (+ volumes for a 4-D moving image) to fill, or a ``.nii``/``.nii.gz`` path to stream into
    (the volumes are written in order, the file appears when complete; returns ``vp.load`` of
    it), or the URL of an object (``s3://...``: written locally, then uploaded, visible only
    once complete; ``storage_options`` configure the store, as ``vp.save``'s). Otherwise returns a ``vp.Nifti1Image`` with the reference's affine and header.
    ``threads``: None for all cores. ``memory_limit``: bytes for the volumes in flight (None:
    as many as threads); ``voxpipe.errors.LimitError`` (a ValueError) when it cannot hold one
    volume.
    ``progress``: None (default: nothing), a callable, called as ``progress(done, total)`` after
    each volume, or a report on ``sys.stderr`` as the command line's ``--progress`` writes it
    (docs/cli.md "Progress"): ``"bar"`` (redrawn with ``\\r``), ``"log"`` (a line every 5 s,
    ``$VOXPIPE_PROGRESS_INTERVAL``, and one at the end: ``voxpipe.resample: 12/100 volumes (12%),
    3.1 volumes/s, ETA 0:28``), ``"auto"`` (the bar on a terminal, else log lines once the call
    has run 5 s) or ``"none"``.
    ``fast``: as for ``voxpipe.map_coordinates``: True trades bit-identity with scipy for speed
    (orders 3 to 5 sum separably with fused multiply-adds; values within a few ulps).
    """
    moving_path = _moving_path(moving)
    if moving_path is not None:
        if moving_affine is not None:
            raise _invalid("moving_affine", "expected None with a path or an image from a file "
                           "(it carries its own affine); pass moving_affine only with an array")
        moving_img = load(moving_path)
        mshape = tuple(moving_img.shape)
        moving_header = moving_img.header
        moving_grid: GridLike = moving_path
    else:
        moving_data, maffine, moving_header = _moving_array(moving, moving_affine)
        mshape = tuple(moving_data.shape)
        moving_grid = types.SimpleNamespace(shape=mshape, affine=maffine)
    if len(mshape) not in (3, 4):
        raise _invalid("moving", f"expected a 3-D or 4-D image, but received shape {mshape}")
    volumes = mshape[3] if len(mshape) == 4 else 1
    ref_shape, ref_affine, ref_header = _reference(reference)
    chains, fields = _chains(transforms, moving_grid, reference, volumes)
    dtype = _dtype(dtype, out)
    shape = ref_shape + mshape[3:]
    if ref_header is None:
        # A reference without a NIfTI header: the affine goes in both forms, scanner-coded.
        ref_header = Nifti1Header()
        ref_header.set_qform(ref_affine, code=1)
        ref_header.set_sform(ref_affine, code=1)
    mode = str(mode)
    if isinstance(progress, str) and progress not in _progress.MODES:
        raise _invalid("progress", "expected a callable, None or one of "
                       f"{', '.join(map(repr, _progress.MODES))}, but received {progress!r}")
    args = _Options(order=operator.index(order), mode=mode, cval=float(cval),
                    prefilter=bool(prefilter), dtype=dtype.name,
                    threads=_count(threads, "threads"),
                    memory_limit=_count(memory_limit, "memory_limit"),
                    reference_header=bytes(ref_header.binaryblock),
                    fast=bool(fast))
    # The output's time step and units: the moving header's, else (an array, or a header
    # without them) the reference's own.
    try:
        time_step = float(moving_header["pixdim"][4])
        xyzt_units = int(moving_header["xyzt_units"])
    except (KeyError, TypeError, IndexError, ValueError):
        time_step, xyzt_units = float(ref_header["pixdim"][4]), int(ref_header["xyzt_units"])

    def run(data: Array | None, out_path: str | None) -> None:
        # The report starts with the work, after every argument is checked.
        callback, report = _progress.reporter(progress, volumes, "voxpipe.resample", "volumes")
        try:
            if moving_path is not None:
                _core.resample_series(moving_path, list(ref_shape), ref_affine.ravel().tolist(),
                                      chains, fields, out=data, out_path=out_path,
                                      progress=callback, **args)
            else:
                _core.resample_series_array(moving_data, moving_data.dtype.name,
                                            maffine.ravel().tolist(), time_step, xyzt_units,
                                            list(ref_shape), ref_affine.ravel().tolist(), chains,
                                            fields, out=data, out_path=out_path,
                                            progress=callback, **args)
        except BaseException:
            if report is not None:
                report.abandon()
            raise
        if report is not None:
            report.end()

    if isinstance(out, (str, os.PathLike)):
        path = os.fspath(out)
        if _remote.is_url(path):
            with _upload.LocalOutput(path) as staged:
                run(None, staged.path())
                _upload.upload_file(staged.path(), path, storage_options)
            return load(path, storage_options=storage_options)
        run(None, path)
        return load(path)

    if out is None:
        data = np.empty(shape, dtype=dtype, order="F")
    elif isinstance(out, np.ndarray):
        if out.shape != shape:
            raise _invalid("out", f"expected shape {shape}, but received {out.shape}")
        if out.dtype != dtype:
            raise _invalid("out", f"expected dtype {dtype}, but received {out.dtype}")
        if not out.flags.f_contiguous or not out.dtype.isnative or not out.flags.writeable:
            raise _invalid("out", "expected a writeable, Fortran-contiguous array in native "
                           "byte order")
        if moving_path is None and np.may_share_memory(out, moving_data):
            raise _invalid("out", "expected an array apart from the moving data, but they "
                           "share memory")
        data = out
    else:
        raise _invalid("out", "expected None, an array or a path, but received "
                       + type(out).__name__)
    run(data, None)
    klass: type[Nifti1Image] = Nifti2Image if isinstance(ref_header, Nifti2Header) else Nifti1Image
    header = ref_header.copy()
    if len(shape) == 4:
        header["pixdim"][4] = time_step
        header["xyzt_units"] = (int(header["xyzt_units"]) & 0x07) | (xyzt_units & 0x38)
    return klass(data, ref_affine, header, dtype=dtype)
