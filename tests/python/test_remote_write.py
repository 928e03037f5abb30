"""Writes to object storage (vp.save to a URL, _sources/upload.py), on moto's S3 server started
here: each object read back (boto3) equals the local save byte for byte; large objects go up in
multipart (its part count is the ETag's suffix); a failed or killed upload leaves no object and,
after the abort or clean(), no upload; overwrite=False refuses an existing object, also when
another writer creates it after the check; a store's root metadata is written last."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from s3_server import S3Server
from voxpipe._sources import upload

BUCKET = "voxpipe-write"
PART = 5 << 20  # S3's smallest part: multipart objects stay small


@pytest.fixture(scope="module")
def s3():
    server = S3Server(BUCKET)
    yield server
    server.stop()


def keys(s3, prefix=""):
    return sorted(o["Key"] for o in
                  s3.client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", []))


def uploads(s3):
    return s3.client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])


def body(s3, key):
    return s3.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def image(shape=(24, 20, 12, 5), seed=0):
    data = np.random.default_rng(seed).integers(-900, 900, shape).astype(np.int16)
    return nib.Nifti1Image(data, np.diag([2.0, 2.0, 2.5, 1.0]))


@pytest.mark.parametrize("suffix", [".nii", ".nii.gz"])
def test_save_to_a_url_writes_the_bytes_of_the_local_save(s3, tmp_path, suffix):
    img = image()
    vp.save(img, tmp_path / f"x{suffix}", threads=1)
    vp.save(img, f"s3://{BUCKET}/rt/x{suffix}", storage_options=s3.storage_options(), threads=1)
    assert body(s3, f"rt/x{suffix}") == (tmp_path / f"x{suffix}").read_bytes()
    back = nib.Nifti1Image.from_bytes(__import__("gzip").decompress(body(s3, f"rt/x{suffix}"))
                                      if suffix == ".nii.gz" else body(s3, f"rt/x{suffix}"))
    assert np.array_equal(np.asarray(back.dataobj), np.asarray(img.dataobj))
    assert uploads(s3) == []


def test_save_of_a_pair_writes_both_objects(s3, tmp_path):
    img = image(seed=1)
    vp.save(img, tmp_path / "p.hdr")
    vp.save(img, f"s3://{BUCKET}/pair/p.hdr", storage_options=s3.storage_options())
    assert keys(s3, "pair/") == ["pair/p.hdr", "pair/p.img"]
    for name in ("p.hdr", "p.img"):
        assert body(s3, f"pair/{name}") == (tmp_path / name).read_bytes()


def test_a_large_object_goes_up_in_parts(s3, tmp_path, monkeypatch):
    monkeypatch.setattr(upload, "PART_SIZE", PART)
    img = image(shape=(128, 128, 40, 9), seed=2)  # 11.25 MiB of int16 + header: 3 parts
    vp.save(img, tmp_path / "big.nii")
    url = f"s3://{BUCKET}/mp/big.nii"
    vp.save(img, url, storage_options=s3.storage_options())
    head = s3.client.head_object(Bucket=BUCKET, Key="mp/big.nii")
    assert head["ETag"].strip('"').endswith("-3")  # a multipart upload of 3 parts
    assert body(s3, "mp/big.nii") == (tmp_path / "big.nii").read_bytes()
    assert np.array_equal(vp.load(url, storage_options=s3.storage_options()).dataobj[..., 8],
                          np.asarray(img.dataobj)[..., 8])


def test_part_size_fits_the_object_in_ten_thousand_parts():
    assert upload.part_size_for(10, PART) == PART
    assert upload.part_size_for(10000 * PART, PART) == PART
    big = upload.part_size_for(10000 * PART + 1, PART)
    assert big > PART and big % (1 << 20) == 0 and -(-(10000 * PART + 1) // big) <= 10000
    with pytest.raises(ValueError, match="at least"):
        upload.part_size_for(10, 1 << 20)


def test_an_input_that_raises_aborts_the_upload(s3):
    def parts():
        for _ in range(3):
            yield b"\x01" * PART
        raise RuntimeError("the encoder failed")

    with pytest.raises(RuntimeError, match="the encoder failed"):
        upload.upload_stream(parts(), f"s3://{BUCKET}/abort/x.nii", s3.storage_options(),
                             size=10 * PART, part_size=PART, max_concurrency=2)
    assert keys(s3, "abort/") == []
    assert uploads(s3) == []


_KILLED_WRITER = textwrap.dedent("""
    import sys, time
    from voxpipe._sources import upload
    def parts():
        yield b"\\x02" * (5 << 20)
        yield b"\\x02" * (5 << 20)
        print("sent", flush=True)
        time.sleep(60)
        yield b"\\x02"
    upload.upload_stream(parts(), sys.argv[1], size=20 << 20, part_size=5 << 20,
                         max_concurrency=2)
""")


def test_a_killed_writer_leaves_no_object_and_clean_aborts_its_upload(s3):
    env = s3.environment()
    url = f"s3://{BUCKET}/killed/x.nii"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, url], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "sent"
        deadline = time.monotonic() + 20
        while not any(u["Key"] == "killed/x.nii" for u in uploads(s3)):
            assert time.monotonic() < deadline, "the writer started no multipart upload"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert keys(s3, "killed/") == []
    assert [u["Key"] for u in uploads(s3)] == ["killed/x.nii"]
    so = s3.storage_options()
    # (moto lists every upload as initiated in 2010: older_than is checked on objects only)
    found = upload.clean(f"s3://{BUCKET}/killed/", so, older_than=0, dry_run=True)
    assert len(found) == 1 and found[0].startswith("would remove s3://voxpipe-write/killed/x.nii")
    assert len(uploads(s3)) == 1
    done = upload.clean(f"s3://{BUCKET}/killed/", so, older_than=0)
    assert len(done) == 1 and done[0].startswith("removed s3://voxpipe-write/killed/x.nii")
    assert uploads(s3) == []


def test_overwrite_false_refuses_an_existing_object(s3, tmp_path):
    so = s3.storage_options()
    img = image(seed=3)
    for suffix in (".nii.gz", ".nii.zarr"):
        url = f"s3://{BUCKET}/ow/x{suffix}"
        vp.save(img, url, storage_options=so)
        before = keys(s3, "ow/")
        with pytest.raises(FileExistsError, match="overwrite"):
            vp.save(image(seed=4), url, storage_options=so, overwrite=False)
        assert keys(s3, "ow/") == before
    assert np.array_equal(np.asarray(vp.load(f"s3://{BUCKET}/ow/x.nii.gz",
                                             storage_options=so).dataobj),
                          np.asarray(img.dataobj))
    # Locally too.
    vp.save(img, tmp_path / "x.nii")
    with pytest.raises(FileExistsError):
        vp.save(img, tmp_path / "x.nii", overwrite=False)


@pytest.mark.parametrize("size", [1000, 2 * PART + 1])
def test_a_create_refused_when_another_writer_created_the_object_first(s3, monkeypatch, size):
    """The check before the upload passed (the other writer had not finished): the create is
    conditional (If-None-Match: one PUT; a copy completed with it: multipart), so the object
    the other writer made stays, and nothing of this upload is left."""
    so = s3.storage_options()
    key = f"race/{size}.nii"
    s3.client.put_object(Bucket=BUCKET, Key=key, Body=b"first writer")
    monkeypatch.setattr(upload, "exists", lambda url, storage_options=None: False)
    with pytest.raises(FileExistsError, match="already exists"):
        upload.upload_stream([b"\x03" * size], f"s3://{BUCKET}/{key}", so, size=size,
                             overwrite=False, part_size=PART)
    assert body(s3, key) == b"first writer"
    assert keys(s3, "race/") == sorted(k for k in keys(s3, "race/") if upload.TEMP_MARK not in k)
    assert uploads(s3) == []


def test_a_create_of_a_large_object_goes_through_a_temporary_object(s3):
    so = s3.storage_options()
    data = bytes(range(256)) * ((2 * PART + 7) // 256)
    upload.upload_stream([data], f"s3://{BUCKET}/create/x.bin", so, size=len(data),
                         overwrite=False, part_size=PART)
    assert keys(s3, "create/") == ["create/x.bin"]
    assert body(s3, "create/x.bin") == data


def test_a_store_is_found_only_once_its_root_metadata_is_written(s3, monkeypatch):
    so = s3.storage_options()
    url = f"s3://{BUCKET}/store/x.nii.zarr"
    seen = []
    real = upload.upload_file

    def watching(path, to, storage_options=None, **kw):
        if to == url + "/zarr.json":  # the last object: everything else is there
            assert {"store/x.nii.zarr/nifti/zarr.json", "store/x.nii.zarr/0/zarr.json"} | \
                {f"store/x.nii.zarr/0/c/{t}/0/0/0" for t in range(5)} <= set(keys(s3, "store/"))
            assert "store/x.nii.zarr.voxpipe-incomplete" in keys(s3, "store/")
            with pytest.raises(FileNotFoundError):
                vp.load(url, storage_options=so)
            seen.append(to)
        return real(path, to, storage_options, **kw)

    monkeypatch.setattr(upload, "upload_file", watching)
    img = image(seed=5)
    vp.save(img, url, storage_options=so)
    assert seen == [url + "/zarr.json"]
    assert "store/x.nii.zarr.voxpipe-incomplete" not in keys(s3, "store/")
    back = vp.load(url, storage_options=so)
    assert np.array_equal(np.asarray(back.dataobj), np.asarray(img.dataobj))
    # Replaced: the old store's objects go, the new store reads back whole.
    img2 = image(shape=(24, 20, 12, 3), seed=6)
    monkeypatch.setattr(upload, "upload_file", real)
    vp.save(img2, url, storage_options=so)
    assert np.array_equal(np.asarray(vp.load(url, storage_options=so).dataobj),
                          np.asarray(img2.dataobj))
    assert not any("/0/c/3/" in k or "/0/c/4/" in k for k in keys(s3, "store/"))


def test_a_store_write_that_fails_leaves_nothing(s3, monkeypatch):
    so = s3.storage_options()
    url = f"s3://{BUCKET}/failed/x.nii.zarr"
    real = upload.upload_file

    def failing(path, to, storage_options=None, **kw):
        if to.endswith("/zarr.json") and "/nifti/" in to:
            raise OSError("the network went away")
        return real(path, to, storage_options, **kw)

    monkeypatch.setattr(upload, "upload_file", failing)
    with pytest.raises(OSError, match="network went away"):
        vp.save(image(seed=7), url, storage_options=so)
    assert keys(s3, "failed/") == []


def test_clean_removes_what_dead_writers_left(s3):
    so = s3.storage_options()
    put = lambda key, data=b"x": s3.client.put_object(Bucket=BUCKET, Key=key, Body=data)
    put("dead/a.nii.gz" + upload.TEMP_MARK + "0123456789abcdef")
    put("dead/s.nii.zarr.voxpipe-incomplete", b"{}")
    put("dead/s.nii.zarr/0/zarr.json")
    put("dead/s.nii.zarr/0/c/0/0/0/0")
    put("dead/keep.nii.gz")
    put("dead/done.nii.zarr/zarr.json")
    url = f"s3://{BUCKET}/dead/"
    assert upload.clean(url, so) == []  # younger than an hour
    would = upload.clean(url, so, older_than=0, dry_run=True)
    assert would == [f"would remove {url}a.nii.gz{upload.TEMP_MARK}0123456789abcdef "
                     f"(temporary object of an upload)",
                     f"would remove {url}s.nii.zarr (incomplete store, 2 objects)"]
    assert len(keys(s3, "dead/")) == 6
    assert [w.replace("would remove", "removed") for w in would] == \
        upload.clean(url, so, older_than=0)
    assert keys(s3, "dead/") == ["dead/done.nii.zarr/zarr.json", "dead/keep.nii.gz"]


def test_save_streams_without_a_local_copy(s3, tmp_path, monkeypatch):
    """A .nii.gz goes up as the core compresses it: no temporary file, and parts of the
    configured size (incompressible data: 3 parts of 5 MiB and a last one)."""
    monkeypatch.setattr(upload, "PART_SIZE", PART)
    data = np.random.default_rng(8).integers(0, 2**31, (128, 128, 64, 2)).astype(np.int32)
    img = nib.Nifti1Image(data, np.eye(4))
    vp.save(img, tmp_path / "s.nii.gz", level=0)
    monkeypatch.setattr("tempfile.mkdtemp", lambda *a, **k: pytest.fail("a local copy"))
    vp.save(img, f"s3://{BUCKET}/stream/s.nii.gz", storage_options=s3.storage_options(),
            level=0)
    local = (tmp_path / "s.nii.gz").read_bytes()
    assert body(s3, "stream/s.nii.gz") == local
    etag = s3.client.head_object(Bucket=BUCKET, Key="stream/s.nii.gz")["ETag"].strip('"')
    assert etag.endswith(f"-{-(-len(local) // PART)}")
    assert uploads(s3) == []


def test_an_abandoned_stream_leaves_nothing(s3):
    sink = upload.StreamingUpload(f"s3://{BUCKET}/abandoned/x.nii", s3.storage_options(),
                                  part_size=PART)
    for _ in range(3):
        sink.write(b"\x05" * (3 << 20))
    sink.abort()
    sink.abort()  # twice: nothing more
    assert sink.error is None
    assert keys(s3, "abandoned/") == []
    assert uploads(s3) == []
    with pytest.raises(Exception, match="ended"):
        sink.write(b"more")


def test_a_stream_whose_create_is_refused_raises_at_commit(s3):
    so = s3.storage_options()
    s3.client.put_object(Bucket=BUCKET, Key="streamrace/x.nii", Body=b"first writer")
    for n in (100, 2 * PART + 5):  # one PUT; multipart, then a conditional copy
        sink = upload.StreamingUpload(f"s3://{BUCKET}/streamrace/x.nii", so, overwrite=False,
                                      part_size=PART)
        sink.write(b"\x06" * n)
        with pytest.raises(FileExistsError):
            sink.commit()
        assert isinstance(sink.error, FileExistsError)
    assert body(s3, "streamrace/x.nii") == b"first writer"
    assert keys(s3, "streamrace/") == ["streamrace/x.nii"]
    assert uploads(s3) == []


def _through_proxy(s3, **extra):
    from s3_fault_proxy import S3FaultProxy
    proxy = S3FaultProxy(s3.endpoint)
    return proxy, dict(s3.storage_options(), endpoint=proxy.endpoint, **extra)


def test_multipart_requests_and_a_503_on_a_part_retried(s3):
    """One create, one PUT per part (part 2 twice: its 503 retried), one complete; nothing
    else, and the object whole."""
    proxy, so = _through_proxy(s3)
    try:
        proxy.fail_part(2, 503, times=1)
        data = bytes(range(256)) * ((3 * PART - 100) // 256)  # 3 parts
        upload.upload_stream([data], f"s3://{BUCKET}/fault/x.nii", so, size=len(data),
                             part_size=PART, max_concurrency=2)
        kinds = [r.kind for r in proxy.log()]
        assert kinds.count("create") == 1 and kinds.count("complete") == 1
        assert kinds.count("part") == 4 and kinds.count("abort") == 0
        assert [r.status for r in proxy.log() if r.kind == "part" and "partNumber=2" in r.path] \
            == [503, 200]
        assert len(kinds) == 6
    finally:
        proxy.stop()
    assert body(s3, "fault/x.nii") == data
    assert uploads(s3) == []


def test_a_part_that_keeps_failing_aborts_the_upload(s3):
    proxy, so = _through_proxy(s3, retry_config={"max_retries": 1})
    try:
        proxy.fail_part(2, 503, times=None)
        data = b"\x07" * (3 * PART)
        with pytest.raises(OSError, match=r"s3://voxpipe-write/fault/y\.nii: cannot write"):
            upload.upload_stream([data], f"s3://{BUCKET}/fault/y.nii", so, size=len(data),
                                 part_size=PART, max_concurrency=2)
        assert "abort" in [r.kind for r in proxy.log()]
    finally:
        proxy.stop()
    assert keys(s3, "fault/y") == []
    assert uploads(s3) == []


def test_a_store_with_pyramid_levels_reads_back_as_the_local_one(s3, tmp_path):
    """Coarser levels are computed from level 0 read back: its chunks are then uploaded from
    the local folder, with the rest."""
    so = s3.storage_options()
    img = image(shape=(24, 20, 12, 2), seed=9)
    vp.save(img, tmp_path / "p.nii.zarr", levels=2)
    vp.save(img, f"s3://{BUCKET}/levels/p.nii.zarr", storage_options=so, levels=2)
    local = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert keys(s3, "levels/") == [f"levels/{k}" for k in local]
    for level in (0, 1):
        a = vp.load(f"s3://{BUCKET}/levels/p.nii.zarr", storage_options=so, level=level)
        b = vp.load(tmp_path / "p.nii.zarr", level=level)
        assert np.array_equal(np.asarray(a.dataobj), np.asarray(b.dataobj))


def test_a_stream_the_server_refuses_fails_the_save_with_its_error(s3, monkeypatch):
    """The upload fails while the core is still writing (no such bucket): the save ends with
    the upload's own error, naming the URL, and nothing is left."""
    monkeypatch.setattr(upload, "PART_SIZE", PART)
    img = image(shape=(128, 128, 40, 9), seed=10)  # 11 MiB: the failure comes mid-write
    with pytest.raises(FileNotFoundError, match="s3://voxpipe-missing/x.nii: cannot"):
        vp.save(img, "s3://voxpipe-missing/x.nii", storage_options=s3.storage_options())
    assert uploads(s3) == []


def test_a_chunk_that_fails_to_go_up_fails_the_store_and_leaves_nothing(s3, monkeypatch):
    so = s3.storage_options()
    real = upload.put_bytes

    def failing(data, url, storage_options=None, **kw):
        if url.endswith("/0/c/3/0/0/0"):
            raise OSError("the network went away")
        return real(data, url, storage_options, **kw)

    monkeypatch.setattr(upload, "put_bytes", failing)
    with pytest.raises(OSError, match="network went away"):
        vp.save(image(seed=11), f"s3://{BUCKET}/chunkfail/x.nii.zarr", storage_options=so)
    assert keys(s3, "chunkfail/") == []
