// How every binding file takes what Python passes for a dtype and a seek-index choice: one
// definition of each, so that the host and device bindings cannot drift apart.
#pragma once

#include <string>

#include "voxpipe/dtype.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"

namespace voxpipe::python {

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

}  // namespace voxpipe::python
