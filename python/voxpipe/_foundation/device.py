"""Device (GPU) loading: the status report, the device argument, and the DLPack-exporting array.

A ``DeviceArray`` is memory on a CUDA device (or, for tests of the export, on the host) with a
shape, a dtype and strides; ``torch.from_dlpack`` / ``cupy.from_dlpack`` take it without a copy.
Every load to the device is synchronous: when the call returns, the data are complete on the
device, so a consumer may use them on any stream (the ``stream`` argument of ``__dlpack__``
needs no event and is only checked). See docs/python.md, "Loading to the GPU".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt
from nibabel.dataobj_images import DataobjImage

from .native import core as _core
from .types import Array, Device
from .errors import DeviceUnavailableError

_KDLCPU, _KDLCUDA = 1, 2


@dataclasses.dataclass(frozen=True)
class CudaStatus:
    """Whether the CUDA path can run in this process, and if not, why (docs/gpu.md)."""

    available: bool
    reason: str
    kernels_built: bool
    driver_version: int
    device_count: int
    device_names: tuple[str, ...]
    cufile_available: bool
    cufile_reason: str


def cuda_status() -> CudaStatus:
    """The CUDA status of this process, probed once (loads libcuda.so.1 and calls cuInit on the
    first call; never raises)."""
    d = _core.cuda_status()
    return CudaStatus(available=d["available"], reason=d["reason"],
                      kernels_built=d["kernels_built"], driver_version=d["driver_version"],
                      device_count=d["device_count"], device_names=tuple(d["device_names"]),
                      cufile_available=d["cufile_available"], cufile_reason=d["cufile_reason"])


@dataclasses.dataclass(frozen=True)
class CufileStatus:
    """What cuFile (GPUDirect Storage) does in this process (docs/gpu.md, "cuFile")."""

    usable: bool   # cuFileDriverOpen succeeded
    gds: bool      # the storage DMAs to the GPU (nvidia-fs or P2PDMA), not compatibility mode
    library: str   # the library loaded
    reason: str
    policy: str    # $VOXPIPE_CUFILE: "auto", "on" or "off"


def cufile_status(device: Device = "cuda") -> CufileStatus:
    """Open cuFile's driver on `device` (once per process, as the first load that may read
    through it would) and say whether it runs GPUDirect Storage. Raises DeviceUnavailableError
    without a GPU."""
    ordinal = parse_device(device)
    if ordinal is None:
        raise ValueError("cufile_status needs a CUDA device, not the host")
    require_device(ordinal)
    return CufileStatus(**_core.cufile_status(ordinal))


def _wheel_cufile() -> str | None:
    """libcufile.so.0 of the nvidia-cufile wheel (a PyTorch dependency), where installed."""
    import sys
    from pathlib import Path

    for entry in sys.path:
        lib = Path(entry or ".") / "nvidia" / "cufile" / "lib" / "libcufile.so.0"
        try:
            if lib.is_file():
                return str(lib)
        except OSError:
            continue
    return None


def _find_cufile() -> None:
    """Point the C++ layer at the wheel's libcufile.so.0 unless $VOXPIPE_CUFILE_LIBRARY says
    otherwise (it is loaded only when a load may use it)."""
    import os

    if not os.environ.get("VOXPIPE_CUFILE_LIBRARY"):
        lib = _wheel_cufile()
        if lib:
            _core._set_default_cufile_library(lib)


_find_cufile()


def cuda_empty_cache() -> None:
    """Free what voxpipe keeps per device between loads to the GPU: the kernel module, idle
    pinned host buffers and idle device staging areas (each up to 256 MiB, or the most ever in
    use at once where loads ran side by side), and its retain of the primary context. Like ``torch.cuda.empty_cache()``; the next load pays for them
    again (milliseconds). Does nothing without a GPU."""
    _core.cuda_empty_cache()


def parse_device(device: Device) -> int | None:
    """None for the host (None, 'cpu', torch.device('cpu')); the CUDA ordinal for 'cuda',
    'cuda:N' or a torch.device of type cuda. ValueError for anything else. Does not check that
    the device exists (``require_device`` does)."""
    if device is None:
        return None
    if not isinstance(device, str) and type(device).__module__ == "torch" \
            and type(device).__name__ == "device":
        kind, index = device.type, device.index
        if kind == "cpu":
            return None
        if kind == "cuda":
            return 0 if index is None else int(index)
        raise ValueError(f"expected a cpu or cuda device, but received {device!r}")
    if isinstance(device, str):
        if device == "cpu":
            return None
        if device == "cuda":
            return 0
        if device.startswith("cuda:"):
            n = device[5:]
            if n.isdigit() and n.isascii():
                return int(n)
    raise ValueError(f"expected None, 'cpu', 'cuda', 'cuda:N' or a torch.device, but received "
                     f"{device!r}")


def require_device(ordinal: int) -> None:
    """Raise DeviceUnavailableError (with the status reason) unless CUDA device `ordinal` can be
    used here."""
    s = cuda_status()
    if not s.available:
        raise DeviceUnavailableError(f"CUDA device {ordinal} requested, but CUDA is not "
                                     f"available: {s.reason}", field="device")
    if ordinal >= s.device_count:
        raise DeviceUnavailableError(f"CUDA device {ordinal} requested, but this machine has "
                                     f"{s.device_count} CUDA device(s)", field="device")


def _f_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Fortran-order strides in elements."""
    out, acc = [], 1
    for s in shape:
        out.append(acc)
        acc *= int(s)
    return tuple(out)


class DeviceArray:
    """An array in device memory (``device`` 'cuda:N'), or host memory ('cpu', tests only),
    exported through DLPack. ``strides`` are in bytes, as NumPy's; the DLPack strides are the
    same in elements. ``a[i]`` is item i along axis 0 (a view of the same memory)."""

    __slots__ = ("_memory", "_offset", "_shape", "_dtype", "_strides", "_view")

    def __init__(self, memory: Any, offset: int, shape: Sequence[int], dtype: npt.DTypeLike | None,
                 strides: Sequence[int]) -> None:
        self._memory = memory
        self._offset = int(offset)
        self._shape = tuple(int(s) for s in shape)
        self._dtype = np.dtype(dtype)
        self._strides = tuple(int(s) for s in strides)  # elements
        self._view: Any = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._dtype

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(s * self._dtype.itemsize for s in self._strides)

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        return math.prod(self._shape)

    @property
    def nbytes(self) -> int:
        return self.size * self._dtype.itemsize

    @property
    def device(self) -> str:
        return f"cuda:{self._memory.ordinal}" if self._memory.on_device else "cpu"

    def copy_from_host(self, arr: np.ndarray) -> None:
        """Fill this array with `arr`'s values (same shape; cast to this dtype, native order)."""
        if tuple(arr.shape) != self._shape:
            raise ValueError(f"expected shape {self._shape}, but received {arr.shape}")
        host = np.asarray(arr, dtype=self._dtype.newbyteorder("="))
        if self._strides == _f_strides(self._shape):
            flat = np.asfortranarray(host).reshape(-1, order="F")
        else:
            flat = np.ascontiguousarray(host).reshape(-1)
        if flat.size:
            self._memory.copy_from_host(self._offset, flat.view(np.uint8))

    def decode_nifti(self, image: Any, apply_scaling: bool, real_part: bool, threads: int,
                     index_mode: str, index_path: str) -> None:
        """Decode a whole opened NIfTI image (the core's) into this F-ordered array, converted
        on the device (the reader's conversions, as on the host)."""
        _core.nifti_to_device(self._memory, self._offset, image, self._dtype.name, apply_scaling,
                              real_part, threads, index_mode, index_path)

    def decode_dicom_series(self, series: Any, threads: int) -> None:
        """Decode a whole assembled DICOM series (the core's) into this F-ordered array,
        converted on the device."""
        _core.dicom_series_to_device(self._memory, self._offset, series, self._dtype.name,
                                     threads=threads)

    def _exported(self) -> Any:
        if self._view is None:
            self._view = self._memory.view(self._offset, list(self._shape), list(self._strides),
                                           self._dtype.name)
        return self._view

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_KDLCUDA, self._memory.ordinal) if self._memory.on_device else (_KDLCPU, 0)

    def __dlpack__(self, *, stream: int | None = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> object:
        """A DLPack capsule of this memory: versioned ("dltensor_versioned") when max_version
        allows DLPack 1.x, else legacy ("dltensor"). The data are already complete, so any
        `stream` is valid without synchronisation (None, -1, 1, 2 or a stream pointer on CUDA;
        None on the host). copy=True raises BufferError: the export never copies."""
        if stream is not None:
            if not self._memory.on_device:
                raise ValueError(f"stream must be None for host memory, but received {stream!r}")
            if not isinstance(stream, int) or stream == 0 or stream < -1:
                raise ValueError(f"expected a CUDA stream (None, -1, 1, 2 or a pointer), but "
                                 f"received {stream!r}")
        capsule: object = self._exported().__dlpack__(max_version=max_version,
                                                      dl_device=dl_device, copy=copy)
        return capsule

    def __getitem__(self, i: int | np.integer[Any]) -> DeviceArray:
        if not isinstance(i, (int, np.integer)) or not self._shape:
            raise TypeError("DeviceArray supports integer indexing along the first axis only")
        n = self._shape[0]
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {i} is out of bounds for axis 0 with size {n}")
        return DeviceArray(self._memory, self._offset + i * self._strides[0] * self._dtype.itemsize,
                           self._shape[1:], self._dtype, self._strides[1:])

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d array")
        return self._shape[0]

    def cpu(self) -> Array:
        """A NumPy copy (device to host, synchronous), with the same strides."""
        if self.size == 0:
            return np.empty(self._shape, self._dtype)
        itemsize = self._dtype.itemsize
        extent = itemsize * (1 + sum((s - 1) * st for s, st in zip(self._shape, self._strides)))
        raw = np.empty(extent, np.uint8)
        self._memory.copy_to_host(self._offset, raw)
        return np.ndarray(self._shape, self._dtype, buffer=raw, strides=self.strides)

    numpy = cpu

    def __repr__(self) -> str:
        return f"<DeviceArray shape={self._shape} dtype={self._dtype} device={self.device}>"


def _new(ordinal: int | None, shape: Sequence[int], dtype: npt.DTypeLike | None,
         strides: Sequence[int] | None = None) -> DeviceArray:
    """Uninitialised memory for an array (F order unless strides are given, in elements)."""
    dt = np.dtype(dtype)
    dims = tuple(int(s) for s in shape)
    nbytes = math.prod(dims) * dt.itemsize
    memory = (_core._host_memory_for_tests(nbytes) if ordinal is None
              else _core.device_memory(ordinal, nbytes))
    return DeviceArray(memory, 0, dims, dt, _f_strides(dims) if strides is None else strides)


def empty(ordinal: int, shape: Sequence[int], dtype: npt.DTypeLike) -> DeviceArray:
    """An uninitialised F-ordered array on CUDA device `ordinal`, for a whole decode."""
    return _new(ordinal, shape, dtype)


def _dlpack_dtype_ok(dtype: np.dtype[Any]) -> bool:
    return dtype.kind in "uifc" and not dtype.fields


def array_to_device(arr: npt.ArrayLike, ordinal: int | None) -> DeviceArray:
    """A device copy of a NumPy array, keeping its layout (F-contiguous arrays stay F-ordered;
    other layouts are made C-contiguous first). Native byte order only."""
    arr = np.asanyarray(arr)
    strides: tuple[int, ...]
    if not _dlpack_dtype_ok(arr.dtype):
        raise TypeError(f"cannot export {arr.dtype} through DLPack")
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.flags.f_contiguous and not arr.flags.c_contiguous:
        strides = _f_strides(arr.shape)
        flat = arr.reshape(-1, order="F")
    else:
        arr = np.ascontiguousarray(arr)
        strides = tuple(s // arr.dtype.itemsize for s in arr.strides) if arr.ndim else ()
        flat = arr.reshape(-1)
    out = _new(ordinal, arr.shape, arr.dtype, strides)
    if arr.size:
        out._memory.copy_from_host(0, flat.view(np.uint8))
    return out


def _host_data(dataobj: npt.ArrayLike, dtype: npt.DTypeLike | None) -> Array:
    """What the host path gives: np.asanyarray(dataobj[, dtype])."""
    if dtype is None:
        return np.asanyarray(dataobj)
    return np.asanyarray(dataobj, dtype=dtype)


def _decodes(dataobj: object) -> bool:
    """Whether a data object decodes into device arrays itself (voxpipe's ArrayProxy, known
    by its doorway so that this module needs no import of the image module)."""
    return hasattr(dataobj, "read_into") and hasattr(dataobj, "result_dtype")


def _out_dtype(dataobj: Any, dtype: npt.DTypeLike | None) -> np.dtype[Any]:
    if dtype is not None:
        d = np.dtype(dtype)
    elif _decodes(dataobj):
        d = dataobj.result_dtype()
    else:  # an image made in memory
        d = np.asanyarray(dataobj).dtype
    d = d.newbyteorder("=")
    if not _dlpack_dtype_ok(d):
        raise TypeError(f"cannot load {d} to a device: DLPack has no such dtype")
    return d


def proxy_to_device(dataobj: Any, dtype: npt.DTypeLike | None, ordinal: int | None) -> DeviceArray:
    """A data object's values (as the host path gives them for `dtype`; None: the natural
    dtype) in a new F-ordered device array. `ordinal` None: host memory (tests of the export)."""
    if ordinal is not None:
        require_device(ordinal)
    out_dtype = _out_dtype(dataobj, dtype)
    if not _decodes(dataobj) or ordinal is None:
        # An image made in memory (its array's layout), or host memory for tests: the host
        # path's array, copied.
        return array_to_device(_host_data(dataobj, dtype), ordinal)
    out = _new(ordinal, dataobj.shape, out_dtype)
    dataobj.read_into(out)
    return out


def image_to_device(img: DataobjImage, dtype: npt.DTypeLike | None, ordinal: int | None) -> DeviceArray:
    """img's data on a device (proxy_to_device of its data object)."""
    return proxy_to_device(img.dataobj, dtype, ordinal)


def batch_to_device(imgs: Sequence[DataobjImage], dtype: npt.DTypeLike | None, ordinal: int,
                    run: Callable[[Callable[[int], None]], object]) -> DeviceArray:
    """Images of one shape decoded into one (n, *shape) device array whose items are F-ordered
    (the layout of vp.empty_batch). ``run(load_item)`` must call ``load_item(i)`` once for every
    image i and raise what those calls raise (load_batch runs them on its file workers, several
    at once); each call writes only item i's bytes of the array, so calls on several threads at
    once are safe. Every call is complete on the device when it returns."""
    require_device(ordinal)
    shape = tuple(imgs[0].shape)
    out_dtype = _out_dtype(imgs[0].dataobj, dtype)
    item = _f_strides(shape)
    volume = math.prod(shape)
    out = _new(ordinal, (len(imgs),) + shape, out_dtype, (volume,) + item)

    def load_item(i: int) -> None:
        dataobj: Any = imgs[i].dataobj
        if _decodes(dataobj):
            dataobj.read_into(out[i])
        else:  # an image made in memory
            out[i].copy_from_host(np.asanyarray(dataobj, dtype=out_dtype))

    run(load_item)
    return out


@overload
def to_device(obj: DataobjImage | npt.ArrayLike, device: None,
              dtype: npt.DTypeLike | None = ...) -> Array: ...
@overload
def to_device(obj: DataobjImage | npt.ArrayLike, device: Device = ...,
              dtype: npt.DTypeLike | None = ...) -> DeviceArray | Array: ...
def to_device(obj: DataobjImage | npt.ArrayLike, device: Device = "cuda",
              dtype: npt.DTypeLike | None = None) -> DeviceArray | Array:
    """An image's data (as ``np.asanyarray(img.dataobj, dtype)``), or a NumPy array (cast to
    `dtype` when given), on `device`. For the host (None/'cpu') the NumPy array itself."""
    ordinal = parse_device(device)
    if hasattr(obj, "dataobj") and hasattr(obj, "affine"):  # a nibabel image
        img: Any = obj
        if ordinal is None:
            return _host_data(img.dataobj, dtype)
        return image_to_device(img, dtype, ordinal)
    arr = np.asanyarray(obj)
    if dtype is not None:
        arr = arr.astype(dtype, copy=False)
    if ordinal is None:
        return arr
    require_device(ordinal)
    return array_to_device(arr, ordinal)
