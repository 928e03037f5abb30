#!/usr/bin/env bash
# The project's one test command (CI runs it through .ci/run):
#   unit    C++ unit tests, Release build in build/test
#   asan    the same tests under AddressSanitizer + UndefinedBehaviorSanitizer, build/asan
#   tsan    the tests of the multithreaded code (thread pool, parallel and member inflate, member
#           writer, seek index inflate_range, NIfTI-Zarr chunk decode) under ThreadSanitizer,
#           build/tsan; the slowest single-path data sweeps are left to unit and asan
#           (TSAN_SKIP below)
#   fuzz    libFuzzer targets (clang, ASan+UBSan) for FUZZ_SECONDS each on their seed corpora
#   python  the Python tests (pytest tests/python, on JOBS workers) against the package installed in .venv (the
#           manylinux_2_28 wheel of its Python that scripts/setup.sh built and installed), then
#           nibabel's own test suite with and without vp.accelerate_nibabel()
#           (scripts/nibabel_suite.py, its NIfTI modules: about a minute); scripts/setup.sh
#           --no-demo runs first when .venv or the package is missing, or the package is older
#           than the sources
#   wheel   the self-contained binary wheels: scripts/build_wheel.sh builds those of Python 3.9,
#           3.10, 3.11 and the cp312-abi3 one in setup's tree (the core compiled once; the static
#           libraries of build/deps reused) and checks their manylinux_2_28 tag and licenses;
#           scripts/test_wheel.sh installs each into a fresh virtual environment of each Python
#           (3.9 to 3.13) without build tools and runs tests/wheel/smoke_test.py from outside the
#           source tree, then the extras on the oldest and newest Python (scripts/test_extras.sh);
#           last, scripts/test_sdist.sh builds the sdist, a wheel from it alone (the documented
#           compiler and -dev packages) and runs that wheel (about two minutes)
# Usage: scripts/test.sh [STAGE...]   (no argument: all six, in this order)
# Environment: FUZZ_SECONDS (default 20), JOBS (parallel build/test jobs, default 2).
# Build directories are reused when present, so a second run only rebuilds what changed.
# Exits non-zero when any stage fails; the last line is a one-line summary.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

FUZZ_SECONDS=${FUZZ_SECONDS:-20}
JOBS=${JOBS:-2}
all_stages=(unit asan tsan fuzz python wheel)
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=("${all_stages[@]}")
for s in "${stages[@]}"; do
  case " ${all_stages[*]} " in
    *" $s "*) ;;
    *) echo "scripts/test.sh: unknown stage '$s' (expected: ${all_stages[*]})" >&2; exit 2 ;;
  esac
done
wants() { case " ${stages[*]} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

section() { printf '\n==================== %s ====================\n' "$*"; }

# Sanitizer failures must abort the test that hit them, with a stack trace.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:check_initialization_order=1:detect_stack_use_after_return=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

configure_build() {  # DIR, then extra cmake arguments, then optionally -- TARGET... (default: all)
  local dir=$1 args=() targets=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
  [ $# -gt 0 ] && shift && targets=("$@")
  mkdir -p "$dir"
  cmake -S . -B "$dir" -DVOXPIPE_BUILD_PYTHON=OFF "${args[@]}" >"$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log"; echo "configure of $dir failed"; return 1; }
  local build=(cmake --build "$dir" -j "$JOBS")
  [ ${#targets[@]} -eq 0 ] || build+=(--target "${targets[@]}")
  "${build[@]}"
}

stage_unit() {
  configure_build build/test -DCMAKE_BUILD_TYPE=Release -DVOXPIPE_BUILD_TESTS=ON \
    -DVOXPIPE_BUILD_FUZZERS=OFF -DVOXPIPE_SANITIZE=OFF
  ctest --test-dir build/test -j "$JOBS" --output-on-failure
  # The SIMD levels (src/core/simd.hpp): ctest ran at the best one the CPU has; the conversion
  # and resampling tests, whose differential tests compare against the scalar path and scipy's
  # values, run again with each lower level forced by VOXPIPE_SIMD (a level above the CPU's is
  # lowered to it, so this runs anywhere). About a second each.
  local level
  for level in scalar avx2; do
    echo "unit: conversion and resampling tests with VOXPIPE_SIMD=$level"
    VOXPIPE_SIMD=$level build/test/tests/voxpipe_core_tests --gtest_filter='Convert*' --gtest_brief=1
    VOXPIPE_SIMD=$level build/test/tests/voxpipe_resample_tests --gtest_brief=1
  done
}

# -O1 -g1 for the sanitizer builds (asan, tsan, fuzz): compiling a test file under ASan+UBSan takes
# less than half the CPU time of -O2 -g (seek_index_test.cpp: 27 s against 57-82 s of user time),
# the tests run about as fast, and reports still name file and line.
SANITIZER_FLAGS='-O1 -g1 -DNDEBUG'

# The asan tree builds what ctest runs (voxpipe_unit_tests): not the tools the python stage takes
# from build/test, the benchmark or the voxpipe program.
stage_asan() {
  configure_build build/asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$SANITIZER_FLAGS" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$SANITIZER_FLAGS" \
    -DVOXPIPE_BUILD_TESTS=ON -DVOXPIPE_BUILD_FUZZERS=OFF -DVOXPIPE_SANITIZE=ON -- voxpipe_unit_tests
  ctest --test-dir build/asan -j "$JOBS" --output-on-failure
}

# Exit and fork under TSan: the exit cases run here (ThreadPool.ProcessExitsAfterUsingThePool and
# ProcessExitsWhileTasksRun start this executable again with posix_spawn; in the second, the child
# returns from main while pool workers run tasks); the fork cases cannot (below). The Python exit and fork
# cases (tests/python/test_process_safety.py: daemon threads reading at interpreter exit, a fork
# while another thread reads the same image) run in the python stage only: under TSan they would
# need a CPython built with it, as TSan does not see an uninstrumented interpreter's locking and
# reports every object handed from one thread to another, and fork in a threaded process stops
# them as it stops ForkedChildHasAWorkingPool.
#
# Left out of the tsan stage (ctest -E):
# - tests that run the same threaded code as the ones kept, only over more data or more gzip
#   producers: under TSan each takes 15 s to over a minute on 2 cores;
# - ThreadPool.ForkedChildHasAWorkingPool: TSan cannot start threads in the child of a
#   multithreaded fork ("starting new threads after multi-threaded fork is not supported"; with
#   die_after_fork=0, gcc 12's runtime stops with "dup thread with used id").
TSAN_SKIP='^ParallelInflate\.(EveryProducerAndDataKind|LargeFile|CorruptInputIsAnError|StoredBlocksOfRandomBytes)'
TSAN_SKIP+='|^Producers/ProducerTest\..*/(zlib[19]|gzip[169]|igzip[03]|libdeflate12)$'
TSAN_SKIP+='|^ThreadPool\.ForkedChildHasAWorkingPool$'

# -O1 -g1 (SANITIZER_FLAGS): for TSan a third less compile time than -O2 -g for a tenth more test
# time.
stage_tsan() {
  configure_build build/tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$SANITIZER_FLAGS" -DVOXPIPE_BUILD_TESTS=ON \
    -DVOXPIPE_BUILD_FUZZERS=OFF -DVOXPIPE_BUILD_CLI=OFF -DVOXPIPE_SANITIZE=thread -- voxpipe_tsan_tests
  ctest --test-dir build/tsan -j "$JOBS" -E "$TSAN_SKIP" --output-on-failure
}

stage_fuzz() {
  command -v clang++ >/dev/null || { echo "clang++ not found (scripts/setup.sh installs it)"; return 1; }
  configure_build build/fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$SANITIZER_FLAGS" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="$SANITIZER_FLAGS" -DVOXPIPE_BUILD_FUZZERS=ON -DVOXPIPE_SANITIZE=ON \
    -DVOXPIPE_BUILD_TESTS=OFF -DVOXPIPE_BUILD_CLI=OFF
  local targets=(fuzz_nifti_header fuzz_nifti_file fuzz_gzip fuzz_gzip_members fuzz_inflate_parallel fuzz_marker_decoder fuzz_index_build fuzz_gzidx fuzz_dicom fuzz_dicom_rle fuzz_dicom_jpeg_lossless fuzz_dicom_jpeg fuzz_dicom_jpegls fuzz_dicom_j2k fuzz_dicom_series fuzz_dicom_csa fuzz_transform fuzz_zarr_chunk fuzz_zarr_meta fuzz_range_input) pids=() t dict failed=0 inputs
  mkdir -p build/fuzz/artifacts build/fuzz/logs
  # Inputs that once failed (tests/fuzz/regressions/<target>/) run first, once each, each within
  # 5 s (some failed by taking seconds).
  for t in "${targets[@]}"; do
    inputs=(tests/fuzz/regressions/"$t"/*)
    [ -e "${inputs[0]}" ] || continue
    if "build/fuzz/tests/$t" -timeout=5 "${inputs[@]}" >"build/fuzz/logs/$t.regressions.log" 2>&1; then
      echo "$t: ${#inputs[@]} regression inputs ok"
    else
      failed=1
      echo "$t: a regression input FAILED (log build/fuzz/logs/$t.regressions.log):"
      grep -E '^Running:|ERROR|runtime error|SUMMARY' "build/fuzz/logs/$t.regressions.log" | tail -8 || true
    fi
  done
  # All targets at once: new inputs go to build/fuzz/work/<target> (kept between runs), the
  # committed seeds in tests/fuzz/corpus/<target> are only read.
  for t in "${targets[@]}"; do
    dict=tests/fuzz/nifti.dict
    case $t in fuzz_gzip | fuzz_gzip_members | fuzz_inflate_parallel | fuzz_index_build) dict=tests/fuzz/gzip.dict ;; esac
    [ "$t" = fuzz_gzidx ] && dict=
    [ "$t" = fuzz_dicom ] && dict=
    [ "$t" = fuzz_range_input ] && dict=
    [ "$t" = fuzz_zarr_chunk ] && dict=tests/fuzz/zarr_chunk.dict
    [ "$t" = fuzz_dicom_series ] && dict=tests/fuzz/dicom_series.dict
    [ "$t" = fuzz_dicom_csa ] && dict=tests/fuzz/dicom_csa.dict
    [ "$t" = fuzz_marker_decoder ] && dict=tests/fuzz/deflate.dict
    mkdir -p "build/fuzz/work/$t"
    "build/fuzz/tests/$t" -max_total_time="$FUZZ_SECONDS" -max_len=4096 -timeout=10 \
      ${dict:+-dict="$dict"} -artifact_prefix="build/fuzz/artifacts/$t-" -print_final_stats=1 \
      "build/fuzz/work/$t" "tests/fuzz/corpus/$t" >"build/fuzz/logs/$t.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!targets[@]}"; do
    t=${targets[$i]}
    if wait "${pids[$i]}"; then
      echo "$t: ok, $(grep -m1 -o 'number_of_executed_units: [0-9]*' "build/fuzz/logs/$t.log" | cut -d' ' -f2) inputs in ${FUZZ_SECONDS}s"
    else
      failed=1
      echo "$t: FAILED; log build/fuzz/logs/$t.log, reproduce with: build/fuzz/tests/$t ARTIFACT"
      grep -E 'ERROR|runtime error|SUMMARY|Test unit written|deadly|Assertion' "build/fuzz/logs/$t.log" | head -20 || true
      tail -40 "build/fuzz/logs/$t.log"
    fi
  done
  return $failed
}

stage_python() {
  local rc=0
  # The GZIDX interop tests drive voxpipe's side through a test tool the unit stage builds.
  if [ -z "${VOXPIPE_GZIDX_TOOL:-}" ] && [ -x build/test/tests/voxpipe_gzidx_tool ]; then
    export VOXPIPE_GZIDX_TOOL=$root/build/test/tests/voxpipe_gzidx_tool
  fi
  [ -n "${VOXPIPE_GZIDX_TOOL:-}" ] || echo "note: VOXPIPE_GZIDX_TOOL unset (run the unit stage first): GZIDX interop tests skip"
  if [ -z "${VOXPIPE_DICOM_DUMP:-}" ] && [ -x build/test/tests/voxpipe_dicom_dump ]; then export VOXPIPE_DICOM_DUMP=$root/build/test/tests/voxpipe_dicom_dump; fi
  # The package's layers (docs/architecture.md): import-linter's contracts in pyproject.toml,
  # checked on the package the tests import.
  .venv/bin/lint-imports --no-logo --no-cache pyproject.toml || rc=1
  local tests_rc=0 xdist=()
  # On JOBS workers (pytest-xdist, requirements-dev.txt): the tests take their files from tmp_path
  # and their servers bind free ports, so they run side by side.
  if [ "$JOBS" -gt 1 ] && .venv/bin/python -c 'import xdist' 2>/dev/null; then xdist=(-n "$JOBS"); fi
  .venv/bin/python -m pytest tests/python -q "${xdist[@]}" || tests_rc=$?
  [ $tests_rc -eq 0 ] || [ $rc -ne 0 ] || rc=$tests_rc
  if [ $rc -eq 5 ]; then
    # pytest's "no tests collected": fine only when there really are no test files.
    if compgen -G 'tests/python/test_*.py' >/dev/null || compgen -G 'tests/python/*_test.py' >/dev/null; then
      echo "pytest collected no tests, but tests/python has test files"
      return 1
    fi
    echo "no Python tests yet"
    rc=0
  fi
  # Every nibabel test that passes as nibabel ships passes under vp.accelerate_nibabel() too
  # (docs/nifti.md, "nibabel's test suite under accelerate_nibabel()").
  .venv/bin/python scripts/nibabel_suite.py || rc=1
  return $rc
}

stage_wheel() {
  JOBS=$JOBS scripts/build_wheel.sh
  scripts/test_wheel.sh
  JOBS=$JOBS scripts/test_sdist.sh
}

declare -A result duration
failed=0
run_stage() {  # NAME
  local name=$1 start=$SECONDS rc=0
  section "$name"
  set +e
  ( set -euo pipefail; "stage_$name" )
  rc=$?
  set -e
  duration[$name]=$((SECONDS - start))
  if [ $rc -eq 0 ]; then result[$name]=PASS; else result[$name]=FAIL; failed=1; fi
  echo "---- $name: ${result[$name]} in ${duration[$name]}s"
}

# "missing" (no .venv or no voxpipe in it), "stale" (sources changed since it was installed: a
# non-editable install would test old code) or "current".
python_package_state() {
  [ -x .venv/bin/python ] || { echo missing; return; }
  local so
  so=$(.venv/bin/python -c 'import voxpipe._core as c; print(c.__file__)' 2>/dev/null) ||
    { echo missing; return; }
  if [ -n "$(find src include python CMakeLists.txt pyproject.toml -type f ! -name '*.pyc' \
             -newer "$so" -print -quit 2>/dev/null)" ]; then
    echo stale
  else
    echo current
  fi
}

if wants python || wants wheel; then
  state=$(python_package_state)
  if [ "$state" != current ]; then
    section "setup (the voxpipe package in .venv is $state)"
    start=$SECONDS
    if scripts/setup.sh --no-demo; then result[setup]=PASS; else result[setup]=FAIL; failed=1; fi
    duration[setup]=$((SECONDS - start))
  fi
fi

for s in "${all_stages[@]}"; do
  wants "$s" && run_stage "$s"
done

summary=""
for s in setup "${all_stages[@]}"; do
  [ -n "${result[$s]:-}" ] && summary+="$s ${result[$s]} (${duration[$s]}s), "
done
section "summary"
if [ $failed -eq 0 ]; then
  echo "SUMMARY: ${summary%, } -- all passed (${SECONDS}s)"
else
  echo "SUMMARY: ${summary%, } -- FAILED (${SECONDS}s)"
fi
exit $failed
