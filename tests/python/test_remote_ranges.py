"""Request accounting of remote reads, checked against the log of the server that answered them
(range_server.RangeServer on 127.0.0.1; moto's S3 server where the point is S3), and the
differential: every remote read equals the same read of the local file, by voxpipe and by
nibabel.

The protocol (voxpipe._sources.remote.RemoteFile and the core's RemoteInput): opening an object is one
GET of ``Range: bytes=0-65535``, which tells its size and ETag and holds the header and its
extensions; every later request is a ranged GET with If-Match: that ETag. A .nii selection
becomes the byte ranges the reader plans, merged when closer than 1 MiB, split in 8 MiB parts
fetched concurrently; bytes already fetched are not fetched again. A gzip object without sized
members looks up its seek index on the first data read: in the local cache ($VOXPIPE_CACHE_DIR,
keyed by URL and ETag), else the sidecar object URL + ".gzidx", read by ranges: its last 64 KiB
(its table of contents), then the 32 KiB window of each seek point a read starts from (a sidecar
without a table of contents is fetched whole once, into that cache entry); the index is checked
against the object's size and last 64 KiB (one ranged GET, alongside the table of contents),
and one volume is then one ranged GET from the seek point before it, alongside its window.
"""

from __future__ import annotations

import gzip
import os
import pickle
import struct
import subprocess
import sys
import zlib

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from s3_server import S3Server
from voxpipe.errors import VoxpipeIOError

import nifti_testlib as tl
from range_server import RangeServer

pytest.importorskip("obstore")

HTTP = {"allow_http": True}
HEAD = 64 << 10           # the first request of an open
OPEN = f"bytes=0-{HEAD - 1}"
GAP = 1 << 20             # ranges closer than this are merged
PART = 8 << 20            # longer requests are split in parts of this size
READ_AHEAD = (64 << 10) + 4096  # compressed input a decoder reads past a seek point


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """The seek-index cache of this test: empty at its start."""
    path = tmp_path / "cache"
    monkeypatch.setenv("VOXPIPE_CACHE_DIR", str(path))
    return path


def span(request):
    """[first, end) of a request's ``Range: bytes=a-b``."""
    first, last = request.range.removeprefix("bytes=").split("-")
    return int(first), int(last) + 1


def entries(server):
    """(object, Range, status) of every request, in order."""
    return [(r.path, r.range, r.status) for r in server.log()]


def covered(spans):
    """The union of [first, end) spans as sorted, disjoint spans; AssertionError on overlaps
    (a byte fetched twice)."""
    out = []
    for first, end in sorted(spans):
        assert not out or first >= out[-1][1], f"fetched twice: {out[-1]} and {(first, end)}"
        if out and first == out[-1][1]:
            out[-1] = (out[-1][0], end)
        else:
            out.append((first, end))
    return out


def byte_runs(proxy, slicer):
    """The sorted [first, end) byte runs of the voxels `slicer` selects in a .nii's data."""
    order = np.arange(int(np.prod(proxy.shape)), dtype=np.int64).reshape(proxy.shape, order="F")
    idx = np.unique(np.asarray(order[slicer]).ravel())
    size = proxy.dtype.itemsize
    runs = []
    for i in idx:
        first = proxy.offset + int(i) * size
        if runs and runs[-1][1] == first:
            runs[-1][1] = first + size
        else:
            runs.append([first, first + size])
    return [tuple(r) for r in runs]


def gzidx_points(blob):
    """[(first compressed byte, uncompressed offset)] of the seek points of a GZIDX file
    (src/gz/index_file.cpp describes the format)."""
    assert blob[:5] == b"GZIDX"
    version = blob[5]
    (count,) = struct.unpack_from("<I", blob, 31)
    size = 18 if version == 1 else 17
    points = []
    for i in range(count):
        offset, uncompressed, bits = struct.unpack_from("<QQB", blob, 35 + i * size)
        points.append(((offset * 8 - bits) // 8, uncompressed))
    return points


def gzidx_windows(blob):
    """{uncompressed offset: (first byte, size) of its window} of the seek points of a GZIDX
    file (version 1) that have a window."""
    (count,) = struct.unpack_from("<I", blob, 31)
    at, out = 35 + count * 18, {}
    for i in range(count):
        _, uncompressed, _, flag = struct.unpack_from("<QQBB", blob, 35 + i * 18)
        if flag:
            out[uncompressed] = (at, 32768)
            at += 32768
    return out


TOC = f"bytes=-{HEAD}"  # the first request of a sidecar: its end, with its table of contents


def with_extension(img, nbytes):
    """`img` with a comment extension of about `nbytes`."""
    comment = b"voxpipe range test " * (nbytes // 19)
    img.header.extensions.append(nib.nifti1.Nifti1Extension(6, comment))
    return img


# ---- files -----------------------------------------------------------------------------------

class Files:
    """The local files the objects are copies of, written once for the module."""

    def __init__(self, d):
        rng = np.random.default_rng(20)
        self.dir = d
        # A 4D float32 .nii of 40 volumes of 16 KiB, its header with a 10 KB extension.
        bold = rng.standard_normal((16, 16, 16, 40)).astype(np.float32)
        nib.save(with_extension(nib.Nifti1Image(bold, np.diag([2.0, 2.0, 2.0, 1.0])), 10_000),
                 d / "bold.nii")
        nib.save(with_extension(nib.Nifti2Image(bold, np.eye(4)), 10_000), d / "bold2.nii")
        # A 4D int16 .nii.gz of 12 volumes of 94 KiB (about 75 KiB compressed each), with a
        # seek index built next to it (a point at every volume).
        self.series = rng.integers(-1000, 1000, size=(40, 40, 30, 12), dtype=np.int16)
        nib.save(with_extension(nib.Nifti1Image(self.series, np.eye(4)), 10_000),
                 d / "series.nii.gz")
        self.index = vp.gz.build_index(d / "series.nii.gz")
        assert self.index["index_path"] == str(d / "series.nii.gz.gzidx")
        # voxpipe's own sized members (1 MiB of output each): 8 volumes of 512 KiB.
        members = rng.integers(-30000, 30000, size=(64, 64, 64, 8), dtype=np.int16)
        vp.save(nib.Nifti1Image(members, np.eye(4)), d / "members.nii.gz")
        # A 4D float32 .nii of 6 volumes of 2 MiB: selections beyond one part and gap.
        wide = rng.standard_normal((64, 64, 128, 6)).astype(np.float32)
        nib.save(nib.Nifti1Image(wide, np.eye(4)), d / "wide.nii")
        # Pairs.
        nib.save(nib.Nifti1Pair(bold[..., :12], np.eye(4)), d / "pair.hdr")
        nib.save(nib.Nifti2Pair(bold[..., :12], np.eye(4)), d / "pair.hdr.gz")

    def path(self, name):
        return self.dir / name

    def bytes(self, name):
        return (self.dir / name).read_bytes()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return Files(tmp_path_factory.mktemp("ranges"))


@pytest.fixture
def server(files):
    names = ["bold.nii", "bold2.nii", "series.nii.gz", "members.nii.gz", "wide.nii",
             "pair.hdr", "pair.img", "pair.hdr.gz", "pair.img.gz"]
    with RangeServer({f"data/{n}": files.bytes(n) for n in names}) as s:
        yield s


def load(server, name):
    return vp.load(server.url(f"data/{name}"), storage_options=HTTP)


# ---- opening ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["bold.nii", "bold2.nii", "series.nii.gz", "members.nii.gz"])
def test_open_is_one_request(server, files, name):
    img = load(server, name)
    assert entries(server) == [(f"data/{name}", OPEN, 206)]
    ref = nib.load(files.path(name))
    assert img.header.binaryblock == ref.header.binaryblock
    assert [(e.get_code(), e.get_content()) for e in img.header.extensions] == \
        [(e.get_code(), e.get_content()) for e in ref.header.extensions]
    np.testing.assert_array_equal(img.affine, ref.affine)
    assert server.log()[0].headers.get("if-match") is None  # no version known yet


@pytest.mark.parametrize("name", ["pair.hdr", "pair.hdr.gz"])
def test_open_of_a_pair_is_one_request_per_object(server, files, name):
    img = load(server, name)
    data = name.replace(".hdr", ".img")
    assert entries(server) == [(f"data/{name}", OPEN, 206), (f"data/{data}", OPEN, 206)]
    assert img.header.binaryblock == nib.load(files.path(name)).header.binaryblock


# ---- .nii: the planned byte ranges -------------------------------------------------------------

def test_one_volume_of_a_nii_is_one_request_of_its_bytes(server, files):
    img = load(server, "bold.nii")
    ref = nib.load(files.path("bold.nii"))
    first = ref.dataobj.offset
    vol = 16 * 16 * 16 * 4
    assert first + 3 * vol < HEAD < first + 4 * vol
    server.reset()
    for t in (20, 39):
        assert img.dataobj[..., t].tobytes() == np.asarray(ref.dataobj[..., t]).tobytes()
    assert [(r.range, r.status) for r in server.log()] == [
        (f"bytes={first + t * vol}-{first + (t + 1) * vol - 1}", 206) for t in (20, 39)]
    assert all(r.headers.get("if-match") == server.etag("data/bold.nii") for r in server.log())
    # Bytes already fetched are not fetched again: volume 0 came with the open, volume 3 in
    # part, volume 20 just now.
    server.reset()
    for t in (0, 3, 20):
        assert img.dataobj[..., t].tobytes() == np.asarray(ref.dataobj[..., t]).tobytes()
    assert entries(server) == [("data/bold.nii", f"bytes={HEAD}-{first + 4 * vol - 1}", 206)]


@pytest.mark.parametrize("slicer", [
    (slice(None), slice(None), slice(3, 5), 30),          # a slab: one run
    (slice(3, 5), Ellipsis, 30),                           # runs of 8 bytes, 64 bytes apart
    (slice(2, 9), slice(None), 3, slice(5, 30, 4)),        # runs in 7 volumes
], ids=["slab", "strided", "across-volumes"])
def test_a_selection_of_a_nii_fetches_its_runs_merged(server, files, slicer):
    img = load(server, "bold.nii")
    ref = nib.load(files.path("bold.nii"))
    server.reset()
    assert img.dataobj[slicer].tobytes() == np.asarray(ref.dataobj[slicer]).tobytes()
    runs = byte_runs(ref.dataobj, slicer)
    assert runs[0][0] >= HEAD  # nothing of it came with the open
    # Runs less than 1 MiB apart are merged: one request, from the first byte to the last.
    assert entries(server) == [("data/bold.nii", f"bytes={runs[0][0]}-{runs[-1][1] - 1}", 206)]
    vol = 16 * 16 * 16 * 4
    if slicer[-1] == 30:  # within the volume, less than a volume and a gap
        lo, hi = ref.dataobj.offset + 30 * vol, ref.dataobj.offset + 31 * vol
        assert lo <= runs[0][0] and runs[-1][1] <= hi
        assert server.bytes_sent() < vol + GAP


def test_ranges_farther_apart_than_the_gap_and_longer_than_a_part(server, files):
    ref = nib.load(files.path("wide.nii"))
    vol = 64 * 64 * 128 * 4  # 2 MiB
    first = ref.dataobj.offset
    # One voxel of each volume: 2 MiB apart, not merged; fetched concurrently, 4 bytes each.
    img = load(server, "wide.nii")
    server.reset()
    assert img.dataobj[7, 8, 9, :].tobytes() == np.asarray(ref.dataobj[7, 8, 9, :]).tobytes()
    at = first + (7 + 64 * 8 + 64 * 64 * 9) * 4
    assert sorted(span(r) for r in server.log()) == [
        (at + t * vol, at + t * vol + 4) for t in range(6)]
    # Five volumes (10 MiB, minus what the open brought): 8 MiB parts, fetched concurrently.
    img = load(server, "wide.nii")
    server.reset()
    assert img.dataobj[..., :5].tobytes() == np.asarray(ref.dataobj[..., :5]).tobytes()
    spans = sorted(span(r) for r in server.log())
    assert spans == [(HEAD, HEAD + PART), (HEAD + PART, first + 5 * vol)]
    assert server.bytes_sent() == first + 5 * vol - HEAD


# ---- .nii.gz with a seek index ----------------------------------------------------------------

class Series:
    """Where the volumes of series.nii.gz are, compressed, by its seek index."""

    def __init__(self, files):
        self.blob = files.bytes("series.nii.gz")
        self.index = files.bytes("series.nii.gz.gzidx")
        self.points = gzidx_points(self.index)
        self.ref = nib.load(files.path("series.nii.gz"))
        self.offset = self.ref.dataobj.offset
        self.vol = 40 * 40 * 30 * 2

    def volume(self, t):
        return np.asarray(self.ref.dataobj[..., t])

    def tail(self):
        size = len(self.blob)
        return f"bytes={size - HEAD}-{size - 1}"

    def window_request(self, t):
        """The range of the window of the seek point volume t is read from."""
        begin = self.offset + t * self.vol
        start = max(u for c, u in self.points if u <= begin)
        first, size = gzidx_windows(self.index)[start]
        return f"bytes={first}-{first + size - 1}"

    def check_volume_request(self, request, t):
        """The request of volume t starts at the last seek point at or before the volume and
        ends by the first point at or after its end (plus the decoder's read-ahead)."""
        begin, end = self.offset + t * self.vol, self.offset + (t + 1) * self.vol
        start = max(c for c, u in self.points if u <= begin)
        stop = min((c for c, u in self.points if u >= end), default=len(self.blob))
        first, last = span(request)
        assert first == start, (request.range, start)
        assert max(c for c, u in self.points if u <= end) < last <= min(stop + READ_AHEAD,
                                                                       len(self.blob))


def test_one_volume_of_an_indexed_nii_gz_is_one_request(server, files, cache):
    key = "data/series.nii.gz"
    series = Series(files)
    assert len(series.points) >= 12 and len(series.blob) > 10 * HEAD
    server.put(key + ".gzidx", series.index)
    img = load(server, "series.nii.gz")
    etag = server.etag(key)
    assert entries(server) == [(key, OPEN, 206)]

    # First data read: the sidecar's end (its table of contents) and the object's tail (the
    # index's check), then the volume and the window of its seek point, each pair at once.
    server.reset()
    assert img.dataobj[..., 6].tobytes() == series.volume(6).tobytes()
    log = server.log()
    assert sorted((r.path, r.range, r.status) for r in log[:2]) == [
        (key, series.tail(), 206), (key + ".gzidx", TOC, 206)]
    assert len(log) == 4
    window, = [r for r in log[2:] if r.path == key + ".gzidx"]
    volume, = [r for r in log[2:] if r.path == key]
    assert (window.range, window.status) == (series.window_request(6), 206)
    series.check_volume_request(volume, 6)
    assert all(r.headers.get("if-match") == etag for r in log if r.path == key)
    sidecar_etag = server.etag(key + ".gzidx")
    assert window.headers.get("if-match") == sidecar_etag  # pinned to the sidecar's version
    # Bytes: 64 KiB of the sidecar's end and one 32 KiB window, not the sidecar.
    assert server.bytes_sent(key + ".gzidx") == HEAD + 32768 < len(series.index) / 3
    assert not cache.exists()  # nothing written locally

    # Another volume: its window and its data.
    server.reset()
    assert img.dataobj[..., 2].tobytes() == series.volume(2).tobytes()
    assert sorted((r.path, r.range) for r in server.log() if r.path != key) == [
        (key + ".gzidx", series.window_request(2))]
    series.check_volume_request(server.log(key)[0], 2)
    assert len(server.log()) == 2

    # A second load of the same URL in this process: the same, from the table of contents.
    server.reset()
    again = load(server, "series.nii.gz")
    assert again.dataobj[..., 9].tobytes() == series.volume(9).tobytes()
    log = server.log()
    assert sorted((r.path, r.range) for r in log[1:3]) == [(key, series.tail()),
                                                           (key + ".gzidx", TOC)]
    assert sorted((r.path, r.range) for r in log[3:] if r.path != key) == [
        (key + ".gzidx", series.window_request(9))]
    assert len(log) == 5


def test_a_damaged_window_of_a_sidecar_is_an_error_naming_it(server, files, cache):
    # The sidecar's window of volume 6's point, one byte changed (its table of contents intact):
    # the read fails naming the sidecar, the point and the window's offset, never wrong voxels.
    key = "data/series.nii.gz"
    series = Series(files)
    begin = series.offset + 6 * series.vol
    point = max(i for i, (c, u) in enumerate(series.points) if u <= begin)
    first, _ = gzidx_windows(series.index)[series.points[point][1]]
    damaged = bytearray(series.index)
    damaged[first + 1000] ^= 0x40
    server.put(key + ".gzidx", bytes(damaged))
    img = load(server, "series.nii.gz")
    with pytest.raises(vp.errors.CorruptError) as info:
        img.dataobj[..., 6]
    message = str(info.value)
    assert server.url(key + ".gzidx") in message
    assert f"window of point {point}" in message and str(first) in message
    # Volumes read from other points are right.
    assert img.dataobj[..., 2].tobytes() == series.volume(2).tobytes()


def _gzip_with_comment(raw, comment):
    """A single-member gzip of `raw` whose header carries an FCOMMENT of `comment` bytes (the
    size of the file is set by it)."""
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = deflate.compress(raw) + deflate.flush()
    header = b"\x1f\x8b\x08\x10\x00\x00\x00\x00\x00\xff" + b"c" * comment + b"\x00"
    return header + body + struct.pack("<II", zlib.crc32(raw), len(raw) & 0xFFFFFFFF)


@pytest.mark.parametrize("same_size", [False, True], ids=["other-size", "same-size"])
def test_a_stale_sidecar_is_ignored(server, files, cache, tmp_path, same_size):
    # The sidecar was built for other bytes: another last volume, and, in the same-size case,
    # an object of exactly the same size (only the tail check tells them apart).
    data = files.series.copy()
    other = data.copy()
    other[..., -1] = np.random.default_rng(1).integers(-1000, 1000, size=other.shape[:3])
    raw, raw_other = (nib.Nifti1Image(d, np.eye(4)).to_bytes() for d in (data, other))
    blob, stale = _gzip_with_comment(raw, 1), _gzip_with_comment(raw_other, 1)
    if same_size:
        if len(blob) < len(stale):
            blob = _gzip_with_comment(raw, 1 + len(stale) - len(blob))
        else:
            stale = _gzip_with_comment(raw_other, 1 + len(blob) - len(stale))
        assert len(blob) == len(stale)
    (tmp_path / "stale.nii.gz").write_bytes(stale)
    (tmp_path / "object.nii.gz").write_bytes(blob)
    vp.gz.build_index(tmp_path / "stale.nii.gz")
    key = "data/object.nii.gz"
    server.put(key, blob)
    server.put(key + ".gzidx", (tmp_path / "stale.nii.gz.gzidx").read_bytes())
    ref = nib.load(tmp_path / "object.nii.gz")

    img = load(server, "object.nii.gz")
    for t in (11, 5):
        assert img.dataobj[..., t].tobytes() == data[..., t].tobytes()
    assert img.get_fdata().tobytes() == ref.get_fdata().tobytes()
    log = server.log()
    assert log[0].range == OPEN
    # The sidecar's table of contents, and the object's tail (the check that finds it stale).
    assert sorted((r.path, r.range) for r in log[1:3]) == [
        (key, f"bytes={len(blob) - HEAD}-{len(blob) - 1}"), (key + ".gzidx", TOC)]
    # Read without the index, front to back: every byte of the object at most once.
    assert covered(span(r) for r in log if r.path == key)[-1][1] == len(blob)
    assert server.requests(key + ".gzidx") == 1
    assert list(cache.glob("*.gzidx")) == []  # not kept for this version


# ---- voxpipe's sized members -------------------------------------------------------------------

def vp_members(blob):
    """[(offset, size, uncompressed offset)] of the 'VP' gzip members of a file vp.save wrote
    (src/gz/members.hpp describes them)."""
    members, offset, uncompressed = [], 0, 0
    while offset < len(blob):
        assert blob[offset:offset + 4] == b"\x1f\x8b\x08\x04"
        assert blob[offset + 12:offset + 14] == b"VP"
        size, usize = struct.unpack_from("<II", blob, offset + 16)
        members.append((offset, size, uncompressed))
        offset, uncompressed = offset + size, uncompressed + usize
    return members


def gaps(first, end, spans):
    """The parts of [first, end) outside `spans`."""
    out, at = [], first
    for a, b in covered(spans):
        if b <= at or a >= end:
            continue
        if a > at:
            out.append((at, a))
        at = max(at, b)
    if at < end:
        out.append((at, end))
    return out


def test_a_sized_member_nii_gz_finds_its_members_in_one_request(server, files):
    # What vp.save writes ends with a table member (src/gz/members.hpp): the member table is one
    # request of the object's end, whatever the member count.
    key = "data/members.nii.gz"
    blob = files.bytes("members.nii.gz")
    members = vp_members(blob)
    # 4 MiB of voxels and a header in 1 MiB members, then the table member (empty, 58 + 4n bytes).
    assert len(members) == 6 and members[-1][1:] == (58 + 4 * 5, 4 * 1048576 + 352)
    ref = nib.load(files.path("members.nii.gz"))
    img = load(server, "members.nii.gz")
    server.reset()
    assert img.dataobj[..., 5].tobytes() == np.asarray(ref.dataobj[..., 5]).tobytes()
    # The index is looked for first (one request: none here), then the table, then the data.
    assert [(r.path, r.status) for r in server.log() if r.path != key] == [(key + ".gzidx", 404)]
    log = server.log(key)
    assert all(r.headers.get("if-match") == server.etag(key) for r in log)
    tail = (len(blob) - HEAD, len(blob))
    assert span(log[0]) == tail
    # Then the members that hold volume 5, in one request.
    vol = 64 * 64 * 64 * 2
    begin, end = ref.dataobj.offset + 5 * vol, ref.dataobj.offset + 6 * vol
    needed = [m for m in members if m[2] < end and begin < m[2] + 1048576]
    assert len(needed) == 2
    assert [span(r) for r in log[1:]] == gaps(needed[0][0], needed[-1][0] + needed[-1][1],
                                              [(0, HEAD), tail])
    assert img.get_fdata().tobytes() == ref.get_fdata().tobytes()
    assert covered([(0, HEAD)] + [span(r) for r in server.log(key)]) == [(0, len(blob))]


def test_a_sized_member_nii_gz_without_a_table_walks_its_members(server, files):
    # A file written before the table member (the same members, without it) reads as before.
    key = "data/members-old.nii.gz"
    blob = files.bytes("members.nii.gz")
    blob = blob[:vp_members(blob)[-1][0]]
    members = vp_members(blob)
    assert len(members) == 5
    server.put(key, blob)
    ref = nib.load(files.path("members.nii.gz"))
    img = load(server, "members-old.nii.gz")
    server.reset()
    assert img.dataobj[..., 5].tobytes() == np.asarray(ref.dataobj[..., 5]).tobytes()
    log = [r for r in server.log() if r.path == key]
    assert all(r.headers.get("if-match") == server.etag(key) for r in log)
    # The object's end (no table there), then the member table from the members' headers: one
    # request of 64 KiB for each member after the first (the previous trailer and the next
    # header), one after another.
    tail = (len(blob) - HEAD, len(blob))
    assert span(log[0]) == tail
    walk = [(m[0] - 8, min(m[0] - 8 + HEAD, len(blob))) for m in members[1:]]
    walk = [w for w in walk if w[0] < tail[0]]  # the last headers are in the end read
    assert [span(r) for r in log[1:1 + len(walk)]] == walk
    # Then the members that hold volume 5, less the bytes already here.
    vol = 64 * 64 * 64 * 2
    begin, end = ref.dataobj.offset + 5 * vol, ref.dataobj.offset + 6 * vol
    needed = [m for m in members if m[2] < end and begin < m[2] + 1048576]
    assert len(needed) == 2
    want = gaps(needed[0][0], needed[-1][0] + needed[-1][1], walk + [tail])
    assert sorted(span(r) for r in log[1 + len(walk):]) == want
    # A whole read then fetches the rest, nothing twice.
    assert img.get_fdata().tobytes() == ref.get_fdata().tobytes()
    assert covered([(0, HEAD)] + [span(r) for r in server.log(key)]) == [(0, len(blob))]


def test_a_sized_member_nii_gz_with_a_sidecar_reads_a_volume_without_the_member_walk(
        server, files, tmp_path):
    # The index has a point at every member's start and every volume's: one volume is the
    # sidecar's table of contents, the tail check, the window of the volume's point and one
    # data request, however many members the file has.
    key = "data/members.nii.gz"
    local = tmp_path / "members.nii.gz"
    local.write_bytes(files.bytes("members.nii.gz"))
    vp.gz.build_index(local)
    server.put(key + ".gzidx", (tmp_path / "members.nii.gz.gzidx").read_bytes())
    ref = nib.load(files.path("members.nii.gz"))
    img = load(server, "members.nii.gz")
    server.reset()
    assert img.dataobj[..., 5].tobytes() == np.asarray(ref.dataobj[..., 5]).tobytes()
    log = server.log()
    blob = files.bytes("members.nii.gz")
    assert sorted((r.path, r.range, r.status) for r in log[:2]) == [
        (key, f"bytes={len(blob) - HEAD}-{len(blob) - 1}", 206), (key + ".gzidx", TOC, 206)]
    assert sorted((r.path, r.status) for r in log[2:]) == [(key, 206), (key + ".gzidx", 206)]
    assert img.dataobj._gzip_reader().random_access


# ---- differential --------------------------------------------------------------------------

DTYPES = ["int16", "uint8", "float32", "float64", "scaled-int16"]
KINDS = ["nii", "nii.gz", "vp.nii.gz", "pair", "pair.gz"]
# Each kind with both dimensions and both NIfTI versions, each dtype with both dimensions.
MATRIX = [(kind, dtype, 3 + (i + j) % 2, 1 + (j + i // 2) % 2)
          for i, kind in enumerate(KINDS) for j, dtype in enumerate(DTYPES)]
SHAPES = {3: (56, 48, 40), 4: (36, 30, 24, 5)}
SLICERS = {
    3: [(slice(None), slice(None), 20), (slice(3, 50, 4), 7, slice(None, None, -1)),
        (Ellipsis, slice(30, 33)), (5, 6, 7), (slice(None, None, -2), slice(1, 40, 3), 39)],
    4: [(Ellipsis, 3), (slice(None), slice(None), 12, slice(None)), (2, Ellipsis, -1),
        (slice(1, 30, 7), slice(None), slice(None, None, -3), slice(0, 5, 2)), (9, 8, 7, 4)],
}


@pytest.mark.parametrize("kind,dtype,ndim,version", MATRIX,
                         ids=[f"{k}-{d}-{n}d-nifti{v}" for k, d, n, v in MATRIX])
def test_remote_read_equals_the_local_reads(tmp_path, kind, dtype, ndim, version):
    scaled = dtype.startswith("scaled-")
    data = tl.make_data(dtype.removeprefix("scaled-"), SHAPES[ndim], seed=ndim * 10 + version)
    pair = kind.startswith("pair")
    cls = (tl.PAIR_CLASS if pair else tl.SINGLE_CLASS)[version]
    # Scaled: float values stored as int16, with the slope and intercept the writer chooses.
    img = cls(data * 0.5 - 3.0 if scaled else data, tl.SFORM)
    img.header.set_data_dtype(data.dtype)
    name = {"nii": "x.nii", "nii.gz": "x.nii.gz", "vp.nii.gz": "x.nii.gz", "pair": "x.hdr",
            "pair.gz": "x.hdr.gz"}[kind]
    path = tmp_path / name
    (vp.save if kind == "vp.nii.gz" else nib.save)(img, path)
    objects = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert max(len(b) for b in objects.values()) > HEAD  # the data are not all in the open
    ref = nib.load(path)
    local = vp.load(path)
    assert ref.header.sizeof_hdr == tl.HDR_SIZE[version]
    assert ref.get_data_dtype() == data.dtype
    assert (ref.dataobj.slope != 1.0 and ref.dataobj.inter != 0.0) == scaled
    with RangeServer({f"d/{n}": b for n, b in objects.items()}) as server:
        remote = vp.load(server.url(f"d/{name}"), storage_options=HTTP)
        tl.assert_same(remote, ref, parts=("meta", "header", "extensions", "dataobj", "data",
                                           "fdata", "slicers"), slicers=SLICERS[ndim])
        for slicer in SLICERS[ndim]:
            assert np.asarray(remote.dataobj[slicer]).tobytes() == \
                np.asarray(local.dataobj[slicer]).tobytes()
        assert remote.get_fdata().tobytes() == local.get_fdata().tobytes()
        assert all(r.status == 206 for r in server.log() if not r.path.endswith(".gzidx"))


# ---- pickling --------------------------------------------------------------------------------

_CHILD = """
import pickle, sys
import numpy as np
proxy = pickle.loads(sys.stdin.buffer.read())
sys.stdout.buffer.write(np.ascontiguousarray(proxy[..., 3]).tobytes())
"""


@pytest.mark.parametrize("name", ["bold.nii", "series.nii.gz", "pair.hdr.gz"])
def test_a_pickled_proxy_reads_in_another_process(server, files, name):
    if name == "series.nii.gz":
        server.put("data/series.nii.gz.gzidx", files.bytes("series.nii.gz.gzidx"))
    img = load(server, name)
    want = np.asarray(vp.load(files.path(name)).dataobj[..., 3])
    assert want.tobytes() == np.asarray(nib.load(files.path(name)).dataobj[..., 3]).tobytes()
    assert img.dataobj[..., 3].tobytes() == want.tobytes()
    blob = pickle.dumps(img.dataobj)
    assert len(blob) < 4096
    server.reset()
    child = subprocess.run([sys.executable, "-c", _CHILD], input=blob, capture_output=True,
                           timeout=60, env=os.environ.copy())
    assert child.returncode == 0, child.stderr.decode()
    assert child.stdout == want.tobytes()
    # The child opened the same versions (If-Match on every request, its first included) and
    # read the sidecar's table of contents and the window of the volume's point (nothing of a
    # sidecar with one is cached).
    log = [r for r in server.log() if not r.path.endswith(".gzidx")]
    assert all(r.headers.get("if-match") == server.etag(r.path) for r in log)
    assert log[0].range == OPEN
    if name == "series.nii.gz":  # the open, the index's check, the volume
        series = Series(files)
        assert [r.range for r in log[:2]] == [OPEN, series.tail()] and len(log) == 3
        series.check_volume_request(log[2], 3)
        assert sorted(r.range for r in server.log("data/series.nii.gz.gzidx")) == \
            sorted([TOC, series.window_request(3)])


# ---- a whole large .nii.gz ------------------------------------------------------------------

@pytest.mark.parametrize("writer", ["nibabel", "voxpipe"])
def test_a_whole_large_nii_gz_fetches_each_byte_once(tmp_path, writer):
    rng = np.random.default_rng(7)
    data = rng.integers(-30000, 30000, size=(64, 64, 40, 66), dtype=np.int16)
    path = tmp_path / "big.nii.gz"
    (nib.save if writer == "nibabel" else vp.save)(nib.Nifti1Image(data, np.eye(4)), path)
    blob = path.read_bytes()
    assert len(blob) > 20 << 20
    with RangeServer({"d/big.nii.gz": blob}) as server:
        img = vp.load(server.url("d/big.nii.gz"), storage_options=HTTP)
        assert img.get_fdata(dtype=np.float32).tobytes() == data.astype(np.float32).tobytes()
        log = [r for r in server.log() if r.path == "d/big.nii.gz"]
        assert server.bytes_sent("d/big.nii.gz") <= len(blob) + HEAD
        assert covered(span(r) for r in log) == [(0, len(blob))]
        if writer == "nibabel":
            # The open, then the rest in 8 MiB parts.
            assert len(log) == 1 + -(-(len(blob) - HEAD) // PART)
        print(f"{writer}: {len(blob)} bytes, {len(server.log())} requests "
              f"({len(log)} of the object)")


# ---- S3 (moto's server) ------------------------------------------------------------------------

BUCKET = "voxpipe-ranges"


@pytest.fixture(scope="module")
def s3(files):
    """(a moto S3 server on a free localhost port with a bucket of the module's files, its
    storage_options, a boto3 client)."""
    pytest.importorskip("moto.server")
    server = S3Server(BUCKET)
    endpoint, client = server.endpoint, server.client
    for name in ("bold.nii", "series.nii.gz", "series.nii.gz.gzidx"):
        client.upload_file(str(files.path(name)), BUCKET, f"data/{name}")
    options = {"access_key_id": "testing", "secret_access_key": "testing",
               "region": "us-east-1", "endpoint": endpoint, "allow_http": True}
    yield endpoint, options, client
    server.stop()


def test_s3_volumes_of_an_indexed_nii_gz_use_the_sidecar_object(s3, files, cache, monkeypatch):
    _, options, _ = s3
    series = Series(files)
    img = vp.load(f"s3://{BUCKET}/data/series.nii.gz", storage_options=options)
    obstore = pytest.importorskip("obstore")
    requests = []
    real_get = obstore.get

    def get(store, path, *, options=None):  # every request voxpipe sends the server
        result = real_get(store, path, options=options)
        requests.append((path, (options or {}).get("range"), tuple(result.range)))
        return result

    monkeypatch.setattr(obstore, "get", get)
    img = vp.load(f"s3://{BUCKET}/data/series.nii.gz", storage_options=options)
    assert [r[:2] for r in requests] == [("series.nii.gz", (0, HEAD))]
    # One volume: the sidecar's table of contents and the object's tail (its check), then the
    # window of the volume's seek point and the volume's data.
    del requests[:]
    assert img.dataobj[..., 6].tobytes() == series.volume(6).tobytes()
    size = len(series.blob)
    assert sorted(r[:2] for r in requests[:2]) == [
        ("series.nii.gz", (size - HEAD, size)), ("series.nii.gz.gzidx", {"suffix": HEAD})]
    first, n = (int(x) for x in series.window_request(6)[6:].split("-"))
    assert sorted(r[2] for r in requests[2:] if r[0] == "series.nii.gz.gzidx") == [
        (first, n + 1)]
    assert len(requests) == 4
    for t in (0, 2):
        del requests[:]
        assert img.dataobj[..., t].tobytes() == series.volume(t).tobytes()
        assert [r[0] for r in requests if r[0] != "series.nii.gz"] == \
            (["series.nii.gz.gzidx"] if t else [])  # volume 0 starts at a point without one
        assert len(requests) <= 2
    assert not cache.exists()  # read by ranges: nothing kept locally
    assert img.get_fdata().tobytes() == series.ref.get_fdata().tobytes()


@pytest.mark.parametrize("name", ["bold.nii", "series.nii.gz"])
def test_s3_object_replaced_between_open_and_first_data_read_is_refused(s3, files, name):
    _, options, client = s3
    key = f"data/changing-{name}"
    client.upload_file(str(files.path(name)), BUCKET, key)
    url = f"s3://{BUCKET}/{key}"
    img = vp.load(url, storage_options=options)
    etag = client.head_object(Bucket=BUCKET, Key=key)["ETag"]
    # Another valid image of the same shape (its last volume zeroed).
    if name == "bold.nii":
        other = files.bytes(name)[:-16384] + bytes(16384)
    else:
        data = files.series.copy()
        data[..., -1] = 0
        other = gzip.compress(nib.Nifti1Image(data, np.eye(4)).to_bytes(), compresslevel=1)
    client.put_object(Bucket=BUCKET, Key=key, Body=other)
    assert client.head_object(Bucket=BUCKET, Key=key)["ETag"] != etag
    with pytest.raises(VoxpipeIOError, match="changed since it was opened") as e:
        img.dataobj[..., 39 if name == "bold.nii" else 11]
    assert url in str(e.value) and e.value.path == url
