// The dtype table: sizes, names and NIfTI codes as nifti1.h and NumPy define them.
#include <set>

#include "test_support.hpp"

namespace {

using voxpipe::DType;

struct Expected {
  DType type;
  std::size_t size;
  std::size_t component;
  const char* name;
  int nifti_code;  // nifti1.h DT_*
};

// Written from nifti1.h and NumPy, not copied from src/core/dtype.cpp.
const Expected kTable[] = {
    {DType::u8, 1, 1, "uint8", 2},        {DType::i8, 1, 1, "int8", 256},
    {DType::u16, 2, 2, "uint16", 512},    {DType::i16, 2, 2, "int16", 4},
    {DType::u32, 4, 4, "uint32", 768},    {DType::i32, 4, 4, "int32", 8},
    {DType::u64, 8, 8, "uint64", 1280},   {DType::i64, 8, 8, "int64", 1024},
    {DType::f32, 4, 4, "float32", 16},    {DType::f64, 8, 8, "float64", 64},
    {DType::c64, 8, 4, "complex64", 32},  {DType::c128, 16, 8, "complex128", 1792},
    {DType::rgb24, 3, 1, "rgb24", 128},   {DType::rgba32, 4, 1, "rgba32", 2304},
};

TEST(DType, SizesAndComponentSizesMatchNumpy) {
  for (const auto& e : kTable) {
    EXPECT_EQ(voxpipe::dtype_size(e.type), e.size) << e.name;
    EXPECT_EQ(voxpipe::dtype_component_size(e.type), e.component) << e.name;
  }
}

TEST(DType, NamesRoundTrip) {
  for (const auto& e : kTable) {
    EXPECT_EQ(voxpipe::dtype_name(e.type), e.name);
    auto back = voxpipe::dtype_from_name(e.name);
    ASSERT_TRUE(back.has_value()) << e.name;
    EXPECT_EQ(*back, e.type);
  }
}

TEST(DType, UnknownNamesAreRefused) {
  for (const char* name : {"", "float16", "float128", "int", "Float32", "uint8 ", "complex256"})
    EXPECT_FALSE(voxpipe::dtype_from_name(name).has_value()) << '"' << name << '"';
}

TEST(DType, NiftiCodesBothWays) {
  std::set<int> seen;
  for (const auto& e : kTable) {
    EXPECT_EQ(voxpipe::nifti_datatype_code(e.type), e.nifti_code) << e.name;
    auto back = voxpipe::dtype_from_nifti_code(e.nifti_code);
    ASSERT_TRUE(back.has_value()) << e.nifti_code;
    EXPECT_EQ(*back, e.type);
    EXPECT_TRUE(seen.insert(e.nifti_code).second) << "duplicate code " << e.nifti_code;
  }
}

TEST(DType, CodesNibabelRefusesMapToNothing) {
  // DT_NONE 0, DT_BINARY 1, DT_ALL 255, DT_FLOAT128 1536, DT_COMPLEX256 2048.
  for (int code : {0, 1, 255, 1536, 2048}) EXPECT_FALSE(voxpipe::dtype_from_nifti_code(code)) << code;
}

TEST(DType, UnknownCodesMapToNothing) {
  for (int code : {-1, 3, 5, 6, 7, 17, 63, 65, 127, 129, 257, 511, 513, 1000, 2305, 32767, -32768})
    EXPECT_FALSE(voxpipe::dtype_from_nifti_code(code)) << code;
}

TEST(DType, KindPredicatesPartitionTheTypes) {
  for (const auto& e : kTable) {
    const std::string n = e.name;
    const bool integer = n.find("int") != std::string::npos;
    const bool floating = n.rfind("float", 0) == 0;
    const bool complex = n.rfind("complex", 0) == 0;
    const bool rgb = n.rfind("rgb", 0) == 0;
    EXPECT_EQ(voxpipe::dtype_is_integer(e.type), integer) << n;
    EXPECT_EQ(voxpipe::dtype_is_float(e.type), floating) << n;
    EXPECT_EQ(voxpipe::dtype_is_complex(e.type), complex) << n;
    EXPECT_EQ(voxpipe::dtype_is_rgb(e.type), rgb) << n;
    EXPECT_EQ(integer + floating + complex + rgb, 1) << n;
  }
}

}  // namespace
