// The convert stage: byte order, element type and scaling applied in one pass over a run of
// elements. Scaling follows nibabel's apply_read_scaling exactly: computed in double, `x * slope`
// only when slope != 1, then `+ inter` only when inter != 0, each rounded separately (the build
// uses -ffp-contract=off so no fused multiply-add is formed), then rounded once to the
// destination type. Complex values are scaled as NumPy multiplies a complex by (slope + 0j).
#pragma once

#include <cstddef>

#include "core/simd.hpp"
#include "voxpipe/dtype.hpp"

namespace voxpipe::core {

struct Conversion {
  DType source = DType::u8;
  bool swap = false;          // source bytes are in the non-native order
  DType dest = DType::u8;
  bool raw = false;           // copy the source elements unchanged (dest == source); swap if set
  bool scale = false;         // apply slope/inter
  double slope = 1.0;
  double inter = 0.0;
};

// Converts n elements. Strides are in bytes and may be negative. Never throws.
using ConvertFn = void (*)(const Conversion& c, const std::byte* src, std::ptrdiff_t src_stride,
                           std::byte* dst, std::ptrdiff_t dst_stride, std::size_t n);

// Returns the kernel for `c`, or nullptr when the conversion is not supported (see
// voxpipe::conversion_supported for the rules). The kernel is compiled for the instruction set
// simd_level() names when it is called (core/simd.hpp: the best the CPU has unless VOXPIPE_SIMD
// asks for less); every level gives the same bytes.
ConvertFn select_conversion(const Conversion& c) noexcept;

// The same for an explicit level (lowered to simd_detected()): the tests compare the levels.
ConvertFn select_conversion(const Conversion& c, SimdLevel level) noexcept;

}  // namespace voxpipe::core
