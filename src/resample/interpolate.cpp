// The two drivers, map_coordinates and affine_transform, and the Interpolator, around the
// interpolation kernels (kernel_templates.hpp says how they compute scipy's values bit for bit).
//
// Work is split by output rows (lines along the last output axis) cut into segments: for each
// segment a task makes the segment's coordinates (read from the caller's array, or generated
// from the affine), evaluates the spline at each with the kernel kernel::pick chose for the
// plan, and stores the values with scipy's output rounding.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>

#include "core/checked.hpp"
#include "core/simd.hpp"
#include "core/thread_pool.hpp"
#include "resample/boundary.hpp"
#include "resample/bspline.hpp"
#include "resample/dispatch.hpp"
#include "resample/interpolator.hpp"
#include "resample/kernel.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/resample.hpp"
#include "voxpipe/threads.hpp"

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

using kernel::EvalFn;
using kernel::kGroup;
using kernel::Plan;
using kernel::Taps;

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
  if (stride == 1) {  // the usual case, in a loop the compiler vectorises
    for (std::int64_t k = 0; k < n; ++k) o[k] = to_output<O>(v[k]);
    return;
  }
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

// Makes the plan: the coefficients (made in `coeff`, in its memory when it holds enough, and
// kept alive there) or the input itself.
Plan make_plan(const ArrayRef& input, const InterpOptions& o, Coefficients& coeff) {
  Plan p;
  p.nd = static_cast<int>(input.shape.size());
  p.order = o.order;
  p.mode = o.mode;
  p.tmode = tap_mode(o.mode);
  p.cval = o.cval;
  p.fast = o.fast;
  if (o.prefilter && o.order > 1) {
    const double pad = o.pad_value ? *o.pad_value : cast_to_dtype(o.cval, input.dtype);
    coeff = spline_coefficients(input, o.order, o.mode, pad, o.threads, std::move(coeff));
    p.data = coeff.origin;
    p.dtype = DType::f64;
    p.shape = coeff.shape;
    p.strides = coeff.strides;
    p.npad = static_cast<double>(coeff.npad);
    p.margin = coeff.margin;
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
// 0, 1, ..., kSegment - 1 as doubles.
constexpr auto kIndex = [] {
  std::array<double, kSegment> a{};
  for (std::int64_t k = 0; k < kSegment; ++k) a[static_cast<std::size_t>(k)] = static_cast<double>(k);
  return a;
}();
// Segments per task: a few thousand points amortise the task's setup.
constexpr std::int64_t kMinPointsPerTask = 4096;

// Runs the plan over every output element. coords(row_index, k0, n, buf) writes the coordinates
// of the n points from k0 along the row `row_index` (output indices of all axes but the last)
// into buf[d * n + k]. A CoordFn may instead take a fifth argument, std::int64_t& cs, and
// return where the coordinates already are (coordinate d of point k at [d * cs + k]), or buf.
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
  eval = kernel::pick(plan);
  StoreFn put = nullptr;
  with_real_type(output.dtype, [&](auto v) { put = store<decltype(v)>; });
  const std::int64_t esize = static_cast<std::int64_t>(dtype_size(output.dtype));

  const unsigned nthreads = std::max(threads, 1u);
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
      if constexpr (std::is_invocable_v<CoordFn&, const std::int64_t*, std::int64_t, std::int64_t,
                                        double*, std::int64_t&>) {
        std::int64_t cs = n;
        const double* c = coords(row_index.data(), k0, n, buf.data(), cs);
        eval(plan, c, cs, n, taps.data(), vals.data());
      } else {
        coords(row_index.data(), k0, n, buf.data());
        eval(plan, buf.data(), n, n, taps.data(), vals.data());
      }
      put(vals.data(), n, static_cast<std::byte*>(output.data) + out_off * esize, output.strides[ond - 1]);
    }
  });
}

}  // namespace

// The core's one dispatch level (core/simd.hpp, VOXPIPE_SIMD): off = scalar, on = the best.
bool simd_enabled() noexcept { return core::simd_level() != core::SimdLevel::scalar; }
void set_simd_enabled(bool on) noexcept {
  core::set_simd_level(on ? core::SimdLevel::avx512 : core::SimdLevel::scalar);
}

struct Interpolator::State {
  Coefficients own;
  Plan plan;
  EvalFn eval = nullptr;
};

Interpolator::Interpolator(const ArrayRef& input, const InterpOptions& options)
    : Interpolator(input, options, nullptr) {}

Interpolator::Interpolator(const ArrayRef& input, const InterpOptions& options,
                           Coefficients& storage)
    : Interpolator(input, options, &storage) {}

Interpolator::Interpolator(const ArrayRef& input, const InterpOptions& options,
                           Coefficients* storage)
    : state_(std::make_unique<State>()) {
  if (options.order < 0 || options.order > 5)
    invalid("order", "expected a spline order from 0 to 5, but received " + std::to_string(options.order));
  if (input.shape.empty()) invalid("input", "expected an array of at least one dimension, but received a 0-d one");
  if (input.shape.size() > 64) invalid("input", "expected at most 64 dimensions");
  if (!is_real(input.dtype))
    invalid("input", "expected an integer or float array, but received " + std::string(dtype_name(input.dtype)));
  if (checked_size(input, "input") == 0)
    invalid("input", "cannot interpolate from an empty array of shape " + shape_str(input.shape));
  state_->plan = make_plan(input, options, storage ? *storage : state_->own);
  state_->eval = kernel::pick(state_->plan);
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
  // A segment at a time, its coordinates read in place (axis d of point k at coords[d * n + k]).
  for (std::int64_t k0 = 0; k0 < n; k0 += kSegment)
    state_->eval(state_->plan, coords + k0, n, std::min(kSegment, n - k0), taps.data(), out + k0);
}

}  // namespace resample

void map_coordinates(const ArrayRef& input, const ArrayRef& coordinates, const ArrayRef& output,
                     const InterpOptions& given) {
  using namespace resample;
  InterpOptions options = given;  // the prefilter and the kernel share the one resolved count
  options.threads = resolve_threads(given.threads);
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
    // Adjacent along the points: read in place, axis d cs[0] elements (any sign) after axis
    // d - 1.
    if (cs[ond] == 1) {
      run(plan, output, options.threads,
          [&](const std::int64_t* r, std::int64_t k0, std::int64_t, double*,
              std::int64_t& stride) -> const double* {
            std::int64_t base = k0;
            for (int d = 0; d < ond - 1; ++d) base += r[d] * cs[d + 1];
            stride = cs[0];
            return c + base;
          });
      return;
    }
    run(plan, output, options.threads, [&](const std::int64_t* r, std::int64_t k0, std::int64_t n, double* b) { read(c, r, k0, n, b); });
  } else {
    const auto* c = static_cast<const float*>(coordinates.data);
    run(plan, output, options.threads, [&](const std::int64_t* r, std::int64_t k0, std::int64_t n, double* b) { read(c, r, k0, n, b); });
  }
}

void affine_transform(const ArrayRef& input, std::span<const double> matrix, bool diagonal,
                      std::span<const double> offset, const ArrayRef& output,
                      const InterpOptions& given) {
  InterpOptions options = given;  // the prefilter and the kernel share the one resolved count
  options.threads = resolve_threads(given.threads);
  resample::Coefficients coeff;
  resample::affine_transform(input, matrix, diagonal, offset, output, options, coeff);
}

void resample::affine_transform(const ArrayRef& input, std::span<const double> matrix,
                                bool diagonal, std::span<const double> offset,
                                const ArrayRef& output, const InterpOptions& options,
                                Coefficients& coeff) {
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
            b[d * n + k] = ((static_cast<double>(k0) + kIndex[k]) + shift[d]) * matrix[d];
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
        // k0 + k as a double from the table: the same (exact) value, in a loop that vectorises
        // (x86-64 has no vector int64 -> double conversion before AVX-512).
        const double k0d = static_cast<double>(k0);
        for (std::int64_t k = 0; k < n; ++k) b[h * n + k] = partial + (k0d + kIndex[k]) * last;
      }
    });
  }
}

}  // namespace voxpipe
