"""GZIDX interoperability: seek indexes written by voxpipe are read by indexed_gzip and rapidgzip,
and indexes exported by each of them are read by voxpipe, all giving the bytes zlib gives.

voxpipe's side runs through the test helper ``voxpipe_gzidx_tool`` (tests/tools/gzidx_tool.cpp),
located by the environment variable VOXPIPE_GZIDX_TOOL; the tests are skipped when it is unset:

    VOXPIPE_GZIDX_TOOL=build/<dir>/tests/voxpipe_gzidx_tool \\
        .venv/bin/python -m pytest tests/python/test_gzidx_interop.py -q
"""

from __future__ import annotations

import gzip
import os
import random
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

TOOL = os.environ.get('VOXPIPE_GZIDX_TOOL')
pytestmark = pytest.mark.skipif(not TOOL, reason='VOXPIPE_GZIDX_TOOL is not set')
indexed_gzip = pytest.importorskip('indexed_gzip')
rapidgzip = pytest.importorskip('rapidgzip')

SPACING = 2 << 20


@pytest.fixture(scope='module')
def sample(tmp_path_factory):
    """A two-member gzip file of 24 MB of text-like data (so that rapidgzip, which merges
    checkpoints closer than its chunk size, keeps some of ours) and its content."""
    rng = np.random.default_rng(5)
    alphabet = np.frombuffer(b'abcdefgh \n', dtype=np.uint8)
    data = alphabet[rng.integers(0, len(alphabet), 24 << 20)].tobytes()
    half = 13 << 20
    path = tmp_path_factory.mktemp('gzidx') / 'sample.gz'
    path.write_bytes(gzip.compress(data[:half], 6, mtime=0) + gzip.compress(data[half:], 6, mtime=0))
    return path, data


def parse_gzidx(raw: bytes):
    """(header fields, [(offset, uncompressed, bits, flag)], window bytes) of a version-1 GZIDX."""
    magic, version, _flags, csize, usize, spacing, wsize, n = struct.unpack_from('<5sBBQQIII', raw)
    assert magic == b'GZIDX' and version == 1
    points = [struct.unpack_from('<QQBB', raw, 35 + 18 * i) for i in range(n)]
    return (csize, usize, spacing, wsize), points, raw[35 + 18 * n:]


def ranges(size: int, points: list[int], seed: int):
    """Random ranges, and ranges that start or end at the given uncompressed offsets."""
    r = random.Random(seed)
    out = [(0, size), (size - 1, size)]
    for _ in range(6):
        a = r.randrange(size)
        out.append((a, min(size, a + r.randrange(1, 3 << 20))))
    for u in points[1:4]:
        out += [(u, min(size, u + 1000)), (u - 1000, u)]
    return out


def voxpipe_read(gz: Path, index: Path, begin: int, end: int, threads: int, tmp: Path) -> bytes:
    out = tmp / f'out_{begin}_{end}_{threads}'
    subprocess.run([TOOL, 'read', str(gz), str(index), str(begin), str(end), str(out), str(threads)],
                   check=True, capture_output=True)
    return out.read_bytes()


def voxpipe_build(gz: Path, index: Path, spacing: int = SPACING):
    subprocess.run([TOOL, 'build', str(gz), str(index), str(spacing)], check=True, capture_output=True)


def test_voxpipe_points_equal_indexed_gzip_points(sample, tmp_path):
    """Same spacing, same points, same bit convention, same windows: the two formats agree bit for
    bit except for voxpipe's trailer and the window of the end point."""
    gz, data = sample
    ours = tmp_path / 'ours.gzidx'
    voxpipe_build(gz, ours)
    theirs = tmp_path / 'theirs.gzidx'
    with indexed_gzip.IndexedGzipFile(str(gz), spacing=SPACING) as f:
        f.build_full_index()
        f.export_index(str(theirs))
    h1, p1, w1 = parse_gzidx(ours.read_bytes())
    h2, p2, w2 = parse_gzidx(theirs.read_bytes())
    assert h1 == h2
    assert [p[:3] for p in p1] == [p[:3] for p in p2]
    # Member start: bits 0, no window, in both.
    member = [p for p in p1 if p[1] == 13 << 20]
    assert member and member[0][2:] == (0, 0)
    # indexed_gzip stores a window for its end point; voxpipe (like rapidgzip) does not.
    assert [p[3] for p in p1[:-1]] == [p[3] for p in p2[:-1]]
    windows = sum(p[3] for p in p1)
    assert w2[:windows * 32768] == w1[:windows * 32768]
    assert w1[windows * 32768:][:5] == b'VPKEY'


def test_voxpipe_index_is_used_by_indexed_gzip(sample, tmp_path):
    gz, data = sample
    idx = tmp_path / 'v.gzidx'
    voxpipe_build(gz, idx)
    _, points, _ = parse_gzidx(idx.read_bytes())
    with indexed_gzip.IndexedGzipFile(str(gz), index_file=str(idx)) as f:
        # The imported points, not a rebuilt index.
        assert [(u, c) for c, u, _b, _f in points[:-1]] == [tuple(p) for p in f.seek_points()][:len(points) - 1]
        for a, b in ranges(len(data), [p[1] for p in points], 1):
            f.seek(a)
            assert f.read(b - a) == data[a:b], (a, b)


def test_voxpipe_index_is_used_by_rapidgzip(sample, tmp_path):
    gz, data = sample
    idx = tmp_path / 'v.gzidx'
    voxpipe_build(gz, idx)
    _, points, _ = parse_gzidx(idx.read_bytes())
    ours = {c * 8 - b: u for c, u, b, _f in points}
    with rapidgzip.open(str(gz), parallelization=1) as f:
        f.import_index(str(idx))
        offsets = f.block_offsets()
        # rapidgzip keeps a subset (it merges points closer than its chunk size); every one it
        # keeps must be ours, with our bit offset, and some must be mid-byte positions.
        assert set(offsets.items()) <= set(ours.items())
        assert any(bit % 8 for bit in offsets if offsets[bit] not in (0, len(data)))
        for a, b in ranges(len(data), [p[1] for p in points], 2):
            f.seek(a)
            assert f.read(b - a) == data[a:b], (a, b)


@pytest.mark.parametrize('threads', [1, 2])
def test_indexed_gzip_export_is_read_by_voxpipe(sample, tmp_path, threads):
    gz, data = sample
    idx = tmp_path / 'igz.gzidx'
    with indexed_gzip.IndexedGzipFile(str(gz), spacing=1 << 20) as f:
        f.build_full_index()
        f.export_index(str(idx))
    _, points, _ = parse_gzidx(idx.read_bytes())
    for a, b in ranges(len(data), [p[1] for p in points], 3):
        assert voxpipe_read(gz, idx, a, b, threads, tmp_path) == data[a:b], (a, b)


@pytest.mark.parametrize('threads', [1, 2])
def test_rapidgzip_export_is_read_by_voxpipe(sample, tmp_path, threads):
    gz, data = sample
    idx = tmp_path / 'rgz.gzidx'
    with rapidgzip.open(str(gz), parallelization=2) as f:
        assert f.read() == data
        f.export_index(str(idx))
    _, points, _ = parse_gzidx(idx.read_bytes())
    # rapidgzip writes no point at the member start: voxpipe decodes across it.
    assert all(u != 13 << 20 for _c, u, _b, _f in points)
    assert len(points) > 2
    for a, b in ranges(len(data), [p[1] for p in points], 4) + [((13 << 20) - 10, (13 << 20) + 10)]:
        assert voxpipe_read(gz, idx, a, b, threads, tmp_path) == data[a:b], (a, b)


def test_voxpipe_rejects_a_foreign_index_for_another_file(sample, tmp_path):
    gz, data = sample
    idx = tmp_path / 'igz.gzidx'
    with indexed_gzip.IndexedGzipFile(str(gz), spacing=4 << 20) as f:
        f.build_full_index()
        f.export_index(str(idx))
    other = tmp_path / 'other.gz'
    other.write_bytes(gzip.compress(data[:1000]))
    r = subprocess.run([TOOL, 'read', str(other), str(idx), '0', '10', str(tmp_path / 'o'), '1'],
                       capture_output=True, text=True)
    assert r.returncode == 1 and 'stale index' in r.stderr
