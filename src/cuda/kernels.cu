// The device kernels, compiled by nvcc into the fatbin that the library embeds (fatbin.hpp).
// They instantiate the per-element conversion of convert_element.hpp, the very code the host
// path runs, over a grid-stride loop. Built with -fmad=false and without fast-math (IEEE
// division and square root, no flush to zero): see convert_element.hpp for why that makes the
// results bit-identical to the CPU path.
//
// All three take (ElementOp op, const unsigned char* src, unsigned char* dst, unsigned long long n)
// and convert elements [0, n) of the contiguous `src` into the contiguous `dst`; the host
// offsets `dst` to the chunk's first element. `op` is uniform across the grid, so the dispatch
// switch costs one branch per thread, not per element.
#include "cuda/convert_element.hpp"

namespace {

using voxpipe::cuda::ElementOp;

__device__ inline void convert_grid(const ElementOp& op, const unsigned char* src,
                                    unsigned char* dst, unsigned long long n) {
  const unsigned long long first = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
  const unsigned long long step = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  voxpipe::cuda::convert_elements(op, src, dst, first, n, step);
}

}  // namespace

extern "C" __global__ void voxpipe_convert_raw(ElementOp op, const unsigned char* src,
                                               unsigned char* dst, unsigned long long n) {
  op.kind = voxpipe::cuda::ElementKind::raw;
  convert_grid(op, src, dst, n);
}

extern "C" __global__ void voxpipe_convert_nifti(ElementOp op, const unsigned char* src,
                                                 unsigned char* dst, unsigned long long n) {
  op.kind = voxpipe::cuda::ElementKind::nifti;
  convert_grid(op, src, dst, n);
}

extern "C" __global__ void voxpipe_convert_dicom(ElementOp op, const unsigned char* src,
                                                 unsigned char* dst, unsigned long long n) {
  op.kind = voxpipe::cuda::ElementKind::dicom;
  convert_grid(op, src, dst, n);
}
