#!/usr/bin/env python
"""voxpipe vs nibabel on NIfTI reads, in one run; writes BENCHMARKS.md and prints it.

Every measurement runs in a fresh child process (this same script with --child), so that
  * peak RSS belongs to that one measurement (VmHWM from /proc/self/status; the child resets it
    with /proc/self/clear_refs just before the timed call, so import-time peaks do not count),
  * "first" really is first: a new process, a new output allocation whose pages are touched for
    the first time (page faults included), nothing cached in the library,
  * one tool cannot leave memory or caches behind for the other.
The child times only the read call itself (load + read, not the imports) and reports it as JSON.
The files are read once by the parent before each case, so both tools see a warm page cache.

Usage: .venv/bin/python bench/bench_nifti.py [--repeat N] [--quick] [--output PATH] [--no-verify]
Inputs come from bench/make_data.py.
"""
import datetime
import os
import platform
import statistics
import re
import sys
import time

from benchlib import (DATA, MIB, REPO, Parser, command, cpu_name, cpu_snapshot, errors_lines,
                      fmt_t, interleaved, memory_bytes, other_work, prime_memory, python,
                      reset_peak_rss, targets_lines, try_child, vm, warm)

FILES = {
    "gz4d": os.path.join(DATA, "bold_4d.nii.gz"),
    "nii4d": os.path.join(DATA, "bold_4d.nii"),
    "gz3d": os.path.join(DATA, "t1_3d.nii.gz"),
}

# Targets (from the project's goals). Speed-ups are nibabel time / voxpipe time.
TARGET_SPEEDUP = 3.0
TARGET_OVERHEAD_MIB = 64.0
TARGET_NATIVE_FRACTION = 0.8  # voxpipe raw read vs plain f.readinto, as a fraction of its speed


# --------------------------------------------------------------------------------------------
# Child side: one measurement in a fresh process. Only the measured tool is imported here, so
# the other tool's modules do not inflate the baseline RSS.
# --------------------------------------------------------------------------------------------

def proc_rchar():
    """Bytes this process got from read()/pread() so far. mmap page-ins are not counted here,
    which is why the child also reports the RssFile growth (file pages mapped in)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return None


def make_call(spec, np):
    """Return call(out) -> array for this measurement. out is the previous result, offered for
    reuse on the warm call by the operations that support writing into an existing buffer."""
    tool, op, path = spec["tool"], spec["op"], spec["path"]
    if tool == "readinto":
        offset, nbytes = spec["offset"], spec["nbytes"]

        def call(out):
            # Plain Python: the fastest way to get the data bytes into memory without any
            # library. np.empty asks the kernel for huge pages just as NumPy-backed outputs do.
            buf = np.empty(nbytes, np.uint8) if out is None else out
            mv = memoryview(buf)
            with open(path, "rb", buffering=0) as f:
                f.seek(offset)
                done = 0
                while done < nbytes:
                    n = f.readinto(mv[done:])
                    if not n:
                        raise EOFError(path)
                    done += n
            return buf
        return call

    lib = __import__("voxpipe" if tool == "vp" else "nibabel")
    if op == "fdata":
        kw = {"threads": spec["threads"]} if "threads" in spec else {}
        return lambda out: lib.load(path, **kw).get_fdata(dtype=np.float32)
    if op == "volume":
        t = spec["t"]
        return lambda out: lib.load(path).dataobj[..., t]
    if op == "native":
        def call(out):
            proxy = lib.load(path).dataobj
            if not hasattr(proxy, "get_unscaled"):
                raise NotImplementedError("dataobj has no get_unscaled()")
            if out is not None:
                return proxy.get_unscaled(out=out)  # TypeError if unsupported: caller falls back
            return proxy.get_unscaled()
        return call
    raise ValueError(op)


def materialize(out, np):
    """A memory map (what nibabel's get_unscaled() returns for .nii) has read nothing yet: copy it,
    inside the timed region, so that every row times getting the data into memory."""
    import mmap
    a = out
    while a is not None:
        if isinstance(a, (np.memmap, mmap.mmap)):
            return np.array(out), True
        a = getattr(a, "base", None)
    return np.asarray(out), False


def measure(spec):
    import numpy as np
    raw_call = make_call(spec, np)
    res = {"warm_mode": None, "was_mmap": False}

    def call(out):
        a, was_mmap = materialize(raw_call(out), np)
        res["was_mmap"] |= was_mmap
        return a

    rss0 = vm("VmRSS")
    file0 = vm("RssFile")
    res["hwm_reset"] = reset_peak_rss()
    io0 = proc_rchar()
    t0 = time.perf_counter()
    out = call(None)
    t1 = time.perf_counter()
    res["first_s"] = t1 - t0
    res["rss_before"] = rss0
    res["peak_rss"] = vm("VmHWM")
    res["rchar"] = proc_rchar() - io0
    res["rssfile_delta"] = vm("RssFile") - file0
    res["out_nbytes"] = int(out.nbytes)
    res["out_dtype"] = str(out.dtype)
    res["out_shape"] = list(out.shape)

    if spec.get("warm"):
        # Second call in the same process: code, libraries, thread pools and the file are warm.
        # The output is fresh memory again (the first result is freed and large blocks go back to
        # the kernel), unless the operation can write into the previous result (readinto, and
        # voxpipe's get_unscaled if it accepts out=).
        t = None
        if spec["op"] == "native":
            try:
                t0 = time.perf_counter()
                out = call(out)
                t = time.perf_counter() - t0
                res["warm_mode"] = "reused buffer"
            except TypeError:
                pass
        if t is None:
            del out
            io0, file0 = proc_rchar(), vm("RssFile")
            t0 = time.perf_counter()
            out = call(None)
            t = time.perf_counter() - t0
            res["warm_mode"] = "fresh output"
            # Bytes read by the warm call alone: the first call's numbers also include the code
            # pages of modules that the libraries import lazily on first use.
            res["warm_rchar"] = proc_rchar() - io0
            res["warm_rssfile_delta"] = vm("RssFile") - file0
        res["warm_s"] = t
    return res


def run_info():
    """Versions and thread settings, from a child so that a broken voxpipe cannot stop the run."""
    import numpy
    import nibabel
    info = {"numpy": numpy.__version__, "nibabel": nibabel.__version__}
    try:
        import indexed_gzip
        info["indexed_gzip"] = getattr(indexed_gzip, "__version__", "installed")
    except ImportError:
        info["indexed_gzip"] = "not installed"
    try:
        import voxpipe as vp
        info["voxpipe"] = getattr(vp, "__version__", "unknown version")
        info["voxpipe_file"] = os.path.dirname(vp.__file__)
        threads = None
        for name in ("get_num_threads", "num_threads", "get_threads", "threads"):
            v = getattr(vp, name, None)
            try:
                v = v() if callable(v) else v
            except Exception:
                continue
            if isinstance(v, int):
                threads = f"{v} (vp.{name})"
                break
        if threads is None:
            import inspect
            try:
                param = inspect.signature(vp.load).parameters.get("threads")
            except (TypeError, ValueError):
                param = None
            if param is not None:
                threads = f"`load(threads={param.default!r})` default (the library chooses; not overridden here)"
        info["voxpipe_threads"] = threads
    except Exception as e:  # report, don't fail: the nibabel side is still worth measuring
        info["voxpipe"] = None
        info["voxpipe_error"] = f"{type(e).__name__}: {e}"
    return info


def compare(a, b):
    """'identical' or a short description of how voxpipe's array a differs from nibabel's b."""
    import numpy as np
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False, f"shape {a.shape} vs nibabel {b.shape}"
    if a.dtype != b.dtype:
        note = f"dtype {a.dtype} vs nibabel {b.dtype}"
        b = b.astype(a.dtype)  # still say whether the values agree
    else:
        note = ""
    diff = a != b
    n = int(np.count_nonzero(diff))
    if n == 0:
        return note == "", ("identical" if not note else note + "; values equal after cast")
    d = np.abs(a[diff].astype(np.float64) - b[diff].astype(np.float64))
    return False, (note + "; " if note else "") + f"{n} values differ, max abs diff {d.max():.3g}"


def run_verify(spec):
    """Do voxpipe and nibabel return the same thing for every case measured here?"""
    import numpy as np
    import nibabel as nib
    import voxpipe as vp
    t, checks = spec["t"], []

    def check(name, fn):
        try:
            ok, msg = fn()
        except Exception as e:
            ok, msg = False, f"{type(e).__name__}: {e}"
        checks.append((name, ok, msg))

    for key in ("gz4d", "nii4d", "gz3d"):
        p = FILES[key]
        name = os.path.basename(p)
        check(f"{name}: shape, affine, pixdim, slope/inter", lambda: header_agrees(vp.load(p), nib.load(p), np))
        check(f"{name}: get_fdata(dtype=float32)",
              lambda: compare(vp.load(p).get_fdata(dtype=np.float32), nib.load(p).get_fdata(dtype=np.float32)))
    p = FILES["nii4d"]
    check("bold_4d.nii: dataobj.get_unscaled()",
          lambda: compare(vp.load(p).dataobj.get_unscaled(), np.asarray(nib.load(p).dataobj.get_unscaled())))
    check(f"bold_4d.nii: dataobj[..., {t}]", lambda: compare(vp.load(p).dataobj[..., t], nib.load(p).dataobj[..., t]))
    return checks


def header_agrees(v, n, np):
    problems = []
    if tuple(v.shape) != tuple(n.shape):
        problems.append(f"shape {v.shape} vs {n.shape}")
    if not np.array_equal(np.asarray(v.affine), n.affine):
        problems.append("affine differs")
    if not np.array_equal(np.asarray(v.header["pixdim"]), n.header["pixdim"]):
        problems.append(f"pixdim {v.header['pixdim']} vs {n.header['pixdim']}")
    for attr in ("slope", "inter"):
        a, b = getattr(v.dataobj, attr), getattr(n.dataobj, attr)
        if a != b:
            problems.append(f"dataobj.{attr} {a!r} vs {b!r}")
    return not problems, "; ".join(problems) or "identical"


# --------------------------------------------------------------------------------------------
# Parent side: schedule children, summarise, write the report.
# --------------------------------------------------------------------------------------------

def child(spec):
    """The child's side of --child: one measurement, the run's facts (info) or the check
    (verify)."""
    op = spec.get("op")
    if op == "info":
        return run_info()
    if op == "verify":
        return run_verify(spec)
    return measure(spec)


def summarise(results, key):
    xs = [r[key] for r in results if key in r]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "n": len(xs)}


def run_case(rows, repeat, log, warmup, prime_mib):
    """rows: list of (label, spec), interleaved (benchlib.interleaved) so that slow drift of the
    machine (thermal, other load) does not favour one tool."""
    results = {label: [] for label, _ in rows}
    warm(*{spec["path"] for _, spec in rows})
    if warmup:
        # One discarded round: the first large allocations after the page cache was filled are
        # much slower on this kind of VM (the kernel/hypervisor still has to back that memory),
        # and that penalty would land on whichever tool happens to run first.
        for label, spec in rows:
            prime_memory(prime_mib)
            try_child(__file__, spec)
    for r, label, spec in interleaved(rows, repeat):
        prime_memory(prime_mib)
        res = try_child(__file__, spec)
        results[label].append(res)
        log(f"  [{r + 1}/{repeat}] {label}: " + (f"error: {res['error']}" if "error" in res else
            f"first {res['first_s']:.3f} s" + (f", warm {res['warm_s']:.3f} s" if "warm_s" in res else "")
            + f", peak RSS {res['peak_rss'] / MIB:.0f} MiB"))
    out = {}
    for label, _ in rows:
        rs = [x for x in results[label] if "error" not in x]
        errs = [x for x in results[label] if "error" in x]
        out[label] = {
            "first": summarise(rs, "first_s"),
            "warm": summarise(rs, "warm_s"),
            "peak": max((x["peak_rss"] for x in rs), default=None),
            # Overhead: what the call needed beyond the process it started in and its output.
            "overhead": max((x["peak_rss"] - x["rss_before"] - x["out_nbytes"] for x in rs), default=None),
            "rchar": max((x.get("warm_rchar", x["rchar"]) for x in rs), default=None),
            "rssfile": max((x.get("warm_rssfile_delta", x["rssfile_delta"]) for x in rs), default=None),
            "out": rs[0] if rs else None,
            "warm_mode": rs[0]["warm_mode"] if rs else None,
            "was_mmap": any(x["was_mmap"] for x in rs),
            "hwm_reset": all(x["hwm_reset"] for x in rs),
            "error": errs[0] if errs else None,
        }
    return out


def fmt_s(s):
    if s is None:
        return "n/a"
    return f"{s * 1000:.1f} ms" if s < 0.1 else f"{s:.3f} s"


def fmt_mib(b):
    return "n/a" if b is None else f"{b / MIB:.0f}"


def ratio(ref, ours, key):
    """Speed-up of voxpipe over the reference: reference median time / voxpipe median time."""
    if not ref or not ours or not ref.get(key) or not ours.get(key):
        return None
    return ref[key]["median"] / ours[key]["median"]


def fmt_x(x):
    return "n/a" if x is None else f"{x:.2f}x"


def verdict(value, ok):
    if value is None:
        return "not measured"
    return "**met**" if ok else "**not met**"


def overhead_target(what, v):
    """voxpipe's memory beyond its output. Strictly: peak - RSS before the call - output; the
    looser peak - output (which also counts the interpreter and NumPy) is shown alongside."""
    if not v or v["overhead"] is None:
        return (f"{what} -> float32 voxpipe overhead <= 64 MiB", "n/a", "not measured")
    ov, loose = v["overhead"], v["peak"] - v["out"]["out_nbytes"]
    return (f"{what} -> float32 voxpipe overhead <= 64 MiB",
            f"{fmt_mib(ov)} MiB (peak - output: {fmt_mib(loose)} MiB, incl. interpreter)",
            verdict(ov, ov <= TARGET_OVERHEAD_MIB * MIB))


def machine_info():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            thp = f.read().strip()
    except OSError:
        thp = "unknown"
    return {"cpu": cpu_name(), "cores": os.cpu_count(), "usable": len(os.sched_getaffinity(0)),
            "mem_gib": memory_bytes() / 2**30, "thp": thp, "kernel": platform.release()}


def main():
    ap = Parser(__doc__, repeat=5, repeat_help="fresh processes per measurement",
                quick="smoke test: 1 repeat, report to bench/data/BENCHMARKS-quick.md unless "
                      "--output")
    ap.add_argument("--no-verify", action="store_true", help="skip the voxpipe == nibabel check")
    ap.add_argument("--prime-mib", type=int, default=3072,
                    help="MiB touched in a throwaway process before each measurement (0: off; see prime_memory)")
    # The children skip interpreter shutdown (benchlib.child_main): only the read is measured,
    # and voxpipe 0.1.0 hangs at exit after a threaded read (its static thread pool destroys a
    # condition variable that its detached workers still wait on). The parent's timeout
    # reports any other hang.
    args = ap.parse(child)
    if args.quick:
        args.repeat = 1
    output = args.output
    missing = [p for p in FILES.values() if not os.path.exists(p)]
    if missing:
        sys.exit(f"missing {', '.join(missing)}: run .venv/bin/python bench/make_data.py first")
    log = lambda msg: print(msg, file=sys.stderr, flush=True)

    import nibabel as nib  # parent only: for file facts (offset, sizes), never timed
    import numpy as np
    h4 = nib.load(FILES["nii4d"])
    shape4 = h4.shape
    t_mid = shape4[3] // 2
    offset = int(h4.dataobj.offset)
    nbytes4 = int(np.prod(shape4)) * 2
    vol_bytes = int(np.prod(shape4[:3])) * 2

    info = try_child(__file__, {"op": "info"})
    have_vp = bool(info.get("voxpipe"))
    if not have_vp:
        log(f"voxpipe unavailable ({info.get('voxpipe_error') or info.get('error')}); measuring nibabel only")
    started = time.time()
    info["cpu_before"] = cpu_snapshot()

    def rows(*rs):
        return [(label, spec) for label, spec in rs if spec["tool"] != "vp" or have_vp]

    def s(tool, op, key, **kw):
        return dict(tool=tool, op=op, path=FILES[key], **kw)

    cases = {
        "gz4d": rows(("voxpipe", s("vp", "fdata", "gz4d", warm=True)),
                     ("voxpipe threads=1", s("vp", "fdata", "gz4d", warm=True, threads=1)),
                     ("nibabel", s("nib", "fdata", "gz4d", warm=True))),
        "nii4d": rows(("voxpipe", s("vp", "fdata", "nii4d", warm=True)), ("nibabel", s("nib", "fdata", "nii4d", warm=True))),
        "native": rows(("voxpipe", s("vp", "native", "nii4d", warm=True)),
                       ("readinto", s("readinto", "native", "nii4d", warm=True, offset=offset, nbytes=nbytes4))),
        "volume": rows(("voxpipe", s("vp", "volume", "nii4d", t=t_mid, warm=True)),
                       ("nibabel", s("nib", "volume", "nii4d", t=t_mid, warm=True))),
        "gz3d": rows(("voxpipe", s("vp", "fdata", "gz3d", warm=True)), ("nibabel", s("nib", "fdata", "gz3d", warm=True))),
    }
    res = {}
    for name, case_rows in cases.items():
        log(f"case {name}")
        res[name] = run_case(case_rows, args.repeat, log, warmup=not args.quick, prime_mib=args.prime_mib)

    checks = None
    if have_vp and not args.no_verify:
        log("verifying voxpipe == nibabel")
        warm(*FILES.values())
        checks = try_child(__file__, {"op": "verify", "t": t_mid})

    info["cpu_after"] = cpu_snapshot()
    report = render(args, info, res, checks, dict(shape4=shape4, t=t_mid, vol_bytes=vol_bytes, nbytes4=nbytes4),
                    time.time() - started)
    # This report is the head of the file; the other benchmarks' sections follow it between their
    # markers (benchlib.write_section) and are kept as they are.
    old = open(output).read() if os.path.exists(output) else ""
    others = re.search(r"^<!-- [\w-]+ benchmark: begin -->$", old, re.M)
    with open(output, "w") as f:
        f.write(report.rstrip("\n") + "\n")
        if others:
            f.write("\n" + old[others.start():])
    print(report)
    log(f"wrote {output}")


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

def render(args, info, res, checks, facts, elapsed):
    import numpy as np
    m = machine_info()
    py, cmd = python(), command()
    L = []
    w = L.append
    w("# Benchmarks: voxpipe vs nibabel (NIfTI reads)\n")
    w(f"Generated by `bench/bench_nifti.py`{' (**--quick smoke test, 1 repeat: not for quoting**)' if args.quick else ''}."
      " Do not edit by hand; rerun instead.\n")
    w(f"- Date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} (run took {elapsed:.0f} s)")
    w(f"- Machine: {m['cpu']}, {m['cores']} logical cores ({m['usable']} usable), {m['mem_gib']:.1f} GiB RAM, "
      f"Linux {m['kernel']}, transparent huge pages `{m['thp']}`")
    w(f"- Python {platform.python_version()}, NumPy {info.get('numpy')}, nibabel {info.get('nibabel')}, "
      f"indexed_gzip {info.get('indexed_gzip')} (nibabel uses it for .nii.gz), "
      f"voxpipe {info.get('voxpipe') or 'NOT AVAILABLE: ' + str(info.get('voxpipe_error') or info.get('error'))}")
    thr = (info.get("voxpipe_threads") or "not exposed by the API") + f", {m['usable']} usable cores"
    env = ", ".join(f"`{k}={v}`" for k, v in os.environ.items() if k.startswith("VOXPIPE") or k.endswith("_NUM_THREADS"))
    w(f"- Threads: voxpipe {thr}; nibabel and readinto are single-threaded." + (f" Environment: {env}." if env else ""))
    w(f"- Command: `{cmd}` (data: `{py} bench/make_data.py`)")
    w(f"- Repeats: {args.repeat} fresh process(es) per row{', after one discarded warm-up round per case' if not args.quick else ''}; "
      "times are **median (min)** of the timed call only.")
    use = other_work(info["cpu_before"], info["cpu_after"], m["usable"])
    capacity = use["capacity"]
    w(f"- Other work on the machine during the run: {use['others']:.0f} CPU-seconds, {use['share']:.0f}% of the "
      f"{m['usable']} cores (this benchmark used {100 * use['ours'] / capacity:.0f}%; hypervisor steal "
      f"{100 * use['steal'] / capacity:.0f}%).")
    if use["others"] > 0.1 * capacity:
        w("- **Warning: the machine was busy during this run.** The numbers are pessimistic and noisy, most of all for "
          "multi-threaded voxpipe, which competes with the other work for every core; rerun on a quiet machine.")
    w("")

    w("## Method\n")
    w("- Data (`bench/make_data.py`, fixed seed): `bold_4d` 96x96x60x300 int16 (332 MB) and `t1_3d` 256x256x176 "
      "int16 (23 MB), scl_slope 0.73, scl_inter -12.5, MRI-like structure plus Rician noise; "
      f".nii.gz made by `gzip -6`: {ratio_of('bold_4d')} and {ratio_of('t1_3d')}.")
    w("- Every measurement runs in a new Python process; only the measured library is imported. Timed: "
      "`load(path)` plus the read, nothing else.")
    w("- Children report their JSON and leave with `os._exit(0)`: interpreter shutdown is not measured.")
    w("- Page cache: before each case the parent reads every input file once, so both tools read from a warm "
      "cache; no storage I/O is measured.")
    if args.prime_mib:
        w(f"- Memory priming: right before every measured process, a throwaway process touches {args.prime_mib} MiB. "
          "On this VM, memory left untouched for a few seconds goes back to the host and the next process to touch it "
          "pays up to ~10x more per page fault (the same nibabel read took 0.6 s after a big allocation, 8.8 s after "
          "20 s idle); priming gives every row the same condition instead of penalising whichever runs after a pause.")
    else:
        w("- Memory priming: off (`--prime-mib 0`): rows that run after an idle pause may pay much more for page faults.")
    w("- **first** = the first call in a fresh process: the output is new memory, so its page faults are "
      "included (expensive on this kind of machine, see DESIGN.md). **warm** = a second call in the same process "
      "after freeing the first result: libraries, thread pools and the file are warm. nibabel allocates a new "
      "output (fresh pages); voxpipe's output comes from its recycled-output pool (docs/many.md), which gives the "
      "first result's freed buffer back when it fits the pool's limit (512 MiB: the t1_3d output, not "
      "bold_4d's 633 MiB). *reused buffer*: both read into the same caller's buffer again.")
    w("- Peak RSS = VmHWM of the child, reset with `/proc/self/clear_refs` right before the call, so it is the "
      "peak during the call (including the interpreter, ~RSS before the call). Overhead = peak - RSS before the "
      "call - output size: the extra memory the read needed. nibabel maps `.nii` files (mmap), so its peak also "
      "counts the file pages it maps.")
    w("- Speed-up = nibabel (or readinto) median / voxpipe median; > 1 means voxpipe is faster.\n")

    targets = []
    MB = 1e6

    def speed_table(title, case, out_bytes_note, ref="nibabel"):
        r = res[case]
        w(f"## {title}\n")
        w(f"| tool | first | warm | peak RSS MiB | overhead MiB | throughput (first, output) |")
        w("|---|---|---|---|---|---|")
        for label in r:
            x = r[label]
            if x["error"] and not x["first"]:
                w(f"| {label} | error: `{x['error']['error']}` | | | | |")
                continue
            thr_ = f"{x['out']['out_nbytes'] / x['first']['median'] / MB:.0f} MB/s" if x["first"] else "n/a"
            wm = fmt_t(x["warm"], fmt_s) + (" (reused buffer)" if x["warm_mode"] == "reused buffer" else "")
            if x["was_mmap"]:
                label += " (returned a memmap; timed incl. copying it)"
            w(f"| {label} | {fmt_t(x['first'], fmt_s)} | {wm} | {fmt_mib(x['peak'])} | {fmt_mib(x['overhead'])} | {thr_} |")
        v, n = r.get("voxpipe"), r.get(ref)
        w("")
        if v and n:
            w(f"Speed-up ({ref} / voxpipe): first **{fmt_x(ratio(n, v, 'first'))}**, warm **{fmt_x(ratio(n, v, 'warm'))}**. "
              + out_bytes_note + "\n")
        elif out_bytes_note:
            w(out_bytes_note + "\n")
        return v, n

    out4 = facts["nbytes4"] * 2  # float32 output of the 4D series
    v, n = speed_table("1. bold_4d.nii.gz -> float32 (get_fdata)", "gz4d",
                       f"Output {out4 / MIB:.0f} MiB float32.")
    sp = ratio(n, v, "first")
    targets.append(("4D .nii.gz -> float32 speed-up >= 3x (first)", fmt_x(sp), verdict(sp, sp is not None and sp >= TARGET_SPEEDUP)))
    # The issue asks for the speed-up "on one thread": voxpipe's default overlaps inflate with
    # conversion on a second core, so the single-threaded figure is reported too.
    v1 = res["gz4d"].get("voxpipe threads=1")
    if v1 and n:
        sp1 = ratio(n, v1, "first")
        targets.append(("4D .nii.gz -> float32 speed-up >= 3x, voxpipe `threads=1` (first)", fmt_x(sp1),
                        verdict(sp1, sp1 is not None and sp1 >= TARGET_SPEEDUP)))
    targets.append(overhead_target("4D .nii.gz", v))

    v, n = speed_table("2. bold_4d.nii -> float32 (get_fdata)", "nii4d", f"Output {out4 / MIB:.0f} MiB float32.")
    sp = ratio(n, v, "first")
    targets.append(("4D .nii -> float32 speed-up >= 3x (first)", fmt_x(sp), verdict(sp, sp is not None and sp >= TARGET_SPEEDUP)))
    targets.append(overhead_target("4D .nii", v))

    v, n = speed_table("3. bold_4d.nii native int16 read: voxpipe `dataobj.get_unscaled()` vs plain `f.readinto(buffer)`",
                       "native", f"Output {facts['nbytes4'] / MIB:.0f} MiB int16. readinto: first = `np.empty` + "
                       "`readinto` into it; warm = `readinto` again into the same buffer.", ref="readinto")
    for key in ("first", "warm"):
        frac = ratio(n, v, key)
        cond = ""
        if key == "warm" and v and v["warm_mode"] != "reused buffer":
            cond = " (voxpipe has no `out=`: its warm call allocates fresh memory, readinto's does not)"
        targets.append((f"native read >= 80% of readinto speed ({key}){cond}",
                        "n/a" if frac is None else f"{frac * 100:.0f}%",
                        verdict(frac, frac is not None and frac >= TARGET_NATIVE_FRACTION)))

    r = res["volume"]
    w(f"## 4. One volume: `load(bold_4d.nii).dataobj[..., {facts['t']}]`\n")
    w(f"Volume size: {facts['vol_bytes']:,} bytes of int16 on disk. Bytes read = `rchar` growth in /proc/self/io "
      "(read/pread calls); mapped = RssFile growth (file pages mapped in through mmap, which rchar does not see). "
      "Both are taken from the warm call, so that code pages of lazily imported modules do not count.\n")
    w("| tool | first | warm | bytes read (rchar) | bytes mapped (RssFile) | output |")
    w("|---|---|---|---|---|---|")
    for label, x in r.items():
        if x["error"] and not x["first"]:
            w(f"| {label} | error: `{x['error']['error']}` | | | | |")
            continue
        o = x["out"]
        w(f"| {label} | {fmt_t(x['first'], fmt_s)} | {fmt_t(x['warm'], fmt_s)} | {x['rchar']:,} | {x['rssfile']:,} | "
          f"{o['out_dtype']} {tuple(o['out_shape'])} |")
    w("")
    v, n = r.get("voxpipe"), r.get("nibabel")
    if v and n:
        w(f"Speed-up (nibabel / voxpipe): first **{fmt_x(ratio(n, v, 'first'))}**, warm **{fmt_x(ratio(n, v, 'warm'))}**.\n")
    if v and v["first"]:
        touched = v["rchar"] + max(v["rssfile"], 0)
        targets.append(("one volume: voxpipe reads about one volume of bytes (no target set)",
                        f"{touched / facts['vol_bytes']:.2f}x volume",
                        "info: ok (<= 2x)" if touched <= 2 * facts["vol_bytes"] else "info: **reads more than 2x**"))

    v, n = speed_table("5. t1_3d.nii.gz (256x256x176) -> float32 (get_fdata)", "gz3d",
                       f"Output {256 * 256 * 176 * 4 / MIB:.0f} MiB float32.")
    sp = ratio(n, v, "first")
    targets.append(("3D .nii.gz -> float32 speed-up (first; no target set)", fmt_x(sp),
                    "not measured" if sp is None else ("info: >= 3x" if sp >= TARGET_SPEEDUP else "info: < 3x")))

    L += targets_lines("## Targets", targets)

    w("## Agreement with nibabel\n")
    if checks is None:
        w("Not checked (voxpipe unavailable or --no-verify).\n")
    elif isinstance(checks, dict):
        w(f"Verification child failed: `{checks.get('error')}`\n")
    else:
        w("| check | result |")
        w("|---|---|")
        for name, ok, msg in checks:
            w(f"| {name} | {'ok' if ok else '**MISMATCH**'}: {msg} |")
        w("")

    L += errors_lines("## Errors", [(c, l, x["error"]) for c, rr in res.items()
                                    for l, x in rr.items() if x["error"]], prefix="case ")
    if not all(x["hwm_reset"] for rr in res.values() for x in rr.values() if x["out"]):
        w("Note: /proc/self/clear_refs was not writable, so peak RSS may include import-time peaks.\n")
    return "\n".join(L) + "\n"


def ratio_of(name):
    n = os.path.getsize(os.path.join(DATA, name + ".nii"))
    g = os.path.getsize(os.path.join(DATA, name + ".nii.gz"))
    return f"{name} {g / 1e6:.0f} MB ({n / g:.2f}:1)"


if __name__ == "__main__":
    main()
