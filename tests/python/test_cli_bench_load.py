"""`voxpipe bench-load` end to end: the command line tool, run as a process on two small files
written by nibabel, with the nibabel comparison on.  Both tools must be reported, over the same
files and bytes.

The binary is $VOXPIPE_CLI if set, else the one pip installed in .venv/bin; the test is skipped
when neither exists.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get('VOXPIPE_CLI') or REPO / '.venv' / 'bin' / 'voxpipe')


@pytest.fixture
def two_files(tmp_path):
    rng = np.random.default_rng(0)
    scaled = nib.Nifti1Image(rng.integers(-500, 500, (8, 9, 10), dtype=np.int16), np.eye(4))
    scaled.header.set_slope_inter(0.5, -3)
    plain = nib.Nifti1Image(rng.standard_normal((7, 6, 5, 2)).astype(np.float32), np.eye(4))
    paths = [tmp_path / 'scaled.nii', tmp_path / 'plain.nii.gz']
    nib.save(scaled, paths[0])
    nib.save(plain, paths[1])
    return [str(p) for p in paths]


@pytest.mark.skipif(not CLI.is_file(), reason=f'{CLI} not built/installed')
@pytest.mark.parametrize('dtype', ['float32', 'native'])
def test_bench_load_reports_voxpipe_and_nibabel(two_files, dtype):
    env = dict(os.environ)
    env.pop('VOXPIPE_PYTHON', None)
    args = [str(CLI), 'bench-load', '--repeat', '2', '--dtype', dtype]
    # The installed tool finds the python beside it (.venv/bin); any other build is given ours.
    if not (CLI.parent / 'python').exists():
        args += ['--python', sys.executable]
    r = subprocess.run(args + two_files, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr == ''  # not a terminal: no progress bar
    out = r.stdout

    disk = sum(os.path.getsize(p) for p in two_files)
    # get_fdata(dtype=float32): 4 bytes a voxel; np.asanyarray(dataobj): float64 for the scaled
    # int16 file, float32 for the other.
    voxels = [8 * 9 * 10, 7 * 6 * 5 * 2]
    decoded = 4 * sum(voxels) if dtype == 'float32' else 8 * voxels[0] + 4 * voxels[1]
    assert 'files:      2\n' in out, out
    assert f'on disk:    {disk} bytes' in out, out
    assert f'decoded:    {decoded} bytes' in out, out
    assert 'page cache warmed' in out, out

    number = r'\s+([0-9.]+)'
    rows = {m.group(1): [float(m.group(k)) for k in range(2, 6)]
            for m in re.finditer(r'^(voxpipe|nibabel)' + number * 4, out, re.M)}
    assert set(rows) == {'voxpipe', 'nibabel'}, out
    for tool, (ms, files_per_s, disk_mbs, decoded_mbs) in rows.items():
        assert ms > 0 and files_per_s > 0 and disk_mbs > 0 and decoded_mbs > 0, (tool, out)
    assert f'nibabel {nib.__version__}' in out, out
    assert re.search(r'^voxpipe / nibabel: voxpipe is [0-9.]+x as fast', out, re.M), out
