#!/usr/bin/env python
"""Many files at once: voxpipe's load_many / iter_load and VolumeDataset against nibabel in a
plain loop, in a multiprocessing.Pool, and in a torch DataLoader, in one run.

Writes the "many files" section of BENCHMARKS.md (between its markers; the rest of the file is
left as it is) and prints it.

Input: --files copies (default 200) of bench/data/t1_3d.nii (256x256x176 int16, an
anatomy-like volume; bench/make_data.py), each with its own variation (a different offset added
to a different block of voxels, so no two files are the same bytes), saved by nibabel as .nii.gz
(its default gzip level 1, about 12 MB each). Made here, in bench/data/many/, when missing.

Every case runs in a fresh child process (this script with --child) over all files, after
reading every file once (warm page cache) and touching 3 GiB in a throwaway process (see
bench_gzip.py, prime_memory). Results go from the decoder to the consumer, which drops them:
the loop a training epoch or a preprocessing pass runs. Times are the median of --repeat runs.

Usage: .venv/bin/python bench/bench_many.py [--files N] [--repeat R] [--output PATH]
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

from benchlib import (MIB, cpu_name, prime_memory, reset_peak_rss, versions, vm, warm,
                      write_section)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data")
MANY = os.path.join(DATA, "many")
SOURCE = os.path.join(DATA, "t1_3d.nii")
BEGIN = "<!-- many-files benchmark: begin -->"
END = "<!-- many-files benchmark: end -->"


# --------------------------------------------------------------------------------------------
# Input files.
# --------------------------------------------------------------------------------------------

def _make_one(k):
    import nibabel as nib
    import numpy as np

    path = os.path.join(MANY, f"t1_{k:03d}.nii.gz")
    if os.path.exists(path):
        return path
    src = nib.load(SOURCE)
    data = np.asanyarray(src.dataobj).copy()
    rng = np.random.default_rng(1000 + k)
    x, y, z = (int(rng.integers(0, s - 48)) for s in data.shape)
    data[x:x + 48, y:y + 48, z:z + 48] += np.int16(1 + k % 13)
    img = nib.Nifti1Image(data, src.affine, src.header)
    tmp = path + ".tmp.nii.gz"
    nib.save(img, tmp)
    os.replace(tmp, path)
    return path


def make_inputs(n):
    if not os.path.exists(SOURCE):
        sys.exit("bench/data/t1_3d.nii is missing: run .venv/bin/python bench/make_data.py")
    os.makedirs(MANY, exist_ok=True)
    missing = [k for k in range(n) if not os.path.exists(os.path.join(MANY, f"t1_{k:03d}.nii.gz"))]
    if missing:
        print(f"writing {len(missing)} input files to {MANY} ...", flush=True)
        from multiprocessing import Pool
        with Pool(os.cpu_count()) as pool:
            pool.map(_make_one, missing)
    return [os.path.join(MANY, f"t1_{k:03d}.nii.gz") for k in range(n)]


# --------------------------------------------------------------------------------------------
# Child: one case.
# --------------------------------------------------------------------------------------------

def _nib_f32(path):
    import nibabel as nib
    import numpy as np
    return nib.load(path).get_fdata(dtype=np.float32)


def child(spec):
    paths, case = spec["paths"], spec["case"]
    threads = spec.get("threads")
    consumed = [0]

    def consume(arr):
        consumed[0] += 1
        float(arr.flat[0])  # the consumer looks at the data, then drops it

    if case == "voxpipe":
        import voxpipe as vp

        def run():
            for arr in vp.iter_load(paths, threads=threads,
                                    max_inflight_bytes=spec.get("max_inflight_bytes")):
                consume(arr)
    elif case == "voxpipe_load_many":
        import voxpipe as vp

        def run():
            for k in range(0, len(paths), 10):  # load_many in groups, so memory stays sane
                for arr in vp.load_many(paths[k:k + 10], threads=threads):
                    consume(arr)
    elif case == "nibabel":
        def run():
            for p in paths:
                consume(_nib_f32(p))
    elif case == "nibabel_pool":
        from multiprocessing import Pool

        def run():
            with Pool(spec["workers"]) as pool:
                for arr in pool.imap(_nib_f32, paths, chunksize=1):
                    consume(arr)
    elif case in ("torch_voxpipe", "torch_nibabel"):
        import torch
        from torch.utils.data import DataLoader, Dataset

        if case == "torch_voxpipe":
            import voxpipe.torch as vpt
            ds = vpt.VolumeDataset(paths)
            collate = vpt.collate
        else:
            class NibDataset(Dataset):
                def __len__(self):
                    return len(paths)

                def __getitem__(self, i):
                    return torch.from_numpy(_nib_f32(paths[i]))
            ds = NibDataset()
            collate = None
        kwargs = {} if collate is None else {"collate_fn": collate}
        loader = DataLoader(ds, batch_size=spec["batch_size"], num_workers=spec["workers"],
                            **kwargs)

        def run():
            for batch in loader:
                consumed[0] += batch.shape[0]
                float(batch[(0,) * batch.dim()])  # one value, without copying the batch
    else:
        raise ValueError(case)

    base = vm("VmRSS")
    reset_peak_rss()
    t0 = time.perf_counter()
    run()
    seconds = time.perf_counter() - t0
    assert consumed[0] == len(paths), consumed
    print(json.dumps({"seconds": seconds, "peak_mib": (vm("VmHWM") - base) / MIB}))


# --------------------------------------------------------------------------------------------
# Parent.
# --------------------------------------------------------------------------------------------

def measure(spec, repeat):
    runs = []
    for _ in range(repeat):
        warm(*spec["paths"])
        prime_memory()
        r = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)],
                           capture_output=True, text=True, cwd=REPO)
        if r.returncode != 0:
            raise RuntimeError(f"{spec['case']}: {r.stderr[-3000:]}")
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return {"seconds": statistics.median(r["seconds"] for r in runs),
            "peak_mib": statistics.median(r["peak_mib"] for r in runs),
            "runs": [round(r["seconds"], 2) for r in runs]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--output", default=os.path.join(REPO, "BENCHMARKS.md"))
    args = ap.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    paths = make_inputs(args.files)
    cores = os.cpu_count()
    rep = args.repeat
    budget = 256 * MIB
    res = {}
    base = {"paths": paths}
    res["vp_all"] = measure({**base, "case": "voxpipe", "threads": None}, rep)
    res["vp_1"] = measure({**base, "case": "voxpipe", "threads": 1}, rep)
    res["vp_many"] = measure({**base, "case": "voxpipe_load_many", "threads": None}, rep)
    res["vp_bounded"] = measure({**base, "case": "voxpipe", "threads": None,
                                 "max_inflight_bytes": budget}, rep)
    res["nib"] = measure({**base, "case": "nibabel"}, rep)
    res["nib_pool"] = measure({**base, "case": "nibabel_pool", "workers": cores}, rep)
    for w in (0, cores):
        res[("torch_vp", w)] = measure({**base, "case": "torch_voxpipe", "workers": w,
                                        "batch_size": 4}, rep)
        res[("torch_nib", w)] = measure({**base, "case": "torch_nibabel", "workers": w,
                                         "batch_size": 4}, rep)

    n = len(paths)
    disk = sum(os.path.getsize(p) for p in paths)
    out_bytes = n * 256 * 256 * 176 * 4

    def row(name, key, vs=None):
        r = res[key]
        ratio = f"**{res[vs]['seconds'] / r['seconds']:.2f}x**" if vs else ""
        return (f"| {name} | {r['seconds']:.2f} s | {n / r['seconds']:.1f} | "
                f"{disk / MIB / r['seconds']:.0f} | {out_bytes / MIB / r['seconds']:.0f} | "
                f"{r['peak_mib']:.0f} MiB | {ratio} |")

    s = lambda k: res[k]["seconds"]  # noqa: E731
    lines = [
        BEGIN, "", "## Many files: bench/bench_many.py", "",
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {cpu_name()}, "
        f"{cores} cores; {'median of ' + str(rep) + ' runs' if rep > 1 else 'one run'} per case, "
        "each in a fresh process after warming the page cache and priming memory. " +
        ", ".join(f"{k} {v}" for k, v in versions(("voxpipe", "nibabel", "numpy", "torch")).items()) + ".", "",
        f"Input: {n} variants of the 256x256x176 int16 volume saved by nibabel (.nii.gz, gzip "
        f"level 1), {disk / n / MIB:.1f} MiB each on disk, {out_bytes / n / MIB:.0f} MiB each as "
        "float32. Every case decodes every file to float32 (scaled as get_fdata) and hands it to "
        "a consumer that reads one value and drops it. Peak RSS: growth over the process's "
        "baseline (for the Pool and DataLoader cases, the parent only).", "",
        "| case | time | files/s | MiB/s on disk | MiB/s float32 | peak RSS | vs nibabel loop |",
        "|---|---|---|---|---|---|---|",
        row(f"voxpipe iter_load, all cores ({cores})", "vp_all", "nib"),
        row("voxpipe load_many (groups of 10), all cores", "vp_many", "nib"),
        row(f"voxpipe iter_load, max_inflight_bytes={budget // MIB} MiB", "vp_bounded", "nib"),
        row("voxpipe iter_load, threads=1", "vp_1", "nib"),
        row("nibabel, plain loop", "nib", "nib"),
        row(f"nibabel, multiprocessing.Pool({cores})", "nib_pool", "nib"),
    ]
    for w in (0, cores):
        lines.append(row(f"DataLoader(VolumeDataset, collate), num_workers={w}, batch 4",
                         ("torch_vp", w), "nib"))
        lines.append(row(f"DataLoader(nibabel Dataset), num_workers={w}, batch 4",
                         ("torch_nib", w), "nib"))
    lines += [
        "",
        f"- voxpipe all cores vs nibabel loop: **{s('nib') / s('vp_all'):.2f}x** (target >= 8x); "
        f"vs nibabel in a Pool({cores}): **{s('nib_pool') / s('vp_all'):.2f}x** (target >= 3x); "
        f"vs voxpipe on one thread: **{s('vp_1') / s('vp_all'):.2f}x** (target >= 1.8x on 2 cores).",
        "- DataLoader, VolumeDataset vs a nibabel Dataset with the same num_workers: "
        + ", ".join(f"num_workers={w}: **{s(('torch_nib', w)) / s(('torch_vp', w)):.2f}x**"
                    for w in (0, cores)) + " (target >= 3x).",
        f"- Peak RSS with max_inflight_bytes={budget // MIB} MiB: "
        f"{res['vp_bounded']['peak_mib']:.0f} MiB (target <= {budget // MIB} + 100 MiB).",
        "", END, ""]
    text = "\n".join(lines)
    write_section(args.output, text, BEGIN, END)
    print(text)


if __name__ == "__main__":
    main()
