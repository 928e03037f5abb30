"""Bad files: voxpipe must raise a ValueError (format / corruption) or OSError (I/O) subclass whose
message names the file (and, for header problems, the offending field), and never crash.

Every case runs in a separate process (a crash, abort or hang in the C++ core fails the test
instead of killing pytest) with an 8 GiB address-space limit: a child forked from a fork server
that has imported voxpipe (fast), or a fresh interpreter per case with VOXPIPE_TESTS_NO_FORK=1, and goes through load -> np.asarray(dataobj) ->
get_fdata() -> dataobj[0]; the first exception is reported back as JSON.  ``load`` may succeed
for data problems (nibabel's own behaviour, e.g. truncated data) as long as data access raises.
nibabel is run on the same file as a fixture sanity check where it detects the problem too.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import subprocess
import sys

import nibabel as nib
import numpy as np
import pytest

from nifti_testlib import ext_bytes, gz, make_data, nib_parts, outcome, write_parts

logging.getLogger('nibabel').setLevel(logging.CRITICAL)

WORK = r"""
import json, os, sys, resource, select, signal, time
import numpy as np


def work(path):
    try:
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
    except Exception:
        pass
    res = {"stage": "import"}
    try:
        import voxpipe as vp
        res["stage"] = "load"
        img = vp.load(path)
        res["stage"] = "asarray"
        np.asarray(img.dataobj)
        res["stage"] = "get_fdata"
        img.get_fdata()
        res["stage"] = "slice"
        img.dataobj[0]
        res["stage"] = "done"
    except BaseException as e:
        res["exc_type"] = type(e).__module__ + "." + type(e).__qualname__
        res["mro"] = [c.__name__ for c in type(e).__mro__]
        res["is_value_error"] = isinstance(e, ValueError)
        res["is_os_error"] = isinstance(e, OSError)
        res["is_file_not_found"] = isinstance(e, FileNotFoundError)
        res["msg"] = str(e)
    return res
"""

# One-shot runner: a fresh interpreter per case.
RUNNER = WORK + r"""
print("@@RESULT@@" + json.dumps({"status": 0, "result": work(sys.argv[1])}), flush=True)
"""

# Fork server: imports numpy + voxpipe once, runs nothing of voxpipe itself, and forks one child
# per case (reading paths from stdin, one JSON line per case on stdout).  A child that crashes or
# hangs is reported (signal / timeout) without taking the server or pytest down.
ZYGOTE = WORK + r"""
import voxpipe  # noqa: F401  (import only; no voxpipe threads exist before fork)
timeout = float(sys.argv[1])
for line in sys.stdin:
    path = line.rstrip("\n")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            data = json.dumps(work(path)).encode()
        except BaseException as e:
            data = json.dumps({"stage": "runner", "msg": repr(e)}).encode()
        os.write(w, data)
        os._exit(0)
    os.close(w)
    chunks, deadline, hung = [], time.monotonic() + timeout, False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            hung = True
            os.kill(pid, signal.SIGKILL)
            break
        ready, _, _ = select.select([r], [], [], left)
        if ready:
            b = os.read(r, 1 << 16)
            if not b:
                break
            chunks.append(b)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    out = {"status": -1 if hung else status, "hung": hung}
    if chunks and not hung:
        out["result"] = json.loads(b"".join(chunks))
    print("@@RESULT@@" + json.dumps(out), flush=True)
"""

CASE_TIMEOUT = 60


class _Zygote:
    proc: subprocess.Popen | None = None

    @classmethod
    def run(cls, path) -> dict:
        for attempt in range(2):
            if cls.proc is None or cls.proc.poll() is not None:
                env = dict(os.environ, OPENBLAS_NUM_THREADS='1', OMP_NUM_THREADS='1')
                # OMP_NUM_THREADS=1 is for NumPy's BLAS before fork; voxpipe, which would follow
                # it, keeps decoding on every usable core as the cases are meant to.
                env.setdefault('VOXPIPE_NUM_THREADS', str(len(os.sched_getaffinity(0))))
                cls.proc = subprocess.Popen(
                    [sys.executable, '-c', ZYGOTE, str(CASE_TIMEOUT)], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
            try:
                cls.proc.stdin.write(os.fspath(path) + '\n')
                cls.proc.stdin.flush()
                while True:
                    line = cls.proc.stdout.readline()
                    if not line:
                        raise BrokenPipeError('fork server exited')
                    if line.startswith('@@RESULT@@'):
                        return json.loads(line[len('@@RESULT@@'):])
            except (BrokenPipeError, OSError):
                cls.proc = None
                if attempt:
                    raise
        raise AssertionError('unreachable')

    @classmethod
    def stop(cls):
        if cls.proc is not None and cls.proc.poll() is None:
            cls.proc.stdin.close()
            try:
                cls.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                cls.proc.kill()
        cls.proc = None


@pytest.fixture(scope='module', autouse=True)
def _stop_zygote():
    yield
    _Zygote.stop()


def run_voxpipe(path, timeout=CASE_TIMEOUT) -> dict:
    """Load + read `path` with voxpipe in a separate process; crashes and hangs fail the test.

    Uses the fork server unless VOXPIPE_TESTS_NO_FORK=1 (then one fresh interpreter per case).
    """
    if os.environ.get('VOXPIPE_TESTS_NO_FORK') == '1' or not hasattr(os, 'fork'):
        try:
            cp = subprocess.run([sys.executable, '-c', RUNNER, os.fspath(path)],
                                capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f'voxpipe hung (> {timeout}s) on {path}')
        line = [x for x in cp.stdout.splitlines() if x.startswith('@@RESULT@@')]
        out = (json.loads(line[-1][len('@@RESULT@@'):]) if line and cp.returncode == 0
               else {'status': cp.returncode, 'stderr': cp.stderr[-2000:]})
    else:
        out = _Zygote.run(path)
    if out.get('hung'):
        pytest.fail(f'voxpipe hung (> {timeout}s) on {path}')
    if out['status'] != 0 or 'result' not in out:
        st = out['status']
        how = (f'killed by signal {os.WTERMSIG(st)}' if st > 0 and os.WIFSIGNALED(st)
               else f'exit status {st}')
        pytest.fail(f'voxpipe crashed on {path}: {how} {out.get("stderr", "")}')
    return out['result']


def partners(path) -> list[str]:
    """For a pair, the other file's name (the error may name the file that is actually bad)."""
    p = os.fspath(path)
    stem, gzs = (p[:-3], p[-3:]) if p.lower().endswith('.gz') else (p, '')
    swap = {'.hdr': '.img', '.img': '.hdr', '.HDR': '.IMG', '.IMG': '.HDR'}
    if stem[-4:] in swap:
        return [stem[:-4] + swap[stem[-4:]] + gzs]
    return []


def nib_outcome(path):
    """(stage, exception) for nibabel, mirroring the subprocess runner."""
    ok, img = outcome(lambda: nib.load(path))
    if not ok:
        return 'load', img
    for stage, fn in (('asarray', lambda: np.asarray(img.dataobj)), ('get_fdata', img.get_fdata),
                      ('slice', lambda: img.dataobj[0])):
        ok, e = outcome(fn)
        if not ok:
            return stage, e
    return 'done', None


def check(path, fields=(), kind='value_or_os', nib_raises=True, stages=None):
    """Run voxpipe on `path` and check the error contract."""
    if nib_raises is not None:
        st, e = nib_outcome(path)
        assert (st != 'done') == nib_raises, (
            f'fixture check: nibabel {"raised " + repr(e) + " at " + st if st != "done" else "read"}'
            f' {path}')
    res = run_voxpipe(path)
    assert res['stage'] != 'import', f'voxpipe import failed: {res}'
    assert res['stage'] != 'done', f'voxpipe raised nothing for {path}'
    problems = []
    if stages and res['stage'] not in stages:
        problems.append(f'raised at stage {res["stage"]!r}, expected one of {stages}')
    if kind == 'file_not_found':
        if not res['is_file_not_found']:
            problems.append(f'{res["exc_type"]} is not a FileNotFoundError')
    elif not (res['is_value_error'] or res['is_os_error']):
        problems.append(f'{res["exc_type"]} (mro {res["mro"]}) is neither ValueError nor OSError')
    names = [os.fspath(path)] + partners(path)
    if not any(n in res['msg'] for n in names):
        problems.append(f'none of the paths {names} in message')
    if fields and not any(f.lower() in res['msg'].lower() for f in fields):
        problems.append(f'none of {list(fields)} in message')
    assert not problems, (f'voxpipe error for {path} at stage {res["stage"]}: '
                          f'{res["exc_type"]}: {res["msg"]!r}\n  - ' + '\n  - '.join(problems))
    return res


def good(tmp_path, name='f', version=1, endian='<', kind='nii', dtype='float32',
         shape=(5, 6, 7), **patch):
    parts = nib_parts(make_data(dtype, shape, seed=3), version, endian, kind.startswith('nii'))
    if patch:
        parts.patch(**patch)
    return parts


# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('kind', ['nii', 'nii.gz', 'pair', 'pair.gz'])
@pytest.mark.parametrize('keep', [0.5, 0.0])
def test_truncated_data(tmp_path, version, kind, keep):
    """Data cut short: load may succeed, data access must raise naming the data file."""
    parts = good(tmp_path, version=version, kind=kind)
    parts.data = parts.data[: int(len(parts.data) * keep)]
    p = write_parts(tmp_path / 't', parts, kind, open_with='hdr')
    check(p, nib_raises=True)


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('kind', ['nii', 'nii.gz'])
@pytest.mark.parametrize('size', [0.5, 10, 200, 347])
def test_truncated_header(tmp_path, version, kind, size):
    parts = good(tmp_path, version=version, kind=kind)
    b = bytes(parts.hdr)[: int(size)] if size >= 1 else bytes(parts.hdr)[: len(parts.hdr) // 2]
    p = str(tmp_path / ('h.' + kind))
    with open(p, 'wb') as f:
        f.write(gz(b) if kind.endswith('.gz') else b)
    check(p, stages=['load'])


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('kind', ['nii', 'nii.gz', 'pair'])
def test_wrong_magic(tmp_path, version, kind):
    parts = good(tmp_path, version=version, kind=kind, magic=b'bad')
    p = write_parts(tmp_path / 'm', parts, kind)
    check(p, fields=['magic'], stages=['load'], nib_raises=None)


@pytest.mark.parametrize('kind', ['nii.gz', 'pair.gz'])
def test_gz_name_on_plain_file(tmp_path, kind):
    parts = good(tmp_path, kind=kind)
    p = write_parts(tmp_path / 'plain', parts, kind.replace('.gz', ''))
    q = p + '.gz'
    os.rename(p, q)
    if kind == 'pair.gz':
        os.rename(p[:-4] + '.img', p[:-4] + '.img.gz')
    check(q, stages=['load'], nib_raises=True)


def test_gz_header_plain_img_pair(tmp_path):
    """.hdr.gz is gzip but the .img.gz partner is not."""
    parts = good(tmp_path, kind='pair.gz')
    p = write_parts(tmp_path / 'mixed', parts, 'pair.gz')
    img = p[:-7] + '.img.gz'
    raw = gzip.decompress(open(img, 'rb').read())
    open(img, 'wb').write(raw)
    res = check(p, nib_raises=True)
    assert img in res['msg'], f'the .img.gz path is not named: {res["msg"]!r}'


@pytest.mark.parametrize('version,dim', [
    (2, [3, 2**62, 2**62, 4, 1, 1, 1, 1]),
    (2, [4, 2**31, 2**31, 2**31, 2**31, 1, 1, 1]),
    (2, [3, 2**63 - 1, 2, 1, 1, 1, 1, 1]),
    (1, [7, 32767, 32767, 32767, 32767, 32767, 32767, 32767]),
])
def test_dims_product_overflows_int64(tmp_path, version, dim):
    parts = good(tmp_path, version=version, dim=dim)
    p = write_parts(tmp_path / 'o', parts, 'nii')
    check(p, fields=['dim', 'shape', 'size'], nib_raises=None)


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('kind', ['nii', 'nii.gz'])
def test_data_larger_than_file(tmp_path, version, kind):
    parts = good(tmp_path, version=version, dim=[3, 1000, 1000, 100, 1, 1, 1, 1])
    p = write_parts(tmp_path / 'big', parts, kind)
    check(p, nib_raises=True, stages=['load', 'asarray'])


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('off', [100, 1, 200.5])
def test_vox_offset_inside_header(tmp_path, version, off):
    parts = good(tmp_path, version=version, vox_offset=off)
    p = write_parts(tmp_path / 'vo', parts, 'nii')
    check(p, fields=['vox_offset'], stages=['load'])


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('kind', ['nii', 'nii.gz'])
def test_vox_offset_beyond_eof(tmp_path, version, kind):
    parts = good(tmp_path, version=version, vox_offset=1 << 20)
    p = write_parts(tmp_path / 'vo', parts, kind)
    check(p, nib_raises=True)


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('kind', ['nii', 'nii.gz', 'pair'])
def test_extension_size_past_eof(tmp_path, version, kind):
    parts = good(tmp_path, version=version, kind=kind)
    parts.ext = ext_bytes([(6, b'abc', 1 << 20)], pad=False)[:4 + 16]
    if kind.startswith('nii'):
        parts.patch(vox_offset=len(parts.hdr) + len(parts.ext))
        parts.data = b''  # the extension claims everything and more
    p = write_parts(tmp_path / 'e', parts, kind)
    check(p, fields=['extension', 'esize'], stages=['load'], nib_raises=True)


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('code', [0, 3, 1536, 32767])
def test_unknown_datatype(tmp_path, version, code):
    parts = good(tmp_path, version=version, datatype=code)
    p = write_parts(tmp_path / 'dt', parts, 'nii')
    check(p, fields=['datatype'], stages=['load'], nib_raises=True)


@pytest.mark.parametrize('version', [1, 2])
def test_nonfinite_inter(tmp_path, version):
    parts = good(tmp_path, version=version, scl_slope=2.0, scl_inter=np.nan)
    p = write_parts(tmp_path / 'si', parts, 'nii')
    check(p, fields=['scl_inter'], stages=['load'], nib_raises=True)


def test_corrupt_eol_check(tmp_path):
    parts = good(tmp_path, version=2, eol_check=[1, 2, 3, 4])
    p = write_parts(tmp_path / 'eol', parts, 'nii')
    check(p, fields=['eol_check'], stages=['load'], nib_raises=True)


def test_invalid_quaternion(tmp_path):
    parts = good(tmp_path, qform_code=1, sform_code=0, quatern_b=1.5)
    p = write_parts(tmp_path / 'q', parts, 'nii')
    check(p, fields=['quatern', 'qform'], stages=['load'], nib_raises=True)


def _corrupt_deflate(raw: bytes, where: float) -> bytes:
    b = bytearray(raw)
    i = 10 + int((len(b) - 18) * where)
    for k in range(i, min(i + 16, len(b) - 8)):
        b[k] ^= 0xA5
    return bytes(b)


@pytest.mark.parametrize('version', [1, 2])
@pytest.mark.parametrize('where', [0.02, 0.5, 0.95])
def test_corrupt_gzip_stream(tmp_path, version, where):
    parts = good(tmp_path, version=version, dtype='int16', shape=(40, 40, 40))
    p = write_parts(tmp_path / 'c', parts, 'nii.gz')
    open(p, 'wb').write(_corrupt_deflate(open(p, 'rb').read(), where))
    check(p, nib_raises=None)


@pytest.mark.parametrize('what', ['crc', 'isize'])
@pytest.mark.parametrize('kind', ['nii.gz', 'pair.gz'])
def test_corrupt_gzip_trailer(tmp_path, what, kind):
    parts = good(tmp_path, kind=kind, dtype='int16', shape=(20, 20, 20))
    p = write_parts(tmp_path / 'crc', parts, kind, open_with='hdr')
    target = p if kind == 'nii.gz' else p[:-7] + '.img.gz'
    b = bytearray(open(target, 'rb').read())
    k = -8 if what == 'crc' else -4
    b[k] ^= 0xFF
    open(target, 'wb').write(bytes(b))
    assert not outcome(lambda: gzip.decompress(bytes(b)))[0]  # Python's gzip rejects it
    res = check(p, nib_raises=None)
    assert target in res['msg']


@pytest.mark.parametrize('kind', ['nii.gz', 'pair.gz'])
def test_gzip_stream_cut(tmp_path, kind):
    parts = good(tmp_path, kind=kind, dtype='int16', shape=(20, 20, 20))
    p = write_parts(tmp_path / 'cut', parts, kind, open_with='img')
    b = open(p, 'rb').read()
    open(p, 'wb').write(b[: len(b) * 2 // 3])
    check(p, nib_raises=True)


@pytest.mark.parametrize('name', ['empty.nii', 'empty.nii.gz', 'empty.hdr'])
def test_empty_file(tmp_path, name):
    p = tmp_path / name
    p.write_bytes(b'')
    if name.endswith('.hdr'):
        (tmp_path / 'empty.img').write_bytes(b'')
    check(str(p), stages=['load'], nib_raises=True)


@pytest.mark.parametrize('name', ['missing.nii', 'missing.nii.gz', 'missing.hdr', 'missing.img'])
def test_missing_file(tmp_path, name):
    check(str(tmp_path / name), kind='file_not_found', stages=['load'], nib_raises=True)


@pytest.mark.parametrize('kind', ['pair', 'pair.gz'])
def test_missing_img_partner(tmp_path, kind):
    parts = good(tmp_path, kind=kind)
    p = write_parts(tmp_path / 'nop', parts, kind)
    img = p.replace('.hdr', '.img')
    os.remove(img)
    res = check(p, kind='file_not_found', nib_raises=True)
    assert img in res['msg'], f'missing partner {img} not named: {res["msg"]!r}'


def test_missing_hdr_partner(tmp_path):
    parts = good(tmp_path, kind='pair')
    p = write_parts(tmp_path / 'noh', parts, 'pair', open_with='img')
    os.remove(p.replace('.img', '.hdr'))
    check(p, kind='file_not_found', stages=['load'], nib_raises=True)


def test_directory_instead_of_file(tmp_path):
    d = tmp_path / 'dir.nii'
    d.mkdir()
    check(str(d), stages=['load'], nib_raises=True)


@pytest.mark.parametrize('name', ['x.txt', 'x.nii.bz3', 'x'])
def test_unsupported_extension(tmp_path, name):
    parts = good(tmp_path)
    p = write_parts(tmp_path / 'x', parts, 'nii')
    q = str(tmp_path / name)
    os.rename(p, q)
    check(q, stages=['load'], nib_raises=True)


def test_random_bytes(tmp_path):
    rng = np.random.default_rng(0)
    for i in range(5):
        p = tmp_path / f'rand{i}.nii'
        p.write_bytes(rng.integers(0, 256, 1000 + i * 333, dtype=np.uint8).tobytes())
        check(str(p), stages=['load'], nib_raises=True)


@pytest.mark.parametrize('seed', range(6))
def test_bit_flips_never_crash(tmp_path, seed):
    """Random header corruption: voxpipe may load or raise (ValueError/OSError), never crash."""
    rng = np.random.default_rng(seed)
    version = 1 + seed % 2
    parts = good(tmp_path, version=version)
    b = bytearray(bytes(parts.hdr) + parts.ext + parts.data)
    for _ in range(8):
        i = int(rng.integers(0, len(parts.hdr)))
        b[i] ^= 1 << int(rng.integers(0, 8))
    p = tmp_path / f'flip{seed}.nii'
    p.write_bytes(bytes(b))
    res = run_voxpipe(p)
    if res['stage'] != 'done':
        assert res['is_value_error'] or res['is_os_error'], res
        assert os.fspath(p) in res['msg'], res



EXIT_SCRIPT = r"""
import sys, numpy as np, nibabel as nib, voxpipe as vp
d = sys.argv[1]
a = np.random.default_rng(0).standard_normal((64, 64, 32)).astype(np.float32)
nib.save(nib.Nifti1Image(a, np.eye(4)), d + '/e.nii')
nib.save(nib.Nifti1Image(a, np.eye(4)), d + '/e.nii.gz')
for p in (d + '/e.nii', d + '/e.nii.gz'):
    img = vp.load(p)
    img.get_fdata(); img.get_fdata(dtype=np.float32); np.asarray(img.dataobj); img.dataobj[..., 3]
    vp.load(p).get_fdata()  # image dropped right away
vp.save(a, d + '/o.nii.gz', affine=np.eye(4))
try:
    vp.load(d + '/missing.nii')
except OSError:
    pass
print('ok', flush=True)
sys.exit(int(sys.argv[2]))
"""


@pytest.mark.parametrize('code', [0, 1])
def test_interpreter_exits_after_use(tmp_path, code):
    """The process must terminate after using voxpipe (a thread pool left waiting on a condition
    variable that is destroyed by static destructors hangs exit())."""
    try:
        cp = subprocess.run([sys.executable, '-c', EXIT_SCRIPT, str(tmp_path), str(code)],
                            capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail('python did not exit within 60 s after using voxpipe (hang at exit)')
    assert cp.returncode == code, (cp.returncode, cp.stdout[-1000:], cp.stderr[-2000:])
    assert 'ok' in cp.stdout


# ---------------------------------------------------------------------------------------------
# Messages name the field that is wrong, and the flag that would read the file (issue 17).

@pytest.mark.parametrize('version', [1, 2])
def test_dim0_out_of_range_names_dim0_not_vox_offset(tmp_path, version):
    parts = good(tmp_path, version=version)
    parts.patch(dim=[8, 5, 6, 7, 1, 1, 1, 1])
    p = write_parts(tmp_path / 'd8', parts, 'nii')
    res = check(p, fields=['dim[0]'], stages=['load'], nib_raises=True)
    assert 'vox_offset' not in res['msg'] and 'vox offset' not in res['msg']


@pytest.mark.parametrize('token', ['nan', 'inf', 'NaN', 'Infinity'])
def test_a_matrix_starting_with_nan_or_inf_is_a_bad_value_not_a_missing_file(tmp_path, token):
    from voxpipe import transforms
    p = tmp_path / 'm.txt'
    p.write_text(f'{token} 0 0 0\n0 1 0 0\n0 0 1 0\n0 0 0 1\n')
    with pytest.raises(vp_errors().FormatError) as info:
        transforms.load_affine(p)
    message = str(info.value)
    assert 'row 1' in message and repr(token) in message and 'finite' in message
    assert 'no such file' not in message


def test_dicom_without_preamble_names_force(tmp_path):
    import voxpipe as vp
    pydicom = pytest.importorskip('pydicom')
    from pydicom.data import get_testdata_file
    raw = open(get_testdata_file('CT_small.dcm'), 'rb').read()
    p = tmp_path / 'no_preamble.dcm'
    p.write_bytes(raw[132:])  # the File Meta Information first, no preamble, no "DICM"
    with pytest.raises(vp.errors.FormatError) as info:
        vp.dicom.read(p)
    message = str(info.value)
    assert os.fspath(p) in message and 'preamble' in message and 'force=True' in message
    assert vp.dicom.read(p, force=True).Rows == pydicom.dcmread(p, force=True).Rows


def vp_errors():
    import voxpipe.errors
    return voxpipe.errors


# ---------------------------------------------------------------------------------------------
# voxpipe's file-format errors are also nibabel's ImageFileError (issue 31, item 11): code
# written for nib.load (nibabel's own test_load_bad_compressed_extension) catches them.

def test_file_format_errors_are_nibabel_image_file_errors_and_keep_their_bases():
    from nibabel.filebasedimages import ImageFileError
    errors = vp_errors()
    bases = {
        errors.FormatError: (ValueError,),
        errors.TruncatedError: (ValueError, OSError),
        errors.CorruptError: (ValueError, OSError),
    }
    for cls, builtins in bases.items():
        e = cls("f.nii: magic: bad", "f.nii", "magic", 344)
        assert isinstance(e, ImageFileError) and isinstance(e, errors.VoxpipeError)
        assert all(isinstance(e, b) for b in builtins), cls
    # Not a damaged image file: nibabel raises no ImageFileError for these either.
    for cls in (errors.UnsupportedError, errors.LimitError, errors.InvalidArgumentError,
                errors.VoxpipeIOError, errors.VoxpipeFileNotFoundError):
        assert not issubclass(cls, ImageFileError), cls
    assert issubclass(errors.VoxpipeFileNotFoundError, FileNotFoundError)


@pytest.mark.parametrize('extension', ['.gz'])
def test_nibabels_load_bad_compressed_extension_under_acceleration(tmp_path, extension):
    """nibabel's test_loadsave.py::test_load_bad_compressed_extension, through voxpipe: with
    acceleration on, and voxpipe's own load, both caught as ImageFileError with nibabel's
    wording."""
    import voxpipe as vp
    from nibabel.filebasedimages import ImageFileError
    file_path = tmp_path / f'img.nii{extension}'
    file_path.write_bytes(b'bad')
    with vp.accelerate_nibabel():
        with pytest.raises(ImageFileError, match=r'.*is not a .* file'):
            nib.load(file_path)
    with pytest.raises(ImageFileError, match=r'.*is not a .* file') as info:
        vp.load(file_path)
    assert isinstance(info.value, vp.errors.FormatError)
    assert os.fspath(file_path) in str(info.value)


def _bad_files(tmp_path):
    """{name: (path, expected voxpipe class name, stage at which it raises)}."""
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    good_path = tmp_path / 'good.nii'
    nib.save(nib.Nifti1Image(a, np.eye(4)), good_path)
    raw = good_path.read_bytes()
    files = {
        'magic': (raw[:344] + b'bad\0' + raw[348:], 'FormatError', 'load'),
        'short_header': (raw[:200], 'TruncatedError', 'load'),
        'short_data': (raw[:400], 'TruncatedError', 'data'),
    }
    out = {}
    for name, (data, cls, stage) in files.items():
        p = tmp_path / f'{name}.nii'
        p.write_bytes(data)
        out[name] = (p, cls, stage)
    broken = bytearray(gzip.compress(raw))
    broken[20:40] = bytes(b ^ 0xA5 for b in broken[20:40])
    p = tmp_path / 'corrupt.nii.gz'
    p.write_bytes(bytes(broken))
    out['corrupt'] = (p, 'CorruptError', 'load_or_data')
    return out


@pytest.mark.parametrize('name', ['magic', 'short_header', 'short_data', 'corrupt'])
def test_except_image_file_error_catches_voxpipes_error_for_a_bad_file(tmp_path, name):
    import voxpipe as vp
    from nibabel.filebasedimages import ImageFileError
    path, cls, stage = _bad_files(tmp_path)[name]
    caught = None
    try:
        img = vp.load(path)
        assert stage != 'load', f'{name}: vp.load raised nothing'
        img.get_fdata()
    except ImageFileError as e:  # the nibabel user's handler, written for nib.load
        caught = e
    assert caught is not None, f'{name}: nothing raised'
    assert type(caught).__name__ == cls and isinstance(caught, vp.errors.VoxpipeError)
    assert os.fspath(path) in str(caught)
    if name == 'short_data':
        # The same file under acceleration: nib.load's image reads through voxpipe.
        with vp.accelerate_nibabel():
            with pytest.raises(ImageFileError) as info:
                nib.load(path).get_fdata()
        assert isinstance(info.value, vp.errors.TruncatedError)


def test_errors_pickle_round_trip_with_their_fields_and_bases():
    import pickle

    from nibabel.filebasedimages import ImageFileError
    errors = vp_errors()
    classes = [errors.VoxpipeError, errors.FormatError, errors.UnsupportedError,
               errors.TruncatedError, errors.CorruptError, errors.LimitError,
               errors.InvalidArgumentError, errors.VoxpipeIOError,
               errors.VoxpipeFileNotFoundError, errors.DeviceUnavailableError]
    for cls in classes:
        e = cls('/d/f.nii: data: expected 240 bytes (at byte 400)', '/d/f.nii', 'data', 400)
        e.note = 'kept'
        for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
            back = pickle.loads(pickle.dumps(e, protocol=protocol))
            assert type(back) is cls
            assert (str(back), back.path, back.field, back.offset, back.code) == (
                str(e), '/d/f.nii', 'data', 400, cls.code)
            assert back.note == 'kept'
            assert isinstance(back, ImageFileError) == isinstance(e, ImageFileError)
    # An error raised by voxpipe itself, not built by hand, survives too.
    import voxpipe as vp
    try:
        vp.load('/nonexistent/dir/x.nii')
    except errors.VoxpipeError as e:
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e) and back.path == e.path
    else:
        pytest.fail('vp.load of a missing file raised nothing')
