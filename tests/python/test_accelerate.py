"""vp.accelerate_nibabel(): plain nibabel.load reads NIfTI through voxpipe, and only where
voxpipe can; everything else is nibabel's own code, errors included."""

from __future__ import annotations

import gzip
import io
import pickle

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from voxpipe import _core


@pytest.fixture(autouse=True)
def _restore():
    vp.accelerate_nibabel(False)
    yield
    vp.accelerate_nibabel(False)


def write(path, klass=nib.Nifti1Image, dtype=np.int16, scaled=True, shape=(5, 6, 4, 3)):
    data = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
    img = klass(data, np.diag([1.5, 2.0, 2.5, 1.0]))
    if scaled:
        img.header.set_slope_inter(0.25, -3.0)
    img.header.extensions.append(nib.nifti1.Nifti1Extension(6, b"accelerated"))
    nib.save(img, str(path))
    return str(path)


CASES = [("a.nii", nib.Nifti1Image), ("a.nii.gz", nib.Nifti1Image), ("a.hdr", nib.Nifti1Pair),
         ("a2.nii.gz", nib.Nifti2Image), ("a2.img", nib.Nifti2Pair)]


@pytest.mark.parametrize("name,klass", CASES, ids=[c[0] for c in CASES])
def test_nibabel_load_reads_through_voxpipe(tmp_path, name, klass):
    path = write(tmp_path / name, klass)
    want = nib.load(path)
    assert not isinstance(want.dataobj, vp.ArrayProxy)
    with vp.accelerate_nibabel():
        got = nib.load(path)
        from_class = klass.from_filename(path)
    for img in (got, from_class):
        assert type(img) is type(want) is klass
        assert isinstance(img.dataobj, vp.ArrayProxy)
        assert img.header.binaryblock == want.header.binaryblock
        assert img.header.extensions == want.header.extensions
        np.testing.assert_array_equal(img.affine, want.affine)
        assert img.get_filename() == want.get_filename()
        for dtype in (np.float64, np.float32):
            a, b = img.get_fdata(dtype=dtype), want.get_fdata(dtype=dtype)
            assert a.dtype == b.dtype and np.array_equal(a, b)
        np.testing.assert_array_equal(img.dataobj[1:4, ..., 2], want.dataobj[1:4, ..., 2])
        np.testing.assert_array_equal(img.dataobj.get_unscaled(), want.dataobj.get_unscaled())


def test_switching_and_context_manager(tmp_path):
    path = write(tmp_path / "a.nii")
    assert not vp.nibabel_accelerated()
    with vp.accelerate_nibabel() as handle:
        assert isinstance(handle, vp.NibabelAcceleration)
        assert vp.nibabel_accelerated()
        with vp.accelerate_nibabel(False):
            assert not isinstance(nib.load(path).dataobj, vp.ArrayProxy)
        assert isinstance(nib.load(path).dataobj, vp.ArrayProxy)
    assert not vp.nibabel_accelerated()
    assert not isinstance(nib.load(path).dataobj, vp.ArrayProxy)
    vp.accelerate_nibabel()
    assert isinstance(nib.Nifti1Image.from_filename(path).dataobj, vp.ArrayProxy)
    vp.accelerate_nibabel(False)
    assert type(nib.load(path).dataobj) is nib.arrayproxy.ArrayProxy
    # nibabel's class is as it was: no attribute left behind
    assert "from_file_map" not in vars(nib.Nifti1Pair)


def test_other_formats_and_file_objects_stay_nibabels(tmp_path):
    mgh = tmp_path / "a.mgz"
    nib.save(nib.MGHImage(np.ones((3, 4, 5), np.float32), np.eye(4)), str(mgh))
    path = write(tmp_path / "a.nii", scaled=False)
    with vp.accelerate_nibabel():
        assert not isinstance(nib.load(str(mgh)).dataobj, vp.ArrayProxy)
        with open(path, "rb") as f:
            streamed = nib.Nifti1Image.from_stream(f)
            np.testing.assert_array_equal(streamed.get_fdata(), nib.load(path).get_fdata())


def test_what_voxpipe_refuses_falls_back(tmp_path, monkeypatch):
    path = write(tmp_path / "a.nii.gz")

    def refuse(_path):
        raise vp.errors.FormatError("refused")

    monkeypatch.setattr(_core, "open", refuse)
    with vp.accelerate_nibabel():
        img = nib.load(path)
    assert type(img.dataobj) is nib.arrayproxy.ArrayProxy
    np.testing.assert_array_equal(img.get_fdata(), nib.load(path).get_fdata())


def test_nibabel_errors_stay_nibabels(tmp_path):
    """A file neither can open fails with nibabel's exception, not voxpipe's."""
    bad = tmp_path / "bad.nii"
    bad.write_bytes(b"\0" * 100)
    cut = tmp_path / "cut.nii.gz"
    cut.write_bytes(gzip.compress(open(write(tmp_path / "whole.nii"), "rb").read()[:200]))
    for path in (bad, cut):
        with pytest.raises(Exception) as want:
            nib.load(str(path))
        with vp.accelerate_nibabel(), pytest.raises(Exception) as got:
            nib.load(str(path))
        assert type(got.value) is type(want.value)
        assert not isinstance(got.value, vp.VoxpipeError)


def test_proxies_copy_and_pickle(tmp_path):
    path = write(tmp_path / "a.nii.gz")
    img = vp.load(path, threads=1)
    for copy in (pickle.loads(pickle.dumps(img)), __import__("copy").deepcopy(img)):
        assert isinstance(copy.dataobj, vp.ArrayProxy) and copy.dataobj is not img.dataobj
        assert copy.dataobj.threads == 1
        np.testing.assert_array_equal(copy.get_fdata(), img.get_fdata())
        np.testing.assert_array_equal(copy.affine, img.affine)
    # The pickle holds the name and options, not the voxels.
    assert len(pickle.dumps(img.dataobj)) < 1000


def _file_map_of_bytes(img):
    """img written to a BytesIO file map, as nibabel's round trips write it: the stream is
    left at its end."""
    file_map = img.make_file_map({"image": io.BytesIO()})
    img.to_file_map(file_map)
    return file_map


@pytest.mark.parametrize("klass", [nib.Nifti1Image, nib.Nifti2Image])
def test_a_bytesio_file_map_is_read_from_its_start(tmp_path, klass):
    """nibabel reads a file map's stream from the holder's pos (0), not from where the stream
    stands: after to_file_map, at its end."""
    img = nib.load(write(tmp_path / "a.nii", klass))
    file_map = _file_map_of_bytes(img)
    want = klass.from_file_map(file_map)
    with vp.accelerate_nibabel():
        got = klass.from_file_map(file_map)
        from_bytes = klass.from_bytes(img.to_bytes())
    for image in (got, from_bytes):
        assert isinstance(image.dataobj, vp.ArrayProxy)
        assert image.header.binaryblock == want.header.binaryblock
        np.testing.assert_array_equal(image.get_fdata(), want.get_fdata())
    # Where pos is set, nibabel reads the header there and the data at vox_offset from the
    # stream's start: its own code does that.
    file_map["image"].pos = 1
    with vp.accelerate_nibabel(), pytest.raises(Exception) as got_error:
        klass.from_file_map(file_map)
    with pytest.raises(Exception) as want_error:
        klass.from_file_map(file_map)
    assert type(got_error.value) is type(want_error.value)


def test_an_image_from_memory_pickles_with_its_bytes(tmp_path):
    """A nibabel image read from a BytesIO pickles (its proxy's stream pickles with its bytes):
    so does voxpipe's, read from the same stream."""
    data = nib.load(write(tmp_path / "a.nii.gz")).to_bytes()
    want = pickle.loads(pickle.dumps(nib.Nifti1Image.from_bytes(data)))
    with vp.accelerate_nibabel():
        got = nib.Nifti1Image.from_bytes(data)
    assert isinstance(got.dataobj, vp.ArrayProxy)
    back = pickle.loads(pickle.dumps(got))
    assert isinstance(back.dataobj, vp.ArrayProxy)
    np.testing.assert_array_equal(back.get_fdata(), want.get_fdata())
    np.testing.assert_array_equal(__import__("copy").copy(got.dataobj)[..., 1],
                                  want.dataobj[..., 1])


def _needs_fixes(path, gz=False):
    """A file whose header nibabel fixes at load, logging each fix: qfac 0 (level 20),
    qform_code 9 and sform_code 7 (level 30)."""
    img = nib.Nifti1Image(np.arange(24, dtype=np.int16).reshape(2, 3, 4), np.eye(4))
    raw = bytearray(img.to_bytes())
    hdr = nib.Nifti1Header(bytes(raw[:348]), check=False)
    hdr["pixdim"][0] = 0
    hdr["qform_code"] = 9
    hdr["sform_code"] = 7
    raw[:348] = hdr.binaryblock
    path.write_bytes(gzip.compress(bytes(raw)) if gz else bytes(raw))
    return str(path)


@pytest.fixture
def nibabel_log():
    """The records nibabel's logger (imageglobals.logger) emits, at every level."""
    from nibabel import imageglobals

    records = []

    class Keep(__import__("logging").Handler):
        def emit(self, record):
            records.append((record.levelno, record.getMessage()))

    handler, level = Keep(), imageglobals.logger.level
    imageglobals.logger.addHandler(handler)
    imageglobals.logger.setLevel(1)
    yield records
    imageglobals.logger.removeHandler(handler)
    imageglobals.logger.setLevel(level)


@pytest.mark.parametrize("gz", [False, True], ids=["nii", "nii.gz"])
def test_header_fixes_are_logged_and_raised_as_nibabel_does(tmp_path, nibabel_log, gz):
    from nibabel import imageglobals
    from nibabel.spatialimages import HeaderDataError

    path = _needs_fixes(tmp_path / ("a.nii.gz" if gz else "a.nii"), gz)
    want = nib.load(path)
    want_log = list(nibabel_log)
    assert [level for level, _ in want_log] == [20, 30, 30]
    loaders = {"vp.load": vp.load, "nib.load": nib.load,
               "from_bytes": lambda p: nib.Nifti1Image.from_bytes(open(p, "rb").read())}
    for name, load in loaders.items():
        nibabel_log.clear()
        with vp.accelerate_nibabel():
            got = load(path)
        assert isinstance(got.dataobj, vp.ArrayProxy), name
        assert nibabel_log == want_log, name
        assert got.header.binaryblock == want.header.binaryblock
        np.testing.assert_array_equal(got.affine, want.affine)
    # With error_level lowered to 30, nibabel raises at the first level-30 problem, after
    # logging what came before it: vp.load does the same, and under acceleration the error
    # (and its log, once) is nibabel's own.
    with imageglobals.ErrorLevel(30):
        nibabel_log.clear()
        with pytest.raises(HeaderDataError) as want_error:
            nib.load(path)
        want_log = list(nibabel_log)
        for accelerated in (False, True):
            nibabel_log.clear()
            with vp.accelerate_nibabel(accelerated), pytest.raises(HeaderDataError) as got:
                (nib.load if accelerated else vp.load)(path)
            assert str(got.value) == str(want_error.value)
            assert nibabel_log == want_log


def test_cifti2_data_stay_a_voxpipe_proxy(tmp_path):
    """nibabel's CIFTI-2 loader reshapes the NIfTI-2 data object (reshape_dataobj): the image's
    dataobj stays voxpipe's proxy instead of a NumPy array read at load."""
    from nibabel import cifti2

    mask = np.zeros((3, 4, 2), bool)
    mask[1:, ::2] = True
    axes = (cifti2.ScalarAxis(["a", "b", "c"]),
            cifti2.BrainModelAxis.from_mask(mask, affine=np.eye(4)))
    data = np.arange(3 * int(mask.sum()), dtype=np.float32).reshape(3, -1)
    path = str(tmp_path / "a.dscalar.nii")
    cifti2.Cifti2Image(data, header=axes).to_filename(path)
    want = nib.load(path)
    with vp.accelerate_nibabel():
        got = nib.load(path)
    assert type(got) is type(want) is cifti2.Cifti2Image
    assert isinstance(got.dataobj, vp.ArrayProxy) and got.dataobj.shape == want.shape
    np.testing.assert_array_equal(got.get_fdata(), want.get_fdata())
    np.testing.assert_array_equal(got.dataobj[1, 2:5], want.dataobj[1, 2:5])
