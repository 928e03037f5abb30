"""nibabel, read by voxpipe: ``vp.accelerate_nibabel()`` makes plain ``nibabel.load`` (and every
``from_filename`` / ``from_file_map`` of nibabel's NIfTI classes, CIFTI-2's data included) return
images whose ``dataobj`` is voxpipe's ArrayProxy, so that nilearn, MONAI, nitransforms or TorchIO
read through voxpipe without a changed line.

Only nibabel's NIfTI classes are touched (``Nifti1Pair`` and the classes that inherit its
``from_file_map``: Nifti1Image, Nifti2Pair, Nifti2Image, CIFTI-2's NIfTI part). Whatever voxpipe
does not open, for whatever reason (another format, an open file object it cannot serve, a
header it refuses), is opened by nibabel's own code, so nibabel's errors stay nibabel's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Literal

from nibabel.fileholders import FileMap
from nibabel.filebasedimages import FileBasedImage

from .._formats import registry

_lock = threading.Lock()

# nibabel's own from_file_map of each class a format serves: (the function, whether the class
# defines it itself), taken before the class is first patched. Nifti1Pair has none of its own (it
# inherits AnalyzeImage's): disabling removes the patch rather than setting anything.
_originals: dict[type, tuple[Callable[..., FileBasedImage], bool]] = {}


def _served() -> list[tuple[type, Callable[..., Any]]]:
    """(nibabel class, voxpipe's from_file_map) of each registered format that serves one."""
    return [(f.nibabel_class, f.from_file_map) for f in registry.formats()
            if f.nibabel_class is not None and f.from_file_map is not None]


def _accelerated(klass: type, serve: Callable[..., Any]) -> classmethod[Any, Any, Any]:
    original = _originals[klass][0]

    def from_file_map(cls: type, file_map: FileMap, *, mmap: bool | Literal["c", "r"] = True,
                      keep_file_open: bool | None = None) -> FileBasedImage:
        img: FileBasedImage | None
        try:
            img = serve(cls, file_map, mmap, keep_file_open)
        except Exception:  # noqa: BLE001 - refused by voxpipe: nibabel decides, raises its own
            img = None
        if img is None:
            img = original(cls, file_map, mmap=mmap, keep_file_open=keep_file_open)
        return img

    # The mark that tells a patch of voxpipe's apart (functions declare no such attribute).
    from_file_map._voxpipe = True  # type: ignore[attr-defined]
    return classmethod(from_file_map)


def _is_patched(klass: type) -> bool:
    own = vars(klass).get("from_file_map")
    return own is not None and getattr(getattr(own, "__func__", None), "_voxpipe", False)


def _set(enabled: bool) -> None:
    # Through getattr/setattr/delattr: the registry knows the classes only as types, and a
    # classmethod replaced at run time is what a type checker refuses to see.
    for klass, serve in _served():
        if klass not in _originals:
            _originals[klass] = (getattr(klass, "from_file_map").__func__,
                                 "from_file_map" in vars(klass))
        original, own = _originals[klass]
        if enabled:
            if not _is_patched(klass):
                setattr(klass, "from_file_map", _accelerated(klass, serve))
        elif own:
            setattr(klass, "from_file_map", classmethod(original))
        elif "from_file_map" in vars(klass):
            delattr(klass, "from_file_map")


def nibabel_accelerated() -> bool:
    """Whether ``nibabel.load`` currently reads NIfTI data through voxpipe."""
    served = _served()
    return bool(served) and all(_is_patched(klass) for klass, _ in served)


class NibabelAcceleration:
    """What ``accelerate_nibabel`` returns: a context manager that restores, on exit, the
    state before the call."""

    def __init__(self, previous: bool) -> None:
        self._previous = previous

    def __enter__(self) -> NibabelAcceleration:
        return self

    def __exit__(self, *exc_info: object) -> None:
        with _lock:
            _set(self._previous)


def accelerate_nibabel(enable: bool = True) -> NibabelAcceleration:
    """Make ``nibabel.load`` read NIfTI files through voxpipe (``enable=False``: nibabel's own
    code again), process-wide.

    The images are nibabel's classes with voxpipe's ArrayProxy as ``dataobj``: ``get_fdata``,
    ``dataobj[...]`` and ``np.asanyarray(img.dataobj)`` give nibabel's values, decoded by
    voxpipe (gzip in parallel, ``get_fdata(dtype=np.float32)`` without a float64 array, slices
    reading only their bytes). Files voxpipe does not open fall back to nibabel. Used as a
    context manager, the previous state comes back on exit::

        with vp.accelerate_nibabel():
            mean = nilearn.image.mean_img("bold.nii.gz")
    """
    with _lock:
        previous = nibabel_accelerated()
        _set(enable)
    return NibabelAcceleration(previous)
