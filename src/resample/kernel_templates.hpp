// The interpolation kernels, as templates over the element type T, the spline order and the
// rank; included only by kernel_order<N>.cpp, each of which instantiates one order (kernel.hpp
// says why they are split).
//
// Per point and axis a kernel finds the order + 1 taps and their weights exactly as scipy's
// NI_GeometricTransform does (boundary.hpp, spline_weights.hpp), then sums the taps as scipy
// does: tap by tap in C order, each value times the weights of axes 0, 1, ... in turn. So the
// values are scipy's bit for bit. Points whose taps all lie inside the array (most of them) are
// evaluated eight at a time in AVX-512 lanes at the avx512 level (eval_avx512: float64/float32
// data contiguous along the last axis) or four at a time in AVX2 lanes (eval_avx2: the avx2
// level, and other data at avx512); core/simd.hpp chooses the level (the CPU's best unless
// VOXPIPE_SIMD asks for less). Each lane does the scalar path's operations; the other points
// take the scalar path (eval_scalar).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/simd.hpp"
#include "resample/boundary.hpp"
#include "resample/bspline.hpp"
#include "resample/dispatch.hpp"
#include "resample/interpolator.hpp"
#include "resample/kernel.hpp"
#include "resample/spline_weights.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define VOXPIPE_RESAMPLE_AVX2 1
#else
#define VOXPIPE_RESAMPLE_AVX2 0
#endif

namespace voxpipe::resample::kernel {
// Internal linkage, as when they were in interpolate.cpp: each order's file has its own copies
// of what it instantiates.
namespace {

// Sets up the taps of one axis for coordinate c (already shifted by the padding); false when
// the point lies outside in constant mode (or the coordinate is NaN where that gives cval).
template <int ORDER>
inline bool setup_axis(double c, std::int64_t len, std::int64_t stride, InterpMode mode,
                       InterpMode tmode, Taps& t) {
  double cc = c;
  // Inside the samples every mode leaves the coordinate as it is.
  if (mode != InterpMode::grid_constant && mode != InterpMode::nearest &&
      !(c >= 0 && c <= static_cast<double>(len - 1))) {
    cc = map_coordinate(c, len, mode);
    if (!(cc > -1.0)) return false;
  }
  t.any_cval = false;
  double knot = 0;  // floor(cc) for odd orders, floor(cc + 0.5) for even ones
  if (std::fabs(cc) < kMaxCoordinate) {
    knot = fast_floor((ORDER & 1) ? cc : cc + 0.5);
    const std::int64_t start = static_cast<std::int64_t>(knot) - ORDER / 2;
    for (int l = 0; l <= ORDER; ++l) {
      std::int64_t idx = start + l;
      t.cval[l] = false;
      if (idx < 0 || idx >= len) {
        idx = map_tap(idx, len, tmode);
        if (idx < 0) {
          t.cval[l] = t.any_cval = true;
          idx = 0;
        }
      }
      t.off[l] = idx * stride;
    }
  } else {
    // NaN, infinite or huge (nearest and grid-constant only): scipy's index conversion gives
    // INT64_MIN there, which puts every tap below the array.
    for (int l = 0; l <= ORDER; ++l) {
      t.off[l] = 0;
      t.cval[l] = mode == InterpMode::grid_constant;
    }
    t.any_cval = mode == InterpMode::grid_constant;
    knot = fast_floor((ORDER & 1) ? cc : cc + 0.5);
  }
  if constexpr (ORDER > 0) spline_weights_at<ORDER>(cc - knot, t.w);
  else t.w[0] = 1.0;
  return true;
}

// Sum over the taps in scipy's order and with scipy's roundings: tap by tap in C order, each
// value times the weights of axes 0, 1, ... in turn, added to the total. Summing separably
// would be a little faster but rounds differently, and integer outputs then differ by one
// wherever a value lands on .5 (integer data at half-sample points does).
// The taps of axis d for a point are t[d * ts] (ts = kGroup: the group layout below).
template <typename T, int ORDER>
inline double gather(const T* p, const Taps* t, int ts, int nd) {
  if constexpr (ORDER == 0) {
    std::int64_t o = 0;
    for (int d = 0; d < nd; ++d) o += t[d * ts].off[0];
    return static_cast<double>(p[o]);
  } else {
    double sum = 0.0;
    int f[64] = {};
    for (;;) {
      std::int64_t o = 0;
      for (int d = 0; d < nd; ++d) o += t[d * ts].off[f[d]];
      double coeff = static_cast<double>(p[o]);
      for (int d = 0; d < nd; ++d) coeff *= t[d * ts].w[f[d]];
      sum += coeff;
      int d = nd - 1;
      while (d >= 0 && f[d] == ORDER) f[d--] = 0;
      if (d < 0) break;
      ++f[d];
    }
    return sum;
  }
}

// G points at once (G <= kGroup), 2-D or 3-D, each summed exactly as gather() sums it; the taps
// of axis d for point g are t[d * kGroup + g].
template <typename T, int ORDER, int ND, int G = kGroup>
inline void gather_group(const T* p, const Taps* t, double* res) {
  double sum[G] = {};
  if constexpr (ND == 3) {
    for (int a = 0; a <= ORDER; ++a)
      for (int b = 0; b <= ORDER; ++b)
        for (int c = 0; c <= ORDER; ++c)
          for (int g = 0; g < G; ++g) {
            const Taps& t0 = t[g];
            const Taps& t1 = t[kGroup + g];
            const Taps& t2 = t[2 * kGroup + g];
            sum[g] += static_cast<double>(p[t0.off[a] + t1.off[b] + t2.off[c]]) * t0.w[a] *
                      t1.w[b] * t2.w[c];
          }
  } else {
    for (int a = 0; a <= ORDER; ++a)
      for (int b = 0; b <= ORDER; ++b)
        for (int g = 0; g < G; ++g) {
          const Taps& t0 = t[g];
          const Taps& t1 = t[kGroup + g];
          sum[g] += static_cast<double>(p[t0.off[a] + t1.off[b]]) * t0.w[a] * t1.w[b];
        }
  }
  for (int g = 0; g < G; ++g) res[g] = sum[g];
}

// Tap by tap, in scipy's order, with cval for the taps beyond a grid-constant edge.
template <typename T, int ORDER>
double gather_with_cval(const T* p, const Taps* t, int ts, int nd, double cval) {
  int f[64] = {};
  double sum = 0.0;
  for (;;) {
    bool is_cval = false;
    std::int64_t o = 0;
    for (int d = 0; d < nd; ++d) {
      is_cval |= t[d * ts].cval[f[d]];
      o += t[d * ts].off[f[d]];
    }
    double coeff = is_cval ? cval : static_cast<double>(p[o]);
    if constexpr (ORDER > 0)
      for (int d = 0; d < nd; ++d) coeff *= t[d * ts].w[f[d]];
    sum += coeff;
    int d = nd - 1;
    while (d >= 0 && f[d] == ORDER) f[d--] = 0;
    if (d < 0) break;
    ++f[d];
  }
  return sum;
}

// The scalar evaluation, for every point: n points whose coordinate along axis d is at
// coords[d * cs + k]. taps: room for nd * kGroup entries (axis d of group slot g at
// taps[d * kGroup + g]).
template <typename T, int ORDER>
void eval_scalar(const Plan& plan, const double* coords, std::int64_t cs, std::int64_t n,
                 Taps* taps, double* out) {
  const T* base = static_cast<const T*>(plan.data);
  const int nd = plan.nd;
  std::int64_t pending[kGroup];
  int np = 0;
  for (std::int64_t k = 0; k < n; ++k) {
    Taps* slot = taps + np;
    bool inside = true, any_cval = false;
    for (int d = 0; d < nd; ++d) {
      if (!setup_axis<ORDER>(coords[d * cs + k] + plan.npad, plan.shape[d], plan.strides[d],
                             plan.mode, plan.tmode, slot[d * kGroup])) {
        inside = false;
        break;
      }
      any_cval |= slot[d * kGroup].any_cval;
    }
    if (!inside) {
      out[k] = plan.cval;
    } else if (any_cval) {
      out[k] = gather_with_cval<T, ORDER>(base, slot, kGroup, nd, plan.cval);
    } else if (ORDER == 0 || (nd != 2 && nd != 3)) {
      out[k] = gather<T, ORDER>(base, slot, kGroup, nd);
    } else {
      pending[np++] = k;
      if (np == kGroup) {
        double r[kGroup];
        if (nd == 3) gather_group<T, ORDER, 3>(base, taps, r);
        else gather_group<T, ORDER, 2>(base, taps, r);
        for (int g = 0; g < kGroup; ++g) out[pending[g]] = r[g];
        np = 0;
      }
    }
  }
  for (int g = 0; g < np; ++g) {
    if (ORDER > 0 && nd == 3) gather_group<T, ORDER, 3, 1>(base, taps + g, out + pending[g]);
    else if (ORDER > 0 && nd == 2) gather_group<T, ORDER, 2, 1>(base, taps + g, out + pending[g]);
    else out[pending[g]] = gather<T, ORDER>(base, taps + g, kGroup, nd);
  }
}

template <typename T, int ORDER>
void eval_points(const Plan& plan, const double* coords, std::int64_t cs, std::int64_t n,
                 Taps* taps, double* out) {
  eval_scalar<T, ORDER>(plan, coords, cs, n, taps, out);
}

#if VOXPIPE_RESAMPLE_AVX2
// --------------------------------------------------------------------------------------------
// The same evaluation, four points at a time in AVX2 lanes (point g in lane g). Each lane does
// the scalar path's operations in the scalar path's order (no FMA: the target is "avx2" alone
// and the build passes -ffp-contract=off), so the values are bit-identical; what changes is
// that the per-axis setup (floor, weights with their divisions) and the 3 products and the sum
// per tap run for four points per instruction, and that the sums of several groups hide each
// other's latency. A point's value is kept from this path only when all its taps lie inside
// the array, where no mode changes the coordinate or a tap (setup_axis); the group's other
// points, and the n % 4 points left at the end, are evaluated on the scalar path.
// --------------------------------------------------------------------------------------------
using v4d = double __attribute__((vector_size(32)));
using v4l = std::int64_t __attribute__((vector_size(32)));

#define VOXPIPE_AVX2 __attribute__((target("avx2")))

// The values of the four points at tap offset r from their bases, as float64.
template <typename T>
__attribute__((target("avx2"), always_inline)) inline v4d load4(const T* p, const std::int64_t* base,
                                                      std::int64_t r) {
  return v4d{static_cast<double>(p[base[0] + r]), static_cast<double>(p[base[1] + r]),
             static_cast<double>(p[base[2] + r]), static_cast<double>(p[base[3] + r])};
}

// v[c][l] = p[base[l] + r + c] for c = 0, 1: two adjacent elements per point, as float64.
template <typename T>
__attribute__((target("avx2"), always_inline)) inline void load_pairs(const T* p,
                                                                      const std::int64_t* base,
                                                                      std::int64_t r, v4d* v) {
  if constexpr (std::is_same_v<T, double>) {
    const __m256d a = _mm256_set_m128d(_mm_loadu_pd(p + base[2] + r), _mm_loadu_pd(p + base[0] + r));
    const __m256d b = _mm256_set_m128d(_mm_loadu_pd(p + base[3] + r), _mm_loadu_pd(p + base[1] + r));
    v[0] = (v4d)_mm256_unpacklo_pd(a, b);
    v[1] = (v4d)_mm256_unpackhi_pd(a, b);
  } else {
    auto pair = [&](int l) {  // 8 bytes at 4-byte alignment: memcpy, not a double load
      double two;
      std::memcpy(&two, p + base[l] + r, sizeof two);
      return _mm_castpd_ps(_mm_set_sd(two));
    };
    const __m128 lo = _mm_movelh_ps(pair(0), pair(1));  // p0c0 p0c1 p1c0 p1c1
    const __m128 hi = _mm_movelh_ps(pair(2), pair(3));
    v[0] = (v4d)_mm256_cvtps_pd(_mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)));
    v[1] = (v4d)_mm256_cvtps_pd(_mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
  }
}

// One group's weights and first-tap offsets (setup_group).
template <int ORDER, int ND>
struct Group {
  v4d w[ND][ORDER + 1];
  std::int64_t base[4];  // element offset of each point's first tap
};

// Which points the vector paths take: first taps in [lo, hi] along every axis, and, where the
// plan has a margin, coordinates inside [0, cmax] (beyond, modes other than grid-constant and
// nearest move the coordinate itself, which only the scalar path does). The AVX-512 path
// broadcasts these where it compares; the AVX2 path keeps them broadcast (Bounds).
template <int ND>
struct Limits {
  double lo[ND], hi[ND], cmax[ND];
  bool margin = false;
};

template <int ORDER, int ND>
Limits<ND> limits_of(const Plan& plan) {
  Limits<ND> b;
  const double m = static_cast<double>(plan.margin);
  for (int d = 0; d < ND; ++d) {
    b.lo[d] = -m;
    b.hi[d] = static_cast<double>(plan.shape[d] - 1 - ORDER) + m;
    b.cmax[d] = static_cast<double>(plan.shape[d] - 1);
  }
  b.margin = plan.margin > 0;
  return b;
}

template <int ND>
struct Bounds {
  v4d lo[ND], hi[ND], cmax[ND];
  bool margin = false;
};

template <int ORDER, int ND>
Bounds<ND> bounds_of(const Plan& plan) {
  const Limits<ND> l = limits_of<ORDER, ND>(plan);
  Bounds<ND> b;
  for (int d = 0; d < ND; ++d) {
    b.lo[d] = v4d{} + l.lo[d];
    b.hi[d] = v4d{} + l.hi[d];
    b.cmax[d] = v4d{} + l.cmax[d];
  }
  b.margin = l.margin;
  return b;
}

// Every element offset a vector path forms (|offset| <= the sum of (shape + 2 * margin - 1) *
// |stride|) fits in an int32.
inline bool small_offsets(const Plan& plan) {
  double reach = 0;
  for (int d = 0; d < plan.nd; ++d)
    reach += static_cast<double>(plan.shape[d] + 2 * plan.margin) *
             std::fabs(static_cast<double>(plan.strides[d]));
  return reach < 2147483647.0;
}

// One group's setup: the weights and the first tap's offset of each point. Returns the mask of
// the points (bit l: point l) whose taps all lie in memory at their plain offsets (inside the
// array, or its margin); the others (outside, near an edge without a margin, NaN) get base 0,
// whose taps are inside too, and are evaluated again by the scalar path. EXACT = false: the
// fast mode's weights (spline_weights_at).
template <int ORDER, int ND, bool EXACT = true>
VOXPIPE_AVX2 inline int setup_group(const Plan& plan, const double* coords, std::int64_t cs,
                                    const Bounds<ND>& bounds, bool small, Group<ORDER, ND>& g) {
  const v4d npad = v4d{} + plan.npad;
  v4d start[ND];
  v4l ok = ~v4l{};
  for (int d = 0; d < ND; ++d) {
    v4d c;
    std::memcpy(&c, coords + d * cs, sizeof c);
    c = c + npad;
    const v4d knot = (v4d)_mm256_floor_pd((ORDER & 1) ? c : c + 0.5);
    start[d] = knot - static_cast<double>(ORDER / 2);
    ok &= (start[d] >= bounds.lo[d]) & (start[d] <= bounds.hi[d]);
    if (bounds.margin) ok &= (c >= v4d{}) & (c <= bounds.cmax[d]);
    spline_weights_at<ORDER, v4d, EXACT>(c - knot, g.w[d]);
  }
  const int mask = _mm256_movemask_pd((__m256d)ok);
  for (int d = 0; d < ND; ++d) start[d] = (v4d)_mm256_and_pd((__m256d)start[d], (__m256d)ok);
  if (small) {
    // Offsets below 2^31: summed exactly in doubles, converted four at a time.
    v4d off = start[0] * static_cast<double>(plan.strides[0]);
    for (int d = 1; d < ND; ++d) off += start[d] * static_cast<double>(plan.strides[d]);
    alignas(16) std::int32_t o[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(o), _mm256_cvttpd_epi32((__m256d)off));
    for (int l = 0; l < 4; ++l) g.base[l] = o[l];
    return mask;
  }
  for (int l = 0; l < 4; ++l) {
    g.base[l] = 0;
    for (int d = 0; d < ND; ++d)
      g.base[l] += static_cast<std::int64_t>(start[d][l]) * plan.strides[d];
  }
  return mask;
}

// The tap sums of NG groups, interleaved: each group's sum is one chain of dependent additions
// (64 for cubic in 3-D), so NG chains keep the adder busy while each waits on its latency.
// unit: the axis whose stride is 1, or -1.
template <typename T, int ORDER, int ND, int NG>
VOXPIPE_AVX2 inline void tap_sums(const T* p, const std::int64_t* stride, int unit,
                                  const Group<ORDER, ND>* g, double* out) {
  constexpr int K = ORDER + 1;
  v4d sum[NG] = {};
  if constexpr (ND == 3 && K == 2 && (std::is_same_v<T, double> || std::is_same_v<T, float>)) {
    if (unit == 0) {
      // Linear on a Fortran-ordered array (a NIfTI volume): the 2 taps along the first axis
      // are adjacent. All 8 taps are loaded first, then summed in C order as always.
      v4d v[NG][2][2][2];
      for (int q = 0; q < NG; ++q)
        for (int b = 0; b < 2; ++b)
          for (int c = 0; c < 2; ++c) {
            v4d pair[2];
            load_pairs(p, g[q].base, b * stride[1] + c * stride[2], pair);
            v[q][0][b][c] = pair[0];
            v[q][1][b][c] = pair[1];
          }
      for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b)
          for (int c = 0; c < 2; ++c)
            for (int q = 0; q < NG; ++q)
              sum[q] += v[q][a][b][c] * g[q].w[0][a] * g[q].w[1][b] * g[q].w[2][c];
      for (int q = 0; q < NG; ++q) std::memcpy(out + 4 * q, &sum[q], sizeof sum[q]);
      return;
    }
  }
  const bool contiguous = unit == ND - 1;
  if constexpr (ND == 3) {
    for (int a = 0; a < K; ++a)
      for (int b = 0; b < K; ++b) {
        const std::int64_t r = a * stride[0] + b * stride[1];
        if constexpr (std::is_same_v<T, double> && K == 4) {
          if (contiguous) {
            // The 4 taps along the last axis of each point are adjacent: two 128-bit loads per
            // point, then unpacks put tap c of the four points in one vector.
            v4d v[NG][4];
            for (int q = 0; q < NG; ++q) {
              // Halves of the four rows paired across 128-bit lanes as they are loaded (point 0
              // and 2, point 1 and 3), then one unpack per tap.
              const double* r0 = p + g[q].base[0] + r;
              const double* r1 = p + g[q].base[1] + r;
              const double* r2 = p + g[q].base[2] + r;
              const double* r3 = p + g[q].base[3] + r;
              const __m256d lo02 = _mm256_loadu2_m128d(r2, r0), lo13 = _mm256_loadu2_m128d(r3, r1);
              const __m256d hi02 = _mm256_loadu2_m128d(r2 + 2, r0 + 2);
              const __m256d hi13 = _mm256_loadu2_m128d(r3 + 2, r1 + 2);
              v[q][0] = (v4d)_mm256_unpacklo_pd(lo02, lo13);
              v[q][1] = (v4d)_mm256_unpackhi_pd(lo02, lo13);
              v[q][2] = (v4d)_mm256_unpacklo_pd(hi02, hi13);
              v[q][3] = (v4d)_mm256_unpackhi_pd(hi02, hi13);
            }
            for (int c = 0; c < K; ++c)
              for (int q = 0; q < NG; ++q)
                sum[q] += v[q][c] * g[q].w[0][a] * g[q].w[1][b] * g[q].w[2][c];
            continue;
          }
        }
        if constexpr ((std::is_same_v<T, double> || std::is_same_v<T, float>) && K == 2) {
          if (contiguous) {
            // Linear: the 2 taps along the last axis of each point are adjacent.
            v4d v[NG][2];
            for (int q = 0; q < NG; ++q) load_pairs(p, g[q].base, r, v[q]);
            for (int c = 0; c < K; ++c)
              for (int q = 0; q < NG; ++q)
                sum[q] += v[q][c] * g[q].w[0][a] * g[q].w[1][b] * g[q].w[2][c];
            continue;
          }
        }
        for (int c = 0; c < K; ++c)
          for (int q = 0; q < NG; ++q)
            sum[q] += load4(p, g[q].base, r + c * stride[2]) * g[q].w[0][a] * g[q].w[1][b] *
                      g[q].w[2][c];
      }
  } else {
    for (int a = 0; a < K; ++a)
      for (int b = 0; b < K; ++b)
        for (int q = 0; q < NG; ++q)
          sum[q] += load4(p, g[q].base, a * stride[0] + b * stride[1]) * g[q].w[0][a] *
                    g[q].w[1][b];
  }
  for (int q = 0; q < NG; ++q) std::memcpy(out + 4 * q, &sum[q], sizeof sum[q]);
}

// Groups interleaved per step: enough chains to cover the adder's latency.
constexpr int kInterleave = 3;

template <typename T, int ORDER, int ND>
VOXPIPE_AVX2 void eval_avx2(const Plan& plan, const double* coords, std::int64_t cs,
                            std::int64_t n, Taps* taps,
                            double* out) {
  const T* p = static_cast<const T*>(plan.data);
  const std::int64_t* stride = plan.strides.data();
  const Bounds<ND> bounds = bounds_of<ORDER, ND>(plan);
  // Along an axis of stride 1 the taps of a point are adjacent: the last axis of the float64
  // coefficients (C order) and of C-ordered inputs, the first of Fortran-ordered ones.
  const int unit = stride[ND - 1] == 1 ? ND - 1 : stride[0] == 1 ? 0 : -1;
  const bool small = small_offsets(plan);

  // Points whose taps are not all inside are redone one by one on the scalar path.
  auto redo = [&](int mask, std::int64_t k) {
    for (int l = 0; l < 4; ++l)
      if (!(mask >> l & 1)) eval_scalar<T, ORDER>(plan, coords + k + l, cs, 1, taps, out + k + l);
  };
  Group<ORDER, ND> g[kInterleave];
  std::int64_t k = 0;
  for (; k + 4 * kInterleave <= n; k += 4 * kInterleave) {
    int mask[kInterleave];
    bool all = true;
    for (int q = 0; q < kInterleave; ++q) {
      mask[q] = setup_group(plan, coords + k + 4 * q, cs, bounds, small, g[q]);
      all &= mask[q] == 0xF;
    }
    if (all) {
      tap_sums<T, ORDER, ND, kInterleave>(p, stride, unit, g, out + k);
      continue;
    }
    for (int q = 0; q < kInterleave; ++q) {
      const std::int64_t kq = k + 4 * q;
      if (mask[q]) tap_sums<T, ORDER, ND, 1>(p, stride, unit, &g[q], out + kq);
      redo(mask[q], kq);
    }
  }
  for (; k + 4 <= n; k += 4) {
    const int mask = setup_group(plan, coords + k, cs, bounds, small, g[0]);
    if (mask) tap_sums<T, ORDER, ND, 1>(p, stride, unit, g, out + k);
    redo(mask, k);
  }
  if (k < n) eval_scalar<T, ORDER>(plan, coords + k, cs, n - k, taps, out + k);
}

// --------------------------------------------------------------------------------------------
// The fast mode (InterpOptions::fast), orders 3 to 5 on float64 or float32 data with an axis of
// stride 1: the taps are summed separably, with fused multiply-adds. Along the unit axis a
// point's order + 1 taps are adjacent, so each "row" of them is one or two vector loads; the
// rows are weighted by the product of the other axes' weights and accumulated, then the row
// sum is dotted with the unit axis' weights. For cubic in 3-D that is 16 row loads and 16
// multiply-adds per point instead of 64 taps times 3 products and a sum; the weights multiply
// by reciprocals where scipy divides. Values are within a few ulps of the exact path (of the
// order of 1e-15 of the data range), and integer outputs can differ by one where a value lies
// within that of a half. Points the vector paths do not take get the exact scalar path. Order
// 2 is left exact: its 27 taps cost no more than the separable sum's rows of 3.
// --------------------------------------------------------------------------------------------
#define VOXPIPE_AVX2_FMA __attribute__((target("avx2,fma")))

// The row of K adjacent taps at p as W = ceil(K / 4) vectors of float64, zero beyond K (nothing
// past the row is read).
template <typename T, int K>
__attribute__((target("avx2,fma"), always_inline)) inline void load_row(const T* p, __m256d* v) {
  constexpr int W = (K + 3) / 4;
  for (int w = 0; w < W; ++w) {
    constexpr int full = K / 4;
    const int left = K - 4 * w;  // taps in this vector
    if constexpr (std::is_same_v<T, double>) {
      // The tail by 128- and 64-bit loads, zero-extended (cheaper than a masked load here).
      if (w < full) v[w] = _mm256_loadu_pd(p + 4 * w);
      else if (left == 1) v[w] = _mm256_zextpd128_pd256(_mm_load_sd(p + 4 * w));
      else if (left == 2) v[w] = _mm256_zextpd128_pd256(_mm_loadu_pd(p + 4 * w));
      else v[w] = _mm256_insertf128_pd(_mm256_zextpd128_pd256(_mm_loadu_pd(p + 4 * w)),
                                       _mm_load_sd(p + 4 * w + 2), 1);
    } else {
      if (w < full) {
        v[w] = _mm256_cvtps_pd(_mm_loadu_ps(p + 4 * w));
      } else {
        const __m128i m = _mm_setr_epi32(left > 0 ? -1 : 0, left > 1 ? -1 : 0, left > 2 ? -1 : 0, 0);
        v[w] = _mm256_cvtps_pd(_mm_maskload_ps(p + 4 * w, m));
      }
    }
  }
}

template <typename T, int ORDER, int ND>
VOXPIPE_AVX2_FMA void eval_fast(const Plan& plan, const double* coords, std::int64_t cs,
                                std::int64_t n, Taps* taps,
                                double* out) {
  constexpr int K = ORDER + 1;
  constexpr int W = (K + 3) / 4;
  constexpr int R = ND == 3 ? K * K : K;  // rows of taps along the unit axis
  const T* p = static_cast<const T*>(plan.data);
  const std::int64_t* stride = plan.strides.data();
  const int u = stride[ND - 1] == 1 ? ND - 1 : 0;  // pick_kernel checked that one of them is
  int other[2] = {0, 0};                           // the other axes, ascending
  for (int d = 0, o = 0; d < ND; ++d)
    if (d != u) other[o++] = d;
  std::int64_t roff[R];
  for (int i = 0; i < K; ++i) {
    if constexpr (ND == 3) {
      for (int j = 0; j < K; ++j) roff[i * K + j] = i * stride[other[0]] + j * stride[other[1]];
    } else {
      roff[i] = i * stride[other[0]];
    }
  }
  const Bounds<ND> bounds = bounds_of<ORDER, ND>(plan);
  const bool small = small_offsets(plan);

  Group<ORDER, ND> g;
  std::int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    const int mask = setup_group<ORDER, ND, false>(plan, coords + k, cs, bounds, small, g);
    if (mask) {
      // Row weights, lane l for point l: the product of the other axes' weights.
      alignas(32) double wr[R][4];
      for (int i = 0; i < K; ++i) {
        if constexpr (ND == 3) {
          for (int j = 0; j < K; ++j) {
            const v4d w = g.w[other[0]][i] * g.w[other[1]][j];
            std::memcpy(wr[i * K + j], &w, sizeof w);
          }
        } else {
          std::memcpy(wr[i], &g.w[other[0]][i], sizeof(v4d));
        }
      }
      // Two accumulators per point (even and odd rows): eight independent chains of
      // multiply-adds. The loops unroll completely, so the accumulators stay in registers.
      __m256d acc[4][2][W];
#pragma GCC unroll 4
      for (int l = 0; l < 4; ++l)
        for (int h = 0; h < 2; ++h)
          for (int w = 0; w < W; ++w) acc[l][h][w] = _mm256_setzero_pd();
#pragma GCC unroll 36
      for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
        for (int l = 0; l < 4; ++l) {
          __m256d v[W];
          load_row<T, K>(p + g.base[l] + roff[r], v);
          const __m256d wb = _mm256_broadcast_sd(&wr[r][l]);
          for (int w = 0; w < W; ++w) acc[l][r & 1][w] = _mm256_fmadd_pd(v[w], wb, acc[l][r & 1][w]);
        }
      }
      // Dot each point's row sum with its unit-axis weights, then add across the vector.
      alignas(32) double wu[4][4 * W] = {};
      for (int c = 0; c < K; ++c)
        for (int l = 0; l < 4; ++l) wu[l][c] = g.w[u][c][l];
      __m256d t[4];
      for (int l = 0; l < 4; ++l) {
        t[l] = _mm256_mul_pd(_mm256_add_pd(acc[l][0][0], acc[l][1][0]), _mm256_load_pd(wu[l]));
        for (int w = 1; w < W; ++w)
          t[l] = _mm256_fmadd_pd(_mm256_add_pd(acc[l][0][w], acc[l][1][w]),
                                 _mm256_load_pd(wu[l] + 4 * w), t[l]);
      }
      const __m256d t01 = _mm256_hadd_pd(t[0], t[1]);  // p0 c01, p1 c01, p0 c23, p1 c23
      const __m256d t23 = _mm256_hadd_pd(t[2], t[3]);
      const __m256d res = _mm256_add_pd(_mm256_permute2f128_pd(t01, t23, 0x20),
                                        _mm256_permute2f128_pd(t01, t23, 0x31));
      _mm256_storeu_pd(out + k, res);
    }
    for (int l = 0; l < 4; ++l)
      if (!(mask >> l & 1)) eval_scalar<T, ORDER>(plan, coords + k + l, cs, 1, taps, out + k + l);
  }
  if (k < n) eval_scalar<T, ORDER>(plan, coords + k, cs, n - k, taps, out + k);
}

// --------------------------------------------------------------------------------------------
// The exact evaluation again, eight points at a time in AVX-512 lanes (point l in lane l), at the
// avx512 level, for float64 or float32 data stored contiguously along the last axis (the
// coefficients of the prefilter always are, and so are C-ordered inputs). Each lane does the
// scalar path's operations in the scalar path's order, as in eval_avx2 (no FMA: the target has
// none that GCC may use under -ffp-contract=off, and the tests compare every level with the
// scalar one bit for bit). What it adds over eval_avx2:
// - the order + 1 taps of a point along the last axis are adjacent, so they are loaded as one
//   row per point (masked, never past the row) and eight rows are transposed into per-tap
//   vectors by shuffles, where eval_avx2 loads every tap of every point on its own (but for
//   cubic on float64 and linear); measured on bench_resample.py's rotation (96x96x60, one
//   thread, AMD EPYC Zen 4, evaluation and coordinates only): 0.50-0.65 of eval_avx2's time
//   for orders 1 to 5, 0.50-0.58 for cubic;
// - 32 vector registers: the interleaved sums and the weights stay in registers (the inner
//   loops unrolled, the 16 rows of cubic not: unrolled they took 1.2 times as long);
// - points outside in mode constant get cval in their lanes, without the scalar path;
// - the tail of n % 8 points and the points of a group that an edge excludes are masked lanes
//   (masked coordinate loads and stores), so only the excluded points take the scalar path.
// --------------------------------------------------------------------------------------------
using v8d = double __attribute__((vector_size(64)));

#define VOXPIPE_AVX512 __attribute__((target("avx2,avx512f,avx512bw,avx512dq,avx512vl")))

// Rows of kb <= 4 adjacent elements, as float64 in the low kb lanes of a 256-bit vector (zero
// above); nothing past the row is read.
template <typename T>
__attribute__((target("avx2,avx512f,avx512bw,avx512dq,avx512vl"), always_inline)) inline __m256d
load_row4(const T* p, int kb) {
  if constexpr (std::is_same_v<T, double>) {
    if (kb == 4) return _mm256_loadu_pd(p);
    return _mm256_maskz_loadu_pd(static_cast<__mmask8>((1u << kb) - 1), p);
  } else {
    if (kb == 4) return _mm256_cvtps_pd(_mm_loadu_ps(p));
    return _mm256_cvtps_pd(_mm_maskz_loadu_ps(static_cast<__mmask8>((1u << kb) - 1), p));
  }
}

// Rows lo and hi in the low and high 256 bits. (The maskz forms here and below: GCC 12's plain
// forms warn of an uninitialised operand.)
template <typename T>
__attribute__((target("avx2,avx512f,avx512bw,avx512dq,avx512vl"), always_inline)) inline __m512d
load_row_pair(const T* lo, const T* hi, int kb) {
  return _mm512_maskz_insertf64x4(0xFF, _mm512_castpd256_pd512(load_row4(lo, kb)),
                                  load_row4(hi, kb), 1);
}

// v[c][l] = p[base[l] + r + c] for c < kb <= 4, as float64: the eight rows loaded and transposed
// (rows 0|2, 1|3, 4|6, 5|7 paired in the 256-bit halves, then unpacks and 128-bit shuffles).
template <typename T>
__attribute__((target("avx2,avx512f,avx512bw,avx512dq,avx512vl"), always_inline)) inline void
load_taps8(const T* p, const std::int64_t* base, std::int64_t r, int kb, v8d* v) {
  const __m512d z0 = load_row_pair(p + base[0] + r, p + base[2] + r, kb);
  const __m512d z1 = load_row_pair(p + base[1] + r, p + base[3] + r, kb);
  const __m512d z2 = load_row_pair(p + base[4] + r, p + base[6] + r, kb);
  const __m512d z3 = load_row_pair(p + base[5] + r, p + base[7] + r, kb);
  // 128-bit lanes of lo01: (r0c0 r1c0) (r0c2 r1c2) (r2c0 r3c0) (r2c2 r3c2); hi01 the odd taps.
  const __m512d lo01 = _mm512_maskz_unpacklo_pd(0xFF, z0, z1);
  const __m512d hi01 = _mm512_maskz_unpackhi_pd(0xFF, z0, z1);
  const __m512d lo45 = _mm512_maskz_unpacklo_pd(0xFF, z2, z3);
  const __m512d hi45 = _mm512_maskz_unpackhi_pd(0xFF, z2, z3);
  // 0x88: 128-bit lanes 0 and 2 of each operand; 0xDD: lanes 1 and 3.
  v[0] = (v8d)_mm512_maskz_shuffle_f64x2(0xFF, lo01, lo45, 0x88);
  if (kb > 1) v[1] = (v8d)_mm512_maskz_shuffle_f64x2(0xFF, hi01, hi45, 0x88);
  if (kb > 2) v[2] = (v8d)_mm512_maskz_shuffle_f64x2(0xFF, lo01, lo45, 0xDD);
  if (kb > 3) v[3] = (v8d)_mm512_maskz_shuffle_f64x2(0xFF, hi01, hi45, 0xDD);
}

// One group of eight points: weights and first-tap offsets (setup_group8).
template <int ORDER, int ND>
struct Group8 {
  v8d w[ND][ORDER + 1];
  alignas(64) std::int64_t base[8];
};

// The setup of the points `valid` (bit l: point l) of a group, as setup_group: returns the mask
// of those whose taps all lie in memory at their plain offsets. The other lanes get the first
// tap of one of those points (any read of theirs is a read of that point's), or 0 when there is
// none (then nothing is read). Coordinates of lanes outside `valid` are not read. `cval`: the
// points whose value is cval without a tap, as setup_axis finds (mode constant, a coordinate
// outside [0, n - 1] or NaN on some axis); none of them is in the mask returned.
template <int ORDER, int ND>
VOXPIPE_AVX512 inline unsigned setup_group8(const Plan& plan, const double* coords,
                                            std::int64_t cs, unsigned valid,
                                            const Limits<ND>& b, Group8<ORDER, ND>& g,
                                            unsigned& cval) {
  const __m512d npad = _mm512_set1_pd(plan.npad);
  __m512i start[ND];
  __mmask8 ok = static_cast<__mmask8>(valid), inside = ok;
  for (int d = 0; d < ND; ++d) {
    const __m512d c = _mm512_add_pd(
        valid == 0xFF ? _mm512_loadu_pd(coords + d * cs)
                      : _mm512_maskz_loadu_pd(static_cast<__mmask8>(valid), coords + d * cs),
        npad);
    const __m512d knot = _mm512_maskz_roundscale_pd(
        0xFF, (ORDER & 1) ? c : _mm512_add_pd(c, _mm512_set1_pd(0.5)),
        _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512d s = _mm512_sub_pd(knot, _mm512_set1_pd(static_cast<double>(ORDER / 2)));
    ok &= _mm512_cmp_pd_mask(s, _mm512_set1_pd(b.lo[d]), _CMP_GE_OQ) &
          _mm512_cmp_pd_mask(s, _mm512_set1_pd(b.hi[d]), _CMP_LE_OQ);
    inside &= _mm512_cmp_pd_mask(c, _mm512_setzero_pd(), _CMP_GE_OQ) &
              _mm512_cmp_pd_mask(c, _mm512_set1_pd(b.cmax[d]), _CMP_LE_OQ);
    // Exact for the lanes of ok (integers of the array's size); the others (NaN, huge) are
    // zeroed below before they make an offset.
    start[d] = _mm512_cvttpd_epi64(s);
    const v8d x = (v8d)_mm512_sub_pd(c, knot);
    spline_weights_at<ORDER, v8d, true>(x, g.w[d]);
  }
  if (b.margin) ok &= inside;
  // Without a margin the first taps' bounds already keep every point of `ok` inside.
  cval = plan.mode == InterpMode::constant ? valid & ~inside & 0xFFu : 0u;
  __m512i base = _mm512_setzero_si512();
  for (int d = 0; d < ND; ++d)
    base = _mm512_add_epi64(base, _mm512_mullo_epi64(_mm512_maskz_mov_epi64(ok, start[d]),
                                                     _mm512_set1_epi64(plan.strides[d])));
  if (ok != 0xFF && ok != 0) {
    // Lanes not ok read the taps of the first lane that is.
    const __m512i lane = _mm512_set1_epi64(__builtin_ctz(ok));
    const __m512i first = _mm512_maskz_permutexvar_epi64(0xFF, lane, base);
    base = _mm512_mask_mov_epi64(first, ok, base);
  }
  _mm512_store_si512(reinterpret_cast<__m512i*>(g.base), base);
  return ok;
}

// The tap sums of NG groups, interleaved as in tap_sums; stored to out[8 * q + l] for the lanes
// l of store[q]. The taps along the last axis (stride 1) come K at a time per point from
// load_taps8, in blocks of up to 4.
template <typename T, int ORDER, int ND, int NG>
VOXPIPE_AVX512 inline void tap_sums8(const T* p, const std::int64_t* stride,
                                     const Group8<ORDER, ND>* g, double* out,
                                     const unsigned* store) {
  constexpr int K = ORDER + 1;
  __m512d sum[NG];
  for (int q = 0; q < NG; ++q) sum[q] = _mm512_setzero_pd();
  constexpr int R = ND == 3 ? K * K : K;  // rows of K taps along the last axis
  for (int row = 0; row < R; ++row) {
    const int a = ND == 3 ? row / K : row, b = ND == 3 ? row % K : 0;
    const std::int64_t r = ND == 3 ? a * stride[0] + b * stride[1] : a * stride[0];
    v8d v[NG][K];
#pragma GCC unroll 4
    for (int q = 0; q < NG; ++q) {
      load_taps8(p, g[q].base, r, K < 4 ? K : 4, v[q]);
      if constexpr (K > 4) load_taps8(p, g[q].base, r + 4, K - 4, v[q] + 4);
    }
    if constexpr (ND == 3) {
#pragma GCC unroll 8
      for (int c = 0; c < K; ++c)
#pragma GCC unroll 4
        for (int q = 0; q < NG; ++q)
          sum[q] = (__m512d)((v8d)sum[q] +
                             v[q][c] * g[q].w[0][a] * g[q].w[1][b] * g[q].w[2][c]);
    } else {
#pragma GCC unroll 8
      for (int c = 0; c < K; ++c)
#pragma GCC unroll 4
        for (int q = 0; q < NG; ++q)
          sum[q] = (__m512d)((v8d)sum[q] + v[q][c] * g[q].w[0][a] * g[q].w[1][c]);
    }
  }
  for (int q = 0; q < NG; ++q) {
    if (store[q] == 0xFF) _mm512_storeu_pd(out + 8 * q, sum[q]);
    else _mm512_mask_storeu_pd(out + 8 * q, static_cast<__mmask8>(store[q]), sum[q]);
  }
}

template <typename T, int ORDER, int ND>
VOXPIPE_AVX512 void eval_avx512(const Plan& plan, const double* coords, std::int64_t cs,
                                std::int64_t n, Taps* taps, double* out) {
  const T* p = static_cast<const T*>(plan.data);
  const std::int64_t* stride = plan.strides.data();
  const Limits<ND> bounds = limits_of<ORDER, ND>(plan);
  const __m512d cval = _mm512_set1_pd(plan.cval);
  // The points of group q's lanes `valid` not done by its tap sums: cval where setup_group8
  // found it, the others one by one on the scalar path. (A lambda: not compiled for the
  // target, so the vector store is outside it.)
  unsigned ok[2], outside[2];
  auto finish = [&](int q, unsigned valid, std::int64_t k) {
    for (unsigned left = valid & ~ok[q] & ~outside[q]; left; left &= left - 1) {
      const int l = __builtin_ctz(left);
      eval_scalar<T, ORDER>(plan, coords + k + l, cs, 1, taps, out + k + l);
    }
  };
  Group8<ORDER, ND> g[2];
  std::int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    ok[0] = setup_group8(plan, coords + k, cs, 0xFF, bounds, g[0], outside[0]);
    ok[1] = setup_group8(plan, coords + k + 8, cs, 0xFF, bounds, g[1], outside[1]);
    if (ok[0] && ok[1]) tap_sums8<T, ORDER, ND, 2>(p, stride, g, out + k, ok);
    else if (ok[0]) tap_sums8<T, ORDER, ND, 1>(p, stride, &g[0], out + k, &ok[0]);
    else if (ok[1]) tap_sums8<T, ORDER, ND, 1>(p, stride, &g[1], out + k + 8, &ok[1]);
    if ((ok[0] & ok[1]) != 0xFF) {
      for (int q = 0; q < 2; ++q)
        if (outside[q])
          _mm512_mask_storeu_pd(out + k + 8 * q, static_cast<__mmask8>(outside[q]), cval);
      finish(0, 0xFF, k);
      finish(1, 0xFF, k + 8);
    }
  }
  for (; k < n; k += 8) {
    const unsigned valid = n - k >= 8 ? 0xFFu : (1u << (n - k)) - 1;
    ok[0] = setup_group8(plan, coords + k, cs, valid, bounds, g[0], outside[0]);
    if (ok[0]) tap_sums8<T, ORDER, ND, 1>(p, stride, &g[0], out + k, &ok[0]);
    if (outside[0]) _mm512_mask_storeu_pd(out + k, static_cast<__mmask8>(outside[0]), cval);
    finish(0, valid, k);
  }
}

inline bool use_avx512() { return core::simd_level() >= core::SimdLevel::avx512; }

// The AVX2 paths run at the avx2 and avx512 levels, eval_avx512 at avx512 (core/simd.hpp: the
// level is never above what the CPU has).
inline bool use_avx2() { return core::simd_level() >= core::SimdLevel::avx2; }

inline bool cpu_has_fma() { return core::cpu_has_avx2_fma(); }
#endif

template <typename T, int ORDER>
EvalFn pick_kernel(const Plan& plan) {
  [[maybe_unused]] const int nd = plan.nd;
#if VOXPIPE_RESAMPLE_AVX2
  if constexpr (ORDER >= 3 && (std::is_same_v<T, double> || std::is_same_v<T, float>)) {
    const bool unit = plan.strides[nd - 1] == 1 || plan.strides[0] == 1;
    if (plan.fast && unit && use_avx2() && cpu_has_fma() && nd == 3) return eval_fast<T, ORDER, 3>;
    if (plan.fast && unit && use_avx2() && cpu_has_fma() && nd == 2) return eval_fast<T, ORDER, 2>;
  }
  if constexpr (ORDER > 0 && (std::is_same_v<T, double> || std::is_same_v<T, float>)) {
    if (use_avx512() && plan.strides[nd - 1] == 1 && nd == 3) return eval_avx512<T, ORDER, 3>;
    if (use_avx512() && plan.strides[nd - 1] == 1 && nd == 2) return eval_avx512<T, ORDER, 2>;
  }
  if constexpr (ORDER > 0) {
    if (use_avx2() && nd == 3) return eval_avx2<T, ORDER, 3>;
    if (use_avx2() && nd == 2) return eval_avx2<T, ORDER, 2>;
  }
#endif
  return eval_points<T, ORDER>;
}

// The kernel for element type plan.dtype at order ORDER.
template <int ORDER>
EvalFn pick_dtype(const Plan& plan) {
  EvalFn eval = nullptr;
  with_real_type(plan.dtype, [&](auto v) { eval = pick_kernel<decltype(v), ORDER>(plan); });
  return eval;
}

}  // namespace
}  // namespace voxpipe::resample::kernel
