"""nibabel quirks (docs: /work/shared/research/nifti.md section 5): voxpipe must do what nibabel does.

Each test builds a file that exercises one quirk, first checks that nibabel really shows the quirk
(so a generator bug cannot make the test vacuous), then requires voxpipe to give the same result:
both raise (voxpipe with a ValueError/OSError naming the file) or both give identical images
(shape, affine, every header field, zooms, extensions, dataobj attributes, data, get_fdata,
slicers).
"""

from __future__ import annotations

import gzip
import logging
import math
import os

import nibabel as nib
import numpy as np
import pytest

from nifti_testlib import (
    HDR_SIZE, QFORM, RGB24, RGBA32, SFORM, SINGLE_OFFSET, array_problem, assert_same,
    compare_load, ext_bytes, gz, make_data, nib_parts, nonempty_slicers, outcome, slicer_id,
    write_parts,
)

logging.getLogger('nibabel').setLevel(logging.CRITICAL)

SHAPE = (5, 6, 7)


def swap32(v: int) -> int:
    return int(np.array(v, '<i4').byteswap())


def swap64(v: int) -> int:
    return int(np.array(v, '<i8').byteswap())


def dims(*shape, ndim=None, fill=1):
    d = [len(shape) if ndim is None else ndim] + list(shape)
    return d + [fill] * (8 - len(d))


def mk(tmp_path, name='q', *, data=None, version=1, endian='<', kind='nii', dtype=None,
       qform=False, patch=None, exts=(), ext_raw=None, vox_offset=None, data_pos=None,
       data_bytes=None, mutate=None, open_with='hdr', sform=SFORM):
    """Write one quirk file (nibabel-made, then patched) and return its path.

    Default: float32 5x6x7, sform (code 2) = SFORM and qform (code 1) = QFORM, so the sform wins;
    ``qform=True`` zeroes sform_code so the qform decides the affine.
    """
    if data is None:
        data = make_data('float32', SHAPE, seed=7)
    single = kind.startswith('nii')
    parts = nib_parts(data, version, endian, single, dtype=dtype, affine=sform,
                      qform=(QFORM, 1), sform=(sform, 2), extensions=exts)
    if qform:
        parts.patch(sform_code=0)
    hs = HDR_SIZE[version]
    if ext_raw is not None:
        parts.ext = ext_raw
        if single and vox_offset is None:
            vox_offset = hs + len(ext_raw)
    if vox_offset is not None:
        parts.patch(vox_offset=vox_offset)
        if single and data_pos is None:
            data_pos = max(int(vox_offset), hs + len(parts.ext))
    if data_pos is not None:
        parts.data_pos = data_pos
    if data_bytes is not None:
        parts.data = data_bytes
    if patch:
        parts.patch(**patch)
    return write_parts(tmp_path / name, parts, kind, open_with, mutate)


def nib_hdr(path):
    return nib.load(path).header


# ---------------------------------------------------------------------------------------------
# Byte order
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('endian', ['<', '>'])
@pytest.mark.parametrize('kind', ['nii', 'nii.gz', 'pair'])
def test_byte_order_from_dim0(tmp_path, version, endian, kind):
    p = mk(tmp_path, version=version, endian=endian, kind=kind)
    ni, vi = compare_load(p, expect_nib_error=False)
    assert ni.header.endianness == endian
    assert vi.dataobj.dtype == np.dtype(endian + 'f4')  # non-native stays non-native


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('endian', ['<', '>'])
def test_dim0_zero_sizeof_hdr_decides(tmp_path, version, endian):
    """dim[0] == 0: the byte order comes from sizeof_hdr (shape () / (0,) handling too)."""
    d = np.zeros(8, int)
    p = mk(tmp_path, version=version, endian=endian, patch={'dim': d},
           data_bytes=b'\x01\x02\x03\x04\x05\x06\x07\x08')
    ni, vi = compare_load(p, expect_nib_error=False)
    assert ni.header.endianness == endian


@pytest.mark.parametrize('version', [1, 2])
def test_dim0_zero_bad_sizeof_hdr_means_native(tmp_path, version):
    d = np.zeros(8, int)
    p = mk(tmp_path, version=version, endian='>', patch={'dim': d, 'sizeof_hdr': 1})
    compare_load(p)


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('dim0', [8, -3, 259, 32767, -32768])
def test_dim0_out_of_range_treated_as_swapped(tmp_path, version, dim0):
    """dim[0] outside 1..7 in native order => header read byte-swapped (usually fails)."""
    d = dims(*SHAPE)
    d[0] = dim0
    p = mk(tmp_path, version=version, endian='<', patch={'dim': d})
    compare_load(p)


@pytest.mark.parametrize('version', [1, 2])
def test_big_endian_dim0_256(tmp_path, version):
    """BE header with dim[0] = 256.  NIfTI-1 (int16): reads as 1 natively, so nibabel decodes
    the header as little-endian (garbage, unknown datatype: raises).  NIfTI-2 (int64): reads as
    2**48 natively, so nibabel byte-swaps; dim[0] = 256 > 7 is then not rejected and the shape is
    dim[1:8] (7-D)."""
    d = dims(*SHAPE)
    d[0] = 256
    p = mk(tmp_path, version=version, endian='>', patch={'dim': d})
    compare_load(p)


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('endian', ['<', '>'])
def test_sizeof_hdr_in_other_byte_order(tmp_path, version, endian):
    """dim[0] decides the byte order; a byte-swapped sizeof_hdr is then just 'wrong' and fixed."""
    hs = HDR_SIZE[version]
    p = mk(tmp_path, version=version, endian=endian, patch={'sizeof_hdr': swap32(hs)})
    ni, vi = compare_load(p, expect_nib_error=False)
    assert int(ni.header['sizeof_hdr']) == hs
    assert ni.header.endianness == endian


@pytest.mark.parametrize('value', [349, 0, -1, 540, 1000])
def test_wrong_sizeof_hdr_nifti1_fixed(tmp_path, value):
    p = mk(tmp_path, version=1, patch={'sizeof_hdr': value})
    ni, vi = compare_load(p, expect_nib_error=False)
    assert int(ni.header['sizeof_hdr']) == 348


@pytest.mark.parametrize('value', [348, 541, 0])
def test_wrong_sizeof_hdr_nifti2_not_recognised(tmp_path, value):
    """NIfTI-2 is sniffed by sizeof_hdr == 540 only: anything else is not a NIfTI-2 file."""
    p = mk(tmp_path, version=2, patch={'sizeof_hdr': value})
    compare_load(p, expect_nib_error=True, err_fields=['sizeof_hdr', 'magic'])


# ---------------------------------------------------------------------------------------------
# Magic
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize('version,magic', [(1, b'n+3'), (1, b'xxxx'), (1, b''), (1, b'n+2'),
                                           (2, b'n+1'), (2, b'ni1'), (2, b'xx2'), (2, b'')])
def test_invalid_magic_raises(tmp_path, version, magic):
    p = mk(tmp_path, version=version, patch={'magic': magic})
    compare_load(p, expect_nib_error=True, err_fields=['magic'])


def test_invalid_magic_pair_raises(tmp_path):
    """A .hdr with bad magic: nib.load falls back to SPM2/Analyze; as a NIfTI pair it raises.

    voxpipe only reads NIfTI, so it is compared with nibabel's Nifti1Pair loader.
    """
    p = mk(tmp_path, kind='pair', patch={'magic': b'zzz'})
    assert type(nib.load(p)).__name__ == 'Spm2AnalyzeImage'
    compare_load(p, nib_loader=nib.Nifti1Pair.from_filename, expect_nib_error=True,
                 err_fields=['magic'])


@pytest.mark.parametrize('version', [1, 2])
def test_pair_magic_in_single_file(tmp_path, version):
    """'ni1'/'ni2' in a .nii: loads as a single file, data from vox_offset."""
    p = mk(tmp_path, version=version, patch={'magic': b'ni%d' % version})
    compare_load(p, expect_nib_error=False)


@pytest.mark.parametrize('version', [1, 2])
def test_pair_magic_in_single_file_offset_below_header(tmp_path, version):
    """No 'offset too low' check for pair magic: data read from vox_offset 100 (inside header)."""
    p = mk(tmp_path, version=version, patch={'magic': b'ni%d' % version, 'vox_offset': 96})
    compare_load(p, expect_nib_error=False)


@pytest.mark.parametrize('version', [1, 2])
def test_single_magic_in_pair_header(tmp_path, version):
    """'n+1' in a .hdr: loads as a pair; data read from vox_offset inside the .img."""
    p = mk(tmp_path, version=version, kind='pair',
           patch={'magic': b'n+%d' % version, 'vox_offset': SINGLE_OFFSET[version]},
           data_pos=SINGLE_OFFSET[version])
    compare_load(p, expect_nib_error=False)


# ---------------------------------------------------------------------------------------------
# NIfTI-2 eol_check
# ---------------------------------------------------------------------------------------------

def test_eol_check_zero_fixed(tmp_path):
    p = mk(tmp_path, version=2, patch={'eol_check': [0, 0, 0, 0]})
    ni, vi = compare_load(p, expect_nib_error=False)
    assert list(ni.header['eol_check']) == [13, 10, 26, 10]


@pytest.mark.parametrize('eol', [[13, 10, 26, 0], [10, 13, 26, 10], [0, 0, 0, 1], [13, 10, 26, 11]])
def test_eol_check_corrupt_raises(tmp_path, eol):
    p = mk(tmp_path, version=2, patch={'eol_check': eol})
    compare_load(p, expect_nib_error=True, err_fields=['eol_check', 'eol'])


# ---------------------------------------------------------------------------------------------
# pixdim, qfac, bitpix, xform codes, datatype
# ---------------------------------------------------------------------------------------------

PIXDIMS = {
    'zero1': [1, 0, 2, 3, 1, 1, 1, 1],
    'zero_all': [1, 0, 0, 0, 0, 1, 1, 1],
    'neg': [1, -1.5, 2, -3, 1, 1, 1, 1],
    'neg_t': [1, 1.5, 2, 3, -2.5, 1, 1, 1],
    'nan': [1, np.nan, 2, 3, 1, 1, 1, 1],
    'inf': [1, 1, np.inf, 3, 1, 1, 1, 1],
    'tiny': [1, 1e-30, 2, 3, 1, 1, 1, 1],
    'negzero': [1, -0.0, 2, 3, 1, 1, 1, 1],
}


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('affine_from', ['qform', 'base', 'sform'])
@pytest.mark.parametrize('pd', list(PIXDIMS), ids=list(PIXDIMS))
def test_pixdim_fixes(tmp_path, version, affine_from, pd):
    patch = {'pixdim': PIXDIMS[pd]}
    if affine_from == 'base':
        patch.update(qform_code=0, sform_code=0)
    p = mk(tmp_path, version=version, qform=affine_from == 'qform', patch=patch)
    compare_load(p)


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('qfac', [0.0, 2.0, -1.0, 0.5, -2.0, np.nan, 1.0])
def test_qfac(tmp_path, version, qfac):
    pd = [qfac, 1.5, 2.0, 2.5, 1, 1, 1, 1]
    p = mk(tmp_path, version=version, qform=True, patch={'pixdim': pd})
    ni, vi = compare_load(p, expect_nib_error=False)
    assert float(ni.header['pixdim'][0]) in (1.0, -1.0)


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('bitpix', [0, 7, 64, -32])
def test_bitpix_fixed(tmp_path, version, bitpix):
    p = mk(tmp_path, version=version, patch={'bitpix': bitpix})
    ni, vi = compare_load(p, expect_nib_error=False)
    assert int(ni.header['bitpix']) == 32


XFORM_CODES = [(7, 1), (1, 7), (-1, 2), (2, -3), (6, 6), (5, 5), (3, 0), (0, 4), (100, 100)]


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('qcode,scode', XFORM_CODES, ids=[f'q{q}s{s}' for q, s in XFORM_CODES])
def test_xform_codes(tmp_path, version, qcode, scode):
    p = mk(tmp_path, version=version, patch={'qform_code': qcode, 'sform_code': scode})
    ni, vi = compare_load(p, expect_nib_error=False)
    assert 0 <= int(ni.header['qform_code']) <= 5 and 0 <= int(ni.header['sform_code']) <= 5


@pytest.mark.parametrize('version', [1, 2])
def test_sform_code_with_all_zero_sform_is_used(tmp_path, version):
    p = mk(tmp_path, version=version,
           patch={'srow_x': [0] * 4, 'srow_y': [0] * 4, 'srow_z': [0] * 4})
    ni, vi = compare_load(p, expect_nib_error=False)
    assert np.array_equal(ni.affine, np.diag([0.0, 0, 0, 1]))


@pytest.mark.parametrize('version', [1, 2])
def test_sform_with_nan(tmp_path, version):
    p = mk(tmp_path, version=version, patch={'srow_y': [np.nan, 1, 0, np.inf]})
    compare_load(p, expect_nib_error=False)


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('code', [0, 1, 3, 6, 255, 1536, 2048, 2305, 32767, -2])
def test_unknown_or_unsupported_datatype_raises(tmp_path, version, code):
    p = mk(tmp_path, version=version, patch={'datatype': code})
    compare_load(p, expect_nib_error=True, err_fields=['datatype'])


# ---------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('shape', [(5, 6, 7, 1), (5, 6, 7, 1, 1), (5, 1, 1), (1, 1, 1, 1, 1, 1, 1),
                                   (5, 6, 1, 2), (2, 3, 1, 2, 1, 2, 2)])
def test_trailing_singletons_kept(tmp_path, version, shape):
    data = make_data('int16', shape, seed=3)
    p = mk(tmp_path, version=version, data=data)
    ni, vi = compare_load(p, expect_nib_error=False)
    assert ni.shape == shape


@pytest.mark.parametrize('version', [1, 2])
def test_dims_beyond_dim0_ignored(tmp_path, version):
    d = dims(*SHAPE)
    d[4:] = [9, -3, 0, 1000]
    p = mk(tmp_path, version=version, patch={'dim': d})
    ni, vi = compare_load(p, expect_nib_error=False)
    assert ni.shape == SHAPE


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('shape', [(5, 0, 7), (0, 6, 7), (5, 6, 7, 0), (5, -6, 7), (-5, 6, 7),
                                   (5, 6, -1)])
def test_zero_and_negative_dims(tmp_path, version, shape):
    p = mk(tmp_path, version=version, patch={'dim': dims(*shape)})
    compare_load(p)


def test_freesurfer_glmin_hack_nifti1(tmp_path):
    n = 40000
    data = make_data('uint8', (n, 1, 1), seed=5)
    p = mk(tmp_path, data=data)
    h = nib_hdr(p)
    assert list(h['dim'][:4]) == [3, -1, 1, 1] and int(h['glmin']) == n
    ni, vi = compare_load(p, expect_nib_error=False)
    assert ni.shape == (n, 1, 1)


def test_freesurfer_glmin_hack_4d(tmp_path):
    n = 33000
    data = make_data('int16', (n, 1, 1, 2), seed=5)
    p = mk(tmp_path, data=data)
    ni, vi = compare_load(p, expect_nib_error=False, slicers=nonempty_slicers(data.shape))
    assert ni.shape == (n, 1, 1, 2)


def test_freesurfer_glmin_zero_raises(tmp_path):
    data = make_data('uint8', (100, 1, 1), seed=5)
    p = mk(tmp_path, data=data, patch={'dim': dims(-1, 1, 1), 'glmin': 0})
    compare_load(p, expect_nib_error=True, err_fields=['glmin', 'dim'])


def test_freesurfer_ico7_hack_nifti1(tmp_path):
    data = make_data('uint8', (163842, 1, 1), seed=6)
    p = mk(tmp_path, data=data, patch={'dim': dims(27307, 1, 6), 'glmin': 0})
    ni, vi = compare_load(p, expect_nib_error=False, slicers=[0, (Ellipsis, 0), slice(5, 9)])
    assert ni.shape == (163842, 1, 1)


def test_freesurfer_hacks_not_applied_to_nifti2(tmp_path):
    data = make_data('uint8', (100, 1, 1), seed=5)
    p = mk(tmp_path, version=2, data=data, patch={'dim': dims(-1, 1, 1)})
    compare_load(p)
    p2 = mk(tmp_path, 'ico', version=2, data=make_data('uint8', (163842, 1, 1)),
            patch={'dim': dims(27307, 1, 6)})
    ni, vi = compare_load(p2, expect_nib_error=False, slicers=[0, (Ellipsis, 0)])
    assert ni.shape == (27307, 1, 6)


def test_nifti2_large_first_dim_no_hack(tmp_path):
    data = make_data('uint8', (40000, 1, 1), seed=5)
    p = mk(tmp_path, version=2, data=data)
    ni, vi = compare_load(p, expect_nib_error=False, slicers=[0, -1, slice(None, None, 1000)])
    assert list(ni.header['dim'][:4]) == [3, 40000, 1, 1]


# ---------------------------------------------------------------------------------------------
# vox_offset
# ---------------------------------------------------------------------------------------------

VOX_CASES = {
    # name: (version, vox_offset written, data position (None: int(vox_offset)))
    'v1_352': (1, 352, None),
    'v1_544': (1, 544, None),
    'v1_4096': (1, 4096, None),
    'v1_357': (1, 357, None),
    'v1_400.7': (1, 400.7, 400),
    'v1_352.9': (1, 352.9, 352),
    'v1_1e6': (1, 1048576, None),
    'v2_544': (2, 544, None),
    'v2_4096': (2, 4096, None),
    'v2_549': (2, 549, None),
    'v2_2**33': (2, 2 ** 33, 1024),  # beyond EOF: data access must fail like nibabel
}


@pytest.mark.parametrize('kind', ['nii', 'nii.gz'])
@pytest.mark.parametrize('case', list(VOX_CASES))
def test_vox_offset_variants(tmp_path, case, kind):
    version, off, pos = VOX_CASES[case]
    p = mk(tmp_path, version=version, kind=kind, vox_offset=off,
           data_pos=int(off) if pos is None else pos)
    # empty selections: see test_empty_slice_of_data_beyond_eof
    ni, vi = compare_load(p, expect_nib_error=False, slicers=nonempty_slicers(SHAPE))
    assert ni.dataobj.offset == int(np.float32(off) if version == 1 else off)


@pytest.mark.parametrize('kind', ['nii', 'nii.gz'])
@pytest.mark.parametrize('slicer', [slice(3, 3), (slice(0, 0), 1)], ids=slicer_id)
def test_empty_slice_of_data_beyond_eof(tmp_path, vp, kind, slicer):
    """vox_offset past EOF: nibabel raises 'Whoops, not enough data in file' even for an empty
    selection (numpy semantics would return an empty array)."""
    p = mk(tmp_path, version=2, kind=kind, vox_offset=2 ** 33, data_pos=1024)
    assert_same(vp.load(p), nib.load(p), ('slicers',), slicers=[slicer])


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('kind', ['nii', 'nii.gz'])
def test_vox_offset_zero_single_reads_from_byte_0(tmp_path, version, kind):
    p = mk(tmp_path, version=version, kind=kind, vox_offset=0)
    ni, vi = compare_load(p, expect_nib_error=False)
    assert ni.dataobj.offset == 0


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('off', [100, 16, 351.5, -16, 1])
def test_vox_offset_below_header_raises(tmp_path, version, off):
    if version == 2 and off == 351.5:
        off = 543
    p = mk(tmp_path, version=version, vox_offset=off, data_pos=SINGLE_OFFSET[version])
    compare_load(p, expect_nib_error=True, err_fields=['vox_offset', 'offset'])


def test_vox_offset_v1_between_348_and_352(tmp_path):
    p = mk(tmp_path, version=1, vox_offset=348, data_pos=352)
    compare_load(p, expect_nib_error=True, err_fields=['vox_offset', 'offset'])


@pytest.mark.parametrize('version', [1, 2])
def test_pair_vox_offset_in_img(tmp_path, version):
    p = mk(tmp_path, version=version, kind='pair', vox_offset=48, data_pos=48)
    ni, vi = compare_load(p, expect_nib_error=False)
    assert ni.dataobj.offset == 48


# ---------------------------------------------------------------------------------------------
# Extensions
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('endian', ['<', '>'])
@pytest.mark.parametrize('kind', ['nii', 'nii.gz', 'pair', 'pair.gz'])
def test_extensions_roundtrip_contents(tmp_path, version, endian, kind):
    exts = [(6, b'hello\x00\x00\x00'), (4, b'\x00inner\x00nul\x00'), (0, b''), (44, b'x' * 100),
            (9999, b'\x00' * 10)]
    p = mk(tmp_path, version=version, endian=endian, kind=kind, exts=exts)
    ni, vi = compare_load(p, expect_nib_error=False)
    got = [(int(e.get_code()), e.get_content()) for e in ni.header.extensions]
    assert got[0] == (6, b'hello') and got[1] == (4, b'\x00inner\x00nul') and got[4][1] == b''


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('flag', [b'\x00\x01\x01\x01', b'\x00\x00\x00\x00', b'\x02\x00\x00\x00',
                                  b'\xff\xff\xff\xff'])
def test_extension_flag_first_byte_decides(tmp_path, version, flag):
    raw = ext_bytes([(6, b'flagged content')], flag=flag)
    p = mk(tmp_path, version=version, ext_raw=raw)
    ni, vi = compare_load(p, expect_nib_error=False)
    assert len(ni.header.extensions) == (0 if flag[0] == 0 else 1)


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('endian', ['<', '>'])
def test_extension_esize_not_multiple_of_16(tmp_path, version, endian):
    raw = ext_bytes([(6, b'twelve bytes', 20), (4, b'twenty bytes of text', 28)], endian=endian)
    p = mk(tmp_path, version=version, endian=endian, ext_raw=raw)
    ni, vi = compare_load(p, expect_nib_error=False)
    assert [e.get_content() for e in ni.header.extensions] == [b'twelve bytes',
                                                               b'twenty bytes of text']


@pytest.mark.parametrize('version', [1, 2])
def test_extension_region_smaller_than_16_after_ext(tmp_path, version):
    """Leftover < 16 bytes before vox_offset: the loop stops, padding ignored."""
    raw = ext_bytes([(6, b'abc')]) + b'\x07' * 12
    p = mk(tmp_path, version=version, ext_raw=raw)
    compare_load(p, expect_nib_error=False)


@pytest.mark.parametrize('version', [1, 2])
def test_extension_esize_past_vox_offset_within_file(tmp_path, version):
    """esize runs into the data: nibabel reads the data bytes as extension content."""
    raw = ext_bytes([(6, b'abc', 64)], pad=False)[:4 + 8 + 8]  # claims 64, region has 16
    p = mk(tmp_path, version=version, ext_raw=raw)
    compare_load(p)


@pytest.mark.parametrize('version', [1, 2])
def test_extension_esize_past_eof_raises(tmp_path, version):
    raw = ext_bytes([(6, b'abc', 1 << 20)], pad=False)[:4 + 16]
    p = mk(tmp_path, version=version, ext_raw=raw)
    compare_load(p, expect_nib_error=True, err_fields=['extension', 'esize'])


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('esize', [0, 8, -16, 4])
def test_extension_esize_degenerate(tmp_path, version, esize):
    raw = ext_bytes([(6, b'', esize)], pad=False) + b'\0' * 16
    p = mk(tmp_path, version=version, ext_raw=raw)
    compare_load(p)


@pytest.mark.parametrize('version', [1, 2])
def test_extension_flag_with_vox_offset_zero(tmp_path, version):
    """vox_offset 0 + extension flag: nibabel reads extensions up to EOF (size negative)."""
    raw = ext_bytes([(6, b'e' * 24)])
    p = mk(tmp_path, version=version, ext_raw=raw, vox_offset=0,
           data_bytes=b'\0' * 16 * 20)
    compare_load(p)


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('kind', ['pair', 'pair.gz'])
def test_pair_hdr_extensions_read_to_eof(tmp_path, version, kind):
    raw = ext_bytes([(6, b'first'), (8, b'second' * 5), (4, b'third')])
    p = mk(tmp_path, version=version, kind=kind, ext_raw=raw)
    ni, vi = compare_load(p, expect_nib_error=False)
    assert len(ni.header.extensions) == 3


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('tail', [b'\x01\x02\x03', b'\x10\x00\x00\x00\x06\x00\x00\x00abc'])
def test_pair_hdr_trailing_garbage_after_extensions(tmp_path, version, tail):
    raw = ext_bytes([(6, b'first')]) + tail
    p = mk(tmp_path, version=version, kind='pair', ext_raw=raw)
    compare_load(p)


@pytest.mark.parametrize('version', [1, 2])
def test_pair_hdr_flag_only(tmp_path, version):
    p = mk(tmp_path, version=version, kind='pair', ext_raw=b'\x01\x00\x00\x00')
    ni, vi = compare_load(p, expect_nib_error=False)
    assert len(ni.header.extensions) == 0


# ---------------------------------------------------------------------------------------------
# Scaling
# ---------------------------------------------------------------------------------------------

UNSCALED = [(0.0, 5.0), (0.0, np.nan), (np.nan, 3.0), (np.nan, np.nan), (np.inf, 1.0),
            (-np.inf, 0.0), (np.inf, np.nan), (-0.0, 2.0), (1.0, 0.0)]


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('dtype', ['int16', 'float32', 'uint8', 'complex64'])
@pytest.mark.parametrize('slope,inter', UNSCALED, ids=[f'{s}_{i}' for s, i in UNSCALED])
def test_slope_zero_nan_inf_means_unscaled(tmp_path, version, dtype, slope, inter):
    data = make_data(dtype, SHAPE, seed=11)
    p = mk(tmp_path, version=version, data=data, patch={'scl_slope': slope, 'scl_inter': inter})
    ni, vi = compare_load(p, expect_nib_error=False)
    assert (ni.dataobj.slope, ni.dataobj.inter) == (1.0, 0.0)
    assert ni.dataobj.dtype == data.dtype


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('inter', [np.nan, np.inf, -np.inf])
def test_finite_slope_nonfinite_inter_raises_at_load(tmp_path, version, inter):
    p = mk(tmp_path, version=version, patch={'scl_slope': 2.0, 'scl_inter': inter})
    compare_load(p, expect_nib_error=True, err_fields=['scl_inter', 'inter'])


SCALED = [(1.0, 3.5), (0.5, 0.0), (-2.0, 0.0), (1e-30, 0.0), (3.0e38, 0.0), (1.0, -0.0),
          (0.1, 0.2), (1.0000001, 1e-7)]


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('dtype', ['int8', 'uint16', 'int32', 'uint64', 'float32', 'float64',
                                   'complex64', 'complex128'])
@pytest.mark.parametrize('slope,inter', SCALED, ids=[f'{s}_{i}' for s, i in SCALED])
def test_scaling_exactness(tmp_path, version, dtype, slope, inter):
    data = make_data(dtype, SHAPE, seed=12)
    p = mk(tmp_path, version=version, data=data, patch={'scl_slope': slope, 'scl_inter': inter})
    compare_load(p, expect_nib_error=False)


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('endian', ['<', '>'])
def test_complex64_scaled_is_complex128(tmp_path, version, endian):
    p = mk(tmp_path, version=version, endian=endian, data=make_data('complex64', SHAPE),
           patch={'scl_slope': 2.0, 'scl_inter': 1.0})
    ni, vi = compare_load(p, expect_nib_error=False)
    assert np.asarray(ni.dataobj).dtype == np.complex128


@pytest.mark.parametrize('dt', [RGB24, RGBA32], ids=['rgb24', 'rgba32'])
@pytest.mark.parametrize('scl', [None, (2.0, 0.0), (1.0, 1.0)])
def test_rgb_get_fdata_and_scaling_fail(tmp_path, dt, scl):
    data = make_data(dt, SHAPE)
    patch = None if scl is None else {'scl_slope': scl[0], 'scl_inter': scl[1]}
    p = mk(tmp_path, data=data, patch=patch)
    ni, vi = compare_load(p, expect_nib_error=False)
    assert not outcome(ni.get_fdata)[0]
    assert not outcome(vi.get_fdata)[0]


def test_get_fdata_rejects_integer_dtype(tmp_path, vp):
    p = mk(tmp_path)
    ni, vi = nib.load(p), vp.load(p)
    for dt in (np.int16, np.int32, np.uint8, np.bool_):
        ok_n, en = outcome(lambda: ni.get_fdata(dtype=dt))
        ok_v, ev = outcome(lambda: vi.get_fdata(dtype=dt))
        assert not ok_n
        assert not ok_v, f'voxpipe get_fdata(dtype={dt.__name__}) did not raise'


@pytest.mark.parametrize('version', [1, 2])
def test_get_fdata_complex128_keeps_imaginary(tmp_path, version):
    p = mk(tmp_path, version=version, data=make_data('complex64', SHAPE))
    ni, vi = compare_load(p, expect_nib_error=False)
    pr = array_problem(vi.get_fdata(dtype=np.complex128), ni.get_fdata(dtype=np.complex128),
                       'get_fdata(complex128)')
    assert pr is None, pr
    pr = array_problem(vi.get_fdata(dtype=np.complex64), ni.get_fdata(dtype=np.complex64),
                       'get_fdata(complex64)')
    assert pr is None, pr


# ---------------------------------------------------------------------------------------------
# Quaternions / affines
# ---------------------------------------------------------------------------------------------

def _quat_above_one(version, ulps):
    ft = np.float32 if version == 1 else np.float64
    b = ft(1.0)
    for _ in range(ulps):
        b = np.nextafter(b, ft(2))
    return float(b)


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('ulps,raises', [(0, False), (1, False), (2, 'v'), (5, True)])
def test_quaternion_w2_threshold(tmp_path, version, ulps, raises):
    """b^2+c^2+d^2 slightly above 1: within 3 eps (f32 for NIfTI-1, f64 for NIfTI-2) w = 0,
    beyond it get_qform raises ValueError (at load when the qform is the best affine)."""
    b = _quat_above_one(version, ulps)
    p = mk(tmp_path, version=version, qform=True,
           patch={'quatern_b': b, 'quatern_c': 0.0, 'quatern_d': 0.0})
    compare_load(p, err_fields=['quatern', 'qform'])


@pytest.mark.parametrize('version', [1, 2])
def test_quaternion_split_over_bcd(tmp_path, version):
    ft = np.float32 if version == 1 else np.float64
    v = float(np.nextafter(ft(math.sqrt(1 / 3)), ft(1)))
    for i, q in enumerate([v, float(ft(math.sqrt(1 / 3)))]):
        p = mk(tmp_path, f'q{i}', version=version, qform=True,
               patch={'quatern_b': q, 'quatern_c': q, 'quatern_d': q})
        compare_load(p)


@pytest.mark.parametrize('version', [1, 2])
def test_bad_quaternion_ignored_when_sform_wins(tmp_path, version):
    p = mk(tmp_path, version=version, patch={'quatern_b': 1.5})
    compare_load(p, expect_nib_error=False)


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('seed', range(12))
def test_qform_random_rotations_bit_exact(tmp_path, version, seed):
    """qform -> affine is computed in long double by nibabel; compare bit for bit."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(4)
    q /= np.linalg.norm(q)
    if q[0] < 0:
        q = -q
    if seed == 0:
        q = np.array([0.0, 0.0, 0.0, 1.0])  # w = 0 exactly
    pd = [(-1.0, 1.0)[seed % 2]] + list(rng.uniform(0.3, 4.0, 3)) + [2.0, 1, 1, 1]
    p = mk(tmp_path, version=version, qform=True,
           patch={'quatern_b': q[1], 'quatern_c': q[2], 'quatern_d': q[3], 'pixdim': pd,
                  'qoffset_x': rng.uniform(-100, 100), 'qoffset_y': rng.uniform(-100, 100),
                  'qoffset_z': rng.uniform(-100, 100)})
    compare_load(p, parts=('meta', 'header'), expect_nib_error=False)


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('qfac', [-1.0, 1.0])
def test_qfac_minus_one(tmp_path, version, qfac):
    pd = [qfac, 1.5, 2.0, 2.5, 1, 1, 1, 1]
    p = mk(tmp_path, version=version, qform=True, patch={'pixdim': pd})
    ni, vi = compare_load(p, parts=('meta', 'header'), expect_nib_error=False)
    # qfac flips the third column
    assert np.sign(np.linalg.det(ni.affine[:3, :3])) == qfac


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('shape', [(11,), (5, 6), (5, 6, 7), (1,), (1, 1)])
@pytest.mark.parametrize('pd', [[1, 1, 1, 1, 1, 1, 1, 1], [1, 2.5, 0.5, 3, 1, 1, 1, 1]])
def test_base_affine(tmp_path, version, shape, pd):
    data = make_data('int16', shape, seed=13)
    p = mk(tmp_path, version=version, data=data,
           patch={'qform_code': 0, 'sform_code': 0, 'pixdim': pd})
    compare_load(p, expect_nib_error=False)


@pytest.mark.parametrize('version', [1, 2])
def test_base_affine_uses_raw_dims_for_freesurfer_shape(tmp_path, version):
    data = make_data('uint8', (100, 1, 1), seed=5)
    patch = {'dim': dims(-1, 1, 1), 'qform_code': 0, 'sform_code': 0}
    if version == 1:
        patch['glmin'] = 100
    p = mk(tmp_path, version=version, data=data, patch=patch)
    compare_load(p)


# ---------------------------------------------------------------------------------------------
# Header strings and odd field values
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize('version', [1, 2])
def test_string_fields_full_length_and_after_nul(tmp_path, version):
    patch = {'descrip': b'D' * 80, 'aux_file': b'aux\x00garbage\xff', 'intent_name': b'I' * 16}
    if version == 1:
        patch.update(db_name=b'db\x00x', data_type=b'\xfe' * 10, regular=b'r')
    p = mk(tmp_path, version=version, patch=patch)
    compare_load(p, expect_nib_error=False)


@pytest.mark.parametrize('version', [1, 2])
def test_misc_fields(tmp_path, version):
    patch = {'intent_code': 1002, 'intent_p1': 1.5, 'intent_p2': np.nan, 'intent_p3': -np.inf,
             'slice_code': 3, 'xyzt_units': 10 + 64, 'cal_max': 3.5, 'cal_min': -1.0,
             'slice_duration': 0.25, 'toffset': -2.0, 'slice_start': 1, 'slice_end': 5,
             'dim_info': 0x39}
    if version == 1:
        patch.update(glmax=1000, glmin=-5, extents=16384, session_error=-1)
    p = mk(tmp_path, version=version, patch=patch)
    compare_load(p, expect_nib_error=False)


@pytest.mark.parametrize('code', [3000, 3006, 3099])
def test_nifti2_cifti_intent_code_without_cifti_extension(tmp_path, code):
    """intent_code 3000-3099 in NIfTI-2: nib.load picks Cifti2Image, which raises ValueError
    ('NIfTI2 header does not contain a CIFTI-2 extension').  Policy decision for the lead:
    asserted equal (voxpipe raises) for now."""
    p = mk(tmp_path, version=2, patch={'intent_code': code})
    compare_load(p, expect_nib_error=True, err_fields=['intent_code', 'cifti'])


@pytest.mark.parametrize('code', [2999, 3100])
def test_nifti2_intent_code_next_to_cifti_range(tmp_path, code):
    p = mk(tmp_path, version=2, patch={'intent_code': code})
    compare_load(p, expect_nib_error=False)


# ---------------------------------------------------------------------------------------------
# File names / compression variants
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize('suffix,kind', [('.NII', 'nii'), ('.NII.GZ', 'nii.gz')])
def test_upper_case_extensions(tmp_path, suffix, kind):
    p = mk(tmp_path, kind=kind)
    q = str(tmp_path / ('up' + suffix))
    os.rename(p, q)
    compare_load(q, expect_nib_error=False)


@pytest.mark.parametrize('open_with', ['HDR', 'IMG'])
def test_upper_case_pair(tmp_path, open_with):
    p = mk(tmp_path, kind='pair')
    os.rename(p, tmp_path / 'up.HDR')
    os.rename(p[:-4] + '.img', tmp_path / 'up.IMG')
    compare_load(str(tmp_path / f'up.{open_with}'), expect_nib_error=False)


@pytest.mark.parametrize('kind', ['nii.gz', 'pair.gz'])
def test_multi_member_gzip(tmp_path, kind):
    def split_members(path):
        raw = gzip.decompress(open(path, 'rb').read())
        k = len(raw) // 3
        with open(path, 'wb') as f:
            f.write(gz(raw[:k]) + gz(raw[k:2 * k]) + gz(raw[2 * k:]))

    p = mk(tmp_path, kind=kind, open_with='img')
    split_members(p if kind == 'nii.gz' else p[:-7] + '.hdr.gz')
    if kind == 'pair.gz':
        split_members(p)
    compare_load(p, expect_nib_error=False)


def test_gzip_with_header_fields(tmp_path):
    """FNAME/MTIME/extra fields in the gzip header (as written by gzip(1))."""
    p = mk(tmp_path, kind='nii')
    raw = open(p, 'rb').read()
    q = str(tmp_path / 'named.nii.gz')
    with open(q, 'wb') as f:
        with gzip.GzipFile(filename='named.nii', mode='wb', fileobj=f, mtime=123456789) as g:
            g.write(raw)
    compare_load(q, expect_nib_error=False)


@pytest.mark.parametrize('version', [1, 2])
def test_gz_data_far_from_header(tmp_path, version):
    p = mk(tmp_path, version=version, kind='nii.gz', vox_offset=65536, data_pos=65536)
    compare_load(p, expect_nib_error=False)


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('kind', ['nii', 'nii.gz'])
def test_zero_padding_after_extensions_before_vox_offset(tmp_path, version, kind):
    """nibabel parses the zero padding between the last extension and vox_offset as an
    extension with esize 0 and raises ('read length must be non-negative')."""
    p = mk(tmp_path, version=version, kind=kind, exts=[(6, b'z' * 5000)], vox_offset=8192,
           data_pos=8192)
    compare_load(p, expect_nib_error=True, err_fields=['extension', 'esize'])


# ---------------------------------------------------------------------------------------------
# Slicing edge cases
# ---------------------------------------------------------------------------------------------

@pytest.fixture(params=['nii', 'nii.gz'])
def pair_of_images(request, tmp_path, vp):
    p = mk(tmp_path, kind=request.param, data=make_data('int16', SHAPE, seed=2))
    return nib.load(p), vp.load(p)


@pytest.mark.parametrize('slicer', [
    (5,), (0, 6), (0, 0, 7), (Ellipsis, 7), (-20,), (0, -19), (-16, 0),
    ([0, 1],), (np.array([0, 2]),), (np.array([True, False, True, False, True]),),
    (slice(None), [1, 2]), ('a',), (Ellipsis, Ellipsis), (0, 0, 0, 0), (0, 0, 0, None, 0),
], ids=lambda s: slicer_id(s) if not any(isinstance(x, (list, np.ndarray, str, float)) for x in s)
    else repr(s)[:30])
def test_invalid_indices_both_raise(pair_of_images, slicer):
    ni, vi = pair_of_images
    s = slicer if len(slicer) > 1 else slicer[0]
    ok_n, en = outcome(lambda: ni.dataobj[s])
    ok_v, ev = outcome(lambda: vi.dataobj[s])
    assert not ok_n, f'fixture: nibabel accepted {s!r}'
    assert not ok_v, f'voxpipe accepted {s!r}, nibabel raises {type(en).__name__}: {en}'
    assert isinstance(ev, (ValueError, IndexError, TypeError)), repr(ev)


@pytest.mark.parametrize('slicer', [(-6,), (0, -7), (Ellipsis, -10), (-9, -11, -13), (0, -12),
                                    (Ellipsis, -8)],
                         ids=lambda s: slicer_id(s))
def test_negative_index_below_minus_len_wraps_like_nibabel(pair_of_images, slicer):
    """nibabel quirk: an int in [-2*len, -len) wraps twice (i + 2*len) instead of raising
    (numpy raises IndexError)."""
    ni, vi = pair_of_images
    s = slicer if len(slicer) > 1 else slicer[0]
    ok_n, en = outcome(lambda: ni.dataobj[s])
    assert ok_n, f'nibabel no longer wraps {s!r}: {en!r}'
    assert_same(vi, ni, ('slicers',), slicers=[s])


@pytest.mark.parametrize('slicer', [slice(-100, 3), slice(-100, None, 2), slice(None, -100),
                                    slice(100, None), slice(3, 1), slice(4, 1, 1), slice(-1, 0),
                                    (slice(None), slice(-100, -3)), (Ellipsis, slice(-50, 50, -1))],
                         ids=slicer_id)
def test_out_of_range_slice_bounds(pair_of_images, slicer):
    """Slice bounds beyond the axis (incl. empty results; nibabel's mmap(-1, 0) OSError on some
    empty reads is asserted as-is: voxpipe must match nibabel's outcome)."""
    ni, vi = pair_of_images
    assert_same(vi, ni, ('slicers',), slicers=[slicer])


@pytest.mark.parametrize('dtype', ['int8', 'int16', 'float32', 'float64'])
@pytest.mark.parametrize('shape', [(5, 6, 7), (50, 6, 7)])
@pytest.mark.parametrize('slicer', [slice(3, 3), slice(0, 0), (slice(None), slice(2, 2)),
                                    (Ellipsis, slice(4, 1)), slice(None, -100)], ids=slicer_id)
def test_empty_slices_match_nibabel(tmp_path, vp, dtype, shape, slicer):
    """nibabel raises OSError(EINVAL) from mmap(-1, 0) for some empty reads, depending on its
    read heuristics (dtype size, shape); elsewhere it returns an empty array."""
    p = mk(tmp_path, data=make_data(dtype, shape, seed=1))
    assert_same(vp.load(p), nib.load(p), ('slicers',), slicers=[slicer])


@pytest.mark.parametrize('kind', ['nii', 'nii.gz'])
def test_slicing_around_skip_threshold(tmp_path, vp, kind):
    """Gaps just below/above nibabel's 256-byte SKIP_THRESH (results must not depend on it)."""
    data = make_data('float64', (33, 31, 5, 3), seed=21)
    p = mk(tmp_path, kind=kind, data=data)
    s = slice
    slicers = [(s(None, None, 32),), (s(None, None, 33),), (s(None), s(None, None, 2)),
               (0,), (32,), (s(None), 0), (s(1, 32),), (s(None), s(1, 30)), (s(0, 33, 31), 3),
               (Ellipsis, 0, 2), (s(None, None, -32), s(None, None, -30)), (16, 15, 2, 1)]
    assert_same(vp.load(p), nib.load(p), ('slicers',), slicers=slicers)


def test_dataobj_proxy_attributes_for_pair_gz(tmp_path, vp):
    p = mk(tmp_path, kind='pair.gz', open_with='img', patch={'scl_slope': 2.0, 'scl_inter': 3.0})
    compare_load(p, parts=('dataobj',), expect_nib_error=False)


@pytest.mark.parametrize('index', [1.5, np.float32(2.7), True, np.int64(2), np.uint8(4), -1.5],
                         ids=repr)
def test_non_integer_scalar_index_like_nibabel(pair_of_images, index):
    """nibabel accepts float / bool scalar indices (int() truncation); numpy would raise."""
    ni, vi = pair_of_images
    assert_same(vi, ni, ('slicers',), slicers=[index, (0, index)])


@pytest.mark.parametrize('slicer', [(-11,), (0, -13), (0, 0, -15), (0, 0, -19), (Ellipsis, -17),
                                    (Ellipsis, -22)],
                         ids=lambda s: slicer_id(s))
def test_negative_index_below_minus_2len_like_nibabel(pair_of_images, slicer):
    """nibabel bug: ints in [-3*len, -2*len) are not rejected either; on the fastest axes they
    wrap a third time, on the slowest axis they read bytes outside the data (header bytes)."""
    ni, vi = pair_of_images
    s = slicer if len(slicer) > 1 else slicer[0]
    assert_same(vi, ni, ('slicers',), slicers=[s])


@pytest.mark.parametrize('shape', [(2, 3, 4), (1, 6, 7), (0,)], ids=str)
@pytest.mark.parametrize('slicer', [slice(-3, None), slice(-1, -4, -1), slice(-5, 1),
                                    slice(4, 0, -2), slice(None, -3), (Ellipsis, slice(-9, 2))],
                         ids=slicer_id)
def test_slice_bounds_below_minus_len_like_nibabel(tmp_path, vp, shape, slicer):
    """nibabel bug: slice bounds below -len are not clamped (fill_slicer), e.g. a[-3:] on a
    length-2 axis gives 1 element (numpy: 2), and slices of a zero-length axis can return
    elements."""
    if shape == (0,):
        p = mk(tmp_path, patch={'dim': dims(0, ndim=0)}, data_bytes=bytes(range(16)))
    else:
        p = mk(tmp_path, data=make_data('int16', shape, seed=4))
    assert_same(vp.load(p), nib.load(p), ('slicers',), slicers=[slicer])


@pytest.mark.parametrize('kind', ['nii', 'nii.gz'])
@pytest.mark.parametrize('endian', ['<', '>'])
@pytest.mark.parametrize('dtype,scaled', [('int16', False), ('float32', False), ('rgb24', False),
                                          ('complex64', False), ('uint8', True)])
def test_all_int_index_returns_scalar(tmp_path, vp, kind, endian, dtype, scaled):
    """dataobj[i, j, k] is a numpy scalar (np.generic) in nibabel for unscaled data, and a 0-d
    float64 array for scaled data (apply_read_scaling reshapes its 1-d result to ())."""
    patch = {'scl_slope': 2.0, 'scl_inter': 1.0} if scaled else None
    p = mk(tmp_path, kind=kind, endian=endian, data=make_data(dtype, SHAPE, seed=1), patch=patch)
    ni, vi = nib.load(p), vp.load(p)
    for s in [(0, 0, 0), (-1, -1, -1), (2, 3, 4)]:
        e, g = ni.dataobj[s], vi.dataobj[s]
        assert isinstance(e, np.ndarray if scaled else np.generic)
        assert type(g) is type(e) and g.dtype == e.dtype and np.shape(g) == (), (
            f'dataobj{slicer_id(s)}: voxpipe {type(g).__name__} {getattr(g, "dtype", None)} '
            f'{g!r}, nibabel {type(e).__name__} {e.dtype} {e!r}')
        assert array_problem(g, e, 'value') is None
