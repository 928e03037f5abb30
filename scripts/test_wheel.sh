#!/usr/bin/env bash
# Installs each repaired wheel (scripts/build_wheel.sh) into a fresh virtual environment of each
# Python it is for, as a user would, and runs tests/wheel/smoke_test.py there: from a temporary
# folder outside the source tree, with a PATH that holds only the new environment's bin/ and a
# python symlink (no compiler, no CMake), and no LD_LIBRARY_PATH or PYTHONPATH, so that
# everything native must come from the wheel. cpXY wheels are tested with Python X.Y, the
# cp312-abi3 wheel with 3.12 and 3.13 (the interpreters scripts/build_wheel.sh finds: pyenv's,
# else pythonX.Y on PATH).
# From PyPI (or pip's cache) it takes the wheel's dependencies (numpy, nibabel), its s3 extra and,
# from Python 3.11 on (zarr 3's floor), its zarr extra (the smoke runs the `voxpipe` command on a
# store and on an s3:// object), and pydicom, whose test files the smoke decodes. On the .venv's
# Python and newer ones, each at the version .venv tests with (a constraints file from .venv's
# `pip freeze`), so that pip's cache has them; older Pythons take the newest that install there
# (NumPy 2.0, pydicom 2.4 on 3.9). The smoke starts its S3 server (moto) with .venv's Python.
# Usage: scripts/test_wheel.sh [WHEEL...]   (default: every wheel dist/wheelhouse holds)
# Environment: PYTHON, the interpreter to test a single WHEEL with (default: by its tag, as above);
# WHEEL_TEST_PYTHONS, the versions to test (default: every one a wheel is for).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
start=$SECONDS

if [ $# -ge 1 ]; then
  wheels=()
  for w in "$@"; do wheels+=("$(realpath "$w")"); done
else
  wheels=(dist/wheelhouse/voxpipe-*manylinux*.whl)
  [ -e "${wheels[0]}" ] || { echo "no wheel in dist/wheelhouse: run scripts/build_wheel.sh" >&2; exit 1; }
  for i in "${!wheels[@]}"; do wheels[$i]=$root/${wheels[$i]}; done
fi
[ -z "${PYTHON:-}" ] || [ ${#wheels[@]} -eq 1 ] ||
  { echo "PYTHON names one interpreter: give one wheel, not ${#wheels[@]}" >&2; exit 1; }
# The Pythons voxpipe supports (pyproject.toml's classifiers): those an abi3 wheel is tested with.
SUPPORTED="3.9 3.10 3.11 3.12 3.13"
# venv_version, find_python X.Y [HINT] (as scripts/build_wheel.sh finds it)
source scripts/find_python.sh

tmp=$(mktemp -d "${TMPDIR:-/tmp}/voxpipe-wheel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
.venv/bin/python -m pip freeze --exclude voxpipe | grep -v -e ' @ ' -e '^-e ' > "$tmp/constraints.txt"

test_one() {  # WHEEL PYTHON
  local wheel=$1 python=$2 t=$SECONDS dir version extras pins=()
  version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  dir=$tmp/py$version
  rm -rf "$dir"
  mkdir -p "$dir/bin" "$dir/work"
  ln -s "$python" "$dir/bin/python3"
  ln -s python3 "$dir/bin/python"
  cp tests/wheel/smoke_test.py "$dir/work/"
  "$python" -m venv "$dir/venv"
  local clean_env=(env -u LD_LIBRARY_PATH -u PYTHONPATH -u PYTHONHOME -u VOXPIPE_CLI -u VIRTUAL_ENV
                   PATH="$dir/venv/bin:$dir/bin" PIP_DISABLE_PIP_VERSION_CHECK=1)
  extras=zarr,s3
  if "$python" -c 'import sys; sys.exit(sys.version_info >= (3, 11))'; then extras=s3; fi
  # pydicom pinned: the smoke's reference checksums are of its test files (3.0 needs Python 3.10;
  # 2.4's files are the same).
  if "$python" -c 'import sys; sys.exit(sys.version_info >= (3, 10))'; then
    pins=(pydicom==2.4.4)
  else
    pins=(pydicom==3.0.2)
  fi
  local versions_ok
  versions_ok=$("$python" -c "import sys; print(int(sys.version_info >= tuple(map(int, '$venv_version'.split('.')))))")
  [ "$versions_ok" = 1 ] && pins+=(-c "$tmp/constraints.txt")
  "${clean_env[@]}" "$dir/venv/bin/python" -m pip install -q "$wheel[$extras]" "${pins[@]}"
  echo "installed $(basename "$wheel") with Python $version in $((SECONDS - t)) s"
  (cd "$dir/work" && "${clean_env[@]}" "$dir/venv/bin/python" smoke_test.py "$root")
  rm -rf "$dir"
  echo "$(basename "$wheel") on Python $version: passed in $((SECONDS - t)) s"
}

for wheel in "${wheels[@]}"; do
  if [ -n "${PYTHON:-}" ]; then
    test_one "$wheel" "$PYTHON"
    continue
  fi
  # voxpipe-0.1.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl: cp311 and its ABI tag
  tag=$(basename "$wheel" | cut -d- -f3,4)
  case $tag in
    cp3*-abi3) first=${tag%%-*}; first=3.${first#cp3} pys=()
               for v in $SUPPORTED; do
                 [ "$(printf '%s\n' "$first" "$v" | sort -V | head -1)" = "$first" ] && pys+=("$v")
               done ;;
    cp3*-cp3*) v=${tag%%-*}; pys=("3.${v#cp3}") ;;
    *) echo "$(basename "$wheel"): unexpected tag $tag" >&2; exit 1 ;;
  esac
  for v in "${pys[@]}"; do
    if [ -n "${WHEEL_TEST_PYTHONS:-}" ] && [[ " $WHEEL_TEST_PYTHONS " != *" $v "* ]]; then continue; fi
    python=$(find_python "$v" "to test the wheel with")
    test_one "$wheel" "$python"
  done
done
# Each extra installed from the same wheelhouse on the oldest and newest Python
# (scripts/test_extras.sh, about a minute with pip's cache); VOXPIPE_SKIP_EXTRAS=1 leaves it out.
if [ "${VOXPIPE_SKIP_EXTRAS:-0}" = 1 ]; then
  echo "scripts/test_extras.sh: skipped (VOXPIPE_SKIP_EXTRAS=1)"
else
  scripts/test_extras.sh "$(dirname "${wheels[0]}")"
fi
echo "scripts/test_wheel.sh: passed in $((SECONDS - start)) s"
