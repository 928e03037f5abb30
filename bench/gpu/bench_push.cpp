// CPU-only measurement of the .nii.gz -> device pipeline without a GPU: on the same threads,
// (a) voxpipe's CPU decode, read_nifti_data of the whole image into a warm host buffer, against
// (b) the staging pipeline the device load uses (stage_nifti_data: the parallel inflate pushes
// its pieces into the staging ring) with the host sink converting each chunk into the same
// buffer. b/a is the share of the CPU decode rate that the device load keeps when the transfer
// is hidden (issue goal: >= 90%); there is no device copy here, so this bounds the staging
// overhead only. Runs alternate a and b (this VM's speed drifts ~30% between runs) and report
// medians and the median of the per-round ratios.
//
//
// Given a folder of DICOM files instead, the same for its first series decoded on the host (the
// device load's path for compressed series): (a) read_dicom_series into a host buffer against
// (b) its planes pushed into the staging ring as the decoding threads finish them
// (dicom_push_source) and copied by the host sink into the same buffer.
//
// Usage: voxpipe_bench_push FILE.nii.gz|DICOM_FOLDER [--threads N] [--rounds R]
//                           [--dtype native|float32] [--chunk MIB] [--buffers M]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.hpp"
#include "cuda/element_op.hpp"
#include "cuda/load.hpp"
#include "nifti/internal.hpp"
#include "voxpipe/dicom_series.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/threads.hpp"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int usage() {
  std::fprintf(stderr, "usage: voxpipe_bench_push FILE.nii.gz [--threads N] [--rounds R] "
                       "[--dtype native|float32] [--chunk MIB] [--buffers M]\n");
  return 2;
}

// Runs a and b alternately `rounds` times and prints their medians, the b/a rate and the last
// push run's overflow figures.
template <class A, class B>
void alternate(A&& cpu, B&& push, unsigned rounds, std::size_t n, const char* a_name,
               const voxpipe::cuda::StagingStats& stats) {
  std::vector<double> a, b, ratio;
  for (unsigned r = 0; r < rounds; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    cpu();
    a.push_back(seconds_since(t0));
    t0 = std::chrono::steady_clock::now();
    push();
    b.push_back(seconds_since(t0));
    ratio.push_back(a.back() / b.back());
  }
  const double mb = static_cast<double>(n) / 1e6;
  std::printf("(a) %-30s median %.3f s (%.0f MB/s of output)\n", a_name, median(a), mb / median(a));
  std::printf("(b) %-30s median %.3f s (%.0f MB/s of output)\n", "staging pipeline, host sink", median(b),
              mb / median(b));
  std::printf("b/a rate: median of per-round ratios %.1f%%, of medians %.1f%% (per round:", 100 * median(ratio),
              100 * median(a) / median(b));
  for (double x : ratio) std::printf(" %.0f%%", 100 * x);
  std::printf(")\nlast push run: overflow peak %.1f MB in %llu pieces, %llu waits\n",
              static_cast<double>(stats.overflow_peak_bytes) / 1e6,
              static_cast<unsigned long long>(stats.overflow_pieces),
              static_cast<unsigned long long>(stats.waits));
}

int bench_dicom(const std::string& folder, unsigned threads, unsigned rounds, bool to_f32,
                voxpipe::cuda::StagingOptions staging) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(folder))
    if (e.is_regular_file()) files.push_back(e.path().string());
  voxpipe::DicomScanOptions scan_options;
  scan_options.threads = threads;
  const voxpipe::DicomScanResult scan = voxpipe::scan_dicom_series(files, scan_options);
  if (scan.series.empty()) {
    std::fprintf(stderr, "no DICOM series in %s\n", folder.c_str());
    return 1;
  }
  const voxpipe::DicomSeries& series = scan.series.front();
  const voxpipe::DType type = to_f32 ? voxpipe::DType::f32 : series.stored_dtype;
  std::size_t n = voxpipe::dtype_size(type);
  for (auto d : series.shape()) n *= static_cast<std::size_t>(d);
  std::vector<std::uint8_t> out(n), check(n);
  std::memset(out.data(), 0, n);
  std::memset(check.data(), 0, n);
  voxpipe::cuda::StagingStats stats;
  staging.stats = &stats;
  auto cpu = [&] { voxpipe::read_dicom_series(series, out, type, threads); };
  auto push = [&] {
    voxpipe::cuda::HostConvertSink sink(voxpipe::cuda::ElementOp{}, std::as_writable_bytes(std::span(check)));
    voxpipe::cuda::stage(voxpipe::cuda::dicom_push_source(series, type, threads), 1, sink, staging);
  };
  cpu();
  push();
  if (std::memcmp(out.data(), check.data(), n) != 0) {
    std::fprintf(stderr, "the staged output differs from read_dicom_series\n");
    return 1;
  }
  std::printf("series of %s: %zu images, %zu output bytes (%s), %u threads, ring %u x %.1f MiB, %u rounds\n",
              folder.c_str(), series.images.size(), n, to_f32 ? "float32" : "stored", threads,
              staging.buffers, static_cast<double>(staging.chunk_bytes) / (1 << 20), rounds);
  alternate(cpu, push, rounds, n, "CPU read_dicom_series", stats);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string path = argv[1];
  unsigned threads = 0, rounds = 7;
  bool to_f32 = false;
  voxpipe::cuda::StagingOptions staging;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const char* v = argv[++i];
    if (a == "--threads") threads = static_cast<unsigned>(std::atoi(v));
    else if (a == "--rounds") rounds = static_cast<unsigned>(std::atoi(v));
    else if (a == "--dtype") to_f32 = std::string(v) == "float32";
    else if (a == "--chunk") staging.chunk_bytes = static_cast<std::size_t>(std::atof(v) * (1 << 20));
    else if (a == "--buffers") staging.buffers = static_cast<unsigned>(std::atoi(v));
    else return usage();
  }
  threads = voxpipe::resolve_threads(threads);  // the internal pipeline takes a resolved count
  try {
    if (std::filesystem::is_directory(path)) return bench_dicom(path, threads, rounds, to_f32, staging);
    const voxpipe::NiftiImage image = voxpipe::open_nifti(path);
    const voxpipe::OutputSpec spec{to_f32 ? voxpipe::DType::f32 : image.dtype, to_f32, false, false};
    std::size_t n = voxpipe::dtype_size(spec.type);
    for (auto d : image.shape) n *= static_cast<std::size_t>(d);
    std::vector<std::byte> out(n), check(n);
    std::memset(out.data(), 0, n);  // warm: both sides write into touched memory
    std::memset(check.data(), 0, n);
    voxpipe::ReadOptions read_options;
    read_options.threads = threads;
    staging.decode_threads = threads;
    voxpipe::cuda::StagingStats stats;
    staging.stats = &stats;
    const voxpipe::cuda::ElementOp op =
        voxpipe::cuda::nifti_element_op(voxpipe::nifti::make_conversion(image, spec));

    auto cpu = [&] { voxpipe::read_nifti_data(image, {}, spec, out, read_options); };
    auto push = [&] {
      voxpipe::cuda::HostConvertSink sink(op, check);
      voxpipe::cuda::stage_nifti_data(image, sink, staging);
    };
    cpu();  // first runs: page cache, pool threads
    push();
    if (std::memcmp(out.data(), check.data(), n) != 0) {
      std::fprintf(stderr, "the staged output differs from read_nifti_data\n");
      return 1;
    }
    std::printf("file %s: %zu output bytes (%s), %u threads, ring %u x %.1f MiB, %u rounds\n",
                path.c_str(), n, to_f32 ? "float32" : "native", threads, staging.buffers,
                static_cast<double>(staging.chunk_bytes) / (1 << 20), rounds);
    alternate(cpu, push, rounds, n, "CPU read_nifti_data", stats);
  } catch (const voxpipe::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
