// parse_dicom over arbitrary bytes, with the elements after the pixel data and with small and
// large value limits: it either throws voxpipe::Error or returns a DicomFile whose offsets and
// lengths lie inside the input (or the inflated stream), whose datasets are sorted by tag, and
// whose accessors throw nothing but voxpipe::Error. read_dicom on the same bytes as a file must
// agree with parse_dicom. Files that parse go on through the pixel layer: dicom_pixel_info and
// the decoding of every frame (native, deflated, and the encapsulated codecs), stored values and
// the modality transform, which may refuse with voxpipe::Error and nothing else.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "voxpipe/dicom.hpp"
#include "voxpipe/error.hpp"

namespace {

using namespace voxpipe;

void check_dataset(const DicomDataset& ds, std::uint64_t limit, unsigned depth) {
  if (depth > 64) std::abort();
  DicomTag previous = 0;
  bool first = true;
  for (const DicomElement& e : ds.elements()) {
    if (!first && e.tag <= previous) std::abort();
    first = false;
    previous = e.tag;
    if (e.value_offset > limit) std::abort();
    if (e.value_read && e.value.size() != e.length) std::abort();
    if (e.length != kDicomUndefinedLength && e.value_offset + e.length > limit) std::abort();
    if (e.items.size() != e.item_offsets.size()) std::abort();
    // The accessors may refuse a value, never crash on one.
    try {
      (void)ds.strings(e.tag);
      (void)ds.numbers(e.tag);
      (void)ds.integers(e.tag);
    } catch (const Error&) {
    }
    for (const DicomDataset& item : e.items) check_dataset(item, limit, depth + 1);
  }
}

void check(const DicomFile& f, std::size_t size) {
  // Offsets in an inflated stream may exceed the input size (at most by the inflate ratio).
  const std::uint64_t limit =
      f.offsets_in_inflated_stream ? std::uint64_t{size} * 1100 + 4096 : size;
  check_dataset(f.meta, size, 0);
  check_dataset(f.dataset, limit, 0);
  if (f.pixel_data) {
    const DicomPixelData& p = *f.pixel_data;
    if (p.offset + p.length > limit) std::abort();
    for (const DicomFragment& fr : p.fragments)
      if (fr.offset < p.offset || fr.offset + fr.length > p.offset + p.length) std::abort();
    if (!p.encapsulated && (!p.fragments.empty() || !p.basic_offset_table.empty())) std::abort();
  }
}

// The pixel layer on a parsed file. Outputs are bounded so that each input stays fast; the
// pixel layer itself refuses frames the encoded bytes cannot justify.
void check_pixels(const DicomFile& f, std::span<const std::uint8_t> bytes) {
  if (!f.pixel_data) return;
  try {
    const DicomPixelInfo info = dicom_pixel_info(f, bytes);
    if (info.frame_bytes == 0 || info.number_of_frames == 0) std::abort();
    if (info.frame_bytes * info.number_of_frames > (std::uint64_t{8} << 20)) return;
    DicomDecodeOptions options;
    options.threads = 1;
    std::vector<std::uint8_t> out(info.frame_bytes * info.number_of_frames);
    const auto warnings =
        decode_dicom_frames(f, info, 0, info.number_of_frames, out, options, bytes);
    // Damage decoded past: the frames a default decode accepts come back the same, with the same
    // warnings (pydicom-style notes only: damage was an error above).
    DicomDecodeOptions recover = options;
    recover.on_corrupt = DicomOnCorrupt::warn;
    std::vector<std::uint8_t> recovered(out.size());
    if (decode_dicom_frames(f, info, 0, info.number_of_frames, recovered, recover, bytes) !=
            warnings ||
        recovered != out)
      std::abort();
    options.modality = DType::f64;
    options.as_rgb = false;
    std::vector<std::uint8_t> scaled(dicom_output_frame_bytes(info, options));
    decode_dicom_frames(f, info, 0, 1, scaled, options, bytes);
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> bytes(data, size);
  DicomReadOptions options;
  options.stop_at_pixel_data = size % 2 == 0;
  options.max_value_size = size % 3 == 0 ? 16 : 1 << 20;
  options.max_inflated_size = 1 << 22;
  std::string parsed_error;
  std::size_t parsed_elements = 0;
  try {
    const DicomFile f = parse_dicom(bytes, "fuzz.dcm", options);
    check(f, size);
    parsed_elements = f.dataset.elements().size();
    check_pixels(f, bytes);
  } catch (const Error& e) {
    parsed_error = error_code_name(e.code());
  }
  // The file path must give the same answer (a few inputs only: it costs a file write).
  if (size % 16 == 0) {
    const std::string path = vpfuzz::scratch_file("in.dcm");
    vpfuzz::write_bytes(path, data, size);
    try {
      const DicomFile f = read_dicom(path, options);
      if (!parsed_error.empty() || f.dataset.elements().size() != parsed_elements) std::abort();
    } catch (const Error& e) {
      if (parsed_error != error_code_name(e.code())) std::abort();
    }
  }
  return 0;
}
