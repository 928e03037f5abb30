"""voxpipe.monai.VoxpipeReader against MONAI's own readers, on files written with nibabel/pydicom.

NIfTI: the reader's arrays and metadata equal monai.data.NibabelReader's (dtype=None, every
option), and LoadImage / LoadImaged results equal with each LoadImage dtype (the default float32
path decodes straight into float32). DICOM folders: values, affine, spatial shape and spacing
equal monai.data.PydicomReader's when InstanceNumbers run along the slice normal, and the same
world coordinates per value when they do not.
"""

from __future__ import annotations

import importlib
import sys
import warnings

import numpy as np
import pytest

monai = pytest.importorskip("monai")
from monai.data import NibabelReader, PydicomReader  # noqa: E402
from monai.transforms import LoadImage, LoadImaged  # noqa: E402

from framework_testlib import (assert_same, diagonal_affine, oblique_affine,  # noqa: E402
                               permuted_affine, write_nifti)
from voxpipe.monai import VoxpipeReader  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # MONAI's optional decoders

RNG = np.random.default_rng(18)


def _int16(shape):
    return RNG.integers(-2000, 30000, shape).astype(np.int16)


def _int64(shape):
    """Random int64 with values that round differently to float32 directly (one rounding, as
    LoadImage casts) than through float64 (2**60 + 2**36 + 1 lands on a float32 tie)."""
    data = RNG.integers(-2**62, 2**62, shape)
    data.flat[::7] = 2**60 + 2**36 + 1
    return data


# name: (file name, data, affine, slope/inter, endianness)
CASES = {
    "int16_scaled_gz": ("a.nii.gz", _int16((9, 8, 7)), oblique_affine(), (0.73, -12.5), None),
    "int16_nii": ("b.nii", _int16((9, 8, 7)), diagonal_affine(), None, None),
    "float32_permuted": ("c.nii.gz", RNG.standard_normal((9, 8, 7)).astype(np.float32),
                         permuted_affine(), None, None),
    "int16_4d_scaled": ("d.nii.gz", _int16((9, 8, 7, 3)), oblique_affine(), (0.5, 1.0), None),
    "uint8_4d_one_volume": ("e.nii.gz", RNG.integers(0, 255, (9, 8, 7, 1)).astype(np.uint8),
                            permuted_affine(), None, None),
    "int32_scaled": ("f.nii.gz", RNG.integers(-2**31, 2**31 - 1, (9, 8, 7)).astype(np.int32),
                     diagonal_affine(), (0.7, 3.0), None),
    "int64": ("g.nii.gz", _int64((9, 8, 7)), diagonal_affine(), None, None),
    "float64_big_endian": (">.nii.gz", RNG.standard_normal((9, 8, 7)), oblique_affine(),
                           (2.0, -1.0), ">"),
    "2d_uint16": ("h.nii.gz", RNG.integers(0, 65535, (9, 8)).astype(np.uint16),
                  diagonal_affine(), None, None),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("monai")
    out = {name: write_nifti(d / fn, data, aff, si, endian)
           for name, (fn, data, aff, si, endian) in CASES.items()}
    # pixdim that disagrees with the affine: both readers let MONAI rectify the header.
    import nibabel as nib
    img = nib.load(out["int16_nii"])
    img.header["pixdim"][1:4] = [5.0, 5.0, 5.0]
    out["pixdim_mismatch"] = str(d / "i.nii.gz")
    nib.save(nib.Nifti1Image(np.asanyarray(img.dataobj), None, img.header), out["pixdim_mismatch"])
    return out


def _both(reader_kwargs, path, dtype=None):
    """(VoxpipeReader's get_data, NibabelReader's get_data) for `path`; where NibabelReader
    raises, VoxpipeReader must raise the same exception type, and the test ends there."""
    ours, ref = VoxpipeReader(dtype=dtype, **reader_kwargs), NibabelReader(**reader_kwargs)
    try:
        want = ref.get_data(ref.read(path))
    except Exception as exc:  # noqa: BLE001 - whatever it is, voxpipe must raise it too
        with pytest.raises(type(exc)):
            ours.get_data(ours.read(path))
        pytest.skip(f"both raise {type(exc).__name__}")
    return ours.get_data(ours.read(path)), want


OPTIONS = {
    "default": {},
    "canonical": {"as_closest_canonical": True},
    "squeeze": {"squeeze_non_spatial_dims": True},
    "no_channel": {"channel_dim": "no_channel"},
}


@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("case", [*CASES, "pixdim_mismatch"])
def test_native_dtype_equals_nibabel_reader(files, case, option):
    (data, meta), (want_data, want_meta) = _both(OPTIONS[option], files[case])
    assert_same(np.asarray(data), np.asarray(want_data), "data")
    assert_same(meta, want_meta, "meta")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, None, np.int32])
@pytest.mark.parametrize("case,option", [(c, o) for c in CASES for o in ("default", "canonical")
                                         if (c, o) != ("2d_uint16", "canonical")])  # nibabel raises
def test_load_image_equals_nibabel_reader(files, case, option, dtype):
    """LoadImage(dtype) with VoxpipeReader(dtype): what LoadImage gives with NibabelReader."""
    kw = OPTIONS[option]
    got, got_meta = LoadImage(reader=VoxpipeReader(dtype=dtype, **kw), image_only=False,
                              dtype=dtype)(files[case])
    want, want_meta = LoadImage(reader=NibabelReader(**kw), image_only=False,
                                dtype=dtype)(files[case])
    assert_same(got.as_tensor(), want.as_tensor(), "image")
    assert_same(dict(got_meta), dict(want_meta), "meta")


def test_default_reader_returns_float32_for_load_image(files):
    """VoxpipeReader() decodes into LoadImage's default dtype and layout itself: no float64
    array for LoadImage to cast, no Fortran-ordered one for it to transpose, and the same values
    as NibabelReader's float64 array cast to float32."""
    for case in ("int16_scaled_gz", "int16_4d_scaled", "int32_scaled", "int64"):
        reader = VoxpipeReader()
        data, _ = reader.get_data(reader.read(files[case]))
        assert data.dtype == np.float32
        assert data.flags.c_contiguous  # LoadImage's layout: its ascontiguousarray copies nothing
        ref = NibabelReader()
        want, _ = ref.get_data(ref.read(files[case]))
        assert_same(data, want.astype(np.float32), case)
        assert_same(LoadImage(reader=VoxpipeReader())(files[case]).as_tensor(),
                    LoadImage(reader=NibabelReader())(files[case]).as_tensor(), case)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", list(CASES))
def test_decoding_in_slabs(files, case, threads, monkeypatch):
    """Small slabs (a few planes of the last long axis, the last one shorter) give the same
    C-ordered image as one read, copied on the reading thread or on a second one: every case,
    scaled, 4D and trailing 1-long axes included."""
    import voxpipe.monai

    monkeypatch.setattr(voxpipe.monai, "_SLAB_BYTES", 600)
    reader = VoxpipeReader(threads=threads)
    data, _ = reader.get_data(reader.read(files[case]))
    assert data.flags.c_contiguous
    assert_same(LoadImage(reader=reader)(files[case]).as_tensor(),
                LoadImage(reader=NibabelReader())(files[case]).as_tensor(), case)


def test_several_files_are_stacked_as_channels(files, tmp_path):
    first = files["int16_scaled_gz"]
    second = write_nifti(tmp_path / "a2.nii.gz", _int16((9, 8, 7)), oblique_affine(), (2.0, 0.0))
    (data, meta), (want, want_meta) = _both({}, [first, second])
    assert data.shape == (2, 9, 8, 7) and meta["original_channel_dim"] == 0
    assert_same(data, want)
    assert_same(meta, want_meta)
    fourd = files["int16_4d_scaled"]
    (data, meta), (want, want_meta) = _both({"channel_dim": -1}, [fourd, fourd])
    assert data.shape == (9, 8, 7, 6)
    assert_same(data, want)
    assert_same(meta, want_meta)
    got = LoadImage(reader=VoxpipeReader(), image_only=False)([first, second])
    ref = LoadImage(reader=NibabelReader(), image_only=False)([first, second])
    assert_same(got[0].as_tensor(), ref[0].as_tensor())
    assert_same(dict(got[1]), dict(ref[1]))


def test_files_with_different_affines_are_refused_like_nibabel_reader(files):
    paths = [files["int16_scaled_gz"], files["int16_nii"]]
    for reader in (VoxpipeReader(), NibabelReader()):
        with pytest.raises(RuntimeError, match="affine matrix of all images should be the same"):
            reader.get_data(reader.read(paths))


def test_load_imaged_equals_nibabel_reader(files):
    item = {"image": files["int16_scaled_gz"], "label": files["int16_nii"]}
    keys = ["image", "label"]
    got = LoadImaged(keys=keys, reader=VoxpipeReader(), ensure_channel_first=True)(item)
    want = LoadImaged(keys=keys, reader=NibabelReader(), ensure_channel_first=True)(item)
    for key in ("image", "label"):
        assert got[key].shape == (1, 9, 8, 7)
        assert_same(got[key].as_tensor(), want[key].as_tensor(), key)
        assert_same(dict(got[key].meta), dict(want[key].meta), key + ".meta")


def test_reader_by_dotted_name(files):
    loader = LoadImage(reader="voxpipe.monai.VoxpipeReader", as_closest_canonical=True)
    assert isinstance(loader.readers[-1], VoxpipeReader)
    assert loader.readers[-1].as_closest_canonical
    path = files["float32_permuted"]
    assert_same(loader(path).as_tensor(),
                LoadImage(reader="NibabelReader", as_closest_canonical=True)(path).as_tensor())


def test_verify_suffix(files, tmp_path):
    reader = VoxpipeReader()
    assert reader.verify_suffix(files["int16_nii"])
    assert reader.verify_suffix([files["int16_nii"], files["int16_scaled_gz"]])
    assert reader.verify_suffix(str(tmp_path))  # a folder: a DICOM series
    assert not reader.verify_suffix("scan.png")
    assert not reader.verify_suffix([files["int16_nii"], "scan.nrrd"])


# --- DICOM folders -------------------------------------------------------------------------------

def _series(folder, orientation, rescale, along_normal=True):
    """A series from test_dicom_series.write_series, its InstanceNumbers set along the slice
    normal (or against it), and its rescale replaced: (slope, intercept) strings, or None for
    no Rescale tags."""
    pydicom = pytest.importorskip("pydicom")
    from test_dicom_series import write_series

    written = write_series(str(folder), orientation=orientation, n=5)
    for (_, k), (path, _) in written.items():
        ds = pydicom.dcmread(path)
        ds.InstanceNumber = k + 1 if along_normal else 5 - k
        if rescale is None:
            del ds.RescaleSlope, ds.RescaleIntercept
        else:
            ds.RescaleSlope, ds.RescaleIntercept = rescale
        ds.save_as(path)
    return str(folder)


@pytest.mark.parametrize("rescale", [("2", "-100"), ("0.73", "-12.5"), None])
@pytest.mark.parametrize("orientation", ["axial", "sagittal", "oblique"])
def test_dicom_folder_equals_pydicom_reader(tmp_path, orientation, rescale):
    folder = _series(tmp_path, orientation, rescale)
    got, got_meta = LoadImage(reader=VoxpipeReader(), image_only=False)(folder)
    want, want_meta = LoadImage(reader=PydicomReader(), image_only=False)(folder)
    assert_same(got.as_tensor(), want.as_tensor(), "image")
    for key in ("affine", "original_affine", "spacing"):
        assert_same(np.asarray(got_meta[key]), np.asarray(want_meta[key]), key)
    assert list(got_meta["spatial_shape"]) == list(want_meta["spatial_shape"]) == [10, 12, 5]
    assert got_meta["space"] == want_meta["space"] == "RAS"
    assert np.isnan(got_meta["original_channel_dim"])
    assert got_meta["filename_or_obj"] == want_meta["filename_or_obj"] == folder


def test_dicom_slices_follow_the_normal_whatever_their_numbers(tmp_path):
    """InstanceNumbers against the normal: PydicomReader stacks by number, voxpipe along the
    normal, so the slice axis is reversed, and every value lands at the same world position."""
    folder = _series(tmp_path, "oblique", ("2", "-100"), along_normal=False)
    got = LoadImage(reader=VoxpipeReader())(folder)
    want = LoadImage(reader=PydicomReader())(folder)
    assert_same(got.as_tensor(), want.as_tensor().flip(2))
    ijk = np.array([[3, 4, 0, 1], [7, 1, 4, 1]], float).T
    flipped = ijk.copy()
    flipped[2] = 4 - ijk[2]
    np.testing.assert_allclose(got.affine.numpy() @ ijk, want.affine.numpy() @ flipped, atol=1e-9)


# --- without MONAI -----------------------------------------------------------------------------

def test_import_without_monai_names_the_package(monkeypatch):
    monkeypatch.delitem(sys.modules, "voxpipe.monai", raising=False)
    monkeypatch.setitem(sys.modules, "monai", None)  # import monai -> ModuleNotFoundError
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ImportError, match=r"voxpipe.monai needs MONAI: pip install 'voxpipe\[monai\]'"):
            importlib.import_module("voxpipe.monai")
