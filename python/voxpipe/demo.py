"""The README's first-run job: make a small 4D NIfTI, load it with voxpipe, print its header
summary, check the values against nibabel and compare load speed.

Run with ``python -m voxpipe.demo [--dir DIR]``. Without ``--dir`` the sample goes to a temporary
folder that is removed when the demo ends, also on an error, Ctrl-C (SIGINT) or SIGTERM.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import signal
import subprocess
import tempfile
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import NoReturn

import numpy as np

from nibabel import Nifti1Image

from ._formats.nifti.proxy import ArrayProxy
from ._images.image import load, save


def make_sample(path: str) -> None:
    """A 64x64x40x60 int16 series with scale factors: smooth structure plus noise."""
    rng = np.random.default_rng(20261202)
    shape = (64, 64, 40, 60)
    x, y, z = np.meshgrid(*(np.linspace(-1, 1, n) for n in shape[:3]), indexing="ij")
    brain = 1000 * np.exp(-(x**2 / 0.5 + y**2 / 0.6 + z**2 / 0.4))
    data = np.empty(shape, dtype=np.int16, order="F")
    for t in range(shape[3]):
        drift = 1 + 0.01 * np.sin(t / 7)
        data[..., t] = (brain * drift + rng.normal(0, 20, shape[:3])).astype(np.int16)
    affine = np.array([[-3.0, 0, 0, 96], [0, 3, 0, -96], [0, 0, 3.5, -70], [0, 0, 0, 1]])
    img = Nifti1Image(data, affine)
    img.header["descrip"] = b"voxpipe demo series"
    save(img, path[:-3])
    # Store with scale factors, as scanners do: slope 0.5, intercept 10, raw int16 unchanged.
    with open(path[:-3], "r+b") as f:
        f.seek(112)
        f.write(np.array([0.5, 10.0], dtype="<f4").tobytes())
    with open(path[:-3], "rb") as src, gzip.open(path, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(path[:-3])


def median_time(fn: Callable[[], object], repeat: int = 5) -> float:
    times: list[float] = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def _terminated(signum: int, frame: FrameType | None) -> NoReturn:
    # SIGTERM's default action ends the process at once, past every `finally`; as an exception it
    # unwinds like Ctrl-C, and the temporary folder is removed on the way out.
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="where to write the sample (default: a temporary folder, "
                        "removed at the end)")
    args = parser.parse_args(argv)
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
        return run(args.dir)
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if on_main_thread else None
    try:
        workdir = tempfile.mkdtemp(prefix="voxpipe-demo-")
        try:
            return run(workdir)
        finally:
            # A second Ctrl-C or SIGTERM (a user pressing twice, a scheduler repeating itself)
            # must not cut the removal short: both wait until it is done.
            held = ({s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
                    if on_main_thread else {})
            try:
                shutil.rmtree(workdir, ignore_errors=True)
            finally:
                for s, handler in held.items():
                    if handler is not None:  # None: set outside Python, cannot be put back
                        signal.signal(s, handler)
    finally:
        if on_main_thread:  # None: a handler set outside Python, which cannot be put back
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def run(workdir: str) -> int:
    """The demo, with its sample written in `workdir`."""
    path = os.path.join(workdir, "demo_bold.nii.gz")
    make_sample(path)

    beside = os.path.join(os.path.dirname(sys.executable), "voxpipe")
    cli = beside if os.path.exists(beside) else shutil.which("voxpipe")
    print(f"$ voxpipe info {path}")
    if cli:
        print(subprocess.run([cli, "info", path], capture_output=True, text=True, check=True).stdout)

    img = load(path)
    proxy = img.dataobj
    assert isinstance(proxy, ArrayProxy)  # the sample is a NIfTI file
    print(f"vp.load: shape {img.shape}, stored {proxy.dtype}, "
          f"slope {proxy.slope}, inter {proxy.inter}")
    data = img.get_fdata(dtype=np.float32)
    try:
        import nibabel as nib
    except ImportError:
        print("nibabel is not installed: skipping the comparison")
        return 0
    ref = nib.load(path)
    assert isinstance(ref, nib.Nifti1Image)  # nibabel's class for the sample
    same = (np.array_equal(data, ref.get_fdata(dtype=np.float32))
            and np.array_equal(img.affine, ref.affine)
            and np.array_equal(img.dataobj[..., 7], ref.dataobj[..., 7]))
    print(f"values, affine and a volume slice equal nibabel's: {same}")
    t_vp = median_time(lambda: load(path).get_fdata(dtype=np.float32))

    def nibabel_fdata() -> object:
        loaded = nib.load(path)
        assert isinstance(loaded, nib.Nifti1Image)
        return loaded.get_fdata(dtype=np.float32)

    t_nib = median_time(nibabel_fdata)
    mb = data.nbytes / 2**20
    print(f"load .nii.gz -> float32 ({mb:.0f} MiB), median of 5: voxpipe {t_vp * 1000:.0f} ms, "
          f"nibabel {t_nib * 1000:.0f} ms, {t_nib / t_vp:.1f}x")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
