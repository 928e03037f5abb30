// cuFile (GPUDirect Storage), loaded at run time with dlopen("libcufile.so.0") like the driver
// (driver.hpp): the library never links it, and runs where it is missing. Only the entry points
// voxpipe calls are resolved; their types are declared here, ABI-compatible with cufile.h.
//
// What it is for: reading a large uncompressed payload from the file straight into device
// memory, where the storage can DMA to the GPU (nvidia-fs or PCI P2PDMA), skipping the pinned
// host ring. Where cuFile only runs in its compatibility mode (no GDS-capable storage: it
// preads into its own host bounce buffers and copies them over), the pinned staging path does
// the same work with more reads in flight, so the automatic policy leaves cuFile alone there
// (research/gpu.md 2.4, 3: GDS is not always faster; a warm page cache beats O_DIRECT).
// Internal.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "cuda/driver.hpp"

namespace voxpipe::cuda {

class PrimaryContext;

// ---- cufile.h's types, under voxpipe::cuda::cuf ----------------------------------------------
namespace cuf {

inline constexpr int CU_FILE_SUCCESS = 0;
inline constexpr int CUFILEOP_BASE_ERR = 5000;
inline constexpr int CU_FILE_CUDA_DRIVER_ERROR = 5011;
inline constexpr int CU_FILE_HANDLE_TYPE_OPAQUE_FD = 1;
// Bits of CUfileDrvProps::nvfs.dstatusflags (1 << CUfileDriverStatusFlags).
inline constexpr unsigned CU_FILE_NVME_P2P_SUPPORTED = 11;

struct CUfileError {
  int err;              // CUfileOpError
  drv::CUresult cu_err;  // the driver's error when err is CU_FILE_CUDA_DRIVER_ERROR
};

struct CUfileDescr {
  int type;  // enum CUfileFileHandleType
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;  // const CUfileFSOps_t*: null, file system found with fstat
};

struct CUfileDrvProps {
  struct {
    unsigned major_version;  // nvidia-fs's version, 0 when the module is not loaded
    unsigned minor_version;
    std::size_t poll_thresh_size;
    std::size_t max_direct_io_size;
    unsigned dstatusflags;  // storage back ends with GPUDirect support (bits above)
    unsigned dcontrolflags;
  } nvfs;
  unsigned fflags;
  unsigned max_device_cache_size;
  unsigned per_buffer_cache_size;
  unsigned max_device_pinned_mem_size;
  unsigned max_batch_io_size;
  unsigned max_batch_io_timeout_msecs;
};

using CUfileHandle = void*;

}  // namespace cuf

struct CufileApi {
  cuf::CUfileError (*driver_open)();                                                  // cuFileDriverOpen
  cuf::CUfileError (*driver_get_properties)(cuf::CUfileDrvProps* props);              // cuFileDriverGetProperties
  cuf::CUfileError (*handle_register)(cuf::CUfileHandle* fh, cuf::CUfileDescr* descr);  // cuFileHandleRegister
  void (*handle_deregister)(cuf::CUfileHandle fh);                                    // cuFileHandleDeregister
  ssize_t (*read)(cuf::CUfileHandle fh, void* buffer_base, std::size_t size, off_t file_offset,
                  off_t buffer_offset);                                               // cuFileRead
};

// "CU_FILE_DRIVER_NOT_INITIALIZED (5001)" style text for a cuFile status or a negative
// cuFileRead result: "cufile error 5001 (nvidia-fs driver is not loaded ...)".
std::string cufile_error_text(int err);

// The process's cuFile, or a stand-in's (tests): the library, its driver opened once, and what
// its properties say. `usable` when cuFileDriverOpen succeeded; `gds` when the storage can
// really DMA to the GPU (nvidia-fs is loaded or PCI P2PDMA is reported), not only cuFile's
// compatibility mode. `reason` says which, or why cuFile cannot be used.
struct CufileDriver {
  bool usable = false;
  bool gds = false;
  std::string library;
  std::string reason;
  CufileApi api{};
};

// Loads `library` (a name or a path), resolves the entry points and opens the driver with `ctx`
// current (cuFile needs a context). Never throws for a missing library or a failed open: the
// result says why. The library stays loaded for the process (cuFile must not be unloaded
// while the CUDA driver holds its callbacks).
std::unique_ptr<CufileDriver> open_cufile(const std::string& library, const PrimaryContext& ctx);

// The library the process uses: $VOXPIPE_CUFILE_LIBRARY (a name or a path), else what
// set_default_cufile_library gave (the Python package: the nvidia-cufile wheel's copy), else
// "libcufile.so.0".
std::string cufile_library_name();

// The process's cuFile on ctx's driver, opened on first call (thread-safe) and kept.
const CufileDriver& process_cufile(const PrimaryContext& ctx);

// When uncompressed NIfTI data are read through cuFile instead of the pinned staging ring.
enum class CufilePolicy {
  automatic,  // only where it helps: GPUDirect Storage present, a payload of at least
              // kCufileMinBytes, and most of it not in the page cache
  on,         // every uncompressed payload; an error when cuFile cannot read the file
  off,        // never
};

inline constexpr std::uint64_t kCufileMinBytes = std::uint64_t(16) << 20;

// $VOXPIPE_CUFILE: "auto" (or unset, or empty), "on", "off" (any case). Error(invalid_argument)
// naming the variable for anything else.
CufilePolicy cufile_policy_from_env();

// The decision for one payload; `reason` says why (the load's report).
struct CufileChoice {
  bool use = false;
  std::string reason;
};

// In this order: off; automatic and a payload under kCufileMinBytes; no usable driver (`driver`
// null: not loaded); on; automatic without GPUDirect Storage; automatic with half the payload
// or more in the page cache (resident_fraction, from page_cache_fraction); else cuFile.
CufileChoice choose_cufile(CufilePolicy policy, const CufileDriver* driver,
                           std::uint64_t payload_bytes, double resident_fraction);

// The fraction of the pages holding bytes [offset, offset + bytes) of `path` that are in the
// page cache (mincore over a read-only mapping; nothing is read), or -1 where that cannot be
// told (then the payload counts as not cached).
double page_cache_fraction(const std::string& path, std::uint64_t offset, std::uint64_t bytes);

// A file opened with O_DIRECT and registered with cuFile; deregistered and closed on
// destruction. Construction throws Error(unsupported) naming the file when the file system
// refuses O_DIRECT (tmpfs) or cuFileHandleRegister fails.
class CufileFile {
 public:
  CufileFile(const CufileDriver& driver, const std::string& path);
  ~CufileFile();
  CufileFile(const CufileFile&) = delete;
  CufileFile& operator=(const CufileFile&) = delete;

  // Reads file bytes [file_offset, file_offset + size) into device memory at `dst` and returns
  // how many it read: all of them, or fewer where the file ends. cuFile's errors are Error(io)
  // with field "cuFileRead", naming the file and offset. The calling thread must have a context
  // current.
  std::size_t read(drv::CUdeviceptr dst, std::size_t size, std::uint64_t file_offset) const;
  const std::string& path() const noexcept { return path_; }
  int fd() const noexcept { return fd_; }

 private:
  const CufileApi& api_;
  std::string path_;
  int fd_ = -1;
  cuf::CUfileHandle handle_ = nullptr;
};

}  // namespace voxpipe::cuda
