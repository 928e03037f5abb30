#!/usr/bin/env python
"""Generate the benchmark inputs into bench/data/ (git-ignored), deterministically.

Files (int16 on disk, non-trivial scl_slope/scl_inter, little-endian, vox_offset 352):
  bold_4d.nii     96x96x60x300  ~332 MB   fMRI-like series
  bold_4d.nii.gz  the same, made by the real `gzip -6`
  t1_3d.nii       256x256x176   ~23 MB    anatomy-like volume
  t1_3d.nii.gz    the same, made by `gzip -6`

The voxel values imitate MRI magnitude images closely enough that gzip behaves as it does on
real data (about 2:1): smooth tissue structure (soft-edged ellipsoids, low-frequency texture and
bias field), a slow temporal drift and fluctuation, and Rician noise (magnitude of complex
Gaussian noise), which is what makes real MRI barely compressible. Pure noise-free shapes would
compress 10:1 and make every gzip reader look faster than it is in practice.

Usage: .venv/bin/python bench/make_data.py [--force]
Skips files that already exist with the right size (and, for .gz, the right gzip ISIZE trailer).
"""
import argparse
import os
import struct
import subprocess
import sys
import time

import nibabel as nib
import numpy as np

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
SEED = 20261202
# Non-dyadic slope on purpose: scaling then really needs a multiply whose rounding matters
# (like Philips scanner output), rather than an exact power-of-two shift.
SCL_SLOPE = 0.73
SCL_INTER = -12.5
VOX_OFFSET = 352  # 348-byte header + 4-byte "no extensions" flag
# Fixed mtime given to the .nii before gzip, so the gzip header (which stores name and mtime)
# and therefore the whole .nii.gz are byte-for-byte reproducible.
FIXED_MTIME = 1767225600  # 2026-01-01T00:00:00Z

# gain: brain tissue lands near 2300 * gain raw units (EPI ~600, T1 ~800); sigma: noise in raw
# units (SNR ~100-150). Both were tuned together so that gzip -6 gives about 2:1 as on real
# scans: what gzip cannot squeeze is mostly the noise in the low byte of each int16.
SPECS = {
    "bold_4d": dict(shape=(96, 96, 60, 300), zooms=(2.5, 2.5, 2.5, 2.0), gain=0.25, sigma=4.0),
    "t1_3d": dict(shape=(256, 256, 176), zooms=(1.0, 1.0, 1.0), gain=0.35, sigma=5.0),
}


def grid(shape3):
    """Normalised coordinates in [-1, 1] as broadcastable float32 axes (no full-size grids)."""
    return [np.linspace(-1, 1, n, dtype=np.float32).reshape([-1 if i == a else 1 for i in range(3)])
            for a, n in enumerate(shape3)]


def soft_ellipsoid(x, y, z, centre, radii, edge=0.04):
    """1 inside, 0 outside, with a smooth logistic edge (so it looks blurred, without a blur)."""
    r = np.sqrt(((x - centre[0]) / radii[0]) ** 2 + ((y - centre[1]) / radii[1]) ** 2
                + ((z - centre[2]) / radii[2]) ** 2)
    return 1.0 / (1.0 + np.exp((r - 1.0) / edge))


def low_freq_field(x, y, z, rng, n_waves=6, max_k=3.0):
    """Sum of a few random low-frequency plane waves, roughly in [-1, 1]."""
    f = np.zeros(np.broadcast_shapes(x.shape, y.shape, z.shape), np.float32)
    for _ in range(n_waves):
        k = rng.uniform(-max_k, max_k, 3).astype(np.float32) * np.float32(np.pi)
        phase = np.float32(rng.uniform(0, 2 * np.pi))
        f += np.cos(k[0] * x + k[1] * y + k[2] * z + phase)
    return f / np.float32(np.sqrt(n_waves) * 1.5)


def anatomy(shape3, rng):
    """A head-like noise-free volume in raw units: scalp, brain, ventricles, texture, bias."""
    x, y, z = grid(shape3)
    head = soft_ellipsoid(x, y, z, (0, 0, 0), (0.92, 0.95, 0.9))
    brain = soft_ellipsoid(x, y, z, (0, 0.02, 0.05), (0.8, 0.84, 0.78))
    img = 900.0 * head + 1400.0 * brain  # scalp/skull ~900, brain ~2300
    # Ventricles and deep structures: darker and brighter blobs inside the brain.
    for _ in range(8):
        c = rng.uniform(-0.4, 0.4, 3)
        r = rng.uniform(0.06, 0.2, 3)
        img += rng.uniform(-1200, 600) * soft_ellipsoid(x, y, z, c, r)
    # Gyri-like texture inside the brain and a smooth receive-coil bias field everywhere.
    img += 250.0 * brain * low_freq_field(x, y, z, rng, n_waves=12, max_k=6.0)
    img *= 1.0 + 0.15 * low_freq_field(x, y, z, rng, n_waves=4, max_k=1.0)
    return np.maximum(img, 0).astype(np.float32), brain.astype(np.float32)


def rician(signal, sigma, rng):
    """Magnitude of signal plus complex Gaussian noise, rounded to raw int16 (F-order bytes)."""
    re = rng.standard_normal(signal.shape, dtype=np.float32)
    re *= sigma
    re += signal
    im = rng.standard_normal(signal.shape, dtype=np.float32)
    im *= sigma
    mag = np.hypot(re, im, out=re)
    np.rint(mag, out=mag)
    np.clip(mag, 0, 32767, out=mag)
    return mag.astype("<i2").tobytes(order="F")  # NIfTI stores x fastest


def make_header(shape, zooms):
    """A NIfTI-1 single-file header with raw int16 data and our scale factors."""
    hdr = nib.Nifti1Header()
    hdr.set_data_dtype(np.int16)
    hdr.set_data_shape(shape)
    hdr.set_zooms(zooms)
    hdr.set_xyzt_units("mm", "sec")
    # RAS affine centred on the volume, as a scanner would write it.
    aff = np.diag(list(zooms[:3]) + [1.0])
    aff[:3, 3] = -(np.array(shape[:3]) - 1) / 2.0 * np.array(zooms[:3])
    hdr.set_qform(aff, code=1)
    hdr.set_sform(aff, code=1)
    # Written straight into the header: nibabel's image writer would re-quantise the data and
    # choose its own scaling, but we want raw int16 on disk with exactly these factors.
    hdr.set_slope_inter(SCL_SLOPE, SCL_INTER)
    hdr["vox_offset"] = VOX_OFFSET
    return hdr


def write_nii(path, spec, rng):
    shape = spec["shape"]
    shape3 = shape[:3]
    anat, brain = anatomy(shape3, rng)
    anat *= np.float32(spec["gain"])
    hdr = make_header(shape, spec["zooms"])
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        hdr.write_to(f)
        assert f.tell() == VOX_OFFSET, f.tell()
        if len(shape) == 3:
            f.write(rician(anat, spec["sigma"], rng))
        else:
            # One volume at a time keeps memory at a few volumes whatever the series length.
            x, y, z = grid(shape3)
            nt = shape[3]
            # Global pattern with a slow AR(1) time course (physiological noise) and a few
            # "activated" blobs following a block design, both a few percent of the signal.
            global_field = low_freq_field(x, y, z, rng, n_waves=5, max_k=2.0) * brain
            blobs = sum(soft_ellipsoid(x, y, z, rng.uniform(-0.5, 0.5, 3), rng.uniform(0.08, 0.15, 3))
                        for _ in range(4)).astype(np.float32)
            ar = 0.0
            for t in range(nt):
                ar = 0.9 * ar + rng.normal(0, 0.004)
                drift = 0.03 * t / nt                       # scanner drift: +3% over the run
                task = 0.02 * ((t // 15) % 2)                # 30-volume on/off blocks
                vol = anat * np.float32(1.0 + drift) + anat * (np.float32(ar) * global_field
                                                               + np.float32(task) * blobs)
                f.write(rician(vol, spec["sigma"], rng))
    os.replace(tmp, path)  # never leave a half-written file with the final name
    os.utime(path, (FIXED_MTIME, FIXED_MTIME))


def start_gzip(nii, gz):
    """Start the real gzip -6 (what users' .nii.gz files mostly come from) in the background."""
    os.utime(nii, (FIXED_MTIME, FIXED_MTIME))
    out = open(gz + ".tmp", "wb")
    proc = subprocess.Popen(["gzip", "-6", "-k", "-c", nii], stdout=out)
    return proc, out


def finish_gzip(job, gz):
    proc, out = job
    rc = proc.wait()
    out.close()
    if rc != 0:
        sys.exit(f"gzip failed on {gz} (exit {rc})")
    os.replace(gz + ".tmp", gz)


def expected_nii_size(shape):
    return VOX_OFFSET + 2 * int(np.prod(shape))


def nii_ok(path, shape):
    return os.path.exists(path) and os.path.getsize(path) == expected_nii_size(shape)


def gz_ok(path, shape):
    """gzip's trailer ends with ISIZE = uncompressed size mod 2**32: a cheap completeness check."""
    if not os.path.exists(path) or os.path.getsize(path) < 20:
        return False
    with open(path, "rb") as f:
        f.seek(-4, os.SEEK_END)
        isize = struct.unpack("<I", f.read(4))[0]
    return isize == expected_nii_size(shape) % 2**32


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--force", action="store_true", help="regenerate even if the files look complete")
    args = ap.parse_args()
    os.makedirs(DATA, exist_ok=True)
    t0 = time.perf_counter()
    jobs = []
    for i, (name, spec) in enumerate(SPECS.items()):
        nii = os.path.join(DATA, name + ".nii")
        gz = nii + ".gz"
        # Each file gets its own seed, so skipping one never changes the contents of another.
        rng = np.random.default_rng([SEED, i])
        made = False
        if args.force or not nii_ok(nii, spec["shape"]):
            print(f"writing {nii} ...", flush=True)
            write_nii(nii, spec, rng)
            made = True
        if made or not gz_ok(gz, spec["shape"]):
            print(f"gzip -6 {nii} (in the background) ...", flush=True)
            # gzip of the 4D file runs while the 3D volume is generated: two cores, two jobs.
            jobs.append((start_gzip(nii, gz), gz))
    for job, gz in jobs:
        finish_gzip(job, gz)

    for name, spec in SPECS.items():
        nii = os.path.join(DATA, name + ".nii")
        gz = nii + ".gz"
        img = nib.load(nii)
        assert img.shape == spec["shape"] and img.get_data_dtype() == np.int16
        assert np.isclose(img.dataobj.slope, SCL_SLOPE) and np.isclose(img.dataobj.inter, SCL_INTER)
        n, g = os.path.getsize(nii), os.path.getsize(gz)
        print(f"{name}: {img.shape} int16, slope {img.dataobj.slope:g} inter {img.dataobj.inter:g}, "
              f".nii {n / 1e6:.1f} MB, .nii.gz {g / 1e6:.1f} MB, gzip -6 ratio {n / g:.2f}:1")
    print(f"done in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
