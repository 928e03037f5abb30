"""Images, the lazy array proxy, load and save: nibabel's API over the C++ core."""

from __future__ import annotations

import gzip
import io
import os
import threading
import warnings
import zlib

from collections.abc import Mapping
from typing import IO, Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

import nibabel as nib
from nibabel import imageglobals
from nibabel.arrayproxy import ArrayLike
from nibabel.batteryrunners import BatteryRunner
from nibabel.fileholders import FileHolder, copy_file_map
from nibabel.nifti1 import Nifti1Extension, extension_codes

from . import _core, _device, _remote, _zarr, _zarr_write
from ._header import _NAME_TO_DTYPE, Nifti2Header, convert_header, core_dtype_name
from ._redact import redact
from ._device import DeviceArray
from ._slicing import empty_for, nibabel_segments, plan, read_shape, reads_whole
from ._types import Array, Device, NiftiImage, StrPath
from .errors import FormatError, InvalidArgumentError, TruncatedError, VoxpipeError

# read_into gives back what it was given: a NumPy array or a DeviceArray.
_Out = TypeVar("_Out", Array, DeviceArray)

# Outputs the reader casts, swaps and scales into itself.
_FAST_OUTPUTS = frozenset(np.dtype(c) for c in ("f4", "f8", "c8", "c16"))


# Header extensions are nibabel's: Extension(code, content) makes one.
Extension = Nifti1Extension


# Per process: a child gets a fresh lock (the parent's could be held by a thread that is not
# copied).
_fork_lock = threading.Lock()


def _after_fork_in_child():
    global _fork_lock
    _fork_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def working_directory() -> str:
    """This process's working directory, as an opener records it: the folder the relative names
    it opened are relative to, joined to them wherever a name leaves the process (a pickle's
    receiver may run in another folder, and this process may change its own before it pickles).
    "" where it no longer exists: only absolute names open then, and a join leaves them as
    they are."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        return ""


def _as_bytes_view(arr: np.ndarray) -> np.ndarray:
    """A flat uint8 view of an F-contiguous array's memory (any dtype, structured included)."""
    flat = arr.reshape(-1, order="F")
    return flat.view(np.uint8)


class ArrayProxy(ArrayLike):
    """Lazy access to the voxel data of a file (nibabel's ArrayProxy contract).

    ``np.asarray(proxy)`` and ``proxy[slicer]`` read from the file each time, only the bytes
    needed. What comes back is what nibabel returns: for uncompressed, unscaled data read whole
    with ``mmap`` enabled, an ``np.memmap`` of the file (copy-on-write for True/'c', read-only
    for 'r'); otherwise a NumPy array owning its memory, read-only where nibabel's would be.
    ``keep_file_open``: True keeps one reader (open data file, gzip member table or seek index)
    for the proxy's lifetime; False or None (nibabel's default) opens an uncompressed file for
    each access and closes it before returning. gzip data always keep their reader from the
    first access on, as nibabel keeps its indexed_gzip opener for .gz files whatever
    keep_file_open says: a stream keeps its position and its member table or index, so a loop
    over volumes inflates the file once instead of once per volume.
    """

    @property
    def is_proxy(self) -> bool:
        """True, read-only (nibabel's proxy contract: assigning it raises AttributeError)."""
        return True

    def __init__(self, core_image, threads: int = 0, index_mode: str = "auto",
                 index_path: str = "", *, mmap=True, keep_file_open=None, source=None,
                 opened_in=None):
        self._img = core_image
        # The bytes an in-memory image was opened from (None for a file): what it pickles as.
        self._source = source
        # The working directory the file was opened from (copies keep the original's): the
        # file's names as given stay what users see, these absolute ones are what leaves.
        self._opened_in = working_directory() if opened_in is None else opened_in
        self._threads = threads
        self._index = (index_mode, index_path)
        self._mmap = mmap
        self._keep_file_open = bool(keep_file_open)
        self._kept_reader = None
        self._reader_lock = threading.Lock()
        self._reader_pid = os.getpid()
        self._shape = tuple(core_image.shape)
        raw = _NAME_TO_DTYPE[core_image.dtype]
        if raw.fields is None:
            raw = raw.newbyteorder(">" if core_image.big_endian else "<")
        self._dtype = raw

    # -- copies and pickles -----------------------------------------------------------------
    def _options(self):
        mode, index_path = self._index
        if mode == "path":
            index_path = self._absolute(index_path)
        return dict(threads=self._threads, index=(mode, index_path), mmap=self._mmap,
                    keep_file_open=self._keep_file_open, shape=self._shape)

    def _absolute(self, path: str) -> str:
        """`path`, a name this proxy's file was opened by, as it names the same file from any
        working directory. Not normalised: a "link/.." resolves as it did at open time."""
        return os.path.join(self._opened_in, path)

    def _files(self) -> tuple[str, str]:
        """The absolute names of the header and data files (the same file for a .nii)."""
        return self._absolute(self._img.header_path), self._absolute(self._img.data_path)

    def __copy__(self):
        """A proxy of the same opened image (headers are immutable) with its own reader."""
        new = type(self)(self._img, self._threads, *self._index, mmap=self._mmap,
                         keep_file_open=self._keep_file_open, source=self._source,
                         opened_in=self._opened_in)
        new._shape = self._shape
        return new

    def copy(self):
        """nibabel's ArrayProxy.copy: a proxy of the same file and options."""
        return self.__copy__()

    def reshape(self, shape):
        """nibabel's ArrayProxy.reshape: a proxy of the same stored values under another shape
        of the same size (one axis may be -1), in the file's (Fortran) order, still lazy.
        nibabel's CIFTI-2 loader and MGH writer reshape data objects this way. Adding or
        dropping length-1 axes keeps reads of slices to the bytes they need; any other shape
        reads the whole data for a slice."""
        size = int(np.prod(self._shape))
        shape = tuple(int(d) for d in shape)
        unknown = [i for i, d in enumerate(shape) if d == -1]
        if len(unknown) > 1:
            raise ValueError("can only specify one unknown dimension")
        if unknown:
            known = -int(np.prod(shape))
            shape = tuple(size // known if d == -1 else d for d in shape)
        if int(np.prod(shape)) != size:
            raise ValueError(f"cannot reshape array of size {size:d} into shape {shape!s}")
        new = self.__copy__()
        new._shape = shape
        return new

    def _stored_ranges(self, ranges):
        """Ranges over this proxy's shape as ranges over the stored image's shape, or None where
        a reshape mixes axes (the selection is then cut out of the whole data)."""
        stored = tuple(self._img.shape)
        if self._shape == stored:
            return ranges
        if [d for d in self._shape if d != 1] != [d for d in stored if d != 1]:
            return None
        if any(count == 0 for _, _, count in ranges):  # nothing to read, whatever the axes
            return [(0, 1, 0)] + [(0, 1, d) for d in stored[1:]]
        kept = iter(r for r, d in zip(ranges, self._shape) if d != 1)
        return [(0, 1, 1) if d == 1 else next(kept) for d in stored]

    def __deepcopy__(self, memo):
        return self.__copy__()

    def __reduce__(self):
        # The file's absolute name and the options, never the data: the receiver opens the
        # header again, in whatever folder it runs.
        # An image from memory has no name to send: its bytes go, as a nibabel proxy over a
        # BytesIO pickles its bytes.
        if not self._img.data_in_file:
            if isinstance(self._source, _remote.RemoteObject):
                # An object fetched whole (many-file loaders): the same, as a ranged open.
                src = self._source
                return (_reopened_remote_proxy, (src.url, src.storage_options, src.etag,
                                                 self._options()))
            if isinstance(self._source, _remote.RemoteFile):
                # An object from a URL: its URL, store options and ETag, never its bytes; the
                # receiver opens that version again (and fails if the object changed).
                src = self._source
                data = src.partner
                return (_reopened_remote_proxy,
                        (src.url, src.storage_options, src.etag, self._options(),
                         data.url if data else None, data.etag if data else None,
                         src.filesystem))
            if self._source is not None:
                return (_reopened_proxy, (self._img.data_path, self._options(),
                                          bytes(self._source)))
            raise TypeError("an image opened from memory does not pickle: save it to a file, or "
                            "pickle np.asanyarray(img.dataobj)")
        return (_reopened_proxy, (self._files()[0], self._options(), None,
                                  (_THIS_MACHINE, self._img.header_identity,
                                   self._img.data_identity)))

    def __dask_tokenize__(self):
        """What identifies the values this proxy reads, for dask's deterministic names: where
        they are (a file's path, size, mtime and inode; an object's URL and ETag; an image from
        memory, a hash of its bytes) and the shape. Cheap: no data is read."""
        from ._dask import proxy_token
        return proxy_token(self)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._dtype

    @property
    def slope(self):
        return self._img.slope

    @property
    def inter(self):
        return self._img.inter

    @property
    def offset(self):
        return self._img.data_offset

    @property
    def file_like(self):
        return self._img.data_path

    def _scaled(self):
        return (self._img.slope, self._img.inter) != (1.0, 0.0)

    # -- files ----------------------------------------------------------------------------------
    def _open_reader(self):
        """A reader of the data file whose size has been checked against the header, so that a
        missing or short file fails before any output is allocated. With keep_file_open, one
        reader made on first use and kept (always for gzip data); otherwise a new one for the
        caller to drop."""
        if not self._keep_file_open and not self._img.gzip:
            return self._new_reader()
        if self._reader_pid != os.getpid():
            self._forget_parent_reader()
        with self._reader_lock:
            if self._kept_reader is None:
                self._kept_reader = self._new_reader()
            return self._kept_reader

    def _new_reader(self):
        remote = isinstance(self._source, _remote.RemoteFile)
        if remote and self._index[0] == "auto" and self._img.gzip:
            # An object: the seek index of this version in the cache, or its sidecar object,
            # looked up first (with one, even sized members are found without a request per
            # member). One that does not match the object (stale, damaged) is dropped, as
            # locally, and the read goes on without it.
            args = self._source.data_file.index_args()
            reader = None
            if args[0] == "path":
                try:
                    reader = _core.Reader(self._img, *args)
                except (InvalidArgumentError, FormatError, TruncatedError):
                    self._source.data_file.forget_index()
            if reader is None:
                reader = _core.Reader(self._img, "none", "")
        else:
            reader = _core.Reader(self._img, *self._index)
        reader.check_data_size()
        return reader

    def _forget_parent_reader(self):
        """In a forked child (multiprocessing, DataLoader workers): a lock and reader of its own.
        The parent's may have been in use by a thread that does not exist here, their locks
        held for good and a gzip stream half-advanced: the reader is never used, nor destroyed
        (which would touch that state), not even at exit."""
        with _fork_lock:
            if self._reader_pid == os.getpid():
                return  # another thread of this child got here first
            if self._kept_reader is not None:
                _core.keep_forever(self._kept_reader)
            self._kept_reader = None
            self._reader_lock = threading.Lock()
            self._reader_pid = os.getpid()

    def _gzip_reader(self):
        """The reader an access would use now, for gzip data (None otherwise): whether it found
        a member table or an index shows in its ``random_access``."""
        return self._open_reader() if self._img.gzip else None

    def _map(self):
        """nibabel's array_from_file with mmap: the whole data as an np.memmap of the file, or
        None where nibabel reads instead (mmap=False, gzip data, a file that cannot be mapped).
        A short or missing file gives None here and a voxpipe error from the read that follows.
        The file mapped is the one opened (VoxpipeIOError otherwise, as for reads); what happens
        to it afterwards shows in the map, as in nibabel's (cut shorter, a touch of the part
        cut away is SIGBUS)."""
        if not self._mmap or self._img.gzip or not self._img.data_in_file:
            return None
        try:
            # Non-blocking: opening a FIFO put in the file's place does not wait for a writer.
            f = open(self._img.data_path, "rb", opener=_open_nonblocking)
        except OSError:
            return None
        with f:
            # One fstat; a FIFO or another file is not the file opened.
            _core.check_data_file(self._img, f.fileno())
            try:
                return np.memmap(f, dtype=self._dtype,
                                 mode="c" if self._mmap is True else self._mmap,
                                 shape=self._shape, order="F", offset=self._img.data_offset)
            except (AttributeError, TypeError, ValueError, OSError):
                return None

    def _read(self, ranges, dtype: np.dtype, apply_scaling: bool, file_order: bool,
              real_part: bool = False, out: np.ndarray | None = None, subtype=np.ndarray):
        shape = read_shape(ranges)
        if out is not None and (out.shape != shape or out.dtype != dtype
                                or not out.flags.f_contiguous):
            raise ValueError(f"out must be an F-contiguous {dtype} array of shape {shape}, "
                             f"but is {out.dtype} {out.shape}")
        stored = self._stored_ranges(ranges)
        if stored is None:
            whole = self._read_stored([(0, 1, d) for d in self._img.shape], dtype,
                                      apply_scaling, file_order, real_part, None, self._shape)
            part = whole[tuple(slice(start, start + step * count if start + step * count >= 0
                                     else None, step) for start, step, count in ranges)]
            if out is None:
                out = empty_for(shape, dtype, subtype)
            out[...] = part
            return out
        return self._read_stored(stored, dtype, apply_scaling, file_order, real_part, out, shape,
                                 subtype)

    def _read_stored(self, stored, dtype, apply_scaling, file_order, real_part, out, shape,
                     subtype=np.ndarray):
        """Decode the ranges `stored` (over the stored image's axes) into `out`, or into a new
        array of `shape`, allocated once the file has been checked."""
        reader = self._open_reader()
        try:
            if out is None:
                out = empty_for(shape, dtype, subtype)
            reader.read(stored, core_dtype_name(dtype), apply_scaling, file_order,
                        real_part, _as_bytes_view(out), self._threads)
        finally:
            # Not kept: the last reference goes here, which closes the file.
            del reader
        return out

    def _full_ranges(self):
        return [(0, 1, d) for d in self._shape]

    # -- voxpipe's doorway -------------------------------------------------------------------------
    @property
    def threads(self) -> int:
        """Threads for large reads (0: the default, docs/python.md "Thread count")."""
        return self._threads

    @property
    def random_access(self) -> bool:
        """Whether any part of the data is read without decoding what comes before it
        (uncompressed data, voxpipe's sized gzip members, or a seek index)."""
        return not self._img.gzip or self._open_reader().random_access

    def result_dtype(self, dtype: npt.DTypeLike = None, scaling: bool = True) -> np.dtype[Any]:
        """The dtype ``read`` gives for `dtype`: itself when given; otherwise, with `scaling`,
        the dtype of ``np.asanyarray(proxy)`` (the stored one, or nibabel's float for scaled
        data), without it the stored dtype (byte order included)."""
        if dtype is not None:
            return np.dtype(dtype)
        return self._natural_dtype() if scaling else self._dtype

    def read(self, slicer: Any = (), dtype: npt.DTypeLike = None, *, out: Array | None = None,
             device: Device = None, scaling: bool = True) -> Array | DeviceArray:
        """The values of ``proxy[slicer]`` as a new array (or in `out`), decoded in one pass.

        ``dtype``: None gives nibabel's dtype (``np.asanyarray(proxy)``'s); float32/float64 and
        complex outputs are cast, byte-swapped and scaled by the reader itself (no float64
        array first); other dtypes are cast from that result as ``np.asarray(proxy, dtype)``
        does. ``scaling=False``: the stored values, in the file's byte order (``get_unscaled``).
        ``out``: an F-contiguous array of the result's dtype and shape to decode into (e.g. a
        buffer reused across files); it is returned. ``device``: None/'cpu' for the host;
        'cuda', 'cuda:N' or a torch.device for a DeviceArray (whole reads only; docs/gpu.md).
        Unlike ``proxy[slicer]`` the result is never a memory map of the file.

        >>> proxy = vp.load("demo_bold.nii.gz").dataobj
        >>> proxy.read((..., 7), np.float32).shape
        (64, 64, 40)
        >>> out = np.empty((64, 64, 40), np.float32, order="F")  # one buffer for every volume
        >>> proxy.read((..., 8), np.float32, out=out) is out
        True
        >>> import torch  # doctest: +SKIP
        >>> t = torch.from_dlpack(proxy.read(dtype=np.float32, device="cuda"))  # doctest: +SKIP
        """
        ranges, out_shape = plan(slicer, self._shape)
        if device is not None:
            ordinal = _device.parse_device(device)
            if ordinal is not None:
                if out is not None:
                    raise ValueError("out is a host array: it cannot be combined with a device")
                if not reads_whole(slicer, self._shape) or not scaling:
                    raise ValueError("device reads take the whole image, scaled")
                return _device.proxy_to_device(self, dtype, ordinal)
        shape = read_shape(ranges)
        if out is not None:
            out_view = out.reshape(shape, order="F") if out.shape != shape else out
            if not np.shares_memory(out_view, out) and out.size:
                raise ValueError(f"out must be F-contiguous of shape {out_shape}")
        else:
            out_view = None
        if scaling:
            arr = self._get_scaled(dtype, ranges, out=out_view)
        else:
            want = self._dtype if dtype is None else np.dtype(dtype)
            arr = self._read(ranges, self._dtype, False, True, out=None if want != self._dtype
                             else out_view)
            if want != self._dtype:
                arr = arr.astype(want)
                if out_view is not None:
                    out_view[...] = arr
                    arr = out_view
        return out if out is not None else arr.reshape(out_shape, order="F")

    def read_into(self, out: _Out, slicer: Any = (), *, scaling: bool = True) -> _Out:
        """Decode ``proxy[slicer]`` into `out`, as ``out.dtype``, and return `out`: a NumPy
        array (F-contiguous, of the result's shape; as ``read(..., out=out)``) or a voxpipe
        DeviceArray (the whole image, scaled), converted on the device where the host reader
        would convert too. The one way in for every consumer: load_many, load_batch, the
        torch datasets and the device path."""
        if isinstance(out, np.ndarray):
            return self.read(slicer, out.dtype, out=out, scaling=scaling)
        if not reads_whole(slicer, self._shape) or not scaling:
            raise ValueError("device reads take the whole image, scaled")
        dtype = np.dtype(out.dtype)
        natural = self._natural_dtype()
        # The device decoder writes the stored image's shape: a reshaped proxy goes by the host.
        if natural.fields is None and self._shape == tuple(self._img.shape):
            if dtype == natural.newbyteorder("="):
                out.decode_nifti(self._img, self._scaled(), False, self._threads, *self._index)
                return out
            if self._decodes_directly(dtype):
                real_part = natural.kind == "c" and dtype.kind == "f"
                if real_part:
                    warnings.warn("Casting complex values to real discards the imaginary part",
                                  np.exceptions.ComplexWarning, stacklevel=2)
                out.decode_nifti(self._img, True, real_part, self._threads, *self._index)
                return out
        out.copy_from_host(np.asanyarray(self, dtype=dtype))
        return out

    # -- nibabel's API ---------------------------------------------------------------------------
    def get_unscaled(self, out: Array | None = None) -> Array:
        """The stored values, in the file's dtype and byte order: as nibabel, a memory map of
        the file where ``mmap`` allows. With `out` (an F-contiguous array of that dtype and
        shape, e.g. a buffer reused across files), read into it instead."""
        if out is None:
            mapped = self._map()
            if mapped is not None:
                return mapped
        return self._read(self._full_ranges(), self._dtype, False, True, out=out)

    def _natural_dtype(self):
        return _NAME_TO_DTYPE[self._img.scaled_dtype] if self._scaled() else self._dtype

    def _decodes_directly(self, dtype: np.dtype) -> bool:
        """Whether `dtype` output is decoded (cast, scaled) by the reader itself."""
        return dtype in _FAST_OUTPUTS and self._natural_dtype().fields is None

    def _get_scaled(self, dtype, ranges, out=None, subtype=np.ndarray):
        """nibabel's ArrayProxy._get_scaled, always read into a new array (or `out`): the
        natural dtype, or `dtype` where asked."""
        if dtype is None:
            if not self._scaled():
                return self._read(ranges, self._dtype, False, True, out=out)
            return self._read(ranges, self._natural_dtype(), True, False, out=out)
        dtype = np.dtype(dtype)
        if self._decodes_directly(dtype):
            real_part = self._natural_dtype().kind == "c" and dtype.kind == "f"
            if real_part:
                warnings.warn("Casting complex values to real discards the imaginary part",
                              np.exceptions.ComplexWarning, stacklevel=3)
            return self._read(ranges, dtype, True, False, real_part=real_part, out=out,
                              subtype=subtype)
        arr = self._get_scaled(None, ranges)
        arr = arr.astype(np.promote_types(arr.dtype, dtype), copy=False).astype(dtype, copy=False)
        if out is not None:
            out[...] = arr
            return out
        return arr

    def _whole(self, dtype=None):
        """What nibabel's ArrayProxy.__array__(dtype) gives. Unscaled data it memory-maps where
        it can; converting the map with astype keeps the np.memmap type, on a copy that owns
        its memory (the reader decodes that copy straight from the file)."""
        mapped = None if self._scaled() else self._map()
        if mapped is None:
            return self._get_scaled(dtype, self._full_ranges())
        if dtype is None:
            return mapped
        dtype = np.dtype(dtype)
        if np.promote_types(mapped.dtype, dtype) == mapped.dtype == dtype:
            return mapped
        if self._decodes_directly(dtype):
            del mapped
            return self._get_scaled(dtype, self._full_ranges(), subtype=np.memmap)
        arr = mapped.astype(np.promote_types(mapped.dtype, dtype), copy=False)
        return arr.astype(dtype, copy=False)

    def __array__(self, dtype: npt.DTypeLike = None, copy: bool | None = None) -> Array:
        arr = self._whole(dtype)
        if dtype is not None:
            arr = arr.astype(dtype, copy=False)
        if copy and getattr(arr, "filename", None) is not None:
            arr = np.array(arr)  # a copy was asked for: not a view of the file
        return arr

    def __getitem__(self, slicer: Any) -> Any:
        if not self._scaled():
            return self._get_unscaled(slicer)
        ranges, out_shape = plan(slicer, self._shape)
        if reads_whole(slicer, self._shape):
            return self._whole()
        return self._get_scaled(None, ranges).reshape(out_shape, order="F")

    def _get_unscaled(self, slicer):
        """nibabel's ArrayProxy._get_unscaled, which nibabel's own code calls (nib-roi's
        lossless_slice): the stored values of ``proxy[slicer]``, as nibabel's fileslice or
        array_from_file returns them."""
        ranges, out_shape = plan(slicer, self._shape)
        if reads_whole(slicer, self._shape):
            return self.get_unscaled()
        arr = self._read(ranges, self._dtype, False, True).reshape(out_shape, order="F")
        if out_shape == ():
            # nibabel indexes unscaled data down to a NumPy scalar; scaled data stay 0-d arrays.
            return arr[()]
        # nibabel wraps what fileslice read: bytes (read-only) for one segment, an anonymous
        # mmap (writable) for several.
        arr.flags.writeable = (arr.size > 0 and nibabel_segments(slicer, self._shape,
                                                                 self._dtype.itemsize) > 1)
        return arr

    def __repr__(self):
        return (f"<ArrayProxy shape={self._shape} dtype={self._dtype} "
                f"file={redact(self._img.data_path)!r}>")


def _open_nonblocking(path, flags):
    return os.open(path, flags | os.O_NONBLOCK)


def _this_machine() -> str:
    """What tells this machine (this boot of it) from others: the kernel's boot id where there
    is one, else the host name."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        import socket

        return socket.gethostname()


_THIS_MACHINE = _this_machine()


def _stat_identity(path):
    """(device, inode, size, mtime_ns) of the file `path` names now, or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _check_reopened(files, identity):
    """VoxpipeIOError unless `files` ((path, identity now) pairs) are those a pickle was made
    of (`identity`: the machine, then the header's and data's (device, inode, size, mtime_ns)).
    On another machine the device and inode say nothing (NFS numbers devices per client; a
    worker may read its own copy of the file): there the size and time are compared."""
    machine, *opened = identity
    for (path, now), was in zip(files, opened):
        if machine != _THIS_MACHINE:
            was, now = ((0, 0, *i[2:]) if i is not None else None for i in (was, now))
        _core.check_same_file(path, was, now)


def _reopened_proxy(path, options, source=None, identity=None):
    """An unpickled ArrayProxy: the file (or, with `source`, the bytes) opened again with the
    pickled options; with `identity` (pickles of files), VoxpipeIOError if the files are no
    longer those the pickle was made of: never the new file under the old header's promises."""
    index, shape = options.pop("index"), options.pop("shape", None)
    if source is None and identity is not None:
        try:
            core = _core.open(path)
        except VoxpipeError:
            # What is there now may not even be NIfTI: that it changed is the news.
            _check_reopened([(path, _stat_identity(path))], identity[:2])
            raise
        files = [(core.header_path, core.header_identity)]
        if core.data_path != core.header_path:
            files.append((core.data_path, core.data_identity))
        _check_reopened(files, identity)
    else:
        core = _core.open(path) if source is None else _core.open_bytes(source, path)
    proxy = ArrayProxy(core, options.pop("threads"), *index, source=source, **options)
    return proxy if shape is None else proxy.reshape(shape)


def _reopened_remote_proxy(url, storage_options, etag, options, data_url=None, data_etag=None,
                           filesystem=None):
    """An unpickled ArrayProxy of an object from a URL (and its .img object for a pair): the
    same versions opened again, or VoxpipeIOError if they changed."""
    core, source = _remote.open_image(url, storage_options, etag, data_url, data_etag, filesystem)
    index, shape = options.pop("index"), options.pop("shape", None)
    proxy = ArrayProxy(core, options.pop("threads"), *index, source=source, **options)
    return proxy if shape is None else proxy.reshape(shape)


# vp.load returns nibabel's own classes, not subclasses: code that tests ``type(img)`` (nibabel's
# nib.save conversions and slicer, among others) treats them as nibabel's.
_NIBABEL_CLASSES = {(1, False): nib.Nifti1Image, (2, False): nib.Nifti2Image,
                    (1, True): nib.Nifti1Pair, (2, True): nib.Nifti2Pair}


def _index_args(index):
    if index is None:
        return ("auto", "")
    if index is False:
        return ("none", "")
    if isinstance(index, (str, os.PathLike)):
        return ("path", os.fspath(index))
    raise TypeError(f"index must be None, False or a path, not {type(index).__name__}")


def _check_open_args(mmap, keep_file_open):
    if mmap not in (True, False, "c", "r"):
        raise ValueError("mmap should be one of {True, False, 'c', 'r'}")
    if keep_file_open not in (True, False, None):
        raise ValueError("keep_file_open should be one of {None, True, False}")


def _stored_header_block(core, source, size):
    """The first `size` bytes of the header as stored, before any fix: from `source` (the bytes
    of an image from memory) or the header file, inflated where gzip; None for an image from
    memory whose bytes were not kept."""
    if core.data_in_file:
        f = open(core.header_path, "rb")
    elif source is not None:
        return _leading_bytes(_remote.buffer_of(source), size)
    else:
        return None
    with f:
        if f.read(2) == b"\x1f\x8b":
            f.seek(0)
            with gzip.GzipFile(fileobj=f) as gz:
                return gz.read(size)
        f.seek(0)
        return f.read(size)


def _leading_bytes(data, size):
    """The first `size` bytes of the .nii held in `data`, inflated where gzip (member after
    member), without copying the rest: an image from memory may be hundreds of MiB."""
    view = memoryview(data).cast("B")
    if bytes(view[:2]) != b"\x1f\x8b":
        return bytes(view[:size])
    out = bytearray()
    pos, chunk = 0, 1 << 16
    inflater = zlib.decompressobj(31)
    try:
        while len(out) < size and pos < len(view):
            fed = view[pos:pos + chunk]
            out += inflater.decompress(fed)
            pos += len(fed)
            if inflater.eof:  # the next member starts in what this one left
                pos -= len(inflater.unused_data)
                inflater = zlib.decompressobj(31)
    except zlib.error:  # damage (or padding) after the header: the decoder reports it on reads
        pass
    return bytes(out[:size])


def _checked_header(klass, core, source):
    """(header, reports): `klass`'s header of `core` and the reports of nibabel's check_fix on
    it, which nibabel logs (and raises at imageglobals.error_level) when it loads the file. The
    core applied the same fixes and says so in core.warnings: only then are nibabel's checks
    run, on the header as stored, so that the messages, their levels and the fixed header are
    nibabel's own."""
    endian = ">" if core.big_endian else "<"
    if not core.warnings:
        return klass.header_class(core.header_bytes, endian, check=False), []
    raw = _stored_header_block(core, source, klass.header_class.template_dtype.itemsize)
    if raw is None:
        # An image from memory whose bytes are gone: the core's fixed header and its messages.
        return (klass.header_class(core.header_bytes, endian, check=False),
                [_CoreReport(message) for message in core.warnings])
    hdr = klass.header_class(raw, check=False)  # byte order guessed, as nibabel's from_fileobj
    return BatteryRunner(klass.header_class._get_checks()).check_fix(hdr)


class _CoreReport:
    """A fix the core applied, where nibabel's own report cannot be had: logged as a warning
    in the core's words, never raised (nibabel's level for it is not known here)."""

    problem_level = 0

    def __init__(self, message):
        self.message = message

    def log_raise(self, logger, error_level=40):
        logger.warning(self.message)


def _nibabel_would_raise(reports) -> bool:
    level = imageglobals.error_level
    return any(r.problem_level and r.problem_level >= level for r in reports)


def _image_from_core(klass, core, file_map, mmap, keep_file_open, threads, index, source=None,
                     checked=None, proxy=None):
    """An instance of `klass` (voxpipe's or nibabel's class) over an opened core image, built as
    nibabel's from_file_map builds one: its header (the core's fixed block, extensions through
    nibabel's handlers; header fixes logged, or raised, as nibabel logs them), voxpipe's proxy,
    the affine as nibabel computes it. `checked`: _checked_header's result, where the caller
    has it already; `proxy`: the data object, where it is not an ArrayProxy of `core` (a
    NIfTI-Zarr store's)."""
    index_args = _index_args(index)
    hdr, reports = checked or _checked_header(klass, core, source)
    for report in reports:
        report.log_raise(imageglobals.logger, imageglobals.error_level)
    for code, content in core.extensions:
        handler = extension_codes.handler.get(code, Nifti1Extension)
        hdr.extensions.append(handler(code, content))
    if proxy is None:
        proxy = ArrayProxy(core, threads, *index_args, mmap=mmap, keep_file_open=keep_file_open,
                           source=source)
    if index_args[0] == "path" and core.gzip:
        _core.Reader(core, *index_args)  # an explicit index is checked now, not at the first read
    img = klass(proxy, None, hdr, file_map=file_map)
    img._affine = np.array(core.affine, dtype=np.float64).reshape(4, 4)
    img._load_cache = {"header": hdr.copy(), "affine": img._affine.copy(),
                       "file_map": copy_file_map(file_map)}
    return img


def _from_file_map(klass, file_map, mmap, keep_file_open, threads, index):
    """`klass`'s image of `file_map` read through voxpipe, or None where nibabel's own
    from_file_map should serve it (see _VoxpipeImage.from_file_map)."""
    _check_open_args(mmap, keep_file_open)
    hdr_fh, img_fh = klass._get_fileholders(file_map)
    if hdr_fh.fileobj is not None and hdr_fh.fileobj is img_fh.fileobj:
        # nibabel's from_stream / from_bytes: a single file object. nibabel reads its header
        # from the holder's pos (0 unless set), not from where the stream stands (after
        # to_file_map, at its end), and its data at vox_offset from the stream's start: served
        # here from pos 0 only.
        if not klass.header_class.is_single or hdr_fh.pos != 0:
            return None
        hdr_fh.fileobj.seek(0)
        source = _stream_bytes(hdr_fh.fileobj)
        core = _core.open_bytes(source, _stream_name(hdr_fh.fileobj))
    elif hdr_fh.fileobj is not None or img_fh.fileobj is not None or not hdr_fh.filename:
        return None
    else:
        source = None
        core = _core.open(os.fspath(hdr_fh.filename))
    pair = not klass.header_class.is_single
    version = 2 if issubclass(klass.header_class, Nifti2Header) else 1
    if (core.version != version
            or (core.header_path != core.data_path) != pair
            or (core.data_in_file and os.fspath(img_fh.filename) != core.data_path)):
        return None
    checked = _checked_header(klass, core, source)
    if _nibabel_would_raise(checked[1]):
        return None  # nibabel logs the header's problems and raises, once
    return _image_from_core(klass, core, file_map, mmap, keep_file_open, threads, index, source,
                            checked)


def _file_map_of(core):
    if core.header_path == core.data_path:
        return {"image": FileHolder(filename=core.data_path)}
    return {"header": FileHolder(filename=core.header_path),
            "image": FileHolder(filename=core.data_path)}


def _stream_name(fileobj) -> str:
    # Named for messages only: a stream's name may not describe its bytes (gzip.open's names
    # the .gz file, its bytes are the .nii).
    name = getattr(fileobj, "name", None)
    kind = type(fileobj).__name__
    return f"{name} ({kind} stream)" if isinstance(name, str) else f"<{kind}>"


def _stream_bytes(fileobj):
    """What a readable binary file object holds from its position on."""
    data = fileobj.read()
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"expected a binary file object, but read() returned "
                        f"{type(data).__name__}")
    return data


def _open_input(source, storage_options=None, filesystem=None):
    """(core image, file map, bytes or None) for a path, a URL, a bytes-like object or a readable
    file object (read from its position to its end, now, once). The bytes go with the image's
    proxy, which holds them (and pickles them, as nibabel's proxy over a BytesIO does)."""
    if filesystem is not None:
        if storage_options:
            raise TypeError("storage_options configures voxpipe's own client: with filesystem=, "
                            "configure the filesystem instead")
        source = os.fspath(source)
    if _remote.is_url(source) or filesystem is not None:
        if _core.is_pair_path(source.split("?", 1)[0]):
            head, sep, query = source.partition("?")
            if head.lower().removesuffix(".gz").endswith(".img"):  # the header is the .hdr
                source = _remote.pair_partner_url(head) + sep + query
            core, remote = _remote.open_image(source, storage_options, filesystem=filesystem)
            return core, {"header": FileHolder(filename=source),
                          "image": FileHolder(filename=remote.partner.url)}, remote
        core, remote = _remote.open_image(source, storage_options, filesystem=filesystem)
        return core, {"image": FileHolder(filename=source)}, remote
    if storage_options:
        raise TypeError("storage_options applies to URLs (s3://, gs://, az://, https://...) only")
    if isinstance(source, (str, os.PathLike)):
        core = _core.open(os.fspath(source))
        return core, _file_map_of(core), None
    if isinstance(source, (bytes, bytearray, memoryview)):
        core = _core.open_bytes(source, "<bytes>")
        # As nibabel's from_bytes: a BytesIO of the bytes (which shares a bytes object).
        holder = FileHolder(fileobj=io.BytesIO(source)) if isinstance(source, bytes) else FileHolder()
        return core, {"image": holder}, source
    if hasattr(source, "read"):
        data = _stream_bytes(source)
        core = _core.open_bytes(data, _stream_name(source))
        return core, {"image": FileHolder(fileobj=source)}, data
    raise TypeError(f"expected a path, bytes or a binary file object, but received "
                    f"{type(source).__name__}")


def open_fetched(obj: _remote.RemoteObject, threads: int = 0, index: Any = None) -> NiftiImage:
    """The image of an object fetched whole (``_remote.fetch``: what the many-file loaders
    fetch), as ``vp.load(url)`` makes it: opened from its bytes (held, not copied), named by its
    URL, pickling as URL, options and ETag."""
    core = _core.open_bytes(obj.data, obj.url)
    klass = _NIBABEL_CLASSES[(core.version, core.header_path != core.data_path)]
    return _image_from_core(klass, core, {"image": FileHolder(filename=obj.url)}, True, None,
                            threads, index, obj)


def from_bytes(data: bytes | bytearray | memoryview, *, threads: int = 0) -> NiftiImage:
    """The image whose .nii or .nii.gz bytes are `data` (bytes, bytearray, memoryview or any
    C-contiguous buffer): nibabel's ``Nifti1Image.from_bytes``, read by voxpipe. The bytes are
    held, not copied, and must not change while the image lives."""
    return load(data, threads=threads)


def from_stream(fileobj: IO[bytes], *, threads: int = 0) -> NiftiImage:
    """The image a readable binary file object holds from its position on (.nii or .nii.gz,
    recognised by its bytes): nibabel's ``from_stream``, read by voxpipe. The stream is read
    to its end now."""
    return load(fileobj, threads=threads)


def load(filename: StrPath | bytes | bytearray | memoryview | IO[bytes], *,
         mmap: bool | Literal["c", "r"] = True, keep_file_open: bool | None = None,
         threads: int = 0, index: StrPath | Literal[False] | None = None,
         storage_options: Mapping[str, Any] | None = None,
         filesystem: Any = None, level: int = 0) -> NiftiImage:
    """Open a NIfTI-1/2 file (.nii, .nii.gz, .hdr/.img pairs) or a NIfTI-Zarr store
    (.nii.zarr), reading only the header.

    ``filename``: a path (str or ``pathlib.Path``), the bytes of a .nii or .nii.gz (bytes,
    bytearray, memoryview), or a readable binary file object (read to its end now; gzip is
    recognised by its bytes). Images from memory hold their bytes; ``get_filename()`` is None.

    Returns a nibabel image (``nibabel.Nifti1Image`` / ``Nifti2Image``, or ``Nifti1Pair`` /
    ``Nifti2Pair`` for .hdr/.img: nibabel's own classes) whose ``dataobj`` is voxpipe's
    ArrayProxy: voxels are read on demand, by voxpipe. ``mmap`` (True, False, 'c', 'r') and
    ``keep_file_open`` (None, False, True) behave as in nibabel (see ArrayProxy): whole reads of
    uncompressed, unscaled data are memory-mapped unless ``mmap=False``; only
    ``keep_file_open=True`` keeps the data file open between accesses. ``threads``: threads for
    large reads (0: the default, docs/python.md "Thread count").
    ``index`` (single-member .gz data only): None uses a valid seek index next to the file
    (FILE.gz.gzidx) or in the user cache if there is one (``vp.gz.build_index`` writes them);
    a path uses that GZIDX file (from voxpipe, indexed_gzip or rapidgzip; a stale one is an
    error); False never uses one. With an index, ``img.dataobj[..., t]`` inflates only from the
    nearest seek point.

    ``filename`` may also be the URL of a .nii or .nii.gz object: ``s3://``, ``gs://``, ``az://``,
    ``http(s)://`` (through obstore: ``pip install 'voxpipe[s3]'``). Opening reads its first
    64 KiB; reads of data fetch the byte ranges they need (one volume of a ``.nii``, or of a
    ``.nii.gz`` with a seek index next to the object or in the cache: one request), every
    request pinned to the version opened (docs/python.md, "Object storage");
    ``get_filename()`` is the URL. ``storage_options``
    configures the store (obstore's keys: ``endpoint``, ``region``, ``access_key_id``,
    ``skip_signature``, ``allow_http``, ``timeout``...); without it the environment does, as for
    the clouds' own tools (``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP=true``, credential files).
    ``filesystem``: an fsspec filesystem (``s3fs.S3FileSystem(...)``, ...) to read ``filename``
    through instead, by its ``info``, ``cat_file`` and ``cat_ranges``.

    A name ending in ``.zarr`` (local or URL) is a NIfTI-Zarr store (docs/zarr.md, ``pip install
    'voxpipe[zarr]'``): opening reads its metadata and header array; reads decode only the
    chunks they touch, in parallel, with the scaling fused. ``level``: its pyramid level (0, the
    finest; a coarser level's header has the level's dims, voxel sizes and affines).

    On the series ``python -m voxpipe.demo --dir .`` writes:

    >>> img = vp.load("demo_bold.nii.gz")       # reads the header only
    >>> img.shape, img.dataobj.dtype, img.dataobj.slope, img.dataobj.inter
    ((64, 64, 40, 60), dtype('<i2'), 0.5, 10.0)
    >>> img.get_fdata(dtype=np.float32)[32, 32, 20, 0]  # stored 989: 989 * 0.5 + 10
    np.float32(504.5)
    >>> img.dataobj[..., 7].shape               # inflates only up to the end of volume 7
    (64, 64, 40)
    """
    _check_open_args(mmap, keep_file_open)
    if _zarr.is_nifti_zarr(filename):
        if filesystem is not None or index not in (None, False):
            raise TypeError("a NIfTI-Zarr store takes neither filesystem= nor index=")
        return _zarr.load(filename, storage_options=storage_options, threads=threads,
                          level=level)
    if level:
        raise TypeError("level= selects a pyramid level of a NIfTI-Zarr store (*.zarr)")
    core, file_map, source = _open_input(filename, storage_options, filesystem)
    klass = _NIBABEL_CLASSES[(core.version, core.header_path != core.data_path)]
    return _image_from_core(klass, core, file_map, mmap, keep_file_open, threads, index, source)


def _image_for(obj, affine, header):
    """A NIfTI image of `obj`: a nibabel image as it is (other formats converted as nibabel's
    from_image does), or an array with `affine` and `header`."""
    if isinstance(obj, (nib.Nifti1Pair, nib.Nifti2Pair)):
        return obj
    if hasattr(obj, "dataobj") and hasattr(obj, "affine") and hasattr(obj, "header"):
        return nib.Nifti1Image.from_image(obj)
    return nib.Nifti1Image(np.asanyarray(obj), affine, header=header)


def save(img: Any, filename: StrPath, affine: npt.ArrayLike | None = None, *,
         header: Any = None, level: int | None = None, version: Literal[1, 2] | None = None,
         gzip_layout: Literal["members", "bgzf", "single"] = "members", threads: int = 0,
         chunks: int | tuple[int, ...] | None = None, shards: int | tuple[int, ...] | None = None,
         levels: int = 1, codec: Literal["zstd", "blosc", "gzip", "none"] = "zstd",
         zarr_format: Literal[2, 3] = 3) -> None:
    """Write an image (or an array with `affine`) to .nii, .nii.gz, a .hdr/.img pair or a
    NIfTI-Zarr store (.nii.zarr).

    ``img``: any nibabel image (voxpipe's or nibabel's; other formats are converted as
    ``nib.Nifti1Image.from_image`` converts them), or an array with ``affine`` (and ``header``).
    ``.gz`` outputs are compressed at ``level`` (0-9, default 1) on ``threads`` threads (0: the
    default count).
    ``gzip_layout="members"`` (the default) writes independent gzip members of 1 MiB that
    announce their sizes: every gzip reader (nibabel included) reads the file, and voxpipe reads
    it in parallel and at random. ``"bgzf"`` writes htslib's BGZF blocks; ``"single"`` writes
    one member, byte-identical to nibabel's output at the same level.

    A name ending in ``.zarr`` writes NIfTI-Zarr (docs/zarr.md): Zarr v3 with OME-NGFF 0.5
    (``zarr_format=2``: v2 with 0.4), the header as stored bytes, the data unscaled. ``chunks``
    and ``shards`` (v3) are sizes in NIfTI axis order (x, y, z, t, c; default: one volume per
    chunk for 4D/5D, slabs of whole slices of about 4 MiB for 3D); ``codec`` ``"zstd"`` (level
    ``level``, default 3), ``"blosc"`` (zstd inside, byte shuffle), ``"gzip"`` or ``"none"``;
    ``levels``: pyramid levels (1: none), each halving x, y and z (2x2x2 means; labels:
    nearest), computed one volume at a time.

    The output is written under a temporary name and renamed when complete. An image read by
    ``vp.load`` and not modified keeps its stored values and scale factors (no re-quantisation);
    other data are written in the header's dtype with scale factors computed as nibabel does.

    >>> data = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    >>> vp.save(vp.Nifti1Image(data, np.eye(4)), "small.nii.gz")
    >>> vp.load("small.nii.gz").get_fdata()[1, 2, 3]
    np.float64(23.0)
    """
    path = os.fspath(filename)
    zarr_out = _zarr.is_nifti_zarr(path)
    img = _image_for(img, affine, header)
    is2 = isinstance(img, (nib.Nifti2Image, nib.Nifti2Pair))
    target = _NIBABEL_CLASSES[(2 if (version == 2 or (version is None and is2)) else 1,
                               bool(not zarr_out and _core.is_pair_path(path)))]
    # nibabel's conversion: a copy for the same header class, otherwise the fields both have in
    # native byte order (as nib.save converts single <-> pair).
    hdr = convert_header(img.header, target.header_class)
    # Keep the shape/affine synchronised as nibabel's update_header does.
    if hdr.get_data_shape() != img.shape:
        hdr.set_data_shape(img.shape)
    if img.affine is not None and not np.allclose(img.affine, hdr.get_best_affine()):
        hdr.set_sform(img.affine, code="aligned")
        hdr.set_qform(img.affine, code="unknown")
    out_dtype = hdr.get_data_dtype()
    proxy = img.dataobj
    # As nibabel's to_file_map, the data object is written (not a get_fdata cache).
    keeps_stored = (isinstance(proxy, ArrayProxy)
                    and proxy.dtype.newbyteorder("=") == out_dtype.newbyteorder("="))
    if keeps_stored:
        hdr.set_slope_inter(proxy.slope, proxy.inter)
    else:
        data, slope, inter = _data_for_writing(np.asanyarray(proxy), out_dtype)
        hdr.set_slope_inter(slope, inter)
    if zarr_out:
        # Stored values read block by block from the proxy (bounded memory), or the array.
        _zarr_write.write(path, hdr, proxy if keeps_stored else data, chunks=chunks,
                          shards=shards, levels=levels, codec=codec, level=level,
                          zarr_format=zarr_format, threads=threads)
        return
    if keeps_stored:
        data = proxy.get_unscaled().astype(out_dtype, copy=False)
    hdr.set_data_offset(0)
    if not data.flags.f_contiguous:
        data = np.asfortranarray(data)
    _core.write(path, hdr.binaryblock, [(e.get_code(), e.content) for e in hdr.extensions],
                _as_bytes_view(data), 1 if level is None else level, gzip_layout, threads)


def _data_for_writing(data: np.ndarray, out_dtype: np.dtype):
    """(array in out_dtype and byte order, slope, inter) following nibabel's array writers."""
    if out_dtype.fields is not None:
        if data.dtype.fields is None or data.dtype.itemsize != out_dtype.itemsize:
            raise ValueError(f"Cannot write {data.dtype} data as {out_dtype}")
        return np.asfortranarray(data).view(out_dtype), 1.0, 0.0
    if (np.can_cast(data.dtype, out_dtype, "safe") or out_dtype.kind in "fc" or data.size == 0
            or (data.dtype.kind in "iu" and data.size and data.min() >= np.iinfo(out_dtype).min
                and data.max() <= np.iinfo(out_dtype).max)):
        return np.asarray(data, dtype=out_dtype, order="F"), 1.0, 0.0
    # Scale factors for a lossy cast: nibabel's arraywriters decide them, so results match.
    try:
        from nibabel.arraywriters import get_slope_inter, make_array_writer
    except ImportError as exc:  # pragma: no cover - nibabel is a test dependency
        raise ValueError(f"writing {data.dtype} data as {out_dtype} needs scale factors; "
                         "install nibabel or pass data in the output dtype") from exc
    import io

    writer = make_array_writer(data, out_dtype, True, True, order="F")
    slope, inter = get_slope_inter(writer)
    buf = io.BytesIO()
    writer.to_fileobj(buf, order="F")
    arr = np.frombuffer(buf.getbuffer(), dtype=out_dtype).reshape(data.shape, order="F")
    return arr, (1.0 if slope is None else slope), (0.0 if inter is None else inter)
