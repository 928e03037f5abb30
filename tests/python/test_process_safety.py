"""Process life cycle: the interpreter exits with its own status while voxpipe reads run in
daemon threads, and a forked child (multiprocessing's fork start method, PyTorch DataLoader
workers) reads images its parent was reading at the moment of the fork.

Each case runs in a fresh interpreter under a timeout, so that an abort shows as a signal and a
hang as a failure instead of a blocked test run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp

TIMEOUT = 60


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Images of a few MiB (a whole read takes tens of ms), one per data layout."""
    d = tmp_path_factory.mktemp("process_safety")
    data = np.random.default_rng(17).integers(0, 1000, size=(96, 96, 64, 4), dtype=np.int16)
    img = nib.Nifti1Image(data, np.eye(4))
    paths = {
        "plain": d / "plain.nii",
        # One member without sizes: inflated front to back, or in parallel when whole (it is
        # over the 2 MiB of compressed data the parallel engine needs).
        "single": d / "single.nii.gz",
        "members": d / "members.nii.gz",
        "indexed": d / "indexed.nii.gz",
        "other": d / "other.nii.gz",
    }
    nib.save(img, paths["plain"])
    nib.save(img, paths["single"])
    nib.save(img, paths["indexed"])
    vp.gz.build_index(paths["indexed"])
    vp.save(img, paths["members"])
    small = np.random.default_rng(18).normal(size=(20, 21, 22)).astype(np.float32)
    nib.save(nib.Nifti1Image(small, np.diag([2.0, 2.0, 2.0, 1.0])), paths["other"])
    try:
        from test_dicom_series import write_series
    except Exception:  # noqa: BLE001 - pydicom missing: no DICOM case
        pass
    else:
        paths["dicom"] = d / "dicom"
        paths["dicom"].mkdir()
        write_series(str(paths["dicom"]), n=32, rows=96, cols=96)
    return {k: str(v) for k, v in paths.items()}


def run_script(script: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    package_parent = os.path.dirname(os.path.dirname(vp.__file__))
    env["PYTHONPATH"] = os.pathsep.join([package_parent] + [p for p in [env.get("PYTHONPATH")] if p])
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], env=env,
                              capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the script did not end within {TIMEOUT} s (hang); stderr:\n{e.stderr}")


def describe(proc: subprocess.CompletedProcess) -> str:
    how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"status {proc.returncode}"
    return f"ended with {how}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"


# Daemon threads read in every way voxpipe offers while the main thread ends. CPython ends a
# daemon thread when it takes the GIL back after finalization began; reads are kept going until
# then, and an object collected late in finalization holds the interpreter there for a moment,
# so that reads do end in that window every run.
EXIT_SCRIPT = r"""
import json, sys, threading, time
import numpy as np
import voxpipe as vp

files = json.loads(sys.argv[1])
how = sys.argv[2]
done = {}
names = []

def loop(name, read):
    names.append(name)
    def run():
        while True:
            read()
            done[name] = done.get(name, 0) + 1
    threading.Thread(target=run, name=name, daemon=True).start()

for key in ("plain", "single", "members", "indexed"):
    for threads in (1, 2, 0):
        loop(f"{key}-get_fdata-{threads}",
             lambda p=files[key], t=threads: vp.load(p, threads=t).get_fdata())
    kept = vp.load(files[key], threads=2, keep_file_open=True)
    loop(f"{key}-slices", lambda img=kept: [img.dataobj[..., t] for t in range(4)])
paths = [files[k] for k in ("single", "members", "other")]
loop("load_many", lambda: vp.load_many(paths, threads=2))
if "dicom" in files:
    loop("dicom", lambda: vp.load_dicom(files["dicom"], threads=2).get_fdata())
loop("load_batch", lambda: vp.load_batch([files["single"], files["members"]], threads=2))
# An iterator left running: its own daemon workers read on.
iterator = vp.iter_load(paths * 1000, threads=2, prefetch=4)
next(iterator)
eye = np.eye(4)
loop("resample", lambda: vp.resample(files["members"], files["other"], eye, order=1))

deadline = time.monotonic() + 30
while len(done) < len(names) and time.monotonic() < deadline:
    time.sleep(0.01)
if len(done) < len(names):
    sys.exit(f"only {sorted(done)} of {names} read anything")

class LateInFinalization:
    def __del__(self):
        time.sleep(0.3)

keep_finalizing = LateInFinalization()
print("exiting", flush=True)
if how == "sys.exit":
    sys.exit(3)
"""


@pytest.mark.parametrize("how,status", [("return", 0), ("sys.exit", 3)])
def test_interpreter_exits_while_daemon_threads_read(files, how, status):
    proc = run_script(EXIT_SCRIPT, json.dumps(files), how)
    assert "exiting" in proc.stdout, describe(proc)
    assert proc.returncode == status, describe(proc)
    assert "terminate called" not in proc.stderr, describe(proc)
    assert "Fatal Python error" not in proc.stderr, describe(proc)


# The thread that finalizes the interpreter goes on: reads and a write from a finalizer run
# during finalization (the GIL released and taken back, and the write's interrupt checks) run to
# their end, while CPython would end any other thread doing the same.
LATE_IO_SCRIPT = r"""
import gc, json, os, sys
import numpy as np
import voxpipe as vp

files = json.loads(sys.argv[1])
out = sys.argv[2]

class ReadsAndWritesLate:
    def __del__(self):
        finalizing = sys.is_finalizing()
        img = vp.load(files["single"], threads=2)
        data = img.get_fdata(dtype=np.float32)
        # zlib on one thread: long enough for the write to check for interrupts
        vp.save(img, out, threads=1, level=6, gzip_layout="single")
        same = np.array_equal(vp.load(out).get_fdata(dtype=np.float32), data)
        os.write(1, b"late io ok\n" if same and finalizing else
                 f"finalizing {finalizing}, same {same}\n".encode())

# An unreachable cycle, collected by the interpreter's last collection, after finalization
# began and before the modules are torn down (no collection comes earlier).
gc.set_threshold(10**9)
late = ReadsAndWritesLate()
late.cycle = late
del late
"""


def test_finalizing_thread_still_reads_and_writes(files, tmp_path):
    out = tmp_path / "late.nii.gz"
    proc = run_script(LATE_IO_SCRIPT, json.dumps(files), str(out))
    assert proc.returncode == 0 and "late io ok" in proc.stdout, describe(proc)
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


# A thread reads the image (whole and by volume) without pause while the main thread forks
# children; each child reads the same image, a new one, and many files through load_many and
# iter_load (the thread pool it inherited), and compares every value with nibabel's.
FORK_SCRIPT = r"""
import json, multiprocessing, os, sys, threading, time
import nibabel as nib
import numpy as np
import voxpipe as vp

files = json.loads(sys.argv[1])
key, threads = sys.argv[2], int(sys.argv[3])
path, other = files[key], files["other"]
ref = np.asanyarray(nib.load(path).dataobj)
ref_other = nib.load(other).get_fdata(dtype=np.float32)

img = vp.load(path, threads=threads, keep_file_open=True)
reader = img.dataobj._gzip_reader()
if key in ("members", "indexed") and not (reader and reader.random_access):
    sys.exit(f"{key}: expected a random-access reader")
if key == "single" and reader.random_access:
    sys.exit("single: expected a sequential reader")
reads = [0]

def read_on():
    while True:
        img.get_fdata(caching="unchanged", dtype=np.float32)
        img.dataobj[..., 1]
        reads[0] += 1

threading.Thread(target=read_on, daemon=True).start()

def child():
    ok = (np.array_equal(img.dataobj[..., 2], ref[..., 2])
          and np.array_equal(img.get_fdata(caching="unchanged", dtype=np.float32), ref)
          and np.array_equal(vp.load(other, threads=2).get_fdata(dtype=np.float32), ref_other))
    many = vp.load_many([other, path], threads=2)
    ok = ok and all(np.array_equal(a, r) for a, r in zip(many, [ref_other, ref]))
    ok = ok and all(np.array_equal(a, ref_other) for a in vp.iter_load([other] * 2, threads=2))
    os._exit(0 if ok else 1)

ctx = multiprocessing.get_context("fork")
for k in range(3):
    seen = reads[0]
    while reads[0] == seen:  # the reader thread is between two reads, busy
        time.sleep(0.001)
    time.sleep(0.003 * k)
    proc = ctx.Process(target=child)
    proc.start()
    proc.join(20)
    if proc.is_alive():
        proc.kill()
        print(f"fork {k}: the child hung", flush=True)
        os._exit(2)
    if proc.exitcode != 0:
        print(f"fork {k}: the child ended with {proc.exitcode} (1: wrong values)", flush=True)
        os._exit(3)
print("ok", flush=True)
os._exit(0)
"""


@pytest.mark.parametrize("key,threads", [
    ("plain", 2),
    ("single", 1),    # front to back, the reader's stream and lock in use at the fork
    ("single", 2),    # whole reads inflate in parallel on the pool
    ("members", 2),
    ("indexed", 2),
])
def test_forked_child_reads_what_its_parent_was_reading(files, key, threads):
    proc = run_script(FORK_SCRIPT, json.dumps(files), key, str(threads))
    assert proc.returncode == 0 and "ok" in proc.stdout, describe(proc)


ITERATOR_SCRIPT = r"""
import json, multiprocessing, os, sys
import nibabel as nib
import numpy as np
import voxpipe as vp

files = json.loads(sys.argv[1])
paths = [files["single"], files["members"]] * 50
it = vp.iter_load(paths, dtype=None, threads=2, prefetch=4)
first = next(it)

def child():
    try:
        next(it)
    except RuntimeError as e:
        ok = "forked child" in str(e)
    else:
        ok = False
    it.close()
    ref = np.asanyarray(nib.load(files["members"]).dataobj)
    ok = ok and all(np.array_equal(a, ref) for a in vp.iter_load([files["members"]] * 3, dtype=None))
    os._exit(0 if ok else 1)

proc = multiprocessing.get_context("fork").Process(target=child)
proc.start()
proc.join(20)
if proc.is_alive():
    proc.kill()
    print("the child hung", flush=True)
    os._exit(2)
print("ok" if proc.exitcode == 0 else f"child ended with {proc.exitcode}", flush=True)
it.close()
os._exit(0)
"""


def test_forked_child_cannot_wait_on_its_parents_iterator(files):
    """An iter_load iterator's file workers stay in the parent: in the child, next() raises
    instead of waiting for results nobody makes, and a new iterator works."""
    proc = run_script(ITERATOR_SCRIPT, json.dumps(files))
    assert proc.returncode == 0 and "ok" in proc.stdout, describe(proc)
