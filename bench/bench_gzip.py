#!/usr/bin/env python
"""gzip for .nii.gz: voxpipe against rapidgzip, nibabel (with indexed_gzip) and pigz, in one run.

Writes the "gzip" section of BENCHMARKS.md (between the gzip markers; the rest of the file is
left as it is) and prints it.

Inputs, all holding bench/data/bold_4d.nii (96x96x60x300 int16, scaled; bench/make_data.py):
  gzip6   bold_4d.nii.gz as `gzip -6` made it (one member)
  nib1    the same data written by nibabel's own gzip writer (nibabel.openers.Opener, its
          default level 1; write_as_nibabel)
  pigz    `pigz -6` (one member of 128 KiB sync-flushed pieces, as dcm2niix writes)
  vp1     voxpipe's default output: 1 MiB sized members, libdeflate level 1
These are made here, in bench/data/gz/, when missing.

Every measurement runs in a fresh child process (this script with --child), timing only the
call and reporting peak RSS growth over the process's baseline, as bench_nifti.py does; the
files are read once before each case so that every tool sees a warm page cache, and 3 GiB of
memory are touched in a throwaway process right before it (see prime_memory). Medians of
--repeat runs.

Usage: .venv/bin/python bench/bench_gzip.py [--repeat N] [--output PATH] [--save-only]
  --save-only  only the writers (section 4), printed; BENCHMARKS.md is left as it is
"""
import gzip
import os
import shutil
import subprocess
import sys

from benchlib import (DATA, MIB, Parser, measured, medians, prime_memory, publish, run_child,
                      stamp, versions, versions_text, warm)

GZ = os.path.join(DATA, "gz")
RAW = os.path.join(DATA, "bold_4d.nii")
INPUTS = {
    "gzip6": os.path.join(DATA, "bold_4d.nii.gz"),
    "nib1": os.path.join(GZ, "bold_4d_nib1.nii.gz"),
    "pigz": os.path.join(GZ, "bold_pigz.nii.gz"),
    "vp1": os.path.join(GZ, "bold_vp1.nii.gz"),
}
MIDDLE = 150  # the volume read "from the middle of the series"
LOAD_BEFORE = "?"  # 1-minute load average when the parent started (set in main)
BEGIN = "<!-- gzip benchmark: begin -->"
END = "<!-- gzip benchmark: end -->"


# --------------------------------------------------------------------------------------------
# Child: one measurement.
# --------------------------------------------------------------------------------------------

def child(spec):
    tool, op, path = spec["tool"], spec["op"], spec.get("path")
    threads = spec.get("threads", 0)
    out_path = spec.get("out")
    if tool == "voxpipe":
        import numpy as np
        import voxpipe as vp
        if op == "f32":
            call = lambda: vp.load(path, threads=threads, index=False).get_fdata(dtype=np.float32)
        elif op == "native":
            call = lambda: vp.load(path, threads=threads, index=False).dataobj.get_unscaled()
        elif op == "volume":
            call = lambda: vp.load(path, threads=1).dataobj[..., MIDDLE]
        elif op == "f32_indexed":  # through the sidecar index the parent wrote
            call = lambda: vp.load(path, threads=threads).get_fdata(dtype=np.float32)
        elif op == "index_exact":
            call = lambda: vp.gz.build_index(path, output=out_path, exact=True)
        elif op == "index_fast":
            call = lambda: vp.gz.build_index(path, output=out_path, exact=False, threads=threads)
        elif op == "save":
            # The same in-memory int16 image for both tools: only the write is timed.
            loaded = vp.load(RAW)
            img = vp.Nifti1Image(loaded.dataobj.get_unscaled(), loaded.affine, header=loaded.header)
            call = lambda: vp.save(img, out_path, level=spec["level"], threads=threads)
        else:
            raise ValueError(op)
    elif tool == "nibabel":
        import numpy as np
        import nibabel as nib
        if op == "f32":
            call = lambda: nib.load(path).get_fdata(dtype=np.float32)
        elif op == "volume":
            call = lambda: nib.load(path).dataobj[..., MIDDLE]
        elif op == "save":
            loaded = nib.load(RAW)
            img = nib.Nifti1Image(np.asanyarray(loaded.dataobj.get_unscaled()), loaded.affine, loaded.header)
            call = lambda: nib.save(img, out_path)
        else:
            raise ValueError(op)
    elif tool == "rapidgzip":
        import numpy as np
        import rapidgzip
        import nibabel as nib
        proxy = nib.load(RAW).dataobj  # the image's header has scl and offset reset; the proxy keeps them
        shape, slope, inter, offset = proxy.shape, proxy.slope, proxy.inter, int(proxy.offset)

        def call():
            with rapidgzip.open(path, parallelization=threads) as f:
                raw = f.read()
            if op == "bytes":
                return raw
            a = np.frombuffer(raw, dtype="<i2", offset=offset).reshape(shape, order="F")
            return a * np.float32(slope) + np.float32(inter)  # float32 arithmetic, as asked
    elif tool == "pigz":
        def call():
            with open(out_path, "wb") as f:
                subprocess.run(["pigz", f"-{spec['level']}", "-p", str(threads), "-c", RAW],
                               stdout=f, check=True)
    else:
        raise ValueError(tool)
    result, seconds, peak_mib = measured(call)
    info = {"seconds": seconds, "peak_mib": peak_mib}
    if isinstance(result, dict):
        info["points"] = result.get("points")
        info["index_bytes"] = result.get("index_bytes")
    if op == "save":
        info["size"] = os.path.getsize(out_path)
    return info


# --------------------------------------------------------------------------------------------
# Parent.
# --------------------------------------------------------------------------------------------

def measure(spec, repeat):
    runs = []
    for _ in range(repeat):
        if spec.get("path"):
            warm(spec["path"])
        warm(RAW)
        prime_memory()
        runs.append(run_child(__file__, spec))
    med = medians(runs, ("seconds", "peak_mib"))
    for k in ("size", "points", "index_bytes"):
        if k in runs[0]:
            med[k] = runs[0][k]
    med["runs"] = [round(r["seconds"], 3) for r in runs]
    return med


def nib1_path(src):
    """Where write_as_nibabel's copy of `src` (a .nii or .nii.gz under bench/data) lives."""
    name = os.path.basename(src)
    for suffix in (".gz", ".nii"):
        name = name[:-len(suffix)] if name.endswith(suffix) else name
    return os.path.join(GZ, name + "_nib1.nii.gz")


def write_as_nibabel(src, dst=None):
    """The bytes of `src` (a .nii, or a .nii.gz inflated first) written to `dst` (default
    nib1_path(src)) through nibabel's own gzip writer, as nib.save writes a .nii.gz: its Opener
    at its default level (1), mtime 0, no name in the gzip header. Made when missing, in a
    scratch folder beside it and renamed into place, so that an interrupted write leaves nothing
    a later run would take for the file. Returns dst."""
    from nibabel.openers import Opener
    dst = dst or nib1_path(src)
    if os.path.exists(dst):
        return dst
    part = os.path.join(os.path.dirname(dst), f".partial-{os.getpid()}")
    os.makedirs(part, exist_ok=True)
    tmp = os.path.join(part, os.path.basename(dst))
    try:
        print(f"writing {dst} (nibabel's writer) ...", flush=True)
        with (gzip.open if src.endswith(".gz") else open)(src, "rb") as f, Opener(tmp, "wb") as g:
            shutil.copyfileobj(f, g, 16 * MIB)
        os.replace(tmp, dst)
    finally:
        shutil.rmtree(part, ignore_errors=True)
    return dst


def make_inputs():
    os.makedirs(GZ, exist_ok=True)
    if not os.path.exists(RAW):
        sys.exit("bench/data/bold_4d.nii is missing: run .venv/bin/python bench/make_data.py")
    write_as_nibabel(RAW, INPUTS["nib1"])
    if not os.path.exists(INPUTS["pigz"]):
        with open(INPUTS["pigz"], "wb") as f:
            subprocess.run(["pigz", "-6", "-c", RAW], stdout=f, check=True)
    if not os.path.exists(INPUTS["vp1"]):
        import voxpipe as vp
        vp.save(vp.load(RAW), INPUTS["vp1"])


def tool_versions():
    out = versions(("voxpipe", "nibabel", "numpy", "rapidgzip", "indexed_gzip"))
    r = subprocess.run(["pigz", "--version"], capture_output=True, text=True)
    out["pigz"] = (r.stdout or r.stderr).strip().split()[-1]
    return out


def measure_writers(res, tmp, rep):
    """vp.save at levels 1 and 6 on 1 and 2 threads, pigz -6 and nib.save, into res."""
    for t in (1, 2):
        res[("save", 1, "voxpipe", t)] = measure({"tool": "voxpipe", "op": "save", "level": 1, "threads": t,
                                                  "out": os.path.join(tmp, "vp1.nii.gz")}, rep)
        res[("save", 6, "voxpipe", t)] = measure({"tool": "voxpipe", "op": "save", "level": 6, "threads": t,
                                                  "out": os.path.join(tmp, "vp6.nii.gz")}, rep)
    res[("save", 6, "pigz", 2)] = measure({"tool": "pigz", "op": "save", "level": 6, "threads": 2,
                                           "out": os.path.join(tmp, "pigz6.nii.gz")}, rep)
    res[("save", 1, "nibabel", 1)] = measure({"tool": "nibabel", "op": "save",
                                              "out": os.path.join(tmp, "nib1.nii.gz")}, max(1, rep - 1))


def writer_table(res):
    """The "Writing .nii.gz" table and its notes, as lines."""
    lines = ["| writer | time | file size | vs nibabel time | size vs nibabel |", "|---|---|---|---|---|"]
    nsave = res[("save", 1, "nibabel", 1)]
    rows = [(("save", 1, "voxpipe", 1), "vp.save level 1 (default), 1 thread"),
            (("save", 1, "voxpipe", 2), "vp.save level 1 (default), 2 threads"),
            (("save", 6, "voxpipe", 1), "vp.save level 6, 1 thread"),
            (("save", 6, "voxpipe", 2), "vp.save level 6, 2 threads"),
            (("save", 6, "pigz", 2), "pigz -6 -p 2 (of the .nii)"),
            (("save", 1, "nibabel", 1), "nib.save (level 1)")]
    for key, label in rows:
        r = res[key]
        lines.append(f"| {label} | {r['seconds']:.3f} s | {r.get('size', 0) / MIB:.1f} MiB | "
                     f"{nsave['seconds'] / r['seconds']:.2f}x | {r.get('size', 0) / nsave.get('size', 1):.3f} |")
    p6, v6 = res[("save", 6, "pigz", 2)], res[("save", 6, "voxpipe", 2)]
    lines += ["", f"Level 6 on 2 threads: voxpipe {p6['seconds'] / v6['seconds']:.2f}x pigz's speed, file "
              f"{100 * (v6['size'] / p6['size'] - 1):+.2f}% vs pigz.",
              "Targets: default level >= 5x nibabel with a file no larger; level 6 >= pigz -6 on the same "
              "cores, file within 1%; reading our own files >= 1.9x with 2 threads (vp1 row above)."]
    return lines


def main():
    ap = Parser(__doc__, repeat=3)
    ap.add_argument("--save-only", action="store_true",
                    help="measure and print the writers only; BENCHMARKS.md is not written")
    args = ap.parse(child)
    global LOAD_BEFORE
    LOAD_BEFORE = f"{os.getloadavg()[0]:.2f}"
    make_inputs()
    tmp = os.path.join(GZ, f"out-{os.getpid()}")  # of this run: runs side by side keep theirs
    os.makedirs(tmp, exist_ok=True)
    rep = args.repeat
    res = {}
    if args.save_only:
        measure_writers(res, tmp, rep)
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"load average before: {LOAD_BEFORE}, after: {os.getloadavg()[0]:.2f}")
        print("\n".join(writer_table(res)))
        return

    # 1. Full decompression to float32.
    for name in ("gzip6", "nib1", "pigz", "vp1"):
        p = INPUTS[name]
        for t in (1, 2):
            res[("f32", name, "voxpipe", t)] = measure({"tool": "voxpipe", "op": "f32", "path": p, "threads": t}, rep)
            res[("f32", name, "rapidgzip", t)] = measure({"tool": "rapidgzip", "op": "f32", "path": p, "threads": t}, rep)
        res[("bytes", name, "rapidgzip", 2)] = measure({"tool": "rapidgzip", "op": "bytes", "path": p, "threads": 2}, rep)
        res[("native", name, "voxpipe", 2)] = measure({"tool": "voxpipe", "op": "native", "path": p, "threads": 2}, rep)
    res[("f32", "gzip6", "nibabel", 1)] = measure({"tool": "nibabel", "op": "f32", "path": INPUTS["gzip6"]}, rep)

    # 2. Index build against plain decompression (gzip -6 file).
    p = INPUTS["gzip6"]
    idx = os.path.join(tmp, "bench.gzidx")
    res[("index_exact",)] = measure({"tool": "voxpipe", "op": "index_exact", "path": p, "out": idx}, rep)
    res[("index_fast",)] = measure({"tool": "voxpipe", "op": "index_fast", "path": p, "out": idx + "2", "threads": 2}, rep)

    # 3. One volume from the middle: voxpipe with its exact sidecar index, and on its own
    #    sized-member file (no index); nibabel (indexed_gzip) from a fresh file.
    import voxpipe as vp
    vp.gz.build_index(p)  # the sidecar a fresh vp.load finds
    res[("volume", "gzip6", "voxpipe")] = measure({"tool": "voxpipe", "op": "volume", "path": p}, rep)
    res[("volume", "vp1", "voxpipe")] = measure({"tool": "voxpipe", "op": "volume", "path": INPUTS["vp1"]}, rep)
    res[("volume", "gzip6", "nibabel")] = measure({"tool": "nibabel", "op": "volume", "path": p}, rep)
    #    The whole file through the same index: its spans decode in parallel.
    for t in (1, 2):
        res[("f32_indexed", t)] = measure({"tool": "voxpipe", "op": "f32_indexed", "path": p, "threads": t}, rep)
    os.remove(p + ".gzidx")

    # 4. Writers.
    measure_writers(res, tmp, rep)
    shutil.rmtree(tmp, ignore_errors=True)

    publish(args.output, report(res, rep), BEGIN, END)


def report(res, rep):
    def s(key):
        return res[key]["seconds"]

    def rss(key):
        return res[key]["peak_mib"]

    out_mib = 96 * 96 * 60 * 300 * 4 / MIB
    lines = [BEGIN, "", "## gzip (.nii.gz): bench/bench_gzip.py", "",
             f"{stamp()}; medians of {rep} fresh processes, memory primed before each. "
             + versions_text(tool_versions()) + ".",
             "", "Input: bench/data/bold_4d.nii (96x96x60x300 int16, 316 MiB, scaled) compressed by "
             "`gzip -6` (gzip6), nibabel's own writer (nib1: its gzip Opener, level 1), `pigz -6` (pigz) "
             "and `vp.save` (vp1: voxpipe's sized members, level 1). Sizes: " +
             ", ".join(f"{k} {os.path.getsize(v) / MIB:.1f} MiB" for k, v in INPUTS.items()) + ".",
             "", "### Full decompression to a float32 array", "",
             f"Output {out_mib:.0f} MiB. Peak RSS is the growth over the process's baseline: output + "
             "working memory.", "",
             "| input | voxpipe 1 thread | voxpipe 2 threads | 2 vs 1 | rapidgzip P=1 | rapidgzip P=2 | "
             "voxpipe(2) vs rapidgzip(2) | rapidgzip P=2, bytes only | voxpipe 2, native int16 | "
             "peak RSS voxpipe(2) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name in ("gzip6", "nib1", "pigz", "vp1"):
        v1, v2 = s(("f32", name, "voxpipe", 1)), s(("f32", name, "voxpipe", 2))
        r1, r2 = s(("f32", name, "rapidgzip", 1)), s(("f32", name, "rapidgzip", 2))
        lines.append(f"| {name} | {v1:.3f} s | {v2:.3f} s | **{v1 / v2:.2f}x** | {r1:.3f} s | {r2:.3f} s | "
                     f"**{r2 / v2:.2f}x** | {s(('bytes', name, 'rapidgzip', 2)):.3f} s | "
                     f"{s(('native', name, 'voxpipe', 2)):.3f} s | {rss(('f32', name, 'voxpipe', 2)):.0f} MiB |")
    nb = s(("f32", "gzip6", "nibabel", 1))
    lines += ["", f"nibabel (indexed_gzip), gzip6 to float32: {nb:.3f} s "
              f"({nb / s(('f32', 'gzip6', 'voxpipe', 2)):.1f}x slower than voxpipe on 2 threads).",
              "", "Targets: 2 threads >= 1.8x voxpipe's own single-thread (ISA-L) time; voxpipe >= "
              "rapidgzip with the same threads.", "",
              "### Seek index", ""]
    ex, fa = res[("index_exact",)], res[("index_fast",)]
    plain = s(("native", "gzip6", "voxpipe", 2))
    lines += ["| index of gzip6 | time | points | index file | vs plain 2-thread decompression to int16 |",
              "|---|---|---|---|---|",
              f"| exact (a point per volume; one pass of voxpipe's decoder, chunks on all threads) | {ex['seconds']:.3f} s | {ex.get('points')} | "
              f"{(ex.get('index_bytes') or 0) / MIB:.1f} MiB | {ex['seconds'] / plain:.2f}x |",
              f"| fast (by-product of the 2-thread parallel inflate) | {fa['seconds']:.3f} s | {fa.get('points')} | "
              f"{(fa.get('index_bytes') or 0) / MIB:.1f} MiB | {fa['seconds'] / plain:.2f}x |",
              "", "Target: building the index costs at most 10% over a plain decompression.", "",
              "### One volume from the middle (t = 150), fresh process", "",
              "| reader | time | vs nibabel |", "|---|---|---|"]
    nv = s(("volume", "gzip6", "nibabel"))
    for key, label in ((("volume", "gzip6", "voxpipe"), "voxpipe, gzip6 + exact sidecar index (index load included)"),
                       (("volume", "vp1", "voxpipe"), "voxpipe, vp1 (sized members, no index)")):
        lines.append(f"| {label} | {s(key) * 1000:.1f} ms | **{nv / s(key):.0f}x** |")
    lines += [f"| nibabel + indexed_gzip, gzip6 | {nv * 1000:.0f} ms | 1x |", "",
              "Target: >= 50x nibabel with an index.", "",
              "The whole of gzip6 to float32 through the same index (its spans inflate in parallel, "
              f"ISA-L from each point): 1 thread {s(('f32_indexed', 1)):.3f} s, 2 threads "
              f"{s(('f32_indexed', 2)):.3f} s; without the index (the parallel engine) "
              f"{s(('f32', 'gzip6', 'voxpipe', 1)):.3f} s and {s(('f32', 'gzip6', 'voxpipe', 2)):.3f} s.", "",
              "### Writing .nii.gz", ""]
    lines += writer_table(res) + ["", END]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
