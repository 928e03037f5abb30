// The device kernels (kernels.cu) as a fatbin embedded in the library at build time: SASS for
// sm_80 and sm_90 and PTX for compute_90, which the driver JIT-compiles on newer GPUs. Loaded
// with cuModuleLoadData. Internal.
#pragma once

#include <span>

namespace voxpipe::cuda {

// The fatbin's bytes; empty when the library was built without nvcc (or VOXPIPE_CUDA=OFF).
std::span<const unsigned char> kernel_fatbin() noexcept;

// Names of the extern "C" kernels in the fatbin (kernels.cu).
inline constexpr const char* kConvertRawKernel = "voxpipe_convert_raw";
inline constexpr const char* kConvertNiftiKernel = "voxpipe_convert_nifti";
inline constexpr const char* kConvertDicomKernel = "voxpipe_convert_dicom";

}  // namespace voxpipe::cuda
