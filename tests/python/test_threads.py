"""Thread behaviour of the Python layer: the GIL is released while voxpipe reads, reads from
several Python threads at once give the same values as one at a time, and the default thread
count (0 or None) follows $VOXPIPE_NUM_THREADS, then $OMP_NUM_THREADS, then the CPUs this process
may run on, read at each call (docs/python.md "Thread count")."""

import os
import re
import subprocess
import threading
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from voxpipe import _core
from voxpipe._many import loading as _many

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get('VOXPIPE_CLI') or REPO / '.venv' / 'bin' / 'voxpipe')


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    rng = np.random.default_rng(7)
    data = rng.integers(-1000, 1000, size=(96, 96, 60, 12), dtype=np.int16)
    path = str(tmp_path_factory.mktemp("threads") / "series.nii.gz")
    img = nib.Nifti1Image(data, np.eye(4))
    img.header.set_slope_inter(0.5, 3.0)
    nib.save(img, path)
    return path


def test_gil_is_released_while_decoding(series):
    """While a thread decodes, Python code in another thread keeps running. With the GIL held
    through the decode, the counting loop would get at most a few switch intervals."""
    img = vp.load(series, threads=1)
    done = threading.Event()

    def read():
        for _ in range(3):
            img.get_fdata(dtype=np.float64, caching="unchanged")
        done.set()

    reader = threading.Thread(target=read)
    count = 0
    reader.start()
    while not done.is_set():
        count += 1
    reader.join()
    assert count > 200_000


def test_concurrent_reads_from_threads_are_equal(series):
    expected = nib.load(series).get_fdata(dtype=np.float32)
    results = [None] * 4
    errors = []

    def read(i):
        try:
            img = vp.load(series)
            results[i] = img.get_fdata(dtype=np.float32) if i % 2 else img.dataobj[..., 5]
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, r in enumerate(results):
        if i % 2:
            assert np.array_equal(r, expected)
        else:
            assert np.array_equal(r, np.asarray(nib.load(series).dataobj[..., 5]))


@pytest.fixture
def no_thread_env(monkeypatch):
    """Neither variable set: each test sets what it needs (monkeypatch restores them)."""
    monkeypatch.delenv('VOXPIPE_NUM_THREADS', raising=False)
    monkeypatch.delenv('OMP_NUM_THREADS', raising=False)
    return monkeypatch


def test_resolve_threads_keeps_a_count_given(no_thread_env):
    no_thread_env.setenv('VOXPIPE_NUM_THREADS', '3')
    assert [_core.resolve_threads(n) for n in (1, 2, 7)] == [1, 2, 7]


def test_resolve_threads_default_is_the_cpus_this_process_may_run_on(no_thread_env):
    assert _core.resolve_threads(0) == len(os.sched_getaffinity(0))


def test_voxpipe_num_threads_then_omp_num_threads_set_the_default(no_thread_env):
    cpus = len(os.sched_getaffinity(0))
    no_thread_env.setenv('OMP_NUM_THREADS', '5,1')  # OpenMP's list form: the first number
    assert _core.resolve_threads(0) == 5
    no_thread_env.setenv('VOXPIPE_NUM_THREADS', '3')  # first, whatever OMP_NUM_THREADS says
    assert _core.resolve_threads(0) == 3
    for invalid in ('', 'four', '0', '-2', '2.5'):  # ignored, as if unset
        no_thread_env.setenv('VOXPIPE_NUM_THREADS', invalid)
        assert _core.resolve_threads(0) == 5, invalid
        no_thread_env.setenv('OMP_NUM_THREADS', invalid)
        assert _core.resolve_threads(0) == cpus, invalid
        no_thread_env.setenv('OMP_NUM_THREADS', '5,1')


def test_load_many_splits_the_default_count(no_thread_env):
    """threads=None in load_many/iter_load is the resolved default, split between files."""
    no_thread_env.setenv('VOXPIPE_NUM_THREADS', '3')
    assert _many.plan_threads(None, None, 8) == (3, 1)
    assert _many.plan_threads(0, None, 1) == (1, 3)
    no_thread_env.delenv('VOXPIPE_NUM_THREADS')
    no_thread_env.setenv('OMP_NUM_THREADS', '5')
    assert _many.plan_threads(None, None, 1) == (1, 5)
    assert _many.plan_threads(2, None, 1) == (1, 2)


@pytest.mark.skipif(not CLI.is_file(), reason=f'{CLI} not built/installed')
def test_cli_bench_load_uses_the_default_count(series, no_thread_env):
    def decode_threads(*args):
        r = subprocess.run([str(CLI), 'bench-load', '--no-nibabel', '--repeat', '1', *args, series],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ))
        assert r.returncode == 0, r.stdout + r.stderr
        m = re.search(r'(\d+) decode threads?,', r.stdout)
        assert m, r.stdout
        return int(m.group(1))

    no_thread_env.setenv('VOXPIPE_NUM_THREADS', '3')
    no_thread_env.setenv('OMP_NUM_THREADS', '2')
    assert decode_threads() == 3
    assert decode_threads('--threads', '1') == 1
    no_thread_env.delenv('VOXPIPE_NUM_THREADS')
    no_thread_env.setenv('OMP_NUM_THREADS', '5,2')
    assert decode_threads() == 5
