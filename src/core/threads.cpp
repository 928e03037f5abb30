// The one place where "0 threads" becomes a number (voxpipe/threads.hpp).
#include "voxpipe/threads.hpp"

#if defined(__linux__)
#include <sched.h>
#endif

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <thread>

namespace voxpipe {

namespace {

// Larger counts are typing mistakes, not machines: the pool would start that many threads and
// the gzip writer would allocate two 1 MiB buffers per thread.
constexpr unsigned kMaxThreads = 1u << 16;

bool is_space(char c) { return c == ' ' || c == '\t'; }

// The positive integer at the start of `text` (after spaces), up to kMaxThreads, followed by
// spaces and then the end or, when `list`, a comma; nullopt otherwise.
std::optional<unsigned> parse_count(std::string_view text, bool list) {
  std::size_t i = 0;
  while (i < text.size() && is_space(text[i])) ++i;
  const std::size_t digits = i;
  unsigned value = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    value = value * 10 + static_cast<unsigned>(text[i] - '0');
    if (value > kMaxThreads) return std::nullopt;
  }
  if (i == digits || value == 0) return std::nullopt;
  while (i < text.size() && is_space(text[i])) ++i;
  if (i == text.size() || (list && text[i] == ',')) return value;
  return std::nullopt;
}

std::optional<unsigned> from_env(const char* name, bool list) {
  const char* value = std::getenv(name);
  if (!value) return std::nullopt;
  return parse_count(value, list);
}

// How many CPUs the calling thread may run on: the set Python's os.sched_getaffinity(0) gives.
unsigned usable_cpus() noexcept {
#if defined(__linux__)
  // The kernel refuses (EINVAL) a set smaller than its own CPU mask: grow it for machines with
  // more than CPU_SETSIZE (1024) CPUs.
  for (int n = CPU_SETSIZE; n <= (1 << 20); n *= 2) {
    cpu_set_t* set = CPU_ALLOC(n);
    if (!set) break;
    const std::size_t size = CPU_ALLOC_SIZE(n);
    CPU_ZERO_S(size, set);
    const bool ok = sched_getaffinity(0, size, set) == 0;
    const int err = errno;
    const int count = ok ? CPU_COUNT_S(size, set) : 0;
    CPU_FREE(set);
    if (ok) {
      if (count > 0) return static_cast<unsigned>(count);
      break;
    }
    if (err != EINVAL) break;
  }
#endif
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

}  // namespace

unsigned resolve_threads(unsigned requested) noexcept {
  if (requested != 0) return requested;
  if (const auto n = from_env("VOXPIPE_NUM_THREADS", false)) return *n;
  if (const auto n = from_env("OMP_NUM_THREADS", true)) return *n;
  return usable_cpus();
}

}  // namespace voxpipe
