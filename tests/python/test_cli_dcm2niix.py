"""`voxpipe dcm2niix` against the dcm2niix program: both run with the same options on the same
folders (nibabel's and pydicom's DICOM test files, and series written here with pydicom), and
must write the same set of file names, exit with the same codes (bad options, missing input,
missing output folder, nothing to convert, --version) and write the same arrays (after
scaling) with the same affines: voxpipe dcm2niix writes dcm2niix's row order.

The binary is $VOXPIPE_CLI if set, else .venv/bin/voxpipe; skipped when neither exists, or when
the dcm2niix executable (PyPI `dcm2niix`) is not on PATH or beside this Python.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import zlib
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

pytestmark = [pytest.mark.skipif(not CLI.is_file(), reason=f'{CLI} not built/installed'),
              pytest.mark.skipif(DCM2NIIX is None, reason='dcm2niix not installed')]


def run_both(args: list[str], out_root: Path) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """Runs dcm2niix and voxpipe dcm2niix with `args`, where '{out}' stands for an output folder
    of each (out_root/dcm2niix, out_root/voxpipe, made here)."""
    results = []
    for name, cmd in (('dcm2niix', [DCM2NIIX]), ('voxpipe', [str(CLI), 'dcm2niix'])):
        out = out_root / name
        out.mkdir(parents=True, exist_ok=True)
        full = cmd + [str(out) if a == '{out}' else a for a in args]
        results.append(subprocess.run(full, capture_output=True, text=True, timeout=60))
    return results[0], results[1]


def names(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob('*') if p.is_file())


def assert_same_images(out_root: Path, origin_atol: float = 5e-4) -> int:
    """Every image dcm2niix wrote has voxpipe's twin with the same values and affine (its
    origin within `origin_atol` mm); returns how many were compared."""
    d_root, v_root = out_root / 'dcm2niix', out_root / 'voxpipe'
    n = 0
    for d in sorted(d_root.rglob('*.nii*')):
        v = v_root / d.relative_to(d_root)
        a, b = nib.load(d), nib.load(v)
        assert a.shape == b.shape, d.name
        np.testing.assert_allclose(b.affine[:3, :3], a.affine[:3, :3], atol=1e-4, err_msg=d.name)
        np.testing.assert_allclose(b.affine[:3, 3], a.affine[:3, 3], atol=origin_atol, err_msg=d.name)
        np.testing.assert_allclose(b.get_fdata(), a.get_fdata(), rtol=1e-5, atol=1e-4, err_msg=d.name)
        n += 1
    return n


NICOM = Path(nib.__file__).parent / 'nicom' / 'tests' / 'data'
PYDICOM_FILES = Path(pydicom.__file__).parent / 'data' / 'test_files'


def copy_in(files: list[Path], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for src in files:
        if src.suffix == '.gz':
            (folder / src.stem).write_bytes(gzip.decompress(src.read_bytes()))
        else:
            shutil.copy(src, folder / src.name)
    return folder


# Offline series both programs convert: (folder, files, origin tolerance in mm).
OFFLINE = [
    (NICOM, ('siemens_dwi_0.dcm.gz', 'siemens_dwi_1000.dcm.gz'), 5e-4),  # Siemens DWI b0 + b1000
    (NICOM, ('csa_slice_norm.dcm',), 5e-4),
    (PYDICOM_FILES, ('MR_small.dcm',), 5e-4),
    (PYDICOM_FILES, ('CT_small.dcm',), 5e-4),
]


def write_series(folder: Path, *, slices: int = 4, series_number: int = 5, description: str = 'T1w',
                 protocol: str = 'T1w_MPR', echo: int | None = None, image_type: str = 'ORIGINAL\\PRIMARY\\M\\ND',
                 series_uid: str | None = None, extra: dict | None = None, seed: int = 0,
                 drop: tuple[str, ...] = (), per_slice=None) -> None:
    """An axial int16 series of `slices` files, 6 rows x 5 columns, rescaled; the keywords in
    `drop` left out; per_slice(k, ds) called on each file's dataset before it is saved."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    series_uid = series_uid or generate_uid()
    study_uid = '1.2.826.0.1.3680043.8.498.1'
    for k in range(slices):
        meta = FileMetaDataset()
        meta.MediaStorageSOPClassUID = '1.2.840.10008.5.1.4.1.1.4'
        meta.MediaStorageSOPInstanceUID = generate_uid()
        meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds = FileDataset(None, {}, file_meta=meta, preamble=b'\0' * 128)
        ds.SOPClassUID = meta.MediaStorageSOPClassUID
        ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
        ds.StudyInstanceUID = study_uid
        ds.SeriesInstanceUID = series_uid
        ds.Modality = 'MR'
        ds.Manufacturer = 'SIEMENS'
        ds.PatientName = 'Doe^Jane'
        ds.PatientID = 'sub 01'
        ds.AccessionNumber = 'ACC7'
        ds.StudyID = 'st9'
        ds.StudyDate = '20240102'
        ds.StudyTime = '101112.5'
        ds.SeriesNumber = series_number
        ds.AcquisitionNumber = 2
        ds.InstanceNumber = k + 1
        ds.SeriesDescription = description
        ds.ProtocolName = protocol
        ds.ImageType = image_type
        ds.SequenceName = '*tfl3d1_16ns'
        ds.ScanningSequence = 'GR\\IR'
        ds.ImageComments = 'a comment'
        if echo is not None:
            ds.EchoNumbers = echo
        ds.EchoTime = 4.6 + (echo or 0)
        ds.RepetitionTime = 2300
        ds.ImagePositionPatient = [-10.0, 20.0, 3.0 * k]
        ds.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
        ds.PixelSpacing = [0.9, 1.1]
        ds.SliceThickness = 3
        ds.SamplesPerPixel = 1
        ds.PhotometricInterpretation = 'MONOCHROME2'
        ds.Rows, ds.Columns = 6, 5
        ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 1
        ds.RescaleSlope, ds.RescaleIntercept = 2, -10
        for key, value in (extra or {}).items():
            setattr(ds, key, value)
        ds.PixelData = rng.integers(-500, 500, (6, 5), dtype=np.int16).tobytes()
        for keyword in drop:
            delattr(ds, keyword)
        if per_slice is not None:
            per_slice(k, ds)
        ds.save_as(folder / f'im{k:03d}.dcm', enforce_file_format=True)


@pytest.mark.parametrize('source,files,origin_atol', OFFLINE, ids=[f[0] for _, f, _ in OFFLINE])
def test_offline_series_same_names_and_arrays(tmp_path, source, files, origin_atol):
    if not all((source / f).is_file() for f in files):
        pytest.skip(f'{source} lacks {files}')
    src = copy_in([source / f for f in files], tmp_path / 'in' / 'study')
    for fmt in ('%p_%s', 'sub-01_T1w_heudiconv042'):
        out = tmp_path / fmt.replace('%', '')
        d, v = run_both(['-b', 'y', '-z', 'n', '-f', fmt, '-o', '{out}', str(src)], out)
        assert v.returncode == d.returncode, (d.stdout, v.stdout, v.stderr)
        assert names(out / 'voxpipe') == names(out / 'dcm2niix')
        assert assert_same_images(out, origin_atol) == len(list((out / 'dcm2niix').rglob('*.nii')))


def test_exit_codes_match_dcm2niix(tmp_path):
    series = tmp_path / 'series'
    write_series(series)
    empty = tmp_path / 'empty'
    empty.mkdir()
    (empty / 'notes.txt').write_text('not DICOM')
    a_file = tmp_path / 'a_file'
    a_file.write_text('x')
    cases = {
        'unknown option': ['-k', 'y', str(series)],
        'unknown long option': ['--foo', 'y', str(series)],
        'bad value': ['-z', 'q', str(series)],
        'bad -w': ['-w', '5', str(series)],
        'missing value': ['-o', '{out}', '-f'],
        'version': ['--version'],
        'lone -v': ['-v'],
        'help': ['-h'],
        'no input': ['-o', '{out}'],
        'missing input': ['-o', '{out}', str(tmp_path / 'missing')],
        'output folder missing': ['-o', str(tmp_path / 'missing'), str(series)],
        'output folder a file': ['-o', str(a_file), str(series)],
        'no DICOM': ['-o', '{out}', str(empty)],
        'converted': ['-o', '{out}', str(series)],
        'wrapper options': ['-b', 'y', '-z', 'y', '-5', '-x', 'n', '-t', 'n', '-m', '0', '-w', '2',
                            '-s', 'n', '-v', 'n', '-ba', 'n', '-i', 'n', '-l', 'o', '-p', 'y',
                            '-d', '9', '-a', 'n', '--terse', '-o', '{out}', str(series)],
    }
    for name, args in cases.items():
        d, v = run_both(args, tmp_path / name.replace(' ', '_'))
        assert v.returncode == d.returncode, (name, d.stdout, v.stdout, v.stderr)
    assert d.returncode == 0
    # What nipype's Dcm2niix reads from standard output: the "Convert ... as PATH (dims)" lines.
    convert = [line.replace('/voxpipe/', '/dcm2niix/') for line in v.stdout.splitlines()
               if line.startswith('Convert ')]
    assert convert and convert == [line for line in d.stdout.splitlines() if line.startswith('Convert ')]


@pytest.mark.skipif(os.geteuid() == 0, reason='root writes into read-only folders')
def test_read_only_output_folder_exit_code(tmp_path):
    series = tmp_path / 'series'
    write_series(series)
    ro = tmp_path / 'ro'
    ro.mkdir()
    ro.chmod(0o555)
    try:
        d, v = run_both(['-o', str(ro), str(series)], tmp_path / 'o')
        assert d.returncode == v.returncode == 7
    finally:
        ro.chmod(0o755)


def test_every_name_token_and_character_rule(tmp_path):
    study = tmp_path / 'my study'
    write_series(study / 'a', description='T1 w/ "gad": a*b?', protocol='prot<1>;x|y$z`q ü',
                 extra={'ReceiveCoilName': 'HeadNeck_64', 'PerformedProcedureStepDescription': 'brain^routine'})
    tokens = ('%a_%b_%c_%d_%e_%f_%g_%i_%j_%k_%l', '%m_%n_%o_%q_%r_%s', '%p_%t_%u_%v_%x_%y_%z')
    for fmt in (*tokens, '%3s_%4r_%f_%p_%t', 'x/%s/%d', '%t_%p', '.%s', 'lit%%'):
        out = tmp_path / ('o' + str(abs(hash(fmt))))
        d, v = run_both(['-z', 'n', '-f', fmt, '-o', '{out}', str(study / 'a')], out)
        assert v.returncode == d.returncode == 0, (fmt, v.stderr)
        assert names(out / 'voxpipe') == names(out / 'dcm2niix'), fmt
        assert assert_same_images(out) == 1


def test_suffixes_for_echoes_phase_and_collisions(tmp_path):
    study = tmp_path / 'study'
    uid = generate_uid()
    # A two-echo series (one SeriesInstanceUID), a phase series, a second series with the same
    # protocol and number (a name collision) and a localizer-like 2-D series.
    write_series(study / 'e1', echo=1, series_uid=uid, seed=1)
    write_series(study / 'e2', echo=2, series_uid=uid, seed=2)
    write_series(study / 'ph', series_number=6, image_type='ORIGINAL\\PRIMARY\\P\\ND', seed=3)
    write_series(study / 'dup', series_number=6, seed=4)
    write_series(study / 'two_d', slices=1, series_number=7, seed=5)
    for args in (['-f', '%p_%s'], ['-f', 'sub-01_T1w_heudiconv042'], ['-f', '%p'], ['-f', '%p_%s', '-i', 'y'],
                 ['-f', '%p_%s_%e', '--terse'], ['-f', '%3s_%f_%p_%t', '-ba', 'y', '-b', 'y']):
        out = tmp_path / ('o' + str(abs(hash(tuple(args)))))
        d, v = run_both(['-z', 'y'] + args + ['-o', '{out}', str(study)], out)
        assert v.returncode == d.returncode == 0, (args, v.stderr)
        assert names(out / 'voxpipe') == names(out / 'dcm2niix'), args
        assert assert_same_images(out) > 0


def test_name_conflicts_as_w_says(tmp_path):
    series = tmp_path / 'series'
    write_series(series)
    for w in ('0', '1', '2'):
        out = tmp_path / f'w{w}'
        for again in (False, True):  # the second run meets the first one's files
            d, v = run_both(['-z', 'n', '-w', w, '-f', '%p_%s', '-o', '{out}', str(series)], out)
            # -w 0 skipping the one series is a failure: EXIT_FAILURE, nothing converted.
            assert v.returncode == d.returncode == (1 if again and w == '0' else 0), (w, v.stderr)
        assert names(out / 'voxpipe') == names(out / 'dcm2niix'), w
        assert assert_same_images(out) == (2 if w == '2' else 1)


def test_b_s_d_and_z_options(tmp_path):
    study = tmp_path / 'study'
    uid = generate_uid()
    write_series(study / 'deep' / 'er', series_number=8, series_uid=uid)
    write_series(study, series_number=9, slices=3)
    first = sorted(study.glob('*.dcm'))[0]
    for args in (['-b', 'o'], ['-b', 'n'], ['-b', 'i'], ['-d', '0'], ['-d', '1'], ['-d', '2'],
                 ['-s', 'y'], ['-z', 'i'], ['-n', str(zlib.crc32(uid.encode()))], ['-n', '-1'], ['-y', 'n']):
        out = tmp_path / ('o' + '_'.join(args))
        inp = str(first) if args[0] == '-s' else str(study)
        d, v = run_both(['-f', '%s_%p'] + args + ['-o', '{out}', inp], out)
        assert v.returncode == d.returncode, (args, d.stdout, v.stdout, v.stderr)
        assert names(out / 'voxpipe') == names(out / 'dcm2niix'), args
        assert assert_same_images(out) == len(list((out / 'dcm2niix').rglob('*.nii*')))


def test_make_shim_runs_this_voxpipe_and_keeps_a_real_dcm2niix(tmp_path):
    """`--make-shim DIR` writes DIR/dcm2niix, which runs this voxpipe (not whatever is on PATH)
    with the arguments unchanged, exit code included; it replaces its own shim but never a
    dcm2niix that is not one."""
    folder = tmp_path / 'bin'
    for _ in range(2):  # the second run replaces the first shim
        r = subprocess.run([str(CLI), 'dcm2niix', '--make-shim', str(folder)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == str(folder / 'dcm2niix'), r.stderr
    assert os.access(folder / 'dcm2niix', os.X_OK)
    shimmed = subprocess.run([str(folder / 'dcm2niix'), '--version'], capture_output=True,
                             text=True, timeout=60, env=dict(os.environ, PATH='/nonexistent'))
    ref = subprocess.run([str(CLI), 'dcm2niix', '--version'], capture_output=True, text=True,
                         timeout=60)
    assert (shimmed.returncode, shimmed.stdout) == (ref.returncode, ref.stdout) == (3, ref.stdout)
    assert 'voxpipe' in ref.stdout
    real = tmp_path / 'real'
    real.mkdir()
    (real / 'dcm2niix').write_bytes(b'\x7fELF not ours')
    r = subprocess.run([str(CLI), 'dcm2niix', '--make-shim', str(real)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and 'not a voxpipe shim' in r.stderr, r.stderr
    assert (real / 'dcm2niix').read_bytes() == b'\x7fELF not ours'
    assert sorted(p.name for p in real.iterdir()) == ['dcm2niix']  # no temporary file left


def test_series_without_a_number_named_as_dcm2niix(tmp_path):
    """dcm2niix names a series whose SeriesNumber is 0, empty or absent by the CRC-32 of its
    SeriesInstanceUID (0 without a UID); %s and %3s alike."""
    uid = '1.2.826.0.1.3680043.8.498.4242'
    crc = zlib.crc32(uid.encode())
    cases = {
        'zero': (dict(series_number=0), crc),
        'empty': (dict(extra={'SeriesNumber': ''}), crc),
        'absent': (dict(drop=('SeriesNumber',)), crc),
        'neither': (dict(extra={'SeriesNumber': ''}, drop=('SeriesInstanceUID',)), 0),
        'stated': (dict(series_number=12), 12),
    }
    for case, (kwargs, number) in cases.items():
        src = tmp_path / 'in' / case
        write_series(src, series_uid=uid, **kwargs)
        for fmt, stem in (('%p_%s', f'T1w_MPR_{number}'), ('%3s', f'{number:03d}')):
            out = tmp_path / case / fmt.replace('%', '')
            d, v = run_both(['-z', 'n', '-f', fmt, '-o', '{out}', str(src)], out)
            assert v.returncode == d.returncode == 0, (case, v.stderr)
            assert names(out / 'dcm2niix') == [f'{stem}.json', f'{stem}.nii'], case
            assert names(out / 'voxpipe') == names(out / 'dcm2niix'), case
            assert assert_same_images(out) == 1


def test_unreadable_pixel_data_exit_codes_match_dcm2niix(tmp_path):
    """An image whose file ends inside its pixel data is a series dcm2niix fails to convert
    (exit 1; 8 beside a series that converts), not a folder without DICOM images (exit 2)."""
    truncated = tmp_path / 'truncated'
    write_series(truncated, slices=1, series_number=3)
    f = next(truncated.glob('*.dcm'))
    f.write_bytes(f.read_bytes()[:-20])
    beside = tmp_path / 'beside'
    write_series(beside, series_number=4)
    shutil.copy(f, beside / 'cut.dcm')
    no_pixels = tmp_path / 'no_pixels'
    write_series(no_pixels, slices=1, drop=('PixelData',))
    cases = {'truncated': (truncated, 1), 'beside a good series': (beside, 8),
             'no pixel data': (no_pixels, 2)}
    if (PYDICOM_FILES / 'MR_truncated.dcm').is_file():
        cases['MR_truncated.dcm'] = (copy_in([PYDICOM_FILES / 'MR_truncated.dcm'], tmp_path / 'mr'), 1)
    for case, (src, code) in cases.items():
        out = tmp_path / ('o_' + case.replace(' ', '_'))
        d, v = run_both(['-z', 'n', '-f', '%p_%s', '-o', '{out}', str(src)], out)
        assert (d.returncode, v.returncode) == (code, code), (case, d.stdout, v.stdout, v.stderr)
        assert names(out / 'voxpipe') == names(out / 'dcm2niix'), case


def overlay_bits(k: int, n: int) -> np.ndarray:
    """A 6 x 5 overlay plane (rows, columns) of 0 and 1, different for each slice and overlay."""
    return (np.random.default_rng(100 * n + k).random((6, 5)) < 0.4).astype(np.uint8)


def add_overlay(ds, n: int, bits: np.ndarray, **fields) -> None:
    group = 0x6000 + 2 * n
    ds.add_new((group, 0x0010), 'US', fields.get('rows', bits.shape[0]))
    ds.add_new((group, 0x0011), 'US', fields.get('columns', bits.shape[1]))
    ds.add_new((group, 0x0040), 'CS', 'G')
    ds.add_new((group, 0x0050), 'SS', fields.get('origin', [1, 1]))
    ds.add_new((group, 0x0100), 'US', 1)
    ds.add_new((group, 0x0102), 'US', fields.get('bit_position', 0))
    packed = np.packbits(bits.ravel(), bitorder='little').tobytes()
    ds.add_new((group, 0x3000), 'OW', packed + b'\0' * (len(packed) % 2))


def test_overlays_written_as_dcm2niix_roi_images(tmp_path):
    """Overlay planes (60xx,3000) become NAME_ROI<n>.nii as dcm2niix writes them: uint8 0/1 on
    the image's grid, rows flipped as the image's, a slice without the overlay left 0; no ROI
    for an overlay dcm2niix rejects (bit position 1). Checked against dcm2niix and against
    pydicom's overlay_array."""
    study = tmp_path / 'study'

    def two_overlays(k, ds):
        add_overlay(ds, 0, overlay_bits(k, 0))
        if k in (1, 3):  # the second overlay on two of the four slices
            add_overlay(ds, 1, overlay_bits(k, 1))

    write_series(study / 'a', series_number=5, per_slice=two_overlays)
    write_series(study / 'b', series_number=6,
                 per_slice=lambda k, ds: add_overlay(ds, 0, overlay_bits(k, 0), bit_position=1))
    out = tmp_path / 'o'
    d, v = run_both(['-z', 'n', '-f', '%p_%s', '-o', '{out}', str(study)], out)
    assert v.returncode == d.returncode == 0, v.stderr
    assert names(out / 'voxpipe') == names(out / 'dcm2niix') == [
        'T1w_MPR_5.json', 'T1w_MPR_5.nii', 'T1w_MPR_5_ROI1.nii', 'T1w_MPR_5_ROI2.nii',
        'T1w_MPR_6.json', 'T1w_MPR_6.nii']
    assert assert_same_images(out) == 4
    for n in (0, 1):
        roi = nib.load(out / 'voxpipe' / f'T1w_MPR_5_ROI{n + 1}.nii')
        assert roi.get_data_dtype() == np.uint8 and roi.shape == (5, 6, 4)
        ref = nib.load(out / 'dcm2niix' / f'T1w_MPR_5_ROI{n + 1}.nii')
        assert np.array_equal(np.asanyarray(roi.dataobj), np.asanyarray(ref.dataobj))
        for k in range(4):  # slices in increasing position, as written; rows flipped
            want = overlay_bits(k, n) if n == 0 or k in (1, 3) else np.zeros((6, 5), np.uint8)
            assert np.array_equal(np.asanyarray(roi.dataobj)[:, :, k], want[::-1].T), (n, k)
    # pydicom's Siemens image with an overlay.
    example = PYDICOM_FILES / 'examples_overlay.dcm'
    if example.is_file():
        out = tmp_path / 'example'
        d, v = run_both(['-z', 'n', '-f', '%p_%s', '-o', '{out}', str(copy_in([example], tmp_path / 'ex'))], out)
        assert v.returncode == d.returncode == 0, v.stderr
        assert names(out / 'voxpipe') == names(out / 'dcm2niix')
        roi_name = next(n for n in names(out / 'dcm2niix') if n.endswith('_ROI1.nii'))
        roi, ref = nib.load(out / 'voxpipe' / roi_name), nib.load(out / 'dcm2niix' / roi_name)
        assert np.array_equal(np.asanyarray(roi.dataobj), np.asanyarray(ref.dataobj))
        np.testing.assert_allclose(roi.affine, ref.affine, atol=1e-4)
        plane = pydicom.dcmread(example).overlay_array(0x6000)
        assert plane.sum() > 0
        assert np.array_equal(np.asanyarray(roi.dataobj)[:, :, 0], plane[::-1].T)
    # Compressed, twice into one folder (the second series' name gets its letter, and its ROI
    # the same name), and -b o (no images, so no ROI).
    out = tmp_path / 'again'
    for args in (['-z', 'y'], ['-z', 'y'], ['-b', 'o', '-f', 'only']):
        d, v = run_both(args + ['-o', '{out}', str(study / 'a')], out)
        assert v.returncode == d.returncode == 0, (args, v.stderr)
    assert names(out / 'voxpipe') == names(out / 'dcm2niix')
    assert sum(n.endswith('a_ROI1.nii.gz') for n in names(out / 'voxpipe')) == 1
    assert assert_same_images(out) == 6  # two images and their two ROIs each


def unit(v) -> np.ndarray:
    v = np.asarray(v, float)
    return v / np.linalg.norm(v)


def write_oriented(folder: Path, rows_cols, *, reversed_slices: bool = False, slices: int = 5,
                   acquisition: str = '3D', extra: dict | None = None) -> None:
    """A write_series series with ImageOrientationPatient `rows_cols` (normalised), its slices
    stepping 3 mm along the normal (against it when `reversed_slices`)."""
    r, c = unit(rows_cols[:3]), unit(rows_cols[3:])
    n = np.cross(r, c) * (-1 if reversed_slices else 1)

    def place(k, ds):
        ds.ImageOrientationPatient = [float(x) for x in np.r_[r, c]]
        ds.ImagePositionPatient = [float(x) for x in np.array([-10.0, 20.0, 3.0]) + 3.0 * k * n]

    write_series(folder, slices=slices, extra={'MRAcquisitionType': acquisition, **(extra or {})},
                 per_slice=place)


def assert_same_as_dcm2niix(out: Path, name: str) -> nib.Nifti1Image:
    """voxpipe's image `name` is dcm2niix's: shape, raw array, affine, dim_info, slice_code, and
    the sidecars' phase encoding keys. Returns voxpipe's image."""
    a, b = nib.load(out / 'dcm2niix' / name), nib.load(out / 'voxpipe' / name)
    assert b.shape == a.shape, name
    assert np.array_equal(np.asanyarray(b.dataobj.get_unscaled()), np.asanyarray(a.dataobj.get_unscaled())), name
    np.testing.assert_allclose(b.affine, a.affine, atol=1e-4, err_msg=name)
    np.testing.assert_allclose(b.get_qform(), a.get_qform(), atol=1e-4, err_msg=name)
    assert int(b.header['dim_info']) == int(a.header['dim_info'])
    assert int(b.header['slice_code']) == int(a.header['slice_code'])
    np.testing.assert_allclose(b.header['pixdim'][1:4], a.header['pixdim'][1:4], atol=1e-5)
    stem = name.split('.nii')[0]
    ja = json.loads((out / 'dcm2niix' / f'{stem}.json').read_text())
    jb = json.loads((out / 'voxpipe' / f'{stem}.json').read_text())
    for key in ('PhaseEncodingAxis', 'PhaseEncodingDirection'):
        assert jb.get(key) == ja.get(key), key
    return b


def test_philips_3d_mprage_turned_to_nearest_orthogonal_as_dcm2niix(tmp_path):
    src = NICOM / 'philips_mprage.dcm.gz'
    if not src.is_file():
        pytest.skip(f'{src} missing')
    folder = copy_in([src], tmp_path / 'in')
    out = tmp_path / 'out'
    d, v = run_both(['-z', 'n', '-f', 'o', '-o', '{out}', str(folder)], out)
    assert v.returncode == d.returncode == 0, v.stderr
    img = assert_same_as_dcm2niix(out, 'o.nii')
    assert img.shape == (176, 256, 256) and nib.aff2axcodes(img.affine) == ('R', 'A', 'S')
    assert int(img.header['dim_info']) == 54  # the acquired grid's, as dcm2niix leaves it
    assert json.loads((out / 'voxpipe' / 'o.json').read_text())['PhaseEncodingAxis'] == 'i'
    # -x i: neither program turns it (the acquired order, rows flipped).
    out = tmp_path / 'out_i'
    d, v = run_both(['-x', 'i', '-z', 'n', '-f', 'o', '-o', '{out}', str(folder)], out)
    assert v.returncode == d.returncode == 0, v.stderr
    img = assert_same_as_dcm2niix(out, 'o.nii')
    assert img.shape == (256, 256, 176) and nib.aff2axcodes(img.affine) == ('P', 'S', 'R')


C20, S20 = np.cos(np.radians(20)), np.sin(np.radians(20))
ORIENTED = {
    'axial': [1, 0, 0, 0, 1, 0],
    'sagittal': [0, 1, 0, 0, 0, -1],
    'coronal': [1, 0, 0, 0, 0, -1],
    'oblique_sagittal': [0, C20, S20, 0, S20, -C20],
    'oblique_axial': [C20, S20, 0, -S20, C20, 0.2],
    'left_posterior': [-1, 0, 0, 0, -1, 0],
}


@pytest.mark.parametrize('reversed_slices', [False, True], ids=['slices_up', 'slices_down'])
@pytest.mark.parametrize('orientation', list(ORIENTED))
def test_3d_acquisitions_turned_as_dcm2niix(tmp_path, orientation, reversed_slices):
    folder = tmp_path / 'in'
    write_oriented(folder, ORIENTED[orientation], reversed_slices=reversed_slices,
                   extra={'InPlanePhaseEncodingDirection': 'ROW'})
    ref = None
    for x in ('n', 'i'):
        out = tmp_path / f'out_{x}'
        d, v = run_both(['-x', x, '-z', 'n', '-f', 'o', '-o', '{out}', str(folder)], out)
        assert v.returncode == d.returncode == 0, v.stderr
        img = assert_same_as_dcm2niix(out, 'o.nii')
        if x == 'n':
            ref = img
            assert nib.aff2axcodes(img.affine) == ('R', 'A', 'S')
        else:  # the same voxels in world space, in the acquired order
            canon = nib.as_closest_canonical(img)
            assert np.array_equal(np.asanyarray(canon.dataobj), np.asanyarray(ref.dataobj))
            np.testing.assert_allclose(canon.affine, ref.affine, atol=1e-4)
            assert img.shape[:2] == (5, 6)


@pytest.mark.parametrize('case', ['2D', 'one_slice', 'epi', 'rgb'])
def test_series_dcm2niix_does_not_turn(tmp_path, case):
    folder = tmp_path / 'in'
    sagittal = ORIENTED['sagittal']
    if case == '2D':
        write_oriented(folder, sagittal, acquisition='2D')
    elif case == 'one_slice':
        write_oriented(folder, sagittal, slices=1)
    elif case == 'epi':
        write_oriented(folder, sagittal, extra={'ScanningSequence': 'EP'})
    else:
        def rgb(k, ds):
            ds.ImageOrientationPatient = sagittal
            ds.ImagePositionPatient = [3.0 * k, 20.0, 3.0]
            ds.SamplesPerPixel, ds.PhotometricInterpretation, ds.PlanarConfiguration = 3, 'RGB', 0
            ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
            del ds.RescaleSlope, ds.RescaleIntercept
            ds.PixelData = np.random.default_rng(k).integers(0, 255, (6, 5, 3), dtype=np.uint8).tobytes()
        write_series(folder, slices=5, extra={'MRAcquisitionType': '3D'}, per_slice=rgb)
    out = tmp_path / 'out'
    d, v = run_both(['-z', 'n', '-f', 'o', '-o', '{out}', str(folder)], out)
    assert v.returncode == d.returncode == 0, v.stderr
    a, b = nib.load(out / 'dcm2niix' / 'o.nii'), nib.load(out / 'voxpipe' / 'o.nii')
    assert b.shape == a.shape and b.shape[:2] == (5, 6)
    assert np.array_equal(np.asanyarray(b.dataobj), np.asanyarray(a.dataobj))
    np.testing.assert_allclose(b.affine, a.affine, atol=1e-4)
    # Rows flipped (P S R), except a 3D acquisition's colour images: kept as stored (P I R).
    assert nib.aff2axcodes(b.affine) == (('P', 'I', 'R') if case == 'rgb' else ('P', 'S', 'R'))


def test_3d_acquisition_overlay_turned_with_its_image(tmp_path):
    def place(k, ds):
        ds.ImageOrientationPatient = ORIENTED['sagittal']
        ds.ImagePositionPatient = [3.0 * k, 20.0, 3.0]
        add_overlay(ds, 0, overlay_bits(k, 0))
    write_series(tmp_path / 'in', slices=5, extra={'MRAcquisitionType': '3D'}, per_slice=place)
    out = tmp_path / 'out'
    d, v = run_both(['-z', 'n', '-f', 'o', '-o', '{out}', str(tmp_path / 'in')], out)
    assert v.returncode == d.returncode == 0, v.stderr
    assert names(out / 'voxpipe') == names(out / 'dcm2niix')
    img = assert_same_as_dcm2niix(out, 'o.nii')
    a, b = nib.load(out / 'dcm2niix' / 'o_ROI1.nii'), nib.load(out / 'voxpipe' / 'o_ROI1.nii')
    assert b.shape == a.shape == img.shape == (5, 5, 6)
    assert np.asanyarray(b.dataobj).sum() > 0
    assert np.array_equal(np.asanyarray(b.dataobj), np.asanyarray(a.dataobj))
    np.testing.assert_allclose(b.affine, a.affine, atol=1e-4)


def test_turned_3d_acquisition_sidecar_dimensions_are_the_written_shape(tmp_path):
    """voxpipe's own Dimensions key follows the image as written (turned as dcm2niix turns 3D
    acquisitions), while dcm2niix's keys stay those of the acquired grid."""
    import json
    src = tmp_path / 'in'
    src.mkdir()
    nicom = Path(nib.__file__).parent / 'nicom' / 'tests' / 'data'
    (src / 'mprage.dcm').write_bytes(gzip.decompress((nicom / 'philips_mprage.dcm.gz').read_bytes()))
    out = tmp_path / 'out'
    out.mkdir()
    r = subprocess.run([str(CLI), 'dcm2niix', '-z', 'n', '-f', 'x', '-o', str(out), str(src)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    side = json.loads((out / 'x.json').read_text())
    assert nib.load(out / 'x.nii').shape == (176, 256, 256)
    assert side['Dimensions'] == [176, 256, 256]
    assert side['PhaseEncodingAxis'] == 'i'
