// The vectorised kernels (every level core/simd.hpp offers on this CPU) against the scalar one,
// bit for bit: every order, mode, input type and layout, in 2-D and 3-D, with points inside,
// near every edge, outside and NaN. The scalar path
// is checked against scipy itself by tests/python/test_resample_interp.py and
// test_resample_simd.py; here the two paths must agree exactly, also under the sanitizers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/simd.hpp"
#include "resample/interpolator.hpp"
#include "resample/kernel.hpp"
#include "voxpipe/resample.hpp"

namespace {

using namespace voxpipe;

using core::SimdLevel;

// Restores the requested level (VOXPIPE_SIMD's, for the tests after this one) however the test
// ends.
struct SimdSwitch {
  SimdLevel saved = core::simd_requested();
  ~SimdSwitch() { core::set_simd_level(saved); }
};

// The levels above scalar this CPU has.
std::vector<SimdLevel> vector_levels() {
  std::vector<SimdLevel> v;
  for (SimdLevel l : {SimdLevel::avx2, SimdLevel::avx512})
    if (l <= core::simd_detected()) v.push_back(l);
  return v;
}

bool cpu_has_fma() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("fma") != 0;
#else
  return false;
#endif
}

struct Case {
  std::vector<std::int64_t> shape;
  DType dtype;
  bool fortran;
};

std::vector<std::int64_t> strides_of(const std::vector<std::int64_t>& shape, bool fortran) {
  const std::size_t nd = shape.size();
  std::vector<std::int64_t> s(nd, 1);
  if (fortran)
    for (std::size_t d = 1; d < nd; ++d) s[d] = s[d - 1] * shape[d - 1];
  else
    for (std::size_t d = nd - 1; d-- > 0;) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

// Random values of the case's type (bytes of an array of that type).
std::vector<std::byte> make_data(const Case& c, std::int64_t n, std::mt19937_64& rng) {
  std::vector<std::byte> bytes(static_cast<std::size_t>(n) * dtype_size(c.dtype));
  std::normal_distribution<double> normal(20.0, 100.0);
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = normal(rng);
    void* p = bytes.data() + i * static_cast<std::int64_t>(dtype_size(c.dtype));
    switch (c.dtype) {
      case DType::f64: std::memcpy(p, &v, 8); break;
      case DType::f32: { const float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
      case DType::i16: { const auto x = static_cast<std::int16_t>(v * 10); std::memcpy(p, &x, 2); break; }
      default: { const auto x = static_cast<std::uint8_t>(std::fabs(v)); std::memcpy(p, &x, 1); break; }
    }
  }
  return bytes;
}

// (nd, npts): a fraction `inside` (75% by default) inside, 60% of the rest within a tap of an
// edge, the others anywhere around; NaN 1% of the time, as often as a point is anywhere around
// when `inside` is larger.
std::vector<double> make_coords(const std::vector<std::int64_t>& shape, std::int64_t npts,
                                std::mt19937_64& rng, double inside = 0.75) {
  std::vector<double> c(shape.size() * static_cast<std::size_t>(npts));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const double n = static_cast<double>(shape[d]);
    for (std::int64_t k = 0; k < npts; ++k) {
      const double pick = u(rng);
      double x;
      if (pick < inside) x = u(rng) * (n - 1);
      else if (pick < inside + 0.6 * (1 - inside))
        x = u(rng) < 0.5 ? -0.5 + 3 * u(rng) : n - 3.5 + 3 * u(rng);
      else x = -3 + (n + 5) * u(rng);
      if (u(rng) < std::min(0.01, 0.4 * (1 - inside))) x = std::nan("");
      c[d * static_cast<std::size_t>(npts) + static_cast<std::size_t>(k)] = x;
    }
  }
  return c;
}

// map_coordinates at the npts points of coords, an output of rows x (npts / rows): the kernel
// is called once per row, so each row ends in a tail of its own.
std::vector<double> run(const Case& c, std::vector<std::byte>& data, std::vector<double>& coords,
                        std::int64_t npts, const InterpOptions& o, std::int64_t rows = 1) {
  ArrayRef in{data.data(), c.dtype, c.shape, strides_of(c.shape, c.fortran)};
  const auto nd = static_cast<std::int64_t>(c.shape.size());
  const std::int64_t len = npts / rows;
  ArrayRef cr{coords.data(), DType::f64, {nd, rows, len}, {npts, len, 1}};
  std::vector<double> out(static_cast<std::size_t>(npts));
  ArrayRef outr{out.data(), DType::f64, {rows, len}, {len, 1}};
  map_coordinates(in, cr, outr, o);
  return out;
}

// The interpolation modes, and the options both comparisons run (one thread, cval -7.5).
constexpr InterpMode kModes[] = {InterpMode::constant, InterpMode::grid_constant,
                                 InterpMode::nearest,  InterpMode::reflect,
                                 InterpMode::mirror,   InterpMode::wrap,
                                 InterpMode::grid_wrap};

InterpOptions options_for(int order, InterpMode mode, bool prefilter) {
  InterpOptions o;
  o.order = order;
  o.mode = mode;
  o.cval = -7.5;
  o.prefilter = prefilter;
  o.threads = 1;
  return o;
}

// Every layout, order 1 to 5, mode and prefilter setting: fn(options, vector of the case's data
// and coordinates, a description for failures). 301 points: not a multiple of 4 or 12, so the
// scalar tail runs too.
struct Setting {
  const Case& c;
  std::vector<std::byte>& data;
  std::vector<double>& coords;
  std::int64_t npts;
  InterpOptions options;
  std::string what;
};

template <typename Fn>
int for_each_setting(unsigned seed, Fn&& fn) {
  const std::vector<Case> cases = {
      {{17, 15, 13}, DType::f64, false}, {{17, 15, 13}, DType::f32, true},
      {{17, 15, 13}, DType::i16, false}, {{16, 14, 12}, DType::f32, false},
      {{23, 19}, DType::f64, false},     {{23, 19}, DType::u8, true},
      {{23, 19}, DType::f32, true},
      {{5, 4, 7}, DType::f64, false},  // smaller than some orders' taps on an axis
      // Last axes of 16 and more: the coefficients carry a margin the vector path reads.
      {{9, 11, 21}, DType::f64, false},  {{7, 6, 18}, DType::f32, true},
  };
  std::mt19937_64 rng(seed);
  int settings = 0;
  for (const Case& c : cases) {
    std::int64_t n = 1;
    for (auto d : c.shape) n *= d;
    auto data = make_data(c, n, rng);
    constexpr std::int64_t npts = 301;
    auto coords = make_coords(c.shape, npts, rng);
    for (int order = 1; order <= 5; ++order)
      for (InterpMode mode : kModes)
        for (bool prefilter : {true, false}) {
          const InterpOptions o = options_for(order, mode, prefilter);
          std::string what = "order " + std::to_string(order) + ", mode " +
                             std::string(interp_mode_name(mode)) + ", prefilter " +
                             std::to_string(prefilter) + ", " + std::to_string(c.shape.size()) +
                             "-D " + std::string(dtype_name(c.dtype)) +
                             (c.fortran ? " (Fortran order)" : "");
          fn(Setting{c, data, coords, npts, o, std::move(what)});
          ++settings;
        }
  }
  return settings;
}

TEST(ResampleSimd, EqualsTheScalarPathBitForBit) {
  const auto levels = vector_levels();
  if (levels.empty()) GTEST_SKIP() << "this CPU has no AVX2: only the scalar path exists";
  SimdSwitch restore;
  const int compared = for_each_setting(7, [&](const Setting& s) {
    core::set_simd_level(SimdLevel::scalar);
    ASSERT_FALSE(resample::simd_enabled());
    const auto scalar = run(s.c, s.data, s.coords, s.npts, s.options);
    for (SimdLevel level : levels) {
      core::set_simd_level(level);
      ASSERT_TRUE(resample::simd_enabled());
      const auto vec = run(s.c, s.data, s.coords, s.npts, s.options);
      ASSERT_EQ(std::memcmp(vec.data(), scalar.data(), vec.size() * sizeof(double)), 0)
          << s.what << ", level " << core::simd_level_name(level);
    }
  });
  EXPECT_EQ(compared, 10 * 5 * 7 * 2);
}

// The vector paths take groups of 4 (avx2) or 8 (avx512) points, two or three groups at a time
// when all their points are inside, and the rest of a row by masks or on the scalar path: rows
// of every length from 1 to 40 points (tails of every size), mostly inside so that the
// interleaved groups run, with some points near the edges, outside and NaN. Every order, mode
// and prefilter setting, on float64 and float32 C-ordered data (the avx512 path reads both
// directly without the prefilter) and int16 (its coefficients are float64), 2-D and 3-D.
TEST(ResampleSimd, EqualsTheScalarPathOnRowsOfEveryLength) {
  const auto levels = vector_levels();
  if (levels.empty()) GTEST_SKIP() << "this CPU has no AVX2: only the scalar path exists";
  SimdSwitch restore;
  const std::vector<Case> cases = {{{17, 15, 13}, DType::f64, false},
                                   {{16, 14, 19}, DType::f32, false},
                                   {{12, 11, 10}, DType::i16, false},
                                   {{23, 21}, DType::f64, false},
                                   {{22, 18}, DType::f32, false}};
  std::mt19937_64 rng(23);
  constexpr std::int64_t kRows = 5;
  int compared = 0;
  std::int64_t interior = 0;  // points of the 3-D float64 case inside every axis
  for (const Case& c : cases) {
    std::int64_t n = 1;
    for (auto d : c.shape) n *= d;
    auto data = make_data(c, n, rng);
    for (std::int64_t len = 1; len <= 40; ++len) {
      const std::int64_t npts = kRows * len;
      auto coords = make_coords(c.shape, npts, rng, 0.97);
      for (int order = 1; order <= 5; ++order)
        for (InterpMode mode : kModes)
          for (bool prefilter : {true, false}) {
            const InterpOptions o = options_for(order, mode, prefilter);
            core::set_simd_level(SimdLevel::scalar);
            const auto scalar = run(c, data, coords, npts, o, kRows);
            for (SimdLevel level : levels) {
              core::set_simd_level(level);
              const auto vec = run(c, data, coords, npts, o, kRows);
              ASSERT_EQ(std::memcmp(vec.data(), scalar.data(), vec.size() * sizeof(double)), 0)
                  << "order " << order << ", mode " << interp_mode_name(mode) << ", prefilter "
                  << prefilter << ", " << c.shape.size() << "-D " << dtype_name(c.dtype)
                  << ", rows of " << len << ", level " << core::simd_level_name(level);
            }
            ++compared;
          }
      if (c.dtype == DType::f64 && c.shape.size() == 3)
        for (std::int64_t k = 0; k < npts; ++k) {
          bool in = true;
          for (std::size_t d = 0; d < 3; ++d) {
            const double x = coords[d * static_cast<std::size_t>(npts) +
                                    static_cast<std::size_t>(k)];
            in &= x >= 0 && x <= static_cast<double>(c.shape[d] - 1);
          }
          interior += in;
        }
    }
  }
  EXPECT_EQ(compared, 5 * 40 * 5 * 7 * 2);
  // Most points inside (0.97 of each axis): runs of 16 and 12 interior points (the interleaved
  // groups) are common.
  EXPECT_GT(interior, 3300);  // of 4100; about 3700 expected
}

// The avx512 level has its own kernel for float64 and float32 data contiguous along the last
// axis (the coefficients, C-ordered inputs), 2-D and 3-D, every order from 1; other types and
// layouts keep the avx2 kernel there. Guards the comparisons above against comparing the avx2
// path twice.
TEST(ResampleSimd, Avx512LevelPicksItsOwnKernelForContiguousFloats) {
  if (core::simd_detected() < SimdLevel::avx512) GTEST_SKIP() << "this CPU has no AVX-512";
  SimdSwitch restore;
  auto plan_of = [](DType t, std::vector<std::int64_t> shape, bool fortran, int order) {
    resample::kernel::Plan p;
    p.dtype = t;
    p.nd = static_cast<int>(shape.size());
    p.strides = strides_of(shape, fortran);
    p.shape = std::move(shape);
    p.order = order;
    return p;
  };
  for (int order = 1; order <= 5; ++order) {
    for (DType t : {DType::f64, DType::f32})
      for (std::vector<std::int64_t> shape : {std::vector<std::int64_t>{9, 8, 7}, {9, 8}}) {
        const auto p = plan_of(t, shape, false, order);
        core::set_simd_level(SimdLevel::avx2);
        const auto avx2 = resample::kernel::pick(p);
        core::set_simd_level(SimdLevel::avx512);
        EXPECT_NE(resample::kernel::pick(p), avx2) << "order " << order << ", " << dtype_name(t);
      }
    for (const auto& p : {plan_of(DType::i16, {9, 8, 7}, false, order),
                          plan_of(DType::f32, {9, 8, 7}, true, order)}) {
      core::set_simd_level(SimdLevel::avx2);
      const auto avx2 = resample::kernel::pick(p);
      core::set_simd_level(SimdLevel::avx512);
      EXPECT_EQ(resample::kernel::pick(p), avx2) << "order " << order;
    }
  }
}

// The old on/off switch drives the core's level: off is scalar, on the best the CPU has.
TEST(ResampleSimd, OnOffSwitchSetsTheCoreLevel) {
  SimdSwitch restore;
  resample::set_simd_enabled(false);
  EXPECT_EQ(core::simd_level(), SimdLevel::scalar);
  EXPECT_FALSE(resample::simd_enabled());
  resample::set_simd_enabled(true);
  EXPECT_EQ(core::simd_level(), core::simd_detected());
  EXPECT_EQ(resample::simd_enabled(), core::simd_detected() != SimdLevel::scalar);
}

// InterpOptions::fast: the separable sums with multiply-adds stay within a few ulps of the exact
// values (scipy's) for every order, mode and layout, with NaN where the exact path gives NaN; and
// they are really taken (some values differ in their last bits) where the CPU has FMA.
TEST(ResampleSimd, FastModeStaysWithinUlpsOfTheExactValues) {
  SimdSwitch restore;
  resample::set_simd_enabled(true);
  std::int64_t differing = 0;
  for_each_setting(11, [&](const Setting& s) {
    InterpOptions o = s.options;
    const auto exact = run(s.c, s.data, s.coords, s.npts, o);
    o.fast = true;
    const auto fast = run(s.c, s.data, s.coords, s.npts, o);
    double scale = 1.0;  // the largest value: coefficients are of the data's magnitude
    for (double v : exact)
      if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
    for (std::size_t k = 0; k < exact.size(); ++k) {
      ASSERT_EQ(std::isnan(exact[k]), std::isnan(fast[k])) << s.what << ", point " << k;
      if (std::isnan(exact[k])) continue;
      ASSERT_LE(std::fabs(exact[k] - fast[k]), 1e-13 * scale) << s.what << ", point " << k;
      if (o.order < 3) {
        ASSERT_EQ(exact[k], fast[k]) << s.what << ": no fast path below order 3";
      }
      differing += exact[k] != fast[k];
    }
  });
  if (cpu_has_fma()) EXPECT_GT(differing, 1000);
  else EXPECT_EQ(differing, 0);
}

}  // namespace
