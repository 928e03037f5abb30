"""The exception classes of ``voxpipe.errors`` (the public module, which documents them and
re-exports them under its own name) and the table that turns the C++ core's error codes into
them (``make_error``, called by the extension)."""

from __future__ import annotations

from typing import Any

from nibabel.filebasedimages import ImageFileError

from .redact import redact


class VoxpipeError(Exception):
    """Base class of every voxpipe error."""

    code = "unknown"

    def __init__(self, message: str, path: str = "", field: str = "", offset: int | None = None):
        # A URL's credentials (user-info, a presigned URL's signature) never reach the text of
        # an error, its pickle or a traceback (_foundation/redact.py).
        super().__init__(redact(str(message)))
        self.path = redact(path) if isinstance(path, str) else path
        self.field = field
        self.offset = offset

    def __reduce__(self) -> tuple[type[VoxpipeError], tuple[str, str, str, int | None],
                                  dict[str, Any]]:
        # Rebuilt from its own arguments: the default (through the built-in bases, ValueError and
        # OSError for TruncatedError) fails to unpickle, so an error raised in a Dask worker or
        # a multiprocessing child would reach the caller as another exception.
        return (type(self), (str(self.args[0]) if self.args else "", self.path, self.field,
                             self.offset), self.__dict__)


class FormatError(VoxpipeError, ValueError, ImageFileError):
    """Not a valid file of the expected format (bad magic, invalid header field). Also nibabel's
    ImageFileError, which ``nib.load`` raises for a file it cannot read as an image."""

    code = "format"


class UnsupportedError(VoxpipeError, ValueError):
    """A valid file that voxpipe (and nibabel) cannot read, e.g. an unsupported datatype.

    Not an ImageFileError: nibabel raises none for these files (HeaderDataError for a datatype
    it does not read; a valid .nii.bz2 it reads), nor for a device or codec that is missing."""

    code = "unsupported"


class TruncatedError(VoxpipeError, ValueError, OSError, ImageFileError):
    """The file ends before the data its header promises (also nibabel's ImageFileError)."""

    code = "truncated"


class CorruptError(VoxpipeError, ValueError, OSError, ImageFileError):
    """A compressed stream is invalid or fails its checksum (also nibabel's ImageFileError)."""

    code = "corrupt"


class LimitError(VoxpipeError, ValueError):
    """A size in the file exceeds the configured limits or what the file can justify.

    Not an ImageFileError: nibabel opens such a header and fails later (MemoryError), or reads
    what is there."""

    code = "limit"


class InvalidArgumentError(VoxpipeError, ValueError):
    """The caller asked for something impossible (bad selection, bad dtype)."""

    code = "invalid_argument"


class ResampleArgumentError(InvalidArgumentError, RuntimeError):
    """An argument of ``vp.map_coordinates`` or ``vp.affine_transform`` that scipy.ndimage
    refuses with ``RuntimeError``: a spline order outside 0-5, a boundary mode it does not know,
    an input or output of rank 0, coordinates, an output array, a matrix or an offset of the
    wrong shape, an output dtype it cannot write. Code written for scipy catches it as
    ``RuntimeError``; it is an InvalidArgumentError (a ``ValueError``) as well."""


class ResampleTypeError(InvalidArgumentError, TypeError):
    """Complex coordinates given to ``vp.map_coordinates``, which scipy.ndimage refuses with
    ``TypeError``; an InvalidArgumentError (a ``ValueError``) as well."""


class VoxpipeIOError(VoxpipeError, OSError):
    """The operating system refused an open, read, write or rename."""

    code = "io"


class VoxpipeFileNotFoundError(VoxpipeError, FileNotFoundError):
    """The file does not exist."""

    code = "not_found"


class SkippedFileWarning(UserWarning):
    """A file that failed to load was skipped (``on_error="skip"``); the message names it."""


class CorruptDataWarning(UserWarning):
    """Data a decoder read past: damage it recovered from (DICOM ``on_corrupt="warn"``), or an
    RLE segment longer than its frame. The message names the file, the frame and what was found."""


_BY_CODE = {
    cls.code: cls
    for cls in (
        FormatError,
        UnsupportedError,
        TruncatedError,
        CorruptError,
        LimitError,
        InvalidArgumentError,
        VoxpipeIOError,
        VoxpipeFileNotFoundError,
    )
}


def make_error(code: str, message: str, path: str, field: str, offset: int | None) -> VoxpipeError:
    """Build the exception for a C++ error code (called from the extension module)."""
    return _BY_CODE.get(code, VoxpipeError)(message, path, field, offset)


class DeviceUnavailableError(VoxpipeError, RuntimeError):
    """A CUDA device was asked for, but cannot be used here; the message says why (the reason
    of ``vp.cuda_status()``, e.g. no NVIDIA driver, no device, a build without CUDA kernels)."""

    code = "device_unavailable"
