"""voxpipe.torchio.read against TorchIO's default reader (SimpleITK), on files written with
nibabel/pydicom: tensors equal (dtype, (C, W, H, D) shape, values) and affines equal where ITK
and nibabel agree; where they cannot (oblique affines, scaled 32-bit integers), equal to nibabel's
and within ITK's rounding of it.
"""

from __future__ import annotations

import importlib
import sys
import warnings

import nibabel as nib
import numpy as np
import pytest

tio = pytest.importorskip("torchio")
torch = pytest.importorskip("torch")

from framework_testlib import (assert_same, diagonal_affine, oblique_affine,  # noqa: E402
                               permuted_affine, write_nifti)
import voxpipe.torchio  # noqa: E402

RNG = np.random.default_rng(181)


def _int16(shape):
    return RNG.integers(-32768, 32767, shape).astype(np.int16)


# name: (data, slope/inter)
CASES = {
    "int16": (_int16((20, 16, 12)), None),
    "int16_scaled": (_int16((20, 16, 12)), (0.73, -12.5)),
    "float32": (RNG.standard_normal((9, 8, 7)).astype(np.float32), None),
    "float64_scaled": (RNG.standard_normal((9, 8, 7)), (2.0, 1.0)),
    "uint8_scaled": (RNG.integers(0, 255, (9, 8, 7)).astype(np.uint8), (0.5, 0.0)),
    "uint16": (RNG.integers(0, 65535, (9, 8, 7)).astype(np.uint16), None),
    "int16_4d_scaled": (_int16((9, 8, 7, 3)), (0.5, 1.0)),
    "int16_4d": (_int16((9, 8, 7, 3)), None),
    "int16_4d_one_volume": (_int16((9, 8, 7, 1)), None),
    "three_wide": (_int16((3, 8, 7)), None),  # not an RGB image: (1, 3, 8, 7)
    "flat": (_int16((9, 8, 1)), None),
}


def _default(path):
    """TorchIO's default reader, checked to be SimpleITK's path (not its nibabel fallback)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # "Trying NiBabel..." would fail here
        img = tio.ScalarImage(path)
        img.load()
    return img


@pytest.mark.parametrize("affine", ["diagonal", "permuted"])
@pytest.mark.parametrize("ext", [".nii.gz", ".nii"])
@pytest.mark.parametrize("case", list(CASES))
def test_equals_torchio_default_reader(tmp_path, case, ext, affine):
    data, si = CASES[case]
    aff = diagonal_affine() if affine == "diagonal" else permuted_affine()
    path = write_nifti(tmp_path / f"{case}{ext}", data, aff, si)
    want = _default(path)
    got = tio.ScalarImage(path, reader=voxpipe.torchio.read)
    assert_same(got.data, want.data, "tensor")
    assert_same(got.affine, want.affine, "affine")
    tensor, affine_ = voxpipe.torchio.read(path)
    assert isinstance(tensor, torch.Tensor) and tensor.ndim == 4
    assert_same(tensor, want.data, "read()")
    assert_same(affine_, want.affine, "read() affine")


def test_oblique_affine_is_nibabels(tmp_path):
    """ITK rebuilds an oblique rotation from float32 header fields (about 1e-8 off); voxpipe
    keeps nibabel's affine."""
    path = write_nifti(tmp_path / "oblique.nii.gz", CASES["int16_scaled"][0], oblique_affine(),
                       (0.73, -12.5))
    want = _default(path)
    got = tio.ScalarImage(path, reader=voxpipe.torchio.read)
    assert_same(got.data, want.data, "tensor")
    assert_same(got.affine, nib.load(path).affine, "affine")
    np.testing.assert_allclose(got.affine, want.affine, rtol=0, atol=1e-6)


def test_scaled_int32_is_scaled_in_float64(tmp_path):
    """ITK rounds 32-bit integers to float32 before it scales them; voxpipe gives nibabel's
    values (float64 arithmetic, one rounding), within one float32 step of ITK's."""
    data = RNG.integers(-2**31, 2**31 - 1, (9, 8, 7)).astype(np.int32)
    path = write_nifti(tmp_path / "int32.nii.gz", data, diagonal_affine(), (0.7, 3.0))
    got = tio.ScalarImage(path, reader=voxpipe.torchio.read)
    assert_same(got.data, torch.from_numpy(nib.load(path).get_fdata(dtype=np.float32)[None]))
    want = _default(path).data
    assert got.data.dtype == want.dtype == torch.float32
    np.testing.assert_allclose(got.data.numpy(), want.numpy(), rtol=2 ** -23, atol=0)


def test_label_map_and_subject(tmp_path):
    labels = RNG.integers(0, 5, (9, 8, 7)).astype(np.uint8)
    path = write_nifti(tmp_path / "seg.nii.gz", labels, diagonal_affine())
    t1 = write_nifti(tmp_path / "t1.nii.gz", _int16((9, 8, 7)), diagonal_affine(), (0.5, 0.0))
    subject = tio.Subject(t1=tio.ScalarImage(t1, reader=voxpipe.torchio.read),
                          seg=tio.LabelMap(path, reader=voxpipe.torchio.read))
    out = tio.Compose([tio.RescaleIntensity(out_min_max=(0, 1))])(subject)
    assert_same(out["seg"].data, torch.from_numpy(labels[None]))
    assert_same(subject["seg"].data, tio.LabelMap(path).data)
    assert out["t1"].data.dtype == torch.float32


def test_dicom_folder_equals_torchio_default_reader(tmp_path):
    """A series with an integer rescale: ITK returns int32 values, voxpipe the same values as
    float32, the same voxel order and affine."""
    pytest.importorskip("pydicom")
    from test_dicom_series import write_series

    write_series(str(tmp_path), orientation="axial", n=5)
    got = tio.ScalarImage(tmp_path, reader=voxpipe.torchio.read)
    want = tio.ScalarImage(tmp_path)
    assert got.data.dtype == torch.float32 and want.data.dtype == torch.int32
    assert_same(got.data, want.data.to(torch.float32))
    assert_same(got.affine, want.affine)


def test_dicom_file_equals_torchio_default_reader(tmp_path):
    """One .dcm file (vp.load reads it as a series of one image, whose image holds the decoded
    array, not a proxy): ITK's values in ITK's order, and the affine of the folder holding it
    (ITK gives a single file a slice spacing of 1; voxpipe the slice thickness)."""
    pytest.importorskip("pydicom")
    from test_dicom_series import write_series

    ((path, _),) = write_series(str(tmp_path), orientation="axial", n=1).values()
    got = tio.ScalarImage(path, reader=voxpipe.torchio.read)
    want = tio.ScalarImage(path)
    assert got.data.dtype == torch.float32 and want.data.dtype == torch.int32
    assert_same(got.data, want.data.to(torch.float32))
    assert_same(got.affine, tio.ScalarImage(tmp_path, reader=voxpipe.torchio.read).affine)


def test_import_without_torchio_names_the_package(monkeypatch):
    monkeypatch.delitem(sys.modules, "voxpipe.torchio", raising=False)
    monkeypatch.setitem(sys.modules, "torchio", None)  # import torchio -> ModuleNotFoundError
    with pytest.raises(ImportError, match=r"voxpipe.torchio needs TorchIO: pip install 'voxpipe\[torchio\]'"):
        importlib.import_module("voxpipe.torchio")


def _nibabel_data(name):
    import os
    return os.path.join(os.path.dirname(nib.__file__), "tests", "data", name)


@pytest.mark.parametrize("ext", [".nii", ".nii.gz"])
@pytest.mark.parametrize("case", ["int16", "int16_scaled", "float32", "float64_scaled",
                                  "uint16", "int16_4d"])
def test_big_endian_files_give_native_tensors(tmp_path, case, ext):
    """torch takes native byte order only: a big-endian file's values come back swapped, equal
    to SimpleITK's."""
    data, si = CASES[case]
    path = write_nifti(tmp_path / f"be_{case}{ext}", data, diagonal_affine(), si, endianness=">")
    assert nib.load(path).header.endianness == ">"
    want = _default(path)
    got = tio.ScalarImage(path, reader=voxpipe.torchio.read)
    assert_same(got.data, want.data, "tensor")
    assert_same(got.affine, want.affine, "affine")


@pytest.mark.parametrize("name", ["anatomical.nii", "functional.nii", "example4d.nii.gz"])
def test_nibabel_test_files_equal_torchio_default_reader(name):
    """The files nibabel's own tests read (anatomical.nii and functional.nii are big-endian)."""
    path = _nibabel_data(name)
    want = _default(path)
    got = tio.ScalarImage(path, reader=voxpipe.torchio.read)
    assert_same(got.data, want.data, "tensor")
    np.testing.assert_allclose(got.affine, want.affine, rtol=0, atol=1e-6)
