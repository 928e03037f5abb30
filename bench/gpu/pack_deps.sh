#!/usr/bin/env bash
# Collects, on a machine that reaches Debian's packages and PyPI (the build machine), what the
# bare GPU machine lacks to build and check voxpipe, into .gpudeps/ (git-ignored), to travel
# with the working tree (the device tool's `carry`; under 64 MiB):
#   debs/    the C/C++ dependencies' -dev and runtime packages, pkg-config and GoogleTest
#            (apt-get download: no root, nothing installed here); run.sh unpacks them into a
#            private prefix there (dpkg -x), never into /.
#   wheels/  nibabel and pydicom (pure Python) for the Python device tests and the benchmark's
#            references, and pydicom's JPEG-LS and JPEG 2000 codecs (pyjpegls, pylibjpeg,
#            pylibjpeg-openjpeg; CPython 3.12 wheels) with which the benchmark writes and
#            pydicom reads its compressed series (that machine's python3 has NumPy, SciPy,
#            PyTorch, pytest, nanobind, scikit-build-core, CMake and ninja, but not these).
# Then, on the GPU machine: bench/gpu/run.sh (it finds .gpudeps/ when there is no .venv).
#
# Usage: bench/gpu/pack_deps.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.gpudeps
rm -rf "$out"
mkdir -p "$out/debs" "$out/wheels"

debs=(
  zlib1g-dev zlib1g
  libdeflate-dev libdeflate0
  libisal-dev libisal2
  libjpeg62-turbo-dev libjpeg62-turbo
  libcharls-dev libcharls2
  libopenjp2-7-dev libopenjp2-7
  libpng-dev libpng16-16
  libgtest-dev
  pkgconf pkgconf-bin libpkgconf3
)
(cd "$out/debs" && apt-get download "${debs[@]}")

# The versions the tests here use (requirements-dev.txt), for that machine's Python 3.12.
py=.venv/bin/python
[ -x "$py" ] || py=python3
nibabel=$("$py" -c 'import nibabel; print(nibabel.__version__)' 2>/dev/null || echo 5.4.2)
pydicom=$("$py" -c 'import pydicom; print(pydicom.__version__)' 2>/dev/null || echo 3.0.1)
version() { "$py" -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null || echo "$2"; }
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$out/wheels" "nibabel==$nibabel" "pydicom==$pydicom" \
  "pyjpegls==$(version pyjpegls 1.5.1)" "pylibjpeg==$(version pylibjpeg 2.1.0)" \
  "pylibjpeg-openjpeg==$(version pylibjpeg-openjpeg 2.6.0)"

du -sh "$out"
