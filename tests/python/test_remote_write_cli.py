"""The voxpipe command (convert, resample, dcm2nii, clean) and vp.convert_many / vp.resample with
outputs on object storage, on moto's S3 server started here: every object equals what the same
command writes to a local file, an existing object is refused without --overwrite (exit 12),
and `voxpipe clean` lists and removes what an interrupted writer left."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from s3_server import S3Server
from voxpipe._sources import upload

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get("VOXPIPE_CLI") or REPO / ".venv" / "bin" / "voxpipe")
pytestmark = pytest.mark.skipif(not CLI.is_file(), reason=f"{CLI} not built/installed")
BUCKET = "voxpipe-write-cli"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """(environment for the CLI, the server, a local folder with bold.nii.gz)."""
    server = S3Server(BUCKET)
    d = tmp_path_factory.mktemp("write_cli")
    data = np.random.default_rng(9).integers(-500, 500, size=(20, 18, 12, 4), dtype=np.int16)
    nib.save(nib.Nifti1Image(data, np.diag([2.0, 2.0, 3.0, 1.0])), d / "bold.nii.gz")
    env = server.environment(VOXPIPE_PYTHON=sys.executable, VOXPIPE_CACHE_DIR=str(d / "cache"))
    yield env, server, d
    server.stop()


def cli(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=env)


def body(server, key):
    return server.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def keys(server, prefix):
    return sorted(o["Key"] for o in server.client.list_objects_v2(
        Bucket=BUCKET, Prefix=prefix).get("Contents", []))


@pytest.mark.parametrize("name", ["x.nii", "x.nii.gz", "x.hdr"])
def test_convert_to_a_url_writes_what_it_writes_locally(s3, tmp_path, name):
    env, server, d = s3
    local = cli(env, "convert", d / "bold.nii.gz", tmp_path / name)
    assert local.returncode == 0, local.stderr
    url = f"s3://{BUCKET}/convert/{name}"
    r = cli(env, "convert", d / "bold.nii.gz", url)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"wrote {url}\n"
    for f in tmp_path.iterdir():
        assert body(server, f"convert/{f.name}") == f.read_bytes()
    again = cli(env, "convert", d / "bold.nii.gz", url)
    assert again.returncode == 12 and "already exists (--overwrite replaces it)" in again.stderr
    assert cli(env, "convert", d / "bold.nii.gz", url, "--overwrite").returncode == 0
    assert server.client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []


def test_convert_to_a_store_on_a_bucket(s3):
    env, server, d = s3
    url = f"s3://{BUCKET}/convert/x.nii.zarr"
    r = cli(env, "convert", d / "bold.nii.gz", url, "--chunks", "20,18,6")
    assert r.returncode == 0, r.stderr
    img = vp.load(url, storage_options=server.storage_options())
    assert np.array_equal(np.asarray(img.dataobj), np.asarray(nib.load(d / "bold.nii.gz").dataobj))
    assert "convert/x.nii.zarr.voxpipe-incomplete" not in keys(server, "convert/")
    again = cli(env, "convert", d / "bold.nii.gz", url)
    assert again.returncode == 12, again.stderr
    assert cli(env, "convert", d / "bold.nii.gz", url, "--overwrite").returncode == 0


def test_resample_to_a_url(s3, tmp_path):
    env, server, d = s3
    args = [d / "bold.nii.gz", "--reference", d / "bold.nii.gz", "--order", "1"]
    assert cli(env, "resample", *args, "-o", tmp_path / "r.nii.gz").returncode == 0
    r = cli(env, "resample", *args, "-o", f"s3://{BUCKET}/resample/r.nii.gz")
    assert r.returncode == 0, r.stderr
    assert body(server, "resample/r.nii.gz") == (tmp_path / "r.nii.gz").read_bytes()
    refused = cli(env, "resample", *args, "-o", f"s3://{BUCKET}/resample/r.nii.gz")
    assert refused.returncode == 12


def test_dcm2nii_to_a_prefix(s3, tmp_path):
    from test_cli_dcm2nii import write_series
    env, server, _ = s3
    write_series(tmp_path / "dicom", slices=6)
    local = cli(env, "dcm2nii", tmp_path / "dicom", "-o", tmp_path / "out")
    assert local.returncode == 0, local.stderr
    r = cli(env, "dcm2nii", tmp_path / "dicom", "-o", f"s3://{BUCKET}/dcm/")
    assert r.returncode == 0, r.stderr
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert keys(server, "dcm/") == [f"dcm/{n}" for n in written] and written
    for name in written:
        assert body(server, f"dcm/{name}") == (tmp_path / "out" / name).read_bytes()
    # Existing outputs: the series is skipped, as locally (exit 11).
    assert cli(env, "dcm2nii", tmp_path / "dicom", "-o", f"s3://{BUCKET}/dcm").returncode == 11


def test_clean_lists_then_removes_leftovers(s3):
    env, server, _ = s3
    server.client.put_object(Bucket=BUCKET, Key="left/a.nii" + upload.TEMP_MARK + "00ff",
                             Body=b"x")
    server.client.put_object(Bucket=BUCKET, Key="left/b.nii", Body=b"y")
    url = f"s3://{BUCKET}/left/"
    dry = cli(env, "clean", url, "--older-than", "0s", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout == f"would remove {url}a.nii{upload.TEMP_MARK}00ff (temporary object of an upload)\n"
    assert len(keys(server, "left/")) == 2
    done = cli(env, "clean", url, "--older-than", "0")
    assert done.stdout == dry.stdout.replace("would remove", "removed")
    assert keys(server, "left/") == ["left/b.nii"]
    bad = cli(env, "clean", url, "--older-than", "soon")
    assert bad.returncode == 2 and "--older-than" in bad.stderr


def test_convert_many_and_resample_to_a_prefix(s3, tmp_path):
    env, server, d = s3
    so = server.storage_options()
    results = vp.convert_many([d / "bold.nii.gz"], f"s3://{BUCKET}/many/", to="nii",
                              storage_options=so)
    assert [r.output for r in results] == [f"s3://{BUCKET}/many/bold.nii"] and results[0].ok
    vp.save(vp.load(d / "bold.nii.gz"), tmp_path / "bold.nii")
    assert body(server, "many/bold.nii") == (tmp_path / "bold.nii").read_bytes()
    out = vp.resample(d / "bold.nii.gz", d / "bold.nii.gz", np.eye(4), order=1,
                      out=f"s3://{BUCKET}/many/r.nii", storage_options=so)
    local = vp.resample(d / "bold.nii.gz", d / "bold.nii.gz", np.eye(4), order=1,
                        out=tmp_path / "r.nii")
    assert out.get_filename() == f"s3://{BUCKET}/many/r.nii"
    assert body(server, "many/r.nii") == (tmp_path / "r.nii").read_bytes()
    assert np.array_equal(out.get_fdata(), local.get_fdata())


def test_an_interrupted_convert_aborts_its_upload(s3, tmp_path):
    """SIGTERM while `convert` streams into a multipart upload: the upload is aborted (nothing
    appears, nothing stays listed) and the command ends by the signal, as it does for a local
    output. The proxy holds the upload's start, so that the signal comes mid-write."""
    import signal
    import time
    from s3_fault_proxy import S3FaultProxy
    env, server, _ = s3
    data = np.random.default_rng(3).integers(0, 2**31, (128, 128, 64, 10)).astype(np.int32)
    nib.save(nib.Nifti1Image(data, np.eye(4)), tmp_path / "big.nii")  # 42 MB: 3 parts
    proxy = S3FaultProxy(server.endpoint)
    try:
        proxy.stall("create", 4.0)
        p = subprocess.Popen([str(CLI), "convert", str(tmp_path / "big.nii"),
                              f"s3://{BUCKET}/intr/big.nii"], env=dict(env, AWS_ENDPOINT_URL=proxy.endpoint),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while "create" not in proxy.seen():
            assert time.monotonic() < deadline and p.poll() is None, p.stderr and p.stderr.read()
            time.sleep(0.02)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        proxy.stop()
    assert p.returncode == -signal.SIGTERM, err
    assert "interrupted" in err
    assert "abort" in [r.kind for r in proxy.log()]
    assert keys(server, "intr/") == []
    assert server.client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []
