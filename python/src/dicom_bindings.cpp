// voxpipe._core's DICOM part: read_dicom and the parsed structures, as they are, and the scan of
// files held in memory. Value conversion, character sets, keyword access and deferred reads live
// in voxpipe/dicom.py.
//
// Lifetimes: a DicomFile is owned by Python; the datasets, elements, items and pixel data
// location reached from it are views into it (reference_internal), each keeping its parent, and
// so the file, alive.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <span>

#include "conversions.hpp"
#include "gil.hpp"
#include "voxpipe/dicom.hpp"
#include "voxpipe/dicom_series.hpp"
#include "voxpipe/error.hpp"

namespace nb = nanobind;
using namespace voxpipe;

void bind_dicom(nb::module_& m) {
  constexpr auto internal = nb::rv_policy::reference_internal;

  nb::class_<DicomDataset>(m, "DicomDataset")
      .def_prop_ro("big_endian", &DicomDataset::big_endian)
      .def_prop_ro("tags", [](const DicomDataset& d) {
        nb::list l;
        for (const auto& e : d.elements()) l.append(e.tag);
        return l;
      }, "The tags of the elements, in ascending order.")
      .def("__len__", [](const DicomDataset& d) { return d.elements().size(); })
      .def("find", &DicomDataset::find, nb::arg("tag"), internal,
           "The element with `tag`, or None.");

  nb::class_<DicomElement>(m, "DicomElement")
      .def_ro("tag", &DicomElement::tag)
      .def_prop_ro("vr", [](const DicomElement& e) { return std::string(dicom_vr_name(e.vr)); })
      .def_ro("explicit_vr", &DicomElement::explicit_vr)
      .def_ro("value_offset", &DicomElement::value_offset)
      .def_ro("length", &DicomElement::length)
      .def_ro("value_read", &DicomElement::value_read)
      .def_prop_ro("value", [](const DicomElement& e) -> nb::object {
        if (!e.value_read) return nb::none();
        return python::to_bytes(e.value);
      }, "The value bytes as stored, or None when they were not read.")
      .def_prop_ro("is_sequence", [](const DicomElement& e) {
        return e.vr == DicomVR::SQ || !e.items.empty();
      })
      .def_prop_ro("item_count", [](const DicomElement& e) { return e.items.size(); })
      .def("item", [](const DicomElement& e, std::size_t i) -> const DicomDataset& {
        if (i >= e.items.size())
          throw nb::index_error("item index out of range");
        return e.items[i];
      }, nb::arg("index"), internal)
      .def_ro("item_offsets", &DicomElement::item_offsets);

  nb::class_<DicomTransferSyntax>(m, "DicomTransferSyntax")
      .def_ro("uid", &DicomTransferSyntax::uid)
      .def_ro("implicit_vr", &DicomTransferSyntax::implicit_vr)
      .def_ro("big_endian", &DicomTransferSyntax::big_endian)
      .def_ro("deflated", &DicomTransferSyntax::deflated)
      .def_ro("encapsulated", &DicomTransferSyntax::encapsulated);

  nb::class_<DicomPixelData>(m, "DicomPixelData")
      .def_ro("tag", &DicomPixelData::tag)
      .def_prop_ro("vr", [](const DicomPixelData& p) { return std::string(dicom_vr_name(p.vr)); })
      .def_ro("offset", &DicomPixelData::offset)
      .def_ro("length", &DicomPixelData::length)
      .def_ro("encapsulated", &DicomPixelData::encapsulated)
      .def_ro("basic_offset_table", &DicomPixelData::basic_offset_table)
      .def_prop_ro("fragments", [](const DicomPixelData& p) {
        nb::list l;
        for (const auto& f : p.fragments) l.append(nb::make_tuple(f.offset, f.length));
        return l;
      }, "[(offset, length)] of each fragment's data.")
      .def_ro("extended_offsets", &DicomPixelData::extended_offsets)
      .def_ro("extended_lengths", &DicomPixelData::extended_lengths);

  nb::class_<DicomFile>(m, "DicomFile")
      .def_ro("path", &DicomFile::path)
      .def_ro("has_preamble", &DicomFile::has_preamble)
      .def_prop_ro("meta", [](const DicomFile& f) -> const DicomDataset& { return f.meta; }, internal)
      .def_prop_ro("dataset", [](const DicomFile& f) -> const DicomDataset& { return f.dataset; }, internal)
      .def_prop_ro("transfer_syntax",
                   [](const DicomFile& f) -> const DicomTransferSyntax& { return f.transfer_syntax; },
                   internal)
      .def_ro("implicit_vr", &DicomFile::implicit_vr)
      .def_ro("big_endian", &DicomFile::big_endian)
      .def_ro("dataset_offset", &DicomFile::dataset_offset)
      .def_ro("offsets_in_inflated_stream", &DicomFile::offsets_in_inflated_stream)
      .def_prop_ro("identity", [](const DicomFile& f) -> nb::object {
        if (!f.identity) return nb::none();
        return nb::make_tuple(f.identity->device, f.identity->inode, f.identity->size,
                              f.identity->mtime_ns);
      }, "(device, inode, size, mtime_ns) of the file as it was read; None for bytes.")
      .def_prop_ro("pixel_data", [](const DicomFile& f) -> const DicomPixelData* {
        return f.pixel_data ? &*f.pixel_data : nullptr;
      }, internal, "Where the top-level pixel data lies, or None.");

  m.def(
      "read_dicom",
      [](const std::string& path, std::uint64_t max_value_size, bool stop_at_pixel_data,
         bool require_preamble) {
        DicomReadOptions options;
        options.max_value_size = max_value_size;
        options.stop_at_pixel_data = stop_at_pixel_data;
        options.require_preamble = require_preamble;
        return read_dicom(path, options);
      },
      nb::arg("path"), nb::arg("max_value_size") = DicomReadOptions{}.max_value_size,
      nb::arg("stop_at_pixel_data") = true, nb::arg("require_preamble") = false,
      nb::call_guard<python::GilRelease>(),
      "Parse a DICOM Part 10 file (metadata; values over max_value_size and the pixel data are "
      "located, not read).");

  m.def(
      "dicom_scan_buffers",
      [](const std::vector<std::string>& names, const nb::list& buffers, unsigned threads,
         bool strict) {
        const std::size_t n = names.size();
        if (buffers.size() != n)
          throw Error(ErrorCode::invalid_argument, "", "buffers",
                      "expected one buffer per name (" + std::to_string(n) + "), but received " +
                          std::to_string(buffers.size()));
        std::vector<DicomBuffer> held(n);
        std::size_t i = 0;
        for (nb::handle buffer : buffers) {
          held[i].name = names[i];
          held[i].owner = python::hold_buffer(buffer, held[i].bytes);
          ++i;
        }
        DicomScanOptions options;
        options.threads = threads;
        options.strict = strict;
        python::GilRelease release;
        return scan_dicom_buffers(held, options);
      },
      nb::arg("names"), nb::arg("buffers"), nb::arg("threads") = 0, nb::arg("strict") = false,
      "As dicom_scan, over files held in memory: buffers[i] (any C-contiguous object with the "
      "buffer protocol: bytes, obstore's Bytes, memoryview, numpy array) is the file named "
      "names[i], in errors and in the series' files. Not copied: each series holds the buffers "
      "of its files, which must not change while it lives.");

  m.def("dicom_keyword_tag", [](const std::string& keyword) -> nb::object {
    auto t = dicom_keyword_tag(keyword);
    return t ? nb::cast(*t) : nb::none();
  }, nb::arg("keyword"), "The tag of a keyword of the DICOM data dictionary, or None.");

  m.def("dicom_tag_keyword", [](DicomTag tag) -> nb::object {
    const char* k = dicom_tag_keyword(tag);
    return k ? nb::cast(std::string(k)) : nb::none();
  }, nb::arg("tag"), "The keyword of a tag of the DICOM data dictionary, or None.");
}
