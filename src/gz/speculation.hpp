// The schedule shared by the two engines that decode chunks of one deflate stream ahead of the
// position where their window becomes known: the parallel inflate (parallel_inflate.cpp) and the
// one-pass exact index (seek_index_onepass.cpp). Only what a chunk produces and how it is taken
// in differ between them; this is the rest.
//
// The compressed file is cut into n chunks. One thread at a time is the resolver: it owns the
// frontier (the first chunk not yet taken in, and the bit where its data starts) and either
// accepts the chunk there, if it was decoded ahead from exactly that bit, or decodes from the
// frontier itself with the window known (faster than marker mode), up to the start of a chunk
// it can join. The other threads decode ahead the furthest free chunk within `ahead` chunks of
// the frontier, so that their work is done by the time the resolver arrives.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>

#include "core/thread_pool.hpp"
#include "gz/block_finder.hpp"
#include "gz/known_window.hpp"

namespace voxpipe::gz::inflate_detail {

// Derived (CRTP) provides, each called without mu_ held unless it says so:
//   std::unique_ptr<WorkerState> worker_state();      per worker thread, kept for its chunks
//   std::unique_ptr<Chunk> speculate(WorkerState&, std::size_t c);
//       decodes chunk c ahead; Chunk has `ok` and `start` (the BlockCandidate it began at)
//   void accept(std::unique_ptr<Chunk>);              takes in the chunk at the frontier; calls
//                                                     advance() with where it ended
//   void decode_at_frontier(WorkerState&);            decodes from the frontier; calls advance()
//                                                     or stop()
//   void discard(std::unique_ptr<Chunk>&);            a chunk of no use (mu_ held)
//   void speculated(Chunk&);                          after a decode ahead (mu_ held)
//   bool side_work(std::unique_lock<std::mutex>&);    other work a free thread can do (mu_ held
//                                                     on entry and on return); false: none
//   bool frontier_moved();                            after the frontier moved (mu_ held); true
//                                                     ends the run there
//   void after_advance();                             after the frontier moved (mu_ free)
// The slots are members of this base, so they outlive Derived's members: a Derived whose
// chunks hold anything of its own (leases from its pools) empties slots_ in its destructor.
template <class Derived, class Chunk, class WorkerState>
class ChunkSchedule {
 protected:
  enum Status { kUnclaimed, kInProgress, kDone, kTaken };
  struct Slot {
    std::mutex find_mutex;  // the start search: Derived's, once per chunk
    bool searched = false;
    std::optional<BlockCandidate> candidate;
    Status status = kUnclaimed;
    std::unique_ptr<Chunk> result;
  };

  // Runs `workers` threads until the frontier passes the last chunk, a stop or an error (the
  // first error is rethrown). slots_, n_, ahead_ and f_bit_ must be set.
  void run_workers(unsigned workers) {
    core::parallel_for(workers, workers, [this](std::size_t) { worker(); });
    if (error_) std::rethrow_exception(error_);
  }

  // The resolver: the frontier moves to `end` (the chunk and bit where the data taken in ends).
  void advance(RunEnd end) {
    {
      std::lock_guard lock(mu_);
      for (std::size_t c = f_chunk_; c < std::min(end.chunk, n_); ++c)
        self().discard(slots_[c].result);
      f_chunk_ = end.chunk;
      f_bit_ = end.bit;
      if (f_chunk_ >= n_ || self().frontier_moved()) finished_ = true;
      if (finished_) cancel_ = true;
      cv_.notify_all();
    }
    self().after_advance();
  }

  // The resolver: the run ends here, with the frontier where it is.
  void stop() {
    {
      std::lock_guard lock(mu_);
      finished_ = true;
      cancel_ = true;
      cv_.notify_all();
    }
    self().after_advance();
  }

  std::size_t n_ = 0;      // chunks
  std::size_t ahead_ = 0;  // how far past the frontier chunks are decoded ahead
  // For tests: every chunk but the first is decoded ahead (by whichever thread is free, the
  // resolver's included) and accepted, rather than decoded from the frontier when the resolver
  // gets there first.
  bool ahead_first_ = false;
  std::unique_ptr<Slot[]> slots_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool finished_ = false;
  bool failed_ = false;
  // Set with finished_ or failed_: decodes in progress stop at their next block or piece.
  std::atomic<bool> cancel_{false};
  std::exception_ptr error_;

  // The frontier (under mu_; only the resolver moves it).
  std::size_t f_chunk_ = 0;
  std::uint64_t f_bit_ = 0;

 private:
  Derived& self() { return static_cast<Derived&>(*this); }

  bool ahead_first() const { return ahead_first_ && f_chunk_ > 0; }

  void worker() {
    try {
      std::unique_ptr<WorkerState> state = self().worker_state();
      std::unique_lock lock(mu_);
      for (;;) {
        if (failed_) return;
        const bool frontier_ready =
            !finished_ && f_chunk_ < n_ &&
            ((slots_[f_chunk_].status == kUnclaimed && !ahead_first()) ||
             slots_[f_chunk_].status == kDone);
        if (!resolver_active_ && frontier_ready) {
          resolver_active_ = true;
          lock.unlock();
          resolve(*state);
          lock.lock();
          resolver_active_ = false;
          cv_.notify_all();
          continue;
        }
        if (self().side_work(lock)) continue;
        if (finished_) return;
        // Decode ahead the furthest free chunk of the lead: the resolver decodes the chunks at
        // the frontier itself, with a known window, faster than in marker mode, so decoding
        // ahead pays only where the resolver will not arrive soon.
        const std::size_t first = ahead_first() ? f_chunk_ : f_chunk_ + 1;
        std::size_t c = std::min(n_ - 1, f_chunk_ + ahead_);
        while (c > first && slots_[c].status != kUnclaimed) --c;
        if (c >= first && c < n_ && slots_[c].status == kUnclaimed) {
          slots_[c].status = kInProgress;
          lock.unlock();
          std::unique_ptr<Chunk> r = self().speculate(*state, c);
          lock.lock();
          self().speculated(*r);
          slots_[c].status = kDone;
          // A chunk the frontier has already passed is of no use.
          if (c >= f_chunk_ && !finished_)
            slots_[c].result = std::move(r);
          else
            self().discard(r);
          cv_.notify_all();
          continue;
        }
        cv_.wait(lock);
      }
    } catch (...) {
      std::lock_guard lock(mu_);
      failed_ = true;
      cancel_ = true;
      if (!error_) error_ = std::current_exception();
      cv_.notify_all();
    }
  }

  void resolve(WorkerState& state) {
    for (;;) {
      std::unique_lock lock(mu_);
      if (failed_ || finished_) return;
      if (f_chunk_ >= n_) {
        finished_ = true;
        cancel_ = true;
        return;
      }
      Slot& s = slots_[f_chunk_];
      if (s.status == kInProgress || s.status == kTaken) return;
      if (s.status == kUnclaimed && ahead_first()) return;
      if (s.status == kDone && s.result && s.result->ok && s.result->start.first_bit <= f_bit_ &&
          f_bit_ <= s.result->start.last_bit) {
        std::unique_ptr<Chunk> r = std::move(s.result);
        lock.unlock();
        self().accept(std::move(r));
        continue;
      }
      s.status = kTaken;
      self().discard(s.result);
      lock.unlock();
      self().decode_at_frontier(state);
    }
  }

  bool resolver_active_ = false;
};

}  // namespace voxpipe::gz::inflate_detail
