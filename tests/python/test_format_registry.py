"""The format registry vp.load and vp.save consult (docs/architecture.md): the built-in formats are
found by name and by bytes, and a new format is one module plus one registration line. The toy
format below is the worked example of docs/architecture.md."""

import shutil

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from voxpipe._formats import registry

MAGIC = b"VPTOY001"


def _toy_load(source, **options):
    with open(source, "rb") as f:
        if f.read(8) != MAGIC:
            raise ValueError(f"{source}: not a toy volume")
        shape = tuple(int(n) for n in np.frombuffer(f.read(6), "<u2"))
        data = np.frombuffer(f.read(), "<i2").reshape(shape, order="F")
    return nib.Nifti1Image(data, np.eye(4))


def _write_toy(path, data):
    with open(path, "wb") as f:
        f.write(MAGIC + np.asarray(data.shape, "<u2").tobytes()
                + np.asarray(data, "<i2").tobytes(order="F"))


@pytest.fixture
def toy():
    fmt = registry.register(registry.Format("toy", suffixes=(".toy",), load=_toy_load,
                                            sniff=lambda head: head.startswith(MAGIC)))
    try:
        yield fmt
    finally:
        if any(f.name == "toy" for f in registry.formats()):
            registry.unregister("toy")


def test_a_registered_format_is_loaded_by_suffix_and_by_its_bytes(tmp_path, toy):
    data = np.arange(2 * 3 * 4, dtype=np.int16).reshape(2, 3, 4) - 7
    _write_toy(tmp_path / "a.toy", data)
    img = vp.load(tmp_path / "a.toy")
    np.testing.assert_array_equal(np.asarray(img.dataobj), data)
    assert img.shape == (2, 3, 4)
    # No suffix claims it: its first bytes do.
    shutil.copy(tmp_path / "a.toy", tmp_path / "volume")
    np.testing.assert_array_equal(vp.load(str(tmp_path / "volume")).get_fdata(), data)
    # The suffix is matched case-insensitively, as the built-in suffixes are.
    shutil.copy(tmp_path / "a.toy", tmp_path / "B.TOY")
    np.testing.assert_array_equal(vp.load(tmp_path / "B.TOY").get_fdata(), data)
    # Unregistered, the file is no longer a toy: the default format (NIfTI) refuses it.
    registry.unregister("toy")
    with pytest.raises(vp.errors.FormatError):
        vp.load(tmp_path / "a.toy")
    assert registry.for_reading(str(tmp_path / "volume")).name == "nifti"


def test_a_format_without_a_writer_leaves_saving_to_the_default(tmp_path, toy):
    data = np.ones((2, 2, 2), np.int16)
    assert registry.for_writing("x.toy").name == "nifti"
    # The default format writes only the names it knows, as vp.save always did.
    with pytest.raises(vp.errors.FormatError, match="file name"):
        vp.save(nib.Nifti1Image(data, np.eye(4)), tmp_path / "x.toy")
    assert list(tmp_path.iterdir()) == []


def test_the_built_in_formats_by_name():
    names = [f.name for f in registry.formats()]
    assert {"nifti", "nifti-zarr", "dicom"} <= set(names)
    cases = {
        "bold.nii.gz": "nifti", "BOLD.NII": "nifti", "a.hdr": "nifti", "a.img.gz": "nifti",
        "s3://b/sub-01.nii.zarr/": "nifti-zarr", "https://h/x.ome.zarr?sig=abc": "nifti-zarr",
        "/data/x.zarr": "nifti-zarr", "scan.dcm": "dicom", "https://h/a.nii.gz?x=.zarr": "nifti",
    }
    for name, want in cases.items():
        assert registry.by_name(name).name == want, name
    assert registry.by_name("notes.txt") is None
    # Bytes and streams are NIfTI's (vp.from_bytes, vp.from_stream), whatever they hold.
    assert registry.for_reading(b"\x1f\x8b rest").name == "nifti"
    assert registry.for_reading(bytes(128) + b"DICM" + bytes(200)).name == "nifti"


def test_registration_rejects_suffixes_it_would_never_match():
    with pytest.raises(ValueError, match="lower case"):
        registry.register(registry.Format("bad", suffixes=(".NII",)))
    assert "bad" not in [f.name for f in registry.formats()]


def test_a_dicom_file_loads_as_its_series(tmp_path):
    pydicom_data = pytest.importorskip("pydicom.data")
    path = pydicom_data.get_testdata_file("CT_small.dcm")
    img = vp.load(path)
    ref = vp.load_dicom(path)
    np.testing.assert_array_equal(img.get_fdata(), ref.get_fdata())
    np.testing.assert_array_equal(img.affine, ref.affine)
    assert img.dicom.modality == "CT"
    # A DICOM file without the suffix is known by its preamble.
    shutil.copy(path, tmp_path / "IM0001")
    np.testing.assert_array_equal(vp.load(str(tmp_path / "IM0001")).get_fdata(),
                                  ref.get_fdata())


def test_sniffing_never_blocks_on_a_fifo(tmp_path, toy):
    import os

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    # No writer: opening for the sniff must not wait, and the FIFO is left to the default
    # format, which refuses it with its own error.
    assert registry.for_reading(str(fifo)).name == "nifti"
    with pytest.raises(vp.errors.VoxpipeError):
        vp.load(str(fifo))


def test_the_many_file_loaders_take_dicom_files_as_vp_load_does(tmp_path):
    """iter_load, load_many and load_batch read each input with vp.load: a .dcm file is its
    series, whose image holds its decoded array (no proxy), and comes out with its values."""
    pydicom_data = pytest.importorskip("pydicom.data")
    path = pydicom_data.get_testdata_file("CT_small.dcm")
    want = vp.load_dicom(path).get_fdata(dtype=np.float32)
    nii = tmp_path / "a.nii.gz"
    vp.save(vp.Nifti1Image(want * 2, np.eye(4)), nii)
    got = vp.load_many([path, nii, path])
    for g, w in zip(got, [want, want * 2, want]):
        assert g.dtype == np.float32
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(next(iter(vp.iter_load([path]))), want)
    batch = vp.load_batch([path, path], dtype=None)
    assert batch.dtype == want.dtype and batch.shape == (2,) + want.shape
    np.testing.assert_array_equal(batch[1], want)
    out = vp.empty_batch(2, want.shape, np.float64)
    vp.load_batch([nii, path], out=out, dtype=np.float64)
    np.testing.assert_array_equal(out[1], want.astype(np.float64))
