"""NIfTI-Zarr stores pinned to the version opened: on an S3 server (moto) and in a local folder,
a store whose chunks or metadata are rewritten, removed or added after the open (before a read,
during one, or before a Dask graph built on it computes) is VoxpipeIOError naming the store and
the object, never voxels of two versions; an unchanged store reads as zarr reads it; Dask names
tell the versions apart. (Local .nii and .nii.gz files: test_file_identity.py.)"""
from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from voxpipe.errors import VoxpipeIOError

zarr = pytest.importorskip("zarr")
pytest.importorskip("obstore")

BUCKET = "voxpipe-pinned"
SHAPE = (8, 7, 6, 5)
CHANGED = "changed since it was opened"


def _data(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-3000, 3000, SHAPE).astype(np.int16)


def _image(seed: int) -> nib.Nifti1Image:
    """Seeds give other values, and another header (voxel sizes, so the metadata too)."""
    return nib.Nifti1Image(_data(seed), np.diag([2.0 + seed, 2.0, 2.5, 1.0]))


def _chunk(t: int) -> str:
    """The key of volume t's chunk (one volume per chunk, voxpipe's default for 4D)."""
    return f"0/c/{t}/0/0/0"


@pytest.fixture(scope="module")
def s3():
    from s3_server import S3Server
    server = S3Server(BUCKET)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    """Two local stores of one shape and dtype, of other values."""
    root = tmp_path_factory.mktemp("versions")
    out = []
    for seed in (0, 1):
        path = root / f"v{seed}.nii.zarr"
        vp.save(_image(seed), path)
        out.append(path)
    return out


def _upload(s3, local: Path, name: str) -> str:
    """The store ``local`` put in the bucket under ``name``; its URL."""
    for folder, _, files in os.walk(local):
        for f in files:
            key = os.path.relpath(os.path.join(folder, f), local).replace(os.sep, "/")
            s3.client.upload_file(os.path.join(folder, f), BUCKET, f"{name}/{key}")
    return f"s3://{BUCKET}/{name}"


def _put(s3, url: str, key: str, source: Path, extra: bytes = b"") -> None:
    """The object ``key`` of the store at ``url`` rewritten with the file ``key`` of ``source``
    (and ``extra`` after it)."""
    s3.client.put_object(Bucket=BUCKET, Key=f"{url.split('/', 3)[3]}/{key}",
                         Body=(source / key).read_bytes() + extra)


def _zarr_read(s3, name: str) -> np.ndarray:
    """The stored values as zarr reads them over obstore, in NIfTI's axis order."""
    from obstore.store import S3Store
    store = S3Store(BUCKET, prefix=name, endpoint=s3.endpoint, access_key_id="testing",
                    secret_access_key="testing", region="us-east-1",
                    client_options={"allow_http": True})
    group = zarr.open_group(store=zarr.storage.ObjectStore(store, read_only=True), mode="r")
    return np.asarray(group["0"][...]).transpose()  # [t, z, y, x] -> (x, y, z, t)


# -- on an S3 server -----------------------------------------------------------------------------
def test_an_unchanged_store_reads_as_zarr_reads_it(s3, versions):
    url = _upload(s3, versions[0], "same.nii.zarr")
    img = vp.load(url, storage_options=s3.storage_options())
    want = _zarr_read(s3, "same.nii.zarr")
    assert np.asarray(img.dataobj.get_unscaled()).tobytes() == \
        np.asfortranarray(want).tobytes()
    np.testing.assert_array_equal(want, _data(0))
    assert img.get_fdata(dtype=np.float32).tobytes() == want.astype(np.float32).tobytes()
    assert img.dataobj[..., 3].tobytes() == want[..., 3].tobytes()


@pytest.mark.parametrize("changed", [_chunk(2), "0/zarr.json", "nifti/c/0", "zarr.json"])
def test_an_object_rewritten_after_the_open_is_an_error_naming_it(s3, versions, changed):
    name = f"rewritten-{changed.replace('/', '-')}.nii.zarr"
    url = _upload(s3, versions[0], name)
    img = vp.load(url, storage_options=s3.storage_options())
    first = img.dataobj[..., 2]
    # (the array's metadata of both versions are alike: a space after the JSON is another)
    _put(s3, url, changed, versions[1], b" " if changed == "0/zarr.json" else b"")
    if changed == _chunk(2):
        with pytest.raises(VoxpipeIOError, match=CHANGED) as info:
            img.dataobj[..., 2]
        assert f"{url}/{changed}" in str(info.value)
        with pytest.raises(VoxpipeIOError, match=CHANGED):
            img.get_fdata()
        np.testing.assert_array_equal(img.dataobj[..., 1], _data(0)[..., 1])  # unchanged
    # A pickle made before the change: reopened, it finds another store.
    blob = pickle.dumps(img)
    with pytest.raises(VoxpipeIOError, match=CHANGED):
        pickle.loads(blob).get_fdata()
    # A new open reads the new version: here its chunk 2 (or metadata) with the old rest.
    assert np.asarray(first).shape == SHAPE[:3]
    if changed == _chunk(2):
        new = vp.load(url, storage_options=s3.storage_options())
        np.testing.assert_array_equal(new.dataobj.get_unscaled()[..., 2],
                                      _data(1)[..., 2])


def test_a_chunk_rewritten_with_as_many_bytes_is_refused_by_its_etag(s3, versions):
    """Its size as listed, its bytes not: the If-Match of its GET fails (a 412), before any of
    its bytes are decoded."""
    url = _upload(s3, versions[0], "same-size.nii.zarr")
    img = vp.load(url, storage_options=s3.storage_options())
    raw = bytearray((versions[0] / _chunk(2)).read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    s3.client.put_object(Bucket=BUCKET, Key=f"same-size.nii.zarr/{_chunk(2)}", Body=bytes(raw))
    with pytest.raises(VoxpipeIOError, match=CHANGED) as info:
        img.dataobj[..., 2]
    assert info.value.path == f"{url}/{_chunk(2)}"


def test_a_chunk_absent_at_the_open_that_appears_is_an_error(s3, versions):
    url = _upload(s3, versions[0], "appears.nii.zarr")
    key = f"appears.nii.zarr/{_chunk(3)}"
    s3.client.delete_object(Bucket=BUCKET, Key=key)
    img = vp.load(url, storage_options=s3.storage_options())
    np.testing.assert_array_equal(img.dataobj.get_unscaled()[..., 3], 0)  # the fill value
    _put(s3, url, _chunk(3), versions[0])
    with pytest.raises(VoxpipeIOError, match=CHANGED) as info:
        img.dataobj[..., 3]
    assert info.value.path == f"{url}/{_chunk(3)}"
    assert f"{url}: the store changed since it was opened: {_chunk(3)} was added" in \
        str(info.value)


def test_a_chunk_removed_after_the_open_is_an_error(s3, versions):
    url = _upload(s3, versions[0], "removed.nii.zarr")
    img = vp.load(url, storage_options=s3.storage_options())
    s3.client.delete_object(Bucket=BUCKET, Key=f"removed.nii.zarr/{_chunk(1)}")
    with pytest.raises(VoxpipeIOError, match=CHANGED) as info:
        img.dataobj[..., 1]
    assert f"{url}: the store changed since it was opened: {_chunk(1)} was removed" in \
        str(info.value)


def test_a_dask_graph_over_a_store_rewritten_while_it_computes_raises(s3, versions):
    pytest.importorskip("dask")
    from dask.base import tokenize
    from dask.callbacks import Callback

    url = _upload(s3, versions[0], "dask.nii.zarr")
    opts = s3.storage_options()
    arr = vp.to_dask(url, np.float32, chunks=1, storage_options=opts)
    # Deterministic: the same version gives the same name and token.
    assert vp.to_dask(url, np.float32, chunks=1, storage_options=opts).name == arr.name
    token = tokenize(vp.load(url, storage_options=opts).dataobj)
    np.testing.assert_array_equal(arr[..., :2].compute(scheduler="sync"),
                                  _data(0)[..., :2])
    done = []

    def rewrite_once(key, result, dsk, state, worker_id):
        if isinstance(result, np.ndarray) and not done:
            done.append(key)
            for t in range(SHAPE[3]):
                _put(s3, url, _chunk(t), versions[1])

    with Callback(posttask=rewrite_once), pytest.raises(VoxpipeIOError, match=CHANGED):
        arr.compute(scheduler="sync")
    assert done
    shipped = pickle.loads(pickle.dumps(arr))  # the graph sent elsewhere, reopened there
    with pytest.raises(VoxpipeIOError, match=CHANGED):
        shipped.compute(scheduler="sync")
    # Another version: another name and token.
    assert vp.to_dask(url, np.float32, chunks=1, storage_options=opts).name != arr.name
    assert tokenize(vp.load(url, storage_options=opts).dataobj) != token


# -- in a local folder ---------------------------------------------------------------------------
def _local(tmp_path: Path, source: Path, name: str = "s.nii.zarr") -> Path:
    path = tmp_path / name
    shutil.copytree(source, path)
    return path


def _rewrite(path: Path, key: str, source: Path, how: str) -> None:
    """The file ``key`` of the store ``path`` rewritten as ``source``'s: in place (same inode)
    or as zarr writes it (a new file renamed over it); its mtime a second later."""
    target = path / key
    before = target.stat().st_mtime_ns if target.exists() else 0
    if how == "in_place":
        with open(target, "r+b") as f:
            f.write((source / key).read_bytes())
            f.truncate()
    else:
        tmp = path / "new-file"
        shutil.copyfile(source / key, tmp)
        os.replace(tmp, target)
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, max(st.st_mtime_ns, before + 10**9)))


@pytest.mark.parametrize("how", ["in_place", "rename"])
def test_a_local_chunk_rewritten_after_the_open_is_an_error_naming_it(tmp_path, versions, how):
    path = _local(tmp_path, versions[0])
    img = vp.load(path)
    np.testing.assert_array_equal(img.dataobj[..., 2], _data(0)[..., 2])
    _rewrite(path, _chunk(2), versions[1], how)
    with pytest.raises(VoxpipeIOError, match=CHANGED) as info:
        img.dataobj[..., 2]
    assert info.value.path == str(path) and _chunk(2) in str(info.value)
    with pytest.raises(VoxpipeIOError, match=CHANGED):
        img.get_fdata()
    np.testing.assert_array_equal(img.dataobj[..., 1], _data(0)[..., 1])
    np.testing.assert_array_equal(vp.load(path).dataobj.get_unscaled()[..., 2],
                                  _data(1)[..., 2])


def test_a_local_chunk_added_or_removed_after_the_open_is_an_error(tmp_path, versions):
    path = _local(tmp_path, versions[0])
    (path / _chunk(3)).unlink()
    img = vp.load(path)
    np.testing.assert_array_equal(img.dataobj.get_unscaled()[..., 3], 0)  # the fill value
    shutil.copyfile(versions[0] / _chunk(3), path / _chunk(3))
    with pytest.raises(VoxpipeIOError, match="3/0/0/0 was added"):
        img.dataobj[..., 3]
    img = vp.load(path)
    (path / _chunk(0)).unlink()
    with pytest.raises(VoxpipeIOError, match="0/0/0/0 was removed"):
        img.dataobj[..., 0]


def test_a_local_sharded_store_is_pinned_too(tmp_path):
    """Shards are read through zarr's store (local.py's checked LocalStore), not by path."""
    a, b = tmp_path / "a.nii.zarr", tmp_path / "b.nii.zarr"
    vp.save(_image(0), a, chunks=(8, 7, 3, 1), shards=(8, 7, 6, 1))
    vp.save(_image(1), b, chunks=(8, 7, 3, 1), shards=(8, 7, 6, 1))
    img = vp.load(a)
    np.testing.assert_array_equal(img.dataobj[..., 4], _data(0)[..., 4])
    _rewrite(a, _chunk(4), b, "rename")
    with pytest.raises(VoxpipeIOError, match=CHANGED) as info:
        img.dataobj[..., 4]
    assert _chunk(4) in str(info.value)


def test_a_dask_graph_over_a_local_store_rewritten_after_it_was_built_raises(tmp_path, versions):
    pytest.importorskip("dask")
    from dask.base import tokenize

    path = _local(tmp_path, versions[0])
    arr = vp.to_dask(path, np.float32, chunks=1)
    token = tokenize(vp.load(path).dataobj)
    assert vp.to_dask(path, np.float32, chunks=1).name == arr.name
    shipped = pickle.dumps(arr)
    _rewrite(path, _chunk(4), versions[1], "rename")  # the metadata and header stay
    for graph in (arr, pickle.loads(shipped)):
        with pytest.raises(VoxpipeIOError, match=CHANGED):
            graph.compute(scheduler="sync")
    new = vp.to_dask(path, np.float32, chunks=1)
    assert new.name != arr.name and tokenize(vp.load(path).dataobj) != token
    np.testing.assert_array_equal(new[..., 4].compute(scheduler="sync"),
                                  _data(1)[..., 4])


# -- over http(s): no listing; pinned as first read ----------------------------------------------
def test_a_store_over_http_is_pinned_as_first_read_and_to_the_open_time(versions):
    from range_server import RangeServer
    objects = {}
    for folder, _, files in os.walk(versions[0]):
        for f in files:
            key = os.path.relpath(os.path.join(folder, f), versions[0]).replace(os.sep, "/")
            objects[f"d/h.nii.zarr/{key}"] = Path(folder, f).read_bytes()
    with RangeServer(objects) as server:
        url = server.url("d/h.nii.zarr")
        img = vp.load(url, storage_options={"allow_http": True})
        np.testing.assert_array_equal(img.dataobj[..., 0], _data(0)[..., 0])
        other = (versions[1] / _chunk(0)).read_bytes()
        # Read before: pinned to its ETag (If-Match).
        server.put(f"d/h.nii.zarr/{_chunk(0)}", other)
        with pytest.raises(VoxpipeIOError, match=CHANGED) as info:
            img.dataobj[..., 0]
        assert f"{url}/{_chunk(0)}" in str(info.value)
        # Not read before: its Last-Modified, a second or more after the open (whole seconds:
        # replaced twice, it moves on by two), says it changed since.
        for _ in range(2):
            server.put(f"d/h.nii.zarr/{_chunk(3)}", (versions[1] / _chunk(3)).read_bytes())
        with pytest.raises(VoxpipeIOError, match=CHANGED) as info:
            img.dataobj[..., 3]
        assert info.value.path == f"{url}/{_chunk(3)}" and url in str(info.value)
        assert f"{_chunk(3)} was modified at" in str(info.value)
        assert "after the open" in str(info.value)
        np.testing.assert_array_equal(img.dataobj[..., 1], _data(0)[..., 1])  # unchanged


def test_the_listing_of_a_local_store_follows_links_once_and_is_bounded(tmp_path, versions,
                                                                      monkeypatch):
    from voxpipe._formats.zarr import local as _local_store
    from voxpipe.errors import LimitError

    path = _local(tmp_path, versions[0])
    os.symlink(path, path / "0" / "loop")  # a link back up: walked once, not for ever
    np.testing.assert_array_equal(vp.load(path).get_fdata(), _data(0))
    files = sum(len(f) for _, _, f in os.walk(path))
    monkeypatch.setattr(_local_store, "MAX_LISTED_OBJECTS", files)  # the loop doubles them
    with pytest.raises(LimitError, match="at most"):
        vp.load(path)


def test_a_dask_graph_over_a_local_store_rewritten_while_it_computes_raises(tmp_path, versions):
    """One-volume chunks on one thread; after the first, every chunk is rewritten as zarr
    writes (a new file renamed over each): the rest are an error, not the new values."""
    pytest.importorskip("dask")
    from dask.callbacks import Callback

    path = _local(tmp_path, versions[0])
    arr = vp.to_dask(vp.load(path), np.float32, chunks=1)
    done = []

    def rewrite_once(key, result, dsk, state, worker_id):
        if isinstance(result, np.ndarray) and not done:
            done.append(key)
            for t in range(SHAPE[3]):
                _rewrite(path, _chunk(t), versions[1], "rename")

    with Callback(posttask=rewrite_once), pytest.raises(VoxpipeIOError, match=CHANGED):
        arr.compute(scheduler="sync")
    assert done
