#!/usr/bin/env python
"""Many files at once: voxpipe's load_many / iter_load and VolumeDataset against nibabel in a
plain loop, in a multiprocessing.Pool, and in a torch DataLoader, in one run.

Writes the "many files" section of BENCHMARKS.md (between its markers; the rest of the file is
left as it is) and prints it.

Input: --files copies (default 40) of bench/data/t1_3d.nii (256x256x176 int16, an
anatomy-like volume; bench/make_data.py), each with its own variation (a different offset added
to a different block of voxels, so no two files are the same bytes), saved by nibabel as .nii.gz
(its default gzip level 1, about 12 MB each). Made here, in bench/data/many/, when missing.

Every case runs in a fresh child process (this script with --child) over all files, after
reading every file once (warm page cache). Results go from the decoder to the consumer, which
drops them: the loop a training epoch or a preprocessing pass runs. Each case is measured two
ways, the runs of all cases interleaved (--repeat rounds, medians):
- first touch: nothing primed, so every page a process maps for the first time is paid for as
  a user's fresh process pays for it (on these VMs, memory left untouched for a few seconds
  goes back to the host and costs up to ~10x per fault; benchlib.prime_memory);
- primed: the child touches --prime MiB itself right before the timed call and frees it, so
  the pages the call maps are cheap; what remains is the work of the call.

Usage: .venv/bin/python bench/bench_many.py [--files N] [--repeat R] [--output PATH]
"""
import os
import statistics
import sys
import time

from benchlib import (DATA, MIB, Parser, measured, publish, run_child, stamp, versions_text,
                      warm)

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

    if spec.get("prime_mib"):
        # Right before the timed call, in this process: the pages it maps next are warm.
        import numpy as np
        np.ones(int(spec["prime_mib"]) << 20, np.uint8)
    _, seconds, peak_mib = measured(run)
    assert consumed[0] == len(paths), consumed
    return {"seconds": seconds, "peak_mib": peak_mib}


# --------------------------------------------------------------------------------------------
# Parent.
# --------------------------------------------------------------------------------------------

def measure_all(cases, repeat, prime_mib):
    """{(key, mode): {seconds, peak_mib, runs}}: every case in both modes, one run of each per
    round, rounds repeated, so that drift on the machine falls on every case alike."""
    runs = {}
    for _ in range(repeat):
        for key, spec in cases.items():
            for mode in ("first", "primed"):
                warm(*spec["paths"])
                spec = {**spec, "prime_mib": prime_mib if mode == "primed" else 0}
                runs.setdefault((key, mode), []).append(run_child(__file__, spec))
    return {k: {"seconds": statistics.median(r["seconds"] for r in v),
                "peak_mib": statistics.median(r["peak_mib"] for r in v),
                "runs": [round(r["seconds"], 2) for r in v]} for k, v in runs.items()}


def main():
    ap = Parser(__doc__, repeat=3, repeat_help="rounds, every case once in each mode")
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--prime", type=int, default=2048, help="MiB a primed child touches first")
    args = ap.parse(child)
    paths = make_inputs(args.files)
    cores = os.cpu_count()
    rep = args.repeat
    budget = 256 * MIB
    base = {"paths": paths}
    cases = {
        "vp_all": {**base, "case": "voxpipe", "threads": None},
        "vp_1": {**base, "case": "voxpipe", "threads": 1},
        "vp_many": {**base, "case": "voxpipe_load_many", "threads": None},
        "vp_bounded": {**base, "case": "voxpipe", "threads": None, "max_inflight_bytes": budget},
        "nib": {**base, "case": "nibabel"},
        "nib_pool": {**base, "case": "nibabel_pool", "workers": cores},
    }
    for w in (0, cores):
        cases[f"torch_vp_{w}"] = {**base, "case": "torch_voxpipe", "workers": w, "batch_size": 4}
        cases[f"torch_nib_{w}"] = {**base, "case": "torch_nibabel", "workers": w, "batch_size": 4}
    load0 = os.getloadavg()[0]
    t_start = time.time()
    res = measure_all(cases, rep, args.prime)
    took = time.time() - t_start

    n = len(paths)
    disk = sum(os.path.getsize(p) for p in paths)
    out_bytes = n * 256 * 256 * 176 * 4
    s = lambda k, m="first": res[(k, m)]["seconds"]  # noqa: E731

    def row(name, key, vs="nib"):
        f, p = res[(key, "first")], res[(key, "primed")]
        return (f"| {name} | {f['seconds']:.2f} s | {p['seconds']:.2f} s | "
                f"{n / f['seconds']:.1f} | {out_bytes / MIB / f['seconds']:.0f} | "
                f"{f['peak_mib']:.0f} MiB | **{s(vs) / f['seconds']:.2f}x** | "
                f"**{s(vs, 'primed') / p['seconds']:.2f}x** |")

    lines = [
        BEGIN, "", "## Many files: bench/bench_many.py", "",
        f"{stamp(cores)}; median of {rep} rounds, every case once per round in each mode, each "
        f"run in a fresh process after warming the page cache; load average {load0:.2f} at the "
        f"start, {took:.0f} s in all. "
        + versions_text(("voxpipe", "nibabel", "numpy", "torch")) + ".", "",
        f"Input: {n} variants of the 256x256x176 int16 volume saved by nibabel (.nii.gz, gzip "
        f"level 1), {disk / n / MIB:.1f} MiB each on disk, {out_bytes / n / MIB:.0f} MiB each as "
        "float32. Every case decodes every file to float32 (scaled as get_fdata) and hands it to "
        "a consumer that reads one value and drops it. **first touch**: nothing primed, the "
        "process pays for every page it maps as a user's fresh process does; **primed**: the "
        f"child touches {args.prime} MiB itself right before the timed call. Peak RSS (first "
        "touch): growth over the process's baseline (for the Pool and DataLoader cases, the "
        "parent only).", "",
        "| case | time, first touch | time, primed | files/s | MiB/s float32 | peak RSS | "
        "vs nibabel loop, first touch | vs nibabel loop, primed |",
        "|---|---|---|---|---|---|---|---|",
        row(f"voxpipe iter_load, all cores ({cores})", "vp_all"),
        row("voxpipe load_many (groups of 10), all cores", "vp_many"),
        row(f"voxpipe iter_load, max_inflight_bytes={budget // MIB} MiB", "vp_bounded"),
        row("voxpipe iter_load, threads=1", "vp_1"),
        row("nibabel, plain loop", "nib"),
        row(f"nibabel, multiprocessing.Pool({cores})", "nib_pool"),
    ]
    for w in (0, cores):
        lines.append(row(f"DataLoader(VolumeDataset, collate), num_workers={w}, batch 4",
                         f"torch_vp_{w}"))
        lines.append(row(f"DataLoader(nibabel Dataset), num_workers={w}, batch 4",
                         f"torch_nib_{w}"))
    dl = {w: (s(f"torch_nib_{w}") / s(f"torch_vp_{w}"),
              s(f"torch_nib_{w}", "primed") / s(f"torch_vp_{w}", "primed")) for w in (0, cores)}
    lines += [
        "",
        f"- voxpipe iter_load, all cores vs nibabel loop, first touch: "
        f"**{s('nib') / s('vp_all'):.2f}x** (target >= 5x); primed: "
        f"{s('nib', 'primed') / s('vp_all', 'primed'):.2f}x. vs nibabel in a Pool({cores}): "
        f"**{s('nib_pool') / s('vp_all'):.2f}x**; vs voxpipe on one thread: "
        f"**{s('vp_1') / s('vp_all'):.2f}x**.",
        "- DataLoader, VolumeDataset vs a nibabel Dataset with the same num_workers, first touch "
        "(primed): " + ", ".join(f"num_workers={w}: **{dl[w][0]:.2f}x** ({dl[w][1]:.2f}x)"
                                 for w in (0, cores)) + f" (target >= 3x with {cores} workers).",
        f"- Peak RSS with max_inflight_bytes={budget // MIB} MiB: "
        f"{res[('vp_bounded', 'first')]['peak_mib']:.0f} MiB (target <= {budget // MIB} MiB + "
        "the recycled-output pool's 512 MiB limit + 100 MiB).",
        "- Runs (s), first touch / primed: " + "; ".join(
            f"{k} {res[(k, 'first')]['runs']} / {res[(k, 'primed')]['runs']}" for k in cases) + ".",
        "", END, ""]
    publish(args.output, "\n".join(lines), BEGIN, END)


if __name__ == "__main__":
    main()
