"""A local NIfTI file replaced (renamed over) or rewritten in place while a lazy image, a pickle
of it or a Dask graph over it is alive never comes back as the new file's values under the old
header: every read checks that the data file is the one opened (device, inode, size,
modification time) and raises VoxpipeIOError naming it otherwise. A new load reads the new file.

Rewrites here keep the file's size, as a rewrite with the same shape and dtype does; their
modification time is moved on by a second, as the clock of any real rewrite moves it, so that a
coarse file-system clock (one kernel tick) cannot make two versions look alike within a test."""

import os
import pickle

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from voxpipe.errors import VoxpipeFileNotFoundError, VoxpipeIOError

SHAPE = (6, 5, 4, 12)
CHANGED = "changed since it was opened"


def _data(seed):
    return np.random.default_rng(seed).integers(-300, 300, SHAPE, dtype=np.int16)


def _write(path, seed, slope):
    img = nib.Nifti1Pair if str(path).endswith(".hdr") else nib.Nifti1Image
    out = img(_data(seed), np.eye(4))
    if slope is not None:
        out.header.set_slope_inter(slope, 1.0)
    nib.save(out, str(path))


def _data_file(path):
    return str(path)[:-4] + ".img" if str(path).endswith(".hdr") else str(path)


def _later(path, before_ns):
    """Moves the modification time of `path` one second past `before_ns`."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, before_ns + 10**9))


def change(path, how, seed=1, slope=2.0):
    """Rewrites the image at `path` with other values and scaling: in place (nibabel's own
    save, which truncates and writes the same file) or by renaming a new file over it."""
    data_file = _data_file(path)
    before = os.stat(data_file).st_mtime_ns
    if how == "in_place":
        _write(path, seed, slope)
    else:
        tmp = os.path.join(os.path.dirname(str(path)), "new-" + os.path.basename(str(path)))
        _write(tmp, seed, slope)
        if str(path).endswith(".hdr"):
            os.replace(tmp[:-4] + ".img", data_file)
        os.replace(tmp, str(path))
    _later(data_file, before)


SUFFIXES = [".nii", ".nii.gz", ".hdr"]
ACCESSES = {
    "volume": lambda img: img.dataobj[..., 3],
    "get_fdata": lambda img: img.get_fdata(),
    "asanyarray": lambda img: np.asanyarray(img.dataobj),  # a memory map where unscaled .nii
    "read": lambda img: img.dataobj.read((slice(None), 2), np.float32),
}


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize("how", ["in_place", "rename"])
@pytest.mark.parametrize("keep_file_open", [None, True])
@pytest.mark.parametrize("slope", [0.5, None], ids=["scaled", "unscaled"])
@pytest.mark.parametrize("access", list(ACCESSES))
def test_an_image_refuses_a_file_changed_since_it_was_opened(tmp_path, suffix, how,
                                                             keep_file_open, slope, access):
    path = tmp_path / ("img" + suffix)
    _write(path, 0, slope)
    img = vp.load(path, keep_file_open=keep_file_open)
    want = nib.load(str(path)).get_fdata()
    np.testing.assert_array_equal(img.get_fdata(caching="unchanged"), want)  # reader kept
    change(path, how)
    with pytest.raises(VoxpipeIOError, match=CHANGED) as info:
        ACCESSES[access](img)
    assert info.value.path == _data_file(path)
    assert _data_file(path) in str(info.value)
    # A new load reads the new file, as nibabel's does.
    np.testing.assert_array_equal(vp.load(path).get_fdata(), nib.load(str(path)).get_fdata())


@pytest.mark.parametrize("suffix", [".nii", ".nii.gz"])
def test_a_truncated_file_is_an_error_not_a_mapping(tmp_path, suffix):
    """Cut after open: the next access fails (a map of the shorter file would raise SIGBUS)."""
    path = tmp_path / ("img" + suffix)
    _write(path, 0, None)
    img = vp.load(path)
    with open(path, "r+b") as f:
        f.truncate(400)
    with pytest.raises(VoxpipeIOError, match=CHANGED):
        np.asanyarray(img.dataobj)


def test_a_pair_whose_image_file_appears_after_open_is_refused(tmp_path):
    path = tmp_path / "img.hdr"
    _write(path, 0, 0.5)
    img_file = tmp_path / "img.img"
    saved = img_file.read_bytes()
    img_file.unlink()
    img = vp.load(path)  # opens, as nibabel's: reading fails
    with pytest.raises(VoxpipeFileNotFoundError):
        img.get_fdata()
    img_file.write_bytes(saved)
    with pytest.raises(VoxpipeIOError, match=CHANGED):
        img.get_fdata()


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_a_pickle_made_before_a_change_refuses_the_new_file(tmp_path, suffix):
    path = tmp_path / ("img" + suffix)
    _write(path, 0, 0.5)
    img = vp.load(path)
    image_pickle, proxy_pickle = pickle.dumps(img), pickle.dumps(img.dataobj)
    np.testing.assert_array_equal(pickle.loads(image_pickle).get_fdata(), img.get_fdata())
    change(path, "rename")
    for blob in (image_pickle, proxy_pickle):
        with pytest.raises(VoxpipeIOError, match=CHANGED):
            np.asanyarray(pickle.loads(blob).dataobj if blob is image_pickle
                          else pickle.loads(blob))
    # Pickled from a new load: the new file.
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(vp.load(path))).get_fdata(),
                                  nib.load(str(path)).get_fdata())


def test_a_pickle_read_on_another_machine_compares_size_and_time_only(tmp_path, monkeypatch):
    """A worker on another machine sees another device number (NFS) or its own copy of the
    file (another inode): only the version (size, modification time) is compared there."""
    from voxpipe._foundation import identity as _identity

    path = tmp_path / "img.nii"
    _write(path, 0, 0.5)
    blob = pickle.dumps(vp.load(path))
    os.replace(path, tmp_path / "moved.nii")
    os.replace(tmp_path / "moved.nii", path)  # the same file back: it reads
    np.testing.assert_array_equal(pickle.loads(blob).get_fdata(), nib.load(str(path)).get_fdata())
    st = os.stat(path)
    copy = tmp_path / "copy.nii"
    copy.write_bytes(path.read_bytes())
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(copy, path)  # a copy: another inode, the same size and time
    with pytest.raises(VoxpipeIOError, match=CHANGED):
        pickle.loads(blob)
    monkeypatch.setattr(_identity, "THIS_MACHINE", "another-machine")
    np.testing.assert_array_equal(pickle.loads(blob).get_fdata(), nib.load(str(path)).get_fdata())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(VoxpipeIOError, match=CHANGED):
        pickle.loads(blob)


@pytest.mark.filterwarnings("ignore:to_dask. a .nii.gz stream")
@pytest.mark.parametrize("suffix", [".nii", ".nii.gz"])
def test_a_dask_graph_over_a_file_replaced_while_it_computes_raises(tmp_path, suffix):
    """12 one-volume chunks on one thread; the file is replaced after the first chunk. Before,
    the remaining 11 came back as the new stored values times the old slope and intercept."""
    pytest.importorskip("dask")
    from dask.callbacks import Callback

    path = tmp_path / ("img" + suffix)
    _write(path, 0, 0.5)
    arr = vp.to_dask(path, np.float32, chunks=1)
    done = []

    def replace_once(key, result, dsk, state, worker_id):
        if isinstance(result, np.ndarray) and not done:
            done.append(key)
            change(path, "rename")

    with Callback(posttask=replace_once), pytest.raises(VoxpipeIOError, match=CHANGED):
        arr.compute(scheduler="synchronous")
    assert done


@pytest.mark.parametrize("how", ["in_place", "rename"])
def test_a_dask_graph_built_before_a_change_raises(tmp_path, how):
    pytest.importorskip("dask")
    path = tmp_path / "img.nii"
    _write(path, 0, 0.5)
    built = vp.to_dask(path, np.float32, chunks=3)
    computed = vp.to_dask(vp.load(path), np.float32, chunks=3)
    np.testing.assert_array_equal(computed[..., :3].compute(scheduler="threads"),
                                  nib.load(str(path)).get_fdata(dtype=np.float32)[..., :3])
    # The graph sent elsewhere (a scheduler, a file) before the change.
    shipped = pickle.dumps(built)
    np.testing.assert_array_equal(pickle.loads(shipped)[..., 4:6].compute(scheduler="threads"),
                                  nib.load(str(path)).get_fdata(dtype=np.float32)[..., 4:6])
    change(path, how)
    for arr in (built, computed, pickle.loads(shipped)):
        with pytest.raises(VoxpipeIOError, match=CHANGED):
            arr.compute(scheduler="threads")
    # A graph built now is another graph (another name), of the new file.
    new = vp.to_dask(path, np.float32, chunks=3)
    assert new.name != built.name
    np.testing.assert_array_equal(new.compute(scheduler="threads"),
                                  nib.load(str(path)).get_fdata(dtype=np.float32))


def test_the_dask_token_is_the_file_as_opened(tmp_path):
    pytest.importorskip("dask")
    from dask.base import tokenize

    path = tmp_path / "img.nii"
    _write(path, 0, 0.5)
    img = vp.load(path)
    token = tokenize(img.dataobj)
    change(path, "in_place")
    assert tokenize(img.dataobj) == token  # the values it was opened for (or an error)
    assert tokenize(vp.load(path).dataobj) != token


def test_accelerated_nibabel_reloads_what_it_rewrites(tmp_path):
    """nibabel's own habit: save, load, save again at the same path, load again."""
    path = str(tmp_path / "img.nii")
    _write(path, 0, 0.5)
    with vp.accelerate_nibabel():
        old = nib.load(path)
        assert type(old.dataobj) is vp.ArrayProxy
        old_values = old.get_fdata()
        change(path, "in_place")
        new = nib.load(path)
        np.testing.assert_array_equal(new.get_fdata(), _data(1) * 2.0 + 1.0)
        with pytest.raises(VoxpipeIOError, match=CHANGED):
            old.dataobj[..., 0]
        np.testing.assert_array_equal(old.get_fdata(), old_values)  # cached by nibabel
