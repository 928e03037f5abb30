#include "bench_load_nibabel.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "cli_common.hpp"

extern char** environ;

namespace voxpipe::cli {

namespace {

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

NibabelRun not_run(std::string why) {
  NibabelRun r;
  r.unavailable = std::move(why);
  return r;
}

}  // namespace

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

}  // namespace voxpipe::cli
