"""Seek indexes through the public API: vp.gz.build_index, vp.load(index=...), automatic
sidecar/cache use, staleness, and indexes exported by indexed_gzip."""
import gzip
import os
import subprocess
import sys

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp

AFFINE = np.diag([2.0, 2.0, 2.5, 1.0])


@pytest.fixture
def bold(tmp_path):
    """A 4D single-member .nii.gz as nibabel writes it (gzip level 1), volumes of ~150 KiB."""
    rng = np.random.default_rng(3)
    data = (rng.normal(500, 80, (48, 40, 40, 12)) * (rng.random((48, 40, 40, 1)) > 0.3)).astype(np.int16)
    img = nib.Nifti1Image(data, AFFINE)
    img.header.set_slope_inter(0.5, 10)
    path = tmp_path / 'bold.nii.gz'
    nib.save(img, path)
    return str(path), data


def reference(path):
    return nib.load(path)


def test_build_index_puts_a_point_at_every_volume(bold):
    path, data = bold
    s = vp.gz.build_index(path, spacing=0)
    assert s['index_path'] == path + '.gzidx'
    assert os.path.getsize(s['index_path']) == s['index_bytes']
    # The data start and one point per volume (block boundaries permitting: at most one short).
    assert data.shape[3] - 1 <= s['points'] <= data.shape[3] + 1
    assert s['compressed_size'] == os.path.getsize(path)
    assert s['uncompressed_size'] == len(gzip.decompress(open(path, 'rb').read()))


@pytest.mark.parametrize('threads', [1, 2])
def test_reads_through_an_index_equal_nibabel(bold, threads):
    path, data = bold
    vp.gz.build_index(path)
    img = vp.load(path, threads=threads)
    assert img.dataobj._gzip_reader().random_access
    ref = reference(path)
    for slicer in [(..., 7), (..., 0), (..., -1), (slice(None), 5, slice(None), 3),
                   (slice(3, 40, 4), slice(None, None, -2), 17, slice(2, 9)), (...,)]:
        np.testing.assert_array_equal(img.dataobj[slicer], ref.dataobj[slicer], err_msg=str(slicer))
    np.testing.assert_array_equal(img.get_fdata(dtype=np.float32), ref.get_fdata(dtype=np.float32))


def test_index_in_the_cache_is_found(bold, tmp_path, monkeypatch):
    path, _ = bold
    monkeypatch.setenv('VOXPIPE_CACHE_DIR', str(tmp_path / 'cache'))
    s = vp.gz.build_index(path, cache=True)
    assert s['index_path'].startswith(str(tmp_path / 'cache'))
    assert not os.path.exists(path + '.gzidx')
    assert vp.load(path).dataobj._gzip_reader().random_access


def test_a_changed_file_never_uses_its_old_index(bold):
    path, data = bold
    vp.gz.build_index(path)
    # Same size, different content: rewrite the file with other data of the same shape.
    other = (data[..., ::-1]).copy()
    nib.save(nib.Nifti1Image(other, AFFINE), path)
    img = vp.load(path)
    assert not img.dataobj._gzip_reader().random_access  # stale sidecar skipped
    np.testing.assert_array_equal(img.dataobj[..., 4], other[..., 4])
    with pytest.raises(vp.errors.InvalidArgumentError, match='stale'):
        vp.load(path, index=path + '.gzidx')


def test_index_false_ignores_a_valid_sidecar(bold):
    path, data = bold
    vp.gz.build_index(path)
    img = vp.load(path, index=False)
    assert not img.dataobj._gzip_reader().random_access
    np.testing.assert_array_equal(img.dataobj[..., 2], reference(path).dataobj[..., 2])


def test_an_index_exported_by_indexed_gzip_is_used(bold, tmp_path):
    igzip = pytest.importorskip('indexed_gzip')
    path, data = bold
    idx = str(tmp_path / 'ig.gzidx')
    with igzip.IndexedGzipFile(path, spacing=256 * 1024) as f:
        f.build_full_index()
        f.export_index(idx)
    img = vp.load(path, index=idx)
    assert img.dataobj._gzip_reader().random_access
    np.testing.assert_array_equal(img.dataobj[..., 9], reference(path).dataobj[..., 9])
    # Not picked up automatically: it has no key tying it to this file.
    os.rename(idx, path + '.gzidx')
    assert not vp.load(path).dataobj._gzip_reader().random_access


def test_index_and_load_argument_errors(bold, tmp_path):
    path, _ = bold
    with pytest.raises(TypeError):
        vp.load(path, index=3)
    with pytest.raises(vp.errors.VoxpipeFileNotFoundError):
        vp.load(path, index=str(tmp_path / 'missing.gzidx'))
    with pytest.raises(ValueError):
        vp.gz.build_index(path, spacing=-1)
    raw = tmp_path / 'raw.nii'
    nib.save(nib.Nifti1Image(np.zeros((2, 2, 2), np.int16), AFFINE), raw)
    with pytest.raises(vp.errors.FormatError, match='gzip magic'):
        vp.gz.build_index(raw)


def test_cli_index(bold):
    path, _ = bold
    exe = os.path.join(os.path.dirname(sys.executable), 'voxpipe')
    r = subprocess.run([exe, 'index', path, '--spacing', '1'], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f'wrote {path}.gzidx: ')
    assert vp.load(path).dataobj._gzip_reader().random_access
    r = subprocess.run([exe, 'index', path, '--spacing', 'x'], capture_output=True, text=True)
    assert r.returncode == 2
    out = f'{path}.fast.gzidx'
    r = subprocess.run([exe, 'index', path, '--fast', '--threads', '1', '-o', out],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert np.array_equal(vp.load(path, index=out).get_fdata(), vp.load(path, index=False).get_fdata())
    for bad in ('x', '-1', '1025'):
        r = subprocess.run([exe, 'index', path, '--fast', '--threads', bad], capture_output=True, text=True)
        assert r.returncode == 2 and '--threads' in r.stderr


@pytest.mark.parametrize('threads', [1, 2])
def test_fast_index_from_the_parallel_inflate_reads_the_same(tmp_path, threads):
    # Larger than a few parallel chunks, so that the index has points inside the data.
    rng = np.random.default_rng(8)
    data = rng.integers(0, 4000, (64, 64, 40, 40), dtype=np.int16)
    path = str(tmp_path / 'big.nii.gz')
    nib.save(nib.Nifti1Image(data, AFFINE), path)
    s = vp.gz.build_index(path, exact=False, threads=threads)
    assert s['points'] >= 2
    img = vp.load(path)
    assert img.dataobj._gzip_reader().random_access
    for t in (0, 17, 39):
        np.testing.assert_array_equal(img.dataobj[..., t], data[..., t])
    np.testing.assert_array_equal(np.asanyarray(img.dataobj), data)


def _rchar():
    with open('/proc/self/io') as f:
        for line in f:
            if line.startswith('rchar:'):
                return int(line.split()[1])


def test_volumes_in_order_without_an_index_inflate_the_file_once(tmp_path):
    """A loop over the volumes of a plain .nii.gz (no index) on two threads: the first read may
    use the parallel engine, later ones continue the stream, so the compressed bytes read stay
    near one pass over the file (each volume from the file's start would read ~n/2 passes)."""
    rng = np.random.default_rng(8)
    data = rng.normal(500, 80, (96, 96, 60, 6)).astype(np.int16)  # 1.1 MB volumes
    path = str(tmp_path / 'loop.nii.gz')
    nib.save(nib.Nifti1Image(data, AFFINE), path)
    size = os.path.getsize(path)
    assert size > 3 << 20  # large enough for the parallel engine
    img = vp.load(path, index=False, threads=2)
    before = _rchar()
    for t in range(data.shape[3]):
        np.testing.assert_array_equal(img.dataobj[..., t], data[..., t])
    assert _rchar() - before < 2.0 * size
