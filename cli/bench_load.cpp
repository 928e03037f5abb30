// voxpipe bench-load: voxpipe against nibabel on the user's own files. voxpipe loads them in
// parallel in this process (here); nibabel loads them in a child Python, one at a time, as people
// use it (bench_load_nibabel.cpp); both report median wall times over repeated rounds.
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "bench_load_nibabel.hpp"
#include "cli_common.hpp"
#include "commands.hpp"
#include "progress.hpp"
#include "core/thread_pool.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/threads.hpp"

namespace voxpipe::cli {

namespace {

const char* kBenchLoadUsage =
    "usage: voxpipe bench-load [--threads N] [--io-threads N] [--repeat R]\n"
    "                          [--dtype float32|native] [--no-nibabel] [--python PATH]\n"
    "                          [--progress M] FILES...\n"
    "\n"
    "Loads the full data of every FILE with voxpipe, then with nibabel in a child Python process,\n"
    "and reports for each the median wall time of R rounds over all files, files/s, MB/s on disk\n"
    "and MB/s decoded, and voxpipe's speed over nibabel's. Before timing, one untimed voxpipe\n"
    "load of every file warms the page cache. voxpipe decodes into output buffers it reuses from\n"
    "file to file and round to round (as a data loader can); nibabel allocates a fresh array per\n"
    "file, as its users do, and pays for those pages.\n"
    "\n"
    "  --dtype float32   as img.get_fdata(dtype=np.float32): scale factors applied (default)\n"
    "  --dtype native    as np.asanyarray(img.dataobj): the stored dtype, or float64 when the\n"
    "                    file has scale factors (a memory map nibabel returns is copied in the\n"
    "                    timing, so both tools bring the data into memory)\n"
    "  --threads N       voxpipe decode threads; 0 (default): $VOXPIPE_NUM_THREADS, else\n"
    "                    $OMP_NUM_THREADS, else the CPUs this process may run on\n"
    "  --io-threads N    files voxpipe reads at once (default: the decode thread count); at most\n"
    "                    this many decoded outputs are held in memory\n"
    "  --repeat R        timed rounds over all files (default 3)\n"
    "  --no-nibabel      measure voxpipe only\n"
    "  --python PATH     the Python that runs nibabel; default $VOXPIPE_PYTHON, else the Python\n"
    "                    that runs the command (pip's voxpipe), else the python beside the\n"
    "                    voxpipe executable (a venv's bin/), else python3 on PATH\n"
    "\n"
    "nibabel loads one file at a time, in a plain loop, after one untimed load of the first file\n"
    "(it imports modules on first use). A file voxpipe cannot load is named on stderr and left\n"
    "out of the timing, the others are still measured, and the exit code is that of the first\n"
    "failing file (docs/exit_codes.md). Without Python or nibabel, voxpipe is reported alone.\n"
    "\n"
    "  --progress M      auto (default), bar, log or none: the progress report on stderr (loads\n"
    "                    done of all rounds, rate, ETA; docs/cli.md \"Progress\")\n";

// Output buffers for the voxpipe side: at most one per file in flight, reused across files and
// rounds. Large ones are 2 MiB-aligned and asked for huge pages, because first touch of fresh
// 4 KiB pages costs more than decoding (DESIGN.md); none is zeroed, so the decoding threads touch
// it first.
class BufferPool {
 public:
  struct Buffer {
    struct Free {
      void operator()(std::byte* p) const noexcept { std::free(p); }
    };
    std::unique_ptr<std::byte, Free> data;
    std::size_t capacity = 0;
  };

  // Holds a buffer of at least `bytes` and gives it back to the pool when destroyed.
  class Lease {
   public:
    Lease(BufferPool& pool, std::size_t bytes) : pool_(pool), buffer_(pool.take(bytes)) {}
    ~Lease() { pool_.give(std::move(buffer_)); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    std::byte* data() const noexcept { return buffer_.data.get(); }

   private:
    BufferPool& pool_;
    Buffer buffer_;
  };

  void clear() {
    std::lock_guard lock(mutex_);
    free_.clear();
  }

 private:
  // The smallest free buffer that fits; else the largest, regrown (so the count never exceeds
  // the files in flight).
  Buffer take(std::size_t bytes) {
    Buffer b;
    {
      std::lock_guard lock(mutex_);
      auto pick = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (pick == free_.end()) {
          pick = it;
        } else if (it->capacity >= bytes) {
          if (pick->capacity < bytes || it->capacity < pick->capacity) pick = it;
        } else if (pick->capacity < bytes && it->capacity > pick->capacity) {
          pick = it;
        }
      }
      if (pick != free_.end()) {
        b = std::move(*pick);
        free_.erase(pick);
      }
    }
    if (b.capacity < bytes) {
      b = {};  // release before allocating: peak memory stays at one buffer per file in flight
      constexpr std::size_t kHuge = std::size_t{2} << 20;
      const std::size_t align = bytes >= kHuge ? kHuge : 64;
      const std::size_t size = (std::max<std::size_t>(bytes, 1) + align - 1) / align * align;
      auto* p = static_cast<std::byte*>(std::aligned_alloc(align, size));
      if (!p) throw std::bad_alloc();
      if (align == kHuge) madvise(p, size, MADV_HUGEPAGE);  // a hint: refusal is harmless
      b.data.reset(p);
      b.capacity = size;
    }
    return b;
  }

  void give(Buffer b) {
    if (!b.data) return;
    std::lock_guard lock(mutex_);
    free_.push_back(std::move(b));
  }

  std::mutex mutex_;
  std::vector<Buffer> free_;
};

struct BenchFile {
  std::string path;
  std::uint64_t disk_bytes = 0;     // header and data files
  std::uint64_t decoded_bytes = 0;  // the output array
  int exit_code = 0;                // 0: loaded; else the code of its error (docs/exit_codes.md)
  std::string error;                // "error (CODE): message", as the CLI prints errors
};

// Loads one file's full data into a pooled buffer, as get_fdata(dtype=float32) or, with
// `native`, as np.asanyarray(img.dataobj) (unscaled data stays in the file's byte order, as
// nibabel returns it). `info`, when given, receives the sizes.
void bench_load_one(const std::string& path, bool native, unsigned threads, BufferPool& pool,
                    BenchFile* info) {
  const NiftiImage img = open_nifti(path);
  check_data_size(img);
  // get_fdata(dtype=float32) of complex data keeps the real part (NumPy's cast, with a warning).
  OutputSpec spec{DType::f32, true, false, dtype_is_complex(img.dtype)};
  if (native) {
    spec.real_part = false;
    spec.type = scaled_dtype(img.dtype, img.scaling, path);
    spec.apply_scaling = img.scaling.active();
    spec.file_byte_order = !spec.apply_scaling;
  }
  if (!conversion_supported(img.dtype, spec))
    throw Error(ErrorCode::invalid_argument, path, "datatype",
                "expected a datatype get_fdata(dtype=float32) reads, but found " +
                    std::string(dtype_name(img.dtype)) + " (try --dtype native)");
  const std::uint64_t bytes = img.voxel_count() * dtype_size(spec.type);
  BufferPool::Lease out(pool, static_cast<std::size_t>(bytes));
  read_nifti_data(img, {}, spec, std::span<std::byte>(out.data(), static_cast<std::size_t>(bytes)),
                  ReadOptions{threads});
  if (info) {
    std::error_code ec;
    std::uint64_t disk = std::filesystem::file_size(img.header_path, ec);
    if (ec) disk = 0;
    if (img.data_path != img.header_path) {
      const std::uint64_t d = std::filesystem::file_size(img.data_path, ec);
      disk += ec ? 0 : d;
    }
    info->disk_bytes = disk;
    info->decoded_bytes = bytes;
  }
}

// One pass of voxpipe over the files still marked good, `io_threads` files at a time; returns
// its wall time in seconds. A file that fails gets its error recorded and is left out later.
double bench_voxpipe_round(std::vector<BenchFile>& files, bool native, unsigned threads,
                           unsigned io_threads, BufferPool& pool, Progress& progress, bool record) {
  std::vector<std::size_t> todo;
  for (std::size_t i = 0; i < files.size(); ++i)
    if (!files[i].exit_code) todo.push_back(i);
  const auto t0 = std::chrono::steady_clock::now();
  core::parallel_for(todo.size(), io_threads, [&](std::size_t k) {
    BenchFile& f = files[todo[k]];
    try {
      bench_load_one(f.path, native, threads, pool, record ? &f : nullptr);
    } catch (const Error& e) {
      f.exit_code = exit_code(e.code());
      f.error = std::string("error (") + error_code_name(e.code()) + "): " + e.what();
    } catch (const std::exception& e) {
      f.exit_code = kInternal;
      f.error = std::string("internal error: ") + f.path + ": " + e.what();
    }
    progress.tick();
  });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// One table row: median ms, files/s, MB/s on disk, MB/s decoded (MB = 10^6 bytes).
std::string bench_row(const char* tool, double seconds, std::size_t files, std::uint64_t disk,
                      std::uint64_t decoded) {
  char buf[160];
  const double s = std::max(seconds, 1e-9);
  std::snprintf(buf, sizeof buf, "%-9s %12.3f %10.1f %12.1f %14.1f", tool, seconds * 1e3,
                static_cast<double>(files) / s, static_cast<double>(disk) / 1e6 / s,
                static_cast<double>(decoded) / 1e6 / s);
  return buf;
}

}  // namespace

int cmd_bench_load(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                   bool err_is_terminal) {
  std::vector<std::string> paths;
  unsigned threads = 0;
  std::optional<unsigned> io_threads;
  int repeat = 3;
  bool native = false;
  bool nibabel = true;
  std::optional<std::string> python;
  ProgressMode progress_mode = ProgressMode::automatic;
  OptionParser parser("voxpipe bench-load", kBenchLoadUsage, out, err);
  parser.progress(progress_mode)
      .integer("--threads", 0, 1024, threads)
      .integer("--io-threads", 1, 1024, io_threads)
      .integer("--repeat", 1, 1000, repeat)
      .value("--dtype",
             [&native](const std::string& v) {
               if (v != "float32" && v != "native") return expects("--dtype", "float32 or native", v);
               native = v == "native";
               return std::string();
             })
      .value("--python", python)
      .flag("--no-nibabel", [&nibabel] { nibabel = false; })
      .positionals(paths, 1, SIZE_MAX, "expected FILES")
      .usage_after_missing_value();
  if (const auto code = parser.parse(args)) return *code;
  const unsigned decode_threads = resolve_threads(threads);
  const unsigned in_flight = io_threads ? *io_threads : decode_threads;

  std::vector<BenchFile> files;
  for (const auto& p : paths) files.emplace_back().path = p;
  const std::uint64_t n = files.size();
  Progress progress(err, progress_mode, err_is_terminal,
                    n * (1 + static_cast<std::uint64_t>(repeat) * (nibabel ? 2 : 1)), "voxpipe bench-load",
                    "loads");
  BufferPool pool;

  // Untimed: warms the page cache, sizes the outputs and finds the files that do not load.
  progress.phase("warm-up");
  bench_voxpipe_round(files, native, decode_threads, in_flight, pool, progress, true);
  std::vector<std::string> good;
  std::uint64_t disk = 0, decoded = 0;
  for (const auto& f : files) {
    if (f.exit_code) continue;
    good.push_back(f.path);
    disk += f.disk_bytes;
    decoded += f.decoded_bytes;
  }
  const std::uint64_t rounds_total = static_cast<std::uint64_t>(repeat) * (nibabel ? 2 : 1);
  progress.expect(n + good.size() * rounds_total);
  std::vector<double> voxpipe_rounds;
  if (!good.empty()) {
    for (int r = 0; r < repeat; ++r) {
      progress.phase("voxpipe round " + std::to_string(r + 1) + "/" + std::to_string(repeat));
      voxpipe_rounds.push_back(
          bench_voxpipe_round(files, native, decode_threads, in_flight, pool, progress, false));
    }
  }
  pool.clear();  // the nibabel child gets the memory

  NibabelRun nib;
  std::string python_path;
  if (nibabel && !good.empty()) {
    python_path = find_python(python);
    progress.phase("nibabel");
    nib = run_nibabel(python_path, good, repeat, native, progress, progress.active());
  }
  progress.end();

  // Errors, in command-line order; the first one decides the exit code.
  int code = 0;
  std::size_t failed = 0;
  for (const auto& f : files) {
    if (!f.exit_code) continue;
    err << "voxpipe bench-load: " << f.error << "\n";
    if (!code) code = f.exit_code;
    ++failed;
  }

  const char* dtype_label = native ? "native (as np.asanyarray(img.dataobj))" : "float32 (as get_fdata(dtype=float32))";
  out << "voxpipe bench-load: " << n << (n == 1 ? " file" : " files") << ", dtype " << dtype_label
      << ", median of " << repeat << (repeat == 1 ? " round" : " rounds") << "\n";
  out << "page cache warmed by one untimed voxpipe load of every file\n";
  if (nibabel)
    out << "voxpipe reuses its output buffers across files and rounds; nibabel allocates a fresh\n"
           "array per file\n";
  out << "files:      " << good.size() << "\n";
  if (failed)
    out << "failed:     " << failed << (failed == 1 ? " file" : " files")
        << " (errors on stderr; left out of the figures)\n";
  out << "on disk:    " << disk << " bytes (" << fixed(disk / 1e6, 1) << " MB)\n";
  out << "decoded:    " << decoded << " bytes (" << fixed(decoded / 1e6, 1) << " MB)\n";
  if (good.empty()) return code;

  const double vp_s = median(voxpipe_rounds);
  out << "\n" << "tool         median ms    files/s    disk MB/s   decoded MB/s\n";
  const std::size_t at_once = std::min<std::size_t>(in_flight, good.size());
  out << bench_row("voxpipe", vp_s, good.size(), disk, decoded) << "   " << decode_threads
      << (decode_threads == 1 ? " decode thread, " : " decode threads, ") << at_once
      << (at_once == 1 ? " file at a time\n" : " files at once\n");
  if (!nibabel) return code;
  if (!nib.unavailable.empty()) {
    out << "nibabel:    not measured (" << nib.unavailable << ")\n";
    return code;
  }
  // nibabel's figures count only the files it loaded.
  std::uint64_t nib_disk = disk, nib_decoded = decoded;
  std::size_t nib_files = good.size();
  std::vector<const BenchFile*> loaded;
  for (const auto& f : files)
    if (!f.exit_code) loaded.push_back(&f);
  for (const auto& [index, message] : nib.errors) {
    if (index >= loaded.size()) continue;
    out << "nibabel failed on " << loaded[index]->path << ": " << message << "\n";
    nib_disk -= loaded[index]->disk_bytes;
    nib_decoded -= loaded[index]->decoded_bytes;
    --nib_files;
  }
  const double nib_s = median(nib.rounds);
  out << bench_row("nibabel", nib_s, nib_files, nib_disk, nib_decoded) << "   nibabel " << nib.version
      << ", Python " << nib.python_version << ", one file at a time (" << python_path << ")\n";
  out << "\n";
  if (!nib.errors.empty())
    out << "voxpipe / nibabel: not compared (nibabel failed on " << nib.errors.size() << " of the files)\n";
  else
    out << "voxpipe / nibabel: voxpipe is " << fixed(nib_s / std::max(vp_s, 1e-9), 1)
        << "x as fast (median wall times)\n";
  return code;
}

}  // namespace voxpipe::cli
