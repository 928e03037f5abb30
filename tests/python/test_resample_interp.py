"""vp.map_coordinates and vp.affine_transform against scipy.ndimage (the installed version).

Every spline order (0-5) x boundary mode x prefilter on 1-D, 2-D and 3-D inputs, at random
coordinates inside and outside the input, exactly on the samples and the edges, at half-sample
points, and at NaN; input dtypes float32/float64/int16/uint8, float and integer outputs, output
arrays of any layout; affine transforms with rotations, scales, shifts and other output shapes;
complex inputs (bit for bit: scipy interpolates the real and imaginary parts apart, as voxpipe
does), and scipy's exception type for every argument scipy refuses.

Tolerance (docs/resample.md): the documented contract is 1e-5 of the data range; the kernel
sums its taps in another order than scipy, which changes the last bits only, so the tests hold
it to TIGHT = 1e-10 of the data range, and integer outputs must be equal.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

ndi = pytest.importorskip("scipy.ndimage")
import voxpipe as vp  # noqa: E402
from voxpipe.errors import InvalidArgumentError  # noqa: E402

MODES = ["constant", "grid-constant", "nearest", "reflect", "grid-mirror", "mirror", "wrap",
         "grid-wrap"]
SHAPES = [(9,), (2,), (1, 6), (6, 7), (5, 6, 7)]
TIGHT = 1e-10
CVAL = -3.25


def _coordinates(shape, rng, npts=240):
    """(ndim, npts) coordinates: random inside and outside, integers (samples and edges),
    half-sample points and a few NaN."""
    cols = []
    for n in shape:
        pool = np.concatenate([
            rng.uniform(-3.0, n + 2.0, npts // 2),          # random, about 40% outside
            np.arange(-2, n + 2, dtype=np.float64),         # samples, edges, just outside
            np.arange(-2, n + 2) + 0.5,                     # half-sample points
            [-1e-12, n - 1 + 1e-12, -0.5, n - 0.5, 1e-300, -1.0, float(n)],
        ])
        c = rng.choice(pool, npts)
        c[rng.random(npts) < 0.02] = np.nan
        cols.append(c)
    return np.array(cols)


def _assert_close(got, want, data):
    assert got.shape == want.shape and got.dtype == want.dtype
    if got.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
        return
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    span = float(np.ptp(data.astype(np.float64))) if data.size else 1.0
    ok = ~np.isnan(want)
    diff = np.max(np.abs(got[ok].astype(np.float64) - want[ok]), initial=0.0)
    assert diff <= TIGHT * max(span, 1.0), f"max |voxpipe - scipy| = {diff:g} (range {span:g})"


@pytest.mark.parametrize("prefilter", [True, False])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", range(6))
def test_map_coordinates_matches_scipy(order, mode, prefilter):
    rng = np.random.default_rng(order * 100 + MODES.index(mode) * 2 + prefilter)
    for shape in SHAPES:
        data = rng.standard_normal(shape) * 100 + 20
        coords = _coordinates(shape, rng)
        want = ndi.map_coordinates(data, coords, order=order, mode=mode, cval=CVAL,
                                   prefilter=prefilter)
        got = vp.map_coordinates(data, coords, order=order, mode=mode, cval=CVAL,
                                 prefilter=prefilter)
        _assert_close(got, want, data)


@pytest.mark.parametrize("order", [0, 1, 2, 3, 5])
@pytest.mark.parametrize("dtype", ["float32", "int16", "uint8"])
def test_input_dtypes_and_integer_outputs(dtype, order):
    rng = np.random.default_rng(7 + order)
    shape = (6, 7, 5)
    info = np.iinfo(dtype) if dtype != "float32" else None
    if info:
        data = rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    else:
        data = (rng.standard_normal(shape) * 1000).astype(dtype)
    coords = _coordinates(shape, rng, 400)
    coords32 = coords.astype(np.float32)
    for mode in ["constant", "nearest", "reflect", "grid-constant"]:
        for output in (None, np.float64, np.float32, np.int16, np.uint8, np.int32):
            kw = dict(order=order, mode=mode, cval=7.5, output=output)
            want = ndi.map_coordinates(data, coords, **kw)
            _assert_close(vp.map_coordinates(data, coords, **kw), want, data)
        want = ndi.map_coordinates(data, coords32, order=order, mode=mode, output=np.float64)
        _assert_close(vp.map_coordinates(data, coords32, order=order, mode=mode,
                                         output=np.float64), want, data)


def test_integer_outputs_round_half_away_from_zero_and_clip():
    data = np.array([2.5, -2.5, -3.5, 300.0, -300.0, 0.5, 1e20, np.nan])
    coords = np.arange(data.size, dtype=np.float64)[None]
    for out in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32):
        want = ndi.map_coordinates(data, coords, order=1, output=out)
        np.testing.assert_array_equal(vp.map_coordinates(data, coords, order=1, output=out), want)


def test_output_arrays_of_any_layout_are_filled():
    rng = np.random.default_rng(3)
    data = np.asfortranarray(rng.standard_normal((8, 9, 10)))  # NIfTI's layout, read in place
    coords = _coordinates(data.shape, rng, 300).reshape(3, 20, 15)
    want = ndi.map_coordinates(data, coords, order=3, mode="mirror")
    for out in (np.empty((20, 15)), np.empty((15, 20)).T, np.empty((40, 30))[::2, 1::2],
                np.empty((20, 15), dtype=">f8")):
        got = vp.map_coordinates(data, coords, output=out, order=3, mode="mirror")
        assert got is out
        _assert_close(np.asarray(out, dtype=np.float64), want, data)
    # Coordinates in any layout too.
    got = vp.map_coordinates(data, np.asfortranarray(coords), order=3, mode="mirror")
    _assert_close(got, want, data)


def _rotation(angles):
    a, b, c = angles
    rx = np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])
    ry = np.array([[np.cos(b), 0, np.sin(b)], [0, 1, 0], [-np.sin(b), 0, np.cos(b)]])
    rz = np.array([[np.cos(c), -np.sin(c), 0], [np.sin(c), np.cos(c), 0], [0, 0, 1]])
    return rx @ ry @ rz


@pytest.mark.parametrize("order", range(6))
def test_affine_transform_matches_scipy(order):
    rng = np.random.default_rng(11 + order)
    vol = rng.standard_normal((12, 11, 10)).astype(np.float32) * 50
    rot = _rotation((0.05, -0.08, 0.12))
    center = (np.array(vol.shape) - 1) / 2
    offset = center - rot @ center + [0.3, -0.2, 0.7]
    cases = [
        dict(matrix=rot, offset=offset),
        dict(matrix=rot * [1.2, 0.9, 1.1], offset=offset, output_shape=(9, 14, 8)),
        dict(matrix=np.vstack([np.column_stack([rot, offset]), [0, 0, 0, 1]])),
        dict(matrix=np.column_stack([rot, offset])),
        dict(matrix=np.eye(3), offset=(1.5, -2.0, 0.25)),
        dict(matrix=np.array([[0.7, 0.2], [0.1, 1.3], [0.0, 0.5]]), offset=1.0,
             output_shape=(13, 9)),  # 2-D output sampled from a 3-D input
    ]
    for mode in MODES:
        for case in cases:
            kw = dict(case, order=order, mode=mode, cval=CVAL)
            want = ndi.affine_transform(vol, **kw)
            _assert_close(vp.affine_transform(vol, **kw), want, vol)
    img = rng.standard_normal((15, 13))
    c, s = np.cos(0.3), np.sin(0.3)
    kw = dict(matrix=[[c, -s], [s, c]], offset=(3.0, -2.0), order=order, mode="nearest")
    _assert_close(vp.affine_transform(img, **kw), ndi.affine_transform(img, **kw), img)


@pytest.mark.parametrize("mode", ["constant", "nearest", "wrap", "grid-constant"])
def test_affine_transform_with_a_diagonal_matrix_takes_scipy_s_zoom_path(mode):
    rng = np.random.default_rng(5)
    vol = rng.standard_normal((10, 9, 8))
    kw = dict(matrix=np.array([0.7, 1.3, 0.5]), offset=(0.4, -1.0, 2.0),
              output_shape=(13, 8, 15), mode=mode)
    for order in range(6):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            want = ndi.affine_transform(vol, order=order, **kw)
        _assert_close(vp.affine_transform(vol, order=order, **kw), want, vol)


def test_threads_do_not_change_the_values():
    rng = np.random.default_rng(9)
    vol = rng.standard_normal((20, 21, 22)).astype(np.float32)
    rot = _rotation((0.1, 0.02, -0.05))
    one = vp.affine_transform(vol, rot, order=3, mode="nearest", threads=1)
    two = vp.affine_transform(vol, rot, order=3, mode="nearest", threads=2)
    np.testing.assert_array_equal(one, two)


def test_hostile_arguments_raise_invalid_argument_errors():
    data = np.zeros((4, 5))
    coords = np.zeros((2, 3))
    with pytest.raises(InvalidArgumentError, match="order"):
        vp.map_coordinates(data, coords, order=6)
    with pytest.raises(InvalidArgumentError, match="mode"):
        vp.map_coordinates(data, coords, mode="bogus")
    with pytest.raises(InvalidArgumentError, match="coordinates"):
        vp.map_coordinates(data, np.zeros((3, 3)))
    with pytest.raises(InvalidArgumentError, match="output"):
        vp.map_coordinates(data, coords, output=np.zeros(4))
    with pytest.raises(InvalidArgumentError, match="output_shape"):
        vp.affine_transform(data, np.eye(2), output_shape=(2**40, 2**40))
    with pytest.raises(InvalidArgumentError, match="matrix"):
        vp.affine_transform(data, np.eye(4))
    with pytest.raises(InvalidArgumentError, match="bottom row"):
        vp.affine_transform(data, np.ones((3, 3)))
    with pytest.raises(InvalidArgumentError, match="offset"):
        vp.affine_transform(data, np.eye(2), offset=(1, 2, 3))
    with pytest.raises(InvalidArgumentError, match="complex"):
        vp.map_coordinates(data, coords.astype(np.complex128))
    with pytest.raises(ValueError):  # InvalidArgumentError is a ValueError
        vp.map_coordinates(data, coords, order=-1)


# ---------------------------------------------------------------------------------------------
# Complex inputs (issue 31, item 12): scipy interpolates the real and imaginary parts apart with
# the same kernel, each into its view of one complex output; voxpipe does the same, so the values
# are scipy's bit for bit, and so are the output dtype rules.

def _complex_data(shape, dtype, rng):
    return (rng.standard_normal(shape) * 100 + 20
            + 1j * (rng.standard_normal(shape) * 30 - 5)).astype(dtype)


def _assert_identical(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want, equal_nan=True), (
        f"{np.count_nonzero(~((got == want) | (np.isnan(got) & np.isnan(want))))} of "
        f"{got.size} values differ")


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("order", range(6))
def test_complex_input_matches_scipy_bit_for_bit(order, dtype):
    rng = np.random.default_rng(40 + order)
    rot = _rotation((0.07, -0.05, 0.1))
    for prefilter in (True, False):
        for mode in MODES:
            for shape in [(9,), (6, 7), (5, 6, 7)]:
                data = _complex_data(shape, dtype, rng)
                coords = _coordinates(shape, rng, 120)
                kw = dict(order=order, mode=mode, cval=1.5 - 2.25j, prefilter=prefilter)
                _assert_identical(vp.map_coordinates(data, coords, **kw),
                                  ndi.map_coordinates(data, coords, **kw))
            vol = _complex_data((7, 8, 6), dtype, rng)
            for case in (dict(matrix=rot, offset=(0.4, -0.3, 0.9)),
                         dict(matrix=np.array([0.8, 1.3, 0.6]), offset=0.2,
                              output_shape=(9, 6, 10)),
                         dict(matrix=np.array([[0.7, 0.2], [0.1, 1.3], [0.0, 0.5]]),
                              output_shape=(8, 5))):
                kw = dict(case, order=order, mode=mode, cval=-0.5 + 3j, prefilter=prefilter)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # scipy's zoom-path warning
                    want = ndi.affine_transform(vol, **kw)
                _assert_identical(vp.affine_transform(vol, **kw), want)


@pytest.mark.parametrize("func", ["map_coordinates", "affine_transform"])
def test_complex_output_dtypes_and_arrays_follow_scipy(func):
    """None: the input's complex type (promoted to complex64 at least); a complex dtype as
    given; a real dtype as a type or np.dtype: promoted to complex with scipy's warning; an
    output array, of any layout or byte order: filled in place and returned."""
    rng = np.random.default_rng(12)
    data = _complex_data((6, 7), np.complex64, rng)
    coords = _coordinates(data.shape, rng, 30).reshape(2, 6, 5)

    def call(mod, **kw):
        if func == "map_coordinates":
            return mod.map_coordinates(data, coords, order=3, mode="mirror", **kw)
        return mod.affine_transform(data, [[0.9, 0.1], [-0.2, 1.1]], (0.5, -0.25),
                                    output_shape=(6, 5), order=3, mode="mirror", **kw)

    for output in (None, np.complex64, np.complex128, "complex128", np.dtype("c8")):
        _assert_identical(call(vp, output=output), call(ndi, output=output))
    for output in (np.float32, np.float64, np.int16, np.dtype("float32")):
        with pytest.warns(UserWarning, match="promoting specified output dtype to complex"):
            want = call(ndi, output=output)
        with pytest.warns(UserWarning, match="promoting specified output dtype to complex"):
            got = call(vp, output=output)
        _assert_identical(got, want)
    want = call(ndi, output=np.complex128)
    for out in (np.zeros((6, 5), np.complex128), np.zeros((5, 6), np.complex128).T,
                np.zeros((12, 10), np.complex128)[::2, 1::2], np.zeros((6, 5), ">c16")):
        got = call(vp, output=out)
        assert got is out
        _assert_identical(np.asarray(out, np.complex128), want)
    # A complex128 input into a complex64 array: each part rounded to float32, as scipy.
    wide = data.astype(np.complex128)
    out = np.zeros((6, 5), np.complex64)
    ref = np.zeros((6, 5), np.complex64)
    if func == "map_coordinates":
        vp.map_coordinates(wide, coords, out, order=2, mode="wrap")
        ndi.map_coordinates(wide, coords, ref, order=2, mode="wrap")
    else:
        vp.affine_transform(wide, np.eye(2) * 0.7, 1.0, output=out, order=2, mode="wrap")
        ndi.affine_transform(wide, np.eye(2) * 0.7, 1.0, output=ref, order=2, mode="wrap")
    _assert_identical(out, ref)


def _both_raise(call):
    """The exception scipy raises for call(ndi) and the one voxpipe raises for call(vp)."""
    raised = []
    for mod in (ndi, vp):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                call(mod)
            except Exception as e:  # noqa: BLE001 (the type is what is compared)
                raised.append(e)
            else:
                pytest.fail(f"{mod.__name__} raised nothing")
    return raised


_DATA = np.zeros((4, 5))
_COMPLEX = np.zeros((4, 5), np.complex128)
_COORDS = np.zeros((2, 3))
# (case, call): every argument scipy.ndimage 1.17 refuses, read from its source
# (_interpolation.py, _ni_support._get_output, _normalize_sequence, _extend_mode_to_code).
_REFUSED = [
    ("order 6", lambda m: m.map_coordinates(_DATA, _COORDS, order=6)),
    ("order -1", lambda m: m.affine_transform(_DATA, np.eye(2), order=-1)),
    ("complex coordinates", lambda m: m.map_coordinates(_DATA, _COORDS.astype(complex))),
    ("rank-0 input", lambda m: m.map_coordinates(np.float64(1.0), np.zeros((0, 3)))),
    ("1-D coordinates", lambda m: m.map_coordinates(_DATA, np.zeros(2))),
    ("coordinate rows", lambda m: m.map_coordinates(_DATA, np.zeros((3, 4)))),
    ("output array shape", lambda m: m.map_coordinates(_DATA, _COORDS, output=np.zeros(4))),
    ("output array shape, complex",
     lambda m: m.map_coordinates(_COMPLEX, _COORDS, output=np.zeros(4, complex))),
    ("real output array, complex input",
     lambda m: m.map_coordinates(_COMPLEX, _COORDS, output=np.zeros(3))),
    ("real output string, complex input",
     lambda m: m.map_coordinates(_COMPLEX, _COORDS, output="float64")),
    ("non-numeric output string", lambda m: m.map_coordinates(_DATA, _COORDS, output="bool")),
    ("complex output, real input",
     lambda m: m.map_coordinates(_DATA, _COORDS, output=np.complex128)),
    ("float16 output", lambda m: m.map_coordinates(_DATA, _COORDS, output=np.float16)),
    ("mode", lambda m: m.map_coordinates(_DATA, _COORDS, mode="bogus")),
    ("mode, complex input", lambda m: m.map_coordinates(_COMPLEX, _COORDS, mode="bogus")),
    ("mode, affine", lambda m: m.affine_transform(_DATA, np.eye(2), mode="bogus", order=1)),
    ("output_shape rank 0", lambda m: m.affine_transform(_DATA, np.eye(2), output_shape=())),
    ("output array vs output_shape",
     lambda m: m.affine_transform(_DATA, [1, 1], output_shape=(12,), output=np.zeros(16))),
    ("output array vs output_shape, complex",
     lambda m: m.affine_transform(_COMPLEX, [1, 1], output_shape=(3, 3),
                                  output=np.zeros((4, 4), complex))),
    ("matrix rank", lambda m: m.affine_transform(_DATA, np.zeros((2, 2, 2)))),
    ("matrix rows", lambda m: m.affine_transform(_DATA, np.eye(4))),
    ("matrix rows, complex", lambda m: m.affine_transform(_COMPLEX, np.eye(3)[:, :2])),
    ("matrix columns", lambda m: m.affine_transform(_DATA, np.ones((2, 4)))),
    ("homogeneous bottom row", lambda m: m.affine_transform(_DATA, np.ones((3, 3)))),
    ("offset length", lambda m: m.affine_transform(_DATA, np.eye(2), offset=(1, 2, 3))),
    ("offset shape", lambda m: m.affine_transform(_DATA, np.eye(2), offset=[[1, 2], [3, 4]])),
]


@pytest.mark.parametrize("case,call", _REFUSED, ids=[c for c, _ in _REFUSED])
def test_refused_arguments_raise_scipy_s_exception_type(case, call):
    """Code written for scipy (``except RuntimeError``) catches voxpipe's error; the error is
    still an InvalidArgumentError (a ValueError) naming the argument."""
    want, got = _both_raise(call)
    assert isinstance(got, type(want)), f"{case}: scipy raises {want!r}, voxpipe {got!r}"
    assert isinstance(got, InvalidArgumentError), f"{case}: {got!r}"
    assert got.field in ("order", "coordinates", "output", "output_shape", "mode", "matrix",
                         "offset"), got.field
