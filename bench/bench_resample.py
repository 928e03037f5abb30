#!/usr/bin/env python
"""Resampling: voxpipe against scipy.ndimage and nitransforms, in one run.

Writes the "Resampling" section of BENCHMARKS.md (between its markers; the rest of the file is
left as it is) and prints it.

Cases:
  1. Interpolation kernel: a 96x96x60 float32 volume (smooth anatomy-like values), a 3-D rotation
     of 0.05 rad about the centre plus a small shift, output float32, orders 1 and 3 (prefilter on).
     scipy.ndimage.map_coordinates (coordinates made beforehand, not timed) and affine_transform
     against vp.map_coordinates / vp.affine_transform with threads=1 (the per-core ratio) and with
     all cores (scaling). --repeat interleaved rounds (scipy, voxpipe 1 thread, voxpipe all cores,
     in turn) after one warm-up call each: median times, and ratios as medians of the per-round
     ratios, so that the machine's drift between calls hits both sides alike. Cubic also with
     fast=True (separable sums with multiply-adds), whose largest difference from scipy's
     float64 values is reported.
  2. A whole series: 300 volumes of 96x96x60 int16 with a scale factor (bench/data/
     resample_bold.nii, made here when missing, ~330 MB) onto an oblique reference grid of the
     same size, through one small rigid affine per volume (head motion), order 3, float32 out.
     nitransforms.resampling.apply(LinearTransformsMapping(...), max_concurrent=cores: it runs
     that many scipy map_coordinates calls at once) against vp.resample into memory
     and vp.resample streamed to a .nii file, each in a fresh child process: wall time and peak
     RSS (VmHWM of the child; growth over its RSS after imports in brackets). Medians of
     --series-repeat processes. Before the report, voxpipe's output is checked against
     nitransforms' (max |difference| <= 1e-5 of the data range).

OpenBLAS runs single-threaded in this process and its children (OPENBLAS_NUM_THREADS=1 unless
set): after a large matrix product its idle threads spin for a while, and on a small machine
they took CPU from the timed call that followed (scipy's, then voxpipe's).

Usage: .venv/bin/python bench/bench_resample.py [--repeat N] [--series-repeat N] [--volumes N]
       [--wait-idle] [--output PATH]
"""
import os
import statistics
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads OpenBLAS (see above)

from benchlib import (DATA, MIB, Parser, cpu_snapshot, git_state, medians, ms,  # noqa: E402
                      other_work, other_work_brief, publish, run_child, settle, stamp,
                      versions_text, vm)

SHAPE = (96, 96, 60)
BEGIN = "<!-- resample benchmark: begin -->"
END = "<!-- resample benchmark: end -->"


def rigid(ax, ay, az, t):
    import numpy as np
    cx, sx, cy, sy, cz, sz = (np.cos(ax), np.sin(ax), np.cos(ay), np.sin(ay), np.cos(az),
                              np.sin(az))
    m = np.eye(4)
    m[:3, :3] = (np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
                 @ np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
                 @ np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]]))
    m[:3, 3] = t
    return m


def anatomy(seed=0):
    """A smooth volume with edges: blobs plus noise, float64."""
    import numpy as np
    from scipy import ndimage
    rng = np.random.default_rng(seed)
    x, y, z = np.meshgrid(*[np.linspace(-1, 1, n) for n in SHAPE], indexing="ij")
    head = (x ** 2 + y ** 2 + (1.3 * z) ** 2 < 0.8).astype(float)
    return 800 * ndimage.gaussian_filter(head + 0.3 * rng.random(SHAPE), 1.5) + 20


def series_paths(volumes):
    return (os.path.join(DATA, f"resample_bold_{volumes}.nii"),
            os.path.join(DATA, "resample_ref.nii"), os.path.join(DATA, f"resample_hmc_{volumes}.npy"))


def make_series(volumes):
    import nibabel as nib
    import numpy as np
    bold, ref, hmc = series_paths(volumes)
    if all(os.path.exists(p) for p in (bold, ref, hmc)):
        return
    os.makedirs(DATA, exist_ok=True)
    rng = np.random.default_rng(1)
    base = anatomy(1)
    affine = np.diag([2.5, 2.5, 2.5, 1.0])
    affine[:3, 3] = [-(n - 1) * 1.25 for n in SHAPE]
    hdr = nib.Nifti1Header()
    hdr.set_data_dtype(np.int16)
    hdr.set_data_shape(SHAPE + (volumes,))
    hdr.set_sform(affine, 1)
    hdr.set_qform(affine, 1)
    hdr.set_slope_inter(0.25, 0.0)
    hdr["pixdim"][4] = 2.0
    tmp = bold + ".part"
    with open(tmp, "wb") as f:  # volume by volume: never the whole series in memory
        hdr.write_to(f)
        f.write(b"\0" * (352 - f.tell()))
        for t in range(volumes):
            vol = base * (1 + 0.02 * np.sin(t / 7)) + rng.normal(0, 8, SHAPE)
            f.write(np.round(vol * 4).astype("<i2").tobytes(order="F"))
    os.replace(tmp, bold)
    ref_affine = rigid(0.08, -0.05, 0.1, affine[:3, 3]) @ np.diag([2.5, 2.5, 2.5, 1.0])
    nib.Nifti1Image(np.zeros(SHAPE, np.uint8), ref_affine).to_filename(ref)
    mats = np.stack([rigid(*(rng.normal(0, 0.01, 3)), rng.normal(0, 0.5, 3))
                     for _ in range(volumes)])
    np.save(hmc, mats)


# --------------------------------------------------------------------------------------------
# Case 1: the kernel, in this process.
# --------------------------------------------------------------------------------------------

def kernel_cases(repeat, cores):
    import numpy as np
    from scipy import ndimage
    import voxpipe as vp
    vol = anatomy(0).astype(np.float32)
    centre = (np.array(SHAPE) - 1) / 2
    m = rigid(0.05, 0.03, -0.04, (0, 0, 0))[:3, :3]
    offset = centre - m @ centre + np.array([0.4, -0.3, 0.2])
    idx = np.indices(SHAPE, dtype=np.float64).reshape(3, -1)
    coords = (m @ idx + offset[:, None]).reshape((3,) + SHAPE)
    res = {}
    for order in (1, 3):
        kw = dict(order=order, mode="constant", cval=0.0, prefilter=True)
        ref_map = ndimage.map_coordinates(vol, coords, output=np.float32, **kw)
        ref_aff = ndimage.affine_transform(vol, m, offset, output=np.float32, **kw)
        for threads in (1, cores):
            got = vp.map_coordinates(vol, coords, output=np.float32, threads=threads, **kw)
            assert np.array_equal(got, ref_map), "vp.map_coordinates differs from scipy"
            got = vp.affine_transform(vol, m, offset, output=np.float32, threads=threads, **kw)
            assert np.array_equal(got, ref_aff), "vp.affine_transform differs from scipy"
        # fast=True (cubic): separable sums with multiply-adds, within a few ulps of scipy's
        # float64 values.
        fast_keys = [("fast", t) for t in (1, cores)] if order == 3 else []
        for threads in (1, cores) if fast_keys else ():
            for fn in ("map", "affine"):
                if fn == "map":
                    got = vp.map_coordinates(vol, coords, output=np.float64, threads=threads,
                                             fast=True, **kw)
                    exact = ndimage.map_coordinates(vol, coords, output=np.float64, **kw)
                else:
                    got = vp.affine_transform(vol, m, offset, output=np.float64,
                                              threads=threads, fast=True, **kw)
                    exact = ndimage.affine_transform(vol, m, offset, output=np.float64, **kw)
                res[("fast_diff", fn)] = max(res.get(("fast_diff", fn), 0.0),
                                             float(np.max(np.abs(got - exact))))
        res["data_range"] = float(np.ptp(vol))
        # Interleaved rounds: scipy, voxpipe 1 thread, voxpipe all cores (and fast=True), one
        # after the other, so that this VM's drift (calls here move by 30% over seconds) hits
        # all alike; ratios are medians of the per-round ratios.
        for fn in ("map", "affine"):
            if fn == "map":
                calls = {"scipy": lambda: ndimage.map_coordinates(vol, coords, output=np.float32,
                                                                  **kw)}
                for threads in (1, cores):
                    calls[threads] = (lambda t=threads: vp.map_coordinates(
                        vol, coords, output=np.float32, threads=t, **kw))
                for key in fast_keys:
                    calls[key] = (lambda t=key[1]: vp.map_coordinates(
                        vol, coords, output=np.float32, threads=t, fast=True, **kw))
            else:
                calls = {"scipy": lambda: ndimage.affine_transform(vol, m, offset,
                                                                   output=np.float32, **kw)}
                for threads in (1, cores):
                    calls[threads] = (lambda t=threads: vp.affine_transform(
                        vol, m, offset, output=np.float32, threads=t, **kw))
                for key in fast_keys:
                    calls[key] = (lambda t=key[1]: vp.affine_transform(
                        vol, m, offset, output=np.float32, threads=t, fast=True, **kw))
            times = {key: [] for key in calls}
            for call in calls.values():
                call()  # warm-up
            for _ in range(repeat):
                for key, call in calls.items():
                    t0 = time.perf_counter()
                    call()
                    times[key].append(time.perf_counter() - t0)
            for key, ts in times.items():
                res[(order, key, fn)] = statistics.median(ts)
            for key in [1, cores] + fast_keys:
                res[(order, "ratio", key, fn)] = statistics.median(
                    a / b for a, b in zip(times["scipy"], times[key]))
    return res


# --------------------------------------------------------------------------------------------
# Case 2: a whole series, each run in a fresh child process.
# --------------------------------------------------------------------------------------------

def child(spec):
    import numpy as np
    import nibabel as nib
    bold, ref, hmc = series_paths(spec["volumes"])
    mats = np.load(hmc)
    if spec["tool"] == "nitransforms":
        from nitransforms.linear import LinearTransformsMapping
        from nitransforms.resampling import apply
    else:
        import voxpipe as vp
    base = vm("VmRSS")
    t0 = time.perf_counter()
    if spec["tool"] == "nitransforms":
        out = apply(LinearTransformsMapping(mats, reference=ref), bold, reference=ref, order=3,
                    output_dtype=np.float32, max_concurrent=spec["threads"])
        data = np.asanyarray(out.dataobj)
    elif spec["tool"] == "vp_memory":
        out = vp.resample(bold, ref, mats, order=3, dtype=np.float32, threads=spec["threads"])
        data = np.asanyarray(out.dataobj)
    else:
        vp.resample(bold, ref, mats, order=3, dtype=np.float32, threads=spec["threads"],
                    out=spec["out"])
        data = None
    elapsed = time.perf_counter() - t0
    peak = vm("VmHWM")
    if spec.get("save"):  # after the timing: the outputs compared in the report
        np.save(spec["save"], data if data is not None else np.asanyarray(nib.load(spec["out"]).dataobj))
    return {"time": elapsed, "peak": peak, "base": base}


def measure(spec, repeat, save=None):
    """Medians of `repeat` fresh children; the first saves its output to `save`, if given."""
    runs = [run_child(__file__, dict(spec, save=save) if save and k == 0 else spec)
            for k in range(repeat)]
    return medians(runs, ("time", "peak", "base"))


def series_cases(volumes, repeat, nit_repeat, cores):
    import numpy as np
    out_nii = os.path.join(DATA, "resample_out.nii")
    saved = {t: os.path.join(DATA, f"resample_check_{t}.npy") for t in ("nit", "vp")}
    # nitransforms holds every volume's coordinates at once (minutes and GiB for a long
    # series): one process, unless --nitransforms-repeat says otherwise.
    res = {"nitransforms": measure({"tool": "nitransforms", "volumes": volumes,
                                      "threads": cores}, nit_repeat, save=saved["nit"]),
           "vp_memory": measure({"tool": "vp_memory", "volumes": volumes, "threads": cores},
                                  repeat),
           "vp_memory1": measure({"tool": "vp_memory", "volumes": volumes, "threads": 1},
                                   repeat),
           "vp_file": measure({"tool": "vp_file", "volumes": volumes, "threads": cores,
                                 "out": out_nii}, repeat, save=saved["vp"])}
    import nibabel as nib
    a, b = np.load(saved["nit"], mmap_mode="r"), np.load(saved["vp"], mmap_mode="r")
    bold = series_paths(volumes)[0]
    rng_data = float(np.ptp(np.asanyarray(nib.load(bold).dataobj[..., 0])))  # scaled values
    # Where one tool gives cval and the other a value, the point lies on the moving grid's edge
    # to within rounding: mode constant switches there, and voxpipe's composed voxel matrix and
    # nitransforms' point-by-point mapping round differently. Those voxels are counted apart.
    diff = {"max": 0.0, "edge": 0, "edge_unexplained": 0, "voxels": a.size}
    for t in range(a.shape[-1]):
        x, y = a[..., t].astype(np.float64), b[..., t].astype(np.float64)
        d = np.abs(x - y)
        big = d > 1e-5 * rng_data
        flip = (x == 0) != (y == 0)
        diff["edge"] += int(np.count_nonzero(big & flip))
        diff["edge_unexplained"] += int(np.count_nonzero(big & ~flip))
        diff["max"] = max(diff["max"], float(d[~(big & flip)].max()))
    for p in list(saved.values()) + [out_nii]:
        os.remove(p)
    return res, diff, rng_data


def main():
    ap = Parser(__doc__, repeat=11, repeat_help="interleaved rounds of the kernel calls",
                wait_idle=True)
    ap.add_argument("--series-repeat", type=int, default=3)
    ap.add_argument("--nitransforms-repeat", type=int, default=1)
    ap.add_argument("--volumes", type=int, default=300)
    args = ap.parse(child)
    make_series(args.volumes)
    load, _ = settle(args)
    cores = os.cpu_count()
    cpu0 = cpu_snapshot()
    kernel = kernel_cases(args.repeat, cores)
    series, diff, data_range = series_cases(args.volumes, args.series_repeat,
                                            args.nitransforms_repeat, cores)
    cpu1 = cpu_snapshot()
    text = report(kernel, series, diff, data_range, args, cores, load, (cpu0, cpu1))
    publish(args.output, text, BEGIN, END)


def report(kernel, series, diff, data_range, args, cores, load, cpu):
    vers = versions_text(("voxpipe", "numpy", "scipy", "nitransforms", "nibabel"))
    lines = [BEGIN, "", "## Resampling: bench/bench_resample.py", "",
             f"{stamp(cores)}; commit {git_state()}; {vers}. Load average {load:.2f} at the "
             "start; other work on the machine during the run: "
             f"{other_work_brief(other_work(*cpu, cores), steal=False)}.", "",
             f"### 1. Interpolation kernel: 96x96x60 float32, 3-D rotation, float32 out "
             f"(medians of {args.repeat} interleaved rounds; ratios are medians of the per-round "
             f"ratios; outputs equal to scipy's bit for bit, checked)", "",
             f"| order, function | scipy | voxpipe threads=1 | ratio per core | voxpipe "
             f"threads={cores} | ratio | scaling |", "|---|---|---|---|---|---|---|"]
    goals = []
    for order in (1, 3):
        for fn in ("map", "affine"):
            s = kernel[(order, "scipy", fn)]
            one, many = kernel[(order, 1, fn)], kernel[(order, cores, fn)]
            name = "map_coordinates" if fn == "map" else "affine_transform"
            r1, rn = kernel[(order, "ratio", 1, fn)], kernel[(order, "ratio", cores, fn)]
            lines.append(f"| {order}, {name} | {ms(s)} | {ms(one)} | **{r1:.2f}x** | "
                         f"{ms(many)} | {rn:.2f}x | {one / many:.2f}x |")
        if order == 3:
            for fn in ("map", "affine"):
                s = kernel[(order, "scipy", fn)]
                one, many = kernel[(order, ("fast", 1), fn)], kernel[(order, ("fast", cores), fn)]
                name = "map_coordinates" if fn == "map" else "affine_transform"
                r1 = kernel[(order, "ratio", ("fast", 1), fn)]
                rn = kernel[(order, "ratio", ("fast", cores), fn)]
                lines.append(f"| {order}, {name}, fast=True | {ms(s)} | {ms(one)} | **{r1:.2f}x** "
                             f"| {ms(many)} | {rn:.2f}x | {one / many:.2f}x |")
        r1 = kernel[(order, "ratio", 1, "map")]
        goal = 5 if order == 1 else 10
        goals.append((f"{'linear' if order == 1 else 'cubic'} >= {goal}x scipy per core"
                      + (" (default: scipy's values bit for bit)" if order == 3 else ""),
                      f"{r1:.2f}x", r1 >= goal))
        if order == 3:
            r1 = kernel[(order, "ratio", ("fast", 1), "map")]
            goals.append(("cubic >= 10x scipy per core with fast=True (within a few ulps)",
                          f"{r1:.2f}x", r1 >= goal))
    worst = max(kernel[("fast_diff", fn)] for fn in ("map", "affine"))
    lines += ["", f"fast=True: max |voxpipe - scipy| in float64 = {worst:.3g}, "
              f"{worst / kernel['data_range']:.2g} of the data range (the issue's tolerance: "
              f"1e-5 of it); the other rows equal scipy bit for bit."]
    nit = series["nitransforms"]
    lines += ["", f"### 2. A {args.volumes}-volume series, per-volume affines, order 3, "
              f"float32 out (voxpipe: medians of {args.series_repeat} fresh processes; "
              f"nitransforms: {args.nitransforms_repeat})", "",
              "| tool | time | nitransforms / tool | peak RSS (growth over imports) |",
              "|---|---|---|---|"]
    rows = [(f"nitransforms.resampling.apply, max_concurrent={cores}", nit),
            (f"vp.resample into memory, threads={cores}", series["vp_memory"]),
            ("vp.resample into memory, threads=1", series["vp_memory1"]),
            (f"vp.resample streamed to .nii, threads={cores}", series["vp_file"])]
    for label, r in rows:
        lines.append(f"| {label} | {ms(r['time'])} | **{nit['time'] / r['time']:.2f}x** | "
                     f"{r['peak'] / MIB:.0f} MiB ({(r['peak'] - r['base']) / MIB:.0f} MiB) |")
    out_mib = SHAPE[0] * SHAPE[1] * SHAPE[2] * args.volumes * 4 / MIB
    lines += ["", f"The output is {out_mib:.0f} MiB float32. Max |voxpipe - nitransforms| = "
              f"{diff['max']:.3g} ({diff['max'] / data_range:.2g} of the data range "
              f"{data_range:.0f}) on all voxels but {diff['edge']} of {diff['voxels']}, where one "
              "gives cval (0) and the other a value: points on the moving grid's edge to within "
              "rounding, where mode constant switches (voxpipe's composed voxel matrix and "
              "nitransforms' point-by-point mapping round differently); "
              f"{diff['edge_unexplained']} other voxels differ by more than 1e-5 of the range.",
              ""]
    same = series["vp_memory"]
    goals.append((f"series >= 10x nitransforms with the same threads ({cores})",
                  f"{nit['time'] / same['time']:.2f}x", nit["time"] / same["time"] >= 10))
    goals.append(("series peak RSS a fraction of nitransforms' (streamed)",
                  f"{series['vp_file']['peak'] / MIB:.0f} MiB vs {nit['peak'] / MIB:.0f} MiB",
                  series["vp_file"]["peak"] < nit["peak"]))
    lines += ["| goal (issue 6) | measured | met |", "|---|---|---|"]
    lines += [f"| {g} | {m} | {'yes' if ok else 'no'} |" for g, m, ok in goals]
    lines += ["", END]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
