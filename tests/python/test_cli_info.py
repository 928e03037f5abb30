"""`voxpipe info` and `voxpipe convert` read what they say they read: a DICOM series folder (the
series `voxpipe dcm2nii` finds in it, and, for a folder of one series, the image dcm2nii writes),
a NIfTI file's byte order and extension count as nibabel's nib-ls shows them, a NIfTI-Zarr store
described as a store, and the formats voxpipe leaves to nibabel (Analyze, MGH/MGZ, MINC) named,
with nibabel, instead of failing as broken NIfTI headers.

References: nibabel (nib-ls, nibabel.load of the outputs) and `voxpipe dcm2nii`'s own output.
The command is $VOXPIPE_CLI if set, else the one installed in .venv/bin (as the other CLI tests).
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from test_cli_dcm2nii import write_series

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get('VOXPIPE_CLI') or REPO / '.venv' / 'bin' / 'voxpipe')
NIB_LS = Path(sys.executable).parent / 'nib-ls'

pytestmark = pytest.mark.skipif(not CLI.is_file(), reason=f'{CLI} not built/installed')


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=120)


def dcm2nii(folder: Path, out: Path) -> list[Path]:
    r = cli('dcm2nii', folder, '-o', out, '-f', '%s_%d')
    assert r.returncode == 0, r.stdout + r.stderr
    return sorted(out.glob('*.nii.gz'))


@pytest.fixture
def two_series(tmp_path):
    """A folder holding a 3D and a 4D series (in subfolders), and dcm2nii's images of them by
    series number."""
    folder = tmp_path / 'dicom'
    write_series(folder / 'a', slices=6, series_number=3, description='T1w oblique')
    write_series(folder / 'b', slices=4, volumes=3, series_number=7, description='bold',
                 slope=1.0, intercept=0.0, seed=1)
    written = dcm2nii(folder, tmp_path / 'ref')
    return folder, {int(p.name.split('_')[0]): p for p in written}


# ---- DICOM folders


def test_info_of_a_dicom_folder_lists_the_series_dcm2nii_writes(two_series):
    folder, ref = two_series
    assert sorted(ref) == [3, 7]
    r = cli('info', '--json', folder)
    assert r.returncode == 0, r.stderr
    objects = [json.loads(line) for line in r.stdout.splitlines()]
    assert [o['series_number'] for o in objects] == [3, 7]
    for o in objects:
        img = nib.load(ref[o['series_number']])
        h = img.header
        assert o['path'] == str(folder) and o['format'] == 'DICOM series'
        assert o['series_description'] == ('T1w oblique' if o['series_number'] == 3 else 'bold')
        assert o['modality'] == 'MR'
        assert o['images'] == (6 if o['series_number'] == 3 else 12)
        assert tuple(o['shape']) == img.shape
        assert o['dtype'] == str(h.get_data_dtype())
        assert np.allclose(o['zooms'], h.get_zooms(), rtol=0, atol=1e-6)
        assert np.allclose(o['affine'], img.affine, rtol=0, atol=1e-5)
        # nibabel moves the scale factors from the header to the proxy on load.
        assert (o['scl_slope'], o['scl_inter']) == (img.dataobj.slope, img.dataobj.inter)
        assert o['problem'] is None
        # The keys every info --json object has where they apply.
        assert {'path', 'format', 'shape', 'dtype', 'zooms', 'affine', 'warnings'} <= set(o)
    assert objects[0]['scaled'] and (objects[0]['scl_slope'], objects[0]['scl_inter']) == (2.0, -100.0)

    text = cli('info', folder)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == f'folder:      {folder}'
    assert lines[1] == 'format:      DICOM series folder, 2 series, 18 images'
    assert lines[2].startswith('series 3 "T1w oblique": MR, 6 images, shape (40, 32, 6), int16')
    assert lines[3].startswith('series 7 "bold": MR, 12 images, shape (40, 32, 4, 3), int16')

    brief = cli('info', '--brief', folder, ref[3])
    assert brief.returncode == 0, brief.stderr
    rows = brief.stdout.splitlines()
    assert len(rows) == 3
    assert rows[0].split()[:3] == [str(folder), 'int16', '[40,']
    assert rows[0].endswith('DICOM series 3 "T1w oblique", 6 images')
    assert rows[1].endswith('DICOM series 7 "bold", 12 images')


def test_convert_of_a_one_series_folder_equals_dcm2nii(two_series, tmp_path):
    folder, ref = two_series
    for number, sub in ((3, 'a'), (7, 'b')):
        out = tmp_path / f'conv{number}.nii.gz'
        r = cli('convert', folder / sub, out)
        assert r.returncode == 0, r.stderr
        assert r.stdout == f'wrote {out}\n'
        got, want = nib.load(out), nib.load(ref[number])
        assert got.shape == want.shape and got.get_data_dtype() == want.get_data_dtype()
        assert np.array_equal(np.asanyarray(got.dataobj), np.asanyarray(want.dataobj))
        assert np.array_equal(got.dataobj.get_unscaled(), want.dataobj.get_unscaled())
        assert np.array_equal(got.affine, want.affine)
        assert (got.dataobj.slope, got.dataobj.inter) == (want.dataobj.slope, want.dataobj.inter)
        # The same header, byte for byte (the 348 bytes and the extension flag).
        with gzip.open(out) as a, gzip.open(ref[number]) as b:
            assert a.read(352) == b.read(352)
    # --dtype float32: the rescaled values, as dcm2nii --float32 writes them.
    out = tmp_path / 'f32.nii'
    assert cli('convert', folder / 'a', out, '--dtype', 'float32').returncode == 0
    r = cli('dcm2nii', folder / 'a', '-o', tmp_path / 'f32ref', '--float32', '-z', 'n')
    assert r.returncode == 0, r.stderr
    (want,) = (tmp_path / 'f32ref').glob('*.nii')
    assert nib.load(out).get_data_dtype() == np.float32
    assert np.array_equal(nib.load(out).get_fdata(), nib.load(want).get_fdata())
    assert np.array_equal(nib.load(out).affine, nib.load(want).affine)
    # The overwrite rule holds as for a file IN.
    again = cli('convert', folder / 'a', out)
    assert again.returncode == 12 and 'already exists' in again.stderr


def test_convert_of_a_folder_of_several_series_names_dcm2nii(two_series, tmp_path):
    folder, _ = two_series
    out = tmp_path / 'x.nii.gz'
    r = cli('convert', folder, out)
    assert r.returncode == 10, r.stderr  # invalid_argument (docs/exit_codes.md)
    assert r.stderr.startswith(f'voxpipe convert: error (invalid_argument): {folder}: 2 DICOM series')
    assert f'voxpipe dcm2nii {folder} -o OUT_DIR' in r.stderr
    assert 'series 3 "T1w oblique"; series 7 "bold"' in r.stderr
    assert not out.exists() and not list(tmp_path.glob('x.nii.gz*'))


def test_a_folder_that_is_neither_dicom_nor_a_store_is_named_so(tmp_path):
    folder = tmp_path / 'notes'
    folder.mkdir()
    (folder / 'readme.txt').write_text('not an image\n')
    for args in (('info', folder), ('convert', folder, tmp_path / 'o.nii')):
        r = cli(*args)
        assert r.returncode == 5, r.stderr
        assert f'error (format): {folder}: neither a folder of DICOM images' in r.stderr
        assert 'NIfTI-Zarr store' in r.stderr
    # A Zarr store under another name is told what the name must be.
    store = tmp_path / 'store'
    store.mkdir()
    (store / 'zarr.json').write_text('{}')
    r = cli('info', store)
    assert r.returncode == 5 and 'a Zarr store (it holds zarr.json)' in r.stderr, r.stderr
    assert not (tmp_path / 'o.nii').exists()


# ---- NIfTI: nib-ls's byte order and extension count


@pytest.mark.parametrize('endianness', ['<', '>'])
def test_byte_order_and_extensions_as_nib_ls_shows_them(tmp_path, endianness):
    data = np.arange(60, dtype=np.int16).reshape(3, 4, 5)
    hdr = nib.Nifti1Header(endianness=endianness)
    img = nib.Nifti1Image(data, np.eye(4), hdr)
    img.header.extensions.append(nib.nifti1.Nifti1Extension(6, b'first comment'))
    img.header.extensions.append(nib.nifti1.Nifti1Extension(4, b'<afni/>'))
    path = tmp_path / 'x.nii'
    nib.save(img, path)
    h = nib.load(path).header
    assert h.endianness == endianness and len(h.extensions) == 2

    r = cli('info', '--json', path)
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj['endianness'] == h.endianness
    assert obj['extension_count'] == len(h.extensions)
    assert obj['byte_order'] == ('big' if endianness == '>' else 'little')  # kept as it was
    assert len(obj['extensions']) == 2

    text = cli('info', path).stdout
    order = 'big' if endianness == '>' else 'little'
    assert f'format:      NIfTI-1, single file, {order}-endian ({endianness}), compression none' in text
    assert 'extensions:  2 [code 6, ' in text

    # The one-line form has nib-ls's dtype column and its "#exts: N".
    line = cli('info', '--brief', path).stdout.split()
    assert line[1] == str(h.get_data_dtype())
    assert ' '.join(line).count(f'#exts: {len(h.extensions)}') == 1
    if NIB_LS.is_file():
        ls = subprocess.run([str(NIB_LS), str(path)], capture_output=True, text=True, timeout=60)
        assert ls.returncode == 0, ls.stderr
        assert ls.stdout.split()[1] == line[1]
        assert f'#exts: {len(h.extensions)}' in ls.stdout


# ---- NIfTI-Zarr stores


def python_cli(*args) -> subprocess.CompletedProcess:
    """`voxpipe ARGS` as the program runs it when given a store: `python -m voxpipe`."""
    return subprocess.run([sys.executable, '-m', 'voxpipe', *map(str, args)], capture_output=True,
                          text=True, timeout=120)


def test_info_of_a_store_describes_a_store(tmp_path):
    zarr = pytest.importorskip('zarr')
    import voxpipe as vp

    data = np.arange(12 * 10 * 8 * 3, dtype=np.int16).reshape(12, 10, 8, 3)
    src = tmp_path / 'src.nii.gz'
    nib.save(nib.Nifti1Image(data, np.diag([2.0, 2.0, 3.0, 1.0])), src)
    store = tmp_path / 'x.nii.zarr'
    r = python_cli('convert', src, store, '--levels', '2', '--chunks', '6,5,4,1')
    assert r.returncode == 0, r.stderr
    array = zarr.open_group(str(store), mode='r')['0']
    assert array.chunks == (1, 4, 5, 6)  # (t, z, y, x)

    text = python_cli('info', store)
    assert text.returncode == 0, text.stderr
    assert 'single file' not in text.stdout and 'offset' not in text.stdout, text.stdout
    assert ('format:      NIfTI-1 in a NIfTI-Zarr store (Zarr v3, 2 levels), little-endian (<), '
            'compression zstd 3\n') in text.stdout
    assert f'data:        {data.nbytes} bytes in chunks of (6, 5, 4, 1)\n' in text.stdout
    obj = json.loads(python_cli('info', '--json', store).stdout)
    assert obj['storage'] == 'NIfTI-Zarr store'
    assert obj['zarr'] == {'zarr_format': 3, 'levels': 2, 'chunks': [6, 5, 4, 1], 'shards': None}
    assert tuple(obj['shape']) == vp.load(store).shape == data.shape
    brief = python_cli('info', store, src)
    assert brief.returncode == 0, brief.stderr
    assert [line.split()[-1] for line in brief.stdout.splitlines()] == ['zarr', 'gz']
    assert brief.stdout.splitlines()[0].split()[-2:] == ['NIfTI-1', 'zarr']


# ---- formats voxpipe does not read


def analyze_pair(folder: Path) -> Path:
    data = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    nib.save(nib.AnalyzeImage(data, np.diag([2.0, 2.0, 2.0, 1.0])), folder / 'an.hdr')
    return folder / 'an.hdr'


def mgh_bytes() -> bytes:
    img = nib.MGHImage(np.arange(24, dtype=np.float32).reshape(2, 3, 4), np.eye(4))
    return img.to_bytes()


def foreign_files(folder: Path) -> list[tuple[Path, str, str]]:
    """(file, the format's name in the message, what nibabel.load is told to open)."""
    hdr = analyze_pair(folder)
    mgh = mgh_bytes()
    (folder / 'x.mgh').write_bytes(mgh)
    (folder / 'x.mgz').write_bytes(gzip.compress(mgh))
    (folder / 'plain.mgz').write_bytes(mgh)            # named .mgz, not gzip: named by suffix
    (folder / 'mgh_named.nii').write_bytes(mgh)        # content says MGH
    (folder / 'mgz_named.nii.gz').write_bytes(gzip.compress(mgh))
    (folder / 'minc1.mnc').write_bytes(b'CDF\x01' + bytes(400))
    (folder / 'minc2.mnc').write_bytes(b'\x89HDF\r\n\x1a\n' + bytes(400))
    (folder / 'hdf5_named.nii').write_bytes(b'\x89HDF\r\n\x1a\n' + bytes(400))
    (folder / 'short.mnc').write_bytes(b'')            # nothing to sniff: named by suffix
    return [(hdr, 'Analyze 7.5', str(hdr)), (folder / 'an.img', 'Analyze 7.5', str(hdr)),
            (folder / 'x.mgh', 'MGH/MGZ', None), (folder / 'x.mgz', 'MGH/MGZ', None),
            (folder / 'plain.mgz', 'MGH/MGZ', None), (folder / 'mgh_named.nii', 'MGH/MGZ', None),
            (folder / 'mgz_named.nii.gz', 'MGH/MGZ', None),
            (folder / 'minc1.mnc', 'MINC1 (netCDF)', None), (folder / 'minc2.mnc', 'MINC2 (HDF5)', None),
            (folder / 'hdf5_named.nii', 'MINC2 (HDF5)', None), (folder / 'short.mnc', 'MINC', None)]


def test_formats_nibabel_reads_are_named_with_nibabel(tmp_path):
    # The references: nibabel reads the Analyze pair and the MGH files as what they are.
    files = foreign_files(tmp_path)
    assert isinstance(nib.load(tmp_path / 'an.hdr'), nib.AnalyzeImage)
    assert isinstance(nib.load(tmp_path / 'an.img'), nib.AnalyzeImage)
    for name in ('x.mgh', 'x.mgz'):
        assert type(nib.load(tmp_path / name)) is nib.MGHImage
    for path, fmt, load in files:
        load = load or str(path)
        for args in (('info', path), ('convert', path, tmp_path / 'out.nii.gz'),
                     ('info', '--json', path)):
            r = cli(*args)
            assert r.returncode == 6, (path, r.stderr)  # unsupported (docs/exit_codes.md)
            assert r.stderr == (f'voxpipe {args[0]}: error (unsupported): {path}: {fmt}'
                                f'{r.stderr.split(fmt, 1)[1]}'), r.stderr
            assert f"is not read by voxpipe; nibabel reads it: nibabel.load('{load}')" in r.stderr
            assert 'expected a NIfTI-1 magic' not in r.stderr and 'file name' not in r.stderr
            assert r.stdout == ''
    assert not (tmp_path / 'out.nii.gz').exists()
    # Several at once: each named, the good file still described.
    good = tmp_path / 'good.nii'
    nib.save(nib.Nifti1Image(np.zeros((2, 2, 2), np.uint8), np.eye(4)), good)
    r = cli('info', tmp_path / 'x.mgz', good, tmp_path / 'minc2.mnc')
    assert r.returncode == 6 and r.stdout.startswith(str(good)), r.stdout + r.stderr
    assert r.stderr.count('nibabel reads it') == 2


def test_an_img_without_its_header_is_named_so(tmp_path):
    analyze_pair(tmp_path)
    lone = tmp_path / 'lone.img'
    shutil.copy(tmp_path / 'an.img', lone)
    r = cli('info', lone)
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith(f'voxpipe info: error (not_found): {lone}: no header '
                               f'{tmp_path / "lone.hdr"} beside it')
    assert 'Analyze 7.5 or NIfTI pair' in r.stderr
    with pytest.raises(nib.filebasedimages.ImageFileError):
        nib.load(lone)  # nibabel cannot read it either


def test_nifti_files_are_not_taken_for_other_formats(tmp_path):
    """A NIfTI pair (.hdr/.img, magic "ni1") and a gzip NIfTI-2 are still read as NIfTI."""
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    pair = tmp_path / 'p.hdr'
    nib.save(nib.Nifti1Pair(data, np.eye(4)), pair)
    two = tmp_path / 'two.nii.gz'
    nib.save(nib.Nifti2Image(data, np.eye(4)), two)
    for path, fmt in ((pair, 'NIfTI-1'), (tmp_path / 'p.img', 'NIfTI-1'), (two, 'NIfTI-2')):
        r = cli('info', '--json', path)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)['format'] == fmt
