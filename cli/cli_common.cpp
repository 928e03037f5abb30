#include "cli_common.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <span>

#include "core/file.hpp"
#include "nifti/internal.hpp"
#include "voxpipe/remote.hpp"

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

namespace {
constexpr const char* kUrlOutputsNeedPython =
    "outputs on object storage are written through voxpipe's Python package (pip install "
    "'voxpipe[s3]'; from the shell: python -m voxpipe ...)";
}  // namespace

void check_overwrite(const std::string& path, bool overwrite) {
  if (overwrite) return;
  if (is_object_url(path)) {
    const UrlHandlers& handlers = url_handlers();
    if (!handlers.exists) throw Error(ErrorCode::unsupported, path, "", kUrlOutputsNeedPython);
    if (handlers.exists(path)) throw OutputExists(path);
    return;
  }
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::symlink_status(path, ec))) throw OutputExists(path);
}

std::pair<std::string, std::string> split_object_url(const std::string& url) {
  const std::size_t slash = url.rfind('/');
  const std::size_t scheme = url.find("://");
  if (slash == std::string::npos || scheme == std::string::npos || slash <= scheme + 3 ||
      slash + 1 == url.size())
    throw Error(ErrorCode::invalid_argument, url, "",
                "expected the URL of an object (SCHEME://BUCKET/KEY)");
  return {url.substr(0, slash + 1), url.substr(slash + 1)};
}

StagedUpload::StagedUpload(std::string prefix) : prefix_(std::move(prefix)) {
  if (!prefix_.empty() && prefix_.back() != '/') prefix_ += '/';
  if (!url_handlers().upload) throw Error(ErrorCode::unsupported, prefix_, "", kUrlOutputsNeedPython);
  std::error_code ec;
  std::string pattern = (std::filesystem::temp_directory_path(ec) / "voxpipe-upload-XXXXXX").string();
  if (ec || ::mkdtemp(pattern.data()) == nullptr)
    throw Error(ErrorCode::io, pattern, "", "cannot create a temporary folder for the outputs to upload");
  folder_ = pattern;
}

StagedUpload::~StagedUpload() {
  std::error_code ec;
  std::filesystem::remove_all(folder_, ec);
}

std::string StagedUpload::local(const std::string& name) const {
  const std::filesystem::path p = std::filesystem::path(folder_) / name;
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  return p.string();
}

void StagedUpload::upload(bool overwrite) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(folder_))
    if (entry.is_regular_file()) files.push_back(fs::relative(entry.path(), folder_).generic_string());
  // A pair's header after its image, so that a reader that finds the .hdr finds the .img.
  const auto is_header = [](const std::string& f) {
    std::string lower = f;
    for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return lower.ends_with(".hdr") || lower.ends_with(".hdr.gz");
  };
  std::stable_sort(files.begin(), files.end(), [&](const std::string& a, const std::string& b) {
    return std::make_pair(is_header(a), a) < std::make_pair(is_header(b), b);
  });
  for (const std::string& f : files) {
    const std::string local = (fs::path(folder_) / f).string();
    if (!url_handlers().upload(local, prefix_ + f, overwrite)) throw OutputExists(prefix_ + f);
    std::error_code ec;
    fs::remove(local, ec);
  }
}

void write_nifti_output(const std::string& out, bool overwrite, const NiftiHeader& header,
                        const std::vector<NiftiExtension>& extensions,
                        const DataProducer& producer, const WriteOptions& options,
                        std::uint64_t max_size) {
  const UrlHandlers& handlers = url_handlers();
  if (!is_object_url(out) || nifti::file_paths(out).pair || !handlers.open_upload) {
    std::optional<StagedUpload> staged;
    write_nifti(output_target(out, staged), header, extensions, producer, options);
    if (staged) staged->upload(overwrite);
    return;
  }
  try {
    write_nifti_stream(out, handlers.open_upload(out, overwrite, max_size), header, extensions,
                       producer, options);
  } catch (const Error&) {
    // The conditional create found the object there: made by another writer since the check.
    bool exists = false;
    try {
      exists = !overwrite && handlers.exists && handlers.exists(out);
    } catch (const Error&) {  // the write's own error says more
    }
    if (exists) throw OutputExists(out);
    throw;
  }
}

std::string output_target(const std::string& out, std::optional<StagedUpload>& staged) {
  if (!is_object_url(out)) return out;
  const auto [prefix, name] = split_object_url(out);
  staged.emplace(prefix);
  return staged->local(name);
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
