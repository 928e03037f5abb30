// The convert kernels: byte order, integer -> float exactness, nibabel's scaling order and
// rounding, NumPy's complex scaling, strides in both directions, and the unsupported set; then
// every instruction set the CPU has (core/simd.hpp) against the scalar kernels, byte for byte.
#include <bit>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>
#include <complex>
#include <limits>

#include "core/convert.hpp"
#include "core/simd.hpp"
#include "test_support.hpp"

namespace {

using voxpipe::DType;
using voxpipe::core::Conversion;
using voxpipe::core::select_conversion;
using voxpipe::core::SimdLevel;
using vptest::Bytes;

constexpr DType kAllTypes[] = {DType::u8,  DType::i8,  DType::u16,  DType::i16,   DType::u32,
                               DType::i32, DType::u64, DType::i64,  DType::f32,   DType::f64,
                               DType::c64, DType::c128, DType::rgb24, DType::rgba32};

// Runs the kernel for `c` over n contiguous elements of `src`.
Bytes convert(const Conversion& c, const Bytes& src, std::size_t n) {
  auto fn = select_conversion(c);
  if (!fn) throw std::runtime_error("conversion not supported");
  const std::size_t out_size = voxpipe::dtype_size(c.dest);
  Bytes out(n * out_size, 0xAB);
  fn(c, reinterpret_cast<const std::byte*>(src.data()),
     static_cast<std::ptrdiff_t>(voxpipe::dtype_size(c.source)),
     reinterpret_cast<std::byte*>(out.data()), static_cast<std::ptrdiff_t>(out_size), n);
  return out;
}

template <class T>
std::vector<T> values_of(const Bytes& b) {
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

// Equal as IEEE values, including the sign of zero; any NaN equals any NaN.
template <class F>
bool same_value(F a, F b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

TEST(Convert, RawSwapReversesEachComponentForEverySize) {
  for (DType t : kAllTypes) {
    const std::size_t size = voxpipe::dtype_size(t), comp = voxpipe::dtype_component_size(t);
    const std::size_t n = 7;
    const Bytes src = vptest::random_bytes(n * size, 17 + static_cast<int>(t));
    Bytes expected = src;
    for (std::size_t i = 0; i < expected.size(); i += comp)
      std::reverse(expected.begin() + static_cast<std::ptrdiff_t>(i),
                   expected.begin() + static_cast<std::ptrdiff_t>(i + comp));
    Conversion c{.source = t, .swap = true, .dest = t, .raw = true};
    EXPECT_EQ(convert(c, src, n), expected) << voxpipe::dtype_name(t);
    c.swap = false;
    EXPECT_EQ(convert(c, src, n), src) << voxpipe::dtype_name(t);
  }
}

TEST(Convert, RawRefusesScalingAndOtherDestinations) {
  EXPECT_EQ(select_conversion({.source = DType::i16, .dest = DType::i32, .raw = true}), nullptr);
  EXPECT_EQ(select_conversion(
                {.source = DType::i16, .dest = DType::i16, .raw = true, .scale = true, .slope = 2}),
            nullptr);
}

template <class T>
void check_swapped_to_f64(DType t, const std::vector<T>& values) {
  const Bytes src = vptest::to_bytes(values, !vptest::kNativeBig);
  Conversion c{.source = t, .swap = true, .dest = DType::f64};
  const auto out = values_of<double>(convert(c, src, values.size()));
  for (std::size_t i = 0; i < values.size(); ++i)
    EXPECT_TRUE(same_value(out[i], static_cast<double>(values[i])))
        << voxpipe::dtype_name(t) << " [" << i << "]: " << out[i];
}

TEST(Convert, SwappedSourcesGiveNativeValuesForEverySize) {
  check_swapped_to_f64<std::uint8_t>(DType::u8, {0, 1, 0x7f, 0x80, 0xff});
  check_swapped_to_f64<std::int8_t>(DType::i8, {0, 1, -1, 127, -128});
  check_swapped_to_f64<std::uint16_t>(DType::u16, {0x0102, 0xff00, 0x00ff, 65535});
  check_swapped_to_f64<std::int16_t>(DType::i16, {0x0102, -2, 256, -32768, 32767});
  check_swapped_to_f64<std::uint32_t>(DType::u32, {0x01020304u, 0xff000000u, 255u, 4294967295u});
  check_swapped_to_f64<std::int32_t>(DType::i32, {0x01020304, -2, 256, INT32_MIN, INT32_MAX});
  check_swapped_to_f64<std::uint64_t>(DType::u64, {0x0102030405060708ull, 255, UINT64_MAX});
  check_swapped_to_f64<std::int64_t>(DType::i64, {0x0102030405060708ll, -2, INT64_MIN});
  check_swapped_to_f64<float>(DType::f32, {1.5f, -0.0f, 3.0e38f, 1e-45f, INFINITY, NAN});
  check_swapped_to_f64<double>(DType::f64, {1.5, -0.0, 1e308, 5e-324, -INFINITY, NAN});
}

template <class T>
void check_int_to_float(DType t, const std::vector<T>& values) {
  const Bytes src = vptest::to_bytes(values, vptest::kNativeBig);
  const auto f64 = values_of<double>(convert({.source = t, .dest = DType::f64}, src, values.size()));
  const auto f32 = values_of<float>(convert({.source = t, .dest = DType::f32}, src, values.size()));
  for (std::size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(f64[i], static_cast<double>(values[i])) << voxpipe::dtype_name(t) << " " << values[i];
    // nibabel's get_fdata(float32) goes through float64 (the cast of promote_types(int, f32)).
    EXPECT_EQ(f32[i], static_cast<float>(static_cast<double>(values[i])))
        << voxpipe::dtype_name(t) << " " << values[i];
  }
}

TEST(Convert, IntegersToFloatAreExactOrCorrectlyRounded) {
  check_int_to_float<std::uint8_t>(DType::u8, {0, 1, 255});
  check_int_to_float<std::int8_t>(DType::i8, {-128, -1, 0, 127});
  check_int_to_float<std::uint16_t>(DType::u16, {0, 65535});
  check_int_to_float<std::int16_t>(DType::i16, {-32768, 32767, -1});
  check_int_to_float<std::uint32_t>(DType::u32, {4294967295u, 16777217u});
  check_int_to_float<std::int32_t>(DType::i32, {INT32_MIN, INT32_MAX, 16777217, -16777217});
  check_int_to_float<std::uint64_t>(DType::u64, {UINT64_MAX, (1ull << 53) + 1});
  check_int_to_float<std::int64_t>(DType::i64, {INT64_MIN, INT64_MAX, (1ll << 53) + 1});

  // The same facts as literal values.
  const auto i32 = values_of<double>(convert({.source = DType::i32, .dest = DType::f64},
                                             vptest::to_bytes(std::vector<std::int32_t>{INT32_MIN, 16777217}, vptest::kNativeBig), 2));
  EXPECT_EQ(i32[0], -2147483648.0);
  EXPECT_EQ(i32[1], 16777217.0);
  const auto u64 = values_of<double>(convert({.source = DType::u64, .dest = DType::f64},
                                             vptest::to_bytes(std::vector<std::uint64_t>{UINT64_MAX, (1ull << 53) + 1}, vptest::kNativeBig), 2));
  EXPECT_EQ(u64[0], 18446744073709551616.0);
  EXPECT_EQ(u64[1], 9007199254740992.0);  // ties to even
  const auto f32 = values_of<float>(convert({.source = DType::i32, .dest = DType::f32},
                                            vptest::to_bytes(std::vector<std::int32_t>{16777217, 16777219}, vptest::kNativeBig), 2));
  EXPECT_EQ(f32[0], 16777216.0f);
  EXPECT_EQ(f32[1], 16777220.0f);
}

// x * slope, rounded to double, then + inter, rounded to double: never fused.
double reference_scale(double x, double slope, double inter) {
  volatile double product = x * slope;
  volatile double sum = product + inter;
  return sum;
}

TEST(Convert, ScalingMultipliesThenAddsInDoubleWithSeparateRounding) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> dist(-1e4, 1e4);
  std::vector<double> xs(4096);
  for (auto& x : xs) x = dist(rng);
  const double slope = 0.1, inter = 0.3;
  const Bytes src = vptest::to_bytes(xs, vptest::kNativeBig);
  Conversion c{.source = DType::f64, .dest = DType::f64, .scale = true, .slope = slope, .inter = inter};
  const auto out = values_of<double>(convert(c, src, xs.size()));
  std::size_t fma_differs = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double expected = reference_scale(xs[i], slope, inter);
    ASSERT_EQ(out[i], expected) << "x=" << xs[i];
    if (std::fma(xs[i], slope, inter) != expected) ++fma_differs;
  }
  // The data must be able to tell a fused multiply-add from two roundings.
  EXPECT_GT(fma_differs, 0u);

  c.dest = DType::f32;
  const auto out32 = values_of<float>(convert(c, src, xs.size()));
  for (std::size_t i = 0; i < xs.size(); ++i)
    ASSERT_EQ(out32[i], static_cast<float>(reference_scale(xs[i], slope, inter))) << xs[i];
}

TEST(Convert, ScalingOfIntegersForEveryMode) {
  const std::vector<std::int16_t> xs{-32768, -1, 0, 1, 2, 1234, 32767};
  const Bytes src = vptest::to_bytes(xs, vptest::kNativeBig);
  // NIfTI-1 stores float32 factors; nibabel widens them to float64 before scaling.
  const double slope = static_cast<double>(0.1f), inter = static_cast<double>(-7.3f);
  struct Mode {
    double slope, inter;
  };
  for (Mode m : {Mode{slope, inter}, Mode{slope, 0.0}, Mode{1.0, inter}, Mode{1.0, 0.0}}) {
    Conversion c{.source = DType::i16, .dest = DType::f64, .scale = true, .slope = m.slope, .inter = m.inter};
    const auto out = values_of<double>(convert(c, src, xs.size()));
    for (std::size_t i = 0; i < xs.size(); ++i) {
      double e = xs[i];
      if (m.slope != 1.0) e = reference_scale(e, m.slope, 0.0);
      if (m.inter != 0.0) e = reference_scale(e, 1.0, m.inter);
      EXPECT_TRUE(same_value(out[i], e)) << xs[i] << " slope " << m.slope << " inter " << m.inter;
    }
  }
}

TEST(Convert, ZeroInterceptIsNotAddedSoNegativeZeroSurvives) {
  // nibabel adds inter only when it is non-zero: 0 * -2 stays -0.0.
  const Bytes src = vptest::to_bytes(std::vector<std::int16_t>{0, 3}, vptest::kNativeBig);
  Conversion c{.source = DType::i16, .dest = DType::f64, .scale = true, .slope = -2.0, .inter = 0.0};
  const auto out = values_of<double>(convert(c, src, 2));
  EXPECT_TRUE(std::signbit(out[0])) << out[0];
  EXPECT_EQ(out[1], -6.0);
  // And a unit slope is not applied: -0.0 * 1 would stay -0.0 anyway, but NaN payload/sign
  // and -0.0 + inter are the observable parts.
  const Bytes fsrc = vptest::to_bytes(std::vector<float>{-0.0f, NAN}, vptest::kNativeBig);
  Conversion u{.source = DType::f32, .dest = DType::f64, .scale = true, .slope = 1.0, .inter = 0.0};
  const auto same = values_of<double>(convert(u, fsrc, 2));
  EXPECT_TRUE(std::signbit(same[0]));
  EXPECT_TRUE(std::isnan(same[1]));
}

// NumPy: z * (s + 0j) = (re*s - im*0) + (re*0 + im*s)j; then + (inter + 0j).
std::complex<double> numpy_scale(std::complex<double> z, double s, double inter, bool use_slope,
                                 bool use_inter) {
  double re = z.real(), im = z.imag();
  if (use_slope) {
    volatile double a = re * s, b = im * 0.0, c = re * 0.0, d = im * s;
    re = a - b;
    im = c + d;
  }
  if (use_inter) {
    volatile double r = re + inter, m = im + 0.0;
    re = r;
    im = m;
  }
  return {re, im};
}

TEST(Convert, ComplexScalingIsNumpyComplexArithmetic) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::complex<float>> zs{
      {1.5f, -2.25f}, {inf, 0.0f}, {0.0f, inf}, {-0.0f, -0.0f}, {-0.0f, 3.0f},
      {2.0f, -0.0f},  {NAN, 1.0f}, {1e30f, -1e30f}, {-inf, -inf}};
  const Bytes src = vptest::to_bytes(zs, vptest::kNativeBig, 4);
  struct Case {
    double slope, inter;
  };
  for (Case k : {Case{2.5, 1.0}, Case{2.5, 0.0}, Case{1.0, -3.0}, Case{-0.5, 0.25}}) {
    const bool use_slope = k.slope != 1.0, use_inter = k.inter != 0.0;
    Conversion c{.source = DType::c64, .dest = DType::c128, .scale = true, .slope = k.slope, .inter = k.inter};
    const auto out = values_of<double>(convert(c, src, zs.size()));
    c.dest = DType::c64;
    const auto out64 = values_of<float>(convert(c, src, zs.size()));
    c.dest = DType::f64;
    const auto re_only = values_of<double>(convert(c, src, zs.size()));
    for (std::size_t i = 0; i < zs.size(); ++i) {
      const auto e = numpy_scale(std::complex<double>(zs[i].real(), zs[i].imag()), k.slope, k.inter,
                                 use_slope, use_inter);
      EXPECT_TRUE(same_value(out[2 * i], e.real())) << i << ": " << out[2 * i] << " vs " << e.real();
      EXPECT_TRUE(same_value(out[2 * i + 1], e.imag())) << i << ": " << out[2 * i + 1] << " vs " << e.imag();
      EXPECT_TRUE(same_value(out64[2 * i], static_cast<float>(e.real()))) << i;
      EXPECT_TRUE(same_value(out64[2 * i + 1], static_cast<float>(e.imag()))) << i;
      EXPECT_TRUE(same_value(re_only[i], e.real())) << i;
    }
  }
  // The case that tells NumPy's rule from "scale each part": (inf + 0j) * 2.5 = inf + nanj.
  Conversion c{.source = DType::c64, .dest = DType::c128, .scale = true, .slope = 2.5};
  const auto out = values_of<double>(convert(c, src, zs.size()));
  EXPECT_TRUE(std::isinf(out[2]));
  EXPECT_TRUE(std::isnan(out[3]));
}

TEST(Convert, ComplexWithoutScalingCopiesBothParts) {
  const std::vector<std::complex<double>> zs{{1.0, -1.0}, {1e300, 1e-300}};
  const Bytes src = vptest::to_bytes(zs, !vptest::kNativeBig, 8);
  const auto out = values_of<float>(convert({.source = DType::c128, .swap = true, .dest = DType::c64}, src, 2));
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -1.0f);
  EXPECT_EQ(out[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[3], 0.0f);
}

TEST(Convert, NegativeSourceAndDestinationStrides) {
  const std::vector<std::int16_t> xs{10, -20, 30, -40, 50};
  const Bytes src = vptest::to_bytes(xs, !vptest::kNativeBig);
  const std::size_t n = xs.size();
  Conversion c{.source = DType::i16, .swap = true, .dest = DType::f64, .scale = true, .slope = 0.5, .inter = 1.0};
  auto fn = select_conversion(c);
  ASSERT_NE(fn, nullptr);
  // Source walked backwards from its last element.
  std::vector<double> out(n);
  fn(c, reinterpret_cast<const std::byte*>(src.data()) + 2 * (n - 1), -2,
     reinterpret_cast<std::byte*>(out.data()), 8, n);
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], xs[n - 1 - i] * 0.5 + 1.0) << i;
  // Destination written backwards.
  std::vector<double> back(n);
  fn(c, reinterpret_cast<const std::byte*>(src.data()), 2,
     reinterpret_cast<std::byte*>(back.data()) + 8 * (n - 1), -8, n);
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(back[i], xs[n - 1 - i] * 0.5 + 1.0) << i;
  // Raw copy with both strides negative and a swap: values come out native, order kept.
  Conversion raw{.source = DType::i16, .swap = true, .dest = DType::i16, .raw = true};
  auto rfn = select_conversion(raw);
  std::vector<std::int16_t> r(n);
  rfn(raw, reinterpret_cast<const std::byte*>(src.data()) + 2 * (n - 1), -2,
      reinterpret_cast<std::byte*>(r.data()) + 2 * (n - 1), -2, n);
  EXPECT_EQ(r, xs);
  // Complex, source backwards.
  const std::vector<std::complex<float>> zs{{1, 2}, {3, 4}, {5, 6}};
  const Bytes zsrc = vptest::to_bytes(zs, vptest::kNativeBig, 4);
  Conversion cz{.source = DType::c64, .dest = DType::c128};
  std::vector<std::complex<double>> zout(3);
  select_conversion(cz)(cz, reinterpret_cast<const std::byte*>(zsrc.data()) + 16, -8,
                        reinterpret_cast<std::byte*>(zout.data()), 16, 3);
  EXPECT_EQ(zout[0], std::complex<double>(5, 6));
  EXPECT_EQ(zout[2], std::complex<double>(1, 2));
}

TEST(Convert, PositiveGappedStrides) {
  // Every third uint16 of the source into every second double of the destination.
  std::vector<std::uint16_t> xs(12);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<std::uint16_t>(1000 + i);
  const Bytes src = vptest::to_bytes(xs, vptest::kNativeBig);
  Conversion c{.source = DType::u16, .dest = DType::f64};
  std::vector<double> out(8, -1.0);
  select_conversion(c)(c, reinterpret_cast<const std::byte*>(src.data()), 6,
                       reinterpret_cast<std::byte*>(out.data()), 16, 4);
  EXPECT_EQ(out, (std::vector<double>{1000, -1, 1003, -1, 1006, -1, 1009, -1}));
}

TEST(Convert, FloatNarrowingRoundsOnce) {
  const std::vector<double> xs{0.1, 1e39, -1e-50, 16777217.0, NAN};
  const Bytes src = vptest::to_bytes(xs, vptest::kNativeBig);
  const auto out = values_of<float>(convert({.source = DType::f64, .dest = DType::f32}, src, xs.size()));
  for (std::size_t i = 0; i < xs.size(); ++i) EXPECT_TRUE(same_value(out[i], static_cast<float>(xs[i]))) << xs[i];
}

TEST(Convert, ZeroElementsWritesNothing) {
  Conversion c{.source = DType::i16, .dest = DType::f64, .scale = true, .slope = 2};
  double sentinel = 42.0;
  std::int16_t x = 7;
  select_conversion(c)(c, reinterpret_cast<const std::byte*>(&x), 2,
                       reinterpret_cast<std::byte*>(&sentinel), 8, 0);
  EXPECT_EQ(sentinel, 42.0);
}

TEST(Convert, UnsupportedConversionsHaveNoKernel) {
  // Integer destinations exist only as raw copies; RGB only raw; complex never to integers.
  EXPECT_EQ(select_conversion({.source = DType::i16, .dest = DType::i32}), nullptr);
  EXPECT_EQ(select_conversion({.source = DType::f32, .dest = DType::u8}), nullptr);
  EXPECT_EQ(select_conversion({.source = DType::rgb24, .dest = DType::f32}), nullptr);
  EXPECT_EQ(select_conversion({.source = DType::rgba32, .dest = DType::f64}), nullptr);
  EXPECT_EQ(select_conversion({.source = DType::c64, .dest = DType::i16}), nullptr);
  EXPECT_EQ(select_conversion({.source = DType::f64, .dest = DType::c128}), nullptr);
  // Every numeric real source converts to both float types.
  for (DType t : kAllTypes) {
    if (voxpipe::dtype_is_rgb(t)) continue;
    EXPECT_NE(select_conversion({.source = t, .dest = DType::f32}), nullptr) << voxpipe::dtype_name(t);
    EXPECT_NE(select_conversion({.source = t, .dest = DType::f64}), nullptr) << voxpipe::dtype_name(t);
  }
}

// ---- Instruction sets -------------------------------------------------------------------------

// Restores the requested level however the test ends.
struct SimdRequest {
  SimdLevel saved = voxpipe::core::simd_requested();
  ~SimdRequest() { voxpipe::core::set_simd_level(saved); }
};

// The levels above scalar this CPU has (empty on a CPU without AVX2).
std::vector<SimdLevel> vector_levels() {
  std::vector<SimdLevel> v;
  for (SimdLevel l : {SimdLevel::avx2, SimdLevel::avx512})
    if (l <= voxpipe::core::simd_detected()) v.push_back(l);
  return v;
}

// Values that tell roundings, signs and NaNs apart, as the bits of one component of `size`
// bytes (integer components for integer dtypes, IEEE ones for float and complex dtypes).
std::vector<std::uint64_t> special_components(DType t) {
  auto f32 = [](float f) { return static_cast<std::uint64_t>(std::bit_cast<std::uint32_t>(f)); };
  auto f64 = [](double d) { return std::bit_cast<std::uint64_t>(d); };
  const bool is_float = t == DType::f32 || t == DType::f64 || t == DType::c64 || t == DType::c128;
  const std::size_t comp = voxpipe::dtype_component_size(t);
  if (is_float && comp == 4) {
    const float m = std::numeric_limits<float>::max(), tiny = std::numeric_limits<float>::denorm_min();
    return {f32(NAN), f32(-NAN), 0x7f800001u /* signalling */, 0x7fa12345u, 0xffc0beefu,
            f32(INFINITY), f32(-INFINITY), f32(0.0f), f32(-0.0f), f32(tiny), f32(-tiny), f32(m),
            f32(-m), f32(16777217.0f), f32(0.1f), f32(-2.5f), f32(1e-38f)};
  }
  if (is_float) {
    const double m = std::numeric_limits<double>::max(), tiny = std::numeric_limits<double>::denorm_min();
    return {f64(NAN), f64(-NAN), 0x7ff0000000000001ull /* signalling */, 0x7ff8123456789abcull,
            0xfff4000000000001ull, f64(INFINITY), f64(-INFINITY), f64(0.0), f64(-0.0), f64(tiny),
            f64(-tiny), f64(m), f64(-m), f64(1e39), f64(-1e39),
            // Around float32's largest value and its halfway point to 2^128: overflow or not.
            f64(3.4028235677973366e38), f64(3.4028234663852886e38), f64(3.4028235677973362e38),
            f64(1e-50), f64(-1e-46), f64(1.401298464324817e-45), f64(0.7006492321624085e-45),
            f64(16777217.0), f64(9007199254740993.0), f64(0.1)};
  }
  // Integers: both ends, around zero, and 64-bit values that round (ties to even included).
  std::vector<std::uint64_t> v{0, 1, ~0ull, 2, 0x7f, 0x80, 0xff, 0x7fff, 0x8000, 0xffff,
                               0x7fffffff, 0x80000000, 0xffffffff};
  if (comp == 8)
    for (std::uint64_t x : {(1ull << 53) + 1, (1ull << 53) + 3, (1ull << 63) - 1, 1ull << 63,
                            (1ull << 63) + 1, (1ull << 63) + 1024, (1ull << 63) + 1025,
                            0xfffffffffffffc00ull, 0xfffffffffffffbffull, 0x8000000000000400ull,
                            0x0020000000000001ull, 0xffe0000000000001ull})
      v.push_back(x);
  return v;
}

// `count` elements of type t, `gap` elements apart (gap 1: contiguous): random bits with the
// special values spread among them, then byte-swapped per component when `swap`.
Bytes make_source(DType t, std::size_t count, std::size_t gap, bool swap, std::mt19937_64& rng) {
  const std::size_t size = voxpipe::dtype_size(t), comp = voxpipe::dtype_component_size(t);
  Bytes b(count * gap * size);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng());
  const auto specials = special_components(t);
  std::size_t next = 0;
  for (std::size_t e = 0; e < count; ++e) {
    if (rng() % 3 == 0 || voxpipe::dtype_is_rgb(t)) continue;  // a third random bits
    std::uint8_t* elem = b.data() + e * gap * size;
    for (std::size_t p = 0; p < size / comp; ++p) {
      const std::uint64_t v = specials[next++ % specials.size()];
      std::memcpy(elem + p * comp, &v, comp);  // little-endian: the low bytes
    }
  }
  if (swap)
    for (std::size_t i = 0; i < b.size(); i += comp) std::reverse(b.begin() + i, b.begin() + i + comp);
  return b;
}

// The destinations of a source type: raw copy, the float types, and complex for complex.
std::vector<Conversion> conversions_of(DType t, bool swap) {
  std::vector<Conversion> v;
  v.push_back({.source = t, .swap = swap, .dest = t, .raw = true});
  if (voxpipe::dtype_is_rgb(t)) return v;
  std::vector<DType> dests{DType::f32, DType::f64};
  if (t == DType::c64 || t == DType::c128) dests.insert(dests.end(), {DType::c64, DType::c128});
  // Scaling: none, the factors that change nothing, each mode, a negative slope (-0.0 from 0),
  // and one that overflows float32 (and float64 for the largest values).
  struct Factors {
    bool scale;
    double slope, inter;
  };
  const Factors factors[] = {{false, 1, 0},
                             {true, 1, 0},
                             {true, static_cast<double>(0.1f), 0},
                             {true, 1, static_cast<double>(-7.3f)},
                             {true, static_cast<double>(0.1f), static_cast<double>(-7.3f)},
                             {true, -2.5, 0},
                             {true, 1e300, 1e-300}};
  for (DType d : dests)
    for (const Factors& f : factors)
      v.push_back({.source = t, .swap = swap, .dest = d, .scale = f.scale, .slope = f.slope, .inter = f.inter});
  return v;
}

// Whether `got` holds the bytes of `want`. Complex scaling adds two products that may both be
// NaN (re*0 + im*s with re and im NaN), and which NaN an addition passes on depends on the order
// of its operands, which the compiler may swap (IEEE leaves the choice open, and NumPy's own
// complex product is no more specific): there, a NaN for a NaN is the same value. Every other
// byte must match, NaN payloads and signs of the real kernels included (one NaN operand each).
bool same_output(const Conversion& c, const Bytes& got, const Bytes& want) {
  if (got == want) return true;
  if (got.size() != want.size() || !(c.source == DType::c64 || c.source == DType::c128) || c.raw)
    return false;
  const std::size_t comp = voxpipe::dtype_component_size(c.dest);
  for (std::size_t i = 0; i + comp <= got.size(); i += comp) {
    if (std::memcmp(got.data() + i, want.data() + i, comp) == 0) continue;
    double g, w;
    if (comp == 4) {
      float gf, wf;
      std::memcpy(&gf, got.data() + i, 4);
      std::memcpy(&wf, want.data() + i, 4);
      g = gf;
      w = wf;
    } else {
      std::memcpy(&g, got.data() + i, 8);
      std::memcpy(&w, want.data() + i, 8);
    }
    if (!(std::isnan(g) && std::isnan(w))) return false;
  }
  return true;
}

std::string describe(const Conversion& c) {
  return std::string(voxpipe::dtype_name(c.source)) + (c.swap ? " swapped" : "") + " -> " +
         std::string(voxpipe::dtype_name(c.dest)) + (c.raw ? " raw" : "") +
         (c.scale ? " slope " + std::to_string(c.slope) + " inter " + std::to_string(c.inter) : "");
}

// Every level's kernel against the scalar one, byte for byte (NaN payloads and -0.0 included,
// and the bytes between and after the written elements), for every dtype, byte order,
// destination and scaling, contiguous and strided both ways, over lengths around every vector
// width (tails of 1 to 63 elements after the vector loops).
TEST(ConvertSimd, EveryLevelWritesTheScalarBytes) {
  const auto levels = vector_levels();
  if (levels.empty()) GTEST_SKIP() << "this CPU has no AVX2: only the scalar kernels exist";
  constexpr std::size_t kLengths[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33,
                                      63, 64, 65, 127, 128, 129, 255, 256, 257, 1000};
  constexpr std::size_t kMax = 1000;
  struct Layout {
    std::size_t src_gap, dst_gap;
    bool backwards;  // both walked from their last element (negative strides)
    const char* name;
  };
  const Layout layouts[] = {{1, 1, false, "contiguous"},
                            {3, 1, false, "strided source"},
                            {1, 2, false, "strided destination"},
                            {1, 1, true, "negative strides"}};
  std::mt19937_64 rng(22);
  std::size_t compared = 0, vector_kernels = 0;
  for (DType t : kAllTypes)
    for (bool swap : {false, true})
      for (const Layout& lay : layouts) {
        const Bytes src = make_source(t, kMax, lay.src_gap, swap, rng);
        for (const Conversion& c : conversions_of(t, swap)) {
          const auto scalar = select_conversion(c, SimdLevel::scalar);
          ASSERT_NE(scalar, nullptr) << describe(c);
          const std::size_t isz = voxpipe::dtype_size(c.source), osz = voxpipe::dtype_size(c.dest);
          const auto ss = static_cast<std::ptrdiff_t>(lay.src_gap * isz) * (lay.backwards ? -1 : 1);
          const auto ds = static_cast<std::ptrdiff_t>(lay.dst_gap * osz) * (lay.backwards ? -1 : 1);
          for (SimdLevel level : levels) {
            const auto fn = select_conversion(c, level);
            ASSERT_NE(fn, nullptr) << describe(c);
            vector_kernels += fn != scalar;
            for (std::size_t n : kLengths) {
              Bytes want(kMax * lay.dst_gap * osz + 16, 0xAB), got = want;
              const std::ptrdiff_t first_in = lay.backwards ? static_cast<std::ptrdiff_t>((n ? n - 1 : 0) * lay.src_gap * isz) : 0;
              const std::ptrdiff_t first_out = lay.backwards ? static_cast<std::ptrdiff_t>((n ? n - 1 : 0) * lay.dst_gap * osz) : 0;
              const auto* in = reinterpret_cast<const std::byte*>(src.data()) + first_in;
              scalar(c, in, ss, reinterpret_cast<std::byte*>(want.data()) + first_out, ds, n);
              fn(c, in, ss, reinterpret_cast<std::byte*>(got.data()) + first_out, ds, n);
              ASSERT_TRUE(same_output(c, got, want)) << describe(c) << ", " << lay.name << ", n " << n << ", level "
                                   << voxpipe::core::simd_level_name(level);
              ++compared;
            }
          }
        }
      }
  // 14 types x 2 byte orders x 4 layouts x (1 raw + 2 x 7 real, or 4 x 7 complex, or raw alone
  // for RGB) x levels x lengths.
  const std::size_t per_level = 2 * 4 * (10 * 15 + 2 * 29 + 2 * 1) * std::size(kLengths);
  EXPECT_EQ(compared, per_level * levels.size());
  // The vector levels really have kernels of their own.
  EXPECT_GT(vector_kernels, 0u);
}

// The kernels a level picks for the hot paths are not the scalar ones, and select_conversion
// follows the requested level (VOXPIPE_SIMD or set_simd_level), never above the CPU's.
TEST(ConvertSimd, SelectionFollowsTheRequestedLevelClampedToTheCpu) {
  SimdRequest restore;
  const Conversion c{.source = DType::i16, .swap = true, .dest = DType::f32, .scale = true, .slope = 2, .inter = 1};
  const SimdLevel detected = voxpipe::core::simd_detected();
  for (SimdLevel l : {SimdLevel::scalar, SimdLevel::avx2, SimdLevel::avx512}) {
    voxpipe::core::set_simd_level(l);
    const SimdLevel used = std::min(l, detected);
    EXPECT_EQ(voxpipe::core::simd_level(), used);
    EXPECT_EQ(select_conversion(c), select_conversion(c, used)) << voxpipe::core::simd_level_name(l);
    EXPECT_EQ(select_conversion(c, l), select_conversion(c, used)) << voxpipe::core::simd_level_name(l);
    if (used != SimdLevel::scalar) {
      EXPECT_NE(select_conversion(c), select_conversion(c, SimdLevel::scalar));
    }
  }
}

TEST(ConvertSimd, EnvironmentSpellingsOfTheLevels) {
  using voxpipe::core::parse_simd_level;
  EXPECT_EQ(parse_simd_level(""), SimdLevel::avx512);
  EXPECT_EQ(parse_simd_level("auto"), SimdLevel::avx512);
  EXPECT_EQ(parse_simd_level("scalar"), SimdLevel::scalar);
  EXPECT_EQ(parse_simd_level("0"), SimdLevel::scalar);
  EXPECT_EQ(parse_simd_level("off"), SimdLevel::scalar);
  EXPECT_EQ(parse_simd_level("OFF"), SimdLevel::scalar);
  EXPECT_EQ(parse_simd_level("avx2"), SimdLevel::avx2);
  EXPECT_EQ(parse_simd_level("AVX512"), SimdLevel::avx512);
  EXPECT_EQ(parse_simd_level("sse4"), std::nullopt);
  EXPECT_EQ(parse_simd_level("avx2 "), std::nullopt);
  EXPECT_EQ(parse_simd_level("1"), std::nullopt);
}

// What VOXPIPE_SIMD asked for in this process is what the level starts from (scripts/test.sh
// runs this binary under each spelling); run by hand without it, the request is the best.
TEST(ConvertSimd, RequestComesFromTheEnvironment) {
  const char* env = std::getenv("VOXPIPE_SIMD");
  const auto parsed = voxpipe::core::parse_simd_level(env ? env : "");
  SimdRequest restore;  // another test may have changed it: this one reads the start value
  EXPECT_EQ(restore.saved, parsed.value_or(SimdLevel::avx512)) << (env ? env : "(unset)");
}

}  // namespace
