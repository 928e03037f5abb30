// Calls a generic function with the C++ type of a real (integer or float) dtype: the resampler's
// kernels are templates over the element type they read or write.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "voxpipe/dtype.hpp"

namespace voxpipe::resample {

// Calls fn(T{}) for the element type T of `t`; returns false (without calling) for complex and
// RGB types.
template <typename Fn>
bool with_real_type(DType t, Fn&& fn) {
  switch (t) {
    case DType::u8: fn(std::uint8_t{}); return true;
    case DType::i8: fn(std::int8_t{}); return true;
    case DType::u16: fn(std::uint16_t{}); return true;
    case DType::i16: fn(std::int16_t{}); return true;
    case DType::u32: fn(std::uint32_t{}); return true;
    case DType::i32: fn(std::int32_t{}); return true;
    case DType::u64: fn(std::uint64_t{}); return true;
    case DType::i64: fn(std::int64_t{}); return true;
    case DType::f32: fn(float{}); return true;
    case DType::f64: fn(double{}); return true;
    default: return false;
  }
}

}  // namespace voxpipe::resample
