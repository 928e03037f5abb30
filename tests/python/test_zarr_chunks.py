"""voxpipe._core.read_zarr_chunks against the reference encoders and readers.

Chunks are encoded by numcodecs (Zstd, Blosc, GZip, Zlib: the codecs zarr itself writes with),
or written by zarr into a real store; what read_zarr_chunks decodes into a NIfTI-ordered output
must equal NumPy slicing of the array, transposed to NIfTI's axis order, scaled by nibabel's
``apply_read_scaling`` and cast to the output dtype. Edge chunks carry junk in their padding,
missing chunks give the fill value, damaged chunks raise voxpipe's errors naming the chunk.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr
from nibabel.volumeutils import apply_read_scaling

from voxpipe import _core
from voxpipe.errors import CorruptError, FormatError, InvalidArgumentError, TruncatedError

# zarr axis order [t, c, z, y, x]; NIfTI's output is (x, y, z, t, c) in F order.
ZARR_TO_NIFTI = (3, 4, 2, 1, 0)  # NIfTI axis of each zarr axis (t->3, c->4, z->2, y->1, x->0)
NIFTI_FROM_ZARR = (4, 3, 2, 0, 1)  # zarr axis of each NIfTI axis (x<-4, y<-3, z<-2, t<-0, c<-1)

CODECS = {
    "none": None,
    "zstd": numcodecs.Zstd(level=3),
    "zstd_checksum": numcodecs.Zstd(level=1, checksum=True),
    "blosc_lz4_shuffle": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
    "blosc_zstd_bitshuffle": numcodecs.Blosc(cname="zstd", clevel=3, shuffle=numcodecs.Blosc.BITSHUFFLE),
    "blosc_blosclz_noshuffle": numcodecs.Blosc(cname="blosclz", clevel=9, shuffle=numcodecs.Blosc.NOSHUFFLE),
    "gzip": numcodecs.GZip(level=5),
    "zlib": numcodecs.Zlib(level=5),
}


def compressor_name(codec: str) -> str:
    return codec.split("_")[0]


def make_values(shape, dtype: np.dtype, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
    if dtype.kind == "c":
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype) * 100
    return (rng.normal(size=shape) * 1000).astype(dtype)


class ChunkedArray:
    """An array split into padded chunks (junk in the padding), each encoded by `codec`."""

    def __init__(self, values: np.ndarray, chunk_shape, codec: str, fill_value=0, f_order=False):
        self.values = values
        self.chunk_shape = tuple(chunk_shape)
        self.codec = codec
        self.fill_value = np.array(fill_value, dtype=values.dtype)
        self.f_order = f_order
        self.grid = tuple(-(-s // c) for s, c in zip(values.shape, chunk_shape))
        self.encoded: dict[tuple[int, ...], bytes] = {}
        junk = make_values(self.chunk_shape, values.dtype, seed=99)
        for g in itertools.product(*(range(n) for n in self.grid)):
            region = tuple(slice(i * c, (i + 1) * c) for i, c in zip(g, self.chunk_shape))
            part = values[region]
            chunk = junk.copy()
            chunk[tuple(slice(0, n) for n in part.shape)] = part
            raw = chunk.tobytes(order="F" if f_order else "C")
            self.encoded[g] = raw if CODECS[codec] is None else bytes(CODECS[codec].encode(raw))

    def spec(self, name="test.nii.zarr/0") -> dict:
        dtype = self.values.dtype
        return {
            "shape": list(self.values.shape),
            "chunk_shape": list(self.chunk_shape),
            "dtype": dtype.newbyteorder("=").name,
            "big_endian": dtype.byteorder == ">" or (dtype.byteorder == "=" and sys.byteorder == "big"),
            "chunk_f_order": self.f_order,
            "compressor": compressor_name(self.codec),
            "fill_value": self.fill_value.tobytes(),
            "name": name,
        }

    def chunk_list(self, missing=(), files: Path | None = None, buffer_type=bytes):
        out = []
        for g, data in self.encoded.items():
            key = "c/" + "/".join(map(str, g))
            if g in missing:
                out.append((g, key, None, None))
            elif files is not None:
                path = files / key.replace("/", "_")
                path.write_bytes(data)
                out.append((g, key, str(path), None))
            else:
                out.append((g, key, None, buffer_type(data)))
        return out

    def expected(self, slices, missing=()) -> np.ndarray:
        """The array as zarr reads it (missing chunks: the fill value), sliced."""
        full = self.values.copy()
        for g in missing:
            full[tuple(slice(i * c, (i + 1) * c) for i, c in zip(g, self.chunk_shape))] = self.fill_value
        return full[slices]


def selection_of(slices, shape):
    sel = []
    for s, n in zip(slices, shape):
        start, stop, step = s.indices(n)
        sel.append((start, step, len(range(start, stop, step))))
    return sel


def read(arr: ChunkedArray, slices, out_dtype, *, apply_scaling=True, file_byte_order=False,
         real_part=False, slope=1.0, inter=0.0, missing=(), files=None, threads=2, buffer_type=bytes):
    """read_zarr_chunks into a fresh F-ordered NIfTI output; returns it (x, y, z, t, c)."""
    sel = selection_of(slices, arr.values.shape)
    nifti_shape = tuple(sel[NIFTI_FROM_ZARR[k]][2] for k in range(5))
    out = np.full(nifti_shape, 0, dtype=out_dtype, order="F")
    flat = out.reshape(-1, order="F").view(np.uint8)
    assert np.shares_memory(flat, out)
    elem = [s // out.itemsize for s in out.strides]
    dest_strides = [elem[ZARR_TO_NIFTI[k]] for k in range(5)]
    _core.read_zarr_chunks(arr.spec(), arr.chunk_list(missing, files, buffer_type), sel,
                           np.dtype(out_dtype).name, apply_scaling, file_byte_order, real_part,
                           slope, inter, flat, dest_strides, threads)
    return out


def nifti_reference(selected: np.ndarray, out_dtype, slope=1.0, inter=0.0, apply_scaling=True):
    """NumPy's selection in NIfTI order, scaled as nibabel scales, cast to the output dtype."""
    data = selected.transpose(NIFTI_FROM_ZARR)
    if apply_scaling:
        data = apply_read_scaling(data, slope, inter)
    return np.asarray(data).astype(out_dtype)


SHAPE = (3, 2, 5, 6, 7)  # t, c, z, y, x
CHUNKS = (1, 1, 4, 6, 3)  # edge chunks along z and x
ALL = (slice(None),) * 5


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("stored", ["<i2", ">i2", ">f4", "<u2", "u1", ">f8"])
def test_every_reference_codec_decodes_to_numpy_and_nibabel_values(codec, stored):
    arr = ChunkedArray(make_values(SHAPE, np.dtype(stored), seed=1), CHUNKS, codec)
    slope, inter = 0.25, -3.5
    got = read(arr, ALL, np.float32, slope=slope, inter=inter)
    np.testing.assert_array_equal(got, nifti_reference(arr.values, np.float32, slope, inter))
    got = read(arr, ALL, np.float64, slope=slope, inter=0.0)
    np.testing.assert_array_equal(got, nifti_reference(arr.values, np.float64, slope, 0.0))
    # Unscaled, in the stored type: native byte order, or the stored bytes themselves.
    native = np.dtype(stored).newbyteorder("=")
    got = read(arr, ALL, native, apply_scaling=False)
    np.testing.assert_array_equal(got, nifti_reference(arr.values, native, apply_scaling=False))
    got = read(arr, ALL, native, apply_scaling=False, file_byte_order=True)
    assert got.tobytes(order="F") == arr.values.transpose(NIFTI_FROM_ZARR).tobytes(order="F")


@pytest.mark.parametrize("codec", ["none", "zstd", "blosc_lz4_shuffle", "gzip"])
@pytest.mark.parametrize(
    "slices",
    [
        (slice(None, None, -1), slice(None), slice(None, None, -2), slice(1, 6), slice(None, None, -1)),
        (slice(2, 3), slice(1, 2), slice(4, 0, -3), slice(None, None, 5), slice(6, 0, -4)),
        (slice(0, 3, 2), slice(None), slice(1, 2), slice(5, None), slice(2, 3)),
    ],
    ids=["reversed", "big_steps", "single_elements"],
)
def test_selections_pick_the_same_voxels_as_numpy_slicing(codec, slices):
    arr = ChunkedArray(make_values(SHAPE, np.dtype("<i2"), seed=2), CHUNKS, codec)
    got = read(arr, slices, np.float64, slope=2.0, inter=1.0)
    np.testing.assert_array_equal(got, nifti_reference(arr.values[slices], np.float64, 2.0, 1.0))


def test_chunks_from_files_buffers_and_missing_chunks(tmp_path):
    arr = ChunkedArray(make_values(SHAPE, np.dtype(">i2"), seed=3), CHUNKS, "zstd", fill_value=-7)
    missing = {(0, 1, 1, 0, 2), (2, 0, 0, 0, 2), (1, 1, 0, 0, 1)}
    want = nifti_reference(arr.expected(ALL, missing), np.float32, 0.5, 10.0)
    for kwargs in ({"files": tmp_path}, {"buffer_type": bytearray}, {"buffer_type": memoryview},
                   {"buffer_type": lambda b: np.frombuffer(b, np.uint8)}):
        got = read(arr, ALL, np.float32, slope=0.5, inter=10.0, missing=missing, **kwargs)
        np.testing.assert_array_equal(got, want, err_msg=str(kwargs))
    # The fill value converted like data: -7 * 0.5 + 10.
    assert got[6, 0, 0, 2, 0] == np.float32(6.5)


@pytest.mark.parametrize("codec", ["none", "blosc_zstd_bitshuffle", "zlib"])
def test_f_order_chunks_are_read_in_their_own_order(codec):
    arr = ChunkedArray(make_values(SHAPE, np.dtype("<f4"), seed=4), CHUNKS, codec, f_order=True)
    slices = (slice(None, None, -1), slice(None), slice(1, None, 2), slice(None), slice(None, None, -1))
    got = read(arr, slices, np.float32, apply_scaling=False)
    np.testing.assert_array_equal(got, nifti_reference(arr.values[slices], np.float32, apply_scaling=False))


def test_complex_chunks_give_their_real_part_or_complex_values():
    arr = ChunkedArray(make_values(SHAPE, np.dtype("<c8"), seed=5), CHUNKS, "zstd")
    got = read(arr, ALL, np.complex128, slope=2.0)
    np.testing.assert_array_equal(got, nifti_reference(arr.values, np.complex128, 2.0))
    got = read(arr, ALL, np.float64, real_part=True, apply_scaling=False)
    np.testing.assert_array_equal(got, arr.values.real.transpose(NIFTI_FROM_ZARR).astype(np.float64))


def test_thread_counts_give_the_same_output():
    arr = ChunkedArray(make_values((4, 1, 9, 8, 10), np.dtype("<i2"), seed=6), (1, 1, 2, 3, 4), "blosc_lz4_shuffle")
    slices = (slice(None), slice(None), slice(None, None, -1), slice(1, 7), slice(None))
    want = nifti_reference(arr.values[slices], np.float32, 1.5, -2.0)
    for threads in (1, 3, 8, 0):
        np.testing.assert_array_equal(read(arr, slices, np.float32, slope=1.5, inter=-2.0, threads=threads), want)


def write_zarr(path: Path, values: np.ndarray, chunks, zarr_format: int, **kwargs):
    a = zarr.create_array(str(path), shape=values.shape, chunks=chunks, dtype=values.dtype,
                          zarr_format=zarr_format, fill_value=0, **kwargs)
    a[...] = values
    return a


@pytest.mark.parametrize(
    "zarr_format, kwargs, compressor",
    [
        (3, {}, "zstd"),  # zarr's default: Zstd level 0
        (3, {"compressors": zarr.codecs.GzipCodec(level=4), "serializer": zarr.codecs.BytesCodec(endian="big")}, "gzip"),
        (3, {"compressors": zarr.codecs.BloscCodec(cname="lz4", shuffle="bitshuffle")}, "blosc"),
        (2, {"compressors": numcodecs.Blosc(cname="zstd", shuffle=numcodecs.Blosc.SHUFFLE), "order": "F"}, "blosc"),
        (2, {"compressors": numcodecs.Zlib(level=1), "order": "C"}, "zlib"),
        (2, {"compressors": None}, "none"),
    ],
    ids=["v3_default", "v3_gzip_big_endian", "v3_blosc", "v2_blosc_F", "v2_zlib", "v2_none"],
)
def test_chunk_files_zarr_writes_decode_to_what_zarr_reads(tmp_path, zarr_format, kwargs, compressor):
    values = make_values(SHAPE, np.dtype("<i2"), seed=7)
    values[1] = 0  # whole chunks of the fill value: zarr writes no file for them
    a = write_zarr(tmp_path / "a.zarr", values, CHUNKS, zarr_format, **kwargs)
    meta = a.metadata
    if zarr_format == 3:
        big = any(getattr(c, "endian", None) is not None and c.endian.value == "big" for c in meta.codecs)
        key_of = lambda g: "c/" + "/".join(map(str, g))  # noqa: E731
        f_order = False
    else:
        big = False
        key_of = lambda g: ".".join(map(str, g))  # noqa: E731
        f_order = meta.order == "F"
    chunks, absent = [], 0
    grid = [-(-s // c) for s, c in zip(SHAPE, CHUNKS)]
    for g in itertools.product(*map(range, grid)):
        path = tmp_path / "a.zarr" / key_of(g)
        chunks.append((g, key_of(g), str(path) if path.exists() else None, None))
        absent += not path.exists()
    assert absent == 2 * 2 * 3  # volume t=1: 2 channels x 2 x 1 x 3 chunks, all zero
    spec = {"shape": list(SHAPE), "chunk_shape": list(CHUNKS), "dtype": "int16", "big_endian": big,
            "chunk_f_order": f_order, "compressor": compressor, "fill_value": np.int16(0).tobytes(),
            "name": str(tmp_path / "a.zarr")}
    slices = (slice(None, None, -1), slice(None), slice(None), slice(None, None, 2), slice(1, None))
    sel = selection_of(slices, SHAPE)
    nifti_shape = tuple(sel[NIFTI_FROM_ZARR[k]][2] for k in range(5))
    out = np.zeros(nifti_shape, np.float32, order="F")
    elem = [s // 4 for s in out.strides]
    _core.read_zarr_chunks(spec, chunks, sel, "float32", True, False, False, 0.5, 1.0,
                           out.reshape(-1, order="F").view(np.uint8),
                           [elem[ZARR_TO_NIFTI[k]] for k in range(5)], 2)
    # zarr refuses negative steps: read it all, then slice with NumPy.
    from_zarr = np.asarray(zarr.open_array(str(tmp_path / "a.zarr"), mode="r")[...])[slices]
    np.testing.assert_array_equal(out, nifti_reference(from_zarr, np.float32, 0.5, 1.0))


def damaged(data: bytes, how: str) -> bytes:
    if how == "cut":
        return data[:-3]
    if how == "trailing":
        return data + b"garbage!"
    if how == "flipped_end":
        return data[:-1] + bytes([data[-1] ^ 0x5A])
    raise AssertionError(how)


@pytest.mark.parametrize(
    "codec, how, error",
    [
        ("none", "cut", TruncatedError),
        ("none", "trailing", FormatError),
        ("zstd", "cut", TruncatedError),
        ("zstd", "trailing", CorruptError),
        ("zstd_checksum", "flipped_end", CorruptError),
        ("gzip", "cut", TruncatedError),
        ("gzip", "trailing", CorruptError),
        ("gzip", "flipped_end", CorruptError),  # ISIZE
        ("zlib", "cut", TruncatedError),
        ("zlib", "trailing", CorruptError),
        ("zlib", "flipped_end", CorruptError),  # Adler-32
        ("blosc_lz4_shuffle", "cut", TruncatedError),
        ("blosc_lz4_shuffle", "trailing", CorruptError),
    ],
)
def test_damaged_chunks_raise_naming_array_chunk_and_field(codec, how, error):
    arr = ChunkedArray(make_values(SHAPE, np.dtype("<i2"), seed=8), CHUNKS, codec)
    g = (1, 0, 1, 0, 2)
    arr.encoded[g] = damaged(arr.encoded[g], how)
    with pytest.raises(error) as info:
        read(arr, ALL, np.float32)
    e = info.value
    assert e.field == "chunk"
    assert e.path == "test.nii.zarr/0"
    assert "c/1/0/1/0/2" in str(e) and "expected" in str(e)
    # A selection that does not touch the damaged chunk reads fine.
    ok = (slice(0, 1),) + ALL[1:]
    np.testing.assert_array_equal(read(arr, ok, np.float32), nifti_reference(arr.values[ok], np.float32))


def test_numcodecs_refuses_what_voxpipe_refuses_as_damage():
    # The reference decoders fail on the same damage (no silent data on either side).
    raw = make_values((64,), np.dtype("<i2"), seed=9).tobytes()
    for codec in ("zstd_checksum", "gzip", "zlib"):
        bad = damaged(bytes(CODECS[codec].encode(raw)), "flipped_end")
        with pytest.raises(Exception):
            CODECS[codec].decode(bad)


def test_a_touched_chunk_that_is_not_listed_is_named():
    arr = ChunkedArray(make_values(SHAPE, np.dtype("<i2"), seed=10), CHUNKS, "none")
    sel = selection_of(ALL, SHAPE)
    chunks = [c for c in arr.chunk_list() if c[0] != (2, 1, 1, 0, 0)]
    out = np.zeros(int(np.prod(SHAPE)), np.int16)
    with pytest.raises(InvalidArgumentError, match=r"\(2, 1, 1, 0, 0\)"):
        _core.read_zarr_chunks(arr.spec(), chunks, sel, "int16", False, False, False, 1.0, 0.0,
                               out.view(np.uint8), [420, 210, 42, 7, 1], 1)


def test_bad_arguments_are_value_errors():
    arr = ChunkedArray(make_values((4, 4), np.dtype("<i2"), seed=11), (2, 2), "none")
    out = np.zeros(16, np.int16).view(np.uint8)
    sel = [(0, 1, 4), (0, 1, 4)]
    spec = arr.spec()
    call = lambda spec, chunks, strides: _core.read_zarr_chunks(  # noqa: E731
        spec, chunks, sel, "int16", False, False, False, 1.0, 0.0, out, strides, 1)
    with pytest.raises(InvalidArgumentError, match="overlap"):
        call(spec, arr.chunk_list(), [2, 1])
    with pytest.raises(InvalidArgumentError, match="compressor"):
        call({**spec, "compressor": "lzma"}, arr.chunk_list(), [4, 1])
    with pytest.raises(InvalidArgumentError, match="both"):
        call(spec, [(g, k, "/nonexistent", b"x") for g, k, _, _ in arr.chunk_list(missing=set(arr.encoded))], [4, 1])
    with pytest.raises(InvalidArgumentError, match="fill_value"):
        call({**spec, "fill_value": b"\x00"}, arr.chunk_list(), [4, 1])
    # No fill value: fine while every chunk is stored, refused for a missing one.
    call({**spec, "fill_value": b""}, arr.chunk_list(), [4, 1])
    with pytest.raises(InvalidArgumentError, match="fill value"):
        call({**spec, "fill_value": b""}, arr.chunk_list(missing={(1, 0)}), [4, 1])
    call(spec, arr.chunk_list(), [1, 4])  # a transposed output is fine
    np.testing.assert_array_equal(out.view(np.int16).reshape(4, 4, order="F"), arr.values)
