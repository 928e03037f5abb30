// parse_nifti_header on arbitrary bytes: it either returns a header or throws voxpipe::Error;
// anything else (crash, sanitizer report, other exception) is a bug. A header it accepts, once
// encoded, must parse again to the same bytes, and its affine must be computable or refused
// with a voxpipe::Error.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  voxpipe::ParsedHeader parsed;
  try {
    parsed = voxpipe::parse_nifti_header(std::span(data, size), "fuzz.nii");
  } catch (const voxpipe::Error&) {
    return 0;
  }
  const voxpipe::NiftiHeader& h = parsed.header;
  // The fixed header is a fixed point: encode -> parse -> encode gives the same bytes (a throw
  // here escapes and is reported as a crash).
  const auto bytes = voxpipe::encode_nifti_header(h);
  if (bytes.size() != h.header_size()) std::abort();
  const voxpipe::ParsedHeader again = voxpipe::parse_nifti_header(bytes, "fuzz.nii");
  if (again.header.version != h.version || again.header.big_endian != h.big_endian) std::abort();
  if (voxpipe::encode_nifti_header(again.header) != bytes) std::abort();
  try {
    (void)voxpipe::nifti_best_affine(h, "fuzz.nii");
    (void)voxpipe::nifti_base_affine(h);
  } catch (const voxpipe::Error&) {
  }
  return 0;
}
