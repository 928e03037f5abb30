"""vp.transforms against nitransforms 25.1.0 on files nitransforms writes: ITK (one and several
transforms), FSL with oblique reference and moving grids of different shapes and handedness, and
displacement fields (ITK and RAS); plus lists, folders and malformed files."""

from __future__ import annotations

import numpy as np
import pytest

nb = pytest.importorskip("nibabel")
nt_linear = pytest.importorskip("nitransforms.linear")
nt_nonlinear = pytest.importorskip("nitransforms.nonlinear")
from nibabel.affines import from_matvec  # noqa: E402
from nibabel.eulerangles import euler2mat  # noqa: E402
from nitransforms.io.itk import ITKDisplacementsField  # noqa: E402

import voxpipe as vp  # noqa: E402
from voxpipe import errors  # noqa: E402

RNG = np.random.default_rng(20261203)


def assert_same_matrix(ours, theirs):
    """Equal to 1e-12 of the matrix's largest entry (the brief's 'relative')."""
    theirs = np.asarray(theirs, dtype=np.float64)
    assert ours.shape == theirs.shape
    assert ours.dtype == np.float64
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12 * np.abs(theirs).max())


def random_affine():
    rot = euler2mat(*RNG.uniform(-0.4, 0.4, 3))
    scale = np.diag(RNG.uniform(0.8, 1.25, 3))
    shear = np.eye(3) + np.triu(RNG.uniform(-0.05, 0.05, (3, 3)), 1)
    return from_matvec(rot @ scale @ shear, RNG.uniform(-30, 30, 3))


def grid_image(shape, zooms, flip_x, seed):
    rng = np.random.default_rng(seed)
    lin = euler2mat(*rng.uniform(-0.3, 0.3, 3)) @ np.diag(zooms)
    if flip_x:
        lin = lin @ np.diag([-1.0, 1.0, 1.0])
    aff = from_matvec(lin, rng.uniform(-60, 60, 3))
    return nb.Nifti1Image(np.zeros(shape, np.uint8), aff)


# ---------------------------------------------------------------------------------------- ITK

def test_itk_single_transform_written_by_nitransforms(tmp_path):
    for i in range(8):
        p = tmp_path / f"a{i}.tfm"
        nt_linear.Affine(random_affine()).to_filename(p, fmt="itk")
        theirs = nt_linear.load(p, fmt="itk").matrix
        assert_same_matrix(vp.transforms.load_affine(p), theirs)
        assert_same_matrix(vp.transforms.load_affine(p, format="itk"), theirs)
        assert_same_matrix(vp.transforms.load_affines(str(p)), theirs[None])


def test_itk_several_transforms_written_by_nitransforms(tmp_path):
    mats = np.stack([random_affine() for _ in range(25)])
    p = tmp_path / "hmc.txt"
    nt_linear.LinearTransformsMapping(mats).to_filename(p, fmt="itk")
    theirs = nt_linear.load(p, fmt="itk").matrix
    ours = vp.transforms.load_affines(p)
    assert ours.shape == (25, 4, 4)
    assert_same_matrix(ours, theirs)
    with pytest.raises(errors.FormatError, match="expected one transform, but found 25"):
        vp.transforms.load_affine(p)


@pytest.mark.parametrize("kind", ["AffineTransform_double_3_3", "AffineTransform_float_3_3",
                                  "MatrixOffsetTransformBase_double_3_3"])
def test_itk_hand_written_with_centre(tmp_path, kind):
    # A non-zero centre of rotation, values nitransforms' float32 parser keeps exactly.
    p = tmp_path / "c.tfm"
    p.write_text("#Insight Transform File V1.0\n#Transform 0\n"
                 f"Transform: {kind}\n"
                 "Parameters: 0.875 0.125 -0.0625 -0.25 1.125 0.5 0.03125 -0.375 0.9375 "
                 "12.5 -7.25 3.75\n"
                 "FixedParameters: -10.5 22.25 4.125\n")
    theirs = nt_linear.load(p, fmt="itk").matrix
    assert_same_matrix(vp.transforms.load_affine(p), theirs)
    # Hand check of the offset: t + c - M c, then LPS -> RAS.
    m = np.array([[0.875, 0.125, -0.0625], [-0.25, 1.125, 0.5], [0.03125, -0.375, 0.9375]])
    c = np.array([-10.5, 22.25, 4.125])
    lps = from_matvec(m, np.array([12.5, -7.25, 3.75]) + c - m @ c)
    flip = np.diag([-1.0, -1.0, 1.0, 1.0])
    np.testing.assert_allclose(vp.transforms.load_affine(p), flip @ lps @ flip, rtol=0,
                               atol=1e-13)


def test_itk_double_keeps_every_digit_float_rounds_like_nitransforms(tmp_path):
    body = "Parameters: 0.1 0 0 0 1 0 0 0 1 0.3 0 0\nFixedParameters: 0 0 0\n"
    pd, pf = tmp_path / "d.tfm", tmp_path / "f.tfm"
    head = "#Insight Transform File V1.0\n#Transform 0\nTransform: AffineTransform_{}_3_3\n"
    pd.write_text(head.format("double") + body)
    pf.write_text(head.format("float") + body)
    assert vp.transforms.load_affine(pd)[0, 0] == 0.1
    assert vp.transforms.load_affine(pd)[0, 3] == -0.3
    # nitransforms reads every ITK file as float32; for _float_ files so do we.
    assert_same_matrix(vp.transforms.load_affine(pf), nt_linear.load(pf, fmt="itk").matrix)
    assert vp.transforms.load_affine(pf)[0, 0] == np.float64(np.float32(0.1))
    # For a _double_ file nitransforms' float32 rounding is the only difference.
    np.testing.assert_allclose(vp.transforms.load_affine(pd), nt_linear.load(pd, fmt="itk").matrix,
                               rtol=0, atol=1e-7)


# ---------------------------------------------------------------------------------------- FSL

FSL_CASES = [
    # reference (shape, zooms, flip_x) and moving: every combination of determinant signs
    (((20, 24, 18), (2.0, 2.5, 3.0), False), ((30, 16, 22), (1.5, 1.25, 2.0), True)),
    (((20, 24, 18), (2.0, 2.5, 3.0), True), ((30, 16, 22), (1.5, 1.25, 2.0), False)),
    (((64, 64, 30), (3.0, 3.0, 4.0), False), ((40, 48, 36), (1.0, 1.0, 1.2), False)),
    (((64, 64, 30), (3.0, 3.0, 4.0), True), ((40, 48, 36), (1.0, 1.0, 1.2), True)),
]


@pytest.mark.parametrize("case", range(len(FSL_CASES)))
def test_fsl_matches_nitransforms_with_oblique_grids(tmp_path, case):
    (rs, rz, rf), (ms, mz, mf) = FSL_CASES[case]
    ref = grid_image(rs, rz, rf, 10 + case)
    mov = grid_image(ms, mz, mf, 20 + case)
    assert (np.linalg.det(ref.affine) > 0) == (not rf)
    ref_path, mov_path = tmp_path / "ref.nii.gz", tmp_path / "mov.nii"
    ref.to_filename(ref_path)
    mov.to_filename(mov_path)
    p = tmp_path / "flirt.mat"
    nt_linear.Affine(random_affine(), reference=ref).to_filename(p, fmt="fsl", moving=mov)
    theirs = nt_linear.load(p, fmt="fsl", reference=ref, moving=mov).matrix
    # Grids given as nibabel images, as paths, and as voxpipe images; format explicit and
    # automatic (a reference and a .mat name make the numbers FSL's).
    assert_same_matrix(vp.transforms.load_affine(p, format="fsl", reference=ref, moving=mov),
                       theirs)
    # Stored affines are float32: compare files with nitransforms reading the same files.
    theirs_files = nt_linear.load(p, fmt="fsl", reference=str(ref_path),
                                  moving=str(mov_path)).matrix
    assert_same_matrix(vp.transforms.load_affine(p, reference=ref_path, moving=mov_path),
                       theirs_files)
    assert_same_matrix(
        vp.transforms.load_affine(p, reference=vp.load(ref_path), moving=vp.load(mov_path)),
        theirs_files)
    # No moving grid: the reference stands in, as in nitransforms.
    with pytest.warns(UserWarning):
        theirs_ref = nt_linear.load(p, fmt="fsl", reference=ref).matrix
    assert_same_matrix(vp.transforms.load_affine(p, format="fsl", reference=ref), theirs_ref)


def test_fsl_needs_a_reference(tmp_path):
    p = tmp_path / "flirt.mat"
    p.write_text("1 0 0 0\n0 1 0 0\n0 0 1 0\n0 0 0 1\n")
    with pytest.raises(errors.InvalidArgumentError, match=r"flirt\.mat: reference"):
        vp.transforms.load_affine(p, format="fsl")
    # Automatic without a reference: a plain RAS matrix.
    assert_same_matrix(vp.transforms.load_affine(p), np.eye(4))


def test_mcflirt_folder_and_list_file(tmp_path):
    ref = grid_image((32, 32, 20), (3.0, 3.0, 3.5), False, 3)
    mats = [random_affine() for _ in range(4)]
    folder = tmp_path / "bold_mcf.mat"
    folder.mkdir()
    theirs = []
    for i, m in enumerate(mats):
        f = folder / f"MAT_{i:04d}"
        nt_linear.Affine(m, reference=ref).to_filename(f, fmt="fsl", moving=ref)
        theirs.append(nt_linear.load(f, fmt="fsl", reference=ref, moving=ref).matrix)
    assert_same_matrix(vp.transforms.load_affines(folder, reference=ref), np.stack(theirs))

    itk = tmp_path / "one.tfm"
    nt_linear.Affine(mats[0]).to_filename(itk, fmt="itk")
    plain = tmp_path / "sub" / "two.txt"
    plain.parent.mkdir()
    np.savetxt(plain, mats[1])
    lst = tmp_path / "list.txt"
    lst.write_text(f"# one per volume\none.tfm\n\nsub/two.txt\n{itk}\n")
    got = vp.transforms.load_affines(lst)
    assert got.shape == (3, 4, 4)
    assert_same_matrix(got[0], nt_linear.load(itk, fmt="itk").matrix)
    np.testing.assert_array_equal(got[1], mats[1])  # savetxt's %.18e round-trips exactly
    assert_same_matrix(got[2], got[0])


# ---------------------------------------------------------------------------------------- fields

def make_field(shape=(7, 6, 5)):
    aff = from_matvec(euler2mat(0.1, -0.2, 0.05) @ np.diag([2.0, 2.5, 3.0]), [-10, 20, -5])
    data = RNG.normal(0, 3, (*shape, 3)).astype(np.float32)
    return nb.Nifti1Image(data, aff), aff


def test_itk_field_written_by_nitransforms(tmp_path):
    img, aff = make_field()
    p = tmp_path / "warp.nii.gz"
    ITKDisplacementsField.to_filename(img, p)
    assert nb.load(p).shape == (7, 6, 5, 1, 3)
    field, affine = vp.transforms.load_field(p)
    theirs = nt_nonlinear.load(p, fmt="itk")
    assert field.shape == (7, 6, 5, 3) and field.dtype == np.float64
    np.testing.assert_array_equal(field, np.asarray(theirs._deltas, dtype=np.float64))
    np.testing.assert_array_equal(affine, nb.load(p).affine)
    # ...which is the RAS field it was written from (float32 values, signs flipped twice; not
    # img.get_fdata(), whose cached array nitransforms' writer flips in place).
    np.testing.assert_array_equal(field, np.asarray(img.dataobj, dtype=np.float64))
    # DenseFieldTransform's deformation: grid coordinates plus these displacements.
    ijk = np.stack(np.meshgrid(*[np.arange(n) for n in field.shape[:3]], indexing="ij"), -1)
    np.testing.assert_allclose(ijk @ affine[:3, :3].T + affine[:3, 3] + field, theirs._field,
                               rtol=0, atol=1e-12)


def test_ras_field(tmp_path):
    img, _ = make_field((4, 5, 6))
    p = tmp_path / "field.nii"
    img.to_filename(p)
    field, affine = vp.transforms.load_field(p, format="ras")
    theirs = nt_nonlinear.DenseFieldTransform(str(p))
    np.testing.assert_array_equal(field, np.asarray(theirs._deltas, dtype=np.float64))
    np.testing.assert_array_equal(affine, nb.load(p).affine)  # stored as float32
    with pytest.raises(errors.FormatError, match=r"field\.nii: dim: expected an ITK"):
        vp.transforms.load_field(p)


# ---------------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("text,match", [
    ("#Insight Transform File V1.0\nTransform: AffineTransform_double_3_3\n"
     "Parameters: 1 0 0 0 1 0 0 0 1 0 0\nFixedParameters: 0 0 0\n",
     r"line 3: Parameters: expected 12 values for AffineTransform_double_3_3, but found 11"),
    ("#Insight Transform File V1.0\nTransform: AffineTransform_double_3_3\n"
     "Parameters: 1 0 0 0 1 0 0 0 1 0 0 1,5\nFixedParameters: 0 0 0\n",
     r"line 3: Parameters: expected a finite number, but found '1,5'"),
    ("1 0 0 0\n0 1 0 0\n0 0 1 0\n0 0 1 1\n", r"line 4: row 4: expected 0 0 0 1"),
    ("1 0 0 0\n0 1 0 0\n0 0 1 0\n0 0 0 1\n1 1 1 1\n", r"line 5: row 5"),
    ("1 0 0\n", r"line 1: row 1: expected 4 numbers, but found 3"),
])
def test_malformed_files_name_the_line(tmp_path, text, match):
    p = tmp_path / "bad.txt"
    p.write_text(text)
    with pytest.raises(errors.FormatError, match=match) as info:
        vp.transforms.load_affines(p)
    assert isinstance(info.value, ValueError)
    assert info.value.path == str(p)


def test_missing_and_unsupported(tmp_path):
    with pytest.raises(FileNotFoundError):
        vp.transforms.load_affines(tmp_path / "nothing.tfm")
    p = tmp_path / "list.txt"
    p.write_text("nothing.tfm\n")
    with pytest.raises(FileNotFoundError, match=r"list\.txt: line 1"):
        vp.transforms.load_affines(p)
    q = tmp_path / "bspline.tfm"
    q.write_text("#Insight Transform File V1.0\nTransform: BSplineTransform_double_3_3\n"
                 "Parameters: 0\nFixedParameters: 0\n")
    with pytest.raises(errors.UnsupportedError, match="line 2: Transform"):
        vp.transforms.load_affines(q)
    with pytest.raises(errors.InvalidArgumentError):
        vp.transforms.load_affines(q, format="lta")
    with pytest.raises(errors.InvalidArgumentError):
        vp.transforms.load_affines(q, reference=object())


# ---------------------------------------------------------------------------------------- ITK .mat

def test_itk_matlab_written_by_nitransforms(tmp_path):
    for i in range(4):
        p = tmp_path / f"a{i}.mat"
        nt_linear.Affine(random_affine()).to_filename(p, fmt="itk")
        theirs = nt_linear.load(p, fmt="itk").matrix
        assert_same_matrix(vp.transforms.load_affine(p), theirs)
        assert_same_matrix(vp.transforms.load_affine(p, format="itk"), theirs)
        # A reference grid does not make a binary .mat an FSL matrix.
        assert_same_matrix(vp.transforms.load_affine(p, reference=grid_image((8, 8, 8), (1, 1, 1),
                                                                               False, 1)), theirs)


def test_itk_matlab_as_ants_writes_it(tmp_path):
    # antsRegistration: AffineTransform_float_3_3 with the values stored as doubles, a centre.
    import scipy.io

    params = np.array([0.95, 0.1, -0.05, -0.08, 1.02, 0.12, 0.03, -0.1, 0.99, 3.3, -2.1, 5.7])
    centre = np.array([1.23456789, -20.5, 33.3])
    p = tmp_path / "0GenericAffine.mat"
    scipy.io.savemat(p, {"AffineTransform_float_3_3": params[:, None], "fixed": centre[:, None]},
                     format="4")
    ours = vp.transforms.load_affine(p)
    # ITK's value: float32 parameters, double centre.
    m = params[:9].astype(np.float32).astype(np.float64).reshape(3, 3)
    t = params[9:].astype(np.float32).astype(np.float64)
    flip = np.diag([-1.0, -1.0, 1.0, 1.0])
    np.testing.assert_allclose(ours, flip @ from_matvec(m, t + centre - m @ centre) @ flip,
                               rtol=0, atol=1e-13)
    # nitransforms keeps double parameters but rounds the centre to float32: 1e-6 apart.
    np.testing.assert_allclose(ours, nt_linear.load(p, fmt="itk").matrix, rtol=0, atol=1e-5)


# ---------------------------------------------------------------------------------------- ITK itself

def test_itk_types_against_simpleitk(tmp_path):
    """Files ITK writes (every type read; text and .mat; a composite), points mapped by ITK.
    SimpleITK is not a dependency: this runs where it is installed."""
    sitk = pytest.importorskip("SimpleITK")
    flip = np.array([-1.0, -1.0, 1.0])
    pts = RNG.uniform(-50, 50, (6, 3))

    def check(t, name):
        p = tmp_path / name
        sitk.WriteTransform(t, str(p))
        m = vp.transforms.load_affine(p)
        want = np.array([t.TransformPoint(tuple(x)) for x in pts]) * flip
        np.testing.assert_allclose((pts * flip) @ m[:3, :3].T + m[:3, 3], want, rtol=0, atol=1e-12)
        return m

    for i in range(5):
        c = tuple(RNG.uniform(-30, 30, 3))
        e = sitk.Euler3DTransform(c, *RNG.uniform(-1, 1, 3), tuple(RNG.uniform(-10, 10, 3)))
        check(e, f"euler{i}.tfm")
        e.SetComputeZYX(True)
        check(e, f"euler_zyx{i}.tfm")
        v = sitk.VersorRigid3DTransform()
        v.SetCenter(c)
        v.SetRotation(tuple(RNG.normal(size=3)), RNG.uniform(-3, 3))
        v.SetTranslation(tuple(RNG.uniform(-10, 10, 3)))
        check(v, f"versor{i}.tfm")
        a = sitk.AffineTransform(3)
        a.SetMatrix(tuple(RNG.uniform(-1.5, 1.5, 9)))
        a.SetCenter(c)
        a.SetTranslation(tuple(RNG.uniform(-10, 10, 3)))
        check(a, f"affine{i}.tfm")
        check(a, f"affine{i}.mat")
        check(sitk.TranslationTransform(3, tuple(RNG.uniform(-10, 10, 3))), f"shift{i}.tfm")
    # A composite's transforms come back in file order; ITK applies the last one first.
    p = tmp_path / "composite.tfm"
    sitk.WriteTransform(sitk.CompositeTransform([a, e]), str(p))
    m = vp.transforms.load_affines(p)
    assert m.shape == (2, 4, 4)
    x = np.array([1.0, 2.0, 3.0])
    want = np.array(sitk.CompositeTransform([a, e]).TransformPoint(tuple(x))) * flip
    np.testing.assert_allclose((m[0] @ m[1] @ np.append(x * flip, 1))[:3], want, atol=1e-12)
