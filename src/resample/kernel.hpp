// The interpolation kernels' interface, private to the resampler: what a kernel reads (Plan),
// its per-point scratch (Taps), and the function that picks the kernel for a plan.
//
// The kernels themselves (kernel_templates.hpp) are templates over the element type, the spline
// order and the rank; their instantiations are split by order over kernel_order0.cpp ..
// kernel_order5.cpp. In one file (interpolate.cpp) they were one compile of 160 s CPU under the
// ASan stage's flags (gcc 12, -O2 -g -fsanitize=address,undefined), 205-366 s in CI on 2 cores:
// the instrumentation of the unrolled tap loops is code volume spread over every pass, with no
// single sub-check to blame (on order 3: ASan and UBSan about half each, pointer-overflow the
// largest UBSan part at a quarter). Split, no file takes more than 55 s (order 5) and the two
// cores compile them side by side.
#pragma once

#include <cstdint>
#include <vector>

#include "voxpipe/dtype.hpp"
#include "voxpipe/resample.hpp"

namespace voxpipe::resample::kernel {

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
  bool fast = false;  // InterpOptions::fast
  // Samples stored beyond each edge, holding what the taps there read (Coefficients::margin).
  std::int64_t margin = 0;
};

// Taps of one axis for one point: element offsets (index times stride), weights, and which taps
// read cval (grid-constant beyond the input).
struct Taps {
  std::int64_t off[6];
  double w[6];
  bool cval[6];
  bool any_cval;
};

// Points evaluated together: their sums are independent chains of additions, which the core
// overlaps; one point's 64 dependent additions (cubic, 3-D) otherwise wait on each other.
constexpr int kGroup = 4;

// Values at n points; coordinate of point k along axis d at coords[d * cs + k] (cs of any sign:
// rows of a caller's coordinate array are read in place).
using EvalFn = void (*)(const Plan&, const double* coords, std::int64_t cs, std::int64_t n,
                        Taps* taps, double* out);

// The kernel for plan.order, plan.dtype (a real dtype; nullptr for others), plan.nd, the CPU and
// core::simd_level(), plan.fast: one function per order, each in its own file.
EvalFn pick_order0(const Plan& plan);
EvalFn pick_order1(const Plan& plan);
EvalFn pick_order2(const Plan& plan);
EvalFn pick_order3(const Plan& plan);
EvalFn pick_order4(const Plan& plan);
EvalFn pick_order5(const Plan& plan);

inline EvalFn pick(const Plan& plan) {
  switch (plan.order) {
    case 0: return pick_order0(plan);
    case 1: return pick_order1(plan);
    case 2: return pick_order2(plan);
    case 3: return pick_order3(plan);
    case 4: return pick_order4(plan);
    default: return pick_order5(plan);
  }
}

}  // namespace voxpipe::resample::kernel
