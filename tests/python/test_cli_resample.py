"""`voxpipe resample` end to end: a small 4-D int16 series with a scale factor, per-volume affines
in an ITK file written by nitransforms, a single FSL .mat, a displacement field chained before
the per-volume affines; each output read back with nibabel and compared with what scipy.ndimage
(through the composed voxel matrix) or nitransforms computes for the same transforms.

The binary is $VOXPIPE_CLI if set, else the one pip installed in .venv/bin; the tests are skipped
when neither exists.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from scipy import ndimage

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get('VOXPIPE_CLI') or REPO / '.venv' / 'bin' / 'voxpipe')

pytestmark = pytest.mark.skipif(not CLI.is_file(), reason=f'{CLI} not built/installed')


def rotation(ax: float, ay: float, az: float) -> np.ndarray:
    cx, sx, cy, sy, cz, sz = np.cos(ax), np.sin(ax), np.cos(ay), np.sin(ay), np.cos(az), np.sin(az)
    rx = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
    ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    rz = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
    return rx @ ry @ rz


def rigid(ax: float, ay: float, az: float, t) -> np.ndarray:
    m = np.eye(4)
    m[:3, :3] = rotation(ax, ay, az)
    m[:3, 3] = t
    return m


@pytest.fixture(scope='module')
def series(tmp_path_factory):
    """A 4-D int16 series with scl_slope/inter, an oblique reference grid of another shape."""
    d = tmp_path_factory.mktemp('cli_resample')
    rng = np.random.default_rng(7)
    shape = (20, 18, 14, 5)
    x, y, z = np.meshgrid(*[np.linspace(-1, 1, n) for n in shape[:3]], indexing='ij')
    base = 1000 * np.exp(-(x ** 2 + 2 * y ** 2 + 1.5 * z ** 2)) + 50 * x
    data = np.stack([base + rng.normal(0, 5, shape[:3]) for _ in range(shape[3])], axis=-1)
    moving_affine = np.array([[2.0, 0, 0, -19], [0, 2.1, 0, -17], [0, 0, 2.5, -16], [0, 0, 0, 1]])
    img = nib.Nifti1Image(np.round(data).astype(np.int16), moving_affine)
    img.header.set_slope_inter(0.5, 10.0)
    img.header['pixdim'][4] = 2.0
    moving = d / 'moving.nii.gz'
    img.to_filename(moving)
    ref_affine = rigid(0.1, -0.05, 0.2, (-18, -16, -14)) @ np.diag([2.2, 2.2, 2.4, 1])
    ref = d / 'ref.nii'
    nib.Nifti1Image(np.zeros((16, 15, 12), np.uint8), ref_affine).to_filename(ref)
    mats = [rigid(0.02 * k, -0.01 * k, 0.015 * k, (0.3 * k, -0.2 * k, 0.1 * k))
            for k in range(shape[3])]
    return d, moving, ref, mats


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), 'resample', *map(str, args)], capture_output=True, text=True)


def scipy_volumes(moving: Path, ref: Path, chain_of_volume, order: int) -> np.ndarray:
    """scipy.ndimage.affine_transform of each volume with
    inverse(moving.affine) @ chain @ ref.affine."""
    mov = nib.load(moving)
    data = mov.get_fdata()
    ref_img = nib.load(ref)
    out = []
    for t in range(data.shape[3]):
        v = np.linalg.inv(mov.affine) @ chain_of_volume(t) @ ref_img.affine
        out.append(ndimage.affine_transform(data[..., t], v, output_shape=ref_img.shape[:3],
                                            order=order, mode='constant', cval=0.0))
    return np.stack(out, axis=-1)


def test_per_volume_itk_affines_equal_scipy(series, tmp_path):
    nitl = pytest.importorskip('nitransforms.linear')
    d, moving, ref, mats = series
    hmc = tmp_path / 'hmc.txt'
    nitl.LinearTransformsMapping(mats).to_filename(hmc, fmt='itk')
    out = tmp_path / 'out.nii.gz'
    r = run(moving, '--reference', ref, '--affines', hmc, '-o', out, '--order', 3)
    assert r.returncode == 0, r.stderr
    m = re.search(r'wrote .*out\.nii\.gz \(16x15x12x5 float32, order 3, constant\), 5 volumes '
                  r'in [0-9.]+ s, peak memory ([0-9.]+) MiB', r.stdout)
    assert m, r.stdout
    assert 1 < float(m.group(1)) < 400
    got = nib.load(out)
    assert got.shape == (16, 15, 12, 5)
    assert got.get_data_dtype() == np.float32
    np.testing.assert_allclose(got.affine, nib.load(ref).affine, atol=1e-6)
    assert got.header['pixdim'][4] == pytest.approx(2.0)
    # The matrices as nitransforms reads the file back (its ITK text may round them).
    read_back = nitl.load(hmc, fmt='itk').matrix
    expected = scipy_volumes(moving, ref, lambda t: read_back[t], order=3)
    data_range = np.ptp(nib.load(moving).get_fdata())
    # float32 output: scipy's float64 values rounded once; the voxel matrix may differ from
    # NumPy's composition in the last bits.
    np.testing.assert_allclose(got.get_fdata(), expected.astype(np.float32), rtol=1e-6,
                               atol=1e-9 * data_range)


def test_fsl_mat_and_options(series, tmp_path):
    nitl = pytest.importorskip('nitransforms.linear')
    d, moving, ref, mats = series
    xfm = nitl.Affine(mats[2], reference=ref)
    mat = tmp_path / 'flirt.mat'
    xfm.to_filename(mat, moving=moving, fmt='fsl')
    expected_matrix = nitl.load(mat, fmt='fsl', reference=ref, moving=moving).matrix
    out = tmp_path / 'out.nii'
    r = run(moving, '--reference', ref, '--affine', mat, '-o', out, '--order', 1,
            '--mode', 'nearest', '--dtype', 'float64', '--threads', 1, '--memory-limit', '64M')
    assert r.returncode == 0, r.stderr
    got = nib.load(out)
    assert got.get_data_dtype() == np.float64
    mov = nib.load(moving)
    data = mov.get_fdata()
    refimg = nib.load(ref)
    v = np.linalg.inv(mov.affine) @ expected_matrix @ refimg.affine
    for t in range(data.shape[3]):
        e = ndimage.affine_transform(data[..., t], v, output_shape=refimg.shape, order=1,
                                     mode='nearest')
        np.testing.assert_allclose(got.dataobj[..., t], e, rtol=0, atol=1e-9 * np.ptp(data))


def test_fast_option_stays_within_ulps_of_the_exact_output(series, tmp_path):
    d, moving, ref, mats = series
    mat = tmp_path / 'one.txt'
    np.savetxt(mat, mats[1])
    exact, fast = tmp_path / 'exact.nii', tmp_path / 'fast.nii'
    for out, extra in ((exact, []), (fast, ['--fast'])):
        r = run(moving, '--reference', ref, '--affine', mat, '-o', out, '--dtype', 'float64',
                *extra)
        assert r.returncode == 0, r.stderr
    e = np.asarray(nib.load(exact).dataobj)
    f = np.asarray(nib.load(fast).dataobj)
    np.testing.assert_allclose(f, e, rtol=0, atol=1e-13 * np.max(np.abs(e)))
    assert '--fast' in run('--help').stdout


def test_warp_then_affines_matches_nitransforms(series, tmp_path):
    nitl = pytest.importorskip('nitransforms.linear')
    from nitransforms.linear import Affine, LinearTransformsMapping
    from nitransforms.manip import TransformChain
    from nitransforms.nonlinear import DenseFieldTransform
    from nitransforms.resampling import apply
    d, moving, ref, mats = series
    refimg = nib.load(ref)
    rng = np.random.default_rng(3)
    field = ndimage.gaussian_filter(rng.normal(0, 6.0, refimg.shape + (3,)), (2, 2, 2, 0))
    assert np.abs(field).max() > 1.0  # displacements of a voxel or so
    warp = tmp_path / 'field_ras.nii.gz'
    nib.Nifti1Image(field.astype(np.float32), refimg.affine).to_filename(warp)
    field32 = nib.load(warp).get_fdata()
    hmc = tmp_path / 'hmc.txt'
    LinearTransformsMapping(mats).to_filename(hmc, fmt='itk')
    read_back = nitl.load(hmc, fmt='itk').matrix
    out = tmp_path / 'out.nii.gz'
    r = run(moving, '--reference', ref, '--warp-ras', warp, '--affines', hmc, '-o', out,
            '--order', 3)
    assert r.returncode == 0, r.stderr
    got = nib.load(out).get_fdata()
    mov = nib.load(moving)
    data = mov.get_fdata()
    for t in range(len(mats)):
        chain = TransformChain([DenseFieldTransform(field32, is_deltas=True, reference=refimg),
                                Affine(read_back[t])])
        vol = nib.Nifti1Image(data[..., t], mov.affine)
        e = np.asanyarray(apply(chain, vol, reference=refimg, order=3).dataobj)
        assert np.max(np.abs(got[..., t] - e)) <= 1e-5 * np.ptp(data)


def test_bad_arguments(series, tmp_path):
    d, moving, ref, mats = series
    r = run(moving, '--reference', ref)
    assert r.returncode == 2 and 'expected MOVING, --reference REF and -o OUT' in r.stderr
    r = run(moving, '--reference', ref, '-o', tmp_path / 'o.nii', '--order', 7)
    assert r.returncode == 2 and '--order expects 0..5' in r.stderr
    r = run(moving, '--reference', ref, '-o', tmp_path / 'o.nii', '--mode', 'clamp')
    assert r.returncode == 2 and '--mode expects' in r.stderr
    r = run(moving, '--reference', ref, '-o', tmp_path / 'o.nii', '--memory-limit', 'lots')
    assert r.returncode == 2 and '--memory-limit expects' in r.stderr
    # Three affines for five volumes: the list file and the counts are named.
    lst = tmp_path / 'three.txt'
    lst.write_text(''.join(f'm{k}.txt\n' for k in range(3)))
    for k in range(3):
        np.savetxt(tmp_path / f'm{k}.txt', mats[k])
    r = run(moving, '--reference', ref, '--affines', lst, '-o', tmp_path / 'o.nii')
    assert r.returncode == 10, r.stderr
    assert 'holds 3 transforms' in r.stderr and '5 volumes' in r.stderr
    assert not (tmp_path / 'o.nii').exists()
    # A memory limit below one volume in flight: Error(limit), no output file.
    r = run(moving, '--reference', ref, '-o', tmp_path / 'o.nii', '--memory-limit', '1K')
    assert r.returncode == 9, r.stderr
    assert not (tmp_path / 'o.nii').exists()
    r = run(tmp_path / 'missing.nii', '--reference', ref, '-o', tmp_path / 'o.nii')
    assert r.returncode == 3
