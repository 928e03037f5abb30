"""vp.load_dicom / vp.dicom.scan on generated series, against nibabel.nicom and pydicom.

Each series is written with pydicom (explicit VR little endian, one file per slice, files named
in a shuffled order and with InstanceNumbers that are not spatial), then loaded with voxpipe and
checked:
 - the affine against nibabel.nicom's (LPS -> RAS as its dicomreaders do): its single-slice wrapper gives the in-plane columns and
   the origin (with nibabel's axes (row, column) swapped to voxpipe's (column, row)); the slice
   column is nibabel.nicom's series formula, (last position - first position) / (N - 1);
 - the data against pydicom: voxel [c, r, k] is pixel_array[r, c] of the k-th slice along the
   normal, times RescaleSlope plus RescaleIntercept;
 - world coordinates: the affine maps every voxel to the position pydicom's own geometry gives
   (ImagePositionPatient + column/row steps), LPS -> RAS, within 1e-4 mm;
 - orientations axial, sagittal, coronal, oblique; reversed slice order; 4D; enhanced multi-frame;
   and the problems that must be reported: a missing slice, a duplicated slice, mixed sizes
   (split), gantry tilt (kept as shear, with a warning).
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import warnings

import numpy as np
import pytest

pydicom = pytest.importorskip('pydicom')
from pydicom.dataset import Dataset, FileMetaDataset  # noqa: E402
from pydicom.sequence import Sequence  # noqa: E402
from pydicom.uid import ExplicitVRLittleEndian, generate_uid  # noqa: E402

import voxpipe as vp  # noqa: E402
from test_device import fake_driver  # noqa: E402,F401  (the stand-in libcuda, a fixture)

with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    from nibabel.nicom import dicomwrappers  # noqa: E402

ROWS, COLS = 12, 10
LPS_TO_RAS = np.diag([-1.0, -1.0, 1.0, 1.0])


def rotation(axis: str, degrees: float) -> np.ndarray:
    a = np.deg2rad(degrees)
    c, s = np.cos(a), np.sin(a)
    return {'x': np.array([[1, 0, 0], [0, c, -s], [0, s, c]]),
            'y': np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]]),
            'z': np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])}[axis]


ORIENTATIONS = {
    'axial': ([1, 0, 0], [0, 1, 0]),
    'sagittal': ([0, 1, 0], [0, 0, -1]),
    'coronal': ([1, 0, 0], [0, 0, -1]),
    'oblique': tuple((rotation('x', 17) @ rotation('z', -23) @ np.array(v, float)).tolist()
                     for v in ([1, 0, 0], [0, 1, 0])),
}


def base_dataset(series_uid, rows=ROWS, cols=COLS):
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = '1.2.840.10008.5.1.4.1.1.4'
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.Modality = 'MR'
    ds.SeriesInstanceUID = series_uid
    ds.StudyInstanceUID = '1.2.3'
    ds.SeriesNumber = 7
    ds.SeriesDescription = 'generated'
    ds.Rows, ds.Columns = rows, cols
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = 'MONOCHROME2'
    ds.BitsAllocated, ds.BitsStored, ds.HighBit = 16, 16, 15
    ds.PixelRepresentation = 1
    ds.PixelSpacing = [0.9, 1.1]
    ds.SliceThickness = 2.5
    ds.RescaleSlope = 2
    ds.RescaleIntercept = -100
    ds.RepetitionTime = 2000
    ds.EchoTime = 30
    return ds


def write_series(folder, orientation='axial', n=6, spacing=2.5, volumes=1, reverse=False,
                 skip=None, duplicate=None, tilt=None, seed=0, rows=ROWS, cols=COLS,
                 series_uid=None, name='s'):
    """Writes the slices (and volumes) of one series; returns {(volume, k): (path, array)} with k
    the index along the normal."""
    rng = random.Random(seed)
    row_cos, col_cos = (np.array(v, float) for v in ORIENTATIONS[orientation])
    normal = np.cross(row_cos, col_cos)
    step = normal * spacing
    if tilt is not None:  # the positions step off the normal along the column direction
        step = step + col_cos * spacing * np.tan(np.deg2rad(tilt))
    origin = np.array([-30.5, 12.25, 40.0])
    uid = series_uid or generate_uid()
    written = {}
    slots = [(v, k) for v in range(volumes) for k in range(n) if k != skip]
    if duplicate is not None:
        slots.append((0, duplicate))
    order = list(range(len(slots)))
    rng.shuffle(order)
    for idx, (v, k) in enumerate(slots):
        ds = base_dataset(uid, rows, cols)
        ds.SOPInstanceUID = generate_uid()
        kk = (n - 1 - k) if reverse else k
        ds.ImagePositionPatient = [round(float(x), 6) for x in origin + kk * step]
        ds.ImageOrientationPatient = [round(float(x), 8) for x in (*row_cos, *col_cos)]
        ds.InstanceNumber = order[idx] + 1  # not spatial
        ds.AcquisitionNumber = v + 1
        ds.TemporalPositionIdentifier = v + 1
        arr = np.random.default_rng(1000 * v + kk + seed).integers(-300, 3000, (rows, cols),
                                                                    dtype=np.int16)
        ds.PixelData = arr.tobytes()
        path = os.path.join(folder, f'{name}_{order[idx]:04d}.dcm')
        ds.save_as(path, enforce_file_format=True)
        written[(v, kk)] = (path, arr)
    return written


def nibabel_affine(path):
    """nibabel.nicom's affine in RAS (its wrappers map to DICOM's LPS; dicomreaders applies
    DPCS_TO_TAL, diag(-1, -1, 1, 1))."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return LPS_TO_RAS @ dicomwrappers.wrapper_from_file(path).affine


def check_against_references(img, written, n, volumes=1):
    """The affine against nibabel.nicom, the data against pydicom, world coordinates."""
    first = written[(0, 0)][0]
    last = written[(0, n - 1)][0]
    nib = nibabel_affine(first)  # (row, column, slice) -> RAS for the first slice
    ours = img.affine
    np.testing.assert_allclose(ours[:, 0], nib[:, 1], atol=1e-6)  # column step
    np.testing.assert_allclose(ours[:, 1], nib[:, 0], atol=1e-6)  # row step
    np.testing.assert_allclose(ours[:3, 3], nib[:3, 3], atol=1e-6)  # origin
    p0 = np.array(pydicom.dcmread(first).ImagePositionPatient, float)
    p1 = np.array(pydicom.dcmread(last).ImagePositionPatient, float)
    want_k = LPS_TO_RAS[:3, :3] @ ((p1 - p0) / (n - 1))
    np.testing.assert_allclose(ours[:3, 2], want_k, atol=1e-6)
    data = np.asarray(img.dataobj)
    shape = (COLS, ROWS, n) + ((volumes,) if volumes > 1 else ())
    assert data.shape == shape and data.dtype == np.float32
    for (v, k), (path, arr) in written.items():
        got = data[:, :, k, v] if volumes > 1 else data[:, :, k]
        np.testing.assert_array_equal(got, (arr.astype(np.float64) * 2 - 100).astype(np.float32).T)
        # World coordinates of voxel (c, r) of this slice: pydicom's geometry.
        ds = pydicom.dcmread(path)
        ipp = np.array(ds.ImagePositionPatient, float)
        iop = np.array(ds.ImageOrientationPatient, float)
        dr, dc = map(float, ds.PixelSpacing)
        for c, r in ((0, 0), (COLS - 1, 0), (3, ROWS - 1)):
            lps = ipp + iop[:3] * dc * c + iop[3:] * dr * r
            world = ours @ np.array([c, r, k, 1.0])
            np.testing.assert_allclose(world[:3], (LPS_TO_RAS[:3, :3] @ lps), atol=1e-4)


@pytest.mark.parametrize('orientation', sorted(ORIENTATIONS))
@pytest.mark.parametrize('reverse', [False, True])
def test_orientations_and_slice_order(tmp_path, orientation, reverse):
    n = 6
    written = write_series(tmp_path, orientation, n=n, reverse=reverse)
    img = vp.load_dicom(tmp_path)
    assert img.dicom.problem == '' and not img.dicom.gantry_tilt
    assert img.dicom.slice_spacing == pytest.approx(2.5)
    check_against_references(img, written, n)
    assert img.header.get_zooms() == pytest.approx((1.1, 0.9, 2.5))


def test_4d_series_with_repeated_positions(tmp_path):
    n, volumes = 5, 3
    written = write_series(tmp_path, 'oblique', n=n, volumes=volumes)
    img = vp.load_dicom(tmp_path)
    assert img.shape == (COLS, ROWS, n, volumes)
    check_against_references(img, written, n, volumes)
    assert img.header.get_zooms()[3] == pytest.approx(2.0)  # RepetitionTime 2000 ms


def test_stored_values_and_float64(tmp_path):
    written = write_series(tmp_path, 'axial', n=4)
    series = vp.dicom.scan(tmp_path)[0]
    raw = series.get_data(None)
    assert raw.dtype == np.int16 and raw.flags.f_contiguous
    assert series.uniform_rescale and (series.slope, series.intercept) == (2.0, -100.0)
    for (v, k), (path, arr) in written.items():
        np.testing.assert_array_equal(raw[:, :, k], arr.T)
    f64 = series.get_data(np.float64)
    np.testing.assert_array_equal(f64, raw.astype(np.float64) * 2 - 100)
    # Equal to the per-file get_fdata (pydicom's apply_modality_lut) of each slice.
    for (v, k), (path, arr) in written.items():
        np.testing.assert_array_equal(f64[:, :, k], vp.dicom.read(path).get_fdata().T)


def test_missing_slice_is_reported(tmp_path):
    write_series(tmp_path, 'axial', n=6, skip=3)
    (series,) = vp.dicom.scan(tmp_path)
    assert 'slice spacing varies' in series.problem and 'missing' in series.problem
    with pytest.raises(vp.errors.FormatError, match='slice spacing varies'):
        vp.load_dicom(tmp_path)


def test_duplicated_slice_is_reported(tmp_path):
    write_series(tmp_path, 'axial', n=6, duplicate=2)
    (series,) = vp.dicom.scan(tmp_path)
    assert 'different numbers of images' in series.problem


def test_the_same_file_twice_is_read_once(tmp_path):
    written = write_series(tmp_path, 'axial', n=4)
    path = written[(0, 1)][0]
    copy = tmp_path / 'copy_of_slice.dcm'
    copy.write_bytes(open(path, 'rb').read())
    (series,) = vp.dicom.scan(tmp_path)
    assert series.problem == '' and series.shape == (COLS, ROWS, 4)
    assert any('SOPInstanceUID already seen' in w for w in series.warnings)


def test_mixed_sizes_split_the_series(tmp_path):
    uid = generate_uid()
    write_series(tmp_path, 'axial', n=3, series_uid=uid, name='a')
    write_series(tmp_path, 'axial', n=4, series_uid=uid, rows=8, cols=6, name='b')
    found = vp.dicom.scan(tmp_path)
    assert sorted(s.shape for s in found) == sorted([(COLS, ROWS, 3), (6, 8, 4)])
    assert {s.split for s in found} == {f'{COLS}x{ROWS}', '6x8'}
    with pytest.raises(vp.errors.InvalidArgumentError, match='2 series found'):
        vp.load_dicom(tmp_path)
    assert vp.load_dicom(tmp_path, series=1).shape in {(COLS, ROWS, 3), (6, 8, 4)}


def test_gantry_tilt_is_kept_as_shear_and_reported(tmp_path):
    n = 5
    written = write_series(tmp_path, 'axial', n=n, tilt=15)
    img = vp.load_dicom(tmp_path)
    assert img.dicom.gantry_tilt and img.dicom.tilt_degrees == pytest.approx(15, abs=1e-3)
    assert any('gantry tilt' in w for w in img.dicom.warnings)
    check_against_references(img, written, n)


def test_non_dicom_files_are_skipped(tmp_path):
    write_series(tmp_path, 'axial', n=3)
    (tmp_path / 'notes.txt').write_text('not dicom')
    found = vp.dicom.scan(tmp_path)
    assert len(found) == 1
    assert [os.path.basename(p) for p, why in found.skipped] == ['notes.txt']


def enhanced_multiframe(path, n=4, volumes=2):
    """An Enhanced MR-like multi-frame file: per-frame positions, shared orientation and
    spacing, per-frame rescale, frames stored in shuffled order."""
    ds = base_dataset(generate_uid())
    del ds.RescaleSlope, ds.RescaleIntercept, ds.PixelSpacing, ds.SliceThickness
    ds.SOPInstanceUID = generate_uid()
    ds.file_meta.MediaStorageSOPClassUID = '1.2.840.10008.5.1.4.1.1.4.1'
    ds.SOPClassUID = ds.file_meta.MediaStorageSOPClassUID
    row_cos, col_cos = (np.array(v, float) for v in ORIENTATIONS['oblique'])
    normal = np.cross(row_cos, col_cos)
    shared = Dataset()
    o = Dataset()
    o.ImageOrientationPatient = [round(float(x), 8) for x in (*row_cos, *col_cos)]
    m = Dataset()
    m.PixelSpacing = [0.9, 1.1]
    m.SliceThickness = 3
    shared.PlaneOrientationSequence = Sequence([o])
    shared.PixelMeasuresSequence = Sequence([m])
    ds.SharedFunctionalGroupsSequence = Sequence([shared])
    frames, expected = [], {}
    slots = [(v, k) for v in range(volumes) for k in range(n)]
    random.Random(3).shuffle(slots)
    per_frame = []
    for v, k in slots:
        f = Dataset()
        p = Dataset()
        p.ImagePositionPatient = [round(float(x), 6) for x in np.array([5.0, -7.0, 3.0]) + 3 * k * normal]
        c = Dataset()
        c.TemporalPositionIndex = v + 1
        c.StackID = '1'
        c.InStackPositionNumber = k + 1
        t = Dataset()
        t.RescaleSlope = 1 + v
        t.RescaleIntercept = -k
        f.PlanePositionSequence = Sequence([p])
        f.FrameContentSequence = Sequence([c])
        f.PixelValueTransformationSequence = Sequence([t])
        per_frame.append(f)
        arr = np.random.default_rng(10 * v + k).integers(0, 1000, (ROWS, COLS), dtype=np.int16)
        frames.append(arr)
        expected[(v, k)] = arr.astype(np.float64) * (1 + v) - k
    ds.PerFrameFunctionalGroupsSequence = Sequence(per_frame)
    ds.NumberOfFrames = len(frames)
    ds.PixelData = np.stack(frames).tobytes()
    ds.save_as(path, enforce_file_format=True)
    return expected


def test_enhanced_multiframe(tmp_path):
    n, volumes = 4, 2
    path = tmp_path / 'enhanced.dcm'
    expected = enhanced_multiframe(path, n, volumes)
    img = vp.load_dicom(tmp_path, dtype=np.float64)
    assert img.shape == (COLS, ROWS, n, volumes)
    assert not img.dicom.uniform_rescale
    data = np.asarray(img.dataobj)
    for (v, k), want in expected.items():
        np.testing.assert_array_equal(data[:, :, k, v], want.T)
    # nibabel.nicom's MultiframeWrapper: the same affine (its axes (row, column) swapped).
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        w = dicomwrappers.wrapper_from_file(os.fspath(path))
        try:
            nib = LPS_TO_RAS @ w.affine
        except Exception as e:  # nibabel needs DimensionIndexValues for its frame sort
            pytest.skip(f'nibabel.nicom cannot place these frames: {e}')
    np.testing.assert_allclose(img.affine[:, 0], nib[:, 1], atol=1e-6)
    np.testing.assert_allclose(img.affine[:, 1], nib[:, 0], atol=1e-6)


NIBABEL_DATA = os.path.join(os.path.dirname(dicomwrappers.__file__), 'tests', 'data')
MOSAICS = ['siemens_dwi_0.dcm.gz', 'siemens_dwi_1000.dcm.gz']


def unpacked(tmp_path, name):
    import gzip
    src = os.path.join(NIBABEL_DATA, name)
    if not os.path.exists(src):
        pytest.skip(f'nibabel test file {name} is not installed')
    out = tmp_path / name.replace('.gz', '')
    with open(src, 'rb') as f:
        data = gzip.decompress(f.read()) if name.endswith('.gz') else f.read()
    out.write_bytes(data)
    return out


@pytest.mark.parametrize('name', MOSAICS)
def test_siemens_mosaic_against_nibabel(tmp_path, name):
    """nibabel.nicom's MosaicWrapper on the Siemens DWI mosaics nibabel ships: the same slices
    (its (row, column) axes swapped) and the same world position for every voxel."""
    path = unpacked(tmp_path, name)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        w = dicomwrappers.wrapper_from_file(os.fspath(path))
        want = w.get_data()
        nib = LPS_TO_RAS @ w.affine
    img = vp.load_dicom(tmp_path, dtype=np.float64)
    assert img.shape == (want.shape[1], want.shape[0], want.shape[2]) == (128, 128, 48)
    np.testing.assert_array_equal(np.asarray(img.dataobj).transpose(1, 0, 2), want)
    rng = np.random.default_rng(0)
    for c, r, k in [(0, 0, 0), (127, 127, 47)] + [tuple(rng.integers(0, [128, 128, 48])) for _ in range(20)]:
        np.testing.assert_allclose(img.affine @ [c, r, k, 1], nib @ [r, c, k, 1], atol=1e-4)


def test_mosaics_over_time_make_a_4d_series(tmp_path):
    for name in MOSAICS:
        unpacked(tmp_path, name)
    found = vp.dicom.scan(tmp_path)
    shapes = sorted(s.shape for s in found)
    # The b0 and b1000 volumes are one series of two volumes when they share SeriesInstanceUID.
    uids = {pydicom.dcmread(p, stop_before_pixels=True).SeriesInstanceUID
            for p in tmp_path.iterdir()}
    if len(uids) == 1:
        assert shapes == [(128, 128, 48, 2)]
    else:
        assert shapes == [(128, 128, 48), (128, 128, 48)]
    assert all(s.problem == '' for s in found)


def test_a_series_scanned_by_a_relative_name_pickles_its_files(tmp_path, monkeypatch):
    """A series scanned as "sub/series" pickles the files it scanned, wherever it is unpickled
    and whatever folder this process has moved to since: the receiver reads the same images
    (a series of the same relative name in the other folder is never read); Series.files
    keeps the names as scanned."""
    import pickle

    here, elsewhere = tmp_path / 'here', tmp_path / 'elsewhere'
    for folder in (here, elsewhere):
        (folder / 'sub' / 'series').mkdir(parents=True)
    written = write_series(here / 'sub' / 'series', 'axial', n=4)
    write_series(elsewhere / 'sub' / 'series', 'axial', n=4, seed=7)
    monkeypatch.chdir(here)
    (series,) = vp.dicom.scan(os.path.join('sub', 'series'))
    assert all(not os.path.isabs(name) for name, _ in series.files)
    want = series.get_data(None)
    # voxel [c, r, k] is pixel_array[r, c] of the k-th slice along the normal
    assert np.array_equal(want, np.stack([written[(0, k)][1].T for k in range(4)], axis=-1))
    pickled_here = pickle.dumps(series)
    monkeypatch.chdir(elsewhere)
    for blob in (pickled_here, pickle.dumps(series)):
        again = pickle.loads(blob)
        assert np.array_equal(again.get_data(None), want)


def test_a_file_replaced_or_rewritten_after_the_scan_is_an_error(tmp_path):
    """The scan found each file's pixel data offset and Image Pixel module; a file replaced (a
    rename over it) or rewritten in place since is refused when the series is read, never
    decoded with the old file's layout or mixed into the volume. Before the check, both came
    back as data: the other series' slice, or the rewritten bytes."""
    here, other = tmp_path / 'here', tmp_path / 'other'
    here.mkdir()
    other.mkdir()
    uid = generate_uid()
    written = write_series(here, 'axial', n=4, series_uid=uid)
    theirs = write_series(other, 'axial', n=4, seed=7, series_uid=uid)
    (series,) = vp.dicom.scan(here)
    want = series.get_data(None)
    path = written[(0, 2)][0]

    # Another file of the same layout renamed over one of the series' files.
    replacement = tmp_path / 'replacement.dcm'
    shutil.copyfile(theirs[(0, 2)][0], replacement)
    os.replace(replacement, path)
    with pytest.raises(vp.errors.VoxpipeIOError, match='changed since it was opened') as info:
        series.get_data(None)
    assert info.value.path == path

    # A scan of the folder as it is now reads the new file's values.
    (again,) = vp.dicom.scan(here)
    got = again.get_data(None)
    assert np.array_equal(got[:, :, 2], theirs[(0, 2)][1].T)
    assert np.array_equal(np.delete(got, 2, axis=2), np.delete(want, 2, axis=2))

    # The same file rewritten in place, the same size: the pixel bytes flipped.
    data = bytearray(open(path, 'rb').read())
    data[-200:] = bytes(b ^ 0xFF for b in data[-200:])
    st = os.stat(path)
    with open(path, 'r+b') as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    with pytest.raises(vp.errors.VoxpipeIOError, match='rewritten'):
        again.get_data(None)


def test_a_single_file_rewritten_after_it_was_read_is_an_error(tmp_path):
    """vp.dicom.read locates pixel data beyond max_value_size and reads them when asked: the file
    must still be the one parsed."""
    import pydicom

    ds = base_dataset(generate_uid(), 256, 256)
    ds.SOPInstanceUID = generate_uid()
    arr = np.arange(256 * 256, dtype=np.int16).reshape(256, 256)
    ds.PixelData = arr.tobytes()
    path = str(tmp_path / 'one.dcm')
    ds.save_as(path, enforce_file_format=True)
    assert np.array_equal(vp.dicom.read(path).pixel_array, pydicom.dcmread(path).pixel_array)
    parsed = vp.dicom.read(path)
    deferred = vp.dicom.read(path, defer_size=1024)
    ds.PixelData = (arr[::-1]).tobytes()
    replacement = str(tmp_path / 'new.dcm')
    ds.save_as(replacement, enforce_file_format=True)
    os.replace(replacement, path)
    with pytest.raises(vp.errors.VoxpipeIOError, match='changed since it was opened'):
        parsed.pixel_array
    with pytest.raises(vp.errors.VoxpipeIOError, match='changed since it was opened'):
        deferred.PixelData
    # Read again, the new file's values.
    assert np.array_equal(vp.dicom.read(path).pixel_array, arr[::-1])


# ---- Colour, and images without geometry (as dcm2niix converts them) --------------------------

RGB24 = np.dtype([('R', 'u1'), ('G', 'u1'), ('B', 'u1')])


@pytest.mark.parametrize('name', [
    'SC_rgb.dcm',              # RGB, PlanarConfiguration 0, no position (secondary capture)
    'ExplVR_BigEnd.dcm',       # RGB, PlanarConfiguration 1, big endian
    'SC_rgb_rle_2frame.dcm',   # RLE, two frames without functional groups
    'examples_ybr_color.dcm',  # YBR_FULL_422 JPEG, 30 frames: RGB as pydicom converts it
])
def test_colour_images_load_as_rgb24_equal_to_pydicom(name):
    from pydicom.data import get_testdata_file
    path = get_testdata_file(name)
    series = vp.dicom.scan(path)[0]
    assert series.stored_dtype == RGB24
    img = vp.load_dicom(path, dtype=None)
    a = np.asanyarray(img.dataobj)
    assert a.dtype == RGB24
    ref = pydicom.dcmread(path).pixel_array
    if ref.ndim == 3:
        ref = ref[None]
    got = np.stack([a[c].transpose(2, 1, 0) for c in 'RGB'], -1)  # (frame, row, column, sample)
    np.testing.assert_array_equal(got, ref)
    # Float output has no meaning for colour: refused, saying why.
    with pytest.raises(vp.errors.InvalidArgumentError, match='colour series reads as rgb24'):
        vp.load_dicom(path)


def test_images_without_geometry_are_stacked_about_the_origin(tmp_path):
    """Secondary capture, CR and ultrasound state no position: a stack centred on the origin,
    PixelSpacing (1 where absent) apart, with a warning; the affine is the one nibabel gives
    dcm2niix's image of it (sform and qform code 0, rows flipped)."""
    from pydicom.data import get_testdata_file
    path = get_testdata_file('JPEG2000.dcm')  # NM, PixelSpacing 2.26, no position
    ds = pydicom.dcmread(path)
    assert 'ImagePositionPatient' not in ds
    series = vp.dicom.scan(path)[0]
    assert not series.problem
    assert any('no ImagePositionPatient or ImageOrientationPatient' in w for w in series.warnings)
    img = vp.load_dicom(path, dtype=None)
    cols, rows = int(ds.Columns), int(ds.Rows)
    sx, sy = float(ds.PixelSpacing[1]), float(ds.PixelSpacing[0])  # column, row spacing
    expected = np.array([[-sx, 0, 0, sx * (cols - 1) / 2],
                         [0, -sy, 0, sy * (rows - 1) / 2],
                         [0, 0, 1, 0],
                         [0, 0, 0, 1]])
    np.testing.assert_allclose(img.affine, expected, atol=1e-9)
    np.testing.assert_array_equal(np.asanyarray(img.dataobj)[:, :, 0].T, ds.pixel_array)


def test_multiframe_without_positions_is_a_stack_of_its_frames(tmp_path):
    """RT dose: frames without functional groups, the file's position: frame k lies k steps
    along the normal (1 mm without SpacingBetweenSlices or SliceThickness, as dcm2niix), with a
    warning saying so."""
    from pydicom.data import get_testdata_file
    path = get_testdata_file('rtdose.dcm')
    ds = pydicom.dcmread(path)
    series = vp.dicom.scan(path)[0]
    assert not series.problem
    assert series.shape == (int(ds.Columns), int(ds.Rows), int(ds.NumberOfFrames))
    assert any('stacked from ImagePositionPatient' in w for w in series.warnings)
    img = vp.load_dicom(path, dtype=None)
    ipp = [float(v) for v in ds.ImagePositionPatient]
    np.testing.assert_allclose(img.affine[:3, 3], [-ipp[0], -ipp[1], ipp[2]])
    np.testing.assert_allclose(img.affine[:3, 2], [0, 0, 1])
    np.testing.assert_array_equal(np.asanyarray(img.dataobj).transpose(2, 1, 0), ds.pixel_array)


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get('VOXPIPE_CLI') or os.path.join(REPO, '.venv', 'bin', 'voxpipe')
DCM2NIIX = shutil.which('dcm2niix') or shutil.which('dcm2niix', path=os.path.dirname(sys.executable))


@pytest.mark.skipif(DCM2NIIX is None or not os.path.isfile(CLI), reason='dcm2niix or the CLI missing')
@pytest.mark.parametrize('name', ['SC_rgb_rle_2frame.dcm', 'ExplVR_BigEnd.dcm', 'JPEG2000.dcm',
                                  'examples_palette.dcm', 'rtdose.dcm'])
def test_voxpipe_dcm2niix_writes_what_dcm2niix_writes(tmp_path, name):
    """`voxpipe dcm2niix` on colour and unplaced images: RGB24 or grey data equal to dcm2niix's,
    the affine nibabel reads equal, and sform/qform code 0 where dcm2niix writes 0."""
    import subprocess
    import nibabel as nib
    from pydicom.data import get_testdata_file
    src = tmp_path / 'in'
    src.mkdir()
    shutil.copy(get_testdata_file(name), src / name)
    opts = ['-b', 'n', '-z', 'n', '-f', 'out']
    outs = {}
    for tool, cmd in (('dcm2niix', [DCM2NIIX]), ('voxpipe', [CLI, 'dcm2niix'])):
        out = tmp_path / tool
        out.mkdir()
        subprocess.run(cmd + opts + ['-o', str(out), str(src)], check=True, capture_output=True,
                       timeout=120)
        outs[tool] = nib.load(out / 'out.nii')
    theirs, ours = outs['dcm2niix'], outs['voxpipe']
    if theirs.get_data_dtype().names:
        assert ours.get_data_dtype() == theirs.get_data_dtype() == RGB24
    assert ours.shape == theirs.shape
    for code in ('sform_code', 'qform_code'):
        assert int(ours.header[code]) == int(theirs.header[code])
    np.testing.assert_allclose(ours.affine, theirs.affine, atol=1e-4)
    a, b = np.asanyarray(theirs.dataobj), np.asanyarray(ours.dataobj)
    if a.dtype.names:
        assert a.tobytes() == b.tobytes()
    else:
        np.testing.assert_array_equal(a.astype(np.float64), b.astype(np.float64))


def test_colour_series_to_a_device_is_refused(fake_driver):
    """A colour series reads into host memory only: asking for a device says so (on the
    stand-in driver, or a real GPU where there is one), before anything is allocated there."""
    import subprocess
    from pydicom.data import DATA_ROOT
    code = ("import sys, voxpipe as vp\n"
            "s = vp.dicom.scan(sys.argv[1])[0]\n"
            "try:\n"
            "    s.get_data(None, device='cuda')\n"
            "except vp.errors.InvalidArgumentError as e:\n"
            "    print('refused:', e)\n")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = fake_driver + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    r = subprocess.run([sys.executable, "-c", code,
                        os.path.join(DATA_ROOT, "test_files", "SC_rgb_rle.dcm")],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("refused: a colour (rgb24) series reads into a host array"), r.stdout
