"""Local NIfTI-Zarr stores as voxpipe reads them (read.py): zarr's LocalStore with every file
checked before it is read, and the identity of the files that give a store's voxels their
meaning, recorded at open and checked after every read.

- Only regular files are read. zarr's LocalStore opens whatever a key names: a FIFO as
  ``zarr.json`` or as a chunk blocks the open until a writer comes, for ever. Here the name is
  stat'ed first and opened with O_NONBLOCK (a FIFO that takes the name in between opens at once),
  and anything but a regular file is VoxpipeIOError naming it (a folder stays "no such key", as
  zarr treats it). Symbolic links are followed, as zarr follows them (DataLad and git-annex
  datasets are made of them).
- Metadata documents (zarr.json, .zarray, .zgroup, .zattrs, .zmetadata) hold at most
  MAX_METADATA_BYTES: one is read whole and parsed as JSON, so its size is checked before.
- The files read while a store is opened (its metadata and the ``nifti`` header array's chunks)
  and the store's folder itself are the store's identity: (inode, size, mtime_ns) of each. A
  store replaced (a new folder renamed over it) or rewritten in place (zarr writes each file as
  a new one renamed over the old) has another. Checking it costs one stat per recorded file.
- Every file of the store is listed when it is opened (a walk of its folders: one stat per file,
  at most pinned.MAX_LISTED_OBJECTS of them), before zarr reads its metadata: every file read
  afterwards, metadata and chunks, must be the one listed (its inode, size and mtime_ns), and a
  chunk absent then must be absent still. A chunk rewritten, removed or added after the open is
  VoxpipeIOError naming the store and the chunk's key, never the new voxels (the local form of
  pinned.py's listing of a store on object storage). The listing's digest is part of the
  identity a pickle and a Dask token carry.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # zarr is an optional extra: imported when a store is opened
    from zarr.abc.store import ByteRequest
    from zarr.core.buffer import Buffer, BufferPrototype
    from zarr.storage import LocalStore

from ..._foundation.optional import require
from ..._foundation.errors import LimitError, VoxpipeIOError
from .pinned import MAX_LISTED_OBJECTS

# The largest metadata document read: generous for OME metadata of many levels and attributes
# (a NIfTI-Zarr's zarr.json is about 2 KB), and nothing a hostile file can make large.
MAX_METADATA_BYTES = 64 << 20
_METADATA_NAMES = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"})

# (inode, size, mtime_ns) of a file or folder.
Identity = tuple[int, int, int]

_KINDS = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
          (stat.S_ISBLK, "block device"))


def _not_regular(path: str, mode: int) -> VoxpipeIOError:
    kind = next((name for test, name in _KINDS if test(mode)), "special file")
    return VoxpipeIOError(f"{path}: expected a regular file, but found a {kind}", path=path)


def identity_of(st: os.stat_result) -> Identity:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def open_regular(path: str) -> tuple[io.BufferedReader, os.stat_result]:
    """``path`` opened for reading, and its stat, where it is a regular file (symbolic links
    followed). A folder raises IsADirectoryError (zarr's "no such key"), a missing file
    FileNotFoundError, anything else VoxpipeIOError at once."""
    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(path)
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode)
    # O_NONBLOCK: a FIFO that took the name since the stat opens at once, and is refused below.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(path, st.st_mode)
        os.set_blocking(fd, True)  # network and FUSE file systems may honour it on files
        return os.fdopen(fd, "rb"), st
    except BaseException:
        os.close(fd)
        raise


def walk(root: str) -> dict[str, Identity]:
    """Every file under the folder ``root`` (key: its path relative to it, "/"-separated) and
    its identity, symbolic links followed as zarr follows them (each folder walked once: a link
    back up is not walked again). LimitError beyond MAX_LISTED_OBJECTS files."""
    files: dict[str, Identity] = {}
    linked: set[tuple[int, int]] = set()  # folders reached through links: each walked once
    todo = [("", root)]
    while todo:
        prefix, folder = todo.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                key = prefix + entry.name
                try:
                    # The type the folder's entry gives needs no system call but for links.
                    if entry.is_dir():
                        if entry.is_symlink():
                            st = entry.stat()
                            if (st.st_dev, st.st_ino) in linked:
                                continue
                            linked.add((st.st_dev, st.st_ino))
                        todo.append((key + "/", entry.path))
                        continue
                    est = entry.stat()
                except FileNotFoundError:  # a dangling link, or removed while walked: absent
                    continue
                files[key] = identity_of(est)
                if len(files) > MAX_LISTED_OBJECTS:
                    raise LimitError(f"{root}: expected a store of at most {MAX_LISTED_OBJECTS} "
                                     f"files, which voxpipe lists to pin its reads to the "
                                     f"version opened, but it has more", path=root,
                                     field="listing")
    return files


def changed_file(store: str, key: str, was: Identity | None,
                 now: Identity | None) -> VoxpipeIOError | None:
    """The error for the file ``key`` of the store ``store`` listed as ``was`` at open (None:
    absent) and found as ``now``, or None where they are the same."""
    if was == now:
        return None
    how = ("removed" if now is None else "added" if was is None else "rewritten")
    return VoxpipeIOError(f"{store}: the store changed since it was opened: {key} was {how}",
                          path=store, field=key)


def _read(path: Path, byte_range: ByteRequest | None, record: dict[str, Identity] | None,
          pinned: tuple[str, str, dict[str, Identity]] | None = None) -> bytes:
    """The bytes zarr's LocalStore would read for ``byte_range`` (None: all), from a regular
    file only; metadata documents bounded by MAX_METADATA_BYTES. ``pinned``: (the store's name,
    the file's key, the store's listing at open): the file must be the one listed."""
    from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

    name = os.fspath(path)
    try:
        f, st = open_regular(name)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        if pinned is not None:
            error = changed_file(pinned[0], pinned[1], pinned[2].get(pinned[1]), None)
            if error is not None:
                raise error from None
        raise
    with f:
        if pinned is not None:
            error = changed_file(pinned[0], pinned[1], pinned[2].get(pinned[1]), identity_of(st))
            if error is not None:
                raise error
        if path.name in _METADATA_NAMES and st.st_size > MAX_METADATA_BYTES:
            raise LimitError(f"{name}: expected a metadata document of at most "
                             f"{MAX_METADATA_BYTES} bytes, but it has {st.st_size}", path=name,
                             field=path.name)
        if record is not None:
            record[name] = identity_of(st)
        size = st.st_size
        if byte_range is None:
            start, end = 0, size
        elif isinstance(byte_range, RangeByteRequest):
            start, end = byte_range.start, min(size, byte_range.end)
        elif isinstance(byte_range, OffsetByteRequest):
            start, end = byte_range.offset, size
        elif isinstance(byte_range, SuffixByteRequest):
            start, end = max(0, size - byte_range.suffix), size
        else:
            raise TypeError(f"Unexpected byte_range, got {byte_range}.")
        f.seek(start)
        # Never more than the size the file had when opened: a file growing under the read
        # sizes nothing.
        return f.read(max(0, end - start))


def _store_class() -> type[LocalStore]:
    require("zarr", "zarr", "NIfTI-Zarr", "zarr")
    from zarr.core.buffer.core import default_buffer_prototype
    from zarr.storage import LocalStore

    class CheckedLocalStore(LocalStore):
        """zarr's LocalStore reading regular files only (module docstring); while ``record``
        is a dict, the identity of every file read goes into it."""

        record: dict[str, Identity] | None = None
        # (the store's name, its files at open: walk()); None: reads are not pinned
        pinned: tuple[str, dict[str, Identity]] | None = None

        def _get_checked(self, key: str, prototype: BufferPrototype | None,
                         byte_range: ByteRequest | None) -> Buffer | None:
            if prototype is None:
                prototype = default_buffer_prototype()
            pin = None if self.pinned is None else (self.pinned[0], key, self.pinned[1])
            try:
                data = _read(self.root / key, byte_range, self.record, pin)
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                return None
            return prototype.buffer.from_bytes(data)

        def get_sync(self, key: str, *, prototype: BufferPrototype | None = None,
                     byte_range: ByteRequest | None = None) -> Buffer | None:
            self._ensure_open_sync()
            return self._get_checked(key, prototype, byte_range)

        async def get(self, key: str, prototype: BufferPrototype | None = None,
                      byte_range: ByteRequest | None = None) -> Buffer | None:
            if not self._is_open:
                await self._open()
            return await asyncio.to_thread(self._get_checked, key, prototype, byte_range)

        async def get_partial_values(
                self, prototype: BufferPrototype,
                key_ranges: Iterable[tuple[str, ByteRequest | None]]) -> list[Buffer | None]:
            return await asyncio.gather(*(asyncio.to_thread(self._get_checked, key, prototype, r)
                                          for key, r in key_ranges))

    return CheckedLocalStore


_StoreClass: type[LocalStore] | None = None


def local_store(location: str, read_only: bool) -> LocalStore:
    """A zarr store over the local folder ``location`` that reads regular files only (a
    CheckedLocalStore: its ``record``, set to a dict, collects the identity of each file read)."""
    global _StoreClass
    if _StoreClass is None:
        _StoreClass = _store_class()
    return _StoreClass(location, read_only=read_only)


class StoreIdentity:
    """What a local store was when opened: its folder's identity, each recorded file's, by
    path, and the listing of all its files (walk()). ``check`` compares the recorded files with
    those there now, ``check_chunk`` one chunk with the listing."""

    def __init__(self, root: str, files: dict[str, Identity],
                 listing: dict[str, Identity]) -> None:
        self.root = root
        self.files = dict(files)
        self.listing = listing
        self.folder = identity_of(os.stat(root))[0]  # a folder's size and mtime change with use
        h = hashlib.sha256()
        for key in sorted(listing):
            h.update(f"{key}\0{listing[key]}\n".encode())
        self.digest = h.hexdigest()

    def state(self) -> tuple[Any, ...]:
        """Picklable: (folder inode, ((path relative to the store, identity), ...), the digest
        of the listing)."""
        return (self.folder, tuple(sorted((os.path.relpath(p, self.root), i)
                                          for p, i in self.files.items())), self.digest)

    def check_chunk(self, name: str, key: str, path: str) -> bool:
        """Whether the chunk ``key`` (relative to the store) is there, at ``path``: VoxpipeIOError
        naming the store ``name`` and the key where it is not as listed at open."""
        try:
            st = os.stat(path)
            # a folder where a chunk belongs is an absent chunk, as in zarr (and walk())
            now: Identity | None = None if stat.S_ISDIR(st.st_mode) else identity_of(st)
        except (FileNotFoundError, NotADirectoryError):
            now = None
        error = changed_file(name, key, self.listing.get(key), now)
        if error is not None:
            raise error
        return now is not None

    def check(self, name: str) -> None:
        """VoxpipeIOError naming the store ``name`` and the first file that is not what was
        recorded at open: one stat per file, and one of the folder."""
        try:
            now = os.stat(self.root).st_ino
        except OSError:
            now = None
        if now != self.folder:
            raise VoxpipeIOError(f"{name}: the store changed since it was opened (its folder "
                                 f"was replaced or removed)", path=name, field="identity")
        for path, ident in self.files.items():
            try:
                have: Identity | None = identity_of(os.stat(path))
            except OSError:
                have = None
            if have != ident:
                rel = os.path.relpath(path, self.root)
                raise VoxpipeIOError(f"{name}: the store changed since it was opened ({rel} was "
                                     f"{'removed' if have is None else 'rewritten'})", path=name,
                                     field="identity")

    def check_same(self, name: str, earlier: tuple[Any, ...]) -> None:
        """VoxpipeIOError naming the store ``name`` where this open found other files than the
        open whose state() is ``earlier`` (a pickled proxy reopened after a change)."""
        if self.state() != tuple(earlier):
            raise VoxpipeIOError(f"{name}: the store changed since it was opened (its "
                                 f"metadata, header array or chunks were rewritten)", path=name,
                                 field="identity")
