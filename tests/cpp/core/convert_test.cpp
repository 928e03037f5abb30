// The convert kernels: byte order, integer -> float exactness, nibabel's scaling order and
// rounding, NumPy's complex scaling, strides in both directions, and the unsupported set.
#include <cmath>
#include <complex>
#include <limits>

#include "core/convert.hpp"
#include "test_support.hpp"

namespace {

using voxpipe::DType;
using voxpipe::core::Conversion;
using voxpipe::core::select_conversion;
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

}  // namespace
