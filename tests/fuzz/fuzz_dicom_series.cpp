// Series assembly over a set of small DICOM files: the input is 1 to 8 files separated by
// kSeparator (what follows the 7th separator belongs to the last file), written to the scratch
// directory and given to scan_dicom_series as one list of paths. Every series it returns keeps
// its invariants (images = slices x volumes for a readable one, a finite affine, a problem or
// nothing); every readable series is read with read_dicom_series as its stored type and as
// float32 into a buffer of the size its shape gives (series over kMaxOutput are skipped, to keep
// each input fast), and a buffer of the wrong size must be refused; its gradient table, when its
// images carry diffusion encodings, is checked too. Only voxpipe::Error may be thrown.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"
#include "voxpipe/dicom_series.hpp"
#include "voxpipe/error.hpp"

namespace {

using namespace voxpipe;

// Also in make_seeds.cpp (which writes the seeds in this layout).
constexpr std::string_view kSeparator = "VPSERIES";
constexpr std::size_t kMaxFiles = 8;
constexpr std::uint64_t kMaxOutput = std::uint64_t{16} << 20;

std::vector<std::string> write_files(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> paths;
  std::size_t start = 0;
  while (paths.size() < kMaxFiles) {
    std::size_t end = paths.size() + 1 < kMaxFiles ? in.find(kSeparator, start) : in.npos;
    if (end == in.npos) end = size;
    const std::string path = vpfuzz::scratch_file("s" + std::to_string(paths.size()) + ".dcm");
    vpfuzz::write_bytes(path, data + start, end - start);
    paths.push_back(path);
    if (end == size) break;
    start = end + kSeparator.size();
  }
  return paths;
}

void check_series(const DicomSeries& s, bool read_two_threads) {
  for (double a : s.affine)
    if (!std::isfinite(a) && s.problem.empty()) std::abort();
  if (!s.problem.empty()) {
    // A series with a problem must be refused before anything is decoded.
    std::vector<std::uint8_t> none;
    try {
      read_dicom_series(s, none, s.stored_dtype, 1);
      std::abort();
    } catch (const Error& e) {
      if (e.code() != ErrorCode::format) std::abort();
    }
    return;
  }
  if (s.images.size() != s.slices * s.volumes || s.images.empty()) std::abort();
  // The gradient table of the images' diffusion encodings (the private GE, Philips and Siemens
  // values the scan decoded): none, or per volume a finite b >= 0 and a unit or zero vector;
  // slices of one volume that disagree are Error(format).
  try {
    if (const auto t = dicom_gradient_table(s, s.affine)) {
      if (t->bvals.size() != std::max<std::uint64_t>(s.volumes, 1) ||
          t->bvecs.size() != t->bvals.size())
        std::abort();
      for (std::size_t v = 0; v < t->bvals.size(); ++v) {
        if (!std::isfinite(t->bvals[v]) || t->bvals[v] < 0) std::abort();
        const auto& g = t->bvecs[v];
        const double n = g[0] * g[0] + g[1] * g[1] + g[2] * g[2];
        if (!(n == 0 || std::abs(n - 1) < 1e-6)) std::abort();
      }
    }
  } catch (const Error& e) {
    if (e.code() != ErrorCode::format && e.code() != ErrorCode::invalid_argument) std::abort();
  }
  if (s.rows == 0 || s.columns == 0) std::abort();
  std::uint64_t voxels = 1;
  for (std::uint64_t n : s.shape()) voxels *= n;  // rows, columns <= 65535, images in memory
  if (voxels != std::uint64_t(s.rows) * s.columns * s.images.size()) std::abort();
  const unsigned threads = read_two_threads ? 2 : 1;
  for (DType t : {s.stored_dtype, DType::f32}) {
    const std::uint64_t bytes = voxels * dtype_size(t);
    if (bytes > kMaxOutput) continue;
    try {
      std::vector<std::uint8_t> wrong(bytes + 1);
      read_dicom_series(s, wrong, t, threads);
      std::abort();
    } catch (const Error& e) {
      if (e.code() != ErrorCode::invalid_argument) std::abort();
    }
    std::vector<std::uint8_t> out(bytes);
    try {
      read_dicom_series(s, out, t, threads);
    } catch (const Error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::string> paths = write_files(data, size);
  DicomScanOptions options;
  options.threads = 1;
  options.recursive = false;
  try {
    const DicomScanResult r = scan_dicom_series(paths, options);
    if (r.series.size() + r.skipped.size() == 0) std::abort();
    for (const DicomSeries& s : r.series) check_series(s, size % 3 == 0);
  } catch (const Error&) {
  }
  return 0;
}
