// voxpipe dcm2nii: DICOM series to NIfTI-1 files with BIDS-style JSON sidecars, as dcm2niix
// does. Series come from scan_dicom_series; each is read whole (read_dicom_series, in parallel)
// and written with write_nifti (the parallel gzip writer by default). Differences from dcm2niix,
// on purpose: no row flip (voxel axes and affine as DicomSeries defines them; the world space is
// the same), data in the stored type with the shared rescale in scl_slope/scl_inter, and a
// series that cannot be assembled (a missing slice) is skipped, not written with a gap. The
// header and the sidecar of each image are series_nifti.cpp's.
#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "commands.hpp"
#include "dcm2niix.hpp"
#include "progress.hpp"
#include "series_nifti.hpp"
#include "voxpipe/dicom.hpp"
#include "voxpipe/dicom_series.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/remote.hpp"
#include "voxpipe/threads.hpp"

namespace voxpipe::cli {

// The objects the URLs name (an object, or those under a prefix), fetched whole through the URL
// handlers (voxpipe's Python package), as buffers to scan.
std::vector<DicomBuffer> fetch_dicom_objects(const std::vector<std::string>& urls) {
  const UrlHandlers& handlers = url_handlers();
  if (!handlers.fetch_all)
    throw Error(ErrorCode::unsupported, urls.front(), "",
                "objects named by URLs are read through voxpipe's Python package "
                "(pip install 'voxpipe[s3]'; from the shell: python -m voxpipe ...)");
  std::vector<DicomBuffer> buffers;
  for (const std::string& url : urls)
    for (auto& [name, fetched] : handlers.fetch_all(url))
      buffers.push_back({name,
                         std::span(reinterpret_cast<const std::uint8_t*>(fetched.bytes.data()),
                                   fetched.bytes.size()),
                         std::move(fetched.owner)});
  return buffers;
}

namespace {

namespace fs = std::filesystem;

const char* kDcm2niiUsage =
    "usage: voxpipe dcm2nii INPUT... -o OUT_DIR [options]\n"
    "       voxpipe dcm2nii INPUT... NEW_OUT_DIR [options]\n"
    "\n"
    "Finds the DICOM series in the INPUT files and folders (subfolders too) and writes each as\n"
    "one NIfTI-1 file (3D, or 4D for repeated positions) with a JSON sidecar of the same name,\n"
    "as dcm2niix does. OUT_DIR is created when missing. Without -o, the last argument is OUT_DIR\n"
    "only when it does not exist yet; an existing one is refused (is it an input?): use -o.\n"
    "\n"
    "  -o OUT_DIR        where the files go; a URL prefix (s3://bucket/nifti/): each series\n"
    "                    written locally, then uploaded, each object visible once complete\n"
    "  -f FORMAT         file names with dcm2niix's tokens (%s series number, %d series\n"
    "                    description, %p protocol name, %i patient ID, %e echo, %t date and\n"
    "                    time, ...: voxpipe dcm2niix -h; %% a percent sign; default %s_%d);\n"
    "                    dcm2niix's suffixes (_e2, _ph, _real, _imaginary, _i00001) and the\n"
    "                    series' other splits are appended; characters other than A-Z a-z 0-9\n"
    "                    _ - in the values become _; a name two series share gets _a, _b, ...\n"
    "  -z y|n            gzip the images (.nii.gz, default) or not (.nii)\n"
    "  --uncompressed    as -z n\n"
    "  --float32         write float32 with each image's rescale applied; by default the stored\n"
    "                    type is written with the rescale in scl_slope/scl_inter when every image\n"
    "                    shares it, float32 otherwise\n"
    "  --overwrite, --force\n"
    "                    replace existing files (by default a series whose file exists is\n"
    "                    skipped and reported)\n"
    "  --threads N       threads for parsing, decoding and compressing; 0 (default):\n"
    "                    $VOXPIPE_NUM_THREADS, else $OMP_NUM_THREADS, else the CPUs this\n"
    "                    process may run on\n"
    "  --on-corrupt raise|warn\n"
    "                    a compressed image its decoder reports damaged (\"Corrupt JPEG data\")\n"
    "                    skips the series (raise, default) or is written as the decoder recovers\n"
    "                    it, with a warning (warn)\n"
    "  -v, --verbose     list the files that are not DICOM images\n"
    "  --progress M      auto (default), bar, log or none: the progress report on stderr (images\n"
    "                    done, rate, ETA; docs/cli.md \"Progress\")\n"
    "\n"
    "Exit status: 0 when every series was written; 11 when some series were skipped (they are\n"
    "named on stderr with the reason, e.g. a missing slice or an existing file); 3 for a missing\n"
    "INPUT; 4 when OUT_DIR cannot be created or written; 5 when no DICOM image was found\n"
    "(docs/exit_codes.md).\n";

// ---- numbers and names

// The file name (without extension) FORMAT gives for a series: dcm2niix's tokens and suffixes
// (_e2, _ph, ...) with dcm2nii's character rule, the series' other splits appended
// (dcm2niix.hpp); nullopt and `bad` set for an unknown % code.
std::optional<std::string> expand_name(const std::string& format, const DicomSeries& s,
                                       std::string* bad) {
  NameRules rules;
  rules.dcm2niix_characters = false;
  return dcm2niix_name(format, s, rules, bad);
}

// The series as run() names the ones it skips: its name and its UID.
std::string series_label(const DicomSeries& s) { return series_name(s) + " [" + s.series_instance_uid + "]"; }

}  // namespace

int cmd_dcm2nii(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                bool err_is_terminal) {
  std::vector<std::string> inputs;
  std::optional<std::string> out_dir;
  std::string format = "%s_%d";
  bool gzip = true, force_float = false, overwrite = false, verbose = false;
  unsigned threads = 0;
  DicomOnCorrupt on_corrupt = DicomOnCorrupt::raise;
  ProgressMode progress_mode = ProgressMode::automatic;
  OptionParser parser("voxpipe dcm2nii", kDcm2niiUsage, out, err);
  parser.progress(progress_mode)
      .value("-o", out_dir)
      .value("-f", format)
      .value("-z",
             [&gzip](const std::string& v) {
               if (v != "y" && v != "n" && v != "i" && v != "o") return expects("-z", "y or n", v);
               gzip = v != "n";
               return std::string();
             })
      .value("--on-corrupt",
             [&on_corrupt](const std::string& v) {
               if (v != "raise" && v != "warn") return expects("--on-corrupt", "raise or warn", v);
               on_corrupt = v == "warn" ? DicomOnCorrupt::warn : DicomOnCorrupt::raise;
               return std::string();
             })
      .integer("--threads", 0, 1024, threads)
      .flag("--uncompressed", [&gzip] { gzip = false; })
      .flag("--float32", force_float)
      .overwrite(overwrite)
      .flag({"-v", "--verbose"}, verbose)
      .positionals(inputs)
      .usage_after_missing_value()
      .lone_dash_is_positional();
  if (const auto code = parser.parse(args)) return *code;
  // The old form INPUT OUT_DIR, without -o: the last positional is OUT_DIR only when it does not
  // exist, so that it cannot be an input; an existing one is ambiguous (`voxpipe dcm2nii A B`
  // would write into the DICOM folder B and never convert it) and refused.
  if (!out_dir && inputs.size() >= 2 && !is_object_url(inputs.back())) {
    std::error_code ec;
    if (fs::exists(inputs.back(), ec))
      return parser.usage_error(
          inputs.back() + " exists: name the output folder with -o (voxpipe dcm2nii INPUT... -o OUT_DIR); "
          "every other argument is an input");
    out_dir = inputs.back();
    inputs.pop_back();
  }
  if (inputs.empty() || !out_dir) return parser.usage_error("expected INPUT... and -o OUT_DIR");
  {
    DicomSeries probe;
    std::string bad;
    if (!expand_name(format, probe, &bad)) return parser.error(expects("-f", "a dcm2niix token (%s, %d, %p, %e, %t, ...; voxpipe dcm2niix -h)", bad));
  }
  const auto t0 = std::chrono::steady_clock::now();
  // Inputs are files and folders, or objects and prefixes named by URLs (not both).
  const bool urls = is_object_url(inputs.front());
  for (const auto& p : inputs) {
    if (is_object_url(p) != urls)
      throw Error(ErrorCode::invalid_argument, p, "",
                  "expected inputs that are all URLs or all paths, not both");
    std::error_code ec;
    if (!urls && !fs::exists(p, ec)) throw Error(ErrorCode::not_found, p, "", "no such file or folder");
  }
  // An OUT_DIR named by a URL: each series written into a local folder, then uploaded.
  std::optional<StagedUpload> staged;
  if (is_object_url(*out_dir)) {
    staged.emplace(*out_dir);
  } else {
    std::error_code ec;
    fs::create_directories(*out_dir, ec);
    if (ec || !fs::is_directory(*out_dir))
      throw Error(ErrorCode::io, *out_dir, "", "cannot create the output folder" +
                                                    (ec ? ": " + ec.message() : std::string()));
  }

  Progress progress(err, progress_mode, err_is_terminal, 1, "voxpipe dcm2nii", "images");
  progress.phase("scanning");
  threads = resolve_threads(threads);  // one count for the scan and every series' read and write
  DicomScanOptions scan_options;
  scan_options.threads = threads;
  const DicomScanResult scan =
      urls ? scan_dicom_buffers(fetch_dicom_objects(inputs), scan_options) : scan_dicom_series(inputs, scan_options);
  if (scan.series.empty()) {
    progress.finish();
    if (verbose)
      for (const auto& [path, why] : scan.skipped)
        err << "voxpipe dcm2nii: skipped file " << path << ": " << why << "\n";
    throw Error(ErrorCode::format, inputs.front(), "",
                "no DICOM images found (" + std::to_string(scan.skipped.size()) +
                    " files that are not DICOM images)");
  }
  std::uint64_t total_images = 0;
  for (const auto& s : scan.series) total_images += s.images.size();
  progress.expect(total_images);

  const std::string ext = gzip ? ".nii.gz" : ".nii";
  std::set<std::string> taken;  // base names given out in this run
  std::size_t written = 0, skipped_series = 0;
  std::set<std::string> files_read;
  std::uint64_t bytes_read = 0, bytes_written = 0;
  for (std::size_t n = 0; n < scan.series.size(); ++n) {
    const DicomSeries& s = scan.series[n];
    progress.phase("series " + std::to_string(n + 1) + "/" + std::to_string(scan.series.size()));
    const auto skip = [&](const std::string& why) {
      progress.finish();
      err << "voxpipe dcm2nii: skipped " << series_label(s) << ": " << why << "\n";
      ++skipped_series;
      progress.tick(s.images.size());
    };
    if (!s.problem.empty()) {
      skip(s.problem);
      continue;
    }
    std::string bad;
    std::string base = *expand_name(format, s, &bad);
    if (taken.count(base)) {
      std::string candidate;
      for (int k = 0; k < 26 * 27 && (candidate.empty() || taken.count(candidate)); ++k) {
        std::string suffix(1, static_cast<char>('a' + k % 26));
        if (k >= 26) suffix.insert(suffix.begin(), static_cast<char>('a' + k / 26 - 1));
        candidate = base + "_" + suffix;
      }
      base = candidate;
    }
    taken.insert(base);
    const std::string dir = *out_dir + (out_dir->ends_with('/') ? "" : "/");
    const std::string nii_path = staged ? dir + base + ext : (fs::path(*out_dir) / (base + ext)).string();
    const std::string json_path = staged ? dir + base + ".json" : (fs::path(*out_dir) / (base + ".json")).string();
    // Where they are written: themselves, or the staged files that go up to them.
    const std::string nii_file = staged ? staged->local(base + ext) : nii_path;
    const std::string json_file = staged ? staged->local(base + ".json") : json_path;
    try {
      check_nifti_overwrite(nii_path, overwrite);
      check_overwrite(json_path, overwrite);
    } catch (const OutputExists& e) {
      skip(e.what());  // the others are still written (exit 11)
      continue;
    }

    const SeriesPlan plan = series_plan(s, force_float ? std::optional(DType::f32) : std::nullopt);
    std::vector<std::string> warnings = s.warnings;
    const NiftiHeader h = series_header(s, plan, warnings);
    std::uint64_t voxels = 1;
    for (auto d : s.shape()) voxels *= d;
    std::vector<std::uint8_t> data(voxels * dtype_size(plan.dtype));
    try {
      for (std::string& w : read_series_values(s, plan, data, threads, on_corrupt))
        warnings.push_back(std::move(w));
    } catch (const Error& e) {
      skip(std::string("error (") + error_code_name(e.code()) + "): " + e.what());
      continue;
    }
    // A write failure (a full disk, a folder made read-only) ends the run with its error.
    write_nifti(nii_file, h, {}, producer_from_bytes(std::as_bytes(std::span(data))),
                WriteOptions{1, GzipLayout::members, threads});
    write_text_file(json_file, series_sidecar(s, plan, warnings));
    // Diffusion series: the gradient table beside the image, as dcm2niix writes it.
    write_gradient_files(s, s.affine, staged ? staged->local(base) : (fs::path(*out_dir) / base).string());
    std::error_code ec;
    const auto nii_size = fs::file_size(nii_file, ec);
    if (!ec) bytes_written += nii_size;
    if (staged) staged->upload(overwrite);
    ++written;
    for (const auto& im : s.images) {
      if (files_read.insert(im.file->path).second) {
        const auto size = fs::file_size(im.file->path, ec);
        if (!ec) bytes_read += size;
      }
    }
    progress.finish();
    std::string what = shape_text(s.shape()) + " " + std::string(dtype_name(plan.dtype));
    if (plan.scaled && (plan.slope != 1 || plan.inter != 0))
      what += ", scl_slope " + shortest(plan.slope) + ", scl_inter " + shortest(plan.inter);
    else if (plan.dtype == DType::f32 && s.stored_dtype != DType::f32)
      what += s.uniform_rescale ? ", rescaled" : ", rescaled per image (the rescale varies)";
    out << "wrote " << nii_path << " (" << what << ")\n";
    for (const auto& w : warnings) out << "  warning: " << w << "\n";
    progress.tick(s.images.size());
  }
  progress.end();
  if (verbose)
    for (const auto& [path, why] : scan.skipped)
      err << "voxpipe dcm2nii: skipped file " << path << ": " << why << "\n";
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out << "voxpipe dcm2nii: " << written << " of " << scan.series.size() << " series written";
  if (skipped_series) out << " (" << skipped_series << " skipped)";
  out << ", " << files_read.size() << " files read (" << fixed(bytes_read / 1e6, 1) << " MB), "
      << fixed(bytes_written / 1e6, 1) << " MB written";
  if (!scan.skipped.empty())
    out << ", " << scan.skipped.size() << " files not DICOM images"
        << (verbose ? "" : " (-v lists them)");
  out << ", " << fixed(elapsed, 2) << " s\n";
  return skipped_series ? kPartial : 0;
}

}  // namespace voxpipe::cli
