// voxpipe._core's DICOM pixel layer and series: the checked Image Pixel module, frame decoding
// into a caller's array, series scanning and reading into a caller's array (NumPy allocates, the core decodes into it with the GIL released). The shapes,
// dtypes and pydicom-shaped methods live in voxpipe/dicom.py.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "gil.hpp"
#include "voxpipe/dicom.hpp"
#include "voxpipe/dicom_series.hpp"
#include "voxpipe/error.hpp"

namespace nb = nanobind;
using namespace voxpipe;

namespace {

// on_corrupt='raise' | 'warn' (voxpipe.dicom's spelling of DicomOnCorrupt).
DicomOnCorrupt on_corrupt_of(const std::string& name, const std::string& path) {
  if (name == "raise") return DicomOnCorrupt::raise;
  if (name == "warn") return DicomOnCorrupt::warn;
  throw Error(ErrorCode::invalid_argument, path, "on_corrupt",
              "expected 'raise' or 'warn', but received '" + name + "'");
}

}  // namespace

void bind_dicom_pixels(nb::module_& m) {
  nb::class_<DicomPixelInfo>(m, "DicomPixelInfo")
      .def_ro("tag", &DicomPixelInfo::tag)
      .def_prop_ro("codec", [](const DicomPixelInfo& i) { return std::string(dicom_codec_name(i.codec)); })
      .def_ro("rows", &DicomPixelInfo::rows)
      .def_ro("columns", &DicomPixelInfo::columns)
      .def_ro("samples_per_pixel", &DicomPixelInfo::samples_per_pixel)
      .def_ro("bits_allocated", &DicomPixelInfo::bits_allocated)
      .def_ro("bits_stored", &DicomPixelInfo::bits_stored)
      .def_ro("high_bit", &DicomPixelInfo::high_bit)
      .def_ro("pixel_representation", &DicomPixelInfo::pixel_representation)
      .def_ro("planar_configuration", &DicomPixelInfo::planar_configuration)
      .def_ro("number_of_frames", &DicomPixelInfo::number_of_frames)
      .def_ro("photometric", &DicomPixelInfo::photometric)
      .def_ro("photometric_out", &DicomPixelInfo::photometric_out)
      .def_prop_ro("dtype", [](const DicomPixelInfo& i) { return std::string(dtype_name(i.dtype)); })
      .def_ro("frame_bytes", &DicomPixelInfo::frame_bytes)
      .def_ro("shape", &DicomPixelInfo::shape);

  m.def("dicom_pixel_info", [](const DicomFile& file) { return dicom_pixel_info(file); },
        nb::arg("file"), nb::call_guard<python::GilRelease>(),
        "The checked Image Pixel module of a parsed file and the shape and dtype of its frames.");

  m.def(
      "dicom_decode_frames",
      [](const DicomFile& file, const DicomPixelInfo& info, std::uint64_t first,
         std::uint64_t count, nb::ndarray<nb::c_contig, nb::device::cpu> out, bool as_rgb,
         unsigned threads, std::optional<std::string> modality, const std::string& on_corrupt) {
        DicomDecodeOptions options;
        options.as_rgb = as_rgb;
        options.threads = threads;
        options.on_corrupt = on_corrupt_of(on_corrupt, file.path);
        if (modality) {
          const auto t = dtype_from_name(*modality);
          if (!t || (*t != DType::f32 && *t != DType::f64))
            throw Error(ErrorCode::invalid_argument, file.path, "dtype",
                        "the modality transform gives float32 or float64, not " + *modality);
          options.modality = *t;
        }
        std::span<std::uint8_t> bytes(static_cast<std::uint8_t*>(out.data()), out.nbytes());
        python::GilRelease release;
        return decode_dicom_frames(file, info, first, count, bytes, options);
      },
      nb::arg("file"), nb::arg("info"), nb::arg("first"), nb::arg("count"), nb::arg("out"),
      nb::arg("as_rgb") = true, nb::arg("threads") = 0, nb::arg("modality") = nb::none(),
      nb::arg("on_corrupt") = "raise",
      "Decode frames [first, first + count) into the C-contiguous array `out` (pixel_array's "
      "dtype, or float32/float64 with the modality transform). Returns the decoders' warnings "
      "(damage decoded past with on_corrupt='warn', RLE segments longer than the frame).");

  nb::class_<DicomScanResult>(m, "DicomScanResult")
      .def_ro("series", &DicomScanResult::series)
      .def_ro("skipped", &DicomScanResult::skipped);

  nb::class_<DicomSeries>(m, "DicomSeries")
      .def_ro("series_instance_uid", &DicomSeries::series_instance_uid)
      .def_ro("series_number", &DicomSeries::series_number)
      .def_ro("series_description", &DicomSeries::series_description)
      .def_ro("modality", &DicomSeries::modality)
      .def_ro("split", &DicomSeries::split)
      .def_ro("rows", &DicomSeries::rows)
      .def_ro("columns", &DicomSeries::columns)
      .def_ro("orientation", &DicomSeries::orientation)
      .def_ro("pixel_spacing", &DicomSeries::pixel_spacing)
      .def_ro("slices", &DicomSeries::slices)
      .def_ro("volumes", &DicomSeries::volumes)
      .def_prop_ro("shape", &DicomSeries::shape)
      .def_ro("affine", &DicomSeries::affine)
      .def_ro("slice_spacing", &DicomSeries::slice_spacing)
      .def_ro("gantry_tilt", &DicomSeries::gantry_tilt)
      .def_ro("tilt_degrees", &DicomSeries::tilt_degrees)
      .def_prop_ro("stored_dtype", [](const DicomSeries& s) { return std::string(dtype_name(s.stored_dtype)); })
      .def_ro("uniform_rescale", &DicomSeries::uniform_rescale)
      .def_ro("slope", &DicomSeries::slope)
      .def_ro("intercept", &DicomSeries::intercept)
      .def_ro("problem", &DicomSeries::problem)
      .def_ro("warnings", &DicomSeries::warnings)
      .def_prop_ro("files", [](const DicomSeries& s) {
        std::vector<std::pair<std::string, std::uint64_t>> v;
        v.reserve(s.images.size());
        for (const DicomSlice& im : s.images) v.emplace_back(im.file->path, im.frame);
        return v;
      }, "(path, frame) of each image, in the order of the data (volume-major).")
      .def_prop_ro("positions", [](const DicomSeries& s) {
        std::vector<std::array<double, 3>> v;
        for (const DicomSlice& im : s.images) v.push_back(im.position);
        return v;
      })
      .def_prop_ro("first_file", [](const DicomSeries& s) { return s.first_file; })
      .def_ro("echo_number", &DicomSeries::echo_number)
      .def_ro("image_component", &DicomSeries::image_component)
      .def_ro("no_geometry", &DicomSeries::no_geometry)
      .def(
          "gradient_table",
          [](const DicomSeries& s, const std::array<double, 16>& affine) -> nb::object {
            const auto table = dicom_gradient_table(s, affine);
            if (!table) return nb::none();
            return nb::cast(std::make_pair(table->bvals, table->bvecs));
          },
          nb::arg("affine"),
          "(bvals, bvecs) of a diffusion series for an image with `affine` (row-major 4x4): "
          "FSL's convention, as .bval/.bvec; None without a diffusion encoding.");

  m.def(
      "dicom_scan",
      [](const std::vector<std::string>& paths, unsigned threads, bool recursive, bool strict) {
        DicomScanOptions options;
        options.threads = threads;
        options.recursive = recursive;
        options.strict = strict;
        return scan_dicom_series(paths, options);
      },
      nb::arg("paths"), nb::arg("threads") = 0, nb::arg("recursive") = true,
      nb::arg("strict") = false, nb::call_guard<python::GilRelease>(),
      "Parse the files under `paths` in parallel and assemble their series.");

  m.def(
      "dicom_read_series",
      [](const DicomSeries& series, nb::ndarray<nb::f_contig, nb::device::cpu> out,
         const std::string& dtype, unsigned threads, const std::string& on_corrupt) {
        const auto t = dtype_from_name(dtype);
        if (!t) throw Error(ErrorCode::invalid_argument, "", "dtype", "unknown dtype " + dtype);
        const DicomOnCorrupt damage = on_corrupt_of(on_corrupt, "");
        std::span<std::uint8_t> bytes(static_cast<std::uint8_t*>(out.data()), out.nbytes());
        python::GilRelease release;
        return read_dicom_series(series, bytes, *t, threads, damage);
      },
      nb::arg("series"), nb::arg("out"), nb::arg("dtype"), nb::arg("threads") = 0,
      nb::arg("on_corrupt") = "raise",
      "Read a series into the Fortran-ordered array `out` of series.shape; returns the "
      "decoders' warnings.");
}
