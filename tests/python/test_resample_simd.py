"""The vectorised interpolation path against scipy.ndimage, bit for bit.

Points whose spline taps all lie inside the array are evaluated four at a time in SIMD lanes
(src/resample/kernel_order*.cpp); the rest take the scalar path. These arrays are large enough
that most points take the vector path, with some near every edge and outside, and the values
must equal scipy's exactly (float64 output, where a different rounding anywhere would show).
The same checks run once more in a child process with VOXPIPE_SIMD=0, the scalar path alone.

``fast=True`` (separable sums with fused multiply-adds) is checked against scipy within its
documented tolerance, and shown to be taken where the CPU has FMA.
"""

import os
import subprocess
import sys
import types

import numpy as np
import pytest

ndi = pytest.importorskip("scipy.ndimage")
import voxpipe as vp  # noqa: E402

MODES = ["constant", "grid-constant", "nearest", "reflect", "mirror", "wrap", "grid-wrap"]


def _coordinates(shape, rng, npts, nan=True):
    """Mostly inside, some within a tap of an edge, some outside, a few NaN."""
    cols = []
    for n in shape:
        inside = rng.uniform(0, n - 1, npts)
        edge = rng.choice([rng.uniform(-0.5, 2.5), rng.uniform(n - 3.5, n - 0.5)], npts)
        outside = rng.uniform(-3, n + 2, npts)  # scipy's nearest reads out of bounds further
        pick = rng.random(npts)
        c = np.where(pick < 0.75, inside, np.where(pick < 0.9, edge, outside))
        if nan:
            c[rng.random(npts) < 0.01] = np.nan
        cols.append(c)
    return np.array(cols)


def _data(shape, dtype, rng):
    if np.dtype(dtype).kind == "f":
        return (rng.standard_normal(shape) * 100 + 20).astype(dtype)
    return rng.integers(-3000, 3000, shape).astype(dtype)


def _check(order, mode, dtype, shape, prefilter, seed):
    rng = np.random.default_rng(seed)
    data = _data(shape, dtype, rng)
    # No NaN for nearest: scipy turns it into index INT64_MIN and reads outside its input (it
    # may crash).
    nan = mode != "nearest"
    coords = _coordinates(shape, rng, 601, nan)  # not a multiple of 4 or 12: the tail too
    kw = dict(order=order, mode=mode, cval=-7.5, prefilter=prefilter)
    want = ndi.map_coordinates(data, coords, output=np.float64, **kw)
    got = vp.map_coordinates(data, coords, output=np.float64, threads=1, **kw)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", [1, 2, 3, 4, 5])
def test_3d_points_equal_scipy_bit_for_bit(order, mode):
    # (13, 11, 21): a last axis long enough for the coefficients' margin, whose samples the
    # vector path reads for points near an edge.
    for dtype, prefilter, shape in (("float64", True, (19, 17, 14)),
                                    ("float32", False, (19, 17, 14)),
                                    ("int16", True, (19, 17, 14)),
                                    ("float64", True, (13, 11, 21))):
        _check(order, mode, dtype, shape, prefilter, seed=order * 31 + MODES.index(mode))


@pytest.mark.parametrize("mode", ["constant", "nearest", "mirror", "grid-wrap"])
@pytest.mark.parametrize("order", [1, 3, 5])
def test_2d_points_equal_scipy_bit_for_bit(order, mode):
    for dtype, prefilter in (("float64", True), ("uint8", False)):
        _check(order, mode, dtype, (23, 18), prefilter, seed=order * 7 + 1)


@pytest.mark.parametrize("order", [1, 3])
def test_affine_rotation_of_a_volume_equals_scipy_bit_for_bit(order):
    rng = np.random.default_rng(5)
    vol = (rng.standard_normal((30, 28, 26)) * 200).astype(np.float32)
    a, b = 0.07, -0.05
    rot = (np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])
           @ np.array([[np.cos(b), 0, np.sin(b)], [0, 1, 0], [-np.sin(b), 0, np.cos(b)]]))
    centre = (np.array(vol.shape) - 1) / 2
    offset = centre - rot @ centre + [0.3, -0.4, 0.25]
    kw = dict(order=order, mode="constant")
    want = ndi.affine_transform(vol, rot, offset, output=np.float64, **kw)
    # C order, Fortran order (a NIfTI volume's: taps adjacent along the first axis), a view
    # with no axis of stride 1, a view with a negative stride.
    spread = np.zeros(vol.shape[:2] + (2 * vol.shape[2],), vol.dtype)
    spread[..., ::2] = vol
    flipped = vol[:, ::-1].copy()[:, ::-1]
    for data in (vol, np.asfortranarray(vol), spread[..., ::2], flipped):
        for threads in (1, 2):
            got = vp.affine_transform(data, rot, offset, output=np.float64, threads=threads, **kw)
            np.testing.assert_array_equal(got, want)


def test_the_scalar_path_alone_equals_scipy_too():
    code = (
        "import sys; sys.path[:0] = %r\n"
        "import test_resample_simd as t\n"
        "for order in (1, 2, 3, 5):\n"
        "    for mode in ('constant', 'nearest', 'wrap'):\n"
        "        t._check(order, mode, 'float64', (19, 17, 14), True, seed=order)\n"
        "        t._check(order, mode, 'int16', (23, 18), False, seed=order)\n"
        "print('ok')\n" % ([os.path.dirname(__file__)] + sys.path,)
    )
    env = dict(os.environ, VOXPIPE_SIMD="0")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"


def _cpu_has_fma():
    """Whether fast mode's FMA path runs: the CPU has AVX2 and FMA, and VOXPIPE_SIMD does not
    hold the core at the scalar level."""
    if os.environ.get("VOXPIPE_SIMD", "").strip().lower() in ("0", "off", "scalar"):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")),
                         [])
    except OSError:
        return False
    return "avx2" in flags and "fma" in flags


def _close_to(got, want, rel=1e-13):
    """Equal NaN positions, and finite values within rel of the largest value."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    scale = max(1.0, float(np.max(np.abs(want[finite]), initial=0.0)))
    np.testing.assert_allclose(got[finite], want[finite], rtol=0, atol=rel * scale)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", [1, 2, 3, 4, 5])
def test_fast_mode_is_within_ulps_of_scipy(order, mode):
    rng = np.random.default_rng(order * 13 + MODES.index(mode))
    differ = 0
    for dtype, prefilter, shape, fortran in (("float64", True, (13, 11, 21), False),
                                             ("float32", False, (13, 11, 21), True),
                                             ("int16", True, (19, 17, 14), False),
                                             ("float64", True, (23, 18), False)):
        data = _data(shape, dtype, rng)
        if fortran:
            data = np.asfortranarray(data)
        coords = _coordinates(shape, rng, 601, nan=mode != "nearest")
        kw = dict(order=order, mode=mode, cval=-7.5, prefilter=prefilter)
        want = ndi.map_coordinates(data, coords, output=np.float64, **kw)
        got = vp.map_coordinates(data, coords, output=np.float64, threads=1, fast=True, **kw)
        _close_to(got, want)
        exact = vp.map_coordinates(data, coords, output=np.float64, threads=1, **kw)
        np.testing.assert_array_equal(exact, want)
        differ += int(np.sum((got != want) & ~np.isnan(want)))
    if order >= 3 and _cpu_has_fma():
        assert differ > 0  # the separable path ran
    if order < 3:
        assert differ == 0  # orders 0 to 2 have no fast path: scipy's values


def test_fast_mode_integer_output_differs_by_at_most_one():
    rng = np.random.default_rng(3)
    data = rng.integers(0, 255, (20, 22, 24)).astype(np.uint8)
    coords = _coordinates(data.shape, rng, 5000, nan=False)
    want = ndi.map_coordinates(data, coords, output=np.int16, order=3)
    got = vp.map_coordinates(data, coords, output=np.int16, order=3, fast=True)
    assert np.max(np.abs(got.astype(np.int32) - want)) <= 1
    assert np.mean(got == want) > 0.999


def test_fast_affine_transform_and_series_stay_within_ulps():
    rng = np.random.default_rng(9)
    vol = (rng.standard_normal((30, 28, 26)) * 200).astype(np.float32)
    a = 0.07
    rot = np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])
    offset = [0.3, -0.4, 0.25]
    want = ndi.affine_transform(vol, rot, offset, output=np.float64, order=3)
    for data in (vol, np.asfortranarray(vol)):
        got = vp.affine_transform(data, rot, offset, output=np.float64, order=3, fast=True)
        _close_to(got, want)
    # The series executor: the same option, per volume.
    series = np.asfortranarray(np.stack([vol, vol * 0.5], axis=-1))
    aff = np.diag([2.0, 2.0, 2.5, 1.0])
    ref = types.SimpleNamespace(shape=vol.shape, affine=aff)
    move = np.eye(4)
    move[:3, 3] = [0.7, -0.3, 0.4]  # off the grid: interpolation everywhere
    exact = vp.resample(series, ref, move, moving_affine=aff, dtype=np.float64)
    fast = vp.resample(series, ref, move, moving_affine=aff, dtype=np.float64, fast=True)
    assert np.any(np.asarray(fast.dataobj) != np.asarray(exact.dataobj)) or not _cpu_has_fma()
    _close_to(np.asarray(fast.dataobj), np.asarray(exact.dataobj))


def test_coordinate_arrays_read_in_place_in_any_row_layout():
    """float64 coordinates adjacent along the points are read where they lie: axis rows apart,
    reversed, overlapping (a broadcast row) or interleaved with other data."""
    rng = np.random.default_rng(21)
    data = _data((14, 13, 20), "float64", rng)
    base = _coordinates(data.shape, rng, 800, nan=False).reshape(3, 20, 40)
    reversed_rows = base[::-1].copy()[::-1]                     # axis stride negative
    wide = np.zeros((3, 20, 80))
    wide[:, :, ::2] = base                                       # points not adjacent: copied
    padded = np.zeros((5, 20, 40))
    padded[::2] = base                                           # axis rows 2 apart
    one_row = np.broadcast_to(base[1], (3, 20, 40))              # axis stride 0
    for coords in (base, reversed_rows, wide[:, :, ::2], padded[::2], one_row,
                   np.asfortranarray(base)):
        want = ndi.map_coordinates(data, np.ascontiguousarray(coords), output=np.float64,
                                   order=3)
        got = vp.map_coordinates(data, coords, output=np.float64, threads=2, order=3)
        np.testing.assert_array_equal(got, want)
