"""The device path against the host path, bit for bit, over the NIfTI differential matrix
(test_nifti_matrix's generated files: every dtype, both byte orders, both versions, scaled and
unscaled, .nii / .nii.gz / pairs, odd data offsets).

Run as a script in a process whose CUDA driver is either a real GPU's (test_device_gpu) or the
stand-in libcuda of tests/cpp/cuda/fake_cuda.cpp (test_device_fake_driver, which puts it first on
LD_LIBRARY_PATH): ``python device_check.py DIR [--counters]``. Prints one line per problem and
"checked N" at the end; exits 1 on any problem.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import voxpipe as vp  # noqa: E402
from test_nifti_matrix import CASES, build  # noqa: E402


def outcome(fn):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return True, fn()
    except Exception as exc:  # noqa: BLE001 - compared below
        return False, exc


def same(host, dev) -> str:
    """'' when the device array holds the host array's bytes, dtype, shape and strides."""
    got = dev.cpu()
    if got.shape != host.shape or got.dtype != host.dtype.newbyteorder("="):
        return f"{got.dtype}{got.shape} != {host.dtype}{host.shape}"
    want = host.astype(got.dtype, copy=False)
    if got.strides != want.strides:
        return f"strides {got.strides} != {want.strides}"
    if got.tobytes(order="A") == want.tobytes(order="A"):
        return ""
    if got.dtype.kind == "c":
        # The one case the CPU path itself does not define bit for bit (docs/gpu.md): scaling a
        # value whose real and imaginary parts are both NaN leaves either operand's NaN in the
        # imaginary part. Everything else must be identical; there, a NaN is required.
        g, w = got.ravel(order="A"), want.ravel(order="A")
        both = np.isnan(w.real) & np.isnan(w.imag)
        bits = np.dtype(f"u{got.dtype.itemsize // 2}")
        if (g.real.astype(w.real.dtype).view(bits) == w.real.view(bits)).all() \
                and (g.imag[~both].view(bits) == w.imag[~both].view(bits)).all() \
                and np.isnan(g.imag[both]).all():
            return ""
    return "values differ"


def dicom_series(directory: Path):
    """(name, folder) of DICOM series: single-frame 3D and 4D (one rescale), BitsStored 12 (bits
    above it to correct), an enhanced multi-frame file (a rescale per frame), RLE (decoded on
    the CPU, each slice streamed to the device)."""
    import pydicom
    from pydicom.uid import RLELossless

    from test_dicom_series import enhanced_multiframe, write_series

    out = []
    for name, kw in (("3d", {}), ("4d", {"volumes": 2, "n": 3}), ("bits12", {}), ("rle", {})):
        folder = directory / name
        folder.mkdir(parents=True)
        written = write_series(str(folder), seed=len(out), **kw)
        if name in ("bits12", "rle"):
            for path, _ in written.values():
                ds = pydicom.dcmread(path)
                if name == "bits12":
                    ds.BitsStored, ds.HighBit = 12, 11
                else:
                    ds.compress(RLELossless)
                ds.save_as(path, enforce_file_format=True)
        out.append((name, folder))
    folder = directory / "enhanced"
    folder.mkdir(parents=True)
    enhanced_multiframe(folder / "enhanced.dcm")
    out.append(("enhanced", folder))
    return out


def check_dicom(directory: Path, problems: list) -> int:
    checked = 0
    for name, folder in dicom_series(directory):
        series = vp.dicom.scan(str(folder))[0]
        for dtype in (None, np.float32, np.float64):
            host = series.get_data(dtype)
            dev = series.get_data(dtype, device="cuda")
            why = same(host, dev)
            if why:
                problems.append(f"DICOM {name} {dtype}: {why}")
            checked += 1
    return checked


def many_files(directory: Path) -> list:
    """Files of one shape in different dtypes, scalings, byte orders and storages (.nii,
    .nii.gz, a pair, voxpipe's member gzip), for load_many/load_batch."""
    import nibabel as nib

    directory.mkdir(parents=True)
    rng = np.random.default_rng(5)
    shape = (13, 11, 9)
    out = []
    specs = [("i2", ">", (0.37, -2.0), ".nii.gz"), ("u1", "<", None, ".nii"),
             ("f4", "<", None, ".nii.gz"), ("i4", "<", (2.5, 7.0), ".nii"),
             ("f8", ">", None, ".nii"), ("u2", "<", (1.0, 5.5), ".nii.gz"),
             ("i2", "<", None, ".img")]
    for k, (code, order, scale, ext) in enumerate(specs):
        dtype = np.dtype(order + code)
        if dtype.kind == "f":
            data = rng.standard_normal(shape).astype(dtype)
        else:
            info = np.iinfo(dtype)
            data = rng.integers(max(info.min, -3000), min(info.max, 3000), size=shape,
                                dtype=dtype.newbyteorder("="))
        img = nib.Nifti1Image(data.astype(dtype), np.eye(4))
        if scale is not None:
            img.header.set_slope_inter(*scale)
        path = str(directory / f"m{k}_{code}{ext}")
        nib.save(img, path)
        out.append(path)
    members = str(directory / "members.nii.gz")
    vp.save(vp.load(out[0]), members)
    out.append(members)
    return out


class InFlight:
    """Wraps _core.nifti_to_device (the device load the file workers call with the GIL
    released) to count calls and the most of them in flight at once; each call first sleeps a
    little, so that loads that can overlap do."""

    def __init__(self, delay: float):
        from voxpipe import _core

        self.core, self.real, self.delay = _core, _core.nifti_to_device, delay
        self.lock = threading.Lock()
        self.now = self.most = self.calls = 0

    def __enter__(self):
        def wrapper(*args):
            with self.lock:
                self.calls += 1
                self.now += 1
                self.most = max(self.most, self.now)
            try:
                time.sleep(self.delay)
                return self.real(*args)
            finally:
                with self.lock:
                    self.now -= 1

        self.core.nifti_to_device = wrapper
        return self

    def __exit__(self, *exc):
        self.core.nifti_to_device = self.real


def named(exc: BaseException, path: str) -> bool:
    return path in str(exc) + " ".join(getattr(exc, "__notes__", []))


def check_many(directory: Path, problems: list) -> int:
    """load_many/load_batch to the device: the host path's values in input order for several
    thread plans, files overlapping in flight, the planned per-file threads, and a bad file in
    the middle raising naming it with no thread left behind."""
    import voxpipe._many.loading as many

    files = many_files(directory)
    checked = 0
    for threads, io_threads in ((4, 2), (4, 1), (4, None), (1, None), (2, 8)):
        kw = {"threads": threads, "io_threads": io_threads}
        for dtype in (np.float32, np.float64, None):
            host = vp.load_many(files, dtype, **kw)
            dev = vp.load_many(files, dtype, device="cuda", **kw)
            if len(dev) != len(host):
                problems.append(f"load_many {kw} {dtype}: {len(dev)} items for {len(host)}")
            for path, h, d in zip(files, host, dev):
                why = same(h, d)
                if why:
                    problems.append(f"load_many {kw} {dtype} {path}: {why}")
            checked += 1
            if dtype is None:
                continue  # mixed data dtypes: load_batch needs a dtype
            host = vp.load_batch(files, dtype=dtype, **kw)
            dev = vp.load_batch(files, dtype=dtype, device="cuda", **kw)
            why = same(host, dev)
            if why or dev.strides != host.strides:
                problems.append(f"load_batch {kw} {dtype}: {why} {dev.strides} {host.strides}")
            checked += 1
    del host, dev

    # Overlap: with io_threads=2, two files are in the device load at once; with 1, one. And
    # each file is opened with the planned per-file threads (threads // io_threads).
    real_load, seen_threads = many.load, []

    def recording_load(path, **kw):
        seen_threads.append(kw.get("threads"))
        return real_load(path, **kw)

    many.load = recording_load
    try:
        for io_threads, want_most in ((2, 2), (1, 1)):
            for name, call in (("load_many", vp.load_many), ("load_batch", vp.load_batch)):
                seen_threads.clear()
                with InFlight(0.05) as flight:
                    got = call(files, threads=4, io_threads=io_threads, device="cuda")
                if flight.most != want_most or flight.calls != len(files):
                    problems.append(f"{name} io_threads={io_threads}: {flight.most} loads in "
                                    f"flight at most over {flight.calls} calls; expected "
                                    f"{want_most} over {len(files)}")
                if set(seen_threads) != {4 // io_threads}:
                    problems.append(f"{name} io_threads={io_threads}: files opened with threads "
                                    f"{sorted(set(seen_threads))}, expected {4 // io_threads}")
                del got
                checked += 1
    finally:
        many.load = real_load

    # A bad file in the middle: raised naming it, no thread left running, and (io_threads=1)
    # nothing after it loaded. Two bad files: the first in input order is raised even when the
    # second fails first (a missing file fails at once, a truncated .nii.gz later).
    bad_dir = directory / "bad"
    bad_dir.mkdir()
    raw = Path(files[0]).read_bytes()  # a .nii.gz
    truncated = bad_dir / "truncated.nii.gz"
    truncated.write_bytes(raw[: len(raw) // 2])
    raw = Path(files[1]).read_bytes()  # a .nii
    short = bad_dir / "short.nii"
    short.write_bytes(raw[: len(raw) - 100])
    missing = str(bad_dir / "missing.nii")
    # (load_batch reads every header before any data, so there a missing file is the first
    # error whatever comes before it.)
    many_and_batch = (vp.load_many, vp.load_batch)
    cases = [("truncated", files[:3] + [str(truncated)] + files[3:], str(truncated), many_and_batch),
             ("short", files[:3] + [str(short)] + files[3:], str(short), many_and_batch),
             ("missing", files[:3] + [missing] + files[3:], missing, many_and_batch),
             ("truncated then short", files[:2] + [str(truncated), str(short)] + files[2:],
              str(truncated), many_and_batch),
             ("truncated then missing", files[:2] + [str(truncated), missing] + files[2:],
              str(truncated), (vp.load_many,))]
    before = set(threading.enumerate())
    for name, paths, bad, calls in cases:
        for call in calls:
            for io_threads in (2, 1):
                what = f"{call.__name__} {name} io_threads={io_threads}"
                with InFlight(0.0) as flight:
                    try:
                        call(paths, threads=4, io_threads=io_threads, device="cuda")
                        problems.append(f"{what}: no error")
                    except Exception as exc:  # noqa: BLE001 - checked here
                        if not named(exc, bad):
                            problems.append(f"{what}: {exc!r} does not name {bad}")
                        del exc
                left = set(threading.enumerate()) - before
                if left:
                    problems.append(f"{what}: threads left running: {sorted(t.name for t in left)}")
                if io_threads == 1 and flight.calls > paths.index(bad) + 1:
                    problems.append(f"{what}: {flight.calls} device loads, but the bad file is "
                                    f"number {paths.index(bad) + 1}")
                checked += 1
    gc.collect()
    return checked


def check_index(directory: Path, problems: list) -> int:
    """The seek-index choice of vp.load(index=...) reaches the device load: an explicit index and
    index=False read there as on the host; a file changed under a loaded image is refused on
    both paths alike, and the index written for the old file is refused by a new load."""
    import gzip

    directory.mkdir(parents=True, exist_ok=True)
    raw, gz, idx = directory / "v.nii", directory / "v.nii.gz", directory / "v.gzidx"

    def write(n):
        data = np.arange(n * 30 * 20, dtype=np.int16).reshape(n, 30, 20)
        vp.save(vp.Nifti1Image(data, np.eye(4)), raw)
        gz.write_bytes(gzip.compress(raw.read_bytes()))  # one plain gzip member

    write(40)
    vp.gz.build_index(gz, output=idx, spacing=4096)
    img_path = vp.load(gz, index=idx)
    img_none = vp.load(gz, index=False)
    for name, img in (("index=path", img_path), ("index=False", img_none)):
        ok_h, host = outcome(lambda: img.get_fdata(dtype=np.float32))
        ok_d, dev = outcome(lambda: img.dataobj.read(dtype=np.float32, device="cuda"))
        why = same(host, dev) if ok_h and ok_d else f"host {host!r}, device {dev!r}"
        if why:
            problems.append(f"{name}: {why}")
    write(41)  # the file changes under the loaded image: the image and its index are stale now
    # (get_fdata would return the array nibabel cached above)
    ok_h, host = outcome(lambda: img_path.dataobj.read(dtype=np.float32))
    ok_d, dev = outcome(lambda: img_path.dataobj.read(dtype=np.float32, device="cuda"))
    if ok_h or ok_d:
        problems.append(f"changed file: host {'read' if ok_h else repr(host)}, device "
                        f"{'read' if ok_d else repr(dev)}; both should raise")
    elif type(host) is not type(dev) or not isinstance(host, vp.errors.VoxpipeIOError):
        problems.append(f"changed file: host raised {host!r}, device {dev!r}; both should "
                        "raise VoxpipeIOError")
    ok, err = outcome(lambda: vp.load(gz, index=idx))
    if ok or not isinstance(err, vp.errors.InvalidArgumentError):
        problems.append(f"stale index: vp.load gave {'an image' if ok else repr(err)}; "
                        "expected InvalidArgumentError")
    return 4


def main() -> int:
    directory = Path(sys.argv[1])
    problems, checked = [], 0
    for case in CASES:
        path = build(case, directory)
        img = vp.load(path)
        calls = [("get_fdata(float32)", lambda i, d: i.dataobj.read(dtype=np.float32, device=d)),
                 ("get_fdata(float64)", lambda i, d: i.dataobj.read(dtype=np.float64, device=d)),
                 ("to_device(None)", lambda i, d: vp.to_device(i, d)),
                 ("to_device(float32)", lambda i, d: vp.to_device(i, d, dtype=np.float32))]
        for name, call in calls:
            ok_h, host = outcome(lambda: call(vp.load(path), "cpu"))
            ok_d, dev = outcome(lambda: call(img, "cuda"))
            if not ok_h:  # the device refuses what the host refuses (or what DLPack cannot hold)
                if ok_d:
                    problems.append(f"{case.id} {name}: host raised {host!r}, device did not")
                continue
            if not ok_d:
                if host.dtype.fields is None:
                    problems.append(f"{case.id} {name}: device raised {dev!r}")
                continue
            why = same(host, dev)
            if why:
                problems.append(f"{case.id} {name}: {why}")
            checked += 1
    # One batch of equal shapes.
    paths = [build(c, directory) for c in CASES if c.dtype == "int16" and c.ndim == 3][:6]
    by_shape = [p for p in paths if vp.load(p).shape == vp.load(paths[0]).shape]
    host = vp.load_batch(by_shape)
    dev = vp.load_batch(by_shape, device="cuda")
    why = same(host, dev)
    if why or dev.strides != host.strides:
        problems.append(f"load_batch: {why} {dev.strides} {host.strides}")
    for h, d in zip(vp.load_many(by_shape), vp.load_many(by_shape, device="cuda")):
        why = same(h, d)
        if why:
            problems.append(f"load_many: {why}")
    checked += 2
    # An image made in memory (its data are copied) and arrays in either order.
    a = np.random.default_rng(0).standard_normal((4, 5, 6)).astype(np.float32)
    mem = vp.Nifti1Image(a, np.eye(4))
    for host, dev in ((mem.get_fdata(dtype=np.float64), vp.to_device(mem, "cuda", dtype=np.float64)),
                      (a, vp.to_device(mem, "cuda")),
                      (a, vp.to_device(a, "cuda")),
                      (np.asfortranarray(a), vp.to_device(np.asfortranarray(a), "cuda")),
                      (a.astype(">f4"), vp.to_device(a.astype(">f4"), "cuda"))):
        why = same(host, dev)
        if why:
            problems.append(f"in-memory data: {why}")
        checked += 1
    checked += check_index(directory / "index", problems)
    checked += check_dicom(directory / "dicom", problems)
    checked += check_many(directory / "many", problems)
    del dev, d, host
    gc.collect()
    if "--counters" in sys.argv:
        # The stand-in driver counts what is outstanding: with every array gone, nothing is.
        class Counters(ctypes.Structure):
            _fields_ = [(n, ctypes.c_long) for n in (
                "device_allocations", "host_allocations", "streams", "events", "modules",
                "retains", "launches", "copies", "context_depth")]

        fn = ctypes.CDLL("libcuda.so.1").voxpipe_fake_cuda_counters
        fn.restype = Counters
        c = fn()
        # What loads keep between calls: the module once, pooled pinned buffers, one retain.
        if c.modules != 1 or c.retains != 1 or c.host_allocations == 0:
            problems.append(f"stand-in driver before cuda_empty_cache: {c.modules} modules, "
                            f"{c.retains} retains, {c.host_allocations} pinned buffers; "
                            "expected 1, 1 and some")
        vp.cuda_empty_cache()
        c = fn()
        for field in ("device_allocations", "host_allocations", "streams", "events", "modules",
                      "retains", "context_depth"):
            if getattr(c, field):
                problems.append(f"stand-in driver: {field} = {getattr(c, field)} outstanding")
        if c.launches == 0:
            problems.append("stand-in driver: no kernel launched")
    for p in problems:
        print(p)
    print(f"checked {checked}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
