"""Smoke test of an installed voxpipe wheel, as a user gets it: run by scripts/test_wheel.sh in a
fresh virtual environment, from a folder outside the source tree, with no compiler or CMake on
PATH. Checks that the wheel is self-contained (its native libraries and the `voxpipe` command
come from the wheel, not from the build machine) and that what a user does works, each value
against a reference: a NIfTI read equal to nibabel's and a NIfTI write nibabel reads back, a
.nii.gz seek index (vp.gz.build_index) and a ranged read through it, compressed DICOM frames
decoded by each bundled codec library (pydicom's values), a resample (scipy.ndimage's values
where scipy is installed, else a known one), the PNG of vp.view; and every command of
docs/cli.md and `voxpipe view`, each checked against nibabel, pydicom or the Python API, run
twice: from the environment activated (`voxpipe` found on PATH, VIRTUAL_ENV set) and not
activated (bin/voxpipe by its absolute path, PATH without bin/, nothing set), from a folder
whose voxpipe.py, numpy.py, zarr.py and obstore.py it must not import. Not activated, the
commands that run Python packages besides voxpipe's own are run too: `convert` to and `info` of
a NIfTI-Zarr store (the zarr extra, from Python 3.11), `info` and `convert` of an s3:// object
(the s3 extra) and `bench-load` with its nibabel child.

Usage: python smoke_test.py SOURCE_ROOT   (the checkout the wheel was built from, to assert that
nothing is imported from it, and whose .venv runs the S3 server: moto)
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

SOURCE_ROOT = Path("/nonexistent")  # main() sets it from the command line
PREFIX = Path(sys.prefix).resolve()

# pydicom 3.0.2's test files, one per library-backed codec; the SHA-256 of pixel_array's bytes as
# pydicom 3.0.2 decodes them with its plugins (GDCM, pylibjpeg-libjpeg, pyjpegls,
# pylibjpeg-openjpeg), which tests/python/test_dicom_pixels.py compares voxpipe with file by
# file. Recorded so that the smoke needs none of those plugins.
DICOM_REFERENCE = {
    # JPEG Baseline (libjpeg-turbo)
    "SC_rgb_dcmtk_+eb+cr.dcm": ("|u1", (100, 100, 3),
                                "e414aaca686695163b4fcca90cc4b0bf6aff59d70c036a39a446ebcbb53e3360"),
    # JPEG-LS Lossless (CharLS)
    "MR_small_jpeg_ls_lossless.dcm": ("<i2", (64, 64),
                                      "88617aaa46138fb1b6e2a951e762d962382354d69f47f8c04d4abff2f6a6a63e"),
    # JPEG 2000 (OpenJPEG)
    "JPEG2000.dcm": ("<i2", (1024, 256),
                     "0b1224a6dcd0dcebb1ae6966270b620a8aecc3e20d7fe5b01504e574e1814ac6"),
}
# The libraries the wheel must carry itself (ldd names), never take from the system. zlib is not
# among them: manylinux policies count libz.so.1 as part of the base system.
# glibc's ldd, outside the stripped PATH.
LDD = shutil.which("ldd", path="/usr/bin:/bin")
# What _core may load: glibc's own libraries (the manylinux policy's whitelist).
GLIBC_LIBS = re.compile(r"^(libc|libm|libpthread|libdl|librt|ld-linux-x86-64)\.so\.[0-9]+$")


def check(cond: bool, what: str) -> None:
    if not cond:
        raise SystemExit(f"FAIL: {what}")
    print(f"ok: {what}")


def inside(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root)


def no_build_tools() -> None:
    tools = {t: shutil.which(t) for t in ("gcc", "cc", "c++", "g++", "clang", "cmake", "ninja", "make")}
    check(all(v is None for v in tools.values()),
          f"no build tools on PATH ({ {k: v for k, v in tools.items() if v} or 'none found'})")
    check(not inside(Path.cwd(), SOURCE_ROOT), f"cwd {Path.cwd()} is outside the source tree")


def import_voxpipe():
    import voxpipe
    import voxpipe._core
    check(inside(Path(voxpipe.__file__), PREFIX) and not inside(Path(voxpipe.__file__), SOURCE_ROOT),
          f"voxpipe imported from the venv ({voxpipe.__file__})")
    check(inside(Path(voxpipe._core.__file__), PREFIX), "voxpipe._core from the venv")
    from importlib.metadata import version
    check(voxpipe.__version__ == version("voxpipe") and voxpipe.__version__ != "0+unknown",
          f"voxpipe.__version__ {voxpipe.__version__} is the wheel's")
    return voxpipe


def nifti_equals_nibabel(vp, work: Path) -> Path:
    import nibabel as nib
    rng = np.random.default_rng(19)
    data = rng.integers(-3000, 3000, size=(7, 6, 5, 3), dtype=np.int16)
    img = nib.Nifti1Image(data, np.diag([1.5, 2.0, 2.5, 1.0]))
    img.header.set_slope_inter(0.37, -12.5)
    path = work / "scaled_int16.nii.gz"
    nib.save(img, path)
    ref = nib.load(path)
    got = vp.load(path)
    for dtype in (np.float64, np.float32):
        a, b = got.get_fdata(dtype=dtype), ref.get_fdata(dtype=dtype)
        check(a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(),
              f"vp.load(.nii.gz).get_fdata({np.dtype(dtype).name}) equals nibabel's bit for bit")
    check(np.array_equal(got.affine, ref.affine), "affine equals nibabel's")
    return path


def dicom_codecs(vp) -> None:
    from pydicom.data import get_testdata_file
    for name, (dtype, shape, digest) in DICOM_REFERENCE.items():
        arr = vp.dicom.read(get_testdata_file(name)).pixel_array
        got = hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()
        check(arr.dtype == np.dtype(dtype) and arr.shape == shape and got == digest,
              f"{name}: pixel_array equals pydicom's (dtype, shape, SHA-256)")


def nifti_write_equals_nibabel(vp, nifti: Path, work: Path) -> None:
    """vp.save of an image vp.load read, as .nii and .nii.gz: nibabel reads back the stored
    values, scale factors and affine of the original."""
    import nibabel as nib
    ref = nib.load(nifti)
    for name in ("written.nii", "written.nii.gz"):
        vp.save(vp.load(nifti), work / name)
        got = nib.load(work / name)
        check(np.array_equal(np.asanyarray(got.dataobj.get_unscaled()),
                             np.asanyarray(ref.dataobj.get_unscaled()))
              and got.dataobj.slope == ref.dataobj.slope and got.dataobj.inter == ref.dataobj.inter
              and np.array_equal(got.affine, ref.affine),
              f"vp.save(.., {name}): nibabel reads the stored values, scaling and affine back")


def gz_index(vp, work: Path) -> tuple[Path, Path]:
    """A .nii.gz of one gzip member (as nibabel writes it) read through its seek index: before
    the index only from its start, with it from a point at each volume. Returns (the file, its
    index)."""
    import nibabel as nib
    data = np.random.default_rng(23).integers(0, 1000, size=(32, 32, 24, 4), dtype=np.int16)
    path = work / "one_member.nii.gz"
    nib.save(nib.Nifti1Image(data, np.diag([2.0, 2.0, 2.5, 1.0])), path)
    check(vp.load(path).dataobj.random_access is False,
          "a nibabel .nii.gz without an index is read from its start")
    index = work / "one_member.gzidx"
    info = vp.gz.build_index(path, output=index)
    check(info["points"] >= 4 and info["uncompressed_size"] == 352 + data.nbytes
          and index.stat().st_size == info["index_bytes"],
          f"vp.gz.build_index: a point at each of 4 volumes, {info['uncompressed_size']} bytes "
          f"inflated ({info})")
    img = vp.load(path, index=index)
    check(img.dataobj.random_access is True
          and np.array_equal(img.dataobj[..., 2], np.asanyarray(nib.load(path).dataobj)[..., 2]),
          "volume 2 read through the index equals nibabel's")
    return path, index


def resample(vp) -> None:
    """vp.affine_transform: scipy.ndimage's values where scipy is installed, and always the
    known values of a linear interpolation of a ramp (exact at any offset)."""
    ramp = np.broadcast_to(np.arange(12, dtype=np.float64)[:, None, None] * 10, (12, 5, 4))
    got = vp.affine_transform(ramp, np.eye(3), offset=(0.5, 0.0, 0.0), order=1)
    check(np.array_equal(got[:11], ramp[:11] + 5),
          "vp.affine_transform, order 1, half a voxel: the ramp's midpoints")
    if importlib.util.find_spec("scipy") is None:
        print("skipped: vp.affine_transform against scipy.ndimage (scipy is not installed)")
        return
    from scipy import ndimage
    rng = np.random.default_rng(5)
    data = rng.standard_normal((14, 13, 12))
    matrix = np.array([[0.9, 0.1, 0.0], [-0.1, 1.05, 0.05], [0.0, 0.02, 0.95]])
    offset = (0.7, -0.4, 1.3)
    for order in (1, 3):
        a = vp.affine_transform(data, matrix, offset=offset, order=order)
        b = ndimage.affine_transform(data, matrix, offset=offset, order=order)
        check(np.allclose(a, b, rtol=0, atol=1e-9),
              f"vp.affine_transform, order {order}: scipy.ndimage's values "
              f"(max diff {np.abs(a - b).max():.2g})")


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) of a well-formed PNG: signature, every chunk's CRC, IHDR first, IEND
    last, and IDAT inflating to one filtered row per line; SystemExit otherwise."""
    check(png[:8] == b"\x89PNG\r\n\x1a\n", "PNG signature")
    pos, chunks = 8, []
    while pos < len(png):
        (length,), kind = struct.unpack(">I", png[pos:pos + 4]), png[pos + 4:pos + 8]
        body = png[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", png[pos + 8 + length:pos + 12 + length])
        if crc != zlib.crc32(kind + body):
            raise SystemExit(f"FAIL: PNG chunk {kind!r} at byte {pos}: CRC mismatch")
        chunks.append((kind, body))
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", chunks[0][1][:10])
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
    raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
    row = 1 + width * channels * depth // 8
    check(chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND" and len(raw) == height * row
          and all(raw[r * row] <= 4 for r in range(height)),
          f"PNG {width}x{height}: chunks, CRCs and pixel rows well formed")
    return width, height


def dicom_series(work: Path) -> Path:
    """A folder holding one of pydicom's MR test files (one 64x64 slice)."""
    from pydicom.data import get_testdata_file
    folder = work / "dicom"
    folder.mkdir()
    shutil.copy(get_testdata_file("MR_small.dcm"), folder / "MR_small.dcm")
    return folder


PLANTED = ("voxpipe", "numpy", "zarr", "obstore", "nibabel", "sitecustomize")
BUCKET = "voxpipe-wheel"


class Commands:
    """Runs `voxpipe ARGS` in a folder of planted modules that write markers when imported:
    activated, `voxpipe` is found on PATH (bin/ first) with VIRTUAL_ENV set; not activated, it
    is bin/voxpipe by its absolute path, with PATH without bin/ and no VIRTUAL_ENV or VOXPIPE_*
    variable."""

    def __init__(self, work: Path, activated: bool) -> None:
        exe = Path(sysconfig.get_path("scripts")) / "voxpipe"
        env = {k: v for k, v in os.environ.items()
               if k != "VIRTUAL_ENV" and not k.startswith("VOXPIPE_")}
        path = [p for p in os.environ["PATH"].split(os.pathsep)
                if p and Path(p).resolve() != exe.parent.resolve()]
        if activated:
            env["PATH"] = os.pathsep.join([str(exe.parent), *path])
            env["VIRTUAL_ENV"] = sys.prefix
            found = shutil.which("voxpipe", path=env["PATH"])
            check(found is not None and Path(found) == exe, f"activated: `voxpipe` on PATH is {found}")
            self.exe = "voxpipe"
        else:
            env["PATH"] = os.pathsep.join(path)
            check(shutil.which("voxpipe", path=env["PATH"]) is None,
                  "not activated: no `voxpipe` on PATH")
            self.exe = str(exe)
        self.env, self.work = env, work
        self.label = "activated" if activated else "not activated"
        self.folder = work / ("planted_" + self.label.replace(" ", "_"))
        self.markers = work / ("markers_" + self.label.replace(" ", "_"))
        self.folder.mkdir()
        self.markers.mkdir()
        for name in PLANTED:
            (self.folder / f"{name}.py").write_text(
                f"open({str(self.markers / name)!r}, 'w').write('x')\n")

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> str:
        r = subprocess.run([self.exe, *args], cwd=self.folder, env={**self.env, **(env or {})},
                           capture_output=True, text=True, timeout=120)
        what = "voxpipe " + " ".join(a.replace(str(self.work), "...") for a in args)
        imported = sorted(p.name for p in self.markers.iterdir())
        check(r.returncode == 0 and not imported,
              f"{self.label}: `{what}` exits 0 (rc {r.returncode}, {r.stderr.strip()[-300:]!r}), "
              f"importing nothing from the working folder ({imported or 'nothing'})")
        return r.stdout


def every_command(vp, run: Commands, nifti: Path, indexed: tuple[Path, Path], dicom: Path) -> None:
    """Each command of docs/cli.md, and `voxpipe view`, on small files, its output checked
    against nibabel, pydicom or the Python API."""
    import nibabel as nib
    out = run.work / run.label.replace(" ", "_")
    out.mkdir()
    ref = nib.load(nifti)

    version = run("--version")
    check(version.splitlines()[0] == f"voxpipe {vp.__version__}",
          f"`voxpipe --version` prints 'voxpipe {vp.__version__}' ({version.splitlines()[0]!r})")
    check("ISA-L" in version, "`voxpipe --version`: inflate with the bundled ISA-L")
    check("JPEG-LS (CharLS)" in version and "JPEG 2000 (OpenJPEG)" in version
          and "(libjpeg-turbo)" in version, "`voxpipe --version`: every DICOM codec built")

    info = json.loads(run("info", "--json", str(nifti)).splitlines()[0])
    check(list(info["shape"]) == list(ref.shape) and info["dtype"] == "int16"
          and np.allclose(info["affine"], ref.affine),
          f"`voxpipe info --json`: nibabel's shape, dtype and affine ({info['shape']})")
    text = run("info", str(nifti))
    check("int16" in text and "(7, 6, 5, 3)" in text, "`voxpipe info FILE` prints dtype and shape")

    run("convert", str(nifti), str(out / "converted.nii"))
    got = nib.load(out / "converted.nii")
    check(np.array_equal(got.get_fdata(), ref.get_fdata()) and np.array_equal(got.affine, ref.affine),
          "`voxpipe convert IN.nii.gz OUT.nii`: nibabel's values and affine")
    run("convert", str(nifti), str(out / "float.nii.gz"), "--dtype", "float32")
    got = nib.load(out / "float.nii.gz")
    check(got.get_data_dtype() == np.float32
          and np.array_equal(got.get_fdata(), ref.get_fdata(dtype=np.float32).astype(np.float64)),
          "`voxpipe convert --dtype float32`: the scaled values as float32")

    path, index = indexed
    run("index", str(path), "-o", str(out / "cli.gzidx"))
    check((out / "cli.gzidx").read_bytes() == index.read_bytes(),
          "`voxpipe index FILE -o OUT`: the index vp.gz.build_index writes, byte for byte")

    # A ramp along x resampled onto a grid half a voxel (1 mm) further: the midpoints.
    moving, reference = out / "ramp.nii", out / "grid.nii"
    ramp = np.broadcast_to(np.arange(12, dtype=np.float32)[:, None, None] * 10, (12, 5, 4))
    nib.save(nib.Nifti1Image(np.ascontiguousarray(ramp), np.diag([2.0, 2.0, 2.0, 1.0])), moving)
    shifted = np.diag([2.0, 2.0, 2.0, 1.0])
    shifted[0, 3] = 1.0
    nib.save(nib.Nifti1Image(np.zeros((12, 5, 4), np.int16), shifted), reference)
    run("resample", str(moving), "--reference", str(reference), "--order", "1",
        "-o", str(out / "resampled.nii"))
    got = nib.load(out / "resampled.nii")
    check(got.shape == (12, 5, 4) and np.array_equal(got.affine, shifted)
          and np.array_equal(got.get_fdata()[:11], ramp[:11].astype(np.float64) + 5),
          "`voxpipe resample --order 1`: the reference's grid, the ramp's midpoints")

    run("dcm2nii", str(dicom), "-o", str(out / "nifti"))
    (converted,) = (out / "nifti").glob("*.nii.gz")
    check(converted.with_name(converted.name[:-7] + ".json").is_file(),
          f"`voxpipe dcm2nii`: {converted.name} and its JSON sidecar")
    dicom_geometry_equals_pydicom(nib.load(converted), dicom / "MR_small.dcm")

    run("view", str(path), "-o", str(out / "view.png"))
    png = (out / "view.png").read_bytes()
    width, height = png_size(png)
    check(png == vp.view(path), f"`voxpipe view`: vp.view's PNG, byte for byte ({width}x{height})")

    bench = run("bench-load", str(nifti), "--repeat", "1")
    check(f"nibabel {nib.__version__}, Python" in bench and sys.executable in bench,
          "`voxpipe bench-load` compares with nibabel in this environment's Python")


def dicom_geometry_equals_pydicom(img, dcm: Path) -> None:
    """A NIfTI of one DICOM slice: pydicom's pixel values, and an affine that puts each voxel
    where the DICOM's position, orientation and spacing put its pixel (LPS to RAS)."""
    import pydicom
    ds = pydicom.dcmread(dcm)
    data = np.asanyarray(img.dataobj)
    check(data.shape == (ds.Columns, ds.Rows, 1) and np.array_equal(data[:, :, 0].T, ds.pixel_array),
          f"`voxpipe dcm2nii`: pydicom's pixel values ({data.shape}, {data.dtype})")
    ipp = np.array(ds.ImagePositionPatient, float)
    iop = np.array(ds.ImageOrientationPatient, float)
    spacing = np.array(ds.PixelSpacing, float)  # between rows, between columns
    worst = 0.0
    for i, j in ((0, 0), (5, 9), (ds.Columns - 1, ds.Rows - 1)):
        lps = ipp + i * spacing[1] * iop[:3] + j * spacing[0] * iop[3:]
        worst = max(worst, float(np.abs(img.affine @ [i, j, 0, 1] - [-lps[0], -lps[1], lps[2], 1]).max()))
    check(worst < 1e-3, f"`voxpipe dcm2nii`: the affine places voxels where pydicom's geometry "
                        f"does (within {worst:.2g} mm)")


def one_voxpipe_command() -> None:
    """bin/voxpipe is the wheel's launcher run by this environment's Python, and the wheel
    installs nothing else of that name (a repaired executable would be moved to
    voxpipe.scripts/, behind a second `voxpipe` shim)."""
    from importlib.metadata import distribution
    exe = Path(sysconfig.get_path("scripts")) / "voxpipe"
    first = exe.read_bytes().split(b"\n", 1)[0]
    check(first.startswith(b"#!") and Path(first[2:].decode().split()[0]).resolve()
          == Path(sys.executable).resolve(),
          f"bin/voxpipe is a script run by this environment's Python ({first.decode()!r})")
    dist = distribution("voxpipe")
    named = [str(f) for f in dist.files or []
             if Path(str(f)).name == "voxpipe" and Path(str(dist.locate_file(f))).is_file()]
    check(len(named) == 1 and not (Path(sysconfig.get_path("platlib")) / "voxpipe.scripts").exists(),
          f"the wheel installs one file named voxpipe ({named})")


@contextlib.contextmanager
def s3_server(nifti: Path) -> Iterator[dict[str, str]]:
    """moto's S3 server on 127.0.0.1 (tests/python/s3_server.py), run by the checkout's .venv,
    with `nifti` uploaded as s3://voxpipe-wheel/NAME; yields the environment that reaches it.
    The server ends when its standard input closes, or after 5 minutes."""
    code = ("import logging, signal, sys; signal.alarm(300); sys.path.insert(0, sys.argv[1])\n"
            "logging.getLogger('werkzeug').setLevel(logging.WARNING)  # no line per request\n"
            "from s3_server import S3Server\n"
            "s = S3Server(sys.argv[2]); s.client.upload_file(sys.argv[3], sys.argv[2], sys.argv[4])\n"
            "print(s.endpoint, flush=True); sys.stdin.read(); s.stop()\n")
    server = subprocess.Popen(
        [str(SOURCE_ROOT / ".venv" / "bin" / "python"), "-c", code,
         str(SOURCE_ROOT / "tests" / "python"), BUCKET, str(nifti), nifti.name],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        endpoint = server.stdout.readline().strip()
        check(endpoint.startswith("http://127.0.0.1:"), f"S3 server at {endpoint}")
        yield {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true",
               "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def extras_not_activated(run: Commands, nifti: Path) -> None:
    """The commands that run Python packages besides voxpipe's own (the zarr and s3 extras),
    not activated: a NIfTI-Zarr store written and described, an s3:// object described and
    converted."""
    import nibabel as nib
    ref = nib.load(nifti).get_fdata()
    work = run.work
    # The zarr extra (zarr 3) needs Python 3.11: it installs nothing before.
    if sys.version_info >= (3, 11):
        store = work / "y.nii.zarr"
        run("convert", str(nifti), str(store))
        info = json.loads(run("info", "--json", str(store)))
        check(list(info["shape"]) == list(ref.shape),
              f"`voxpipe info STORE` reads its shape {info['shape']}")
        run("convert", str(store), str(work / "from_zarr.nii"))
        check(nib.load(work / "from_zarr.nii").get_fdata().tobytes() == ref.tobytes(),
              "`voxpipe convert STORE OUT.nii`: the values written to the store")
    else:
        check(importlib.util.find_spec("zarr") is None,
              f"voxpipe[zarr] installed no zarr on Python {sys.version.split()[0]}")
        print(f"skipped: `voxpipe convert/info` of a NIfTI-Zarr store (zarr 3 needs Python 3.11; "
              f"this is {sys.version.split()[0]})")
    with s3_server(nifti) as s3:
        url = f"s3://{BUCKET}/{nifti.name}"
        info = json.loads(run("info", "--json", url, env=s3))
        check(list(info["shape"]) == list(ref.shape), f"`voxpipe info {url}` reads its shape")
        run("convert", url, str(work / "from_s3.nii"), env=s3)
        check(nib.load(work / "from_s3.nii").get_fdata().tobytes() == ref.tobytes(),
              "`voxpipe convert s3://... OUT` writes the object's values")


def extension_needs_only_glibc(vp) -> None:
    """The manylinux build links every codec library and libc++ statically (scripts/build_deps.sh):
    _core loads glibc's libraries and nothing else, and every codec is in it."""
    import voxpipe._core
    check(LDD is not None, f"ldd found in /usr/bin or /bin ({LDD})")
    binary = Path(voxpipe._core.__file__)
    out = subprocess.run([LDD, str(binary)], capture_output=True, text=True, check=True).stdout
    needed = sorted(line.split()[0] for line in out.splitlines() if line.strip() and "=>" in line)
    check(not any("not found" in line for line in out.splitlines()), f"ldd {binary.name}: every library found")
    others = [n for n in needed if not GLIBC_LIBS.match(n)]
    check(not others, f"ldd {binary.name}: glibc's libraries only ({', '.join(needed)}; not {others})")
    check(not (Path(sysconfig.get_path("platlib")) / "voxpipe.libs").exists(),
          "no voxpipe.libs folder: nothing is grafted")
    version = subprocess.run([str(Path(sys.executable).parent / "voxpipe"), "--version"],
                             capture_output=True, text=True, check=True).stdout
    check("inflate: ISA-L" in version, "the wheel inflates with ISA-L")
    check("JPEG (libjpeg-turbo), JPEG-LS (CharLS), JPEG 2000 (OpenJPEG)" in version,
          "the wheel has every DICOM codec")


def licenses_in_wheel() -> None:
    from importlib.metadata import distribution
    dist = distribution("voxpipe")
    files = {str(f) for f in dist.files or []}
    notices = [f for f in files if f.endswith("licenses/third_party/THIRD_PARTY_NOTICES.txt")]
    check(any(f.endswith("licenses/LICENSE") for f in files), "the wheel carries voxpipe's LICENSE")
    check(len(notices) == 1, "the wheel carries THIRD_PARTY_NOTICES.txt")
    folders = {f.split("licenses/third_party/", 1)[1].split("/")[0] for f in files
               if "licenses/third_party/" in f and f.count("/") >= 4}
    wanted = {"isa-l", "libdeflate", "zlib", "libjpeg-turbo", "charls", "openjpeg", "libpng", "zstd",
              "lz4", "c-blosc", "llvm-libcxx", "llvm-libcxxabi", "llvm-libunwind"}
    check(wanted <= folders, f"the wheel carries the licenses of {', '.join(sorted(wanted))} "
                             f"(missing: {sorted(wanted - folders)})")


def main() -> None:
    global SOURCE_ROOT
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.split("\n\n")[1])
    SOURCE_ROOT = Path(sys.argv[1]).resolve()
    no_build_tools()
    vp = import_voxpipe()
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        nifti = nifti_equals_nibabel(vp, work)
        nifti_write_equals_nibabel(vp, nifti, work)
        indexed = gz_index(vp, work)
        dicom_codecs(vp)
        resample(vp)
        dicom = dicom_series(work)
        one_voxpipe_command()
        every_command(vp, Commands(work, activated=True), nifti, indexed, dicom)
        not_activated = Commands(work, activated=False)
        every_command(vp, not_activated, nifti, indexed, dicom)
        extras_not_activated(not_activated, nifti)
    extension_needs_only_glibc(vp)
    licenses_in_wheel()
    print("wheel smoke test passed")


if __name__ == "__main__":
    os.environ.pop("VOXPIPE_CLI", None)
    main()
