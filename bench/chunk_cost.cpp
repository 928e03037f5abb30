// What a chunk of the parallel inflate costs, by kind: a speculative chunk (decoded without its
// window: marker mode until the window is clean, then ISA-L, then its markers replaced when it is
// accepted) against a chunk the resolver decodes itself with the known window, per byte of
// output. Issue 36's goal: speculative at most 1.25x known.
//
// Runs inflate_parallel on FILE (any gzip file; a .nii.gz's voxels taken as int16) with each
// thread count in turn, round after round (interleaved: this machine's speed drifts), to a sink
// that converts the bytes to float32 into a buffer allocated and touched once before the first
// timed round (as a loop that reuses its output does), or that discards them (--sink discard).
// Prints per round and thread count the wall time and ParallelInflateStats, then the medians:
//   spec ns/B   (speculate + finalize seconds) / bytes of accepted speculative chunks
//   known ns/B  known-window seconds / their bytes (both include the sink)
//   ratio       spec / known per byte
//   marker      share of the speculative output decoded in marker mode, and its rate
//
// Usage: voxpipe_bench_chunk_cost FILE.gz [--threads 1,2] [--rounds R] [--sink float32|discard]
//                                 [--chunk MIB]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/file.hpp"
#include "gz/parallel_inflate.hpp"
#include "voxpipe/error.hpp"

namespace {

using voxpipe::gz::ParallelInflateStats;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int usage() {
  std::fprintf(stderr, "usage: voxpipe_bench_chunk_cost FILE.gz [--threads 1,2] [--rounds R] "
                       "[--sink float32|discard] [--chunk MIB]\n");
  return 2;
}

struct Round {
  double wall = 0;
  ParallelInflateStats s;
  double spec_ns() const {
    return s.speculative_bytes ? 1e9 * (s.speculate_seconds + s.finalize_seconds) /
                                     static_cast<double>(s.speculative_bytes)
                               : 0;
  }
  double known_ns() const {
    return s.known_bytes ? 1e9 * s.known_seconds / static_cast<double>(s.known_bytes) : 0;
  }
};

int run(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string path = argv[1];
  std::vector<unsigned> threads{1, 2};
  unsigned rounds = 5;
  bool discard = false;
  std::size_t chunk = 0;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const std::string v = argv[++i];
    if (a == "--threads") {
      threads.clear();
      for (std::size_t at = 0; at < v.size();) {
        const std::size_t comma = std::min(v.find(',', at), v.size());
        threads.push_back(static_cast<unsigned>(std::stoul(v.substr(at, comma - at))));
        at = comma + 1;
      }
    } else if (a == "--rounds") {
      rounds = static_cast<unsigned>(std::stoul(v));
    } else if (a == "--sink") {
      if (v != "float32" && v != "discard") return usage();
      discard = v == "discard";
    } else if (a == "--chunk") {
      chunk = std::stoul(v) << 20;
    } else {
      return usage();
    }
  }
  voxpipe::core::InputFile file(path);
  // Untimed: the page cache, and the output size.
  voxpipe::gz::ParallelInflateOptions first;
  first.threads = 1;
  const std::uint64_t size =
      voxpipe::gz::inflate_parallel(file, [](std::uint64_t, std::span<const std::byte>) {}, first);
  // Allocated and touched once: every round writes into warm memory.
  std::vector<float> out(discard ? 0 : size / 2 + 1, 1.0f);
  const voxpipe::gz::Sink sink = [&](std::uint64_t at, std::span<const std::byte> b) {
    if (discard) return;
    // The int16 values wholly inside this piece (one straddling two pieces is left out: this is
    // a cost measurement, not a reader).
    const std::uint64_t e0 = (at + 1) / 2, e1 = (at + b.size()) / 2;
    const std::byte* p = b.data() + (2 * e0 - at);
    float* dst = out.data() + e0;
    for (std::uint64_t e = e0; e < e1; ++e, p += 2, ++dst) {
      std::int16_t v;
      std::memcpy(&v, p, 2);
      *dst = static_cast<float>(v) * 0.5f + 1.0f;
    }
  };
  std::printf("%s: %llu bytes -> %llu, sink %s\n", path.c_str(),
              static_cast<unsigned long long>(file.size()), static_cast<unsigned long long>(size),
              discard ? "discard" : "float32 (warm buffer)");
  std::vector<std::vector<Round>> results(threads.size());
  for (unsigned r = 0; r < rounds; ++r) {
    for (std::size_t t = 0; t < threads.size(); ++t) {
      voxpipe::gz::ParallelInflateOptions o;
      o.threads = threads[t];
      if (chunk) o.chunk_size = chunk;
      Round round;
      o.stats = &round.s;
      const auto t0 = std::chrono::steady_clock::now();
      voxpipe::gz::inflate_parallel(file, sink, o);
      round.wall = seconds_since(t0);
      const ParallelInflateStats& s = round.s;
      std::printf("round %u threads=%u %.3f s  spec %llu chunks %.1f MB (marker %.1f MB in %.3f s) "
                  "%.3f+%.3f s, %llu decoded in all (%.3f s); known %llu runs %llu chunks "
                  "%.1f MB %.3f s; decoders %llu made %llu reused, pieces %llu made %llu reused, "
                  "%.1f MB trimmed\n",
                  r + 1, threads[t], round.wall,
                  static_cast<unsigned long long>(s.speculative_chunks), s.speculative_bytes / 1e6,
                  s.marker_bytes / 1e6, s.marker_seconds, s.speculate_seconds, s.finalize_seconds,
                  static_cast<unsigned long long>(s.speculated_chunks), s.speculated_seconds,
                  static_cast<unsigned long long>(s.known_runs),
                  static_cast<unsigned long long>(s.known_chunks), s.known_bytes / 1e6,
                  s.known_seconds, static_cast<unsigned long long>(s.decoders_made),
                  static_cast<unsigned long long>(s.decoders_reused),
                  static_cast<unsigned long long>(s.pieces_made),
                  static_cast<unsigned long long>(s.pieces_reused), s.trimmed_bytes / 1e6);
      std::fflush(stdout);
      results[t].push_back(round);
    }
  }
  std::printf("\nmedians over %u rounds:\n", rounds);
  std::printf("threads   wall s  spec ns/B  known ns/B  ratio  marker share  marker MB/s  "
              "known MB/s  speculated/accepted\n");
  for (std::size_t t = 0; t < threads.size(); ++t) {
    std::vector<double> wall, spec, known, ratio, share, marker_rate, known_rate, wasted;
    for (const Round& r : results[t]) {
      wall.push_back(r.wall);
      if (r.s.known_bytes) known.push_back(r.known_ns());
      if (r.s.known_seconds > 0) known_rate.push_back(r.s.known_bytes / r.s.known_seconds / 1e6);
      if (!r.s.speculative_bytes) continue;
      spec.push_back(r.spec_ns());
      if (r.s.known_bytes) ratio.push_back(r.spec_ns() / r.known_ns());
      share.push_back(static_cast<double>(r.s.marker_bytes) / r.s.speculative_bytes);
      if (r.s.marker_seconds > 0)
        marker_rate.push_back(r.s.marker_bytes / r.s.marker_seconds / 1e6);
      wasted.push_back(static_cast<double>(r.s.speculated_chunks) /
                       static_cast<double>(r.s.speculative_chunks));
    }
    std::printf("%7u  %7.3f  %9.2f  %10.2f  %5.2f  %11.0f%%  %11.0f  %10.0f  %19.2f\n", threads[t],
                median(wall), median(spec), median(known), median(ratio), 100 * median(share),
                median(marker_rate), median(known_rate), median(wasted));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const voxpipe::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
