#!/usr/bin/env bash
# The GPU check of issue 7, in one go on a machine with an NVIDIA GPU (target: under 5 minutes on
# a 16-core H200 machine): build with the CUDA kernels, run the device tests (C++ and Python,
# device results against the CPU path bit for bit), then the GPU benchmark, which writes its
# section of BENCHMARKS.md. Every step's output goes to the terminal; the first failure stops it.
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

step "environment (.venv: scripts/setup.sh --no-demo when missing)"
if ! .venv/bin/python -c 'import nibabel, numpy, pytest, pydicom' 2>/dev/null; then
  scripts/setup.sh --no-demo
fi

step "build and install the package with the CUDA kernels (VOXPIPE_CUDA=ON: fails without nvcc)"
CMAKE_BUILD_PARALLEL_LEVEL=$JOBS .venv/bin/python -m pip install -q --no-build-isolation \
  -C build-dir=build/python-gpu -C cmake.build-type=Release -C cmake.define.VOXPIPE_CUDA=ON .
.venv/bin/python - <<'PY'
import voxpipe as vp
s = vp.cuda_status()
print(s)
if not s.available:
    raise SystemExit(f"CUDA is not usable here: {s.reason}")
PY

step "C++ device tests (voxpipe_cuda_tests: CudaDevice.* run on the GPU)"
mkdir -p build/gpu
cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=Release -DVOXPIPE_BUILD_TESTS=ON \
  -DVOXPIPE_BUILD_PYTHON=OFF -DVOXPIPE_BUILD_FUZZERS=OFF -DVOXPIPE_CUDA=ON >build/gpu/configure.log 2>&1 ||
  { cat build/gpu/configure.log; exit 1; }
cmake --build build/gpu -j "$JOBS" --target voxpipe_cuda_tests voxpipe_fake_cuda
build/gpu/tests/voxpipe_cuda_tests

step "Python device tests (device == host bit for bit over the NIfTI matrix, torch.from_dlpack)"
VOXPIPE_FAKE_CUDA=$(find build/gpu -name 'libvoxpipe_fake_cuda*.so' | head -n 1) \
  .venv/bin/python -m pytest -q -rs tests/python/test_device.py

if [ "$bench" -eq 1 ]; then
  step "GPU benchmark -> BENCHMARKS.md"
  .venv/bin/python bench/gpu/bench_gpu.py --repeat "$REPEAT"
  # The same nibabel-written file through the staging pipeline with the host sink against the
  # CPU decode on the same threads: the pipeline's own cost, without the device.
  step "staging pipeline without the device (voxpipe_bench_push, all cores)"
  cmake --build build/gpu -j "$JOBS" --target voxpipe_bench_push
  build/gpu/tests/voxpipe_bench_push bench/data/gpu/bold_nib.nii.gz --rounds 5
fi
step "done"
