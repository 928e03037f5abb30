#!/usr/bin/env bash
# Installs the repaired wheel (scripts/build_wheel.sh) into a fresh virtual environment, as a
# user would, and runs tests/wheel/smoke_test.py there: from a temporary folder outside the
# source tree, with a PATH that holds only the new environment's bin/ and a python symlink (no
# compiler, no CMake), and no LD_LIBRARY_PATH or PYTHONPATH, so that everything native must come
# from the wheel. From PyPI (or pip's cache) it takes the wheel's dependencies (numpy, nibabel),
# its zarr and s3 extras (the smoke runs the `voxpipe` command on a store and on an s3:// object)
# and pydicom, whose test files the smoke decodes; each at the version .venv tests with (a
# constraints file from .venv's `pip freeze`), so that pip's cache has them. The smoke starts its
# S3 server (moto) with .venv's Python.
# Usage: scripts/test_wheel.sh [WHEEL]   (default: the one dist/wheelhouse holds)
# Environment: PYTHON, the interpreter to make the environment with (default: the one .venv was
# made from, which the wheel was built for).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
start=$SECONDS

if [ $# -ge 1 ]; then
  wheel=$(realpath "$1")
else
  wheels=(dist/wheelhouse/voxpipe-*manylinux*.whl)
  [ -e "${wheels[0]}" ] || { echo "no wheel in dist/wheelhouse: run scripts/build_wheel.sh" >&2; exit 1; }
  [ ${#wheels[@]} -eq 1 ] || { echo "several wheels in dist/wheelhouse: ${wheels[*]}" >&2; exit 1; }
  wheel=$root/${wheels[0]}
fi
python=${PYTHON:-$(.venv/bin/python -c 'import sys; print(sys._base_executable)')}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/voxpipe-wheel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin" "$tmp/work"
ln -s "$python" "$tmp/bin/python3"
ln -s python3 "$tmp/bin/python"
cp tests/wheel/smoke_test.py "$tmp/work/"

"$python" -m venv "$tmp/venv"
clean_env=(env -u LD_LIBRARY_PATH -u PYTHONPATH -u PYTHONHOME -u VOXPIPE_CLI -u VIRTUAL_ENV
           PATH="$tmp/venv/bin:$tmp/bin" PIP_DISABLE_PIP_VERSION_CHECK=1)
.venv/bin/python -m pip freeze --exclude voxpipe | grep -v -e ' @ ' -e '^-e ' > "$tmp/constraints.txt"
# pydicom pinned: the smoke's reference checksums are of its test files.
"${clean_env[@]}" "$tmp/venv/bin/python" -m pip install -q -c "$tmp/constraints.txt" \
  "$wheel[zarr,s3]" pydicom==3.0.2
echo "installed $(basename "$wheel") in $((SECONDS - start)) s"
cd "$tmp/work"
"${clean_env[@]}" "$tmp/venv/bin/python" smoke_test.py "$root"
echo "scripts/test_wheel.sh: passed in $((SECONDS - start)) s"
