"""vp.view and `voxpipe view`: the PNG read back with Pillow, on an asymmetric phantom.

The phantom, in RAS voxel order, is a gradient (x + 2y + 3z, so that any flip or swap of axes
changes the picture) with a bright block that starts at the centre voxel and extends towards
Right, Anterior and Superior by a different number of voxels along each axis. It is stored in
other voxel orders (LPS, PIR, anisotropic voxels, an oblique affine) with nibabel's
as_reoriented, and the pictures are checked two ways:
 - by meaning, without a model of the drawing: in every panel the block lies right of and above
   the panel's centre, on the side of the panel's right and top letters (A and S in the
   sagittal panel, R and S in the coronal, R and A in the axial);
 - pixel for pixel against a reference drawn here from nibabel's as_closest_canonical,
   numpy.percentile and the rules of docs/view.md (sizes, nearest-neighbour sampling, window,
   letters).
"""

from __future__ import annotations

import io
import math
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import nibabel as nib
import numpy as np
import pytest
from nibabel.orientations import axcodes2ornt, ornt_transform

import voxpipe as vp

Image = pytest.importorskip("PIL.Image")

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get("VOXPIPE_CLI") or REPO / ".venv" / "bin" / "voxpipe")

SHAPE = (20, 24, 16)                 # RAS voxel order
BLOCK = ((10, 16), (12, 21), (8, 13))  # from the centre voxel towards R, A, S; 6 x 9 x 5 voxels
MARGIN, GLYPH_W, GLYPH_H = 20, 10, 14

# The letters as docs/view.md draws them: 5x7 bitmaps, each bit a 2x2 block.
GLYPHS = {
    "L": (0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F),
    "R": (0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11),
    "A": (0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11),
    "P": (0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10),
    "S": (0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E),
    "I": (0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E),
}
# (horizontal axis, vertical axis, slice axis, letters left, right, top, bottom), RAS axes.
PANELS = [(1, 2, 0, "PASI"), (0, 2, 1, "LRSI"), (0, 1, 2, "LRAP")]


def phantom(shape=SHAPE, block=BLOCK) -> np.ndarray:
    x, y, z = np.meshgrid(*(np.arange(n) for n in shape), indexing="ij")
    data = (x + 2 * y + 3 * z).astype(np.float32)
    data[tuple(slice(*b) for b in block)] = 1000
    return data


def stored_as(codes: str, zooms=(1.0, 1.0, 1.0), rotation=None, data=None):
    """The RAS phantom stored in voxel order `codes` (its world is unchanged)."""
    affine = np.diag([*zooms, 1.0])
    affine[:3, 3] = [-7.5, 3.25, 11.0]
    if rotation is not None:
        affine = rotation @ affine
    ras = nib.Nifti1Image(phantom() if data is None else data, affine)
    return ras.as_reoriented(ornt_transform(axcodes2ornt("RAS"), axcodes2ornt(tuple(codes))))


def rotation_z(degrees: float) -> np.ndarray:
    a = math.radians(degrees)
    r = np.eye(4)
    r[:2, :2] = [[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]]
    return r


def read_png(data: bytes) -> np.ndarray:
    im = Image.open(io.BytesIO(data))
    assert im.mode == "L"
    return np.asarray(im)


# ---- the reference drawing (docs/view.md)

def window(data: np.ndarray):
    finite = data[np.isfinite(data)].astype(np.float64)
    lo, hi = np.percentile(finite, [1, 99])
    return float(lo), float(hi)


def to_gray(values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    v = values.astype(np.float64)
    with np.errstate(invalid="ignore"):
        if hi == lo:
            out = np.where(v > lo, 255, 0)
        else:
            t = (v - lo) * (255 / (hi - lo)) + 0.5
            out = np.floor(np.clip(np.nan_to_num(t, nan=0.0), 0, 255))
    return np.where(np.isnan(v), 0, out).astype(np.uint8)


def pixel_size(largest_mm: float, smallest_zoom: float, min_px: float, max_px: float) -> float:
    span = largest_mm / smallest_zoom
    if span > max_px:
        return largest_mm / max_px
    if span < min_px:
        return smallest_zoom / math.ceil(min_px / span)
    return smallest_zoom


def sample(n: int, pixels: int) -> np.ndarray:
    return np.minimum(n - 1, ((np.arange(pixels) + 0.5) * n / pixels).astype(np.int64))


def letter(canvas: np.ndarray, ch: str, x: int, y: int) -> None:
    for r, bits in enumerate(GLYPHS[ch]):
        for c in range(5):
            if bits & (0x10 >> c):
                canvas[y + 2 * r:y + 2 * r + 2, x + 2 * c:x + 2 * c + 2] = 255


def label_box(canvas, x0, y0, w, h, letters):
    pad = (MARGIN - GLYPH_W) // 2
    mid_y, mid_x = y0 + (h - GLYPH_H) // 2, x0 + (w - GLYPH_W) // 2
    left, right, top, bottom = letters
    letter(canvas, left, x0 - MARGIN + pad, mid_y)
    letter(canvas, right, x0 + w + pad, mid_y)
    letter(canvas, top, mid_x, y0 - MARGIN + (MARGIN - GLYPH_H) // 2)
    letter(canvas, bottom, mid_x, y0 + h + (MARGIN - GLYPH_H) // 2)


def canonical(img):
    can = nib.as_closest_canonical(img)
    data = np.asarray(can.dataobj, dtype=np.float32)
    zooms = np.sqrt((can.affine[:3, :3] ** 2).sum(axis=0))
    return data, zooms


def panel_image(data, gray, h_axis, v_axis, fixed_axis, fixed, width, height):
    idx = [None, None, None]
    idx[fixed_axis] = fixed
    nh, nv = data.shape[h_axis], data.shape[v_axis]
    hs = sample(nh, width)
    vs = nv - 1 - sample(nv, height)
    out = np.zeros((height, width), np.uint8)
    for row, v in enumerate(vs):
        for col, h in enumerate(hs):
            idx[h_axis], idx[v_axis] = h, v
            out[row, col] = gray[tuple(idx)]
    return out


def panel_sizes(shape, zooms, p, axes):
    return [max(1, round(shape[a] * zooms[a] / p)) for a in axes]


def reference_ortho(img):
    """The picture and the panels' rectangles (x, y, w, h), drawn from the documented rules."""
    data, zooms = canonical(img)
    gray = to_gray(data, *window(data))
    largest = max(n * z for n, z in zip(data.shape, zooms))
    p = pixel_size(largest, min(zooms), 256, 1024)
    sizes = [panel_sizes(data.shape, zooms, p, (h, v)) for h, v, _, _ in PANELS]
    max_h = max(h for _, h in sizes)
    canvas = np.zeros((max_h + 2 * MARGIN, sum(w + 2 * MARGIN for w, _ in sizes)), np.uint8)
    rects, x = [], MARGIN
    for (h_axis, v_axis, fixed_axis, letters), (w, h) in zip(PANELS, sizes):
        y = MARGIN + (max_h - h) // 2
        canvas[y:y + h, x:x + w] = panel_image(data, gray, h_axis, v_axis, fixed_axis,
                                               data.shape[fixed_axis] // 2, w, h)
        label_box(canvas, x, y, w, h, letters)
        rects.append((x, y, w, h))
        x += w + 2 * MARGIN
    return canvas, rects


def run_cli(*args, cwd=None) -> subprocess.CompletedProcess:
    if not CLI.exists():
        pytest.skip(f"voxpipe CLI not found at {CLI}")
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=60)


CASES = {
    "RAS": dict(codes="RAS"),
    "LPS": dict(codes="LPS"),
    "PIR": dict(codes="PIR"),
    "LPS anisotropic": dict(codes="LPS", zooms=(1.0, 2.0, 3.0)),
    "oblique 25 degrees": dict(codes="ASL", zooms=(0.9, 1.1, 1.3), rotation=rotation_z(25)),
}


@pytest.mark.parametrize("case", CASES)
def test_block_lies_towards_the_right_anterior_superior_letters(case):
    img = stored_as(**CASES[case])
    picture = read_png(vp.view(img))
    _, rects = reference_ortho(img)
    for (x, y, w, h), (_, _, _, letters) in zip(rects, PANELS):
        bright = np.argwhere(picture[y:y + h, x:x + w] == 255)
        assert bright.size, letters
        rows, cols = bright[:, 0], bright[:, 1]
        # The block starts at the centre voxel: its edge is within one voxel of the centre line.
        assert cols.min() >= w // 2 - w // 8, (case, letters, cols.min(), w)
        assert rows.max() <= h // 2 + h // 8, (case, letters, rows.max(), h)
        assert cols.mean() > w / 2 and rows.mean() < h / 2
        # ... and the letters on those sides are the positive directions.
        assert letters[1] in "RAS" and letters[2] in "RAS"


@pytest.mark.parametrize("case", CASES)
def test_picture_equals_reference_drawing(case):
    img = stored_as(**CASES[case])
    expected, _ = reference_ortho(img)
    np.testing.assert_array_equal(read_png(vp.view(img)), expected)


def test_stored_orders_give_one_picture():
    """The world is the same, so the picture is too, whatever the voxel order on disk."""
    pictures = {c: vp.view(stored_as(c)) for c in ("RAS", "LPS", "PIR", "SLA")}
    assert len(set(pictures.values())) == 1


def test_size_follows_voxel_aspect():
    # Extents 40, 40, 30 mm; smallest voxel 1 mm: 7 pixels per mm makes 280 >= 256 pixels.
    data = np.zeros((40, 20, 10), np.float32)
    img = nib.Nifti1Image(data, np.diag([1.0, 2.0, 3.0, 1.0]))
    picture = read_png(vp.view(img))
    sag, cor, ax = (280, 210), (280, 210), (280, 280)  # (width, height) = voxels * mm * 7
    assert picture.shape == (280 + 2 * MARGIN, sag[0] + cor[0] + ax[0] + 6 * MARGIN)
    # A large volume is bounded: 2000 mm across becomes 1024 pixels, 4 mm round(2.048) = 2.
    big = nib.Nifti1Image(np.zeros((2000, 4, 4), np.float32), np.eye(4))
    assert read_png(vp.view(big)).shape == (2 + 2 * MARGIN, 3 * 2 * MARGIN + 2 + 1024 + 1024)


def test_window_is_1st_to_99th_percentile():
    rng = np.random.default_rng(3)
    data = rng.normal(100, 30, SHAPE).astype(np.float32)
    data[0, 0, 0] = np.nan
    data[1, 0, 0] = np.inf
    data[2, 0, 0] = -np.inf
    img = nib.Nifti1Image(data, np.eye(4))
    lo, hi = window(data)
    assert lo < hi
    picture, rects = read_png(vp.view(img)), reference_ortho(img)[1]
    x, y, w, h = rects[2]  # axial, slice z = 8
    got = picture[y:y + h, x:x + w]
    expected = panel_image(data, to_gray(data, lo, hi), 0, 1, 2, SHAPE[2] // 2, w, h)
    np.testing.assert_array_equal(got, expected)
    # Both ends saturate (about 1% of the values each side), and the rest spreads in between.
    assert (got == 0).any() and (got == 255).any() and len(np.unique(got)) > 150


def test_nan_is_black_and_constant_volume_is_black():
    data = np.full(SHAPE, 7, np.float32)
    data[tuple(slice(*b) for b in BLOCK)] = np.nan
    img = nib.Nifti1Image(data, np.eye(4))
    picture, (_, rects) = read_png(vp.view(img)), reference_ortho(img)
    for x, y, w, h in rects:
        assert not picture[y:y + h, x:x + w].any()
    # lo == hi (a mask that is mostly 0): what is above is white.
    mask = np.zeros(SHAPE, np.float32)
    mask[10, 12, 8] = 1
    picture = read_png(vp.view(nib.Nifti1Image(mask, np.eye(4))))
    x, y, w, h = rects[2]
    assert (picture[y:y + h, x:x + w] == 255).sum() == (w // SHAPE[0]) * (h // SHAPE[1])


def test_mosaic_shows_axial_slices_inferior_to_superior():
    img = stored_as("LPS")
    picture = read_png(vp.view(img, mosaic=True))
    data, zooms = canonical(img)
    nz = data.shape[2]            # 16 slices: a 4 x 4 grid
    cols, rows = 4, 4
    p = pixel_size(max(data.shape[0], data.shape[1]), 1.0, 128, 2048 / cols)
    w, h = panel_sizes(data.shape, zooms, p, (0, 1))
    assert (w, h) == (20 * 6, 24 * 6)  # 24 mm across: 6 pixels per mm make >= 128 pixels
    assert picture.shape == (rows * h + 3 * 2 + 2 * MARGIN, cols * w + 3 * 2 + 2 * MARGIN)
    gray = to_gray(data, *window(data))
    for j in range(nz):
        x, y = MARGIN + (j % cols) * (w + 2), MARGIN + (j // cols) * (h + 2)
        np.testing.assert_array_equal(picture[y:y + h, x:x + w],
                                      panel_image(data, gray, 0, 1, 2, j, w, h))
        # The block (slices 8..12) appears right of and above the tile's centre.
        bright = np.argwhere(picture[y:y + h, x:x + w] == 255)
        assert bool(bright.size) == (BLOCK[2][0] <= j < BLOCK[2][1])
        if bright.size:
            assert bright[:, 1].mean() > w / 2 and bright[:, 0].mean() < h / 2
    expected = np.zeros_like(picture)
    label_box(expected, MARGIN, MARGIN, cols * w + 6, rows * h + 6, "LRAP")
    margin = np.ones(picture.shape, bool)
    margin[MARGIN:-MARGIN, MARGIN:-MARGIN] = False
    np.testing.assert_array_equal(picture[margin], expected[margin])


def test_4d_volume_and_scaled_values(tmp_path):
    """The CLI reads the volume asked for, with the scale factors, as vp.view does."""
    vols = np.stack([phantom(), phantom()[::-1].copy(), np.zeros(SHAPE, np.float32)], axis=-1)
    img = nib.Nifti1Image(vols.astype(np.int16), np.diag([1.5, 1.5, 2.0, 1.0]))
    img.header.set_slope_inter(0.25, -3)
    path = tmp_path / "bold.nii.gz"
    nib.save(img, path)
    loaded = vp.load(path)
    for t in (None, 1):
        out = tmp_path / f"v{t}.png"
        args = ["view", path, "-o", out] + ([] if t is None else ["--volume", t])
        r = run_cli(*args)
        assert r.returncode == 0, r.stderr
        assert out.read_bytes() == vp.view(loaded, volume=t) == vp.view(nib.load(path), volume=t)
        assert out.read_bytes() == vp.view(path, volume=t)
    assert vp.view(loaded, volume=1) != vp.view(loaded, volume=0)
    # Volume 1 is volume 0 flipped left-right: its picture is the reference of that volume.
    np.testing.assert_array_equal(
        read_png(vp.view(loaded, volume=1)),
        reference_ortho(nib.Nifti1Image(np.asarray(loaded.dataobj[..., 1]), loaded.affine))[0])
    # vp.view writes the same file.
    vp.view(loaded, tmp_path / "py.png", volume=1)
    assert (tmp_path / "py.png").read_bytes() == (tmp_path / "v1.png").read_bytes()


def test_default_output_name_and_overwrite_rule(tmp_path):
    path = tmp_path / "sub-01_T1w.nii.gz"
    nib.save(stored_as("LPS"), path)
    work = tmp_path / "work"
    work.mkdir()
    r = run_cli("view", path, cwd=work)
    assert r.returncode == 0, r.stderr
    out = work / "sub-01_T1w.png"
    assert out.read_bytes() == vp.view(path)
    out.write_bytes(b"keep")
    r = run_cli("view", path, cwd=work)
    assert r.returncode == 12
    assert "exists (--overwrite replaces it)" in r.stderr and str("sub-01_T1w.png") in r.stderr
    assert out.read_bytes() == b"keep"
    for flag in ("--overwrite", "--force"):
        out.write_bytes(b"keep")
        r = run_cli("view", path, "-o", out, flag)
        assert r.returncode == 0, r.stderr
        assert out.read_bytes() == vp.view(path)
    assert [p.name for p in work.iterdir()] == ["sub-01_T1w.png"]  # no temporary left


def test_errors(tmp_path):
    r = run_cli("view", tmp_path / "missing.nii.gz", "-o", tmp_path / "x.png")
    assert r.returncode == 3, r.stderr
    assert "voxpipe view: error (not_found)" in r.stderr
    path = tmp_path / "a.nii"
    nib.save(stored_as("RAS"), path)
    for bad in ("1", "-1"):
        r = run_cli("view", path, "--volume", bad, "-o", tmp_path / "x.png")
        assert r.returncode == 10, r.stderr
        assert "voxpipe view: error (invalid_argument)" in r.stderr and "--volume" in r.stderr
    assert run_cli("view", path, "--volume", "x").returncode == 2
    assert run_cli("view", path, "--bogus").returncode == 2
    assert not (tmp_path / "x.png").exists()
    with pytest.raises(vp.errors.InvalidArgumentError):
        vp.view(vp.load(path), volume=1)
    with pytest.raises(FileNotFoundError):
        vp.view(tmp_path / "missing.nii")
    with pytest.raises(OSError):  # an unwritable destination
        vp.view(vp.load(path), tmp_path / "no" / "such" / "dir.png")
    complex_path = tmp_path / "c.nii"
    nib.save(nib.Nifti1Image(np.ones((4, 4, 4), np.complex64), np.eye(4)), complex_path)
    r = run_cli("view", complex_path, "-o", tmp_path / "x.png")
    assert r.returncode == 10 and "cannot convert complex64 to float32" in r.stderr
    with pytest.raises(vp.errors.InvalidArgumentError, match="cannot convert complex64"):
        vp.view(nib.load(complex_path))
    # nibabel refuses to build an image on a singular affine; an array with one goes as far
    # as the renderer, which cannot tell an orientation from it.
    singular = SimpleNamespace(dataobj=phantom(), affine=np.diag([1.0, 0.0, 1.0, 1.0]))
    with pytest.raises(vp.errors.InvalidArgumentError):
        vp.view(singular)


def test_dicom_series_renders_in_world_orientation(tmp_path):
    pytest.importorskip("pydicom")
    from pydicom.uid import generate_uid
    from test_dicom_series import base_dataset

    # Axial slices: columns run to the patient's left, rows to posterior (DICOM's LPS).
    can = phantom().astype(np.int16)            # RAS voxel order
    nx, ny, nz = can.shape
    uid = generate_uid()
    folder = tmp_path / "series"
    folder.mkdir()
    for k in range(nz):
        ds = base_dataset(uid, rows=ny, cols=nx)
        ds.RescaleSlope, ds.RescaleIntercept = 1, 0
        ds.PixelSpacing = [1.0, 1.0]
        ds.SOPInstanceUID = generate_uid()
        ds.InstanceNumber = nz - k
        ds.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
        ds.ImagePositionPatient = [10.0, 20.0, -5.0 + 2.5 * k]
        ds.PixelData = np.ascontiguousarray(can[::-1, ::-1, k].T).tobytes()  # [row, column]
        ds.save_as(folder / f"im{k:03d}.dcm", enforce_file_format=True)
    out = tmp_path / "dicom.png"
    r = run_cli("view", folder, "-o", out)
    assert r.returncode == 0, r.stderr
    loaded = vp.load_dicom(folder)
    assert out.read_bytes() == vp.view(loaded) == vp.view(folder)
    # The same world as the NIfTI phantom with 2.5 mm slices: the same picture.
    ras = nib.Nifti1Image(can.astype(np.float32), np.diag([1.0, 1.0, 2.5, 1.0]))
    np.testing.assert_array_equal(read_png(out.read_bytes()), reference_ortho(ras)[0])
    assert read_png(out.read_bytes()).tobytes() == read_png(vp.view(ras)).tobytes()
    # Two series in one folder: the user must choose.
    for k in range(3):
        ds = base_dataset(generate_uid() if k == 0 else ds.SeriesInstanceUID, rows=4, cols=4)
        ds.SeriesNumber = 9
        ds.SOPInstanceUID = generate_uid()
        ds.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
        ds.ImagePositionPatient = [0.0, 0.0, float(k)]
        ds.PixelData = np.zeros((4, 4), np.int16).tobytes()
        ds.save_as(folder / f"other{k}.dcm", enforce_file_format=True)
    r = run_cli("view", folder, "-o", tmp_path / "two.png")
    assert r.returncode == 10 and "expected one series, but found 2" in r.stderr
