"""What vp.load accepts besides a str path, as nibabel accepts it: pathlib.Path, bytes,
file objects (vp.from_bytes / vp.from_stream, vp.load(fileobj)), and nibabel's file_map route
(Nifti1Image.from_file_map / from_stream / from_bytes under vp.accelerate_nibabel())."""

from __future__ import annotations

import gzip
import io
import pathlib
import pickle

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp


@pytest.fixture(scope="module")
def image():
    data = (np.arange(8 * 7 * 6 * 3) * 37 % 5003 - 2500).astype(np.int16).reshape(8, 7, 6, 3)
    img = nib.Nifti1Image(data, np.diag([1.5, 2.0, 2.5, 1.0]))
    img.header.set_slope_inter(0.5, 2.0)
    img.header.extensions.append(nib.nifti1.Nifti1Extension(6, b"in memory"))
    return img


def same(got, want):
    assert type(got) is type(want)
    assert isinstance(got.dataobj, vp.ArrayProxy)
    assert got.header.binaryblock == want.header.binaryblock
    assert got.header.extensions == want.header.extensions
    np.testing.assert_array_equal(got.affine, want.affine)
    for dtype in (np.float64, np.float32):
        a, b = got.get_fdata(dtype=dtype), want.get_fdata(dtype=dtype)
        assert a.dtype == b.dtype and np.array_equal(a, b)
    np.testing.assert_array_equal(got.dataobj[2:5, :, 1, 2], want.dataobj[2:5, :, 1, 2])
    np.testing.assert_array_equal(got.dataobj.get_unscaled(), want.dataobj.get_unscaled())


def test_pathlib(tmp_path, image):
    p = tmp_path / "a.nii.gz"
    nib.save(image, p)
    img = vp.load(pathlib.Path(p))
    same(img, nib.load(p))
    assert img.get_filename() == str(p)


@pytest.mark.parametrize("compressed", [False, True], ids=["nii", "nii.gz"])
def test_bytes_and_streams(image, compressed):
    raw = image.to_bytes()
    stored = gzip.compress(raw, 1) if compressed else raw
    want = nib.Nifti1Image.from_bytes(raw)
    for got in (vp.from_bytes(stored), vp.load(stored), vp.load(bytearray(stored)),
                vp.load(memoryview(stored)), vp.from_stream(io.BytesIO(stored)),
                vp.load(io.BytesIO(stored))):
        same(got, want)
        assert got.get_filename() is None
    # From the stream's position, as nibabel's from_stream reads.
    f = io.BytesIO(b"prefix" + stored)
    f.seek(6)
    same(vp.from_stream(f), want)


def test_open_file_objects(tmp_path, image):
    p = tmp_path / "a.nii.gz"
    nib.save(image, p)
    with open(p, "rb") as f:
        same(vp.load(f), nib.load(p))
    with gzip.open(p, "rb") as f:  # a decompressing stream: its .nii bytes
        same(vp.from_stream(f), nib.load(p))


def test_file_map_route_under_acceleration(tmp_path, image):
    raw = image.to_bytes()
    want = nib.Nifti1Image.from_bytes(raw)
    p = tmp_path / "a.nii"
    nib.save(image, p)
    with vp.accelerate_nibabel():
        same(nib.Nifti1Image.from_bytes(raw), want)
        same(nib.Nifti1Image.from_stream(io.BytesIO(raw)), want)
        fm = nib.Nifti1Image.filespec_to_file_map(str(p))
        same(nib.Nifti1Image.from_file_map(fm), nib.load(p))
        # A pair given as file objects stays nibabel's.
        pair = nib.Nifti1Pair(np.ones((2, 3, 4), np.float32), np.eye(4))
        hdr, img = io.BytesIO(), io.BytesIO()
        pair.to_file_map({"header": nib.FileHolder(fileobj=hdr), "image": nib.FileHolder(fileobj=img)})
        loaded = nib.Nifti1Pair.from_file_map({"header": nib.FileHolder(fileobj=hdr),
                                               "image": nib.FileHolder(fileobj=img)})
        assert not isinstance(loaded.dataobj, vp.ArrayProxy)
        np.testing.assert_array_equal(loaded.get_fdata(), 1.0)


def test_memory_images_do_not_map_and_pickle_their_bytes(tmp_path, image, monkeypatch):
    raw = image.to_bytes()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "<bytes>").write_bytes(b"\0" * len(raw))  # a file named like the buffer
    img = vp.from_bytes(raw)
    arr = np.asanyarray(img.dataobj)
    assert not isinstance(arr, np.memmap)
    np.testing.assert_array_equal(arr, nib.Nifti1Image.from_bytes(raw).get_fdata())
    # Pickled with its bytes, as nibabel's proxy over a BytesIO is.
    again = pickle.loads(pickle.dumps(img))
    np.testing.assert_array_equal(again.get_fdata(), img.get_fdata())


def test_damaged_bytes_name_the_stream(image):
    cut = gzip.compress(image.to_bytes(), 1)[:-40]
    with pytest.raises(vp.errors.TruncatedError, match="BytesIO"):
        vp.load(io.BytesIO(cut)).get_fdata()
    with pytest.raises(TypeError):
        vp.load(io.StringIO("not bytes"))
    with pytest.raises(TypeError):
        vp.load(12)
