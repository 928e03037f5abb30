#!/usr/bin/env python
"""MONAI's LoadImage over T1-size .nii.gz files: voxpipe.monai.VoxpipeReader against MONAI's
NibabelReader, and NibabelReader with ``vp.accelerate_nibabel()`` (when voxpipe has it), in one run.

Writes the "MONAI" section of BENCHMARKS.md (between its markers; the rest of the file is left as
it is) and prints it.

Input: the first --files (default 40) files of bench_many.py's set, bench/data/many/t1_NNN.nii.gz
(variants of bench/data/t1_3d.nii, 256x256x176, saved by nibabel as scaled int16, gzip level 1,
about 12 MB each), made when missing. bench/data/t1_3d.nii itself, when missing, is made with
make_data.py's generator and seed (the same file make_data.py writes), without the 4D series.

Each case is ``LoadImage(reader=...)`` with LoadImage's defaults (float32 MetaTensor, metadata
tracked) in one process, files in order, one at a time (no DataLoader workers: the same process
count for every case). Runs are interleaved (nibabel, voxpipe, accelerated, nibabel, ...), each in
a fresh child process after reading every file once (warm page cache) and touching 3 GiB in a
throwaway process (benchlib.prime_memory). The child loads one file untimed first (imports,
thread start), then times every file; the consumer reads one value and drops the image. Reported:
the median over --repeat runs of the total, the median time per file, and peak RSS.

The section also says how much other work ran on the machine meanwhile (benchlib.cpu_snapshot);
``--wait-idle`` first waits for the load average to fall below 0.5.

Usage: .venv/bin/python bench/bench_monai.py [--files N] [--repeat R] [--wait-idle] [--output PATH]
"""
import os
import statistics
import sys
import time

from benchlib import (MIB, Parser, cpu_snapshot, other_work, other_work_sentence, prime_memory,
                      publish, reset_peak_rss, run_child, settle, stamp, table_head,
                      versions_text, vm, warm)

BEGIN = "<!-- monai benchmark: begin -->"
END = "<!-- monai benchmark: end -->"
CASES = {
    "nibabel": "LoadImage(reader=NibabelReader())",
    "voxpipe": "LoadImage(reader=VoxpipeReader())",
    "accelerated": "LoadImage(reader=NibabelReader()) under vp.accelerate_nibabel()",
}


def make_inputs(n):
    import bench_many

    if not os.path.exists(bench_many.SOURCE):
        import numpy as np

        import make_data
        print(f"writing {bench_many.SOURCE} ...", flush=True)
        os.makedirs(os.path.dirname(bench_many.SOURCE), exist_ok=True)
        index = list(make_data.SPECS).index("t1_3d")  # make_data seeds each file by its index
        make_data.write_nii(bench_many.SOURCE, make_data.SPECS["t1_3d"],
                            np.random.default_rng([make_data.SEED, index]))
    return bench_many.make_inputs(n)


def child(spec):
    import warnings

    warnings.simplefilter("ignore")  # MONAI's notes on optional packages it does not find
    from monai.data import NibabelReader
    from monai.transforms import LoadImage

    case = spec["case"]
    if case == "voxpipe":
        from voxpipe.monai import VoxpipeReader
        loader = LoadImage(reader=VoxpipeReader())
    else:
        if case == "accelerated":
            import voxpipe as vp
            vp.accelerate_nibabel()
        loader = LoadImage(reader=NibabelReader())

    def load(path):
        img = loader(path)
        float(img[(0,) * img.ndim])  # the consumer looks at the data, then drops them

    paths = spec["paths"]
    load(paths[0])  # imports, thread pool, first allocations: not timed
    base = vm("VmRSS")
    reset_peak_rss()
    times = []
    for p in paths:
        t0 = time.perf_counter()
        load(p)
        times.append(time.perf_counter() - t0)
    return {"seconds": sum(times), "per_file": statistics.median(times),
            "peak_mib": (vm("VmHWM") - base) / MIB}


def measure(spec):
    """One child, the page cache warm and memory primed right before it."""
    warm(*spec["paths"])
    prime_memory()
    return run_child(__file__, spec)


def check_agreement(path):
    """VoxpipeReader's image and metadata against NibabelReader's, on one input file."""
    import warnings

    import numpy as np
    import torch
    from monai.data import NibabelReader
    from monai.transforms import LoadImage

    from voxpipe.monai import VoxpipeReader
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got, got_meta = LoadImage(reader=VoxpipeReader(), image_only=False)(path)
        want, want_meta = LoadImage(reader=NibabelReader(), image_only=False)(path)
    same = torch.equal(got.as_tensor(), want.as_tensor()) and got_meta.keys() == want_meta.keys()
    for k in want_meta:
        a, b = got_meta[k], want_meta[k]
        if isinstance(b, (np.ndarray, torch.Tensor)):
            same = same and np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
        elif not (a == b or (isinstance(b, float) and a != a and b != b)):
            same = False
    return same


def main():
    ap = Parser(__doc__, repeat=3, repeat_help="fresh processes per case", wait_idle=True)
    ap.add_argument("--files", type=int, default=40)
    args = ap.parse(child)
    paths = make_inputs(args.files)
    import voxpipe as vp

    cases = [c for c in CASES if c != "accelerated" or hasattr(vp, "accelerate_nibabel")]
    settle(args)
    cpu0 = cpu_snapshot()
    runs = {c: [] for c in cases}
    for r in range(args.repeat):
        for case in cases:  # interleaved: drifts in the machine's state hit every case alike
            runs[case].append(measure({"paths": paths, "case": case}))
            print(f"run {r + 1}/{args.repeat} {case}: {runs[case][-1]['seconds']:.2f} s",
                  flush=True)
    res = {c: {k: statistics.median(x[k] for x in runs[c])
               for k in ("seconds", "per_file", "peak_mib")} for c in cases}
    use = other_work(cpu0, cpu_snapshot())
    agree = check_agreement(paths[0])

    n = len(paths)
    disk = sum(os.path.getsize(p) for p in paths)
    nib_s = res["nibabel"]["seconds"]
    lines = [
        BEGIN, "", "## MONAI LoadImage: bench/bench_monai.py", "",
        f"{stamp()}; median of {args.repeat} runs per case, interleaved, each in a "
        "fresh process after warming the page cache and priming memory. "
        + versions_text(("voxpipe", "monai", "nibabel", "numpy", "torch")) + ".", "",
        f"Input: {n} variants of the 256x256x176 volume saved by nibabel as scaled int16 (.nii.gz, "
        f"gzip level 1, {disk / n / MIB:.1f} MiB each on disk). Each case calls LoadImage with "
        "its defaults (a float32 MetaTensor with metadata) on every file in turn, in one process, "
        "and reads one value of the result. Time per file: the median over the files of a run. "
        "Peak RSS: growth over the process's baseline after one untimed load.", "",
        other_work_sentence(use, busy="The machine was busy: the numbers are noisy, "
                                      "multi-threaded voxpipe's most."), "",
        *table_head("case", "total", "per file", "files/s", "peak RSS",
                    "vs NibabelReader (total, per file)"),
    ]
    nib_f = res["nibabel"]["per_file"]
    for case in cases:
        r = res[case]
        lines.append(f"| `{CASES[case]}` | {r['seconds']:.2f} s | {r['per_file'] * 1000:.0f} ms | "
                     f"{n / r['seconds']:.1f} | {r['peak_mib']:.0f} MiB | "
                     f"**{nib_s / r['seconds']:.2f}x**, {nib_f / r['per_file']:.2f}x |")
    lines += [
        "",
        f"- VoxpipeReader vs NibabelReader: **{nib_s / res['voxpipe']['seconds']:.2f}x** "
        "(target >= 3x)" + (f"; NibabelReader with accelerate_nibabel(): "
                            f"**{nib_s / res['accelerated']['seconds']:.2f}x** (NibabelReader "
                            "still asks for float64 and LoadImage then casts and transposes it)"
                            if "accelerated" in res else "") + ".",
        "- Image and metadata of VoxpipeReader equal NibabelReader's on "
        f"{os.path.basename(paths[0])}: {'yes' if agree else '**NO**'}.",
        "", END, ""]
    publish(args.output, "\n".join(lines), BEGIN, END)
    if not agree:
        sys.exit("VoxpipeReader and NibabelReader disagree")


if __name__ == "__main__":
    main()
