"""vp.resample, the streaming executor: every volume equal to scipy.ndimage.affine_transform with
the composed voxel matrix, in memory and through .nii/.nii.gz files, from a file, an in-memory
image or an array of any layout; equal to nitransforms 25.1
(within 1e-5 of the data range) for per-volume affines, displacement fields and field + affine
chains; and its errors."""

import numpy as np
import pytest

nib = pytest.importorskip("nibabel")
ndi = pytest.importorskip("scipy.ndimage")

import voxpipe as vp
from voxpipe import _core
from voxpipe.errors import InvalidArgumentError, LimitError


def rotation(angle_x, angle_z, shift):
    cx, sx, cz, sz = np.cos(angle_x), np.sin(angle_x), np.cos(angle_z), np.sin(angle_z)
    rx = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
    rz = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
    m = np.eye(4)
    m[:3, :3] = rz @ rx
    m[:3, 3] = shift
    return m


MOVING_AFFINE = np.array([[2.0, 0.1, 0, -12], [0, 2.1, 0.05, -10], [0.02, 0, 2.5, -9], [0, 0, 0, 1]])
REF_AFFINE = np.array([[1.8, 0, 0, -11], [0, 1.9, 0, -9.5], [0, 0, 2.2, -8], [0, 0, 0, 1]])
REF_SHAPE = (13, 12, 10)


def smooth_data(shape, seed=0):
    rng = np.random.default_rng(seed)
    data = rng.standard_normal(shape)
    data = ndi.gaussian_filter(data, 1.0, axes=(0, 1, 2)) * 100 + 50
    return data


def write_moving(tmp_path, name, shape=(12, 11, 9, 4), dtype=np.float32, scaled=False):
    data = smooth_data(shape)
    img = nib.Nifti1Image(data.astype(np.float32), MOVING_AFFINE)
    img.header.set_xyzt_units("mm", "sec")
    img.header["pixdim"][4] = 2.5 if len(shape) == 4 else 1
    if scaled:
        img.set_data_dtype(np.int16)  # nibabel chooses scl_slope / scl_inter
    else:
        img = nib.Nifti1Image(data.astype(dtype), MOVING_AFFINE, img.header)
        img.set_data_dtype(dtype)
    path = tmp_path / name
    nib.save(img, path)
    loaded = nib.load(path)
    if scaled:
        assert loaded.dataobj.slope != 1.0 and loaded.get_data_dtype() == np.int16
    return path


def reference_image():
    return nib.Nifti1Image(np.zeros(REF_SHAPE, np.float32), REF_AFFINE)


def voxel_matrix(moving_affine, chain, ref_affine):
    v = _core.series_voxel_matrix(np.ravel(moving_affine).tolist(),
                                  [np.ravel(m).tolist() for m in chain],
                                  np.ravel(ref_affine).tolist())
    v = np.array(v).reshape(4, 4)
    composed = np.eye(4)
    for m in chain:
        composed = m @ composed
    numpy_v = np.linalg.inv(moving_affine) @ composed @ ref_affine
    np.testing.assert_allclose(v, numpy_v, rtol=0, atol=1e-12)
    return v


def scipy_volume(volume, v, order, mode, cval, dtype):
    out = ndi.affine_transform(volume, v, output_shape=REF_SHAPE, order=order, mode=mode,
                               cval=cval, output=np.float64)
    return out.astype(dtype)


@pytest.mark.parametrize("order", [0, 1, 3])
@pytest.mark.parametrize("mode", ["constant", "nearest", "mirror", "grid-wrap"])
@pytest.mark.parametrize("where", ["memory", "nii", "nii.gz"])
def test_affine_equals_scipy_bit_for_bit(tmp_path, order, mode, where):
    moving = write_moving(tmp_path, "moving.nii.gz" if where == "memory" else "moving.nii")
    mats = np.stack([rotation(0.02 * t, -0.03 * t, [0.5 * t, -0.3, 0.2]) for t in range(4)])
    out = None if where == "memory" else tmp_path / f"out.{where}"
    res = vp.resample(moving, reference_image(), mats, order=order, mode=mode, cval=-7.0,
                      dtype=np.float64, out=out)
    data = np.asanyarray(res.dataobj)
    assert data.shape == REF_SHAPE + (4,)
    fdata = nib.load(moving).get_fdata()
    for t in range(4):
        v = voxel_matrix(nib.load(moving).affine, [mats[t]], REF_AFFINE)
        want = scipy_volume(fdata[..., t], v, order, mode, -7.0, np.float64)
        assert np.array_equal(data[..., t], want), (t, np.abs(data[..., t] - want).max())


@pytest.mark.parametrize("order", [0, 1, 3])
def test_scaled_int16_float32_output(tmp_path, order):
    moving = write_moving(tmp_path, "scaled.nii.gz", scaled=True)
    a = rotation(0.04, 0.02, [1.0, -0.5, 0.3])
    ref = reference_image_path(tmp_path)
    res = vp.resample(str(moving), str(ref), a, order=order)
    assert res.get_data_dtype() == np.float32
    data = np.asanyarray(res.dataobj)
    assert data.dtype == np.float32 and data.flags.f_contiguous
    fdata = nib.load(moving).get_fdata()
    # The affines as the files store them (float32 sform), as the executor reads them.
    v = voxel_matrix(nib.load(moving).affine, [a], nib.load(ref).affine)
    for t in range(4):
        want = scipy_volume(fdata[..., t], v, order, "constant", 0.0, np.float32)
        assert np.array_equal(data[..., t], want)


def reference_image_path(tmp_path):
    path = tmp_path / "ref.nii"
    img = reference_image()
    img.header.set_qform(REF_AFFINE, 1)
    img.header.set_sform(REF_AFFINE, 4)
    img.header.set_xyzt_units("mm")  # space units come from the reference, time from moving
    nib.save(img, path)
    return path


def test_3d_moving_and_chain_of_affines(tmp_path):
    moving = write_moving(tmp_path, "m3.nii", shape=(12, 11, 9))
    a0 = rotation(0.1, 0.0, [1, 2, 3])
    a1 = rotation(0.0, -0.05, [-1, 0, 0.5])
    res = vp.resample(moving, reference_image(), [a0, a1], order=3, dtype=np.float64)
    assert res.shape == REF_SHAPE
    v = voxel_matrix(nib.load(moving).affine, [a0, a1], REF_AFFINE)
    want = scipy_volume(nib.load(moving).get_fdata(), v, 3, "constant", 0.0, np.float64)
    assert np.array_equal(np.asarray(res.dataobj), want)


def test_file_output_header(tmp_path):
    moving = write_moving(tmp_path, "m.nii.gz")
    ref = reference_image_path(tmp_path)
    out = tmp_path / "out.nii.gz"
    calls = []
    res = vp.resample(moving, ref, np.eye(4), out=out, order=1,
                      progress=lambda d, n: calls.append((d, n)))
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]
    img = nib.load(out)
    assert img.shape == REF_SHAPE + (4,)
    assert img.get_data_dtype() == np.float32
    assert img.header["sform_code"] == 4 and img.header["qform_code"] == 1
    np.testing.assert_allclose(img.affine, REF_AFFINE, atol=1e-6)
    assert img.header["pixdim"][4] == 2.5
    assert img.header.get_xyzt_units() == ("mm", "sec")
    np.testing.assert_array_equal(np.asanyarray(img.dataobj), np.asanyarray(res.dataobj))
    mem = vp.resample(moving, ref, np.eye(4), order=1)
    np.testing.assert_array_equal(np.asanyarray(mem.dataobj), np.asanyarray(img.dataobj))
    assert mem.header["sform_code"] == 4


def test_out_array_and_threads_and_memory_limit(tmp_path):
    moving = write_moving(tmp_path, "m.nii")
    mats = np.stack([rotation(0.01 * t, 0.02, [0, 0, 0.1 * t]) for t in range(4)])
    want = np.asanyarray(vp.resample(moving, reference_image(), mats, threads=1).dataobj)
    out = np.empty(REF_SHAPE + (4,), np.float32, order="F")
    res = vp.resample(moving, reference_image(), mats, out=out, threads=2,
                      memory_limit=200_000)
    assert np.asanyarray(res.dataobj) is out
    np.testing.assert_array_equal(out, want)
    per_volume, shared, inflight, total = _core.series_memory_estimate(
        str(moving), list(REF_SHAPE), REF_AFFINE.ravel().tolist(), [[(0, np.eye(4).ravel().tolist(), -1)]],
        [], 3, "constant", True, "float32", 4, 0, True)
    # input float32 + float64 coefficients + float32 output
    assert per_volume == 12 * 11 * 9 * (4 + 8) + int(np.prod(REF_SHAPE)) * 4
    assert shared == 0 and inflight == 4 and total == 4 * per_volume


def test_errors(tmp_path):
    moving = write_moving(tmp_path, "m.nii")
    ref = reference_image()
    with pytest.raises(InvalidArgumentError, match="one per volume"):
        vp.resample(moving, ref, np.stack([np.eye(4)] * 3))
    with pytest.raises(InvalidArgumentError, match="expected shape"):
        vp.resample(moving, ref, np.eye(4), out=np.empty((13, 12, 10, 3), np.float32, order="F"))
    with pytest.raises(InvalidArgumentError, match="Fortran"):
        vp.resample(moving, ref, np.eye(4), out=np.empty(REF_SHAPE + (4,), np.float32))
    with pytest.raises(LimitError, match="memory_limit"):
        vp.resample(moving, ref, np.eye(4), memory_limit=10_000)
    with pytest.raises(InvalidArgumentError, match="moving"):
        vp.resample(np.zeros((4, 4, 4)), ref, np.eye(4))
    with pytest.raises(InvalidArgumentError, match="dtype"):
        vp.resample(moving, ref, np.eye(4), dtype=np.complex64)
    with pytest.raises(InvalidArgumentError, match="mode"):
        vp.resample(moving, ref, np.eye(4), mode="bogus")
    field = (np.zeros(REF_SHAPE + (3,)), REF_AFFINE)
    with pytest.raises(InvalidArgumentError, match="shared by every volume"):
        vp.resample(moving, ref, [np.stack([rotation(0.01 * t, 0, [0, 0, 0]) for t in range(4)]),
                                  field])
    out = tmp_path / "never.nii"
    with pytest.raises(LimitError):
        vp.resample(moving, ref, np.eye(4), out=out, memory_limit=10_000)
    assert not out.exists()


# --- in-memory moving images and arrays ---------------------------------------------------

# float32-exact, so that a .nii's sform gives back the same affine and the file route is the
# same computation.
F32_AFFINE = MOVING_AFFINE.astype(np.float32).astype(np.float64)
SERIES_SHAPE = (12, 11, 9, 4)


def series_data(dtype):
    data = smooth_data(SERIES_SHAPE)
    return np.round(data).astype(dtype) if np.dtype(dtype).kind == "i" else data.astype(dtype)


def series_mats():
    return np.stack([rotation(0.02 * t, -0.03 * t, [0.5 * t, -0.3, 0.2]) for t in range(4)])


def assert_equals_file_and_scipy(tmp_path, res, data, order, mode="constant", cval=0.0,
                                 **kwargs):
    """res (in memory) against the same data saved to a .nii and resampled from it, and
    against scipy.ndimage.affine_transform with series_voxel_matrix, bit for bit."""
    path = tmp_path / "saved.nii"
    nib.save(nib.Nifti1Image(np.asarray(data), F32_AFFINE), path)
    assert np.array_equal(nib.load(path).affine, F32_AFFINE)
    mats = series_mats()
    from_file = vp.resample(path, reference_image(), mats, order=order, mode=mode, cval=cval,
                            **kwargs)
    got = np.asanyarray(res.dataobj)
    assert got.shape == REF_SHAPE + (4,)
    assert got.dtype == np.asanyarray(from_file.dataobj).dtype
    assert np.array_equal(got, np.asanyarray(from_file.dataobj))
    for t in range(4):
        v = voxel_matrix(F32_AFFINE, [mats[t]], REF_AFFINE)
        want = scipy_volume(np.asarray(data[..., t], dtype=np.float64), v, order, mode, cval,
                            got.dtype)
        assert np.array_equal(got[..., t], want), (t, np.abs(got[..., t] - want).max())


@pytest.mark.parametrize("order", [0, 1, 3])
@pytest.mark.parametrize("kind", ["nibabel", "voxpipe"])
@pytest.mark.parametrize("dtype", [np.float32, np.int16])
def test_in_memory_image_equals_file_and_scipy(tmp_path, order, kind, dtype):
    data = series_data(dtype)
    make = nib.Nifti1Image if kind == "nibabel" else vp.Nifti1Image
    img = make(data, F32_AFFINE)
    res = vp.resample(img, reference_image(), series_mats(), order=order, mode="nearest",
                      cval=-7.0, dtype=np.float64)
    assert_equals_file_and_scipy(tmp_path, res, data, order, "nearest", -7.0,
                                 dtype=np.float64)


@pytest.mark.parametrize("order", [0, 1, 3])
@pytest.mark.parametrize("layout", ["C", "F", "slice"])
@pytest.mark.parametrize("dtype", [np.float32, np.int16])
def test_array_any_layout_equals_file_and_scipy(tmp_path, order, layout, dtype):
    data = series_data(dtype)
    if layout == "C":
        arr = np.ascontiguousarray(data)
    elif layout == "F":
        arr = np.asfortranarray(data)
    else:  # a strided view of a larger C-ordered array
        big = np.zeros((24, 11, 10, 5), dtype)
        big[::2, :, 1:, 1:] = data
        arr = big[::2, :, 1:, 1:]
        assert not arr.flags.c_contiguous and not arr.flags.f_contiguous
    arr.flags.writeable = False  # read in place, never written
    res = vp.resample(arr, reference_image(), series_mats(), order=order, dtype=np.float32,
                      moving_affine=F32_AFFINE, threads=2)
    assert_equals_file_and_scipy(tmp_path, res, data, order, dtype=np.float32)
    # The other outputs: a given array, and a file.
    out = np.empty(REF_SHAPE + (4,), np.float32, order="F")
    vp.resample(arr, reference_image(), series_mats(), order=order, out=out,
                moving_affine=F32_AFFINE)
    assert np.array_equal(out, np.asanyarray(res.dataobj))
    written = vp.resample(arr, reference_image(), series_mats(), order=order,
                          out=tmp_path / "out.nii.gz", moving_affine=F32_AFFINE)
    assert np.array_equal(np.asanyarray(nib.load(tmp_path / "out.nii.gz").dataobj),
                          np.asanyarray(res.dataobj))
    assert written.shape == REF_SHAPE + (4,)


def test_3d_array_and_progress():
    data = series_data(np.float32)[..., 1]
    calls = []
    res = vp.resample(data, reference_image(), rotation(0.1, 0.0, [1, 2, 3]), order=3,
                      dtype=np.float64, moving_affine=F32_AFFINE,
                      progress=lambda d, n: calls.append((d, n)))
    assert calls == [(1, 1)] and res.shape == REF_SHAPE
    v = voxel_matrix(F32_AFFINE, [rotation(0.1, 0.0, [1, 2, 3])], REF_AFFINE)
    want = scipy_volume(data.astype(np.float64), v, 3, "constant", 0.0, np.float64)
    assert np.array_equal(np.asanyarray(res.dataobj), want)


def test_moving_array_errors():
    ref = reference_image()
    data = np.zeros((4, 5, 6, 2), np.float32)
    with pytest.raises(InvalidArgumentError, match="moving_affine"):
        vp.resample(data, ref, np.eye(4))
    with pytest.raises(InvalidArgumentError, match="moving_affine"):
        vp.resample(nib.Nifti1Image(data, F32_AFFINE), ref, np.eye(4), moving_affine=np.eye(4))
    with pytest.raises(InvalidArgumentError, match=r"\(4, 4\) affine"):
        vp.resample(data, ref, np.eye(4), moving_affine=np.eye(3))
    with pytest.raises(InvalidArgumentError, match="real"):
        vp.resample(data.astype(np.complex64), ref, np.eye(4), moving_affine=np.eye(4))
    with pytest.raises(InvalidArgumentError, match="3-D or 4-D"):
        vp.resample(np.zeros((4, 5)), ref, np.eye(4), moving_affine=np.eye(4))
    with pytest.raises(InvalidArgumentError, match="singular"):
        vp.resample(data, ref, np.eye(4), moving_affine=np.zeros((4, 4)))


# --- against nitransforms 25.1 -------------------------------------------------------------

nit = pytest.importorskip("nitransforms")
from nitransforms.linear import Affine, LinearTransformsMapping  # noqa: E402
from nitransforms.manip import TransformChain  # noqa: E402
from nitransforms.nonlinear import DenseFieldTransform  # noqa: E402
from nitransforms.resampling import apply  # noqa: E402


def assert_close_to(ours, theirs):
    theirs = np.asarray(theirs, dtype=np.float64)
    rng = theirs.max() - theirs.min()
    diff = np.abs(np.asarray(ours, dtype=np.float64) - theirs).max()
    print(f"max |voxpipe - nitransforms| = {diff:.3g} ({diff / rng:.3g} of the range)")
    assert diff <= 1e-5 * rng, (diff, rng)


def test_nitransforms_per_volume_affines(tmp_path):
    moving = write_moving(tmp_path, "bold.nii.gz", shape=(12, 11, 9, 10))
    ref = reference_image()
    mats = np.stack([rotation(0.01 * t, -0.015 * t, [0.2 * t, -0.1 * t, 0.3]) for t in range(10)])
    theirs = apply(LinearTransformsMapping(mats, reference=ref), str(moving), reference=ref,
                   order=3, output_dtype=np.float64)
    ours = vp.resample(moving, ref, mats, order=3, dtype=np.float64)
    assert_close_to(np.asanyarray(ours.dataobj), np.asanyarray(theirs.dataobj))


def field_image(grid_shape, grid_affine, seed=3):
    rng = np.random.default_rng(seed)
    d = ndi.gaussian_filter(rng.standard_normal(grid_shape + (3,)), 1.5, axes=(0, 1, 2)) * 6
    return nib.Nifti1Image(d, grid_affine)


@pytest.mark.parametrize("grid", ["reference", "other"])
def test_nitransforms_displacement_field(tmp_path, grid):
    moving = write_moving(tmp_path, "m3.nii.gz", shape=(12, 11, 9))
    ref = reference_image()
    if grid == "reference":  # every point on the field's grid: its own samples
        fimg = field_image(REF_SHAPE, REF_AFFINE)
    else:  # off the grid: cubic spline of the deformation, no displacement outside
        aff = np.array([[2.3, 0, 0, -10], [0, 2.2, 0, -8], [0, 0, 2.7, -6], [0, 0, 0, 1]])
        fimg = field_image((9, 8, 7), aff)
    xfm = DenseFieldTransform(fimg, is_deltas=True)
    theirs = apply(xfm, str(moving), reference=ref, order=3, output_dtype=np.float64)
    ours = vp.resample(moving, ref, (fimg.get_fdata(), fimg.affine), order=3, dtype=np.float64)
    assert_close_to(np.asanyarray(ours.dataobj), np.asanyarray(theirs.dataobj))


def test_nitransforms_field_then_per_volume_affines(tmp_path):
    moving = write_moving(tmp_path, "bold.nii", shape=(12, 11, 9, 3))
    ref = reference_image()
    fimg = field_image(REF_SHAPE, REF_AFFINE)
    field = (fimg.get_fdata(), fimg.affine)
    mats = np.stack([rotation(0.02 * t, 0.01, [0.3 * t, 0, -0.2]) for t in range(3)])
    ours = np.asanyarray(vp.resample(moving, ref, [field, mats], order=3, dtype=np.float64).dataobj)
    mimg = nib.load(moving)
    for t in range(3):
        vol = nib.Nifti1Image(mimg.get_fdata()[..., t], mimg.affine)
        chain = TransformChain([DenseFieldTransform(fimg, is_deltas=True), Affine(mats[t], reference=ref)])
        theirs = apply(chain, vol, reference=ref, order=3, output_dtype=np.float64)
        assert_close_to(ours[..., t], np.asanyarray(theirs.dataobj))
    # A shared affine before the field, per-volume affines after it (fMRIPrep's one-shot chain)
    pre = rotation(0.03, 0.0, [0.5, 0.5, 0])
    ours = np.asanyarray(vp.resample(moving, ref, [pre, field, mats], order=1, dtype=np.float64).dataobj)
    for t in range(3):
        vol = nib.Nifti1Image(mimg.get_fdata()[..., t], mimg.affine)
        chain = TransformChain([Affine(pre, reference=ref), DenseFieldTransform(fimg, is_deltas=True), Affine(mats[t], reference=ref)])
        theirs = apply(chain, vol, reference=ref, order=1, output_dtype=np.float64)
        assert_close_to(ours[..., t], np.asanyarray(theirs.dataobj))


def test_transform_files(tmp_path):
    """File names go to vp.transforms' readers: a plain 4x4 text matrix, an ITK (X, Y, Z, 1, 3)
    LPS field and a nitransforms (X, Y, Z, 3) RAS field give what the arrays give."""
    moving = write_moving(tmp_path, "m.nii", shape=(12, 11, 9, 2))
    ref = reference_image()
    a = rotation(0.03, -0.02, [0.4, 0.1, -0.3])
    np.savetxt(tmp_path / "a.txt", a)
    want = np.asanyarray(vp.resample(moving, ref, a, order=1).dataobj)
    got = np.asanyarray(vp.resample(moving, ref, str(tmp_path / "a.txt"), order=1).dataobj)
    np.testing.assert_array_equal(got, want)

    fimg = field_image(REF_SHAPE, REF_AFFINE)
    ras = fimg.get_fdata()
    want = np.asanyarray(vp.resample(moving, ref, [(ras, REF_AFFINE), a], order=1).dataobj)
    nib.save(fimg, tmp_path / "ras.nii.gz")
    got = np.asanyarray(vp.resample(moving, ref, [tmp_path / "ras.nii.gz", a], order=1).dataobj)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    lps = ras * [-1, -1, 1]
    itk = nib.Nifti1Image(lps[:, :, :, None, :].astype(np.float64), REF_AFFINE)
    itk.header.set_intent("vector")
    nib.save(itk, tmp_path / "itk.nii.gz")
    got = np.asanyarray(vp.resample(moving, ref, [tmp_path / "itk.nii.gz", a], order=1).dataobj)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
