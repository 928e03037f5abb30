"""Remote reads when the server misbehaves: retried 5xx and 429 answers, 403 and 404, truncated
bodies, stalls, an object replaced between reads, a server that ignores Range. Each case runs
against range_server.RangeServer (a real HTTP/1.1 server on 127.0.0.1, started per test) and
checks both what voxpipe returns or raises and the requests the server saw.

vp.load of a URL opens the object for reads by byte ranges (voxpipe._sources.remote.RemoteFile): one GET
of ``Range: bytes=0-65535`` tells the size and ETag and holds the header; every later request is
a ranged GET with If-Match: that ETag. The small .nii.gz here fits in that first answer, so its
faults hit the open; the 4D .nii is larger, so a volume read is a request of its own and its
faults hit a data read. Retries, backoff and timeouts are obstore's; the cases that need them
bounded below the defaults (10 retries within 3 minutes) pass obstore's ``retry_config`` through
``storage_options``.
"""

from __future__ import annotations

import gzip
import http.client
import pickle
import time
from datetime import timedelta

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from voxpipe.errors import VoxpipeFileNotFoundError, VoxpipeIOError

from range_server import RangeServer

obstore = pytest.importorskip("obstore")
obstore_store = pytest.importorskip("obstore.store")
obstore_exceptions = pytest.importorskip("obstore.exceptions")

KEY = "data/sub-01_T1w.nii.gz"
BOLD = "data/sub-01_bold.nii"
HTTP = {"allow_http": True}
OPEN = "bytes=0-65535"  # the first request of every ranged open
# Few, fast retries: the cases that exhaust them end in well under a second.
FAST_RETRIES = {"max_retries": 2, "retry_timeout": timedelta(seconds=5),
                "backoff": {"init_backoff": timedelta(milliseconds=10),
                            "max_backoff": timedelta(milliseconds=50), "base": 2}}


@pytest.fixture(scope="module")
def nifti(tmp_path_factory):
    """(the bytes of a small .nii.gz written by nibabel, nibabel's float64 data of it): the
    whole object comes in the first ranged GET."""
    path = tmp_path_factory.mktemp("faults") / "sub-01_T1w.nii.gz"
    rng = np.random.default_rng(20)
    data = rng.integers(-1000, 1000, size=(16, 14, 10, 3), dtype=np.int16)
    img = nib.Nifti1Image(data, np.diag([1.5, 1.5, 2.0, 1.0]))
    img.header.set_slope_inter(0.25, 10.0)
    nib.save(img, path)
    blob = path.read_bytes()
    assert 8000 < len(blob) < 65536  # a truncation leaves most of it out; one request holds it
    return blob, nib.load(path).get_fdata()


class Bold:
    """A 4D float32 .nii of 40 volumes of 16 KiB: volumes 0-2 come with the first 64 KiB, volume
    3 partly, the others are requests of their own."""

    def __init__(self, path):
        rng = np.random.default_rng(21)
        data = rng.standard_normal((16, 16, 16, 40)).astype(np.float32)
        nib.save(nib.Nifti1Image(data, np.diag([2.0, 2.0, 2.0, 1.0])), path)
        self.blob = path.read_bytes()
        self.ref = nib.load(path)
        self.volume_bytes = 16 * 16 * 16 * 4
        assert self.ref.dataobj.offset == 352 and len(self.blob) > 600_000

    def volume(self, t):
        """nibabel's voxels of volume t."""
        return np.asarray(self.ref.dataobj[..., t])

    def volume_range(self, t, skip=0):
        """The Range header of volume t's bytes (from byte ``skip`` of them on)."""
        first = self.ref.dataobj.offset + t * self.volume_bytes
        return f"bytes={first + skip}-{first + self.volume_bytes - 1}"


@pytest.fixture(scope="module")
def bold(tmp_path_factory):
    return Bold(tmp_path_factory.mktemp("faults") / "sub-01_bold.nii")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    # Seek indexes fetched for an object go to this cache: none from another run is found.
    monkeypatch.setenv("VOXPIPE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def server(nifti, bold):
    with RangeServer({KEY: nifti[0], BOLD: bold.blob}) as s:
        yield s


def statuses(server, key=KEY):
    return [(r.method, r.range, r.status) for r in server.log(key)]


def pinned(server, key, etag):
    """Whether every request for ``key`` after the first carried If-Match: ``etag``."""
    return all(r.headers.get("if-match") == etag for r in server.log(key)[1:])


# ---- the server itself: the other tests are only as good as its HTTP ----------------------

def _request(server, method, key, **headers):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request(method, "/" + key, headers=headers)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def test_server_answers_ranges_and_conditions_as_object_stores_do():
    body = bytes(range(256)) * 4
    with RangeServer({"a/b.bin": body}) as s:
        etag = s.etag("a/b.bin")
        status, h, got = _request(s, "GET", "a/b.bin")
        assert (status, got, h["ETag"], h["Accept-Ranges"]) == (200, body, etag, "bytes")
        assert h["Content-Length"] == "1024" and h["Last-Modified"].endswith("GMT")
        for rng, first, last in (("bytes=10-19", 10, 19), ("bytes=1000-", 1000, 1023),
                                 ("bytes=-5", 1019, 1023), ("bytes=1020-5000", 1020, 1023)):
            status, h, got = _request(s, "GET", "a/b.bin", Range=rng)
            assert (status, got) == (206, body[first:last + 1])
            assert h["Content-Range"] == f"bytes {first}-{last}/1024"
        status, h, _ = _request(s, "GET", "a/b.bin", Range="bytes=1024-")
        assert (status, h["Content-Range"]) == (416, "bytes */1024")
        assert _request(s, "GET", "a/b.bin", Range="bytes=0-1,5-6")[0] == 200  # several: ignored
        status, h, got = _request(s, "HEAD", "a/b.bin")
        assert (status, got, h["Content-Length"]) == (200, b"", "1024")
        assert _request(s, "GET", "a/b.bin", **{"If-Match": etag})[0] == 200
        assert _request(s, "GET", "a/b.bin", **{"If-Match": '"other"'})[0] == 412
        assert _request(s, "GET", "a/b.bin", **{"If-None-Match": etag})[0] == 304
        assert _request(s, "GET", "a/missing.bin")[0] == 404
        assert s.requests("a/b.bin") == 11 and s.requests() == 12
        # 200, four 206, 416 (no body), the 200 to several ranges, HEAD, If-Match, 412, 304.
        assert s.bytes_sent("a/b.bin") == 1024 + 10 + 24 + 5 + 4 + 1024 + 1024 + 20
        assert s.log()[1][:4] == ("GET", "a/b.bin", "bytes=10-19", 206)

        # Replacing an object changes its ETag, even to the same bytes; reset() clears counts.
        assert s.put("a/b.bin", body) != etag != s.etag("a/b.bin")
        s.reset()
        assert (s.requests(), s.bytes_sent(), s.log()) == (0, 0, [])

        # Faults: each for its count of requests, in order; a replacement after the K-th.
        s.fail("a/b.bin", 503, times=2)
        s.ignore_range("a/b.bin", times=1)
        s.replace_after("a/b.bin", 3, b"new")
        answers = [_request(s, "GET", "a/b.bin", Range="bytes=0-1") for _ in range(4)]
        assert [a[0] for a in answers] == [503, 503, 200, 206]
        assert answers[2][2] == body and answers[3][2] == b"ne"
        s.truncate("a/b.bin", keep=1, times=1)
        with pytest.raises(http.client.IncompleteRead):
            _request(s, "GET", "a/b.bin")
        assert _request(s, "GET", "a/b.bin")[2] == b"new"


def test_server_stops_while_a_request_is_stalled():
    with RangeServer({"x": b"abc"}) as s:
        s.stall("x", 60)
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
        conn.request("GET", "/x")
        t0 = time.monotonic()
        while s.requests("x") == 0 and time.monotonic() - t0 < 5:  # until a handler has it
            time.sleep(0.01)
        s.stop()
        with pytest.raises((http.client.HTTPException, OSError)):
            conn.getresponse()
        conn.close()
        assert time.monotonic() - t0 < 5
        assert [r[:4] for r in s.log()] == [("GET", "x", None, 0)]  # logged, never answered


# ---- retries ----------------------------------------------------------------------------

@pytest.mark.parametrize("status", [503, 500, 429])
def test_throttling_and_5xx_are_retried(server, nifti, status):
    server.fail(KEY, status, times=2)
    img = vp.load(server.url(KEY), storage_options=HTTP)
    assert img.get_fdata().tobytes() == nifti[1].tobytes()
    assert statuses(server) == [("GET", OPEN, status)] * 2 + [("GET", OPEN, 206)]
    assert server.bytes_sent(KEY) == len(nifti[0]) + 2 * len(f"injected {status}\n")


@pytest.mark.parametrize("status", [503, 429])
def test_throttling_and_5xx_of_a_data_read_are_retried(server, bold, status):
    img = vp.load(server.url(BOLD), storage_options=HTTP)
    server.fail(BOLD, status, times=2)
    assert img.dataobj[..., 7].tobytes() == bold.volume(7).tobytes()
    vol = bold.volume_range(7)
    assert statuses(server, BOLD) == [("GET", OPEN, 206), ("GET", vol, status),
                                      ("GET", vol, status), ("GET", vol, 206)]
    assert pinned(server, BOLD, server.etag(BOLD))  # retries keep If-Match


def test_503_on_every_request_ends_in_an_io_error_in_bounded_time(server, bold):
    server.fail(KEY, 503, times=None)
    url = server.url(KEY)
    t0 = time.monotonic()
    with pytest.raises(VoxpipeIOError) as e:
        vp.load(url, storage_options=dict(HTTP, retry_config=FAST_RETRIES))
    assert time.monotonic() - t0 < 5
    assert url in str(e.value) and e.value.path == url and "503" in str(e.value)
    assert statuses(server) == [("GET", OPEN, 503)] * 3  # the first try and 2 retries

    # The same on a data read: the error names the object and the status, and no data come.
    url = server.url(BOLD)
    img = vp.load(url, storage_options=dict(HTTP, retry_config=FAST_RETRIES))
    server.fail(BOLD, 503, times=None)
    t0 = time.monotonic()
    with pytest.raises(VoxpipeIOError) as e:
        img.dataobj[..., 30]
    assert time.monotonic() - t0 < 5
    assert url in str(e.value) and e.value.path == url and "503" in str(e.value)
    assert statuses(server, BOLD) == ([("GET", OPEN, 206)]
                                      + [("GET", bold.volume_range(30), 503)] * 3)


# ---- answers that are not retried ---------------------------------------------------------

def test_404_is_file_not_found_naming_the_url(server):
    server.deny(KEY, 404)
    url = server.url(KEY)
    with pytest.raises(VoxpipeFileNotFoundError) as e:
        vp.load(url, storage_options=HTTP)
    assert url in str(e.value) and e.value.path == url and "404" in str(e.value)
    assert statuses(server) == [("GET", OPEN, 404)]  # not retried


def test_403_is_an_io_error_naming_the_url_and_status(server):
    server.deny(KEY, 403)
    url = server.url(KEY)
    with pytest.raises(VoxpipeIOError) as e:
        vp.load(url, storage_options=HTTP)
    assert not isinstance(e.value, FileNotFoundError)
    assert url in str(e.value) and e.value.path == url and "403" in str(e.value)
    assert statuses(server) == [("GET", OPEN, 403)]


def test_403_on_a_data_read_names_the_url_and_status(server):
    url = server.url(BOLD)
    img = vp.load(url, storage_options=HTTP)
    server.deny(BOLD, 403)  # e.g. credentials that expired after the open
    with pytest.raises(VoxpipeIOError) as e:
        img.dataobj[..., 10]  # volume 0 came with the first answer: no request
    assert not isinstance(e.value, FileNotFoundError)
    assert url in str(e.value) and e.value.path == url and "403" in str(e.value)
    assert [s for _, _, s in statuses(server, BOLD)] == [206, 403]


# ---- truncated bodies -----------------------------------------------------------------------

def test_truncated_body_is_resumed_from_where_it_stopped(server, nifti):
    # obstore reads the rest with a ranged GET from the first missing byte; the image is whole.
    blob = nifti[0]
    server.truncate(KEY, keep=3000)
    img = vp.load(server.url(KEY), storage_options=HTTP)
    assert img.get_fdata().tobytes() == nifti[1].tobytes()
    assert statuses(server) == [("GET", OPEN, 206), ("GET", f"bytes=3000-{len(blob) - 1}", 206)]
    assert server.bytes_sent(KEY) == len(blob)


def test_truncated_body_of_a_data_read_is_resumed_pinned_to_the_etag(server, bold):
    img = vp.load(server.url(BOLD), storage_options=HTTP)
    server.truncate(BOLD, keep=3000)
    assert img.dataobj[..., 20].tobytes() == bold.volume(20).tobytes()
    assert statuses(server, BOLD) == [("GET", OPEN, 206), ("GET", bold.volume_range(20), 206),
                                      ("GET", bold.volume_range(20, skip=3000), 206)]
    assert pinned(server, BOLD, server.etag(BOLD))
    assert server.bytes_sent(BOLD) == 65536 + bold.volume_bytes


def test_truncated_body_of_a_replaced_object_is_an_error_not_mixed_bytes(server, nifti):
    # The resumed range comes from another version (another ETag): never stitched together.
    blob = nifti[0]
    other = bytearray(blob)
    other[-100:] = bytes(100)  # same size: only the ETag tells the versions apart
    server.truncate(KEY, keep=3000)
    server.replace_after(KEY, 1, bytes(other))
    url = server.url(KEY)
    with pytest.raises(VoxpipeIOError) as e:
        vp.load(url, storage_options=HTTP)
    assert url in str(e.value) and e.value.path == url
    assert statuses(server) == [("GET", OPEN, 206), ("GET", f"bytes=3000-{len(blob) - 1}", 206)]


def test_truncated_data_read_of_a_replaced_object_is_an_error_not_mixed_bytes(server, bold):
    # The volume's answer stops after 3000 bytes and the object is replaced: the resumed range
    # carries If-Match (412), and the read fails as any read of a changed object does.
    url = server.url(BOLD)
    img = vp.load(url, storage_options=HTTP)
    etag = server.etag(BOLD)
    other = bold.blob[:-4096] + bytes(4096)  # same size, the last volume's end zeroed
    server.truncate(BOLD, keep=3000)
    server.replace_after(BOLD, 1, other)
    with pytest.raises(VoxpipeIOError) as e:
        img.dataobj[..., 20]
    assert url in str(e.value) and e.value.path == url and "412" in str(e.value)
    assert statuses(server, BOLD) == [("GET", OPEN, 206), ("GET", bold.volume_range(20), 206),
                                      ("GET", bold.volume_range(20, skip=3000), 412)]
    assert pinned(server, BOLD, etag)
    assert "changed since it was opened" in str(e.value) and etag in str(e.value)


def test_body_truncated_on_every_request_ends_in_an_io_error(server, nifti):
    server.truncate(KEY, keep=0, times=None)
    url = server.url(KEY)
    t0 = time.monotonic()
    with pytest.raises(VoxpipeIOError) as e:
        vp.load(url, storage_options=dict(HTTP, retry_config=FAST_RETRIES))
    assert time.monotonic() - t0 < 5
    assert url in str(e.value) and e.value.path == url
    # The retries ask for the object's size, which the first answer's Content-Range told.
    whole = f"bytes=0-{len(nifti[0]) - 1}"
    assert statuses(server) == [("GET", OPEN, 206)] + [("GET", whole, 206)] * 2


# ---- stalls and timeouts ------------------------------------------------------------------

@pytest.mark.parametrize("after", [None, 3000], ids=["before-headers", "mid-body"])
def test_a_stalled_request_times_out_and_is_retried(server, nifti, after):
    # Every request has a deadline ("timeout": the whole request, body included): a stall
    # before the status line is retried whole, one mid-body resumed from the missing byte.
    server.stall(KEY, 30, after=after)
    t0 = time.monotonic()
    img = vp.load(server.url(KEY), storage_options=dict(HTTP, timeout="500ms"))
    assert 0.5 <= time.monotonic() - t0 < 5
    assert img.get_fdata().tobytes() == nifti[1].tobytes()
    assert server.requests(KEY) == 2
    if after is None:  # the stalled request is logged when its answer goes out: not yet
        assert statuses(server) == [("GET", OPEN, 206)]
    else:
        assert statuses(server) == [("GET", OPEN, 206),
                                    ("GET", f"bytes={after}-{len(nifti[0]) - 1}", 206)]


def test_a_stalled_data_read_times_out_and_is_retried(server, bold):
    img = vp.load(server.url(BOLD), storage_options=dict(HTTP, timeout="500ms"))
    server.stall(BOLD, 30)
    t0 = time.monotonic()
    assert img.dataobj[..., 39].tobytes() == bold.volume(39).tobytes()
    assert 0.5 <= time.monotonic() - t0 < 5
    assert server.requests(BOLD) == 3  # the open, the stalled volume GET and its retry
    assert statuses(server, BOLD) == [("GET", OPEN, 206), ("GET", bold.volume_range(39), 206)]


def test_a_server_that_stalls_every_request_ends_in_an_io_error_in_bounded_time(server):
    server.stall(KEY, 30, times=None)
    url = server.url(KEY)
    t0 = time.monotonic()
    with pytest.raises(VoxpipeIOError) as e:
        vp.load(url, storage_options=dict(HTTP, timeout="300ms", retry_config=FAST_RETRIES))
    assert time.monotonic() - t0 < 5
    assert url in str(e.value) and e.value.path == url
    assert server.requests(KEY) == 3


# ---- consistency ------------------------------------------------------------------------------

def test_object_replaced_before_an_unpickled_proxy_reads_it(server, nifti):
    # Right after the load's GET the object becomes another valid image of the same shape: a
    # proxy unpickled later must refuse it (If-Match: the first ETag), never read its voxels.
    other = nib.Nifti1Image(np.ones((16, 14, 10, 3), np.int16), np.eye(4))
    server.replace_after(KEY, 1, gzip.compress(other.to_bytes(), mtime=0))
    old_etag = server.etag(KEY)
    url = server.url(KEY)
    img = vp.load(url, storage_options=HTTP)
    assert server.etag(KEY) != old_etag
    assert img.get_fdata().tobytes() == nifti[1].tobytes()  # all in the first answer
    blob = pickle.dumps(img.dataobj)
    with pytest.raises(VoxpipeIOError, match="changed since it was opened") as e:
        pickle.loads(blob)[..., 0]
    assert url in str(e.value) and e.value.path == url and old_etag in str(e.value)
    assert statuses(server) == [("GET", OPEN, 206), ("GET", OPEN, 412)]
    assert server.log(KEY)[1].headers.get("if-match") == old_etag


def test_object_replaced_between_open_and_first_data_read_is_refused(server, bold):
    # The header came with the first answer; the voxels did not. The object then becomes
    # another valid image of the same size: the data read is refused, never new bytes.
    url = server.url(BOLD)
    img = vp.load(url, storage_options=HTTP)
    etag = server.etag(BOLD)
    other = nib.Nifti1Image(np.ones((16, 16, 16, 40), np.float32), np.eye(4)).to_bytes()
    assert len(other) == len(bold.blob)
    server.put(BOLD, other)
    for read in (lambda: img.dataobj[..., 5], lambda: img.dataobj[2:9, :, 3, 1:30:4],
                 img.get_fdata):
        with pytest.raises(VoxpipeIOError, match="changed since it was opened") as e:
            read()
        assert url in str(e.value) and e.value.path == url and etag in str(e.value)
    log = server.log(BOLD)
    assert [(r.range, r.status) for r in log[:2]] == [(OPEN, 206), (bold.volume_range(5), 412)]
    assert [r.status for r in log[1:]] == [412] * (len(log) - 1)
    assert pinned(server, BOLD, etag)
    # The same bytes put back are a new version (a new ETag): still refused.
    server.put(BOLD, bold.blob)
    with pytest.raises(VoxpipeIOError, match="changed since it was opened"):
        img.dataobj[..., 5]


# ---- Range ------------------------------------------------------------------------------------

def test_a_server_that_ignores_range_is_read_with_one_whole_get(server, bold):
    # The ranged open is answered 200 (the whole body), which obstore refuses rather than take
    # as the first 64 KiB; the object is then fetched whole once and read from memory.
    server.ignore_range(BOLD)
    img = vp.load(server.url(BOLD), storage_options=HTTP)
    assert img.get_fdata().tobytes() == bold.ref.get_fdata().tobytes()
    assert img.dataobj[..., 33].tobytes() == bold.volume(33).tobytes()
    assert img.header.binaryblock == bold.ref.header.binaryblock
    assert statuses(server, BOLD) == [("GET", OPEN, 200), ("GET", None, 200)]
    assert server.requests() == 2


def test_obstore_refuses_a_whole_body_for_a_ranged_get(server, nifti):
    # What ranged reads can rely on: obstore refuses a 200 (the whole object) to a ranged GET
    # rather than return the wrong bytes.
    blob = nifti[0]
    store = obstore_store.from_url(server.url("data"), client_options=HTTP)
    name = KEY.rsplit("/", 1)[1]
    assert bytes(obstore.get_range(store, name, start=100, end=200)) == blob[100:200]
    server.ignore_range(KEY, times=1)
    with pytest.raises(obstore_exceptions.NotSupportedError,
                       match="Range request not supported"):
        obstore.get_range(store, name, start=100, end=200)
    assert statuses(server) == [("GET", "bytes=100-199", 206), ("GET", "bytes=100-199", 200)]

