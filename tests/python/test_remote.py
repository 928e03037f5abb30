"""vp.load of URLs: .nii and .nii.gz objects on a local S3-protocol server (moto's, started
here) and an HTTP server, against nibabel's values for the same files; configuration by
storage_options and by the environment; errors naming the URL."""

import os
import pickle

import numpy as np
import nibabel as nib
import pytest

import voxpipe as vp
from s3_server import S3Server
from voxpipe.errors import VoxpipeFileNotFoundError, VoxpipeIOError

moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")
pytest.importorskip("obstore")

BUCKET = "voxpipe-test"
KEYS = {"access_key_id": "testing", "secret_access_key": "testing", "region": "us-east-1"}


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on a free localhost port, with a bucket of NIfTI files, and the
    local copies they came from."""
    server = S3Server(BUCKET)
    endpoint, client = server.endpoint, server.client
    d = tmp_path_factory.mktemp("remote")
    rng = np.random.default_rng(5)
    data = rng.integers(-2000, 2000, size=(24, 20, 16, 4), dtype=np.int16)
    img = nib.Nifti1Image(data, np.diag([2.0, 2.5, 3.0, 1.0]))
    img.header.set_slope_inter(0.5, -3.0)
    files = {}
    for name in ("sub-01_bold.nii", "sub-01_bold.nii.gz"):
        nib.save(img, d / name)
        client.upload_file(str(d / name), BUCKET, f"data/{name}")
        files[name] = d / name
    vp.save(img, d / "members.nii.gz")  # voxpipe's sized gzip members
    client.upload_file(str(d / "members.nii.gz"), BUCKET, "data/members.nii.gz")
    files["members.nii.gz"] = d / "members.nii.gz"
    yield endpoint, client, files
    server.stop()


def options(endpoint):
    return dict(KEYS, endpoint=endpoint, allow_http=True)


@pytest.mark.parametrize("name", ["sub-01_bold.nii", "sub-01_bold.nii.gz", "members.nii.gz"])
def test_load_url_equals_nibabel(s3, name):
    endpoint, _, files = s3
    url = f"s3://{BUCKET}/data/{name}"
    img = vp.load(url, storage_options=options(endpoint))
    ref = nib.load(files[name])
    assert isinstance(img, nib.Nifti1Image)
    assert img.get_filename() == url
    assert img.shape == ref.shape
    np.testing.assert_array_equal(img.affine, ref.affine)
    for dtype in (np.float32, np.float64):
        got, want = img.get_fdata(dtype=dtype), ref.get_fdata(dtype=dtype)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    assert img.dataobj[..., 1].tobytes() == np.asarray(ref.dataobj[..., 1]).tobytes()
    # It pickles as its URL, options and ETag, never its bytes; the receiver fetches it again.
    img.uncache()  # get_fdata cached its float64 result, which nibabel pickles
    blob = pickle.dumps(img)
    assert len(blob) < 8192 < files[name].stat().st_size
    again = pickle.loads(blob)
    assert again.get_filename() == url
    assert again.get_fdata().tobytes() == ref.get_fdata().tobytes()


def test_environment_configures_the_store(s3, monkeypatch):
    # As for the AWS command-line tools: endpoint and credentials from the environment.
    endpoint, _, files = s3
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    img = vp.load(f"s3://{BUCKET}/data/sub-01_bold.nii.gz")
    assert img.get_fdata().tobytes() == nib.load(files["sub-01_bold.nii.gz"]).get_fdata().tobytes()


def test_missing_object_or_bucket_names_the_url(s3):
    endpoint, _, _ = s3
    for url in (f"s3://{BUCKET}/data/absent.nii.gz", "s3://no-such-bucket/data/x.nii"):
        with pytest.raises(VoxpipeFileNotFoundError) as e:
            vp.load(url, storage_options=options(endpoint))
        assert url in str(e.value) and e.value.path == url
        assert "404" in str(e.value)
        assert isinstance(e.value, FileNotFoundError)


def test_unreachable_server_is_an_io_error_naming_the_url():
    # Nothing listens on port 9: a bounded number of retries, then an error naming the URL.
    url = f"s3://{BUCKET}/data/sub-01_bold.nii"
    dead = dict(KEYS, endpoint="http://127.0.0.1:9", allow_http=True, timeout="2s",
                connect_timeout="1s")
    with pytest.raises(VoxpipeIOError) as e:
        vp.load(url, storage_options=dead)
    assert url in str(e.value) and e.value.path == url


def test_not_a_nifti_object_is_a_format_error(s3):
    endpoint, client, _ = s3
    client.put_object(Bucket=BUCKET, Key="data/readme.nii", Body=b"not a NIfTI header" * 30)
    url = f"s3://{BUCKET}/data/readme.nii"
    with pytest.raises(vp.errors.FormatError) as e:
        vp.load(url, storage_options=options(endpoint))
    assert url in str(e.value)


@pytest.mark.parametrize("ext", [".hdr", ".img", ".hdr.gz"])
def test_pairs_read_both_objects(s3, tmp_path, ext):
    # A .hdr/.img pair on a store: either name opens it; the header comes from the .hdr object
    # and the data from the .img object, as nibabel reads the local pair.
    endpoint, client, files = s3
    gz = ".gz" if ext.endswith(".gz") else ""
    local = tmp_path / f"pair.hdr{gz}"
    nib.save(nib.Nifti1Pair(nib.load(files["sub-01_bold.nii"]).get_fdata().astype(np.float32),
                            np.diag([2.0, 2.5, 3.0, 1.0])), local)
    for part in (f"pair.hdr{gz}", f"pair.img{gz}"):
        client.upload_file(str(tmp_path / part), BUCKET, f"pairs{gz}/{part}")
    img = vp.load(f"s3://{BUCKET}/pairs{gz}/pair{ext}", storage_options=options(endpoint))
    ref = nib.load(local)
    assert type(img) is nib.Nifti1Pair
    assert img.get_fdata().tobytes() == ref.get_fdata().tobytes()
    assert img.dataobj[..., 2].tobytes() == np.asanyarray(ref.dataobj[..., 2]).tobytes()
    assert img.file_map["image"].filename == f"s3://{BUCKET}/pairs{gz}/pair.img{gz}"
    again = pickle.loads(pickle.dumps(img.dataobj))
    assert np.asarray(again).tobytes() == np.asarray(img.dataobj).tobytes()


def test_bad_options_are_refused_before_any_request(s3):
    endpoint, _, _ = s3
    with pytest.raises(vp.errors.InvalidArgumentError, match="storage_options"):
        vp.load(f"s3://{BUCKET}/data/x.nii", storage_options={"no_such_option": 1})
    with pytest.raises(TypeError, match="URLs"):
        vp.load("local.nii", storage_options=options(endpoint))


def test_http_url(httpserver, s3):
    _, _, files = s3
    body = files["sub-01_bold.nii.gz"].read_bytes()
    httpserver.expect_request("/files/sub-01_bold.nii.gz").respond_with_data(
        body, content_type="application/octet-stream")
    url = httpserver.url_for("/files/sub-01_bold.nii.gz")
    img = vp.load(url, storage_options={"allow_http": True})
    assert img.get_fdata().tobytes() == nib.load(files["sub-01_bold.nii.gz"]).get_fdata().tobytes()


def test_unpickling_a_changed_object_fails(s3):
    # Every read of an image is of the version whose header it read: a proxy unpickled after
    # the object was replaced refuses to open it rather than mix two versions.
    endpoint, client, files = s3
    client.upload_file(str(files["sub-01_bold.nii"]), BUCKET, "data/changing.nii")
    url = f"s3://{BUCKET}/data/changing.nii"
    img = vp.load(url, storage_options=options(endpoint))
    blob = pickle.dumps(img.dataobj)
    assert pickle.loads(blob)[..., 0].tobytes() == img.dataobj[..., 0].tobytes()
    client.upload_file(str(files["sub-01_bold.nii.gz"]), BUCKET, "data/changing.nii")
    with pytest.raises(VoxpipeIOError, match="changed since it was opened") as e:
        pickle.loads(blob)
    assert e.value.path == url


def test_header_checks_read_only_the_leading_bytes(s3):
    # The header is checked from the first bytes of the object (inflated where gzip, member
    # after member) and equals nibabel's for every kind of file.
    endpoint, _, files = s3
    for name in files:
        img = vp.load(f"s3://{BUCKET}/data/{name}", storage_options=options(endpoint))
        assert img.header.binaryblock == nib.load(files[name]).header.binaryblock


def test_fsspec_filesystem(s3):
    # A filesystem the user already has (s3fs here) reads the object instead of voxpipe's
    # client: by its info, cat_file and cat_ranges; the image pickles with the filesystem.
    s3fs = pytest.importorskip("s3fs")
    endpoint, _, files = s3
    fs = s3fs.S3FileSystem(key="testing", secret="testing",
                           client_kwargs={"endpoint_url": endpoint, "region_name": "us-east-1"})
    ref = nib.load(files["sub-01_bold.nii"])
    for name in (f"{BUCKET}/data/sub-01_bold.nii", f"s3://{BUCKET}/data/sub-01_bold.nii"):
        img = vp.load(name, filesystem=fs)
        assert img.get_filename() == name
        assert img.get_fdata().tobytes() == ref.get_fdata().tobytes()
        assert img.dataobj[..., 1].tobytes() == np.asanyarray(ref.dataobj[..., 1]).tobytes()
        again = pickle.loads(pickle.dumps(img.dataobj))
        assert np.asarray(again).tobytes() == np.asarray(img.dataobj).tobytes()
    # A .nii.gz: its sidecar index is looked for through the filesystem too (none here).
    gz = vp.load(f"{BUCKET}/data/sub-01_bold.nii.gz", filesystem=fs)
    assert gz.get_fdata().tobytes() == nib.load(files["sub-01_bold.nii.gz"]).get_fdata().tobytes()
    assert gz.dataobj[..., 2].tobytes() == np.asanyarray(
        nib.load(files["sub-01_bold.nii.gz"]).dataobj[..., 2]).tobytes()
    with pytest.raises(VoxpipeFileNotFoundError, match="missing.nii"):
        vp.load(f"{BUCKET}/data/missing.nii", filesystem=fs)
    with pytest.raises(TypeError, match="filesystem"):
        vp.load(f"{BUCKET}/data/sub-01_bold.nii", filesystem=fs, storage_options={"region": "x"})
