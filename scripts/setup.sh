#!/usr/bin/env bash
# Sets up everything on a fresh Debian machine: system packages, the .venv with voxpipe and the
# reference tools, then runs the demo on an embedded sample (skip it with --no-demo).
set -euo pipefail
cd "$(dirname "$0")/.."
demo=1
[ "${1:-}" = "--no-demo" ] && demo=0

# nasm assembles ISA-L's and libjpeg-turbo's SIMD code for the manylinux build
# (scripts/build_deps.sh), and dpkg-dev unpacks Debian's source packages there;
# pigz, isal (igzip) and libdeflate-tools are gzip producers for the differential tests;
# libtsan2 is gcc's ThreadSanitizer runtime (the tsan stage of scripts/test.sh); libjpeg-turbo,
# CharLS and OpenJPEG decode the JPEG, JPEG-LS and JPEG 2000 frames of DICOM files; libpng writes
# the PNGs of `voxpipe view`; libzstd and c-blosc (Blosc 1) decode NIfTI-Zarr chunks.
packages=(build-essential libtsan2 libisal-dev libdeflate-dev zlib1g-dev libgtest-dev clang libclang-rt-14-dev
          python3-venv python3-dev pigz isal libdeflate-tools
          pkg-config libjpeg62-turbo-dev libturbojpeg0-dev libcharls-dev libopenjp2-7-dev libpng-dev
          libzstd-dev libblosc-dev nasm dpkg-dev xz-utils)
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
# The .venv's voxpipe is the manylinux_2_28 wheel of its Python, the very file users install:
# scripts/build_wheel.sh builds the static libraries once (build/deps), compiles the core into
# build/manylinux (kept for fast rebuilds; the wheels of the other Pythons reuse it), repairs and
# checks the wheel; it goes into .venv from dist/wheelhouse. JOBS, when set, caps the compile jobs.
venv_version=$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
JOBS=${JOBS:-2} scripts/build_wheel.sh "$venv_version"
wheels=(dist/wheelhouse/voxpipe-*manylinux*.whl)
[ ${#wheels[@]} -eq 1 ] && [ -e "${wheels[0]}" ] ||
  { echo "setup.sh: expected the one wheel of Python $venv_version in dist/wheelhouse, found: ${wheels[*]}" >&2; exit 1; }
.venv/bin/python -m pip install -q --force-reinstall --no-deps "${wheels[0]}"

if [ "$demo" -eq 1 ]; then
  .venv/bin/python -m voxpipe.demo
fi
