"""The formats ``vp.load`` and ``vp.save`` know. Each format module registers itself once, when it
is imported, with one call::

    registry.register(Format("nifti-zarr", suffixes=(".zarr",), load=load, save=save))

``vp.load`` and ``vp.save`` consult the registry and never name a format: a name is matched by
its ending (the longest registered suffix wins; a URL's query and a trailing "/" are cut, case
is ignored); an input no suffix claims is recognised by its first bytes where a format can tell
them (``sniff``), and otherwise goes to the default format, NIfTI, whose core recognises .nii
and .nii.gz by their bytes. Nothing here imports a format.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# What a sniff sees: enough for NIfTI's sizeof_hdr and magic, gzip's magic and DICOM's "DICM"
# after its 128-byte preamble.
SNIFF_BYTES = 352


@dataclass(frozen=True)
class Format:
    """One format: its ``name`` (for messages), the name endings it claims (``suffixes``,
    lower case, e.g. ``".nii.gz"``), its reader ``load(source, **options)`` (the source as the
    user gave it: a path, URL, bytes or stream; the options are vp.load's keywords) and writer
    ``save(img, filename, affine=None, **options)`` (vp.save's keywords; each format takes its
    own and ignores the others), either of which may be None, and ``sniff(first_bytes)``:
    whether bytes are this format's (None: known by name only). ``nibabel_class`` and
    ``from_file_map``: the nibabel class whose ``from_file_map`` ``accelerate_nibabel`` routes
    through ``from_file_map(klass, file_map, mmap, keep_file_open)`` (None where nibabel
    should read)."""

    name: str
    suffixes: tuple[str, ...] = ()
    load: Callable[..., Any] | None = None
    save: Callable[..., None] | None = None
    sniff: Callable[[bytes], bool] | None = None
    nibabel_class: type | None = None
    from_file_map: Callable[..., Any] | None = None


_lock = threading.Lock()
_formats: dict[str, Format] = {}
_default: list[str] = []


def register(fmt: Format, *, default: bool = False) -> Format:
    """Add `fmt` (replacing a format of the same name); ``default=True``: the format of inputs
    that neither a suffix nor a sniff claims."""
    if any(s != s.lower() or not s.startswith(".") for s in fmt.suffixes):
        raise ValueError(f"format {fmt.name!r}: suffixes are lower case and start with '.'")
    with _lock:
        _formats[fmt.name] = fmt
        if default:
            _default[:] = [fmt.name]
    return fmt


def unregister(name: str) -> None:
    """Remove the format called `name` (KeyError if there is none)."""
    with _lock:
        del _formats[name]
        if _default == [name]:
            _default.clear()


def formats() -> list[Format]:
    """The registered formats, in registration order."""
    with _lock:
        return list(_formats.values())


def _name_of(obj: Any) -> str | None:
    if isinstance(obj, os.PathLike):
        obj = os.fspath(obj)
    if not isinstance(obj, str):
        return None
    return obj.split("?", 1)[0].rstrip("/").lower()


def by_name(obj: Any) -> Format | None:
    """The format whose suffix `obj` (a path or URL) ends with, the longest suffix winning;
    None for anything else."""
    name = _name_of(obj)
    if name is None:
        return None
    best, length = None, 0
    for fmt in formats():
        for suffix in fmt.suffixes:
            if len(suffix) > length and name.endswith(suffix):
                best, length = fmt, len(suffix)
    return best


def _first_bytes(obj: Any) -> bytes | None:
    """The first bytes of a local file; None for anything else: what cannot be read without
    consuming or fetching it (a stream, a URL, a folder), and bytes, which vp.from_bytes and
    vp.load take as NIfTI's (.nii or .nii.gz) only."""
    name = os.fspath(obj) if isinstance(obj, (str, os.PathLike)) else None
    if not isinstance(name, str) or "://" in name:
        return None
    try:
        # Not followed into FIFOs or devices: the default format's own open reports those.
        with open(name, "rb", opener=lambda p, f: os.open(p, f | os.O_NONBLOCK)) as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            return f.read(SNIFF_BYTES)
    except OSError:
        return None


def _default_format() -> Format:
    with _lock:
        if not _default:
            raise LookupError("no default format registered")
        return _formats[_default[0]]


def for_reading(obj: Any) -> Format:
    """The format to read `obj` with: by its name's suffix, else by a local file's first bytes
    (a format other than the default whose sniff accepts them), else the default format."""
    fmt = by_name(obj)
    if fmt is not None and fmt.load is not None:
        return fmt
    default = _default_format()
    sniffers = [f for f in formats() if f.sniff is not None and f is not default and f.load]
    if fmt is None and sniffers:
        head = _first_bytes(obj)
        if head is not None:
            for f in sniffers:
                if f.sniff is not None and f.sniff(head):
                    return f
    return default


def for_writing(filename: Any) -> Format:
    """The format to write `filename` as: by its suffix, else the default format."""
    fmt = by_name(filename)
    return fmt if fmt is not None and fmt.save is not None else _default_format()
