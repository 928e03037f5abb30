"""Writing: voxpipe writes, nibabel reads (and the other way round).

The reference for every voxpipe write is nibabel writing the same image: the decompressed bytes
(header, extensions, padding, data) must be identical, and nibabel must read both files to the
same image.  Also: voxpipe reads nibabel's output, the .nii.gz container matches nibabel's
(deterministic gzip header: no name, mtime 0, XFL 4 (level 1), OS 255), and Python's gzip module
reads voxpipe's .nii.gz.
"""

from __future__ import annotations

import gzip
import logging
import os

import nibabel as nib
import numpy as np
import pytest

from nifti_testlib import (
    DTYPES, HDR_CLASS, HDR_SIZE, QFORM, SFORM, SHAPES, assert_same, compare_images,
    compare_load, make_data, nib_parts, outcome, write_parts,
)

logging.getLogger('nibabel').setLevel(logging.CRITICAL)

GZIP_HEADER = bytes.fromhex('1f8b0800000000000400')[:8] + bytes([4, 0xFF])
# voxpipe's default .gz: members whose FEXTRA 'VP' subfield holds their compressed and
# uncompressed sizes (fixed part of the header up to SLEN).
MEMBERS_HEADER = bytes.fromhex('1f8b080400000000') + bytes([4, 0xFF, 12, 0]) + b'VP' + bytes([8, 0])
EXTS = {'nii': ('.nii',), 'nii.gz': ('.nii.gz',), 'pair': ('.hdr', '.img'),
        'pair.gz': ('.hdr.gz', '.img.gz')}


def out_paths(directory, stem, kind, via='hdr'):
    """(path to pass to save, [files written])."""
    files = [str(directory / (stem + e)) for e in EXTS[kind]]
    if kind.startswith('pair') and via == 'img':
        return files[1], files
    return files[0], files


def decompressed(path) -> bytes:
    raw = open(path, 'rb').read()
    return gzip.decompress(raw) if path.lower().endswith('.gz') else raw


def field_at(offset: int, version: int) -> str:
    dt = HDR_CLASS[version].template_dtype
    if offset >= dt.itemsize:
        return f'after the {dt.itemsize}-byte header'
    for name, (fdt, off) in dt.fields.items():
        if off <= offset < off + fdt.itemsize:
            return f'header field {name!r}'
    return '?'


def bytes_problem(got: bytes, exp: bytes, what: str, version: int = 1) -> str | None:
    if got == exp:
        return None
    n = min(len(got), len(exp))
    i = next((k for k in range(n) if got[k] != exp[k]), n)
    return (f'{what}: voxpipe {len(got)} bytes, nibabel {len(exp)} bytes; first difference at '
            f'byte {i} ({field_at(i, version)}): voxpipe {got[i:i + 8].hex()} '
            f'nibabel {exp[i:i + 8].hex()}')


def assert_same_files(vp_files, nib_files, version=1):
    problems = []
    for vf, nf in zip(vp_files, nib_files):
        for f in (vf, nf):
            assert os.path.exists(f), f'{f} was not written'
        p = bytes_problem(decompressed(vf), decompressed(nf), os.path.basename(vf), version)
        if p:
            problems.append(p)
    # and nibabel must read both to the same image
    ok_v, ni_v = outcome(lambda: nib.load(vp_files[0]))
    ok_n, ni_n = outcome(lambda: nib.load(nib_files[0]))
    assert ok_n, f'nibabel cannot read its own output: {ni_n!r}'
    if not ok_v:
        problems.append(f'nibabel cannot read voxpipe output {vp_files[0]}: {ni_v!r}')
    else:
        # compare nibabel-vs-nibabel (voxpipe-written file read by nibabel as "voxpipe image")
        pr = compare_images(ni_v, ni_n, ('meta', 'header', 'extensions', 'dataobj', 'data',
                                         'unscaled'))
        problems += [f'nibabel reading voxpipe output differs: {x}' for x in pr]
    assert not problems, '\n  - '.join(['voxpipe output != nibabel output'] + problems)


def check_gzip_container(path, layout='members'):
    raw = open(path, 'rb').read()
    expect = MEMBERS_HEADER if layout == 'members' else GZIP_HEADER[:8]  # XFL follows the level
    assert raw[:len(expect)] == expect, (
        f'gzip header of {path}: {raw[:len(expect)].hex(" ")} != {expect.hex(" ")}')
    if layout == 'members':
        # Walk the members by their announced sizes: they must tile the file exactly.
        at = 0
        while at < len(raw):
            size = int.from_bytes(raw[at + 16:at + 20], 'little')
            usize = int.from_bytes(raw[at + 20:at + 24], 'little')
            if at + size == len(raw) and usize == 0 and raw[at + 24:at + 26] == b'VT':
                # The table member that ends the file (docs/gzip.md): empty, 'VP' sized too.
                assert raw[at:at + 4] == expect[:4] and raw[at + 12:at + 16] == b'VP\x08\x00'
            else:
                assert raw[at:at + len(expect)] == expect, f'member header at byte {at}'
            assert int.from_bytes(raw[at + size - 4:at + size], 'little') == usize
            at += size
        assert at == len(raw)
    gzip.decompress(raw)  # Python's gzip reads it (CRC and ISIZE checked)
    with gzip.open(path, 'rb') as f:
        f.read()


# ---------------------------------------------------------------------------------------------
# vp.save(array, path, affine=A)
# ---------------------------------------------------------------------------------------------

SAVE_DTYPES = ['uint8', 'int8', 'int16', 'uint16', 'int32', 'uint32', 'float32', 'float64',
               'complex64', 'complex128', 'rgb24', 'rgba32']


@pytest.mark.parametrize('kind,via', [('nii', 'hdr'), ('nii.gz', 'hdr'), ('pair', 'hdr'),
                                      ('pair', 'img'), ('pair.gz', 'img')])
@pytest.mark.parametrize('dtype', SAVE_DTYPES)
def test_save_array(tmp_path, vp, dtype, kind, via):
    ndim = 3 + SAVE_DTYPES.index(dtype) % 3
    data = make_data(dtype, SHAPES[ndim], seed=31)
    (tmp_path / 'vp').mkdir()
    (tmp_path / 'nb').mkdir()
    vpath, vfiles = out_paths(tmp_path / 'vp', 'a', kind, via)
    npath, nfiles = out_paths(tmp_path / 'nb', 'a', kind, via)
    nib.save(nib.Nifti1Image(data, SFORM), npath)
    vp.save(data, vpath, affine=SFORM)
    assert_same_files(vfiles, nfiles)
    if kind.endswith('.gz'):
        for f in vfiles:
            check_gzip_container(f)


@pytest.mark.parametrize('ndim', [1, 2, 3, 4, 5, 6, 7])
def test_save_array_ndim(tmp_path, vp, ndim):
    data = make_data('int16', SHAPES[ndim], seed=ndim)
    vp.save(data, str(tmp_path / 'v.nii'), affine=QFORM)
    nib.save(nib.Nifti1Image(data, QFORM), str(tmp_path / 'n.nii'))
    assert_same_files([str(tmp_path / 'v.nii')], [str(tmp_path / 'n.nii')])


@pytest.mark.parametrize('layout', ['C', 'F', 'strided', 'reversed', 'big-endian', 'readonly'])
def test_save_array_memory_layouts(tmp_path, vp, layout):
    base = make_data('float32', (10, 12, 14), seed=3)
    data = {
        'C': np.ascontiguousarray(base[:5, :6, :7]),
        'F': np.asfortranarray(base[:5, :6, :7]),
        'strided': base[::2, 1::2, ::2],
        'reversed': base[::-1, :, ::-2],
        'big-endian': base[:5, :6, :7].astype('>f4'),
        'readonly': base[:5, :6, :7].copy(),
    }[layout]
    if layout == 'readonly':
        data.flags.writeable = False
    vp.save(data, str(tmp_path / 'v.nii'), affine=SFORM)
    nib.save(nib.Nifti1Image(data, SFORM), str(tmp_path / 'n.nii'))
    assert_same_files([str(tmp_path / 'v.nii')], [str(tmp_path / 'n.nii')])


@pytest.mark.parametrize('affine', ['identity', 'sform', 'qform', 'none', 'tiny-change', 'flip'])
def test_save_array_affines(tmp_path, vp, affine):
    a = {'identity': np.eye(4), 'sform': SFORM, 'qform': QFORM, 'none': None,
         'tiny-change': SFORM + 1e-9, 'flip': np.diag([-2.0, 3.0, -1.0, 1.0])}[affine]
    data = make_data('int16', (5, 6, 7), seed=4)
    vp.save(data, str(tmp_path / 'v.nii'), affine=a)
    nib.save(nib.Nifti1Image(data, a), str(tmp_path / 'n.nii'))
    assert_same_files([str(tmp_path / 'v.nii')], [str(tmp_path / 'n.nii')])


@pytest.mark.parametrize('dtype', ['bool', 'float16', 'int64', 'uint64', 'longdouble', 'object'])
def test_save_array_unsupported_dtype_raises(tmp_path, vp, dtype):
    data = np.ones((3, 4, 5), dtype=dtype)
    ok_n, en = outcome(lambda: nib.save(nib.Nifti1Image(data, np.eye(4)), str(tmp_path / 'n.nii')))
    assert not ok_n
    ok_v, ev = outcome(lambda: vp.save(data, str(tmp_path / 'v.nii'), affine=np.eye(4)))
    assert not ok_v, f'voxpipe saved a {dtype} array; nibabel raises {type(en).__name__}: {en}'
    assert isinstance(ev, (ValueError, TypeError, nib.spatialimages.HeaderDataError)), repr(ev)


def test_save_int16_overflowing_shape_raises(tmp_path, vp):
    """NIfTI-1 dim is int16: (N, 2, 1) with N > 32767 cannot be written (no FreeSurfer hack)."""
    data = np.zeros((40000, 2, 1), np.uint8)
    ok_n, en = outcome(lambda: nib.save(nib.Nifti1Image(data, np.eye(4)), str(tmp_path / 'n.nii')))
    ok_v, ev = outcome(lambda: vp.save(data, str(tmp_path / 'v.nii'), affine=np.eye(4)))
    assert not ok_n
    assert not ok_v, f'voxpipe wrote shape {data.shape}; nibabel raises {en!r}'


def test_save_freesurfer_vector(tmp_path, vp):
    data = make_data('float32', (40000, 1, 1), seed=9)
    vp.save(data, str(tmp_path / 'v.nii'), affine=np.eye(4))
    nib.save(nib.Nifti1Image(data, np.eye(4)), str(tmp_path / 'n.nii'))
    assert_same_files([str(tmp_path / 'v.nii')], [str(tmp_path / 'n.nii')])


# ---------------------------------------------------------------------------------------------
# vp.save(vp.load(p), out)  vs  nib.save(nib.load(p), out)
# ---------------------------------------------------------------------------------------------

RESAVE_SOURCES = [
    # (version, endian, dtype, scale, exts, src kind)
    (1, '<', 'int16', None, (), 'nii'),
    (1, '>', 'float32', None, (), 'nii.gz'),
    (1, '<', 'uint8', (0.5, 10.0), (), 'nii'),          # scaled ints: nibabel requantises
    (1, '>', 'int16', (0.1, -7.3), ((6, b'keep me'),), 'nii'),
    (1, '<', 'float64', (2.0, 1.0), (), 'pair'),
    (1, '<', 'complex64', None, ((4, b'<afni/>'), (40, b'\x00x\x00')), 'nii'),
    (1, '<', 'rgb24', None, (), 'nii'),
    (1, '<', 'int64', None, (), 'nii'),
    (1, '<', 'uint64', (3.0, 0.0), (), 'nii.gz'),
    (2, '<', 'int32', None, (), 'nii'),
    (2, '>', 'float32', (1.5, -2.0), ((6, b'nifti2 ext'),), 'nii.gz'),
    (2, '<', 'uint16', None, (), 'pair.gz'),
]


@pytest.fixture(params=RESAVE_SOURCES, ids=lambda s: f'v{s[0]}-{s[2]}-{s[5]}-'
                f'{"be" if s[1] == ">" else "le"}-{"sc" if s[3] else "raw"}-ext{len(s[4])}')
def source(request, tmp_path):
    version, endian, dtype, scale, exts, kind = request.param
    data = make_data(dtype, (5, 6, 7), seed=41)
    if dtype in ('float32', 'float64') and scale is not None:
        data = np.where(np.isfinite(data), data, 0).astype(data.dtype)
    parts = nib_parts(data, version, endian, kind.startswith('nii'), dtype=DTYPES[dtype],
                      affine=SFORM, qform=(QFORM, 1), sform=(SFORM, 2), extensions=exts)
    if scale is not None:
        parts.patch(scl_slope=scale[0], scl_inter=scale[1])
    (tmp_path / 'src').mkdir()
    return version, write_parts(tmp_path / 'src' / 'src', parts, kind)


@pytest.mark.parametrize('kind,via', [('nii', 'hdr'), ('nii.gz', 'hdr'), ('pair', 'img'),
                                      ('pair.gz', 'hdr')])
def test_resave_loaded(tmp_path, vp, source, kind, via):
    version, src = source
    (tmp_path / 'vp').mkdir()
    (tmp_path / 'nb').mkdir()
    vpath, vfiles = out_paths(tmp_path / 'vp', 'r', kind, via)
    npath, nfiles = out_paths(tmp_path / 'nb', 'r', kind, via)
    ok_n, en = outcome(lambda: nib.save(nib.load(src), npath))
    ok_v, ev = outcome(lambda: vp.save(vp.load(src), vpath))
    if not ok_n:
        assert not ok_v, f'nibabel cannot re-save ({en!r}) but voxpipe can'
        return
    assert ok_v, f'voxpipe re-save failed: {ev!r}'
    assert_same_files(vfiles, nfiles, version)
    # and voxpipe reads its own output like nibabel does
    compare_load(vpath)


def test_resave_keeps_big_endian(tmp_path, vp):
    data = make_data('int16', (5, 6, 7), seed=2)
    src = write_parts(tmp_path / 'be', nib_parts(data, 1, '>'), 'nii')
    vp.save(vp.load(src), str(tmp_path / 'out.nii'))
    assert nib.load(str(tmp_path / 'out.nii')).header.endianness == '>'
    assert open(str(tmp_path / 'out.nii'), 'rb').read()[:4] == (348).to_bytes(4, 'big')


def test_pair_header_without_extensions_is_348_bytes(tmp_path, vp):
    vp.save(make_data('uint8', (5, 6, 7)), str(tmp_path / 'p.hdr'), affine=np.eye(4))
    assert os.path.getsize(str(tmp_path / 'p.hdr')) == 348
    assert os.path.getsize(str(tmp_path / 'p.img')) == 5 * 6 * 7


# ---------------------------------------------------------------------------------------------
# Image classes: nibabel's own
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize('kind', ['nii', 'nii.gz', 'pair'])
@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('dtype', ['int16', 'float32', 'complex128', 'uint8'])
def test_image_classes(tmp_path, vp, version, kind, dtype):
    data = make_data(dtype, (5, 6, 7, 2), seed=8)
    vcls = vp.Nifti1Image if version == 1 else vp.Nifti2Image
    ncls = nib.Nifti1Image if version == 1 else nib.Nifti2Image
    (tmp_path / 'vp').mkdir()
    (tmp_path / 'nb').mkdir()
    vpath, vfiles = out_paths(tmp_path / 'vp', 'c', kind)
    npath, nfiles = out_paths(tmp_path / 'nb', 'c', kind)
    vimg = vcls(data, QFORM)
    nimg = ncls(data, QFORM)
    assert_same(vimg, nimg, ('meta', 'header', 'extensions'), context='(in-memory image)')
    vp.save(vimg, vpath)
    nib.save(nimg, npath)
    assert_same_files(vfiles, nfiles, version)
    if kind.endswith('.gz'):
        check_gzip_container(vfiles[0])
    compare_load(vpath)


@pytest.mark.parametrize('version', [1, 2])
def test_image_class_header_none(tmp_path, vp, version):
    data = make_data('float32', (5, 6, 7), seed=8)
    vcls = vp.Nifti1Image if version == 1 else vp.Nifti2Image
    ncls = nib.Nifti1Image if version == 1 else nib.Nifti2Image
    vp.save(vcls(data, SFORM, header=None), str(tmp_path / 'v.nii'))
    nib.save(ncls(data, SFORM, header=None), str(tmp_path / 'n.nii'))
    assert_same_files([str(tmp_path / 'v.nii')], [str(tmp_path / 'n.nii')], version)


@pytest.mark.parametrize('version', [1, 2])
def test_image_class_int64_needs_explicit_dtype(vp, version):
    vcls = vp.Nifti1Image if version == 1 else vp.Nifti2Image
    ncls = nib.Nifti1Image if version == 1 else nib.Nifti2Image
    data = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    ok_n, en = outcome(lambda: ncls(data, np.eye(4)))
    ok_v, ev = outcome(lambda: vcls(data, np.eye(4)))
    assert not ok_n
    assert not ok_v, f'voxpipe accepts int64 without dtype; nibabel: {en}'
    assert isinstance(ev, ValueError), repr(ev)


@pytest.mark.parametrize('kind', ['nii', 'nii.gz', 'pair'])
@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('dtype', ['int64', 'uint64', 'int16'])
def test_save_of_a_nibabel_image(tmp_path, vp, version, kind, dtype):
    data = make_data(dtype, (5, 6, 7), seed=10)
    ncls = nib.Nifti1Image if version == 1 else nib.Nifti2Image
    nimg = ncls(data, QFORM, dtype=DTYPES[dtype])
    nimg.header.extensions.append(nib.nifti1.Nifti1Extension(6, b'from nibabel'))
    nimg.header['descrip'] = b'made by nibabel'
    (tmp_path / 'vp').mkdir()
    (tmp_path / 'nb').mkdir()
    vpath, vfiles = out_paths(tmp_path / 'vp', 'f', kind)
    npath, nfiles = out_paths(tmp_path / 'nb', 'f', kind)
    vp.save(nimg, vpath)
    nib.save(nimg, npath)
    assert_same_files(vfiles, nfiles, version)


@pytest.mark.parametrize('kind', ['nii', 'nii.gz', 'pair.gz'])
@pytest.mark.parametrize('scaled', [False, True])
def test_loaded_images_are_nibabels(tmp_path, vp, kind, scaled):
    data = make_data('int16', (5, 6, 7), seed=12)
    parts = nib_parts(data, 1, '>', kind.startswith('nii'), extensions=[(6, b'nibabel class')])
    if scaled:
        parts.patch(scl_slope=0.25, scl_inter=-3.0)
    p = write_parts(tmp_path / 't', parts, kind)
    ni = nib.load(p)
    loaded = vp.load(p)
    assert type(loaded) is type(ni) and type(loaded.header) is type(ni.header)
    assert_same(loaded, ni, ('meta', 'header', 'extensions', 'data', 'fdata'),
                context='(vp.load vs nib.load)')
    # nibabel saves it exactly like the image it loads itself (here converting a pair to .nii)
    nib.save(loaded, str(tmp_path / 'conv.nii'))
    nib.save(ni, str(tmp_path / 'ref.nii'))
    assert_same_files([str(tmp_path / 'conv.nii')], [str(tmp_path / 'ref.nii')])


# ---------------------------------------------------------------------------------------------
# nibabel writes, voxpipe reads (beyond the matrix): nibabel's own writer paths
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize('dtype', ['float32', 'int16', 'uint8'])
@pytest.mark.parametrize('kind', ['nii', 'nii.gz', 'pair', 'pair.gz'])
def test_nibabel_writes_float_to_int_scaled(tmp_path, dtype, kind):
    """nibabel computes slope/inter itself when writing float data as an int type."""
    data = np.random.default_rng(50).standard_normal((5, 6, 7)) * 1000
    data[0, 0, 0] = 1e6
    data[1, 0, 0] = np.nan  # -> 0 for integer output
    img = nib.Nifti1Image(data, SFORM)
    img.set_data_dtype(np.dtype(dtype))
    path, _ = out_paths(tmp_path, 'fi', kind)
    nib.save(img, path)
    compare_load(path, expect_nib_error=False)


@pytest.mark.parametrize('kind', ['nii.gz', 'pair.gz'])
# Level 0 is left out: zlib's stored blocks end where each write call ends, and nibabel's write
# calls are not ours.
@pytest.mark.parametrize('level', [1, 6, 9])
def test_single_layout_is_nibabels_gzip_byte_for_byte(tmp_path, vp, kind, level):
    data = make_data('int16', (20, 30, 40), seed=5)
    (tmp_path / 'vp').mkdir()
    (tmp_path / 'nb').mkdir()
    vpath, vfiles = out_paths(tmp_path / 'vp', 's', kind)
    npath, nfiles = out_paths(tmp_path / 'nb', 's', kind)
    vp.save(data, vpath, affine=SFORM, level=level, gzip_layout='single')
    nimg = nib.Nifti1Image(data, SFORM)
    if level == 1:
        nib.save(nimg, npath)
    else:  # nibabel's level is its opener's class attribute
        import nibabel.openers
        old = nibabel.openers.Opener.default_compresslevel
        nibabel.openers.Opener.default_compresslevel = level
        try:
            nib.save(nimg, npath)
        finally:
            nibabel.openers.Opener.default_compresslevel = old
    for vf, nf in zip(vfiles, nfiles):
        assert open(vf, 'rb').read() == open(nf, 'rb').read(), vf
        check_gzip_container(vf, layout='single')


@pytest.mark.parametrize('layout', ['members', 'bgzf'])
@pytest.mark.parametrize('threads', [1, 2, 3])
def test_parallel_layouts_read_back_everywhere(tmp_path, vp, layout, threads):
    # Larger than several members, so that the parallel writer and reader both split it.
    data = make_data('int16', (96, 96, 60, 3), seed=9)
    path = str(tmp_path / 'p.nii.gz')
    vp.save(data, path, affine=SFORM, gzip_layout=layout, threads=threads)
    raw = open(path, 'rb').read()
    if layout == 'bgzf':
        assert raw.endswith(bytes.fromhex('1f8b08040000000000ff0600424302001b0003000000000000000000'))
    else:
        check_gzip_container(path)
    np.testing.assert_array_equal(np.asanyarray(nib.load(path).dataobj), data)
    img = vp.load(path, threads=threads)
    np.testing.assert_array_equal(img.get_fdata(dtype=np.float32), data.astype(np.float32))
    np.testing.assert_array_equal(img.dataobj[10:20, ::3, 5, 1], data[10:20, ::3, 5, 1])
    np.testing.assert_array_equal(img.dataobj[..., 2], data[..., 2])


def test_save_rejects_unknown_gzip_layout(tmp_path, vp):
    with pytest.raises(vp.errors.InvalidArgumentError):
        vp.save(make_data('int16', (2, 2, 2)), str(tmp_path / 'x.nii.gz'), affine=SFORM,
                gzip_layout='zip')


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('kind', ['nii', 'nii.gz', 'pair', 'pair.gz'])
def test_gzip_header_and_python_gzip(tmp_path, vp, version, kind):
    vcls = vp.Nifti1Image if version == 1 else vp.Nifti2Image
    kind_gz = kind if kind.endswith('.gz') else kind + '.gz'
    path, files = out_paths(tmp_path, 'g', kind_gz)
    vp.save(vcls(make_data('float32', (5, 6, 7)), SFORM), path)
    for f in files:
        check_gzip_container(f)
    hs = HDR_SIZE[version]
    assert len(decompressed(files[0])) >= hs
