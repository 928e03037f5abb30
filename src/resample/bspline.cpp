#include "resample/bspline.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <new>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/checked.hpp"
#include "core/convert.hpp"
#include "core/simd.hpp"
#include "core/thread_pool.hpp"
#include "resample/boundary.hpp"
#include "resample/dispatch.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::resample {

int spline_poles(int order, double poles[2]) {
  // The roots of the B-spline's z-transform, to full double precision (the same literals as
  // scipy's get_filter_poles, so the coefficients round alike).
  switch (order) {
    case 2: poles[0] = -0.171572875253809902396622551580603843; return 1;   // sqrt(8) - 3
    case 3: poles[0] = -0.267949192431122706472553658494127633; return 1;   // sqrt(3) - 2
    case 4:
      poles[0] = -0.361341225900220177092212841325675255;
      poles[1] = -0.013725429297339121360331226939128204;
      return 2;
    case 5:
      poles[0] = -0.430575347099973791851434783493520110;
      poles[1] = -0.043096288203264653822712376822550182;
      return 2;
    default: return 0;
  }
}

namespace {

// The 32-byte vectors below never cross a function boundary (everything using them is inlined),
// so the compilers' note that passing them changes the ABI without AVX does not apply.
#pragma GCC diagnostic push
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wunknown-warning-option"
#endif
#pragma GCC diagnostic ignored "-Wpsabi"

// The boundary initialisations of the causal and anticausal passes. Each lane is an independent
// line; the arithmetic per lane is scipy's, in scipy's order (ni_splines.c), including the causal
// reflect sum whose last term reads the partly accumulated first coefficient (which is why
// scipy's reflect and nearest modes do not reproduce the samples exactly at the edges).
// Vectorising over the lanes changes no lane's operations or their order, so the coefficients
// stay bit-identical at any vector width (no FMA: -ffp-contract=off and no "fma" target).
//
// `Lanes` is the number of lanes: Fixed<N, V> (known when compiling, a multiple of the vector
// V's width: the lanes go as explicit vectors, Vec2 for SSE2, Vec4 for AVX) or Dynamic (one at
// a time; the compiler vectorises).
typedef double Vec2 __attribute__((vector_size(16)));
typedef double Vec4 __attribute__((vector_size(32)));

template <std::int64_t N, class Vector>
struct Fixed {
  using V = Vector;
  static constexpr std::int64_t W = sizeof(V) / sizeof(double);
  static_assert(N % W == 0);
  static constexpr std::int64_t n = N;
};
struct Dynamic {
  using V = double;
  static constexpr std::int64_t W = 1;
  std::int64_t n;
};

template <class V>
[[gnu::always_inline]] inline V load(const double* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
[[gnu::always_inline]] inline void store(double* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

template <class Lanes>
struct Lines {
  double* p;
  std::int64_t stride;
  Lanes lanes;
  double* row(std::int64_t i) const { return p + i * stride; }
};

// Per-lane scratch (the first coefficient saved by the reflect initialisation).
template <class Lanes>
struct Scratch {
  std::vector<double> v;
  double* get(const Lanes& l) {
    v.resize(static_cast<std::size_t>(l.n));
    return v.data();
  }
};
template <std::int64_t N, class V>
struct Scratch<Fixed<N, V>> {
  double v[N];
  double* get(const Fixed<N, V>&) { return v; }
};

template <class Lanes>
[[gnu::always_inline]] inline void causal_mirror(const Lines<Lanes>& c, std::int64_t n,
                                                 double z) {
  using V = typename Lanes::V;
  constexpr std::int64_t W = Lanes::W;
  const std::int64_t lanes = c.lanes.n;
  const double z_n_1 = std::pow(z, static_cast<double>(n - 1));
  double* c0 = c.row(0);
  const double* last = c.row(n - 1);
  for (std::int64_t j = 0; j < lanes; j += W)
    store(c0 + j, load<V>(c0 + j) + z_n_1 * load<V>(last + j));
  double z_i = z;
  for (std::int64_t i = 1; i < n - 1; ++i) {
    const double* a = c.row(i);
    const double* b = c.row(n - 1 - i);
    for (std::int64_t j = 0; j < lanes; j += W)
      store(c0 + j, load<V>(c0 + j) + z_i * (load<V>(a + j) + z_n_1 * load<V>(b + j)));
    z_i *= z;
  }
  const double denom = 1 - z_n_1 * z_n_1;
  for (std::int64_t j = 0; j < lanes; j += W) store(c0 + j, load<V>(c0 + j) / denom);
}

template <class Lanes>
[[gnu::always_inline]] inline void anticausal_mirror(const Lines<Lanes>& c, std::int64_t n,
                                                     double z) {
  using V = typename Lanes::V;
  constexpr std::int64_t W = Lanes::W;
  const std::int64_t lanes = c.lanes.n;
  double* last = c.row(n - 1);
  const double* prev = c.row(n - 2);
  for (std::int64_t j = 0; j < lanes; j += W)
    store(last + j, (z * load<V>(prev + j) + load<V>(last + j)) * z / (z * z - 1));
}

template <class Lanes>
[[gnu::always_inline]] inline void causal_wrap(const Lines<Lanes>& c, std::int64_t n, double z) {
  using V = typename Lanes::V;
  constexpr std::int64_t W = Lanes::W;
  const std::int64_t lanes = c.lanes.n;
  double* c0 = c.row(0);
  double z_i = z;
  for (std::int64_t i = 1; i < n; ++i) {
    const double* a = c.row(n - i);
    for (std::int64_t j = 0; j < lanes; j += W)
      store(c0 + j, load<V>(c0 + j) + z_i * load<V>(a + j));
    z_i *= z;
  }
  for (std::int64_t j = 0; j < lanes; j += W) store(c0 + j, load<V>(c0 + j) / (1 - z_i));
}

template <class Lanes>
[[gnu::always_inline]] inline void anticausal_wrap(const Lines<Lanes>& c, std::int64_t n,
                                                   double z) {
  using V = typename Lanes::V;
  constexpr std::int64_t W = Lanes::W;
  const std::int64_t lanes = c.lanes.n;
  double* last = c.row(n - 1);
  double z_i = z;
  for (std::int64_t i = 0; i < n - 1; ++i) {
    const double* a = c.row(i);
    for (std::int64_t j = 0; j < lanes; j += W)
      store(last + j, load<V>(last + j) + z_i * load<V>(a + j));
    z_i *= z;
  }
  const double f = z / (z_i - 1);
  for (std::int64_t j = 0; j < lanes; j += W) store(last + j, load<V>(last + j) * f);
}

template <class Lanes>
[[gnu::always_inline]] inline void causal_reflect(const Lines<Lanes>& c, std::int64_t n, double z,
                                                  double* saved) {
  using V = typename Lanes::V;
  constexpr std::int64_t W = Lanes::W;
  const std::int64_t lanes = c.lanes.n;
  const double z_n = std::pow(z, static_cast<double>(n));
  double* c0 = c.row(0);
  const double* last = c.row(n - 1);
  for (std::int64_t j = 0; j < lanes; ++j) saved[j] = c0[j];
  for (std::int64_t j = 0; j < lanes; j += W)
    store(c0 + j, load<V>(c0 + j) + z_n * load<V>(last + j));
  double z_i = z;
  for (std::int64_t i = 1; i < n; ++i) {
    const double* a = c.row(i);
    const double* b = c.row(n - 1 - i);  // row 0 itself when i = n - 1, as in scipy
    for (std::int64_t j = 0; j < lanes; j += W)
      store(c0 + j, load<V>(c0 + j) + z_i * (load<V>(a + j) + z_n * load<V>(b + j)));
    z_i *= z;
  }
  const double f = z / (1 - z_n * z_n);
  for (std::int64_t j = 0; j < lanes; j += W) {
    V v = load<V>(c0 + j) * f;
    v += load<V>(saved + j);
    store(c0 + j, v);
  }
}

template <class Lanes>
[[gnu::always_inline]] inline void anticausal_reflect(const Lines<Lanes>& c, std::int64_t n,
                                                      double z) {
  using V = typename Lanes::V;
  constexpr std::int64_t W = Lanes::W;
  const std::int64_t lanes = c.lanes.n;
  double* last = c.row(n - 1);
  const double f = z / (z - 1);
  for (std::int64_t j = 0; j < lanes; j += W) store(last + j, load<V>(last + j) * f);
}

// The causal recursion c[i] += z * c[i - 1] and the anticausal c[i] = z * (c[i + 1] - c[i]).
// With fixed lanes, the previous row stays in registers: the loop's only dependency is then the
// recursion itself, not a store and reload.
template <class Lanes>
[[gnu::always_inline]] inline void recursions(const Lines<Lanes>& c, std::int64_t len,
                                              double z) {
  const std::int64_t lanes = c.lanes.n;
  if constexpr (Lanes::W == 1) {
    for (std::int64_t i = 1; i < len; ++i) {
      double* r = c.row(i);
      const double* q = c.row(i - 1);
      for (std::int64_t j = 0; j < lanes; ++j) r[j] += z * q[j];
    }
  } else {
    using V = typename Lanes::V;
    constexpr std::int64_t K = Lanes::n / Lanes::W;
    V prev[K];
#pragma GCC unroll 16
    for (std::int64_t k = 0; k < K; ++k) prev[k] = load<V>(c.row(0) + k * Lanes::W);
    for (std::int64_t i = 1; i < len; ++i) {
      double* r = c.row(i);
#pragma GCC unroll 16
      for (std::int64_t k = 0; k < K; ++k) {
        prev[k] = load<V>(r + k * Lanes::W) + z * prev[k];
        store(r + k * Lanes::W, prev[k]);
      }
    }
  }
}

// (Separate from the causal recursion: the anticausal initialisation comes between them.)
template <class Lanes>
[[gnu::always_inline]] inline void anticausal_recursion(const Lines<Lanes>& c, std::int64_t len,
                                                        double z) {
  const std::int64_t lanes = c.lanes.n;
  if constexpr (Lanes::W == 1) {
    for (std::int64_t i = len - 2; i >= 0; --i) {
      double* r = c.row(i);
      const double* q = c.row(i + 1);
      for (std::int64_t j = 0; j < lanes; ++j) r[j] = z * (q[j] - r[j]);
    }
  } else {
    using V = typename Lanes::V;
    constexpr std::int64_t K = Lanes::n / Lanes::W;
    V next[K];
#pragma GCC unroll 16
    for (std::int64_t k = 0; k < K; ++k) next[k] = load<V>(c.row(len - 1) + k * Lanes::W);
    for (std::int64_t i = len - 2; i >= 0; --i) {
      double* r = c.row(i);
#pragma GCC unroll 16
      for (std::int64_t k = 0; k < K; ++k) {
        next[k] = z * (next[k] - load<V>(r + k * Lanes::W));
        store(r + k * Lanes::W, next[k]);
      }
    }
  }
}

// The gain of the order's poles, as scipy's apply_gain computes it.
double filter_gain(const double* poles, int npoles) {
  double gain = 1.0;
  for (int k = 0; k < npoles; ++k) gain *= (1.0 - poles[k]) * (1.0 - 1.0 / poles[k]);
  return gain;
}

// The filter of spline_filter_lines for len >= 2, lanes >= 1 and an order with poles; the lines
// are multiplied by the gain first unless `gained` says the caller has done it.
template <class Lanes>
[[gnu::always_inline]] inline void filter_lines(const Lines<Lanes>& c, std::int64_t len,
                                                const double* poles, int npoles, InterpMode mode,
                                                bool gained) {
  const std::int64_t lanes = c.lanes.n;
  if (!gained) {
    const double gain = filter_gain(poles, npoles);
    for (std::int64_t i = 0; i < len; ++i) {
      double* r = c.row(i);
      for (std::int64_t j = 0; j < lanes; ++j) r[j] *= gain;
    }
  }
  Scratch<Lanes> saved;
  for (int k = 0; k < npoles; ++k) {
    const double z = poles[k];
    switch (mode) {
      case InterpMode::grid_wrap: causal_wrap(c, len, z); break;
      case InterpMode::nearest:
      case InterpMode::reflect: causal_reflect(c, len, z, saved.get(c.lanes)); break;
      default: causal_mirror(c, len, z); break;
    }
    recursions(c, len, z);
    switch (mode) {
      case InterpMode::grid_wrap: anticausal_wrap(c, len, z); break;
      case InterpMode::nearest:
      case InterpMode::reflect: anticausal_reflect(c, len, z); break;
      default: anticausal_mirror(c, len, z); break;
    }
    anticausal_recursion(c, len, z);
  }
}

// Lines of the last axis filtered together: the block is transposed into a len x L buffer
// (lane-contiguous rows) so that the lines' recursions run in lockstep, as vectors, rather than
// as one latency-bound scalar chain per line. L = 16 with SSE2 (8 registers carry a row), 32
// with AVX (8 ymm registers; ~10% faster than 16 there).
constexpr std::int64_t kLastBlock = 16;
constexpr std::int64_t kLastBlockAvx = 32;

// The W x W transpose of the rows r[0, W). (__builtin_shufflevector: clang, GCC 12 and later;
// __builtin_shuffle, the same indices into the two operands' lanes: earlier GCC.)
#if defined(__clang__) || __GNUC__ >= 12
#define VOXPIPE_SHUFFLE(M, a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
typedef long long Mask2 __attribute__((vector_size(16)));
typedef long long Mask4 __attribute__((vector_size(32)));
#define VOXPIPE_SHUFFLE(M, a, b, ...) __builtin_shuffle(a, b, M{__VA_ARGS__})
#endif
[[gnu::always_inline]] inline void transpose(Vec2* r) {
  const Vec2 t0 = VOXPIPE_SHUFFLE(Mask2, r[0], r[1], 0, 2);
  r[1] = VOXPIPE_SHUFFLE(Mask2, r[0], r[1], 1, 3);
  r[0] = t0;
}
[[gnu::always_inline]] inline void transpose(Vec4* r) {
  const Vec4 t0 = VOXPIPE_SHUFFLE(Mask4, r[0], r[1], 0, 4, 2, 6);
  const Vec4 t1 = VOXPIPE_SHUFFLE(Mask4, r[0], r[1], 1, 5, 3, 7);
  const Vec4 t2 = VOXPIPE_SHUFFLE(Mask4, r[2], r[3], 0, 4, 2, 6);
  const Vec4 t3 = VOXPIPE_SHUFFLE(Mask4, r[2], r[3], 1, 5, 3, 7);
  r[0] = VOXPIPE_SHUFFLE(Mask4, t0, t2, 0, 1, 4, 5);
  r[1] = VOXPIPE_SHUFFLE(Mask4, t1, t3, 0, 1, 4, 5);
  r[2] = VOXPIPE_SHUFFLE(Mask4, t0, t2, 2, 3, 6, 7);
  r[3] = VOXPIPE_SHUFFLE(Mask4, t1, t3, 2, 3, 6, 7);
}
#undef VOXPIPE_SHUFFLE

// Filters the `count` lines of `len` contiguous samples at `p`, `pitch` apart (len >= 2), L at a
// time through `buf` (len * L doubles), with vectors V.
template <std::int64_t L, class V>
[[gnu::always_inline]] inline void filter_contiguous(double* p, std::int64_t count,
                                                     std::int64_t len, std::int64_t pitch,
                                                     double* buf, const double* poles,
                                                     int npoles, InterpMode mode) {
  using Lanes = Fixed<L, V>;
  constexpr std::int64_t W = Lanes::W;
  const double gain = filter_gain(poles, npoles);
  const Lines<Lanes> c{buf, L, {}};
  const std::int64_t whole = len - len % W;  // samples transposed W x W at a time
  for (std::int64_t l0 = 0; l0 < count; l0 += L) {
    const std::int64_t m = std::min(L, count - l0);
    double* block = p + l0 * pitch;
    // In, times the gain (the same product as the gain pass): a partial block's spare lanes
    // filter zeros, which no real lane reads.
    if (m == L) {
      for (std::int64_t j = 0; j < L; j += W) {
        const double* s = block + j * pitch;
        for (std::int64_t i = 0; i < whole; i += W) {
          V r[W];
#pragma GCC unroll 4
          for (std::int64_t k = 0; k < W; ++k) r[k] = load<V>(s + k * pitch + i);
          transpose(r);
#pragma GCC unroll 4
          for (std::int64_t k = 0; k < W; ++k) store(buf + (i + k) * L + j, r[k] * gain);
        }
        for (std::int64_t i = whole; i < len; ++i)
          for (std::int64_t k = 0; k < W; ++k) buf[i * L + j + k] = s[k * pitch + i] * gain;
      }
    } else {
      for (std::int64_t j = 0; j < m; ++j) {
        const double* s = block + j * pitch;
        for (std::int64_t i = 0; i < len; ++i) buf[i * L + j] = s[i] * gain;
      }
      for (std::int64_t j = m; j < L; ++j)
        for (std::int64_t i = 0; i < len; ++i) buf[i * L + j] = 0.0;
    }
    filter_lines(c, len, poles, npoles, mode, true);
    if (m == L) {
      for (std::int64_t j = 0; j < L; j += W) {
        double* s = block + j * pitch;
        for (std::int64_t i = 0; i < whole; i += W) {
          V r[W];
#pragma GCC unroll 4
          for (std::int64_t k = 0; k < W; ++k) r[k] = load<V>(buf + (i + k) * L + j);
          transpose(r);
#pragma GCC unroll 4
          for (std::int64_t k = 0; k < W; ++k) store(s + k * pitch + i, r[k]);
        }
        for (std::int64_t i = whole; i < len; ++i)
          for (std::int64_t k = 0; k < W; ++k) s[k * pitch + i] = buf[i * L + j + k];
      }
    } else {
      for (std::int64_t j = 0; j < m; ++j) {
        double* s = block + j * pitch;
        for (std::int64_t i = 0; i < len; ++i) s[i] = buf[i * L + j];
      }
    }
  }
}

#pragma GCC diagnostic pop

// The kernels, compiled for the baseline ISA and, where the compiler can, for AVX2 (wider
// vectors over the lanes; "avx2" does not include FMA), chosen at run time.
void strided_default(double* line, std::int64_t len, std::int64_t stride, std::int64_t lanes,
                     const double* poles, int npoles, InterpMode mode) {
  filter_lines(Lines<Dynamic>{line, stride, {lanes}}, len, poles, npoles, mode, false);
}
void contiguous_default(double* p, std::int64_t count, std::int64_t len, std::int64_t pitch,
                        double* buf, const double* poles, int npoles, InterpMode mode) {
  filter_contiguous<kLastBlock, Vec2>(p, count, len, pitch, buf, poles, npoles, mode);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define VOXPIPE_BSPLINE_AVX2 1
__attribute__((target("avx2"))) void strided_avx2(double* line, std::int64_t len,
                                                  std::int64_t stride, std::int64_t lanes,
                                                  const double* poles, int npoles,
                                                  InterpMode mode) {
  filter_lines(Lines<Dynamic>{line, stride, {lanes}}, len, poles, npoles, mode, false);
}
__attribute__((target("avx2"))) void contiguous_avx2(double* p, std::int64_t count,
                                                     std::int64_t len, std::int64_t pitch,
                                                     double* buf, const double* poles,
                                                     int npoles, InterpMode mode) {
  filter_contiguous<kLastBlockAvx, Vec4>(p, count, len, pitch, buf, poles, npoles, mode);
}

// At the avx2 and avx512 levels (core/simd.hpp: never above what the CPU has).
bool use_avx2() { return core::simd_level() >= core::SimdLevel::avx2; }
#endif

void filter_strided(double* line, std::int64_t len, std::int64_t stride, std::int64_t lanes,
                    const double* poles, int npoles, InterpMode mode, SplineSimd simd) {
#ifdef VOXPIPE_BSPLINE_AVX2
  if (simd == SplineSimd::best && use_avx2())
    return strided_avx2(line, len, stride, lanes, poles, npoles, mode);
#endif
  (void)simd;
  strided_default(line, len, stride, lanes, poles, npoles, mode);
}

void filter_contiguous_lines(double* p, std::int64_t count, std::int64_t len, std::int64_t pitch,
                             double* buf, const double* poles, int npoles, InterpMode mode,
                             SplineSimd simd) {
#ifdef VOXPIPE_BSPLINE_AVX2
  if (simd == SplineSimd::best && use_avx2())
    return contiguous_avx2(p, count, len, pitch, buf, poles, npoles, mode);
#endif
  (void)simd;
  contiguous_default(p, count, len, pitch, buf, poles, npoles, mode);
}

}  // namespace

void spline_filter_lines(double* line, std::int64_t len, std::int64_t stride, std::int64_t lanes,
                         int order, InterpMode mode, SplineSimd simd) {
  double poles[2];
  const int npoles = spline_poles(order, poles);
  if (npoles == 0 || len <= 1 || lanes <= 0) return;
  filter_strided(line, len, stride, lanes, poles, npoles, mode, simd);
}

void spline_filter_lines(double* line, std::int64_t len, std::int64_t stride, std::int64_t lanes,
                         int order, InterpMode mode) {
  spline_filter_lines(line, len, stride, lanes, order, mode, SplineSimd::best);
}

void spline_filter_contiguous(double* p, std::int64_t count, std::int64_t len, std::int64_t pitch,
                              int order, InterpMode mode, SplineSimd simd) {
  double poles[2];
  const int npoles = spline_poles(order, poles);
  if (npoles == 0 || len <= 1 || count <= 0) return;
  const auto n = static_cast<std::size_t>(len * std::max(kLastBlock, kLastBlockAvx));
  const std::unique_ptr<double[]> buf(new double[n]);
  filter_contiguous_lines(p, count, len, pitch, buf.get(), poles, npoles, mode, simd);
}

void spline_filter_contiguous(double* p, std::int64_t count, std::int64_t len, int order,
                              InterpMode mode, SplineSimd simd) {
  spline_filter_contiguous(p, count, len, len, order, mode, simd);
}

double cast_to_dtype(double v, DType t) {
  if (t == DType::f64) return v;
  if (t == DType::f32) return static_cast<double>(static_cast<float>(v));
  // Through int64 (cvttsd2si): NaN and out-of-range values become INT64_MIN, whose low bits are 0.
  const std::int64_t i = std::fabs(v) < 9.2e18 ? static_cast<std::int64_t>(v) : INT64_MIN;
  double r = 0;
  with_real_type(t, [&](auto x) {
    using T = decltype(x);
    if constexpr (std::is_integral_v<T>) r = static_cast<double>(static_cast<T>(i));
  });
  return r;
}

void Coefficients::Free::operator()(double* p) const noexcept { std::free(p); }

namespace {

// Lanes filtered together along an axis that is not the last: 64 lanes of 8 bytes are 512
// contiguous bytes per row, enough to stream rows through the cache while a task stays small.
constexpr std::int64_t kLaneBlock = 64;

std::int64_t product(const std::vector<std::int64_t>& v, std::size_t from, std::size_t to) {
  std::uint64_t p = 1;
  for (std::size_t i = from; i < to; ++i) {
    auto r = core::checked_mul(p, static_cast<std::uint64_t>(v[i]));
    if (!r || *r > static_cast<std::uint64_t>(INT64_MAX))
      throw Error(ErrorCode::limit, "", "shape", "the array's size overflows 64 bits");
    p = *r;
  }
  return static_cast<std::int64_t>(p);
}

// Tiles of the copy for inputs whose last axis steps far in memory (Fortran order, the usual
// NIfTI layout): a run along the input's closest-packed axis by up to kTileLast elements along
// the last axis, converted into a block (contiguous runs: the cast kernel's fast path) and
// transposed from there into the output rows. Converting an output row at a time instead reads
// one element per cache line, 128 KiB apart in a 256x256x176 int16 volume, and those lines leave
// the cache (they share a set) before the next row reads their neighbours: that copy took about
// a quarter of an exact cubic resampling. Measured on that volume, the copy alone (2-core EPYC
// VM, one thread): 72 ms a row at a time, 7 ms for the same values in C order; tiles of 64 x 32
// 24 ms, 64 x 256 22 ms (whole rows: the output written in long streams), 32-element runs
// slower (a partly used line at each end). Runs of at least 128 bytes: 128 elements for 1-byte
// types, 64 for the others.
constexpr std::int64_t kTileRun = 64;
constexpr std::int64_t kTileLast = 256;

// The axis copy_tiles reads along, or input.shape.size() for the row copy: the axis before the
// last with the smallest step, where the last axis steps more than a cache line (64 bytes) per
// element and further than that axis.
std::size_t tile_axis(const ArrayRef& input) {
  const std::size_t nd = input.shape.size();
  if (nd < 2) return nd;
  const std::int64_t esize = static_cast<std::int64_t>(dtype_size(input.dtype));
  const auto step = [&](std::size_t d) {
    return input.strides[d] < 0 ? -input.strides[d] : input.strides[d];
  };
  std::size_t close = nd;
  for (std::size_t d = 0; d + 1 < nd; ++d)
    if (input.shape[d] > 1 && (close == nd || step(d) < step(close))) close = d;
  if (close == nd || step(nd - 1) * esize <= 64 || step(close) >= step(nd - 1)) return nd;
  return close;
}

// Converts the input (not the padding) into the array at `base` (strides `ostrides`, each axis
// padded by `npad` samples), a tile at a time along axis `close` and the last axis.
void copy_tiles(const ArrayRef& input, std::size_t close, core::ConvertFn convert,
                const core::Conversion& conv, const std::vector<std::int64_t>& ostrides,
                std::int64_t npad, double* base, unsigned threads) {
  const std::size_t last = input.shape.size() - 1;
  const std::int64_t esize = static_cast<std::int64_t>(dtype_size(input.dtype));
  const std::int64_t run = std::max<std::int64_t>(kTileRun, 128 / esize);
  const std::int64_t nc = input.shape[close], nl = input.shape[last];
  const std::int64_t sc = input.strides[close], sl = input.strides[last], oc = ostrides[close];
  const std::int64_t strips = (nc + run - 1) / run;
  std::int64_t outer = 1;  // positions along the other axes
  for (std::size_t d = 0; d < last; ++d)
    if (d != close) outer *= input.shape[d];
  // A task per strip: `run` along the close axis, all of the last axis.
  core::parallel_for(static_cast<std::size_t>(outer * strips), threads, [&](std::size_t task) {
    std::int64_t rest = static_cast<std::int64_t>(task) / strips;
    const std::int64_t c0 = static_cast<std::int64_t>(task) % strips * run;
    const std::int64_t nt = std::min(run, nc - c0);
    std::int64_t src = c0 * sc, dst = npad + (c0 + npad) * oc;
    for (std::size_t d = last; d-- > 0;) {
      if (d == close) continue;
      const std::int64_t i = rest % input.shape[d];
      rest /= input.shape[d];
      src += i * input.strides[d];
      dst += (i + npad) * ostrides[d];
    }
    const auto* from = static_cast<const std::byte*>(input.data) + src * esize;
    // Element (k, i) of a tile at block[k * run + i]; up to 256 KiB, too much for a stack.
    const std::unique_ptr<double[]> block(
        new double[static_cast<std::size_t>(std::min(nl, kTileLast) * run)]);
    for (std::int64_t k0 = 0; k0 < nl; k0 += kTileLast) {
      const std::int64_t nk = std::min(kTileLast, nl - k0);
      for (std::int64_t k = 0; k < nk; ++k)
        convert(conv, from + (k0 + k) * sl * esize, static_cast<std::ptrdiff_t>(sc * esize),
                reinterpret_cast<std::byte*>(block.get() + k * run),
                static_cast<std::ptrdiff_t>(sizeof(double)), static_cast<std::size_t>(nt));
      // Four rows at a time, each step reading four adjacent elements of the block: 20 ms
      // instead of 25 a row at a time on the int16 volume above (1-byte types: 15 and 21).
      std::int64_t i = 0;
      for (; i + 4 <= nt; i += 4) {
        double* r0 = base + dst + i * oc + k0;
        double* r1 = r0 + oc;
        double* r2 = r1 + oc;
        double* r3 = r2 + oc;
        for (std::int64_t k = 0; k < nk; ++k) {
          const double* b = block.get() + k * run + i;
          r0[k] = b[0];
          r1[k] = b[1];
          r2[k] = b[2];
          r3[k] = b[3];
        }
      }
      for (; i < nt; ++i) {
        double* row = base + dst + i * oc + k0;
        for (std::int64_t k = 0; k < nk; ++k) row[k] = block[k * run + i];
      }
    }
  });
}

}  // namespace

std::int64_t spline_margin(const std::vector<std::int64_t>& shape, int order, InterpMode mode) {
  // Not for the padded modes (their padding already holds the taps), and not where the last
  // axis is short: the axes before it are then filtered a row at a time, in blocks of lanes
  // too narrow to fill a vector, which costs more than the edge points save.
  if (mode == InterpMode::nearest || mode == InterpMode::grid_constant) return 0;
  if (shape.empty() || shape.back() < 16) return 0;
  return order / 2 + 1;
}

Coefficients spline_coefficients(const ArrayRef& input, int order, InterpMode mode, double cval,
                                 unsigned threads, Coefficients reuse) {
  const std::size_t nd = input.shape.size();
  Coefficients out;
  out.npad = mode == InterpMode::nearest || mode == InterpMode::grid_constant ? 12 : 0;
  out.shape.resize(nd);
  for (std::size_t d = 0; d < nd; ++d) out.shape[d] = input.shape[d] + 2 * out.npad;
  const std::int64_t m = spline_margin(out.shape, order, mode);
  out.margin = m;
  std::vector<std::int64_t> stored(nd);
  for (std::size_t d = 0; d < nd; ++d) stored[d] = out.shape[d] + 2 * m;
  out.strides.assign(nd, 1);
  for (std::size_t d = nd; d-- > 1;) out.strides[d - 1] = out.strides[d] * stored[d];
  const std::int64_t logical = product(out.shape, 0, nd);
  const std::int64_t row_len = nd ? out.shape[nd - 1] : 1;
  const std::int64_t rows = row_len ? logical / row_len : 0;
  if (logical == 0) return out;
  const std::int64_t total = product(stored, 0, nd);
  if (reuse.data && reuse.capacity >= static_cast<std::size_t>(total)) {
    // Every stored element is written below (the copy, then each axis's margin), so what the
    // memory held before does not matter.
    out.data = std::move(reuse.data);
    out.capacity = reuse.capacity;
  } else {
    reuse.data.reset();
    constexpr std::size_t kHuge = std::size_t{2} << 20;
    std::size_t bytes = static_cast<std::size_t>(total) * sizeof(double);
    void* p = nullptr;
    if (bytes >= kHuge) {
      bytes = (bytes + kHuge - 1) / kHuge * kHuge;
      p = std::aligned_alloc(kHuge, bytes);
      if (p) madvise(p, bytes, MADV_HUGEPAGE);  // advice only: failure leaves 4 KiB pages
    } else {
      p = std::malloc(bytes);
    }
    if (!p) throw std::bad_alloc();
    out.data.reset(static_cast<double*>(p));
    out.capacity = bytes / sizeof(double);
  }
  std::int64_t origin = 0;
  for (std::size_t d = 0; d < nd; ++d) origin += m * out.strides[d];
  out.origin = out.data.get() + origin;
  double* const base = out.origin;
  // The offset of the element whose indices along axes [from, to) are those of `index`, a
  // position in C order over out.shape[from, to) (inside, no margin).
  auto offset_of = [&](std::int64_t index, std::size_t from, std::size_t to) {
    std::int64_t off = 0;
    for (std::size_t d = to; d-- > from;) {
      off += index % out.shape[d] * out.strides[d];
      index /= out.shape[d];
    }
    return off;
  };

  // 1. Copy (and pad) the input into float64, converted by the library's one cast kernel:
  //    one output row per index, or, where the last axis steps far in memory, the interior in
  //    tiles (copy_tiles) and then the rows' padding.
  core::Conversion conv;
  conv.source = input.dtype;
  conv.dest = DType::f64;
  const core::ConvertFn convert = core::select_conversion(conv);
  if (!convert)
    throw Error(ErrorCode::invalid_argument, "", "input",
                "expected an integer or float array, but received " +
                    std::string(dtype_name(input.dtype)));
  const std::int64_t esize = static_cast<std::int64_t>(dtype_size(input.dtype));
  const std::int64_t npad = out.npad;
  const std::size_t close = tile_axis(input);
  const bool tiled = close < nd;
  if (tiled) copy_tiles(input, close, convert, conv, out.strides, npad, base, threads);
  const auto chunk_rows = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(row_len, 1));
  const auto copy_tasks = static_cast<std::size_t>((rows + chunk_rows - 1) / chunk_rows);
  if (!tiled || npad > 0) {
    core::parallel_for(copy_tasks, threads, [&](std::size_t task) {
      const std::int64_t r0 = static_cast<std::int64_t>(task) * chunk_rows;
      const std::int64_t r1 = std::min(rows, r0 + chunk_rows);
      for (std::int64_t r = r0; r < r1; ++r) {
        // Source index of this row along every axis but the last; outside: cval or clamp.
        // `inside`: the offset of the row at the clamped indices. After copy_tiles, only the
        // padding is left to write.
        std::int64_t rest = r, src = 0, at = 0, inside = 0;
        bool outside = false, clamped = false;
        for (std::size_t d = nd - 1; d-- > 0;) {
          const std::int64_t k = rest % out.shape[d];
          rest /= out.shape[d];
          at += k * out.strides[d];
          std::int64_t i = k - npad;
          if (i < 0 || i >= input.shape[d]) {
            if (mode == InterpMode::grid_constant) outside = true;
            clamped = true;
            i = std::clamp<std::int64_t>(i, 0, input.shape[d] - 1);
          }
          src += i * input.strides[d];
          inside += (i + npad) * out.strides[d];
        }
        double* dst = base + at;
        if (outside) {
          std::fill(dst, dst + row_len, cval);
          continue;
        }
        const std::int64_t n = input.shape[nd - 1];
        if (!tiled) {
          const std::int64_t s = input.strides[nd - 1];
          const auto* from = static_cast<const std::byte*>(input.data) + src * esize;
          convert(conv, from, s * esize, reinterpret_cast<std::byte*>(dst + npad),
                  static_cast<std::ptrdiff_t>(sizeof(double)), static_cast<std::size_t>(n));
        } else if (clamped) {
          // Nearest's padding rows repeat an edge row, which the tiles have converted: the same
          // values as converting it again, without the strided reads.
          std::memcpy(dst + npad, base + inside + npad,
                      static_cast<std::size_t>(n) * sizeof(double));
        }
        const double left = mode == InterpMode::grid_constant ? cval : dst[npad];
        const double right = mode == InterpMode::grid_constant ? cval : dst[npad + n - 1];
        std::fill(dst, dst + npad, left);
        std::fill(dst + npad + n, dst + row_len, right);
      }
    });
  }

  // 2. Prefilter along each axis in turn (scipy's order), inside the margin.
  for (std::size_t d = 0; d < nd; ++d) {
    const std::int64_t len = out.shape[d];
    if (len <= 1) continue;
    const std::int64_t outer = product(out.shape, 0, d);
    if (d == nd - 1) {
      // The last axis: lines `pitch` apart in planes (all of them in one plane without a
      // margin), several per task, filtered in blocks in lockstep (whole blocks in every task
      // but a plane's last).
      const std::int64_t planes = m && nd >= 2 ? product(out.shape, 0, nd - 2) : 1;
      const std::int64_t lines = rows / planes;
      const std::int64_t pitch = m && nd >= 2 ? out.strides[nd - 2] : len;
      const std::int64_t per_task =
          std::max<std::int64_t>(1, 16384 / len / kLastBlockAvx) * kLastBlockAvx;
      const std::int64_t per_plane = (lines + per_task - 1) / per_task;
      core::parallel_for(static_cast<std::size_t>(planes * per_plane), threads, [&](std::size_t t) {
        const std::int64_t plane = static_cast<std::int64_t>(t) / per_plane;
        const std::int64_t l0 = static_cast<std::int64_t>(t) % per_plane * per_task;
        const std::int64_t l1 = std::min(lines, l0 + per_task);
        double* p = base + (m && nd >= 2 ? offset_of(plane, 0, nd - 2) : 0) + l0 * pitch;
        spline_filter_contiguous(p, l1 - l0, len, pitch, order, mode);
      });
    } else {
      // Lanes: runs of adjacent elements along the axes after d (one run per outer index
      // without a margin; with one, a run per row of the last axis), in blocks.
      const std::int64_t runs = m ? product(out.shape, d + 1, nd - 1) : 1;
      const std::int64_t run_len = m ? out.shape[nd - 1] : product(out.shape, d + 1, nd);
      const std::int64_t blocks = (run_len + kLaneBlock - 1) / kLaneBlock;
      const std::int64_t stride = out.strides[d];
      core::parallel_for(static_cast<std::size_t>(outer * runs * blocks), threads,
                         [&](std::size_t t) {
        const std::int64_t b = static_cast<std::int64_t>(t) % blocks;
        const std::int64_t run = static_cast<std::int64_t>(t) / blocks % runs;
        const std::int64_t o = static_cast<std::int64_t>(t) / blocks / runs;
        const std::int64_t j0 = b * kLaneBlock;
        const std::int64_t lanes = std::min(kLaneBlock, run_len - j0);
        double* line = base + offset_of(o, 0, d) + (m ? offset_of(run, d + 1, nd - 1) : 0) + j0;
        spline_filter_lines(line, len, stride, lanes, order, mode);
      });
    }
  }

  // 3. The margin, axis by axis: the planes at indices [-m, 0) and [n, n + m) of axis d are
  //    copies of those at map_tap's index, over the margins of the axes before d (already
  //    filled) and inside the axes after it; so the element at any indices in the margin is the
  //    coefficient at map_tap of each.
  if (m > 0) {
    const InterpMode tmode = tap_mode(mode);
    for (std::size_t d = 0; d < nd; ++d) {
      const std::int64_t len = out.shape[d];
      std::vector<std::pair<std::int64_t, std::int64_t>> copies;  // (to, from) along d
      for (std::int64_t i = -m; i < 0; ++i) copies.emplace_back(i, map_tap(i, len, tmode));
      for (std::int64_t i = len; i < len + m; ++i) copies.emplace_back(i, map_tap(i, len, tmode));
      // Positions along every axis before the last but d; the last axis is axis d itself, or
      // copied a row at a time.
      const std::size_t last = nd - 1;
      std::vector<std::int64_t> lo(nd, 0), hi(nd, 1), idx(nd, 0);
      for (std::size_t e = 0; e < last; ++e) {
        if (e == d) continue;
        lo[e] = e < d ? -m : 0;
        hi[e] = e < d ? out.shape[e] + m : out.shape[e];
      }
      for (std::size_t e = 0; e < nd; ++e) idx[e] = lo[e];
      for (;;) {
        std::int64_t at = 0;
        for (std::size_t e = 0; e < nd; ++e) at += idx[e] * out.strides[e];
        double* q = base + at;
        if (d == nd - 1) {
          for (const auto& [to, from] : copies) q[to] = q[from];
        } else {
          const auto bytes = static_cast<std::size_t>(out.shape[nd - 1]) * sizeof(double);
          for (const auto& [to, from] : copies)
            std::memcpy(q + to * out.strides[d], q + from * out.strides[d], bytes);
        }
        std::size_t e = last;
        while (e-- > 0) {
          if (e == d) continue;
          if (++idx[e] < hi[e]) break;
          idx[e] = lo[e];
        }
        if (e == static_cast<std::size_t>(-1)) break;
      }
    }
  }
  return out;
}

}  // namespace voxpipe::resample
