"""Exceptions raised by voxpipe.

Every error carries ``code`` (what kind of failure), ``path`` (the file), ``field`` (the header
field or stream part involved, when there is one) and ``offset`` (byte offset, when known). Each
class also derives from the built-in exception a user would catch: ``ValueError`` for bad files,
``OSError`` for I/O, and ``FileNotFoundError`` for a missing file. A file that is not a valid
image (``FormatError``, ``TruncatedError``, ``CorruptError``) is also nibabel's
``ImageFileError``, which code written for ``nib.load`` catches.
"""

from ._foundation.errors import (CorruptDataWarning, CorruptError, DeviceUnavailableError,
                                 FormatError, InvalidArgumentError, LimitError,
                                 ResampleArgumentError, ResampleTypeError, SkippedFileWarning,
                                 TruncatedError, UnsupportedError, VoxpipeError,
                                 VoxpipeFileNotFoundError, VoxpipeIOError)

__all__ = ["CorruptDataWarning", "CorruptError", "DeviceUnavailableError", "FormatError",
           "InvalidArgumentError", "LimitError", "ResampleArgumentError", "ResampleTypeError",
           "SkippedFileWarning", "TruncatedError", "UnsupportedError", "VoxpipeError",
           "VoxpipeFileNotFoundError", "VoxpipeIOError"]

# Named where users meet them (tracebacks, pickles, documentation): voxpipe.errors.FormatError.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
