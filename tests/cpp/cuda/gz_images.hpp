// .nii.gz test images for the staging and device tests: int16 volumes with about 8 bits of noise,
// so that they compress to ~55% and a plain gzip of a few MB is past GzipSource's 2 MiB
// threshold for the speculative parallel inflate.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "voxpipe/gzip.hpp"
#include "voxpipe/nifti.hpp"

namespace vptest {

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
