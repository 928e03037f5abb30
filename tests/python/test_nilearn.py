"""nilearn on voxpipe-loaded images: the same results as on nibabel-loaded images.

voxpipe's images are nibabel's own classes with voxpipe's ArrayProxy, so nilearn takes them as
they are; each function must give what it gives on ``nib.load`` of the same file (equal arrays,
affines and headers), whether the image comes from ``vp.load`` or from ``nibabel.load`` under
``vp.accelerate_nibabel()``.
"""

from __future__ import annotations

import warnings

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp

nilearn_image = pytest.importorskip("nilearn.image")
from nilearn.maskers import NiftiMasker  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("nilearn")
    rng = np.random.default_rng(7)
    affine = np.array([[-2.0, 0, 0, 90], [0, 2.5, 0, -126], [0, 0, 2.2, -72], [0, 0, 0, 1]])
    bold = (rng.normal(1000, 50, (12, 14, 10, 6))).astype(np.int16)
    img = nib.Nifti1Image(bold, affine)
    img.header.set_slope_inter(0.5, 3.0)
    img.header.set_xyzt_units("mm", "sec")
    img.header["pixdim"][4] = 2.0
    paths = {"bold": str(d / "bold.nii.gz")}
    nib.save(img, paths["bold"])
    t1 = rng.normal(0, 1, (16, 15, 13)).astype(np.float32)
    t1_affine = np.array([[1.5, 0.1, 0, 68], [0, 1.4, 0.05, -128], [0, 0, 1.6, -74], [0, 0, 0, 1]])
    paths["t1"] = str(d / "t1.nii")
    nib.save(nib.Nifti1Image(t1, t1_affine), paths["t1"])
    mask = np.zeros(bold.shape[:3], np.uint8)
    mask[3:9, 4:11, 2:8] = 1
    paths["mask"] = str(d / "mask.nii.gz")
    nib.save(nib.Nifti1Image(mask, affine), paths["mask"])
    return paths


def loaders():
    def accelerated(path):
        with vp.accelerate_nibabel():
            img = nib.load(path)
        assert isinstance(img.dataobj, vp.ArrayProxy)
        return img

    return [pytest.param(vp.load, id="vp.load"), pytest.param(accelerated, id="accelerated")]


def assert_same_image(got, want):
    assert isinstance(got, nib.Nifti1Image)
    np.testing.assert_array_equal(got.affine, want.affine)
    assert got.shape == want.shape
    a, b = got.get_fdata(), want.get_fdata()
    assert a.dtype == b.dtype
    np.testing.assert_array_equal(a, b)
    assert got.header.binaryblock == want.header.binaryblock


@pytest.mark.parametrize("load", loaders())
def test_images_are_niftilike(files, load):
    img = load(files["bold"])
    assert type(img) is nib.Nifti1Image
    assert isinstance(img.dataobj, vp.ArrayProxy)
    # nilearn's own check of an image argument
    from nilearn.image import check_niimg

    checked = check_niimg(img, ensure_ndim=4)
    np.testing.assert_array_equal(checked.get_fdata(), nib.load(files["bold"]).get_fdata())


@pytest.mark.parametrize("load", loaders())
def test_mean_index_math(files, load):
    ours, ref = load(files["bold"]), nib.load(files["bold"])
    assert_same_image(nilearn_image.mean_img(ours, copy_header=True),
                      nilearn_image.mean_img(ref, copy_header=True))
    assert_same_image(nilearn_image.index_img(ours, 3), nilearn_image.index_img(ref, 3))
    assert_same_image(nilearn_image.index_img(ours, slice(1, 5)),
                      nilearn_image.index_img(ref, slice(1, 5)))
    assert_same_image(nilearn_image.math_img("img * 2 - 1", img=ours),
                      nilearn_image.math_img("img * 2 - 1", img=ref))


@pytest.mark.parametrize("load", loaders())
def test_resample_to_img(files, load):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nilearn's FutureWarnings on defaults, the same for both
        got = nilearn_image.resample_to_img(load(files["bold"]), load(files["t1"]),
                                            interpolation="continuous", copy_header=True,
                                            force_resample=True)
        want = nilearn_image.resample_to_img(nib.load(files["bold"]), nib.load(files["t1"]),
                                             interpolation="continuous", copy_header=True,
                                             force_resample=True)
    assert_same_image(got, want)


@pytest.mark.parametrize("load", loaders())
def test_nifti_masker(files, load):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = NiftiMasker(mask_img=load(files["mask"]), standardize=False).fit_transform(
            load(files["bold"]))
        want = NiftiMasker(mask_img=nib.load(files["mask"]), standardize=False).fit_transform(
            nib.load(files["bold"]))
    assert got.dtype == want.dtype and got.shape == want.shape == (6, 6 * 7 * 6)
    np.testing.assert_array_equal(got, want)


def test_paths_under_acceleration(files):
    """nilearn given paths opens them with nibabel.load: accelerated, the same results."""
    want = nilearn_image.mean_img(files["bold"], copy_header=True)
    with vp.accelerate_nibabel():
        got = nilearn_image.mean_img(files["bold"], copy_header=True)
        assert isinstance(nilearn_image.load_img(files["bold"]).dataobj, vp.ArrayProxy)
    assert_same_image(got, want)
    assert not isinstance(nib.load(files["bold"]).dataobj, vp.ArrayProxy)
