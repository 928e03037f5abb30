// voxpipe view: a PNG of a NIfTI image or a DICOM series (three orthogonal slices, or an axial
// mosaic), drawn by render_view (voxpipe/view.hpp), as vp.view draws it from Python. This file
// only reads the volume: NIfTI through NiftiReader (one volume of a 4-D file), DICOM through
// scan_dicom_series and read_dicom_series.
#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "cli_common.hpp"
#include "voxpipe/dicom_series.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/view.hpp"

namespace voxpipe::cli {

namespace {

namespace fs = std::filesystem;

const char* const kViewUsage =
    "usage: voxpipe view INPUT... [-o OUT.png] [--volume T] [--mosaic] [--overwrite]\n"
    "\n"
    "Draws a PNG of a NIfTI image (.nii, .nii.gz, .hdr/.img) or of a DICOM series (a folder,\n"
    "searched recursively, or its files): three slices through the centre, sagittal, coronal\n"
    "and axial, in the closest RAS orientation (no resampling: an oblique image is shown as its\n"
    "voxel grid lies), neurological convention (the subject's left on the left, as nilearn),\n"
    "square millimetre pixels, orientation letters at the edges, and the grey levels spanning\n"
    "the 1st to 99th percentile of the volume's values (see docs/view.md).\n"
    "\n"
    "  -o OUT            the PNG to write (default: INPUT's name without its extension, plus\n"
    "                    .png, in the current folder)\n"
    "  --volume T        the volume of a 4-D image or series to draw, from 0 (default 0)\n"
    "  --mosaic          up to 36 axial slices, inferior to superior, in a grid\n"
    "  --overwrite, --force\n"
    "                    replace OUT when it exists (by default an existing OUT is refused)\n"
    "\n"
    "OUT appears only once complete (written beside it, then renamed). Exit status: 0, or the\n"
    "code of the error (docs/exit_codes.md): 3 for a missing INPUT, 10 for a --volume the\n"
    "image does not have or a folder holding several series, 12 when OUT exists.\n";

bool ends_with(const std::string& s, const char* suffix) {
  const std::string t(suffix);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// A NIfTI file by its name (what open_nifti accepts); anything else is read as DICOM.
bool is_nifti_name(const std::string& path) {
  std::string l = lower(path);
  if (ends_with(l, ".gz")) l.resize(l.size() - 3);
  return ends_with(l, ".nii") || ends_with(l, ".hdr") || ends_with(l, ".img");
}

// INPUT's name without folder and extension, plus .png, in the current folder.
std::string default_output(const std::string& input) {
  fs::path p = fs::path(input).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "dir/"
  std::string name = p.filename().string();
  for (const char* ext : {".gz", ".nii", ".hdr", ".img", ".dcm"})
    if (ends_with(lower(name), ext)) name.resize(name.size() - std::string(ext).size());
  if (name.empty() || name == "." || name == "..") name = "view";
  return name + ".png";
}

struct Volume {
  std::vector<float> data;
  std::array<std::int64_t, 3> shape{};
  std::array<double, 16> affine{};
};

Error bad_volume(const std::string& path, std::int64_t t, std::uint64_t volumes) {
  return Error(ErrorCode::invalid_argument, path, "--volume",
               "expected a volume in 0.." + std::to_string(volumes - 1) + ", but received " +
                   std::to_string(t));
}

// Volume t of a NIfTI image, scaled values as float32: the values nibabel's dataobj gives
// (in its scaled dtype), then cast, as vp.view does.
Volume read_nifti_volume(const std::string& path, std::int64_t t) {
  const NiftiImage img = open_nifti(path);
  const std::size_t ndim = img.shape.size();
  Volume v;
  v.affine = img.affine;
  std::uint64_t volumes = 1;
  for (std::size_t k = 0; k < ndim; ++k) {
    if (k < 3)
      v.shape[k] = img.shape[k];
    else
      volumes *= static_cast<std::uint64_t>(img.shape[k]);
  }
  for (std::size_t k = ndim; k < 3; ++k) v.shape[k] = 1;
  if (img.voxel_count() == 0)
    throw Error(ErrorCode::invalid_argument, path, "shape", "expected voxels, but found none");
  if (t >= static_cast<std::int64_t>(volumes)) throw bad_volume(path, t, volumes);
  // The axes beyond the third hold the volumes, the first of them fastest (Fortran order).
  std::vector<AxisRange> selection;
  std::int64_t rest = t;
  for (std::size_t k = 0; k < ndim; ++k) {
    if (k < 3) {
      selection.push_back({0, 1, img.shape[k]});
    } else {
      selection.push_back({rest % img.shape[k], 1, 1});
      rest /= img.shape[k];
    }
  }
  const std::size_t n = static_cast<std::size_t>(v.shape[0] * v.shape[1] * v.shape[2]);
  NiftiReader reader(img);
  if (scaled_dtype(img.dtype, img.scaling, path) == DType::f64) {
    std::vector<double> wide(n);
    reader.read(selection, OutputSpec{DType::f64, true, false, false},
                std::as_writable_bytes(std::span(wide)));
    v.data.assign(wide.begin(), wide.end());
  } else {
    v.data.resize(n);
    reader.read(selection, OutputSpec{DType::f32, true, false, false},
                std::as_writable_bytes(std::span(v.data)));
  }
  return v;
}

// Volume t of the one DICOM series under `inputs`, float32 with each image's rescale applied
// (vp.load_dicom's default).
Volume read_dicom_volume(const std::vector<std::string>& inputs, std::int64_t t) {
  const DicomScanResult scan = scan_dicom_series(inputs);
  const std::string& name = inputs.front();
  if (scan.series.empty())
    throw Error(ErrorCode::format, name, "", "expected DICOM images, but found none (" +
                                                  std::to_string(scan.skipped.size()) +
                                                  " files skipped)");
  if (scan.series.size() > 1) {
    std::string list;
    for (const DicomSeries& s : scan.series)
      list += (list.empty() ? "" : ", ") + std::to_string(s.series_number) +
              (s.series_description.empty() ? "" : " \"" + s.series_description + "\"");
    throw Error(ErrorCode::invalid_argument, name, "",
                "expected one series, but found " + std::to_string(scan.series.size()) + " (" +
                    list + "): give the files or folder of one of them");
  }
  const DicomSeries& s = scan.series.front();
  const std::vector<std::uint64_t> shape = s.shape();
  const std::uint64_t volumes = shape.size() > 3 ? shape[3] : 1;
  if (t >= static_cast<std::int64_t>(volumes)) throw bad_volume(name, t, volumes);
  std::uint64_t total = 1;
  for (std::uint64_t d : shape) total *= d;
  std::vector<float> all(total);
  read_dicom_series(
      s, std::span(reinterpret_cast<std::uint8_t*>(all.data()), total * sizeof(float)),
      DType::f32);
  Volume v;
  for (int k = 0; k < 3; ++k) v.shape[k] = static_cast<std::int64_t>(shape[k]);
  v.affine = s.affine;
  const std::size_t per = static_cast<std::size_t>(shape[0] * shape[1] * shape[2]);
  const auto first = all.begin() + static_cast<std::ptrdiff_t>(per * static_cast<std::size_t>(t));
  v.data.assign(first, first + static_cast<std::ptrdiff_t>(per));
  return v;
}

}  // namespace

int cmd_view(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::vector<std::string> inputs;
  std::string output;
  std::int64_t volume = 0;
  bool overwrite = false;
  ViewOptions options;
  OptionParser parser("voxpipe view", kViewUsage, out, err);
  parser.value("-o", output)
      .value("--volume",
             [&volume](const std::string& v) {
               char* end = nullptr;
               const long long t = std::strtoll(v.c_str(), &end, 10);
               if (v.empty() || *end) return expects("--volume", "an integer", v);
               if (t < 0)
                 throw Error(ErrorCode::invalid_argument, "", "--volume",
                             "expected a volume index >= 0, but received " + v);
               volume = t;
               return std::string();
             })
      .flag("--mosaic", [&options] { options.layout = ViewLayout::mosaic; })
      .overwrite(overwrite)
      .positionals(inputs, 1, SIZE_MAX, "expected INPUT");
  if (const auto code = parser.parse(args)) return *code;
  std::error_code ec;
  const bool nifti = is_nifti_name(inputs[0]) && !fs::is_directory(inputs[0], ec);
  if (inputs.size() > 1 && std::any_of(inputs.begin(), inputs.end(), is_nifti_name))
    return parser.error("expected one NIfTI file, or the files of one DICOM series");
  if (output.empty()) output = default_output(inputs[0]);
  check_overwrite(output, overwrite);  // before any reading
  const Volume v = nifti ? read_nifti_volume(inputs[0], volume)
                         : read_dicom_volume(inputs, volume);
  const GrayImage picture = render_view(ViewVolume{v.data, v.shape, v.affine}, options, inputs[0]);
  write_png(output, picture);
  out << "wrote " << output << "\n";
  return 0;
}

}  // namespace voxpipe::cli
