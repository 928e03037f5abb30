// voxpipe/dtype.hpp: element types of voxel data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace voxpipe {

// Element types nibabel reads from NIfTI. rgb24/rgba32 are structured (3 or 4 uint8 channels).
enum class DType : std::uint8_t {
  u8, i8, u16, i16, u32, i32, u64, i64, f32, f64, c64, c128, rgb24, rgba32,
};

// Bytes per element (complex: both parts; rgb24: 3).
std::size_t dtype_size(DType t) noexcept;
// NumPy-style name: "uint8", "int16", "float32", "complex64", "rgb24", ...
std::string_view dtype_name(DType t) noexcept;
// Inverse of dtype_name; nullopt for an unknown name.
std::optional<DType> dtype_from_name(std::string_view name) noexcept;
// Size in bytes of one scalar component (complex64: 4, rgb24: 1).
std::size_t dtype_component_size(DType t) noexcept;
bool dtype_is_integer(DType t) noexcept;
bool dtype_is_float(DType t) noexcept;    // f32, f64
bool dtype_is_complex(DType t) noexcept;  // c64, c128
bool dtype_is_rgb(DType t) noexcept;      // rgb24, rgba32

// NIfTI datatype code (nifti1.h DT_*) <-> DType. Codes nibabel refuses (0, 1, 255, and
// float128/complex256 on platforms without IEEE binary128) map to nullopt.
int nifti_datatype_code(DType t) noexcept;
std::optional<DType> dtype_from_nifti_code(int code) noexcept;

}  // namespace voxpipe
