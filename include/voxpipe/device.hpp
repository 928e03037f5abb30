// voxpipe/device.hpp: whether the optional CUDA backend can run in this process, and why not.
//
// voxpipe never links the CUDA libraries: the driver (libcuda.so.1) and cuFile (libcufile.so.0)
// are loaded at run time, and the device kernels are embedded in the library when nvcc was found
// at build time. The same build therefore runs everywhere; this report says which parts are
// usable here (docs/gpu.md lists the reason strings).
#pragma once

#include <string>
#include <vector>

namespace voxpipe {

struct CudaStatus {
  // Kernels built, driver loaded and initialised, at least one device: the GPU path can run.
  bool available = false;
  // Empty when available; otherwise the first obstacle, e.g.
  //   "built without CUDA kernels (nvcc not found at build time)"
  //   "libcuda.so.1 not found: libcuda.so.1: cannot open shared object file: ..."
  //   "libcuda.so.1 lacks cuMemAlloc_v2 (a driver older than CUDA 11?)"
  //   "cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)"
  //   "no CUDA device (cuDeviceGetCount returned 0)"
  std::string reason;
  bool kernels_built = false;  // the library embeds the device kernels (sm_80, sm_90, PTX)
  int driver_version = 0;      // cuDriverGetVersion, e.g. 13000 for CUDA 13.0; 0 if not loaded
  int device_count = 0;
  std::vector<std::string> device_names;  // cuDeviceGetName of devices 0, 1, ...
  // GPUDirect Storage through cuFile. Reads through cuFile are not implemented yet, so this is
  // never used today; cufile_reason says what the probe found: "libcufile.so.0 not found: ...",
  // "/run/udev is not readable ...", "running under WSL ...", or that it is present but unused.
  bool cufile_available = false;
  std::string cufile_reason;
};

// The status of this process, probed once on first call (loads libcuda.so.1 and calls cuInit,
// which can take a fraction of a second; no context is created). Thread-safe; never throws.
// Call it after any fork(): CUDA does not survive fork in a process that initialised it.
const CudaStatus& cuda_status() noexcept;

}  // namespace voxpipe
