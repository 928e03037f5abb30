#include "voxpipe/error.hpp"

#include <utility>

namespace voxpipe {

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::not_found: return "not_found";
    case ErrorCode::io: return "io";
    case ErrorCode::format: return "format";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::truncated: return "truncated";
    case ErrorCode::corrupt: return "corrupt";
    case ErrorCode::limit: return "limit";
    case ErrorCode::invalid_argument: return "invalid_argument";
  }
  return "unknown";
}

namespace {
std::string compose(const std::string& path, const std::string& field, const std::string& detail,
                    std::optional<std::uint64_t> offset) {
  std::string msg;
  if (!path.empty()) msg += path + ": ";
  if (!field.empty()) msg += field + ": ";
  msg += detail;
  if (offset) msg += " (at byte " + std::to_string(*offset) + ")";
  return msg;
}
}  // namespace

Error::Error(ErrorCode code, std::string path, std::string field, std::string detail,
             std::optional<std::uint64_t> offset)
    : std::runtime_error(compose(path, field, detail, offset)),
      code_(code),
      path_(std::move(path)),
      field_(std::move(field)),
      detail_(std::move(detail)),
      offset_(offset) {}

}  // namespace voxpipe
