// The conversion of one input of `voxpipe dcm2niix` as dcm2niix's nii_loadDir does it: the files
// of a folder (or the objects under a URL prefix) scanned, the series converted in dcm2niix's
// order, each named by -f with name conflicts as -w says, its rows flipped as dcm2niix flips
// them (a 3D acquisition turned to its nearest orthogonal axes), its image, gradient files,
// overlays and sidecar written, and its "Convert N DICOM as PATH (AxBxCxD)" line printed; the
// exit code dcm2niix gives.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "dcm2niix.hpp"
#include "dcm2niix_internal.hpp"
#include "series_nifti.hpp"
#include "voxpipe/dicom.hpp"
#include "voxpipe/dicom_series.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/remote.hpp"
#include "voxpipe/threads.hpp"

namespace voxpipe::cli::dcm2niix {

namespace fs = std::filesystem;

namespace {

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

}  // namespace

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

namespace {

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
    // A 3D acquisition is turned to the orthogonal axes nearest RAS (unless -x i), as dcm2niix
    // turns it after its rows are read (in either order: the turned image is the same); colour
    // images and images in no patient frame are neither turned nor flipped.
    const bool reorient = opts.rotate_3d && reoriented_by_dcm2niix(s0);
    const bool kept = reorient && rows_kept_by_dcm2niix(s0);
    const bool flip = opts.flip && !kept;
    const DicomSeries flipped = flip ? rows_flipped(s0) : DicomSeries{};
    const DicomSeries& s = flip ? flipped : s0;
    const Reorientation turn = reorient && !kept ? nearest_orthogonal(s) : Reorientation{};
    // The written grid: the header's dims, pixdim and affine, and the gradient table's frame.
    // The sidecar and dim_info stay those of the acquired grid, as dcm2niix leaves them.
    const DicomSeries turned = turn.identity ? DicomSeries{} : reoriented(s, turn);
    const DicomSeries& grid = turn.identity ? s : turned;
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
    if (!turn.identity) frame.written_shape = grid.shape();  // the sidecar's Dimensions
    NiftiHeader h = series_header(grid, plan, warnings, frame);
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
        if (!turn.identity) data = reoriented_data(data, s.shape(), dtype_size(plan.dtype), turn);
        write_nifti(base + (opts.gzip ? ".nii.gz" : ".nii"), h, {},
                    producer_from_bytes(std::as_bytes(std::span(data))),
                    WriteOptions{opts.gz_level, GzipLayout::members, threads});
        // Diffusion series: the gradient table in the written image's voxel frame.
        write_gradient_files(s, grid.affine, base);
        if (flip == opts.flip) {
          overlay_notes = write_overlays(s, h, base, opts, threads, turn);
        } else {
          Options rows_kept = opts;
          rows_kept.flip = flip;
          overlay_notes = write_overlays(s, h, base, rows_kept, threads, turn);
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

}  // namespace

}  // namespace voxpipe::cli::dcm2niix
