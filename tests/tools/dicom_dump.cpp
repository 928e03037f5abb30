// Test helper for the pydicom differential test (tests/python/test_dicom_parse.py):
//
//   voxpipe_dicom_dump FILE [MAX_VALUE_SIZE [all]]
//
// parses FILE with read_dicom (values up to MAX_VALUE_SIZE bytes read, default 1024; "all":
// the elements after the pixel data too) and prints one JSON object: the file's properties,
// every element of the meta group and of the dataset (tag, VR, value offset, length, whether
// the value was read, strings of string VRs and numbers of numeric VRs, items of sequences with
// their item tag offsets) and the pixel data location. On voxpipe::Error it prints
// {"error": {"code": ..., "message": ...}}.
// Exit status: 0 parsed, 1 voxpipe::Error, 2 usage.
#include <cmath>
#include <cstdio>
#include <string>

#include "voxpipe/dicom.hpp"
#include "voxpipe/error.hpp"

namespace {

using namespace voxpipe;

void put_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c >= 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += '"';
}

void put_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    put_string(out, std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"));
    return;
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  out += buf;
}

void put_dataset(std::string& out, const DicomDataset& ds);

void put_element(std::string& out, const DicomDataset& ds, const DicomElement& e) {
  out += "{\"tag\":" + std::to_string(e.tag) + ",\"vr\":\"" + dicom_vr_name(e.vr) +
         "\",\"explicit\":" + (e.explicit_vr ? "true" : "false") +
         ",\"offset\":" + std::to_string(e.value_offset) +
         ",\"length\":" + std::to_string(e.length) + ",\"read\":" + (e.value_read ? "true" : "false");
  if (e.value_read) {
    const auto strings = ds.strings(e.tag);
    if (!strings.empty()) {
      out += ",\"strings\":[";
      for (std::size_t i = 0; i < strings.size(); ++i) {
        if (i) out += ',';
        put_string(out, strings[i]);
      }
      out += ']';
    }
    try {
      const auto numbers = ds.numbers(e.tag);
      if (!numbers.empty()) {
        out += ",\"numbers\":[";
        for (std::size_t i = 0; i < numbers.size(); ++i) {
          if (i) out += ',';
          put_number(out, numbers[i]);
        }
        out += ']';
      }
    } catch (const Error& err) {
      out += ",\"number_error\":";
      put_string(out, err.what());
    }
  }
  if (e.vr == DicomVR::SQ || !e.items.empty()) {
    out += ",\"items\":[";
    for (std::size_t i = 0; i < e.items.size(); ++i) {
      if (i) out += ',';
      out += "{\"offset\":" + std::to_string(e.item_offsets[i]) + ",\"elements\":";
      put_dataset(out, e.items[i]);
      out += '}';
    }
    out += ']';
  }
  out += '}';
}

void put_dataset(std::string& out, const DicomDataset& ds) {
  out += '[';
  bool first = true;
  for (const auto& e : ds.elements()) {
    if (!first) out += ',';
    first = false;
    put_element(out, ds, e);
  }
  out += ']';
}

template <class T>
void put_list(std::string& out, const std::vector<T>& v) {
  out += '[';
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(v[i]);
  }
  out += ']';
}

std::string dump(const DicomFile& f) {
  std::string out = "{\"has_preamble\":";
  out += f.has_preamble ? "true" : "false";
  out += ",\"transfer_syntax\":";
  put_string(out, f.transfer_syntax.uid);
  out += std::string(",\"implicit_vr\":") + (f.implicit_vr ? "true" : "false") +
         ",\"big_endian\":" + (f.big_endian ? "true" : "false") +
         ",\"inflated\":" + (f.offsets_in_inflated_stream ? "true" : "false") +
         ",\"dataset_offset\":" + std::to_string(f.dataset_offset) + ",\"meta\":";
  put_dataset(out, f.meta);
  out += ",\"dataset\":";
  put_dataset(out, f.dataset);
  out += ",\"pixel_data\":";
  if (!f.pixel_data) {
    out += "null";
  } else {
    const DicomPixelData& p = *f.pixel_data;
    out += "{\"tag\":" + std::to_string(p.tag) + ",\"vr\":\"" + dicom_vr_name(p.vr) +
           "\",\"offset\":" + std::to_string(p.offset) + ",\"length\":" + std::to_string(p.length) +
           ",\"encapsulated\":" + (p.encapsulated ? "true" : "false") + ",\"basic_offset_table\":";
    put_list(out, p.basic_offset_table);
    out += ",\"fragments\":[";
    for (std::size_t i = 0; i < p.fragments.size(); ++i) {
      if (i) out += ',';
      out += '[';
      out += std::to_string(p.fragments[i].offset);
      out += ',';
      out += std::to_string(p.fragments[i].length);
      out += ']';
    }
    out += "],\"extended_offsets\":";
    put_list(out, p.extended_offsets);
    out += ",\"extended_lengths\":";
    put_list(out, p.extended_lengths);
    out += '}';
  }
  out += "}\n";
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4 || (argc == 4 && std::string(argv[3]) != "all")) {
    std::fprintf(stderr, "usage: voxpipe_dicom_dump FILE [MAX_VALUE_SIZE [all]]\n");
    return 2;
  }
  DicomReadOptions options;
  options.max_value_size = argc >= 3 ? std::stoull(argv[2]) : 1024;
  options.stop_at_pixel_data = argc < 4;
  try {
    const std::string out = dump(read_dicom(argv[1], options));
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  } catch (const Error& e) {
    std::string out = "{\"error\":{\"code\":\"";
    out += error_code_name(e.code());
    out += "\",\"message\":";
    put_string(out, e.what());
    out += "}}\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 1;
  }
}
