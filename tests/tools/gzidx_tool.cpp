// Test helper for the GZIDX interop tests (tests/python/test_gzidx_interop.py) and for timing:
//
//   voxpipe_gzidx_tool build FILE.gz OUT.gzidx [SPACING [FIRST STRIDE COUNT]]
//       builds an index (points every SPACING bytes, default 1 MiB, and at the last block start
//       at or before FIRST + i * STRIDE for i < COUNT) and writes it with its staleness trailer.
//   voxpipe_gzidx_tool read FILE.gz INDEX.gzidx BEGIN END OUTFILE [THREADS]
//       loads INDEX.gzidx for FILE.gz (as load_index: an index without a trailer is accepted when
//       its compressed size matches) and writes the uncompressed bytes [BEGIN, END) to OUTFILE.
//
// Prints the seconds each step took to stderr. Exit status: 0 success, 1 voxpipe::Error, 2 usage.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/file.hpp"
#include "gz/seek_index.hpp"
#include "voxpipe/error.hpp"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int usage() {
  std::fprintf(stderr,
               "usage: voxpipe_gzidx_tool build FILE.gz OUT.gzidx [SPACING [FIRST STRIDE COUNT]]\n"
               "       voxpipe_gzidx_tool read FILE.gz INDEX.gzidx BEGIN END OUTFILE [THREADS]\n");
  return 2;
}

int run(int argc, char** argv) {
  using namespace voxpipe;
  if (argc < 2) return usage();
  const std::string cmd = argv[1];
  if (cmd == "build" && (argc == 4 || argc == 5 || argc == 8)) {
    const std::uint64_t spacing = argc >= 5 ? std::stoull(argv[4]) : (1u << 20);
    std::vector<std::uint64_t> wanted;
    if (argc == 8) {
      const std::uint64_t first = std::stoull(argv[5]), stride = std::stoull(argv[6]);
      for (std::uint64_t i = 0, n = std::stoull(argv[7]); i < n; ++i)
        wanted.push_back(first + i * stride);
    }
    const auto t0 = std::chrono::steady_clock::now();
    core::InputFile file(argv[2]);
    const gz::SeekIndex index = gz::build_seek_index(file, spacing, wanted);
    const double t_build = seconds_since(t0);
    gz::write_gzidx_file(argv[3], index, gz::index_key(argv[2]));
    std::fprintf(stderr, "build %.3f s, total %.3f s, %zu points\n", t_build, seconds_since(t0),
                 index.points.size());
    return 0;
  }
  if (cmd == "read" && (argc == 7 || argc == 8)) {
    const std::uint64_t begin = std::stoull(argv[4]), end = std::stoull(argv[5]);
    const unsigned threads = argc == 8 ? static_cast<unsigned>(std::stoul(argv[7])) : 1;
    if (end < begin) return usage();
    const auto t0 = std::chrono::steady_clock::now();
    const gz::SeekIndex index = gz::load_index(argv[2], argv[3]);
    const double t_load = seconds_since(t0);
    core::InputFile file(argv[2]);
    std::vector<std::byte> out(end - begin);
    gz::inflate_range(file, index, begin, end, threads,
                      [&](std::uint64_t offset, std::span<const std::byte> data) {
                        std::memcpy(out.data() + (offset - begin), data.data(), data.size());
                      });
    const double t_read = seconds_since(t0);
    core::AtomicOutputFile o(argv[6]);
    o.write(out);
    o.commit();
    std::fprintf(stderr, "load %.4f s, load+inflate %.4f s\n", t_load, t_read);
    return 0;
  }
  return usage();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const voxpipe::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {  // std::stoull on a malformed number
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
