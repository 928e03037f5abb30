"""Generated matrix of NIfTI files: voxpipe must read each exactly like nibabel.

Axes: NIfTI-1/2 x byte order x dtype x scaled/unscaled x affine source (sform / qform / both /
neither) x file kind (.nii, .nii.gz, .hdr/.img, .hdr.gz/.img.gz) x 3D/4D/5D x layout variants
(extensions, large / odd vox_offset, pair with a data offset).

Coverage (not a full cartesian product, see ``_cases``):
  A. every dtype x both versions x both byte orders x {.nii, .nii.gz} x {unscaled, scaled}, with
     ndim and affine source rotating;
  B. pairs (.hdr/.img and .hdr.gz/.img.gz, opened by either name) on a dtype subset;
  C. every affine source x 3D/4D/5D x both versions;
  D. layout variants (extensions, vox_offset 1024 / not a multiple of 16 / after extensions,
     pair .img with a data offset).

Files are built lazily once per session; each case is checked by four tests (header, dataobj,
fdata, slicers) so a failure points at the part that differs.
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest

from nifti_testlib import (
    DTYPES, HDR_SIZE, QFORM, SFORM, SHAPES, SINGLE_OFFSET, assert_same, load_both, make_data,
    nib_parts, write_parts,
)

MODES = ('sform', 'qform', 'both', 'neither')
MODE_CODES = {'sform': (0, 2), 'qform': (1, 0), 'both': (1, 4), 'neither': (0, 0)}
# (slope, inter) pairs: non-representable in float32, multiply only, add only, negative slope.
SCALES = ((0.1, -7.3), (2.5, 0.0), (1.0, 5.5), (-1.7, 1000.25), (3.0e-3, 1.0 / 3.0))
EXTS = ((6, b'a comment extension'), (4, b'<?xml version="1.0"?><AFNI_attributes/>\x00tail'),
        (40, bytes(range(1, 40))), (1234, b'\x00\x00unknown code\x00'))


@dataclasses.dataclass(frozen=True)
class Case:
    version: int
    endian: str
    dtype: str
    kind: str
    scale: tuple[float, float] | None
    mode: str
    ndim: int
    variant: str = 'plain'
    open_with: str = 'hdr'

    @property
    def id(self) -> str:
        sc = 'raw' if self.scale is None else f'sc{SCALES.index(self.scale)}'
        k = self.kind.replace('.', '')
        if self.kind.startswith('pair'):
            k += '@' + self.open_with
        return (f'v{self.version}-{"be" if self.endian == ">" else "le"}-{self.dtype}-{k}-{sc}-'
                f'{self.mode}-{self.ndim}d-{self.variant}')


def _cases() -> list[Case]:
    cases: list[Case] = []
    dnames = list(DTYPES)
    # A. every dtype x version x order x {nii, nii.gz} x {raw, scaled}
    for vi, version in enumerate((1, 2)):
        for ei, endian in enumerate('<>'):
            for di, dt in enumerate(dnames):
                for ki, kind in enumerate(('nii', 'nii.gz')):
                    for si, scaled in enumerate((False, True)):
                        scale = SCALES[(di + vi + ei + ki) % len(SCALES)] if scaled else None
                        cases.append(Case(version, endian, dt, kind, scale,
                                          MODES[(di + 2 * vi + ei + ki + si) % 4],
                                          3 + (di + si + ki + ei) % 3))
    # B. pairs on a subset
    subset = [('uint8', None), ('int16', None), ('int64', None), ('float64', None),
              ('complex64', None), ('rgb24', None), ('int16', SCALES[0]), ('float32', SCALES[3]),
              ('uint64', SCALES[4])]
    for vi, version in enumerate((1, 2)):
        for ei, endian in enumerate('<>'):
            for ki, kind in enumerate(('pair', 'pair.gz')):
                for j, (dt, scale) in enumerate(subset):
                    cases.append(Case(version, endian, dt, kind, scale,
                                      MODES[(j + vi + ki) % 4], 3 + (j + ei) % 3,
                                      open_with='hdr' if (j + ki + ei) % 2 == 0 else 'img'))
    # C. affine source x ndim
    for version in (1, 2):
        for mode in MODES:
            for ndim in (3, 4, 5):
                cases.append(Case(version, '<', 'float32', 'nii', None, mode, ndim))
                cases.append(Case(version, '>', 'int16', 'nii.gz', SCALES[1], mode, ndim))
    # D. layout variants
    for vi, version in enumerate((1, 2)):
        for ei, endian in enumerate('<>'):
            for ki, kind in enumerate(('nii', 'nii.gz')):
                for j, variant in enumerate(('ext', 'off1024', 'offodd', 'extodd')):
                    dt = ('float32', 'int16', 'uint8', 'complex128')[(j + vi + ei) % 4]
                    cases.append(Case(version, endian, dt, kind,
                                      SCALES[2] if (j + ki) % 2 else None,
                                      MODES[(j + ei) % 4], 3 + (j + ki) % 3, variant))
            for ki, kind in enumerate(('pair', 'pair.gz')):
                for j, variant in enumerate(('ext', 'pairoff')):
                    cases.append(Case(version, endian, ('int32', 'float64')[j], kind, None,
                                      MODES[(j + vi) % 4], 3 + (j + ki + ei) % 3, variant,
                                      open_with=('hdr', 'img')[(j + ki) % 2]))
    unique: dict[str, Case] = {}
    for c in cases:  # C overlaps A in a few cells
        unique.setdefault(c.id, c)
    return list(unique.values())


CASES = _cases()
_BUILT: dict[str, str] = {}


def build(case: Case, directory) -> str:
    if case.id in _BUILT:
        return _BUILT[case.id]
    shape = SHAPES[case.ndim]
    data = make_data(case.dtype, shape, seed=zlib.crc32(case.id.encode()))
    single = case.kind.startswith('nii')
    exts = EXTS if 'ext' in case.variant else ()
    parts = nib_parts(data, case.version, case.endian, single, dtype=DTYPES[case.dtype],
                      affine=SFORM, qform=(QFORM, 1), sform=(SFORM, 2), extensions=exts)
    q, s = MODE_CODES[case.mode]
    parts.patch(qform_code=q, sform_code=s)
    if case.scale is not None:
        parts.patch(scl_slope=case.scale[0], scl_inter=case.scale[1])
    hs = HDR_SIZE[case.version]
    if case.variant == 'off1024':
        parts.patch(vox_offset=1024)
        parts.data_pos = 1024
    elif case.variant == 'offodd':
        off = SINGLE_OFFSET[case.version] + 5
        parts.patch(vox_offset=off)
        parts.data_pos = off
    elif case.variant == 'extodd':
        off = hs + len(parts.ext) + 7
        parts.patch(vox_offset=off)
        parts.data_pos = off
    elif case.variant == 'pairoff':
        parts.patch(vox_offset=32)
        parts.data_pos = 32
    path = write_parts(directory / case.id, parts, case.kind, case.open_with)
    _BUILT[case.id] = path
    return path


@pytest.fixture(params=CASES, ids=[c.id for c in CASES])
def loaded(request, session_dir):
    case = request.param
    path = build(case, session_dir)
    (ok_n, ni), (ok_v, vi) = load_both(path)
    # Every matrix file is valid for nibabel; a failure here is a generator bug.
    assert ok_n, f'nibabel cannot load generated file {path}: {ni!r}'
    if not ok_v:
        pytest.fail(f'voxpipe failed to load {path}: {type(vi).__name__}: {vi}')
    return case, path, vi, ni


def test_header(loaded):
    case, path, vi, ni = loaded
    assert_same(vi, ni, ('meta', 'header', 'extensions'), context=f'for {path}')


def test_dataobj(loaded):
    case, path, vi, ni = loaded
    assert_same(vi, ni, ('dataobj', 'data', 'unscaled'), context=f'for {path}')


def test_fdata(loaded):
    case, path, vi, ni = loaded
    assert_same(vi, ni, ('fdata',), context=f'for {path}')


def test_slicers(loaded):
    case, path, vi, ni = loaded
    assert_same(vi, ni, ('slicers',), context=f'for {path}')


def test_matrix_covers_every_dtype_version_order_for_single_files():
    seen = {(c.version, c.endian, c.dtype, c.kind, c.scale is None) for c in CASES}
    for version in (1, 2):
        for endian in '<>':
            for dt in DTYPES:
                for kind in ('nii', 'nii.gz'):
                    for raw in (True, False):
                        assert (version, endian, dt, kind, raw) in seen


def test_generated_files_have_intended_layout(session_dir):
    """Sanity check of the generator itself (nibabel view of a few generated files)."""
    import nibabel as nib

    for case in CASES[::23]:
        img = nib.load(build(case, session_dir))
        assert img.header.endianness == case.endian
        assert img.header.get_data_dtype().newbyteorder('=') == DTYPES[case.dtype].newbyteorder('=')
        assert img.shape == SHAPES[case.ndim]
        q, s = MODE_CODES[case.mode]
        assert (int(img.header['qform_code']), int(img.header['sform_code'])) == (q, s)
        if case.scale is None:
            assert (img.dataobj.slope, img.dataobj.inter) == (1.0, 0.0)
        else:
            ft = np.float32 if case.version == 1 else np.float64
            assert img.dataobj.slope == float(ft(case.scale[0]))
            assert img.dataobj.inter == float(ft(case.scale[1]))
