#include "core/simd.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

namespace voxpipe::core {

namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The CPU's features read with CPUID and XGETBV here rather than __builtin_cpu_supports: that
// builtin's data come from the compiler's runtime library (libgcc's __cpu_model), and the
// runtime of the manylinux build (zig's compiler-rt) reports no feature at all, which would run
// every kernel scalar. A feature counts only when the OS saves its registers (XCR0), as libgcc
// checks too.
struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool avx512 = false;  // F, BW, DQ and VL: what the avx512 kernels use
};

CpuFeatures read_cpu_features() noexcept {
  CpuFeatures f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = (ecx & bit_OSXSAVE) != 0, avx = (ecx & bit_AVX) != 0;
  const bool fma = (ecx & bit_FMA) != 0;
  if (!osxsave || !avx) return f;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm_saved = (xcr0_lo & 0x6) == 0x6;            // SSE and AVX state
  const bool zmm_saved = ymm_saved && (xcr0_lo & 0xe0) == 0xe0;  // opmask, ZMM0-15 high, ZMM16-31
  if (!ymm_saved || __get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  f.avx2 = (ebx & bit_AVX2) != 0;
  f.fma = f.avx2 && fma;
  f.avx512 = zmm_saved && (ebx & bit_AVX512F) && (ebx & bit_AVX512BW) && (ebx & bit_AVX512DQ) &&
             (ebx & bit_AVX512VL);
  return f;
}

const CpuFeatures& cpu_features() noexcept {
  static const CpuFeatures f = read_cpu_features();
  return f;
}
#endif

SimdLevel detect() noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (cpu_features().avx512) return SimdLevel::avx512;
  if (cpu_features().avx2) return SimdLevel::avx2;
#endif
  return SimdLevel::scalar;
}

std::atomic<int>& requested() noexcept {
  static std::atomic<int> level = [] {
    const char* env = std::getenv("VOXPIPE_SIMD");
    const auto parsed = parse_simd_level(env ? env : "");
    return static_cast<int>(parsed.value_or(SimdLevel::avx512));
  }();
  return level;
}

}  // namespace

SimdLevel simd_detected() noexcept {
  static const SimdLevel level = detect();
  return level;
}

SimdLevel simd_requested() noexcept {
  return static_cast<SimdLevel>(requested().load(std::memory_order_relaxed));
}

void set_simd_level(SimdLevel level) noexcept {
  requested().store(static_cast<int>(level), std::memory_order_relaxed);
}

bool cpu_has_avx2_fma() noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return cpu_features().fma;
#else
  return false;
#endif
}

SimdLevel simd_level() noexcept { return std::min(simd_detected(), simd_requested()); }

const char* simd_level_name(SimdLevel level) noexcept {
  switch (level) {
    case SimdLevel::scalar: return "scalar";
    case SimdLevel::avx2: return "avx2";
    case SimdLevel::avx512: return "avx512";
  }
  return "?";
}

std::optional<SimdLevel> parse_simd_level(std::string_view text) noexcept {
  // Compared in place, case-insensitively: no allocation (noexcept) for a value of any length.
  auto is = [text](std::string_view word) {
    return text.size() == word.size() &&
           std::equal(text.begin(), text.end(), word.begin(), [](char a, char b) {
             return std::tolower(static_cast<unsigned char>(a)) == b;
           });
  };
  if (text.empty() || is("auto")) return SimdLevel::avx512;
  if (is("scalar") || is("0") || is("off")) return SimdLevel::scalar;
  if (is("avx2")) return SimdLevel::avx2;
  if (is("avx512")) return SimdLevel::avx512;
  return std::nullopt;
}

}  // namespace voxpipe::core
