#!/usr/bin/env python
"""Scaling past 2 cores: voxpipe at 1, 2, 4, ... N threads (N = os.cpu_count(), always
included) on each multi-threaded path, in one run.

Writes the "Scaling (N cores)" section of BENCHMARKS.md (between its own markers, one section
per core count, so a 2-core and a 16-core run stand side by side; the rest of the file is left
as it is) and prints it.

Cases, each with threads=k:
  decode    a plain single-member .nii.gz (one gzip member, no index: index=False) to float32:
            vp.load(path, threads=k, index=False).get_fdata(dtype=float32). The file:
            bench/data/bold_4d.nii.gz (make_data.py, gzip -6, 171 MB), or t1_3d.nii.gz (12 MB)
            with --quick, or --plain PATH.
  decode_nib1  the same on the same data as nibabel writes it (nibabel's own gzip writer, zlib
            level 1: bench_gzip.write_as_nibabel, bench/data/gz/<name>_nib1.nii.gz, made when
            missing). Level-1 streams keep unknown window bytes in play far longer than gzip -6
            ones, so the parallel inflate scales differently on them.
  many      bench_many.py's T1-size .nii.gz files (nibabel level 1, 12 MB each) through
            vp.iter_load(paths, threads=k), each array dropped after one look: --files (40;
            --quick 8).
  index     vp.gz.build_index(file of decode, exact=True, threads=k): the exact seek index
            (points placed by the sequential rule; one pass of voxpipe's decoder, in chunks
            decoded ahead on several threads), and exact=False (the points of a parallel
            inflate).
  resample  vp.resample of bench_resample.py's series (--volumes, 60; --quick 12 volumes of
            96x96x60 int16, one rigid affine each) onto its oblique reference, order 3, float32.
  dicom     vp.load_dicom(bench_dicom.py's Explicit VR series of 176 slices, float32).
Inputs are made with those scripts' own functions when missing (make_data.py's T1 volume
first, when bench/data/t1_3d.nii is missing: the many-files inputs are variations of it).

Each measurement runs in a fresh child process (this script with --child): one untimed call
(page cache, allocator and thread pool warm), then --inner timed calls (the case's default:
1-3), whose median it reports. The parent runs --repeat rounds, each round every case at every
thread count in turn (interleaved, so that drift on a shared machine hits all alike), and
reports per case and thread count the median over rounds, the speed-up over 1 thread and the
parallel efficiency (speed-up / threads). The load average before and after and the CPU time
other processes used during the run are reported with the table: on a machine shared with
other work the high thread counts lose first.

Usage: .venv/bin/python bench/scaling.py [--quick] [--repeat R] [--threads 1,2,4]
       [--cases decode,decode_nib1,many,index,index_fast,resample,dicom] [--plain PATH]
       [--wait-idle] [--output PATH]
--quick: small inputs and 2 rounds, a few minutes on 2 cores; the default is 3 rounds on the
full inputs.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import (HERE, REPO, Parser, cpu_snapshot, git_state, memory_bytes, other_work,
                      other_work_brief, publish, run_child, settle, stamp, versions_text)

CASES = ("decode", "decode_nib1", "many", "index", "index_fast", "resample", "dicom")
LABELS = {
    "decode": "plain .nii.gz -> float32 (vp.load(index=False).get_fdata)",
    "decode_nib1": "the same, written by nibabel (level 1)",
    "many": "many files: vp.iter_load",
    "index": "exact seek index: vp.gz.build_index(exact=True)",
    "index_fast": "fast seek index: vp.gz.build_index(exact=False)",
    "resample": "vp.resample, order 3, float32",
    "dicom": "DICOM series -> float32: vp.load_dicom",
}
# Timed calls per child (after the untimed one): more for the short calls.
INNER = {"decode": 3, "decode_nib1": 3, "many": 1, "index": 2, "index_fast": 2, "resample": 2,
         "dicom": 3}


def markers(cores):
    return (f"<!-- scaling benchmark ({cores} cores): begin -->",
            f"<!-- scaling benchmark ({cores} cores): end -->")


def thread_counts(cores):
    """1, 2, 4, ... below `cores`, and `cores` itself."""
    out, k = [], 1
    while k < cores:
        out.append(k)
        k *= 2
    return out + [cores]


# --------------------------------------------------------------------------------------------
# Inputs: made by the other benchmarks' own functions.
# --------------------------------------------------------------------------------------------

def ensure_t1():
    """make_data.py's T1 volume (.nii and its gzip -6 .nii.gz), made alone when missing: the
    many-files inputs are variations of it, and --quick decodes its .nii.gz."""
    import numpy as np
    import make_data

    name = "t1_3d"
    spec = make_data.SPECS[name]
    nii = os.path.join(make_data.DATA, name + ".nii")
    gz = nii + ".gz"
    os.makedirs(make_data.DATA, exist_ok=True)
    if not make_data.nii_ok(nii, spec["shape"]):
        print(f"writing {nii} ...", flush=True)
        # The seed make_data.main gives this file, so the bytes are the same as its.
        rng = np.random.default_rng([make_data.SEED, list(make_data.SPECS).index(name)])
        make_data.write_nii(nii, spec, rng)
    if not make_data.gz_ok(gz, spec["shape"]):
        print(f"gzip -6 {nii} ...", flush=True)
        make_data.finish_gzip(make_data.start_gzip(nii, gz), gz)
    return gz


def plain_file(args):
    if args.plain:
        return args.plain
    t1 = ensure_t1()
    if args.quick:
        return t1
    import make_data
    bold = os.path.join(make_data.DATA, "bold_4d.nii.gz")
    if not make_data.gz_ok(bold, make_data.SPECS["bold_4d"]["shape"]):
        subprocess.run([sys.executable, os.path.join(HERE, "make_data.py")], check=True)
    return bold


def make_inputs(args, cases):
    inputs = {}
    if {"decode", "decode_nib1", "index", "index_fast"} & set(cases):
        inputs["plain"] = plain_file(args)
    if "decode_nib1" in cases:
        import bench_gzip
        # From the .nii beside the .nii.gz when there is one (the same bytes, no inflate).
        plain = inputs["plain"]
        nii = plain[:-3] if plain.endswith(".nii.gz") else None
        src = nii if nii and os.path.exists(nii) else plain
        inputs["plain_nib1"] = bench_gzip.write_as_nibabel(src, bench_gzip.nib1_path(plain))
    if "many" in cases:
        ensure_t1()
        import bench_many
        inputs["many"] = bench_many.make_inputs(args.files)
    if "resample" in cases:
        import bench_resample
        bench_resample.make_series(args.volumes)
        inputs["resample"] = bench_resample.series_paths(args.volumes)
    if "dicom" in cases:
        import bench_dicom
        bench_dicom.make_inputs(["explicit"])
        inputs["dicom"] = bench_dicom.FOLDERS["explicit"]
    return inputs


def input_sizes(inputs):
    """What each case reads, in words."""
    def mb(n):
        return f"{n / 1e6:.0f} MB" if n >= 1e7 else f"{n / 1e6:.1f} MB"
    out = {}
    for key in ("plain", "plain_nib1"):
        if key in inputs:
            p = inputs[key]
            out[key] = f"`{os.path.relpath(p, REPO)}` ({mb(os.path.getsize(p))})"
    if "many" in inputs:
        paths = inputs["many"]
        out["many"] = f"{len(paths)} files, {mb(sum(os.path.getsize(p) for p in paths))} in all"
    if "resample" in inputs:
        import nibabel as nib
        shape = nib.load(inputs["resample"][0]).shape
        out["resample"] = "x".join(map(str, shape)) + " int16"
    if "dicom" in inputs:
        folder = inputs["dicom"]
        files = os.listdir(folder)
        out["dicom"] = (f"{len(files)} files, "
                        f"{mb(sum(os.path.getsize(os.path.join(folder, f)) for f in files))}")
    return out


# --------------------------------------------------------------------------------------------
# Child: one case at one thread count.
# --------------------------------------------------------------------------------------------

def child(spec):
    import numpy as np
    import voxpipe as vp

    case, k = spec["case"], spec["threads"]
    if case in ("decode", "decode_nib1"):
        path = spec["path"]

        def call():
            vp.load(path, threads=k, index=False).get_fdata(dtype=np.float32)
    elif case == "many":
        paths = spec["paths"]

        def call():
            n = 0
            for arr in vp.iter_load(paths, threads=k):
                float(arr.flat[0])  # the consumer looks at the data, then drops it
                n += 1
            assert n == len(paths), n
    elif case in ("index", "index_fast"):
        path = spec["path"]
        out = os.path.join(spec["tmp"], f"scaling-{os.getpid()}.gzidx")

        def call():
            vp.gz.build_index(path, output=out, exact=case == "index", threads=k)
    elif case == "resample":
        bold, ref, hmc = spec["paths"]
        mats = np.load(hmc)

        def call():
            img = vp.resample(bold, ref, mats, order=3, dtype=np.float32, threads=k)
            np.asanyarray(img.dataobj)
    elif case == "dicom":
        folder = spec["folder"]

        def call():
            np.asanyarray(vp.load_dicom(folder, dtype=np.float32, threads=k).dataobj)
    else:
        raise ValueError(case)
    call()  # untimed: page cache, allocator, thread pool
    times = []
    for _ in range(spec["inner"]):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return {"seconds": statistics.median(times)}


# --------------------------------------------------------------------------------------------
# Parent.
# --------------------------------------------------------------------------------------------

def main():
    # --quick writes its section of BENCHMARKS.md too (bench/gpu/run.sh runs it so).
    ap = Parser(__doc__, wait_idle=True, quick_output=False,
                quick="small inputs (T1-size file, 8 files, 12 volumes) and 2 rounds")
    ap.add_argument("--repeat", type=int, help="rounds (default 3; --quick 2)")
    ap.add_argument("--threads",
                    help="thread counts, comma-separated (default 1, 2, 4, ..., cores)")
    ap.add_argument("--cases", default=",".join(CASES),
                    help="comma-separated, of " + ", ".join(CASES))
    ap.add_argument("--plain", help="the plain .nii.gz of the decode and index cases")
    ap.add_argument("--files", type=int, help="many-files inputs (default 40; --quick 8)")
    ap.add_argument("--volumes", type=int, help="resampled series length (default 60; --quick 12)")
    args = ap.parse(child)
    if args.repeat is None:
        args.repeat = 2 if args.quick else 3
    if args.files is None:
        args.files = 8 if args.quick else 40
    if args.volumes is None:
        args.volumes = 12 if args.quick else 60
    cases = [c for c in args.cases.split(",") if c]
    for c in cases:
        if c not in CASES:
            ap.error(f"unknown case {c!r}")
    cores = os.cpu_count() or 1
    ks = ([int(x) for x in args.threads.split(",")] if args.threads else thread_counts(cores))
    t_start = time.perf_counter()
    inputs = make_inputs(args, cases)
    sizes = input_sizes(inputs)
    waited = settle(args)
    load0 = os.getloadavg()
    cpu0 = cpu_snapshot()
    runs = {(c, k): [] for c in cases for k in ks}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            for c in cases:
                spec = {"case": c, "inner": INNER[c], "tmp": tmp}
                if c in ("decode", "index", "index_fast"):
                    spec["path"] = inputs["plain"]
                elif c == "decode_nib1":
                    spec["path"] = inputs["plain_nib1"]
                elif c == "many":
                    spec["paths"] = inputs["many"]
                elif c == "resample":
                    spec["paths"] = list(inputs["resample"])
                elif c == "dicom":
                    spec["folder"] = inputs["dicom"]
                for k in ks:
                    s = run_child(__file__, dict(spec, threads=k))["seconds"]
                    runs[(c, k)].append(s)
                    print(f"round {r + 1}/{args.repeat} {c:10s} threads={k:<3d} {s:8.3f} s",
                          flush=True)
    cpu1 = cpu_snapshot()
    load1 = os.getloadavg()
    med = {key: statistics.median(v) for key, v in runs.items()}
    text = report(args, cases, ks, med, runs, sizes, cores, waited, (load0, load1), (cpu0, cpu1),
                  time.perf_counter() - t_start)
    publish(args.output, text, *markers(cores))


def report(args, cases, ks, med, runs, sizes, cores, waited, loads, cpu, total):
    use = other_work(*cpu, cores)
    begin, end = markers(cores)

    def t(s):
        return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"

    lines = [begin, "", f"## Scaling ({cores} cores): bench/scaling.py", "",
             f"{stamp(cores)}, {memory_bytes() / 2**30:.0f} GiB; commit {git_state()}; "
             + versions_text(("voxpipe", "numpy", "nibabel", "pydicom"))
             + f"; Python {sys.version.split()[0]}. "
             f"{'--quick: small inputs. ' if args.quick else ''}"
             f"Each cell: the median over {args.repeat} interleaved rounds of a fresh process's "
             f"warm time (one untimed call, then the median of 1-3 timed ones); speed-up over "
             f"1 thread, and parallel efficiency (speed-up / threads).", "",
             f"Load average {loads[0][0]:.2f} / {loads[0][1]:.2f} / {loads[0][2]:.2f} (1/5/15 min) "
             f"when the measurements started"
             + (f" (after waiting {waited[1]:.0f} s for it to fall below 0.5)" if waited[1] else "")
             + f", {loads[1][0]:.2f} at the end; other work on the machine during the run: "
             f"{other_work_brief(use)}."
             + (" **Noisy: other work took a large share of the cores; the high thread counts "
                "are understated.**"
                if use["share"] > 15 or loads[0][0] > 0.5 * cores + 0.5 else ""),
             "", "Inputs: " + "; ".join(
                 f"{name} {desc}" for name, desc in
                 (("decode/index:", sizes.get("plain")),
                  ("decode (nibabel):", sizes.get("plain_nib1")), ("many:", sizes.get("many")),
                  ("resample:", sizes.get("resample")), ("dicom:", sizes.get("dicom")))
                 if desc) + ".", "",
             "| case | " + " | ".join(f"{k} thread{'s' if k > 1 else ''}" for k in ks) + " |",
             "|---|" + "---|" * len(ks)]
    for c in cases:
        base = med[(c, 1)] if 1 in ks else None
        cells = []
        for k in ks:
            s = med[(c, k)]
            if base is None or k == 1:
                cells.append(t(s))
            else:
                up = base / s
                cells.append(f"{t(s)}: {up:.2f}x, {100 * up / k:.0f}%")
        lines.append(f"| {LABELS[c]} | " + " | ".join(cells) + " |")
    lines += ["", "Rounds (s): " + "; ".join(
        f"{c} " + ", ".join(f"{k}t " + "/".join(f"{x:.2f}" for x in runs[(c, k)]) for k in ks)
        for c in cases) + ".", "",
        f"Whole run {total:.0f} s. The exact index is built in one pass of voxpipe's decoder, "
        "front to back on one thread and in chunks decoded ahead on several (the same index, "
        "docs/gzip.md); the fast one comes from the parallel inflate.", "", end, ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
