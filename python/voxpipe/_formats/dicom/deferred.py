"""Deferred values: what `read` located but did not read (values longer than ``defer_size``)
are read on first access from the file the dataset came from, checked to be the file that was
parsed, or from the bytes of a file held in memory."""

from __future__ import annotations

import os
import stat
import zlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..._foundation import errors
from ..._foundation.native import core as _core
from .tags import Tag

if TYPE_CHECKING:  # typing_extensions is needed for type checking only
    from typing_extensions import Buffer

__all__ = ["DeferredSource"]


class DeferredSource:
    """The file a dataset came from, for values read after `read` returned: the file at its
    path, or, for a file held in memory (an object from a URL), ``buffer``."""

    def __init__(self, core_file: _core.DicomFile, size: int,
                 buffer: Buffer | None = None) -> None:
        self.path = core_file.path
        self.size = size  # taken before parsing, so that a change during parsing is seen too
        # (device, inode, size, mtime_ns) of the file the parse read (None for bytes): a file
        # renamed over this one or rewritten in place since is refused, not read at the old
        # offsets.
        self.identity = None if buffer is not None else core_file.identity
        self.inflated = core_file.offsets_in_inflated_stream
        self.dataset_offset = core_file.dataset_offset
        self.buffer = buffer

    def read(self, offset: int, length: int, tag: int) -> bytes:
        field = f"deferred value {Tag(tag)}"
        if self.buffer is not None:
            view = memoryview(self.buffer).cast("B")
            if not self.inflated:
                data = bytes(view[offset:offset + length])
            else:
                step = 1 << 20
                data = self._inflate((view[i:i + step]
                                      for i in range(self.dataset_offset, len(view), step)),
                                     offset, length)
            return self._whole(data, offset, length, field)
        # Opened without waiting (a FIFO that took the name would wait for a writer forever),
        # then checked on the descriptor: the file that is read is the file that was checked.
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            raise errors.VoxpipeFileNotFoundError(
                f"{self.path}: {field}: the file no longer exists", self.path, field, offset
            ) from None
        with open(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                kind = ("FIFO" if stat.S_ISFIFO(st.st_mode) else "directory"
                        if stat.S_ISDIR(st.st_mode) else "special file")
                raise errors.VoxpipeIOError(
                    f"{self.path}: {field}: expected a regular file, but found a {kind}",
                    self.path, field, offset)
            os.set_blocking(fd, True)
            if st.st_size != self.size:
                raise errors.VoxpipeIOError(
                    f"{self.path}: {field}: expected the file as read ({self.size} bytes), but "
                    f"it now has {st.st_size} bytes", self.path, field, offset)
            now = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if self.identity is not None and tuple(self.identity) != now:
                raise errors.VoxpipeIOError(
                    f"{self.path}: {field}: the file changed since it was opened (another file "
                    f"put in its place, or rewritten); read it again to see the new file",
                    self.path, field, offset)
            if not self.inflated:
                f.seek(offset)
                data = f.read(length)
            else:
                f.seek(self.dataset_offset)
                data = self._inflate(iter(lambda: f.read(1 << 20), b""), offset, length)
        return self._whole(data, offset, length, field)

    def _whole(self, data: bytes, offset: int, length: int, field: str) -> bytes:
        if len(data) != length:
            raise errors.TruncatedError(
                f"{self.path}: {field}: expected {length} bytes at byte {offset}, but the data "
                f"end after {len(data)}", self.path, field, offset)
        return data

    def _inflate(self, chunks: Iterable[bytes | memoryview], offset: int,
                 length: int) -> bytes:
        """Bytes [offset, offset + length) of the inflated dataset stream, whose deflated bytes
        ``chunks`` yields from its start (a deflate stream has no random access), keeping only
        what is asked for."""
        inflater = zlib.decompressobj(-zlib.MAX_WBITS)
        pos, out = 0, bytearray()
        end = offset + length
        for chunk in chunks:
            if pos >= end:
                break
            try:
                data = inflater.decompress(chunk)
            except zlib.error as e:
                raise errors.CorruptError(f"{self.path}: deflated dataset: {e}", self.path,
                                          "deflated dataset", None) from None
            lo, hi = max(offset - pos, 0), min(end - pos, len(data))
            if lo < hi:
                out += data[lo:hi]
            pos += len(data)
            if inflater.eof:
                break
        return bytes(out)
