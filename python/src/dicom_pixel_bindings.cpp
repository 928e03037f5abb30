// voxpipe._core's DICOM pixel layer: the checked Image Pixel module and frame decoding into a
// caller's array (NumPy allocates, the core decodes into it with the GIL released). The shapes,
// dtypes and pydicom-shaped methods live in voxpipe/dicom.py.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "voxpipe/dicom.hpp"
#include "voxpipe/error.hpp"

namespace nb = nanobind;
using namespace voxpipe;

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
        nb::arg("file"), nb::call_guard<nb::gil_scoped_release>(),
        "The checked Image Pixel module of a parsed file and the shape and dtype of its frames.");

  m.def(
      "dicom_decode_frames",
      [](const DicomFile& file, const DicomPixelInfo& info, std::uint64_t first,
         std::uint64_t count, nb::ndarray<nb::c_contig, nb::device::cpu> out, bool as_rgb,
         unsigned threads, std::optional<std::string> modality) {
        DicomDecodeOptions options;
        options.as_rgb = as_rgb;
        options.threads = threads;
        if (modality) {
          const auto t = dtype_from_name(*modality);
          if (!t || (*t != DType::f32 && *t != DType::f64))
            throw Error(ErrorCode::invalid_argument, file.path, "dtype",
                        "the modality transform gives float32 or float64, not " + *modality);
          options.modality = *t;
        }
        std::span<std::uint8_t> bytes(static_cast<std::uint8_t*>(out.data()), out.nbytes());
        nb::gil_scoped_release release;
        decode_dicom_frames(file, info, first, count, bytes, options);
      },
      nb::arg("file"), nb::arg("info"), nb::arg("first"), nb::arg("count"), nb::arg("out"),
      nb::arg("as_rgb") = true, nb::arg("threads") = 0, nb::arg("modality") = nb::none(),
      "Decode frames [first, first + count) into the C-contiguous array `out` (pixel_array's "
      "dtype, or float32/float64 with the modality transform).");
}
