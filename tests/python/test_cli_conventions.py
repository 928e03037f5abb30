"""What every `voxpipe` command shares: `--version`, `info` over many files (nib-ls lines and JSON
Lines, going on past a bad file), the units and format keys of `info --json`, the one overwrite
rule of the commands that write, and progress bars drawn on a terminal only (docs/cli.md,
docs/exit_codes.md). Every file is tiny; the values are checked against nibabel and pydicom.

The binary is $VOXPIPE_CLI if set, else the one pip installed in .venv/bin; the tests are skipped
when neither exists.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from test_cli_dcm2nii import write_series

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get('VOXPIPE_CLI') or REPO / '.venv' / 'bin' / 'voxpipe')

pytestmark = pytest.mark.skipif(not CLI.is_file(), reason=f'{CLI} not built/installed')


def cli(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=120,
                          env=env)


def write_nifti(path: Path, shape=(4, 5, 6), zooms=(1.5, 2.0, 2.5), dtype=np.int16, version=1,
                units=('mm', 'sec'), sform_code=1, qform_code=2, seed=0) -> Path:
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 100, shape).astype(dtype)
    affine = np.diag([*zooms[:3], 1.0])
    cls = nib.Nifti2Image if version == 2 else nib.Nifti1Image
    img = cls(data, affine)
    img.header.set_zooms(zooms)
    img.header.set_xyzt_units(*units)
    img.set_sform(affine, sform_code)
    img.set_qform(affine, qform_code)
    nib.save(img, path)  # a .hdr name makes the pair class
    return path


def pydicom_file(name: str) -> str:
    pydicom_data = pytest.importorskip('pydicom.data')
    return pydicom_data.get_testdata_file(name)


def cmake_version() -> str:
    text = (REPO / 'CMakeLists.txt').read_text()
    return re.search(r'project\(voxpipe VERSION (\d+\.\d+\.\d+)', text).group(1)


# ---- --version


def test_version_names_the_cmake_version_then_the_build():
    long, short = cli('--version'), cli('-V')
    assert long.returncode == 0 and short.returncode == 0, long.stderr
    assert long.stdout == short.stdout
    lines = long.stdout.splitlines()
    assert lines[0] == f'voxpipe {cmake_version()}'
    assert re.fullmatch(r'inflate: (ISA-L|zlib.*)', lines[1]), lines
    # scripts/setup.sh installs the three codec libraries, so this build has every codec; a build
    # without one says "(not built: no CharLS)" there instead.
    assert lines[2] == ('DICOM codecs: RLE Lossless, JPEG Lossless, JPEG (libjpeg-turbo), '
                        'JPEG-LS (CharLS), JPEG 2000 (OpenJPEG)'), lines
    assert re.fullmatch(r'CUDA kernels: (built|not built)', lines[3]), lines
    assert lines[4].startswith('GPU: '), lines


# ---- info over many files


@pytest.fixture
def images(tmp_path):
    a = write_nifti(tmp_path / 'a.nii.gz')
    b = write_nifti(tmp_path / 'b_long_name.nii', shape=(3, 4, 5, 2), zooms=(1.0, 1.25, 3.0, 2.5),
                    dtype=np.float32, units=('micron', 'msec'), sform_code=4, qform_code=0)
    c = write_nifti(tmp_path / 'c.hdr', shape=(2, 3, 4), zooms=(0.5, 0.5, 0.75), dtype=np.uint8,
                    version=2, sform_code=0, qform_code=1)
    return [a, b, c]


def parse_line(line: str) -> dict:
    m = re.fullmatch(r'(\S+)\s+(\S+)\s+\[([\d, ]+)\]\s+(\S+)\s+(?:(\*\S+)\s+)?'
                     r'sform (\d+) qform (\d+)\s+(.+)', line)
    assert m, line
    path, dtype, shape, zooms, scaling, sform, qform, fmt = m.groups()
    return {'path': path, 'dtype': dtype, 'shape': tuple(int(x) for x in shape.split(',')),
            'zooms': zooms, 'scaling': scaling, 'sform': int(sform), 'qform': int(qform),
            'format': fmt}


def test_info_on_many_files_prints_one_aligned_line_each_as_nib_ls(images):
    r = cli('info', *images)
    assert r.returncode == 0 and r.stderr == '', r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3, r.stdout
    for line, path in zip(lines, images):
        img = nib.load(path)
        got = parse_line(line)
        assert got['path'] == str(path)
        assert got['dtype'] == str(img.get_data_dtype())
        assert got['shape'] == img.shape
        assert got['zooms'] == 'x'.join(f'{z:.2f}' for z in img.header.get_zooms())
        assert got['sform'] == int(img.header['sform_code'])
        assert got['qform'] == int(img.header['qform_code'])
    assert [parse_line(line)['format'] for line in lines] == ['NIfTI-1 gz', 'NIfTI-1', 'NIfTI-2 pair']
    # Aligned: each column starts at the same place on every line.
    starts = [line.index(' ' + parse_line(line)['dtype'] + ' ') for line in lines]
    assert len(set(starts)) == 1, r.stdout


def test_info_keeps_the_detailed_form_for_one_file_and_switches_both_ways(images):
    one = cli('info', images[0])
    assert one.returncode == 0
    assert 'shape:       (4, 5, 6)' in one.stdout
    assert 'units:       mm, sec (xyzt_units 10)' in one.stdout
    brief = cli('info', '--brief', images[0])
    assert brief.returncode == 0 and len(brief.stdout.splitlines()) == 1
    assert parse_line(brief.stdout.strip())['shape'] == (4, 5, 6)
    both = cli('info', '--long', *images[:2])
    assert both.returncode == 0
    assert both.stdout.count('file:        ') == 2 and '\n\nfile:        ' in both.stdout
    assert 'units:       micron, msec (xyzt_units 19)' in both.stdout


def test_info_goes_on_past_a_bad_file_and_exits_with_the_first_code(images, tmp_path):
    bad = tmp_path / 'bad.nii'
    bad.write_bytes(b'not a nifti header' * 40)
    missing = tmp_path / 'missing.nii'
    r = cli('info', images[0], missing, bad, images[1])
    assert r.returncode == 3, r.stderr
    assert [parse_line(x)['path'] for x in r.stdout.splitlines()] == [str(images[0]), str(images[1])]
    errors = r.stderr.splitlines()
    assert len(errors) == 2, r.stderr
    assert errors[0].startswith(f'voxpipe info: error (not_found): {missing}')
    assert errors[1].startswith(f'voxpipe info: error (format): {bad}')
    assert cli('info', bad, missing).returncode == 5
    # The detailed form and JSON Lines go on as well.
    r = cli('info', '--json', missing, images[2])
    assert r.returncode == 3 and json.loads(r.stdout)['path'] == str(images[2])


def test_info_json_lines_carry_units_and_format(images):
    dcm = pydicom_file('CT_small.dcm')
    r = cli('info', '--json', *images, dcm)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 4, r.stdout
    objects = [json.loads(line) for line in lines]
    for obj, path in zip(objects, images):
        img = nib.load(path)
        h = img.header
        assert obj['path'] == str(path)
        assert tuple(obj['shape']) == img.shape
        assert obj['zooms'] == [float(z) for z in h.get_zooms()]
        space, time = h.get_xyzt_units()
        assert obj['xyzt_units'] == {'code': int(h['xyzt_units']), 'space': space, 'time': time}
        assert obj['format'] == f"NIfTI-{2 if isinstance(h, nib.Nifti2Header) else 1}"
    assert [(o['compression'], o['storage']) for o in objects[:3]] == [
        ('gzip', 'single file'), ('none', 'single file'), ('none', 'pair')]
    import pydicom

    ds = pydicom.dcmread(dcm)
    assert objects[3]['format'] == 'DICOM'
    assert (objects[3]['rows'], objects[3]['columns']) == (ds.Rows, ds.Columns)
    # One FILE: one line as well, so that a glob matching one file is still JSON Lines.
    one = cli('info', '--json', images[0])
    assert one.stdout.count('\n') == 1 and json.loads(one.stdout) == objects[0]


def test_info_lines_for_dicom_match_pydicom():
    import pydicom

    path = pydicom_file('MR_small.dcm')
    ds = pydicom.dcmread(path)
    r = cli('info', '--brief', path)
    assert r.returncode == 0, r.stderr
    m = re.fullmatch(r'(\S+)\s+(\S+)\s+\[([\d, ]+)\]\s+(\S+)\s+(?:(\*\S+)\s+)?(\S+)\s+DICOM', r.stdout.strip())
    assert m, r.stdout
    assert m.group(2) == str(ds.pixel_array.dtype)
    assert tuple(int(x) for x in m.group(3).split(',')) == ds.pixel_array.shape
    assert m.group(4) == 'x'.join(f'{float(z):.2f}' for z in ds.PixelSpacing)
    assert m.group(6) == ds.Modality


# ---- the overwrite rule


def listing(folder: Path) -> dict:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.iterdir() if p.is_file()}


def refused(r, cmd: str, path: Path):
    assert r.returncode == 12, (r.returncode, r.stderr)
    assert r.stderr == f'voxpipe {cmd}: error (exists): {path}: already exists (--overwrite replaces it)\n'


def writing_commands(tmp_path: Path):
    """(command, arguments without the flag, the output the rule protects)."""
    src = write_nifti(tmp_path / 'src.nii.gz', shape=(4, 5, 6, 2), zooms=(1, 1, 1, 1))
    ref = write_nifti(tmp_path / 'ref.nii', shape=(3, 3, 3), zooms=(2, 2, 2))
    return [
        ('convert', [src, tmp_path / 'out.nii.gz'], tmp_path / 'out.nii.gz'),
        ('convert', [src, tmp_path / 'pair.hdr'], tmp_path / 'pair.hdr'),
        ('index', [src], tmp_path / 'src.nii.gz.gzidx'),
        ('index', [src, '-o', tmp_path / 'idx.gzidx'], tmp_path / 'idx.gzidx'),
        ('resample', [src, '--reference', ref, '-o', tmp_path / 'res.nii'], tmp_path / 'res.nii'),
    ]


@pytest.mark.parametrize('case', range(5))
def test_every_writing_command_refuses_an_existing_output(tmp_path, case):
    cmd, args, output = writing_commands(tmp_path)[case]
    assert cli(cmd, *args).returncode == 0
    before = listing(tmp_path)
    r = cli(cmd, *args)
    refused(r, cmd, output)
    assert listing(tmp_path) == before  # untouched, and no temporary left
    for flag in ('--overwrite', '--force'):
        previous = output.stat().st_mtime_ns
        r = cli(cmd, *args, flag)
        assert r.returncode == 0, r.stderr
        assert output.stat().st_mtime_ns != previous  # replaced


def test_either_file_of_a_pair_blocks_the_write(tmp_path):
    src = write_nifti(tmp_path / 'src.nii')
    (tmp_path / 'pair.img').write_bytes(b'keep')
    refused(cli('convert', src, tmp_path / 'pair.hdr'), 'convert', tmp_path / 'pair.img')
    assert not (tmp_path / 'pair.hdr').exists() and (tmp_path / 'pair.img').read_bytes() == b'keep'


def test_refusal_comes_before_any_work(tmp_path):
    # The input is not even opened: a missing input still gets the refusal, not not_found.
    (tmp_path / 'out.nii').write_bytes(b'keep')
    refused(cli('convert', tmp_path / 'missing.nii', tmp_path / 'out.nii'), 'convert', tmp_path / 'out.nii')
    refused(cli('resample', tmp_path / 'missing.nii', '--reference', tmp_path / 'missing.nii',
                '-o', tmp_path / 'out.nii'), 'resample', tmp_path / 'out.nii')
    assert sorted(p.name for p in tmp_path.iterdir()) == ['out.nii']


def test_index_replaces_its_cache_entry_without_asking(tmp_path):
    src = write_nifti(tmp_path / 'src.nii.gz')
    env = {**os.environ, 'VOXPIPE_CACHE_DIR': str(tmp_path / 'cache')}
    assert cli('index', '--cache', src, env=env).returncode == 0
    r = cli('index', '--cache', src, env=env)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / 'src.nii.gz.gzidx').exists()


def test_dcm2nii_skips_a_series_whose_file_exists_unless_force(tmp_path):
    write_series(tmp_path / 'dicom', slices=3)
    out = tmp_path / 'out'
    assert cli('dcm2nii', tmp_path / 'dicom', '-o', out).returncode == 0
    r = cli('dcm2nii', tmp_path / 'dicom', '-o', out)
    assert r.returncode == 11, r.stderr
    assert f'{out / "3_T1w_oblique.nii.gz"}: already exists (--overwrite replaces it)' in r.stderr
    assert cli('dcm2nii', '--force', tmp_path / 'dicom', '-o', out).returncode == 0


# ---- progress bars: on a terminal, never on a pipe


def run_on_pty(*args) -> tuple[int, str, str]:
    """Runs the CLI with stderr on a pseudo-terminal; returns (exit code, stdout, terminal text)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([str(CLI), *map(str, args)], stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    seen = b''
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    stdout = proc.stdout.read().decode()
    return proc.wait(timeout=60), stdout, seen.decode()


def size_counts(n: int) -> str:
    return f'{n}/{n} B' if n < 1024 else f'{n / 1024:.1f}/{n / 1024:.1f} KiB'


def progress_cases(tmp_path: Path):
    """(arguments, the final counts the bar must show)."""
    src = write_nifti(tmp_path / 'src.nii.gz', shape=(4, 5, 6, 3), zooms=(1, 1, 1, 1))
    ref = write_nifti(tmp_path / 'ref.nii', shape=(3, 3, 3), zooms=(2, 2, 2))
    write_series(tmp_path / 'dicom', slices=3)
    return [
        (['convert', src, tmp_path / 'o.nii'], size_counts(4 * 5 * 6 * 3 * 2)),
        (['index', src], size_counts(src.stat().st_size)),
        (['resample', src, '--reference', ref, '-o', tmp_path / 'r.nii'], '3/3 volumes'),
        (['dcm2nii', tmp_path / 'dicom', '-o', tmp_path / 'dout'], '3/3 images'),
        (['bench-load', '--no-nibabel', '--repeat', '1', src, ref], '4/4 loads'),
    ]


@pytest.mark.parametrize('case', range(5))
def test_progress_bar_with_counts_and_eta_on_a_terminal_only(tmp_path, case):
    args, counts = progress_cases(tmp_path)[case]
    code, _, tty = run_on_pty(*args)
    assert code == 0, tty
    name = f'voxpipe {args[0]} ['
    assert '\r' + name in tty, tty
    assert re.search(re.escape(f'] 100% {counts}, ETA ') + r'\d+:\d\d', tty), tty
    # The bar is erased before the command ends: the terminal's last line is blank again.
    assert tty.rstrip(' ').endswith('\r'), repr(tty[-80:])
    # The same command with stderr on a pipe draws nothing.
    r = cli(*args) if args[0] == 'bench-load' else cli(*args, '--overwrite')
    assert r.returncode == 0, r.stderr
    assert r.stderr == '' and '\r' not in r.stdout
