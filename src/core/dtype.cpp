#include "voxpipe/dtype.hpp"

#include <array>

namespace voxpipe {

namespace {
struct DTypeInfo {
  DType type;
  std::size_t size;
  std::size_t component;
  std::string_view name;
  int nifti_code;
};

// nifti1.h DT_* codes; order follows the enum.
constexpr std::array<DTypeInfo, 14> kInfo{{
    {DType::u8, 1, 1, "uint8", 2},
    {DType::i8, 1, 1, "int8", 256},
    {DType::u16, 2, 2, "uint16", 512},
    {DType::i16, 2, 2, "int16", 4},
    {DType::u32, 4, 4, "uint32", 768},
    {DType::i32, 4, 4, "int32", 8},
    {DType::u64, 8, 8, "uint64", 1280},
    {DType::i64, 8, 8, "int64", 1024},
    {DType::f32, 4, 4, "float32", 16},
    {DType::f64, 8, 8, "float64", 64},
    {DType::c64, 8, 4, "complex64", 32},
    {DType::c128, 16, 8, "complex128", 1792},
    {DType::rgb24, 3, 1, "rgb24", 128},
    {DType::rgba32, 4, 1, "rgba32", 2304},
}};

const DTypeInfo& info(DType t) noexcept { return kInfo[static_cast<std::size_t>(t)]; }
}  // namespace

std::size_t dtype_size(DType t) noexcept { return info(t).size; }
std::size_t dtype_component_size(DType t) noexcept { return info(t).component; }
std::string_view dtype_name(DType t) noexcept { return info(t).name; }

std::optional<DType> dtype_from_name(std::string_view name) noexcept {
  for (const auto& i : kInfo)
    if (i.name == name) return i.type;
  return std::nullopt;
}

bool dtype_is_integer(DType t) noexcept { return t <= DType::i64; }
bool dtype_is_float(DType t) noexcept { return t == DType::f32 || t == DType::f64; }
bool dtype_is_complex(DType t) noexcept { return t == DType::c64 || t == DType::c128; }
bool dtype_is_rgb(DType t) noexcept { return t == DType::rgb24 || t == DType::rgba32; }

int nifti_datatype_code(DType t) noexcept { return info(t).nifti_code; }

std::optional<DType> dtype_from_nifti_code(int code) noexcept {
  // float128 (1536) and complex256 (2048) are absent on purpose: nibabel reads them only where
  // long double is IEEE binary128, which no x86-64 platform has (docs/nifti.md).
  for (const auto& i : kInfo)
    if (i.nifti_code == code) return i.type;
  return std::nullopt;
}

}  // namespace voxpipe
