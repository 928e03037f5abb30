"""Seek-index builds of objects (``vp.gz.build_index(url)``): one pass over the object costs
about one whole read, checked against the log of the server that answered (range_server's
RangeServer on 127.0.0.1; moto's S3 server where the point is S3).

The protocol (voxpipe/remote.hpp, core/range_input.hpp): the open is one GET of the first
64 KiB; the build then reads the object ahead whole, in 8 MiB parts (the first one less the
bytes the open holds), several in flight, decoded as they arrive, each byte once. The index
equals the one built from the same file on local disk; an object replaced during the build is
an error, and leaves no index behind.
"""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from voxpipe.errors import VoxpipeIOError

from range_server import RangeServer
from s3_server import S3Server

pytest.importorskip("obstore")

HTTP = {"allow_http": True}
HEAD = 64 << 10  # the open's request
PART = 8 << 20   # the read-ahead's requests
KEY = "d/series.nii.gz"
BUCKET = "voxpipe-remote-index"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("VOXPIPE_CACHE_DIR", str(path))
    return path


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    """(the path of a 4D int16 .nii.gz of about 36 MB, one gzip member as nibabel writes it:
    large enough for the exact build's parallel form, its two passes and five parts; its
    voxels)."""
    d = tmp_path_factory.mktemp("remote_index")
    rng = np.random.default_rng(35)
    data = rng.integers(-30000, 30000, size=(64, 64, 64, 72), dtype=np.int16)
    path = d / "series.nii.gz"
    # One gzip member, as nibabel writes it (at level 1: the noise does not compress anyway).
    path.write_bytes(gzip.compress(nib.Nifti1Image(data, np.eye(4)).to_bytes(), compresslevel=1))
    assert os.path.getsize(path) > 4 * PART  # the parallel exact build's smallest file
    return path, data


def local_index(path, tmp_path, exact):
    """The index vp.gz.build_index writes for the local file (the reference)."""
    out = tmp_path / f"local-{exact}.gzidx"
    vp.gz.build_index(path, output=out, exact=exact)
    return out.read_bytes()


def gzidx_body(blob):
    """A GZIDX file less voxpipe's trailer (which keys it to a file or an object: size, mtime,
    the checksum of the last 64 KiB): the header, the points and their windows."""
    assert blob[:5] == b"GZIDX"
    return blob[:blob.rindex(b"VPKEY")]


def spans(log):
    """[first, end) of each request's ``Range: bytes=a-b``."""
    out = []
    for r in log:
        first, last = r.range.removeprefix("bytes=").split("-")
        out.append((int(first), int(last) + 1))
    return out


@pytest.mark.parametrize("exact, threads", [(True, 0), (True, 4), (False, 0)])
def test_an_index_build_reads_the_object_once_in_large_parts(series, tmp_path, exact, threads):
    # exact with 4 threads: the one-pass parallel build (chunks decoded ahead); with 2 or fewer
    # (0: this machine's cores, 2 on CI) an object's exact build is one pass front to back.
    path, data = series
    blob = path.read_bytes()
    with RangeServer({KEY: blob}) as server:
        out = tmp_path / "remote.gzidx"
        info = vp.gz.build_index(server.url(KEY), output=out, exact=exact, threads=threads,
                                 storage_options=HTTP)
        log = server.log(KEY)
    assert info["index_path"] == str(out) and info["compressed_size"] == len(blob)
    assert info["uncompressed_size"] == 352 + data.nbytes
    # The open, then the object in 8 MiB parts: each byte once, never a small request but the
    # last part (hundreds of 64-128 KiB requests before the read-ahead).
    got = spans(log)
    assert got[0] == (0, HEAD) and all(r.status in (200, 206) for r in log)
    parts = sorted(got[1:])
    expected = [(HEAD, PART)] + [(at, min(at + PART, len(blob)))
                                  for at in range(PART, len(blob), PART)]
    assert parts == expected, f"{len(log)} requests: {got}"
    assert len(log) == 1 + -(-len(blob) // PART)
    # The index is the one built from the same file on local disk.
    assert gzidx_body(out.read_bytes()) == gzidx_body(local_index(path, tmp_path, exact))


@pytest.mark.parametrize("exact", [True, False])
def test_an_object_replaced_during_the_build_is_an_error_and_leaves_no_index(series, tmp_path,
                                                                             exact):
    path, data = series
    blob = path.read_bytes()
    other = bytearray(blob)
    other[-100] ^= 0xFF  # another version of the same size
    with RangeServer({KEY: blob}) as server:
        url = server.url(KEY)
        server.replace_after(KEY, 2, bytes(other))  # the open and one part see the first version
        out = tmp_path / "remote.gzidx"
        with pytest.raises(VoxpipeIOError, match="changed since it was opened") as e:
            vp.gz.build_index(url, output=out, exact=exact, storage_options=HTTP)
        assert url in str(e.value)
        assert [r.status for r in server.log(KEY)].count(412) >= 1
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("remote.gzidx")]


@pytest.fixture(scope="module")
def s3(series):
    """A moto S3 server with the series as s3://BUCKET/series.nii.gz."""
    pytest.importorskip("moto.server")
    server = S3Server(BUCKET)
    server.client.upload_file(str(series[0]), BUCKET, "series.nii.gz")
    yield server
    server.stop()


def test_s3_index_build_writes_the_sidecar_a_volume_then_reads(series, s3, tmp_path):
    path, data = series
    url = f"s3://{BUCKET}/series.nii.gz"
    info = vp.gz.build_index(url, storage_options=s3.storage_options())
    assert info["index_path"] == url + ".gzidx"
    sidecar = s3.client.get_object(Bucket=BUCKET, Key="series.nii.gz.gzidx")["Body"].read()
    assert gzidx_body(sidecar) == gzidx_body(local_index(path, tmp_path, True))
    img = vp.load(url, storage_options=s3.storage_options())
    assert img.dataobj.random_access
    np.testing.assert_array_equal(img.dataobj[..., 41], data[..., 41])


# "voxpipe index: 12.0/34.5 MiB (34%), 3.1 MiB/s, ETA 0:28" and the closing "..., done in 0:01".
# The rate takes the 1024-based unit that fits it (cli/progress.hpp): "0.0 B/s" before the first
# byte counts, "1.1 GiB/s" from a fast local server.
PROGRESS = re.compile(r"voxpipe index: (\d+\.\d)/(\d+\.\d) MiB \((\d+)%\), "
                      r"\d+\.\d (?:B|KiB|MiB|GiB|TiB)/s, "
                      r"(?:ETA [^ ]+|done in \d+:\d\d)$")


def test_cli_index_of_an_object_reports_its_progress(series, s3, tmp_path):
    cli = Path(sys.executable).with_name("voxpipe")
    if not cli.is_file():
        pytest.skip(f"{cli} not installed")
    path, _ = series
    env = s3.environment(VOXPIPE_PROGRESS_INTERVAL="0", VOXPIPE_PYTHON=sys.executable)
    out = tmp_path / "cli.gzidx"
    r = subprocess.run([str(cli), "index", f"s3://{BUCKET}/series.nii.gz", "-o", str(out),
                        "--progress", "log"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"wrote {out}: ")
    lines = [m.groups() for m in map(PROGRESS.match, r.stderr.splitlines()) if m]
    # Lines while it runs, not only the closing one, rising to the object's size.
    assert len(lines) >= 3, r.stderr
    done = [float(d) for d, _, _ in lines]
    assert done == sorted(done) and done[0] < done[-1]
    size = f"{os.path.getsize(path) / 2**20:.1f}"
    assert lines[-1] == (size, size, "100")
    assert gzidx_body(out.read_bytes()) == gzidx_body(local_index(path, tmp_path, True))
