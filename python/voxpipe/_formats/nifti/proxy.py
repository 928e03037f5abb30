"""The lazy array proxy of a NIfTI image (nibabel's ArrayProxy API over the C++ core's reader):
slices read only what they need, whole reads go in parallel, pickles open the same file again."""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

if TYPE_CHECKING:  # typing.Self is Python 3.11+; the annotations are not evaluated
    from typing_extensions import Self

import numpy as np
import numpy.typing as npt

from nibabel.arrayproxy import ArrayLike

from ..._foundation.native import core as _core
from ..._foundation import device as _device
from ..._foundation import identity as _identity
from ..._foundation.device import DeviceArray
from ..._foundation.header import NAME_TO_DTYPE, core_dtype_name
from ..._foundation.redact import redact
from ..._foundation.types import Array, Device
from ..._sources import remote as _remote
from ..._foundation.errors import FormatError, InvalidArgumentError, TruncatedError, VoxpipeError
from .memory import MmapMode, as_bytes_view, fork_lock, map_data
from .remote import open_image
from .slicing import Range, empty_for, nibabel_segments, plan, read_shape, reads_whole

# read_into gives back what it was given: a NumPy array or a DeviceArray.
_Out = TypeVar("_Out", Array, DeviceArray)
_DType = TypeVar("_DType", bound=np.dtype[Any])

# A pickled proxy's options (ArrayProxy._options): threads, index, mmap, keep_file_open, shape.
Options = dict[str, Any]

# Outputs the reader casts, swaps and scales into itself.
_FAST_OUTPUTS = frozenset(np.dtype(c) for c in ("f4", "f8", "c8", "c16"))

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

    def __init__(self, core_image: _core.NiftiImage, threads: int = 0, index_mode: str = "auto",
                 index_path: str = "", *, mmap: MmapMode = True,
                 keep_file_open: bool | None = None, source: object = None,
                 opened_in: str | None = None) -> None:
        self._img = core_image
        # The bytes an in-memory image was opened from (None for a file): what it pickles as.
        self._source = source
        # The working directory the file was opened from (copies keep the original's): the
        # file's names as given stay what users see, these absolute ones are what leaves.
        self._opened_in = _identity.working_directory() if opened_in is None else opened_in
        self._threads = threads
        self._index = (index_mode, index_path)
        self._mmap = mmap
        self._keep_file_open = bool(keep_file_open)
        self._kept_reader: _core.Reader | None = None
        self._reader_lock = threading.Lock()
        self._reader_pid = os.getpid()
        self._shape: tuple[int, ...] = tuple(core_image.shape)
        raw = NAME_TO_DTYPE[core_image.dtype]
        if raw.fields is None:
            raw = raw.newbyteorder(">" if core_image.big_endian else "<")
        self._dtype = raw

    # -- copies and pickles -----------------------------------------------------------------
    def _options(self) -> Options:
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

    def __copy__(self) -> Self:
        """A proxy of the same opened image (headers are immutable) with its own reader."""
        new = type(self)(self._img, self._threads, *self._index, mmap=self._mmap,
                         keep_file_open=self._keep_file_open, source=self._source,
                         opened_in=self._opened_in)
        new._shape = self._shape
        return new

    def copy(self) -> Self:
        """nibabel's ArrayProxy.copy: a proxy of the same file and options."""
        return self.__copy__()

    def reshape(self, shape: Sequence[int]) -> Self:
        """nibabel's ArrayProxy.reshape: a proxy of the same stored values under another shape
        of the same size (one axis may be -1), in the file's (Fortran) order, still lazy.
        nibabel's CIFTI-2 loader and MGH writer reshape data objects this way. Adding or
        dropping length-1 axes keeps reads of slices to the bytes they need; any other shape
        reads the whole data for a slice."""
        size = int(np.prod(self._shape))
        new_shape = tuple(int(d) for d in shape)
        unknown = [i for i, d in enumerate(new_shape) if d == -1]
        if len(unknown) > 1:
            raise ValueError("can only specify one unknown dimension")
        if unknown:
            known = -int(np.prod(new_shape))
            new_shape = tuple(size // known if d == -1 else d for d in new_shape)
        if int(np.prod(new_shape)) != size:
            raise ValueError(f"cannot reshape array of size {size:d} into shape {new_shape!s}")
        new = self.__copy__()
        new._shape = new_shape
        return new

    def _stored_ranges(self, ranges: Sequence[Range]) -> Sequence[Range] | None:
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

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self.__copy__()

    def __reduce__(self) -> tuple[Callable[..., ArrayProxy], tuple[Any, ...]]:
        # The file's absolute name and the options, never the data: the receiver opens the
        # header again, in whatever folder it runs.
        # An image from memory has no name to send: its bytes go, as a nibabel proxy over a
        # BytesIO pickles its bytes.
        if not self._img.data_in_file:
            if isinstance(self._source, _remote.RemoteObject):
                # An object fetched whole (many-file loaders): the same, as a ranged open.
                obj = self._source
                return (_reopened_remote_proxy, (obj.url, obj.storage_options, obj.etag,
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
                                          bytes(_remote.buffer_of(self._source))))
            raise TypeError("an image opened from memory does not pickle: save it to a file, or "
                            "pickle np.asanyarray(img.dataobj)")
        return (_reopened_proxy, (self._files()[0], self._options(), None,
                                  (_identity.THIS_MACHINE, self._img.header_identity,
                                   self._img.data_identity)))

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        """What identifies the values this proxy reads, for dask's deterministic names: where
        they are (a file's path, size, mtime and inode; an object's URL and ETag; an image from
        memory, a hash of its bytes) and the shape. Cheap: no data is read."""
        img, src = self._img, self._source
        where: tuple[Any, ...]
        if isinstance(src, _remote.RemoteFile):
            data = src.partner
            where = ("url", src.url, src.etag, src.size,
                     None if data is None else (data.url, data.etag, data.size))
        elif isinstance(src, _remote.RemoteObject):
            where = ("url", src.url, src.etag, src.size)
        elif img.data_in_file:
            # The files as they were opened (device, inode, size, mtime_ns), not as they are
            # now: the proxy reads those or fails, and so does every task of a graph named after
            # them.
            header_path, data_path = self._files()
            where = ("file", (os.path.normpath(header_path), img.header_identity))
            if data_path != header_path:
                where += ((os.path.normpath(data_path), img.data_identity),)
        else:  # opened from memory: the bytes themselves
            where = ("bytes", _identity.bytes_token(_remote.buffer_of(src)))
        return ("voxpipe.ArrayProxy", where, tuple(self.shape))

    # nibabel's ArrayLike protocol declares shape as an attribute; its own ArrayProxy has a
    # read-only property too.
    @property
    def shape(self) -> tuple[int, ...]:  # type: ignore[override]
        return self._shape

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._dtype

    @property
    def slope(self) -> float:
        return self._img.slope

    @property
    def inter(self) -> float:
        return self._img.inter

    @property
    def offset(self) -> int:
        return self._img.data_offset

    @property
    def file_like(self) -> str:
        return self._img.data_path

    def _scaled(self) -> bool:
        return (self._img.slope, self._img.inter) != (1.0, 0.0)

    # -- files ----------------------------------------------------------------------------------
    def _open_reader(self) -> _core.Reader:
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

    def _new_reader(self) -> _core.Reader:
        source = self._source
        if isinstance(source, _remote.RemoteFile) and self._index[0] == "auto" \
                and self._img.gzip:
            # An object: the seek index of this version in the cache, or its sidecar object,
            # looked up first (with one, even sized members are found without a request per
            # member). One that does not match the object (stale, damaged) is dropped, as
            # locally, and the read goes on without it.
            args = source.data_file.index_args()
            reader = None
            if args[0] == "path":
                try:
                    reader = _core.Reader(self._img, *args)
                except (InvalidArgumentError, FormatError, TruncatedError):
                    source.data_file.forget_index()
            if reader is None:
                reader = _core.Reader(self._img, "none", "")
        else:
            reader = _core.Reader(self._img, *self._index)
        reader.check_data_size()
        return reader

    def _forget_parent_reader(self) -> None:
        """In a forked child (multiprocessing, DataLoader workers): a lock and reader of its own.
        The parent's may have been in use by a thread that does not exist here, their locks
        held for good and a gzip stream half-advanced: the reader is never used, nor destroyed
        (which would touch that state), not even at exit."""
        with fork_lock():
            if self._reader_pid == os.getpid():
                return  # another thread of this child got here first
            if self._kept_reader is not None:
                _core.keep_forever(self._kept_reader)
            self._kept_reader = None
            self._reader_lock = threading.Lock()
            self._reader_pid = os.getpid()

    def _gzip_reader(self) -> _core.Reader | None:
        """The reader an access would use now, for gzip data (None otherwise): whether it found
        a member table or an index shows in its ``random_access``."""
        return self._open_reader() if self._img.gzip else None

    def _map(self) -> np.memmap[Any, np.dtype[Any]] | None:
        """nibabel's array_from_file with mmap: the whole data as an np.memmap of the file
        (memory.map_data), or None where nibabel reads instead (mmap=False, gzip data, a file
        that cannot be mapped)."""
        if not self._mmap or self._img.gzip or not self._img.data_in_file:
            return None
        return map_data(self._img, self._dtype, self._shape,
                        "c" if self._mmap is True else self._mmap)

    def _read(self, ranges: Sequence[Range], dtype: np.dtype[Any], apply_scaling: bool,
              file_order: bool, real_part: bool = False, out: Array | None = None,
              subtype: type[Array] = np.ndarray) -> Array:
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

    def _read_stored(self, stored: Sequence[Range], dtype: np.dtype[Any], apply_scaling: bool,
                     file_order: bool, real_part: bool, out: Array | None,
                     shape: tuple[int, ...], subtype: type[Array] = np.ndarray) -> Array:
        """Decode the ranges `stored` (over the stored image's axes) into `out`, or into a new
        array of `shape`, allocated once the file has been checked."""
        reader = self._open_reader()
        try:
            if out is None:
                out = empty_for(shape, dtype, subtype)
            reader.read(stored, core_dtype_name(dtype), apply_scaling, file_order,
                        real_part, as_bytes_view(out), self._threads)
        finally:
            # Not kept: the last reference goes here, which closes the file.
            del reader
        return out

    def _full_ranges(self) -> list[Range]:
        return [(0, 1, d) for d in self._shape]

    # -- voxpipe's doorway -------------------------------------------------------------------------
    @property
    def threads(self) -> int:
        """Threads for large reads (0: the default, docs/python.md "Thread count")."""
        return self._threads

    @threads.setter
    def threads(self, threads: int) -> None:
        self._threads = threads

    @property
    def random_access(self) -> bool:
        """Whether any part of the data is read without decoding what comes before it
        (uncompressed data, voxpipe's sized gzip members, or a seek index)."""
        return not self._img.gzip or self._open_reader().random_access

    @property
    def reopenable(self) -> bool:
        """Whether this proxy pickles as where to open its data again (a file, a URL, or a
        subclass's own store), not as the bytes of an image opened from memory."""
        return (self._img.data_in_file or type(self).__reduce__ is not ArrayProxy.__reduce__
                or isinstance(self._source, (_remote.RemoteFile, _remote.RemoteObject)))

    def result_dtype(self, dtype: npt.DTypeLike | None = None,
                     scaling: bool = True) -> np.dtype[Any]:
        """The dtype ``read`` gives for `dtype`: itself when given; otherwise, with `scaling`,
        the dtype of ``np.asanyarray(proxy)`` (the stored one, or nibabel's float for scaled
        data), without it the stored dtype (byte order included)."""
        if dtype is not None:
            return np.dtype(dtype)
        return self._natural_dtype() if scaling else self._dtype

    def read(self, slicer: Any = (), dtype: npt.DTypeLike | None = None, *,
             out: Array | None = None, device: Device = None,
             scaling: bool = True) -> Array | DeviceArray:
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
            self.read(slicer, out.dtype, out=out, scaling=scaling)  # reads into out
            return out
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

    def _natural_dtype(self) -> np.dtype[Any]:
        return NAME_TO_DTYPE[self._img.scaled_dtype] if self._scaled() else self._dtype

    def _decodes_directly(self, dtype: np.dtype[Any]) -> bool:
        """Whether `dtype` output is decoded (cast, scaled) by the reader itself."""
        return dtype in _FAST_OUTPUTS and self._natural_dtype().fields is None

    def _get_scaled(self, dtype: npt.DTypeLike | None, ranges: Sequence[Range],
                    out: Array | None = None, subtype: type[Array] = np.ndarray) -> Array:
        """nibabel's ArrayProxy._get_scaled, always read into a new array (or `out`): the
        natural dtype, or `dtype` where asked."""
        if dtype is None:
            if not self._scaled():
                return self._read(ranges, self._dtype, False, True, out=out)
            return self._read(ranges, self._natural_dtype(), True, False, out=out)
        want = np.dtype(dtype)
        if self._decodes_directly(want):
            real_part = self._natural_dtype().kind == "c" and want.kind == "f"
            if real_part:
                warnings.warn("Casting complex values to real discards the imaginary part",
                              np.exceptions.ComplexWarning, stacklevel=3)
            return self._read(ranges, want, True, False, real_part=real_part, out=out,
                              subtype=subtype)
        arr = self._get_scaled(None, ranges)
        arr = arr.astype(np.promote_types(arr.dtype, want), copy=False).astype(want, copy=False)
        if out is not None:
            out[...] = arr
            return out
        return arr

    def _whole(self, dtype: npt.DTypeLike | None = None) -> Array:
        """What nibabel's ArrayProxy.__array__(dtype) gives. Unscaled data it memory-maps where
        it can; converting the map with astype keeps the np.memmap type, on a copy that owns
        its memory (the reader decodes that copy straight from the file)."""
        mapped = None if self._scaled() else self._map()
        if mapped is None:
            return self._get_scaled(dtype, self._full_ranges())
        if dtype is None:
            return mapped
        want = np.dtype(dtype)
        if np.promote_types(mapped.dtype, want) == mapped.dtype == want:
            return mapped
        if self._decodes_directly(want):
            del mapped
            return self._get_scaled(want, self._full_ranges(), subtype=np.memmap)
        arr = mapped.astype(np.promote_types(mapped.dtype, want), copy=False)
        return arr.astype(want, copy=False)

    @overload
    def __array__(self, dtype: None = None, copy: bool | None = None) -> Array: ...
    @overload
    def __array__(self, dtype: _DType, copy: bool | None = None) -> np.ndarray[Any, _DType]: ...
    @overload
    def __array__(self, dtype: npt.DTypeLike, copy: bool | None = None) -> Array: ...

    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> Array:
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

    def _get_unscaled(self, slicer: Any) -> Any:
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

    def __repr__(self) -> str:
        return (f"<ArrayProxy shape={self._shape} dtype={self._dtype} "
                f"file={redact(self._img.data_path)!r}>")


def _reopened_proxy(path: str, options: Options, source: bytes | None = None,
                    identity: tuple[Any, ...] | None = None) -> ArrayProxy:
    """An unpickled ArrayProxy: the file (or, with `source`, the bytes) opened again with the
    pickled options; with `identity` (pickles of files), VoxpipeIOError if the files are no
    longer those the pickle was made of: never the new file under the old header's promises."""
    index, shape = options.pop("index"), options.pop("shape", None)
    if source is None and identity is not None:
        try:
            core = _core.open(path)
        except VoxpipeError:
            # What is there now may not even be NIfTI: that it changed is the news.
            _identity.check_reopened([(path, _identity.stat_identity(path))], identity[:2])
            raise
        files = [(core.header_path, core.header_identity)]
        if core.data_path != core.header_path:
            files.append((core.data_path, core.data_identity))
        _identity.check_reopened(files, identity)
    else:
        core = _core.open(path) if source is None else _core.open_bytes(source, path)
    proxy = ArrayProxy(core, options.pop("threads"), *index, source=source, **options)
    return proxy if shape is None else proxy.reshape(shape)


def _reopened_remote_proxy(url: str, storage_options: Mapping[str, Any] | None,
                           etag: str | None, options: Options, data_url: str | None = None,
                           data_etag: str | None = None, filesystem: Any = None) -> ArrayProxy:
    """An unpickled ArrayProxy of an object from a URL (and its .img object for a pair): the
    same versions opened again, or VoxpipeIOError if they changed."""
    core, source = open_image(url, storage_options, etag, data_url, data_etag, filesystem)
    index, shape = options.pop("index"), options.pop("shape", None)
    proxy = ArrayProxy(core, options.pop("threads"), *index, source=source, **options)
    return proxy if shape is None else proxy.reshape(shape)
