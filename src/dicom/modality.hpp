// The modality transform (pydicom's apply_modality_lut) from stored pixel values to float32 or
// float64, shared by the pixel layer (pixels.cpp) and series reads (series_read.cpp). Internal.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "voxpipe/dtype.hpp"

namespace voxpipe::dicom {

struct Modality {
  enum class Kind { none, rescale, lut } kind = Kind::none;
  double slope = 1, intercept = 0;
  std::int64_t first_map = 0;
  std::vector<std::uint16_t> lut;
};

namespace modality_detail {

template <typename In, typename Out>
inline void apply_modality_typed(const In* in, Out* out, std::size_t n, const Modality& m) {
  switch (m.kind) {
    case Modality::Kind::none:
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<Out>(in[i]);
      break;
    case Modality::Kind::rescale:
      // float64 as pydicom (arr.astype(float64) * slope, then + intercept), two roundings:
      // the baseline x86-64 build has no FMA to contract them.
      for (std::size_t i = 0; i < n; ++i) {
        const double scaled = static_cast<double>(in[i]) * m.slope;
        out[i] = static_cast<Out>(scaled + m.intercept);
      }
      break;
    case Modality::Kind::lut: {
      const std::int64_t last = static_cast<std::int64_t>(m.lut.size()) - 1;
      for (std::size_t i = 0; i < n; ++i) {
        const double v = static_cast<double>(in[i]);
        std::int64_t idx = 0;
        if (v >= static_cast<double>(m.first_map))
          idx = static_cast<std::int64_t>(in[i]) - m.first_map;
        idx = std::clamp<std::int64_t>(idx, 0, last);
        out[i] = static_cast<Out>(m.lut[static_cast<std::size_t>(idx)]);
      }
      break;
    }
  }
}

template <typename Out>
inline void apply_modality_to(const std::uint8_t* in, DType in_type, Out* out, std::size_t n,
                       const Modality& m) {
  switch (in_type) {
    case DType::u8: apply_modality_typed(in, out, n, m); break;
    case DType::i8: apply_modality_typed(reinterpret_cast<const std::int8_t*>(in), out, n, m); break;
    case DType::u16: apply_modality_typed(reinterpret_cast<const std::uint16_t*>(in), out, n, m); break;
    case DType::i16: apply_modality_typed(reinterpret_cast<const std::int16_t*>(in), out, n, m); break;
    case DType::u32: apply_modality_typed(reinterpret_cast<const std::uint32_t*>(in), out, n, m); break;
    case DType::i32: apply_modality_typed(reinterpret_cast<const std::int32_t*>(in), out, n, m); break;
    case DType::u64: apply_modality_typed(reinterpret_cast<const std::uint64_t*>(in), out, n, m); break;
    case DType::i64: apply_modality_typed(reinterpret_cast<const std::int64_t*>(in), out, n, m); break;
    case DType::f32: apply_modality_typed(reinterpret_cast<const float*>(in), out, n, m); break;
    case DType::f64: apply_modality_typed(reinterpret_cast<const double*>(in), out, n, m); break;
    default: break;
  }
}

}  // namespace modality_detail

// n values of type in_type at `in` to `out` (out_type f64 or f32). float32 is the float64
// result rounded once, as pydicom's array .astype(float32), computed in pieces that stay in cache.
inline void apply_modality(const std::uint8_t* in, DType in_type, std::uint8_t* out,
                           DType out_type, std::size_t n, const Modality& m) {
  using modality_detail::apply_modality_to;
  if (out_type == DType::f64) {
    apply_modality_to(in, in_type, reinterpret_cast<double*>(out), n, m);
    return;
  }
  double wide[2048];
  const std::size_t in_size = dtype_size(in_type);
  float* o = reinterpret_cast<float*>(out);
  for (std::size_t at = 0; at < n; at += 2048) {
    const std::size_t k = std::min<std::size_t>(2048, n - at);
    apply_modality_to(in + at * in_size, in_type, wide, k, m);
    for (std::size_t i = 0; i < k; ++i) o[at + i] = static_cast<float>(wide[i]);
  }
}

}  // namespace voxpipe::dicom
