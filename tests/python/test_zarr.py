"""NIfTI-Zarr: voxpipe's stores against the specification's reference implementation (niizarr,
PyPI nifti-zarr), zarr itself, ome-zarr-models' validator and nibabel's values.

Both ways: stores voxpipe writes open in ``niizarr.zarr2nii`` with the header block and the stored
values of the source; stores ``niizarr.nii2zarr`` writes open in voxpipe with nibabel's values of
the source, bit for bit, for whole reads and slices.
"""
from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from voxpipe.errors import CorruptError, FormatError, TruncatedError, VoxpipeError

zarr = pytest.importorskip("zarr")
niizarr = pytest.importorskip("niizarr")

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get("VOXPIPE_CLI") or REPO / ".venv" / "bin" / "voxpipe")


def _image(shape, dtype, *, slope=None, inter=None, version=1, big_endian=False, seed=0,
           units=("mm", "sec")):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        data = rng.normal(0, 100, size=shape).astype(dt)
    elif dt.kind == "c":
        data = (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dt)
    else:
        info = np.iinfo(dt)
        data = rng.integers(max(info.min, -3000), min(info.max, 3000), size=shape,
                            endpoint=True).astype(dt)
    klass = nib.Nifti1Image if version == 1 else nib.Nifti2Image
    affine = np.array([[-2.0, 0.1, 0, 90], [0, 2.0, 0.2, -126], [0, 0, 2.5, -72], [0, 0, 0, 1]])
    img = klass(data, affine)
    img.header.set_xyzt_units(*units)
    if len(shape) > 3:
        img.header["pixdim"][4] = 0.8
    if slope is not None:
        img.header.set_slope_inter(slope, inter)
    if big_endian:
        img = klass(data, affine, img.header.as_byteswapped(">"))
    return img


def _saved(tmp_path, img, name="src.nii.gz"):
    path = tmp_path / name
    nib.save(img, path)
    return path


CASES = [
    pytest.param((9, 10, 7), "uint8", None, None, 1, False, id="u1-3d"),
    pytest.param((9, 10, 7, 5), "int16", 0.5, 10.0, 1, False, id="i2-4d-scaled"),
    pytest.param((9, 10, 7, 4), "int16", 2.0, -3.0, 1, True, id="i2-4d-scaled-bigendian"),
    pytest.param((8, 6, 5, 3), "float32", None, None, 2, False, id="f4-4d-nifti2"),
    pytest.param((6, 7, 5, 3, 2), "uint16", 0.25, 0.0, 1, False, id="u2-5d-scaled"),
    pytest.param((7, 6, 5), "float64", None, None, 1, False, id="f8-3d"),
    pytest.param((5, 6, 4, 2), "int32", 1.5, 2.0, 2, False, id="i4-4d-nifti2-scaled"),
    pytest.param((5, 4, 3), "complex64", None, None, 1, False, id="c8-3d"),
]


@pytest.mark.parametrize("shape,dtype,slope,inter,version,big", CASES)
def test_voxpipe_store_opens_in_niizarr_with_the_source_header_and_values(
        tmp_path, shape, dtype, slope, inter, version, big):
    src = _saved(tmp_path, _image(shape, dtype, slope=slope, inter=inter, version=version,
                                  big_endian=big))
    ref = nib.load(src)
    out = tmp_path / "out.nii.zarr"
    vp.save(vp.load(src), out)
    theirs = niizarr.zarr2nii(str(out))
    # The stored values (niizarr returns them unscaled) and the header block, as stored.
    assert np.array_equal(np.asarray(theirs.dataobj), np.asanyarray(ref.dataobj.get_unscaled()))
    assert theirs.header.binaryblock == ref.header.binaryblock
    # And voxpipe reads its own store back with nibabel's values, bit for bit.
    mine = vp.load(out)
    assert type(mine) is type(ref)
    assert mine.header.binaryblock == ref.header.binaryblock
    assert np.array_equal(mine.affine, ref.affine)
    assert mine.get_fdata().tobytes() == ref.get_fdata().tobytes()
    assert np.asanyarray(mine.dataobj).tobytes() == np.asanyarray(ref.dataobj).tobytes()


@pytest.mark.parametrize("shape,dtype,slope,inter,version,big", CASES)
@pytest.mark.parametrize("zarr_version,compressor,chunk", [
    pytest.param(3, "blosc", 4, id="v3-blosc-c4"),
    pytest.param(2, "zlib", 3, id="v2-zstd-c3"),
    pytest.param(3, "zlib", 64, id="v3-zstd-c64"),
])
def test_niizarr_store_opens_in_voxpipe_with_nibabels_values(
        tmp_path, shape, dtype, slope, inter, version, big, zarr_version, compressor, chunk):
    if np.dtype(dtype).kind == "c":
        pytest.skip("niizarr 1.0.0rc8 passes every level, level 0 included, through scikit-image's "
                    "pyramid, which drops the imaginary part: its complex stores are not the data")
    src = _saved(tmp_path, _image(shape, dtype, slope=slope, inter=inter, version=version,
                                  big_endian=big))
    ref = nib.load(src)
    out = tmp_path / "theirs.nii.zarr"
    niizarr.nii2zarr(nib.load(src), str(out), chunk=chunk, nb_levels=1,
                     compressor=compressor, zarr_version=zarr_version)
    img = vp.load(out)
    assert img.shape == ref.shape
    assert img.header.binaryblock == ref.header.binaryblock
    assert np.array_equal(img.affine, ref.affine)
    assert img.get_fdata().tobytes() == ref.get_fdata().tobytes()
    assert img.get_fdata(dtype=np.float32).tobytes() == ref.get_fdata(dtype=np.float32).tobytes()
    # Slices: a volume, strided and reversed axes, a single voxel.
    for slicer in [(..., -1), (slice(1, None, 2), slice(None, None, -1), 2),
                   (0, 1, 2), (slice(None, None, -3),)]:
        mine, theirs = img.dataobj[slicer], ref.dataobj[slicer]
        assert np.asarray(mine).shape == np.asarray(theirs).shape
        assert np.asarray(mine).tobytes() == np.asarray(theirs).tobytes()


def test_written_stores_validate_as_ome_zarr(tmp_path):
    ome_zarr_models = pytest.importorskip("ome_zarr_models")
    src = _saved(tmp_path, _image((16, 14, 10, 3), "int16", slope=0.5, inter=1.0))
    for fmt in (3, 2):
        out = tmp_path / f"v{fmt}.nii.zarr"
        vp.save(vp.load(src), out, levels=3, zarr_format=fmt)
        group = ome_zarr_models.open_ome_zarr(zarr.open_group(str(out), mode="r"))
        ms = group.attributes.ome.multiscales[0] if fmt == 3 else \
            group.attributes.multiscales[0]
        assert [d.path for d in ms.datasets] == ["0", "1", "2"]
        assert [a.name for a in ms.axes] == ["t", "z", "y", "x"]
        assert [a.unit for a in ms.axes] == ["second", "millimeter", "millimeter", "millimeter"]


def test_pyramid_levels_are_means_with_the_reference_readers_affine(tmp_path):
    img = _image((16, 12, 10, 2), "float32")
    img.header.set_qform(img.affine, 1)
    src = _saved(tmp_path, img)
    out = tmp_path / "pyr.nii.zarr"
    vp.save(vp.load(src), out, levels=2)
    data = nib.load(src).get_fdata(dtype=np.float32)
    coarse = vp.load(out, level=1)
    assert coarse.shape == (8, 6, 5, 2)
    # Each voxel: the mean of its 2x2x2 cell.
    expected = data.reshape(8, 2, 6, 2, 5, 2, 2).mean(axis=(1, 3, 5), dtype=np.float64)
    np.testing.assert_allclose(coarse.get_fdata(dtype=np.float32), expected.astype(np.float32),
                               rtol=1e-7)
    theirs = niizarr.zarr2nii(str(out), level=1)
    np.testing.assert_allclose(coarse.affine, theirs.header.get_best_affine())
    # The coarse voxels are twice as large and centred on their cells.
    assert np.allclose(coarse.affine[:3, :3], img.affine[:3, :3] * 2)


def test_sharded_store_is_decoded_by_the_core_with_equal_values(tmp_path):
    src = _saved(tmp_path, _image((12, 10, 8, 6), "int16", slope=0.5, inter=1.0))
    out = tmp_path / "sharded.nii.zarr"
    vp.save(vp.load(src), out, chunks=(6, 5, 4, 1), shards=(12, 10, 8, 3))
    meta = zarr.open_group(str(out), mode="r")["0"]
    assert meta.shards == (3, 8, 10, 12)
    ref = nib.load(src)
    img = vp.load(out)
    assert img.dataobj.store.shards is not None  # inner chunks through the core, not zarr
    assert img.get_fdata().tobytes() == ref.get_fdata().tobytes()
    assert np.asarray(img.dataobj[2:9, ::-1, 3, 4]).tobytes() == \
        np.asarray(ref.dataobj[2:9, ::-1, 3, 4]).tobytes()


@pytest.mark.parametrize("location", ["end", "start"])
def test_shards_with_absent_inner_chunks_and_either_index_location(tmp_path, location):
    """zarr leaves inner chunks of fill values unwritten (absent from the index): they read as
    the fill value; the index may come first or last in the shard."""
    data = _image((10, 8, 6, 4), "int16").get_fdata().astype(np.int16)
    data[:5] = 0  # whole inner chunks of zeros, which zarr does not store
    src = tmp_path / "src.nii"
    nib.save(nib.Nifti1Image(data, np.eye(4)), src)
    out = tmp_path / "s.nii.zarr"
    vp.save(vp.load(src), out)
    group = zarr.open_group(str(out), mode="r+")
    del group["0"]
    sharding = zarr.codecs.ShardingCodec(chunk_shape=(1, 3, 4, 5), index_location=location,
                                         codecs=[zarr.codecs.BytesCodec(),
                                                 zarr.codecs.ZstdCodec(level=1)])
    arr = group.create_array("0", shape=(4, 6, 8, 10), dtype="int16", serializer=sharding,
                             compressors=None, chunks=(2, 6, 8, 10), fill_value=0,
                             config={"write_empty_chunks": False})
    arr[...] = np.ascontiguousarray(data.T)
    img = vp.load(out)
    assert img.dataobj.store.shards is not None
    assert np.array_equal(img.get_fdata(), data)
    assert np.array_equal(np.asarray(img.dataobj[..., 2]), data[..., 2])


def test_a_damaged_shard_index_is_an_error_naming_the_shard(tmp_path):
    src = _saved(tmp_path, _image((12, 10, 8, 6), "int16"))
    out = tmp_path / "bad.nii.zarr"
    vp.save(vp.load(src), out, chunks=(6, 5, 4, 1), shards=(12, 10, 8, 3))
    shard = out / "0" / "c" / "1" / "0" / "0" / "0"
    raw = bytearray(shard.read_bytes())
    raw[-10] ^= 0xFF  # in the index, under its CRC32C
    shard.write_bytes(bytes(raw))
    img = vp.load(out)
    assert np.asarray(img.dataobj[..., 0]).tobytes() == \
        np.asarray(nib.load(src).dataobj[..., 0]).tobytes()  # shard 0 is intact
    with pytest.raises(CorruptError) as err:
        img.dataobj[..., 4]
    assert "c/1/0/0/0" in str(err.value) and "CRC32C" in str(err.value)
    shard.write_bytes(bytes(raw[:40]))  # shorter than its index
    with pytest.raises(TruncatedError):
        vp.load(out).dataobj[..., 4]


def test_header_extensions_round_trip(tmp_path):
    img = _image((6, 5, 4), "int16")
    img.header.extensions.append(nib.nifti1.Nifti1Extension(6, b"voxpipe comment\x00"))
    src = _saved(tmp_path, img)
    out = tmp_path / "ext.nii.zarr"
    vp.save(vp.load(src), out)
    mine = vp.load(out)
    ref = nib.load(src)
    assert [(e.get_code(), e.get_content()) for e in mine.header.extensions] == \
        [(e.get_code(), e.get_content()) for e in ref.header.extensions]
    theirs = niizarr.zarr2nii(str(out))
    assert theirs.header.binaryblock == nib.load(src).header.binaryblock


def test_default_chunks_are_volumes_for_4d_and_slabs_for_3d(tmp_path):
    four = _saved(tmp_path, _image((20, 18, 12, 5), "int16"), "four.nii.gz")
    vp.save(vp.load(four), tmp_path / "four.nii.zarr")
    assert zarr.open_group(str(tmp_path / "four.nii.zarr"), mode="r")["0"].chunks == \
        (1, 12, 18, 20)
    assert vp.load(tmp_path / "four.nii.zarr").dataobj.chunks == (20, 18, 12, 1)
    three = _saved(tmp_path, _image((256, 256, 60), "float32"), "three.nii.gz")
    vp.save(vp.load(three), tmp_path / "three.nii.zarr")
    arr = zarr.open_group(str(tmp_path / "three.nii.zarr"), mode="r")["0"]
    assert arr.chunks == (16, 256, 256)  # 16 slices of 256 KiB: about 4 MiB
    assert vp.load(tmp_path / "three.nii.zarr").get_fdata().tobytes() == \
        nib.load(three).get_fdata().tobytes()


@pytest.mark.parametrize("codec", ["zstd", "blosc", "gzip", "none"])
def test_every_codec_round_trips(tmp_path, codec):
    src = _saved(tmp_path, _image((10, 9, 8, 3), "int16", slope=0.5, inter=0.0))
    out = tmp_path / f"{codec}.nii.zarr"
    vp.save(vp.load(src), out, codec=codec)
    assert vp.load(out).get_fdata().tobytes() == nib.load(src).get_fdata().tobytes()
    assert np.array_equal(np.asarray(zarr.open_group(str(out), mode="r")["0"]),
                          np.asanyarray(nib.load(src).dataobj.get_unscaled()).T)


def test_a_damaged_chunk_is_an_error_naming_the_chunk(tmp_path):
    src = _saved(tmp_path, _image((10, 9, 8, 3), "int16"))
    out = tmp_path / "bad.nii.zarr"
    vp.save(vp.load(src), out)
    chunk = out / "0" / "c" / "1" / "0" / "0" / "0"
    good = chunk.read_bytes()
    # Cut short, then with a byte flipped: each an error naming the chunk, never data.
    for damaged, error in [(good[:-3], TruncatedError), (good[:-1] + bytes([good[-1] ^ 0xFF]),
                                                         CorruptError)]:
        chunk.write_bytes(damaged)
        img = vp.load(out)  # (damaged after the open, it is a changed store: test_zarr_pinned)
        assert np.asarray(img.dataobj[..., 0]).tobytes() == \
            np.asarray(nib.load(src).dataobj[..., 0]).tobytes()  # the other chunks read
        with pytest.raises(error) as err:
            img.get_fdata()
        assert "c/1/0/0/0" in str(err.value)


def test_a_store_whose_header_disagrees_with_its_array_is_refused(tmp_path):
    src = _saved(tmp_path, _image((10, 9, 8, 3), "int16"))
    out = tmp_path / "mismatch.nii.zarr"
    vp.save(vp.load(src), out)
    other = _image((10, 9, 8, 4), "int16")
    group = zarr.open_group(str(out), mode="r+")
    group["nifti"][:] = np.frombuffer(other.header.binaryblock, np.uint8)
    with pytest.raises(FormatError) as err:
        vp.load(out)
    assert err.value.field == "dim" and "t axis" in str(err.value)
    shutil.rmtree(out / "nifti")
    with pytest.raises(FormatError) as err:
        vp.load(out)
    assert "'nifti'" in str(err.value)


def test_a_failed_write_leaves_nothing(tmp_path):
    src = _saved(tmp_path, _image((30, 30, 20, 4), "int16"))
    raw = src.read_bytes()
    src.write_bytes(raw[:len(raw) // 2])  # cut: the read of the data fails mid-way
    before = set(os.listdir(tmp_path))
    with pytest.raises(VoxpipeError):
        vp.save(vp.load(src), tmp_path / "cut.nii.zarr")
    assert set(os.listdir(tmp_path)) == before


def test_an_existing_store_is_replaced_only_when_complete(tmp_path):
    a = _saved(tmp_path, _image((6, 5, 4), "int16", seed=1), "a.nii.gz")
    b = _saved(tmp_path, _image((6, 5, 4), "int16", seed=2), "b.nii.gz")
    out = tmp_path / "x.nii.zarr"
    vp.save(vp.load(a), out)
    vp.save(vp.load(b), out)
    assert vp.load(out).get_fdata().tobytes() == nib.load(b).get_fdata().tobytes()
    assert sorted(os.listdir(tmp_path)) == ["a.nii.gz", "b.nii.gz", "x.nii.zarr"]
    plain = tmp_path / "notzarr.zarr"
    plain.mkdir()
    (plain / "keep.txt").write_text("user data")
    with pytest.raises(FileExistsError):
        vp.save(vp.load(a), plain)
    assert (plain / "keep.txt").read_text() == "user data"


def test_proxy_pickles_without_data_and_reads_the_same(tmp_path):
    src = _saved(tmp_path, _image((20, 20, 10, 6), "int16", slope=0.5, inter=1.0))
    out = tmp_path / "p.nii.zarr"
    vp.save(vp.load(src), out)
    img = vp.load(out)
    blob = pickle.dumps(img.dataobj)
    assert len(blob) < 1000
    again = pickle.loads(blob)
    assert np.asarray(again[..., 3]).tobytes() == np.asarray(img.dataobj[..., 3]).tobytes()
    from dask.base import tokenize
    assert tokenize(img.dataobj) == tokenize(vp.load(out).dataobj)


def test_a_store_opened_by_a_relative_name_pickles_that_store(tmp_path, monkeypatch):
    """A store opened as "sub/p.nii.zarr" pickles that store, wherever it is unpickled and
    whatever folder this process has moved to since it opened it (a store of the same relative
    name in the other folder is never read); the image's name stays as given."""
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    rel = os.path.join("sub", "p.nii.zarr")
    for folder, seed in ((here, 1), (elsewhere, 2)):
        (folder / "sub").mkdir(parents=True)
        src = _saved(folder, _image((12, 10, 8, 4), "int16", slope=0.5, inter=1.0, seed=seed))
        vp.save(vp.load(src), folder / rel)
    want = nib.load(here / "src.nii.gz")
    monkeypatch.chdir(here)
    img = vp.load(rel)
    assert img.get_filename() == rel
    from dask.base import tokenize
    token = tokenize(img.dataobj)
    pickled_here = pickle.dumps(img.dataobj)
    monkeypatch.chdir(elsewhere)
    assert tokenize(img.dataobj) == token
    for blob in (pickled_here, pickle.dumps(img.dataobj)):
        again = pickle.loads(blob)
        assert np.asarray(again[..., 3]).tobytes() == np.asarray(want.dataobj[..., 3]).tobytes()


def test_read_into_reuses_the_output(tmp_path):
    src = _saved(tmp_path, _image((12, 10, 8, 4), "int16", slope=0.5, inter=1.0))
    out = tmp_path / "r.nii.zarr"
    vp.save(vp.load(src), out)
    proxy = vp.load(out).dataobj
    buf = np.empty((12, 10, 8), np.float32, order="F")
    ref = nib.load(src).get_fdata(dtype=np.float32)
    for t in range(4):
        assert proxy.read((..., t), np.float32, out=buf) is buf
        assert np.array_equal(buf, ref[..., t])


def test_store_on_s3_reads_the_chunks_it_needs(tmp_path):
    pytest.importorskip("obstore")
    from s3_server import S3Server
    server = S3Server("zarr-bucket")
    try:
        src = _saved(tmp_path, _image((16, 14, 10, 5), "int16", slope=0.5, inter=1.0))
        out = tmp_path / "s3.nii.zarr"
        vp.save(vp.load(src), out)
        for root, _, files in os.walk(out):
            for f in files:
                key = os.path.relpath(os.path.join(root, f), tmp_path)
                server.client.upload_file(os.path.join(root, f), "zarr-bucket", key)
        img = vp.load("s3://zarr-bucket/s3.nii.zarr", storage_options=server.storage_options())
        ref = nib.load(src)
        assert img.header.binaryblock == ref.header.binaryblock
        assert np.asarray(img.dataobj[..., 2]).tobytes() == np.asarray(ref.dataobj[..., 2]).tobytes()
        assert img.get_fdata().tobytes() == ref.get_fdata().tobytes()
    finally:
        server.stop()


def _cli(*args, env=None):
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, VOXPIPE_PYTHON=sys.executable,
                                                **(env or {})))


@pytest.mark.skipif(not CLI.is_file(), reason=f"{CLI} not built/installed")
def test_cli_converts_both_ways_and_describes_stores(tmp_path):
    src = _saved(tmp_path, _image((16, 14, 10, 5), "int16", slope=0.5, inter=1.0))
    out = tmp_path / "cli.nii.zarr"
    r = _cli("convert", src, out, "--levels", "2", "--codec", "blosc", "--chunks", "16,14,5")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"wrote {out}\n"
    arr = zarr.open_group(str(out), mode="r")["0"]
    assert arr.chunks == (1, 5, 14, 16) and "1" in zarr.open_group(str(out), mode="r")
    # The report of the same image stored as a .nii (a store's voxels are read as a .nii's).
    plain = tmp_path / "src.nii"
    vp.save(vp.load(src), plain)
    info_zarr, info_nii = _cli("info", out), _cli("info", plain)
    assert info_zarr.returncode == 0, info_zarr.stderr
    # ... but for the name, how it is stored and how the data are compressed: a store of two
    # levels whose chunks are blosc's, not a single file with the data at an offset.
    nbytes = 16 * 14 * 10 * 5 * 2
    assert (info_zarr.stdout.replace(str(out), "X")
            == info_nii.stdout.replace(str(plain), "X")
            .replace("NIfTI-1, single file,", "NIfTI-1 in a NIfTI-Zarr store (Zarr v3, 2 levels),")
            .replace("compression none", "compression blosc zstd 5")
            .replace(f"{nbytes} bytes at offset 352", f"{nbytes} bytes in chunks of (16, 14, 5, 1)"))
    back = tmp_path / "back.nii.gz"
    r = _cli("convert", out, back)
    assert r.returncode == 0, r.stderr
    assert nib.load(back).get_fdata().tobytes() == nib.load(src).get_fdata().tobytes()
    assert nib.load(back).header.binaryblock[:300] == nib.load(src).header.binaryblock[:300]
    refused = _cli("convert", src, out)
    assert refused.returncode == 12, refused.stderr
    bad = _cli("convert", src, tmp_path / "y.nii.zarr", "--codec", "lzma")
    assert bad.returncode == 10 and "codec" in bad.stderr
    assert not (tmp_path / "y.nii.zarr").exists()


def _info(*args):
    """``voxpipe info ARGS`` as the program runs it when given a store: ``python -m voxpipe``."""
    return subprocess.run([sys.executable, "-m", "voxpipe", "info", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


# (codec, level, zarr_format, shards, what the store's metadata say)
INFO_STORES = [("blosc", None, 3, None, "blosc zstd 5"), ("zstd", 7, 3, None, "zstd 7"),
               ("gzip", 1, 3, None, "gzip 1"),
               ("zstd", None, 3, (12, 10, 8, 2), "zstd 3 (sharded)"),
               ("none", None, 3, None, "none"), ("blosc", 4, 2, None, "blosc zstd 4"),
               ("gzip", 2, 2, None, "gzip 2"), ("none", None, 2, None, "none")]


def test_info_reports_the_compression_the_store_metadata_name(tmp_path):
    """``voxpipe info`` of a store: its chunks' codec and level as its metadata name them (a
    store is read as a .nii, but is not stored as one), and "none" only for uncompressed
    chunks; in the JSON form too. Stores written by niizarr are described by their own
    metadata."""
    src = _saved(tmp_path, _image((12, 10, 8, 4), "int16", slope=0.5, inter=1.0))
    stores, want = [], []
    for i, (codec, level, fmt, shards, text) in enumerate(INFO_STORES):
        out = tmp_path / f"s{i}.nii.zarr"
        vp.save(vp.load(src), out, codec=codec, level=level, zarr_format=fmt, shards=shards)
        stores.append(out)
        want.append(text)
    theirs = tmp_path / "niizarr.nii.zarr"
    niizarr.nii2zarr(nib.load(src), str(theirs), nb_levels=1)
    (codec,) = zarr.open_group(str(theirs), mode="r")["0"].compressors
    assert type(codec).__name__ == "BloscCodec"
    stores.append(theirs)
    want.append(f"blosc {getattr(codec.cname, 'value', codec.cname)} {codec.clevel}")
    r = _info("--json", *stores)
    assert r.returncode == 0, r.stderr
    assert [json.loads(line)["compression"] for line in r.stdout.splitlines()] == want
    r = _info("--long", *stores)
    assert r.returncode == 0, r.stderr
    formats = [line for line in r.stdout.splitlines() if line.startswith("format:")]
    assert [re.sub(r"\(Zarr v[23], 1 level\)", "(Zarr vN, 1 level)", f) for f in formats] == [
        f"format:      NIfTI-1 in a NIfTI-Zarr store (Zarr vN, 1 level), little-endian (<), "
        f"compression {w}" for w in want]
    assert [f"(Zarr v{fmt}," in f for f, (_, _, fmt, _, _) in zip(formats, INFO_STORES)] == [
        True] * len(INFO_STORES)


def test_dicom_series_converts_to_a_store_with_load_dicoms_values(tmp_path):
    from test_cli_dcm2nii import write_series
    write_series(tmp_path / "series", slices=6, volumes=2)
    ref = vp.load_dicom(tmp_path / "series")
    out = tmp_path / "dicom.nii.zarr"
    vp.save(ref, out)
    img = vp.load(out)
    # The header a .nii of the series gets (its affine stored in float32), and the values.
    nii = tmp_path / "dicom.nii"
    vp.save(ref, nii)
    assert img.header.binaryblock == vp.load(nii).header.binaryblock
    assert np.array_equal(img.affine, vp.load(nii).affine)
    assert img.get_fdata().tobytes() == ref.get_fdata().tobytes()
    if CLI.is_file():
        cli_out = tmp_path / "cli.nii.zarr"
        r = _cli("convert", tmp_path / "series", cli_out)
        assert r.returncode == 0, r.stderr
        assert vp.load(cli_out).get_fdata().tobytes() == ref.get_fdata().tobytes()


def test_one_volume_of_a_store_over_http_costs_five_requests(tmp_path):
    """Opening reads the group's and the header array's metadata and the header (3 requests:
    zarr v3 first, no probing of v2 or consolidated files), the level's metadata (1); a volume
    is its one chunk (1), of exactly the chunk's bytes."""
    pytest.importorskip("obstore")
    from range_server import RangeServer
    src = _saved(tmp_path, _image((16, 14, 10, 6), "int16", slope=0.5, inter=1.0))
    out = tmp_path / "h.nii.zarr"
    vp.save(vp.load(src), out)
    objects = {}
    for root, _, names in os.walk(out):
        for f in names:
            key = "d/" + os.path.relpath(os.path.join(root, f), tmp_path).replace(os.sep, "/")
            objects[key] = Path(root, f).read_bytes()
    with RangeServer(objects) as server:
        img = vp.load(server.url("d/h.nii.zarr"), storage_options={"allow_http": True})
        vol = img.dataobj[..., 4]
        chunk = "d/h.nii.zarr/0/c/4/0/0/0"
        assert sorted(r.path for r in server.log()) == sorted([
            "d/h.nii.zarr/zarr.json", "d/h.nii.zarr/0/zarr.json",
            "d/h.nii.zarr/nifti/zarr.json", "d/h.nii.zarr/nifti/c/0", chunk])
        assert server.bytes_sent(chunk) == len(objects[chunk])
    assert np.asarray(vol).tobytes() == np.asarray(nib.load(src).dataobj[..., 4]).tobytes()


def test_a_written_store_has_the_permissions_of_a_new_folder(tmp_path):
    src = _saved(tmp_path, _image((6, 5, 4), "int16"))
    umask = os.umask(0o022)
    try:
        vp.save(vp.load(src), tmp_path / "perm.nii.zarr")
        (tmp_path / "plain").mkdir()
    finally:
        os.umask(umask)
    mode = (tmp_path / "perm.nii.zarr").stat().st_mode & 0o777
    assert mode == (tmp_path / "plain").stat().st_mode & 0o777 == 0o755
