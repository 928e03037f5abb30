"""URLs in the many-file loaders (iter_load, load_many, load_batch, VolumeDataset): objects on a
local S3-protocol server (moto's, started here), alone and mixed with local paths, equal to
nibabel's values for the local copies; errors naming the URL and its position; fetched bytes
counted against max_inflight_bytes; GETs running ahead, several at once, on a counting HTTP
server; a DataLoader with worker processes over URLs equal to the same dataset of local files."""

from __future__ import annotations

import http.server
import os
import pickle
import threading
import time
import warnings

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from s3_server import S3Server
from voxpipe.errors import VoxpipeFileNotFoundError

moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")
pytest.importorskip("obstore")

BUCKET = "voxpipe-many"
KEYS = {"access_key_id": "testing", "secret_access_key": "testing", "region": "us-east-1"}
SHAPE = (21, 17, 9)


def _files(d):
    """Local files of one shape: .nii and .nii.gz, several stored dtypes, one scaled, one
    big-endian, one in voxpipe's sized gzip members."""
    rng = np.random.default_rng(7)
    out = []

    def write(name, data, slope=None, inter=None):
        img = nib.Nifti1Image(data, np.diag([2.0, 2.5, 3.0, 1.0]))
        if slope is not None:
            img.header.set_slope_inter(slope, inter)
        nib.save(img, d / name)
        out.append(d / name)

    write("a_int16_scaled.nii.gz", rng.integers(-2000, 2000, SHAPE, dtype=np.int16), 0.5, -3.0)
    write("b_float32.nii", rng.standard_normal(SHAPE).astype(np.float32))
    write("c_uint8.nii.gz", rng.integers(0, 255, SHAPE, dtype=np.uint8))
    write("d_int32_big.nii", rng.integers(-10**6, 10**6, SHAPE, dtype=np.int32).astype(">i4"))
    write("e_float64.nii.gz", rng.standard_normal(SHAPE))
    vp.save(vp.load(out[0]), d / "f_members.nii.gz")
    out.append(d / "f_members.nii.gz")
    return out


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on a free localhost port with the files under data/, their URLs, the
    local copies and the storage options that reach it."""
    server = S3Server(BUCKET)
    endpoint, client = server.endpoint, server.client
    files = _files(tmp_path_factory.mktemp("remote_many"))
    urls = []
    for f in files:
        client.upload_file(str(f), BUCKET, f"data/{f.name}")
        urls.append(f"s3://{BUCKET}/data/{f.name}")
    yield urls, [str(f) for f in files], dict(KEYS, endpoint=endpoint, allow_http=True)
    server.stop()


def _nib(path, dtype):
    img = nib.load(path)
    if dtype is None:
        return np.asanyarray(img.dataobj)
    if np.dtype(dtype).kind == "f":
        return img.get_fdata(dtype=dtype)
    return np.asarray(img.dataobj, dtype=dtype)


def _same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes(order="F") == np.asarray(b).tobytes(order="F")


def _notes(exc):
    return " ".join(getattr(exc, "__notes__", []))


@pytest.mark.parametrize("dtype", [np.float32, None, np.float64])
def test_iter_load_of_urls_equals_nibabel(s3, dtype):
    urls, files, opts = s3
    got = list(vp.iter_load(urls, dtype, threads=2, storage_options=opts))
    assert len(got) == len(files)
    for arr, f in zip(got, files):
        _same(arr, _nib(f, dtype))


@pytest.mark.parametrize("io_threads", [None, 1])
def test_local_paths_and_urls_in_one_list(s3, io_threads):
    urls, files, opts = s3
    mixed = [u if k % 2 else f for k, (u, f) in enumerate(zip(urls, files))]
    mixed += list(reversed(mixed))
    got = vp.load_many(mixed, threads=2, io_threads=io_threads, storage_options=opts)
    for arr, f in zip(got, files + list(reversed(files))):
        _same(arr, _nib(f, np.float32))
    # images=True: nibabel images named by their URL, pickling as URL and options, not bytes.
    imgs = vp.load_many(mixed[:4], images=True, storage_options=opts)
    for img, p, f in zip(imgs, mixed, files):
        assert img.get_filename() == p
        np.testing.assert_array_equal(img.affine, nib.load(f).affine)
        _same(img.get_fdata(dtype=np.float32), _nib(f, np.float32))
    again = pickle.loads(pickle.dumps(imgs[1].dataobj))
    _same(np.asanyarray(again), _nib(files[1], None))


def test_load_batch_of_urls_writes_into_out(s3):
    urls, files, opts = s3
    paths = urls + files[:2]
    out = vp.empty_batch(len(paths), SHAPE, np.float32)
    assert vp.load_batch(paths, out, threads=2, storage_options=opts) is out
    for k, f in enumerate(files + files[:2]):
        _same(out[k], _nib(f, np.float32))
    # dtype=None needs one data dtype: the first file that differs is named by its URL.
    with pytest.raises(ValueError, match="one data dtype") as e:
        vp.load_batch(urls, dtype=None, storage_options=opts)
    assert urls[1] in str(e.value)
    same = vp.load_batch([urls[2], files[2]], dtype=None, storage_options=opts)
    _same(same[0], _nib(files[2], None))
    _same(same[1], _nib(files[2], None))


def test_a_missing_object_names_its_url_and_position(s3):
    urls, files, opts = s3
    missing = f"s3://{BUCKET}/data/absent.nii.gz"
    paths = [files[0], urls[1], missing, urls[3]]
    got = []
    with pytest.raises(VoxpipeFileNotFoundError) as e:
        for arr in vp.iter_load(paths, threads=2, storage_options=opts):
            got.append(arr)
    assert missing in str(e.value) and e.value.path == missing and "404" in str(e.value)
    assert "input 2" in _notes(e.value)
    assert len(got) == 2  # the files before it, delivered and equal to nibabel's
    _same(got[1], _nib(files[1], np.float32))
    for call in (vp.load_many, vp.load_batch):
        with pytest.raises(VoxpipeFileNotFoundError) as e:
            call(paths, storage_options=opts)
        assert missing in str(e.value) and "input 2" in _notes(e.value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept = vp.load_many(paths, on_error="skip", storage_options=opts)
    skipped = [str(w.message) for w in caught if issubclass(w.category, vp.SkippedFileWarning)]
    assert len(skipped) == 1 and skipped[0].startswith(f"skipped {missing} (input 2): ")
    for arr, f in zip(kept, [files[0], files[1], files[3]]):
        _same(arr, _nib(f, np.float32))


def test_fetched_bytes_count_against_max_inflight_bytes(s3):
    # With a budget of 0 one file at a time is held for the caller: its decoded data and the
    # object's bytes, both counted.
    urls, files, opts = s3
    it = vp.iter_load(urls, max_inflight_bytes=0, storage_options=opts)
    for arr, f in zip(it, files):
        _same(arr, _nib(f, np.float32))
    decoded = int(np.prod(SHAPE)) * 4
    assert it.peak_inflight_bytes == decoded + max(os.path.getsize(f) for f in files)
    local = vp.iter_load(files, max_inflight_bytes=0)
    list(local)
    assert local.peak_inflight_bytes == decoded  # local files: their decoded data only


class _SlowServer(http.server.ThreadingHTTPServer):
    """Serves files from a folder, each GET answered after `delay` seconds, counting the GETs
    in progress at once."""

    daemon_threads = True

    def __init__(self, folder, delay):
        self.folder, self.delay = folder, delay
        self.lock = threading.Lock()
        self.now = self.most = self.gets = 0
        super().__init__(("127.0.0.1", 0), _SlowHandler)


class _SlowHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        srv = self.server
        with srv.lock:
            srv.now += 1
            srv.gets += 1
            srv.most = max(srv.most, srv.now)
        try:
            time.sleep(srv.delay)
            body = open(os.path.join(srv.folder, self.path.rsplit("/", 1)[1]), "rb").read()
        finally:
            # Counted out before the answer goes: a client that has the whole body may start
            # its next GET before this thread would run again.
            with srv.lock:
                srv.now -= 1
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def slow_http(s3):
    _, files, _ = s3
    server = _SlowServer(os.path.dirname(files[0]), delay=0.15)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/files/"
    yield server, [base + os.path.basename(f) for f in files], files
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("kwargs,most", [({"io_threads": 3}, 3), ({"max_inflight_bytes": 0}, 1)])
def test_gets_run_ahead_several_at_once_within_limits(slow_http, kwargs, most):
    server, urls, files = slow_http
    got = vp.load_many(urls * 2, threads=2, storage_options={"allow_http": True}, **kwargs)
    for arr, f in zip(got, files * 2):
        _same(arr, _nib(f, np.float32))
    assert server.gets == 2 * len(files)  # one GET per object
    assert server.most == most


def test_volume_dataset_over_urls_in_dataloader_workers(s3):
    torch = pytest.importorskip("torch")
    import voxpipe.torch as vpt
    from torch.utils.data import DataLoader

    urls, files, opts = s3
    labels = list(range(len(urls)))
    remote = vpt.VolumeDataset(urls, labels=labels, meta=True, storage_options=opts)
    back = pickle.loads(pickle.dumps(remote))
    assert back.paths == urls and back.storage_options == opts
    _same(remote[0][0].numpy(), _nib(files[0], np.float32))
    local = vpt.VolumeDataset(files, labels=labels, meta=True)
    want = {}
    for volumes, batch_labels, meta in DataLoader(local, batch_size=3, collate_fn=vpt.collate):
        for k, i in enumerate(batch_labels.tolist()):
            want[i] = (volumes[k].numpy().copy(), meta["affine"][k].numpy())
    got = {}
    loader = DataLoader(remote, batch_size=3, num_workers=2, collate_fn=vpt.collate,
                        multiprocessing_context="spawn", timeout=120)
    for volumes, batch_labels, meta in loader:
        assert isinstance(volumes, torch.Tensor) and volumes.shape == (3,) + SHAPE
        for k, i in enumerate(batch_labels.tolist()):
            got[i] = (volumes[k].numpy().copy(), meta["affine"][k].numpy())
            assert meta["filename_or_obj"][k] == urls[i]
    assert sorted(got) == labels
    for i, f in enumerate(files):
        _same(got[i][0], want[i][0])
        _same(got[i][0], _nib(f, np.float32))
        np.testing.assert_array_equal(got[i][1], want[i][1])
