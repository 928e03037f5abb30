"""The voxpipe command on objects named by URLs, on moto's S3 server started here.

Given a URL, the command runs in Python (the Python package makes the requests, configured by
the environment): pip's command runs in one, the program of a C++ build hands the command to
$VOXPIPE_PYTHON, the Python here, as the python3 next to an installed program would be found. The binary is $VOXPIPE_CLI if set, else the one pip
installed in .venv/bin; the tests are skipped without one.
"""
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

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get("VOXPIPE_CLI") or REPO / ".venv" / "bin" / "voxpipe")
pytestmark = pytest.mark.skipif(not CLI.is_file(), reason=f"{CLI} not built/installed")
BUCKET = "voxpipe-cli"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """(environment for the CLI, boto3 client, local folder with the files uploaded)."""
    server = S3Server(BUCKET)
    endpoint, client = server.endpoint, server.client
    d = tmp_path_factory.mktemp("remote_cli")
    data = np.random.default_rng(8).integers(-500, 500, size=(20, 18, 12, 6), dtype=np.int16)
    nib.save(nib.Nifti1Image(data, np.diag([2.0, 2.0, 3.0, 1.0])), d / "bold.nii.gz")
    client.upload_file(str(d / "bold.nii.gz"), BUCKET, "sub-01/bold.nii.gz")
    env = server.environment(VOXPIPE_PYTHON=sys.executable, VOXPIPE_CACHE_DIR=str(d / "cache"))
    yield env, client, d
    server.stop()


def cli(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=env)


def test_info_and_convert_read_the_object(s3, tmp_path):
    env, _, d = s3
    url = f"s3://{BUCKET}/sub-01/bold.nii.gz"
    info = cli(env, "info", url)
    assert info.returncode == 0, info.stderr
    local = cli(env, "info", d / "bold.nii.gz")
    # The same report as for the local file, but for the name.
    assert info.stdout.replace(url, "X") == local.stdout.replace(str(d / "bold.nii.gz"), "X")
    out = tmp_path / "bold.nii"
    conv = cli(env, "convert", url, out)
    assert conv.returncode == 0, conv.stderr
    ref = nib.load(d / "bold.nii.gz")
    assert nib.load(out).get_fdata().tobytes() == ref.get_fdata().tobytes()


def test_index_writes_the_sidecar_object_that_load_uses(s3):
    env, client, d = s3
    url = f"s3://{BUCKET}/sub-01/bold.nii.gz"
    r = cli(env, "index", url)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"wrote {url}.gzidx: ")
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert "sub-01/bold.nii.gz.gzidx" in keys
    # The sidecar is the index of this object: voxpipe reads one volume through it.
    options = {"endpoint": env["AWS_ENDPOINT_URL"], "allow_http": True,
               "access_key_id": "testing", "secret_access_key": "testing",
               "region": "us-east-1"}
    img = vp.load(url, storage_options=options)
    ref = nib.load(d / "bold.nii.gz")
    assert img.dataobj[..., 4].tobytes() == np.asanyarray(ref.dataobj[..., 4]).tobytes()
    assert img.dataobj._gzip_reader().random_access


def test_a_missing_object_is_exit_3_naming_the_url(s3):
    env, _, _ = s3
    url = f"s3://{BUCKET}/sub-01/missing.nii.gz"
    r = cli(env, "info", url)
    assert r.returncode == 3
    assert f"error (not_found): {url}: " in r.stderr
    assert "Debug source" not in r.stderr


def test_without_python_a_url_says_how_to_read_it(s3, tmp_path):
    # The program of a C++ build hands URLs to a Python (pip's command runs in one).
    from voxpipe_commands import cxx_program
    program = cxx_program()
    if program is None:
        pytest.skip("no voxpipe executable built")
    env, _, _ = s3
    env = dict(env, VOXPIPE_PYTHON=str(tmp_path / "no-python-here"))
    r = subprocess.run([str(program), "info", f"s3://{BUCKET}/sub-01/bold.nii.gz"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode != 0
    assert "python -m voxpipe" in r.stderr


def test_dcm2nii_converts_the_series_under_a_prefix(s3, tmp_path):
    # The objects under the prefix, fetched and scanned from memory, give the file the local
    # folder gives: the same bytes.
    from test_cli_dcm2nii import write_series
    env, client, _ = s3
    write_series(tmp_path / "dicom", slices=6)
    for f in sorted((tmp_path / "dicom").iterdir()):
        client.upload_file(str(f), BUCKET, f"dicom/series/{f.name}")
    remote = cli(env, "dcm2nii", f"s3://{BUCKET}/dicom/series/", tmp_path / "from_s3")
    assert remote.returncode == 0, remote.stderr
    local = cli(env, "dcm2nii", tmp_path / "dicom", tmp_path / "from_disk")
    assert local.returncode == 0, local.stderr
    written = sorted(p.name for p in (tmp_path / "from_s3").iterdir())
    assert written == sorted(p.name for p in (tmp_path / "from_disk").iterdir()) and written
    for name in (n for n in written if n.endswith(".nii.gz")):
        a, b = nib.load(tmp_path / "from_s3" / name), nib.load(tmp_path / "from_disk" / name)
        assert a.header.binaryblock == b.header.binaryblock
        assert np.asanyarray(a.dataobj).tobytes() == np.asanyarray(b.dataobj).tobytes()
    for name in (n for n in written if n.endswith(".json")):  # the BIDS sidecars
        assert ((tmp_path / "from_s3" / name).read_text()
                == (tmp_path / "from_disk" / name).read_text())
    assert "6 files read" in remote.stdout
    mixed = cli(env, "dcm2nii", f"s3://{BUCKET}/dicom/series/", tmp_path / "dicom",
                tmp_path / "mixed")
    assert mixed.returncode != 0 and "all URLs or all paths" in mixed.stderr
