#include "core/convert.hpp"

#include <bit>
#include <complex>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace voxpipe::core {

namespace {

template <class T>
struct UintOf;
template <> struct UintOf<std::uint8_t> { using type = std::uint8_t; };
template <> struct UintOf<std::int8_t> { using type = std::uint8_t; };
template <> struct UintOf<std::uint16_t> { using type = std::uint16_t; };
template <> struct UintOf<std::int16_t> { using type = std::uint16_t; };
template <> struct UintOf<std::uint32_t> { using type = std::uint32_t; };
template <> struct UintOf<std::int32_t> { using type = std::uint32_t; };
template <> struct UintOf<std::uint64_t> { using type = std::uint64_t; };
template <> struct UintOf<std::int64_t> { using type = std::uint64_t; };
template <> struct UintOf<float> { using type = std::uint32_t; };
template <> struct UintOf<double> { using type = std::uint64_t; };

template <class U>
inline U bswap(U v) {
  if constexpr (sizeof(U) == 1) return v;
  if constexpr (sizeof(U) == 2) return __builtin_bswap16(v);
  if constexpr (sizeof(U) == 4) return __builtin_bswap32(v);
  if constexpr (sizeof(U) == 8) return __builtin_bswap64(v);
}

// Loads one scalar component, swapping its bytes when Swap.
template <class T, bool Swap>
inline T load(const std::byte* p) {
  using U = typename UintOf<T>::type;
  U u;
  std::memcpy(&u, p, sizeof(U));
  if constexpr (Swap) u = bswap(u);
  return std::bit_cast<T>(u);
}

template <class T>
inline void store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

enum class Scale { none, slope, inter, both };

template <Scale M>
inline double scale_real(double x, double slope, double inter) {
  if constexpr (M == Scale::slope || M == Scale::both) x = x * slope;
  if constexpr (M == Scale::inter || M == Scale::both) x = x + inter;
  return x;
}

// Real source S -> real destination D (float or double).
template <class S, class D, bool Swap, Scale M>
void real_kernel(const Conversion& c, const std::byte* src, std::ptrdiff_t ss, std::byte* dst,
                 std::ptrdiff_t ds, std::size_t n) {
  const double slope = c.slope, inter = c.inter;
  if (ss == static_cast<std::ptrdiff_t>(sizeof(S)) && ds == static_cast<std::ptrdiff_t>(sizeof(D))) {
    // Contiguous: written so the compiler vectorises it.
    D* out = reinterpret_cast<D*>(dst);
    for (std::size_t i = 0; i < n; ++i) {
      double x = static_cast<double>(load<S, Swap>(src + i * sizeof(S)));
      out[i] = static_cast<D>(scale_real<M>(x, slope, inter));
    }
    return;
  }
  for (std::size_t i = 0; i < n; ++i, src += ss, dst += ds) {
    double x = static_cast<double>(load<S, Swap>(src));
    store<D>(dst, static_cast<D>(scale_real<M>(x, slope, inter)));
  }
}

// Complex source with component type S -> complex (D = component type, Complex) or real part.
template <class S, class D, bool Swap, Scale M, bool RealPart>
void complex_kernel(const Conversion& c, const std::byte* src, std::ptrdiff_t ss, std::byte* dst,
                    std::ptrdiff_t ds, std::size_t n) {
  const double slope = c.slope, inter = c.inter;
  for (std::size_t i = 0; i < n; ++i, src += ss, dst += ds) {
    double re = static_cast<double>(load<S, Swap>(src));
    double im = static_cast<double>(load<S, Swap>(src + sizeof(S)));
    // NumPy computes z * (slope + 0j) as (re*s - im*0, re*0 + im*s), then z + (inter + 0j).
    if constexpr (M == Scale::slope || M == Scale::both) {
      double r = re * slope - im * 0.0;
      double m = re * 0.0 + im * slope;
      re = r;
      im = m;
    }
    if constexpr (M == Scale::inter || M == Scale::both) {
      re = re + inter;
      im = im + 0.0;
    }
    store<D>(dst, static_cast<D>(re));
    if constexpr (!RealPart) store<D>(dst + sizeof(D), static_cast<D>(im));
  }
}

// Unchanged elements of `size` bytes made of components of `comp` bytes, optionally swapped.
template <std::size_t Comp, bool Swap>
void raw_kernel(const Conversion& c, const std::byte* src, std::ptrdiff_t ss, std::byte* dst,
                std::ptrdiff_t ds, std::size_t n) {
  const std::size_t size = dtype_size(c.source);
  if (!Swap && ss == static_cast<std::ptrdiff_t>(size) && ds == ss) {
    std::memcpy(dst, src, n * size);
    return;
  }
  using U = std::conditional_t<Comp == 1, std::uint8_t,
            std::conditional_t<Comp == 2, std::uint16_t,
            std::conditional_t<Comp == 4, std::uint32_t, std::uint64_t>>>;
  const std::size_t parts = size / Comp;
  for (std::size_t i = 0; i < n; ++i, src += ss, dst += ds) {
    for (std::size_t p = 0; p < parts; ++p) {
      U u;
      std::memcpy(&u, src + p * Comp, Comp);
      if constexpr (Swap) u = bswap(u);
      std::memcpy(dst + p * Comp, &u, Comp);
    }
  }
}

template <class S, class D, bool Swap>
ConvertFn pick_real(Scale m) {
  switch (m) {
    case Scale::none: return real_kernel<S, D, Swap, Scale::none>;
    case Scale::slope: return real_kernel<S, D, Swap, Scale::slope>;
    case Scale::inter: return real_kernel<S, D, Swap, Scale::inter>;
    case Scale::both: return real_kernel<S, D, Swap, Scale::both>;
  }
  return nullptr;
}

template <class S, class D, bool Swap, bool RealPart>
ConvertFn pick_complex(Scale m) {
  switch (m) {
    case Scale::none: return complex_kernel<S, D, Swap, Scale::none, RealPart>;
    case Scale::slope: return complex_kernel<S, D, Swap, Scale::slope, RealPart>;
    case Scale::inter: return complex_kernel<S, D, Swap, Scale::inter, RealPart>;
    case Scale::both: return complex_kernel<S, D, Swap, Scale::both, RealPart>;
  }
  return nullptr;
}

template <class S, bool Swap>
ConvertFn pick_dest_real(DType dest, Scale m) {
  if (dest == DType::f32) return pick_real<S, float, Swap>(m);
  if (dest == DType::f64) return pick_real<S, double, Swap>(m);
  return nullptr;
}

template <class S, bool Swap>
ConvertFn pick_dest_complex(DType dest, Scale m) {
  switch (dest) {
    case DType::c64: return pick_complex<S, float, Swap, false>(m);
    case DType::c128: return pick_complex<S, double, Swap, false>(m);
    case DType::f32: return pick_complex<S, float, Swap, true>(m);
    case DType::f64: return pick_complex<S, double, Swap, true>(m);
    default: return nullptr;
  }
}

template <bool Swap>
ConvertFn pick_source(DType source, DType dest, Scale m) {
  switch (source) {
    case DType::u8: return pick_dest_real<std::uint8_t, Swap>(dest, m);
    case DType::i8: return pick_dest_real<std::int8_t, Swap>(dest, m);
    case DType::u16: return pick_dest_real<std::uint16_t, Swap>(dest, m);
    case DType::i16: return pick_dest_real<std::int16_t, Swap>(dest, m);
    case DType::u32: return pick_dest_real<std::uint32_t, Swap>(dest, m);
    case DType::i32: return pick_dest_real<std::int32_t, Swap>(dest, m);
    case DType::u64: return pick_dest_real<std::uint64_t, Swap>(dest, m);
    case DType::i64: return pick_dest_real<std::int64_t, Swap>(dest, m);
    case DType::f32: return pick_dest_real<float, Swap>(dest, m);
    case DType::f64: return pick_dest_real<double, Swap>(dest, m);
    case DType::c64: return pick_dest_complex<float, Swap>(dest, m);
    case DType::c128: return pick_dest_complex<double, Swap>(dest, m);
    case DType::rgb24:
    case DType::rgba32: return nullptr;  // structured: raw copies only
  }
  return nullptr;
}

}  // namespace

ConvertFn select_conversion(const Conversion& c) noexcept {
  if (c.raw) {
    if (c.dest != c.source || c.scale) return nullptr;
    switch (dtype_component_size(c.source)) {
      case 1: return raw_kernel<1, false>;
      case 2: return c.swap ? raw_kernel<2, true> : raw_kernel<2, false>;
      case 4: return c.swap ? raw_kernel<4, true> : raw_kernel<4, false>;
      case 8: return c.swap ? raw_kernel<8, true> : raw_kernel<8, false>;
    }
    return nullptr;
  }
  Scale m = Scale::none;
  if (c.scale) {
    bool s = c.slope != 1.0, i = c.inter != 0.0;
    m = s && i ? Scale::both : s ? Scale::slope : i ? Scale::inter : Scale::none;
  }
  return c.swap ? pick_source<true>(c.source, c.dest, m) : pick_source<false>(c.source, c.dest, m);
}

}  // namespace voxpipe::core
