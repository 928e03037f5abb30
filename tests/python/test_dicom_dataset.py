"""vp.dicom.read against pydicom 3's dcmread, on every file pydicom ships for its own tests.

For each file both read it, pydicom in full (no deferred values) and voxpipe with a small
``defer_size`` so that most values are deferred and read back from the file on access, and must
agree on: the tags of the meta group and of the dataset at every depth (in order), each element's
VR and value (numbers, IS/DS, AT, text decoded with Specific Character Set, PN, bytes, sequences
item by item), the value offsets of top-level elements (pydicom's ``value_tell``), the pixel data
offset, and access by keyword and by tag.

Allowed differences, each counted and checked to be what it claims:
 - VR UN where pydicom has another VR: private tags that pydicom finds in its private
   dictionaries (voxpipe has none), whose value then stays bytes (docs/dicom.md). Public tags
   get the VR of the full PS3.6 dictionary, as in pydicom, in implicit VR files too;
 - DS: pydicom keeps the float of the stored text, as voxpipe does; no tolerance is needed now,
   but a value that parses in one and not the other would show as a difference.
Files pydicom reads and voxpipe refuses are listed in EXPECTED_REFUSALS.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest

pydicom = pytest.importorskip('pydicom')
from pydicom.data import DATA_ROOT  # noqa: E402
from pydicom.dataelem import RawDataElement  # noqa: E402
from pydicom.errors import InvalidDicomError  # noqa: E402
from pydicom.multival import MultiValue  # noqa: E402
from pydicom.valuerep import PersonName  # noqa: E402

import voxpipe as vp  # noqa: E402

DEFER = 64  # voxpipe defers most values: each is read back from the file when compared
PIXEL_TAGS = (0x7FE00010, 0x7FE00008, 0x7FE00009)
# The files of pydicom.data.get_testdata_files('**/*') that ship with pydicom: the function also
# tries to download pydicom's online test files, which hangs for minutes without a network.
FILES = sorted(os.fspath(p) for p in (Path(DATA_ROOT) / 'test_files').glob('**/*')
               if p.is_file() and p.suffix != '.py')
CHARSET_FILES = sorted(os.fspath(p) for p in (Path(DATA_ROOT) / 'charset_files').glob('*.dcm'))



def data_file(name: str) -> str:
    return os.fspath(Path(DATA_ROOT) / 'test_files' / name)


# pydicom reads these, voxpipe refuses them (voxpipe checks every length against the bytes left;
# pydicom reads what is there). Same list as test_dicom_parse.py.
EXPECTED_REFUSALS = {
    'MR_truncated.dcm': 'truncated',
    'DICOMDIR-nooffset': 'truncated',
    'rtplan_truncated.dcm': 'truncated',
}

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get('VOXPIPE_CLI') or REPO / '.venv' / 'bin' / 'voxpipe')


def pydicom_read(path: str):
    """dcmread in full, with force=True when the file has no DICM prefix but starts like a
    DICOM element (voxpipe's force rule); the exception when pydicom refuses."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        try:
            return pydicom.dcmread(path)
        except InvalidDicomError as e:
            head = Path(path).read_bytes()[:8]
            groups = {int.from_bytes(head[:2], 'little'), int.from_bytes(head[:2], 'big')}
            if len(head) < 8 or not any(2 <= g <= 0x10 for g in groups):
                return e
            try:
                return pydicom.dcmread(path, force=True)
            except Exception as e2:  # noqa: BLE001
                return e2
        except Exception as e:  # noqa: BLE001
            return e


def voxpipe_read(path: str, defer_size=DEFER, **kw):
    try:
        return vp.dicom.read(path, defer_size=defer_size, force=True, **kw)
    except vp.errors.VoxpipeError as e:
        return e


def plain(v):
    """pydicom's value types as plain Python: MultiValue -> list, PersonName/UID -> str,
    IS/DSfloat/BaseTag -> int/float."""
    if isinstance(v, (MultiValue, list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, PersonName):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    if isinstance(v, float):
        return float(v)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, str):
        return str(v)
    return v


def same(a, b) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


class Report:
    def __init__(self):
        self.problems: list[str] = []
        self.compared = 0
        self.deferred = 0


# The one kind of VR difference voxpipe knows of: private tags (odd group; implicit VR or
# explicit UN) that stay UN where pydicom finds them in its private dictionaries (their Private
# Creator is in the dataset; docs/dicom.md). Counted over all files and checked by
# test_tolerated_vrs_are_counted, so that a new one, or one that went away, shows: 27, the nine
# AGFA (0019,10xx) elements, explicit UN, of chrJapMulti.dcm, chrJapMultiExplicitIR6.dcm and
# chrKoreanMulti.dcm. (There were 545 with the compact dictionary: 518 more were public tags.)
TOLERATED = {'private UN': 0}
COMPARED: set[str] = set()  # the files test_dataset_matches_pydicom ran on
EXPECTED_TOLERATED = {'private UN': 27}


def tolerated_vr(tag: int, mine: str) -> bool:
    return mine == 'UN' and (tag >> 16) % 2 == 1


def compare(ours, theirs, where: str, report: Report, top: bool):
    their_tags = [int(t) for t in theirs.keys()]
    our_tags = [int(t) for t in ours.keys()]
    if our_tags != their_tags:
        report.problems.append(f'{where}: tags differ: only voxpipe '
                               f'{sorted(hex(t) for t in set(our_tags) - set(their_tags))}, only '
                               f'pydicom {sorted(hex(t) for t in set(their_tags) - set(our_tags))}')
    # Offsets first: pydicom replaces its raw elements when their values are converted.
    tells = {}
    if top:
        for tag in their_tags:
            raw = theirs.get_item(tag, keep_deferred=True)
            if isinstance(raw, RawDataElement):
                tells[tag] = raw.value_tell
    for tag in [t for t in our_tags if t in set(their_tags)]:
        name = f'{where}({tag >> 16:04X},{tag & 0xFFFF:04X})'
        mine = ours[tag]
        if tag in tells and mine.value_tell != tells[tag]:
            report.problems.append(f'{name}: value_tell {mine.value_tell} != pydicom {tells[tag]}')
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            elem = theirs[tag]
        report.compared += 1
        report.deferred += mine.is_deferred
        if mine.VR != elem.VR:
            if tolerated_vr(tag, mine.VR):
                TOLERATED['private UN'] += 1
                continue
            report.problems.append(f'{name}: VR {mine.VR} != pydicom {elem.VR}')
            continue
        if elem.VR == 'SQ':
            items, my_items = elem.value, mine.value
            if len(items) != len(my_items):
                report.problems.append(f'{name}: {len(my_items)} items != pydicom {len(items)}')
                continue
            for i, (item, my_item) in enumerate(zip(items, my_items)):
                compare(my_item, item, f'{name}[{i}]', report, False)
            continue
        a, b = plain(mine.value), plain(elem.value)
        if not same(a, b):
            report.problems.append(f'{name} {elem.VR}: {a!r:.200} != pydicom {b!r:.200}')
        # Keyword and tag access reach the same element.
        keyword = mine.keyword
        if keyword:
            if keyword not in ours or not same(plain(getattr(ours, keyword)), b):
                report.problems.append(f'{name}: ds.{keyword} differs from ds[tag].value')
            if ours[keyword].tag != tag or ours[tag >> 16, tag & 0xFFFF].tag != tag:
                report.problems.append(f'{name}: ds[{keyword!r}] / ds[group, element] differ')


def pixel_tell(ds):
    tag = next((t for t in PIXEL_TAGS if t in ds), None)
    return None if tag is None else ds.get_item(tag, keep_deferred=True).value_tell


@pytest.mark.parametrize('path', FILES + CHARSET_FILES,
                         ids=[Path(p).name for p in FILES] + ['charset/' + Path(p).name for p in CHARSET_FILES])
def test_dataset_matches_pydicom(path):
    COMPARED.add(path)
    name = Path(path).name
    theirs = pydicom_read(path)
    ours = voxpipe_read(path)
    if name in EXPECTED_REFUSALS:
        assert not isinstance(theirs, Exception)
        assert isinstance(ours, vp.errors.VoxpipeError) and ours.code == EXPECTED_REFUSALS[name], ours
        return
    if isinstance(theirs, Exception) and isinstance(ours, Exception):
        pytest.skip(f'neither reads {name}: pydicom {theirs!r}; voxpipe {ours}')
    assert not isinstance(theirs, Exception), f'pydicom refuses {name} ({theirs!r}), voxpipe reads it'
    assert not isinstance(ours, Exception), f'pydicom reads {name}, voxpipe: {ours}'

    expected_pixel = pixel_tell(theirs)
    report = Report()
    compare(ours.file_meta, theirs.file_meta, 'meta', report, True)
    compare(ours, theirs, '', report, True)
    assert not report.problems, '\n'.join(report.problems[:40])
    assert ours.pixel_data_offset == expected_pixel
    assert (ours.pixel_data_length is None) == (expected_pixel is None)
    assert ours.filename == path
    if 'TransferSyntaxUID' in theirs.file_meta:
        assert ours.transfer_syntax == theirs.file_meta.TransferSyntaxUID


def test_tolerated_vrs_are_counted():
    """Runs after test_dataset_matches_pydicom on every file (pytest keeps the file's order);
    skipped when only some of those ran."""
    if len(COMPARED) != len(FILES) + len(CHARSET_FILES):
        pytest.skip('test_dataset_matches_pydicom did not run on every file')
    assert TOLERATED == EXPECTED_TOLERATED


def test_every_file_is_compared():
    """The bundled files are there, and deferred reads are exercised on many of them."""
    assert len(FILES) > 100
    compared = deferred = 0
    for path in FILES[::7]:
        ours = voxpipe_read(path)
        if isinstance(ours, Exception):
            continue
        compared += 1
        deferred += any(e.is_deferred for e in ours)
    assert compared > 10 and deferred > compared // 2


def test_default_read_equals_small_defer_and_full_read():
    path = data_file('CT_small.dcm')
    full = vp.dicom.read(path, defer_size=None)
    default = vp.dicom.read(path)
    small = vp.dicom.read(path, defer_size='0.01 kB')
    assert not any(e.is_deferred for e in full if e.tag not in PIXEL_TAGS)
    assert sum(e.is_deferred for e in small) > 30
    assert str(full) == str(default) == str(small)
    for a, b, c in zip(full, default, small):
        if a.VR != 'SQ':
            assert same(plain(a.value), plain(b.value)) and same(plain(a.value), plain(c.value))


def test_deflated_file_reads_deferred_values_through_the_stream():
    path = data_file('image_dfl.dcm')
    ours = vp.dicom.read(path, defer_size=16)
    assert ours.offsets_in_inflated_stream
    theirs = pydicom.dcmread(path)
    assert ours.PixelData == theirs.PixelData
    assert ours[0x7FE00010].is_deferred


def test_deferred_read_refuses_a_file_that_changed_size(tmp_path):
    src = data_file('CT_small.dcm')
    path = tmp_path / 'ct.dcm'
    shutil.copy(src, path)
    ds = vp.dicom.read(path, defer_size=16)
    assert ds.Rows == 128  # 2 bytes: read with the dataset
    with open(path, 'ab') as f:
        f.write(b'\0' * 10)
    with pytest.raises(vp.errors.VoxpipeIOError, match='bytes'):
        ds.PixelData


def test_stop_before_pixels_hides_the_pixel_data_but_locates_it():
    path = data_file('CT_small.dcm')
    ds = vp.dicom.read(path, stop_before_pixels=True)
    theirs = pydicom.dcmread(path, stop_before_pixels=True)
    assert 'PixelData' not in ds and 0x7FE00010 not in ds
    assert [int(t) for t in ds.keys()] == [int(t) for t in theirs.keys()]
    assert ds.pixel_data_offset == pydicom_read(path).get_item(0x7FE00010, keep_deferred=True).value_tell
    assert ds.pixel_data_length == 128 * 128 * 2


def test_encapsulated_fragments_and_pixel_value():
    from pydicom import encaps

    path = data_file('JPEG2000.dcm')
    ds = vp.dicom.read(path)
    theirs = pydicom.dcmread(path)
    frags = ds.pixel_data_fragments
    data = Path(path).read_bytes()
    assert [data[o:o + n] for o, n in frags] == list(encaps.generate_fragments(theirs.PixelData))[1:]  # [0]: Basic Offset Table
    assert ds.PixelData == theirs.PixelData
    assert ds[0x7FE00010].is_undefined_length
    assert vp.dicom.read(data_file('CT_small.dcm')).pixel_data_fragments is None


def test_access_api():
    path = data_file('CT_small.dcm')
    ds = vp.dicom.read(path)
    elem = ds[0x0028, 0x0010]
    assert elem is ds[0x00280010] and elem is ds['Rows'] and elem.value == ds.Rows == 128
    assert (elem.tag, elem.VR, elem.keyword, elem.length) == (0x00280010, 'US', 'Rows', 2)
    assert repr(elem.tag) == '(0028,0010)'
    assert 'Rows' in ds and (0x0028, 0x0010) in ds and 0x00280010 in ds
    assert 'NoSuchKeyword' not in ds and 0x00280011 in ds and 0x00290099 not in ds
    assert ds.get('Rows') == 128 and ds.get('BitsAllocated', 7) == 16
    assert ds.get('LargestImagePixelValue', 'x') == 'x' and ds.get(0x00290099) is None
    assert ds.get(0x00280010) is elem
    with pytest.raises(KeyError):
        ds[0x00290099]
    with pytest.raises(AttributeError):
        ds.NoSuchKeyword
    tags = [e.tag for e in ds]
    assert tags == sorted(tags) == ds.keys() and len(ds) == len(tags)
    assert 'Rows' in dir(ds) and 'PixelSpacing' in ds.dir()
    assert ds.PatientName == 'CompressedSamples^CT1' and ds.PixelSpacing == [0.661468, 0.661468]
    assert ds.file_meta.TransferSyntaxUID == ds.transfer_syntax == '1.2.840.10008.1.2.1'
    assert ds.is_little_endian and not ds.is_implicit_VR
    text = str(ds)
    assert '(0028,0010) Rows' in text and "US: 128" in text and text.startswith('Dataset.file_meta')


def test_nested_sequences_are_indented():
    ds = vp.dicom.read(data_file('rtplan.dcm'))
    lines = str(ds).splitlines()
    assert any(line.startswith('   (') for line in lines)
    assert any(line.startswith('      (') for line in lines)  # items of items


def test_charsets_decode_like_pydicom():
    """Every charset test file pydicom ships (Japanese, Korean, Chinese, Arabic, Greek, ...) has
    non-ASCII names that voxpipe decodes as pydicom (all their elements: test_dataset_matches_pydicom)."""
    assert len(CHARSET_FILES) > 15
    names = 0
    for path in CHARSET_FILES:
        ours, theirs = vp.dicom.read(path), pydicom_read(path)
        pairs = [(ours, theirs)]
        while pairs:
            a, b = pairs.pop()
            if 'PatientName' in b:
                assert a.PatientName == str(b.PatientName), path
                names += not a.PatientName.isascii()
            for elem in b:
                if elem.VR == 'SQ':
                    pairs.extend(zip(a[elem.tag].value, elem.value))
    assert names > 10


def test_errors_are_voxpipe_errors(tmp_path):
    with pytest.raises(vp.errors.VoxpipeFileNotFoundError):
        vp.dicom.read(tmp_path / 'missing.dcm')
    bad = tmp_path / 'bad.dcm'
    bad.write_bytes(b'\0' * 128 + b'DICM' + b'\x02\x00\x10\x00UI\xff\x7f')
    with pytest.raises((vp.errors.TruncatedError, vp.errors.FormatError)):
        vp.dicom.read(bad)
    plain_file = tmp_path / 'noprefix.dcm'
    plain_file.write_bytes(Path(data_file('CT_small.dcm')).read_bytes()[132:])
    with pytest.raises(vp.errors.FormatError):
        vp.dicom.read(plain_file)
    assert vp.dicom.read(plain_file, force=True).Rows == 128


# ---------------------------------------------------------------------------------------------
# voxpipe info FILE.dcm --json


def _info(path):
    r = subprocess.run([str(CLI), 'info', path, '--json'], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _num(v):
    return None if v is None else [float(x) for x in v] if isinstance(v, (list, MultiValue)) else float(v)


@pytest.mark.skipif(not CLI.is_file(), reason=f'{CLI} not built/installed')
@pytest.mark.parametrize('name', ['CT_small.dcm', 'MR_small.dcm', 'JPEG2000.dcm',
                                  'MR_small_bigendian.dcm', 'image_dfl.dcm',
                                  'rtplan.dcm', 'SC_rgb_rle_2frame.dcm'])
def test_cli_info_json_matches_pydicom(name):
    path = data_file(name)
    info = _info(path)
    ds = pydicom.dcmread(path)
    meta = ds.file_meta
    assert info['format'] == 'DICOM'
    assert info['transfer_syntax']['uid'] == meta.TransferSyntaxUID
    assert info['transfer_syntax']['name'] == meta.TransferSyntaxUID.name
    for key, keyword in [('sop_class_uid', 'SOPClassUID'), ('modality', 'Modality'),
                         ('study_instance_uid', 'StudyInstanceUID'),
                         ('series_instance_uid', 'SeriesInstanceUID'),
                         ('sop_instance_uid', 'SOPInstanceUID'),
                         ('photometric_interpretation', 'PhotometricInterpretation')]:
        assert info[key] == ds.get(keyword), key
    for key, keyword in [('rows', 'Rows'), ('columns', 'Columns'),
                         ('bits_allocated', 'BitsAllocated'), ('bits_stored', 'BitsStored'),
                         ('pixel_representation', 'PixelRepresentation'),
                         ('samples_per_pixel', 'SamplesPerPixel'),
                         ('number_of_frames', 'NumberOfFrames')]:
        v = ds.get(keyword)
        assert info[key] == (None if v in (None, '') else int(v)), key
    for key, keyword in [('pixel_spacing', 'PixelSpacing'),
                         ('image_orientation_patient', 'ImageOrientationPatient'),
                         ('image_position_patient', 'ImagePositionPatient'),
                         ('rescale_slope', 'RescaleSlope'), ('rescale_intercept', 'RescaleIntercept')]:
        v = ds.get(keyword)
        assert info[key] == _num(None if v == '' else v), key
    px = info['pixel_data']
    if 'PixelData' not in ds:
        assert px is None
        return
    raw = pydicom.dcmread(path, defer_size=0).get_item(0x7FE00010, keep_deferred=True)
    assert px['offset'] == raw.value_tell
    assert px['encapsulated'] == (raw.length == 0xFFFFFFFF)
    if px['encapsulated']:
        assert px['fragment_count'] == len(vp.dicom.read(path).pixel_data_fragments)
        assert px['fragments'][0][0] == vp.dicom.read(path).pixel_data_fragments[0][0]
    else:
        assert px['length'] == raw.length


@pytest.mark.skipif(not CLI.is_file(), reason=f'{CLI} not built/installed')
def test_cli_info_dicom_errors(tmp_path):
    bad = tmp_path / 'bad.dcm'
    bad.write_bytes(b'\0' * 128 + b'DICM' + b'\x02\x00\x10\x00UI\xff\x7f')
    r = subprocess.run([str(CLI), 'info', str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode in (5, 7), r.stderr  # format / truncated (docs/exit_codes.md)
    assert r.stderr.startswith('voxpipe info: error (')
    r = subprocess.run([str(CLI), 'info', str(tmp_path / 'missing.dcm')], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 3
    text = subprocess.run([str(CLI), 'info', data_file('CT_small.dcm')],
                          capture_output=True, text=True, timeout=60)
    assert text.returncode == 0 and 'Explicit VR Little Endian' in text.stdout
