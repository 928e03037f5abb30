// Built instead of the embedded fatbin when nvcc was not found (or VOXPIPE_CUDA=OFF).
#include "cuda/fatbin.hpp"

namespace voxpipe::cuda {
std::span<const unsigned char> kernel_fatbin() noexcept { return {}; }
}  // namespace voxpipe::cuda
