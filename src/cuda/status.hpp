// The probe behind voxpipe::cuda_status(), with the library names and system paths as
// parameters so that tests can point it at missing or wrong libraries. Internal.
#pragma once

#include <memory>
#include <string>

#include "cuda/cufile.hpp"
#include "cuda/driver.hpp"
#include "voxpipe/device.hpp"

namespace voxpipe::cuda {

struct ProbeSettings {
  std::string cuda_library = "libcuda.so.1";
  std::string cufile_library = cufile_library_name();  // $VOXPIPE_CUFILE_LIBRARY or libcufile.so.0
  std::string udev_dir = "/run/udev";  // cuFile needs it readable (KvikIO's check)
  std::string osrelease = "/proc/sys/kernel/osrelease";  // "microsoft"/"WSL" in it: WSL
};

struct Probe {
  CudaStatus status;
  // The loaded driver, when cuInit succeeded (even with no device); nullptr otherwise.
  std::unique_ptr<DriverLibrary> driver;
};

// Probes from scratch with `settings`: never cached, never throws.
Probe probe(const ProbeSettings& settings) noexcept;

// True when the library embeds the device kernels.
bool kernels_built() noexcept;

namespace detail {
// The process-wide probe's driver (driver() in driver.hpp).
const DriverApi* process_driver() noexcept;
}  // namespace detail

}  // namespace voxpipe::cuda
