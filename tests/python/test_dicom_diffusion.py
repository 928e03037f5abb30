"""Diffusion gradient tables (.bval/.bvec) of `voxpipe dcm2nii` against dcm2niix, in world space.

voxpipe's images keep DICOM's row order and dcm2niix flips it, so the .bvec files differ by
design; what must agree is the direction each .bvec line means: with x negated back where the
image's determinant is positive (FSL's convention), the vector mapped through the unit columns of
the image's affine gives a world (RAS) direction, which must equal dcm2niix's to 1e-4, and the
b-values must be equal. Inputs: series written here with pydicom (the standard attributes in
single-frame and enhanced files, Siemens' (0019) elements, Philips' private elements, an axial
and an oblique orientation; GE's private elements, whose directions are in the frame of the
encoding, in axial, coronal, sagittal, rotated and oblique slices with ROW and COL phase
encoding) and nibabel's Siemens DWI mosaic 0.dcm (b = 0).

The binary is $VOXPIPE_CLI if set, else .venv/bin/voxpipe; skipped when neither exists, or when
the dcm2niix executable (PyPI `dcm2niix`) is not on PATH or beside this Python.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.sequence import Sequence
from pydicom.uid import ExplicitVRLittleEndian, generate_uid

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get('VOXPIPE_CLI') or REPO / '.venv' / 'bin' / 'voxpipe')
DCM2NIIX = shutil.which('dcm2niix') or shutil.which('dcm2niix', path=str(Path(sys.executable).parent))

pytestmark = [pytest.mark.skipif(not CLI.is_file(), reason=f'{CLI} not built/installed'),
              pytest.mark.skipif(DCM2NIIX is None, reason='dcm2niix not installed')]

# b-value and LPS direction of each volume (None: b = 0, no direction).
VOLUMES = [(0, None), (1000, (1.0, 0.0, 0.0)), (1000, (0.0, 0.6, 0.8)),
           (2000, (0.3, -0.4, math.sqrt(0.75)))]


def orientation(oblique: bool) -> list[float]:
    if not oblique:
        return [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    c, s = math.cos(0.3), math.sin(0.3)
    return [1.0, 0.0, 0.0, 0.0, c, s]


def base_dataset(sop_class: str, manufacturer: str, series_uid: str) -> Dataset:
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = sop_class
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = sop_class
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.Modality = 'MR'
    ds.Manufacturer = manufacturer
    ds.StudyInstanceUID = '1.2.826.0.1.3680043.2.1125.9.1'
    ds.SeriesInstanceUID = series_uid
    ds.SeriesNumber = 7
    ds.SeriesDescription = 'dwi'
    ds.ProtocolName = 'dwi'
    ds.ImageType = ['ORIGINAL', 'PRIMARY', 'DIFFUSION', 'NONE']
    ds.PatientPosition = 'HFS'
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = 'MONOCHROME2'
    ds.BitsAllocated = ds.BitsStored = 16
    ds.HighBit = 15
    ds.PixelRepresentation = 0
    ds.Rows = ds.Columns = 8
    return ds


def write_enhanced(folder: Path, oblique: bool) -> None:
    """One enhanced MR file: 3 positions x 4 volumes, each frame's MR Diffusion Sequence."""
    iop = orientation(oblique)
    normal = np.cross(iop[:3], iop[3:])
    ds = base_dataset('1.2.840.10008.5.1.4.1.1.4.1', 'Philips', generate_uid())
    ds.NumberOfFrames = 3 * len(VOLUMES)
    shared = Dataset()
    po = Dataset()
    po.ImageOrientationPatient = iop
    shared.PlaneOrientationSequence = Sequence([po])
    pm = Dataset()
    pm.PixelSpacing = [2, 2]
    pm.SliceThickness = 3
    pm.SpacingBetweenSlices = 3
    shared.PixelMeasuresSequence = Sequence([pm])
    ds.SharedFunctionalGroupsSequence = Sequence([shared])
    frames = []
    for v, (b, g) in enumerate(VOLUMES):
        for k in range(3):
            f = Dataset()
            pp = Dataset()
            pp.ImagePositionPatient = [float(x) for x in np.array([-8.0, -8.0, 10.0]) + 3 * k * normal]
            f.PlanePositionSequence = Sequence([pp])
            fc = Dataset()
            fc.DimensionIndexValues = [k + 1, v + 1]
            fc.TemporalPositionIndex = v + 1
            fc.StackID = '1'
            fc.InStackPositionNumber = k + 1
            f.FrameContentSequence = Sequence([fc])
            d = Dataset()
            d.DiffusionBValue = float(b)
            d.DiffusionDirectionality = 'NONE' if g is None else 'DIRECTIONAL'
            if g is not None:
                gd = Dataset()
                gd.DiffusionGradientOrientation = list(g)
                d.DiffusionGradientDirectionSequence = Sequence([gd])
            f.MRDiffusionSequence = Sequence([d])
            frames.append(f)
    ds.PerFrameFunctionalGroupsSequence = Sequence(frames)
    ds.PixelData = (np.arange(ds.NumberOfFrames * 64, dtype=np.uint16) % 1000).tobytes()
    folder.mkdir(parents=True)
    ds.save_as(folder / 'enhanced.dcm', enforce_file_format=True)


def write_single_frames(folder: Path, vendor: str, oblique: bool) -> None:
    """One file per image, 3 positions x 4 volumes: the standard attributes ('standard'),
    Siemens' (0019,xx0C/0E) ('siemens') or Philips' (2001,xx03), (2005,xxB0..B2) ('philips')."""
    iop = orientation(oblique)
    normal = np.cross(iop[:3], iop[3:])
    # The standard attributes as Siemens XA writes them: dcm2niix takes Canon's and GE's
    # (0018,9089) of single-frame files as image-frame vectors (geCorrectBvecs), against the
    # standard's patient frame that voxpipe reads for every vendor.
    manufacturer = {'standard': 'SIEMENS', 'siemens': 'SIEMENS', 'philips': 'Philips'}[vendor]
    series_uid = generate_uid()
    folder.mkdir(parents=True)
    for v, (b, g) in enumerate(VOLUMES):
        for k in range(3):
            ds = base_dataset('1.2.840.10008.5.1.4.1.1.4', manufacturer, series_uid)
            ds.ImageOrientationPatient = iop
            ds.ImagePositionPatient = [float(x) for x in np.array([-8.0, -8.0, 10.0]) + 3 * k * normal]
            ds.PixelSpacing = [2, 2]
            ds.SliceThickness = 3
            ds.SpacingBetweenSlices = 3
            ds.AcquisitionNumber = v + 1
            ds.InstanceNumber = v * 3 + k + 1
            ds.AcquisitionTime = f'1200{v:02d}.000000'
            if vendor == 'standard':
                ds.DiffusionBValue = float(b)
                if g is not None:
                    ds.DiffusionGradientOrientation = list(g)
            elif vendor == 'siemens':
                ds.SequenceName = f'ep_b{b}#1'
                block = ds.private_block(0x0019, 'SIEMENS MR HEADER', create=True)
                block.add_new(0x0C, 'IS', str(b))
                if g is not None:
                    block.add_new(0x0E, 'FD', list(g))
            else:
                block = ds.private_block(0x2001, 'Philips Imaging DD 001', create=True)
                block.add_new(0x03, 'FL', float(b))
                block = ds.private_block(0x2005, 'Philips MR Imaging DD 001', create=True)
                for i, el in enumerate((0xB0, 0xB1, 0xB2)):
                    block.add_new(el, 'FL', 0.0 if g is None else g[i])
            ds.PixelData = (np.arange(64, dtype=np.uint16) + 100 * (v * 3 + k)).tobytes()
            ds.save_as(folder / f'{v}_{k}.dcm', enforce_file_format=True)


def world_directions(nii: Path) -> tuple[np.ndarray, np.ndarray]:
    """The b-values and the RAS direction each .bvec column means for the image `nii`."""
    stem = str(nii)[: -len('.nii.gz')] if str(nii).endswith('.gz') else str(nii)[: -len('.nii')]
    bvals = np.atleast_1d(np.loadtxt(stem + '.bval'))
    bvecs = np.loadtxt(stem + '.bvec').reshape(3, -1)
    a = nib.load(nii).affine[:3, :3]
    units = a / np.linalg.norm(a, axis=0)
    flip = np.array([-1.0 if np.linalg.det(a) > 0 else 1.0, 1.0, 1.0])
    return bvals, (units @ (bvecs * flip[:, None])).T


def convert_both(src: Path, out: Path) -> tuple[Path, Path]:
    d_out, v_out = out / 'dcm2niix', out / 'voxpipe'
    d_out.mkdir(parents=True)
    r = subprocess.run([DCM2NIIX, '-b', 'n', '-z', 'n', '-f', '%s', '-o', str(d_out), str(src)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([str(CLI), 'dcm2nii', str(src), '-o', str(v_out), '-z', 'n', '-f', '%s'],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    (d_nii,) = sorted(d_out.glob('*.nii'))
    (v_nii,) = sorted(v_out.glob('*.nii'))
    return d_nii, v_nii


def assert_same_table(d_nii: Path, v_nii: Path, expected_bvals: list[float] | None = None) -> None:
    d_b, d_w = world_directions(d_nii)
    v_b, v_w = world_directions(v_nii)
    np.testing.assert_array_equal(v_b, d_b)
    if expected_bvals is not None:
        np.testing.assert_array_equal(v_b, expected_bvals)
    np.testing.assert_allclose(v_w, d_w, atol=1e-4)


@pytest.mark.parametrize('oblique', [False, True])
@pytest.mark.parametrize('kind', ['enhanced', 'standard', 'siemens', 'philips'])
def test_gradient_table_matches_dcm2niix_in_world_space(tmp_path, kind, oblique):
    src = tmp_path / 'dicom'
    if kind == 'enhanced':
        write_enhanced(src, oblique)
    else:
        write_single_frames(src, kind, oblique)
    d_nii, v_nii = convert_both(src, tmp_path / 'out')
    assert nib.load(v_nii).shape == (8, 8, 3, 4)
    assert_same_table(d_nii, v_nii, [b for b, _ in VOLUMES])
    # The directions themselves: LPS -> RAS of what the files say.
    _, v_w = world_directions(v_nii)
    for (b, g), w in zip(VOLUMES, v_w):
        want = np.zeros(3) if g is None else np.array([-g[0], -g[1], g[2]]) / np.linalg.norm(g)
        np.testing.assert_allclose(w, want, atol=1e-5)


def test_nibabels_b0_mosaic_matches_dcm2niix(tmp_path):
    data = Path(nib.__file__).parent / 'nicom' / 'tests' / 'data'
    src = tmp_path / 'dicom'
    src.mkdir()
    # 0.dcm alone: with 1.dcm, whose slices are 3 mm off 0.dcm's (nibabel's test data), voxpipe
    # refuses the series (positions hold different numbers of images) where dcm2niix stacks it.
    shutil.copy(data / '0.dcm', src / '0.dcm')
    d_out, v_out = tmp_path / 'dcm2niix', tmp_path / 'voxpipe'
    d_out.mkdir()
    subprocess.run([DCM2NIIX, '-b', 'n', '-z', 'n', '-f', '%s', '-o', str(d_out), str(src)],
                   capture_output=True, timeout=60, check=True)
    subprocess.run([str(CLI), 'dcm2nii', str(src), '-o', str(v_out), '-z', 'n', '-f', '%s'],
                   capture_output=True, timeout=60, check=True)
    # ImageType DIFFUSION with b = 0 only: both write a table of zeros.
    for out in (d_out, v_out):
        (bval,) = sorted(out.glob('*.bval'))
        assert np.all(np.loadtxt(bval) == 0)
        assert np.all(np.loadtxt(bval.with_suffix('.bvec')) == 0)


# GE: (0019,10BB..BD) in the encoding frame; the last vector is shorter than 1: GE scales the
# b-value by its squared length (rounded to 5).
GE_VOLUMES = [(0, (0.0, 0.0, 0.0)), (1000, (0.8, 0.6, 0.0)), (1000, (0.0, 0.28, 0.96)),
              (1000, (0.36, -0.48, 0.8)), (1000, (0.5, 0.0, 0.0))]
_C, _S = math.cos(0.3), math.sin(0.3)
GE_ORIENTATIONS = {
    'axial': [1, 0, 0, 0, 1, 0], 'axial_oblique': [1, 0, 0, 0, _C, _S],
    'axial_rotated': [0, 1, 0, -1, 0, 0], 'coronal': [1, 0, 0, 0, 0, -1],
    'coronal_oblique': [1, 0, 0, 0, _S, -_C], 'coronal_rotated': [0, 0, -1, 1, 0, 0],
    'sagittal': [0, 1, 0, 0, 0, -1], 'sagittal_oblique': [0, _C, _S, 0, -_S, _C],
}


def write_ge(folder: Path, iop: list[float], phase: str, descending: bool) -> None:
    normal = np.cross(iop[:3], iop[3:])
    series_uid = generate_uid()
    folder.mkdir(parents=True)
    for v, (b, g) in enumerate(GE_VOLUMES):
        for k in range(3):
            position = 2 - k if descending else k
            ds = base_dataset('1.2.840.10008.5.1.4.1.1.4', 'GE MEDICAL SYSTEMS', series_uid)
            ds.ImageType = ['ORIGINAL', 'PRIMARY', 'OTHER']
            ds.ScanningSequence = 'EP'
            ds.SequenceVariant = 'NONE'
            ds.InPlanePhaseEncodingDirection = phase
            ds.ImageOrientationPatient = [float(x) for x in iop]
            ds.ImagePositionPatient = [float(x) for x in np.array([-8.0, -8.0, 10.0]) + 3 * position * normal]
            ds.PixelSpacing = [2, 2]
            ds.SliceThickness = 3
            ds.SpacingBetweenSlices = 3
            ds.InstanceNumber = v * 3 + k + 1
            ds.AcquisitionNumber = 1
            ds.TemporalPositionIdentifier = v + 1
            block = ds.private_block(0x0019, 'GEMS_ACQU_01', create=True)
            for el, x in zip((0xBB, 0xBC, 0xBD), g):
                block.add_new(el, 'DS', str(x))
            block = ds.private_block(0x0043, 'GEMS_PARM_01', create=True)
            block.add_new(0x39, 'IS', [str(1000000000 + b), '8', '0', '0'])  # GE's 10^9 bias
            ds.PixelData = (np.arange(64, dtype=np.uint16) + 100 * (v * 3 + k)).tobytes()
            ds.save_as(folder / f'{v}_{k}.dcm', enforce_file_format=True)


@pytest.mark.parametrize('phase', ['COL', 'ROW'])
@pytest.mark.parametrize('orientation_name', sorted(GE_ORIENTATIONS))
def test_ge_gradient_table_matches_dcm2niix_in_world_space(tmp_path, orientation_name, phase):
    src = tmp_path / 'dicom'
    write_ge(src, GE_ORIENTATIONS[orientation_name], phase, descending=orientation_name == 'coronal')
    d_nii, v_nii = convert_both(src, tmp_path / 'out')
    assert nib.load(v_nii).shape == (8, 8, 3, 5)
    assert_same_table(d_nii, v_nii, [0, 1000, 1000, 1000, 250])


@pytest.mark.parametrize('kind', ['enhanced', 'siemens'])
def test_series_gradient_table_from_python(tmp_path, kind):
    """vp.dicom.Series.gradient_table gives the table the commands write: equal to dcm2nii's
    .bval/.bvec for the series' own affine (what vp.load_dicom gives), and, for another affine
    (dcm2niix's, rows flipped), the same world directions as dcm2niix's files."""
    import voxpipe as vp
    src = tmp_path / 'dicom'
    if kind == 'enhanced':
        write_enhanced(src, oblique=True)
    else:
        write_single_frames(src, kind, oblique=True)
    d_nii, v_nii = convert_both(src, tmp_path / 'out')
    (series,) = vp.dicom.scan(src)
    bvals, bvecs = series.gradient_table()
    stem = str(v_nii)[: -len('.nii')]
    np.testing.assert_array_equal(bvals, np.loadtxt(stem + '.bval'))
    np.testing.assert_allclose(bvecs, np.loadtxt(stem + '.bvec'), atol=5e-6)  # %g: 6 digits
    np.testing.assert_array_equal(bvals, [b for b, _ in VOLUMES])
    theirs = nib.load(d_nii).affine
    bvals2, bvecs2 = series.gradient_table(theirs)
    stem2 = str(d_nii)[: -len('.nii')]
    np.testing.assert_allclose(bvecs2, np.loadtxt(stem2 + '.bvec'), atol=1e-5)
    assert vp.load_dicom(src).dicom.gradient_table()[0].tolist() == bvals.tolist()


def test_series_without_diffusion_has_no_gradient_table(tmp_path):
    import voxpipe as vp
    from test_cli_dcm2nii import write_series
    write_series(tmp_path / 'dicom', slices=3)
    (series,) = vp.dicom.scan(tmp_path / 'dicom')
    assert series.gradient_table() is None
    assert (series.echo_number, series.image_component) == (0, '')
    with pytest.raises(vp.errors.InvalidArgumentError):
        series.gradient_table(np.eye(3))
