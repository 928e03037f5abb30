#!/usr/bin/env bash
# The GPU check of issue 7, in one go on a machine with an NVIDIA GPU (target: under 5 minutes on
# a 16-core H200 machine, plus about 2 for the scaling benchmark): build with the CUDA kernels,
# run the device tests (C++ and Python, device results against the CPU path bit for bit), then
# the GPU benchmark, which writes its section of BENCHMARKS.md, and bench/scaling.py (1 to 16
# threads; its own section). Every step's output goes to the terminal; the first failure stops
# it, except a failure of scaling.py, which runs last and is only reported.
#
# On the project's GPU machines (bare, no network): first, here, bench/gpu/pack_deps.sh, then run
# this there with .gpudeps carried (see docs/gpu.md, "Running the GPU check").
#
# Usage: bench/gpu/run.sh [--no-bench]
# Environment: JOBS (build jobs, default: all cores), REPEAT (benchmark repeats, default 3).
set -euo pipefail
cd "$(dirname "$0")/../.."
JOBS=${JOBS:-$(nproc)}
REPEAT=${REPEAT:-3}
bench=1
[ "${1:-}" = "--no-bench" ] && bench=0
t_start=$(date +%s)
step() { printf '\n==== [%ss] %s ====\n' "$(( $(date +%s) - t_start ))" "$*"; }

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

step "environment"
# The .venv of scripts/setup.sh when it is here and works; on a bare GPU machine that reaches
# no package index, the packages bench/gpu/pack_deps.sh put in .gpudeps/ (carried there with the
# working tree): the C/C++ dependencies unpacked into a private prefix (never into /), and that
# machine's python3 (NumPy, PyTorch, pytest, nanobind, scikit-build-core) with the carried
# nibabel and pydicom wheels; otherwise scripts/setup.sh --no-demo.
if .venv/bin/python -c 'import nibabel, numpy, pytest, pydicom' 2>/dev/null; then
  PY=.venv/bin/python
elif [ -d .gpudeps/debs ]; then
  prefix=/tmp/voxpipe-deps
  site=/tmp/voxpipe-site
  rm -rf "$prefix" "$site"
  mkdir -p "$prefix" "$site"
  for f in .gpudeps/debs/*.deb; do dpkg -x "$f" "$prefix"; done
  lib="$prefix/usr/lib/x86_64-linux-gnu"
  # Absolute links (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13) to their copy here.
  for l in "$lib"/*.so; do
    t=$(readlink "$l") || continue
    case "$t" in /*) if [ -e "$prefix$t" ]; then ln -sf "$prefix$t" "$l"; fi ;; esac
  done
  export PATH="$prefix/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export PKG_CONFIG_PATH="$lib/pkgconfig:$prefix/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$prefix"  # the packages' .pc files say prefix=/usr
  python3 -m pip install -q --no-index --no-deps --target "$site" .gpudeps/wheels/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  PY=python3
else
  scripts/setup.sh --no-demo
  PY=.venv/bin/python
fi
"$PY" -c 'import sys, numpy, nibabel, pydicom, pytest; print(sys.executable, sys.version.split()[0])'

step "one build with the CUDA kernels: library, Python module, C++ device tests (VOXPIPE_CUDA=ON fails without nvcc)"
# One CMake build serves both (a pip install would compile the library a second time), and the
# package is its module next to python/voxpipe/*.py on PYTHONPATH: nothing is installed.
PY=$(command -v "$PY")
case "$PY" in /*) ;; *) PY="$PWD/$PY" ;; esac  # absolute, symlinks kept (a venv's python is one)
mkdir -p build/gpu
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B build/gpu "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DVOXPIPE_BUILD_TESTS=ON \
  -DVOXPIPE_BUILD_PYTHON=ON -DPython_EXECUTABLE="$PY" -DVOXPIPE_BUILD_FUZZERS=OFF \
  -DVOXPIPE_CUDA=ON >build/gpu/configure.log 2>&1 || { cat build/gpu/configure.log; exit 1; }
cmake --build build/gpu -j "$JOBS" --target _core voxpipe_cuda_tests voxpipe_fake_cuda voxpipe_bench_push
pkg=build/gpu/package
rm -rf "$pkg"
mkdir -p "$pkg/voxpipe"
cp python/voxpipe/*.py "$pkg/voxpipe/"
cp build/gpu/_core*.so "$pkg/voxpipe/"
export PYTHONPATH="$PWD/$pkg${PYTHONPATH:+:$PYTHONPATH}"
"$PY" - <<'PY'
import voxpipe as vp
s = vp.cuda_status()
print(vp.__file__)
print(s)
if not s.available:
    raise SystemExit(f"CUDA is not usable here: {s.reason}")
try:
    print(vp.cufile_status())
except Exception as exc:  # reported; the load falls back to the pinned ring
    print("cufile_status:", exc)
PY

step "C++ device tests (voxpipe_cuda_tests: CudaDevice.* run on the GPU)"
build/gpu/tests/voxpipe_cuda_tests

step "Python device tests (device == host bit for bit over the NIfTI matrix, torch.from_dlpack)"
VOXPIPE_FAKE_CUDA=$(find build/gpu -name 'libvoxpipe_fake_cuda*.so' | head -n 1) \
  "$PY" -m pytest -q -rs tests/python/test_device.py

if [ "$bench" -eq 1 ]; then
  step "GPU benchmark -> BENCHMARKS.md"
  "$PY" bench/gpu/bench_gpu.py --repeat "$REPEAT"
  # The same nibabel-written file through the staging pipeline with the host sink against the
  # CPU decode on the same threads: the pipeline's own cost, without the device.
  step "staging pipeline without the device (voxpipe_bench_push, all cores)"
  build/gpu/tests/voxpipe_bench_push bench/data/gpu/bold_nib.nii.gz --rounds 5
  build/gpu/tests/voxpipe_bench_push bench/data/dicom/jpegls --dtype float32 --rounds 5 || true
  # Scaling at 1, 2, 4, 8, ... all cores (its own section of BENCHMARKS.md, one per core count).
  # Last, and a failure of it is reported without failing the run: the GPU results above stand.
  # Its inputs are made here by the other benchmarks' functions (make_data.py's T1 volume,
  # bench_many's variations of it, bench_resample's series, bench_dicom's series). The plain
  # .nii.gz is gzip -6 of the series bench_gpu.py made above (bold.nii), written beside it so
  # that scaling.py's decode_nib1 case writes nibabel's level-1 copy from the same .nii: the
  # two decode rows are then the two kinds of stream, not one file twice.
  step "scaling past 2 cores (bench/scaling.py --quick) -> BENCHMARKS.md"
  plain=
  nii=bench/data/gpu/bold.nii
  if [ -f "$nii" ]; then
    if [ -f "$nii.gz" ] || { gzip -6 -c "$nii" > "$nii.gz.part" && mv "$nii.gz.part" "$nii.gz"; }; then
      plain=$nii.gz
    else
      rm -f "$nii.gz.part"
    fi
  fi
  if ! "$PY" bench/scaling.py --quick ${plain:+--plain "$plain"}; then
    echo "bench/scaling.py failed (see above); the GPU results are not affected"
  fi
fi
step "done"
