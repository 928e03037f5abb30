// voxpipe/error.hpp: the one exception type the public API throws.
//
// Every failure that reaches a caller is a voxpipe::Error carrying a code (what kind of failure,
// which the Python package and the CLI map to exception classes and exit codes), the path of the
// file involved, and where it applies the header field and the byte offset. Messages follow the
// form "<path>: <field>: expected X, but found Y (at byte N)".
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace voxpipe {

enum class ErrorCode {
  not_found,         // the file does not exist
  io,                // the operating system refused a read, write, open or rename
  format,            // not a (valid) file of the expected format: bad magic, bad header field
  unsupported,       // valid but not handled: e.g. a datatype nibabel does not read either
  truncated,         // the file ends before the data the header promises
  corrupt,           // compressed stream is invalid or its checksum does not match
  limit,             // a size exceeds the limits given (or what the file can justify)
  invalid_argument,  // the caller asked for something impossible (bad selection, bad dtype)
};

// Name of the code, e.g. "truncated"; stable, used in CLI JSON output and docs.
const char* error_code_name(ErrorCode code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string path, std::string field, std::string detail,
        std::optional<std::uint64_t> offset = std::nullopt);

  ErrorCode code() const noexcept { return code_; }
  const std::string& path() const noexcept { return path_; }
  const std::string& field() const noexcept { return field_; }
  const std::string& detail() const noexcept { return detail_; }
  std::optional<std::uint64_t> offset() const noexcept { return offset_; }

 private:
  ErrorCode code_;
  std::string path_;
  std::string field_;
  std::string detail_;
  std::optional<std::uint64_t> offset_;
};

}  // namespace voxpipe
