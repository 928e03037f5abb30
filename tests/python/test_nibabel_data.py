"""nibabel's own NIfTI test files (nibabel/tests/data in the installed wheel), read by both.

Each file is compared as shipped, and also in the other compression (.nii <-> .nii.gz).  The
header-only pairs (nifti1.hdr, nifti2.hdr ship without their .img) are compared as shipped (data
access must fail in both) and completed with a synthetic .img.  Files nib.load does not return as
a plain NIfTI image are compared with nibabel's NIfTI loaders:
  * row_major.dconn.nii (CIFTI-2, intent_code 3000-3099): Nifti2Image.from_filename;
  * analyze.hdr (Analyze 7.5, no NIfTI magic): Nifti1Pair.from_filename (raises on the magic).
"""

from __future__ import annotations

import gzip
import logging
import os

import nibabel as nib
import numpy as np
import pytest

from nifti_testlib import compare_load, make_data

logging.getLogger('nibabel').setLevel(logging.CRITICAL)

import nibabel.tests  # noqa: E402

DATA_DIR = os.path.join(os.path.dirname(nibabel.tests.__file__), 'data')
SUFFIXES = ('.nii', '.nii.gz', '.hdr', '.img', '.hdr.gz', '.img.gz')
KNOWN = ['anatomical.nii', 'functional.nii', 'example4d.nii.gz', 'example_nifti2.nii.gz',
         'standard.nii.gz', 'nifti1.hdr', 'nifti2.hdr', 'reoriented_anat_moved.nii',
         'resampled_anat_moved.nii', 'row_major.dconn.nii', 'analyze.hdr']


def _present() -> list[str]:
    if not os.path.isdir(DATA_DIR):
        return []
    names = [f for f in os.listdir(DATA_DIR) if f.lower().endswith(SUFFIXES)]
    # an .img next to a .hdr is the same image
    return sorted(f for f in names
                  if not (f.endswith('.img') and f[:-4] + '.hdr' in names)
                  and not (f.endswith('.img.gz') and f[:-7] + '.hdr.gz' in names))


FILES = _present()
if not FILES:
    pytest.skip(f'nibabel test data not installed at {DATA_DIR}', allow_module_level=True)

SPECIAL_LOADERS = {
    'row_major.dconn.nii': nib.Nifti2Image.from_filename,
    'analyze.hdr': nib.Nifti1Pair.from_filename,
}


def _loader(name: str):
    for k, v in SPECIAL_LOADERS.items():
        if name.startswith(k.split('.')[0]):
            return v
    return None


def test_known_files_present():
    missing = [f for f in KNOWN if f not in FILES]
    if missing:
        pytest.skip(f'not in this nibabel wheel: {missing}')


@pytest.mark.parametrize('name', FILES)
def test_as_shipped(name):
    compare_load(os.path.join(DATA_DIR, name), nib_loader=_loader(name))


@pytest.mark.parametrize('name', [f for f in FILES if f.endswith(('.nii', '.nii.gz'))])
def test_other_compression(tmp_path, name):
    src = os.path.join(DATA_DIR, name)
    raw = open(src, 'rb').read()
    if name.endswith('.gz'):
        dst = tmp_path / name[:-3]
        dst.write_bytes(gzip.decompress(raw))
    else:
        dst = tmp_path / (name + '.gz')
        dst.write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
    compare_load(str(dst), nib_loader=_loader(name))


def _header_only_pairs():
    out = []
    for f in FILES:
        if f.endswith('.hdr') and not os.path.exists(os.path.join(DATA_DIR, f[:-4] + '.img')):
            out.append(f)
    return out


@pytest.mark.parametrize('gz', [False, True], ids=['pair', 'pair.gz'])
@pytest.mark.parametrize('name', _header_only_pairs())
def test_header_only_pair_completed(tmp_path, name, gz):
    """Copy the shipped .hdr and add a synthetic .img of the size the header describes."""
    src = os.path.join(DATA_DIR, name)
    if _loader(name) is not None:
        pytest.skip(f'{name} is not a NIfTI pair')
    img = nib.load(src)
    hdr = img.header
    n = int(np.prod(hdr.get_data_shape())) * hdr.get_data_dtype().itemsize
    payload = make_data('uint8', (n,), seed=n).tobytes()
    off = img.dataobj.offset  # header['vox_offset'] is reset to 0 by nib.load
    base = tmp_path / name[:-4]
    hb = open(src, 'rb').read()
    ib = b'\0' * off + payload
    if gz:
        hb, ib = gzip.compress(hb, mtime=0), gzip.compress(ib, mtime=0)
        (tmp_path / (name[:-4] + '.hdr.gz')).write_bytes(hb)
        (tmp_path / (name[:-4] + '.img.gz')).write_bytes(ib)
        path = str(base) + '.img.gz'
    else:
        (tmp_path / name).write_bytes(hb)
        (tmp_path / (name[:-4] + '.img')).write_bytes(ib)
        path = str(base) + '.hdr'
    compare_load(path, expect_nib_error=False)
