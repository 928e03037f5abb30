// Boundary handling of the interpolation kernel: where a coordinate outside the input goes, and
// which sample a spline tap beyond the edge reads. Both follow scipy.ndimage's C code
// (ni_interpolation.c, scipy >= 1.6) operation for operation, because the modes differ exactly
// at the edges, where a different rounding or comparison changes the answer.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "voxpipe/resample.hpp"

namespace voxpipe::resample {

// Coordinates beyond this are treated like NaN (scipy converts them to a 64-bit index, which is
// undefined behaviour there); 2^62 leaves room for the tap arithmetic below.
inline constexpr double kMaxCoordinate = 4611686018427387904.0;

// The coordinate a point maps to inside [0, n-1] for the modes that fold coordinates (mirror,
// reflect, wrap, grid-wrap, nearest), or -1 for constant outside [0, n-1]. NaN stays NaN (and
// so gives cval: callers test `mapped > -1`). Not called for grid-constant and nearest, whose
// taps handle the outside themselves.
inline double map_coordinate(double in, std::int64_t len, InterpMode mode) {
  if (!(std::fabs(in) < kMaxCoordinate)) return std::numeric_limits<double>::quiet_NaN();
  // Truncation toward zero, as scipy's (npy_intp) casts of a double.
  auto trunc = [](double v) { return static_cast<double>(static_cast<std::int64_t>(v)); };
  if (in < 0) {
    switch (mode) {
      case InterpMode::mirror:
        if (len <= 1) return 0;
        {
          const double sz2 = static_cast<double>(2 * len - 2);
          in = sz2 * trunc(-in / sz2) + in;
          return in <= static_cast<double>(1 - len) ? in + sz2 : -in;
        }
      case InterpMode::reflect:
        if (len <= 1) return 0;
        {
          const double sz2 = static_cast<double>(2 * len);
          if (in < -sz2) in = sz2 * trunc(-in / sz2) + in;
          return in < static_cast<double>(-len) ? in + sz2 : -in - 1;
        }
      case InterpMode::wrap:
        if (len <= 1) return 0;
        {
          const double sz = static_cast<double>(len - 1);
          return in + sz * (trunc(-in / sz) + 1);
        }
      case InterpMode::grid_wrap:
        if (len <= 1) return 0;
        return in + static_cast<double>(len) * (trunc((-1 - in) / static_cast<double>(len)) + 1);
      case InterpMode::nearest: return 0;
      case InterpMode::constant:
      case InterpMode::grid_constant: return -1;
    }
  } else if (in > static_cast<double>(len - 1)) {
    switch (mode) {
      case InterpMode::mirror:
        if (len <= 1) return 0;
        {
          const double sz2 = static_cast<double>(2 * len - 2);
          in -= sz2 * trunc(in / sz2);
          return in >= static_cast<double>(len) ? sz2 - in : in;
        }
      case InterpMode::reflect:
        if (len <= 1) return 0;
        {
          const double sz2 = static_cast<double>(2 * len);
          in -= sz2 * trunc(in / sz2);
          return in >= static_cast<double>(len) ? sz2 - in - 1 : in;
        }
      case InterpMode::wrap:
        if (len <= 1) return 0;
        {
          const double sz = static_cast<double>(len - 1);
          return in - sz * trunc(in / sz);
        }
      case InterpMode::grid_wrap:
        if (len <= 1) return 0;
        return in - static_cast<double>(len) * trunc(in / static_cast<double>(len));
      case InterpMode::nearest: return static_cast<double>(len - 1);
      case InterpMode::constant:
      case InterpMode::grid_constant: return -1;
    }
  }
  return in;
}

// The mode spline taps beyond the edge use: scipy extends the coefficients of constant and wrap
// by mirroring ("modes without an analytic prefilter or explicit prepadding use mirror
// extension"); the other modes extend as they map coordinates.
inline InterpMode tap_mode(InterpMode mode) {
  return mode == InterpMode::constant || mode == InterpMode::wrap ? InterpMode::mirror : mode;
}

// The sample a tap at integer index idx (outside [0, len-1]) reads under tap mode `mode`, or -1
// for a tap that reads cval (grid-constant). Integer form of map_coordinate; the result is
// clamped into the array as a last guard, which none of scipy's reachable cases needs.
inline std::int64_t map_tap(std::int64_t idx, std::int64_t len, InterpMode mode) {
  if (len <= 1) return mode == InterpMode::grid_constant && idx != 0 ? -1 : 0;
  switch (mode) {
    case InterpMode::mirror: {
      const std::int64_t s2 = 2 * len - 2;
      if (idx < 0) {
        idx = s2 * (-idx / s2) + idx;
        idx = idx <= 1 - len ? idx + s2 : -idx;
      } else if (idx >= len) {
        idx -= s2 * (idx / s2);
        if (idx >= len) idx = s2 - idx;
      }
      break;
    }
    case InterpMode::reflect: {
      const std::int64_t s2 = 2 * len;
      if (idx < 0) {
        if (idx < -s2) idx = s2 * (-idx / s2) + idx;
        idx = idx < -len ? idx + s2 : -idx - 1;
      } else if (idx >= len) {
        idx -= s2 * (idx / s2);
        if (idx >= len) idx = s2 - idx - 1;
      }
      break;
    }
    case InterpMode::grid_wrap:
      if (idx < 0) {
        idx += len * ((-1 - idx) / len + 1);
      } else if (idx >= len) {
        idx -= len * (idx / len);
      }
      break;
    case InterpMode::nearest: idx = idx < 0 ? 0 : (idx >= len ? len - 1 : idx); break;
    case InterpMode::grid_constant: return idx < 0 || idx >= len ? -1 : idx;
    case InterpMode::constant:
    case InterpMode::wrap: break;  // never tap modes (tap_mode maps them to mirror)
  }
  return idx < 0 ? 0 : (idx >= len ? len - 1 : idx);
}

}  // namespace voxpipe::resample
