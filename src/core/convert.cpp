#include "core/convert.hpp"

#include <algorithm>
#include <bit>
#include <complex>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/simd.hpp"

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

// The helpers and kernel bodies are always inlined: each body is compiled once per instruction
// set, into the wrappers of that set's Kernels family below, and a helper left out of line would
// be the baseline ISA's copy.
#define VOXPIPE_CONVERT_INLINE __attribute__((always_inline)) inline

template <class U>
VOXPIPE_CONVERT_INLINE U bswap(U v) {
  if constexpr (sizeof(U) == 1) return v;
  if constexpr (sizeof(U) == 2) return __builtin_bswap16(v);
  if constexpr (sizeof(U) == 4) return __builtin_bswap32(v);
  if constexpr (sizeof(U) == 8) return __builtin_bswap64(v);
}

// Loads one scalar component, swapping its bytes when Swap.
template <class T, bool Swap>
VOXPIPE_CONVERT_INLINE T load(const std::byte* p) {
  using U = typename UintOf<T>::type;
  U u;
  std::memcpy(&u, p, sizeof(U));
  if constexpr (Swap) u = bswap(u);
  return std::bit_cast<T>(u);
}

template <class T>
VOXPIPE_CONVERT_INLINE void store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

enum class Scale { none, slope, inter, both };

template <Scale M>
VOXPIPE_CONVERT_INLINE double scale_real(double x, double slope, double inter) {
  if constexpr (M == Scale::slope || M == Scale::both) x = x * slope;
  if constexpr (M == Scale::inter || M == Scale::both) x = x + inter;
  return x;
}

// Why every instruction set gives the scalar path's values bit for bit: each step is one IEEE
// operation whose vector form rounds as its scalar form does (integer -> double is exact up to
// 32 bits and correctly rounded for 64-bit integers, vcvtqq2pd/vcvtuqq2pd as cvtsi2sd and the
// compiler's unsigned sequence; double -> float rounds once, to nearest even, overflowing to
// infinity and quieting NaNs as cvtsd2ss does; the product and the sum round separately, as
// -ffp-contract=off forbids fused multiply-adds (but see Avx512Kernels for the complex ones));
// nothing is reassociated (no -ffast-math), and the lanes are independent.

// Real source S -> real destination D (float or double).
template <class S, class D, bool Swap, Scale M>
VOXPIPE_CONVERT_INLINE void real_body(const Conversion& c, const std::byte* src, std::ptrdiff_t ss,
                                      std::byte* dst, std::ptrdiff_t ds, std::size_t n) {
  const double slope = c.slope, inter = c.inter;
  if (ss == static_cast<std::ptrdiff_t>(sizeof(S)) && ds == static_cast<std::ptrdiff_t>(sizeof(D))) {
    // Contiguous: written so the compiler vectorises it (byte swap, widening, scaling and
    // narrowing, a vector of elements per instruction).
    for (std::size_t i = 0; i < n; ++i) {
      double x = static_cast<double>(load<S, Swap>(src + i * sizeof(S)));
      store<D>(dst + i * sizeof(D), static_cast<D>(scale_real<M>(x, slope, inter)));
    }
    return;
  }
  for (std::size_t i = 0; i < n; ++i, src += ss, dst += ds) {
    double x = static_cast<double>(load<S, Swap>(src));
    store<D>(dst, static_cast<D>(scale_real<M>(x, slope, inter)));
  }
}

// One complex element: NumPy computes z * (slope + 0j) as (re*s - im*0, re*0 + im*s), then
// z + (inter + 0j).
template <class S, class D, bool Swap, Scale M, bool RealPart>
VOXPIPE_CONVERT_INLINE void complex_one(const std::byte* src, std::byte* dst, double slope,
                                        double inter) {
  double re = static_cast<double>(load<S, Swap>(src));
  double im = static_cast<double>(load<S, Swap>(src + sizeof(S)));
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

// Complex source with component type S -> complex (D = component type, Complex) or real part.
template <class S, class D, bool Swap, Scale M, bool RealPart>
VOXPIPE_CONVERT_INLINE void complex_body(const Conversion& c, const std::byte* src,
                                         std::ptrdiff_t ss, std::byte* dst, std::ptrdiff_t ds,
                                         std::size_t n) {
  const double slope = c.slope, inter = c.inter;
  constexpr std::size_t in = 2 * sizeof(S), out = (RealPart ? 1 : 2) * sizeof(D);
  if (ss == static_cast<std::ptrdiff_t>(in) && ds == static_cast<std::ptrdiff_t>(out)) {
    // Contiguous: constant strides the compiler can vectorise over.
    for (std::size_t i = 0; i < n; ++i)
      complex_one<S, D, Swap, M, RealPart>(src + i * in, dst + i * out, slope, inter);
    return;
  }
  for (std::size_t i = 0; i < n; ++i, src += ss, dst += ds)
    complex_one<S, D, Swap, M, RealPart>(src, dst, slope, inter);
}

// Unchanged elements of `size` bytes made of components of `comp` bytes, optionally swapped.
template <std::size_t Comp, bool Swap>
VOXPIPE_CONVERT_INLINE void raw_body(const Conversion& c, const std::byte* src, std::ptrdiff_t ss,
                                     std::byte* dst, std::ptrdiff_t ds, std::size_t n) {
  const std::size_t size = dtype_size(c.source);
  const bool contiguous = ss == static_cast<std::ptrdiff_t>(size) && ds == ss;
  if (!Swap && contiguous) {
    std::memcpy(dst, src, n * size);
    return;
  }
  using U = std::conditional_t<Comp == 1, std::uint8_t,
            std::conditional_t<Comp == 2, std::uint16_t,
            std::conditional_t<Comp == 4, std::uint32_t, std::uint64_t>>>;
  const std::size_t parts = size / Comp;
  if (Swap && contiguous) {
    // One run of n * parts components: a byte shuffle per vector.
    for (std::size_t i = 0; i < n * parts; ++i) {
      U u;
      std::memcpy(&u, src + i * Comp, Comp);
      u = bswap(u);
      std::memcpy(dst + i * Comp, &u, Comp);
    }
    return;
  }
  for (std::size_t i = 0; i < n; ++i, src += ss, dst += ds) {
    for (std::size_t p = 0; p < parts; ++p) {
      U u;
      std::memcpy(&u, src + p * Comp, Comp);
      if constexpr (Swap) u = bswap(u);
      std::memcpy(dst + p * Comp, &u, Comp);
    }
  }
}

// The kernels of one instruction set: the bodies above inlined into functions compiled for it.
// ATTR is the function attribute that names the set (nothing for the baseline); COMPLEX the
// family whose complex kernels this set uses.
#define VOXPIPE_CONVERT_KERNELS(NAME, ATTR, COMPLEX)                                             \
  struct NAME {                                                                               \
    using Complex = COMPLEX;                                                                  \
    template <class S, class D, bool Swap, Scale M>                                           \
    ATTR static void real(const Conversion& c, const std::byte* src, std::ptrdiff_t ss,       \
                          std::byte* dst, std::ptrdiff_t ds, std::size_t n) {                 \
      real_body<S, D, Swap, M>(c, src, ss, dst, ds, n);                                       \
    }                                                                                         \
    template <class S, class D, bool Swap, Scale M, bool RealPart>                            \
    ATTR static void complex(const Conversion& c, const std::byte* src, std::ptrdiff_t ss,    \
                             std::byte* dst, std::ptrdiff_t ds, std::size_t n) {              \
      complex_body<S, D, Swap, M, RealPart>(c, src, ss, dst, ds, n);                          \
    }                                                                                         \
    template <std::size_t Comp, bool Swap>                                                    \
    ATTR static void raw(const Conversion& c, const std::byte* src, std::ptrdiff_t ss,        \
                         std::byte* dst, std::ptrdiff_t ds, std::size_t n) {                  \
      raw_body<Comp, Swap>(c, src, ss, dst, ds, n);                                           \
    }                                                                                         \
  };

VOXPIPE_CONVERT_KERNELS(ScalarKernels, , ScalarKernels)
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define VOXPIPE_CONVERT_X86 1
VOXPIPE_CONVERT_KERNELS(Avx2Kernels, __attribute__((target("avx2"))), Avx2Kernels)
// The complex kernels stay AVX2's at this level: GCC's avx512f implies FMA, and GCC 12 turns
// NumPy's complex product (re*s - im*0, re*0 + im*s) into vfmaddsub despite -ffp-contract=off
// (seen in objdump). The fused im*0 is exact, so the values would agree, but which NaN an FMA
// passes on when both parts are NaN need not be the one the scalar subtraction passes on. The
// real kernels have no such pattern: their objdump at this level shows no FMA instruction.
VOXPIPE_CONVERT_KERNELS(Avx512Kernels,
                        __attribute__((target("avx2,avx512f,avx512bw,avx512dq,avx512vl"))),
                        Avx2Kernels)
#endif
#undef VOXPIPE_CONVERT_KERNELS

template <class K, class S, class D, bool Swap>
ConvertFn pick_real(Scale m) {
  switch (m) {
    case Scale::none: return K::template real<S, D, Swap, Scale::none>;
    case Scale::slope: return K::template real<S, D, Swap, Scale::slope>;
    case Scale::inter: return K::template real<S, D, Swap, Scale::inter>;
    case Scale::both: return K::template real<S, D, Swap, Scale::both>;
  }
  return nullptr;
}

template <class K, class S, class D, bool Swap, bool RealPart>
ConvertFn pick_complex(Scale m) {
  switch (m) {
    case Scale::none: return K::template complex<S, D, Swap, Scale::none, RealPart>;
    case Scale::slope: return K::template complex<S, D, Swap, Scale::slope, RealPart>;
    case Scale::inter: return K::template complex<S, D, Swap, Scale::inter, RealPart>;
    case Scale::both: return K::template complex<S, D, Swap, Scale::both, RealPart>;
  }
  return nullptr;
}

template <class K, class S, bool Swap>
ConvertFn pick_dest_real(DType dest, Scale m) {
  if (dest == DType::f32) return pick_real<K, S, float, Swap>(m);
  if (dest == DType::f64) return pick_real<K, S, double, Swap>(m);
  return nullptr;
}

template <class K, class S, bool Swap>
ConvertFn pick_dest_complex(DType dest, Scale m) {
  switch (dest) {
    case DType::c64: return pick_complex<K, S, float, Swap, false>(m);
    case DType::c128: return pick_complex<K, S, double, Swap, false>(m);
    case DType::f32: return pick_complex<K, S, float, Swap, true>(m);
    case DType::f64: return pick_complex<K, S, double, Swap, true>(m);
    default: return nullptr;
  }
}

template <class K, bool Swap>
ConvertFn pick_source(DType source, DType dest, Scale m) {
  switch (source) {
    case DType::u8: return pick_dest_real<K, std::uint8_t, Swap>(dest, m);
    case DType::i8: return pick_dest_real<K, std::int8_t, Swap>(dest, m);
    case DType::u16: return pick_dest_real<K, std::uint16_t, Swap>(dest, m);
    case DType::i16: return pick_dest_real<K, std::int16_t, Swap>(dest, m);
    case DType::u32: return pick_dest_real<K, std::uint32_t, Swap>(dest, m);
    case DType::i32: return pick_dest_real<K, std::int32_t, Swap>(dest, m);
    case DType::u64: return pick_dest_real<K, std::uint64_t, Swap>(dest, m);
    case DType::i64: return pick_dest_real<K, std::int64_t, Swap>(dest, m);
    case DType::f32: return pick_dest_real<K, float, Swap>(dest, m);
    case DType::f64: return pick_dest_real<K, double, Swap>(dest, m);
    case DType::c64: return pick_dest_complex<typename K::Complex, float, Swap>(dest, m);
    case DType::c128: return pick_dest_complex<typename K::Complex, double, Swap>(dest, m);
    case DType::rgb24:
    case DType::rgba32: return nullptr;  // structured: raw copies only
  }
  return nullptr;
}

template <class K>
ConvertFn pick(const Conversion& c) noexcept {
  if (c.raw) {
    if (c.dest != c.source || c.scale) return nullptr;
    switch (dtype_component_size(c.source)) {
      case 1: return K::template raw<1, false>;
      case 2: return c.swap ? K::template raw<2, true> : K::template raw<2, false>;
      case 4: return c.swap ? K::template raw<4, true> : K::template raw<4, false>;
      case 8: return c.swap ? K::template raw<8, true> : K::template raw<8, false>;
    }
    return nullptr;
  }
  Scale m = Scale::none;
  if (c.scale) {
    bool s = c.slope != 1.0, i = c.inter != 0.0;
    m = s && i ? Scale::both : s ? Scale::slope : i ? Scale::inter : Scale::none;
  }
  return c.swap ? pick_source<K, true>(c.source, c.dest, m)
                : pick_source<K, false>(c.source, c.dest, m);
}

}  // namespace

ConvertFn select_conversion(const Conversion& c, SimdLevel level) noexcept {
#ifdef VOXPIPE_CONVERT_X86
  // A level above the CPU's would fault on the first wide instruction.
  level = std::min(level, simd_detected());
  if (level == SimdLevel::avx512) return pick<Avx512Kernels>(c);
  if (level == SimdLevel::avx2) return pick<Avx2Kernels>(c);
#else
  (void)level;
#endif
  return pick<ScalarKernels>(c);
}

ConvertFn select_conversion(const Conversion& c) noexcept {
  return select_conversion(c, simd_level());
}

}  // namespace voxpipe::core
