"""vp.accelerate_nibabel(): plain nibabel.load reads NIfTI through voxpipe, and only where
voxpipe can; everything else is nibabel's own code, errors included."""

from __future__ import annotations

import gzip
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
