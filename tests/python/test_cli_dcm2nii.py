"""`voxpipe dcm2nii` end to end: small MR series written with pydicom (oblique, rescaled, 3D and
4D, one with a missing slice), converted by the command line tool, read back with nibabel, and
compared with dcm2niix's output in world space (dcm2niix flips the rows and may order axes
differently; the voxels must land at the same millimetres with the same values).

The binary is $VOXPIPE_CLI if set, else the one pip installed in .venv/bin; the tests are skipped
when neither exists. The dcm2niix comparisons are skipped when the dcm2niix executable (PyPI
package `dcm2niix`) is not on PATH or beside this Python.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pydicom
import pytest
from pydicom.dataset import FileDataset, FileMetaDataset
from pydicom.uid import ExplicitVRLittleEndian, generate_uid

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get('VOXPIPE_CLI') or REPO / '.venv' / 'bin' / 'voxpipe')
DCM2NIIX = shutil.which('dcm2niix') or shutil.which('dcm2niix', path=str(Path(sys.executable).parent))

pytestmark = pytest.mark.skipif(not CLI.is_file(), reason=f'{CLI} not built/installed')
needs_dcm2niix = pytest.mark.skipif(DCM2NIIX is None, reason='dcm2niix not installed')

ROWS, COLS = 32, 40
SPACING = (0.9, 1.1)  # PixelSpacing: row spacing, column spacing
SLICE_GAP = 2.5
TE, TR = 4.6, 2300.0  # ms


def rotation(ax_deg: float, az_deg: float) -> np.ndarray:
    a, b = np.radians(ax_deg), np.radians(az_deg)
    rx = np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])
    rz = np.array([[np.cos(b), -np.sin(b), 0], [np.sin(b), np.cos(b), 0], [0, 0, 1]])
    return rx @ rz


def write_series(folder: Path, *, slices: int = 12, volumes: int = 1, series_number: int = 3,
                 description: str = 'T1w oblique', slope: float = 2.0, intercept: float = -100.0,
                 drop: tuple[int, ...] = (), seed: int = 0) -> np.ndarray:
    """Writes one file per image; returns the stored values as (columns, rows, slices, volumes)
    in increasing position, the voxpipe axis order."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    r = rotation(15, 20)
    row, col, normal = r[:, 0], r[:, 1], r[:, 2]
    origin = np.array([-20.0, 30.0, 10.0])
    series_uid, study_uid, frame_uid = generate_uid(), generate_uid(), generate_uid()
    values = rng.integers(-1000, 1000, (volumes, slices, ROWS, COLS), dtype=np.int16)
    for v in range(volumes):
        # Files written in shuffled order: the converter must sort them.
        for k in rng.permutation(slices):
            if int(k) in drop:
                continue
            meta = FileMetaDataset()
            meta.MediaStorageSOPClassUID = '1.2.840.10008.5.1.4.1.1.4'
            meta.MediaStorageSOPInstanceUID = generate_uid()
            meta.TransferSyntaxUID = ExplicitVRLittleEndian
            ds = FileDataset(None, {}, file_meta=meta, preamble=b'\0' * 128)
            ds.SOPClassUID = meta.MediaStorageSOPClassUID
            ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
            ds.StudyInstanceUID = study_uid
            ds.SeriesInstanceUID = series_uid
            ds.FrameOfReferenceUID = frame_uid
            ds.Modality = 'MR'
            ds.Manufacturer = 'SIEMENS'
            ds.ManufacturerModelName = 'Prisma'
            ds.MagneticFieldStrength = 3
            ds.PatientName = 'Test^Subject'
            ds.PatientID = 'sub01'
            ds.StudyDate = ds.SeriesDate = ds.AcquisitionDate = '20240102'
            ds.StudyTime = ds.SeriesTime = '101112'
            ds.AcquisitionTime = f'1011{12.5 + v * TR / 1000:09.6f}'  # one TR per volume
            ds.ImageType = ['ORIGINAL', 'PRIMARY', 'M', 'ND']
            ds.SeriesNumber = series_number
            ds.SeriesDescription = description
            ds.ProtocolName = description
            ds.AcquisitionNumber = v + 1
            ds.InstanceNumber = v * slices + int(k) + 1
            ds.EchoTime = TE
            ds.RepetitionTime = TR
            ds.FlipAngle = 9
            ds.SliceThickness = SLICE_GAP
            ds.SpacingBetweenSlices = SLICE_GAP
            ds.PixelSpacing = list(SPACING)
            ds.ImageOrientationPatient = [round(float(x), 8) for x in (*row, *col)]
            ds.ImagePositionPatient = [round(float(x), 6) for x in origin + k * SLICE_GAP * normal]
            ds.SliceLocation = round(float(k * SLICE_GAP), 6)
            ds.Rows, ds.Columns = ROWS, COLS
            ds.SamplesPerPixel = 1
            ds.PhotometricInterpretation = 'MONOCHROME2'
            ds.BitsAllocated, ds.BitsStored, ds.HighBit = 16, 16, 15
            ds.PixelRepresentation = 1
            ds.RescaleSlope = slope
            ds.RescaleIntercept = intercept
            ds.PixelData = values[v, k].tobytes()
            ds.save_as(folder / f'im_{v}_{k:03d}.dcm', enforce_file_format=True)
    # (volumes, slices, rows, cols) -> (cols, rows, slices, volumes)
    return values.transpose(3, 2, 1, 0)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), 'dcm2nii', *args], capture_output=True, text=True, timeout=120)


def to_grid(data: np.ndarray, affine: np.ndarray, target: np.ndarray):
    """Re-indexes `data` (with `affine`) onto the axes of `target`: each target axis is matched
    to the axis whose affine column is parallel to it, flipped where it points the other way.
    Returns the data and affine on the target's axes."""
    affine = affine.copy()
    data = np.asarray(data)
    order = []
    for a in range(3):
        t = target[:3, a] / np.linalg.norm(target[:3, a])
        cos = [float(t @ affine[:3, b] / np.linalg.norm(affine[:3, b])) for b in range(3)]
        b = int(np.argmax(np.abs(cos)))
        assert abs(abs(cos[b]) - 1) < 1e-4, (a, cos)
        if cos[b] < 0:
            affine[:3, 3] += (data.shape[b] - 1) * affine[:3, b]
            affine[:3, b] *= -1
            data = np.flip(data, axis=b)
        order.append(b)
    order += list(range(3, data.ndim))
    new = affine.copy()
    for a, b in enumerate(order[:3]):
        new[:3, a] = affine[:3, b]
    return data.transpose(order), new


def dcm2niix(src: Path, out: Path) -> tuple[nib.Nifti1Image, dict]:
    out.mkdir()
    r = subprocess.run([DCM2NIIX, '-z', 'n', '-f', '%s_%d', '-o', str(out), str(src)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    niis = sorted(out.glob('*.nii'))
    assert len(niis) == 1, (niis, r.stdout)
    return nib.load(niis[0]), json.loads(niis[0].with_suffix('.json').read_text())


def test_oblique_rescaled_series_matches_stored_values_and_affine(tmp_path):
    stored = write_series(tmp_path / 'dicom')
    r = run_cli(str(tmp_path / 'dicom'), str(tmp_path / 'out'))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr == ''
    out = tmp_path / 'out' / '3_T1w_oblique.nii.gz'
    assert f'wrote {out} (40x32x12 int16, scl_slope 2, scl_inter -100)' in r.stdout, r.stdout
    assert '1 of 1 series written, 12 files read' in r.stdout, r.stdout

    img = nib.load(out)
    assert img.shape == (COLS, ROWS, 12)
    assert img.get_data_dtype() == np.int16
    np.testing.assert_array_equal(np.asanyarray(img.dataobj.get_unscaled()), stored[..., 0])
    np.testing.assert_array_equal(img.get_fdata(), stored[..., 0] * 2.0 - 100)
    hdr = img.header
    assert hdr['sform_code'] == 1 and hdr['qform_code'] == 1
    np.testing.assert_allclose(hdr.get_qform(), hdr.get_sform(), atol=1e-4)
    np.testing.assert_allclose(hdr.get_zooms(), (SPACING[1], SPACING[0], SLICE_GAP), atol=1e-5)
    assert hdr.get_xyzt_units() == ('mm', 'sec')
    assert hdr['descrip'].item().decode() == 'voxpipe dcm2nii TE=4.6 TR=2300'
    # The affine as nibabel.nicom writes it (LPS -> RAS, columns along row and column cosines).
    r3 = rotation(15, 20)
    flip = np.diag([-1, -1, 1])
    expected = np.eye(4)
    expected[:3, 0] = flip @ r3[:, 0] * SPACING[1]
    expected[:3, 1] = flip @ r3[:, 1] * SPACING[0]
    expected[:3, 2] = flip @ r3[:, 2] * SLICE_GAP
    expected[:3, 3] = flip @ np.array([-20.0, 30.0, 10.0])
    np.testing.assert_allclose(img.affine, expected, atol=1e-4)

    side = json.loads((tmp_path / 'out' / '3_T1w_oblique.json').read_text())
    assert side['EchoTime'] == pytest.approx(0.0046)
    assert side['RepetitionTime'] == pytest.approx(2.3)
    assert side['SeriesNumber'] == 3
    assert side['ImageType'] == ['ORIGINAL', 'PRIMARY', 'M', 'ND', 'MAGNITUDE']  # as dcm2niix
    assert side['AcquisitionTime'] == '10:11:12.500000'
    assert side['Dimensions'] == [40, 32, 12]
    assert side['RescaleSlope'] == 2 and side['RescaleIntercept'] == -100
    assert side['ConversionSoftware'] == 'voxpipe'
    assert side['MagneticFieldStrength'] == 3


@needs_dcm2niix
def test_oblique_series_equals_dcm2niix_in_world_space(tmp_path):
    write_series(tmp_path / 'dicom')
    r = run_cli('-z', 'n', str(tmp_path / 'dicom'), '-o', str(tmp_path / 'ours'))
    assert r.returncode == 0, r.stdout + r.stderr
    ours = nib.load(tmp_path / 'ours' / '3_T1w_oblique.nii')
    ours_json = json.loads((tmp_path / 'ours' / '3_T1w_oblique.json').read_text())
    theirs, theirs_json = dcm2niix(tmp_path / 'dicom', tmp_path / 'theirs')

    assert theirs.shape == ours.shape
    data, affine = to_grid(theirs.get_fdata(), theirs.affine, ours.affine)
    np.testing.assert_allclose(affine, ours.affine, atol=1e-4)
    np.testing.assert_array_equal(data, ours.get_fdata())
    # Both store int16 with the rescale in the header.
    assert theirs.get_data_dtype() == ours.get_data_dtype() == np.int16
    # (nibabel moves the scale factors from the loaded header to dataobj)
    assert theirs.dataobj.slope == ours.dataobj.slope == 2
    assert theirs.dataobj.inter == ours.dataobj.inter == -100
    # Not compared: dcm2niix rewrites Manufacturer ("SIEMENS" -> "Siemens") and appends to
    # ImageType ("MAGNITUDE"); voxpipe writes both as stored.
    for key in ('EchoTime', 'RepetitionTime', 'FlipAngle', 'MagneticFieldStrength', 'SeriesNumber',
                'SliceThickness', 'SpacingBetweenSlices', 'Modality', 'ManufacturersModelName',
                'SeriesDescription', 'ProtocolName', 'AcquisitionTime'):
        assert ours_json[key] == pytest.approx(theirs_json[key]) if isinstance(
            theirs_json[key], float) else ours_json[key] == theirs_json[key], key
    np.testing.assert_allclose(ours_json['ImageOrientationPatientDICOM'],
                               theirs_json['ImageOrientationPatientDICOM'], atol=1e-6)


def test_4d_series_from_repeated_positions(tmp_path):
    stored = write_series(tmp_path / 'dicom', slices=5, volumes=3, series_number=7,
                          description='bold run-1', slope=1.0, intercept=0.0)
    r = run_cli(str(tmp_path / 'dicom'), '-o', str(tmp_path / 'out'))
    assert r.returncode == 0, r.stdout + r.stderr
    img = nib.load(tmp_path / 'out' / '7_bold_run-1.nii.gz')
    assert img.shape == (COLS, ROWS, 5, 3)
    np.testing.assert_array_equal(np.asanyarray(img.dataobj), stored)
    assert img.header.get_zooms()[3] == pytest.approx(TR / 1000)
    assert img.dataobj.slope == 1 and img.dataobj.inter == 0


@needs_dcm2niix
def test_4d_series_equals_dcm2niix_in_world_space(tmp_path):
    write_series(tmp_path / 'dicom', slices=5, volumes=3, series_number=7,
                 description='bold run-1', slope=1.0, intercept=0.0)
    r = run_cli('--uncompressed', str(tmp_path / 'dicom'), '-o', str(tmp_path / 'ours'))
    assert r.returncode == 0, r.stdout + r.stderr
    ours = nib.load(tmp_path / 'ours' / '7_bold_run-1.nii')
    theirs, theirs_json = dcm2niix(tmp_path / 'dicom', tmp_path / 'theirs')
    assert theirs.shape == ours.shape
    data, affine = to_grid(theirs.get_fdata(), theirs.affine, ours.affine)
    np.testing.assert_allclose(affine, ours.affine, atol=1e-4)
    np.testing.assert_array_equal(data, ours.get_fdata())
    assert theirs.header.get_zooms()[3] == pytest.approx(ours.header.get_zooms()[3])
    ours_json = json.loads((tmp_path / 'ours' / '7_bold_run-1.json').read_text())
    assert ours_json['RepetitionTime'] == pytest.approx(theirs_json['RepetitionTime'])
    assert ours_json['EchoTime'] == pytest.approx(theirs_json['EchoTime'])


def test_missing_slice_is_reported_and_skipped(tmp_path):
    write_series(tmp_path / 'dicom' / 'a', series_number=3, description='good')
    write_series(tmp_path / 'dicom' / 'b', series_number=4, description='gappy', drop=(5,), seed=1)
    r = run_cli(str(tmp_path / 'dicom'), '-o', str(tmp_path / 'out'))
    assert r.returncode == 11, r.stdout + r.stderr
    assert 'skipped series 4 "gappy"' in r.stderr, r.stderr
    assert 'slice spacing varies' in r.stderr, r.stderr
    assert sorted(p.name for p in (tmp_path / 'out').iterdir()) == ['3_good.json', '3_good.nii.gz']
    assert '1 of 2 series written (1 skipped)' in r.stdout, r.stdout


def test_existing_files_are_kept_unless_overwrite(tmp_path):
    write_series(tmp_path / 'dicom', slices=3)
    assert run_cli(str(tmp_path / 'dicom'), '-o', str(tmp_path / 'out')).returncode == 0
    r = run_cli(str(tmp_path / 'dicom'), '-o', str(tmp_path / 'out'))
    assert r.returncode == 11 and 'exists' in r.stderr, r.stderr
    r = run_cli('--overwrite', str(tmp_path / 'dicom'), '-o', str(tmp_path / 'out'))
    assert r.returncode == 0, r.stderr


def test_missing_input_and_unwritable_output(tmp_path):
    r = run_cli(str(tmp_path / 'nope'), '-o', str(tmp_path / 'out'))
    assert r.returncode == 3, r.stderr
    (tmp_path / 'file').write_bytes(b'x')
    write_series(tmp_path / 'dicom', slices=2)
    r = run_cli(str(tmp_path / 'dicom'), '-o', str(tmp_path / 'file' / 'sub'))
    assert r.returncode == 4, r.stderr


def test_decoder_warnings_reach_the_output_and_on_corrupt_is_checked(tmp_path):
    """An RLE segment one byte longer than its frame (pydicom warns, and so does dcm2nii, on
    stdout and in the sidecar); --on-corrupt takes raise or warn only."""
    from pydicom.data import get_testdata_file
    from pydicom.encaps import encapsulate, generate_frames
    ds = pydicom.dcmread(get_testdata_file('MR_small_RLE.dcm'))
    frame = next(generate_frames(ds.PixelData, number_of_frames=1))
    ds.PixelData = encapsulate([frame + b'\x00\x07'])
    (tmp_path / 'dicom').mkdir()
    ds.save_as(tmp_path / 'dicom' / 'rle.dcm')
    r = run_cli(str(tmp_path / 'dicom'), '-o', str(tmp_path / 'out'), '--on-corrupt', 'warn')
    assert r.returncode == 0, r.stdout + r.stderr
    assert 'RLE segment 1 decodes to 4097 bytes' in r.stdout, r.stdout
    sidecar = json.loads(next((tmp_path / 'out').glob('*.json')).read_text())
    assert any('RLE segment 1' in w for w in sidecar['Warnings']), sidecar
    r = run_cli(str(tmp_path / 'dicom'), '-o', str(tmp_path / 'out2'), '--on-corrupt', 'ignore')
    assert r.returncode == 2 and '--on-corrupt expects raise or warn' in r.stderr, r.stderr
