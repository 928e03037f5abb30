"""vp.dicom pixel data against pydicom 3, on every file pydicom ships for its own tests.

pydicom decodes with the plugins of requirements-dev.txt (python-gdcm, pylibjpeg with libjpeg,
openjpeg and rle, pyjpegls), so it decodes every syntax. For every file with pixel data:
 - ``ds.pixel_array``: the same shape, dtype (up to byte order: voxpipe returns native order,
   pydicom keeps a big endian dataset's) and values, bit for bit. This includes lossy JPEG: the
   libjpeg-turbo voxpipe links gives pydicom's values on these files; a lossy file that differs
   by at most one grey level would be listed in LOSSY_TOLERANCE.
 - ``ds.get_fdata()`` equals ``apply_modality_lut(pixel_array, ds)``, and ``get_fdata(float32)``
   that rounded to float32.
 - one frame decoded alone equals that frame of the whole.
Files both refuse are fine when voxpipe raises one of its own errors; files pydicom decodes and
voxpipe refuses are listed in EXPECTED_REFUSALS with the reason.
"""

from __future__ import annotations

import os
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

pydicom = pytest.importorskip('pydicom')
from pydicom.data import DATA_ROOT  # noqa: E402
from pydicom.pixels import apply_modality_lut  # noqa: E402

import voxpipe as vp  # noqa: E402

# Not get_testdata_files(): it tries to download more files and hangs without a network.
FILES = sorted(os.fspath(p) for p in (Path(DATA_ROOT) / 'test_files').glob('**/*')
               if p.is_file() and p.suffix not in ('.py', '.gz', '.bz2', '.txt', '.json', '.xml'))

# pydicom decodes these; voxpipe refuses them, for the reason given.
EXPECTED_REFUSALS: dict[str, str] = {}
LOSSY_TOLERANCE: dict[str, int] = {}


@lru_cache(maxsize=None)
def reference(path: str):
    """(dataset, pixel_array or the exception pydicom raised), or None without pixel data."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        try:
            ds = pydicom.dcmread(path, force=True)
        except Exception:
            return None
        if not any(k in ds for k in ('PixelData', 'FloatPixelData', 'DoubleFloatPixelData')):
            return None
        try:
            return ds, ds.pixel_array
        except Exception as e:  # pydicom refuses: voxpipe must refuse too
            return ds, e


PIXEL_FILES = [p for p in FILES if reference(p) is not None]


def test_the_sweep_covers_every_syntax():
    syntaxes = set()
    for p in PIXEL_FILES:
        ds, arr = reference(p)
        if not isinstance(arr, Exception):
            syntaxes.add(str(ds.file_meta.get('TransferSyntaxUID', '')))
    for uid in ('1.2.840.10008.1.2', '1.2.840.10008.1.2.1', '1.2.840.10008.1.2.2',
                '1.2.840.10008.1.2.1.99', '1.2.840.10008.1.2.5', '1.2.840.10008.1.2.4.50',
                '1.2.840.10008.1.2.4.51', '1.2.840.10008.1.2.4.70',
                '1.2.840.10008.1.2.4.80', '1.2.840.10008.1.2.4.81', '1.2.840.10008.1.2.4.90',
                '1.2.840.10008.1.2.4.91'):
        assert uid in syntaxes, uid
    assert len(PIXEL_FILES) > 80


@pytest.mark.parametrize('path', PIXEL_FILES, ids=lambda p: Path(p).name)
def test_pixel_array_equals_pydicom(path):
    name = Path(path).name
    ds, ref = reference(path)
    try:
        got = vp.dicom.read(path, force=True).pixel_array
    except vp.VoxpipeError as e:
        if isinstance(ref, Exception):
            return  # both refuse
        assert type(e).__name__ == EXPECTED_REFUSALS.get(name), f'{name}: {e}'
        return
    assert name not in EXPECTED_REFUSALS, f'{name} decodes now: take it off the list'
    assert not isinstance(ref, Exception), f'pydicom refuses {name} ({ref}), voxpipe decodes it'
    assert got.shape == ref.shape
    assert got.dtype == ref.dtype.newbyteorder('=')
    assert got.dtype.isnative and got.flags.c_contiguous
    tolerance = LOSSY_TOLERANCE.get(name, 0)
    if tolerance:
        assert np.abs(got.astype(np.int64) - ref.astype(np.int64)).max() <= tolerance
    else:
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize('path', PIXEL_FILES, ids=lambda p: Path(p).name)
def test_get_fdata_equals_apply_modality_lut(path):
    ds, ref = reference(path)
    if isinstance(ref, Exception) or Path(path).name in EXPECTED_REFUSALS:
        pytest.skip('no pixel_array to compare')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        want = apply_modality_lut(ref, ds).astype(np.float64)
    vds = vp.dicom.read(path, force=True)
    got = vds.get_fdata()
    assert got.dtype == np.float64 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    got32 = vds.get_fdata(dtype=np.float32)
    np.testing.assert_array_equal(got32, want.astype(np.float32))


MULTIFRAME = [p for p in PIXEL_FILES
              if not isinstance(reference(p)[1], Exception)
              and int(reference(p)[0].get('NumberOfFrames', 1) or 1) > 1
              and Path(p).name not in EXPECTED_REFUSALS]


@pytest.mark.parametrize('path', MULTIFRAME, ids=lambda p: Path(p).name)
def test_one_frame_equals_that_frame_of_the_whole(path):
    ds, ref = reference(path)
    vds = vp.dicom.read(path)
    last = vds.pixel_info.number_of_frames - 1
    for index in {0, last, last // 2}:
        np.testing.assert_array_equal(vds.pixel_array_frame(index), ref[index])
    with pytest.raises(IndexError):
        vds.pixel_array_frame(last + 1)


def test_pixel_info_describes_the_array():
    path = os.fspath(Path(DATA_ROOT) / 'test_files' / 'SC_rgb_rle_2frame.dcm')
    vds = vp.dicom.read(path)
    info = vds.pixel_info
    assert (info.rows, info.columns, info.samples_per_pixel) == (100, 100, 3)
    assert info.number_of_frames == 2 and info.codec == 'RLE Lossless'
    assert tuple(info.shape) == vds.pixel_array.shape == (2, 100, 100, 3)
    assert vds.pixel_array is vds.pixel_array  # cached, as pydicom


def test_missing_rows_names_the_tag(tmp_path):
    ds = pydicom.dcmread(os.fspath(Path(DATA_ROOT) / 'test_files' / 'CT_small.dcm'))
    del ds.Rows
    out = tmp_path / 'norows.dcm'
    ds.save_as(out)
    with pytest.raises(vp.errors.FormatError, match=r'\(0028,0010\) Rows'):
        vp.dicom.read(out).pixel_array


def test_truncated_pixel_data_is_an_error_naming_the_frame(tmp_path):
    src = Path(DATA_ROOT) / 'test_files' / 'SC_rgb_rle_2frame.dcm'
    data = src.read_bytes()
    vds = vp.dicom.read(src)
    frames = vds.pixel_data_fragments
    # Cut the file inside the second frame's fragment: the parser refuses it (the lengths no
    # longer fit); garbage inside a fragment instead is a corrupt frame.
    bad = bytearray(data)
    off, length = frames[1]
    bad[off:off + 64] = b'\xff' * 64  # a header of absurd segment offsets
    p = tmp_path / 'bad.dcm'
    p.write_bytes(bytes(bad))
    with pytest.raises(vp.VoxpipeError, match='frame 1'):
        vp.dicom.read(p).pixel_array
    (tmp_path / 'cut.dcm').write_bytes(data[:off + length // 2])
    with pytest.raises(vp.errors.TruncatedError):
        vp.dicom.read(tmp_path / 'cut.dcm').pixel_array


@pytest.mark.parametrize('syntax', ['JPEGLSLossless', 'JPEG2000Lossless', 'RLELossless'])
def test_bits_stored_below_the_codestream_precision(tmp_path, syntax):
    """pydicom corrects unused bits for RLE (and native data) but never for JPEG-LS and JPEG 2000
    frames, whose values above BitsStored it keeps: voxpipe does the same."""
    import pydicom.uid
    ds = pydicom.dcmread(os.fspath(Path(DATA_ROOT) / 'test_files' / 'CT_small.dcm'))
    arr = (np.arange(128 * 128, dtype=np.int32) % 200).astype(np.uint8).reshape(128, 128)
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds.PixelData = arr.tobytes()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        ds.compress(getattr(pydicom.uid, syntax))
    ds.BitsStored, ds.HighBit = 6, 5  # the data keep 8 bits
    out = tmp_path / f'{syntax}.dcm'
    ds.save_as(out)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        ref = pydicom.dcmread(out).pixel_array
    got = vp.dicom.read(out).pixel_array
    np.testing.assert_array_equal(got, ref)
    assert (ref.max() > 63) == (syntax != 'RLELossless')


# ---------------------------------------------------------------------------------------------
# Damaged compressed frames (issue 17): damage a decoder detects is an error by default.

def _zero_burst(tmp_path, name: str, where: float) -> Path:
    """pydicom's test file `name` with 16 bytes zeroed at `where` (a fraction) of its first
    frame's entropy-coded data (after the SOS segment, before EOI)."""
    from pydicom.encaps import encapsulate, generate_frames
    ds = pydicom.dcmread(os.path.join(DATA_ROOT, 'test_files', name))
    frames = list(generate_frames(ds.PixelData, number_of_frames=1))
    frame = bytearray(frames[0])
    sos = frame.index(b'\xff\xda')
    start = sos + 2 + int.from_bytes(frame[sos + 2:sos + 4], 'big')
    at = start + int((len(frame) - 2 - start) * where) - 8
    frame[at:at + 16] = bytes(16)
    ds.PixelData = encapsulate([bytes(frame)])
    out = tmp_path / f'burst_{name}'
    ds.save_as(out)
    return out


def _pydicom_pixels(path, plugin):
    from pydicom.pixels import pixel_array
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return pixel_array(os.fspath(path), decoding_plugin=plugin)


# (file, where): libjpeg reports "Corrupt JPEG data" on each; pydicom's pylibjpeg plugin
# raises on the first, and decodes the second without a word.
BURSTS = [('SC_rgb_jpeg_dcmtk.dcm', 0.3, True), ('SC_jpeg_no_color_transform.dcm', 0.5, False)]


@pytest.mark.parametrize('name,where,pylibjpeg_raises', BURSTS, ids=[b[0] for b in BURSTS])
def test_a_zeroed_burst_in_a_jpeg_frame_is_a_corrupt_error(tmp_path, name, where,
                                                           pylibjpeg_raises):
    path = _zero_burst(tmp_path, name, where)
    if pylibjpeg_raises:
        with pytest.raises(Exception):
            _pydicom_pixels(path, 'pylibjpeg')
    ds = vp.dicom.read(path)
    with pytest.raises(vp.errors.CorruptError) as info:
        ds.pixel_array
    message = str(info.value)
    assert os.fspath(path) in message and 'frame 0' in message
    assert 'Corrupt JPEG data' in message and "on_corrupt='warn'" in message
    with pytest.raises(vp.errors.CorruptError):
        ds.get_fdata()


@pytest.mark.parametrize('name,where,pylibjpeg_raises', BURSTS, ids=[b[0] for b in BURSTS])
def test_on_corrupt_warn_returns_what_libjpeg_recovers(tmp_path, name, where, pylibjpeg_raises):
    path = _zero_burst(tmp_path, name, where)
    with pytest.warns(vp.errors.CorruptDataWarning, match='frame 0: JPEG: Corrupt JPEG data'):
        arr = vp.dicom.read(path, on_corrupt='warn').pixel_array
    try:
        recovered = _pydicom_pixels(path, 'gdcm')  # GDCM's libjpeg decodes past some damage
    except RuntimeError:
        recovered = None
    if recovered is not None:
        np.testing.assert_array_equal(arr, recovered)
    # The lines before the burst decode as in the intact file (sequential JPEG).
    intact = reference(os.path.join(DATA_ROOT, 'test_files', name))[1]
    lines = int(intact.shape[0] * where * 0.5)
    np.testing.assert_array_equal(arr[:lines], intact[:lines])
    ds = vp.dicom.read(path)
    with pytest.warns(vp.errors.CorruptDataWarning):
        np.testing.assert_array_equal(ds.pixel_array_frame(0, on_corrupt='warn'), arr)
    with pytest.warns(vp.errors.CorruptDataWarning):
        ds.get_fdata(on_corrupt='warn')
    with pytest.raises(ValueError, match='on_corrupt'):
        vp.dicom.read(path, on_corrupt='ignore')


def test_an_rle_segment_longer_than_the_frame_warns_as_pydicom(tmp_path):
    from pydicom.encaps import encapsulate, generate_frames
    ds = pydicom.dcmread(os.path.join(DATA_ROOT, 'test_files', 'MR_small_RLE.dcm'))
    frame = next(generate_frames(ds.PixelData, number_of_frames=1))
    ds.PixelData = encapsulate([frame + b'\x00\x07'])  # a literal run of one byte more
    path = tmp_path / 'rle_long.dcm'
    ds.save_as(path)
    from pydicom.pixels import pixel_array
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter('always')
        reference = pixel_array(os.fspath(path), decoding_plugin='pydicom')
    assert any('non-conformant padding' in str(w.message) for w in seen)
    with pytest.warns(vp.errors.CorruptDataWarning,
                      match='frame 0: RLE segment 1 decodes to 4097 bytes, but the frame holds 4096'):
        arr = vp.dicom.read(path).pixel_array
    np.testing.assert_array_equal(arr, reference)
    # The series path passes the warning on too (the volume is (columns, rows, slices)).
    with pytest.warns(vp.errors.CorruptDataWarning, match='RLE segment 1'):
        img = vp.load_dicom(path, dtype=None)
    np.testing.assert_array_equal(np.asarray(img.dataobj)[:, :, 0], reference.T)
    with pytest.raises(ValueError, match='on_corrupt'):
        vp.load_dicom(path, on_corrupt='ignore')
