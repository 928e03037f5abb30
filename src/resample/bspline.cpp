#include "resample/bspline.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <new>
#include <cstring>
#include <type_traits>

#include "core/checked.hpp"
#include "core/convert.hpp"
#include "core/thread_pool.hpp"
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

// The boundary initialisations of the causal and anticausal passes. Each lane is an independent
// line; the arithmetic per lane is scipy's, in scipy's order (ni_splines.c), including the causal
// reflect sum whose last term reads the partly accumulated first coefficient (which is why
// scipy's reflect and nearest modes do not reproduce the samples exactly at the edges).
struct Lines {
  double* p;
  std::int64_t stride;
  std::int64_t lanes;
  double* row(std::int64_t i) const { return p + i * stride; }
};

void causal_mirror(const Lines& c, std::int64_t n, double z) {
  const double z_n_1 = std::pow(z, static_cast<double>(n - 1));
  double* c0 = c.row(0);
  const double* last = c.row(n - 1);
  for (std::int64_t j = 0; j < c.lanes; ++j) c0[j] = c0[j] + z_n_1 * last[j];
  double z_i = z;
  for (std::int64_t i = 1; i < n - 1; ++i) {
    const double* a = c.row(i);
    const double* b = c.row(n - 1 - i);
    for (std::int64_t j = 0; j < c.lanes; ++j) c0[j] += z_i * (a[j] + z_n_1 * b[j]);
    z_i *= z;
  }
  const double denom = 1 - z_n_1 * z_n_1;
  for (std::int64_t j = 0; j < c.lanes; ++j) c0[j] /= denom;
}

void anticausal_mirror(const Lines& c, std::int64_t n, double z) {
  double* last = c.row(n - 1);
  const double* prev = c.row(n - 2);
  for (std::int64_t j = 0; j < c.lanes; ++j) last[j] = (z * prev[j] + last[j]) * z / (z * z - 1);
}

void causal_wrap(const Lines& c, std::int64_t n, double z) {
  double* c0 = c.row(0);
  double z_i = z;
  for (std::int64_t i = 1; i < n; ++i) {
    const double* a = c.row(n - i);
    for (std::int64_t j = 0; j < c.lanes; ++j) c0[j] += z_i * a[j];
    z_i *= z;
  }
  for (std::int64_t j = 0; j < c.lanes; ++j) c0[j] /= 1 - z_i;
}

void anticausal_wrap(const Lines& c, std::int64_t n, double z) {
  double* last = c.row(n - 1);
  double z_i = z;
  for (std::int64_t i = 0; i < n - 1; ++i) {
    const double* a = c.row(i);
    for (std::int64_t j = 0; j < c.lanes; ++j) last[j] += z_i * a[j];
    z_i *= z;
  }
  for (std::int64_t j = 0; j < c.lanes; ++j) last[j] *= z / (z_i - 1);
}

void causal_reflect(const Lines& c, std::int64_t n, double z, std::vector<double>& saved) {
  const double z_n = std::pow(z, static_cast<double>(n));
  double* c0 = c.row(0);
  const double* last = c.row(n - 1);
  saved.assign(c0, c0 + c.lanes);
  for (std::int64_t j = 0; j < c.lanes; ++j) c0[j] = c0[j] + z_n * last[j];
  double z_i = z;
  for (std::int64_t i = 1; i < n; ++i) {
    const double* a = c.row(i);
    const double* b = c.row(n - 1 - i);  // row 0 itself when i = n - 1, as in scipy
    for (std::int64_t j = 0; j < c.lanes; ++j) c0[j] += z_i * (a[j] + z_n * b[j]);
    z_i *= z;
  }
  const double f = z / (1 - z_n * z_n);
  for (std::int64_t j = 0; j < c.lanes; ++j) {
    c0[j] *= f;
    c0[j] += saved[j];
  }
}

void anticausal_reflect(const Lines& c, std::int64_t n, double z) {
  double* last = c.row(n - 1);
  const double f = z / (z - 1);
  for (std::int64_t j = 0; j < c.lanes; ++j) last[j] *= f;
}

}  // namespace

void spline_filter_lines(double* line, std::int64_t len, std::int64_t stride, std::int64_t lanes,
                         int order, InterpMode mode) {
  double poles[2];
  const int npoles = spline_poles(order, poles);
  if (npoles == 0 || len <= 1 || lanes <= 0) return;
  const Lines c{line, stride, lanes};

  double gain = 1.0;
  for (int k = 0; k < npoles; ++k) gain *= (1.0 - poles[k]) * (1.0 - 1.0 / poles[k]);
  for (std::int64_t i = 0; i < len; ++i) {
    double* r = c.row(i);
    for (std::int64_t j = 0; j < lanes; ++j) r[j] *= gain;
  }
  std::vector<double> saved;
  for (int k = 0; k < npoles; ++k) {
    const double z = poles[k];
    switch (mode) {
      case InterpMode::grid_wrap: causal_wrap(c, len, z); break;
      case InterpMode::nearest:
      case InterpMode::reflect: causal_reflect(c, len, z, saved); break;
      default: causal_mirror(c, len, z); break;
    }
    for (std::int64_t i = 1; i < len; ++i) {
      double* r = c.row(i);
      const double* q = c.row(i - 1);
      for (std::int64_t j = 0; j < lanes; ++j) r[j] += z * q[j];
    }
    switch (mode) {
      case InterpMode::grid_wrap: anticausal_wrap(c, len, z); break;
      case InterpMode::nearest:
      case InterpMode::reflect: anticausal_reflect(c, len, z); break;
      default: anticausal_mirror(c, len, z); break;
    }
    for (std::int64_t i = len - 2; i >= 0; --i) {
      double* r = c.row(i);
      const double* q = c.row(i + 1);
      for (std::int64_t j = 0; j < lanes; ++j) r[j] = z * (q[j] - r[j]);
    }
  }
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

}  // namespace

Coefficients spline_coefficients(const ArrayRef& input, int order, InterpMode mode, double cval,
                                 unsigned threads) {
  const std::size_t nd = input.shape.size();
  Coefficients out;
  out.npad = mode == InterpMode::nearest || mode == InterpMode::grid_constant ? 12 : 0;
  out.shape.resize(nd);
  for (std::size_t d = 0; d < nd; ++d) out.shape[d] = input.shape[d] + 2 * out.npad;
  out.strides.assign(nd, 1);
  for (std::size_t d = nd; d-- > 1;) out.strides[d - 1] = out.strides[d] * out.shape[d];
  const std::int64_t total = product(out.shape, 0, nd);
  const std::int64_t row_len = nd ? out.shape[nd - 1] : 1;
  const std::int64_t rows = row_len ? total / row_len : 0;
  if (total == 0) return out;
  {
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
  }

  // 1. Copy (and pad) the input into float64, one output row per index, converted by the
  //    library's one cast kernel.
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
  const auto chunk_rows = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(row_len, 1));
  const auto copy_tasks = static_cast<std::size_t>((rows + chunk_rows - 1) / chunk_rows);
  core::parallel_for(copy_tasks, threads, [&](std::size_t task) {
    const std::int64_t r0 = static_cast<std::int64_t>(task) * chunk_rows;
    const std::int64_t r1 = std::min(rows, r0 + chunk_rows);
    for (std::int64_t r = r0; r < r1; ++r) {
      double* dst = out.data.get() + r * row_len;
      // Source index of this row along every axis but the last; outside: cval or clamp.
      std::int64_t rest = r, src = 0;
      bool outside = false;
      for (std::size_t d = nd - 1; d-- > 0;) {
        std::int64_t i = rest % out.shape[d] - npad;
        rest /= out.shape[d];
        if (i < 0 || i >= input.shape[d]) {
          if (mode == InterpMode::grid_constant) outside = true;
          i = std::clamp<std::int64_t>(i, 0, input.shape[d] - 1);
        }
        src += i * input.strides[d];
      }
      if (outside) {
        std::fill(dst, dst + row_len, cval);
        continue;
      }
      const std::int64_t n = input.shape[nd - 1];
      const std::int64_t s = input.strides[nd - 1];
      const auto* base = static_cast<const std::byte*>(input.data) + src * esize;
      convert(conv, base, s * esize, reinterpret_cast<std::byte*>(dst + npad),
              static_cast<std::ptrdiff_t>(sizeof(double)), static_cast<std::size_t>(n));
      const double left = mode == InterpMode::grid_constant ? cval : dst[npad];
      const double right = mode == InterpMode::grid_constant ? cval : dst[npad + n - 1];
      std::fill(dst, dst + npad, left);
      std::fill(dst + npad + n, dst + row_len, right);
    }
  });

  // 2. Prefilter along each axis in turn (scipy's order): outer x lanes blocks, each block of
  //    lanes filtered in lockstep down the axis.
  for (std::size_t d = 0; d < nd; ++d) {
    const std::int64_t len = out.shape[d];
    if (len <= 1) continue;
    const std::int64_t outer = product(out.shape, 0, d);
    const std::int64_t inner = product(out.shape, d + 1, nd);
    if (inner == 1) {
      // The last axis: contiguous lines, several per task.
      const std::int64_t per_task = std::max<std::int64_t>(1, 16384 / len);
      const auto tasks = static_cast<std::size_t>((outer + per_task - 1) / per_task);
      core::parallel_for(tasks, threads, [&](std::size_t t) {
        const std::int64_t l0 = static_cast<std::int64_t>(t) * per_task;
        const std::int64_t l1 = std::min(outer, l0 + per_task);
        for (std::int64_t l = l0; l < l1; ++l)
          spline_filter_lines(out.data.get() + l * len, len, 1, 1, order, mode);
      });
    } else {
      const std::int64_t blocks = (inner + kLaneBlock - 1) / kLaneBlock;
      core::parallel_for(static_cast<std::size_t>(outer * blocks), threads, [&](std::size_t t) {
        const std::int64_t o = static_cast<std::int64_t>(t) / blocks;
        const std::int64_t b = static_cast<std::int64_t>(t) % blocks;
        const std::int64_t j0 = b * kLaneBlock;
        const std::int64_t lanes = std::min(kLaneBlock, inner - j0);
        spline_filter_lines(out.data.get() + o * len * inner + j0, len, inner, lanes, order,
                            mode);
      });
    }
  }
  return out;
}

}  // namespace voxpipe::resample
