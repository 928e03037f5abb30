#!/usr/bin/env bash
# Sets up everything on a fresh Debian machine: system packages, the .venv with voxpipe and the
# reference tools, then runs the demo on an embedded sample (skip it with --no-demo).
set -euo pipefail
cd "$(dirname "$0")/.."
demo=1
[ "${1:-}" = "--no-demo" ] && demo=0

# pigz, isal (igzip) and libdeflate-tools are gzip producers for the differential tests;
# libtsan2 is gcc's ThreadSanitizer runtime (the tsan stage of scripts/test.sh); libjpeg-turbo,
# CharLS and OpenJPEG decode the JPEG, JPEG-LS and JPEG 2000 frames of DICOM files; libpng writes
# the PNGs of `voxpipe view`; libzstd and c-blosc (Blosc 1) decode NIfTI-Zarr chunks.
packages=(build-essential libtsan2 libisal-dev libdeflate-dev zlib1g-dev libgtest-dev clang libclang-rt-14-dev
          python3-venv python3-dev pigz isal libdeflate-tools
          pkg-config libjpeg62-turbo-dev libturbojpeg0-dev libcharls-dev libopenjp2-7-dev libpng-dev
          libzstd-dev libblosc-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements-dev.txt
# No build isolation: the build tools above are already in .venv and CI has no network besides
# the registries. build-dir keeps the CMake tree for fast rebuilds. The wheel is built once, into
# dist/, and that file is installed: scripts/build_wheel.sh then repairs it without compiling again.
# JOBS, when set, caps the compile jobs.
rm -f dist/voxpipe-*.whl
env ${JOBS:+CMAKE_BUILD_PARALLEL_LEVEL=$JOBS} .venv/bin/python -m pip wheel -q --no-build-isolation \
  --no-deps -C build-dir=build/python -C cmake.build-type=Release -w dist .
.venv/bin/python -m pip install -q --force-reinstall --no-deps dist/voxpipe-*.whl

if [ "$demo" -eq 1 ]; then
  .venv/bin/python -m voxpipe.demo
fi
