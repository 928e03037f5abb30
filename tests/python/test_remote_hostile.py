"""Remote reads from a server that lies: a Content-Length of 10**15, an endless body, a body
longer than the range asked for, If-Match ignored (another version's bytes and ETag), a
Content-Range of another total. Each must be VoxpipeIOError naming the URL, after at most a
bounded number of bytes and before anything the server claims is allocated; nothing the server
sends aborts the interpreter (the whole-object case runs in a child process: obstore's bytes()
aborted it with "memory allocation of 1000000000000000 bytes failed").

Also here: presigned URLs (their query reaches the server as the query, never as part of the
object's key) and the redaction of URL credentials from every message, repr, pickle and the
command's stderr; and iter_load/load_many over NIfTI-Zarr stores on an S3 server.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from voxpipe._sources import remote as _remote
from voxpipe.errors import VoxpipeError, VoxpipeIOError

from range_server import RangeServer

pytest.importorskip("obstore")

HTTP = {"allow_http": True}
KEY = "data/sub-01_bold.nii"
SMALL = "data/sub-01_T1w.nii.gz"
HUGE = 10**15
REPO = Path(__file__).resolve().parents[2]


class Bold:
    """A 4D float32 .nii of 40 volumes of 16 KiB: volume 10 is a request of its own."""

    def __init__(self, path: Path):
        rng = np.random.default_rng(31)
        data = rng.standard_normal((16, 16, 16, 40)).astype(np.float32)
        nib.save(nib.Nifti1Image(data, np.diag([2.0, 2.0, 2.0, 1.0])), path)
        self.blob = path.read_bytes()
        self.ref = nib.load(path)
        newer = data + 1000
        nib.save(nib.Nifti1Image(newer, np.diag([2.0, 2.0, 2.0, 1.0])), path.with_name("new.nii"))
        self.newer = path.with_name("new.nii").read_bytes()  # same size, other voxels
        assert len(self.newer) == len(self.blob)

    def volume(self, t: int) -> np.ndarray:
        return np.asarray(self.ref.dataobj[..., t])


@pytest.fixture(scope="module")
def bold(tmp_path_factory):
    return Bold(tmp_path_factory.mktemp("hostile") / "sub-01_bold.nii")


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """(the bytes of a small .nii.gz, nibabel's data of it)."""
    path = tmp_path_factory.mktemp("hostile") / "sub-01_T1w.nii.gz"
    data = np.random.default_rng(32).integers(-900, 900, size=(12, 10, 8), dtype=np.int16)
    nib.save(nib.Nifti1Image(data, np.eye(4)), path)
    return path.read_bytes(), nib.load(path).get_fdata()


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXPIPE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def server(bold, small):
    with RangeServer({KEY: bold.blob, SMALL: small[0]}) as s:
        yield s


def opened(server, key=KEY):
    img = vp.load(server.url(key), storage_options=HTTP)
    server.reset()
    return img


# ---- sizes a server claims ------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import sys
    import voxpipe as vp
    from voxpipe.errors import VoxpipeIOError
    load = {"load_many": lambda u, **k: vp.load_many([u], **k),
            "iter_load": lambda u, **k: list(vp.iter_load([u], **k)),
            "load_dicom": vp.load_dicom}[sys.argv[2]]
    try:
        load(sys.argv[1], storage_options={"allow_http": True})
    except VoxpipeIOError as exc:
        print("VoxpipeIOError:", exc)
""")


@pytest.mark.parametrize("reader", ["load_many", "iter_load", "load_dicom"])
def test_a_whole_get_claiming_10_to_the_15_bytes_is_refused_not_an_abort(server, reader):
    # The many-file loaders and the DICOM reader fetch a URL whole: the answer's Content-Length
    # is refused before anything is allocated. In a child: the code before this aborted the
    # interpreter.
    server.claim_length(SMALL, HUGE)
    r = subprocess.run([sys.executable, "-c", CHILD, server.url(SMALL), reader],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"VoxpipeIOError: {server.url(SMALL)}: the response claims {HUGE} bytes" in r.stdout
    assert "more than this machine's memory" in r.stdout


def test_an_endless_body_is_cut_off_after_one_chunk(server, bold):
    img = opened(server)
    server.endless(KEY)
    start = time.monotonic()
    with pytest.raises(VoxpipeIOError, match="holds more") as info:
        np.asarray(img.dataobj[..., 10])
    assert time.monotonic() - start < 5  # not the 10 s the body would run
    assert server.url(KEY) in str(info.value)
    # What the server managed to send before the client hung up: a few chunks, not gigabytes.
    assert server.bytes_sent(KEY) < 64 << 20
    # The next read, answered honestly, is the object's.
    assert np.array_equal(np.asarray(img.dataobj[..., 10]), bold.volume(10))


def test_an_endless_whole_body_is_refused(server):
    server.endless(SMALL)
    with pytest.raises(VoxpipeIOError, match=f"claims {HUGE} bytes"):
        vp.load_many([server.url(SMALL)], storage_options=HTTP)


def test_a_body_longer_than_its_range_is_an_error_never_cut_to_size(server, bold):
    img = opened(server)
    server.longer(KEY, 100)
    with pytest.raises(VoxpipeIOError, match="holds more") as info:
        np.asarray(img.dataobj[..., 10])
    assert info.value.field == "Content-Length"
    assert np.array_equal(np.asarray(img.dataobj[..., 10]), bold.volume(10))


def test_a_ranged_answer_shorter_than_its_content_range_is_an_io_error(server, bold):
    # Content-Range names the 16 KiB asked for; Content-Length claims 100 bytes fewer, so the
    # body the client reads is short: an answer that contradicts itself, refused as it arrives.
    img = opened(server)
    offset = img.dataobj.offset + 10 * 16384
    server.claim_length(KEY, 16384 - 100)
    with pytest.raises(VoxpipeIOError) as info:
        np.asarray(img.dataobj[..., 10])
    assert str(info.value) == (f"{server.url(KEY)}: expected 16384 bytes from byte {offset}, "
                               f"but the response holds 16284 (at byte {offset + 16284})")
    assert np.array_equal(np.asarray(img.dataobj[..., 10]), bold.volume(10))


def test_an_open_longer_than_its_range_is_an_error(server):
    server.longer(KEY, 1)
    with pytest.raises(VoxpipeIOError, match="holds more"):
        vp.load(server.url(KEY), storage_options=HTTP)


# ---- other versions ---------------------------------------------------------------------------

def test_a_server_ignoring_if_match_cannot_mix_versions(server, bold):
    img = opened(server)
    old_etag = server.etag(KEY)
    server.put(KEY, bold.newer)  # same size, new ETag
    server.ignore_if_match(KEY)
    with pytest.raises(VoxpipeIOError, match="object changed since it was opened") as info:
        np.asarray(img.dataobj[..., 10])
    assert info.value.field == "ETag"
    assert server.etag(KEY) in str(info.value)
    # The request was pinned; the server answered 206 with the new bytes all the same.
    entry = server.log(KEY)[-1]
    assert entry.headers["if-match"] == old_etag and entry.status == 206


def test_a_server_ignoring_if_match_cannot_mix_versions_of_a_gzip_object(tmp_path, bold):
    # A .nii.gz read whole after its first 64 KiB (opened) came from the old version: every
    # later ranged answer is the newer object's, with its ETag.
    old, new = tmp_path / "old.nii.gz", tmp_path / "new.nii.gz"
    nib.save(bold.ref, old)
    nib.save(nib.Nifti1Image(bold.ref.get_fdata(dtype=np.float32) + 1000, bold.ref.affine), new)
    assert old.stat().st_size > 4 * _remote.HEAD_BYTES
    key = "data/sub-01_bold.nii.gz"
    with RangeServer({key: old.read_bytes()}) as s:
        img = vp.load(s.url(key), storage_options=HTTP)
        s.put(key, new.read_bytes())
        s.ignore_if_match(key)
        with pytest.raises(VoxpipeIOError, match="object changed since it was opened"):
            img.get_fdata()
        assert any(r.status == 206 and r.headers.get("if-match") for r in s.log(key))


def test_a_server_ignoring_if_match_cannot_mix_versions_of_a_dicom_series(server, small):
    # A DICOM series reopened (after pickling) reads the versions it was listed with.
    from voxpipe._sources import listing as _remote_dicom
    [obj] = _remote_dicom.fetch_pinned([server.url(SMALL)], [None], HTTP)
    assert bytes(obj.data) == small[0]
    server.put(SMALL, small[0][::-1])
    server.ignore_if_match(SMALL)
    with pytest.raises(VoxpipeIOError, match="object changed since it was listed") as info:
        _remote_dicom.fetch_pinned([server.url(SMALL)], [obj.etag], HTTP)
    assert info.value.field == "ETag"
    assert server.log(SMALL)[-1].headers["if-match"] == obj.etag


def test_a_server_ignoring_if_match_cannot_mix_versions_in_a_whole_read(server, small):
    obj = _remote.fetch(server.url(SMALL), HTTP)
    server.put(SMALL, small[0] + b"\0")
    server.ignore_if_match(SMALL)
    with pytest.raises(VoxpipeIOError, match="object changed since it was opened"):
        _remote.fetch(server.url(SMALL), HTTP, etag=obj.etag)


def test_a_content_range_of_another_total_is_another_object(server, bold):
    img = opened(server)
    server.wrong_total(KEY, len(bold.blob) + 4096)
    with pytest.raises(VoxpipeIOError, match="object changed") as info:
        np.asarray(img.dataobj[..., 10])
    assert info.value.field == "Content-Range"
    assert f"{len(bold.blob) + 4096} bytes, not {len(bold.blob)}" in str(info.value)


# ---- presigned URLs and secrets ---------------------------------------------------------------

SECRET = "s3cr3tS1gnature"
QUERY = ("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDEXAMPLE%2F20260101%2Fus-east-1"
         f"%2Fs3%2Faws4_request&X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600"
         f"&X-Amz-SignedHeaders=host&X-Amz-Signature={SECRET}")


def presigned(server, key, query=QUERY):
    return f"{server.url(key)}?{query}"


def test_a_presigned_url_reads_with_its_query_sent_as_the_query(server, bold):
    server.require_query(KEY, QUERY)
    img = vp.load(presigned(server, KEY), storage_options=HTTP)
    assert np.array_equal(np.asarray(img.dataobj[..., 10]), bold.volume(10))
    assert np.array_equal(img.get_fdata(), bold.ref.get_fdata())
    log = server.log(KEY)
    assert len(log) >= 2 and all(r.query == QUERY and r.status in (200, 206) for r in log)
    assert server.requests() == len(log)  # no request for another key ("...nii?X-Amz-...")
    # The many-file loaders fetch it whole, with its query too.
    [arr] = vp.load_many([presigned(server, KEY)], storage_options=HTTP)
    assert np.array_equal(arr, bold.ref.get_fdata(dtype=np.float32))
    # The image's repr does not show the signature; its pickle keeps the URL it needs.
    assert SECRET not in repr(img.dataobj) and "X-Amz-Signature=REDACTED" in repr(img.dataobj)
    again = pickle.loads(pickle.dumps(img))
    assert np.array_equal(np.asarray(again.dataobj[..., 3]), bold.volume(3))


def test_a_presigned_dicom_url_reads_with_its_query_sent_as_the_query(tmp_path):
    pytest.importorskip("pydicom")
    from pydicom.data import DATA_ROOT
    path = Path(DATA_ROOT) / "test_files" / "CT_small.dcm"
    key = "dicom/CT_small.dcm"
    with RangeServer({key: path.read_bytes()}) as s:
        s.require_query(key, QUERY)
        remote = vp.load_dicom(presigned(s, key), dtype=np.float64, storage_options=HTTP)
        local = vp.load_dicom(path, dtype=np.float64)
        assert np.asarray(remote.dataobj).tobytes() == np.asarray(local.dataobj).tobytes()
        assert remote.affine.tobytes() == local.affine.tobytes()
        assert s.log(key) and all(r.query == QUERY and r.status == 200 for r in s.log(key))
        assert s.requests() == len(s.log(key))


def _assert_redacted(text: str, *secrets: str) -> None:
    for s in secrets:
        assert s not in text, text
    assert "REDACTED" in text, text


def test_credentials_never_reach_an_error_its_repr_or_pickle(server):
    server.require_query(KEY, QUERY)
    wrong = presigned(server, KEY, QUERY.replace(SECRET, "wrongSignature9"))
    with pytest.raises(VoxpipeIOError, match="403") as info:
        vp.load(wrong, storage_options=HTTP)
    exc = info.value
    for text in (str(exc), repr(exc), exc.path, "".join(getattr(exc, "__notes__", []))):
        assert "wrongSignature9" not in text and "AKIDEXAMPLE" not in text
    _assert_redacted(str(exc), "wrongSignature9")
    assert "X-Amz-Date=20260101T000000Z" in str(exc)  # what is not secret stays
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is VoxpipeIOError and str(back) == str(exc) and back.path == exc.path
    _assert_redacted(pickle.dumps(exc).decode("latin-1"), "wrongSignature9", "AKIDEXAMPLE")
    # Nor does a traceback, nor a pickle that keeps the exceptions the error was raised from or
    # during (tblib's, which dask.distributed installs to ship a task's error to its client):
    # obstore's own error names the URL whole, so it must not travel with voxpipe's.
    import traceback

    _assert_redacted("".join(traceback.format_exception(exc)), "wrongSignature9", "AKIDEXAMPLE")
    assert exc.__cause__ is None and exc.__context__ is None
    tblib_pickling = pytest.importorskip("tblib.pickling_support")
    tblib_pickling.install(exc)
    _assert_redacted(pickle.dumps(exc).decode("latin-1"), "wrongSignature9", "AKIDEXAMPLE")

    # User-info: the password is never shown.
    url = server.url("data/missing.nii").replace("http://", "http://user:PASSW0RD@")
    with pytest.raises(VoxpipeError) as info:
        vp.load(url, storage_options=HTTP)
    _assert_redacted(str(info.value), "PASSW0RD")
    assert "http://REDACTED@127.0.0.1" in str(info.value)


def test_a_skipped_url_warning_holds_no_credentials(server):
    wrong = presigned(server, "data/missing.nii")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert list(vp.iter_load([wrong], storage_options=HTTP, on_error="skip")) == []
    [w] = [w for w in caught if issubclass(w.category, vp.errors.SkippedFileWarning)]
    _assert_redacted(str(w.message), SECRET, "AKIDEXAMPLE")


CLI = Path(os.environ.get("VOXPIPE_CLI") or REPO / ".venv" / "bin" / "voxpipe")


@pytest.mark.skipif(not CLI.is_file(), reason=f"{CLI} not built/installed")
def test_the_command_prints_no_credentials(server, tmp_path):
    server.require_query(KEY, QUERY)
    env = dict(os.environ, VOXPIPE_PYTHON=sys.executable, VOXPIPE_CACHE_DIR=str(tmp_path))
    wrong = presigned(server, KEY, QUERY.replace(SECRET, "wrongSignature9"))
    for url in (wrong, server.url("data/missing.nii").replace("http://", "http://u:PASSW0RD@")):
        r = subprocess.run([str(CLI), "info", url], capture_output=True, text=True, timeout=120,
                           env=env)
        assert r.returncode != 0
        assert "wrongSignature9" not in r.stderr and "PASSW0RD" not in r.stderr, r.stderr
        assert "AKIDEXAMPLE" not in r.stderr and "REDACTED" in r.stderr, r.stderr


# ---- NIfTI-Zarr stores among the many-file loaders' URLs -------------------------------------

def test_iter_load_and_load_many_read_zarr_stores_on_s3(tmp_path):
    pytest.importorskip("zarr")
    from s3_server import S3Server
    server = S3Server("zarr-many")
    try:
        rng = np.random.default_rng(33)
        refs, urls = [], []
        for k in range(2):
            src = tmp_path / f"s{k}.nii.gz"
            img = nib.Nifti1Image(rng.integers(-300, 300, (10, 9, 7, 3), dtype=np.int16),
                                  np.diag([1.5, 1.5, 2.0, 1.0]))
            img.header.set_slope_inter(0.5, float(k))
            nib.save(img, src)
            out = tmp_path / f"s{k}.nii.zarr"
            vp.save(vp.load(src), out)
            for root, _, files in os.walk(out):
                for f in files:
                    key = os.path.relpath(os.path.join(root, f), tmp_path)
                    server.client.upload_file(os.path.join(root, f), "zarr-many", key)
            refs.append(nib.load(src).get_fdata(dtype=np.float32))
            urls.append(f"s3://zarr-many/s{k}.nii.zarr")
        server.client.upload_file(str(tmp_path / "s0.nii.gz"), "zarr-many", "s0.nii.gz")
        urls.append("s3://zarr-many/s0.nii.gz")  # an object fetched whole, between stores
        refs.append(refs[0])
        options = server.storage_options()
        got = vp.load_many(urls, storage_options=options)
        assert all(np.array_equal(a, r) for a, r in zip(got, refs, strict=True))
        with vp.iter_load(urls, storage_options=options) as it:
            assert all(np.array_equal(a, r) for a, r in zip(it, refs, strict=True))
        batch = vp.load_batch(urls[:2], storage_options=options)
        assert np.array_equal(batch, np.stack(refs[:2]))
    finally:
        server.stop()


def test_a_failed_request_leaves_no_reference_cycle_holding_the_image(server):
    """The errors of failed requests are raised unchained, from a local name (above): that name
    is cleared as the error leaves, or the error's traceback, whose frames hold the reader and
    its image, and the frame holding the error make a cycle that keeps every image read (and its
    data) alive until the garbage collector runs: 57 MB per T1 file in a loop of vp.load(url)
    over objects without a sidecar index, whose lookup (a 404) fails by design."""
    import gc
    import weakref

    gc.collect()
    gc.disable()
    try:
        img = vp.load(server.url(SMALL), storage_options=HTTP)  # no .gzidx beside it: a 404
        assert np.array_equal(img.get_fdata(), server_small_values(server))
        alive = weakref.ref(img)
        del img
        assert alive() is None, "the image is kept alive by a reference cycle"
        wrong = presigned(server, KEY, QUERY.replace(SECRET, "wrongSignature9"))
        server.require_query(KEY, QUERY)
        try:
            vp.load(wrong, storage_options=HTTP)
        except VoxpipeIOError as exc:
            # The frames the error passed through (not this test's own, which catches it).
            frames = [tb.tb_frame for tb in _walk(exc.__traceback__)][1:]
            assert frames and not [f.f_code.co_name for f in frames
                                   if any(v is exc for v in f.f_locals.values())]
        else:
            raise AssertionError("a wrong signature was read")
    finally:
        gc.enable()


def _walk(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def server_small_values(server):
    return nib.Nifti1Image.from_bytes(__import__("gzip").decompress(server.data(SMALL))).get_fdata()
