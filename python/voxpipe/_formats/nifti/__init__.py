"""NIfTI-1/2: .nii, .nii.gz and .hdr/.img pairs read and written by the C++ core; the default
format of ``vp.load`` (the core recognises NIfTI and gzip by their bytes)."""

import nibabel as nib

from .. import registry
from .open import check_open_args, load, nibabel_from_file_map
from .write import save

__all__ = ["FORMAT", "check_open_args"]

FORMAT = registry.register(registry.Format(
    "nifti", suffixes=(".nii", ".nii.gz", ".hdr", ".hdr.gz", ".img", ".img.gz"), load=load,
    save=save, nibabel_class=nib.Nifti1Pair, from_file_map=nibabel_from_file_map), default=True)
