// Run-time choice of the vector instruction set, one for the whole core: the conversion kernels
// (core/convert.cpp) and the resampler's taps and prefilter (src/resample) take the level in use
// when they pick a kernel. Every level gives the same values bit for bit (the tests compare each
// level with the scalar one); the levels differ in speed only.
//
// The level in use is min(detected, requested). The request comes from the environment variable
// VOXPIPE_SIMD, read once, at the first call:
//   unset, empty or `auto`   the best the CPU has
//   `scalar` (or `0`, `off`) baseline x86-64 code only (SSE2)
//   `avx2`                   at most AVX2
//   `avx512`                 at most AVX-512 (F, BW, DQ and VL together)
// A request above what the CPU has is lowered to the detected level (never an illegal
// instruction); a value not in this list is ignored, as if unset. Case does not matter.
// set_simd_level replaces the request at run time (tests compare the levels that way).
#pragma once

#include <optional>
#include <string_view>

namespace voxpipe::core {

// Ordered: a higher level includes the instructions of the lower ones.
enum class SimdLevel { scalar = 0, avx2 = 1, avx512 = 2 };

// The best level this CPU (and the OS, which must save the wider registers) supports: avx512
// needs AVX-512 F, BW, DQ and VL. scalar off x86-64 or with compilers without the builtins.
SimdLevel simd_detected() noexcept;

// Whether the CPU (and the OS) has AVX2 and FMA, for the resampler's FMA kernels. Like
// simd_detected(), read with CPUID whatever compiler runtime the build links.
bool cpu_has_avx2_fma() noexcept;

// The level kernels are chosen for from now on: min(simd_detected(), simd_requested()).
// Thread-safe; a kernel already chosen stays what it is.
SimdLevel simd_level() noexcept;

// The request: VOXPIPE_SIMD's level until set_simd_level replaces it (avx512 when unset).
SimdLevel simd_requested() noexcept;
void set_simd_level(SimdLevel requested) noexcept;

// "scalar", "avx2", "avx512".
const char* simd_level_name(SimdLevel level) noexcept;

// VOXPIPE_SIMD's spelling of a level (see above); nullopt for a value that names none (an empty
// value and `auto` name the best, avx512).
std::optional<SimdLevel> parse_simd_level(std::string_view text) noexcept;

}  // namespace voxpipe::core
