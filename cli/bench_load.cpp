// voxpipe bench-load: voxpipe against nibabel on the user's own files. voxpipe loads them in
// parallel in this process; nibabel loads them in a child Python, one at a time, as people use
// it; both report median wall times over repeated rounds.
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "progress.hpp"
#include "core/thread_pool.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/threads.hpp"

extern char** environ;

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

// The child's side of the comparison, run as `python -c SCRIPT REPEAT DTYPE PROGRESS FILES...`
// after kPythonWithoutCwd (the folder the command runs in holds the user's files, not modules).
// The first file is loaded once untimed (nibabel imports modules on first use: ~13 ms measured
// on a small .nii.gz, more than loading it). Each file's time covers nibabel.load, the load of
// the data and freeing it; with PROGRESS=1 a line "." follows every file. The last line is the
// JSON result.
const char* kNibabelScript = R"PY(
import json, mmap, sys, time
try:
    import numpy as np
    import nibabel as nib
except Exception as e:
    print(json.dumps({'unavailable': '%s: %s' % (type(e).__name__, e)}))
    sys.exit(0)

def materialize(a):
    b = a
    while b is not None:
        if isinstance(b, (np.memmap, mmap.mmap)):
            return np.array(a)
        b = getattr(b, 'base', None)
    return a

repeat, native, progress = int(sys.argv[1]), sys.argv[2] == 'native', sys.argv[3] == '1'
files = sys.argv[4:]

def load(f):
    img = nib.load(f)
    return materialize(np.asanyarray(img.dataobj)) if native else img.get_fdata(dtype=np.float32)

try:
    load(files[0])  # untimed: one-time imports and first-call costs stay out of the rounds
except Exception:
    pass
errors, rounds = {}, []
for _ in range(repeat):
    total = 0.0
    for i, f in enumerate(files):
        if i not in errors:
            t0 = time.perf_counter()
            try:
                data = load(f)
            except Exception as e:
                errors[i] = '%s: %s' % (type(e).__name__, e)
            data = None
            if i not in errors:
                total += time.perf_counter() - t0
        if progress:
            print('.', flush=True)
    rounds.append(total)
print(json.dumps({'nibabel': nib.__version__, 'python': sys.version.split()[0],
                  'rounds': rounds, 'errors': {str(i): m for i, m in errors.items()}}))
)PY";

// A JSON value, parsed from the child's last line: enough of JSON for what json.dumps writes.
struct Json {
  enum class Kind { null, boolean, number, string, array, object } kind = Kind::null;
  double number = 0;
  std::string string;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;

  const Json* get(const std::string& key) const {
    for (const auto& [k, v] : members)
      if (k == key) return &v;
    return nullptr;
  }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : s_(text) {}

  // Throws std::runtime_error on anything that is not one JSON value.
  Json parse() {
    Json v = value();
    skip_space();
    if (i_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw std::runtime_error(std::string("bad JSON from the nibabel run: ") + what + " at " +
                             std::to_string(i_));
  }
  void skip_space() {
    while (i_ < s_.size() && std::strchr(" \t\r\n", s_[i_])) ++i_;
  }
  bool eat(char c) {
    skip_space();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  bool eat_word(const char* w) {
    const std::size_t n = std::strlen(w);
    if (s_.compare(i_, n, w) != 0) return false;
    i_ += n;
    return true;
  }
  Json value() {
    skip_space();
    Json v;
    if (i_ >= s_.size()) fail("unexpected end");
    const char c = s_[i_];
    if (c == '{') {
      ++i_;
      v.kind = Json::Kind::object;
      if (eat('}')) return v;
      do {
        skip_space();
        std::string key = string();
        if (!eat(':')) fail("expected ':'");
        v.members.emplace_back(std::move(key), value());
      } while (eat(','));
      if (!eat('}')) fail("expected '}'");
    } else if (c == '[') {
      ++i_;
      v.kind = Json::Kind::array;
      if (eat(']')) return v;
      do v.items.push_back(value());
      while (eat(','));
      if (!eat(']')) fail("expected ']'");
    } else if (c == '"') {
      v.kind = Json::Kind::string;
      v.string = string();
    } else if (eat_word("true")) {
      v.kind = Json::Kind::boolean;
      v.number = 1;
    } else if (eat_word("false")) {
      v.kind = Json::Kind::boolean;
    } else if (eat_word("null")) {
    } else {
      const char* begin = s_.c_str() + i_;
      char* end = nullptr;
      v.number = std::strtod(begin, &end);
      if (end == begin) fail("unexpected character");
      v.kind = Json::Kind::number;
      i_ += static_cast<std::size_t>(end - begin);
    }
    return v;
  }
  unsigned hex4() {
    if (i_ + 4 > s_.size()) fail("short \\u escape");
    unsigned u = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_++];
      u = u * 16 + static_cast<unsigned>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                                         : (std::tolower(static_cast<unsigned char>(h)) - 'a' + 10));
    }
    return u;
  }
  std::string string() {
    if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string");
    ++i_;
    std::string o;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c != '\\') {
        o += c;
        continue;
      }
      if (i_ >= s_.size()) break;
      c = s_[i_++];
      switch (c) {
        case 'n': o += '\n'; break;
        case 't': o += '\t'; break;
        case 'r': o += '\r'; break;
        case 'b': o += '\b'; break;
        case 'f': o += '\f'; break;
        case 'u': {
          unsigned u = hex4();
          if (u >= 0xd800 && u < 0xdc00 && s_.compare(i_, 2, "\\u") == 0) {
            i_ += 2;
            u = 0x10000 + ((u - 0xd800) << 10) + (hex4() - 0xdc00);
          }
          // UTF-8
          if (u < 0x80) {
            o += static_cast<char>(u);
          } else if (u < 0x800) {
            o += static_cast<char>(0xc0 | (u >> 6));
            o += static_cast<char>(0x80 | (u & 0x3f));
          } else if (u < 0x10000) {
            o += static_cast<char>(0xe0 | (u >> 12));
            o += static_cast<char>(0x80 | ((u >> 6) & 0x3f));
            o += static_cast<char>(0x80 | (u & 0x3f));
          } else {
            o += static_cast<char>(0xf0 | (u >> 18));
            o += static_cast<char>(0x80 | ((u >> 12) & 0x3f));
            o += static_cast<char>(0x80 | ((u >> 6) & 0x3f));
            o += static_cast<char>(0x80 | (u & 0x3f));
          }
          break;
        }
        default: o += c;  // \" \\ \/
      }
    }
    if (i_ >= s_.size()) fail("unterminated string");
    ++i_;
    return o;
  }

  const std::string& s_;
  std::size_t i_ = 0;
};

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

struct NibabelRun {
  std::string unavailable;  // why there are no figures; empty when there are
  std::string version, python_version;
  std::vector<double> rounds;                       // seconds, successful files only
  std::vector<std::pair<std::size_t, std::string>> errors;  // index into the files given, message
};

NibabelRun not_run(std::string why) {
  NibabelRun r;
  r.unavailable = std::move(why);
  return r;
}

// The Python to run nibabel with: --python, $VOXPIPE_PYTHON (which the command pip installs sets
// to the Python it runs in, when unset), `python` beside this executable (a C++ build installed
// into a venv's bin/), else python3 on PATH.
std::string find_python(const std::optional<std::string>& given) {
  if (given) return *given;
  if (const char* env = std::getenv("VOXPIPE_PYTHON"); env && *env) return env;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto beside = exe.parent_path() / "python";
    if (access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  return "python3";
}

// Runs kNibabelScript in a child process over `paths` and collects its figures. Nothing here is
// an error of the command: a missing Python, a missing nibabel or a failed child come back as
// `unavailable`.
NibabelRun run_nibabel(const std::string& python, const std::vector<std::string>& paths, int repeat,
                       bool native, Progress& progress, bool show_progress) {
  NibabelRun result;
  std::vector<std::string> args{python, "-c", std::string(kPythonWithoutCwd) + kNibabelScript,
                                std::to_string(repeat),
                                native ? "native" : "float32", show_progress ? "1" : "0"};
  args.insert(args.end(), paths.begin(), paths.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return not_run(std::string("pipe: ") + std::strerror(errno));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return not_run(std::string("pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  pid_t pid = -1;
  const int spawned = posix_spawnp(&pid, python.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (spawned != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    return not_run(python + ": " + std::strerror(spawned));
  }

  // Read both pipes to the end (a full stderr pipe would stall the child), counting progress.
  std::string out, err, line;
  std::array<pollfd, 2> fds{pollfd{out_pipe[0], POLLIN, 0}, pollfd{err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char chunk[65536];
  while (open_fds > 0) {
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].fd < 0 || !fds[k].revents) continue;
      const ssize_t n = read(fds[k].fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        close(fds[k].fd);
        fds[k].fd = -1;
        --open_fds;
        continue;
      }
      if (k == 1) {
        err.append(chunk, static_cast<std::size_t>(n));
        if (err.size() > (1u << 20)) err.erase(0, err.size() - (1u << 20));
        continue;
      }
      for (ssize_t j = 0; j < n; ++j) {
        if (chunk[j] != '\n') {
          line += chunk[j];
        } else if (line == ".") {
          progress.tick();
          line.clear();
        } else {
          out = std::move(line);
          line.clear();
        }
      }
    }
  }
  for (const auto& p : fds)
    if (p.fd >= 0) close(p.fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!line.empty()) out = line;

  const bool exited_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!exited_ok || out.empty() || out[0] != '{') {
    // The child's last words (a traceback ends with the exception) say why.
    err.erase(err.find_last_not_of(" \r\n") + 1);
    std::string why = err.substr(err.rfind('\n') + 1);
    if (why.empty())
      why = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                : "exit status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return not_run(python + ": " + why);
  }
  try {
    const Json j = JsonParser(out).parse();
    if (const Json* u = j.get("unavailable")) return not_run(python + ": " + u->string);
    const Json* rounds = j.get("rounds");
    if (!rounds || rounds->items.empty()) return not_run(python + ": no timings in the output");
    for (const auto& r : rounds->items) result.rounds.push_back(r.number);
    if (const Json* v = j.get("nibabel")) result.version = v->string;
    if (const Json* v = j.get("python")) result.python_version = v->string;
    if (const Json* e = j.get("errors"))
      for (const auto& [k, v] : e->members) result.errors.emplace_back(std::stoul(k), v.string);
  } catch (const std::exception& e) {
    return not_run(python + ": " + e.what());
  }
  return result;
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
