"""Images, the lazy array proxy, load and save: nibabel's API over the C++ core."""

from __future__ import annotations

import os
import stat
import threading
import warnings

import numpy as np

from . import _core
from ._header import (
    _CODE_TO_NAME,
    _NAME_TO_DTYPE,
    Nifti1Header,
    Nifti2Header,
    dtype_code,
)
from ._slicing import empty_for, nibabel_segments, plan, read_shape, reads_whole

_FAST_OUTPUTS = {np.dtype("f4"): "float32", np.dtype("f8"): "float64",
                 np.dtype("c8"): "complex64", np.dtype("c16"): "complex128"}


class Extension:
    """A header extension (nibabel's Nifti1Extension interface: get_code, get_content)."""

    def __init__(self, code: int, content: bytes):
        self._code = int(code)
        self._content = bytes(content)

    def get_code(self):
        return self._code

    def get_content(self):
        return self._content

    @property
    def code(self):
        return self._code

    def __eq__(self, other):
        return (isinstance(other, Extension) and self._code == other._code
                and self._content == other._content)

    def __repr__(self):
        return f"Extension(code={self._code}, {len(self._content)} bytes)"


# Per process: a child gets a fresh lock (the parent's could be held by a thread that is not
# copied).
_fork_lock = threading.Lock()


def _after_fork_in_child():
    global _fork_lock
    _fork_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _as_bytes_view(arr: np.ndarray) -> np.ndarray:
    """A flat uint8 view of an F-contiguous array's memory (any dtype, structured included)."""
    flat = arr.reshape(-1, order="F")
    return flat.view(np.uint8)


class ArrayProxy:
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

    is_proxy = True

    def __init__(self, core_image, threads: int = 0, index_mode: str = "auto",
                 index_path: str = "", *, mmap=True, keep_file_open=None):
        self._img = core_image
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

    @property
    def shape(self):
        return self._shape

    @property
    def ndim(self):
        return len(self._shape)

    @property
    def dtype(self):
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
            reader = _core.Reader(self._img, *self._index)
            reader.check_data_size()
            return reader
        if self._reader_pid != os.getpid():
            self._forget_parent_reader()
        with self._reader_lock:
            if self._kept_reader is None:
                reader = _core.Reader(self._img, *self._index)
                reader.check_data_size()
                self._kept_reader = reader
            return self._kept_reader

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
        A short or missing file gives None here and a voxpipe error from the read that follows."""
        if not self._mmap or self._img.gzip:
            return None
        try:
            # np.memmap's open() of a FIFO would wait for a writer; the read refuses it.
            if not stat.S_ISREG(os.stat(self._img.data_path).st_mode):
                return None
            return np.memmap(self._img.data_path, dtype=self._dtype,
                             mode="c" if self._mmap is True else self._mmap, shape=self._shape,
                             order="F", offset=self._img.data_offset)
        except (AttributeError, TypeError, ValueError, OSError):
            return None

    def _read(self, ranges, dtype: np.dtype, apply_scaling: bool, file_order: bool,
              real_part: bool = False, out: np.ndarray | None = None, subtype=np.ndarray):
        shape = read_shape(ranges)
        if out is not None and (out.shape != shape or out.dtype != dtype
                                or not out.flags.f_contiguous):
            raise ValueError(f"out must be an F-contiguous {dtype} array of shape {shape}, "
                             f"but is {out.dtype} {out.shape}")
        reader = self._open_reader()
        try:
            if out is None:
                out = empty_for(shape, dtype, subtype)
            reader.read(ranges, _CODE_TO_NAME[dtype_code(dtype)], apply_scaling, file_order,
                        real_part, _as_bytes_view(out), self._threads)
        finally:
            # Not kept: the last reference goes here, which closes the file.
            del reader
        return out

    def _full_ranges(self):
        return [(0, 1, d) for d in self._shape]

    # -- nibabel's API ---------------------------------------------------------------------------
    def get_unscaled(self, out=None):
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

    def __array__(self, dtype=None, copy=None):
        arr = self._whole(dtype)
        if dtype is not None:
            arr = arr.astype(dtype, copy=False)
        if copy and getattr(arr, "filename", None) is not None:
            arr = np.array(arr)  # a copy was asked for: not a view of the file
        return arr

    def __getitem__(self, slicer):
        ranges, out_shape = plan(slicer, self._shape)
        if reads_whole(slicer, self._shape):
            return self._whole()
        arr = self._get_scaled(None, ranges).reshape(out_shape, order="F")
        if self._scaled():
            return arr
        if out_shape == ():
            # nibabel indexes unscaled data down to a NumPy scalar; scaled data stay 0-d arrays.
            return arr[()]
        # nibabel wraps what fileslice read: bytes (read-only) for one segment, an anonymous
        # mmap (writable) for several.
        arr.flags.writeable = (arr.size > 0 and nibabel_segments(slicer, self._shape,
                                                                 self._dtype.itemsize) > 1)
        return arr

    def __repr__(self):
        return f"<ArrayProxy shape={self._shape} dtype={self._dtype} file={self._img.data_path!r}>"


class Nifti1Image:
    """A NIfTI-1 image: header, affine and data (a lazy ArrayProxy or an in-memory array)."""

    header_class = Nifti1Header
    _is_pair = False

    def __init__(self, dataobj, affine, header=None, extra=None, file_map=None, dtype=None):
        danger = (np.dtype("int64"), np.dtype("uint64"))
        if header is None and dtype is None and getattr(dataobj, "dtype", None) in danger:
            raise ValueError(
                f"Image data has type {dataobj.dtype}, which may cause incompatibilities with "
                "other tools. To use this type, pass an explicit header or dtype argument to "
                f"{type(self).__name__}().")
        self._dataobj = dataobj
        if affine is not None:
            affine = np.array(affine, dtype=np.float64)
            if affine.shape != (4, 4):
                raise ValueError("Affine should be shape 4,4")
        self._affine = affine
        self.extra = {} if extra is None else extra
        if header is None:
            self._header = self.header_class()
            if hasattr(dataobj, "dtype"):
                self._header.set_data_dtype(dataobj.dtype)
        else:
            self._header = _convert_header(header, self.header_class)
        self._fdata_cache = None
        self._filename = None
        self.update_header()
        # nibabel resets the "consumed" values: the proxy carries the real ones.
        self._header.set_data_offset(0)
        self._header.set_slope_inter(None, None)
        if dtype is not None:
            self._header.set_data_dtype(dtype)
        if header is None and affine is not None:
            self._affine2header()

    # -- nibabel's attributes ---------------------------------------------------------------
    @property
    def header(self):
        return self._header

    @property
    def affine(self):
        return self._affine

    @property
    def dataobj(self):
        return self._dataobj

    @property
    def shape(self):
        return self._dataobj.shape

    @property
    def ndim(self):
        return self._dataobj.ndim

    @property
    def in_memory(self):
        return not isinstance(self._dataobj, ArrayProxy) or self._fdata_cache is not None

    def get_filename(self):
        return self._filename

    def get_data_dtype(self):
        return self._header.get_data_dtype()

    def set_data_dtype(self, dtype):
        self._header.set_data_dtype(dtype)

    def update_header(self):
        hdr = self._header
        shape = self._dataobj.shape
        if hdr.get_data_shape() != shape:
            hdr.set_data_shape(shape)
        if self._affine is not None and not np.allclose(self._affine, hdr.get_best_affine()):
            self._affine2header()
        hdr["magic"] = hdr.pair_magic if self._is_pair else hdr.single_magic

    def _affine2header(self):
        self._header.set_sform(self._affine, code="aligned")
        self._header.set_qform(self._affine, code="unknown")

    def get_fdata(self, caching="fill", dtype=np.float64, *, out=None, device=None):
        """The data as floating point (nibabel's get_fdata, cache semantics included).

        `out` (voxpipe only): an F-contiguous array of `dtype` and the image's shape to decode
        into, e.g. a buffer reused across files; it is filled, returned and not cached.
        `device` (voxpipe only): None or 'cpu' for a NumPy array; 'cuda', 'cuda:N' or a
        torch.device for a DeviceArray (DLPack) holding the same values, decoded on that device
        and not cached (docs/python.md, "Loading to the GPU").
        """
        if caching not in ("fill", "unchanged"):
            raise ValueError('caching value should be "fill" or "unchanged"')
        dtype = np.dtype(dtype)
        if not issubclass(dtype.type, np.inexact):
            raise ValueError(f"{dtype} should be floating point type")
        if device is not None:
            from . import _device

            ordinal = _device.parse_device(device)
            if ordinal is not None:
                if out is not None:
                    raise ValueError("out is a host array: it cannot be combined with a device")
                return _device.image_to_device(self, dtype, ordinal)
        if out is not None:
            if isinstance(self._dataobj, ArrayProxy):
                return self._dataobj._get_scaled(dtype, self._dataobj._full_ranges(), out=out)
            out[...] = np.asanyarray(self._dataobj, dtype=dtype)
            return out
        if self._fdata_cache is not None and self._fdata_cache.dtype.type == dtype.type:
            return self._fdata_cache
        data = np.asanyarray(self._dataobj, dtype=dtype)
        if caching == "fill":
            self._fdata_cache = data
        return data

    def uncache(self):
        self._fdata_cache = None

    def to_nibabel(self):
        """The same image as a nibabel image (data read now; header and extensions copied)."""
        import nibabel as nib

        if isinstance(self, Nifti2Image):
            klass = nib.Nifti2Pair if self._is_pair else nib.Nifti2Image
        else:
            klass = nib.Nifti1Pair if self._is_pair else nib.Nifti1Image
        hdr = klass.header_class(endianness=self._header.endianness)
        hdr._structarr = np.ndarray((), dtype=hdr._structarr.dtype,
                                    buffer=bytearray(self._header.binaryblock))
        for ext in self._header.extensions:
            hdr.extensions.append(nib.nifti1.Nifti1Extension(ext.get_code(), ext.get_content()))
        data = np.asanyarray(self._dataobj)
        return klass(data, self._affine, header=hdr)

    def __repr__(self):
        return f"<{type(self).__name__} shape={self.shape} affine=\n{self._affine}>"


class Nifti2Image(Nifti1Image):
    """A NIfTI-2 image."""

    header_class = Nifti2Header


class Nifti1Pair(Nifti1Image):
    """A NIfTI-1 image stored as a .hdr/.img pair."""

    _is_pair = True


class Nifti2Pair(Nifti2Image):
    """A NIfTI-2 image stored as a .hdr/.img pair."""

    _is_pair = True


def _convert_header(header, klass):
    """A copy of `header` as `klass` (voxpipe or nibabel headers of either version)."""
    if isinstance(header, klass) and type(header) is klass:
        return header.copy()
    exts = [Extension(e.get_code(), e.get_content()) for e in getattr(header, "extensions", [])]
    if getattr(header, "sizeof_hdr", None) == klass.sizeof_hdr or (
            hasattr(header, "binaryblock") and len(header.binaryblock) == np.dtype(klass._fields).itemsize):
        return klass(header.binaryblock, header.endianness, exts)
    # Different version: copy the fields both have.
    out = klass(endianness=getattr(header, "endianness", "<"))
    for name in out.keys():
        if name in ("sizeof_hdr", "magic", "eol_check"):
            continue
        try:
            out[name] = header[name]
        except (KeyError, ValueError):
            pass
    out.extensions = exts
    return out


def load(filename, *, mmap=True, keep_file_open=None, threads: int = 0, index=None):
    """Open a NIfTI-1/2 file (.nii, .nii.gz, .hdr/.img pairs), reading only the header.

    Returns a Nifti1Image / Nifti2Image (Nifti1Pair / Nifti2Pair for .hdr/.img) whose ``dataobj``
    reads voxels on demand. ``mmap`` (True, False, 'c', 'r') and ``keep_file_open`` (None, False,
    True) behave as in nibabel (see ArrayProxy): whole reads of uncompressed, unscaled data are
    memory-mapped unless ``mmap=False``; only ``keep_file_open=True`` keeps the data file open
    between accesses. ``threads``: threads for large reads (0: all cores).
    ``index`` (single-member .gz data only): None uses a valid seek index next to the file
    (FILE.gz.gzidx) or in the user cache if there is one (``vp.gz.build_index`` writes them);
    a path uses that GZIDX file (from voxpipe, indexed_gzip or rapidgzip; a stale one is an
    error); False never uses one. With an index, ``img.dataobj[..., t]`` inflates only from the
    nearest seek point.
    """
    if mmap not in (True, False, "c", "r"):
        raise ValueError("mmap should be one of {True, False, 'c', 'r'}")
    if keep_file_open not in (True, False, None):
        raise ValueError("keep_file_open should be one of {None, True, False}")
    path = os.fspath(filename)
    core = _core.open(path)
    pair = core.header_path != core.data_path
    if core.version == 2:
        klass = Nifti2Pair if pair else Nifti2Image
    else:
        klass = Nifti1Pair if pair else Nifti1Image
    hdr = klass.header_class(core.header_bytes, ">" if core.big_endian else "<",
                             [Extension(c, b) for c, b in core.extensions])
    if index is None:
        index_args = ("auto", "")
    elif index is False:
        index_args = ("none", "")
    elif isinstance(index, (str, os.PathLike)):
        index_args = ("path", os.fspath(index))
    else:
        raise TypeError(f"index must be None, False or a path, not {type(index).__name__}")
    proxy = ArrayProxy(core, threads, *index_args, mmap=mmap, keep_file_open=keep_file_open)
    if index_args[0] == "path" and core.gzip:
        _core.Reader(core, *index_args)  # an explicit index is checked now, not at the first read
    img = klass(proxy, None, header=hdr)
    img._affine = np.array(core.affine, dtype=np.float64).reshape(4, 4)
    img._filename = path
    img._core = core
    return img


def from_nibabel(nib_img):
    """A voxpipe image with the data, affine, header and extensions of a nibabel image."""
    import nibabel as nib

    if isinstance(nib_img, (nib.Nifti2Image, nib.Nifti2Pair)):
        klass = Nifti2Pair if isinstance(nib_img, nib.Nifti2Pair) else Nifti2Image
    else:
        klass = Nifti1Pair if isinstance(nib_img, nib.Nifti1Pair) and not isinstance(
            nib_img, nib.Nifti1Image) else Nifti1Image
    hdr = klass.header_class(nib_img.header.binaryblock, nib_img.header.endianness,
                             [Extension(e.get_code(), e.get_content()) for e in nib_img.header.extensions])
    # The data come scaled; the image constructor resets the header's scale factors (as nibabel).
    return klass(np.asanyarray(nib_img.dataobj), nib_img.affine, header=hdr)


def _image_for(obj, affine, header):
    if isinstance(obj, Nifti1Image):
        return obj
    if hasattr(obj, "dataobj") and hasattr(obj, "affine") and hasattr(obj, "header"):
        return from_nibabel(obj)
    return Nifti1Image(np.asanyarray(obj), affine, header=header)


def save(img, filename, affine=None, *, header=None, level: int = 1, version: int | None = None,
         gzip_layout: str = "members", threads: int = 0):
    """Write an image (or an array with `affine`) to .nii, .nii.gz or a .hdr/.img pair.

    ``.gz`` outputs are compressed at ``level`` (0-9) on ``threads`` threads (0: all cores).
    ``gzip_layout="members"`` (the default) writes independent gzip members of 1 MiB that
    announce their sizes: every gzip reader (nibabel included) reads the file, and voxpipe reads
    it in parallel and at random. ``"bgzf"`` writes htslib's BGZF blocks; ``"single"`` writes
    one member, byte-identical to nibabel's output at the same level.

    The file is written under a temporary name and renamed when complete. An image read by
    ``vp.load`` and not modified keeps its stored values and scale factors (no re-quantisation);
    other data are written in the header's dtype with scale factors computed as nibabel does.
    """
    path = os.fspath(filename)
    img = _image_for(img, affine, header)
    klass = Nifti2Image if (version == 2 or (version is None and isinstance(img, Nifti2Image))) else Nifti1Image
    hdr = _convert_header(img.header, klass.header_class)
    if _core.is_pair_path(path) != img._is_pair:
        # nibabel's save converts single <-> pair through a new header in native byte order.
        hdr = hdr.as_byteorder("=")
    # Keep the shape/affine synchronised as nibabel's update_header does.
    if hdr.get_data_shape() != img.shape:
        hdr.set_data_shape(img.shape)
    if img.affine is not None and not np.allclose(img.affine, hdr.get_best_affine()):
        hdr.set_sform(img.affine, code="aligned")
        hdr.set_qform(img.affine, code="unknown")
    out_dtype = hdr.get_data_dtype()
    proxy = img.dataobj
    if (isinstance(proxy, ArrayProxy) and img._fdata_cache is None
            and proxy.dtype.newbyteorder("=") == out_dtype.newbyteorder("=")):
        data = proxy.get_unscaled().astype(out_dtype, copy=False)
        hdr.set_slope_inter(proxy.slope, proxy.inter)
    else:
        data, slope, inter = _data_for_writing(np.asanyarray(proxy), out_dtype)
        hdr.set_slope_inter(slope, inter)
    hdr.set_data_offset(0)
    if not data.flags.f_contiguous:
        data = np.asfortranarray(data)
    _core.write(path, hdr.binaryblock, [(e.get_code(), e.get_content()) for e in hdr.extensions],
                _as_bytes_view(data), level, gzip_layout, threads)


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
