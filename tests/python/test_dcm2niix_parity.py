"""`voxpipe dcm2niix` against dcm2niix on every offline DICOM case (tests/python/dcm2niix_parity.py
lists and compares them): the same exit code, the same files by name, equal data and affine,
equal bval/bvec, and a sidecar with every key dcm2niix writes, equal.

The cases where voxpipe's output differs are listed in DIFFERENCES with how (the kinds of
dcm2niix_parity.difference_kinds) and why. The test fails when a case differs in a way not listed
and when a listed difference disappears (so the list only shrinks, and stays true).
"""

from __future__ import annotations

import pytest

import dcm2niix_parity as parity

pytestmark = [
    pytest.mark.skipif(not parity.CLI.is_file(), reason=f'{parity.CLI} not built/installed'),
    pytest.mark.skipif(parity.DCM2NIIX is None, reason='dcm2niix not installed'),
]

# Why, by kind of difference.
WE_CONVERT = ('voxpipe converts a file dcm2niix cannot read ({}); dcm2niix exits {} and '
              'writes nothing')
DECODER = ("dcm2niix's own decoding differs: voxpipe's values equal pydicom's pixel_array ({})")
BIG_ENDIAN = 'dcm2niix does not swap the bytes of this big-endian file; voxpipe equals pydicom'
RGB32 = ('32-bit colour: dcm2niix writes one int32 per pixel that is not the colour; voxpipe '
         'refuses the series, saying so')
BIDS_GUESS = ("BidsGuess for a non-MR series or an MR one of no known vendor: dcm2niix's rules "
              "for these are not published in its source; voxpipe writes none")

DIFFERENCES: dict[str, tuple[set[str], str]] = {
    'nibabel DTI mosaic pair': (
        {'exit', 'names'},
        'two mosaics of one series 3 mm apart (not repeats of one position): voxpipe refuses '
        'a series whose positions hold different numbers of images; dcm2niix stacks them as '
        'two volumes'),
    'nibabel philips_mprage.dcm.gz': (
        {'key:TablePosition'},
        "Philips' unset table position (1.7e38): dcm2niix writes [0, 0, -1.7e38], voxpipe "
        'leaves the key out'),
    'nibabel slicethickness_empty_string.dcm': (
        {'exit', 'names'}, WE_CONVERT.format('an empty SliceThickness', 1)),
    'pydicom J2K_pixelrep_mismatch.dcm': (
        {'data', 'affine'},
        "JPEG 2000 whose PixelRepresentation disagrees with the codestream's sign: voxpipe "
        "follows pydicom's values (and hence its origin); dcm2niix the codestream's"),
    'pydicom JPEG-lossy.dcm': (
        {'exit'},
        'a 12-bit JPEG whose scan header breaks the standard (Se 0 in a sequential scan): '
        'dcm2niix finds no file it can read (exit 2); voxpipe reports the frame, naming the '
        'fault and its offset (exit 1)'),
    'pydicom JPGExtended.dcm': ({'exit', 'names'}, WE_CONVERT.format('12-bit JPEG', 2)),
    'pydicom image_dfl.dcm': ({'exit', 'names'}, WE_CONVERT.format('Deflated Explicit VR', 2)),
    'pydicom SC_ybr_full_422_uncompressed.dcm': (
        {'exit', 'names'}, WE_CONVERT.format('uncompressed YBR_FULL_422', 1)),
    'heudiconv MRI_102TD_PHA_S.MR.Chen_Matthews_1.3.1.2022.11.16.15.50.20.357.31204541.dcm': (
        {'exit', 'names'}, WE_CONVERT.format('an enhanced localizer of three orientations', 2)),
    'pydicom badVR.dcm': (
        {'exit', 'names'},
        'NumberOfFrames "1A" (not an integer): voxpipe refuses the file, naming the element; '
        'dcm2niix reads it as 1'),
    'pydicom-data emri_small_jpeg_2k_lossless_too_short.dcm': (
        {'exit', 'names'},
        'the last JPEG 2000 frame is cut short: voxpipe reports the damaged frame (exit 1); '
        'dcm2niix decodes what is there'),
    'pydicom SC_rgb_small_odd_big_endian.dcm': ({'data'}, BIG_ENDIAN),
    'pydicom-data OBXXXX1A_expb.dcm': ({'data'}, BIG_ENDIAN),
    'pydicom-data OBXXXX1A_expb_2frame.dcm': ({'data'}, BIG_ENDIAN),
    **{name: ({'exit', 'names'}, RGB32) for name in (
        'pydicom SC_rgb_rle_32bit.dcm', 'pydicom SC_rgb_rle_32bit_2frame.dcm',
        'pydicom-data SC_rgb_32bit.dcm', 'pydicom-data SC_rgb_32bit_2frame.dcm',
        'pydicom-data SC_rgb_expb_32bit.dcm', 'pydicom-data SC_rgb_expb_32bit_2frame.dcm')},
    **{name: ({'data'}, DECODER.format('JPEG colour: upsampling and colour transform'))
       for name in (
        'pydicom SC_jpeg_no_color_transform.dcm', 'pydicom SC_jpeg_no_color_transform_2.dcm',
        'pydicom SC_rgb_jpeg.dcm', 'pydicom SC_rgb_jpeg_app14_dcmd.dcm',
        'pydicom SC_rgb_jpeg_dcmtk.dcm', 'pydicom SC_rgb_jpeg_lossy_gdcm.dcm',
        'pydicom examples_ybr_color.dcm', 'pydicom-data color3d_jpeg_baseline.dcm')},
    **{name: ({'data'}, DECODER.format('YBR_FULL to RGB'))
       for name in (
        'pydicom SC_rgb_dcmtk_+eb+cy+n1.dcm', 'pydicom SC_rgb_dcmtk_+eb+cy+n2.dcm',
        'pydicom SC_rgb_dcmtk_+eb+cy+np.dcm', 'pydicom SC_rgb_dcmtk_+eb+cy+s2.dcm',
        'pydicom SC_rgb_dcmtk_+eb+cy+s4.dcm')},
    **{name: ({'key:BidsGuess'}, BIDS_GUESS) for name in (
        'pydicom JPEG2000.dcm', 'pydicom-data JPEG-LL.dcm', 'pydicom-data JPEG2000_UNC.dcm',
        'pydicom-data emri_small.dcm', 'pydicom-data emri_small_RLE.dcm',
        'pydicom-data emri_small_big_endian.dcm', 'pydicom-data emri_small_jpeg_2k_lossless.dcm',
        'pydicom-data emri_small_jpeg_ls_lossless.dcm')},
}

CASES = parity.offline_cases()


@pytest.mark.parametrize('case', CASES, ids=[c.name for c in CASES])
def test_same_output_as_dcm2niix(case, tmp_path):
    r = parity.compare_case(case, tmp_path)
    kinds = parity.difference_kinds(r)
    expected, why = DIFFERENCES.get(case.name, (set(), ''))
    details = {f.stem: (f.data_detail, f.affine_mm, f.missing, f.different) for f in r.files}
    assert kinds == expected, (sorted(kinds), sorted(expected), why, r.rc_theirs, r.rc_ours,
                               r.names_theirs, r.names_ours, details)


def test_the_corpus_and_the_list_of_differences():
    """The offline corpus has the packages it is meant to have (a missing one would silently
    shrink the comparison), and every listed difference names a case of it."""
    sources = {c.source for c in CASES}
    assert {'nibabel', 'pydicom', 'pydicom-data', 'heudiconv'} <= sources
    assert len(CASES) >= 150
    assert set(DIFFERENCES) <= {c.name for c in CASES}
