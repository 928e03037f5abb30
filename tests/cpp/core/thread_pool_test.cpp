// The worker pool: every index exactly once, exceptions reach the caller after all tasks have
// stopped, and independent callers on different threads can use the pool at the same time.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.hpp"
#include "test_support.hpp"

namespace {

using voxpipe::core::parallel_for;

void expect_each_index_once(std::size_t n, unsigned threads) {
  std::vector<std::atomic<int>> hits(n);
  parallel_for(n, threads, [&](std::size_t i) { hits[i].fetch_add(1, std::memory_order_relaxed); });
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i << " threads " << threads;
}

TEST(ThreadPool, EveryIndexRunsExactlyOnce) {
  for (unsigned threads : {0u, 1u, 2u, 3u, 8u, 64u})
    for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{1000}, std::size_t{100000}})
      expect_each_index_once(n, threads);
}

// File-level and chunk-level parallelism share the pool: a task may call parallel_for again.
// Inner calls run on the calling task's thread when no worker is free, so they never wait on
// work nobody is doing.
TEST(ThreadPool, NestedCallsCompleteWithEveryIndexOnce) {
  for (unsigned outer_threads : {1u, 2u, 4u, 16u}) {
    for (unsigned inner_threads : {1u, 2u, 8u}) {
      constexpr std::size_t kOuter = 12, kInner = 300;
      std::vector<std::atomic<int>> hits(kOuter * kInner);
      parallel_for(kOuter, outer_threads, [&](std::size_t o) {
        parallel_for(kInner, inner_threads, [&](std::size_t i) {
          hits[o * kInner + i].fetch_add(1, std::memory_order_relaxed);
        });
      });
      for (std::size_t i = 0; i < hits.size(); ++i)
        ASSERT_EQ(hits[i].load(), 1) << i << " outer " << outer_threads << " inner " << inner_threads;
    }
  }
}

TEST(ThreadPool, ZeroTasksRunsNothing) {
  bool called = false;
  parallel_for(0, 4, [&](std::size_t) { called = true; });
  EXPECT_FALSE(called);
}

// 0 is taken as 1: the pool never looks up a core count (the public call resolved it).
TEST(ThreadPool, SingleThreadRunsInOrderOnTheCaller) {
  for (unsigned threads : {0u, 1u}) {
    std::vector<std::size_t> order;
    const auto caller = std::this_thread::get_id();
    parallel_for(50, threads, [&](std::size_t i) {
      EXPECT_EQ(std::this_thread::get_id(), caller);
      order.push_back(i);
    });
    ASSERT_EQ(order.size(), 50u);
    for (std::size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], i);
  }
}

TEST(ThreadPool, ExceptionPropagatesAfterAllTasksStopped) {
  for (unsigned threads : {1u, 2u, 4u}) {
    std::atomic<int> running{0};
    std::atomic<int> ran_after_return{0};
    std::atomic<bool> returned{false};
    try {
      parallel_for(10000, threads, [&](std::size_t i) {
        running.fetch_add(1);
        if (returned.load()) ran_after_return.fetch_add(1);
        if (i == 37) {
          running.fetch_sub(1);
          throw std::runtime_error("task 37 failed");
        }
        std::this_thread::yield();
        running.fetch_sub(1);
      });
      ADD_FAILURE() << "no exception with " << threads << " threads";
    } catch (const std::runtime_error& e) {
      returned = true;
      EXPECT_STREQ(e.what(), "task 37 failed");
      EXPECT_EQ(running.load(), 0) << "tasks still running when parallel_for threw";
    }
    // Give stray workers a moment: none may touch the finished job.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(ran_after_return.load(), 0);
    EXPECT_EQ(running.load(), 0);
  }
}

TEST(ThreadPool, ExceptionTypeIsPreserved) {
  EXPECT_THROW(parallel_for(100, 4, [](std::size_t i) { if (i == 99) throw std::out_of_range("x"); }),
               std::out_of_range);
  EXPECT_VP_ERROR(parallel_for(100, 4, [](std::size_t i) {
                    if (i % 10 == 3) throw voxpipe::Error(voxpipe::ErrorCode::corrupt, "f", "", "bad");
                  }),
                  voxpipe::ErrorCode::corrupt);
}

TEST(ThreadPool, UsableAfterAnException) {
  EXPECT_THROW(parallel_for(64, 4, [](std::size_t) { throw std::runtime_error("all fail"); }),
               std::runtime_error);
  expect_each_index_once(5000, 4);
}

TEST(ThreadPool, ConcurrentCallersFromDifferentThreads) {
  constexpr int kCallers = 6, kRounds = 40;
  constexpr std::size_t kN = 2000;
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < kCallers; ++t) {
    callers.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        std::vector<std::atomic<int>> hits(kN);
        parallel_for(kN, static_cast<unsigned>(2 + (t + round) % 4),
                     [&](std::size_t i) { hits[i].fetch_add(1, std::memory_order_relaxed); });
        for (auto& h : hits)
          if (h.load() != 1) failures.fetch_add(1);
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadPool, NestedCallFromAnotherThreadInsideATask) {
  // A task may not call parallel_for itself, but it may hand work to a thread of its own that
  // does (e.g. a library user's callback): that inner call must complete while the outer tasks
  // hold the workers.
  constexpr std::size_t kOuter = 8, kInner = 500;
  std::vector<std::atomic<int>> hits(kOuter * kInner);
  parallel_for(kOuter, 4, [&](std::size_t o) {
    std::thread inner([&, o] {
      parallel_for(kInner, 4, [&](std::size_t i) { hits[o * kInner + i].fetch_add(1); });
    });
    inner.join();
  });
  for (std::size_t k = 0; k < hits.size(); ++k) ASSERT_EQ(hits[k].load(), 1) << k;
}

TEST(ThreadPool, ConcurrentCallersWithExceptions) {
  std::atomic<int> caught{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int round = 0; round < 25; ++round) {
        try {
          parallel_for(500, 3, [&](std::size_t i) {
            if (i == static_cast<std::size_t>(100 + t)) throw std::runtime_error("x");
          });
        } catch (const std::runtime_error&) {
          caught.fetch_add(1);
        }
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(caught.load(), 4 * 25);
}

// Runs `test` (a ThreadPoolChild test) in a new process of this executable and returns its wait
// status, or -1 after failing the calling test when it could not start or did not end in 20 s.
int run_child_test(const std::string& test) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  env_strings.emplace_back("VOXPIPE_TEST_POOL_CHILD=1");
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string filter = "--gtest_filter=ThreadPoolChild." + test;
  char* argv[] = {exe.data(), filter.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    ADD_FAILURE() << "posix_spawn: " << spawned;
    return -1;
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  pid_t done = 0;
  while ((done = waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (done == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    ADD_FAILURE() << test << ": the process did not exit within 20 s after main returned";
    return -1;
  }
  return status;
}

void expect_normal_exit(int status) {
  if (status == -1) return;  // already reported
  ASSERT_TRUE(WIFEXITED(status)) << "child ended by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Runs only inside the child process that ProcessExitsAfterUsingThePool starts.
TEST(ThreadPoolChild, UsePoolThenReturnFromMain) {
  if (!std::getenv("VOXPIPE_TEST_POOL_CHILD")) GTEST_SKIP() << "runs as a child process only";
  expect_each_index_once(1000, 4);
}

// The library may keep workers for the life of the process, but it must still let the process
// end: a program (the CLI, a Python interpreter) that used the pool has to exit normally.
TEST(ThreadPool, ProcessExitsAfterUsingThePool) {
  expect_normal_exit(run_child_test("UsePoolThenReturnFromMain"));
}

// Runs only inside the child process that ProcessExitsWhileTasksRun starts.
TEST(ThreadPoolChild, ReturnFromMainWhileTasksRun) {
  if (!std::getenv("VOXPIPE_TEST_POOL_CHILD")) GTEST_SKIP() << "runs as a child process only";
  static std::atomic<int> rounds{0};
  std::thread([] {
    for (;;) {
      std::atomic<std::uint64_t> sum{0};
      parallel_for(64, 4, [&](std::size_t i) {
        std::vector<std::uint64_t> v(4096, i);  // allocates and frees while exit() runs
        std::uint64_t s = 0;
        for (auto x : v) s += x;
        sum.fetch_add(s, std::memory_order_relaxed);
      });
      rounds.fetch_add(1);
    }
  }).detach();
  while (rounds.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// A thread still inside parallel_for, its tasks running on the workers, when the program ends (a
// Python daemon thread in the middle of a read at interpreter exit): exit() runs the static
// destructors while the workers work, and the process must still end with its own status, not
// abort on a pool, mutex or condition variable destroyed under them, nor hang.
TEST(ThreadPool, ProcessExitsWhileTasksRun) {
  expect_normal_exit(run_child_test("ReturnFromMainWhileTasksRun"));
}

// A forked child (PyTorch DataLoader workers, multiprocessing) gets a working pool of its own:
// workers run its tasks in parallel again, instead of the caller alone (the parent's workers do
// not exist there) or a hang on a mutex a parent worker held at fork time. Forks while other
// threads are calling the pool, as a DataLoader may.
TEST(ThreadPool, ForkedChildHasAWorkingPool) {
  expect_each_index_once(1000, 4);  // the parent's workers are running
  std::atomic<bool> stop{false};
  // Under AddressSanitizer (gcc 12's runtime) a thread started in a child forked while the
  // parent's threads were starting or allocating can block for good inside the sanitizer, whose
  // own locks it does not take across fork(): no worker ever ran in such a child (seen here in
  // most runs when forking right after the pool started its workers, never after a 300 ms
  // pause, never without ASan). There the parent forks only after its threads have settled.
#if defined(__SANITIZE_ADDRESS__)
  constexpr bool kBusyParent = false;
#else
  constexpr bool kBusyParent = true;
#endif
  std::thread busy([&] {
    while (kBusyParent && !stop.load()) expect_each_index_once(200, 4);
  });
  if (!kBusyParent) std::this_thread::sleep_for(std::chrono::milliseconds(300));  // settle
  for (int round = 0; round < 5; ++round) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: only async-signal-safe exits, no gtest assertions.
      // Each task waits (up to 10 s in all) until a second thread has joined in: starting a
      // thread in a child can take a while under sanitizers, and without workers the tasks run
      // one after another on the caller, which the deadline then reports.
      std::atomic<int> hits{0};
      std::mutex m;
      std::set<std::thread::id> ids;
      const auto child_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      parallel_for(64, 4, [&](std::size_t) {
        for (bool first = true;; first = false) {
          {
            std::lock_guard lock(m);
            if (first) ids.insert(std::this_thread::get_id());
            if (ids.size() > 1) break;
          }
          if (std::chrono::steady_clock::now() > child_deadline) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        hits.fetch_add(1);
      });
      _exit(hits.load() != 64 ? 1 : ids.size() > 1 ? 0 : 2);
    }
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
    pid_t done = 0;
    while ((done = waitpid(pid, &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (done == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      stop = true;
      busy.join();
      FAIL() << "parallel_for in a forked child did not finish within 40 s";
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "round " << round << ": the child's pool did not run every task on several threads ("
        << (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                              : "signal " + std::to_string(WTERMSIG(status)))
        << "; 1: tasks missing, 2: one thread only)";
  }
  stop = true;
  busy.join();
}

}  // namespace
