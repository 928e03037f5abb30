// voxpipe._core's device half: the CUDA status report, memory owned by Python objects (device
// memory, or host memory for tests of the export), DLPack views of it, and loads into it.
//
// A view is a nanobind ndarray of framework array_api: a Python object with __dlpack__ and
// __dlpack_device__ whose capsules (versioned or legacy, as max_version asks) keep the Memory
// object alive. So memory is freed exactly once, when the last of its Python owner, its views
// and the consumers' tensors is gone, by Memory's destructor, with its context current.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "conversions.hpp"
#include "gil.hpp"
#include "voxpipe/device.hpp"
#include "voxpipe/dicom_series.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"

namespace nb = nanobind;
using namespace voxpipe;

namespace {

std::atomic<long> g_frees{0};  // Memory objects destroyed (the test hook)

class Memory {
 public:
  // Device memory on device `ordinal`.
  Memory(int ordinal, std::size_t bytes) : ordinal_(ordinal), bytes_(bytes) {
    device_.emplace(ordinal, bytes);
  }
  // Host memory (the export's kDLCPU variant, for tests).
  explicit Memory(std::size_t bytes) : bytes_(bytes) {
    host_ = static_cast<std::byte*>(std::calloc(bytes ? bytes : 1, 1));
    if (!host_) throw std::bad_alloc();
  }
  ~Memory() {
    device_.reset();  // cuMemFree with the context current (DeviceMemory)
    std::free(host_);
    ++g_frees;
  }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  bool on_device() const noexcept { return device_.has_value(); }
  int ordinal() const noexcept { return ordinal_; }
  std::size_t size() const noexcept { return bytes_; }
  std::uintptr_t address() const noexcept {
    return on_device() ? device_->address() : reinterpret_cast<std::uintptr_t>(host_);
  }
  DeviceMemory& device() { return *device_; }

  void check_range(std::uint64_t offset, std::uint64_t bytes, const char* what) const {
    if (offset > bytes_ || bytes > bytes_ - offset)
      throw Error(ErrorCode::invalid_argument, "", what,
                  "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + bytes) +
                      ") are outside the " + std::to_string(bytes_) + " bytes of the memory");
  }

 private:
  int ordinal_ = 0;
  std::size_t bytes_ = 0;
  std::optional<DeviceMemory> device_;
  std::byte* host_ = nullptr;
};

nb::dlpack::dtype dlpack_dtype(DType t) {
  using nb::dlpack::dtype_code;
  const auto bits = static_cast<std::uint8_t>(8 * dtype_size(t));
  switch (t) {
    case DType::u8: case DType::u16: case DType::u32: case DType::u64:
      return {static_cast<std::uint8_t>(dtype_code::UInt), bits, 1};
    case DType::i8: case DType::i16: case DType::i32: case DType::i64:
      return {static_cast<std::uint8_t>(dtype_code::Int), bits, 1};
    case DType::f32: case DType::f64:
      return {static_cast<std::uint8_t>(dtype_code::Float), bits, 1};
    case DType::c64: case DType::c128:
      return {static_cast<std::uint8_t>(dtype_code::Complex), bits, 1};
    default:
      throw Error(ErrorCode::unsupported, "", "dtype",
                  std::string(dtype_name(t)) + " has no DLPack dtype");
  }
}

Memory& device_memory(Memory& m) {
  if (!m.on_device())
    throw Error(ErrorCode::invalid_argument, "", "memory", "expected device memory, but received host memory");
  return m;
}

}  // namespace

void bind_device(nb::module_& m) {
  m.def("cuda_status", [] {
    const CudaStatus* status = nullptr;
    {
      python::GilRelease release;  // the first call loads the driver and calls cuInit
      status = &cuda_status();
    }
    const CudaStatus& s = *status;
    nb::dict d;
    d["available"] = s.available;
    d["reason"] = s.reason;
    d["kernels_built"] = s.kernels_built;
    d["driver_version"] = s.driver_version;
    d["device_count"] = s.device_count;
    d["device_names"] = s.device_names;
    d["cufile_available"] = s.cufile_available;
    d["cufile_reason"] = s.cufile_reason;
    return d;
  }, "voxpipe::cuda_status() as a dict.");

  m.def("cuda_empty_cache", [] {
    python::GilRelease release;
    cuda_empty_cache();
  }, "voxpipe::cuda_empty_cache(): frees the pinned buffers, staging areas and kernel modules "
     "kept between loads.");

  nb::class_<Memory>(m, "Memory")
      .def_prop_ro("on_device", &Memory::on_device)
      .def_prop_ro("ordinal", &Memory::ordinal)
      .def_prop_ro("size", &Memory::size)
      .def_prop_ro("address", &Memory::address)
      .def(
          "view",
          [](nb::handle self, std::uint64_t offset, const std::vector<std::size_t>& shape,
             const std::vector<std::int64_t>& strides, const std::string& dtype) {
            Memory& mem = nb::cast<Memory&>(self);
            const DType t = python::parse_dtype(dtype);
            if (strides.size() != shape.size())
              throw Error(ErrorCode::invalid_argument, "", "strides", "one stride per axis");
            std::uint64_t extent = dtype_size(t);
            bool empty = false;
            for (std::size_t k = 0; k < shape.size(); ++k) {
              if (strides[k] < 0)
                throw Error(ErrorCode::invalid_argument, "", "strides", "negative strides are not supported");
              if (shape[k] == 0) empty = true;
              else extent += (shape[k] - 1) * static_cast<std::uint64_t>(strides[k]) * dtype_size(t);
            }
            mem.check_range(offset, empty ? 0 : extent, "view");
            const int device_type = mem.on_device() ? nb::device::cuda::value : nb::device::cpu::value;
            return nb::ndarray<nb::array_api>(reinterpret_cast<void*>(mem.address() + offset),
                                              shape.size(), shape.data(), self, strides.data(),
                                              dlpack_dtype(t), device_type, mem.ordinal());
          },
          nb::arg("offset"), nb::arg("shape"), nb::arg("strides"), nb::arg("dtype"),
          "A DLPack-exporting view (strides in elements) that keeps this memory alive.")
      .def(
          "copy_to_host",
          [](Memory& mem, std::uint64_t offset, const python::ByteArray& out) {
            mem.check_range(offset, out.size(), "copy");
            auto* dst = reinterpret_cast<std::byte*>(out.data());
            if (!mem.on_device()) {
              std::memcpy(dst, reinterpret_cast<const std::byte*>(mem.address() + offset), out.size());
              return;
            }
            mem.device().copy_to_host(offset, std::span(dst, out.size()));
          },
          nb::arg("offset"), nb::arg("out"), nb::call_guard<python::GilRelease>(),
          "Copy bytes [offset, offset + out.size) into `out` (synchronous).")
      .def(
          "copy_from_host",
          [](Memory& mem, std::uint64_t offset, const python::ConstByteArray& data) {
            mem.check_range(offset, data.size(), "copy");
            const auto* src = reinterpret_cast<const std::byte*>(data.data());
            if (!mem.on_device()) {
              std::memcpy(reinterpret_cast<std::byte*>(mem.address() + offset), src, data.size());
              return;
            }
            mem.device().copy_from_host(offset, std::span(src, data.size()));
          },
          nb::arg("offset"), nb::arg("data"), nb::call_guard<python::GilRelease>(),
          "Copy host bytes to [offset, offset + data.size) through pinned staging buffers; "
          "complete on return.");

  m.def(
      "device_memory",
      [](int ordinal, std::size_t bytes) {
        python::GilRelease release;
        return new Memory(ordinal, bytes);
      },
      nb::arg("ordinal"), nb::arg("bytes"), nb::rv_policy::take_ownership,
      "Allocate `bytes` of device memory on device `ordinal` (Error(unsupported) without CUDA).");
  m.def("_host_memory_for_tests", [](std::size_t bytes) { return new Memory(bytes); },
        nb::arg("bytes"), nb::rv_policy::take_ownership,
        "Host memory behind the same export path, for tests (views are kDLCPU).");
  m.def("_memory_frees", [] { return g_frees.load(); },
        "How many Memory objects have been freed in this process (a test hook).");

  m.def(
      "nifti_to_device",
      [](Memory& mem, std::uint64_t offset, const NiftiImage& image, const std::string& dtype,
         bool apply_scaling, bool real_part, unsigned threads, const std::string& index_mode,
         const std::string& index_path) {
        device_memory(mem);
        const OutputSpec spec{python::parse_dtype(dtype), apply_scaling, false, real_part};
        std::uint64_t bytes = dtype_size(spec.type);
        for (auto d : image.shape) bytes *= static_cast<std::uint64_t>(d);
        mem.check_range(offset, bytes, "destination");
        read_nifti_data_to_device(image, spec, mem.device(), offset, threads,
                                  python::data_source_options(index_mode, index_path));
      },
      nb::arg("memory"), nb::arg("offset"), nb::arg("image"), nb::arg("dtype"),
      nb::arg("apply_scaling"), nb::arg("real_part"), nb::arg("threads") = 0,
      nb::arg("index_mode") = "auto", nb::arg("index_path") = "",
      nb::call_guard<python::GilRelease>(),
      "Read all of a NIfTI image's data, converted as the host read would convert it, into "
      "device memory at `offset` (F order), on `threads` threads (0: all cores), with the "
      "seek index chosen as for NiftiReader; complete on return.");

  m.def(
      "cufile_status",
      [](int ordinal) {
        CufileStatus s;
        {
          python::GilRelease release;  // the first call opens cuFile's driver
          s = cufile_status(ordinal);
        }
        nb::dict d;
        d["usable"] = s.usable;
        d["gds"] = s.gds;
        d["library"] = s.library;
        d["reason"] = s.reason;
        d["policy"] = s.policy;
        return d;
      },
      nb::arg("ordinal") = 0, "voxpipe::cufile_status(ordinal) as a dict.");

  m.def(
      "_set_default_cufile_library",
      [](const std::string& path) { set_default_cufile_library(path); }, nb::arg("path"),
      "The cuFile library to load when $VOXPIPE_CUFILE_LIBRARY is not set (the nvidia-cufile "
      "wheel's copy); must come before the first cuda_status().");

  m.def(
      "dicom_series_to_device",
      [](Memory& mem, std::uint64_t offset, const DicomSeries& series, const std::string& dtype,
         unsigned threads) {
        device_memory(mem);
        const DType t = python::parse_dtype(dtype);
        std::uint64_t bytes = dtype_size(t);
        for (auto d : series.shape()) bytes *= d;
        mem.check_range(offset, bytes, "destination");
        read_dicom_series_to_device(series, t, mem.device(), offset, threads);
      },
      nb::arg("memory"), nb::arg("offset"), nb::arg("series"), nb::arg("dtype"),
      nb::arg("threads") = 0, nb::call_guard<python::GilRelease>(),
      "Read a DICOM series, as dicom_read_series would, into device memory at `offset` (F "
      "order); complete on return.");
}
