#!/usr/bin/env bash
# Builds voxpipe's sdist (dist/voxpipe-<version>.tar.gz, `python -m build --sdist`) and checks
# that it is complete: unpacks it in a temporary folder outside the checkout, builds a wheel from
# that copy alone (pip, no build isolation: the .venv's scikit-build-core, nanobind, CMake and
# Ninja, and the documented compiler and -dev packages), installs the wheel into a fresh virtual
# environment and there loads a NIfTI file as nibabel does, decodes a JPEG-LS DICOM frame and runs
# `voxpipe --version`. It compiles the whole core from the sdist (no tree of the checkout is
# reused): about two minutes on 2 cores, run at the end of scripts/test.sh's wheel stage.
# Usage: scripts/test_sdist.sh   Environment: DIST_DIR (default dist), JOBS (2).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
start=$SECONDS
DIST_DIR=${DIST_DIR:-dist}
export CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2}
export PATH=$root/.venv/bin:$PATH

mkdir -p "$DIST_DIR"
rm -f "$DIST_DIR"/voxpipe-*.tar.gz
.venv/bin/python -m build --sdist --no-isolation -o "$DIST_DIR" . > /dev/null
sdists=("$DIST_DIR"/voxpipe-*.tar.gz)
[ ${#sdists[@]} -eq 1 ] || { echo "expected one sdist in $DIST_DIR, found: ${sdists[*]}" >&2; exit 1; }
sdist=$(realpath "${sdists[0]}")
echo "built $sdist ($(du -k "$sdist" | cut -f1) KiB, $(tar tzf "$sdist" | wc -l) files)"
# Nothing of the local build, environment or generated data in it.
if tar tzf "$sdist" | grep -E '^[^/]+/(\.venv|build|dist|bench/data)/|\.so$|__pycache__'; then
  echo "the sdist carries build outputs or local files (above)" >&2; exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/voxpipe-sdist.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tar xzf "$sdist" -C "$tmp"
src=("$tmp"/voxpipe-*/)
.venv/bin/python -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
  --config-settings=build-dir="$tmp/build" --config-settings=cmake.build-type=Release \
  -w "$tmp/wheel" "${src[0]}"
wheels=("$tmp"/wheel/voxpipe-*.whl)
echo "built $(basename "${wheels[0]}") from the sdist in $((SECONDS - start)) s"
rm -rf "${src[0]}" "$tmp/build"

python=$(.venv/bin/python -c 'import sys; print(sys._base_executable)')
"$python" -m venv "$tmp/venv"
.venv/bin/python -m pip freeze --exclude voxpipe | grep -v -e ' @ ' -e '^-e ' > "$tmp/constraints.txt"
env -u PYTHONPATH PIP_DISABLE_PIP_VERSION_CHECK=1 "$tmp/venv/bin/python" -m pip install -q \
  -c "$tmp/constraints.txt" "${wheels[0]}" pydicom==3.0.2
mkdir "$tmp/work"
cd "$tmp/work"
env -u PYTHONPATH "$tmp/venv/bin/python" - "$root" <<'EOF'
import subprocess
import sys
import sysconfig
from pathlib import Path
import numpy as np
import nibabel as nib
import voxpipe as vp

root = Path(sys.argv[1])
assert Path(vp.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()), vp.__file__
data = np.arange(4 * 5 * 6, dtype=np.int16).reshape(4, 5, 6)
img = nib.Nifti1Image(data, np.diag([2.0, 2.0, 2.0, 1.0]))
img.header.set_slope_inter(0.5, 3.0)
nib.save(img, "x.nii.gz")
got, ref = vp.load("x.nii.gz").get_fdata(), nib.load("x.nii.gz").get_fdata()
assert got.dtype == ref.dtype and np.array_equal(got, ref), "vp.load equals nib.load"
import hashlib
from pydicom.data import get_testdata_file
# pydicom's JPEG-LS test file, as pydicom 3.0.2 decodes it (tests/wheel/smoke_test.py)
arr = vp.dicom.read(get_testdata_file("MR_small_jpeg_ls_lossless.dcm")).pixel_array
assert arr.dtype == np.dtype("<i2") and arr.shape == (64, 64) and hashlib.sha256(
    arr.tobytes()).hexdigest() == "88617aaa46138fb1b6e2a951e762d962382354d69f47f8c04d4abff2f6a6a63e"
exe = Path(sysconfig.get_path("scripts")) / "voxpipe"
out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True).stdout
assert out.startswith("voxpipe "), out
print(f"the wheel built from the sdist loads NIfTI and JPEG-LS DICOM; {out.strip()}")
EOF
echo "scripts/test_sdist.sh: passed in $((SECONDS - start)) s"
