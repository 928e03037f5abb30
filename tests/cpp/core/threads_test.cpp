// resolve_threads: a request above 0 is kept; 0 takes $VOXPIPE_NUM_THREADS, then
// $OMP_NUM_THREADS (its first number), then the CPUs the thread may run on (a narrowed affinity
// included); values that are not positive integers are ignored; the environment is read on every
// call.
#include <sched.h>

#include <initializer_list>
#include <string>
#include <utility>

#include "test_support.hpp"
#include "voxpipe/threads.hpp"

namespace {

using voxpipe::resolve_threads;
using vptest::ScopedEnv;

// The CPUs the calling thread may run on, counted here with the fixed-size set (test machines
// have fewer than 1024).
unsigned affinity_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  return static_cast<unsigned>(CPU_COUNT(&set));
}

TEST(ResolveThreads, PositiveRequestIsKeptWhateverTheEnvironment) {
  const ScopedEnv vp("VOXPIPE_NUM_THREADS", "3");
  const ScopedEnv omp("OMP_NUM_THREADS", "5");
  for (unsigned n : {1u, 2u, 7u, 1000u}) EXPECT_EQ(resolve_threads(n), n);
}

TEST(ResolveThreads, ZeroWithoutVariablesIsTheAffinityCount) {
  const ScopedEnv vp("VOXPIPE_NUM_THREADS", nullptr);
  const ScopedEnv omp("OMP_NUM_THREADS", nullptr);
  EXPECT_EQ(resolve_threads(0), affinity_count());
  EXPECT_GE(resolve_threads(0), 1u);
}

// taskset / a cgroup cpuset: a thread allowed on one CPU gets one thread, whatever the machine.
TEST(ResolveThreads, ZeroFollowsANarrowedAffinity) {
  const ScopedEnv vp("VOXPIPE_NUM_THREADS", nullptr);
  const ScopedEnv omp("OMP_NUM_THREADS", nullptr);
  cpu_set_t old;
  CPU_ZERO(&old);
  ASSERT_EQ(sched_getaffinity(0, sizeof old, &old), 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c)
    if (CPU_ISSET(c, &old)) first = c;
  ASSERT_GE(first, 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  const unsigned got = resolve_threads(0);
  ASSERT_EQ(sched_setaffinity(0, sizeof old, &old), 0);
  EXPECT_EQ(got, 1u);
}

TEST(ResolveThreads, VoxpipeNumThreadsComesFirst) {
  const ScopedEnv vp("VOXPIPE_NUM_THREADS", "3");
  const ScopedEnv omp("OMP_NUM_THREADS", "5");
  EXPECT_EQ(resolve_threads(0), 3u);
}

TEST(ResolveThreads, OmpNumThreadsWhenVoxpipeNumThreadsIsUnset) {
  const ScopedEnv vp("VOXPIPE_NUM_THREADS", nullptr);
  for (const auto& [value, want] : std::initializer_list<std::pair<const char*, unsigned>>{
           {"5", 5}, {"1", 1}, {" 6 ", 6}, {"4,2", 4}, {"8,4,1", 8}, {"2 , 1", 2}}) {
    const ScopedEnv omp("OMP_NUM_THREADS", value);
    EXPECT_EQ(resolve_threads(0), want) << "OMP_NUM_THREADS='" << value << "'";
  }
}

// An invalid value is ignored: the next source decides, as if the variable were unset.
TEST(ResolveThreads, InvalidValuesAreIgnored) {
  const char* invalid[] = {"", " ", "abc", "0", "-2", "+4", "2.5", "1e3", "4x", "0x10",
                           "99999999999999999999", "65537"};
  for (const char* value : invalid) {
    {
      const ScopedEnv vp("VOXPIPE_NUM_THREADS", value);
      const ScopedEnv omp("OMP_NUM_THREADS", "7");
      EXPECT_EQ(resolve_threads(0), 7u) << "VOXPIPE_NUM_THREADS='" << value << "'";
    }
    const ScopedEnv vp("VOXPIPE_NUM_THREADS", nullptr);
    const ScopedEnv omp("OMP_NUM_THREADS", value);
    EXPECT_EQ(resolve_threads(0), affinity_count()) << "OMP_NUM_THREADS='" << value << "'";
  }
  // OpenMP's list form is OMP_NUM_THREADS's only: VOXPIPE_NUM_THREADS is one number.
  const ScopedEnv vp("VOXPIPE_NUM_THREADS", "4,2");
  const ScopedEnv omp("OMP_NUM_THREADS", ",4");
  EXPECT_EQ(resolve_threads(0), affinity_count());
}

TEST(ResolveThreads, LargestAcceptedValueIs65536) {
  const ScopedEnv vp("VOXPIPE_NUM_THREADS", "65536");
  EXPECT_EQ(resolve_threads(0), 65536u);
}

// A Dask worker or a test sets the variables after the library was loaded and used.
TEST(ResolveThreads, EnvironmentIsReadOnEveryCall) {
  const ScopedEnv omp("OMP_NUM_THREADS", nullptr);
  {
    const ScopedEnv vp("VOXPIPE_NUM_THREADS", "2");
    EXPECT_EQ(resolve_threads(0), 2u);
  }
  {
    const ScopedEnv vp("VOXPIPE_NUM_THREADS", "9");
    EXPECT_EQ(resolve_threads(0), 9u);
  }
  EXPECT_EQ(resolve_threads(0), affinity_count());
}

}  // namespace
