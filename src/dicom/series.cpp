// Series assembly: files parsed in parallel (each into its images: series_images.cpp), grouped
// (SeriesInstanceUID, then the fields that split a series), sorted along the slice normal (never
// by InstanceNumber alone), 4D detected from repeated positions, checked (spacing, counts,
// tilt), and the NIfTI RAS affine computed as nibabel.nicom does. Reading the pixels:
// series_read.cpp. include/voxpipe/dicom_series.hpp states the conventions.
#include "voxpipe/dicom_series.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "dicom/series_internal.hpp"
#include "core/thread_pool.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/threads.hpp"

namespace voxpipe {
namespace {

using dicom::series_detail::cross;
using dicom::series_detail::dot;
using dicom::series_detail::Image;
using dicom::series_detail::images_of;
using dicom::series_detail::norm;
using dicom::series_detail::Vec3;

namespace fs = std::filesystem;

std::vector<std::string> list_files(const std::vector<std::string>& paths, bool recursive,
                                    std::vector<std::pair<std::string, std::string>>& skipped) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    if (ec || !fs::exists(st)) throw Error(ErrorCode::not_found, p, "", "no such file or folder");
    if (!fs::is_directory(st)) {
      files.push_back(p);
      continue;
    }
    std::vector<std::string> found;
    const auto add = [&](const fs::directory_entry& e) {
      std::error_code e2;
      if (e.is_regular_file(e2)) found.push_back(e.path().string());
    };
    if (recursive) {
      for (auto it = fs::recursive_directory_iterator(
               p, fs::directory_options::skip_permission_denied, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        add(*it);
    } else {
      for (auto it = fs::directory_iterator(p, fs::directory_options::skip_permission_denied, ec);
           !ec && it != fs::directory_iterator(); it.increment(ec))
        add(*it);
    }
    if (ec) skipped.emplace_back(p, "the folder could not be listed: " + ec.message());
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

std::string fmt(double v, int precision = 4) {
  std::ostringstream s;
  s.precision(precision);
  s << v;
  return s.str();
}

// Sorts, checks and describes one group of images (one series part).
DicomSeries assemble(std::vector<Image> images, const DicomScanOptions& options) {
  DicomSeries s;
  // What the first image (in file order) decides, taken before `images` is replaced below: a
  // reference into it would dangle.
  double single_step = 1;  // the slice step of a series with one position
  {
    const Image& first = images.front();
    s.series_instance_uid = first.series_uid;
    s.series_number = first.series_number;
    s.series_description = first.description;
    s.modality = first.modality;
    s.rows = first.rows;
    s.columns = first.columns;
    s.orientation = first.orientation;
    s.pixel_spacing = first.spacing;
    s.stored_dtype = first.dtype;
    s.echo_number = first.echo_number;
    s.image_component = first.component;
    single_step = first.between > 0 ? first.between : first.thickness > 0 ? first.thickness : 1.0;
  }

  // The same file twice (copies under two names): read once.
  {
    std::set<std::tuple<std::string, std::uint64_t, std::uint32_t>> seen;
    std::vector<Image> unique;
    std::size_t dropped = 0;
    for (Image& im : images) {
      if (!im.sop_uid.empty() &&
          !seen.insert({im.sop_uid, im.slice.frame, im.slice.tile}).second) {
        ++dropped;
        continue;
      }
      unique.push_back(std::move(im));
    }
    if (dropped)
      s.warnings.push_back(std::to_string(dropped) +
                           " images with an SOPInstanceUID already seen were left out");
    images = std::move(unique);
  }
  {
    // One warning for the files whose CSA image header could not be read, naming the first.
    std::set<const DicomFile*> files;
    const Image* first_bad = nullptr;
    for (const Image& im : images)
      if (!im.file_warning.empty() && files.insert(im.slice.file.get()).second && !first_bad)
        first_bad = &im;
    if (first_bad)
      s.warnings.push_back(std::to_string(files.size()) +
                           " files' CSA image header could not be read (its values were not "
                           "used); the first: " + first_bad->file_warning);
  }
  for (const Image& im : images) {
    if (!im.file_problem.empty() && s.problem.empty())
      s.problem = im.slice.file->path + ": " + im.file_problem;
    if (im.dtype != s.stored_dtype && s.problem.empty())
      s.problem = "the images' stored types differ (BitsAllocated or PixelRepresentation)";
    if (im.samples != 1 && im.dtype != DType::rgb24 && s.problem.empty())
      s.problem = "colour images (SamplesPerPixel " + std::to_string(im.samples) + ", " +
                  im.slice.pixel->photometric + ", " +
                  std::to_string(im.slice.pixel->bits_allocated) +
                  " bits) are read only as 8-bit RGB (RGB, YBR_FULL, YBR_FULL_422), as NIfTI's "
                  "RGB24 holds them (dcm2niix refuses 16-bit colour, and writes 32-bit colour "
                  "as one int32 per pixel that is not its colour)";
  }
  std::size_t placed = 0;
  for (const Image& im : images) placed += im.has_position && im.has_orientation;
  if (placed == 0 && s.problem.empty()) {
    // No image states where it is (secondary capture, CR/DX, ultrasound, a multi-frame file
    // without positions): the images are stacked in time order (a multi-frame file's in frame
    // order), as dcm2niix stacks them, on axes of its choosing: rows along +x (LPS), columns
    // along +y, slices along +z, PixelSpacing (1 where absent or zero) apart in plane, slices
    // SpacingBetweenSlices (else SliceThickness, else 1) apart, centred on the origin. That is
    // the affine nibabel makes of dcm2niix's image (sform and qform code 0, rows flipped).
    s.no_geometry = true;
    std::stable_sort(images.begin(), images.end(), [](const Image& a, const Image& b) {
      const DicomSlice &x = a.slice, &y = b.slice;
      return std::tie(x.temporal_index, x.acquisition_number, x.acquisition_time, x.trigger_time,
                      x.instance_number, x.file->path, x.frame) <
             std::tie(y.temporal_index, y.acquisition_number, y.acquisition_time, y.trigger_time,
                      y.instance_number, y.file->path, y.frame);
    });
    s.orientation = {1, 0, 0, 0, 1, 0};
    for (double& d : s.pixel_spacing)
      if (!(d > 0) || !std::isfinite(d)) d = 1;
    // A step the position tolerance would merge (or not a number) is taken as 1 mm.
    if (!(single_step > 10 * options.position_tolerance) || !std::isfinite(single_step))
      single_step = 1;
    const double k0 = -single_step * (double(images.size()) - 1) / 2;
    for (std::size_t k = 0; k < images.size(); ++k) {
      Image& im = images[k];
      im.orientation = s.orientation;
      im.spacing = s.pixel_spacing;
      im.slice.position = {-s.pixel_spacing[1] * (double(s.columns) - 1) / 2,
                           -s.pixel_spacing[0] * (double(s.rows) - 1) / 2,
                           k0 + double(k) * single_step};
      im.has_position = im.has_orientation = true;
    }
    s.warnings.push_back(
        "no ImagePositionPatient or ImageOrientationPatient: the image is not placed in the "
        "patient frame (qform and sform code 0); its affine is PixelSpacing and the slice step "
        "about the image centre, as dcm2niix writes it");
  } else if (placed < images.size() && s.problem.empty()) {
    s.problem = "some images have no ImagePositionPatient or ImageOrientationPatient";
  }
  if (!s.no_geometry && images.front().frame_stack > 1 && s.problem.empty())
    s.warnings.push_back(
        "a multi-frame file without per-frame positions: its " +
        std::to_string(images.front().frame_stack) +
        " frames are stacked from ImagePositionPatient along the normal, " + fmt(single_step) +
        " mm apart (SpacingBetweenSlices, else SliceThickness, else 1 mm, as dcm2niix)");

  // Non-finite geometry (DS accepts "nan" and "inf", FD any bits; 1e308 overflows the distance
  // along the normal) compares false with everything: such an image would join its neighbour's
  // position and turn a 3D series into 4D, or leave a NaN in the affine (found by
  // fuzz_dicom_series).
  const auto finite = [](const auto& v) {
    return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
  };
  const auto check_finite = [&](bool with_distance) {
    for (const Image& im : images) {
      if (!s.problem.empty()) return;
      const char* field = !finite(im.orientation) ? "ImageOrientationPatient (0020,0037)"
                          : !finite(im.spacing)     ? "PixelSpacing (0028,0030)"
                          : !finite(im.slice.position) ||
                                  (with_distance && !std::isfinite(im.slice.distance))
                              ? "ImagePositionPatient (0020,0032)"
                              : nullptr;
      if (field)
        s.problem = im.slice.file->path +
                    (im.slice.frame ? " frame " + std::to_string(im.slice.frame) : "") + ": " +
                    field + " is not finite, or its distance along the normal overflows";
    }
  };
  check_finite(false);

  Vec3 row{s.orientation[0], s.orientation[1], s.orientation[2]};
  Vec3 col{s.orientation[3], s.orientation[4], s.orientation[5]};
  Vec3 normal = cross(row, col);
  const double n = norm(normal);
  if (n > 0) for (double& x : normal) x /= n;
  else if (s.problem.empty()) s.problem = "ImageOrientationPatient is degenerate";
  for (Image& im : images) im.slice.distance = dot(im.slice.position, normal);
  check_finite(true);
  // Positions along the normal; the images at one position are the volumes, in time order. A
  // NaN distance (a problem already, above) sorts last, so that the order stays a strict weak
  // one, as std::stable_sort requires.
  std::stable_sort(images.begin(), images.end(), [](const Image& a, const Image& b) {
    const double x = a.slice.distance, y = b.slice.distance;
    if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);
    return x < y;
  });
  std::vector<std::vector<Image*>> positions;
  for (Image& im : images) {
    if (positions.empty() ||
        im.slice.distance - positions.back().front()->slice.distance > options.position_tolerance)
      positions.emplace_back();
    positions.back().push_back(&im);
  }
  const auto time_order = [](const Image* a, const Image* b) {
    const DicomSlice &x = a->slice, &y = b->slice;
    return std::tie(x.temporal_index, x.acquisition_number, x.acquisition_time, x.trigger_time,
                    x.instance_number, x.file->path, x.frame) <
           std::tie(y.temporal_index, y.acquisition_number, y.acquisition_time, y.trigger_time,
                    y.instance_number, y.file->path, y.frame);
  };
  for (auto& p : positions) std::stable_sort(p.begin(), p.end(), time_order);
  const std::size_t volumes = positions.empty() ? 0 : positions.front().size();
  s.slices = positions.size();
  s.volumes = volumes;
  for (std::size_t k = 0; k < positions.size() && s.problem.empty(); ++k) {
    if (positions[k].size() != volumes) {
      std::size_t most = 0;
      for (auto& p : positions) most = std::max(most, p.size());
      s.problem = "positions along the slice normal hold different numbers of images (" +
                  std::to_string(positions[k].size()) + " at " +
                  fmt(positions[k].front()->slice.distance) + " mm, " + std::to_string(volumes) +
                  " at the first; up to " + std::to_string(most) +
                  "): a slice is missing or duplicated";
    }
  }
  // Spacing along the normal must be even: a gap is a missing slice.
  if (positions.size() > 1) {
    double lo = 1e300, hi = -1e300;
    std::size_t at_lo = 0, at_hi = 0;
    for (std::size_t k = 1; k < positions.size(); ++k) {
      const double d =
          positions[k].front()->slice.distance - positions[k - 1].front()->slice.distance;
      if (d < lo) lo = d, at_lo = k;
      if (d > hi) hi = d, at_hi = k;
    }
    s.slice_spacing = (positions.back().front()->slice.distance -
                       positions.front().front()->slice.distance) / double(positions.size() - 1);
    if (hi - lo > options.spacing_tolerance && s.problem.empty())
      s.problem = "the slice spacing varies from " + fmt(lo) + " mm (before slice " +
                  std::to_string(at_lo) + ") to " + fmt(hi) + " mm (before slice " +
                  std::to_string(at_hi) +
                  "): a slice is missing, or the series is not evenly spaced";
  }
  // Volume-major order.
  s.images.reserve(images.size());
  if (s.problem.empty()) {
    for (std::size_t v = 0; v < volumes; ++v)
      for (auto& p : positions) s.images.push_back(p[v]->slice);
  } else {
    for (Image& im : images) s.images.push_back(im.slice);
  }

  // The affine (nibabel.nicom's formula), LPS -> RAS.
  if (!s.images.empty()) {
    const DicomSlice& a = s.images.front();
    Vec3 kcol;
    if (positions.size() > 1) {
      const Vec3& p0 = positions.front().front()->slice.position;
      const Vec3& p1 = positions.back().front()->slice.position;
      for (int r = 0; r < 3; ++r) kcol[r] = (p1[r] - p0[r]) / double(positions.size() - 1);
      const double len = norm(kcol);
      if (len > 0) {
        const double c = std::min(1.0, std::abs(dot(kcol, normal)) / len);
        s.tilt_degrees = std::acos(c) * 180.0 / M_PI;
        if (s.tilt_degrees > 0.01) {
          s.gantry_tilt = true;
          s.warnings.push_back("the slices step off their normal by " + fmt(s.tilt_degrees) +
                               " degrees (gantry tilt): the affine keeps it as shear");
        }
      }
    } else {
      for (int r = 0; r < 3; ++r) kcol[r] = normal[r] * single_step;
      s.slice_spacing = single_step;
    }
    const double flip[3] = {-1, -1, 1};
    for (int r = 0; r < 3; ++r) {
      s.affine[r * 4 + 0] = flip[r] * row[r] * s.pixel_spacing[1];
      s.affine[r * 4 + 1] = flip[r] * col[r] * s.pixel_spacing[0];
      s.affine[r * 4 + 2] = flip[r] * kcol[r];
      s.affine[r * 4 + 3] = flip[r] * a.position[r];
    }
    s.affine[15] = 1;
    if (!finite(s.affine) && s.problem.empty())
      s.problem = "the affine overflows (positions or spacings too large)";
  }
  s.slope = s.images.empty() ? 1 : s.images.front().slope;
  s.intercept = s.images.empty() ? 0 : s.images.front().intercept;
  for (const DicomSlice& im : s.images)
    s.uniform_rescale &= im.slope == s.slope && im.intercept == s.intercept;
  return s;
}

// A file to scan: its path, or its name and its bytes in memory.
struct ScanInput {
  std::string name;
  std::shared_ptr<const DicomBuffer> buffer;  // null: read the file at `name`
};

DicomFile parse_input(const std::string& name, const std::shared_ptr<const DicomBuffer>& buffer,
                      const DicomReadOptions& options) {
  return buffer ? parse_dicom(buffer->bytes, name, options) : read_dicom(name, options);
}

// scan_dicom_series and scan_dicom_buffers: `inputs` parsed in parallel, in that order, and
// assembled into `result`, which may hold skipped entries already.
DicomScanResult scan_inputs(const std::vector<ScanInput>& inputs, const DicomScanOptions& options,
                            DicomScanResult result) {
  std::vector<std::vector<Image>> parsed(inputs.size());
  std::vector<std::string> why(inputs.size());
  // Only small values are kept (the geometry, the pixel module, identifiers): the parsed
  // metadata of thousands of files must not rival the volume in memory.
  DicomReadOptions read_options;
  read_options.max_value_size = 1024;
  const unsigned threads = resolve_threads(options.threads);
  core::parallel_for(inputs.size(), threads, [&](std::size_t i) {
    try {
      DicomFile f = parse_input(inputs[i].name, inputs[i].buffer, read_options);
      if (!f.pixel_data) {
        why[i] = "no pixel data";
        return;
      }
      parsed[i] = images_of(std::move(f), options, inputs[i].buffer);
    } catch (const Error& e) {
      if (options.strict) throw;
      why[i] = e.what();
    }
  });
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!why[i].empty()) result.skipped.emplace_back(inputs[i].name, why[i]);

  // Groups: SeriesInstanceUID, then the fields that split a series.
  using Key = std::tuple<std::string, std::vector<long long>, std::uint32_t, std::uint32_t,
                         std::string, std::string, std::uint32_t, std::string>;
  std::map<Key, std::vector<Image>> groups;
  std::vector<Key> order;
  for (auto& images : parsed) {
    for (Image& im : images) {
      std::vector<long long> iop;
      for (double c : im.orientation) iop.push_back(std::llround(c * 1e4));
      Key key{im.series_uid, iop, im.rows, im.columns, im.echo, im.stack, im.samples, im.component};
      auto [it, fresh] = groups.try_emplace(key);
      if (fresh) order.push_back(key);
      it->second.push_back(std::move(im));
    }
  }
  std::map<std::string, std::vector<Key>> parts;
  for (const Key& k : order) parts[std::get<0>(k)].push_back(k);

  for (const Key& k : order) {
    DicomSeries s = assemble(std::move(groups[k]), options);
    const auto& siblings = parts[std::get<0>(k)];
    if (siblings.size() > 1) {
      // Name what sets this part apart.
      std::vector<std::string> labels;
      const auto differs = [&](auto get) {
        for (const Key& o : siblings)
          if (get(o) != get(k)) return true;
        return false;
      };
      if (differs([](const Key& x) { return std::get<4>(x); }))
        labels.push_back("echo " + (std::get<4>(k).empty() ? std::string("none") : std::get<4>(k)));
      if (differs([](const Key& x) { return std::make_pair(std::get<2>(x), std::get<3>(x)); }))
        labels.push_back(std::to_string(std::get<3>(k)) + "x" + std::to_string(std::get<2>(k)));
      if (differs([](const Key& x) { return std::get<1>(x); })) {
        std::size_t index = 1;
        std::set<std::vector<long long>> seen;
        for (const Key& o : siblings) {
          if (std::get<1>(o) == std::get<1>(k)) break;
          if (seen.insert(std::get<1>(o)).second) ++index;
        }
        labels.push_back("orientation " + std::to_string(index));
      }
      if (differs([](const Key& x) { return std::get<5>(x); }))
        labels.push_back("stack " + std::get<5>(k));
      if (differs([](const Key& x) { return std::get<6>(x); }))
        labels.push_back(std::to_string(std::get<6>(k)) + " samples");
      if (differs([](const Key& x) { return std::get<7>(x); })) {
        std::string c = std::get<7>(k).empty() ? "magnitude" : std::get<7>(k);
        std::transform(c.begin(), c.end(), c.begin(),
                       [](unsigned char x) { return std::tolower(x); });
        labels.push_back(c);
      }
      for (const auto& l : labels) s.split += (s.split.empty() ? "" : ", ") + l;
    }
    result.series.push_back(std::move(s));
  }
  std::stable_sort(result.series.begin(), result.series.end(),
                   [](const DicomSeries& a, const DicomSeries& b) {
                     return std::tie(a.series_number, a.series_instance_uid, a.split) <
                            std::tie(b.series_number, b.series_instance_uid, b.split);
                   });
  // The first image's full dataset, for metadata.
  core::parallel_for(result.series.size(), threads, [&](std::size_t i) {
    DicomSeries& s = result.series[i];
    if (s.images.empty()) return;
    const DicomSlice& first = s.images.front();
    try {
      s.first_file =
          std::make_shared<const DicomFile>(parse_input(first.file->path, first.buffer, {}));
    } catch (const Error&) {
      s.first_file = first.file;
    }
  });
  return result;
}

}  // namespace

std::vector<std::uint64_t> DicomSeries::shape() const {
  std::vector<std::uint64_t> s{columns, rows, slices};
  if (volumes > 1) s.push_back(volumes);
  return s;
}

DicomScanResult scan_dicom_series(const std::vector<std::string>& paths,
                                  const DicomScanOptions& options) {
  DicomScanResult result;
  std::vector<ScanInput> inputs;
  for (std::string& file : list_files(paths, options.recursive, result.skipped))
    inputs.push_back({std::move(file), nullptr});
  return scan_inputs(inputs, options, std::move(result));
}

DicomScanResult scan_dicom_buffers(const std::vector<DicomBuffer>& buffers,
                                   const DicomScanOptions& options) {
  std::vector<ScanInput> inputs;
  inputs.reserve(buffers.size());
  for (const DicomBuffer& b : buffers)
    inputs.push_back({b.name, std::make_shared<const DicomBuffer>(b)});
  return scan_inputs(inputs, options, {});
}

}  // namespace voxpipe
