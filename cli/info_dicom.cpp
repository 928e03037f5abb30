// voxpipe info of DICOM: a file's transfer syntax, UIDs, image pixel module, geometry, rescale
// and where its pixel data lies; a folder's series, each as the image dcm2nii writes of it.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <span>

#include "cli_common.hpp"
#include "info.hpp"
#include "series_nifti.hpp"
#include "core/file.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::cli::info {

bool is_dicom_file(const std::string& path) {
  std::string lower = path;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower.size() >= 4 && lower.compare(lower.size() - 4, 4, ".dcm") == 0) return true;
  // Through InputFile, which refuses a FIFO instead of waiting for its writer; the NIfTI reader
  // then reports why the file cannot be read.
  try {
    const core::InputFile f(path);
    char magic[4] = {};
    return f.read_at(128, std::as_writable_bytes(std::span(magic))) == 4 &&
           std::memcmp(magic, "DICM", 4) == 0;
  } catch (const Error&) {
    return false;
  }
}

namespace {

// pydicom's UID names of the transfer syntaxes; other UIDs are shown as themselves (as pydicom).
std::string transfer_syntax_name(const std::string& uid) {
  static const std::pair<const char*, const char*> names[] = {
      {"1.2.840.10008.1.2", "Implicit VR Little Endian"},
      {"1.2.840.10008.1.2.1", "Explicit VR Little Endian"},
      {"1.2.840.10008.1.2.1.98", "Encapsulated Uncompressed Explicit VR Little Endian"},
      {"1.2.840.10008.1.2.1.99", "Deflated Explicit VR Little Endian"},
      {"1.2.840.10008.1.2.2", "Explicit VR Big Endian"},
      {"1.2.840.10008.1.2.4.50", "JPEG Baseline (Process 1)"},
      {"1.2.840.10008.1.2.4.51", "JPEG Extended (Process 2 and 4)"},
      {"1.2.840.10008.1.2.4.57", "JPEG Lossless, Non-Hierarchical (Process 14)"},
      {"1.2.840.10008.1.2.4.70",
       "JPEG Lossless, Non-Hierarchical, First-Order Prediction (Process 14 [Selection Value 1])"},
      {"1.2.840.10008.1.2.4.80", "JPEG-LS Lossless Image Compression"},
      {"1.2.840.10008.1.2.4.81", "JPEG-LS Lossy (Near-Lossless) Image Compression"},
      {"1.2.840.10008.1.2.4.90", "JPEG 2000 Image Compression (Lossless Only)"},
      {"1.2.840.10008.1.2.4.91", "JPEG 2000 Image Compression"},
      {"1.2.840.10008.1.2.4.92", "JPEG 2000 Part 2 Multi-component Image Compression (Lossless Only)"},
      {"1.2.840.10008.1.2.4.93", "JPEG 2000 Part 2 Multi-component Image Compression"},
      {"1.2.840.10008.1.2.4.94", "JPIP Referenced"},
      {"1.2.840.10008.1.2.4.95", "JPIP Referenced Deflate"},
      {"1.2.840.10008.1.2.4.100", "MPEG2 Main Profile / Main Level"},
      {"1.2.840.10008.1.2.4.101", "MPEG2 Main Profile / High Level"},
      {"1.2.840.10008.1.2.4.102", "MPEG-4 AVC/H.264 High Profile / Level 4.1"},
      {"1.2.840.10008.1.2.4.103", "MPEG-4 AVC/H.264 BD-compatible High Profile / Level 4.1"},
      {"1.2.840.10008.1.2.4.104", "MPEG-4 AVC/H.264 High Profile / Level 4.2 For 2D Video"},
      {"1.2.840.10008.1.2.4.105", "MPEG-4 AVC/H.264 High Profile / Level 4.2 For 3D Video"},
      {"1.2.840.10008.1.2.4.106", "MPEG-4 AVC/H.264 Stereo High Profile / Level 4.2"},
      {"1.2.840.10008.1.2.4.107", "HEVC/H.265 Main Profile / Level 5.1"},
      {"1.2.840.10008.1.2.4.108", "HEVC/H.265 Main 10 Profile / Level 5.1"},
      {"1.2.840.10008.1.2.4.201", "High-Throughput JPEG 2000 Image Compression (Lossless Only)"},
      {"1.2.840.10008.1.2.4.202",
       "High-Throughput JPEG 2000 with RPCL Options Image Compression (Lossless Only)"},
      {"1.2.840.10008.1.2.4.203", "High-Throughput JPEG 2000 Image Compression"},
      {"1.2.840.10008.1.2.5", "RLE Lossless"},
  };
  for (const auto& [u, name] : names)
    if (uid == u) return name;
  return uid;
}

// One field of the summary, read leniently: a value that is not a number shows as missing
// rather than failing the whole command.
struct DicomSummaryField {
  const char* key;    // JSON key
  const char* label;  // text label
  DicomTag tag;
  enum Kind { text, integer, numbers, number } kind;
};

const DicomSummaryField kDicomFields[] = {
    {"sop_class_uid", "SOP class", 0x00080016, DicomSummaryField::text},
    {"sop_instance_uid", "SOP instance", 0x00080018, DicomSummaryField::text},
    {"modality", "modality", 0x00080060, DicomSummaryField::text},
    {"patient_id", "patient ID", 0x00100020, DicomSummaryField::text},
    {"study_instance_uid", "study UID", 0x0020000D, DicomSummaryField::text},
    {"series_instance_uid", "series UID", 0x0020000E, DicomSummaryField::text},
    {"rows", "rows", 0x00280010, DicomSummaryField::integer},
    {"columns", "columns", 0x00280011, DicomSummaryField::integer},
    {"number_of_frames", "frames", 0x00280008, DicomSummaryField::integer},
    {"samples_per_pixel", "samples", 0x00280002, DicomSummaryField::integer},
    {"photometric_interpretation", "photometric", 0x00280004, DicomSummaryField::text},
    {"bits_allocated", "bits allocated", 0x00280100, DicomSummaryField::integer},
    {"bits_stored", "bits stored", 0x00280101, DicomSummaryField::integer},
    {"pixel_representation", "pixel repr.", 0x00280103, DicomSummaryField::integer},
    {"pixel_spacing", "spacing", 0x00280030, DicomSummaryField::numbers},
    {"image_orientation_patient", "orientation", 0x00200037, DicomSummaryField::numbers},
    {"image_position_patient", "position", 0x00200032, DicomSummaryField::numbers},
    {"rescale_slope", "rescale slope", 0x00281053, DicomSummaryField::number},
    {"rescale_intercept", "rescale inter.", 0x00281052, DicomSummaryField::number},
};

// The field's value as JSON (null when missing, empty or not a number) and as text ("" then).
std::pair<std::string, std::string> dicom_field(const DicomDataset& ds, const DicomSummaryField& f) {
  if (!ds.contains(f.tag)) return {"null", ""};
  try {
    switch (f.kind) {
      case DicomSummaryField::text: {
        const std::string v = ds.string(f.tag).value_or("");
        return {json_str(v), v};
      }
      case DicomSummaryField::integer: {
        auto v = ds.integer(f.tag);
        if (!v) break;
        return {std::to_string(*v), std::to_string(*v)};
      }
      case DicomSummaryField::number: {
        auto v = ds.number(f.tag);
        if (!v) break;
        return {json_num(*v), num(*v)};
      }
      case DicomSummaryField::numbers: {
        auto v = ds.numbers(f.tag);
        if (v.empty()) break;
        return {tuple(v, true), tuple(v, false)};
      }
    }
  } catch (const Error&) {
    return {"null", "(not a number)"};
  }
  return {"null", ""};
}

}  // namespace

void info_dicom(const std::string& path, const DicomFile& f, bool json, std::ostream& out) {
  const DicomTransferSyntax& ts = f.transfer_syntax;
  const std::string ts_name = ts.uid.empty() ? "" : transfer_syntax_name(ts.uid);
  const auto& px = f.pixel_data;
  constexpr std::size_t kFragmentsShown = 8;
  if (json) {
    out << "{\"path\": " << json_str(path) << ", \"format\": \"DICOM\""
        << ", \"preamble\": " << (f.has_preamble ? "true" : "false");
    out << ", \"transfer_syntax\": {\"uid\": " << json_str(ts.uid) << ", \"name\": " << json_str(ts_name)
        << ", \"implicit_vr\": " << (f.implicit_vr ? "true" : "false")
        << ", \"big_endian\": " << (f.big_endian ? "true" : "false")
        << ", \"deflated\": " << (ts.deflated ? "true" : "false")
        << ", \"encapsulated\": " << (ts.encapsulated ? "true" : "false") << "}";
    for (const auto& field : kDicomFields)
      out << ", \"" << field.key << "\": " << dicom_field(f.dataset, field).first;
    out << ", \"pixel_data\": ";
    if (!px) {
      out << "null}\n";
      return;
    }
    out << "{\"tag\": " << px->tag << ", \"offset\": " << px->offset << ", \"length\": " << px->length
        << ", \"encapsulated\": " << (px->encapsulated ? "true" : "false")
        << ", \"offsets_in_inflated_stream\": " << (f.offsets_in_inflated_stream ? "true" : "false");
    if (px->encapsulated) {
      out << ", \"fragment_count\": " << px->fragments.size() << ", \"fragments\": [";
      for (std::size_t i = 0; i < px->fragments.size() && i < kFragmentsShown; ++i)
        out << (i ? ", " : "") << "[" << px->fragments[i].offset << ", " << px->fragments[i].length << "]";
      out << "]";
    }
    out << "}}\n";
    return;
  }
  out << "file:            " << path << "\n";
  out << "format:          DICOM" << (f.has_preamble ? "" : " (no preamble)") << "\n";
  out << "transfer syntax: " << (ts.uid.empty() ? "(none)" : ts.uid);
  if (!ts_name.empty() && ts_name != ts.uid) out << " (" << ts_name << ")";
  out << "\n";
  for (const auto& field : kDicomFields) {
    const auto [json_value, text] = dicom_field(f.dataset, field);
    if (json_value == "null" && text.empty()) continue;
    char label[32];
    std::snprintf(label, sizeof label, "%-17s", (std::string(field.label) + ":").c_str());
    out << label << text << "\n";
  }
  out << "pixel data:      ";
  if (!px) {
    out << "none\n";
    return;
  }
  const char* where = f.offsets_in_inflated_stream ? " of the inflated dataset stream" : "";
  if (!px->encapsulated) {
    out << px->length << " bytes at offset " << px->offset << where << "\n";
    return;
  }
  out << "encapsulated, " << px->fragments.size() << " fragment(s), " << px->length
      << " bytes at offset " << px->offset << where << "\n";
  out << "fragments:      ";
  for (std::size_t i = 0; i < px->fragments.size() && i < kFragmentsShown; ++i)
    out << " " << px->fragments[i].offset << " (" << px->fragments[i].length << " bytes)";
  if (px->fragments.size() > kFragmentsShown) out << " ...";
  out << "\n";
}

InfoRow dicom_row(const std::string& path, const DicomFile& f) {
  std::string dtype = "-", shape = "-";
  if (f.pixel_data) {
    try {
      const DicomPixelInfo px = dicom_pixel_info(f);
      dtype = dtype_name(px.dtype);
      shape = tuple(px.shape, true);
    } catch (const Error&) {
      dtype = shape = "?";  // the detailed form (info FILE) says what is wrong
    }
  }
  std::string zoom = "-";
  try {
    if (const auto spacing = f.dataset.numbers(0x00280030); !spacing.empty()) zoom = zooms_text(spacing);
  } catch (const Error&) {
  }
  std::string scaling;
  try {
    const auto slope = f.dataset.number(0x00281053), inter = f.dataset.number(0x00281052);
    if ((slope && *slope != 1) || (inter && *inter != 0))
      scaling = scaling_text(slope.value_or(1.0), inter.value_or(0.0));
  } catch (const Error&) {
  }
  const std::string modality = f.dataset.contains(0x00080060) ? f.dataset.string(0x00080060).value_or("") : "";
  return {path, dtype, shape, zoom, scaling, "", modality.empty() ? "-" : modality, "DICOM"};
}

void info_dicom_folder(const std::string& path, const DicomScanResult& scan, bool json, bool detailed,
                       std::ostream& out, std::vector<InfoRow>& rows) {
  std::size_t images = 0;
  for (const DicomSeries& s : scan.series) images += s.images.size();
  if (!json && detailed) {
    out << "folder:      " << path << "\n";
    out << "format:      DICOM series folder, " << scan.series.size() << " series, " << images
        << " images";
    if (!scan.skipped.empty()) out << " (" << scan.skipped.size() << " other files)";
    out << "\n";
  }
  for (const DicomSeries& s : scan.series) {
    std::vector<std::string> warnings = s.warnings;
    const SeriesPlan plan = series_plan(s, std::nullopt);
    const NiftiHeader h = series_header(s, plan, warnings);
    const DType dtype = plan.dtype;
    std::vector<std::int64_t> shape;
    for (auto d : s.shape()) shape.push_back(static_cast<std::int64_t>(d));
    std::vector<double> zoom;
    for (std::size_t i = 0; i < shape.size(); ++i) zoom.push_back(h.pixdim[i + 1]);
    const bool scaled = h.scl_slope != 1 || h.scl_inter != 0;
    if (json) {
      out << "{\"path\": " << json_str(path) << ", \"format\": \"DICOM series\"";
      out << ", \"series_number\": " << s.series_number;
      out << ", \"series_description\": " << json_str(s.series_description);
      out << ", \"series_instance_uid\": " << json_str(s.series_instance_uid);
      out << ", \"modality\": " << json_str(s.modality);
      out << ", \"split\": " << json_str(s.split);
      out << ", \"images\": " << s.images.size();
      out << ", \"shape\": " << tuple(shape, true);
      out << ", \"dtype\": " << json_str(std::string(dtype_name(dtype)));
      out << ", \"zooms\": " << tuple(zoom, true);
      out << ", \"scl_slope\": " << json_num(h.scl_slope);
      out << ", \"scl_inter\": " << json_num(h.scl_inter);
      out << ", \"scaled\": " << (scaled ? "true" : "false");
      out << ", \"affine\": " << affine_json(nifti_sform(h));
      out << ", \"problem\": " << (s.problem.empty() ? "null" : json_str(s.problem));
      out << ", \"warnings\": " << json_strings(warnings) << "}\n";
    } else if (detailed) {
      out << series_name(s) << ": " << (s.modality.empty() ? "" : s.modality + ", ") << s.images.size()
          << " images, shape " << tuple(shape, false) << ", " << dtype_name(dtype) << ", zooms "
          << tuple(zoom, false);
      if (scaled) out << ", scl_slope " << num(h.scl_slope) << ", scl_inter " << num(h.scl_inter);
      out << "\n";
      if (!s.problem.empty()) out << "  not convertible: " << s.problem << "\n";
      for (const auto& w : warnings) out << "  warning: " << w << "\n";
    } else {
      rows.push_back({path, std::string(dtype_name(dtype)), tuple(shape, true), zooms_text(zoom),
                      scaled ? scaling_text(h.scl_slope, h.scl_inter) : "",
                      "", s.modality.empty() ? "-" : s.modality,
                      "DICOM " + series_name(s) + ", " + std::to_string(s.images.size()) + " images"});
    }
  }
}

}  // namespace voxpipe::cli::info
