// voxpipe/device.hpp: whether the optional CUDA backend can run in this process, and why not.
//
// voxpipe never links the CUDA libraries: the driver (libcuda.so.1) and cuFile (libcufile.so.0)
// are loaded at run time, and the device kernels are embedded in the library when nvcc was found
// at build time. The same build therefore runs everywhere; this report says which parts are
// usable here (docs/gpu.md lists the reason strings).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "voxpipe/dicom_series.hpp"
#include "voxpipe/dtype.hpp"
#include "voxpipe/nifti.hpp"

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
  // GPUDirect Storage through cuFile (libcufile.so.0, or the path in $VOXPIPE_CUFILE_LIBRARY):
  // the library loads, /run/udev is readable and this is not WSL (KvikIO's rule). Whether its
  // driver opens, and runs real GPUDirect Storage or only its compatibility mode, is known
  // once it is opened: cufile_status(). cufile_reason: "libcufile.so.0 not found: ...",
  // "/run/udev is not readable ...", "running under WSL ...", or "... loads; ...".
  bool cufile_available = false;
  std::string cufile_reason;
};

// What cuFile does in this process, once its driver is open.
struct CufileStatus {
  bool usable = false;  // cuFileDriverOpen succeeded
  // The storage can DMA to the GPU (nvidia-fs loaded, or PCI P2PDMA), not only cuFile's
  // compatibility mode (reads through host memory).
  bool gds = false;
  std::string library;  // what was loaded
  // e.g. "GPUDirect Storage through nvidia-fs 2.17", "cuFile runs in its compatibility mode
  // only ...", "cuFileDriverOpen failed: ...", "libcufile.so.0 not found: ...".
  std::string reason;
  // $VOXPIPE_CUFILE: "auto" (default), "on" or "off" (docs/gpu.md "cuFile").
  std::string policy;
};

// The cuFile library to load where $VOXPIPE_CUFILE_LIBRARY is not set, instead of
// "libcufile.so.0" from the loader's search path (the Python package passes the nvidia-cufile
// wheel's copy). Only before the first cuda_status() or load has any effect.
void set_default_cufile_library(const std::string& path);

// Opens cuFile's driver (once per process, with device `ordinal`'s context current), as the
// first load that may read through it would, and reports. Error(unsupported) carrying
// cuda_status().reason without a device; Error(invalid_argument) for a bad $VOXPIPE_CUFILE.
CufileStatus cufile_status(int ordinal = 0);

// The status of this process, probed once on first call (loads libcuda.so.1 and calls cuInit,
// which can take a fraction of a second; no context is created). Thread-safe; never throws.
// Call it after any fork(): CUDA does not survive fork in a process that initialised it.
const CudaStatus& cuda_status() noexcept;

// ---- Device memory and loads into it -------------------------------------------------------
// Everything below needs cuda_status().available and throws Error(unsupported) carrying
// cuda_status().reason otherwise. Driver errors are Errors naming the driver call. Copies and
// loads are synchronous: when a function returns, the bytes are complete on the device.

// `bytes` of device memory (cuMemAlloc) on CUDA device `ordinal`, in that device's primary
// context (retained while any DeviceMemory of the device lives, shared by all of them, and
// made current only around voxpipe's own calls: the caller's current context is restored).
// Freed exactly once, with its context current, by the destructor of the object that owns it.
// Movable (a moved-from object owns nothing: size() 0, address() 0), not copyable. The
// address is a CUdeviceptr, usable by other CUDA code in the same context (PyTorch, CuPy,
// cudaMemcpy with the runtime's primary context).
class DeviceMemory {
 public:
  DeviceMemory(int ordinal, std::size_t bytes);
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&&) noexcept;
  DeviceMemory& operator=(DeviceMemory&&) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  std::uintptr_t address() const noexcept;  // 0 when size() is 0 or the object was moved from
  std::size_t size() const noexcept;
  int device() const noexcept;  // the CUDA device ordinal

  // Copies host bytes to [offset, offset + src.size()) through pinned staging buffers.
  // Error(invalid_argument) when that range is not inside the memory.
  void copy_from_host(std::size_t offset, std::span<const std::byte> src);
  // Copies [offset, offset + dst.size()) to the host (cuMemcpyDtoH).
  // Error(invalid_argument) when that range is not inside the memory.
  void copy_to_host(std::size_t offset, std::span<std::byte> dst) const;

  struct Impl;  // internal

 private:
  friend void read_nifti_data_to_device(const NiftiImage&, const OutputSpec&, DeviceMemory&,
                                        std::size_t, unsigned, const DataSourceOptions&);
  friend void read_dicom_series_to_device(const DicomSeries&, DType, DeviceMemory&, std::size_t,
                                          unsigned);
  std::unique_ptr<Impl> impl_;
};

// Reads all of `image`'s data into `dst` at `offset`, with the values read_nifti_data writes for
// `spec` and an empty selection (F order, the shape of the image), converted on the device:
// voxels * dtype_size(spec.type) bytes. Uncompressed data are read with concurrent preads
// (through pinned buffers), or through cuFile into device buffers where $VOXPIPE_CUFILE's policy
// chooses it (by default: GPUDirect Storage, 16 MiB or more, mostly not in the page cache);
// gzip data through the host path's data source (sized members or a seek index read
// concurrently, otherwise one sequential inflate). Errors: read_nifti_data's
// (Error(invalid_argument) for a conversion it refuses, and for spec.file_byte_order;
// Error(truncated) for a short file; gzip errors), Error(invalid_argument) when the bytes do not
// fit in `dst` after `offset`, and the driver's.
//
// `threads`: as ReadOptions::threads (0: the default, resolve_threads in voxpipe/threads.hpp):
// the gzip inflate's threads, and at most as many concurrent reads of an uncompressed payload
// (at most 4). `source`: the seek index to use for a plain gzip, as NiftiReader takes it
// (automatic: a valid sidecar or cache entry).
void read_nifti_data_to_device(const NiftiImage& image, const OutputSpec& spec, DeviceMemory& dst,
                               std::size_t offset = 0, unsigned threads = 0,
                               const DataSourceOptions& source = {});

// Reads a DICOM series into `dst` at `offset`, with read_dicom_series's values and layout
// (F order, series.shape(); prod(shape) * dtype_size(out_type) bytes). Native pixel data are
// read with concurrent preads and converted on the device (BitsStored, Rescale Slope/Intercept
// for f32/f64); anything else is decoded on the host as read_dicom_series decodes it (compressed
// frames in parallel on `threads`, 0: the default, resolve_threads), each image streamed to the
// device through the pinned ring once decoded (the host holds the ring, not the volume).
// Errors: read_dicom_series's, Error(invalid_argument) when the bytes do not fit in `dst` after
// `offset`, and the driver's.
void read_dicom_series_to_device(const DicomSeries& series, DType out_type, DeviceMemory& dst,
                                 std::size_t offset = 0, unsigned threads = 0);

// What loads keep per device between calls, and what this frees: the kernel module, idle pinned
// host buffers and idle device staging areas (each up to 256 MiB, or the most ever in use at
// once where loads ran side by side), and a retain of
// the device's primary context (so that it is not destroyed and created again between loads).
// Loading the module and pinning memory cost milliseconds each time, more than a small file's
// transfer; only the first load of a process pays them. Loads still running keep what they use
// until they end. Like torch.cuda.empty_cache(); never throws. No effect without a GPU.
void cuda_empty_cache() noexcept;

}  // namespace voxpipe
