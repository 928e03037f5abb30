"""NIfTI images opened from memory (``_core.open_bytes``) read exactly as the same bytes in a file
and as nibabel reads them: ``.nii``, ``.nii.gz`` as nibabel/gzip write it (one member) and as
voxpipe writes it (sized members), from every kind of buffer (bytes, bytearray, memoryview,
read-only NumPy array, mmap). The buffer is read in place and held while an image or reader
needs it; damaged bytes raise the errors a file raises, naming the buffer.
"""

from __future__ import annotations

import gc
import gzip
import mmap

import nibabel as nib
import numpy as np
import pytest

import voxpipe  # noqa: F401  (voxpipe.errors, which the extension raises through)
from voxpipe import _core, errors

SHAPE = (9, 7, 5, 3)


def _nib_image(slope=1.0, inter=0.0):
    data = (np.arange(np.prod(SHAPE), dtype=np.int64) * 7919 % 60001 - 30000).astype(np.int16)
    img = nib.Nifti1Image(data.reshape(SHAPE, order="F"), np.diag([1.5, 2.0, 2.5, 1.0]))
    img.header.set_slope_inter(slope, inter)
    return img


def _members_bytes(plain: bytes, tmp_path) -> bytes:
    """`plain` (.nii bytes) rewritten by voxpipe in its sized-member .nii.gz layout."""
    core = _core.open_bytes(plain, "plain.nii")
    data = np.frombuffer(plain, np.uint8, offset=core.data_offset)
    path = tmp_path / "members.nii.gz"
    _core.write(str(path), core.header_bytes, core.extensions, data, 1, "members", 1)
    return path.read_bytes()


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """{kind: bytes of the same image} and the nibabel image they hold."""
    tmp = tmp_path_factory.mktemp("from_bytes")
    img = _nib_image(0.5, 3.0)
    plain = img.to_bytes()
    kinds = {"nii": plain, "nii.gz": gzip.compress(plain, 1), "members": _members_bytes(plain, tmp)}
    return kinds, nib.Nifti1Image.from_bytes(plain)  # as nibabel reads the bytes back


def _read(reader, image, selection=(), dtype=None, scaled=False, threads=0, shape=None):
    dtype = np.dtype(dtype or image.dtype)
    out = np.empty(shape or image.shape, dtype=dtype, order="F")
    reader.read([tuple(s) for s in selection], dtype.name, scaled, False, False,
                out.reshape(-1, order="F").view(np.uint8), threads)
    return out


def _buffers(raw: bytes, tmp_path):
    """The same bytes as each kind of buffer a user may hold."""
    ro = np.frombuffer(raw, np.uint8)
    ro.flags.writeable = False
    path = tmp_path / "mapped.bin"
    path.write_bytes(raw)
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return {"bytes": raw, "bytearray": bytearray(raw), "memoryview": memoryview(raw),
            "numpy": ro, "mmap": mapped}


@pytest.mark.parametrize("kind", ["nii", "nii.gz", "members"])
def test_every_buffer_reads_as_the_file_and_as_nibabel(stored, kind, tmp_path):
    kinds, img = stored
    raw = kinds[kind]
    path = tmp_path / ("x.nii" if kind == "nii" else "x.nii.gz")
    path.write_bytes(raw)
    file_core = _core.open(str(path))
    want = np.asanyarray(img.dataobj)  # scaled: float64
    unscaled = img.dataobj.get_unscaled()
    for label, buf in _buffers(raw, tmp_path).items():
        core = _core.open_bytes(buf, f"<{label}>")
        assert core.header_path == core.data_path == f"<{label}>"
        assert not core.data_in_file and file_core.data_in_file
        for attr in ("shape", "dtype", "data_offset", "slope", "inter", "affine", "header_bytes",
                     "extensions", "warnings", "gzip", "version", "big_endian", "scaled_dtype"):
            assert getattr(core, attr) == getattr(file_core, attr), (label, attr)
        reader = _core.Reader(core, "auto", "")
        reader.check_data_size()
        assert reader.random_access == (kind != "nii.gz")
        for threads in (1, 2):
            np.testing.assert_array_equal(_read(reader, core, threads=threads), unscaled)
            got = _read(reader, core, dtype="float64", scaled=True, threads=threads)
            assert got.tobytes() == want.tobytes(), (label, threads)
        # One volume, and a strided, reversed selection, as the file's reader reads them.
        file_reader = _core.Reader(file_core, "auto", "")
        for sel, shape in ([[(0, 1, 9), (0, 1, 7), (0, 1, 5), (2, 1, 1)], (9, 7, 5, 1)],
                           [[(8, -2, 4), (1, 3, 2), (4, -1, 5), (0, 2, 2)], (4, 2, 5, 2)]):
            a = _read(reader, core, sel, "float32", True, 1, shape)
            b = _read(file_reader, file_core, sel, "float32", True, 1, shape)
            assert a.tobytes() == b.tobytes(), (label, sel)
        del reader, core
        if label == "mmap":
            gc.collect()
            buf.close()  # no export left once the image and reader are gone


def test_the_buffer_is_read_in_place_and_held(stored):
    kinds, img = stored
    buf = bytearray(kinds["nii"])
    core = _core.open_bytes(buf, "held.nii")
    reader = _core.Reader(core, "none", "")
    with pytest.raises(BufferError):
        buf.extend(b"x")  # exported: the image holds it
    # Not copied: a change to the caller's bytes shows in the next read.
    buf[core.data_offset:core.data_offset + 2] = np.int16(1234).tobytes()
    assert _read(reader, core)[0, 0, 0, 0] == 1234
    del core
    gc.collect()
    with pytest.raises(BufferError):
        buf.extend(b"x")  # the reader still holds it
    del reader
    gc.collect()
    buf.extend(b"x")  # released


def test_the_image_keeps_its_bytes_alive(stored):
    kinds, img = stored
    core = _core.open_bytes(bytes(kinds["nii.gz"]), "temp.nii.gz")  # the only reference
    gc.collect()
    np.testing.assert_array_equal(_read(_core.Reader(core, "auto", ""), core),
                                  img.dataobj.get_unscaled())


def test_damaged_bytes_raise_what_the_file_raises(stored, tmp_path):
    kinds, _ = stored
    for kind, raw in kinds.items():
        cut = raw[:len(raw) - 5]
        path = tmp_path / ("cut.nii" if kind == "nii" else "cut.nii.gz")
        path.write_bytes(cut)

        def outcome(open_core, name):
            try:
                core = open_core()
                reader = _core.Reader(core, "auto", "")
                _read(reader, core)
            except errors.VoxpipeError as e:
                return type(e), str(e).replace(name, "NAME"), e.path, e.field, e.offset
            return None

        mem = outcome(lambda: _core.open_bytes(cut, "<cut>"), "<cut>")
        fil = outcome(lambda: _core.open(str(path)), str(path))
        assert mem is not None and mem[0] is errors.TruncatedError, (kind, mem)
        assert mem[2] == "<cut>"
        assert (mem[0], mem[1], mem[3], mem[4]) == (fil[0], fil[1], fil[3], fil[4]), kind
    # A damaged CRC32 in the single-member stream.
    bad = bytearray(kinds["nii.gz"])
    bad[-8] ^= 0xFF
    core = _core.open_bytes(bad, "<crc>")
    with pytest.raises(errors.CorruptError) as e:
        _read(_core.Reader(core, "auto", ""), core)
    assert e.value.path == "<crc>"


def test_names_and_index_modes():
    plain = _nib_image().to_bytes()
    with pytest.raises(errors.FormatError):
        _core.open_bytes(plain, "claims.nii.gz")  # a .gz name promises gzip
    with pytest.raises(errors.UnsupportedError):
        _core.open_bytes(plain, "pair.hdr")
    core = _core.open_bytes(gzip.compress(plain), "no extension")  # gzip found by its magic
    assert core.gzip
    assert not _core.Reader(core, "auto", "").random_access  # no sidecar for bytes
    with pytest.raises(errors.InvalidArgumentError):
        _core.Reader(core, "path", "/tmp/some.gzidx")
    assert _core.open_bytes(plain).header_path == "<bytes>"


def test_non_buffers_and_non_contiguous_buffers_are_refused():
    with pytest.raises(TypeError):
        _core.open_bytes("not bytes", "s")
    strided = np.frombuffer(_nib_image().to_bytes() * 2, np.uint8)[::2]
    with pytest.raises((BufferError, ValueError)):
        _core.open_bytes(strided, "strided")
