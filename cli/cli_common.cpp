#include "cli_common.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <span>

#include "core/file.hpp"
#include "nifti/internal.hpp"

namespace voxpipe::cli {

int exit_code(ErrorCode c) {
  switch (c) {
    case ErrorCode::not_found: return 3;
    case ErrorCode::io: return 4;
    case ErrorCode::format: return 5;
    case ErrorCode::unsupported: return 6;
    case ErrorCode::truncated: return 7;
    case ErrorCode::corrupt: return 8;
    case ErrorCode::limit: return 9;
    case ErrorCode::invalid_argument: return 10;
  }
  return kInternal;
}

void check_overwrite(const std::string& path, bool overwrite) {
  if (overwrite) return;
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::symlink_status(path, ec))) throw OutputExists(path);
}

void check_nifti_overwrite(const std::string& path, bool overwrite) {
  const nifti::FilePaths files = nifti::file_paths(path);  // Error(format) for a name it cannot write
  check_overwrite(files.header, overwrite);
  if (files.pair) check_overwrite(files.image, overwrite);
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      o += '\\';
      o += static_cast<char>(ch);
    } else if (ch < 0x20 || ch >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      o += buf;
    } else {
      o += static_cast<char>(ch);
    }
  }
  return o + "\"";
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string shortest(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// ---- the option parser

std::string expects(std::string_view option, std::string_view what, std::string_view value) {
  std::string o(option);
  o += " expects ";
  o += what;
  o += ", but received ";
  o += value;
  return o;
}

std::optional<long> integer_in(const std::string& value, long lo, long hi) {
  char* end = nullptr;
  const long n = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end || n < lo || n > hi) return std::nullopt;
  return n;
}

OptionParser& OptionParser::flag(OptionNames names, bool& target) {
  return flag(std::move(names), [&target] { target = true; });
}

OptionParser& OptionParser::flag(OptionNames names, std::function<void()> action) {
  options_.push_back(Option{std::move(names.list), false, std::move(action), {}, {}});
  return *this;
}

OptionParser& OptionParser::overwrite(bool& target) { return flag({"--overwrite", "--force"}, target); }

OptionParser& OptionParser::value(OptionNames names, std::string& target) {
  return value(std::move(names), [&target](const std::string& v) {
    target = v;
    return std::string();
  });
}

OptionParser& OptionParser::value(OptionNames names, std::optional<std::string>& target) {
  return value(std::move(names), [&target](const std::string& v) {
    target = v;
    return std::string();
  });
}

OptionParser& OptionParser::value(OptionNames names, ValueHandler handler) {
  options_.push_back(Option{std::move(names.list), true, {}, std::move(handler), {}});
  return *this;
}

OptionParser& OptionParser::progress(ProgressMode& mode) {
  value("--progress", [&mode](const std::string& v) {
    const std::optional<ProgressMode> m = progress_mode_from_name(v);
    if (!m) return expects("--progress", "auto, bar, log or none", v);
    mode = *m;
    return std::string();
  });
  options_.back().missing = "--progress needs a value (auto, bar, log or none)";
  return *this;
}

OptionParser& OptionParser::positionals(std::vector<std::string>& into, std::size_t min,
                                        std::size_t max, std::string message) {
  positionals_ = &into;
  min_positionals_ = min;
  max_positionals_ = max;
  count_message_ = std::move(message);
  return positionals([&into](const std::string& arg) {
    into.push_back(arg);
    return std::string();
  });
}

OptionParser& OptionParser::positionals(PositionalHandler handler) {
  positional_ = std::move(handler);
  return *this;
}

const OptionParser::Option* OptionParser::find(const std::string& arg) const {
  for (const Option& o : options_)
    for (const std::string& name : o.names)
      if (arg == name) return &o;
  return nullptr;
}

std::optional<int> OptionParser::parse(const std::vector<std::string>& args) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      out_ << usage_;
      return 0;
    }
    if (const Option* o = find(a)) {
      if (!o->takes_value) {
        o->action();
        continue;
      }
      if (i + 1 >= args.size()) {
        if (!o->missing.empty()) return error(o->missing);
        return usage_after_missing_value_ ? usage_error(a + " needs a value")
                                          : error(a + " needs a value");
      }
      const std::string refused = o->handler(args[++i]);
      if (!refused.empty()) return error(refused);
    } else if (!a.empty() && a[0] == '-' && !(lone_dash_is_positional_ && a.size() == 1)) {
      return usage_error("unknown option " + a);
    } else if (const std::string refused = positional_ ? positional_(a) : "unexpected " + a;
               !refused.empty()) {
      return usage_error(refused);
    }
  }
  if (positionals_ && (positionals_->size() < min_positionals_ || positionals_->size() > max_positionals_))
    return usage_error(count_message_);
  return std::nullopt;
}

int OptionParser::usage_error(std::string_view message) const {
  err_ << command_ << ": " << message << "\n" << usage_;
  return kUsage;
}

int OptionParser::error(std::string_view message) const {
  err_ << command_ << ": " << message << "\n";
  return kUsage;
}

void write_text_file(const std::string& path, const std::string& text) {
  core::AtomicOutputFile file(path);
  file.write(std::as_bytes(std::span(text.data(), text.size())));
  file.commit();
}

}  // namespace voxpipe::cli
