// The interpolation kernel and the two drivers, map_coordinates and affine_transform.
//
// Work is split by output rows (lines along the last output axis) cut into segments: for each
// segment a task makes the segment's coordinates (read from the caller's array, or generated
// from the affine), evaluates the spline at each, and stores the values with scipy's output
// rounding. Per point and axis the kernel finds the order + 1 taps and their weights exactly as
// scipy's NI_GeometricTransform does (boundary.hpp, bspline.hpp), then sums the taps separably:
// last axis first. The separable sum rounds differently from scipy's tap-by-tap products, by a
// few units in the last place; everything that decides *which* samples are read and with which
// weights is computed with scipy's operations in scipy's order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>

#include "core/checked.hpp"
#include "core/thread_pool.hpp"
#include "resample/boundary.hpp"
#include "resample/bspline.hpp"
#include "resample/dispatch.hpp"
#include "resample/interpolator.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/resample.hpp"

namespace voxpipe {

std::string_view interp_mode_name(InterpMode mode) noexcept {
  switch (mode) {
    case InterpMode::constant: return "constant";
    case InterpMode::grid_constant: return "grid-constant";
    case InterpMode::nearest: return "nearest";
    case InterpMode::reflect: return "reflect";
    case InterpMode::mirror: return "mirror";
    case InterpMode::wrap: return "wrap";
    case InterpMode::grid_wrap: return "grid-wrap";
  }
  return "unknown";
}

std::optional<InterpMode> interp_mode_from_name(std::string_view name) noexcept {
  if (name == "constant") return InterpMode::constant;
  if (name == "grid-constant") return InterpMode::grid_constant;
  if (name == "nearest") return InterpMode::nearest;
  if (name == "reflect" || name == "grid-mirror") return InterpMode::reflect;
  if (name == "mirror") return InterpMode::mirror;
  if (name == "wrap") return InterpMode::wrap;
  if (name == "grid-wrap") return InterpMode::grid_wrap;
  return std::nullopt;
}

namespace resample {
namespace {

// What the kernel reads: the spline coefficients (float64, C order, maybe padded) or the input
// itself (orders 0 and 1, or prefilter off).
struct Plan {
  const void* data = nullptr;
  DType dtype = DType::f64;
  int nd = 0;
  std::vector<std::int64_t> shape, strides;
  double npad = 0;
  int order = 3;
  InterpMode mode = InterpMode::constant;
  InterpMode tmode = InterpMode::mirror;
  double cval = 0;
};

// Taps of one axis for one point: element offsets (index times stride), weights, and which taps
// read cval (grid-constant beyond the input).
struct Taps {
  std::int64_t off[6];
  double w[6];
  bool cval[6];
  bool any_cval;
};

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
  if (std::fabs(cc) < kMaxCoordinate) {
    const std::int64_t start =
        static_cast<std::int64_t>(fast_floor((ORDER & 1) ? cc : cc + 0.5)) - ORDER / 2;
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
  }
  if constexpr (ORDER > 0) spline_weights(cc, ORDER, t.w);
  else t.w[0] = 1.0;
  return true;
}

// Sum over the taps in scipy's order and with scipy's roundings: tap by tap in C order, each
// value times the weights of axes 0, 1, ... in turn, added to the total. Summing separably
// would be a little faster but rounds differently, and integer outputs then differ by one
// wherever a value lands on .5 (integer data at half-sample points does).
// Points evaluated together: their sums are independent chains of additions, which the core
// overlaps; one point's 64 dependent additions (cubic, 3-D) otherwise wait on each other.
constexpr int kGroup = 4;

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

// kGroup points at once, 2-D or 3-D, each summed exactly as gather() sums it.
template <typename T, int ORDER, int ND>
inline void gather_group(const T* p, const Taps* t, double* res) {
  constexpr int G = kGroup;
  double sum[G] = {};
  if constexpr (ND == 3) {
    for (int a = 0; a <= ORDER; ++a)
      for (int b = 0; b <= ORDER; ++b)
        for (int c = 0; c <= ORDER; ++c)
          for (int g = 0; g < G; ++g) {
            const Taps& t0 = t[g];
            const Taps& t1 = t[G + g];
            const Taps& t2 = t[2 * G + g];
            sum[g] += static_cast<double>(p[t0.off[a] + t1.off[b] + t2.off[c]]) * t0.w[a] *
                      t1.w[b] * t2.w[c];
          }
  } else {
    for (int a = 0; a <= ORDER; ++a)
      for (int b = 0; b <= ORDER; ++b)
        for (int g = 0; g < G; ++g) {
          const Taps& t0 = t[g];
          const Taps& t1 = t[G + g];
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

// Values at n points; coordinate of point k along axis d at coords[d * n + k].
using EvalFn = void (*)(const Plan&, const double* coords, std::int64_t n, Taps* taps, double* out);

// taps: room for nd * kGroup entries (axis d of group slot g at taps[d * kGroup + g]).
template <typename T, int ORDER>
void eval_points(const Plan& plan, const double* coords, std::int64_t n, Taps* taps, double* out) {
  const T* base = static_cast<const T*>(plan.data);
  const int nd = plan.nd;
  std::int64_t pending[kGroup];
  int np = 0;
  for (std::int64_t k = 0; k < n; ++k) {
    Taps* slot = taps + np;
    bool inside = true, any_cval = false;
    for (int d = 0; d < nd; ++d) {
      if (!setup_axis<ORDER>(coords[d * n + k] + plan.npad, plan.shape[d], plan.strides[d],
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
  for (int g = 0; g < np; ++g) out[pending[g]] = gather<T, ORDER>(base, taps + g, kGroup, nd);
}

template <typename T>
EvalFn pick_order(int order) {
  switch (order) {
    case 0: return eval_points<T, 0>;
    case 1: return eval_points<T, 1>;
    case 2: return eval_points<T, 2>;
    case 3: return eval_points<T, 3>;
    case 4: return eval_points<T, 4>;
    default: return eval_points<T, 5>;
  }
}

// scipy's output conversion (CASE_INTERP_OUT*): floats cast; integers rounded half away from
// zero (unsigned: negatives to 0) and clipped to the type's range. NaN gives what scipy's
// conversion gives on x86-64: 0 for unsigned types, int8 and int16; the minimum for int32 and
// int64.
template <typename O>
inline O to_output(double t) {
  if constexpr (std::is_floating_point_v<O>) {
    return static_cast<O>(t);
  } else if constexpr (std::is_unsigned_v<O>) {
    t = t > 0 ? t + 0.5 : 0;
    constexpr double hi = static_cast<double>(std::numeric_limits<O>::max());
    if (t >= hi) return std::numeric_limits<O>::max();
    return static_cast<O>(t);
  } else {
    if (std::isnan(t)) return sizeof(O) >= 4 ? std::numeric_limits<O>::min() : O(0);
    t = t > 0 ? t + 0.5 : t - 0.5;
    constexpr double hi = static_cast<double>(std::numeric_limits<O>::max());
    constexpr double lo = static_cast<double>(std::numeric_limits<O>::min());
    if (t >= hi) return std::numeric_limits<O>::max();
    if (t <= lo) return std::numeric_limits<O>::min();
    return static_cast<O>(t);
  }
}

using StoreFn = void (*)(const double* v, std::int64_t n, void* out, std::int64_t stride);

template <typename O>
void store(const double* v, std::int64_t n, void* out, std::int64_t stride) {
  O* o = static_cast<O*>(out);
  for (std::int64_t k = 0; k < n; ++k) o[k * stride] = to_output<O>(v[k]);
}

[[noreturn]] void invalid(const std::string& field, const std::string& detail) {
  throw Error(ErrorCode::invalid_argument, "", field, detail);
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string r = "(";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

std::int64_t checked_size(const ArrayRef& a, const char* field) {
  if (a.shape.size() != a.strides.size())
    invalid(field, "expected one stride per axis, but received " + std::to_string(a.strides.size()) +
                       " strides for " + std::to_string(a.shape.size()) + " axes");
  std::uint64_t n = 1;
  for (auto d : a.shape) {
    if (d < 0) invalid(field, "expected non-negative dimensions, but received " + shape_str(a.shape));
    auto r = core::checked_mul(n, static_cast<std::uint64_t>(d));
    if (!r || *r > static_cast<std::uint64_t>(INT64_MAX))
      throw Error(ErrorCode::limit, "", field, "the size of shape " + shape_str(a.shape) + " overflows 64 bits");
    n = *r;
  }
  if (n > 0 && !a.data) invalid(field, "a non-empty array without data");
  return static_cast<std::int64_t>(n);
}

bool is_real(DType t) { return dtype_is_integer(t) || dtype_is_float(t); }

void check_common(const ArrayRef& input, const ArrayRef& output, const InterpOptions& o) {
  if (o.order < 0 || o.order > 5)
    invalid("order", "expected a spline order from 0 to 5, but received " + std::to_string(o.order));
  if (input.shape.empty()) invalid("input", "expected an array of at least one dimension, but received a 0-d one");
  if (output.shape.empty()) invalid("output", "expected an array of at least one dimension, but received a 0-d one");
  if (input.shape.size() > 64) invalid("input", "expected at most 64 dimensions");
  if (!is_real(input.dtype))
    invalid("input", "expected an integer or float array, but received " + std::string(dtype_name(input.dtype)));
  if (!is_real(output.dtype))
    invalid("output", "expected an integer or float dtype, but received " + std::string(dtype_name(output.dtype)));
  checked_size(output, "output");
  if (checked_size(input, "input") == 0 && checked_size(output, "output") > 0)
    invalid("input", "cannot interpolate from an empty array of shape " + shape_str(input.shape));
}

// Makes the plan: the coefficients (kept alive in `coeff`) or the input itself.
Plan make_plan(const ArrayRef& input, const InterpOptions& o, Coefficients& coeff) {
  Plan p;
  p.nd = static_cast<int>(input.shape.size());
  p.order = o.order;
  p.mode = o.mode;
  p.tmode = tap_mode(o.mode);
  p.cval = o.cval;
  if (o.prefilter && o.order > 1) {
    const double pad = o.pad_value ? *o.pad_value : cast_to_dtype(o.cval, input.dtype);
    coeff = spline_coefficients(input, o.order, o.mode, pad, o.threads);
    p.data = coeff.data.get();
    p.dtype = DType::f64;
    p.shape = coeff.shape;
    p.strides = coeff.strides;
    p.npad = static_cast<double>(coeff.npad);
  } else {
    p.data = input.data;
    p.dtype = input.dtype;
    p.shape = input.shape;
    p.strides = input.strides;
  }
  return p;
}

// Points per segment: the coordinate and value buffers of a segment (4 KiB per axis) stay in L1.
constexpr std::int64_t kSegment = 512;
// Segments per task: a few thousand points amortise the task's setup.
constexpr std::int64_t kMinPointsPerTask = 4096;

// Runs the plan over every output element. coords(row_index, k0, n, buf) writes the coordinates
// of the n points from k0 along the row `row_index` (output indices of all axes but the last)
// into buf[d * n + k].
template <typename CoordFn>
void run(const Plan& plan, const ArrayRef& output, unsigned threads, CoordFn&& coords) {
  const int ond = static_cast<int>(output.shape.size());
  const std::int64_t row_len = output.shape[ond - 1];
  std::int64_t rows = 1;
  for (int d = 0; d < ond - 1; ++d) rows *= output.shape[d];
  if (rows == 0 || row_len == 0) return;
  const std::int64_t per_row = (row_len + kSegment - 1) / kSegment;
  const std::int64_t segments = rows * per_row;

  EvalFn eval = nullptr;
  with_real_type(plan.dtype, [&](auto v) { eval = pick_order<decltype(v)>(plan.order); });
  StoreFn put = nullptr;
  with_real_type(output.dtype, [&](auto v) { put = store<decltype(v)>; });
  const std::int64_t esize = static_cast<std::int64_t>(dtype_size(output.dtype));

  const unsigned nthreads = threads ? threads : core::default_thread_count();
  const std::int64_t by_size = std::max<std::int64_t>(1, kMinPointsPerTask / std::min(kSegment, row_len));
  const std::int64_t by_threads = std::max<std::int64_t>(1, segments / (8 * static_cast<std::int64_t>(nthreads)));
  const std::int64_t per_task = std::min(by_size, by_threads);
  const auto tasks = static_cast<std::size_t>((segments + per_task - 1) / per_task);

  core::parallel_for(tasks, threads, [&](std::size_t task) {
    std::vector<double> buf(static_cast<std::size_t>(plan.nd * kSegment));
    std::vector<double> vals(static_cast<std::size_t>(kSegment));
    std::vector<Taps> taps(static_cast<std::size_t>(plan.nd * kGroup));
    std::vector<std::int64_t> row_index(static_cast<std::size_t>(std::max(ond - 1, 1)));
    const std::int64_t s0 = static_cast<std::int64_t>(task) * per_task;
    const std::int64_t s1 = std::min(segments, s0 + per_task);
    for (std::int64_t s = s0; s < s1; ++s) {
      const std::int64_t row = s / per_row;
      const std::int64_t k0 = (s % per_row) * kSegment;
      const std::int64_t n = std::min(kSegment, row_len - k0);
      std::int64_t rest = row, out_off = k0 * output.strides[ond - 1];
      for (int d = ond - 2; d >= 0; --d) {
        row_index[d] = rest % output.shape[d];
        rest /= output.shape[d];
        out_off += row_index[d] * output.strides[d];
      }
      coords(row_index.data(), k0, n, buf.data());
      eval(plan, buf.data(), n, taps.data(), vals.data());
      put(vals.data(), n, static_cast<std::byte*>(output.data) + out_off * esize, output.strides[ond - 1]);
    }
  });
}

}  // namespace

struct Interpolator::State {
  Coefficients coeff;
  Plan plan;
  EvalFn eval = nullptr;
};

Interpolator::Interpolator(const ArrayRef& input, const InterpOptions& options)
    : state_(std::make_unique<State>()) {
  if (options.order < 0 || options.order > 5)
    invalid("order", "expected a spline order from 0 to 5, but received " + std::to_string(options.order));
  if (input.shape.empty()) invalid("input", "expected an array of at least one dimension, but received a 0-d one");
  if (input.shape.size() > 64) invalid("input", "expected at most 64 dimensions");
  if (!is_real(input.dtype))
    invalid("input", "expected an integer or float array, but received " + std::string(dtype_name(input.dtype)));
  if (checked_size(input, "input") == 0)
    invalid("input", "cannot interpolate from an empty array of shape " + shape_str(input.shape));
  state_->plan = make_plan(input, options, state_->coeff);
  with_real_type(state_->plan.dtype, [&](auto v) { state_->eval = pick_order<decltype(v)>(state_->plan.order); });
}

Interpolator::~Interpolator() = default;

void Interpolator::fill(const ArrayRef& output, unsigned threads, const RowCoordinates& coords) const {
  if (output.shape.empty()) invalid("output", "expected an array of at least one dimension, but received a 0-d one");
  if (!is_real(output.dtype))
    invalid("output", "expected an integer or float dtype, but received " + std::string(dtype_name(output.dtype)));
  checked_size(output, "output");
  run(state_->plan, output, threads, coords);
}

void Interpolator::evaluate(const double* coords, std::int64_t n, double* out) const {
  std::vector<Taps> taps(static_cast<std::size_t>(state_->plan.nd * kGroup));
  std::vector<double> buf;
  for (std::int64_t k0 = 0; k0 < n; k0 += kSegment) {
    // eval_points reads coordinate d of point k at coords[d * n + k]: one segment at a time
    // needs its own contiguous block.
    const std::int64_t m = std::min(kSegment, n - k0);
    if (m == n) {
      state_->eval(state_->plan, coords, n, taps.data(), out);
      return;
    }
    buf.resize(static_cast<std::size_t>(state_->plan.nd * kSegment));
    for (int d = 0; d < state_->plan.nd; ++d)
      std::copy(coords + d * n + k0, coords + d * n + k0 + m, buf.data() + d * m);
    state_->eval(state_->plan, buf.data(), m, taps.data(), out + k0);
  }
}

}  // namespace resample

void map_coordinates(const ArrayRef& input, const ArrayRef& coordinates, const ArrayRef& output,
                     const InterpOptions& options) {
  using namespace resample;
  check_common(input, output, options);
  checked_size(coordinates, "coordinates");
  if (coordinates.dtype != DType::f32 && coordinates.dtype != DType::f64)
    invalid("coordinates", "expected float32 or float64 coordinates, but received " +
                               std::string(dtype_name(coordinates.dtype)));
  std::vector<std::int64_t> want{static_cast<std::int64_t>(input.shape.size())};
  want.insert(want.end(), output.shape.begin(), output.shape.end());
  if (coordinates.shape != want)
    invalid("coordinates", "expected shape " + shape_str(want) + " (input.ndim, *output.shape), but received " +
                               shape_str(coordinates.shape));

  Coefficients coeff;
  const Plan plan = make_plan(input, options, coeff);
  const int nd = plan.nd;
  const int ond = static_cast<int>(output.shape.size());
  const auto& cs = coordinates.strides;
  auto read = [&](const auto* c, const std::int64_t* row_index, std::int64_t k0, std::int64_t n,
                  double* buf) {
    std::int64_t base = k0 * cs[ond];
    for (int d = 0; d < ond - 1; ++d) base += row_index[d] * cs[d + 1];
    for (int a = 0; a < nd; ++a) {
      const auto* p = c + base + a * cs[0];
      for (std::int64_t k = 0; k < n; ++k) buf[a * n + k] = static_cast<double>(p[k * cs[ond]]);
    }
  };
  if (coordinates.dtype == DType::f64) {
    const auto* c = static_cast<const double*>(coordinates.data);
    run(plan, output, options.threads, [&](const std::int64_t* r, std::int64_t k0, std::int64_t n, double* b) { read(c, r, k0, n, b); });
  } else {
    const auto* c = static_cast<const float*>(coordinates.data);
    run(plan, output, options.threads, [&](const std::int64_t* r, std::int64_t k0, std::int64_t n, double* b) { read(c, r, k0, n, b); });
  }
}

void affine_transform(const ArrayRef& input, std::span<const double> matrix, bool diagonal,
                      std::span<const double> offset, const ArrayRef& output,
                      const InterpOptions& options) {
  using namespace resample;
  check_common(input, output, options);
  const std::size_t nd = input.shape.size();
  const std::size_t ond = output.shape.size();
  if (diagonal) {
    if (matrix.size() != nd)
      invalid("matrix", "expected " + std::to_string(nd) + " diagonal entries, but received " + std::to_string(matrix.size()));
    if (ond != nd)
      invalid("output", "a diagonal matrix needs an output of the input's " + std::to_string(nd) +
                            " dimensions, but received " + std::to_string(ond));
  } else if (matrix.size() != nd * ond) {
    invalid("matrix", "expected " + std::to_string(nd) + " x " + std::to_string(ond) +
                          " (input.ndim x output.ndim) entries, but received " + std::to_string(matrix.size()));
  }
  if (offset.size() != nd)
    invalid("offset", "expected " + std::to_string(nd) + " entries, but received " + std::to_string(offset.size()));

  Coefficients coeff;
  const Plan plan = make_plan(input, options, coeff);
  if (diagonal) {
    // scipy's zoom_shift: shift = offset / zoom, coordinate = (index + shift) * zoom.
    std::vector<double> shift(nd);
    for (std::size_t d = 0; d < nd; ++d) shift[d] = offset[d] / matrix[d];
    run(plan, output, options.threads, [&](const std::int64_t* r, std::int64_t k0, std::int64_t n, double* b) {
      for (std::size_t d = 0; d < nd; ++d) {
        if (d + 1 < nd) {
          const double c = (static_cast<double>(r[d]) + shift[d]) * matrix[d];
          std::fill(b + d * n, b + (d + 1) * n, c);
        } else {
          for (std::int64_t k = 0; k < n; ++k)
            b[d * n + k] = (static_cast<double>(k0 + k) + shift[d]) * matrix[d];
        }
      }
    });
  } else {
    // scipy's NI_GeometricTransform: ((shift + o0 * m0) + o1 * m1) + ..., the shift first, then
    // the axes in order (adding the shift last differs in the last bits: checked against scipy
    // 1.17.1 on float64 outputs, where a float32 output hid it).
    run(plan, output, options.threads, [&](const std::int64_t* r, std::int64_t k0, std::int64_t n, double* b) {
      for (std::size_t h = 0; h < nd; ++h) {
        const double* m = matrix.data() + h * ond;
        double partial = offset[h];
        for (std::size_t l = 0; l + 1 < ond; ++l) partial += static_cast<double>(r[l]) * m[l];
        const double last = m[ond - 1];
        for (std::int64_t k = 0; k < n; ++k) b[h * n + k] = partial + static_cast<double>(k0 + k) * last;
      }
    });
  }
}

}  // namespace voxpipe
