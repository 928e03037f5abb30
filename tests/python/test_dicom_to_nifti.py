"""vp.dicom.to_nifti: DICOM series to BIDS-ready NIfTI from Python, from a local folder and from
an object store prefix (moto's S3 server on localhost), against the `voxpipe dcm2niix` command
and dcm2niix itself (the same file names, the same bytes as the command, sidecar dicts equal to
the files), and its errors.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from dcm2niix_parity import CLI, DCM2NIIX
from voxpipe.errors import (FormatError, InvalidArgumentError, SkippedFileWarning,
                            VoxpipeFileNotFoundError, VoxpipeIOError)

NICOM = Path(nib.__file__).parent / 'nicom' / 'tests' / 'data'


@pytest.fixture()
def dwi(tmp_path) -> Path:
    """nibabel's Siemens DWI pair (b=0 and b=1000 mosaics of one series)."""
    folder = tmp_path / 'dicom'
    folder.mkdir()
    for name in ('siemens_dwi_0.dcm.gz', 'siemens_dwi_1000.dcm.gz'):
        (folder / name[:-3]).write_bytes(gzip.decompress((NICOM / name).read_bytes()))
    return folder


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_same_files_as_the_command_and_dcm2niix_names(dwi, tmp_path):
    ours, cmd = tmp_path / 'ours', tmp_path / 'cmd'
    ours.mkdir(), cmd.mkdir()
    written = vp.dicom.to_nifti(dwi, ours, filename='%p_%s', compress=False)
    r = subprocess.run([str(CLI), 'dcm2niix', '-f', '%p_%s', '-z', 'n', '-o', str(cmd), str(dwi)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert files(ours) == files(cmd)
    assert len(written) == 1
    c = written[0]
    assert c.nifti == str(ours / 'CBU_DTI_64D_1A_12.nii')
    assert c.sidecar == str(ours / 'CBU_DTI_64D_1A_12.json')
    assert c.metadata == json.loads(Path(c.sidecar).read_text())
    assert c.metadata['SeriesNumber'] == 12 and c.metadata['EchoTime'] == 0.093
    assert nib.load(c.nifti).shape[-1] == 2
    if DCM2NIIX is not None:
        theirs = tmp_path / 'theirs'
        theirs.mkdir()
        subprocess.run([DCM2NIIX, '-f', '%p_%s', '-z', 'n', '-o', str(theirs), str(dwi)],
                       capture_output=True, timeout=120, check=True)
        assert sorted(files(theirs)) == sorted(files(ours))
        a, b = nib.load(theirs / 'CBU_DTI_64D_1A_12.nii'), nib.load(c.nifti)
        np.testing.assert_array_equal(np.asanyarray(a.dataobj), np.asanyarray(b.dataobj))
        np.testing.assert_allclose(a.affine, b.affine, atol=5e-4)


def test_options_reach_the_conversion(dwi, tmp_path):
    out = tmp_path / 'out'
    out.mkdir()
    only_json = vp.dicom.to_nifti(dwi, out, filename='s%s', nifti=False)
    assert [(c.nifti, Path(c.sidecar).name) for c in only_json] == [(None, 's12.json')]
    # A name is taken when an image has it (a sidecar alone does not take it, as in dcm2niix);
    # then a suffix (the default), replaced, or the series skipped with a warning.
    first = vp.dicom.to_nifti(dwi, out, filename='s%s')
    assert Path(first[0].nifti).name == 's12.nii.gz'
    second = vp.dicom.to_nifti(dwi, out, filename='s%s')
    assert Path(second[0].nifti).name == 's12a.nii.gz'
    again = vp.dicom.to_nifti(dwi, out, filename='s%s', overwrite='replace')
    assert Path(again[0].nifti).name == 's12.nii.gz'
    with pytest.warns(SkippedFileWarning, match='s12'):
        assert vp.dicom.to_nifti(dwi, out, filename='s%s', overwrite='skip') == []
    # voxpipe's voxel order: the rows of dcm2niix's flipped back.
    mine = tmp_path / 'mine'
    mine.mkdir()
    c = vp.dicom.to_nifti(dwi, mine, filename='x', dcm2niix_order=False, compress=False)[0]
    a, b = nib.load(c.nifti), nib.load(out / 's12.nii.gz')
    np.testing.assert_array_equal(np.asanyarray(a.dataobj)[:, ::-1], np.asanyarray(b.dataobj))


def test_errors(dwi, tmp_path):
    out = tmp_path / 'out'
    out.mkdir()
    with pytest.raises(VoxpipeFileNotFoundError):
        vp.dicom.to_nifti(tmp_path / 'missing', out)
    with pytest.raises(VoxpipeIOError, match='Output folder'):
        vp.dicom.to_nifti(dwi, tmp_path / 'no-such-folder')
    (tmp_path / 'empty').mkdir()
    (tmp_path / 'empty' / 'notes.txt').write_text('not DICOM')
    with pytest.raises(FormatError, match='no DICOM images'):
        vp.dicom.to_nifti(tmp_path / 'empty', out)
    for bad in (dict(overwrite='always'), dict(depth=10), dict(compression_level=0),
                dict(nifti=False, sidecar=False), dict(filename='-z')):
        with pytest.raises(InvalidArgumentError):
            vp.dicom.to_nifti(dwi, out, **bad)
    assert list(out.iterdir()) == []


def test_from_an_object_store_prefix(dwi, tmp_path, monkeypatch):
    pytest.importorskip('obstore')
    pytest.importorskip('moto.server')
    from s3_server import S3Server
    server = S3Server('voxpipe-bids')
    try:
        for p in sorted(dwi.iterdir()):
            server.client.upload_file(os.fspath(p), 'voxpipe-bids', f'sub-01/dicom/{p.name}')
        for k, v in dict(AWS_ENDPOINT_URL=server.endpoint, AWS_ALLOW_HTTP='true',
                         AWS_ACCESS_KEY_ID='testing', AWS_SECRET_ACCESS_KEY='testing',
                         AWS_DEFAULT_REGION='us-east-1').items():
            monkeypatch.setenv(k, v)
        remote, local = tmp_path / 'remote', tmp_path / 'local'
        remote.mkdir(), local.mkdir()
        got = vp.dicom.to_nifti('s3://voxpipe-bids/sub-01/dicom/', remote, filename='%f_%p_%s')
        vp.dicom.to_nifti(dwi, local, filename='%f_%p_%s')
        # %f is the prefix's last part, as a folder's name; the files equal a local conversion's.
        assert [Path(c.nifti).name for c in got] == ['dicom_CBU_DTI_64D_1A_12.nii.gz']
        assert files(remote) == files(local)
        with pytest.raises(VoxpipeIOError, match='Input folder invalid'):
            vp.dicom.to_nifti('s3://voxpipe-bids/nothing-here/', remote)
    finally:
        server.stop()


def test_overlays_are_listed_with_their_series(tmp_path):
    """A Siemens image with a DICOM overlay: its plane written as NAME_ROI1 (dcm2niix's name)
    and listed in Converted.overlays."""
    from pydicom.data import DATA_ROOT
    src = tmp_path / 'dicom'
    src.mkdir()
    shutil.copy(Path(DATA_ROOT) / 'test_files' / 'examples_overlay.dcm', src)
    out = tmp_path / 'out'
    out.mkdir()
    (c,) = vp.dicom.to_nifti(src, out, filename='%p_%s', compress=False)
    assert c.overlays == (str(out / 't1_vibe_fs_tra_bh_dyn_18_ROI1.nii'),)
    roi = np.asanyarray(nib.load(c.overlays[0]).dataobj)
    assert roi.dtype == np.uint8 and set(np.unique(roi)) == {0, 1}


def test_images_without_geometry_load_with_codes_zero(tmp_path):
    """A secondary capture (no position, no orientation): Series.no_geometry, and the image has
    sform and qform code 0 in memory, as the commands write it (and as dcm2niix does)."""
    from pydicom.data import DATA_ROOT
    path = Path(DATA_ROOT) / 'test_files' / 'SC_rgb_rle.dcm'
    (series,) = vp.dicom.scan(path)
    assert series.no_geometry
    img = vp.load_dicom(path, dtype=None)
    assert int(img.header['sform_code']) == 0 and int(img.header['qform_code']) == 0
    out = tmp_path / 'out'
    out.mkdir()
    (c,) = vp.dicom.to_nifti(path, out, single_file=True, compress=False)
    written = nib.load(c.nifti)
    assert int(written.header['sform_code']) == 0 and int(written.header['qform_code']) == 0
    assert any('not placed in the patient frame' in w for w in c.metadata['Warnings'])
    # The same pixels: dcm2niix's row order is the stored rows reversed.
    np.testing.assert_array_equal(np.asanyarray(img.dataobj).tobytes(),
                                  np.asanyarray(written.dataobj)[:, ::-1].tobytes())
