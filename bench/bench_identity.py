#!/usr/bin/env python
"""What the check that a file has not changed since it was opened costs each read (issue 31,
docs/nifti.md "Files changed under an image").

Writes the "File identity check" section of BENCHMARKS.md (between its markers; the rest of the
file is left as it is) and prints it.

Input: a 256x256x256 int16 .nii (32 MiB, unscaled, random values), made in bench/data/ when
missing; read once first, so every read is from a warm page cache.

Each read takes one 2-D slice (128 KiB): `[:, :, k]` (contiguous) or `[:, k, :]` (256 runs of
512 B), k moving through the volume. Every case is measured twice, on the image as opened (its
identity recorded: each read checks the data file) and on a copy without the identity (nothing
to compare with, so nothing is checked; `_core.NiftiImage.header_identity/data_identity = None`).
Cases:
  reader    a kept `_core.Reader` reading into one preallocated buffer: the C++ read alone.
  proxy     `ArrayProxy[...]` as users slice (keep_file_open=None: a reader, hence an open of
            the file, per access).
  kept      `ArrayProxy[...]` with keep_file_open=True (one reader kept).
Timing: a batch of --reads reads per measurement; each round runs every case's checked and
unchecked batches back to back (which first alternates by round; the cases' order rotates), for
--rounds rounds; the table shows the median per-read time over rounds and the median of the
per-round differences (checked - unchecked), which pairs batches run moments apart.

The system calls a read makes are counted with strace (when installed): a child reads through a
kept reader N and 2N times; the difference, per read, by call.

Usage: .venv/bin/python bench/bench_identity.py [--rounds R] [--reads N] [--threads T]
       [--wait-idle [--max-wait S]] [--output PATH]
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

import benchlib
from benchlib import (Parser, cpu_snapshot, other_work, publish, settle, stamp, table_head,
                      versions_text, warm)

DATA = os.path.join(benchlib.DATA, "identity_256.nii")
N = 256
BEGIN = "<!-- identity benchmark: begin -->"
END = "<!-- identity benchmark: end -->"

STRACE_CHILD = r"""
import sys, numpy as np
import voxpipe as vp
from voxpipe import _core
core = _core.open(sys.argv[1])
reader = _core.Reader(core)
out = np.empty((256, 256), np.int16, order="F")
view = out.reshape(-1).view(np.uint8)
reader.read([(0, 1, 256), (0, 1, 256), (7, 1, 1)], "int16", False, True, False, view, 1)
print("start", flush=True)
for i in range(int(sys.argv[2])):
    reader.read([(0, 1, 256), (0, 1, 256), (i % 256, 1, 1)], "int16", False, True, False, view, 1)
"""


def make_data():
    if os.path.exists(DATA) and os.path.getsize(DATA) == 352 + N ** 3 * 2:
        return
    import nibabel as nib

    os.makedirs(os.path.dirname(DATA), exist_ok=True)
    data = np.random.default_rng(31).integers(-2000, 2000, (N, N, N), dtype=np.int16)
    img = nib.Nifti1Image(data, np.eye(4))
    img.header.set_slope_inter(1.0, 0.0)
    tmp = DATA[:-4] + ".tmp.nii"
    nib.save(img, tmp)
    os.replace(tmp, DATA)


def unchecked(core):
    """The same image without its files' identity: reads of it check nothing."""
    from voxpipe import _core

    copy = _core.open(core.header_path)
    copy.header_identity = None
    copy.data_identity = None
    return copy


def cases(threads):
    import voxpipe as vp
    from voxpipe import _core

    checked = _core.open(DATA)
    plain = unchecked(checked)
    assert checked.data_identity is not None and plain.data_identity is None
    out = np.empty((N, N), np.int16, order="F")
    view = out.reshape(-1).view(np.uint8)

    def reader_read(core, axis):
        reader = _core.Reader(core)

        def run(k):
            sel = [(0, 1, N)] * 3
            sel[axis] = (k, 1, 1)
            reader.read(sel, "int16", False, True, False, view, threads)
        return run

    def proxy_read(core, axis, keep):
        proxy = vp.ArrayProxy(core, threads, keep_file_open=keep)

        def run(k):
            proxy[(slice(None),) * axis + (k,)]
        return run

    out_cases = {}
    for axis, label in ((2, "[:, :, k]"), (1, "[:, k, :]")):
        for name, make in (("reader", lambda c, a=axis: reader_read(c, a)),
                           ("proxy", lambda c, a=axis: proxy_read(c, a, None)),
                           ("kept", lambda c, a=axis: proxy_read(c, a, True))):
            out_cases[(name, label, True)] = make(checked)
            out_cases[(name, label, False)] = make(plain)
    # Both read the same values.
    for (name, label, on), run in out_cases.items():
        run(5)
    a = vp.ArrayProxy(checked, threads)[:, :, 9]
    b = vp.ArrayProxy(plain, threads)[:, :, 9]
    assert np.array_equal(a, b) and np.array_equal(a, np.asarray(vp.load(DATA).dataobj[:, :, 9]))
    return out_cases


def measure(rounds, reads, threads):
    """{case: [seconds per read, one per round]}: each case's checked and unchecked batches run
    back to back (which first alternates by round), the cases in an order rotating by round."""
    runs = cases(threads)
    pairs = list(dict.fromkeys(key[:2] for key in runs))
    per_read = {k: [] for k in runs}
    for r in range(rounds):
        order = pairs[r % len(pairs):] + pairs[:r % len(pairs)]
        for pair in order:
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                run = runs[pair + (on,)]
                t0 = time.perf_counter()
                for i in range(reads):
                    run(i % N)
                per_read[pair + (on,)].append((time.perf_counter() - t0) / reads)
    return per_read


def count_syscalls(reads):
    """{call: count per read} from strace -c over a child making `reads` and 2 `reads` reads
    through a kept reader, or None without strace."""
    if not shutil.which("strace"):
        return None

    def counts(n):
        out = subprocess.run(["strace", "-f", "-c", "-o", "/dev/stdout", "-e", "trace=!futex",
                              sys.executable, "-c", STRACE_CHILD, DATA, str(n)],
                             capture_output=True, text=True, check=True).stdout
        table = {}
        for line in out.splitlines():
            m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", line)
            if m and m.group(2) != "total":
                table[m.group(2)] = int(m.group(1))
        return table

    one, two = counts(reads), counts(2 * reads)
    diff = {call: (two.get(call, 0) - one.get(call, 0)) / reads for call in set(one) | set(two)}
    return {call: n for call, n in sorted(diff.items()) if abs(n) >= 0.5}


def report(per_read, syscalls, rounds, reads, threads, busy):
    us = 1e6
    lines = [BEGIN, "", "## File identity check: bench/bench_identity.py", "",
             f"{stamp()}; " + versions_text(["numpy", "voxpipe"]) + f"; reader threads={threads}. "
             "Other work on the machine during the run: "
             f"{busy:.0f}% of the cores.", "",
             "Every read checks that the data file is the one the image was opened from "
             "(docs/nifti.md, \"Files changed under an image\"). One 2-D slice (128 KiB of int16) "
             "of a 256x256x256 .nii from a warm page cache; median time per read over "
             f"{rounds} interleaved rounds of {reads} reads, the image as opened (checked) and a "
             "copy without its identity (unchecked); the difference is the median of the "
             "per-round differences.", "",
             *table_head("read", "slice", "checked", "unchecked", "check's cost",
                         "share of the read")]
    labels = {"reader": "kept `_core.Reader`, into one buffer",
              "proxy": "`proxy[...]`, keep_file_open=None (an open per access)",
              "kept": "`proxy[...]`, keep_file_open=True"}
    for name in ("reader", "proxy", "kept"):
        for label in ("[:, :, k]", "[:, k, :]"):
            on, off = per_read[(name, label, True)], per_read[(name, label, False)]
            m_on, m_off = statistics.median(on), statistics.median(off)
            diff = statistics.median(a - b for a, b in zip(on, off))
            lines.append(f"| {labels[name]} | `{label}` | {m_on * us:.1f} us | {m_off * us:.1f} us | "
                         f"{diff * us:+.2f} us | {diff / m_off * 100:+.1f}% |")
    if syscalls is not None:
        lines += ["", "System calls per read through a kept reader (strace -c, the difference "
                  "between a child making N and 2N reads, per read): " +
                  ", ".join(f"{call} {n:g}" for call, n in syscalls.items()) + "."]
    lines += ["", END]
    return "\n".join(lines) + "\n"


def main():
    ap = Parser(__doc__, wait_idle=True)
    ap.add_argument("--rounds", type=int, default=101)
    ap.add_argument("--reads", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse()
    make_data()
    settle(args)
    warm(DATA)
    before = cpu_snapshot()
    per_read = measure(args.rounds, args.reads, args.threads)
    busy = other_work(before, cpu_snapshot())["share"]
    syscalls = count_syscalls(2000)
    text = report(per_read, syscalls, args.rounds, args.reads, args.threads, busy)
    publish(args.output, text, BEGIN, END)


if __name__ == "__main__":
    main()
