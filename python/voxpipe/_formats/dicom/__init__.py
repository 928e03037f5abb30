"""DICOM: files and series (classic and enhanced, every transfer syntax the core or pydicom's
codecs decode) scanned, grouped into series and assembled into NIfTI images with the affine
dcm2niix and nibabel.nicom agree on. ``vp.load`` of one DICOM file (``.dcm``, or any file with
DICOM's "DICM" preamble) is ``vp.load_dicom`` of it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nibabel import Nifti1Image

from .. import registry
from .series import load_dicom

__all__ = ["FORMAT"]


# source: whatever vp.load was given that the registry routes here (a name, or names).
def _load(source: Any, *, threads: int = 0, storage_options: Mapping[str, Any] | None = None,
          **_: Any) -> Nifti1Image:
    return load_dicom(source, threads=threads or None, storage_options=storage_options)


def _sniff(head: bytes) -> bool:
    return head[128:132] == b"DICM"


FORMAT = registry.register(registry.Format("dicom", suffixes=(".dcm",), load=_load,
                                           sniff=_sniff))
