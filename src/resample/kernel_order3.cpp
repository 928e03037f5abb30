// The interpolation kernels of spline order 3, for every element type (kernel.hpp says why each
// order has its own file).
#include "resample/kernel_templates.hpp"

namespace voxpipe::resample::kernel {

EvalFn pick_order3(const Plan& plan) { return pick_dtype<3>(plan); }

}  // namespace voxpipe::resample::kernel
