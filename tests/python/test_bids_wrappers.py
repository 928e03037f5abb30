"""heudiconv and dcm2bids, the wrappers most labs convert with, run end to end with `voxpipe
dcm2niix` in place of the dcm2niix executable: each runs twice on the same DICOM, once finding
dcm2niix on PATH and once finding a `dcm2niix` that runs voxpipe (what `voxpipe dcm2niix
--make-shim DIR` writes), and the two BIDS trees must be the same: the same files, sidecars
with the same keys and values (but the converter's name and version), equal bval/bvec and
equal images.

Inputs are heudiconv's own test data (its PyPI package ships them): a Siemens multiband
diffusion series (b0dwiForFmap) and a Siemens two-echo fieldmap (01-fmap_acq-3mm: magnitude
echoes and a phase difference in separate series).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

import dcm2niix_parity as parity

heudiconv = pytest.importorskip('heudiconv')
pytestmark = [
    pytest.mark.skipif(not parity.CLI.is_file(), reason=f'{parity.CLI} not built/installed'),
    pytest.mark.skipif(parity.DCM2NIIX is None, reason='dcm2niix not installed'),
]

DATA = Path(heudiconv.__file__).parent / 'tests' / 'data'
BIN = Path(sys.executable).parent
CONVERTER_KEYS = {'ConversionSoftware', 'ConversionSoftwareVersion'}


def shim(folder: Path) -> Path:
    r = subprocess.run([str(parity.CLI), 'dcm2niix', '--make-shim', str(folder)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (folder / 'dcm2niix').is_file()
    return folder


def run(cmd: list[str], path_first: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f'{path_first}{os.pathsep}{BIN}{os.pathsep}{os.environ["PATH"]}')
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=cwd)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def tree(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for p in sorted(root.rglob('*'))
            if p.is_file() and '.heudiconv' not in p.parts and 'tmp_dcm2bids' not in p.parts}


def image(path: Path) -> tuple[np.ndarray, np.ndarray]:
    img = nib.load(path)
    return np.asanyarray(img.dataobj), img.affine


def assert_same_tree(theirs: Path, ours: Path) -> None:
    t, o = tree(theirs), tree(ours)
    assert sorted(t) == sorted(o)
    for name, tp in t.items():
        op = o[name]
        if name.endswith('.json'):
            tj, oj = json.loads(tp.read_text()), json.loads(op.read_text())
            if isinstance(tj, dict):
                for k in CONVERTER_KEYS:
                    tj.pop(k, None), oj.pop(k, None)
                missing = sorted(set(tj) - set(oj))
                different = {k: (tj[k], oj[k]) for k in tj if k in oj
                             and not parity.values_equal(tj[k], oj[k])}
                assert not missing and not different, (name, missing, different)
            else:
                assert tj == oj, name
        elif name.endswith(('.nii.gz', '.nii')):
            (td, ta), (od, oa) = image(tp), image(op)
            assert td.shape == od.shape, name
            np.testing.assert_array_equal(td, od, err_msg=name)
            np.testing.assert_allclose(ta, oa, atol=1e-4, err_msg=name)
        elif name.endswith(('.bval', '.bvec')):
            np.testing.assert_allclose(np.loadtxt(tp, ndmin=2), np.loadtxt(op, ndmin=2),
                                       atol=1e-4, err_msg=name)
        elif name.endswith('.tsv'):
            assert tp.read_text() == op.read_text(), name
        else:
            assert tp.read_bytes() == op.read_bytes(), name


def heudiconv_inputs(tmp_path: Path) -> Path:
    src = tmp_path / 'dicom'
    for subject, folder in (('dwi', 'b0dwiForFmap'), ('fmap', '01-fmap_acq-3mm')):
        shutil.copytree(DATA / folder, src / subject / folder)
    return src


# A heuristic as labs write them: each subject's series into a BIDS folder by what they are.
HEURISTIC = """
def create_key(template, outtype=('nii.gz',), annotation_classes=None):
    return template, outtype, annotation_classes


def infotodict(seqinfo):
    dwi = create_key('sub-{subject}/dwi/sub-{subject}_run-{item:02d}_dwi')
    other = create_key('sub-{subject}/anat/sub-{subject}_run-{item:02d}_T2star')
    info = {dwi: [], other: []}
    for s in seqinfo:
        info[dwi if 'DIFFUSION' in s.image_type else other].append(s.series_id)
    return info
"""


def test_heudiconv_gives_the_same_bids_tree(tmp_path):
    src = heudiconv_inputs(tmp_path)
    heuristic = tmp_path / 'heuristic.py'
    heuristic.write_text(HEURISTIC)
    ours_bin = shim(tmp_path / 'shim')
    outs = {}
    for label, first in (('theirs', Path(parity.DCM2NIIX).parent), ('ours', ours_bin)):
        out = tmp_path / label
        run([str(BIN / 'heudiconv'), '-d', f'{src}/{{subject}}/*/*.dcm', '-s', 'dwi', 'fmap',
             '-f', str(heuristic), '-c', 'dcm2niix', '-b', '--overwrite', '-o', str(out)],
            first, tmp_path)
        outs[label] = out
    # The runs converted both subjects: the diffusion series with its gradient table, and the
    # fieldmap's phase image.
    names = tree(outs['theirs'])
    assert 'sub-dwi/dwi/sub-dwi_run-01_dwi.bvec' in names, sorted(names)
    assert 'sub-fmap/anat/sub-fmap_run-01_T2star.nii.gz' in names, sorted(names)
    assert_same_tree(outs['theirs'], outs['ours'])


def test_dcm2bids_gives_the_same_bids_tree(tmp_path):
    pytest.importorskip('dcm2bids')
    src = tmp_path / 'dicom'
    shutil.copytree(DATA / 'b0dwiForFmap', src)
    config = tmp_path / 'config.json'
    config.write_text(json.dumps({'descriptions': [
        {'datatype': 'dwi', 'suffix': 'dwi',
         'criteria': {'SeriesDescription': 'dMRI*'}}]}))
    ours_bin = shim(tmp_path / 'shim')
    outs = {}
    for label, first in (('theirs', Path(parity.DCM2NIIX).parent), ('ours', ours_bin)):
        out = tmp_path / label
        run([str(BIN / 'dcm2bids'), '-d', str(src), '-p', '01', '-c', str(config), '-o', str(out)],
            first, tmp_path)
        outs[label] = out
    names = tree(outs['theirs'])
    assert 'sub-01/dwi/sub-01_dwi.bvec' in names, sorted(names)
    assert_same_tree(outs['theirs'], outs['ours'])
