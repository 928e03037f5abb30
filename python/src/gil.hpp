// The GIL around library calls, safe at interpreter exit: every binding releases and retakes it
// through these guards, never through nanobind's gil_scoped_release / gil_scoped_acquire.
//
// Once the interpreter finalizes (the main thread ended or called sys.exit), CPython 3.8-3.13
// ends any other thread that then takes the GIL, such as a daemon thread returning from a read,
// with pthread_exit. Its forced unwinding through C++ frames kills the process: std::terminate
// ("terminate called without an active exception", SIGABRT) at the first noexcept frame on its
// way (nanobind's guards restore the GIL in a destructor), abort() at a catch (...) that does not
// rethrow (the thread pool's tasks). These guards stop that unwinding where the GIL is taken and
// park the thread for good instead, as CPython 3.14 itself does: the thread then holds no GIL
// and nothing the exiting main thread waits for, and the process exits with its own status. No nanobind object (an nb::ndarray argument taken by value, say) may be
// copied or destroyed while the GIL is released: nanobind takes the GIL back for that itself,
// unguarded, so arguments of functions under nb::call_guard<GilRelease> are taken by reference.
#pragma once

#include <Python.h>
#include <cxxabi.h>
#include <dlfcn.h>
#include <unistd.h>

namespace voxpipe::python {

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
    // No check before: CPython alone knows whether this thread is the one finalizing (which
    // goes on) or one it ends, and it judges without touching the thread's state.
    try {
      PyEval_RestoreThread(state_);
    } catch (abi::__forced_unwind&) {
      park_thread();  // never leaves the handler: the unwinding is neither resumed nor ended
    }
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
    try {
      state_ = PyGILState_Ensure();
    } catch (abi::__forced_unwind&) {
      park_thread();
    }
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
