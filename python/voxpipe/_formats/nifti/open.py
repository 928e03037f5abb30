"""NIfTI-1/2 read: a path, URL, bytes or stream opened by the C++ core, its header checked and
fixed as nibabel's from_file_map does, assembled into nibabel's own image classes over voxpipe's
ArrayProxy. Also what ``accelerate_nibabel`` plugs into nibabel's ``from_file_map``."""

from __future__ import annotations

import gzip
import io
import logging
import os
import zlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # typing.Buffer is Python 3.12+; the annotations are not evaluated
    from typing_extensions import Buffer

import numpy as np

import nibabel as nib
from nibabel import imageglobals
from nibabel.batteryrunners import BatteryRunner
from nibabel.fileholders import FileHolder, FileMap, copy_file_map
from nibabel.nifti1 import Nifti1Extension, Nifti1Header, Nifti1Pair, extension_codes

from ..._foundation.native import core as _core
from ..._foundation.header import Nifti2Header
from ..._foundation.types import NiftiImage
from ..._sources import remote as _remote
from .memory import MmapMode
from .proxy import ArrayProxy
from .remote import open_image, pair_partner_url

# Header extensions are nibabel's: Extension(code, content) makes one.
Extension = Nifti1Extension


# vp.load returns nibabel's own classes, not subclasses: code that tests ``type(img)`` (nibabel's
# nib.save conversions and slicer, among others) treats them as nibabel's.
NIBABEL_CLASSES = {(1, False): nib.Nifti1Image, (2, False): nib.Nifti2Image,
                   (1, True): nib.Nifti1Pair, (2, True): nib.Nifti2Pair}

# The class of an image voxpipe assembles: nibabel's four NIfTI classes all derive from it.
ImageClass = type[Nifti1Pair]


class Report(Protocol):
    """A header check's report, as nibabel's batteryrunners.Report logs or raises it."""

    problem_level: int

    def log_raise(self, logger: logging.Logger, error_level: int = 40) -> None: ...


# (header, reports): a header as nibabel's checks left it, and their reports.
CheckedHeader = tuple[Nifti1Header, Sequence[Report]]


def _index_args(index: object) -> tuple[str, str]:
    if index is None:
        return ("auto", "")
    if index is False:
        return ("none", "")
    if isinstance(index, (str, os.PathLike)):
        return ("path", os.fspath(index))
    raise TypeError(f"index must be None, False or a path, not {type(index).__name__}")


def check_open_args(mmap: object, keep_file_open: object) -> None:
    if mmap not in (True, False, "c", "r"):
        raise ValueError("mmap should be one of {True, False, 'c', 'r'}")
    if keep_file_open not in (True, False, None):
        raise ValueError("keep_file_open should be one of {None, True, False}")


def _stored_header_block(core: _core.NiftiImage, source: object, size: int) -> bytes | None:
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


def _leading_bytes(data: Buffer, size: int) -> bytes:
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


def _checked_header(klass: ImageClass, core: _core.NiftiImage,
                    source: object) -> CheckedHeader:
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
    checked: CheckedHeader = BatteryRunner(klass.header_class._get_checks()).check_fix(hdr)
    return checked


class _CoreReport:
    """A fix the core applied, where nibabel's own report cannot be had: logged as a warning
    in the core's words, never raised (nibabel's level for it is not known here)."""

    problem_level = 0

    def __init__(self, message: str) -> None:
        self.message = message

    def log_raise(self, logger: logging.Logger, error_level: int = 40) -> None:
        logger.warning(self.message)


def _nibabel_would_raise(reports: Sequence[Report]) -> bool:
    level = imageglobals.error_level
    return any(r.problem_level and r.problem_level >= level for r in reports)


def image_from_core(klass: ImageClass, core: _core.NiftiImage, file_map: FileMap,
                    mmap: MmapMode, keep_file_open: bool | None, threads: int, index: object,
                    source: object = None, checked: CheckedHeader | None = None,
                    proxy: ArrayProxy | None = None) -> Nifti1Pair:
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
        # nibabel types a Recoder's values as Hashable; its handler field holds extension classes.
        handler = extension_codes.handler.get(code, Nifti1Extension)
        hdr.extensions.append(handler(code, content))  # type: ignore[operator]
    if proxy is None:
        proxy = ArrayProxy(core, threads, *index_args, mmap=mmap, keep_file_open=keep_file_open,
                           source=source)
    if index_args[0] == "path" and core.gzip:
        _core.Reader(core, *index_args)  # an explicit index is checked now, not at the first read
    img = klass(proxy, None, hdr, file_map=file_map)
    img._affine = np.array(core.affine, dtype=np.float64).reshape(4, 4)
    # nibabel's from_file_map sets _load_cache, which its classes do not declare.
    img._load_cache = {"header": hdr.copy(),  # type: ignore[attr-defined]
                       "affine": img._affine.copy(), "file_map": copy_file_map(file_map)}
    return img


def _from_file_map(klass: ImageClass, file_map: FileMap, mmap: MmapMode,
                   keep_file_open: bool | None, threads: int, index: object) -> Nifti1Pair | None:
    """`klass`'s image of `file_map` read through voxpipe, or None where nibabel's own
    from_file_map should serve it (see _VoxpipeImage.from_file_map)."""
    check_open_args(mmap, keep_file_open)
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
    return image_from_core(klass, core, file_map, mmap, keep_file_open, threads, index, source,
                           checked)


def _file_map_of(core: _core.NiftiImage) -> dict[str, FileHolder]:
    if core.header_path == core.data_path:
        return {"image": FileHolder(filename=core.data_path)}
    return {"header": FileHolder(filename=core.header_path),
            "image": FileHolder(filename=core.data_path)}


def _stream_name(fileobj: object) -> str:
    # Named for messages only: a stream's name may not describe its bytes (gzip.open's names
    # the .gz file, its bytes are the .nii).
    name = getattr(fileobj, "name", None)
    kind = type(fileobj).__name__
    return f"{name} ({kind} stream)" if isinstance(name, str) else f"<{kind}>"


def _stream_bytes(fileobj: Any) -> bytes | bytearray:
    """What a readable binary file object holds from its position on."""
    data = fileobj.read()
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"expected a binary file object, but read() returned "
                        f"{type(data).__name__}")
    return data


def _open_input(source: Any, storage_options: Mapping[str, Any] | None = None,
                filesystem: Any = None) -> tuple[_core.NiftiImage, dict[str, FileHolder], object]:
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
                source = pair_partner_url(head) + sep + query
            core, remote = open_image(source, storage_options, filesystem=filesystem)
            return core, {"header": FileHolder(filename=source),
                          "image": FileHolder(filename=remote.data_file.url)}, remote
        core, remote = open_image(source, storage_options, filesystem=filesystem)
        return core, {"image": FileHolder(filename=source)}, remote
    if storage_options:
        raise TypeError("storage_options applies to URLs (s3://, gs://, az://, https://...) only")
    if isinstance(source, (str, os.PathLike)):
        core = _core.open(os.fspath(source))
        return core, _file_map_of(core), None
    if isinstance(source, (bytes, bytearray, memoryview)):
        core = _core.open_bytes(source, "<bytes>")
        # As nibabel's from_bytes: a BytesIO of the bytes (which shares a bytes object).
        holder = (FileHolder(fileobj=io.BytesIO(source)) if isinstance(source, bytes)
                  else FileHolder())
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
    klass = NIBABEL_CLASSES[(core.version, core.header_path != core.data_path)]
    return image_from_core(klass, core, {"image": FileHolder(filename=obj.url)}, True, None,
                           threads, index, obj)


def load(filename: Any, *, mmap: Any = True, keep_file_open: bool | None = None,
         threads: int = 0, index: Any = None, storage_options: Mapping[str, Any] | None = None,
         filesystem: Any = None, level: int = 0) -> NiftiImage:
    """The NIfTI format's reader (vp.load's for every name no other format claims): a path, a
    URL, bytes or a readable binary file object, opened by the core; its header only."""
    check_open_args(mmap, keep_file_open)
    if level:
        raise TypeError("level= selects a pyramid level of a NIfTI-Zarr store (*.zarr)")
    core, file_map, source = _open_input(filename, storage_options, filesystem)
    klass = NIBABEL_CLASSES[(core.version, core.header_path != core.data_path)]
    return image_from_core(klass, core, file_map, mmap, keep_file_open, threads, index, source)


def nibabel_from_file_map(klass: Any, file_map: Any, mmap: Any = True,
                          keep_file_open: bool | None = None) -> NiftiImage | None:
    """`klass`'s image of `file_map` read through voxpipe (nibabel's from_file_map under
    accelerate_nibabel), or None where nibabel's own from_file_map should serve it."""
    return _from_file_map(klass, file_map, mmap, keep_file_open, 0, None)
