// voxpipe dcm2niix: dcm2niix's command line over voxpipe's DICOM series, so that wrappers that
// run the dcm2niix program (heudiconv through nipype's Dcm2niix interface, dcm2bids) can run
// this one in its place: its options (the same letters and values, the same refusals), its file
// names (-f tokens, suffixes, name conflicts as -w says), its row order (rows flipped, -y), its
// standard output ("Convert N DICOM as PATH (AxBxCxD)", which nipype parses) and its exit codes
// (nii_dicom.h: 2 no DICOM found, 3 version, 5 input folder invalid, 6 output folder invalid, 7
// output folder read-only, 8 some series failed, 12 invalid option). The images and sidecars
// are dcm2nii's (series_nifti.cpp). Options that would change what is written but that voxpipe
// does not implement are refused (-e, -r) or named on stderr (-x y, -z 3, -m y, -l y);
// those that change nothing written here are accepted and, with -v, named. This file: the
// options, the usage and --make-shim; the conversion, names, series values and overlays are in
// dcm2niix_*.cpp (dcm2niix_internal.hpp).
#include "dcm2niix.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "cli_common.hpp"
#include "commands.hpp"
#include "dcm2niix_internal.hpp"

namespace voxpipe::cli {

namespace fs = std::filesystem;

namespace {

using dcm2niix::convert_input;
using dcm2niix::kExitInvalidParam;
using dcm2niix::kExitReportVersion;
using dcm2niix::Options;

// The dcm2niix release whose command line this one follows.
constexpr const char* kDcm2niixVersion = "v1.0.20260724";
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
bool no(const std::string& v) { return !v.empty() && (v[0] == 'n' || v[0] == 'N' || v[0] == '0'); }
bool yes_char(const std::string& v) { return !v.empty() && (v[0] == 'y' || v[0] == 'Y'); }

// dcm2niix's invalidParam: a value must start with one of these (or be empty).
bool valid_param(const std::string& v) {
  return v.empty() || std::strchr("yYnNoOhHiIjlLJBb01234", v[0]) != nullptr;
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
  // Written under a new name (created exclusively, never through a link someone left there),
  // executable before it is renamed into place.
  const fs::path tmp = fs::path(dir) / (".dcm2niix.voxpipe-" + std::to_string(::getpid()));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0755);
  bool written = fd >= 0;
  for (std::size_t at = 0; written && at < text.size();) {
    const ssize_t n = ::write(fd, text.data() + at, text.size() - at);
    if (n < 0 && errno == EINTR) continue;
    written = n > 0;
    at += written ? static_cast<std::size_t>(n) : 0;
  }
  written = (fd >= 0 && ::close(fd) == 0) && written;
  if (!written) {
    err << "voxpipe dcm2niix --make-shim: cannot write " << tmp.string() << ": "
        << std::strerror(errno) << "\n";
    if (fd >= 0) fs::remove(tmp, ec);
    return 1;
  }
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
          opts.rotate_3d = v[0] != 'i' && v[0] != 'I';
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
