#include "voxpipe/error.hpp"

#include <cctype>
#include <string_view>
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

bool is_scheme_char(char c) noexcept {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '.' || c == '-';
}

// Where a URL's user-info or a parameter's value ends (not part of it).
bool ends_secret(char c, bool userinfo) noexcept {
  if (std::isspace(static_cast<unsigned char>(c)) || c == '\'' || c == '"' || c == '#')
    return true;
  return userinfo ? (c == '/' || c == '?' || c == '@') : (c == '&' || c == ';');
}

// `text` with the credentials of every URL in it replaced by REDACTED: user-info
// (scheme://USER:PASSWORD@host) and the values of the query parameters that sign or authorise
// a request (presigned S3 and GCS URLs, Azure SAS). The rule of voxpipe/_foundation/redact.py, applied to
// every error here, so that the CLI's messages and the Python exceptions made from these errors
// never show them. Idempotent; no std::regex (its recursion grows with the input).
std::string redact(const std::string& text) {
  static constexpr std::string_view kRedacted = "REDACTED";
  static constexpr std::string_view kParameters[] = {
      "x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-goog-signature",
      "x-goog-credential", "sig", "signature", "token"};
  if (text.find("://") == std::string::npos && text.find('=') == std::string::npos) return text;
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    // scheme://USERINFO@
    if (text.compare(i, 3, "://") == 0 && i > 0 && is_scheme_char(text[i - 1])) {
      std::size_t end = i + 3;
      while (end < text.size() && !ends_secret(text[end], true)) ++end;
      out.append(text, i, 3);
      if (end < text.size() && text[end] == '@') {
        out += kRedacted;
        out += '@';
        i = end + 1;
      } else {
        i += 3;
      }
      continue;
    }
    // ?NAME=VALUE, &NAME=VALUE, ;NAME=VALUE
    const char c = text[i];
    out += c;
    ++i;
    if (c != '?' && c != '&' && c != ';') continue;
    for (std::string_view name : kParameters) {
      if (i + name.size() >= text.size() || text[i + name.size()] != '=') continue;
      bool same = true;
      for (std::size_t k = 0; k < name.size() && same; ++k)
        same = std::tolower(static_cast<unsigned char>(text[i + k])) == name[k];
      if (!same) continue;
      std::size_t end = i + name.size() + 1;
      while (end < text.size() && !ends_secret(text[end], false)) ++end;
      out.append(text, i, name.size() + 1);
      out += kRedacted;
      i = end;
      break;
    }
  }
  return out;
}

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
    : std::runtime_error(compose(redact(path), field, redact(detail), offset)),
      code_(code),
      path_(redact(path)),
      field_(std::move(field)),
      detail_(redact(detail)),
      offset_(offset) {}

}  // namespace voxpipe
