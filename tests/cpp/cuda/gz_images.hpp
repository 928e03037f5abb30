// NIfTI test images for the staging and device tests: random images of any dtype, at any data
// offset, with what read_nifti_data gives for them; and .nii.gz int16 volumes with about 8 bits
// of noise, so that they compress to ~55% and a plain gzip of a few MB is past GzipSource's
// 2 MiB threshold for the speculative parallel inflate.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "voxpipe/gzip.hpp"
#include "voxpipe/nifti.hpp"

namespace vptest {

// A NIfTI-1 image of `type` and `shape` with random data (from `seed`) and scaling at `path`,
// its voxels at `vox_offset` (>= 352: the header's vox_offset is rewritten and the gap
// zero-filled). float32 data are finite, so that comparisons are about bits, not NaN payloads.
inline voxpipe::NiftiImage write_random_image(const std::string& path, voxpipe::DType type,
                                              const std::vector<std::int64_t>& shape, bool big_endian,
                                              double slope, double inter, std::uint64_t seed,
                                              std::uint32_t vox_offset = 352) {
  voxpipe::NiftiHeader h = make_header(1, type, shape, big_endian);
  h.scl_slope = slope;
  h.scl_inter = inter;
  std::size_t n = voxpipe::dtype_size(type);
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  Bytes data = random_bytes(n, seed);
  if (type == voxpipe::DType::f32)
    for (std::size_t i = 0; i + 4 <= data.size(); i += 4) data[i + (big_endian ? 0 : 3)] &= 0x3F;
  voxpipe::write_nifti(path, h, {}, voxpipe::producer_from_bytes(as_bytes(data)));
  if (vox_offset != 352) {
    const Bytes file = read_file(path);
    Bytes out(file.begin(), file.begin() + 352);
    out.resize(vox_offset, 0);
    out.insert(out.end(), file.begin() + 352, file.end());
    float f = static_cast<float>(vox_offset);
    std::uint8_t b[4];
    std::memcpy(b, &f, 4);
    if (big_endian != kNativeBig) std::reverse(b, b + 4);
    std::memcpy(out.data() + 108, b, 4);
    write_file(path, out);
  }
  return voxpipe::open_nifti(path);
}

// All of `image`'s data as read_nifti_data gives it for `spec`.
inline Bytes host_read(const voxpipe::NiftiImage& image, const voxpipe::OutputSpec& spec) {
  std::size_t n = voxpipe::dtype_size(spec.type);
  for (auto d : image.shape) n *= static_cast<std::size_t>(d);
  Bytes out(n);
  voxpipe::read_nifti_data(image, {}, spec, std::as_writable_bytes(std::span(out)));
  return out;
}

// Writes a scaled (slope 0.5, intercept -7) int16 image of `shape` at `path` in `layout`; with
// `index_spacing`, also builds its seek index (the FILE.gz.gzidx sidecar, which readers find).
inline voxpipe::NiftiImage write_noisy_gz_image(const std::string& path, const std::vector<std::int64_t>& shape,
                                                voxpipe::GzipLayout layout, std::uint64_t index_spacing = 0) {
  voxpipe::NiftiHeader h = make_header(1, voxpipe::DType::i16, shape, false);
  h.scl_slope = 0.5;
  h.scl_inter = -7;
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  std::vector<std::int16_t> values(n);
  std::mt19937_64 rng(n);
  for (std::size_t i = 0; i < n; ++i)
    values[i] = static_cast<std::int16_t>(1000 + 300 * ((i >> 12) % 7) + static_cast<int>(rng() % 256));
  const Bytes data = to_bytes(values, false);
  voxpipe::WriteOptions o;
  o.gzip_layout = layout;
  voxpipe::write_nifti(path, h, {}, voxpipe::producer_from_bytes(as_bytes(data)), o);
  if (index_spacing) {
    voxpipe::GzipIndexOptions io;
    io.spacing = index_spacing;
    voxpipe::build_gzip_index(path, io);
  }
  return voxpipe::open_nifti(path);
}

}  // namespace vptest
