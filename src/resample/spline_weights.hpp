// The B-spline interpolation weights of orders 1 to 5, as scipy.ndimage computes them
// (ni_splines.c, get_spline_interpolation_weights), written once for a scalar double and for a
// vector of doubles (GCC vector extension): every operation and its order is scipy's, so each
// lane of the vector form rounds exactly as the scalar form does.
#pragma once

namespace voxpipe::resample {

// w[0..ORDER] for x, the offset of the coordinate from its central knot (x - floor(x) for odd
// orders, x - floor(x + 0.5) for even ones). The last weight is 1 minus the others, so that the
// weights sum to 1 up to one rounding. V is double or a GCC vector of doubles; taken by
// reference so that no vector is passed by value across an ABI boundary.
// EXACT = false: the fast mode's weights, which multiply by the reciprocal of 6, 12, 24 or 120
// instead of dividing (a rounding apart, and cheaper than a vector division). A macro rather
// than a helper: no vector is returned by value from a function compiled without AVX.
#define VOXPIPE_OVER(v, c) (EXACT ? (v) / (c) : (v) * (1.0 / (c)))
template <int ORDER, typename V, bool EXACT = true>
[[gnu::always_inline]] inline void spline_weights_at(const V& x, V* w) {
  const V one = V{} + 1.0;
  V y = x, z = one - x, t;
  if constexpr (ORDER == 1) {
    w[0] = one - x;
  } else if constexpr (ORDER == 2) {
    w[1] = 0.75 - x * x;
    y = 0.5 - x;
    w[0] = 0.5 * y * y;
  } else if constexpr (ORDER == 3) {
    w[1] = VOXPIPE_OVER(y * y * (y - 2.0) * 3.0 + 4.0, 6.0);
    w[2] = VOXPIPE_OVER(z * z * (z - 2.0) * 3.0 + 4.0, 6.0);
    w[0] = VOXPIPE_OVER(z * z * z, 6.0);
  } else if constexpr (ORDER == 4) {
    t = x * x;
    w[2] = t * (t * 0.25 - 0.625) + 115.0 / 192.0;
    y = 1.0 + x;
    w[1] = y * (y * (VOXPIPE_OVER(y * (5.0 - y), 6.0) - 1.25) + 5.0 / 24.0) + 55.0 / 96.0;
    w[3] = z * (z * (VOXPIPE_OVER(z * (5.0 - z), 6.0) - 1.25) + 5.0 / 24.0) + 55.0 / 96.0;
    t = 0.5 - x;
    t *= t;
    w[0] = VOXPIPE_OVER(t * t, 24.0);
  } else if constexpr (ORDER == 5) {
    t = y * y;
    w[2] = t * (t * (0.25 - VOXPIPE_OVER(y, 12.0)) - 0.5) + 0.55;
    t = z * z;
    w[3] = t * (t * (0.25 - VOXPIPE_OVER(z, 12.0)) - 0.5) + 0.55;
    y += 1.0;
    w[1] = y * (y * (y * (y * (VOXPIPE_OVER(y, 24.0) - 0.375) + 1.25) - 1.75) + 0.625) + 0.425;
    z += 1.0;
    w[4] = z * (z * (z * (z * (VOXPIPE_OVER(z, 24.0) - 0.375) + 1.25) - 1.75) + 0.625) + 0.425;
    y = one - x;
    t = y * y;
    w[0] = VOXPIPE_OVER(y * t * t, 120.0);
  }
  w[ORDER] = one;
  for (int i = 0; i < ORDER; ++i) w[ORDER] -= w[i];
}

#undef VOXPIPE_OVER

}  // namespace voxpipe::resample
