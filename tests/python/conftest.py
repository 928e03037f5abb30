"""pytest configuration for the voxpipe Python differential tests (voxpipe vs nibabel 5.4.2).

Run with ``.venv/bin/python -m pytest tests/python -q``.  Every test in this folder gets the
``nibabel_compat`` marker (select with ``-m nibabel_compat``).

voxpipe must be importable (installed into the venv).  If it is not, the session stops with an
error, unless ``VOXPIPE_TESTS_ALLOW_MISSING=1`` is set, in which case every test is skipped.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

# Tests where voxpipe differs from nibabel (state of the voxpipe build of 2026-12-02 10:24).  Maps
# the reason to exact test ids ("file::test[params]"); those tests are marked xfail(strict=True),
# so a fix in voxpipe (or a policy change) shows up as XPASS and forces this table to be updated.
# The lead decides which of these are accepted deviations (nibabel bugs not copied) and which are
# voxpipe bugs; see the report / tests/python/README.md.
KNOWN_DISAGREEMENTS: dict[str, list[str]] = {
    "D2 nibabel bug: ints in [-3*len, -len) are wrapped again (up to 3 times; on the slowest axis bytes outside the data are read); voxpipe raises ValueError 'Integer index ... too small'": [
        'test_quirks.py::test_negative_index_below_minus_len_wraps_like_nibabel[nii-[-6]]',
        'test_quirks.py::test_negative_index_below_minus_len_wraps_like_nibabel[nii-[0,-7]]',
        'test_quirks.py::test_negative_index_below_minus_len_wraps_like_nibabel[nii-[...,-10]]',
        'test_quirks.py::test_negative_index_below_minus_len_wraps_like_nibabel[nii-[-9,-11,-13]]',
        'test_quirks.py::test_negative_index_below_minus_len_wraps_like_nibabel[nii-[0,-12]]',
        'test_quirks.py::test_negative_index_below_minus_len_wraps_like_nibabel[nii-[...,-8]]',
        'test_quirks.py::test_negative_index_below_minus_len_wraps_like_nibabel[nii.gz-[-6]]',
        'test_quirks.py::test_negative_index_below_minus_len_wraps_like_nibabel[nii.gz-[0,-7]]',
        'test_quirks.py::test_negative_index_below_minus_len_wraps_like_nibabel[nii.gz-[...,-10]]',
        'test_quirks.py::test_negative_index_below_minus_len_wraps_like_nibabel[nii.gz-[-9,-11,-13]]',
        'test_quirks.py::test_negative_index_below_minus_len_wraps_like_nibabel[nii.gz-[0,-12]]',
        'test_quirks.py::test_negative_index_below_minus_len_wraps_like_nibabel[nii.gz-[...,-8]]',
        'test_quirks.py::test_negative_index_below_minus_2len_like_nibabel[nii-[-11]]',
        'test_quirks.py::test_negative_index_below_minus_2len_like_nibabel[nii-[0,-13]]',
        'test_quirks.py::test_negative_index_below_minus_2len_like_nibabel[nii-[0,0,-15]]',
        'test_quirks.py::test_negative_index_below_minus_2len_like_nibabel[nii-[0,0,-19]]',
        'test_quirks.py::test_negative_index_below_minus_2len_like_nibabel[nii-[...,-17]]',
        'test_quirks.py::test_negative_index_below_minus_2len_like_nibabel[nii.gz-[-11]]',
        'test_quirks.py::test_negative_index_below_minus_2len_like_nibabel[nii.gz-[0,-13]]',
        'test_quirks.py::test_negative_index_below_minus_2len_like_nibabel[nii.gz-[0,0,-15]]',
        'test_quirks.py::test_negative_index_below_minus_2len_like_nibabel[nii.gz-[0,0,-19]]',
        'test_quirks.py::test_negative_index_below_minus_2len_like_nibabel[nii.gz-[...,-17]]',
    ],
    "D3 nibabel quirk: float scalar indices are truncated with int(); voxpipe raises ValueError 'Cannot handle fancy indexing'": [
        'test_quirks.py::test_non_integer_scalar_index_like_nibabel[nii-1.5]',
        'test_quirks.py::test_non_integer_scalar_index_like_nibabel[nii-np.float32(2.7)]',
        'test_quirks.py::test_non_integer_scalar_index_like_nibabel[nii--1.5]',
        'test_quirks.py::test_non_integer_scalar_index_like_nibabel[nii.gz-1.5]',
        'test_quirks.py::test_non_integer_scalar_index_like_nibabel[nii.gz-np.float32(2.7)]',
        'test_quirks.py::test_non_integer_scalar_index_like_nibabel[nii.gz--1.5]',
    ],
    'D4 nibabel bug: slice bounds below -len are not clamped (a[-3:] on a length-2 axis gives 1 element; zero-length axes give elements); voxpipe follows numpy': [
        'test_quirks.py::test_slice_bounds_below_minus_len_like_nibabel[[-3::]-(2, 3, 4)]',
        'test_quirks.py::test_slice_bounds_below_minus_len_like_nibabel[[-3::]-(0,)]',
        'test_quirks.py::test_slice_bounds_below_minus_len_like_nibabel[[-1:-4:-1]-(2, 3, 4)]',
        'test_quirks.py::test_slice_bounds_below_minus_len_like_nibabel[[-1:-4:-1]-(0,)]',
        'test_quirks.py::test_slice_bounds_below_minus_len_like_nibabel[[-5:1:]-(0,)]',
        'test_quirks.py::test_slice_bounds_below_minus_len_like_nibabel[[4:0:-2]-(0,)]',
        'test_quirks.py::test_slice_bounds_below_minus_len_like_nibabel[[:-3:]-(2, 3, 4)]',
        'test_quirks.py::test_slice_bounds_below_minus_len_like_nibabel[[...,-9:2:]-(2, 3, 4)]',
        'test_quirks.py::test_slice_bounds_below_minus_len_like_nibabel[[...,-9:2:]-(1, 6, 7)]',
        'test_quirks.py::test_slice_bounds_below_minus_len_like_nibabel[[...,-9:2:]-(0,)]',
    ],
    "D5 nibabel bug: some empty selections raise (OSError EINVAL from mmap(-1, 0), or 'Whoops, not enough data in file' when the data is beyond EOF); voxpipe returns the empty array": [
        'test_quirks.py::test_empty_slices_match_nibabel[[3:3:]-shape1-float64]',
        'test_quirks.py::test_empty_slices_match_nibabel[[0:0:]-shape1-float64]',
        'test_quirks.py::test_empty_slices_match_nibabel[[::,2:2:]-shape1-int8]',
        'test_quirks.py::test_empty_slices_match_nibabel[[::,2:2:]-shape1-int16]',
        'test_quirks.py::test_empty_slices_match_nibabel[[::,2:2:]-shape1-float32]',
        'test_quirks.py::test_empty_slices_match_nibabel[[::,2:2:]-shape1-float64]',
        'test_quirks.py::test_empty_slices_match_nibabel[[:-100:]-shape0-float32]',
        'test_quirks.py::test_empty_slices_match_nibabel[[:-100:]-shape0-float64]',
        'test_quirks.py::test_empty_slices_match_nibabel[[:-100:]-shape1-float32]',
        'test_quirks.py::test_empty_slices_match_nibabel[[:-100:]-shape1-float64]',
    ],
    'D6 negative dim values: nibabel loads (shape with negative sizes, fails at data access with OverflowError); voxpipe raises FormatError at load': [
        'test_quirks.py::test_zero_and_negative_dims[shape3-1]',
        'test_quirks.py::test_zero_and_negative_dims[shape3-2]',
        'test_quirks.py::test_zero_and_negative_dims[shape4-1]',
        'test_quirks.py::test_zero_and_negative_dims[shape4-2]',
        'test_quirks.py::test_zero_and_negative_dims[shape5-1]',
        'test_quirks.py::test_zero_and_negative_dims[shape5-2]',
        'test_quirks.py::test_freesurfer_hacks_not_applied_to_nifti2',
        'test_quirks.py::test_base_affine_uses_raw_dims_for_freesurfer_shape[2]',
    ],
    "D7 NIfTI-2 dim[0] > 7 (after byte-order detection): nibabel uses dim[1:8] (7-D shape); voxpipe raises FormatError 'dim[0]: expected 0..7'": [
        'test_quirks.py::test_big_endian_dim0_256[2]',
    ],
    'D8 NIfTI-2 with intent_code 3000-3099 and no CIFTI extension: nib.load picks Cifti2Image and raises ValueError; voxpipe loads it as a plain NIfTI-2 image': [
        'test_quirks.py::test_nifti2_cifti_intent_code_without_cifti_extension[3000]',
        'test_quirks.py::test_nifti2_cifti_intent_code_without_cifti_extension[3006]',
        'test_quirks.py::test_nifti2_cifti_intent_code_without_cifti_extension[3099]',
    ],
    "D9 extension flag set with vox_offset 0 in a single file: nibabel parses extensions to EOF and raises ('read length must be non-negative'); voxpipe loads it with no extensions": [
        'test_quirks.py::test_extension_flag_with_vox_offset_zero[1]',
        'test_quirks.py::test_extension_flag_with_vox_offset_zero[2]',
    ],
    "D10 complex128 * slope: numpy's complex multiply is FMA-contracted on this CPU (real part of (-5e-324-11.4j)*0.5 is -0.0); voxpipe computes without FMA and gets +0.0": [
        'test_quirks.py::test_scaling_exactness[0.5_0.0-complex128-1]',
        'test_quirks.py::test_scaling_exactness[0.5_0.0-complex128-2]',
        'test_quirks.py::test_scaling_exactness[1e-30_0.0-complex128-1]',
        'test_quirks.py::test_scaling_exactness[1e-30_0.0-complex128-2]',
    ],
    "D12 re-saving a big-endian .nii as a .hdr/.img pair: nibabel's single->pair conversion writes native (little-endian) order, voxpipe keeps big-endian (some ids also hit D11)": [
        'test_roundtrip.py::test_resave_loaded[v2-float32-nii.gz-be-sc-ext1-pair-img]',
        'test_roundtrip.py::test_resave_loaded[v2-float32-nii.gz-be-sc-ext1-pair.gz-hdr]',
    ],
    'D11 re-saving a loaded scaled image: nibabel writes the scaled values (float types: slope 1/inter 0; uint64: requantised, slope 3.0000002); voxpipe writes the raw data with the original scl_slope/scl_inter': [
        'test_roundtrip.py::test_resave_loaded[v1-float64-pair-le-sc-ext0-nii-hdr]',
        'test_roundtrip.py::test_resave_loaded[v1-float64-pair-le-sc-ext0-nii.gz-hdr]',
        'test_roundtrip.py::test_resave_loaded[v1-float64-pair-le-sc-ext0-pair-img]',
        'test_roundtrip.py::test_resave_loaded[v1-float64-pair-le-sc-ext0-pair.gz-hdr]',
        'test_roundtrip.py::test_resave_loaded[v1-uint64-nii.gz-le-sc-ext0-nii-hdr]',
        'test_roundtrip.py::test_resave_loaded[v1-uint64-nii.gz-le-sc-ext0-nii.gz-hdr]',
        'test_roundtrip.py::test_resave_loaded[v1-uint64-nii.gz-le-sc-ext0-pair-img]',
        'test_roundtrip.py::test_resave_loaded[v1-uint64-nii.gz-le-sc-ext0-pair.gz-hdr]',
        'test_roundtrip.py::test_resave_loaded[v2-float32-nii.gz-be-sc-ext1-nii-hdr]',
        'test_roundtrip.py::test_resave_loaded[v2-float32-nii.gz-be-sc-ext1-nii.gz-hdr]',
    ],
    "D14 writing a (40000, 1, 1) NIfTI-1 vector: nibabel uses the FreeSurfer glmin hack (dim = (-1, 1, 1), glmin = 40000); voxpipe raises 'does not fit in dim datatype'": [
    ],
}


_XFAIL = {test_id: reason for reason, ids in KNOWN_DISAGREEMENTS.items() for test_id in ids}


def pytest_configure(config):
    config.addinivalue_line(
        'markers', 'nibabel_compat: voxpipe vs nibabel differential tests (tests/python)')


_IMPORT_ERROR: list[str | None] = []


def _voxpipe_import_error() -> str | None:
    if not _IMPORT_ERROR:
        try:
            import voxpipe  # noqa: F401
            _IMPORT_ERROR.append(None)
        except Exception as e:  # noqa: BLE001
            _IMPORT_ERROR.append(repr(e))
    return _IMPORT_ERROR[0]


def _check_voxpipe() -> str | None:
    """None if voxpipe imports; the error text if it does not and skipping is allowed."""
    err = _voxpipe_import_error()
    if err is not None and os.environ.get('VOXPIPE_TESTS_ALLOW_MISSING') != '1':
        raise pytest.UsageError(
            f'voxpipe is not importable ({err}); build/install it into the venv first '
            '(scripts/setup.sh) or set VOXPIPE_TESTS_ALLOW_MISSING=1 to skip these tests')
    return err


def pytest_sessionstart(session):
    # Runs when this conftest is an initial conftest (pytest tests/python ...).
    _check_voxpipe()


def pytest_collection_modifyitems(config, items):
    missing = None
    for item in items:
        try:
            in_here = Path(str(item.fspath)).resolve().is_relative_to(HERE)
        except Exception:  # noqa: BLE001
            in_here = False
        if not in_here:
            continue
        item.add_marker(pytest.mark.nibabel_compat)
        if missing is None:
            missing = _check_voxpipe() or ''
        if missing:
            item.add_marker(pytest.mark.skip(reason=f'voxpipe not importable: {missing}'))
            continue
        path, _, rest = item.nodeid.partition('::')
        reason = _XFAIL.get(path.rsplit('/', 1)[-1] + '::' + rest)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=reason))


@pytest.fixture(scope='session')
def vp():
    import voxpipe

    return voxpipe


@pytest.fixture(scope='session')
def session_dir(tmp_path_factory):
    return tmp_path_factory.mktemp('voxpipe_nifti')


@pytest.fixture(scope='session')
def nib_data_dir():
    import nibabel.tests

    return Path(os.path.dirname(nibabel.tests.__file__)) / 'data'
