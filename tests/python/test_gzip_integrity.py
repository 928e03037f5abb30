"""Damaged .nii.gz never comes back as voxels: every read that reaches the end of a gzip member
checks its trailer (CRC32, ISIZE) and what follows it, on every layout (one member as nibabel
writes it, concatenated members, voxpipe's sized members, BGZF) and thread count, with and
without a seek index; ``voxpipe convert`` exits non-zero on the same files.

Python's gzip module is the reference for what is damage: each damaged file is checked to make
``gzip.decompress`` raise too (zero padding after the last member is the one tail it accepts).
"""

from __future__ import annotations

import gzip
import os
import subprocess
import zlib
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from voxpipe.errors import CorruptError, TruncatedError

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get('VOXPIPE_CLI') or REPO / '.venv' / 'bin' / 'voxpipe')

# 64 x 64 x 40 x 12 int16: about 3.3 MB compressed at level 1, above the 2 MiB from which a
# single-member file is inflated by the parallel engine on 2 threads.
SHAPE = (64, 64, 40, 12)


@pytest.fixture(scope='module')
def image(tmp_path_factory):
    rng = np.random.default_rng(17)
    data = (rng.normal(size=SHAPE) * 300).astype(np.int16)
    img = nib.Nifti1Image(data, np.diag([2.0, 2.0, 2.5, 1.0]))
    d = tmp_path_factory.mktemp('gzint')
    nib.save(img, d / 'plain.nii')
    raw = (d / 'plain.nii').read_bytes()
    single = gzip.compress(raw, 1)
    half = len(raw) // 2
    layouts = {
        'single': (single, len(single)),
        'concatenated': (gzip.compress(raw[:half], 1) + gzip.compress(raw[half:], 1), None),
    }
    for layout in ('members', 'bgzf'):
        p = d / f'{layout}.nii.gz'
        vp.save(vp.load(d / 'plain.nii'), p, gzip_layout=layout)
        b = p.read_bytes()
        layouts[layout] = (b, len(b) - 28 if layout == 'bgzf' else len(b))
    layouts['concatenated'] = (layouts['concatenated'][0], len(layouts['concatenated'][0]))
    expected = np.asanyarray(nib.load(d / 'plain.nii').dataobj).astype(np.float32)
    return d, layouts, expected


def _isize_and_data(b, end):
    b[end - 1] ^= 0x55
    b[end // 2] ^= 0x10
    return b


def _flip(at):
    def f(b, end):
        b[end - at] ^= 0x01
        return b
    return f


DAMAGES = {
    'crc32': (_flip(8), CorruptError),
    'isize': (_flip(1), CorruptError),
    'isize+data': (_isize_and_data, (CorruptError, TruncatedError)),
    'trailer-missing': (lambda b, end: b[:end - 8], TruncatedError),
    'trailer-short': (lambda b, end: b[:end - 3], TruncatedError),
    'garbage-after': (lambda b, end: b + b'garbage!', CorruptError),
    'zeros-then-garbage': (lambda b, end: b + bytes(16) + b'x', CorruptError),
}


def _damaged(image, layout, damage):
    d, layouts, _ = image
    raw, end = layouts[layout]
    fn, _ = DAMAGES[damage]
    path = d / f'{layout}-{damage}.nii.gz'
    path.write_bytes(bytes(fn(bytearray(raw), end)))
    return path


@pytest.mark.parametrize('damage', sorted(DAMAGES))
@pytest.mark.parametrize('layout', ['single', 'concatenated', 'members', 'bgzf'])
def test_damaged_gzip_is_an_error_at_every_thread_count(image, layout, damage):
    path = _damaged(image, layout, damage)
    with pytest.raises(Exception):  # the reference rejects it too
        gzip.decompress(path.read_bytes())
    expected_error = DAMAGES[damage][1]
    for threads in (1, 2, 0):
        with pytest.raises(expected_error) as info:
            vp.load(path, threads=threads).get_fdata(dtype=np.float32)
        assert str(path) in str(info.value), (threads, str(info.value))


@pytest.mark.parametrize('layout', ['single', 'concatenated', 'members', 'bgzf'])
def test_intact_and_zero_padded_files_read_exactly(image, layout):
    d, layouts, expected = image
    raw, _ = layouts[layout]
    for name, b in (('intact', raw), ('padded', raw + bytes(1000))):
        path = d / f'{layout}-{name}.nii.gz'
        path.write_bytes(b)
        for threads in (1, 2, 0):
            got = vp.load(path, threads=threads).get_fdata(dtype=np.float32)
            np.testing.assert_array_equal(got, expected, err_msg=f'{name} threads={threads}')


@pytest.mark.skipif(not CLI.exists(), reason='voxpipe CLI not built')
@pytest.mark.parametrize('damage', ['trailer-missing', 'isize+data', 'garbage-after'])
def test_convert_exits_nonzero_and_writes_nothing(image, damage, tmp_path):
    path = _damaged(image, 'single', damage)
    for threads in ('1', '2'):
        out = tmp_path / f'out{threads}.nii'
        r = subprocess.run([str(CLI), 'convert', str(path), str(out), '--threads', threads],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode in (7, 8), (r.returncode, r.stderr)
        assert str(path) in r.stderr
        assert not out.exists()
        assert list(tmp_path.iterdir()) == []


def _keep_key(path, damage):
    """Applies `damage` to the file in place keeping its size, mtime and last 64 KiB: the key a
    sidecar index is checked against."""
    st = os.stat(path)
    b = bytearray(path.read_bytes())
    damage(b)
    path.write_bytes(bytes(b))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize('exact', [True, False])
def test_bit_rot_after_indexing_is_caught(image, tmp_path, exact):
    d, layouts, expected = image
    raw, _ = layouts['single']
    path = tmp_path / 'rot.nii.gz'
    path.write_bytes(raw)
    vp.gz.build_index(path, spacing=1 << 20, exact=exact, threads=2)
    assert (tmp_path / 'rot.nii.gz.gzidx').exists()
    np.testing.assert_array_equal(vp.load(path).get_fdata(dtype=np.float32), expected)

    # A bit in the middle of the stream whose flip still decodes, to the same length: found by
    # trying, with zlib as the judge (a CRC32 mismatch is all it reports).
    for at in range(len(raw) // 2, len(raw) // 2 + 4096):
        b = bytearray(raw)
        b[at] ^= 0x01
        try:
            zlib.decompressobj(31).decompress(bytes(b))
        except zlib.error as e:
            if 'incorrect data check' in str(e):
                break
    else:
        pytest.fail('no flip that only the CRC32 detects')
    _keep_key(path, lambda buf: buf.__setitem__(at, buf[at] ^ 0x01))
    for threads in (1, 2, 0):
        img = vp.load(path, threads=threads)
        assert img.dataobj._gzip_reader().random_access  # the index is still taken as valid
        with pytest.raises(CorruptError, match='trailer'):
            img.get_fdata(dtype=np.float32)
    # The same read without the index is an error too.
    with pytest.raises(CorruptError):
        vp.load(path, index=False, threads=2).get_fdata(dtype=np.float32)
