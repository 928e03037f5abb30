"""Interrupted writes leave nothing behind: SIGINT, SIGTERM or SIGHUP during `voxpipe convert`
(or `resample -o`) removes the temporary file and ends the process by that signal (the shell
sees 128 + N), with a destination that existed before left as it was; after SIGKILL the next
write to the same destination removes the dead process's temporary, never a live one's; Ctrl-C
during `vp.save` raises KeyboardInterrupt within a fraction of a second, temporary removed.

The writes are made slow (gzip level 9 on one thread) so that a signal lands in the middle;
each test waits until the temporary holds data before it signals.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from voxpipe_commands import KINDS, command

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get('VOXPIPE_CLI') or REPO / '.venv' / 'bin' / 'voxpipe')
needs_cli = pytest.mark.skipif(not CLI.is_file(), reason=f'{CLI} not built/installed')

TIMEOUT = 60
SHAPE = (128, 128, 64, 16)  # int16: 32 MiB, a few seconds at level 9 on one thread
PREVIOUS = b'the previous output'


def slow_data() -> np.ndarray:
    # Small values in noise: deflate at level 9 searches long match chains on every byte.
    return np.random.default_rng(0).integers(0, 64, size=SHAPE, dtype=np.int16)


@pytest.fixture(scope='module')
def source(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp('interrupts') / 'in.nii'
    nib.Nifti1Image(slow_data(), np.eye(4)).to_filename(path)
    return path


def temporaries(dst: Path) -> list[Path]:
    return sorted(dst.parent.glob(dst.name + '.tmp-*'))


def default_signals(ignore=()):
    """For preexec_fn: the child starts with the default action for the three signals (a test
    run in the background may have inherited SIG_IGN for SIGINT), or SIG_IGN for `ignore`."""
    def reset():
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN if s in ignore else signal.SIG_DFL)
    return reset


def start(*args, ignore=()) -> subprocess.Popen:
    return subprocess.Popen([str(CLI), *map(os.fspath, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=default_signals(ignore))


def slow_convert(src: Path, dst: Path, ignore=()) -> subprocess.Popen:
    # --overwrite: some tests put a previous output at dst, which must survive the interruption.
    return start('convert', src, dst, '--level', '9', '--threads', '1', '--overwrite',
                 ignore=ignore)


def wait_for_temporary(proc: subprocess.Popen, dst: Path) -> Path:
    """The temporary of `proc`'s write, once it holds data."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        for t in temporaries(dst):
            m = re.fullmatch(re.escape(dst.name) + r'\.tmp-(\d+)-(\d+)', t.name)
            if m and int(m.group(1)) == proc.pid and t.stat().st_size > 0:
                return t
        if proc.poll() is not None:
            pytest.fail(f'the write ended before it could be interrupted: {proc.returncode} '
                        f'{proc.stderr.read().decode()}')
        time.sleep(0.01)
    proc.kill()
    pytest.fail('no temporary appeared')


@needs_cli
@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=lambda s: s.name)
def test_convert_interrupted_by_a_signal_leaves_nothing(source, tmp_path, sig):
    dst = tmp_path / 'out.nii.gz'
    dst.write_bytes(PREVIOUS)
    proc = slow_convert(source, dst)
    wait_for_temporary(proc, dst)
    proc.send_signal(sig)
    assert proc.wait(timeout=TIMEOUT) == -sig  # ended by the signal itself: WIFSIGNALED
    assert temporaries(dst) == []
    assert dst.read_bytes() == PREVIOUS


@pytest.mark.parametrize('kind', KINDS)
def test_a_write_past_the_file_size_limit_fails_and_leaves_nothing(source, tmp_path, kind):
    # Under `ulimit -f` a write past the limit raises SIGXFSZ, whose default action killed the
    # command at once and left its temporary. Both forms of the command (a C++ build's program,
    # pip's, which runs in Python) end with an io error naming the output instead, exit 4, with
    # the temporary removed and the previous output as it was.
    try:
        prefix, env = command(kind)
    except FileNotFoundError as e:
        pytest.skip(str(e))
    dst = tmp_path / 'out.nii'
    dst.write_bytes(PREVIOUS)

    def limited():  # as a shell starts a command after `ulimit -f 1024`
        default_signals()()
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    r = subprocess.run([*prefix, 'convert', source, dst, '--overwrite'], capture_output=True,
                       text=True, env=env, preexec_fn=limited, timeout=TIMEOUT)
    assert r.returncode == 4, (r.returncode, r.stderr)
    assert f'voxpipe convert: error (io): {dst}: write failed: File too large' in r.stderr
    assert temporaries(dst) == []
    assert dst.read_bytes() == PREVIOUS


@needs_cli
def test_an_ignored_hangup_does_not_stop_a_convert(source, tmp_path):
    # Under nohup (SIGHUP ignored) the write goes on and completes.
    dst = tmp_path / 'out.nii.gz'
    proc = slow_convert(source, dst, ignore=(signal.SIGHUP,))
    wait_for_temporary(proc, dst)
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=TIMEOUT) == 0, proc.stderr.read().decode()
    assert temporaries(dst) == []
    assert np.array_equal(np.asanyarray(nib.load(dst).dataobj), slow_data())


@needs_cli
def test_resample_output_interrupted_leaves_nothing(tmp_path):
    moving = tmp_path / 'm.nii'
    nib.Nifti1Image(np.random.default_rng(1).random((96, 96, 96, 6), np.float32),
                    np.eye(4)).to_filename(moving)
    dst = tmp_path / 'o.nii.gz'
    proc = start('resample', moving, '--reference', moving, '--order', '5', '-o', dst,
                 '--threads', '1')
    wait_for_temporary(proc, dst)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=TIMEOUT) == -signal.SIGINT
    assert sorted(p.name for p in tmp_path.iterdir()) == ['m.nii']


@needs_cli
def test_next_write_removes_the_temporary_of_a_killed_writer_only(source, tmp_path):
    dst = tmp_path / 'out.nii.gz'
    killed = slow_convert(source, dst)
    stale = wait_for_temporary(killed, dst)
    killed.kill()
    killed.wait(timeout=TIMEOUT)
    assert stale.exists()  # SIGKILL cannot be caught
    live = slow_convert(source, dst)
    running = wait_for_temporary(live, dst)
    try:
        r = subprocess.run([str(CLI), 'convert', source, dst], capture_output=True,
                           timeout=TIMEOUT)
        assert r.returncode == 0, r.stderr
        assert not stale.exists()
        assert running.exists()  # the temporary of a process still writing stays
        assert np.array_equal(np.asanyarray(nib.load(dst).dataobj), slow_data())
    finally:
        live.send_signal(signal.SIGTERM)
        live.wait(timeout=TIMEOUT)
    assert temporaries(dst) == []


SAVE = r"""
import glob, json, os, signal, sys, threading, time
import numpy as np
import voxpipe as vp

signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own Ctrl-C
dst, shape = sys.argv[1], tuple(json.loads(sys.argv[2]))
data = np.random.default_rng(0).integers(0, 64, size=shape, dtype=np.int16)
out = {}


def ctrl_c_once_writing():
    while not glob.glob(glob.escape(dst) + ".tmp-*"):
        time.sleep(0.002)
    out["signalled"] = time.monotonic()
    os.kill(os.getpid(), signal.SIGINT)


threading.Thread(target=ctrl_c_once_writing, daemon=True).start()
try:
    vp.save(data, dst, affine=np.eye(4), level=9, threads=1, gzip_layout=sys.argv[3])
    out["outcome"] = "returned"
    time.sleep(1)  # where a late KeyboardInterrupt lands
except KeyboardInterrupt:
    out["outcome"] = "KeyboardInterrupt"
    out["raised"] = time.monotonic()
out["temporaries"] = glob.glob(glob.escape(dst) + ".tmp-*")
with open(dst, "rb") as f:
    out["destination"] = f.read(100).decode("latin-1")
print("@@RESULT@@" + json.dumps(out), flush=True)
"""


@pytest.mark.parametrize('layout', ['single', 'members'])
def test_ctrl_c_during_save_raises_keyboard_interrupt(tmp_path, layout):
    dst = tmp_path / 'out.nii.gz'
    dst.write_bytes(PREVIOUS)
    cp = subprocess.run([sys.executable, '-c', SAVE, dst, json.dumps(SHAPE), layout],
                        capture_output=True, text=True, timeout=TIMEOUT)
    lines = [x for x in cp.stdout.splitlines() if x.startswith('@@RESULT@@')]
    assert lines, cp.stderr[-3000:]
    out = json.loads(lines[-1][len('@@RESULT@@'):])
    assert out['destination'] == PREVIOUS.decode(), 'the save went on to the end'
    assert out['temporaries'] == []
    assert out['outcome'] == 'KeyboardInterrupt', out
    assert out['raised'] - out['signalled'] < 1.0, out


@needs_cli
@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_convert_to_a_store_interrupted_leaves_nothing(source, tmp_path, sig):
    """The store's temporary folder (written by the Python package, which the command runs for
    a .nii.zarr OUT) goes too, and the process still ends by the signal."""
    pytest.importorskip('zarr')
    import voxpipe as vp
    dst = tmp_path / 'out.nii.zarr'
    vp.save(nib.Nifti1Image(np.zeros((2, 2, 2), np.int16), np.eye(4)), dst)  # a previous store
    before = sorted(p.relative_to(dst) for p in dst.rglob('*'))
    proc = subprocess.Popen(
        [str(CLI), 'convert', source, dst, '--codec', 'gzip', '--level', '9', '--threads', '1',
         '--overwrite'], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=default_signals(), env=dict(os.environ, VOXPIPE_PYTHON=sys.executable))
    deadline = time.monotonic() + TIMEOUT
    while not any(f.is_file() for t in tmp_path.glob('.out.nii.zarr.tmp-*')
                  for f in (t / '0' / 'c').rglob('*')):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f'no chunk was written before the end: {proc.stderr.read().decode()}')
        time.sleep(0.01)
    proc.send_signal(sig)
    assert proc.wait(timeout=TIMEOUT) == -sig, proc.stderr.read().decode()
    assert list(tmp_path.glob('.out.nii.zarr.tmp-*')) == []
    assert sorted(p.relative_to(dst) for p in dst.rglob('*')) == before
