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

import nibabel as nib

from ._image import _from_file_map

_lock = threading.Lock()
# nibabel's own from_file_map of Nifti1Pair (inherited from AnalyzeImage: Nifti1Pair has no
# attribute of its own to restore), taken when the module is imported.
_NIBABEL_FROM_FILE_MAP = nib.Nifti1Pair.from_file_map.__func__
_OWN = "from_file_map" in vars(nib.Nifti1Pair)


def _accelerated_from_file_map(klass, file_map, *, mmap=True, keep_file_open=None):
    try:
        img = _from_file_map(klass, file_map, mmap, keep_file_open, 0, None)
    except Exception:  # noqa: BLE001 - refused by voxpipe: nibabel decides, and raises its own
        img = None
    if img is None:
        img = _NIBABEL_FROM_FILE_MAP(klass, file_map, mmap=mmap, keep_file_open=keep_file_open)
    return img


def _set(enabled: bool) -> None:
    if enabled:
        nib.Nifti1Pair.from_file_map = classmethod(_accelerated_from_file_map)
    elif _OWN:
        nib.Nifti1Pair.from_file_map = classmethod(_NIBABEL_FROM_FILE_MAP)
    elif "from_file_map" in vars(nib.Nifti1Pair):
        del nib.Nifti1Pair.from_file_map


def nibabel_accelerated() -> bool:
    """Whether ``nibabel.load`` currently reads NIfTI data through voxpipe."""
    return vars(nib.Nifti1Pair).get("from_file_map") is not None and (
        getattr(nib.Nifti1Pair.from_file_map, "__func__", None) is _accelerated_from_file_map)


class NibabelAcceleration:
    """What ``accelerate_nibabel`` returns: a context manager that restores, on exit, the
    state before the call."""

    def __init__(self, previous: bool):
        self._previous = previous

    def __enter__(self) -> NibabelAcceleration:
        return self

    def __exit__(self, *exc_info) -> None:
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
