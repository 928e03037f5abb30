// The foundation of voxpipe._core's binding areas (module.cpp): what several areas share, one
// definition of each, so that they cannot drift apart: how Python passes a dtype and a
// seek-index choice, byte arrays, and the bytes of Python objects. It includes no area; the
// areas include it (and gil.hpp), never each other.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "voxpipe/dtype.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/output_stream.hpp"

namespace voxpipe::python {

namespace nb = nanobind;

// A 1-D uint8 view of an output array (the Python layer passes its bytes).
using ByteArray = nb::ndarray<std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
// Input bytes, which may come from read-only arrays (a memory map opened with mmap='r').
using ConstByteArray = nb::ndarray<const std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// A dtype as the Python layer passes it, always in one form: NumPy's dtype name ("uint8",
// "int16", "float32", "complex64", ...), and "rgb24"/"rgba32" for NIfTI's RGB structures
// (voxpipe._header.core_dtype_name makes it).
inline DType parse_dtype(const std::string& name) {
  auto t = dtype_from_name(name);
  if (!t) throw Error(ErrorCode::invalid_argument, "", "dtype", "unknown dtype " + name);
  return *t;
}

// The seek-index choice as Python passes it: "auto", "none" or "path" (with index_path).
inline DataSourceOptions data_source_options(const std::string& index_mode,
                                             const std::string& index_path) {
  DataSourceOptions options;
  if (index_mode == "auto")
    options.index = DataSourceOptions::Index::automatic;
  else if (index_mode == "none")
    options.index = DataSourceOptions::Index::none;
  else if (index_mode == "path")
    options.index = DataSourceOptions::Index::path, options.index_path = index_path;
  else
    throw Error(ErrorCode::invalid_argument, "", "index",
                "expected auto, none or path, but received " + index_mode);
  return options;
}

// The bytes of `object`'s buffer (the buffer protocol; C-contiguous, read-only allowed), read in
// place: the buffer is held, so the object can be neither resized nor released, until the last
// copy of the returned owner ends (an image, a reader or a series made from it), which may
// happen on any thread, with or without the GIL. TypeError / BufferError as Python raises them.
// Call with the GIL held.
std::shared_ptr<const void> hold_buffer(nb::handle object, std::span<const std::byte>& bytes);
// The same for the byte type of the DICOM API.
std::shared_ptr<const void> hold_buffer(nb::handle object, std::span<const std::uint8_t>& bytes);

// A copy of `bytes` as a Python bytes object.
nb::bytes to_bytes(std::span<const std::uint8_t> bytes);

// An OutputStream (voxpipe/output_stream.hpp) over a Python object with write(bytes), commit()
// and abort() (voxpipe/_sources/upload.py StreamingUpload), each called with the GIL taken from
// whatever thread writes: a Python exception raised by write or commit becomes `failure(e)`
// (KeyboardInterrupt passes as it is); abort's are dropped. Call with the GIL held.
OutputStream python_output_stream(nb::handle sink,
                                  std::function<Error(nb::python_error&)> failure);

}  // namespace voxpipe::python
