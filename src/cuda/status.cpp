#include "cuda/status.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>

#include "cuda/fatbin.hpp"

#ifndef VOXPIPE_CUDA_BUILD_NOTE
#define VOXPIPE_CUDA_BUILD_NOTE "the build did not say why"
#endif

namespace voxpipe::cuda {

namespace {

bool directory_readable(const std::string& path) {
  if (::access(path.c_str(), R_OK | X_OK) != 0) return false;
  DIR* d = ::opendir(path.c_str());
  if (!d) return false;
  ::closedir(d);
  return true;
}

bool running_under_wsl(const std::string& osrelease) {
  std::ifstream in(osrelease);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text.find("microsoft") != std::string::npos || text.find("wsl") != std::string::npos;
}

// KvikIO's availability rule for cuFile: the library loads, /run/udev is readable, not WSL.
void probe_cufile(const ProbeSettings& s, CudaStatus& st) {
  void* handle = ::dlopen(s.cufile_library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = ::dlerror();
    st.cufile_reason = s.cufile_library + " not found: " + (e ? e : "dlopen failed");
    return;
  }
  ::dlclose(handle);
  if (!directory_readable(s.udev_dir)) {
    st.cufile_reason = s.udev_dir +
                       " is not readable, which cuFile needs (in a container: --volume "
                       "/run/udev:/run/udev:ro)";
    return;
  }
  if (running_under_wsl(s.osrelease)) {
    st.cufile_reason = "running under WSL, which has no GPUDirect Storage";
    return;
  }
  st.cufile_available = true;
  st.cufile_reason = s.cufile_library +
                     " loads; its driver is opened at the first uncompressed load that may read "
                     "through it (VOXPIPE_CUFILE: auto, on, off), and cufile_status() says "
                     "whether GPUDirect Storage runs";
}

// Loads and initialises the driver, fills the driver fields; returns the library when cuInit
// succeeded, and sets *why to the first obstacle (empty when a device is there).
std::unique_ptr<DriverLibrary> probe_driver(const ProbeSettings& s, CudaStatus& st,
                                            std::string* why) {
  auto lib = DriverLibrary::open(s.cuda_library.c_str(), why);
  if (!lib) return nullptr;
  const DriverApi& api = lib->api();
  if (const auto r = api.init(0); r != drv::CUDA_SUCCESS) {
    *why = "cuInit failed: " + cuda_error_text(api, r);
    return nullptr;
  }
  api.driver_get_version(&st.driver_version);
  if (const auto r = api.device_get_count(&st.device_count); r != drv::CUDA_SUCCESS) {
    *why = "cuDeviceGetCount failed: " + cuda_error_text(api, r);
    st.device_count = 0;
    return lib;
  }
  for (int i = 0; i < st.device_count; ++i) {
    drv::CUdevice dev = 0;
    char name[256] = {};
    if (api.device_get(&dev, i) == drv::CUDA_SUCCESS &&
        api.device_get_name(name, sizeof(name) - 1, dev) == drv::CUDA_SUCCESS)
      st.device_names.emplace_back(name);
    else
      st.device_names.emplace_back("device " + std::to_string(i) + " (name unavailable)");
  }
  if (st.device_count == 0) *why = "no CUDA device (cuDeviceGetCount returned 0)";
  return lib;
}

}  // namespace

bool kernels_built() noexcept { return !kernel_fatbin().empty(); }

Probe probe(const ProbeSettings& settings) noexcept {
  Probe p;
  CudaStatus& st = p.status;
  try {
    st.kernels_built = kernels_built();
    std::string driver_why;
    p.driver = probe_driver(settings, st, &driver_why);
    probe_cufile(settings, st);
    if (!st.kernels_built)
      st.reason = "built without CUDA kernels (" VOXPIPE_CUDA_BUILD_NOTE ")";
    else
      st.reason = driver_why;
    st.available = st.reason.empty();
  } catch (...) {  // std::bad_alloc from the strings: report, never throw
    st.available = false;
    st.reason = "the CUDA probe failed (out of memory)";
  }
  return p;
}

namespace detail {

namespace {
const Probe& process_probe() noexcept {
  // Thread-safe initialisation (C++11 statics); never destroyed, so the driver stays loaded
  // for code that still runs during exit.
  static const Probe* const p = new Probe(probe(ProbeSettings{}));
  return *p;
}
}  // namespace

const DriverApi* process_driver() noexcept {
  const Probe& p = process_probe();
  return p.driver ? &p.driver->api() : nullptr;
}

}  // namespace detail

}  // namespace voxpipe::cuda

namespace voxpipe {
const CudaStatus& cuda_status() noexcept { return cuda::detail::process_probe().status; }
}  // namespace voxpipe
