#!/usr/bin/env python
"""DICOM folder -> NIfTI + sidecars on a folder of many series: `voxpipe dcm2niix` and `voxpipe
dcm2nii` against dcm2niix, and against an earlier voxpipe (--old-package), in one run.

Writes the "DICOM to NIfTI conversion" section of BENCHMARKS.md (between its markers) and prints
it.

Input (bench/data/dicom_many/, made when missing): the offline MR series of the parity corpus
that dcm2niix and voxpipe both convert (heudiconv's Siemens mosaic DWI, fieldmap, scouts and
2D series; nibabel's Siemens DWI pair and Philips MPRAGE; pydicom's MR_small) and COPIES copies of
bench_dicom.py's 176-slice MR series, each with its own UIDs and series number: many small
series and a few large ones, as a session's folder holds them.

Rows (each command in a fresh process, page cache warm, rounds interleaved, output into an
empty folder each time; medians of --repeat):
  dcm2niix -f %s_%p
  voxpipe dcm2niix -f %s_%p: all threads, and one (VOXPIPE_NUM_THREADS=1)
  voxpipe dcm2nii -f %s_%p
  the same dcm2nii from --old-package DIR (an unpacked wheel of an earlier voxpipe), when given
each with -z n (uncompressed) and -z y (gzip).

Usage: .venv/bin/python bench/bench_dcm2nii.py [--repeat N] [--copies N] [--old-package DIR]
       [--output PATH]
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import (DATA, REPO, Parser, cpu_snapshot, git_state, other_work, other_work_brief,
                      publish, stamp, warm)

sys.path.insert(0, os.path.join(REPO, "tests", "python"))
import dcm2niix_parity as parity  # noqa: E402

BEGIN = "<!-- bench_dcm2nii: begin -->"
END = "<!-- bench_dcm2nii: end -->"
MANY = Path(DATA) / "dicom_many"
VOXPIPE = Path(sys.executable).parent / "voxpipe"
# The parity corpus' MR cases that both converters write (names of tests/python/dcm2niix_parity).
REAL = ("heudiconv b0dwiForFmap", "heudiconv 01-fmap_acq-3mm", "heudiconv 01-anat-scout",
        "heudiconv Phoenix", "heudiconv axasc35.dcm", "heudiconv phantom.dcm",
        "nibabel DWI b0/b1000", "nibabel philips_mprage.dcm.gz", "pydicom MR_small.dcm")


def dcm2niix_version():
    r = subprocess.run([parity.DCM2NIIX, "--version"], capture_output=True, text=True)
    return (r.stdout + r.stderr).strip().splitlines()[-1]


def make_inputs(copies):
    import pydicom
    from pydicom.uid import generate_uid
    if MANY.exists():
        return
    tmp = MANY.with_name("dicom_many.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    by_name = {c.name: c for c in parity.offline_cases()}
    for i, name in enumerate(REAL):
        if name in by_name:
            parity.materialize(by_name[name], tmp / f"real{i}")
    import bench_dicom
    bench_dicom.make_inputs(["explicit"])
    src = Path(bench_dicom.FOLDERS["explicit"])
    for k in range(copies):
        out = tmp / f"t1_copy{k}"
        out.mkdir(parents=True)
        series_uid = generate_uid()
        for f in sorted(src.iterdir()):
            ds = pydicom.dcmread(f)
            ds.SeriesInstanceUID = series_uid
            ds.SeriesNumber = 100 + k
            # A protocol of its own: dcm2niix stacks Siemens XA classic series that differ only
            # by series number into one 4D image (its -m 2), which these copies would be.
            ds.ProtocolName = ds.SeriesDescription = f"{ds.get('ProtocolName', 'T1')}_copy{k}"
            ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = generate_uid()
            ds.save_as(out / f.name, enforce_file_format=True)
    tmp.rename(MANY)


def command(row, out, old_package):
    env = dict(os.environ)
    z = "y" if row.endswith("-z y") else "n"
    if row.startswith("dcm2niix"):
        return [parity.DCM2NIIX, "-z", z, "-f", "%s_%p", "-o", out, str(MANY)], env
    if row.startswith("voxpipe dcm2niix"):
        if "1 thread" in row:
            env["VOXPIPE_NUM_THREADS"] = "1"
        return [str(VOXPIPE), "dcm2niix", "-z", z, "-f", "%s_%p", "-o", out, str(MANY)], env
    if row.startswith("voxpipe dcm2nii "):
        return [str(VOXPIPE), "dcm2nii", "-z", z, "-f", "%s_%p", "-o", out, str(MANY)], env
    # The earlier voxpipe: its launcher, with its package first on the path.
    env["PYTHONPATH"] = old_package
    launcher = next(Path(old_package).glob("*.data/scripts/voxpipe"))
    return [sys.executable, str(launcher), "dcm2nii", "-z", z, str(MANY), out], env


def run_once(row, old_package):
    with tempfile.TemporaryDirectory() as out:
        cmd, env = command(row, out, old_package)
        t = time.perf_counter()
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        elapsed = time.perf_counter() - t
        written = sorted(p.name for p in Path(out).iterdir())
    if r.returncode not in (0, 8, 11):
        raise SystemExit(f"{row}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return elapsed, written


def main():
    parser = Parser(__doc__, repeat=5)
    parser.add_argument("--copies", type=int, default=4,
                        help="copies of the 176-slice series (default %(default)s)")
    parser.add_argument("--old-package", help="an unpacked wheel of an earlier voxpipe")
    parser.add_argument("--old-label", default="an earlier build",
                        help="what the earlier voxpipe is, for the text (a commit, a release)")
    args = parser.parse()
    make_inputs(args.copies)
    files = [p for p in MANY.rglob("*") if p.is_file()]
    warm(*map(str, files))
    rows = []
    for z in ("n", "y"):
        rows += [f"dcm2niix -z {z}", f"voxpipe dcm2niix -z {z}", f"voxpipe dcm2niix, 1 thread, -z {z}",
                 f"voxpipe dcm2nii -z {z}"]
        if args.old_package:
            rows.append(f"voxpipe dcm2nii (earlier) -z {z}")
    before = cpu_snapshot()
    times = {r: [] for r in rows}
    written = {}
    for _ in range(args.repeat):
        for row in rows:
            t, names = run_once(row, args.old_package)
            times[row].append(t)
            written[row] = names
    use = other_work_brief(other_work(before, cpu_snapshot()))
    med = {r: statistics.median(v) for r, v in times.items()}
    size = sum(p.stat().st_size for p in files)
    series = sum(1 for n in written["dcm2niix -z n"] if n.endswith(".nii"))
    lines = [BEGIN, "## DICOM to NIfTI conversion: bench/bench_dcm2nii.py", "",
             f"{stamp()}; {git_state()}; medians of {args.repeat} fresh processes per row, rounds "
             f"interleaved, page cache warm. Other work on the machine: {use}.", "",
             f"Input: bench/data/dicom_many, {len(files)} files ({size / 2**20:.1f} MiB), "
             f"{series} series as dcm2niix writes them (the parity corpus' MR series and "
             f"{args.copies} copies of bench_dicom.py's 176-slice series), with sidecars (and "
             "bval/bvec); `-z n`: .nii uncompressed (the writes dominate), `-z y`: .nii.gz (what "
             "heudiconv and dcm2bids ask for; dcm2niix's own gzip, no pigz on PATH, voxpipe's "
             "parallel level-1 members).", "",
             f"dcm2niix {dcm2niix_version()}"
             + (f"; the earlier voxpipe: {args.old_label}." if args.old_package else "."), "",
             "| command | time | dcm2niix / command | files written |", "|---|---|---|---|"]
    for r in rows:
        ref = med[f"dcm2niix -z {r[-1]}"]
        lines.append(f"| {r} | {med[r] * 1000:.0f} ms | **{ref / med[r]:.2f}x** | "
                     f"{len(written[r])} |")
    lines += ["", END]
    publish(args.output, "\n".join(lines) + "\n", BEGIN, END)


if __name__ == "__main__":
    main()
