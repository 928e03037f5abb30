"""DICOM series to volumes: ``vp.dicom.scan`` and ``vp.load_dicom``.

Files are parsed in parallel by the core (up to the pixel data), grouped by SeriesInstanceUID and
the fields that split a series, sorted along the slice normal, checked (even spacing, the same
number of images at every position, gantry tilt) and read into one Fortran-ordered array with
the NIfTI RAS affine. include/voxpipe/dicom_series.hpp and docs/dicom.md state the conventions:
voxel axes (column, row, slice[, volume]), the affine as nibabel.nicom computes it. URLs (a
prefix, objects) are fetched by ``_remote_dicom`` and scanned from memory by the same core.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Optional, overload

import numpy as np
import numpy.typing as npt
from nibabel import Nifti1Image

from ..._foundation.native import core as _core
from . import pixels as _dicom_pixels
from ..._foundation import identity as _identity
from ..._foundation import pool as _pool
from ..._sources import listing as _remote_dicom
from .dataset import FileDataset
from ..._foundation.types import Array, Device, Float64Array, StrPath
from ..._foundation.errors import FormatError, InvalidArgumentError

if TYPE_CHECKING:  # typing.TypeAlias is Python 3.10+; the annotations are not evaluated
    from typing import TypeAlias

    from ..._foundation.device import DeviceArray
    from ..._sources.remote import RemoteObject

# What a Series pickles as (Series._state): (names, ETags or None, storage_options, threads,
# SeriesInstanceUID, split, files).
SeriesState: TypeAlias = tuple[list[str], Optional[list[Optional[str]]],
                               Optional[Mapping[str, Any]], int, str, str,
                               list[tuple[str, int]]]

_FLOATS = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}


class Series:
    """One series (or one part of a SeriesInstanceUID split by orientation, size, echo or stack)
    as scanned: its description, geometry and files, not its data (``load()`` reads that).

    A Series pickles as its files (paths, or URLs with the ETag of each object, and the
    storage_options), never their data; the receiver scans them again when it first uses it,
    and for URLs reads those versions only (VoxpipeIOError if an object changed)."""

    def __init__(self, core_series: _core.DicomSeries | None, threads: int,
                 objects: Mapping[str, RemoteObject] | None = None,
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self._core_series = core_series
        self._threads = threads
        # For a series scanned from URLs: the RemoteObject of each of its files, by URL (the
        # core series holds the same bytes, which its images are decoded from).
        self._objects = objects
        self._storage_options = storage_options
        # The working directory the files were scanned from: what their names, as the user
        # gave them, are relative to.
        self._opened_in = _identity.working_directory()
        # An unpickled series: its state, until first used (and its core series is None).
        self._pickled: SeriesState | tuple[()] = ()

    @property
    def _s(self) -> _core.DicomSeries:
        s = self._core_series
        if s is None:
            state = self._pickled
            if not state:
                raise InvalidArgumentError("a Series is made by vp.dicom.scan (or unpickled), "
                                           "not from None")
            s = self._core_series = self._scan_again(*state)
        return s

    def _state(self) -> SeriesState:
        """(names, ETags or None, storage_options, threads, SeriesInstanceUID, split, files):
        what the series pickles as. Local files by absolute names, made so against the folder
        they were scanned from: the receiver may run in another folder, and this process may
        have changed its own since."""
        if self._pickled:
            return self._pickled
        files = [(name, frame) for name, frame in self._s.files]
        if self._objects is None:
            files = [(os.path.join(self._opened_in, name), k) for name, k in files]
        names = list(dict.fromkeys(name for name, _ in files))
        etags = None if self._objects is None else [self._objects[n].etag for n in names]
        return (names, etags, self._storage_options, self._threads, self._s.series_instance_uid,
                self.split, files)

    def __reduce__(self) -> tuple[Any, ...]:
        return (unpickled_series, self._state())

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        """What identifies the values the series reads, for dask's deterministic names: its
        SeriesInstanceUID, split and images, each file's identity or each object's ETag."""
        names, etags, _, _, uid, split, files = self._state()
        where = etags if etags is not None else [_identity.file_identity(n) for n in names]
        return ("voxpipe.dicom.Series", uid, split, [tuple(f) for f in files], where)

    def _scan_again(self, names: list[str], etags: list[str | None] | None,
                    options: Mapping[str, Any] | None, threads: int, uid: str, split: str,
                    files: list[tuple[str, int]]) -> _core.DicomSeries:
        """The core series of an unpickled Series (its _state): its files scanned again (objects
        fetched in the versions it had), and the part that has exactly its images."""
        if etags is None:
            result = _core.dicom_scan(names, threads=threads, recursive=False)
        else:
            objects = _remote_dicom.fetch_pinned(names, etags, options)
            result = _core.dicom_scan_buffers([o.url for o in objects], [o.data for o in objects],
                                              threads=threads)
            self._objects = {o.url: o for o in objects}
        for s in result.series:
            if s.series_instance_uid == uid and [tuple(f) for f in s.files] == files:
                self._split = split  # the label its siblings gave it, which are not read again
                self._pickled = ()
                return s
        raise FormatError(f"{names[0]}: series {uid}: its files no longer assemble into the "
                          f"series that was pickled ({len(files)} images)", path=names[0])

    # What a user looks at first.
    @property
    def series_instance_uid(self) -> str:
        return self._s.series_instance_uid

    @property
    def series_number(self) -> int:
        return self._s.series_number

    @property
    def series_description(self) -> str:
        return self._s.series_description

    @property
    def modality(self) -> str:
        return self._s.modality

    @property
    def split(self) -> str:
        """What sets this part of its SeriesInstanceUID apart ("" if whole)."""
        s = self._s  # an unpickled series is scanned again first, which sets _split
        split: str = self.__dict__.get("_split", s.split)
        return split

    @property
    def shape(self) -> tuple[int, ...]:
        """(columns, rows, slices[, volumes]), Fortran order."""
        return tuple(self._s.shape)

    @property
    def affine(self) -> Float64Array:
        """Voxel (column, row, slice) to RAS mm."""
        return np.array(self._s.affine, dtype=np.float64).reshape(4, 4)

    @property
    def slice_spacing(self) -> float:
        return self._s.slice_spacing

    @property
    def pixel_spacing(self) -> tuple[float, float]:
        row, column = self._s.pixel_spacing  # two values in the core
        return (row, column)

    @property
    def orientation(self) -> tuple[float, ...]:
        return tuple(self._s.orientation)

    @property
    def gantry_tilt(self) -> bool:
        return self._s.gantry_tilt

    @property
    def tilt_degrees(self) -> float:
        return self._s.tilt_degrees

    @property
    def stored_dtype(self) -> np.dtype[Any]:
        if self._s.stored_dtype == "rgb24":  # colour: R, G, B uint8, as nibabel reads RGB24
            return np.dtype([("R", "u1"), ("G", "u1"), ("B", "u1")])
        return np.dtype(self._s.stored_dtype)

    @property
    def uniform_rescale(self) -> bool:
        return self._s.uniform_rescale

    @property
    def slope(self) -> float:
        return self._s.slope

    @property
    def intercept(self) -> float:
        return self._s.intercept

    @property
    def problem(self) -> str:
        """Why the series cannot be assembled ('' when it can)."""
        return self._s.problem

    @property
    def warnings(self) -> list[str]:
        return list(self._s.warnings)

    @property
    def files(self) -> list[tuple[str, int]]:
        """(path, frame) of each image, in data order (volume-major); for a series scanned from
        URLs, the object's URL stands for the path."""
        return list(self._s.files)

    @property
    def positions(self) -> Float64Array:
        return np.array(self._s.positions, dtype=np.float64)

    @property
    def echo_number(self) -> int:
        """The EchoNumbers of its images (0: not stated); the echoes of one series UID are
        separate series."""
        return self._s.echo_number

    @property
    def image_component(self) -> str:
        """"PHASE", "REAL" or "IMAGINARY" when its images hold that component (the parts of one
        series UID are separate series, as dcm2niix's _ph, _real, _imaginary files); "" for
        magnitude or unstated."""
        return self._s.image_component

    @property
    def no_geometry(self) -> bool:
        """True when no image states ImagePositionPatient and ImageOrientationPatient (secondary
        captures, CR/DX, ultrasound): the images are stacked without a place in the patient
        frame, the affine PixelSpacing and the slice step about the image centre (as dcm2niix
        writes such images; a NIfTI written of it has qform and sform code 0)."""
        return self._s.no_geometry

    def gradient_table(self, affine: npt.ArrayLike | None = None
                       ) -> tuple[Float64Array, Float64Array] | None:
        """The diffusion gradient table: ``(bvals, bvecs)``, bvals of shape (volumes,) in s/mm²
        and bvecs of shape (3, volumes) as FSL reads ``.bvec`` and dcm2niix writes it: each
        direction in the voxel axes of an image with ``affine`` (default: the series' own, which
        ``load()`` gives), x negated when the affine's determinant is positive, (0, 0, 0) for
        b = 0. None when the files state no diffusion encoding (docs/dicom.md, "Diffusion").

        From the standard attributes (top level or an enhanced file's MR Diffusion Sequence),
        Siemens' CSA header, GE's and Philips' private elements. FormatError when the slices of
        one volume disagree."""
        a = self.affine if affine is None else np.asarray(affine, dtype=np.float64)
        if a.shape != (4, 4):
            raise InvalidArgumentError(f"affine: expected a 4x4 matrix, got shape {a.shape}")
        table = self._s.gradient_table([float(x) for x in a.ravel()])
        if table is None:
            return None
        bvals, bvecs = table
        return (np.asarray(bvals, dtype=np.float64),
                np.asarray(bvecs, dtype=np.float64).reshape(-1, 3).T.copy())

    @property
    def dataset(self) -> FileDataset:
        """The first image's dataset (a vp.dicom FileDataset), for metadata."""
        ds: FileDataset | None = self.__dict__.get("_dataset")
        if ds is None:
            core_file = self._s.first_file
            if core_file is None:  # the core lists no series without images
                raise FormatError(f"series {self.series_instance_uid} has no images")
            if self._objects is not None:  # its values are read from the object's bytes
                obj = self._objects[core_file.path]
                ds = FileDataset(core_file, False, obj.size, buffer=obj.data)
            else:
                ds = FileDataset(core_file, False, os.stat(core_file.path).st_size)
            self.__dict__["_dataset"] = ds
        return ds

    @overload
    def get_data(self, dtype: npt.DTypeLike | None = ..., out: Array | None = ...,
                 threads: int | None = ..., *, device: None = ...,
                 on_corrupt: Literal["raise", "warn"] = ...) -> Array: ...
    @overload
    def get_data(self, dtype: npt.DTypeLike | None = ..., out: Array | None = ...,
                 threads: int | None = ..., *, device: Device,
                 on_corrupt: Literal["raise", "warn"] = ...) -> Array | DeviceArray: ...
    def get_data(self, dtype: npt.DTypeLike | None = np.float32, out: Array | None = None,
                 threads: int | None = None, *, device: Device = None,
                 on_corrupt: Literal["raise", "warn"] = "raise") -> Array | DeviceArray:
        """The volume: ``dtype`` float32 (default) or float64 with each image's Rescale Slope
        and Intercept applied (in float64, then rounded), or None for the stored values
        (pixel_array's dtype; ``slope``/``intercept`` say how to scale them when
        ``uniform_rescale``). ``out``: a Fortran-ordered array of ``shape`` to fill.
        ``device`` 'cuda', 'cuda:N' or a torch.device: the same values in a DeviceArray on that
        device (native pixel data converted there; other series decoded here, each slice streamed
        to the device as it is decoded). ``on_corrupt``: a compressed image its decoder reports
        damaged raises CorruptError ('raise', the default), or 'warn': what the decoder recovers,
        with a CorruptDataWarning (host arrays only)."""
        from ..._foundation import device as _device

        _dicom_pixels.check_on_corrupt(on_corrupt)
        ordinal = _device.parse_device(device)
        if ordinal is not None and out is not None:
            raise ValueError("out is a host array: it cannot be combined with a device")
        if ordinal is not None:
            _device.require_device(ordinal)
            if on_corrupt != "raise":
                raise InvalidArgumentError("on_corrupt='warn' reads into a host array: leave "
                                           "device unset, or use on_corrupt='raise'")
        if self._s.problem:
            raise FormatError(f"series {self.series_number} ({self.series_description!r}, "
                              f"{self.series_instance_uid}) cannot be assembled: {self._s.problem}")
        if dtype is None:
            dt = self.stored_dtype
        else:
            dt = np.dtype(dtype)
            if dt not in _FLOATS and dt != self.stored_dtype:
                raise InvalidArgumentError(f"dtype must be float32, float64 or None (stored "
                                           f"{self.stored_dtype}), not {dt}")
        if ordinal is not None:
            if dt.names:
                raise InvalidArgumentError("a colour (rgb24) series reads into a host array "
                                           "only: leave device unset")
            arr = _device.empty(ordinal, self.shape, dt)
            arr.decode_dicom_series(self._s, self._threads if threads is None else threads)
            return arr
        if out is None:
            out = _pool.empty(self.shape, dt, "F")
        elif out.shape != self.shape or out.dtype != dt or not out.flags.f_contiguous:
            raise InvalidArgumentError(
                f"out must be a Fortran-ordered {dt} array of shape {self.shape}")
        # Colour (rgb24): the structured array's bytes, as a uint8 array the binding takes.
        target, name = ((out.reshape(-1, order="F").view(np.uint8), "rgb24") if dt.names
                        else (out, dt.name))
        _dicom_pixels.warn_all(_core.dicom_read_series(
            self._s, target, name, threads=self._threads if threads is None else threads,
            on_corrupt=on_corrupt))
        return out

    def load(self, dtype: npt.DTypeLike | None = np.float32, threads: int | None = None, *,
             on_corrupt: Literal["raise", "warn"] = "raise") -> Nifti1Image:
        """The series as an in-memory ``vp.Nifti1Image`` (data from ``get_data(dtype)``, the RAS
        affine as sform and qform, zooms, TR for 4D); ``img.dicom`` is this object.
        ``on_corrupt`` as in ``get_data``."""
        data = self.get_data(dtype, threads=threads, on_corrupt=on_corrupt)
        img = Nifti1Image(data, self.affine)
        zooms: list[float] = [self.pixel_spacing[1], self.pixel_spacing[0], self.slice_spacing]
        if data.ndim == 4:
            tr = self.dataset.get("RepetitionTime")
            zooms.append(float(tr) / 1000.0 if tr else 1.0)
            img.header["xyzt_units"] = 2 | 8  # mm, sec
        else:
            img.header["xyzt_units"] = 2  # mm
        img.header.set_zooms(zooms)
        if self.no_geometry:
            # In no patient frame: codes 0 (unknown), as the commands and dcm2niix write it.
            # (update_affine=False: with both codes 0 nibabel's best affine would be its
            # pixdim fallback, not this one.)
            img.set_sform(self.affine, code=0, update_affine=False)
            img.set_qform(self.affine, code=0, update_affine=False)
        img.dicom = self  # type: ignore[attr-defined]
        return img

    def __repr__(self) -> str:
        part = f" [{self.split}]" if self.split else ""
        state = f" PROBLEM: {self.problem}" if self.problem else ""
        return (f"<vp.dicom.Series {self.series_number} {self.series_description!r}{part} "
                f"{self.modality} shape={self.shape} {self.stored_dtype}{state}>")


def unpickled_series(names: list[str], etags: list[str | None] | None,
                     storage_options: Mapping[str, Any] | None, threads: int, uid: str,
                     split: str, files: list[tuple[str, int]]) -> Series:
    """A Series from its pickled files, scanned again when first used."""
    series = Series(None, threads, storage_options=storage_options)
    series._pickled = (names, etags, storage_options, threads, uid, split, files)
    return series


class ScanResult(list[Series]):
    """The series found (a list of Series), and ``skipped``: (path, why) of every file left out
    (not DICOM, no pixel data, unreadable)."""

    skipped: list[tuple[str, str]]


def scan(paths: StrPath | Iterable[StrPath], threads: int | None = None, recursive: bool = True,
         strict: bool = False, *, storage_options: Mapping[str, Any] | None = None) -> ScanResult:
    """Parse every file under ``paths`` (a file, a folder, or a list of them) in parallel and
    assemble the series: grouped by SeriesInstanceUID, split by orientation, size, echo, stack;
    sorted along the slice normal; 4D when every position holds the same number of images
    (ordered by temporal index, acquisition number and time, trigger time, instance number).
    Series that cannot be assembled (a missing slice, uneven spacing, duplicates) are listed with
    their ``problem``. Files that are not DICOM are skipped unless ``strict``.

    ``paths`` may be URLs instead (``s3://``, ``gs://``, ``az://``, ``https://``...; needs
    ``pip install 'voxpipe[s3]'``): a prefix (``s3://bucket/study/``) is listed as a folder is
    scanned, an object URL is one file, and a URL with no object by its name is taken as a
    prefix. The objects are fetched whole, concurrently, each pinned to the ETag its listing
    gave, and scanned from memory; series' files and errors name them by URL.
    ``storage_options`` configures the store as in ``vp.load(url, storage_options=...)``."""
    threads = threads or 0
    items: list[StrPath] = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if _remote_dicom.is_remote(items):
        objects = _remote_dicom.fetch_all([str(p) for p in items], storage_options, recursive)
        result = _core.dicom_scan_buffers([o.url for o in objects], [o.data for o in objects],
                                          threads=threads, strict=strict)
        by_url = {o.url: o for o in objects}
        out = ScanResult(Series(s, threads, {name: by_url[name] for name, _ in s.files},
                                storage_options) for s in result.series)
        out.skipped = list(result.skipped)
        return out
    if storage_options:
        raise TypeError("storage_options applies to URLs (s3://, gs://, az://, https://...) only")
    result = _core.dicom_scan([os.fspath(p) for p in items], threads=threads,
                              recursive=recursive, strict=strict)
    out = ScanResult(Series(s, threads) for s in result.series)
    out.skipped = list(result.skipped)
    return out


def load_dicom(paths: StrPath | Iterable[StrPath], series: int | str | None = None,
               dtype: npt.DTypeLike | None = np.float32, threads: int | None = None, *,
               on_corrupt: Literal["raise", "warn"] = "raise",
               storage_options: Mapping[str, Any] | None = None) -> Nifti1Image:
    """A DICOM series as a ``vp.Nifti1Image``: the data (float32 with each image's rescale by
    default; ``dtype=None`` for the stored values), the RAS affine nibabel.nicom and dcm2niix
    agree on, and ``img.dicom`` (the Series: metadata, files, geometry checks).

    ``paths``: a folder, a file, or a list of them; or URLs, a prefix (``s3://bucket/series/``)
    or objects, read as ``vp.dicom.scan`` reads them (``storage_options`` as there).
    ``series``: which series when there are several: its index in ``vp.dicom.scan(paths)``, its
    SeriesNumber (an int that is not an index is taken as one), or its SeriesInstanceUID. Raises
    FormatError when the series cannot be assembled (naming why), or when several series are
    found and none is chosen.
    ``on_corrupt``: a compressed image its decoder reports damaged (libjpeg's "Corrupt JPEG
    data", OpenJPEG's damage warnings) raises CorruptError ('raise', the default), or 'warn':
    what the decoder recovers, with a voxpipe.errors.CorruptDataWarning.

    >>> from pydicom.data import get_testdata_file  # one CT slice: a series of one image
    >>> img = vp.load_dicom(get_testdata_file("CT_small.dcm"))
    >>> img.shape, img.get_data_dtype(), img.dicom.modality
    ((128, 128, 1), dtype('<f4'), 'CT')
    """
    _dicom_pixels.check_on_corrupt(on_corrupt)
    found = scan(paths, threads=threads, storage_options=storage_options)
    if not found:
        raise FormatError(f"no DICOM images found under {paths!r} "
                          f"({len(found.skipped)} files skipped)")
    chosen = None
    if series is None:
        readable = [s for s in found if not s.problem]
        if len(found) == 1:
            chosen = found[0]
        elif len(readable) == 1 and len(found) == 1:
            chosen = readable[0]
        else:
            listing = "\n".join(f"  [{i}] {s!r}" for i, s in enumerate(found))
            raise InvalidArgumentError(
                f"{len(found)} series found; choose one with series=INDEX, SeriesNumber or "
                f"SeriesInstanceUID:\n{listing}")
    elif isinstance(series, str):
        matches = [s for s in found if s.series_instance_uid == series]
        if len(matches) != 1:
            raise InvalidArgumentError(
                f"{len(matches)} series parts have SeriesInstanceUID {series}")
        chosen = matches[0]
    else:
        if 0 <= series < len(found):
            chosen = found[series]
        else:
            matches = [s for s in found if s.series_number == series]
            if len(matches) != 1:
                raise InvalidArgumentError(f"{len(matches)} series have SeriesNumber {series}")
            chosen = matches[0]
    return chosen.load(dtype, threads=threads, on_corrupt=on_corrupt)
