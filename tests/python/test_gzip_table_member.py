"""The table member that ends a .nii.gz voxpipe writes (src/gz/members.hpp): the file stays an
ordinary gzip file -- `gzip -t`, zlib, Python's gzip (so nibabel), indexed_gzip and rapidgzip
read it, and read the same bytes -- while voxpipe finds every member from it; a file without
it (written before it existed) reads as before."""

from __future__ import annotations

import gzip
import shutil
import struct
import subprocess
import zlib

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp

MEMBER = 1 << 20


def zlib_members(blob):
    """The uncompressed bytes of every member, by zlib, and the members' (offset, size)."""
    out, spans, at = [], [], 0
    while at < len(blob):
        d = zlib.decompressobj(31)
        out.append(d.decompress(blob[at:]))
        assert d.eof
        size = len(blob) - at - len(d.unused_data)
        spans.append((at, size))
        at += size
    return out, spans


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A 4D int16 image of 3.5 MiB saved by vp.save, its data and path."""
    d = tmp_path_factory.mktemp("table")
    data = np.random.default_rng(3).integers(-2000, 2000, size=(64, 60, 48, 10), dtype=np.int16)
    path = d / "bold.nii.gz"
    vp.save(nib.Nifti1Image(data, np.diag([2.0, 2.0, 2.5, 1.0])), path)
    return data, path


def test_the_last_member_is_an_empty_table_of_the_others(saved):
    data, path = saved
    blob = path.read_bytes()
    parts, spans = zlib_members(blob)
    raw = b"".join(parts)
    n = len(spans) - 1
    assert n == -(-len(raw) // MEMBER) and parts[-1] == b""
    offset, size = spans[-1]
    assert size == 58 + 4 * n and offset + size == len(blob)
    table = blob[offset:]
    xlen, = struct.unpack_from("<H", table, 10)
    assert table[:4] == b"\x1f\x8b\x08\x04" and xlen == size - 22
    assert table[12:16] == b"VP\x08\x00" and struct.unpack_from("<II", table, 16) == (size, 0)
    assert table[24:26] == b"VT"
    count, each, last = struct.unpack_from("<III", table, 28)
    assert (count, each, last) == (n, MEMBER, len(parts[-2]))
    assert list(struct.unpack_from(f"<{n}I", table, 40)) == [s for _, s in spans[:-1]]
    assert table[-18:] == b"VE\x04\x00" + struct.pack("<I", size) + b"\x03\x00" + bytes(8)


def test_every_gzip_reader_reads_the_same_bytes(saved):
    data, path = saved
    blob = path.read_bytes()
    raw = b"".join(zlib_members(blob)[0])
    assert gzip.decompress(blob) == raw  # Python's gzip, which nibabel reads through
    img = nib.load(path)
    assert np.asarray(img.dataobj).tobytes() == data.tobytes()
    assert raw[img.dataobj.offset:] == data.tobytes(order="F")
    assert np.asarray(vp.load(path).dataobj).tobytes() == data.tobytes()
    if shutil.which("gzip"):
        subprocess.run(["gzip", "-t", str(path)], check=True)
        out = subprocess.run(["gzip", "-dc", str(path)], check=True, capture_output=True).stdout
        assert out == raw
    else:
        pytest.fail("gzip is not installed")
    indexed_gzip = pytest.importorskip("indexed_gzip")
    with indexed_gzip.IndexedGzipFile(str(path)) as f:
        assert f.read() == raw
    rapidgzip = pytest.importorskip("rapidgzip")
    with rapidgzip.open(str(path)) as f:
        assert f.read() == raw


@pytest.mark.parametrize("shape", [(4, 4, 4), (0, 3, 3)], ids=["one-member", "empty"])
def test_small_images_have_a_table_too(tmp_path, shape):
    data = np.arange(np.prod(shape), dtype=np.int16).reshape(shape)
    path = tmp_path / "small.nii.gz"
    vp.save(nib.Nifti1Image(data, np.eye(4)), path)
    blob = path.read_bytes()
    parts, spans = zlib_members(blob)
    assert len(spans) == 2 and parts[-1] == b"" and spans[-1][1] == 58 + 4
    assert gzip.decompress(blob) == parts[0]
    assert np.asarray(nib.load(path).dataobj).tobytes() == data.tobytes()
    assert np.asarray(vp.load(path).dataobj).tobytes() == data.tobytes()


def test_a_file_without_the_table_reads_as_before(saved, tmp_path):
    data, path = saved
    blob = path.read_bytes()
    _, spans = zlib_members(blob)
    old = tmp_path / "old.nii.gz"
    old.write_bytes(blob[:spans[-1][0]])
    img = vp.load(old)
    assert img.dataobj._gzip_reader().random_access  # its members found by their headers
    assert np.asarray(img.dataobj[..., 7]).tobytes() == data[..., 7].tobytes()
    assert img.get_fdata().tobytes() == data.astype(np.float64).tobytes()
