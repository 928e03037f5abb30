"""What identifies a file, an object's bytes or this machine: what pickles check when they are
opened again and what Dask's deterministic names are made of. Knows no format."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typing.TypeAlias and Unpack are newer than 3.9; annotations aren't evaluated
    from typing import TypeAlias, Unpack

from .native import core as _core

# (device, inode, size, mtime_ns) of a file.
FileIdentity: TypeAlias = tuple[int, int, int, int]
# What a pickle of a file records: the machine, then each file's identity (None: not known).
PickledIdentity: TypeAlias = "tuple[str, Unpack[tuple[FileIdentity | None, ...]]]"


def _this_machine() -> str:
    """What tells this machine (this boot of it) from others: the kernel's boot id where there
    is one, else the host name."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        import socket

        return socket.gethostname()


THIS_MACHINE = _this_machine()


def stat_identity(path: str) -> FileIdentity | None:
    """(device, inode, size, mtime_ns) of the file `path` names now, or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def check_reopened(files: Iterable[tuple[str, FileIdentity | None]],
                   identity: PickledIdentity) -> None:
    """VoxpipeIOError unless `files` ((path, identity now) pairs) are those a pickle was made
    of (`identity`: the machine, then the header's and data's (device, inode, size, mtime_ns)).
    On another machine the device and inode say nothing (NFS numbers devices per client; a
    worker may read its own copy of the file): there the size and time are compared."""
    machine, *opened = identity
    for (path, now), was in zip(files, opened):
        if machine != THIS_MACHINE:
            was, now = ((0, 0, *i[2:]) if i is not None else None for i in (was, now))
        _core.check_same_file(path, was, now)


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


def file_identity(path: str) -> tuple[Any, ...]:
    """`path`, absolute (as an opener recorded it), normalised, with its size, mtime and
    inode."""
    st = os.stat(path)
    return (os.path.normpath(path), st.st_size, st.st_mtime_ns, st.st_ino)


def bytes_token(data: Any) -> str:
    """A digest of a buffer's bytes (an image opened from memory is named by what it holds)."""
    return hashlib.sha256(memoryview(data).cast("B")).hexdigest()
