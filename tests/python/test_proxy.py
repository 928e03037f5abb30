"""nibabel's lazy-access contract (ArrayProxy), checked against nibabel 5.4.2 on the same files:
what kind of array each access returns under each ``mmap`` (type, dtype, writeability, whether a
write reaches the file), which file descriptors stay open under each ``keep_file_open``, how many
bytes a slice reads, and reads from several threads at once."""

import gc
import os
import shutil
import threading
import warnings

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from nifti_testlib import nib_parts, nonempty_slicers, slicer_id, write_parts

MMAPS = [True, False, "c", "r"]
SHAPE = (4, 5, 6, 3)


def _data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(-1000, 1000, size=shape).astype(dtype)


def _data_path(path):
    return path[:-4] + ".img" if path.endswith(".hdr") else path


# -- 1. mmap: what each access returns -----------------------------------------------------------

def _np_array(proxy):
    # nibabel's __array__ takes no `copy`: NumPy warns, then copies what it returned.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return np.array(proxy)


ACCESS = {
    "asanyarray": lambda img: np.asanyarray(img.dataobj),
    "asarray": lambda img: np.asarray(img.dataobj),
    "array": lambda img: _np_array(img.dataobj),
    "asanyarray(stored dtype)": lambda img: np.asanyarray(img.dataobj, dtype=img.dataobj.dtype),
    "asanyarray(native dtype)": lambda img: np.asanyarray(
        img.dataobj, dtype=img.dataobj.dtype.newbyteorder("=")),
    "asanyarray(float32)": lambda img: np.asanyarray(img.dataobj, dtype=np.float32),
    "asanyarray(int32)": lambda img: np.asanyarray(img.dataobj, dtype=np.int32),
    "get_unscaled": lambda img: img.dataobj.get_unscaled(),
    "get_fdata": lambda img: img.get_fdata(caching="unchanged"),
    "get_fdata(float32)": lambda img: img.get_fdata(caching="unchanged", dtype=np.float32),
    "[...]": lambda img: img.dataobj[...],
    "[:]": lambda img: img.dataobj[:],
    "[()]": lambda img: img.dataobj[()],
    "[0:4, :5, 0:6:1]": lambda img: img.dataobj[0:4, :5, 0:6:1],  # whole, by nibabel's rule
    "[:, :, :, ::1]": lambda img: img.dataobj[:, :, :, ::1],      # not whole: fileslice
    "[..., None]": lambda img: img.dataobj[..., None],
    "[..., 1]": lambda img: img.dataobj[..., 1],
    "[1]": lambda img: img.dataobj[1],
    "[::-1]": lambda img: img.dataobj[::-1],
    "[:, 2, ::2]": lambda img: img.dataobj[:, 2, ::2],
    "[1, 2, 3, 0]": lambda img: img.dataobj[1, 2, 3, 0],
}


def _kind_of(result, path):
    """What a user can observe about a result, besides its values."""
    if not isinstance(result, np.ndarray):
        return {"type": type(result)}
    filename = getattr(result, "filename", None)
    return {
        "type": type(result),
        "dtype": result.dtype.str,
        "shape": result.shape,
        "writeable": result.flags.writeable,
        "maps": None if filename is None else os.path.samefile(filename, _data_path(path)),
        "mode": getattr(result, "mode", None),
    }


def _writes_reach_file(result, path):
    """Whether writing into `result` changes the file (False when it cannot be written)."""
    if not isinstance(result, np.ndarray) or not result.flags.writeable or result.size == 0:
        return False
    with open(_data_path(path), "rb") as f:
        before = f.read()
    result.flat[0] = result.flat[0] + 1
    if isinstance(result, np.memmap):
        result.flush()
    with open(_data_path(path), "rb") as f:
        return f.read() != before


@pytest.fixture(scope="module")
def matrix_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("mmap")
    files = {}

    def get(kind, endian, dtype, scaled):
        key = (kind, endian, dtype, scaled)
        if key not in files:
            parts = nib_parts(_data(SHAPE, dtype), 1, endian, single=kind != "pair")
            if scaled:
                parts.patch(scl_slope=2.0, scl_inter=-1.0)
            files[key] = write_parts(root / f"{kind}_{endian == '>'}_{dtype}_{scaled}".replace(
                ".", "_"), parts, kind)
        return files[key]

    return get


@pytest.mark.parametrize("mmap", MMAPS, ids=lambda m: f"mmap={m}")
@pytest.mark.parametrize("scaled", [False, True], ids=["unscaled", "scaled"])
@pytest.mark.parametrize("endian", ["<", ">"], ids=["le", "be"])
@pytest.mark.parametrize("dtype", ["i2", "f8"])
@pytest.mark.parametrize("kind", ["nii", "nii.gz", "pair"])
def test_results_are_the_kind_of_array_nibabel_returns(matrix_files, kind, dtype, endian, scaled,
                                                      mmap):
    path = matrix_files(kind, endian, dtype, scaled)
    problems = []
    for name, access in ACCESS.items():
        got = access(vp.load(path, mmap=mmap))
        want = access(nib.load(path, mmap=mmap))
        if _kind_of(got, path) != _kind_of(want, path):
            problems.append(f"{name}: voxpipe {_kind_of(got, path)} nibabel {_kind_of(want, path)}")
            continue
        if np.asarray(got).dtype != np.asarray(want).dtype or not np.array_equal(got, want):
            problems.append(f"{name}: values differ")
            continue
        reached = (_writes_reach_file(got, path), _writes_reach_file(want, path))
        if reached != (False, False):
            problems.append(f"{name}: a write reached the file (voxpipe, nibabel) = {reached}")
    assert not problems, "\n".join(problems)


def test_a_copy_of_a_map_is_an_array_of_its_own(matrix_files):
    path = matrix_files("nii", "<", "i2", False)
    for mmap in ("r", "c"):
        proxy = vp.load(path, mmap=mmap).dataobj
        assert isinstance(np.asanyarray(proxy), np.memmap)
        copied = np.array(proxy)
        assert type(copied) is np.ndarray and copied.flags.writeable and copied.flags.owndata
        copied[...] = 0
        np.testing.assert_array_equal(np.asanyarray(proxy), _data(SHAPE, "i2"))


def test_mmap_r_plus_is_refused_as_nibabel_refuses_it(matrix_files):
    path = matrix_files("nii", "<", "i2", False)
    with pytest.raises(ValueError):
        nib.load(path, mmap="r+")
    with pytest.raises(ValueError):
        vp.load(path, mmap="r+")


def test_an_image_loaded_read_only_saves(matrix_files, tmp_path):
    path = matrix_files("nii", ">", "i2", True)
    img = vp.load(path, mmap="r")
    assert not img.dataobj.get_unscaled().flags.writeable
    vp.save(img, tmp_path / "copy.nii")
    np.testing.assert_array_equal(nib.load(tmp_path / "copy.nii").get_fdata(),
                                  nib.load(path).get_fdata())


SLICE_CASES = [((5, 4, 3, 2), "i2"), ((40, 30, 7), "u1"), ((9, 70, 3), "f8"), ((300, 2, 3), "i2")]


@pytest.mark.parametrize("kind", ["nii", "nii.gz"])
@pytest.mark.parametrize("shape,dtype", SLICE_CASES, ids=lambda v: str(v))
def test_slices_are_writable_where_nibabel_read_several_segments(tmp_path, kind, shape, dtype):
    """nibabel wraps one segment's bytes (read-only) and several segments' anonymous mmap
    (writable); which one depends on its read heuristic, which voxpipe follows."""
    path = write_parts(tmp_path / "s", nib_parts(_data(shape, dtype), 1, "<"), kind)
    vi, ni = vp.load(path), nib.load(path)
    s = slice
    extra = [(s(None), 1), (s(None, None, 3), 2), (s(1, 8, 3), s(None), 0), (s(None, None, -1), 2),
             (0, s(None, None, -2)), (s(None), s(None), s(1, 2)), (Ellipsis, s(None, None, 2))]
    problems = []
    probe = np.empty(shape, np.uint8)
    for slicer in nonempty_slicers(shape) + [x for x in extra if _valid(probe, x)]:
        got, want = vi.dataobj[slicer], ni.dataobj[slicer]
        if _kind_of(got, path) != _kind_of(want, path) or not np.array_equal(got, want):
            problems.append(f"{slicer_id(slicer)}: voxpipe {_kind_of(got, path)} "
                            f"nibabel {_kind_of(want, path)}")
    assert not problems, "\n".join(problems)


def test_the_segment_count_is_nibabels():
    """The writeability rule rests on counting fileslice's segments: the count equals the
    length of nibabel's calc_slicedefs segments for random slicers, shapes and item sizes."""
    from nibabel.fileslice import calc_slicedefs

    from voxpipe._formats.nifti.slicing import nibabel_segments

    rng = np.random.default_rng(5)
    checked = 0
    while checked < 3000:
        shape = tuple(int(rng.choice([1, 2, 3, 5, 8, 17, 40, 129]))
                      for _ in range(rng.integers(1, 5)))
        itemsize = int(rng.choice([1, 2, 4, 8, 16]))
        slicer = []
        for dim in shape:
            r = rng.random()
            if r < 0.25:
                slicer.append(int(rng.integers(-dim, dim)))
            elif r < 0.4:
                slicer.append(slice(None))
            else:
                bounds = [None] + list(range(-dim, dim + 1))
                start, stop = (bounds[i] for i in rng.integers(len(bounds), size=2))
                slicer.append(slice(start, stop, [None, 1, 2, 3, 7, -1, -2, -5][rng.integers(8)]))
        if rng.random() < 0.2:
            slicer.insert(int(rng.integers(len(slicer) + 1)), None)
        slicer = tuple(slicer)
        if np.empty(shape, np.uint8)[slicer].size == 0:
            continue  # nibabel sometimes raises on empty selections
        checked += 1
        want = len(calc_slicedefs(slicer, shape, itemsize, 0, "F")[0])
        assert nibabel_segments(slicer, shape, itemsize) == want, (shape, itemsize, slicer)


def _valid(probe, slicer):
    try:
        return probe[slicer].size > 0
    except IndexError:
        return False


# -- 2. keep_file_open: descriptors --------------------------------------------------------------

def _open_files():
    """{fd: target} of this process (the descriptor that lists the folder is gone by then)."""
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:
            pass
    return out


def _new_files(before):
    return sorted(os.path.basename(t) for fd, t in _open_files().items() if fd not in before)


@pytest.fixture(scope="module")
def gz_files(tmp_path_factory):
    """4D data as .nii, as a plain .nii.gz (nibabel's), the same with a seek index sidecar, and
    in voxpipe's sized-member layout."""
    root = tmp_path_factory.mktemp("fds")
    data = _data((40, 50, 16, 3), "i2", seed=1)
    nii = str(root / "plain.nii")
    nib.save(nib.Nifti1Image(data, np.eye(4)), nii)
    plain = str(root / "plain.nii.gz")
    nib.save(nib.Nifti1Image(data, np.eye(4)), plain)
    indexed = str(root / "indexed.nii.gz")
    shutil.copy(plain, indexed)
    vp.gz.build_index(indexed)
    members = str(root / "members.nii.gz")
    vp.save(vp.load(nii), members)
    return {"nii": nii, "plain gz": plain, "indexed gz": indexed, "members gz": members}


FD_ACCESS = [
    lambda img: img.dataobj[..., 1],
    lambda img: img.dataobj[3],
    lambda img: np.asanyarray(img.dataobj),
    lambda img: img.get_fdata(caching="unchanged", dtype=np.float32),
    lambda img: img.dataobj[..., 2],
]


@pytest.mark.parametrize("keep", [None, False, True], ids=lambda k: f"keep_file_open={k}")
@pytest.mark.parametrize("which", ["nii", "plain gz", "indexed gz", "members gz"])
def test_descriptors_open_between_accesses(gz_files, which, keep):
    path = gz_files[which]
    held = {}
    for lib in (vp, nib):
        gc.collect()
        before = _open_files()
        img = lib.load(path, keep_file_open=keep, mmap=False)
        assert _new_files(before) == [], "load leaves a file open"
        after_each = []
        for access in FD_ACCESS:
            result = access(img)
            np.testing.assert_array_equal(result, access(nib.load(path)))
            del result
            after_each.append(_new_files(before))
        held[lib.__name__] = after_each
        del img
        gc.collect()
        assert _new_files(before) == [], f"{lib.__name__}: files open after the image is gone"
    # Kept: the same descriptors from the first access on, and only the data file (with a seek
    # index, also the index file, whose windows are read on demand). The gzip engines for a
    # single member without an index (random access for the parallel inflate, a stream) share
    # one descriptor. gzip data keep their reader whatever keep_file_open says (nibabel keeps its
    # indexed_gzip opener too, but that closes its handle between reads).
    name = os.path.basename(path)
    kept = {"nii": [name], "plain gz": [name], "indexed gz": [name, name + ".gzidx"],
            "members gz": [name]}[which]
    if not keep:
        assert held["nibabel"] == [[]] * len(FD_ACCESS)
        assert held["voxpipe"] == ([[]] if which == "nii" else [kept]) * len(FD_ACCESS)
        return
    assert held["voxpipe"] == [kept] * len(FD_ACCESS)
    assert held["nibabel"] == [[name]] * len(FD_ACCESS)


@pytest.mark.parametrize("keep", [None, True], ids=lambda k: f"keep_file_open={k}")
@pytest.mark.parametrize("mmap", [True, "r"])
def test_a_memory_map_holds_one_descriptor_until_it_goes(gz_files, mmap, keep):
    """Python's mmap keeps a duplicate of the descriptor, in nibabel as in voxpipe. (nibabel
    with keep_file_open=True also opens its kept handle at this first access; voxpipe opens
    its reader at the first access that reads.)"""
    path = gz_files["nii"]
    name = os.path.basename(path)
    seen = {}
    for lib in (vp, nib):
        gc.collect()
        before = _open_files()
        img = lib.load(path, mmap=mmap, keep_file_open=keep)
        arr = np.asanyarray(img.dataobj)
        assert isinstance(arr, np.memmap)
        holding = _new_files(before)
        del arr
        gc.collect()
        seen[lib.__name__] = (holding, _new_files(before))
        del img
    assert seen["voxpipe"] == ([name], [])
    if not keep:
        assert seen["nibabel"] == seen["voxpipe"]


def test_an_explicit_index_is_checked_at_load_and_closed(gz_files):
    """Checked (and closed) at load; the first access keeps the data and index files open until
    the image is gone, as gzip data always keep their reader."""
    path = gz_files["indexed gz"]
    before = _open_files()
    img = vp.load(path, index=path + ".gzidx")
    assert _new_files(before) == []
    np.testing.assert_array_equal(img.dataobj[..., 1], nib.load(path).dataobj[..., 1])
    name = os.path.basename(path)
    assert _new_files(before) == [name, name + ".gzidx"]
    del img
    gc.collect()
    assert _new_files(before) == []


@pytest.mark.parametrize("keep", [False, True], ids=lambda k: f"keep_file_open={k}")
@pytest.mark.parametrize("which", ["nii", "plain gz", "indexed gz", "members gz"])
def test_a_kept_file_survives_a_rename(gz_files, tmp_path, which, keep):
    """keep_file_open=True reads through the handle opened at the first access (and the member
    table or index read then); False opens an uncompressed file by name at every access, while
    gzip data keep their first reader. (nibabel's gzip reader, indexed_gzip, serves these small
    files from the 1 MiB of compressed data it buffered at the first read, renamed or not: for
    .gz with False only voxpipe is checked.)"""
    src = gz_files[which]
    outcomes = {}
    for lib in (vp, nib):
        path = str(tmp_path / f"{lib.__name__}_{os.path.basename(src)}")
        shutil.copy(src, path)
        if os.path.exists(src + ".gzidx"):
            shutil.copy(src + ".gzidx", path + ".gzidx")
        img = lib.load(path, keep_file_open=keep, mmap=False)
        first = img.dataobj[..., 0]
        os.rename(path, path + ".moved")
        try:
            outcomes[lib.__name__] = ("ok", img.dataobj[..., 2])
        except FileNotFoundError as exc:
            outcomes[lib.__name__] = ("missing", exc)
        del img, first
    kept = keep or which != "nii"  # gzip data keep their reader (see the descriptor test)
    assert outcomes["voxpipe"][0] == ("ok" if kept else "missing")
    if keep or which == "nii":
        assert outcomes["nibabel"][0] == outcomes["voxpipe"][0]
    if kept:
        np.testing.assert_array_equal(outcomes["voxpipe"][1], outcomes["nibabel"][1])
    else:
        assert isinstance(outcomes["voxpipe"][1], vp.errors.VoxpipeError)


# -- 3. the data size check ----------------------------------------------------------------------

@pytest.mark.parametrize("keep", [None, True], ids=lambda k: f"keep_file_open={k}")
@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.parametrize("kind", ["nii", "nii.gz"])
def test_a_short_data_file_fails_before_allocating(tmp_path, kind, mmap, keep):
    """A header promising 16 GB over a short file: every access raises TruncatedError, and
    nothing of that size is allocated (it would fail with MemoryError on this machine or take
    seconds)."""
    parts = nib_parts(np.zeros((2, 2, 2), np.int16), 1, "<")
    parts.patch(dim=[3, 2000, 2000, 2000, 1, 1, 1, 1])
    path = write_parts(tmp_path / "short", parts, kind)
    img = vp.load(path, mmap=mmap, keep_file_open=keep)
    for access in (lambda: np.asanyarray(img.dataobj), lambda: img.dataobj.get_unscaled(),
                   lambda: img.get_fdata(dtype=np.float32), lambda: img.dataobj[..., 7],
                   lambda: img.dataobj[..., 7]):
        with pytest.raises(vp.errors.TruncatedError):
            access()


def test_a_missing_data_file_names_it(tmp_path):
    parts = nib_parts(_data((3, 4, 5), "i2"), 1, "<", single=False)
    path = write_parts(tmp_path / "gone", parts, "pair")
    images = [vp.load(path, keep_file_open=keep) for keep in (None, True)]
    os.remove(_data_path(path))
    for img in images:
        for access in (lambda: np.asanyarray(img.dataobj), lambda: img.dataobj[1]):
            with pytest.raises(vp.errors.VoxpipeFileNotFoundError, match="gone.img"):
                access()


# -- 4. bytes read by slicing --------------------------------------------------------------------

def _rchar():
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def _bytes_read(fn):
    """Bytes the process read during fn() (a warm call: fn runs once before)."""
    fn()
    a = _rchar()
    overhead = _rchar() - a
    start = _rchar()
    result = fn()
    return _rchar() - start - overhead, result


s_ = slice
BYTE_SLICERS = [
    (0, 0, 0, 0), (5, 7, 3, 2), (-1, -1, -1, -1),                                # one voxel
    (s_(None), 7, 3, 2), (5, s_(None), 3, 2), (5, 7, s_(None), 2), (5, 7, 3, s_(None)),  # rows
    (5,), (s_(None), 7), (s_(None), s_(None), 3), (s_(None), 7, s_(None), 1),     # planes
    (Ellipsis, 2), (Ellipsis, 0, 1),                                              # volumes
    (s_(None, None, 2),), (s_(None, None, 3), s_(None, None, 3), s_(None, None, 3), 1),
    (s_(None, None, 7), 3), (5, s_(None, None, 5), s_(None, None, 4)),             # strided
    (s_(None, None, -1), 7, 3, 2), (5, s_(None, None, -2)), (Ellipsis, s_(None, None, -1)),
    (s_(None), s_(None, None, -1), 3), (s_(None, None, -3), s_(None, None, -4), 2, 1),  # reversed
    (s_(10, 20), s_(5, 9), 3, 1), (s_(1, -1), 1, s_(None, None, 2)),
    (s_(30, 34), s_(None), s_(2, 3)),
    (None, 5, Ellipsis, None), (s_(None), None, 7, 3, 2),
]


@pytest.fixture(scope="module")
def byte_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("bytes")
    out = {}
    for name, shape, dtype in [("4d_i2", (64, 48, 20, 6), "i2"), ("3d_f4", (91, 109, 37), "f4"),
                               ("4d_be_f8", (20, 24, 10, 5), ">f8")]:
        path = str(root / f"{name}.nii")
        data = _data(shape, dtype)
        parts = nib_parts(data.astype(data.dtype.newbyteorder("=")), 1,
                          ">" if dtype.startswith(">") else "<")
        out[name] = write_parts(root / name, parts, "nii")
        assert out[name] == path
    return out


@pytest.mark.parametrize("name", ["4d_i2", "3d_f4", "4d_be_f8"])
def test_slices_read_no_more_bytes_than_nibabel(byte_files, name):
    """voxpipe plans byte ranges and merges gaps up to 256 bytes (fileslice's threshold);
    nibabel (mmap=False, so it reads through fileslice and Python's buffered file) is the bound.
    The constant covers nothing voxpipe needs: it reads the header at load, not here."""
    path = byte_files[name]
    vi, ni = vp.load(path, mmap=False, threads=1), nib.load(path, mmap=False)
    shape = vi.shape
    slicers = [x for x in BYTE_SLICERS
               if sum(1 for a in x if a is not None and a is not Ellipsis) <= len(shape)]
    slicers += [Ellipsis, ()]
    problems = []
    for slicer in slicers:
        got_bytes, got = _bytes_read(lambda: vi.dataobj[slicer])
        want_bytes, want = _bytes_read(lambda: ni.dataobj[slicer])
        if not np.array_equal(got, want) or np.asarray(got).dtype != np.asarray(want).dtype:
            problems.append(f"{slicer_id(slicer)}: values differ")
        if got_bytes > want_bytes + 512:
            problems.append(f"{slicer_id(slicer)}: voxpipe read {got_bytes} bytes, nibabel "
                            f"{want_bytes}")
    assert not problems, "\n".join(problems)


def test_a_single_voxel_reads_only_its_bytes(byte_files):
    img = vp.load(byte_files["4d_i2"])
    got, value = _bytes_read(lambda: img.dataobj[5, 7, 3, 2])
    assert got <= 64 and value == nib.load(byte_files["4d_i2"]).dataobj[5, 7, 3, 2]


# -- 5. threads ----------------------------------------------------------------------------------

@pytest.mark.parametrize("keep", [None, True], ids=lambda k: f"keep_file_open={k}")
def test_threads_read_slices_of_shared_and_separate_images(gz_files, keep):
    names = ["nii", "plain gz", "indexed gz", "members gz"]
    shared = {n: vp.load(gz_files[n], keep_file_open=keep) for n in names}
    jobs = []
    for n in names:
        for t in range(3):
            for slicer in [(Ellipsis, t), (slice(None, None, -2), 5), (slice(3, 30), Ellipsis)]:
                jobs.append((n, slicer, True))
                jobs.append((n, slicer, False))
        jobs.append((n, Ellipsis, True))
    expected = {(n, slicer_id(sl)): np.asanyarray(nib.load(gz_files[n]).dataobj[sl])
                for n, sl, _ in jobs}
    results, errors = {}, []
    barrier = threading.Barrier(8)

    def work(k):
        barrier.wait()
        for i in range(k, len(jobs), 8):
            n, slicer, use_shared = jobs[i]
            try:
                img = shared[n] if use_shared else vp.load(gz_files[n], keep_file_open=keep,
                                                          threads=1 + i % 2)
                results[i] = img.dataobj[slicer]
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, (n, slicer, _) in enumerate(jobs):
        np.testing.assert_array_equal(results[i], expected[(n, slicer_id(slicer))],
                                      err_msg=f"{n} {slicer_id(slicer)}")


@pytest.mark.parametrize("kind", ["nii", "nii.gz"])
@pytest.mark.parametrize("scaled", [False, True])
def test_get_unscaled_of_a_slicer_is_nibabels(tmp_path, kind, scaled):
    """nibabel's own code calls the private _get_unscaled(slicer) (nib-roi's lossless_slice):
    it gives the stored values of the selection, of the kind nibabel's fileslice returns."""
    img = nib.Nifti1Image(_data((5, 4, 3, 2), "<i2"), np.eye(4))
    if scaled:
        img.header.set_slope_inter(0.5, 3.0)
    path = str(tmp_path / f"s.{kind}")
    nib.save(img, path)
    vi, ni = vp.load(path), nib.load(path)
    s = slice
    for slicer in nonempty_slicers((5, 4, 3, 2)) + [(s(1, 4), s(None), s(None, None, -1), 0),
                                                    (0, 0, 0, 0)]:
        got, want = vi.dataobj._get_unscaled(slicer), ni.dataobj._get_unscaled(slicer)
        assert type(got) is type(want) and got.dtype == want.dtype, slicer_id(slicer)
        assert np.array_equal(got, want) and _kind_of(got, path) == _kind_of(want, path)
    from nibabel.cmdline.roi import lossless_slice
    slicers = (s(1, 4), s(None, None, -1), s(None), s(0, 1))
    got, want = lossless_slice(vi, slicers), lossless_slice(ni, slicers)
    assert got.get_data_dtype() == want.get_data_dtype()
    np.testing.assert_array_equal(got.get_fdata(), want.get_fdata())
    np.testing.assert_array_equal(got.affine, want.affine)


@pytest.mark.parametrize("kind", ["nii", "nii.gz"])
@pytest.mark.parametrize("scaled", [False, True])
def test_reshape_is_nibabels_and_stays_lazy(tmp_path, kind, scaled):
    """nibabel's ArrayProxy.reshape (its CIFTI-2 loader drops the four leading axes of length 1
    with it): the stored values in file order under the new shape, as a proxy whose slices,
    pickles and copies equal nibabel's reshaped proxy's."""
    import pickle

    img = nib.Nifti1Image(_data((2, 3, 4, 5), "<i2"), np.eye(4))
    if scaled:
        img.header.set_slope_inter(2.0, 1.0)
    path = str(tmp_path / f"r.{kind}")
    nib.save(img, path)
    vi, ni = vp.load(path), nib.load(path)
    for shape in [(1, 2, 3, 1, 4, 5, 1), (6, 20), (-1, 5), (120,)]:
        got, want = vi.dataobj.reshape(shape), ni.dataobj.reshape(shape)
        assert isinstance(got, vp.ArrayProxy) and got.shape == want.shape
        for proxy in (got, pickle.loads(pickle.dumps(got)), got.copy()):
            assert proxy.shape == want.shape
            for slicer in [()] + nonempty_slicers(want.shape)[::7]:
                a, b = proxy[slicer], want[slicer]
                assert a.dtype == b.dtype and np.shape(a) == np.shape(b), (shape, slicer)
                assert np.array_equal(a, b), (shape, slicer_id(slicer))
    for bad in [(7,), (-1, -1)]:
        with pytest.raises(ValueError) as want_error:
            ni.dataobj.reshape(bad)
        with pytest.raises(ValueError) as got_error:
            vi.dataobj.reshape(bad)
        assert str(got_error.value) == str(want_error.value)



# -- pickles of images opened by relative names --------------------------------------------------

@pytest.mark.parametrize("name", ["x.nii", "x.nii.gz", "x.hdr"])
def test_a_pickle_names_the_file_opened_by_a_relative_name(tmp_path, monkeypatch, name):
    """An image opened as "sub/x.nii.gz" pickles the file it opened, wherever it is unpickled (a
    worker started in another folder) and whatever folder this process has moved to since it
    opened it: the values are nibabel's of that file. A file of the same relative name in the
    other folder (which a pickle of the name as given would read) is never read. The names
    users see stay as given, as nibabel's."""
    import pickle

    klass = nib.Nifti1Pair if name.endswith(".hdr") else nib.Nifti1Image
    rel = os.path.join("sub", name)
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    for folder, seed in ((here, 1), (elsewhere, 2)):
        (folder / "sub").mkdir(parents=True)
        img = klass(_data(SHAPE, "<i2", seed), np.eye(4))
        img.header.set_slope_inter(0.5, 3.0)
        nib.save(img, str(folder / rel))
    want = nib.load(str(here / rel))
    monkeypatch.chdir(here)
    index = None
    if name.endswith(".gz"):  # an explicit seek index, named relatively too
        index = os.path.join("sub", "x.gzidx")
        vp.gz.build_index(rel, output=index)
    img = vp.load(rel, index=index)
    assert img.get_filename() == nib.load(rel).get_filename() == _data_path(rel)
    assert img.file_map["image"].filename == img.dataobj.file_like == _data_path(rel)
    pickled_here = pickle.dumps(img)
    monkeypatch.chdir(elsewhere)
    # Unpickled in another folder; pickled after this process moved there; a copy and a
    # reshape made after the move.
    got = [pickle.loads(pickled_here).dataobj, pickle.loads(pickle.dumps(img.dataobj)),
           pickle.loads(pickle.dumps(img.dataobj.copy()))]
    for proxy in got:
        assert np.array_equal(np.asarray(proxy), np.asarray(want.dataobj))
        assert np.array_equal(proxy[..., 1], want.dataobj[..., 1])
    flat = pickle.loads(pickle.dumps(img.dataobj.reshape((-1,))))
    assert np.array_equal(np.asarray(flat), np.asarray(want.dataobj.reshape((-1,))))


def test_is_proxy_is_read_only_as_nibabels(tmp_path):
    """nibabel's contract: ``is_proxy`` is True and cannot be assigned (AttributeError), on
    every proxy voxpipe makes (files, and NIfTI-Zarr stores where zarr is installed)."""
    path = str(tmp_path / "p.nii")
    nib.save(nib.Nifti1Image(_data((3, 4, 5), np.int16), np.eye(4)), path)
    proxies = [nib.load(path).dataobj, vp.load(path).dataobj]
    try:
        import zarr  # noqa: F401
    except ImportError:
        pass
    else:
        vp.save(vp.load(path), str(tmp_path / "p.nii.zarr"))
        proxies.append(vp.load(str(tmp_path / "p.nii.zarr")).dataobj)
    for proxy in proxies:
        assert proxy.is_proxy is True and nib.arrayproxy.is_proxy(proxy)
        with pytest.raises(AttributeError):
            proxy.is_proxy = False
        assert proxy.is_proxy is True
