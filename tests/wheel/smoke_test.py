"""Smoke test of an installed voxpipe wheel, as a user gets it: run by scripts/test_wheel.sh in a
fresh virtual environment, from a folder outside the source tree, with no compiler or CMake on
PATH. Checks that the wheel is self-contained (its native libraries and the `voxpipe` command
come from the wheel, not from the build machine) and that the first things a user does work:
import, a NIfTI load equal to nibabel's, compressed DICOM frames decoded by each bundled codec
library, `voxpipe info` and `voxpipe --version`; and that the `voxpipe` command (one script in
bin/, which runs the commands inside this Python) works from the environment without activating
it, with nothing set: `convert` to and `info` of a NIfTI-Zarr store, `info` and `convert` of an
s3:// object (the zarr and s3 extras installed) and `bench-load` with its nibabel child, from a
folder whose voxpipe.py, numpy.py, zarr.py and obstore.py it must not import.

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
import subprocess
import sys
import sysconfig
import tempfile
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
BUNDLED = re.compile(r"^lib(isal|deflate|jpeg|charls|openjp2|png16)[.-]")


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


def cli(vp, nifti: Path) -> None:
    exe = shutil.which("voxpipe")
    check(exe is not None and inside(Path(exe), PREFIX), f"voxpipe command from the venv ({exe})")
    r = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    first = r.stdout.splitlines()[0] if r.stdout else ""
    check(r.returncode == 0 and first == f"voxpipe {vp.__version__}",
          f"`voxpipe --version` prints 'voxpipe {vp.__version__}' (got {first!r}, rc {r.returncode}, "
          f"stderr {r.stderr.strip()[:200]!r})")
    check("ISA-L" in r.stdout, "`voxpipe --version`: inflate with the bundled ISA-L")
    check("JPEG-LS (CharLS)" in r.stdout and "JPEG 2000 (OpenJPEG)" in r.stdout
          and "(libjpeg-turbo)" in r.stdout, "`voxpipe --version`: every DICOM codec built")
    r = subprocess.run([exe, "info", "--json", str(nifti)], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"`voxpipe info --json FILE` exits 0 ({r.stderr.strip()[:200]})")
    info = json.loads(r.stdout.splitlines()[0])
    check(list(info["shape"]) == [7, 6, 5, 3] and info["dtype"] == "int16",
          f"`voxpipe info` reads the shape and dtype ({info['shape']}, {info['dtype']})")
    r = subprocess.run([exe, "info", str(nifti)], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and "int16" in r.stdout, "`voxpipe info FILE` prints the file's dtype")


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


PLANTED = ("voxpipe", "numpy", "zarr", "obstore", "nibabel", "sitecustomize")
BUCKET = "voxpipe-wheel"


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


def cli_not_activated(vp, nifti: Path, work: Path) -> None:
    """The commands that need Python packages besides voxpipe's own, run as from a shell where
    the environment is not activated: bin/voxpipe by its absolute path, PATH without bin/, no
    VIRTUAL_ENV or VOXPIPE_* variable, in a folder of planted modules that write markers."""
    import nibabel as nib
    exe = str(Path(sysconfig.get_path("scripts")) / "voxpipe")
    bin_dir = str(Path(exe).parent)
    base = {k: v for k, v in os.environ.items()
            if k != "VIRTUAL_ENV" and not k.startswith("VOXPIPE_")}
    base["PATH"] = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                   if p and Path(p).resolve() != Path(bin_dir).resolve())
    folder, markers = work / "planted", work / "markers"
    folder.mkdir()
    markers.mkdir()
    for name in PLANTED:
        (folder / f"{name}.py").write_text(f"open({str(markers / name)!r}, 'w').write('x')\n")

    def run(args: list[str], env: dict[str, str]) -> str:
        r = subprocess.run([exe, *args], cwd=folder, env=env, capture_output=True, text=True,
                           timeout=120)
        what = "voxpipe " + " ".join(a.replace(str(work), "...") for a in args)
        imported = sorted(p.name for p in markers.iterdir())
        check(r.returncode == 0 and not imported,
              f"`{what}` exits 0 (rc {r.returncode}, {r.stderr.strip()[-300:]!r}), importing "
              f"nothing from the working folder ({imported or 'nothing'})")
        return r.stdout

    ref = nib.load(nifti).get_fdata()
    # The zarr extra (zarr 3) needs Python 3.11: scripts/test_wheel.sh installs it from there on.
    if importlib.util.find_spec("zarr") is not None or sys.version_info >= (3, 11):
        store = work / "y.nii.zarr"
        run(["convert", str(nifti), str(store)], base)
        info = json.loads(run(["info", "--json", str(store)], base))
        check(list(info["shape"]) == list(ref.shape),
              f"`voxpipe info STORE` reads its shape {info['shape']}")
    else:
        print(f"skipped: `voxpipe convert/info` of a NIfTI-Zarr store (zarr 3 needs Python 3.11; "
              f"this is {sys.version.split()[0]})")
    with s3_server(nifti) as s3:
        url = f"s3://{BUCKET}/{nifti.name}"
        info = json.loads(run(["info", "--json", url], dict(base, **s3)))
        check(list(info["shape"]) == list(ref.shape), f"`voxpipe info {url}` reads its shape")
        run(["convert", url, str(work / "from_s3.nii")], dict(base, **s3))
        check(nib.load(work / "from_s3.nii").get_fdata().tobytes() == ref.tobytes(),
              "`voxpipe convert s3://... OUT` writes the object's values")
    out = run(["bench-load", str(nifti), "--repeat", "1"], base)
    check(f"nibabel {nib.__version__}, Python" in out and sys.executable in out,
          "`voxpipe bench-load` compares with nibabel in this environment's Python")


def bundled_libraries_resolve_inside_the_wheel(vp) -> None:
    import voxpipe._core
    check(LDD is not None, f"ldd found in /usr/bin or /bin ({LDD})")
    libs_dir = Path(sysconfig.get_path("platlib")) / "voxpipe.libs"
    check(libs_dir.is_dir(), f"{libs_dir} holds the bundled libraries")
    # _core is the one native file: the `voxpipe` command runs the commands inside it.
    binary = Path(voxpipe._core.__file__)
    out = subprocess.run([LDD, str(binary)], capture_output=True, text=True, check=True).stdout
    lines = [l.strip() for l in out.splitlines() if "=>" in l]
    check(not any("not found" in l for l in lines), f"ldd {binary.name}: every library found")
    bundled = [l for l in lines if BUNDLED.match(l.split()[0])]
    names = sorted(l.split()[0].split("-")[0].split(".")[0] for l in bundled)
    outside = [l for l in bundled if not inside(Path(l.split("=>")[1].split()[0]), libs_dir)]
    check(not outside, f"ldd {binary.name}: {', '.join(names)} from voxpipe.libs, none from the system")
    wanted = {"libisal", "libdeflate", "libjpeg", "libcharls", "libopenjp2"}
    check(wanted <= set(names), f"_core loads its own {', '.join(sorted(wanted))}")


def licenses_in_wheel() -> None:
    from importlib.metadata import distribution
    dist = distribution("voxpipe")
    files = {str(f) for f in dist.files or []}
    notices = [f for f in files if f.endswith("licenses/third_party/THIRD_PARTY_NOTICES.txt")]
    check(any(f.endswith("licenses/LICENSE") for f in files), "the wheel carries voxpipe's LICENSE")
    check(len(notices) == 1, "the wheel carries THIRD_PARTY_NOTICES.txt")
    check(len([f for f in files if f.endswith(".copyright")]) >= 6,
          "the wheel carries the bundled libraries' copyright files")


def main() -> None:
    global SOURCE_ROOT
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.split("\n\n")[1])
    SOURCE_ROOT = Path(sys.argv[1]).resolve()
    no_build_tools()
    vp = import_voxpipe()
    with tempfile.TemporaryDirectory() as d:
        nifti = nifti_equals_nibabel(vp, Path(d))
        dicom_codecs(vp)
        one_voxpipe_command()
        cli(vp, nifti)
        cli_not_activated(vp, nifti, Path(d))
    bundled_libraries_resolve_inside_the_wheel(vp)
    licenses_in_wheel()
    print("wheel smoke test passed")


if __name__ == "__main__":
    os.environ.pop("VOXPIPE_CLI", None)
    main()
