// The interpolation kernels of spline order 5, for every element type (kernel.hpp says why each
// order has its own file).
#include "resample/kernel_templates.hpp"

namespace voxpipe::resample::kernel {

EvalFn pick_order5(const Plan& plan) { return pick_dtype<5>(plan); }

}  // namespace voxpipe::resample::kernel
