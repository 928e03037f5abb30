// voxpipe::Error: codes, names and the "<path>: <field>: detail (at byte N)" message form.
#include "test_support.hpp"

namespace {

using voxpipe::Error;
using voxpipe::ErrorCode;

TEST(Error, CodeNamesAreStable) {
  EXPECT_STREQ(voxpipe::error_code_name(ErrorCode::not_found), "not_found");
  EXPECT_STREQ(voxpipe::error_code_name(ErrorCode::io), "io");
  EXPECT_STREQ(voxpipe::error_code_name(ErrorCode::format), "format");
  EXPECT_STREQ(voxpipe::error_code_name(ErrorCode::unsupported), "unsupported");
  EXPECT_STREQ(voxpipe::error_code_name(ErrorCode::truncated), "truncated");
  EXPECT_STREQ(voxpipe::error_code_name(ErrorCode::corrupt), "corrupt");
  EXPECT_STREQ(voxpipe::error_code_name(ErrorCode::limit), "limit");
  EXPECT_STREQ(voxpipe::error_code_name(ErrorCode::invalid_argument), "invalid_argument");
}

TEST(Error, MessageNamesPathFieldAndOffset) {
  Error e(ErrorCode::format, "a.nii", "magic", "expected X, but found Y", 344);
  EXPECT_STREQ(e.what(), "a.nii: magic: expected X, but found Y (at byte 344)");
  EXPECT_EQ(e.code(), ErrorCode::format);
  EXPECT_EQ(e.path(), "a.nii");
  EXPECT_EQ(e.field(), "magic");
  EXPECT_EQ(e.detail(), "expected X, but found Y");
  ASSERT_TRUE(e.offset().has_value());
  EXPECT_EQ(*e.offset(), 344u);
}

TEST(Error, EmptyPartsAreLeftOut) {
  Error e(ErrorCode::io, "", "", "something failed");
  EXPECT_STREQ(e.what(), "something failed");
  EXPECT_FALSE(e.offset().has_value());
  Error z(ErrorCode::truncated, "b.nii", "", "short", 0);
  EXPECT_STREQ(z.what(), "b.nii: short (at byte 0)");
}

TEST(Error, IsARuntimeError) {
  try {
    throw Error(ErrorCode::limit, "p", "f", "d");
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "p: f: d");
    return;
  }
  FAIL() << "not caught as std::runtime_error";
}

}  // namespace
