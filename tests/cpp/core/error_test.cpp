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

TEST(Error, UrlCredentialsAreRedactedFromPathDetailAndMessage) {
  const std::string url =
      "https://user:PASSWORD@bucket.example.org/k.nii?X-Amz-Algorithm=AWS4-HMAC-SHA256&"
      "X-Amz-Credential=AKIA%2F20260101&x-amz-signature=abc123&X-Amz-Security-Token=T0K&v=2";
  const std::string want =
      "https://REDACTED@bucket.example.org/k.nii?X-Amz-Algorithm=AWS4-HMAC-SHA256&"
      "X-Amz-Credential=REDACTED&x-amz-signature=REDACTED&X-Amz-Security-Token=REDACTED&v=2";
  Error e(ErrorCode::io, url, "", "cannot read '" + url + "': 403 sig=S;token=T Signature=x");
  EXPECT_EQ(e.path(), want);
  EXPECT_EQ(e.detail(), "cannot read '" + want + "': 403 sig=S;token=REDACTED Signature=x");
  EXPECT_EQ(std::string(e.what()), want + ": " + e.detail());
  for (const char* s : {"PASSWORD", "abc123", "AKIA", "T0K"})
    EXPECT_EQ(std::string(e.what()).find(s), std::string::npos) << s;
  // Again is the same; paths, keys with "@" and other parameters are left as they are.
  EXPECT_EQ(Error(ErrorCode::io, e.path(), "", "d").path(), want);
  for (const char* same : {"s3://bucket/a@b/k.nii", "/data/x=1/sub@2.nii",
                           "gs://b/k.nii?generation=3", "https://h/k?signature_v=1&tokens=2"})
    EXPECT_EQ(Error(ErrorCode::io, same, "", "d").path(), same);
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
