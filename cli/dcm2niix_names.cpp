// dcm2niix's file names (dcm2niix.hpp dcm2niix_name), for `voxpipe dcm2niix` and `voxpipe
// dcm2nii`: the -f template's tokens, the suffixes dcm2niix appends (_e2, _ph, _real, _i00001,
// _t30, ...), its character rules for the whole name and dcm2nii's for each value.
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "dcm2niix.hpp"
#include "dcm2niix_internal.hpp"

namespace voxpipe::cli {

namespace fs = std::filesystem;

namespace {

using dcm2niix::components;
using dcm2niix::Components;
using dcm2niix::echo_number;
using dcm2niix::image_type;
using dcm2niix::integer_value;
using dcm2niix::name_series_number;
using dcm2niix::protocol_name;
using dcm2niix::value;
using dcm2niix::Vendor;
using dcm2niix::vendor;
using dcm2niix::vendor_long;
using dcm2niix::vendor_short;

// The labels of DicomSeries::split: "echo 2", "orientation 2", ...
std::vector<std::string> split_labels(const std::string& split) {
  std::vector<std::string> labels;
  std::size_t start = 0;
  while (start < split.size()) {
    std::size_t end = split.find(", ", start);
    if (end == std::string::npos) end = split.size();
    labels.push_back(split.substr(start, end - start));
    start = end + 2;
  }
  return labels;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// dcm2niix's cleanISO8859: ISO 8859-1 letters as the ASCII letter; 0 for other bytes.
char iso8859_letter(unsigned char c) {
  if (c >= 192 && c <= 198) return 'A';
  if (c == 199) return 'C';
  if (c >= 200 && c <= 203) return 'E';
  if (c >= 204 && c <= 207) return 'I';
  if (c == 208) return 'D';
  if (c == 209) return 'N';
  if ((c >= 210 && c <= 214) || c == 216 || (c >= 217 && c <= 220)) return 'O';
  if (c == 215) return 'x';
  if (c == 221) return 'Y';
  if (c >= 224 && c <= 230) return 'a';
  if (c == 231) return 'c';
  if (c >= 232 && c <= 235) return 'e';
  if (c >= 236 && c <= 239) return 'i';
  if (c == 240 || (c >= 242 && c <= 246) || c == 248) return 'o';
  if (c == 241) return 'n';
  if (c >= 249 && c <= 252) return 'u';
  if (c == 253 || c == 255) return 'y';
  return 0;
}

// dcm2nii's rule for one value: characters other than A-Z a-z 0-9 - become '_', runs of '_'
// collapse, '_' trimmed from both ends.
std::string dcm2nii_clean(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    const bool keep = (std::isalnum(c) && c < 0x80) || c == '-';
    const char ch = keep ? static_cast<char>(c) : '_';
    if (ch == '_' && (o.empty() || o.back() == '_')) continue;
    o += ch;
  }
  while (!o.empty() && o.back() == '_') o.pop_back();
  return o;
}

// A folder separator of the template while the values are masked.
constexpr char kFolderMark = '\a';


}  // namespace

std::optional<std::string> dcm2niix_name(const std::string& format, const DicomSeries& s,
                                         const NameRules& rules, std::string* unknown) {
  const bool niix = rules.dcm2niix_characters;
  const auto v = [&](const std::string& x) { return niix ? x : dcm2nii_clean(x); };
  std::string in = format;
  const bool dcm_ext = in.size() >= 4 && in.compare(in.size() - 4, 4, ".dcm") == 0;
  if (dcm_ext) in.resize(in.size() - 4);
  if (in.empty()) in = "T%t_N%n_S%s";
  if (niix)
    for (char& c : in)
      if (c == '/' || c == '\\') c = kFolderMark;
  const Vendor maker = vendor(s);
  const std::int64_t echo = echo_number(s);
  // dcm2nii names a series by the number the scan gave it; dcm2niix as name_series_number.
  const std::int64_t series_number = niix ? name_series_number(s) : s.series_number;
  const long instance = s.images.empty() ? 1 : static_cast<long>(s.images.front().instance_number);
  long run_number = -1;  // GE's (0019,10A2)
  if (maker == Vendor::ge && s.first_file)
    if (auto n = s.first_file->dataset.integer(dicom_tag(0x0019, 0x10A2))) run_number = static_cast<long>(*n);
  bool post_fixes = rules.post_fixes, echo_reported = false, series_reported = false,
       image_reported = false;
  std::string out;
  for (std::size_t pos = 0; pos < in.size(); ++pos) {
    if (in[pos] != '%') {
      out += in[pos];
      continue;
    }
    ++pos;
    const char raw = pos < in.size() ? in[pos] : 'P';  // a '%' at the end: dcm2niix's %p
    const char f = static_cast<char>(std::toupper(static_cast<unsigned char>(raw)));
    switch (f) {
      case 'A': {
        std::string coil = maker == Vendor::siemens ? value(s, 0x0051, 0x100F) : "";
        if (coil.empty()) coil = value(s, 0x0018, 0x1250);
        out += v(coil);
        break;
      }
      case 'B':
        out += v(s.first_file ? fs::path(s.first_file->path).filename().string() : "");
        break;
      case 'C': out += v(value(s, 0x0020, 0x4000)); break;
      case 'D': out += v(value(s, 0x0008, 0x103E)); break;
      case 'E':
        echo_reported = true;
        out += std::to_string(echo);
        break;
      case 'F': out += v(rules.folder); break;
      case 'G': out += v(value(s, 0x0008, 0x0050)); break;
      case 'I': out += v(value(s, 0x0010, 0x0020)); break;
      case 'J': out += v(value(s, 0x0020, 0x000E)); break;
      case 'K': out += v(value(s, 0x0020, 0x000D)); break;
      case 'L': out += v(value(s, 0x0040, 0x0254)); break;
      case 'M': out += vendor_short(maker); break;
      case 'N': out += v(value(s, 0x0010, 0x0010)); break;
      case 'O': {
        const std::string uid = value(s, 0x0002, 0x0003);
        out += v(uid);
        if (!uid.empty()) post_fixes = false;  // unique: no suffix needed
        break;
      }
      case 'P': out += v(protocol_name(s)); break;
      case 'Q': out += v(value(s, 0x0018, 0x0020)); break;
      case 'R':
        out += std::to_string(instance);
        image_reported = true;
        break;
      case 'S':
        out += std::to_string(series_number);
        series_reported = true;
        break;
      case 'T': {
        // Study date and time as one number, the seconds rounded half up but never up to 60
        // (dcm2niix writes 101112.5 as 101113 and 105959.7 as 105959).
        const double time = std::atof(value(s, 0x0008, 0x0030).c_str());
        double seconds = std::floor(time);
        if (time - seconds >= 0.5 && std::fmod(seconds, 100) < 59) seconds += 1;
        const double t = std::atof(value(s, 0x0008, 0x0020).c_str()) * 1000000 + seconds;
        char buf[64];
        std::snprintf(buf, sizeof buf, "%0.0f", t);
        out += buf;
        break;
      }
      case 'U': out += std::to_string(integer_value(value(s, 0x0020, 0x0012))); break;
      case 'V': out += vendor_long(maker); break;
      case 'X': out += v(value(s, 0x0020, 0x0010)); break;
      case 'Y':
        if (run_number >= 0) out += std::to_string(run_number);
        break;
      case 'Z': out += v(value(s, 0x0018, 0x0024)); break;
      case '%':
        if (!niix) {
          out += '%';
          break;
        }
        [[fallthrough]];
      default:
        if (f >= '0' && f <= '9' && pos + 1 < in.size()) {
          const char next = static_cast<char>(std::toupper(static_cast<unsigned char>(in[pos + 1])));
          long n = -1;
          if (next == 'S') n = static_cast<long>(series_number), series_reported = true;
          if (next == 'R') n = instance, image_reported = true;
          if (next == 'Y') n = run_number;
          if (n >= 0 || next == 'S' || next == 'R') {
            char buf[64];
            std::snprintf(buf, sizeof buf, "%0*ld", f - '0', n);
            out += buf;
          }
          if (next == 'S' || next == 'R' || next == 'Y') {
            ++pos;
            break;
          }
        }
        // dcm2niix drops a token it does not know; dcm2nii refuses it.
        if (unknown) {
          *unknown = pos < in.size() ? std::string("%") + in[pos] : "a % at the end";
          return std::nullopt;
        }
        break;
    }
  }
  // The suffixes dcm2niix appends, in its order.
  std::string suffixes;
  if (post_fixes && !echo_reported && (echo > 1 || s.split.find("echo ") != std::string::npos)) {
    suffixes += "_e" + std::to_string(echo);
    echo_reported = true;
  }
  (void)series_reported;
  std::string other_splits;  // dcm2nii: the series' splits dcm2niix has no suffix for
  for (const std::string& label : split_labels(s.split)) {
    if (starts_with(label, "echo ")) continue;
    if (starts_with(label, "orientation ")) {
      // dcm2niix writes each image of a localizer with several orientations by itself.
      if (!image_reported) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "_i%05ld", instance);
        suffixes += buf;
      }
      continue;
    }
    if (label == "PHASE" || label == "REAL" || label == "IMAGINARY" || label == "phase" ||
        label == "real" || label == "imaginary" || label == "magnitude")
      continue;
    other_splits += "_" + dcm2nii_clean(label);
  }
  const Components comp = components(s);
  if (post_fixes && comp.imaginary) suffixes += "_imaginary";
  if (post_fixes && comp.real) {
    const std::string t = image_type(s);
    suffixes += t.size() > 5 && t.find("B0") != std::string::npos && t.find("MAP") != std::string::npos
                    ? "_fieldmaphz"
                    : "_real";
  }
  if (post_fixes && comp.phase) suffixes += comp.magnitude ? "_phMag" : "_ph";
  if (post_fixes && maker != Vendor::ge && !s.images.empty() && s.images.front().trigger_time >= 1) {
    suffixes += "_t" + std::to_string(std::lround(s.images.front().trigger_time));
  }
  out += suffixes;
  if (!niix) {
    // dcm2nii: runs of '_' collapse and '_' is trimmed; its other splits keep names apart.
    std::string t;
    for (char c : out)
      if (!(c == '_' && (t.empty() || t.back() == '_'))) t += c;
    while (!t.empty() && t.back() == '_') t.pop_back();
    while (!t.empty() && t.front() == '_') t.erase(t.begin());
    t += other_splits;
    if (t.empty()) t = "series";
    return t;
  }
  if (dcm_ext) out += ".dcm";
  if (out.empty()) out = "dcm2nii_invalidName";
  if (out[0] == '.') out[0] = '_';  // not a hidden file
  static const std::string masked = "\\/ <>:;\"$*|?`";
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (masked.find(c) != std::string::npos) {
      c = '_';
    } else if (u >= 128) {
      const char letter = iso8859_letter(u);
      c = letter ? letter : '_';
    } else if (c == kFolderMark) {
      c = '/';
    } else if (u < 32) {
      c = '_';
    }
  }
  std::string t;
  for (char c : out)
    if (!(c == '_' && !t.empty() && t.back() == '_')) t += c;
  return t;
}

}  // namespace voxpipe::cli
