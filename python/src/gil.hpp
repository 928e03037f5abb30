// The GIL around library calls, safe at interpreter exit: every binding releases and retakes it
// through these guards, never through nanobind's gil_scoped_release / gil_scoped_acquire.
//
// Once the interpreter finalizes (the main thread ended or called sys.exit), CPython 3.8-3.13
// ends any other thread that then takes the GIL, such as a daemon thread returning from a read,
// with pthread_exit, whose forced unwinding would walk up through our C++ frames: with
// libstdc++, std::terminate at the first noexcept frame (nanobind's guards restore the GIL in a
// destructor) or abort() at a catch (...) that does not rethrow; with libc++abi and LLVM's
// unwinder linked statically (the manylinux wheels), a crash, since glibc unwinds with
// libgcc_s, whose contexts that personality routine cannot read. So the GIL is taken inside
// outermost_call (gil.cpp), a frame whose unwind information marks it as the outermost one:
// the unwinding stops there, below every C++ frame, and glibc ends the thread as it ends a
// thread at the end of its stack, the way CPython means to. Nothing of ours is unwound or run:
// the thread's C++ objects are left as they are, and it holds no GIL and nothing the exiting
// main thread waits for, so the process exits with its own status. No nanobind object (an
// nb::ndarray argument taken by value, say) may be copied or destroyed while the GIL is released:
// nanobind takes the GIL back for that itself, unguarded, so arguments of functions under
// nb::call_guard<GilRelease> are taken by reference.
#pragma once

#include <Python.h>
#include <dlfcn.h>
#include <unistd.h>

namespace voxpipe::python {

// Calls fn(arg) from a frame that unwinders take for the outermost one of the thread (gil.cpp).
extern "C" void voxpipe_outermost_call(void (*fn)(void*), void* arg) noexcept;

[[noreturn]] inline void park_thread() noexcept {
  for (;;) pause();
}

inline bool interpreter_finalizing() noexcept {
#if defined(Py_LIMITED_API)
  // The stable ABI (the cp312-abi3 wheel) declares Py_IsFinalizing from 3.13 on only: the
  // running interpreter's function is looked up once, Py_IsFinalizing (3.13 and later) or
  // _Py_IsFinalizing (3.12); both are exported by every CPython build.
  using is_finalizing_fn = int (*)();
  static const is_finalizing_fn is_finalizing = [] {
    void* f = dlsym(RTLD_DEFAULT, "Py_IsFinalizing");
    if (f == nullptr) f = dlsym(RTLD_DEFAULT, "_Py_IsFinalizing");
    return reinterpret_cast<is_finalizing_fn>(f);
  }();
  return is_finalizing != nullptr && is_finalizing() != 0;
#elif PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// Releases the GIL for its lifetime (nb::call_guard<GilRelease> or a scope).
class GilRelease {
 public:
  GilRelease() noexcept : state_(PyEval_SaveThread()) {}
  ~GilRelease() {
    // CPython alone knows whether this thread is the one finalizing (which goes on) or one it
    // ends, and it judges without touching the thread's state.
    voxpipe_outermost_call([](void* state) { PyEval_RestoreThread(static_cast<PyThreadState*>(state)); },
                           state_);
  }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  PyThreadState* state_;
};

// Holds the GIL for its lifetime, on any thread (a pool worker calling back into Python).
class GilAcquire {
 public:
  GilAcquire() noexcept {
    // A thread Python knows (its own threads, the one finalizing included) is judged by CPython
    // as in GilRelease. Any other (a pool worker) cannot be the finalizing thread, and once
    // finalization is done PyGILState_Ensure has no interpreter left to attach it to.
    if (PyGILState_GetThisThreadState() == nullptr && interpreter_finalizing()) park_thread();
    voxpipe_outermost_call([](void* state) { *static_cast<PyGILState_STATE*>(state) = PyGILState_Ensure(); },
                           &state_);
  }
  ~GilAcquire() { PyGILState_Release(state_); }
  GilAcquire(const GilAcquire&) = delete;
  GilAcquire& operator=(const GilAcquire&) = delete;

 private:
  PyGILState_STATE state_;
};

}  // namespace voxpipe::python

// A binding written later cannot fall back on nanobind's guards: any use below this include (the
// nanobind headers come before it) fails to compile.
#pragma GCC poison gil_scoped_release gil_scoped_acquire
