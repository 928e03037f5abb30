// The interpolation kernels of spline order 1, for every element type (kernel.hpp says why each
// order has its own file).
#include "resample/kernel_templates.hpp"

namespace voxpipe::resample::kernel {

EvalFn pick_order1(const Plan& plan) { return pick_dtype<1>(plan); }

}  // namespace voxpipe::resample::kernel
