// The interpolation kernels of spline order 0, for every element type (kernel.hpp says why each
// order has its own file).
#include "resample/kernel_templates.hpp"

namespace voxpipe::resample::kernel {

EvalFn pick_order0(const Plan& plan) { return pick_dtype<0>(plan); }

}  // namespace voxpipe::resample::kernel
