"""NIfTI reads at every instruction-set level (VOXPIPE_SIMD, src/core/simd.hpp): each level's
conversion kernels give nibabel's values bit for bit, for every real and complex dtype, both
byte orders, and every scaling case, to float32, float64 and the natural dtype. Each level runs
in a child process, since the level is read from the environment once."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CHILD = r"""
import sys, tempfile, os
sys.path[:0] = %r
import numpy as np, nibabel as nib
import voxpipe as vp
from nifti_testlib import DTYPES, bits_equal, make_data

problems = []
d = tempfile.mkdtemp()
shape = (13, 7, 5)  # 455 elements: vector bodies and tails
for name in ("uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
             "float32", "float64", "complex64", "complex128"):
    for endian in "<>":
        for k, (slope, inter) in enumerate([(None, None), (1.0, 0.0), (0.73, None),
                                            (None, -12.5), (2.5, -1024.25), (-2.5, 0.0)]):
            data = make_data(DTYPES[name], shape, seed=k).astype(DTYPES[name].newbyteorder(endian))
            img = nib.Nifti1Image(data, np.eye(4), dtype=data.dtype)
            if slope is not None or inter is not None:
                img.header.set_slope_inter(1.0 if slope is None else slope,
                                           0.0 if inter is None else inter)
            path = os.path.join(d, f"{name}{endian == '>'}{k}.nii" + (".gz" if k %% 2 else ""))
            nib.save(img, path)
            want_img, got_img = nib.load(path), vp.load(path)
            cases = [("natural", np.asanyarray(want_img.dataobj), np.asanyarray(got_img.dataobj))]
            if DTYPES[name].kind != "c":
                for dt in (np.float32, np.float64):
                    cases.append((np.dtype(dt).name, want_img.get_fdata(dtype=dt),
                                  vp.load(path).get_fdata(dtype=dt)))
            for what, want, got in cases:
                if want.dtype != got.dtype or not bits_equal(want, got):
                    problems.append(f"{name} {endian} scaling {k} {what}")
print("\n".join(problems) if problems else "ok")
"""


@pytest.mark.parametrize("level", ["scalar", "avx2", "avx512"])
def test_reads_equal_nibabel_at_every_level(level):
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, VOXPIPE_SIMD=level)
    run = subprocess.run([sys.executable, "-c", CHILD % ([here] + sys.path,)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "ok", f"VOXPIPE_SIMD={level}: " + run.stdout[-3000:]
