#!/usr/bin/env python
"""NIfTI-Zarr: voxpipe against zarr-python, the reference implementation (niizarr) and nibabel,
reading, converting, on a local S3 server and on a Dask cluster, in one run (issue 21).

Writes the "zarr" section of BENCHMARKS.md (between its markers; the rest of the file is left
as it is) and prints it.

Inputs: bench/data/bold_4d.nii.gz (make_data.py: 96x96x60x300 int16, gzip -6) and the first
--files (40) T1-size files of bench_many.py's set (256x256x176 int16 .nii.gz saved by nibabel,
made when missing), each converted once to NIfTI-Zarr with ``vp.save``'s defaults (Zarr v3,
zstd level 3, one volume per chunk for the series, slabs of whole slices of about 4 MiB for 3D)
into bench/data/zarr/ (again when the source is newer). --quick makes tiny inputs of the same
kind (make_data.py's generator) in bench/data/zarr-quick/ instead.

Every tool runs with the same thread count (--threads, default: every core): voxpipe
``threads=N``; zarr-python's ``threading.max_workers`` (its codec pool; also what voxpipe and
niizarr write through); Dask's threaded scheduler ``num_workers`` (niizarr's arrays); the Dask
cluster of case 4 has N single-threaded worker processes.

Cases (each row in a fresh child process, rows interleaved with the order reversed every
repeat, memory primed before each, the inputs read once before each so the page cache is warm;
times are median (min) of the timed call only, imports not included):
  1. NIfTI-Zarr to float32: the series' store, first and warm call; the --files stores in a loop
     after one untimed read. voxpipe ``vp.load(store).get_fdata(dtype=np.float32)``; zarr
     ``open_group`` + the header array's scl_slope/inter + ``group["0"][...]`` scaled as nibabel
     scales (``apply_read_scaling``, float64, then float32: the same values) and, for speed
     only, in float32 arithmetic (values a little apart); ``niizarr.zarr2nii(store)
     .get_fdata(dtype=np.float32)``, which returns the stored values unscaled (niizarr drops
     scl_slope/scl_inter); voxpipe on the source .nii.gz for reference.
  2. .nii.gz -> .nii.zarr: ``vp.save(vp.load(gz), out)``, ``voxpipe convert`` (the whole
     command, process start included; the series only), ``niizarr.nii2zarr(nib.load(gz), out,
     nb_levels=1)`` (its 64^3 blosc chunks), niizarr with voxpipe's layout (volume chunks, zstd;
     the series only), and niizarr's defaults (a pyramid). Output sizes; every output's stored
     values checked against nibabel's.
  3. One volume from the middle of the series on moto's S3 server (bench_remote.py's server in
     its own process, counting requests and bytes): voxpipe from the store's URL, voxpipe from
     the .nii.gz URL with its seek index uploaded next to it (in the local index cache, and
     fetched from the bucket), zarr-python over obstore; first and warm call.
  4. Per-file means of the --files files on a ``distributed.LocalCluster`` of N processes with
     one thread each: ``vp.to_dask(paths, np.float32).mean(axis=(0, 1, 2))`` over the .nii.gz
     files and over their stores against nibabel mapped over the same cluster
     (``client.map``), and a plain nibabel loop in one process. Cluster start-up is reported
     apart. Skipped with a note where voxpipe has no ``to_dask``.
Every result is checked against the others' and nibabel's on the .nii.gz (CRC-32 of the arrays;
the means to 1e-9). --cases runs some of the groups only; the section written then has theirs
only.

Usage: .venv/bin/python bench/bench_zarr.py [--threads N] [--repeat N] [--files N]
       [--cases read,convert,s3,dask] [--quick] [--output PATH] [--wait-idle]
Inputs: .venv/bin/python bench/make_data.py (bold_4d.nii.gz, t1_3d.nii); needs zarr, nifti-zarr,
dask, distributed, moto and obstore (requirements-dev.txt).
"""
import collections
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

import bench_remote
from benchlib import (DATA, MIB, REPO, Parser, command, cpu_snapshot, errors_lines, fmt_mb, fmt_s,
                      fmt_t, fmt_x, interleaved, measured, other_work, other_work_sentence,
                      prime_memory, publish, ratio, run_log, settle, stamp, summarise_rows,
                      targets_lines, try_child, versions_text, warm)

SERIES = os.path.join(DATA, "bold_4d.nii.gz")
BEGIN = "<!-- zarr benchmark: begin -->"
END = "<!-- zarr benchmark: end -->"
# Tiny inputs of --quick, made with make_data.py's generator: a smoke test of the script, with
# any decoder however slow, not a measurement.
QUICK_SERIES = dict(shape=(24, 24, 16, 12), zooms=(2.5, 2.5, 2.5, 2.0), gain=0.25, sigma=4.0)
QUICK_T1 = dict(shape=(40, 40, 24), zooms=(1.0, 1.0, 1.0), gain=0.35, sigma=5.0)
# Memory touched in a throwaway process before each child (benchlib.prime_memory): the series
# reads and conversions allocate GBs (zarr's reference holds int16, float64 and float32 copies),
# a volume a few MB.
PRIME_MIB = {"read_series": 3072, "read_many": 1024, "convert_series": 3072,
             "convert_many": 1024, "s3_volume": 512, "dask_many": 2048}
QUICK_PRIME_MIB = 64
CASE_GROUPS = {"read": ("read_series", "read_many"), "convert": ("convert_series", "convert_many"),
               "s3": ("s3_volume",), "dask": ("dask_many",)}
VERSIONED = ("voxpipe", "nibabel", "numpy", "zarr", "numcodecs", "niizarr", "tensorstore",
             "dask", "distributed", "obstore", "moto")
CHILD_TIMEOUT = 1800


# --------------------------------------------------------------------------------------------
# Inputs.
# --------------------------------------------------------------------------------------------

def store_of(gz, folder):
    """Where the NIfTI-Zarr copy of the .nii.gz `gz` lives in `folder`."""
    return os.path.join(folder, os.path.basename(gz)[:-len(".nii.gz")] + ".nii.zarr")


def tree_files(path):
    """The files of a store (or [path] for a file), for warming and uploading."""
    if os.path.isfile(path):
        return [path]
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs)


def tree_size(path):
    files = tree_files(path)
    return sum(os.path.getsize(f) for f in files), len(files)


def ensure_store(gz, store, threads, log):
    """Convert `gz` to `store` with vp.save's defaults, unless a store at least as new is there
    (vp.save writes into a temporary folder and renames it: a store that exists is complete)."""
    if os.path.isdir(store) and os.path.getmtime(store) >= os.path.getmtime(gz):
        return
    import voxpipe as vp
    log(f"converting {gz} -> {store} ...")
    vp.save(vp.load(gz, threads=threads), store, threads=threads)


def _variant(source, path, k):
    """bench_many.py's variants of a T1 volume (an offset added to a block of voxels, saved by
    nibabel as .nii.gz), for sizes below its fixed 48-voxel block too."""
    import nibabel as nib
    import numpy as np
    src = nib.load(source)
    data = np.asanyarray(src.dataobj).copy()
    rng = np.random.default_rng(1000 + k)
    block = [min(48, s // 3) for s in data.shape]
    x, y, z = (int(rng.integers(0, s - b)) for s, b in zip(data.shape, block))
    data[x:x + block[0], y:y + block[1], z:z + block[2]] += np.int16(1 + k % 13)
    tmp = path + ".tmp.nii.gz"
    nib.save(nib.Nifti1Image(data, src.affine, src.header), tmp)
    os.replace(tmp, path)


def quick_inputs(folder, n, log):
    """Tiny inputs for --quick: a series and n T1-like variants, as make_data.py makes the big
    ones (its generator, scaling and `gzip -6` for the series; nibabel's .nii.gz for the
    files, as bench_many.py's)."""
    import numpy as np

    import make_data
    os.makedirs(folder, exist_ok=True)
    series = os.path.join(folder, "bold_small.nii.gz")
    if not os.path.exists(series):
        log(f"writing {series} ...")
        nii = series[:-len(".gz")]
        make_data.write_nii(nii, QUICK_SERIES, np.random.default_rng([make_data.SEED, 100]))
        make_data.finish_gzip(make_data.start_gzip(nii, series), series)
    source = os.path.join(folder, "t1_small.nii")
    if not os.path.exists(source):
        make_data.write_nii(source, QUICK_T1, np.random.default_rng([make_data.SEED, 101]))
    os.makedirs(os.path.join(folder, "many"), exist_ok=True)
    paths = [os.path.join(folder, "many", f"t1_{k:03d}.nii.gz") for k in range(n)]
    for k, p in enumerate(paths):
        if not os.path.exists(p):
            _variant(source, p, k)
    return series, paths


# --------------------------------------------------------------------------------------------
# Child side: one measurement in a fresh process.
# --------------------------------------------------------------------------------------------

def f_crc(arr):
    """CRC-32 of an array's values in NIfTI's (Fortran) order, whatever its memory layout: no
    copy for voxpipe's F-ordered results and for the transposed C arrays of zarr."""
    import numpy as np

    from bench_remote import crc
    return crc([np.asfortranarray(arr).T])


def stored_header(group):
    """The nibabel header of a NIfTI-Zarr group's `nifti` array (NIfTI-1 or -2 by sizeof_hdr,
    either byte order)."""
    import io

    import nibabel as nib
    import numpy as np
    block = np.asarray(group["nifti"][...]).tobytes()
    klass = nib.Nifti2Header if int.from_bytes(block[:4], "little") in (540, 540 << 16) \
        else nib.Nifti1Header
    return klass.from_fileobj(io.BytesIO(block), check=False)


def zarr_read(group, f32_arith):
    """float32 values of a NIfTI-Zarr group read with zarr-python, in NIfTI's axis order: the
    stored values of level 0 scaled by the header's scl_slope/inter as nibabel scales them
    (apply_read_scaling: float64, then cast; the values get_fdata(dtype=np.float32) returns), or,
    with `f32_arith`, cast first and scaled in float32 (faster; the values differ a little,
    most where scl_inter cancels the product)."""
    import numpy as np
    from nibabel.volumeutils import apply_read_scaling
    slope, inter = stored_header(group).get_slope_inter()
    stored = group["0"][...]
    if f32_arith:
        out = stored.astype(np.float32)
        if slope is not None:
            out *= np.float32(slope)
            out += np.float32(inter)
    else:
        out = apply_read_scaling(stored, slope, inter).astype(np.float32, copy=False)
    return out.T


def read_one(tool, threads):
    """The reader of case 1: path -> float32 array in NIfTI's axis order."""
    import numpy as np
    if tool in ("voxpipe", "voxpipe_gz"):
        import voxpipe as vp
        return lambda p: vp.load(p, threads=threads).get_fdata(dtype=np.float32)
    if tool in ("zarr", "zarr_f32"):
        import nibabel  # noqa: F401  (the header and apply_read_scaling)
        import zarr
        return lambda p: zarr_read(zarr.open_group(p, mode="r"), tool == "zarr_f32")
    if tool == "niizarr":
        import niizarr
        return lambda p: niizarr.zarr2nii(p).get_fdata(dtype=np.float32)
    if tool == "tensorstore":
        import nibabel  # noqa: F401  (the header and apply_read_scaling)
        import zarr
        return lambda p: tensorstore_read(p, zarr.open_group(p, mode="r"), threads)
    raise ValueError(f"no reader {tool}")


def tensorstore_read(path, group, threads):
    """float32 values of level 0 read by tensorstore (its zarr3 driver decodes the chunks on
    `threads` threads), scaled as nibabel scales them, in NIfTI's axis order: what the issue
    weighs against zarr's pipeline and voxpipe's C++ decoder."""
    import numpy as np
    import tensorstore as ts
    from nibabel.volumeutils import apply_read_scaling
    slope, inter = stored_header(group).get_slope_inter()
    context = ts.Context({"data_copy_concurrency": {"limit": threads},
                          "file_io_concurrency": {"limit": threads}})
    arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file",
                                                   "path": os.path.join(path, "0")}},
                  context=context, read=True).result()
    stored = arr.read().result()
    return apply_read_scaling(stored, slope, inter).astype(np.float32, copy=False).T


def convert_one(tool, threads, series_shape):
    """The writer of case 2: (gz, out) -> None."""
    if tool == "vp_save":
        import voxpipe as vp
        return lambda src, out: vp.save(vp.load(src, threads=threads), out, threads=threads)
    if tool == "cli":
        cli = os.environ["VOXPIPE_BENCH_CLI"]
        return lambda src, out: subprocess.run([cli, "convert", src, out, "--threads",
                                                str(threads)], check=True)
    import nibabel as nib
    import niizarr
    if tool == "niizarr":
        return lambda src, out: niizarr.nii2zarr(nib.load(src), out, nb_levels=1)
    if tool == "niizarr_layout":  # niizarr's "zlib" is zarr's ZstdCodec (level 0: zstd's 3)
        chunk = tuple(series_shape[:3])
        return lambda src, out: niizarr.nii2zarr(nib.load(src), out, nb_levels=1, chunk=chunk,
                                                 compressor="zlib")
    if tool == "niizarr_default":
        return lambda src, out: niizarr.nii2zarr(nib.load(src), out)
    raise ValueError(f"no writer {tool}")


def s3_one(tool, threads, t):
    """The reader of case 3: URL -> volume t, or (for zarr-python) (stored volume, slope,
    inter), scaled after the clock stops."""
    if tool.startswith("voxpipe"):
        import obstore  # noqa: F401  (voxpipe imports it on its first URL)

        import voxpipe as vp
        return lambda url: vp.load(url, threads=threads).dataobj[..., t]
    if tool == "zarr":
        import nibabel  # noqa: F401
        import zarr
        from obstore.store import from_url

        def read(url):
            store = zarr.storage.ObjectStore(from_url(url), read_only=True)
            group = zarr.open_group(store, mode="r")
            slope, inter = stored_header(group).get_slope_inter()
            return group["0"][t], slope, inter
        return read
    raise ValueError(f"no S3 reader {tool}")


def configure_threads(threads):
    """The same thread count for every tool: zarr's codec pool, Dask's threaded scheduler."""
    import dask
    import zarr
    zarr.config.set({"threading.max_workers": threads})
    dask.config.set(scheduler="threads", num_workers=threads)


def measure(spec):
    """One measurement: {"first": {...}[, "warm": {...}], "check": ...}."""
    from bench_remote import counters, sample_crc
    case, tool, threads = spec["case"], spec["tool"], spec["threads"]
    if spec.get("cache"):
        os.environ["VOXPIPE_CACHE_DIR"] = spec["cache"]
    configure_threads(threads)
    paths = spec["paths"]
    post = None  # what a result is checked by, computed after the clock stops
    if case == "read_series":
        read = read_one(tool, threads)
        call = lambda: read(paths[0])  # noqa: E731
        post = f_crc
    elif case == "read_many":
        read = read_one(tool, threads)
        read(paths[0])  # one untimed read first (bench_monai.py's convention for loops)
        call = lambda: [sample_crc(read(p)) for p in paths]  # noqa: E731
    elif case in ("convert_series", "convert_many"):
        write = convert_one(tool, threads, spec.get("shape"))
        outs = [store_of(p, spec["out"]) for p in paths]
        shutil.rmtree(spec["out"], ignore_errors=True)
        os.makedirs(spec["out"])
        if case == "convert_many":  # untimed: imports, thread pools
            write(paths[0], outs[0] + ".warmup.nii.zarr")
            shutil.rmtree(outs[0] + ".warmup.nii.zarr")

        def call():
            for p, o in zip(paths, outs):
                write(p, o)
    elif case == "s3_volume":
        read = s3_one(tool, threads, spec["t"])
        call = lambda: read(paths[0])  # noqa: E731

        def post(r):
            if isinstance(r, tuple):
                from nibabel.volumeutils import apply_read_scaling
                r = apply_read_scaling(r[0].T, r[1], r[2])
            return [f_crc(r), str(r.dtype)]
    else:
        raise ValueError(f"no case {case}")

    endpoint = os.environ.get("AWS_ENDPOINT_URL") if case == "s3_volume" else None
    res = {}
    for name in ("first", "warm")[:2 if spec.get("warm") else 1]:
        c0 = counters(endpoint) if endpoint else None
        out, seconds, peak_mib = measured(call)
        res[name] = {"seconds": seconds, "peak_mib": peak_mib}
        if tool == "cli":  # the command's own peak (whole process), not this process's
            res[name]["peak_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            res[name]["whole_process"] = True
        if endpoint:
            c1 = counters(endpoint)
            res[name].update({k: c1[k] - c0[k] for k in ("requests", "bytes", "GET", "HEAD",
                                                         "ranged_GET")})
        if name == "first":
            res["check"] = post(out) if post else out
        del out
    if case.startswith("convert"):
        res["check"], res["sizes"] = convert_check(outs)
    return res


def convert_check(outs):
    """CRC-32 of each output's stored values (level 0, read with zarr, C order), and its size
    (bytes, objects)."""
    import numpy as np
    import zarr

    from bench_remote import crc
    crcs = [crc([np.ascontiguousarray(zarr.open_group(o, mode="r")["0"][...])]) for o in outs]
    sizes = [tree_size(o) for o in outs]
    return crcs, [sum(s[0] for s in sizes), sum(s[1] for s in sizes)]


def nib_mean(path):
    """nibabel's mean of one file (float32 values, float64 sum): the reduction of case 4."""
    import nibabel as nib
    import numpy as np
    return float(nib.load(path).get_fdata(dtype=np.float32).mean(dtype=np.float64))


def find_to_dask():
    """vp.to_dask, else voxpipe._many.dask.to_dask, else None."""
    import voxpipe as vp
    fn = getattr(vp, "to_dask", None)
    if fn is None:
        try:
            from voxpipe._many.dask import to_dask as fn
        except ImportError:
            return None
    return fn


def probe_to_dask(spec):
    """Why case 4's voxpipe rows cannot run, or None."""
    try:
        to_dask = find_to_dask()
        if to_dask is None:
            return "voxpipe has no to_dask"
        import numpy as np
        to_dask(spec["paths"][:1], np.float32)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


def run_dask_child(spec):
    """Case 4 in this process: start the cluster (timed apart), then the reduction twice."""
    import numpy as np
    tool, threads, paths = spec["tool"], spec["threads"], spec["paths"]
    cluster = client = None
    res = {}
    if tool != "nib_loop":
        import dask.array  # noqa: F401
        from distributed import Client, LocalCluster
        t0 = time.perf_counter()
        cluster = LocalCluster(n_workers=threads, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
        client.wait_for_workers(threads)
        res["start_seconds"] = time.perf_counter() - t0
    if tool == "vp_dask":
        to_dask = find_to_dask()
        call = lambda: to_dask(paths, np.float32).mean(  # noqa: E731
            axis=(0, 1, 2), dtype=np.float64).compute().tolist()
    elif tool == "nib_cluster":
        call = lambda: client.gather(client.map(nib_mean, paths, pure=False))  # noqa: E731
    elif tool == "nib_loop":
        import nibabel  # noqa: F401
        call = lambda: [nib_mean(p) for p in paths]  # noqa: E731
    else:
        raise ValueError(f"no dask tool {tool}")
    for name in ("first", "warm"):
        out, seconds, peak_mib = measured(call)
        res[name] = {"seconds": seconds, "peak_mib": peak_mib}
        if name == "first":
            res["check"] = [float(x) for x in out]
    if client is not None:
        client.close()
        cluster.close()
    return res


def reference(spec):
    """What every reader must return, from nibabel on the .nii.gz files: CRC-32s of the series
    (float32 scaled, float32 of the stored values, float32 arithmetic and how far it is from
    nibabel's, the stored int16 in zarr's order, volume t as nibabel's proxy gives it) and of
    each file (every 7th voxel of the float32 values and of the stored values as float32; the
    stored int16 in zarr's order)."""
    import nibabel as nib
    import numpy as np

    from bench_remote import crc, sample_crc
    img = nib.load(spec["series"])
    scaled = img.get_fdata(dtype=np.float32)
    stored = np.asanyarray(img.dataobj.get_unscaled())
    f32 = stored.astype(np.float32)
    if img.dataobj.slope != 1 or img.dataobj.inter != 0:
        f32 *= np.float32(img.dataobj.slope)
        f32 += np.float32(img.dataobj.inter)
    differ = f32 != scaled
    ulps = np.abs(f32[differ] - scaled[differ]) / np.spacing(np.abs(scaled[differ]))
    vol = img.dataobj[..., spec["t"]]
    out = {"series": {"scaled": f_crc(scaled), "stored": f_crc(stored.astype(np.float32)),
                      "f32_arith": f_crc(f32), "int16_zarr_order": crc([stored.T]),
                      "volume": [f_crc(vol), str(vol.dtype)],
                      "f32_differ": int(differ.sum()), "f32_size": int(differ.size),
                      "f32_max_ulp": float(ulps.max()) if ulps.size else 0.0,
                      "f32_max_abs": float(np.abs(f32 - scaled).max())}}
    del scaled, stored, f32, differ
    files = {"scaled": [], "stored": [], "int16_zarr_order": []}
    for p in spec["files"]:
        im = nib.load(p)
        files["scaled"].append(sample_crc(im.get_fdata(dtype=np.float32)))
        st = np.asanyarray(im.dataobj.get_unscaled())
        files["stored"].append(sample_crc(st.astype(np.float32)))
        files["int16_zarr_order"].append(crc([st.T]))
    out["files"] = files
    return out


# --------------------------------------------------------------------------------------------
# Parent.
# --------------------------------------------------------------------------------------------

def child(spec):
    if spec.get("probe"):
        return probe_to_dask(spec)
    if spec.get("reference"):
        return reference(spec)
    if spec["case"] == "dask_many":
        return run_dask_child(spec)
    return measure(spec)


def run_case(name, rows, repeat, prime_mib, log):
    """rows: [(label, spec)], interleaved (benchlib.interleaved), memory primed before each and
    each row's inputs read right before it (warm page cache for every tool)."""
    runs = {label: [] for label, _ in rows}
    for r, label, spec in interleaved(rows, repeat):
        for p in spec.get("warm_paths", spec["paths"]):
            warm(*tree_files(p))
        prime_memory(prime_mib)
        res = try_child(__file__, dict(spec, case=name), timeout=CHILD_TIMEOUT)
        runs[label].append(res)
        log(run_log(r, repeat, label, res,
                    lambda x: f", {x['requests']} req, {x['bytes'] / 1e6:.2f} MB"
                    if "requests" in x else ""))
    out = summarise_rows(runs, ("requests", "bytes", "GET", "HEAD", "ranged_GET", "peak_mib"))
    for label, s in out.items():
        ok = [x for x in runs[label] if "error" not in x]
        if ok:
            s["check"] = ok[0]["check"]
            s["sizes"] = ok[0].get("sizes")
            starts = [x["start_seconds"] for x in ok if "start_seconds" in x]
            s["start"] = statistics.median(starts) if starts else None
    return out


def main():
    ap = Parser(__doc__, repeat=3, wait_idle=True,
                quick="smoke test: tiny inputs, 1 repeat, 4 files, report to "
                      "bench/data/BENCHMARKS-quick.md unless --output")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="threads for every tool and workers of the Dask cluster (default: "
                         "every core, %(default)s)")
    ap.add_argument("--files", type=int, default=40, help="T1-size files (default 40)")
    ap.add_argument("--cases", default="read,convert,s3,dask",
                    help="comma-separated groups of cases to run (default: all: "
                         "read,convert,s3,dask)")
    args = ap.parse(child)

    groups = [g.strip() for g in args.cases.split(",") if g.strip()]
    unknown = [g for g in groups if g not in CASE_GROUPS]
    if unknown:
        sys.exit(f"--cases: expected groups from {list(CASE_GROUPS)}, but received {unknown}")
    if args.threads < 1:
        sys.exit(f"--threads: expected a count >= 1, but received {args.threads}")
    if args.quick:
        args.repeat, args.files = 1, min(args.files, 4)
    output = args.output
    folder = os.path.join(DATA, "zarr-quick" if args.quick else "zarr")
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731

    import nibabel as nib
    if args.quick:
        series, t1_gz = quick_inputs(folder, args.files, log)
    else:
        if not os.path.exists(SERIES):
            sys.exit(f"missing {SERIES}: run .venv/bin/python bench/make_data.py first")
        import bench_monai  # makes bench_many.py's files, and t1_3d.nii when missing
        series, t1_gz = SERIES, bench_monai.make_inputs(args.files)
    series_store = store_of(series, folder)
    t1_stores = [store_of(p, os.path.join(folder, "many")) for p in t1_gz]
    os.makedirs(os.path.join(folder, "many"), exist_ok=True)
    for gz, st in [(series, series_store)] + list(zip(t1_gz, t1_stores)):
        ensure_store(gz, st, args.threads, log)
    shape = nib.load(series).shape
    t_mid = shape[3] // 2
    staged, index = (bench_remote.stage(series, os.path.join(folder, "remote"), log)
                     if "s3" in groups else (None, None))
    cli = os.environ.get("VOXPIPE_CLI") or os.path.join(REPO, ".venv", "bin", "voxpipe")
    # Every child: zarr's pool (also for `voxpipe convert`'s own Python) and Dask's scheduler
    # at the thread count; the CLI runs its Python as this one (with this one's path). Tools get
    # their threads explicitly; voxpipe's budget variables are not passed on, so that a Dask
    # worker's budget is the one its nanny sets (OMP_NUM_THREADS=1).
    for k in ("VOXPIPE_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ.pop(k, None)
    os.environ.update(ZARR_THREADING__MAX_WORKERS=str(args.threads),
                      DASK_NUM_WORKERS=str(args.threads), VOXPIPE_PYTHON=sys.executable,
                      VOXPIPE_BENCH_CLI=cli)
    prime = (lambda case: QUICK_PRIME_MIB) if args.quick else PRIME_MIB.get  # noqa: E731
    log("reference values (nibabel on the .nii.gz files) ...")
    ref = try_child(__file__, {"reference": True, "series": series, "files": t1_gz, "t": t_mid},
                    timeout=CHILD_TIMEOUT)
    if "error" in ref:
        sys.exit(f"the reference child failed: {ref['error']}\n{ref.get('stderr', '')}")

    settle(args)
    started, cpu0 = time.time(), cpu_snapshot()
    base = {"threads": args.threads}
    out_root = os.path.join(folder, "out")
    res, notes = {}, {}
    if "read" in groups:
        rows = [("voxpipe", {"tool": "voxpipe", "paths": [series_store], "warm": True}),
                ("zarr", {"tool": "zarr", "paths": [series_store], "warm": True}),
                ("zarr_f32", {"tool": "zarr_f32", "paths": [series_store], "warm": True}),
                ("niizarr", {"tool": "niizarr", "paths": [series_store], "warm": True}),
                ("tensorstore", {"tool": "tensorstore", "paths": [series_store], "warm": True}),
                ("voxpipe_gz", {"tool": "voxpipe_gz", "paths": [series], "warm": True})]
        log("case read_series")
        res["read_series"] = run_case("read_series", [(k, dict(base, **v)) for k, v in rows],
                                      args.repeat, prime("read_series"), log)
        rows = [(k, {"tool": k, "paths": t1_stores}) for k in ("voxpipe", "zarr", "zarr_f32",
                                                                "niizarr", "tensorstore")]
        rows.append(("voxpipe_gz", {"tool": "voxpipe_gz", "paths": t1_gz}))
        log("case read_many")
        res["read_many"] = run_case("read_many", [(k, dict(base, **v)) for k, v in rows],
                                    args.repeat, prime("read_many"), log)
    if "convert" in groups:
        tools = ["vp_save", "cli", "niizarr", "niizarr_layout", "niizarr_default"]
        if not os.path.isfile(cli):
            notes["cli"] = f"no voxpipe program at {cli} (set VOXPIPE_CLI)"
            tools.remove("cli")
        rows = [(k, dict(base, tool=k, paths=[series], shape=list(shape),
                         out=os.path.join(out_root, "series", k))) for k in tools]
        log("case convert_series")
        res["convert_series"] = run_case("convert_series", rows, args.repeat,
                                         prime("convert_series"), log)
        rows = [(k, dict(base, tool=k, paths=t1_gz, out=os.path.join(out_root, "many", k)))
                for k in ("vp_save", "niizarr", "niizarr_default")]
        log("case convert_many")
        res["convert_many"] = run_case("convert_many", rows, args.repeat,
                                       prime("convert_many"), log)
        shutil.rmtree(out_root, ignore_errors=True)
    facts = {}
    if "s3" in groups:
        server = bench_remote.Server()
        env = bench_remote.client_environment(server.endpoint)
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            gz_key = "series/" + os.path.basename(staged)
            zarr_key = "zarr/" + os.path.basename(series_store)
            objects = [(gz_key, staged), (gz_key + ".gzidx", index)]
            objects += [(zarr_key + "/" + os.path.relpath(f, series_store), f)
                        for f in tree_files(series_store)]
            bench_remote.upload(server.endpoint, objects, log)
            gz_url = f"s3://{bench_remote.BUCKET}/{gz_key}"
            zarr_url = f"s3://{bench_remote.BUCKET}/{zarr_key}"
            cache = os.path.join(folder, "index-cache")
            shutil.rmtree(cache, ignore_errors=True)
            # The index of this series in the shared cache, as after a first read.
            first = try_child(__file__, dict(base, case="s3_volume", tool="voxpipe",
                                             paths=[gz_url], t=t_mid, cache=cache),
                              timeout=CHILD_TIMEOUT)
            if "error" in first:
                log(f"filling the index cache failed: {first['error']}")
            cold = os.path.join(folder, "index-cache-cold")
            rows = [("voxpipe_zarr", {"tool": "voxpipe", "paths": [zarr_url],
                                      "cache": os.path.join(folder, "index-cache-zarr")}),
                    ("voxpipe_gz", {"tool": "voxpipe", "paths": [gz_url], "cache": cache}),
                    ("voxpipe_gz_cold", {"tool": "voxpipe", "paths": [gz_url], "cache": cold}),
                    ("zarr", {"tool": "zarr", "paths": [zarr_url]})]
            rows = [(k, dict(base, t=t_mid, warm=True, warm_paths=[], **v)) for k, v in rows]
            log("case s3_volume")
            runs = []
            for r in range(args.repeat):  # the cold cache emptied before every run of its row
                shutil.rmtree(cold, ignore_errors=True)
                runs.append(run_case("s3_volume", rows if r % 2 == 0 else rows[::-1], 1,
                                     prime("s3_volume"), log))
            res["s3_volume"] = merge_runs(runs)
            facts.update(zarr_objects=len(tree_files(series_store)),
                         index_bytes=os.path.getsize(index), gz_bytes=os.path.getsize(staged))
        finally:
            server.stop()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    if "dask" in groups:
        note = try_child(__file__, {"probe": True, "paths": t1_gz}, timeout=CHILD_TIMEOUT)
        note = note.get("error") if isinstance(note, dict) else note
        tools = [("nib_cluster", t1_gz), ("nib_loop", t1_gz)]
        if note is None:
            tools = [("vp_dask_gz", t1_gz), ("vp_dask_zarr", t1_stores)] + tools
        else:
            notes["dask"] = note
        rows = [(k, dict(base, tool="vp_dask" if k.startswith("vp_dask") else k, paths=p))
                for k, p in tools]
        log("case dask_many")
        res["dask_many"] = run_case("dask_many", rows, args.repeat, prime("dask_many"), log)
    cpu1 = cpu_snapshot()
    facts.update(shape=shape, t=t_mid, series=series, series_store=series_store,
                 series_bytes=os.path.getsize(series), store_size=tree_size(series_store),
                 files=len(t1_gz), files_bytes=sum(os.path.getsize(p) for p in t1_gz),
                 stores_bytes=sum(tree_size(p)[0] for p in t1_stores),
                 file_shape=nib.load(t1_gz[0]).shape, elapsed=time.time() - started, cli=cli)
    publish(output, render(args, res, ref, notes, facts, (cpu0, cpu1)), BEGIN, END)
    log(f"wrote {output}")


def merge_runs(runs):
    """run_case's results of one repeat each -> one result per row, medians over the repeats
    (the cold-cache row needs its cache emptied between repeats, which run_case cannot do)."""
    out = {}
    for label in runs[0]:
        xs = [r[label] for r in runs]
        ok = [x for x in xs if x.get("first")]
        s = {"error": next((x["error"] for x in xs if x["error"]), None), "n": len(ok)}
        for k in ("first", "warm"):
            ys = [x[k] for x in ok if k in x]
            if ys:
                s[k] = {c: statistics.median(y[c] for y in ys) for c in ys[0]
                        if c not in ("min", "whole_process")}
                s[k]["min"] = min(y["min"] for y in ys)
                s[k]["whole_process"] = ys[0]["whole_process"]
        if ok:
            s["check"] = ok[0]["check"]
        out[label] = s
    return out


# --------------------------------------------------------------------------------------------
# Report.
# --------------------------------------------------------------------------------------------

def fmt_mib(b):
    return f"{b / MIB:.0f} MiB" if b >= 10 * MIB else f"{b / MIB:.2f} MiB"


def verdict(x, target):
    return "not measured" if x is None else ("met" if x >= target else "**not met**")


def render(args, res, ref, notes, facts, cpu):
    import numpy as np
    L = []
    w = L.append
    cmd = command()
    n_thr = args.threads
    errors = []

    def get(case, label, key="first"):
        x = res.get(case, {}).get(label)
        return x.get(key) if x else None

    def failed(case, label, cols):
        """The cells after the name of a row that has no results (its error), or None."""
        x = res[case].get(label)
        if x is None:
            return None
        if x["error"]:
            errors.append((case, label, x["error"]))
        if x.get("first"):
            return None
        return f" error: `{x['error']['error']}` |" + " |" * (cols - 1)

    w(BEGIN)
    w("")
    w("## NIfTI-Zarr: bench/bench_zarr.py")
    w("")
    w(f"{stamp()}; **{n_thr} threads for every tool**; `{cmd}`"
      + (" (**--quick smoke test on tiny inputs: not for quoting**)" if args.quick else "")
      + f"; median (min) of {args.repeat} fresh process(es) per row, rows interleaved, memory "
      f"primed and inputs read before each; the measurements took {facts['elapsed']:.0f} s. "
      + versions_text(VERSIONED) + ".")
    w("")
    shape = facts["shape"]
    shape_s = "x".join(map(str, shape))
    fshape_s = "x".join(map(str, facts["file_shape"]))
    nf = facts["files"]
    st_bytes, st_objects = facts["store_size"]
    w(f"- Inputs: `{os.path.relpath(facts['series'], REPO)}` ({shape_s} int16, scl_slope/inter "
      f"set, {facts['series_bytes'] / 1e6:.1f} MB) and {nf} files of {fshape_s} int16 saved by "
      f"nibabel ({facts['files_bytes'] / nf / 1e6:.1f} MB each), each converted once with "
      f"`vp.save`'s defaults (Zarr v3, zstd level 3; one chunk per volume for the series, slabs "
      f"of whole slices of about 4 MiB for the files): the series' store is "
      f"{st_bytes / 1e6:.1f} MB in {st_objects} objects, the files' "
      f"{facts['stores_bytes'] / nf / 1e6:.1f} MB each.")
    w(f"- Threads: voxpipe `threads={n_thr}`; zarr-python `threading.max_workers={n_thr}` (its "
      f"codec pool, through which voxpipe and niizarr write too; `ZARR_THREADING__MAX_WORKERS` "
      f"for `voxpipe convert`'s Python); Dask's threaded scheduler `num_workers={n_thr}` "
      f"(niizarr's arrays); case 4's `LocalCluster(n_workers={n_thr}, threads_per_worker=1)`.")
    w("- Times: the timed call only (imports and the inputs' page cache outside); **first** = "
      "the first call in a fresh process, **warm** = the same call again in it. Peak RSS: growth "
      "of the process during the call. Ratios: the other tool's median / voxpipe's (above 1: "
      "voxpipe is faster).")
    w("- " + other_work_sentence(other_work(*cpu)))
    w("")
    targets = []

    # 1. Reads.
    readers = (("voxpipe", "voxpipe `vp.load(store).get_fdata(dtype=np.float32)`"),
               ("zarr", "zarr `group['0'][...]`, scaled as nibabel (float64, then float32)"),
               ("zarr_f32", "zarr `group['0'][...]`, `astype(np.float32)`, scaled in float32"),
               ("niizarr", "niizarr `zarr2nii(store).get_fdata(dtype=np.float32)` (unscaled)"),
               ("tensorstore", "tensorstore zarr3 driver `read()`, scaled as nibabel"),
               ("voxpipe_gz", "voxpipe on the source .nii.gz (for reference)"))
    if "read_series" in res:
        out_bytes = int(np.prod(shape)) * 4
        w("### 1. NIfTI-Zarr to float32\n")
        w(f"The series ({shape_s}; {fmt_mib(out_bytes)} of float32):\n")
        w("| reader | first | warm | MB/s of output (first) | peak RSS | vs voxpipe (first) |")
        w("|---|---|---|---|---|---|")
        v = get("read_series", "voxpipe")
        for label, name in readers:
            e = failed("read_series", label, 5)
            if e:
                w(f"| {name} |{e}")
                continue
            f, wm = get("read_series", label), get("read_series", label, "warm")
            w(f"| {name} | {fmt_t(f)} | {fmt_t(wm)} | {out_bytes / 1e6 / f['median']:.0f} | "
              f"{f['peak_mib']:.0f} MiB | "
              f"{'' if label == 'voxpipe' else fmt_x(ratio(f['median'], v and v['median']))} |")
        w("")
        w(f"{nf} files in a loop, after one untimed read ({nf} x "
          f"{fmt_mib(int(np.prod(facts['file_shape'])) * 4)} of float32, each dropped after "
          "use):\n")
        w("| reader | total | per file | files/s | peak RSS | vs voxpipe |")
        w("|---|---|---|---|---|---|")
        v = get("read_many", "voxpipe")
        for label, name in readers:
            e = failed("read_many", label, 5)
            if e:
                w(f"| {name} |{e}")
                continue
            f = get("read_many", label)
            w(f"| {name} | {fmt_t(f)} | {fmt_s(f['median'] / nf)} | {nf / f['median']:.1f} | "
              f"{f['peak_mib']:.0f} MiB | "
              f"{'' if label == 'voxpipe' else fmt_x(ratio(f['median'], v and v['median']))} |")
        w("")
        w("niizarr 1.0.0rc8's image carries the stored values with scl_slope/scl_inter reset, so "
          "its `get_fdata` returns them unscaled: less work than the other rows, which return "
          "nibabel's values of the .nii.gz. zarr scaled in float32 is shown for speed only (see "
          "Agreement).\n")
        for case, what in (("read_series", "series"), ("read_many", f"{nf} files")):
            v = get(case, "voxpipe")
            for label, name in (("zarr", "zarr + scaling as nibabel"),
                                ("niizarr", "niizarr.zarr2nii(...).get_fdata()")):
                x = ratio(get(case, label) and get(case, label)["median"], v and v["median"])
                targets.append((f"{what} to float32: voxpipe vs {name}, >= 2x", fmt_x(x),
                                verdict(x, 2)))
            x = ratio(get(case, "tensorstore") and get(case, "tensorstore")["median"],
                      v and v["median"])
            targets.append((f"{what} to float32: voxpipe's decoder vs tensorstore's (the "
                            "choice of decode path)", fmt_x(x), "info"))
            x = ratio(get(case, "zarr_f32") and get(case, "zarr_f32")["median"],
                      v and v["median"])
            targets.append((f"{what} to float32: voxpipe vs zarr scaled in float32 (no target)",
                            fmt_x(x), "info"))

    # 2. Conversions.
    writers = (("vp_save", "voxpipe `vp.save(vp.load(gz), out)`"),
               ("cli", "`voxpipe convert gz out` (the whole command)"),
               ("niizarr", "niizarr `nii2zarr(nib.load(gz), out, nb_levels=1)` (64^3 blosc)"),
               ("niizarr_layout", "niizarr, voxpipe's layout (`chunk`=a volume, zstd), "
                                  "`nb_levels=1`"),
               ("niizarr_default", "niizarr `nii2zarr(nib.load(gz), out)`: defaults, a pyramid"))
    if "convert_series" in res:
        w("### 2. .nii.gz -> .nii.zarr\n")
        for case, short, what in (
                ("convert_series", "the series",
                 f"The series ({facts['series_bytes'] / 1e6:.0f} MB .nii.gz)"),
                ("convert_many", f"{nf} files", f"{nf} files in a loop, after one untimed "
                                                "conversion")):
            w(f"{what}:\n")
            w("| writer | time | output MB | objects | peak RSS | vs vp.save |")
            w("|---|---|---|---|---|---|")
            v = get(case, "vp_save")
            for label, name in writers:
                if label not in res[case]:
                    if case == "convert_series" and label == "cli" and "cli" in notes:
                        w(f"| {name} | skipped: {notes['cli']} | | | | |")
                    continue
                e = failed(case, label, 5)
                if e:
                    w(f"| {name} |{e}")
                    continue
                f = get(case, label)
                size, objects = res[case][label]["sizes"]
                rss = f"{f['peak_mib']:.0f} MiB" + (" (whole process)" if f["whole_process"]
                                                    else "")
                w(f"| {name} | {fmt_t(f)} | {fmt_mb(size)} | {objects} | {rss} | "
                  f"{'' if label == 'vp_save' else fmt_x(ratio(f['median'], v and v['median']))}"
                  " |")
            w("")
            for label, name in (("niizarr", "niizarr nb_levels=1, >= 3x"),
                                ("niizarr_layout", "niizarr with voxpipe's layout (no target)"),
                                ("niizarr_default", "niizarr's defaults (a pyramid; no target)")):
                if label in res[case]:
                    x = ratio(get(case, label) and get(case, label)["median"], v and v["median"])
                    targets.append((f"convert, {short}: vp.save vs {name}", fmt_x(x),
                                    verdict(x, 3) if label == "niizarr" else "info"))
        w("`voxpipe convert` runs `python -m voxpipe` for a store (the program hands stores to "
          "the Python package): its time includes starting Python and importing zarr.\n")

    # 3. One volume on S3.
    if "s3_volume" in res:
        t = facts["t"]
        w(f"### 3. One volume from S3: `dataobj[..., {t}]` of the series\n")
        w(f"moto's S3 server in its own process on 127.0.0.1, counting requests and bytes "
          f"(bench_remote.py's); clients configured by the environment. The store: "
          f"{facts['zarr_objects']} objects, one volume per chunk; the .nii.gz: "
          f"{facts['gz_bytes'] / 1e6:.0f} MB with its seek index "
          f"({facts['index_bytes'] / 1e6:.1f} MB, `vp.gz.build_index`) next to it as "
          "`.gzidx`. One volume is "
          f"{int(np.prod(shape[:3])) * 2:,} bytes of int16.\n")
        w("| reader | first | warm | requests (first) | MB sent (first) | requests (warm) | "
          "MB sent (warm) | peak RSS |")
        w("|---|---|---|---|---|---|---|---|")
        for label, name in (("voxpipe_zarr", "voxpipe `vp.load(store_url)`"),
                            ("voxpipe_gz", "voxpipe `vp.load(gz_url)`, index in the local cache"),
                            ("voxpipe_gz_cold", "voxpipe `vp.load(gz_url)`, index fetched from "
                                                "the bucket"),
                            ("zarr", "zarr over obstore: `open_group`, header, `group['0'][t]`")):
            e = failed("s3_volume", label, 7)
            if e:
                w(f"| {name} |{e}")
                continue
            f, wm = get("s3_volume", label), get("s3_volume", label, "warm")
            w(f"| {name} | {fmt_t(f)} | {fmt_t(wm)} | {f['requests']:.0f} | "
              f"{fmt_mb(f['bytes'])} | {wm['requests']:.0f} | {fmt_mb(wm['bytes'])} | "
              f"{f['peak_mib']:.0f} MiB |")
        w("")
        z, g = get("s3_volume", "voxpipe_zarr"), get("s3_volume", "voxpipe_gz")
        gc = get("s3_volume", "voxpipe_gz_cold")
        for other, name in ((g, "the indexed .nii.gz (index cached)"),
                            (gc, "the indexed .nii.gz (index fetched)")):
            x = ratio(other and other["median"], z and z["median"])
            b = ratio(other and other["bytes"], z and z["bytes"])
            targets.append((f"one volume from S3: store vs {name} (no target)",
                            f"time {fmt_x(x)}, bytes {fmt_x(b)}", "info"))

    # 4. Dask.
    if "dask_many" in res:
        w(f"### 4. A reduction over {nf} files on a Dask cluster\n")
        w(f"Per-file means (float32 values, float64 sums) on `LocalCluster(n_workers={n_thr}, "
          "threads_per_worker=1, processes=True)`, started in the child before the clock (its "
          "start-up apart). voxpipe: `vp.to_dask(paths, np.float32).mean(axis=(0, 1, 2), "
          "dtype=np.float64).compute()` (the graph is built inside the timed call; a task "
          "reads one file with the worker's one thread). nibabel: `client.map` of "
          "`nib.load(p).get_fdata(dtype=np.float32).mean(dtype=np.float64)` over the same "
          "cluster, and the same in a plain loop in one process. Peak RSS: the client process "
          "only.\n")
        if "dask" in notes:
            w(f"voxpipe rows skipped: `{notes['dask']}`.\n")
        w("| case | cluster start | first | warm | files/s (first) | peak RSS (client) | "
          "vs voxpipe .nii.gz (first) |")
        w("|---|---|---|---|---|---|---|")
        v = get("dask_many", "vp_dask_gz")
        for label, name in (("vp_dask_gz", "voxpipe `to_dask`, the .nii.gz files"),
                            ("vp_dask_zarr", "voxpipe `to_dask`, their NIfTI-Zarr stores"),
                            ("nib_cluster", "nibabel, `client.map` on the same cluster"),
                            ("nib_loop", "nibabel, plain loop in one process")):
            if label not in res["dask_many"]:
                continue
            e = failed("dask_many", label, 6)
            if e:
                w(f"| {name} |{e}")
                continue
            f, wm = get("dask_many", label), get("dask_many", label, "warm")
            start = res["dask_many"][label].get("start")
            w(f"| {name} | {'' if start is None else fmt_s(start)} | {fmt_t(f)} | {fmt_t(wm)} | "
              f"{nf / f['median']:.1f} | {f['peak_mib']:.0f} MiB | "
              f"{'' if label == 'vp_dask_gz' else fmt_x(ratio(f['median'], v and v['median']))}"
              " |")
        w("")
        n = get("dask_many", "nib_cluster")
        for key, what in (("first", "first"), ("warm", "warm")):
            x = ratio(get("dask_many", "nib_cluster", key) and
                      get("dask_many", "nib_cluster", key)["median"],
                      get("dask_many", "vp_dask_gz", key) and
                      get("dask_many", "vp_dask_gz", key)["median"])
            targets.append((f"to_dask reduction over {nf} files vs nibabel on the same cluster "
                            f"({what}; no target)", fmt_x(x) if n else "n/a", "info"))

    L += targets_lines("### Targets", targets)

    w("### Agreement\n")
    w("Reference: nibabel on the .nii.gz files (`get_fdata(dtype=np.float32)`, the stored values, "
      "`dataobj[..., t]`).\n")
    rs, rf = ref["series"], ref["files"]
    expect = {
        ("read_series", "voxpipe"): rs["scaled"], ("read_series", "zarr"): rs["scaled"],
        ("read_series", "voxpipe_gz"): rs["scaled"], ("read_series", "niizarr"): rs["stored"],
        ("read_series", "zarr_f32"): rs["f32_arith"], ("read_series", "tensorstore"): rs["scaled"],
        ("read_many", "voxpipe"): rf["scaled"], ("read_many", "zarr"): rf["scaled"],
        ("read_many", "tensorstore"): rf["scaled"],
        ("read_many", "voxpipe_gz"): rf["scaled"], ("read_many", "niizarr"): rf["stored"],
    }
    lines = collections.defaultdict(list)
    for case in ("read_series", "read_many", "convert_series", "convert_many", "s3_volume"):
        for label, x in res.get(case, {}).items():
            if x.get("check") is None:
                continue
            if case.startswith("convert"):
                want = ([rs["int16_zarr_order"]] if case == "convert_series"
                        else rf["int16_zarr_order"])
            elif case == "s3_volume":
                want = rs["volume"]
            elif (case, label) in expect:
                want = expect[(case, label)]
            else:
                continue
            lines[case].append((label, x["check"] == want))
    for case, what in (("read_series", "1. the series, float32 (CRC-32, NIfTI order): nibabel's "
                                       "values; niizarr: the stored values as float32; zarr in "
                                       "float32 arithmetic: that computation on nibabel's stored "
                                       "values"),
                       ("read_many", "1. the files, every 7th voxel, the same"),
                       ("convert_series", "2. the stored values (level 0, read with zarr) of "
                                          "every output"),
                       ("convert_many", "2. the same, file by file"),
                       ("s3_volume", "3. the volume (float64, as nibabel's proxy returns it; "
                                     "zarr's stored values scaled by `apply_read_scaling` after "
                                     "the clock)")):
        if lines.get(case):
            bad = [label for label, ok in lines[case] if not ok]
            w(f"- {what}: " + ("every row equals the reference" if not bad else
                               "**differ from the reference**: " + ", ".join(bad)))
    if "read_series" in res:
        w(f"- zarr scaled in float32 differs from nibabel's values in {rs['f32_differ']:,} of "
          f"{rs['f32_size']:,} voxels of the series, by at most {rs['f32_max_abs']:.3g} (at "
          f"most {rs['f32_max_ulp']:.0f} ulp of the value: the largest near zero, where "
          "scl_inter cancels the product).")
    if "dask_many" in res:
        means = {k: x["check"] for k, x in res["dask_many"].items() if x.get("check")}
        base_means = means.get("nib_loop")
        if base_means:
            worst = {k: max(abs(a - b) / max(abs(b), 1e-300) for a, b in zip(m, base_means))
                     for k, m in means.items() if k != "nib_loop"}
            ok = all(len(means[k]) == len(base_means) and d <= 1e-9 for k, d in worst.items())
            w(f"- 4. the {len(base_means)} means against the plain nibabel loop: " +
              ("all within 1e-9 (largest relative difference " if ok else "**differ**: ") +
              ", ".join(f"{k} {d:.1e}" for k, d in worst.items()) + (")" if ok else ""))
    w("")
    L += errors_lines("### Errors", errors)
    w(END)
    w("")
    return "\n".join(L)


if __name__ == "__main__":
    main()
