// voxpipe._core's process-wide settings and helpers: the thread count calls run on
// (voxpipe/threads.hpp), the recycled-output pool (voxpipe/buffer_pool.hpp) and keep_forever.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>

#include "voxpipe/buffer_pool.hpp"
#include "voxpipe/threads.hpp"

namespace nb = nanobind;
using namespace voxpipe;

void bind_runtime(nb::module_& m) {
  m.def("keep_forever", [](nb::handle object) { object.inc_ref(); }, nb::arg("object"),
        "Take a reference that is never given back: `object` is never destroyed, not even at "
        "exit (a reader a forked child inherited in an unknown state).");

  m.def("resolve_threads", &resolve_threads, nb::arg("requested"),
        "The thread count a call given `requested` runs on: `requested` when > 0; for 0, "
        "$VOXPIPE_NUM_THREADS, else $OMP_NUM_THREADS (its first number), else the CPUs this "
        "process may run on (voxpipe/threads.hpp; docs/python.md#thread-count).");

  // Recycled outputs (voxpipe/buffer_pool.hpp): a uint8 array over a pooled buffer, which goes
  // back to the pool when the last array over it is freed, on whichever thread that happens.
  m.def(
      "pool_buffer",
      [](std::size_t nbytes) {
        auto* block = new BufferPool::Block(BufferPool::instance().acquire(nbytes));
        nb::capsule owner(block, [](void* p) noexcept {
          auto* b = static_cast<BufferPool::Block*>(p);
          BufferPool::instance().release(*b);
          delete b;
        });
        return nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>>(block->data, {nbytes}, owner);
      },
      nb::arg("nbytes"),
      "An uninitialised uint8 array of `nbytes` over a buffer of the recycled-output pool: a "
      "buffer released earlier (already faulted in) when one fits, else a new mapping, with "
      "huge-page advice from 4 MiB on. The buffer returns to the pool when the last array over "
      "it is freed.");
  m.def(
      "pool_stats",
      [] {
        BufferPoolStats s = BufferPool::instance().stats();
        nb::dict d;
        d["limit"] = s.limit;
        d["pooled_bytes"] = s.pooled_bytes;
        d["pooled_buffers"] = s.pooled_buffers;
        d["reused"] = s.reused;
        d["allocated"] = s.allocated;
        return d;
      },
      "The recycled-output pool's limit, what it holds now and its acquire counts.");
  m.def(
      "set_pool_limit",
      [](std::size_t limit) { return BufferPool::instance().set_limit(limit); },
      nb::arg("limit"),
      "Set the most bytes of released buffers the pool keeps (0: none) and free what no longer "
      "fits; returns the previous limit.");
  m.def("clear_pool", [] { BufferPool::instance().clear(); },
        "Free every buffer the pool keeps (the limit stays).");

}
