#include "core/thread_pool.hpp"

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <algorithm>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace voxpipe::core {

namespace {

// Workers are started on first use and live for the process; jobs are whole parallel_for calls,
// each worker pulling indices from the job's shared counter.
class Pool {
 public:
  // Never destroyed: workers wait on cv_ until the process ends, and destroying a condition
  // variable with waiters blocks exit.
  static Pool& instance() {
    static std::once_flag once;
    std::call_once(once, [] {
      current() = new Pool;
      pthread_atfork(&Pool::before_fork, &Pool::after_fork_in_parent, &Pool::after_fork_in_child);
    });
    return *current();
  }

  void run(std::size_t n, unsigned threads, const std::function<void(std::size_t)>& fn) {
    Job job(fn, n);
    unsigned helpers = static_cast<unsigned>(std::min<std::size_t>(threads - 1, n - 1));
    ensure_workers(helpers);
    {
      std::lock_guard lock(mutex_);
      for (unsigned i = 0; i < helpers; ++i) queue_.push_back(&job);
    }
    cv_.notify_all();
    job.work();
    // Queue entries no worker has claimed yet are withdrawn: the job must not be touched once
    // this function returns.
    unsigned expected = helpers;
    {
      std::lock_guard lock(mutex_);
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (*it == &job) {
          it = queue_.erase(it);
          --expected;
        } else {
          ++it;
        }
      }
    }
    {
      std::unique_lock lock(job.done_mutex);
      job.done_cv.wait(lock, [&] { return job.finished == expected; });
    }
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  struct Job {
    const std::function<void(std::size_t)>& fn;
    std::size_t n;
    std::atomic<std::size_t> next{0};
    std::mutex error_mutex;
    std::exception_ptr error;
    std::mutex done_mutex;
    std::condition_variable done_cv;
    unsigned finished = 0;  // helpers that claimed the job and finished it

    Job(const std::function<void(std::size_t)>& f, std::size_t count) : fn(f), n(count) {}

    void work() {
      for (;;) {
        std::size_t i = next.fetch_add(1);
        if (i >= n) return;
        try {
          fn(i);
        } catch (...) {
          std::lock_guard lock(error_mutex);
          if (!error) error = std::current_exception();
          next = n;  // stop handing out work
        }
      }
    }
  };

  void ensure_workers(unsigned count) {
    std::lock_guard lock(mutex_);
    while (workers_ < count) {
      std::thread([this] { loop(); }).detach();
      ++workers_;
    }
  }

  void loop() {
    for (;;) {
      Job* job;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return !queue_.empty(); });
        job = queue_.front();
        queue_.pop_front();
      }
      job->work();
      std::lock_guard lock(job->done_mutex);
      ++job->finished;
      job->done_cv.notify_all();
    }
  }

  Pool() = default;

  static Pool*& current() {
    static Pool* pool = nullptr;
    return pool;
  }

  // A forked child (a PyTorch DataLoader worker, multiprocessing) has none of the parent's
  // worker threads: its pool would count workers that never come and might inherit mutex_
  // locked by one of them. Holding mutex_ across fork() keeps it consistent, and the child
  // starts over with an empty pool (the old one is abandoned: its threads do not exist there).
  static void before_fork() { current()->mutex_.lock(); }
  static void after_fork_in_parent() { current()->mutex_.unlock(); }
  static void after_fork_in_child() { current() = new Pool; }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job*> queue_;
  unsigned workers_ = 0;
};

}  // namespace

void parallel_for(std::size_t n, unsigned threads, const std::function<void(std::size_t)>& fn) {
  if (n == 0) return;
  if (threads <= 1 || n == 1) {
    for (std::size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  Pool::instance().run(n, threads, fn);
}

}  // namespace voxpipe::core
