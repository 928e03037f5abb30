#!/usr/bin/env python
"""Issue 7's GPU benchmark: files -> float32 on a CUDA device, voxpipe against the reference
tools in one run. Writes the "GPU" section of BENCHMARKS.md (between its markers) and prints it.

Rows (medians of --repeat runs in this process, page cache warm; first runs reported apart):
  1. pinned host-to-device bandwidth (cuMemAllocHost + cuMemcpyHtoD through the driver, 256 MiB)
  2. .nii (int16, scaled) -> float32 on the device: vp dataobj.read(device='cuda') against that
     bandwidth (payload bytes moved per second) and against nibabel get_fdata(float32) + copy
  3. .nii.gz -> float32 on the device: voxpipe-written (parallel members) and nibabel-written
     (one member) files, against voxpipe's CPU-only decode with the same threads and against
     nibabel + copy
  4. DICOM series (176 x 256x256 int16, Explicit VR LE; bench_dicom.py's) -> float32 on the
     device: series.get_data(device='cuda') (native pixel data read from their offsets and
     rescaled on the device) against pydicom + copy; the JPEG-LS version (decoded on the host,
     slices streamed) likewise
  5. 32 small .nii.gz (64x64x32x4 int16) -> one float32 batch on the device: vp.load_batch
     against a nibabel loop + copy
  With a usable cuFile, row 2 also runs with VOXPIPE_CUFILE=off and on, cache warm and dropped.
"+ copy" is torch.from_numpy(a).cuda() where torch has CUDA, else the same pageable copy
through the driver (cuMemAlloc + cuMemcpyHtoD), labelled as such.

--cpu-only runs the host parts only (voxpipe CPU decode, nibabel, pydicom) on small inputs and
writes nothing unless --output is given: the check that this script works on a machine without a
GPU. --small runs every row on small inputs (a smoke test of the GPU rows, which
tests/python/test_device.py runs on the stand-in driver). Usage:
.venv/bin/python bench/gpu/bench_gpu.py [--cpu-only | --small] [--repeat R] [--output PATH]
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)

from benchlib import MIB, cpu_name, versions, warm, write_section  # noqa: E402

DATA = os.path.join(BENCH, "data", "gpu")
BEGIN = "<!-- gpu benchmark: begin -->"
END = "<!-- gpu benchmark: end -->"
SPEC = dict(shape=(96, 96, 60, 100), zooms=(2.5, 2.5, 2.5, 2.0), gain=0.25, sigma=4.0)
SMALL = dict(shape=(64, 64, 32, 4), zooms=(2.5, 2.5, 2.5, 2.0), gain=0.25, sigma=4.0)
SLOPE, INTER = 0.73, -12.5


# ---- the driver, through ctypes (no CUDA build of torch needed) ------------------------------

class Driver:
    """The few driver calls the baselines need, on device 0's primary context."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self._check(self.lib.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self._check(self.lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        self.ctx = ctypes.c_void_p()
        self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev), "retain")
        self._check(self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    @staticmethod
    def _check(r, what):
        if r != 0:
            raise RuntimeError(f"{what}: CUDA error {r}")

    def alloc(self, n):
        p = ctypes.c_uint64()
        self._check(self.lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)), "cuMemAlloc")
        return p

    def free(self, p):
        self.lib.cuMemFree_v2(p)

    def htod(self, dst, src_ptr, n):
        self._check(self.lib.cuMemcpyHtoD_v2(dst, ctypes.c_void_p(src_ptr), ctypes.c_size_t(n)),
                    "cuMemcpyHtoD")

    def pinned_bandwidth(self, n=256 * MIB, repeat=5):
        host = ctypes.c_void_p()
        self._check(self.lib.cuMemAllocHost_v2(ctypes.byref(host), ctypes.c_size_t(n)), "host")
        ctypes.memset(host, 1, n)
        dev = self.alloc(n)
        times = []
        for _ in range(repeat + 1):
            t0 = time.perf_counter()
            self.htod(dev, host.value, n)
            times.append(time.perf_counter() - t0)
        self.free(dev)
        self.lib.cuMemFreeHost(host)
        return n / statistics.median(times[1:])


def copy_to_gpu(a: np.ndarray, drv):
    """What users write after a CPU load: torch.from_numpy(a).cuda() (pageable memory), or the
    same copy through the driver where torch has no CUDA."""
    try:
        import torch

        if torch.cuda.is_available():
            t = torch.from_numpy(a).cuda()
            torch.cuda.synchronize()
            return t
    except ImportError:
        pass
    a = np.ascontiguousarray(a) if not (a.flags.c_contiguous or a.flags.f_contiguous) else a
    p = drv.alloc(a.nbytes)
    drv.htod(p, a.ctypes.data, a.nbytes)
    drv.free(p)
    return None


def baseline_label():
    try:
        import torch

        if torch.cuda.is_available():
            return "torch.from_numpy(...).cuda()"
    except ImportError:
        pass
    return "pageable cuMemcpyHtoD (torch without CUDA)"


# ---- inputs ----------------------------------------------------------------------------------

def make_inputs(spec, tag):
    """<tag>.nii (int16, scaled), <tag>_vp.nii.gz (voxpipe members), <tag>_nib.nii.gz (nibabel,
    one member) in bench/data/gpu/, unless present."""
    import nibabel as nib

    import make_data
    import voxpipe as vp

    os.makedirs(DATA, exist_ok=True)
    nii = os.path.join(DATA, f"{tag}.nii")
    out = {"nii": nii, "vp.gz": os.path.join(DATA, f"{tag}_vp.nii.gz"),
           "nib.gz": os.path.join(DATA, f"{tag}_nib.nii.gz")}
    if not os.path.exists(nii):
        raw = os.path.join(DATA, f"{tag}_unscaled.nii")
        make_data.write_nii(raw, spec, np.random.default_rng([make_data.SEED, 7]))
        img = nib.load(raw)
        img.header.set_slope_inter(SLOPE, INTER)
        nib.save(nib.Nifti1Image(np.asanyarray(img.dataobj), img.affine, img.header),
                 nii[:-4] + "_part.nii")
        os.remove(raw)
        os.replace(nii[:-4] + "_part.nii", nii)
    if not os.path.exists(out["vp.gz"]):
        part = out["vp.gz"][:-7] + "_part.nii.gz"
        vp.save(vp.load(nii), part)
        os.replace(part, out["vp.gz"])
    if not os.path.exists(out["nib.gz"]):
        part = out["nib.gz"][:-7] + "_part.nii.gz"
        nib.save(nib.load(nii), part)
        os.replace(part, out["nib.gz"])
    return out


def dicom_folder(name="explicit"):
    """bench_dicom.py's series of that syntax, written first if missing (the compressed ones
    need pydicom's encoders: pack_deps.sh carries them to the GPU machine)."""
    import bench_dicom

    bench_dicom.make_inputs([name])
    return bench_dicom.FOLDERS[name]


# ---- timing ------------------------------------------------------------------------------

def timed(fn, repeat):
    """(first, median of the next `repeat`) seconds."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times)


def fmt_s(s):
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def dropped(path):
    """Writes `path` back and drops it from the page cache (posix_fadvise, no root needed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cufile_rows(vp, nii, add, out_bytes, ref, notes):
    """.nii -> device through the pinned ring and through cuFile (whatever mode this machine
    has), with the page cache warm and dropped, for the automatic policy's thresholds."""
    try:
        cf = vp.cufile_status()
    except Exception as exc:  # noqa: BLE001 - reported, the other rows still count
        notes.append(f"cuFile: status failed: {exc}")
        return
    notes.append(f"cuFile ({cf.library}): usable {cf.usable}, GPUDirect Storage {cf.gds}: "
                 f"{cf.reason}.")
    old = os.environ.get("VOXPIPE_CUFILE")

    def load():
        vp.load(nii).dataobj.read(dtype=np.float32, device="cuda")

    def cold():
        dropped(nii)
        load()

    modes = [("off", "pinned ring")] + ([("on", "cuFile, " + ("GDS" if cf.gds else "compat mode"))]
                                        if cf.usable else [])
    try:
        for policy, label in modes:
            os.environ["VOXPIPE_CUFILE"] = policy
            add(f"vp dataobj.read(float32, device='cuda'), {label}, warm cache", load, out_bytes, ref)
            add(f"vp dataobj.read(float32, device='cuda'), {label}, cold cache", cold, out_bytes, ref)
    finally:
        if old is None:
            os.environ.pop("VOXPIPE_CUFILE", None)
        else:
            os.environ["VOXPIPE_CUFILE"] = old
        load()  # back in the page cache for the rows that follow


def run(args):
    import nibabel as nib

    import voxpipe as vp

    gpu = not args.cpu_only
    if gpu:
        st = vp.cuda_status()
        if not st.available:
            raise SystemExit(f"no usable CUDA device: {st.reason} (use --cpu-only)")
    small = args.cpu_only or args.small
    files = make_inputs(SMALL if small else SPEC, "small" if small else "bold")
    folder = dicom_folder()
    warm(*files.values(), *[os.path.join(folder, f) for f in os.listdir(folder)])
    threads = os.cpu_count()
    drv = Driver() if gpu else None
    rows, notes = [], []
    payload = os.path.getsize(files["nii"]) - 352
    out_bytes = payload * 2  # int16 -> float32

    def add(name, fn, unit_bytes, ref=None):
        first, med = timed(fn, args.repeat)
        rows.append(dict(name=name, first=first, med=med, rate=unit_bytes / med, ref=ref))
        print(f"  {name}: first {fmt_s(first)}, median {fmt_s(med)}", flush=True)
        return med

    def sync_free(d):  # the load is synchronous; dropping it frees the device memory
        del d

    print("1. pinned host-to-device bandwidth", flush=True)
    bw = drv.pinned_bandwidth() if gpu else None
    if bw:
        notes.append(f"Pinned host-to-device bandwidth (cuMemcpyHtoD of 256 MiB from "
                     f"cuMemAllocHost memory): **{bw / 1e9:.1f} GB/s**.")

    print("2. .nii -> float32", flush=True)
    nib_nii = add("nibabel get_fdata(float32)" + (" + " + baseline_label() if gpu else ""),
                  lambda: copy_to_gpu(nib.load(files["nii"]).get_fdata(dtype=np.float32), drv)
                  if gpu else nib.load(files["nii"]).get_fdata(dtype=np.float32), out_bytes)
    add("vp get_fdata(float32), CPU", lambda: vp.load(files["nii"]).get_fdata(dtype=np.float32),
        out_bytes, nib_nii)
    if gpu:
        med = add("vp dataobj.read(float32, device='cuda')",
                  lambda: sync_free(vp.load(files["nii"]).dataobj.read(dtype=np.float32,
                                                                        device="cuda")),
                  out_bytes, nib_nii)
        notes.append(f".nii -> device moves {payload / med / 1e9:.1f} GB/s of file payload: "
                     f"**{payload / med / bw:.0%}** of the pinned bandwidth (target >= 70%).")
        cufile_rows(vp, files["nii"], add, out_bytes, nib_nii, notes)

    for kind in ("vp.gz", "nib.gz"):
        what = "voxpipe-written, members" if kind == "vp.gz" else "nibabel-written, one member"
        print(f"3. .nii.gz ({what}) -> float32", flush=True)
        path = files[kind]
        nib_gz = add(f"[{what}] nibabel get_fdata(float32)" + (" + copy" if gpu else ""),
                     lambda: copy_to_gpu(nib.load(path).get_fdata(dtype=np.float32), drv)
                     if gpu else nib.load(path).get_fdata(dtype=np.float32), out_bytes)
        cpu = add(f"[{what}] vp get_fdata(float32), CPU, {threads} threads",
                  lambda: vp.load(path, threads=threads).get_fdata(dtype=np.float32),
                  out_bytes, nib_gz)
        if gpu:
            med = add(f"[{what}] vp dataobj.read(float32, device='cuda')",
                      lambda: sync_free(vp.load(path, threads=threads).dataobj.read(
                          dtype=np.float32, device="cuda")), out_bytes, nib_gz)
            notes.append(f".nii.gz ({what}) -> device runs at **{cpu / med:.0%}** of voxpipe's "
                         f"CPU-only decode rate (target >= 90%) and **{nib_gz / med:.1f}x** "
                         f"nibabel + copy (target >= 5x).")

    print("4. DICOM series -> float32", flush=True)
    sys.path.insert(0, BENCH)
    import bench_dicom

    vol_bytes = 256 * 256 * 176 * 4
    pyd = add("pydicom loop" + (" + copy" if gpu else ""),
              lambda: copy_to_gpu(bench_dicom.pydicom_volume(folder), drv)
              if gpu else bench_dicom.pydicom_volume(folder), vol_bytes)
    add("vp.load_dicom, CPU", lambda: vp.load_dicom(folder).get_fdata(dtype=np.float32),
        vol_bytes, pyd)
    if gpu:
        med = add("vp.dicom.scan(folder)[0].get_data(float32, device='cuda')",
                  lambda: sync_free(vp.dicom.scan(folder)[0].get_data(np.float32,
                                                                      device="cuda")),
                  vol_bytes, pyd)
        notes.append(f"DICOM series -> device: **{pyd / med:.1f}x** pydicom + copy (target >= "
                     f"5x).")
        # A compressed series: decoded on the host in parallel, each slice streamed.
        try:
            jls = dicom_folder("jpegls")
            warm(*[os.path.join(jls, f) for f in os.listdir(jls)])
            pyd_jls = add("[JPEG-LS] pydicom loop + copy",
                          lambda: copy_to_gpu(bench_dicom.pydicom_volume(jls), drv), vol_bytes)
        except Exception as exc:  # noqa: BLE001 - no JPEG-LS codec for pydicom here
            notes.append(f"JPEG-LS rows skipped: pydicom cannot write or read the series here "
                         f"({type(exc).__name__}: {exc}).")
        else:
            med = add("[JPEG-LS] series.get_data(float32, device='cuda')",
                      lambda: sync_free(vp.dicom.scan(jls)[0].get_data(np.float32,
                                                                      device="cuda")),
                      vol_bytes, pyd_jls)
            notes.append(f"JPEG-LS series -> device (decoded on {threads} host threads, slices "
                         f"streamed): **{pyd_jls / med:.1f}x** pydicom + copy.")

        print("5. a batch of small .nii.gz files -> float32", flush=True)
        many = many_files()
        item = int(np.prod(SMALL["shape"])) * 4
        nib_many = add(f"[{len(many)} files] nibabel loop + copy",
                       lambda: [copy_to_gpu(nib.load(p).get_fdata(dtype=np.float32), drv)
                                for p in many], item * len(many))
        med = add(f"[{len(many)} files] vp.load_batch(device='cuda')",
                  lambda: sync_free(vp.load_batch(many, device="cuda")), item * len(many), nib_many)
        notes.append(f"{len(many)} small .nii.gz -> one device batch (files overlapped on the "
                     f"file workers): **{nib_many / med:.1f}x** nibabel + copy.")
    return rows, notes, files


def many_files(n=32):
    """n nibabel-written .nii.gz of SMALL's shape (copies of one under different names)."""
    import shutil

    src = make_inputs(SMALL, "small")["nib.gz"]
    folder = os.path.join(DATA, "many")
    os.makedirs(folder, exist_ok=True)
    out = []
    for i in range(n):
        path = os.path.join(folder, f"f{i:03d}.nii.gz")
        if not os.path.exists(path):
            shutil.copyfile(src, path + ".part")
            os.replace(path + ".part", path)
        out.append(path)
    warm(*out)
    return out


def report(args, rows, notes, files):
    import voxpipe as vp

    st = vp.cuda_status()
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    gpu = ", ".join(st.device_names) if st.available else f"none ({st.reason})"
    lines = [BEGIN, "", "## GPU: bench/gpu/bench_gpu.py", "",
             f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; {cpu_name()}, {os.cpu_count()} "
             f"cores; GPU: {gpu}; driver {st.driver_version}; commit {commit}; "
             f"{'CPU-only run' if args.cpu_only else 'GPU run'}"
             f"{', small inputs' if args.small else ''}; medians of {args.repeat} runs "
             f"after a first one, page cache warm. "
             + ", ".join(f"{k} {v}" for k, v in versions(
                 ("voxpipe", "numpy", "nibabel", "pydicom", "torch")).items()) + ".",
             "",
             f"Input: {os.path.basename(files['nii'])} ({os.path.getsize(files['nii']) / MIB:.0f} "
             f"MiB int16, scl_slope {SLOPE}, scl_inter {INTER}), its gzip versions "
             f"({os.path.getsize(files['vp.gz']) / MIB:.0f} MiB voxpipe members, "
             f"{os.path.getsize(files['nib.gz']) / MIB:.0f} MiB nibabel single member); "
             f"bench_dicom.py's Explicit VR LE series. Rates are output (float32) bytes per second.",
             "", "| case | first | median | output rate | speedup vs the reference above |",
             "|---|---|---|---|---|"]
    for r in rows:
        sp = f"**{r['ref'] / r['med']:.2f}x**" if r["ref"] else "1.00x (reference)"
        lines.append(f"| {r['name']} | {fmt_s(r['first'])} | {fmt_s(r['med'])} | "
                     f"{r['rate'] / 1e9:.2f} GB/s | {sp} |")
    lines += [""] + [f"- {n}" for n in notes] + ["", END, ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu-only", action="store_true", help="host parts only, small inputs")
    ap.add_argument("--small", action="store_true",
                    help="every row on small inputs, writing nothing unless --output is given: "
                         "the check that the GPU rows run (tests/python/test_device.py runs it "
                         "on the stand-in driver)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--output", default=None,
                    help="file to write the section into (default: BENCHMARKS.md for a GPU run, "
                         "nothing for --cpu-only)")
    args = ap.parse_args()
    rows, notes, files = run(args)
    text = report(args, rows, notes, files)
    print(text)
    out = args.output or (None if args.cpu_only or args.small else os.path.join(REPO, "BENCHMARKS.md"))
    import voxpipe as vp

    if out and not args.output and any("fake" in n for n in vp.cuda_status().device_names):
        out = None  # a rehearsal on the stand-in driver: its figures are not the GPU's
        print("the stand-in driver: BENCHMARKS.md left as it is")
    if out:
        write_section(out, text, BEGIN, END)


if __name__ == "__main__":
    main()
