#include "core/simd.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>

namespace voxpipe::core {

namespace {

SimdLevel detect() noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  // libgcc's (and compiler-rt's) cpu model checks XCR0 too: a feature the OS does not save the
  // registers of is reported absent.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return SimdLevel::avx512;
  if (__builtin_cpu_supports("avx2")) return SimdLevel::avx2;
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
