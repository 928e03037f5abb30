"""vp.load_dicom and vp.dicom.scan of URLs: DICOM series on a local S3-protocol server (moto's,
started here) and an HTTP server, each read the same way from the local folder it was uploaded
from and compared: data bit for bit, affine, NIfTI header, and the Series' metadata (files named
by URL, positions, warnings, rescale, the first image's dataset). The series are those of the
DICOM tests: test_dicom_series.py's generated ones (oblique, 4D, enhanced multi-frame, Siemens
mosaics from nibabel's test data) and pydicom's test files (native, deflated, RLE, JPEG,
JPEG 2000). Also: a prefix holding two series, prefixes without their "/", lists of object URLs,
a missing prefix or bucket, objects replaced after they were listed (never two versions in one
series), and pickling (URLs and ETags, never bytes; the receiver reads those versions again)."""

from __future__ import annotations

import os
import pickle
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

import voxpipe as vp
from s3_server import S3Server
from voxpipe._sources import listing as _remote_dicom
from voxpipe.errors import (InvalidArgumentError, UnsupportedError, VoxpipeFileNotFoundError,
                            VoxpipeIOError)

moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")
pytest.importorskip("obstore")
pydicom = pytest.importorskip("pydicom")

from pydicom.data import DATA_ROOT  # noqa: E402
from pydicom.uid import DeflatedExplicitVRLittleEndian, generate_uid  # noqa: E402

from test_dicom_series import (MOSAICS, NIBABEL_DATA, enhanced_multiframe,  # noqa: E402
                               write_series)
from test_device import fake_driver  # noqa: E402,F401  (the stand-in libcuda, a fixture)

BUCKET = "voxpipe-dicom"
KEYS = {"access_key_id": "testing", "secret_access_key": "testing", "region": "us-east-1"}

# pydicom's test files that are series of one image (a position and an orientation), one per
# way of storing the pixel data. Read from its folder: get_testdata_file would try to download.
PYDICOM_FILES = ["CT_small.dcm", "MR_small_bigendian.dcm", "MR_small_implicit.dcm",
                 "MR_small_RLE.dcm", "MR_small_jp2klossless.dcm", "MR_small_jpeg_ls_lossless.dcm",
                 "693_J2KI.dcm", "liver_1frame.dcm"]


def deflated_series(folder: Path) -> None:
    """A 3-slice series in Deflated Explicit VR Little Endian whose images carry a value longer
    than the dataset's deferral limit (64 KiB): the pixel data are inflated from the objects'
    bytes, and Series.dataset inflates the deferred value from them."""
    write_series(os.fspath(folder), "axial", n=3, seed=4)
    for p in folder.iterdir():
        ds = pydicom.dcmread(p)
        ds.add_new(0x00420011, "OB", bytes(range(256)) * 400)  # EncapsulatedDocument, 100 KiB
        ds.file_meta.TransferSyntaxUID = DeflatedExplicitVRLittleEndian
        ds.save_as(p, enforce_file_format=True)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on a free localhost port, with the DICOM test series uploaded under
    "cases/NAME/" (a folder each) and a study of two series under "study/", and the local
    folder they came from."""
    server = S3Server(BUCKET)
    endpoint, client = server.endpoint, server.client
    root = tmp_path_factory.mktemp("remote_dicom")
    cases = root / "cases"
    (cases / "oblique").mkdir(parents=True)
    write_series(os.fspath(cases / "oblique"), "oblique", n=7, seed=1)
    (cases / "4d").mkdir()
    write_series(os.fspath(cases / "4d"), "sagittal", n=4, volumes=3, seed=2)
    (cases / "enhanced").mkdir()
    enhanced_multiframe(cases / "enhanced" / "enhanced.dcm")
    (cases / "deflated").mkdir()
    deflated_series(cases / "deflated")
    (cases / "nested" / "a" / "b").mkdir(parents=True)  # one series spread over subfolders
    write_series(os.fspath(cases / "nested" / "a"), "coronal", n=6, seed=3)
    for p in sorted((cases / "nested" / "a").glob("*.dcm"))[::2]:
        p.rename(cases / "nested" / "a" / "b" / p.name)
    mosaics = [n for n in MOSAICS if os.path.exists(os.path.join(NIBABEL_DATA, n))]
    if mosaics:
        import gzip
        (cases / "mosaic").mkdir()
        for n in mosaics:
            data = gzip.decompress(Path(NIBABEL_DATA, n).read_bytes())
            (cases / "mosaic" / n.replace(".gz", "")).write_bytes(data)
    for name in PYDICOM_FILES:
        path = Path(DATA_ROOT) / "test_files" / name
        if path.exists():
            (cases / name).mkdir()
            shutil.copy(path, cases / name / name)
    study = root / "study"
    study.mkdir()
    write_series(os.fspath(study), "axial", n=5, seed=5, name="t1")
    (study / "dwi").mkdir()
    write_series(os.fspath(study / "dwi"), "oblique", n=4, volumes=2, seed=6, name="dwi",
                 series_uid=generate_uid())
    (study / "notes.txt").write_text("not DICOM")
    for path in sorted(root.rglob("*")):
        if path.is_file():
            client.upload_file(os.fspath(path), BUCKET, path.relative_to(root).as_posix())
    client.put_object(Bucket=BUCKET, Key="study/empty-folder/", Body=b"")  # a console's marker
    yield endpoint, client, root
    server.stop()


def options(endpoint):
    return dict(KEYS, endpoint=endpoint, allow_http=True)


def url_of(root: Path, path: str | Path) -> str:
    return f"s3://{BUCKET}/" + Path(path).relative_to(root).as_posix()


def case_names(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "cases").iterdir())


def assert_same_series(remote, local, root: Path) -> None:
    """Every property of two Series but where their files are (URLs for local paths)."""
    assert remote.files == [(url_of(root, p), frame) for p, frame in local.files]
    for attr in ("series_instance_uid", "series_number", "series_description", "modality",
                 "split", "shape", "slice_spacing", "pixel_spacing", "orientation",
                 "gantry_tilt", "tilt_degrees", "stored_dtype", "uniform_rescale", "slope",
                 "intercept", "problem"):
        assert getattr(remote, attr) == getattr(local, attr), attr
    assert remote.affine.tobytes() == local.affine.tobytes()
    assert remote.positions.tobytes() == local.positions.tobytes()
    lw = [w.replace(os.fspath(root) + "/", f"s3://{BUCKET}/") for w in local.warnings]
    assert remote.warnings == lw
    # The first image's dataset: every element and value (deferred ones read from the object).
    rds, lds = remote.dataset, local.dataset
    assert rds.filename == url_of(root, lds.filename)
    assert [e.tag for e in rds] == [e.tag for e in lds]
    for r, l in zip(rds, lds):
        assert (r.VR, r.value_tell, r.is_deferred) == (l.VR, l.value_tell, l.is_deferred)
        if r.VR != "SQ":
            assert r.value == l.value, r


@pytest.fixture(scope="module")
def cases(s3):
    """{name: (remote image, local image)} of every case, loaded once: dtype=None (the stored
    values) where the series shares one rescale, float64 where it does not."""
    endpoint, _, root = s3
    out = {}
    for name in case_names(root):
        local_scan = vp.dicom.scan(root / "cases" / name)
        dtype = None if local_scan[0].uniform_rescale and not local_scan[0].problem else np.float64
        local = vp.load_dicom(root / "cases" / name, dtype=dtype)
        remote = vp.load_dicom(f"s3://{BUCKET}/cases/{name}/", dtype=dtype,
                               storage_options=options(endpoint))
        out[name] = remote, local
    return out


def test_every_case_is_uploaded(s3):
    _, _, root = s3
    names = case_names(root)
    assert {"oblique", "4d", "enhanced", "deflated", "nested", "CT_small.dcm",
            "MR_small_RLE.dcm", "MR_small_jp2klossless.dcm"} <= set(names)
    assert len(names) >= 12


def test_remote_series_equals_local(s3, cases):
    _, _, root = s3
    for name, (remote, local) in cases.items():
        assert remote.shape == local.shape, name
        assert remote.get_data_dtype() == local.get_data_dtype(), name
        data = np.asarray(remote.dataobj)
        assert data.dtype == np.asarray(local.dataobj).dtype
        assert data.tobytes() == np.asarray(local.dataobj).tobytes(), name
        assert remote.affine.tobytes() == local.affine.tobytes(), name
        assert remote.header.binaryblock == local.header.binaryblock, name
        assert_same_series(remote.dicom, local.dicom, root)


def test_float32_of_a_compressed_series(s3):
    # The default dtype over a JPEG 2000 object: each image's rescale, as locally.
    endpoint, _, root = s3
    name = "MR_small_jp2klossless.dcm"
    if not (root / "cases" / name).exists():
        pytest.skip(f"pydicom's {name} is not installed")
    remote = vp.load_dicom(f"s3://{BUCKET}/cases/{name}/{name}", storage_options=options(endpoint))
    local = vp.load_dicom(root / "cases" / name / name)
    assert remote.get_fdata().tobytes() == local.get_fdata().tobytes()
    assert remote.dicom.files == [(f"s3://{BUCKET}/cases/{name}/{name}", 0)]


def test_deferred_value_is_read_from_the_object(s3, cases):
    _, _, root = s3
    remote, _ = cases["deflated"]
    assert remote.dicom.dataset.offsets_in_inflated_stream
    elem = remote.dicom.dataset[0x00420011]
    assert elem.is_deferred
    first = remote.dicom.files[0][0].rsplit("/", 1)[1]
    want = pydicom.dcmread(root / "cases" / "deflated" / first)[0x00420011].value
    assert elem.value == want and len(want) == 102400


def test_pixel_data_of_a_remote_dataset_go_through_the_series(cases):
    remote, _ = cases["oblique"]
    with pytest.raises(UnsupportedError, match="Series.get_data") as e:
        remote.dicom.dataset.pixel_array
    assert e.value.path.startswith(f"s3://{BUCKET}/cases/oblique/")


def test_scan_of_a_prefix_with_two_series(s3):
    endpoint, _, root = s3
    local = vp.dicom.scan(root / "study")
    remote = vp.dicom.scan(f"s3://{BUCKET}/study/", storage_options=options(endpoint))
    assert len(remote) == len(local) == 2
    assert sorted(s.shape for s in remote) == [(10, 12, 4, 2), (10, 12, 5)]
    for r, l in zip(remote, local):
        assert_same_series(r, l, root)
        assert r.get_data().tobytes() == l.get_data().tobytes()
    # The non-DICOM object is skipped, named by URL; the empty "folder" marker is no object.
    assert [(p, why.split(": ", 1)[1]) for p, why in remote.skipped] == \
        [(url_of(root, p), why.split(": ", 1)[1]) for p, why in local.skipped]
    assert [p for p, _ in remote.skipped] == [f"s3://{BUCKET}/study/notes.txt"]
    # Several series and none chosen: the same error as locally; chosen by SeriesInstanceUID.
    with pytest.raises(InvalidArgumentError, match="2 series found"):
        vp.load_dicom(f"s3://{BUCKET}/study/", storage_options=options(endpoint))
    dwi = next(s for s in remote if len(s.shape) == 4)
    img = vp.load_dicom(f"s3://{BUCKET}/study/", series=dwi.series_instance_uid,
                        storage_options=options(endpoint))
    assert img.shape == (10, 12, 4, 2)
    assert img.get_fdata().tobytes() == dwi.get_data(np.float64).tobytes()


def test_non_recursive_scan_lists_the_prefix_only(s3):
    endpoint, _, root = s3
    local = vp.dicom.scan(root / "study", recursive=False)
    remote = vp.dicom.scan(f"s3://{BUCKET}/study/", recursive=False,
                           storage_options=options(endpoint))
    assert len(remote) == len(local) == 1
    assert_same_series(remote[0], local[0], root)


def test_urls_without_the_slash_a_bucket_and_lists_of_objects(s3):
    endpoint, _, root = s3
    opts = options(endpoint)
    local = vp.dicom.scan(root / "cases" / "nested")[0]
    # A URL with no object by its name is a prefix, as a path names a folder.
    assert_same_series(vp.dicom.scan(f"s3://{BUCKET}/cases/nested", storage_options=opts)[0],
                       local, root)
    # Object URLs, as a list of files; each object is fetched once however often it is named.
    files = sorted(p for p in (root / "cases" / "nested").rglob("*.dcm"))
    urls = [url_of(root, p) for p in files]
    by_list = vp.dicom.scan(urls + urls[:1], storage_options=opts)
    by_paths = vp.dicom.scan(files + files[:1])
    assert len(by_list) == 1
    assert_same_series(by_list[0], by_paths[0], root)
    assert by_list[0].warnings and by_list[0].warnings == [
        w.replace(os.fspath(root) + "/", f"s3://{BUCKET}/") for w in by_paths[0].warnings]
    # The whole bucket: every case and the study.
    everything = vp.dicom.scan(f"s3://{BUCKET}", storage_options=opts)
    assert len(everything) == len(vp.dicom.scan(root))


def test_missing_prefix_object_or_bucket_names_the_url(s3):
    endpoint, _, _ = s3
    for url in (f"s3://{BUCKET}/no-such-prefix/", f"s3://{BUCKET}/no-such-object.dcm",
                f"s3://{BUCKET}/study/no-such-prefix", "s3://no-such-bucket/series/"):
        with pytest.raises(VoxpipeFileNotFoundError) as e:
            vp.load_dicom(url, storage_options=options(endpoint))
        assert url in str(e.value) and e.value.path == url
        assert isinstance(e.value, FileNotFoundError)
    with pytest.raises(VoxpipeFileNotFoundError, match="no objects under this prefix"):
        vp.dicom.scan(f"s3://{BUCKET}/no-such-prefix/", storage_options=options(endpoint))
    with pytest.raises(VoxpipeFileNotFoundError, match="no such object, and no objects under"):
        vp.dicom.scan(f"s3://{BUCKET}/study/no-such-prefix", storage_options=options(endpoint))


def test_arguments_are_checked_before_any_request(s3, tmp_path):
    endpoint, _, _ = s3
    with pytest.raises(InvalidArgumentError, match="mixes them"):
        vp.dicom.scan([f"s3://{BUCKET}/study/", os.fspath(tmp_path)],
                      storage_options=options(endpoint))
    with pytest.raises(TypeError, match="URLs"):
        vp.dicom.scan(tmp_path, storage_options=options(endpoint))
    with pytest.raises(InvalidArgumentError, match="storage_options"):
        vp.load_dicom(f"s3://{BUCKET}/study/", storage_options={"no_such_option": 1})


def test_environment_configures_the_store(s3, monkeypatch):
    endpoint, _, root = s3
    for name, value in (("AWS_ENDPOINT_URL", endpoint), ("AWS_ALLOW_HTTP", "true"),
                        ("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    img = vp.load_dicom(f"s3://{BUCKET}/cases/oblique/")
    local = vp.load_dicom(root / "cases" / "oblique")
    assert img.get_fdata().tobytes() == local.get_fdata().tobytes()


def test_pickle_sends_urls_and_etags_and_reads_those_versions(s3, cases):
    endpoint, client, root = s3
    remote, local = cases["4d"]
    blob = pickle.dumps(remote)
    # The image's data and the Series' URLs and ETags, never the objects' bytes.
    assert len(pickle.dumps(remote.dicom)) < 4096 < sum(
        p.stat().st_size for p in (root / "cases" / "4d").iterdir())
    again = pickle.loads(blob)
    assert np.asarray(again.dataobj).tobytes() == np.asarray(local.dataobj).tobytes()
    assert again.affine.tobytes() == local.affine.tobytes()
    # The Series is scanned again on first use, from the same versions of the objects.
    assert_same_series(again.dicom, local.dicom, root)
    assert again.dicom.get_data(None).tobytes() == np.asarray(local.dataobj).tobytes()
    assert pickle.loads(pickle.dumps(again.dicom)).files == remote.dicom.files

    # Replaced after pickling: the receiver refuses the new version rather than mix them.
    prefix = "changing/"
    for p in sorted((root / "cases" / "oblique").iterdir()):
        client.upload_file(os.fspath(p), BUCKET, prefix + p.name)
    img = vp.load_dicom(f"s3://{BUCKET}/{prefix}", storage_options=options(endpoint))
    series_blob = pickle.dumps(img.dicom)
    first = img.dicom.files[0][0].rsplit("/", 1)[1]
    other = sorted((root / "cases" / "4d").iterdir())[0]
    client.upload_file(os.fspath(other), BUCKET, prefix + first)
    series = pickle.loads(series_blob)
    assert series._core_series is None  # nothing is read before it is used
    with pytest.raises(VoxpipeIOError, match="changed since it was listed") as e:
        series.shape
    assert e.value.path == img.dicom.files[0][0]


def test_local_series_pickles_as_its_paths(s3, tmp_path):
    # The same mechanism for files: paths, scanned again on first use, the split label kept
    # (the parts of one SeriesInstanceUID split by image size).
    _, _, root = s3
    uid = generate_uid()
    write_series(os.fspath(tmp_path), "axial", n=3, series_uid=uid, name="a")
    write_series(os.fspath(tmp_path), "axial", n=4, series_uid=uid, rows=8, cols=6, name="b")
    parts = vp.dicom.scan(tmp_path)
    assert {s.split for s in parts} == {"10x12", "6x8"}
    for series in [*vp.dicom.scan(root / "study"), *parts]:
        again = pickle.loads(pickle.dumps(series))
        assert again._core_series is None  # nothing read before it is used
        twice = pickle.loads(pickle.dumps(again))  # pickled again before it is used
        assert twice.files == series.files and twice.split == series.split
        assert again.files == series.files and again.split == series.split
        assert again.get_data().tobytes() == series.get_data().tobytes()
        assert again.dataset.SOPInstanceUID == series.dataset.SOPInstanceUID


def test_reads_are_pinned_to_the_listed_etag(s3):
    # An object replaced between the listing and its GET fails; the series is never assembled
    # from two versions.
    endpoint, client, root = s3
    prefix = "pinned/"
    paths = sorted((root / "cases" / "oblique").iterdir())
    for p in paths:
        client.upload_file(os.fspath(p), BUCKET, prefix + p.name)
    listed = _remote_dicom._list(f"s3://{BUCKET}/{prefix}", True, options(endpoint), {})
    assert [o.url for o in listed] == [f"s3://{BUCKET}/{prefix}{p.name}" for p in paths]
    assert all(o.etag for o in listed)
    got = _remote_dicom.fetch_listed(listed, options(endpoint))
    assert [bytes(o.data) for o in got] == [p.read_bytes() for p in paths]
    client.upload_file(os.fspath(paths[0]), BUCKET, prefix + paths[2].name)
    with pytest.raises(VoxpipeIOError, match="changed since it was listed") as e:
        _remote_dicom.fetch_listed(listed, options(endpoint))
    assert e.value.path == listed[2].url


def test_http_object_url(httpserver, s3):
    _, _, root = s3
    path = root / "cases" / "enhanced" / "enhanced.dcm"
    httpserver.expect_request("/dicom/enhanced.dcm").respond_with_data(
        path.read_bytes(), content_type="application/dicom")
    url = httpserver.url_for("/dicom/enhanced.dcm")
    remote = vp.load_dicom(url, dtype=np.float64, storage_options={"allow_http": True})
    local = vp.load_dicom(path, dtype=np.float64)
    assert np.asarray(remote.dataobj).tobytes() == np.asarray(local.dataobj).tobytes()
    assert remote.affine.tobytes() == local.affine.tobytes()
    assert {f for f, _ in remote.dicom.files} == {url}


DEVICE_CHECK = """
import sys
import numpy as np
import voxpipe as vp
url, endpoint = sys.argv[1:3]
opts = dict(access_key_id="testing", secret_access_key="testing", region="us-east-1",
            endpoint=endpoint, allow_http=True)
series = vp.dicom.scan(url, storage_options=opts)[0]
for dtype in (np.float32, None):
    host = series.get_data(dtype)
    on_device = series.get_data(dtype, device="cuda")
    assert on_device.device.startswith("cuda"), on_device.device
    assert on_device.shape == host.shape and on_device.dtype == host.dtype
    assert on_device.cpu().tobytes(order="F") == host.tobytes(order="F")
print("checked", series.shape)
"""


@pytest.mark.skipif(not vp.cuda_status().kernels_built, reason="CUDA kernels not built")
def test_remote_series_to_the_device(s3, fake_driver):
    # On the stand-in driver (a real GPU where there is one): the device copy of a series from
    # URLs equals its host values.
    import subprocess
    import sys
    endpoint, _, _ = s3
    env = dict(os.environ)
    if "fake" in " ".join(vp.cuda_status().device_names) or not vp.cuda_status().available:
        env["LD_LIBRARY_PATH"] = fake_driver + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    for case in ("4d", "MR_small_RLE.dcm"):
        r = subprocess.run([sys.executable, "-c", DEVICE_CHECK, f"s3://{BUCKET}/cases/{case}/",
                            endpoint], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
        assert r.stdout.strip().startswith("checked ")


class CountingServer:
    """A threaded HTTP server on 127.0.0.1 serving `files` ({path: bytes}), each answer held
    back `delay` seconds, counting the GETs of each path and the most held back at once (a
    request counts until its answer starts, so the count never exceeds what the client has in
    flight)."""

    def __init__(self, files: dict[str, bytes], delay: float = 0.05):
        self.files, self.delay = files, delay
        self.gets: dict[str, int] = {}
        self.now = self.peak = 0
        lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                with lock:
                    server.gets[self.path] = server.gets.get(self.path, 0) + 1
                    server.now += 1
                    server.peak = max(server.peak, server.now)
                time.sleep(server.delay)
                with lock:
                    server.now -= 1
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", f'"{hash(body) & 0xFFFFFFFF:x}"')
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_objects_are_fetched_concurrently_once_each_with_a_bound(tmp_path):
    # 24 objects named by URL on a server that answers each in 50 ms: several GETs in flight,
    # never more than FETCHES, each object fetched once; the series equals the local one.
    write_series(os.fspath(tmp_path), "axial", n=24, seed=7)
    paths = sorted(tmp_path.iterdir())
    server = CountingServer({f"/s/{p.name}": p.read_bytes() for p in paths})
    try:
        urls = [f"{server.base}/s/{p.name}" for p in paths]
        remote = vp.load_dicom(urls + urls[:3], storage_options={"allow_http": True})
        local = vp.load_dicom(paths + paths[:3])
        assert np.asarray(remote.dataobj).tobytes() == np.asarray(local.dataobj).tobytes()
        assert remote.dicom.files == [(f"{server.base}/s/{Path(p).name}", f)
                                      for p, f in local.dicom.files]
        assert server.gets == {f"/s/{p.name}": 1 for p in paths}
        assert 1 < server.peak <= _remote_dicom.FETCHES
    finally:
        server.close()
