"""NIfTI-Zarr stores under attack and accident: special files inside a store, header arrays and
vox_offsets that would size huge allocations, flipped bits in chunks, writers killed or racing,
stores replaced under a reader, and damaged metadata. Every outcome is a voxpipe error naming
the store (or the values the store holds), at once: no hang, no huge allocation, no debris."""
from __future__ import annotations

import io
import json
import os
import pickle
import random
import shutil
import signal
import struct
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from voxpipe._formats.zarr import write as _zarr_write
from voxpipe.errors import CorruptError, FormatError, LimitError, VoxpipeError, VoxpipeIOError

zarr = pytest.importorskip("zarr")

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / ".venv" / "bin" / "python"
CLI = Path(os.environ.get("VOXPIPE_CLI") or REPO / ".venv" / "bin" / "voxpipe")


def _image(shape=(6, 5, 4, 3), dtype=np.int16, seed=0):
    rng = np.random.default_rng(seed)
    data = rng.integers(-30000, 30000, size=shape).astype(dtype)
    img = nib.Nifti1Image(data, np.diag([2.0, 2.0, 2.5, 1.0]))
    img.header.set_slope_inter(0.5, 10.0)
    return img


def _store(tmp_path, name="s.nii.zarr", **kwargs):
    img = _image(**{k: kwargs.pop(k) for k in ("shape", "seed") if k in kwargs})
    path = tmp_path / name
    vp.save(img, path, **kwargs)
    return path, img


def _run(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``code`` in a child Python: a hang fails the test (TimeoutExpired), not the suite."""
    return subprocess.run([str(PYTHON), "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout)


# -- special files inside a store --------------------------------------------------------------
_READ_EACH = r"""
import sys, voxpipe as vp
from voxpipe.errors import VoxpipeIOError
try:
    img = vp.load(sys.argv[1])
    img.dataobj[..., 0]
    img.get_fdata()
except VoxpipeIOError as e:
    print("io", e.path, "|", e)
except Exception as e:
    print("other", type(e).__name__, e)
else:
    print("read")
"""


def _zarr_decoded_store(tmp_path):
    """A store whose chunks zarr decodes (a crc32c codec, which the core leaves to zarr)."""
    path, img = _store(tmp_path, "z.nii.zarr")
    meta_path = path / "0" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    data = np.asarray(zarr.open_array(zarr.storage.LocalStore(path / "0"), mode="r")[...])
    shutil.rmtree(path / "0")
    arr = zarr.create_array(zarr.storage.LocalStore(path / "0"), shape=data.shape,
                            chunks=meta["chunk_grid"]["configuration"]["chunk_shape"],
                            dtype=data.dtype, compressors=None,
                            serializer=zarr.codecs.BytesCodec(), filters=None,
                            fill_value=0, dimension_names=meta["dimension_names"])
    arr_meta = json.loads(meta_path.read_text())
    arr_meta["codecs"].append({"name": "crc32c"})
    meta_path.write_text(json.dumps(arr_meta))
    zarr.open_array(zarr.storage.LocalStore(path / "0"), mode="r+")[...] = data
    assert vp.load(path).dataobj._store.spec is None  # decoded by zarr's pipeline
    np.testing.assert_array_equal(vp.load(path).get_fdata(), img.get_fdata())
    return path


@pytest.mark.parametrize("member", ["zarr.json", "0/zarr.json", "nifti/zarr.json", "nifti/c/0",
                                    "0/c/1/0/0/0", "zarr-decoded chunk"])
def test_a_fifo_inside_a_store_is_an_io_error_at_once(tmp_path, member):
    if member == "zarr-decoded chunk":
        path = _zarr_decoded_store(tmp_path)
        member = "0/c/1/0/0/0"
    else:
        path, _ = _store(tmp_path)
    target = path / member
    assert target.is_file()
    target.unlink()
    os.mkfifo(target)
    out = _run(_READ_EACH, str(path), timeout=60).stdout
    assert out.startswith("io "), out
    assert "FIFO" in out and member.split("/")[-1] in out


def test_cli_info_of_a_store_with_a_fifo_exits_4_at_once(tmp_path):
    path, _ = _store(tmp_path)
    (path / "nifti" / "zarr.json").unlink()
    os.mkfifo(path / "nifti" / "zarr.json")
    r = subprocess.run([str(CLI), "info", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 4, r.stderr
    assert "FIFO" in r.stderr


def test_symlinks_inside_a_store_are_followed(tmp_path):
    path, img = _store(tmp_path)
    annex = tmp_path / "annex"
    annex.mkdir()
    for member in ("nifti/c/0", "0/c/1/0/0/0", "0/zarr.json"):
        real = annex / member.replace("/", "_")
        shutil.move(path / member, real)
        os.symlink(real, path / member)
    np.testing.assert_array_equal(vp.load(path).get_fdata(), img.get_fdata())


# -- memory bombs ------------------------------------------------------------------------------
def _claim_header_size(path, size):
    meta_path = path / "nifti" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["shape"] = [size]
    meta["chunk_grid"]["configuration"]["chunk_shape"] = [size]
    meta_path.write_text(json.dumps(meta))


def test_a_header_array_claiming_2gib_is_a_limit_error_before_it_is_read(tmp_path):
    path, _ = _store(tmp_path)
    _claim_header_size(path, 1 << 31)
    tracemalloc.start()
    try:
        with pytest.raises(LimitError) as info:
            vp.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.field == "nifti" and str(path) in str(info.value)
    assert peak < 32 << 20
    r = subprocess.run([str(CLI), "info", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 9, r.stderr  # limit


def test_a_header_array_in_a_million_chunks_is_refused(tmp_path):
    path, _ = _store(tmp_path)
    meta_path = path / "nifti" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["shape"] = [1 << 20]
    meta["chunk_grid"]["configuration"]["chunk_shape"] = [1]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(LimitError):
        vp.load(path)


def test_a_huge_metadata_document_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from voxpipe._formats.zarr import local as _zarr_local

    path, _ = _store(tmp_path)
    monkeypatch.setattr(_zarr_local, "MAX_METADATA_BYTES", 100)  # zarr.json has ~1 KB
    with pytest.raises(LimitError) as info:
        vp.load(path)
    assert info.value.field == "zarr.json"


def test_a_stored_vox_offset_of_2e9_sizes_nothing(tmp_path):
    path, img = _store(tmp_path)
    chunk = path / "nifti" / "c" / "0"
    block = bytearray(chunk.read_bytes())
    block[108:112] = struct.pack("<f", 2e9)
    chunk.write_bytes(bytes(block))
    tracemalloc.start()
    try:
        loaded = vp.load(path)
        data = loaded.get_fdata()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(data, img.get_fdata())
    assert loaded.header["vox_offset"] == np.float32(2e9)  # the header as stored
    assert peak < 64 << 20


# -- checksums -----------------------------------------------------------------------------
def _flip_a_bit_in_the_middle(chunk: Path):
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    chunk.write_bytes(bytes(raw))


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_zstd_chunks_carry_their_checksum_and_a_flipped_bit_is_corrupt(tmp_path, zarr_format):
    # Random int16 do not compress: zstd stores them as raw blocks, where a flipped bit is a
    # wrong voxel unless the frame's checksum catches it.
    path, img = _store(tmp_path, zarr_format=zarr_format)
    meta = json.loads((path / "0" / ("zarr.json" if zarr_format == 3 else ".zarray")).read_text())
    config = (meta["codecs"][1]["configuration"] if zarr_format == 3 else meta["compressor"])
    assert config["checksum"] is True
    # zarr, numcodecs and niizarr read it.
    niizarr = pytest.importorskip("niizarr")
    unscaled = vp.load(path).dataobj.get_unscaled()
    np.testing.assert_array_equal(np.asarray(niizarr.zarr2nii(str(path)).dataobj), unscaled)
    np.testing.assert_array_equal(np.moveaxis(zarr.open_group(str(path), mode="r")["0"][...],
                                              [0, 1, 2, 3], [3, 2, 1, 0]), unscaled)
    key = "0/c/1/0/0/0" if zarr_format == 3 else "0/1.0.0.0"
    _flip_a_bit_in_the_middle(path / key)
    loaded = vp.load(path)
    np.testing.assert_array_equal(loaded.dataobj[..., 0], img.dataobj[..., 0])  # intact chunk
    with pytest.raises(CorruptError) as info:
        loaded.dataobj[..., 1]
    assert "checksum" in str(info.value)
    with pytest.raises(Exception):  # zarr refuses it too
        zarr.open_group(str(path), mode="r")["0"][1]


# -- writers killed or racing --------------------------------------------------------------
_KILLED_WRITER = r"""
import os, sys, numpy as np, nibabel as nib, voxpipe as vp
from voxpipe._formats.zarr import write as _zarr_write
def killed(tmp, path):
    os.kill(os.getpid(), 9)
_zarr_write._replace = killed
vp.save(nib.Nifti1Image(np.ones((4, 4, 4), np.int16), np.eye(4)), sys.argv[1])
"""


def test_a_writer_killed_leaves_a_temporary_the_next_write_removes(tmp_path):
    out = tmp_path / "o.nii.zarr"
    r = _run(_KILLED_WRITER, str(out))
    assert r.returncode == -signal.SIGKILL
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".o.nii.zarr.tmp-"), left
    # A live writer's temporary (this process's parent) and a locked one stay.
    live = tmp_path / f".o.nii.zarr.tmp-{os.getppid()}-0123456789ab"
    live.mkdir()
    dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True).stdout.strip()
    locked = tmp_path / f".o.nii.zarr.tmp-{dead_pid}-ba9876543210"
    locked.mkdir()
    import fcntl
    fd = os.open(locked, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        img = _image()
        vp.save(img, out)
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["o.nii.zarr", live.name, locked.name])
    np.testing.assert_array_equal(vp.load(out).get_fdata(), img.get_fdata())


def test_racing_replacements_end_with_one_complete_store_and_no_debris(tmp_path):
    out = str(tmp_path / "o.nii.zarr")
    for rnd in range(150):
        tmps = []
        for w in range(2):
            t = str(tmp_path / f".o.nii.zarr.tmp-{os.getpid()}-{rnd:06d}{w:06d}")
            os.mkdir(t)
            Path(t, "zarr.json").write_text(str(w))
            Path(t, "w").write_text(str(w))
            tmps.append(t)
        errors = []
        barrier = threading.Barrier(2)

        def go(t):
            barrier.wait()
            try:
                _zarr_write._replace(t, out)
            except Exception as exc:  # one may fail, clearly; none leaves debris
                errors.append(exc)

        threads = [threading.Thread(target=go, args=(t,)) for t in tmps]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors
        assert os.listdir(tmp_path) == ["o.nii.zarr"], (rnd, os.listdir(tmp_path))
        assert sorted(os.listdir(out)) == ["w", "zarr.json"]
        assert Path(out, "w").read_text() == Path(out, "zarr.json").read_text()


def test_two_processes_writing_one_store_end_with_it_complete(tmp_path):
    out = tmp_path / "o.nii.zarr"
    code = ("import sys, numpy as np, nibabel as nib, voxpipe as vp\n"
            "for i in range(8):\n"
            "    vp.save(nib.Nifti1Image(np.full((8, 8, 8, 2), int(sys.argv[2]), np.int16),"
            " np.eye(4)), sys.argv[1])\n")
    procs = [subprocess.Popen([str(PYTHON), "-c", code, str(out), str(v)]) for v in (1, 2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert os.listdir(tmp_path) == ["o.nii.zarr"]
    data = vp.load(out).get_fdata()
    assert data.shape == (8, 8, 8, 2) and len(np.unique(data)) == 1


# -- a store replaced under a reader -------------------------------------------------------
def test_a_store_replaced_under_a_lazy_image_is_an_error_naming_it(tmp_path):
    path, img = _store(tmp_path)
    lazy = vp.load(path)
    np.testing.assert_array_equal(lazy.dataobj[..., 0], img.dataobj[..., 0])
    other = _image(seed=1)
    other.header.set_slope_inter(3.0, -1.0)
    vp.save(other, path)  # a new folder renamed over it
    with pytest.raises(VoxpipeIOError) as info:
        lazy.dataobj[..., 1]
    assert info.value.path == str(path) and "changed" in str(info.value)


def test_a_header_rewritten_in_place_is_an_error(tmp_path):
    path, _ = _store(tmp_path)
    lazy = vp.load(path)
    group = zarr.open_group(str(path), mode="r+")
    block = np.asarray(group["nifti"][...]).copy()
    block[112:116] = np.frombuffer(struct.pack("<f", 7.0), np.uint8)  # scl_slope
    group["nifti"][...] = block
    with pytest.raises(VoxpipeIOError):
        lazy.get_fdata()


def test_a_pickled_proxy_of_a_replaced_store_refuses_to_read(tmp_path):
    path, img = _store(tmp_path)
    blob = pickle.dumps(vp.load(path).dataobj)
    np.testing.assert_array_equal(np.asarray(pickle.loads(blob)),
                                  np.asanyarray(img.dataobj))
    vp.save(_image(seed=2), path)
    with pytest.raises(VoxpipeIOError):
        pickle.loads(blob)


def test_a_dask_graph_over_a_replaced_store_errors(tmp_path):
    pytest.importorskip("dask")
    path, img = _store(tmp_path)
    arr = vp.to_dask(vp.load(path))
    np.testing.assert_allclose(arr[..., 0].compute(), img.get_fdata()[..., 0])
    vp.save(_image(seed=3), path)
    with pytest.raises(VoxpipeIOError):
        arr.compute(scheduler="processes")
    with pytest.raises(VoxpipeIOError):
        arr.compute(scheduler="sync")


# -- damaged metadata: a voxpipe error or the store's values -------------------------------
_VALUES = [None, -1, 0, 1, 2 ** 31, 2 ** 63, 2 ** 70, -2 ** 70, 1.5, float("nan"), "", "x",
           [], {}, [1], True, "0", "nifti", "F", "big"]
_MEMBERS = ["zarr.json", "0/zarr.json", "nifti/zarr.json", "nifti/c/0"]


def _paths(doc, prefix=()):
    yield prefix
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) \
        else ()
    for k, v in items:
        yield from _paths(v, prefix + (k,))


def _mutated(rng: random.Random, member: str, raw: bytes) -> bytes:
    """``raw`` with one random change: a byte flipped or the text cut (any member), or, in a
    JSON document, one value replaced by another type or size, removed, or nested deeply."""
    if member == "nifti/c/0" or rng.random() < 0.2:
        b = bytearray(raw)
        i = rng.randrange(len(b))
        if rng.random() < 0.3:
            return bytes(b[:i])
        b[i] ^= 1 << rng.randrange(8)
        return bytes(b)
    doc = json.loads(raw)
    path = rng.choice(list(_paths(doc))[1:])
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    r = rng.random()
    if r < 0.7:
        parent[path[-1]] = rng.choice(_VALUES)
    elif r < 0.85:
        del parent[path[-1]]
    else:
        return json.dumps(doc).replace(json.dumps(parent[path[-1]]),
                                       "[" * 100000 + "1" + "]" * 100000, 1).encode()
    return json.dumps(doc).encode()


def _expected_scaling(block: bytes):
    """(slope, inter) nibabel reads from a header block, or None where it refuses it."""
    try:
        hdr = nib.Nifti1Header.from_fileobj(io.BytesIO(block + b"\0" * 4), check=False)
        slope, inter = hdr.get_slope_inter()
        return (1.0 if slope is None else slope, 0.0 if inter is None else inter)
    except Exception:
        return None


def test_damaged_store_metadata_and_header_are_voxpipe_errors_or_the_stored_values(tmp_path):
    src, img = _store(tmp_path, shape=(4, 5, 6, 3))
    stored = vp.load(src).dataobj.get_unscaled().astype(np.float64)
    want = vp.load(src).get_fdata()
    rng = random.Random(31)
    copy = tmp_path / "m.nii.zarr"

    def timeout(signum, frame):
        raise TimeoutError("a case ran past its time bound")

    old = signal.signal(signal.SIGALRM, timeout)
    try:
        for case in range(120):
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(src, copy)
            member = rng.choice(_MEMBERS)
            target = copy / member
            target.write_bytes(_mutated(rng, member, target.read_bytes()))
            signal.alarm(10)
            try:
                data = vp.load(copy).get_fdata()
            except VoxpipeError as exc:
                assert exc.path, (case, member, exc)
                continue
            finally:
                signal.alarm(0)
            if member != "nifti/c/0":
                # Metadata that still describe the array read as zarr reads them: here the
                # changes that survive (names, attributes, fill values) leave the values.
                assert data.shape == want.shape, (case, member)
                np.testing.assert_array_equal(data, want, err_msg=f"{case} {member}")
            else:
                scaling = _expected_scaling(target.read_bytes())
                assert scaling is not None, (case, "voxpipe read a header nibabel refuses")
                slope, inter = scaling
                if slope == 0 or not np.isfinite(slope):
                    slope, inter = 1.0, 0.0  # nibabel's rule for unusable factors
                if data.shape == stored.shape:
                    np.testing.assert_allclose(data, stored * slope + inter, rtol=1e-6,
                                               err_msg=f"{case}")
    finally:
        signal.signal(signal.SIGALRM, old)


def _deeply_nested(doc):
    doc["attributes"]["deep"] = "NESTED"
    return json.dumps(doc).replace('"NESTED"', "[" * 100000 + "]" * 100000)


# (member, damage, exit code, words of the message): format errors exit 5, limits 9
# (docs/exit_codes.md); never 4, which is for the operating system's refusals.
_CLI_CASES = [
    ("0/zarr.json", lambda d: "{" * 5, 5, "zarr.json"),
    ("zarr.json", _deeply_nested, 5, "RecursionError"),
    ("0/zarr.json", lambda d: dict(d, dimension_names=5), 5, "zarr.json"),
    ("0/zarr.json", lambda d: dict(d, fill_value="big"), 5, "zarr.json"),
    ("0/zarr.json", lambda d: dict(d, shape=[2 ** 70] + d["shape"][1:]), 5, "shape"),
    ("0/zarr.json", lambda d: dict(d, chunk_grid={"name": "regular", "configuration": {
        "chunk_shape": [1, 2 ** 70, 1, 1]}}), 5, "chunk"),
    ("nifti/zarr.json", lambda d: dict(d, shape=[2 ** 64]), 9, "nifti"),
    ("nifti/zarr.json", lambda d: dict(d, data_type="float64"), 5, "nifti"),
]


@pytest.mark.parametrize("member,damage,code,words", _CLI_CASES)
def test_cli_exit_codes_of_damaged_store_metadata_follow_exit_codes_md(tmp_path, member, damage,
                                                                        code, words):
    path, _ = _store(tmp_path)
    target = path / member
    doc = damage(json.loads(target.read_text()))
    target.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    r = subprocess.run([str(CLI), "info", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == code, r.stderr
    assert str(path) in r.stderr and words in r.stderr, r.stderr
    r = subprocess.run([str(CLI), "convert", str(path), str(tmp_path / "o.nii")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == code, r.stderr
    assert not (tmp_path / "o.nii").exists()
    assert sorted(os.listdir(tmp_path)) == ["s.nii.zarr"]


@pytest.mark.parametrize("version", [1, 2])
def test_a_header_block_is_read_in_the_byte_order_its_dim0_says(tmp_path, version):
    # A big-endian header whose sizeof_hdr alone is little-endian: the core (as nibabel) takes
    # the byte order from dim[0], so the virtual .nii's vox_offset must be written in that
    # order; written in sizeof_hdr's, the core read it swapped and put the data elsewhere.
    # Found by fuzz_zarr_meta.
    klass = nib.Nifti1Image if version == 1 else nib.Nifti2Image
    data = np.arange(60, dtype=">i2").reshape(3, 4, 5)
    img = klass(data, np.diag([2.0, 3.0, 4.0, 1.0]),
                klass.header_class(endianness=">"))
    img.header.set_slope_inter(2.0, 1.0)
    path = tmp_path / "be.nii.zarr"
    vp.save(img, path)
    want = vp.load(path)
    assert want.header.endianness == ">"
    np.testing.assert_array_equal(want.get_fdata(), img.get_fdata())
    chunk = path / "nifti" / "c" / "0"
    block = bytearray(chunk.read_bytes())
    assert block[:4] == struct.pack(">i", 348 if version == 1 else 540)
    block[:4] = struct.pack("<i", 348 if version == 1 else 540)
    chunk.write_bytes(bytes(block))
    got = vp.load(path)
    assert got.header.endianness == ">"
    np.testing.assert_array_equal(got.get_fdata(), want.get_fdata())
    np.testing.assert_array_equal(got.affine, want.affine)

