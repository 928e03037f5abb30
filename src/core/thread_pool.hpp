// The process-wide worker pool: the only global mutable state of the library (DESIGN.md).
#pragma once

#include <cstddef>
#include <functional>

namespace voxpipe::core {

// Runs fn(i) for i in [0, n) on at most `threads` threads, the caller's thread included, and
// returns when all are done. `threads` is the count the public call resolved (resolve_threads,
// voxpipe/threads.hpp); 0 is taken as 1. The first exception thrown by any task is rethrown
// here after the others have finished. Tasks may call parallel_for themselves (files in
// parallel, each decoded in parallel): the caller always works on its own indices, and workers
// take a call's indices only when they are free, so a nested call finishes even when every
// worker is busy. Tasks must not block waiting for another task of the same call to start:
// with no free worker, the tasks of a call run one after another on the caller.
void parallel_for(std::size_t n, unsigned threads, const std::function<void(std::size_t)>& fn);

}  // namespace voxpipe::core
