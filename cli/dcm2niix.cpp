// voxpipe dcm2niix: dcm2niix's command line over voxpipe's DICOM series, so that wrappers that
// run the dcm2niix program (heudiconv through nipype's Dcm2niix interface, dcm2bids) can run
// this one in its place: its options (the same letters and values, the same refusals), its file
// names (-f tokens, suffixes, name conflicts as -w says), its row order (rows flipped, -y), its
// standard output ("Convert N DICOM as PATH (AxBxCxD)", which nipype parses) and its exit codes
// (nii_dicom.h: 2 no DICOM found, 3 version, 5 input folder invalid, 6 output folder invalid, 7
// output folder read-only, 8 some series failed, 12 invalid option). The images and sidecars
// are dcm2nii's (series_nifti.cpp). Options that would change what is written but that voxpipe
// does not implement are refused (-e, -r) or named on stderr (-x y, -z 3, -m y, -l y);
// those that change nothing written here are accepted and, with -v, named.
#include "dcm2niix.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "commands.hpp"
#include "series_nifti.hpp"
#include "voxpipe/dicom.hpp"
#include "voxpipe/dicom_series.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/remote.hpp"
#include "voxpipe/threads.hpp"

#include <zlib.h>

namespace voxpipe::cli {

namespace fs = std::filesystem;

namespace {

// The dcm2niix release whose command line this one follows.
constexpr const char* kDcm2niixVersion = "v1.0.20260724";

// dcm2niix's exit codes (nii_dicom.h).
constexpr int kExitNoValidFiles = 2;
constexpr int kExitReportVersion = 3;
constexpr int kExitInputFolderInvalid = 5;
constexpr int kExitOutputFolderInvalid = 6;
constexpr int kExitOutputFolderReadOnly = 7;
constexpr int kExitSomeOkSomeBad = 8;
constexpr int kExitInvalidParam = 12;

// ---- Values of the first file, as dcm2niix reads them.

// The value of `tag` as its bytes: the whole value (backslashes included), without the NUL or
// space padding at its end; "" when the element is missing or not read.
std::string raw_value(const DicomDataset& ds, DicomTag tag) {
  const DicomElement* e = ds.find(tag);
  if (!e || !e->value_read) return "";
  std::string v(e->value.begin(), e->value.end());
  while (!v.empty() && (v.back() == '\0' || v.back() == ' ')) v.pop_back();
  return v;
}

std::string value(const DicomSeries& s, std::uint16_t group, std::uint16_t element) {
  if (!s.first_file) return "";
  const DicomTag tag = dicom_tag(group, element);
  std::string v = raw_value(s.first_file->dataset, tag);
  if (v.empty() && group == 0x0002) v = raw_value(s.first_file->meta, tag);
  return v;
}

// dcm2niix's manufacturer from the first two letters of Manufacturer (0008,0070).
enum class Vendor { unknown, siemens, ge, hitachi, mediso, philips, toshiba, canon, uih, bruker, mrsolutions, hyperfine };

Vendor vendor(const DicomSeries& s) {
  const std::string m = value(s, 0x0008, 0x0070);
  if (m.size() < 2) return Vendor::unknown;
  const std::string p{static_cast<char>(std::toupper(static_cast<unsigned char>(m[0]))),
                      static_cast<char>(std::toupper(static_cast<unsigned char>(m[1])))};
  Vendor v = Vendor::unknown;
  if (p == "SI" || p == "CP") v = Vendor::siemens;
  if (p == "GE") v = Vendor::ge;
  if (p == "HI") v = Vendor::hitachi;
  if (p == "ME") v = Vendor::mediso;
  if (p == "PH") v = Vendor::philips;
  if (p == "TO") v = Vendor::toshiba;
  if (p == "CA") v = Vendor::canon;
  if (p == "UI") v = Vendor::uih;
  if (p == "BR") v = Vendor::bruker;
  if (p == "MR") v = Vendor::mrsolutions;
  if (p == "HY") v = Vendor::hyperfine;
  return v;
}

std::string vendor_short(Vendor v) {
  switch (v) {
    case Vendor::bruker: return "Br";
    case Vendor::ge: return "GE";
    case Vendor::toshiba: return "To";
    case Vendor::canon: return "Ca";
    case Vendor::uih: return "UI";
    case Vendor::philips: return "Ph";
    case Vendor::siemens: return "Si";
    case Vendor::mediso: return "Me";
    case Vendor::mrsolutions: return "MR";
    case Vendor::hyperfine: return "Hy";
    default: return "NA";
  }
}

std::string vendor_long(Vendor v) {
  switch (v) {
    case Vendor::bruker: return "Bruker";
    case Vendor::canon: return "Canon";
    case Vendor::ge: return "GE";
    case Vendor::hyperfine: return "Hyperfine";
    case Vendor::mediso: return "Mediso";
    case Vendor::mrsolutions: return "MRsolutions";
    case Vendor::philips: return "Philips";
    case Vendor::siemens: return "Siemens";
    case Vendor::toshiba: return "Toshiba";
    case Vendor::uih: return "UIH";
    default: return "NA";
  }
}

// atoi of an IS value, as dcm2niix's dcmStrInt.
long integer_value(const std::string& v) { return std::strtol(v.c_str(), nullptr, 10); }

std::string image_type(const DicomSeries& s) {
  std::string t = value(s, 0x0008, 0x0008);
  std::replace(t.begin(), t.end(), '\\', '_');
  return t;
}

// dcm2niix's ProtocolName: (0018,1030), else SeriesDescription, else (not Siemens) the
// SequenceName; "_MoCo" appended for Siemens' motion-corrected series.
std::string protocol_name(const DicomSeries& s) {
  std::string p = value(s, 0x0018, 0x1030);
  const std::string description = value(s, 0x0008, 0x103E);
  const std::string sequence = value(s, 0x0018, 0x0024);
  if (p.empty() && description.size() > 1) p = description;
  if (p.size() > 1 && image_type(s).find("_MOCO_") != std::string::npos) p += "_MoCo";
  if (p.empty() && sequence.size() > 1 && vendor(s) != Vendor::siemens) p = sequence;
  return p;
}

// The echo number of the series, as dcm2niix reads it: EchoNumbers of the first file.
std::int64_t echo_number(const DicomSeries& s) { return integer_value(value(s, 0x0018, 0x0086)); }

std::uint32_t crc_of(const std::string& text) {
  return static_cast<std::uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size())));
}

// SeriesNumber of the first file as dcm2niix reads it: atoi of its value (0 when empty), -1
// when the element is absent.
std::int64_t stated_series_number(const DicomSeries& s) {
  if (!s.first_file) return s.series_number;
  if (!s.first_file->dataset.find(dicom_tag(0x0020, 0x0011))) return -1;
  return integer_value(value(s, 0x0020, 0x0011));
}

// The series number dcm2niix names a series with (%s): the stated one, or when it is below 1
// (0, empty or absent) the CRC-32 of the SeriesInstanceUID (dcm2niix issue 218), which is 0
// without a UID: "_843266141" for SeriesNumber 0, "_0" for neither.
std::int64_t name_series_number(const DicomSeries& s) {
  const std::int64_t n = stated_series_number(s);
  return n >= 1 ? n : static_cast<std::int64_t>(crc_of(value(s, 0x0020, 0x000E)));
}

// The image components dcm2niix finds in ImageType (backslashes read as '_'): "_R_" or "_REAL_"
// real, "_I_" or "_IMAGINARY_" imaginary, "_P_" or "PHASE" phase, "_M_" or "_MAGNITUDE_"
// magnitude.
struct Components {
  bool real = false, imaginary = false, phase = false, magnitude = false;
};

Components components(const DicomSeries& s) {
  const std::string t = image_type(s);
  const auto has = [&t](const char* w) { return t.find(w) != std::string::npos; };
  Components c;
  c.real = (t.size() > 3 && has("_R_")) || (t.size() > 6 && has("_REAL_"));
  c.magnitude = (t.size() > 3 && has("_M_")) || (t.size() > 11 && has("_MAGNITUDE_"));
  c.imaginary = (t.size() > 3 && has("_I_")) || (t.size() > 11 && has("_IMAGINARY_"));
  c.phase = (t.size() > 3 && has("_P_")) || (t.size() > 6 && has("PHASE"));
  return c;
}

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

DicomSeries rows_flipped(const DicomSeries& s) {
  DicomSeries f = s;
  const double last = s.rows > 0 ? static_cast<double>(s.rows) - 1 : 0;
  for (int r = 0; r < 3; ++r) {
    f.affine[4 * r + 3] = s.affine[4 * r + 3] + last * s.affine[4 * r + 1];
    f.affine[4 * r + 1] = -s.affine[4 * r + 1];
  }
  return f;
}

// Whether dcm2niix keeps the rows of `s` as stored: a 3D volume of a 3D acquisition that is not
// EPI (MRAcquisitionType 3D; ScanningSequence without EP, EchoPlanarPulseSequence not YES) is
// reoriented to its nearest orthogonal axes instead of flipped (nii_setOrtho), which for an
// image in no patient frame (DicomSeries::no_geometry) leaves the rows as stored. A placed
// image needs no such rule: the affine says where its rows go either way.
bool rows_kept_by_dcm2niix(const DicomSeries& s) {
  if (!s.no_geometry || s.slices < 2 || s.volumes > 1 || !s.first_file) return false;
  const DicomDataset& ds = s.first_file->dataset;
  const std::string acquisition = ds.string(dicom_tag(0x0018, 0x0023)).value_or("");
  if (acquisition.size() < 2 || acquisition[0] != '3' ||
      std::toupper(static_cast<unsigned char>(acquisition[1])) != 'D')
    return false;
  for (const std::string& v : ds.strings(dicom_tag(0x0018, 0x0020)))
    if (v.find("EP") != std::string::npos) return false;
  const std::string epi = ds.string(dicom_tag(0x0018, 0x9018)).value_or("");
  return epi.empty() || std::toupper(static_cast<unsigned char>(epi[0])) != 'Y';
}

void flip_rows(std::span<std::uint8_t> data, const std::vector<std::uint64_t>& shape,
               std::size_t element_size) {
  if (shape.size() < 2) return;
  const std::size_t row = static_cast<std::size_t>(shape[0]) * element_size;
  const std::size_t rows = static_cast<std::size_t>(shape[1]);
  const std::size_t plane = row * rows;
  if (plane == 0) return;
  for (std::size_t p = 0; p + plane <= data.size(); p += plane)
    for (std::size_t y = 0; y < rows / 2; ++y)
      std::swap_ranges(data.begin() + p + y * row, data.begin() + p + (y + 1) * row,
                       data.begin() + p + (rows - 1 - y) * row);
}

namespace {

const char* kDcm2niixUsage =
    "usage: voxpipe dcm2niix [options] <in_folder>\n"
    "\n"
    "dcm2niix's command line (dcm2niix " "v1.0.20260724" "), for programs that run dcm2niix\n"
    "(heudiconv through nipype, dcm2bids): the same options, file names, row order, output lines\n"
    "and exit codes, writing voxpipe dcm2nii's images and sidecars (docs/cli.md).\n"
    " Options :\n"
    "  -1..-9 : gz compression level (default: voxpipe's 1)\n"
    "  -a : adjacent DICOMs (y/n; accepted, no effect)\n"
    "  -b : BIDS sidecar (y/n/o [o=only: no NIfTI]/i [neither], default y)\n"
    "   -ba : anonymize BIDS (y/n, default y)\n"
    "  -c : comment stored in NIfTI aux_file (up to 23 characters)\n"
    "  -d : directory search depth (0..9, default 5)\n"
    "  -e : export as NRRD/MGH/JNIfTI (only n: voxpipe writes NIfTI)\n"
    "  -f : filename (%a=antenna (coil) name, %b=basename, %c=comments, %d=description, %e=echo\n"
    "       number, %f=folder name, %g=accession number, %i=ID of patient, %j=seriesInstanceUID,\n"
    "       %k=studyInstanceUID, %l=procedure step description, %m=manufacturer, %n=name of\n"
    "       patient, %o=mediaObjectInstanceUID, %p=protocol, %q=scanning sequence, %r=instance\n"
    "       number, %s=series number, %t=time, %u=acquisition number, %v=vendor, %x=study ID,\n"
    "       %y=run number, %z=sequence name; %3s, %4r: zero-padded; default '%f_%p_%t_%s')\n"
    "  -h : show help\n"
    "  --make-shim DIR : write DIR/dcm2niix, a script that runs this command (put DIR first on\n"
    "       PATH for wrappers that run dcm2niix); voxpipe's own option, given alone\n"
    "  -i : ignore derived, localizer and 2D images (y/n, default n)\n"
    "  -n : only convert this series CRC number (-n -1 lists them) - can be used up to 16 times\n"
    "       (default convert all)\n"
    "  -o : output directory (omit to save to input folder)\n"
    "  -s : single file mode, do not convert other images in folder (y/n, default n)\n"
    "  -v : verbose (n/y or 0/1/2, default 0); alone: report the version\n"
    "  -w : write behavior for name conflicts (0,1,2, default 2: 0=skip duplicates,\n"
    "       1=overwrite, 2=add suffix)\n"
    "  -x : crop 3D acquisitions (n or i; y is not implemented: written uncropped)\n"
    "  -y : flip the rows as dcm2niix does (y/n, default y; n: voxpipe dcm2nii's order)\n"
    "  -z : compress images (y/o/i: .nii.gz, n: .nii, default n)\n"
    "  -p : Philips precise float (not display) scaling (y/n, default y)\n"
    "  -g, -j, -l, -m, -q, -t, --big-endian, --progress : accepted as dcm2niix accepts\n"
    "       them; those voxpipe does not apply are named with -v\n"
    "  --ignore_trigger_times : accepted, no effect (voxpipe does not split by trigger time)\n"
    "  --terse : omit filename post-fixes (can cause overwrites)\n"
    "  --version : report version (exit 3)\n"
    "\n"
    "Exit status (dcm2niix's): 0 success; 2 no DICOM images found; 3 version reported; 5 input\n"
    "folder invalid; 6 output folder invalid; 7 output folder not writable; 8 some series\n"
    "converted, some not; 12 an invalid option or value.\n";

struct Options {
  int gz_level = 1;
  bool bids = true, nifti = true, anonymize = true, ignore_derived = false, single_file = false;
  bool flip = true, gzip = false, post_fixes = true, philips_precise = true;
  int depth = 5, verbose = 0, conflict = 2;
  std::string comment, format = kDcm2niixDefaultFormat, out_dir;
  bool comment_set = false;
  std::vector<double> series_numbers;
  bool list_series_only = false, search_only = false;
  std::vector<std::string> notes;  // options accepted without effect, for -v
  std::vector<std::string> warnings;  // options that would change what dcm2niix writes
  // Where each converted series' file name (without extension) is recorded (cmd_dcm2niix's
  // `written`), or null.
  std::vector<std::string>* written = nullptr;
};

bool no(const std::string& v) { return !v.empty() && (v[0] == 'n' || v[0] == 'N' || v[0] == '0'); }
bool yes_char(const std::string& v) { return !v.empty() && (v[0] == 'y' || v[0] == 'Y'); }

// dcm2niix's invalidParam: a value must start with one of these (or be empty).
bool valid_param(const std::string& v) {
  return v.empty() || std::strchr("yYnNoOhHiIjlLJBb01234", v[0]) != nullptr;
}

// Files under `folder` down to `depth` levels of subfolders (hidden folders skipped), in the
// order the folders list them, as dcm2niix lists them.
void collect_files(const fs::path& folder, int depth, std::vector<std::string>& files) {
  std::error_code ec;
  std::vector<fs::path> entries;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
    entries.push_back(it->path());
  for (const auto& p : entries) {
    std::error_code e2;
    if (fs::is_directory(p, e2)) {
      if (depth > 0 && p.filename().string().rfind('.', 0) != 0) collect_files(p, depth - 1, files);
    } else if (fs::is_regular_file(p, e2)) {
      files.push_back(p.string());
    }
  }
}

// dcm2niix's niiExists: an image of that name, whatever its extension.
bool image_exists(const std::string& base) {
  std::error_code ec;
  for (const char* ext : {".nii", ".nii.gz", ".nrrd", ".nhdr"})
    if (fs::exists(base + ext, ec)) return true;
  return false;
}

void remove_outputs(const std::string& base) {
  std::error_code ec;
  for (const char* ext : {".nii", ".nii.gz", ".json", ".bval", ".bvec"}) fs::remove(base + ext, ec);
}

// Writes `text` to `path` through a temporary name.
void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".voxpipe-tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error(ErrorCode::io, tmp, "", std::string("cannot create: ") + std::strerror(errno));
    f << text;
    f.flush();
    if (!f) throw Error(ErrorCode::io, tmp, "", std::string("cannot write: ") + std::strerror(errno));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error(ErrorCode::io, path, "", "cannot rename the temporary file into place");
  }
}

// ---- Overlays: dcm2niix writes each overlay plane (60xx,3000) of a series as NAME_ROI<n>.

// dcm2niix's overlay groups: the even groups 6000..601C (15 overlays).
constexpr int kOverlayGroups = 15;

std::uint16_t group_u16(const DicomDataset& ds, std::uint16_t group, std::uint16_t element,
                        std::size_t index = 0) {
  const DicomElement* e = ds.find(dicom_tag(group, element));
  if (!e || !e->value_read || e->value.size() < 2 * (index + 1)) return 0;
  const std::uint8_t* b = e->value.data() + 2 * index;
  return ds.big_endian() ? static_cast<std::uint16_t>(b[0] << 8 | b[1])
                         : static_cast<std::uint16_t>(b[1] << 8 | b[0]);
}

// Whether a dataset has OverlayData in one of dcm2niix's groups.
bool has_overlay(const DicomDataset& ds) {
  for (int n = 0; n < kOverlayGroups; ++n)
    if (ds.find(dicom_tag(static_cast<std::uint16_t>(0x6000 + 2 * n), 0x3000))) return true;
  return false;
}

// The overlay planes of one file, as dcm2niix takes them: for each group that holds
// OverlayData, its bytes (bit i of the value, least significant bit first, is pixel i of the
// frames in row-major order); none at all when any group states an OverlayOrigin other than
// (1, 1), OverlayBitsAllocated other than 1 or OverlayBitPosition other than 0, or rows and
// columns other than the image's (dcm2niix checks the last group's). 16-bit words of a
// big-endian file are put back in byte order.
std::vector<std::optional<std::vector<std::uint8_t>>> file_overlays(const DicomFile& f,
                                                                    std::uint32_t rows,
                                                                    std::uint32_t columns) {
  std::vector<std::optional<std::vector<std::uint8_t>>> planes(kOverlayGroups);
  const DicomDataset& ds = f.dataset;
  std::uint16_t last_rows = 0, last_columns = 0;
  for (int n = 0; n < kOverlayGroups; ++n) {
    const auto g = static_cast<std::uint16_t>(0x6000 + 2 * n);
    if (const DicomElement* o = ds.find(dicom_tag(g, 0x0050)); o && o->value_read && o->value.size() == 4)
      if (group_u16(ds, g, 0x0050, 0) != 1 || group_u16(ds, g, 0x0050, 1) != 1) return {};
    if (ds.find(dicom_tag(g, 0x0100)) && group_u16(ds, g, 0x0100) != 1) return {};
    if (ds.find(dicom_tag(g, 0x0102)) && group_u16(ds, g, 0x0102) != 0) return {};
    if (ds.find(dicom_tag(g, 0x0010))) last_rows = group_u16(ds, g, 0x0010);
    if (ds.find(dicom_tag(g, 0x0011))) last_columns = group_u16(ds, g, 0x0011);
    const DicomElement* data = ds.find(dicom_tag(g, 0x3000));
    if (!data || !data->value_read) continue;
    std::vector<std::uint8_t> bytes = data->value;
    if (ds.big_endian() && data->vr == DicomVR::OW)
      for (std::size_t i = 0; i + 1 < bytes.size(); i += 2) std::swap(bytes[i], bytes[i + 1]);
    planes[static_cast<std::size_t>(n)] = std::move(bytes);
  }
  if ((last_rows > 0 && last_rows != rows) || (last_columns > 0 && last_columns != columns)) return {};
  return planes;
}

// The file of `image` parsed again, with values up to `max_value` bytes read (the scan keeps
// only what decoding needs).
DicomFile reparse(const DicomSlice& image, std::uint64_t max_value) {
  DicomReadOptions options;
  options.max_value_size = std::max<std::uint64_t>(options.max_value_size, max_value);
  if (image.buffer) return parse_dicom(image.buffer->bytes, image.buffer->name, options);
  return read_dicom(image.file->path, options);
}

// Writes `base`_ROI<n> for each overlay n of series `s` (its images in the written order, rows
// as stored) as dcm2niix writes it: an 8-bit image of 0 and 1 on the image's grid, with the
// image's header `h` (its type uint8, unscaled), a plane per slice from the overlay of that
// slice's file (or frame: a multi-frame file's overlay covers its frames in turn), rows flipped
// as the image's. Series of one volume only: dcm2niix fills the ROI of a 4D series of several
// files with zeros. Returns what was left out, and why, for the warnings.
std::vector<std::string> write_overlays(const DicomSeries& s, const NiftiHeader& h,
                                        const std::string& base, const Options& opts,
                                        unsigned threads) {
  std::vector<std::string> notes;
  if (s.images.empty() || !s.first_file || !has_overlay(s.first_file->dataset)) return notes;
  if (s.volumes > 1 || s.images.size() != s.slices) {
    notes.push_back("the overlays (60xx,3000) of a 4D series are not written");
    return notes;
  }
  if (s.images.front().tile_grid > 0) {
    notes.push_back("the overlays (60xx,3000) of a mosaic are not written");
    return notes;
  }
  const std::uint64_t columns = s.columns, rows = s.rows, plane = columns * rows;
  std::uint64_t last_frame = 0;
  for (const auto& im : s.images) last_frame = std::max(last_frame, im.frame);
  const std::uint64_t needed_bytes = ((last_frame + 1) * plane + 7) / 8;
  // Each file's overlays, parsed once.
  std::map<const DicomFile*, std::vector<std::optional<std::vector<std::uint8_t>>>> by_file;
  for (const auto& im : s.images) {
    if (by_file.count(im.file.get())) continue;
    by_file[im.file.get()] = file_overlays(reparse(im, needed_bytes + 16), s.rows, s.columns);
  }
  std::vector<std::uint64_t> shape{columns, rows, s.slices};
  for (int n = 0; n < kOverlayGroups; ++n) {
    const auto at = static_cast<std::size_t>(n);
    bool any = false;
    for (const auto& [file, planes] : by_file) any |= planes.size() > at && planes[at].has_value();
    if (!any) continue;
    std::vector<std::uint8_t> data(plane * s.slices, 0);
    bool complete = true;
    for (std::size_t k = 0; k < s.images.size(); ++k) {
      const auto& planes = by_file[s.images[k].file.get()];
      if (planes.size() <= at || !planes[at]) continue;  // no overlay on this slice: zeros
      const std::vector<std::uint8_t>& bits = *planes[at];
      const std::uint64_t first = s.images[k].frame * plane;
      if ((first + plane + 7) / 8 > bits.size()) {
        complete = false;
        break;
      }
      for (std::uint64_t i = 0; i < plane; ++i)
        data[k * plane + i] = (bits[(first + i) >> 3] >> ((first + i) & 7)) & 1;
    }
    if (!complete) {
      notes.push_back("overlay " + std::to_string(n + 1) +
                      " (60xx,3000) holds fewer bits than the image: not written");
      continue;
    }
    if (opts.flip) flip_rows(data, shape, 1);
    NiftiHeader r = h;
    r.dim = {3, static_cast<std::int64_t>(columns), static_cast<std::int64_t>(rows),
             static_cast<std::int64_t>(s.slices), 1, 1, 1, 1};
    r.datatype = 2;  // uint8
    r.bitpix = 8;
    r.scl_slope = 1;
    r.scl_inter = 0;
    write_nifti(base + "_ROI" + std::to_string(n + 1) + (opts.gzip ? ".nii.gz" : ".nii"), r, {},
                producer_from_bytes(std::as_bytes(std::span(data))),
                WriteOptions{opts.gz_level, GzipLayout::members, threads});
  }
  return notes;
}

// dcm2niix's number for a series (-n, and the order in which it converts series): the CRC-32 of
// its SeriesInstanceUID (without one: its SeriesNumber, 1 when below 1), plus a tenth of its
// echo number from the second echo on.
std::uint32_t uid_crc(const DicomSeries& s) {
  if (s.series_instance_uid.empty()) {
    const std::int64_t n = stated_series_number(s);
    return static_cast<std::uint32_t>(n < 1 ? 1 : n);
  }
  return crc_of(s.series_instance_uid);
}

double series_crc_number(const DicomSeries& s) {
  const std::int64_t echo = echo_number(s);
  return uid_crc(s) + (echo > 1 ? static_cast<double>(echo) / 10.0 : 0.0);
}

// Whether dcm2niix's -i y leaves `s` out, and why.
std::string ignored_by_i(const DicomSeries& s) {
  const std::string type = image_type(s);
  const std::string sequence = value(s, 0x0018, 0x0024);
  if (type.find("DERIVED") != std::string::npos || type.find("_ADC_") != std::string::npos ||
      type.find("_TRACEW_") != std::string::npos || type.find("_TRACE_") != std::string::npos ||
      type.find("_FA_") != std::string::npos)
    return "derived image(s)";
  bool localizer = s.split.find("orientation ") != std::string::npos;
  if (vendor(s) == Vendor::siemens &&
      (value(s, 0x0008, 0x103E).find("AAHScout") != std::string::npos ||
       value(s, 0x0018, 0x1030).find("AAHScout") != std::string::npos ||
       sequence.find("fl2d1") != std::string::npos))
    localizer = true;
  for (const char* name : {"_tfl2d1", "_fl3d1_ns", "_fl2d1", "*tfl2d1", "*fl3d1_ns", "*fl2d1"})
    if (sequence == name) localizer = true;
  if (localizer) return "localizer (sequence '" + sequence + "')";
  if (s.slices < 2 && s.volumes < 2) return "2D image";
  return "";
}

int convert_scan(const DicomScanResult& scan, const std::vector<std::string>& paths,
                 const std::string& folder_text, const std::string& folder_name,
                 const std::string& out_dir, const Options& opts, std::ostream& out,
                 std::ostream& err);

// The objects under a prefix (or one object) named by a URL, fetched whole through the URL
// handlers as `voxpipe dcm2nii` fetches them, and converted as a folder of those files. The
// output folder must be named (-o): objects are not written to the store.
int convert_objects(const std::string& url, const Options& opts, std::ostream& out,
                    std::ostream& err) {
  std::string prefix = url;
  while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
  if (opts.out_dir.empty() || !fs::is_directory(opts.out_dir)) {
    err << "Error: Output folder invalid: " << (opts.out_dir.empty() ? "(none: -o is needed for "
                                                "an object store prefix)" : opts.out_dir) << "\n";
    return kExitOutputFolderInvalid;
  }
  if ((opts.bids || opts.nifti) && ::access(opts.out_dir.c_str(), W_OK) != 0) {
    err << "Error: Unable to write to output folder: " << opts.out_dir << "\n";
    return kExitOutputFolderReadOnly;
  }
  std::vector<DicomBuffer> buffers;
  try {
    buffers = fetch_dicom_objects({url});
  } catch (const Error& e) {
    err << "Error: Input folder invalid: " << e.what() << "\n";
    return kExitInputFolderInvalid;
  }
  std::vector<std::string> names;
  for (const auto& b : buffers) names.push_back(b.name);
  DicomScanOptions scan_options;
  scan_options.threads = resolve_threads(0);
  const DicomScanResult scan = buffers.empty() ? DicomScanResult{} : scan_dicom_buffers(buffers, scan_options);
  const auto slash = prefix.find_last_of('/');
  std::string out_dir = opts.out_dir;
  while (out_dir.size() > 1 && out_dir.back() == '/') out_dir.pop_back();
  return convert_scan(scan, names, prefix, prefix.substr(slash + 1), out_dir, opts, out, err);
}

// Converts the DICOM images of one input as dcm2niix's nii_loadDir does. Returns the exit code.
int convert_input(const std::string& input, Options opts, std::ostream& out, std::ostream& err) {
  std::error_code ec;
  if (is_object_url(input)) return convert_objects(input, opts, out, err);
  fs::path folder(input);
  const bool is_file = fs::exists(folder, ec) && !fs::is_directory(folder, ec);
  std::vector<std::string> paths;
  if (is_file) {
    if (opts.single_file) paths.push_back(input);
    folder = folder.parent_path();
    if (folder.empty()) folder = ".";
  }
  std::string folder_text = folder.string();
  while (folder_text.size() > 1 && folder_text.back() == '/') folder_text.pop_back();
  if (!fs::is_directory(folder_text, ec)) {
    err << "Error: Input folder invalid: " << folder_text << "\n";
    return kExitInputFolderInvalid;
  }
  std::string out_dir = opts.out_dir.empty() ? folder_text : opts.out_dir;
  while (out_dir.size() > 1 && out_dir.back() == '/') out_dir.pop_back();
  if (!fs::is_directory(out_dir, ec)) {
    err << "Error: Output folder invalid: " << out_dir << "\n";
    return kExitOutputFolderInvalid;
  }
  if ((opts.bids || opts.nifti) && ::access(out_dir.c_str(), W_OK) != 0) {
    err << "Error: Unable to write to output folder: " << out_dir << "\n";
    return kExitOutputFolderReadOnly;
  }
  const auto slash = folder_text.find_last_of('/');
  const std::string folder_name = slash == std::string::npos ? folder_text : folder_text.substr(slash + 1);

  if (paths.empty()) collect_files(folder_text, opts.depth, paths);
  DicomScanOptions scan_options;
  scan_options.threads = resolve_threads(0);
  scan_options.recursive = false;
  const DicomScanResult scan = paths.empty() ? DicomScanResult{} : scan_dicom_series(paths, scan_options);
  return convert_scan(scan, paths, folder_text, folder_name, out_dir, opts, out, err);
}

// Converts the series of one input's scan (`paths`: its files in the order listed, which orders
// series that share a UID), as dcm2niix does. Returns the exit code.
int convert_scan(const DicomScanResult& scan, const std::vector<std::string>& paths,
                 const std::string& folder_text, const std::string& folder_name,
                 const std::string& out_dir, const Options& opts, std::ostream& out,
                 std::ostream& err) {
  std::error_code ec;
  const unsigned threads = resolve_threads(0);
  std::set<std::string> dicom_files;
  for (const auto& s : scan.series)
    for (const auto& im : s.images) dicom_files.insert(im.file->path);
  if (opts.verbose)
    for (const auto& [path, why] : scan.skipped) out << "Not a DICOM image: " << path << " (" << why << ")\n";
  // DICOM images whose pixel data cannot be read (cut short, or a damaged encapsulation): the
  // scan skips them, but dcm2niix finds them and fails to convert them ("File not large enough
  // to store image data"): a failed series (exit 1 when nothing else converts), not "no DICOM
  // image" (exit 2). Files without pixel data, and those whose damage comes before it, are
  // not images to either program.
  std::vector<const std::pair<std::string, std::string>*> unreadable;
  for (const auto& skipped : scan.skipped)
    if (skipped.second.find("(7FE0,0010)") != std::string::npos) unreadable.push_back(&skipped);
  if (scan.series.empty() && unreadable.empty()) {
    err << "Error: Unable to find any DICOM images in " << folder_text << " (or subfolders "
        << opts.depth << " deep)\n";
    return kExitNoValidFiles;
  }
  out << "Found " << dicom_files.size() + unreadable.size() << " DICOM file(s)\n";
  if (opts.search_only) return 0;

  // dcm2niix converts series in the order of their SeriesInstanceUID's CRC, the parts of one
  // UID in the order of their first files: that order decides which of two series that share
  // a name gets the suffix.
  std::map<std::string, std::size_t> file_order;
  for (std::size_t i = 0; i < paths.size(); ++i) file_order.emplace(paths[i], i);
  const auto first_file = [&](const DicomSeries& s) {
    std::size_t first = paths.size();
    for (const auto& im : s.images) {
      const auto it = file_order.find(im.file->path);
      if (it != file_order.end()) first = std::min(first, it->second);
    }
    return first;
  };
  std::vector<const DicomSeries*> order;
  for (const auto& s : scan.series) order.push_back(&s);
  std::stable_sort(order.begin(), order.end(), [&](const DicomSeries* a, const DicomSeries* b) {
    const auto ka = std::make_pair(uid_crc(*a), first_file(*a));
    const auto kb = std::make_pair(uid_crc(*b), first_file(*b));
    return ka < kb;
  });
  std::size_t failed = 0, converted = 0;
  for (const auto* skipped : unreadable) {
    err << "Error: not converted: " << skipped->first << ": " << skipped->second << "\n";
    ++failed;
  }
  for (const DicomSeries* sp : order) {
    const DicomSeries& s0 = *sp;
    if (!opts.series_numbers.empty() &&
        std::none_of(opts.series_numbers.begin(), opts.series_numbers.end(),
                     [&](double n) { return std::fabs(n - series_crc_number(s0)) < 1e-4; })) {
      ++converted;  // dcm2niix counts a series left out by -n as done
      continue;
    }
    if (opts.ignore_derived) {
      const std::string why = ignored_by_i(s0);
      if (!why.empty()) {
        if (opts.verbose) out << "Ignoring " << why << " of series " << s0.series_number << "\n";
        ++converted;
        continue;
      }
    }
    if (!s0.problem.empty()) {
      err << "Error: not converted: " << series_name(s0) << ": " << s0.problem << "\n";
      ++failed;
      continue;
    }
    const bool flip = opts.flip && !rows_kept_by_dcm2niix(s0);
    const DicomSeries flipped = flip ? rows_flipped(s0) : DicomSeries{};
    const DicomSeries& s = flip ? flipped : s0;
    NameRules rules;
    rules.folder = folder_name;
    rules.post_fixes = opts.post_fixes;
    std::string name = *dcm2niix_name(opts.format, s, rules);
    // "-f dir/%p": folders of the name are made.
    const std::string base0 = out_dir + (name.front() == '/' ? "" : "/") + name;
    fs::create_directories(fs::path(base0).parent_path(), ec);
    if (opts.list_series_only) {  // -n -1: the numbers -n takes, and the names
      const std::int64_t echo = echo_number(s0);
      out << "\t" << uid_crc(s0);
      if (echo > 1) out << "." << echo;
      out << "\t" << base0 << "\n";
      ++converted;
      continue;
    }
    std::string base = base0;
    if (image_exists(base)) {
      if (opts.conflict == 0) {
        err << "Warning: Skipping existing file named " << base << "\n";
        ++failed;  // as dcm2niix: a failure of that series
        continue;
      }
      if (opts.conflict == 1) {
        err << "Warning: Overwriting existing file with the name " << base << "\n";
        remove_outputs(base);
      } else {
        int i = 0;
        while (image_exists(base) && i < 26) base = base0 + static_cast<char>('a' + i++);
        if (image_exists(base)) {
          err << "Error: Too many NIFTI images with the name " << base0 << "\n";
          ++failed;
          continue;
        }
      }
    }
    const SeriesPlan plan = series_plan(s, std::nullopt, opts.philips_precise);
    std::vector<std::string> warnings = s.warnings;
    SeriesFrame frame;
    frame.rows_flipped = flip;
    NiftiHeader h = series_header(s, plan, warnings, frame);
    if (opts.comment_set) {
      h.aux_file.fill('\0');
      std::memcpy(h.aux_file.data(), opts.comment.data(), std::min<std::size_t>(opts.comment.size(), 23));
    }
    std::vector<std::string> overlay_notes;
    try {
      if (opts.nifti) {
        std::uint64_t voxels = 1;
        for (auto d : s.shape()) voxels *= d;
        std::vector<std::uint8_t> data(voxels * dtype_size(plan.dtype));
        for (std::string& w : read_series_values(s, plan, data, threads))
          warnings.push_back(std::move(w));
        if (flip) flip_rows(data, s.shape(), dtype_size(plan.dtype));
        write_nifti(base + (opts.gzip ? ".nii.gz" : ".nii"), h, {},
                    producer_from_bytes(std::as_bytes(std::span(data))),
                    WriteOptions{opts.gz_level, GzipLayout::members, threads});
        // Diffusion series: the gradient table in the written image's voxel frame.
        write_gradient_files(s, s.affine, base);
        if (flip == opts.flip) {
          overlay_notes = write_overlays(s, h, base, opts, threads);
        } else {
          Options kept = opts;
          kept.flip = flip;
          overlay_notes = write_overlays(s, h, base, kept, threads);
        }
      }
      if (opts.bids) write_text_file(base + ".json", series_sidecar(s, plan, warnings, frame));
    } catch (const Error& e) {
      err << "Error: not converted: " << series_name(s0) << ": " << e.what() << "\n";
      ++failed;
      continue;
    }
    auto shape = s.shape();
    while (shape.size() < 4) shape.push_back(1);
    std::set<std::string> files;
    for (const auto& im : s.images) files.insert(im.file->path);
    ++converted;
    if (opts.written) opts.written->push_back(base);
    out << "Convert " << files.size() << " DICOM as " << base << " (" << shape_text(shape) << ")\n";
    if (opts.verbose) {
      for (const auto& w : warnings) out << "Warning: " << w << "\n";
      for (const auto& w : overlay_notes) out << "Note: " << w << "\n";
    }
  }
  if (failed) {
    // dcm2niix: EXIT_FAILURE when nothing was converted, else some converted, some not.
    if (converted == 0) return 1;
    err << "Error: Converted " << converted << " of " << scan.series.size() + unreadable.size()
        << " series\n";
    return kExitSomeOkSomeBad;
  }
  return 0;
}

// The first line after the shebang of every shim make_shim writes: how it recognises its own.
constexpr std::string_view kShimMark = "# voxpipe dcm2niix shim";

// The program that runs this voxpipe again: $VOXPIPE_SELF (the pip launcher and `python -m
// voxpipe` set it, cli/python_launcher.py), else this process's executable when it is a voxpipe
// program (a C++ build of the command); empty when neither names one (a Python that embeds
// the core without the launcher).
std::string self_command() {
  if (const char* env = std::getenv("VOXPIPE_SELF"); env && *env) return fs::absolute(env).string();
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && exe.filename().string().rfind("voxpipe", 0) == 0) return exe.string();
  return {};
}

// `voxpipe dcm2niix --make-shim DIR`: writes DIR/dcm2niix, a script that runs this voxpipe's
// dcm2niix command with its arguments, for wrappers that find dcm2niix on PATH (heudiconv,
// dcm2bids): put DIR first on PATH to use it. A dcm2niix in DIR that is not such a shim (the
// real program) is never replaced; the script appears whole (written beside it, then renamed).
int make_shim(const std::string& dir, std::ostream& out, std::ostream& err) {
  const std::string self = self_command();
  if (self.empty()) {
    err << "voxpipe dcm2niix --make-shim: cannot tell which program runs voxpipe (set "
           "VOXPIPE_SELF, or run the voxpipe command)\n";
    return 1;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path target = fs::path(dir) / "dcm2niix";
  if (fs::exists(fs::symlink_status(target, ec))) {
    std::ifstream in(target);
    std::string first, second;
    std::getline(in, first);
    std::getline(in, second);
    if (second.rfind(kShimMark, 0) != 0) {
      err << "voxpipe dcm2niix --make-shim: " << target.string()
          << " exists and is not a voxpipe shim: left as it is\n";
      return 1;
    }
  }
  std::string quoted = "'";
  for (char c : self) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  const std::string text = "#!/bin/sh\n" + std::string(kShimMark) +
                           ": runs voxpipe's dcm2niix-compatible command in place of dcm2niix.\n"
                           "# Made by `voxpipe dcm2niix --make-shim`; remove it to run dcm2niix "
                           "again.\nexec " + quoted + " dcm2niix \"$@\"\n";
  const fs::path tmp = fs::path(dir) / (".dcm2niix.voxpipe-" + std::to_string(::getpid()));
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    if (!f.flush()) {
      err << "voxpipe dcm2niix --make-shim: cannot write " << tmp.string() << "\n";
      fs::remove(tmp, ec);
      return 1;
    }
  }
  fs::permissions(tmp, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec, ec);
  fs::rename(tmp, target, ec);
  if (ec) {
    err << "voxpipe dcm2niix --make-shim: cannot create " << target.string() << ": "
        << ec.message() << "\n";
    fs::remove(tmp, ec);
    return 1;
  }
  out << target.string() << "\n";
  return 0;
}

}  // namespace

int cmd_dcm2niix(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                 std::vector<std::string>* written) {
  // voxpipe's own option, alone: the shim for wrappers (make_shim).
  if (!args.empty() && args[0] == "--make-shim") {
    if (args.size() != 2) {
      err << "usage: voxpipe dcm2niix --make-shim DIR\n";
      return kExitInvalidParam;
    }
    return make_shim(args[1], out, err);
  }
  out << "voxpipe dcm2niix (voxpipe " << version() << "), the command line of dcm2niix version "
      << kDcm2niixVersion << "\n";
  if (args.empty()) {
    out << kDcm2niixUsage;
    return 0;
  }
  Options opts;
  opts.written = written;
  std::size_t last_option = 0;  // 1 + the index of the last argument an option took
  std::vector<std::size_t> strays;  // arguments that are neither options nor their values
  const auto invalid = [&](const std::string& option, const std::string& v) {
    err << " Error: invalid option '" << option << " " << v << "'\n";
    return kExitInvalidParam;
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 2 || a[0] != '-') {  // an input, or (before an option) ignored
      strays.push_back(i);
      continue;
    }
    const bool has_next = i + 1 < args.size();
    const std::string next = has_next ? args[i + 1] : "";
    const char c = a[1];
    // Long options first.
    if (a == "--version") {
      out << kDcm2niixVersion << "\n";
      return kExitReportVersion;
    }
    if (a == "--ignore_trigger_times") {
      opts.notes.push_back("--ignore_trigger_times: voxpipe does not split series by trigger time");
    } else if (a == "--terse") {
      opts.post_fixes = false;
    } else if (a == "--xml") {
      out << "--xml: Slicer's description of dcm2niix is not provided by voxpipe\n";
      return 0;
    } else if (a == "--big-endian" || a == "--progress" || a == "--diffCyclingModeGE") {
      if (!has_next) return invalid(a, "");
      ++i;
      if (a == "--big-endian" && yes_char(next))
        opts.warnings.push_back("--big-endian y: the images are written little-endian");
      else
        opts.notes.push_back(a + " " + next + ": no effect on voxpipe's output");
    } else if (c == '-') {
      return invalid(a, next);
    } else if (c == 'h') {
      out << kDcm2niixUsage;
      return 0;
    } else if (c >= '1' && c <= '9') {
      opts.gz_level = std::min(9, std::abs(static_cast<int>(std::strtol(a.c_str(), nullptr, 10))));
    } else if (c == 'u') {
      err << "Error: -u (checking for a newer dcm2niix) is not available in voxpipe dcm2niix\n";
      return kExitReportVersion;
    } else if (c == 'v' && !has_next) {
      out << kDcm2niixVersion << "\n";
      return kExitReportVersion;
    } else if (!has_next) {
      return invalid(a, "");
    } else if (c == 'b' && a.size() >= 3 && a[2] != 'a' && a[2] != 'i' && a[2] != 'v' && a[2] != 'r') {
      err << "Error: Unknown command line argument: '" << a << "'\n";
    } else {
      ++i;
      const std::string& v = args[i];
      // The options whose values dcm2niix checks.
      if (std::strchr("abegijlmpqrstvwxyz", c) && !(c == 'b' && a.size() >= 3 && a[2] != 'a') &&
          !valid_param(v))
        return invalid(a, v);
      switch (c) {
        case 'a': opts.notes.push_back("-a: no effect on voxpipe's output"); break;
        case 'b':
          if (a.size() >= 3 && a[2] == 'a') {
            opts.anonymize = !no(v);
            if (!opts.anonymize) opts.notes.push_back("-ba n: the sidecar is series_nifti's (no identifying keys added)");
          } else if (a.size() >= 3) {
            opts.notes.push_back(a + ": no effect on voxpipe's output");
          } else if (no(v)) {
            opts.bids = false;
          } else if (v[0] == 'i' || v[0] == 'I') {
            opts.bids = false;
            opts.nifti = false;
          } else {
            opts.bids = true;
            if (v[0] == 'o' || v[0] == 'O') opts.nifti = false;
          }
          break;
        case 'c':
          opts.comment = v;
          opts.comment_set = true;
          break;
        case 'd':
          if (!v.empty() && v[0] >= '0' && v[0] <= '9')
            opts.depth = std::abs(static_cast<int>(std::strtol(v.c_str(), nullptr, 10)));
          break;
        case 'e':
          if (!no(v)) {
            err << " Error: -e " << v << ": voxpipe dcm2niix writes NIfTI only\n";
            return kExitInvalidParam;
          }
          break;
        case 'f': opts.format = v; break;
        case 'g': opts.notes.push_back("-g " + v + ": voxpipe dcm2niix reads and writes no defaults file"); break;
        case 'i': opts.ignore_derived = !no(v); break;
        case 'j': opts.notes.push_back("-j: no effect on voxpipe's output"); break;
        case 'l':
          if (v[0] == 'y' || v[0] == 'Y' || v[0] == '1')
            opts.warnings.push_back("-l y: 16-bit values are written as stored, not stretched");
          else
            opts.notes.push_back("-l " + v + ": 16-bit values are written as stored");
          break;
        case 'm':
          if (v[0] == 'y' || v[0] == 'Y' || v[0] == '1')
            opts.warnings.push_back("-m y: series are split by echo and image type as with -m n");
          else
            opts.notes.push_back("-m " + v + ": series are split by echo, image type, orientation and size");
          break;
        case 'n': {  // the number -n -1 lists: the CRC-32 of the SeriesInstanceUID
          const double n = std::atof(v.c_str());
          if (n < 0)
            opts.list_series_only = true;
          else if (opts.series_numbers.size() < 16)
            opts.series_numbers.push_back(n);
          else
            out << "Warning: too many series specified, ignoring -n " << v << "\n";
          break;
        }
        case 'o': opts.out_dir = v; break;
        case 'p': opts.philips_precise = !no(v); break;
        case 'q':
          if (v[0] == 'y' || v[0] == 'Y' || v[0] == 'l' || v[0] == 'L') opts.search_only = true;
          break;
        case 'r':
          if (yes_char(v)) {
            err << " Error: -r y: voxpipe dcm2niix does not rename DICOM files\n";
            return kExitInvalidParam;
          }
          break;
        case 's': opts.single_file = !no(v); break;
        case 't': opts.notes.push_back("-t: no text notes are written"); break;
        case 'v':
          opts.verbose = no(v) ? 0 : (v[0] == 'h' || v[0] == 'H' || v[0] == '2') ? 2 : 1;
          break;
        case 'w':
          if (v[0] >= '0' && v[0] <= '2') opts.conflict = v[0] - '0';
          break;
        case 'x':
          if (!no(v) && v[0] != 'i' && v[0] != 'I')
            opts.warnings.push_back("-x " + v + ": cropping is not implemented: images are written uncropped");
          break;
        case 'y':
          if (yes_char(v)) opts.flip = true;
          if (no(v)) opts.flip = false;
          break;
        case 'z':
          if (v[0] == '3') {
            opts.gzip = false;
            opts.warnings.push_back("-z 3: 4D series are written as one 4D file, uncompressed");
          } else {
            opts.gzip = !no(v);
          }
          break;
        default:
          return invalid(a, v);
      }
    }
    last_option = i + 1;
  }
  std::vector<std::string> inputs(args.begin() + static_cast<std::ptrdiff_t>(last_option), args.end());
  for (std::size_t i : strays)
    if (i < last_option)
      err << "Warning: '" << args[i] << "' before the last option is not an input (inputs come last)\n";
  for (const auto& w : opts.warnings) err << "Warning: " << w << "\n";
  if (opts.verbose)
    for (const auto& n : opts.notes) out << "Note: " << n << "\n";
  if (inputs.empty()) {
    out << "No input folder (usage: voxpipe dcm2niix [options] <in_folder>); file names: -f "
        << opts.format << "\n";
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& input : inputs) {
    const int code = convert_input(input, opts, out, err);
    if (code != 0) return code;
  }
  out << "Conversion required "
      << fixed(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 6)
      << " seconds.\n";
  return 0;
}

}  // namespace voxpipe::cli
