"""Special files never block: a FIFO (or socket, or device) given where a regular file is
expected (an image, the .img of a pair, a DICOM file, a transform file, a seek-index sidecar)
fails at once with VoxpipeIOError (an OSError; CLI exit 4) naming the file, or, where the file is
optional (a sidecar index, a file met in a folder scan), is passed over. nibabel fails at once on
such a path too (its size is 0: "Empty file").

Each case runs in a child process with a timeout: opening a FIFO for reading waits for a writer,
so a hang fails the test instead of blocking pytest.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get('VOXPIPE_CLI') or REPO / '.venv' / 'bin' / 'voxpipe')
needs_cli = pytest.mark.skipif(not CLI.is_file(), reason=f'{CLI} not built/installed')

# Far above the time a refusal takes (an interpreter start and an import), far below forever.
TIMEOUT = 30

CHILD = r"""
import json, os, sys
import numpy as np
import voxpipe as vp
out = {}
try:
    result = eval(sys.argv[1], {"vp": vp, "np": np, "os": os, "args": sys.argv[2:]})
    out["result"] = repr(result)
except BaseException as e:
    out["type"] = type(e).__name__
    out["is_os_error"] = isinstance(e, OSError)
    out["msg"] = str(e)
print("@@RESULT@@" + json.dumps(out), flush=True)
"""


def in_child(expr: str, *args) -> dict:
    """Evaluates `expr` (with `vp`, `np` and `args`) in a fresh interpreter."""
    try:
        cp = subprocess.run([sys.executable, '-c', CHILD, expr, *map(os.fspath, args)],
                            capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f'{expr} blocked for more than {TIMEOUT} s on {args}')
    lines = [x for x in cp.stdout.splitlines() if x.startswith('@@RESULT@@')]
    assert lines, f'exit status {cp.returncode}: {cp.stderr[-2000:]}'
    return json.loads(lines[-1][len('@@RESULT@@'):])


def cli(*args) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([str(CLI), *map(os.fspath, args)], capture_output=True, text=True,
                              timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f'voxpipe {" ".join(map(str, args))} blocked for more than {TIMEOUT} s')


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def assert_refused(out: dict, path: Path, kind: str = 'FIFO'):
    assert out.get('type') == 'VoxpipeIOError', out
    assert out['is_os_error']
    assert str(path) in out['msg']
    assert f'expected a regular file, but found a {kind}' in out['msg'], out['msg']


@pytest.mark.parametrize('name', ['fifo.nii', 'fifo.nii.gz', 'fifo.hdr'])
def test_load_refuses_a_fifo(tmp_path, name):
    path = fifo(tmp_path / name)
    assert_refused(in_child('vp.load(args[0])', path), path)
    # nibabel refuses it at once too (os.stat gives size 0: "Empty file").
    with pytest.raises(Exception, match='Empty file'):
        nib.load(path)


def test_load_refuses_a_socket_and_a_device(tmp_path):
    path = tmp_path / 'sock.nii'
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(os.fspath(path))
        assert_refused(in_child('vp.load(args[0])', path), path, 'socket')
    finally:
        s.close()
    os.symlink('/dev/zero', tmp_path / 'zero.nii')
    assert_refused(in_child('vp.load(args[0])', tmp_path / 'zero.nii'), tmp_path / 'zero.nii',
                   'character device')


def test_pair_whose_image_is_a_fifo(tmp_path):
    # The header opens (nibabel too opens a pair whose .img is missing); every read of the
    # data, the memory map of get_unscaled included, fails at once.
    nib.Nifti1Pair(np.arange(24, dtype=np.int16).reshape(2, 3, 4), np.eye(4)).to_filename(
        tmp_path / 'p.hdr')
    os.unlink(tmp_path / 'p.img')
    img = fifo(tmp_path / 'p.img')
    for expr in ('vp.load(args[0]).dataobj.get_unscaled()', 'np.asarray(vp.load(args[0]).dataobj)',
                 'vp.load(args[0]).get_fdata()', 'vp.load(args[0], mmap=False).dataobj[0]'):
        assert_refused(in_child(expr, tmp_path / 'p.hdr'), img)


def test_a_fifo_as_seek_index_sidecar_is_passed_over(tmp_path):
    data = np.arange(16 * 16 * 8 * 3, dtype=np.int16).reshape(16, 16, 8, 3)
    path = tmp_path / 'a.nii.gz'
    nib.Nifti1Image(data, np.eye(4)).to_filename(path)
    fifo(tmp_path / 'a.nii.gz.gzidx')
    out = in_child('vp.load(args[0]).dataobj[..., 1].sum()', path)
    assert out.get('result') == repr(data[..., 1].sum()), out


def test_dicom_read_refuses_a_fifo(tmp_path):
    path = fifo(tmp_path / 'x.dcm')
    assert_refused(in_child('vp.dicom.read(args[0])', path), path)
    assert_refused(in_child('vp.dicom.read(args[0], force=True)', path), path)


def test_deferred_dicom_value_refuses_a_fifo(tmp_path):
    # A FIFO takes the name of a file whose values are read on access.
    pydicom_data = pytest.importorskip('pydicom.data')
    path = tmp_path / 'ct.dcm'
    shutil.copy(Path(pydicom_data.__file__).parent / 'test_files' / 'CT_small.dcm', path)
    out = in_child('(lambda ds, p: (ds.Rows, os.unlink(p), os.mkfifo(p), ds.PixelData))('
                   'vp.dicom.read(args[0], defer_size=16), args[0])', path)
    assert_refused(out, path)
    assert 'deferred value (7FE0,0010)' in out['msg']


def test_dicom_scan_skips_a_fifo(tmp_path):
    path = fifo(tmp_path / 'x.dcm')
    # Named on the command line: skipped with the reason; met in a folder: not a file to read.
    out = in_child('[(p, why) for p, why in vp.dicom.scan(args[0]).skipped]', path)
    assert 'expected a regular file, but found a FIFO' in out.get('result', ''), out
    out = in_child('(len(vp.dicom.scan(args[0])), vp.dicom.scan(args[0]).skipped)', tmp_path)
    assert out.get('result') == '(0, [])', out


def test_transform_readers_refuse_a_fifo(tmp_path):
    for name in ('x.tfm', 'x.mat', 'x.txt'):
        path = fifo(tmp_path / name)
        assert_refused(in_child('vp.transforms.load_affine(args[0])', path), path)


@needs_cli
@pytest.mark.parametrize('name', ['fifo.nii', 'fifo.dcm', 'fifo'])
def test_cli_info_refuses_a_fifo(tmp_path, name):
    # Without .dcm in its name, info first looks for DICM at byte 128.
    path = fifo(tmp_path / name)
    r = cli('info', path)
    assert str(path) in r.stderr
    if name == 'fifo':  # then neither DICOM nor a NIfTI name
        assert r.returncode == 5 and 'expected a .nii' in r.stderr, r.stderr
    else:
        assert r.returncode == 4, r.stderr
        assert 'expected a regular file, but found a FIFO' in r.stderr


@needs_cli
def test_cli_convert_and_resample_refuse_a_fifo(tmp_path):
    src = fifo(tmp_path / 'in.nii')
    r = cli('convert', src, tmp_path / 'out.nii.gz')
    assert r.returncode == 4 and str(src) in r.stderr, r.stderr
    moving = tmp_path / 'm.nii'
    nib.Nifti1Image(np.zeros((4, 4, 4), np.float32), np.eye(4)).to_filename(moving)
    xfm = fifo(tmp_path / 'x.tfm')
    r = cli('resample', moving, '--reference', moving, '--affine', xfm, '-o', tmp_path / 'o.nii')
    assert r.returncode == 4, r.stderr
    assert str(xfm) in r.stderr and 'expected a regular file, but found a FIFO' in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ['in.nii', 'm.nii', 'x.tfm']
