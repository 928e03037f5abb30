// JPEG Baseline and Extended frames with 8-bit samples (1.2.840.10008.1.2.4.50 / .51) through
// libjpeg-turbo's libjpeg API, from memory, with the values pydicom 3 gives with its first
// plugin, GDCM:
// - the photometric interpretation follows pydicom's _conform_jpg_colorspace (component ids
//   "RGB", JFIF marker);
// - for YBR_* GDCM keeps the decoded YCbCr (no colour conversion in libjpeg) and pydicom converts
//   with its own matrix, so those frames are written as YCbCr and reported as YBR_FULL(_422);
// - otherwise GDCM takes the samples as RGB as stored, whatever libjpeg would guess from the
//   component ids or an Adobe marker: no conversion either; reported as RGB.
// 12-bit samples need libjpeg-turbo 3's 12-bit API (Debian 12 has 2.1): those frames go to our own
// decoder, decode_jpeg12_frame (jpeg12.cpp).
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#if VOXPIPE_HAVE_LIBJPEG
#include <jerror.h>
#include <jpeglib.h>
#endif

#include "dicom/codecs/codec.hpp"
#include "dicom/codecs/codec_support.hpp"
#include "dicom/codecs/jpeg12.hpp"

namespace voxpipe::dicom {

const bool kJpegLibraryBuilt = VOXPIPE_HAVE_LIBJPEG;

#if VOXPIPE_HAVE_LIBJPEG

namespace {

using codec_support::fail;

// damaged: a warning of damage stopped the decode (FrameSpec::recover_corrupt false).
enum class JobResult { ok, corrupt, damaged, format, unsupported };

// Everything the setjmp scope touches is plain data: a longjmp must not skip destructors.
struct JpegJob {
  const std::uint8_t* src;
  std::size_t size;
  std::uint8_t* dst;  // rows * columns * samples bytes
  std::uint32_t rows, columns, samples;
  bool keep_ycc;
  bool recover;  // FrameSpec::recover_corrupt
  JobResult result = JobResult::ok;
  char message[JMSG_LENGTH_MAX + 64] = {};
  // Damage decoded past (recover only): how many warnings, and the first one's text.
  unsigned damage_count = 0;
  char damage[JMSG_LENGTH_MAX] = {};
};

struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  JobResult result;
  char message[JMSG_LENGTH_MAX];
  JpegJob* job;
  bool finishing;  // every scanline is out; jpeg_finish_decompress reads up to EOI
};

[[noreturn]] void on_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  err->result = cinfo->err->msg_code == JERR_BAD_PRECISION ? JobResult::unsupported
                                                           : JobResult::corrupt;
  std::longjmp(err->jump, 1);
}

// libjpeg decodes past damage with a warning (level -1) and nothing else to show for it: the
// "Corrupt JPEG data: ..." family (bad Huffman code, premature end of data segment, extraneous
// bytes before a marker, a wrong RST marker), invalid scan parameters, and data that run out
// (it pads with zeros: the frame is truncated). TurboJPEG reports them all as TJERR_WARNING.
// Here they are damage (FrameSpec::recover_corrupt decides), except
//  - an unknown JFIF revision or Adobe transform code: metadata this decode does not use (the
//    colour space is set below, as GDCM sets it);
//  - the end of the data while jpeg_finish_decompress looks for EOI after the last scanline:
//    every sample is out, and encoders that leave EOI out exist;
// and data that run out before the last scanline are always an error.
void on_emit_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  const int code = cinfo->err->msg_code;
  if (code == JWRN_JFIF_MAJOR || code == JWRN_ADOBE_XFORM) return;
  if (code == JWRN_JPEG_EOF) {
    if (err->finishing) return;
    on_error_exit(cinfo);
  }
  JpegJob& job = *err->job;
  if (!job.recover) {
    (*cinfo->err->format_message)(cinfo, err->message);
    err->result = JobResult::damaged;
    std::longjmp(err->jump, 1);
  }
  if (job.damage_count++ == 0) (*cinfo->err->format_message)(cinfo, job.damage);
}

void on_output_message(j_common_ptr) {}

void run_job(JpegJob& job) {
  jpeg_decompress_struct cinfo;
  std::memset(&cinfo, 0, sizeof cinfo);
  ErrorManager err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error_exit;
  err.pub.emit_message = on_emit_message;
  err.pub.output_message = on_output_message;
  err.result = JobResult::ok;
  err.job = &job;
  err.finishing = false;
  if (setjmp(err.jump) != 0) {
    jpeg_destroy_decompress(&cinfo);
    job.result = err.result;
    std::snprintf(job.message, sizeof job.message, "%s", err.message);
    return;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, job.src, static_cast<unsigned long>(job.size));
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.image_width != job.columns || cinfo.image_height != job.rows ||
      static_cast<std::uint32_t>(cinfo.num_components) != job.samples) {
    std::snprintf(job.message, sizeof job.message,
                  "expected a JPEG frame of %u x %u x %u (Rows x Columns x SamplesPerPixel), "
                  "but the codestream has %u x %u x %d",
                  job.rows, job.columns, job.samples, cinfo.image_height, cinfo.image_width,
                  cinfo.num_components);
    jpeg_destroy_decompress(&cinfo);
    job.result = JobResult::format;
    return;
  }
  if (job.samples == 1) {
    cinfo.out_color_space = JCS_GRAYSCALE;
  } else if (job.keep_ycc) {
    cinfo.jpeg_color_space = JCS_UNKNOWN;
    cinfo.out_color_space = JCS_UNKNOWN;
  } else {
    // libjpeg guesses YCbCr for component ids other than "RGB" and for an Adobe marker with
    // transform 1; GDCM follows the dataset's RGB instead and converts nothing
    // (SC_jpeg_no_color_transform.dcm; an Adobe transform-1 stream in the tests).
    cinfo.jpeg_color_space = JCS_RGB;
    cinfo.out_color_space = JCS_RGB;
  }
  jpeg_start_decompress(&cinfo);
  if (static_cast<std::uint32_t>(cinfo.output_components) != job.samples ||
      cinfo.output_width != job.columns || cinfo.output_height != job.rows) {
    std::snprintf(job.message, sizeof job.message,
                  "expected %u components per pixel, but libjpeg gives %d", job.samples,
                  cinfo.output_components);
    jpeg_destroy_decompress(&cinfo);
    job.result = JobResult::format;
    return;
  }
  const std::size_t stride = std::size_t{job.columns} * job.samples;
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = job.dst + std::size_t{cinfo.output_scanline} * stride;
    if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) {
      // Only a suspending source returns 0 lines; the memory source never suspends.
      std::snprintf(job.message, sizeof job.message, "libjpeg returned no scanline");
      jpeg_destroy_decompress(&cinfo);
      job.result = JobResult::corrupt;
      return;
    }
  }
  // The rest of the scan up to EOI: damage there (bytes left over in the entropy-coded data
  // after the last block, which a burst of damage inside it often leaves) is only seen here.
  err.finishing = true;
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
}

}  // namespace

FrameOutcome decode_jpeg_frame(std::span<const std::uint8_t> src, const FrameSpec& spec,
                               std::span<std::uint8_t> out) {
  const std::uint64_t count = codec_support::checked_sample_count(spec, out);
  const codec_support::JpegMarkerInfo info = codec_support::read_jpeg_markers(src);
  if (info.parsed && info.precision == 12) return decode_jpeg12_frame(src, spec, out);
  if (info.parsed && info.precision != 8) {
    fail(spec, ErrorCode::unsupported,
         "expected 8 or 12-bit JPEG samples, but the codestream has " +
             std::to_string(info.precision) + "-bit samples");
  }
  // pydicom's YBR_FULL_422 for a JFIF marker is for the Baseline syntax; the codestream's SOF0
  // is what says Baseline here (the contract does not pass the transfer syntax).
  const bool baseline = info.sof == 0xC0;
  FrameOutcome outcome;
  outcome.photometric = codec_support::conform_jpeg_photometric(info, spec, baseline);
  const bool keep_ycc = spec.samples == 3 && outcome.photometric.find("YBR") != std::string::npos;
  if (spec.samples == 3 && !keep_ycc) outcome.photometric = "RGB";

  std::vector<std::uint8_t> widened;
  std::uint8_t* dst = out.data();
  if (spec.bits_allocated != 8) {
    widened.resize(count);
    dst = widened.data();
  }
  JpegJob job{src.data(), src.size(), dst, spec.rows, spec.columns, spec.samples, keep_ycc,
              spec.recover_corrupt};
  run_job(job);
  switch (job.result) {
    case JobResult::ok:
      break;
    case JobResult::format:
      fail(spec, ErrorCode::format, job.message);
    case JobResult::unsupported:
      fail(spec, ErrorCode::unsupported,
           std::string("JPEG: ") + job.message + " (12-bit lossy JPEG needs libjpeg-turbo 3)");
    case JobResult::corrupt:
      fail(spec, ErrorCode::corrupt, std::string("JPEG: ") + job.message);
    case JobResult::damaged:
      codec_support::damaged(spec, outcome, std::string("JPEG: ") + job.message);
      break;
  }
  if (job.damage_count != 0) {
    std::string warning = std::string("JPEG: ") + job.damage;
    if (job.damage_count > 1)
      warning += " (and " + std::to_string(job.damage_count - 1) + " more libjpeg warnings)";
    codec_support::damaged(spec, outcome, std::move(warning));
  }
  if (spec.bits_allocated != 8) {
    for (std::uint64_t i = 0; i < count; ++i) {
      // GDCM writes the 8-bit samples into BitsAllocated words by value (signed when PR 1).
      const std::int64_t v = codec_support::as_width(widened[i], 8, spec.is_signed);
      codec_support::store_sample(out, i, v, spec.bits_allocated);
    }
  }
  return outcome;
}

#else  // VOXPIPE_HAVE_LIBJPEG

// 12-bit frames never reach libjpeg (jpeg12.cpp decodes them), so they still decode here.
FrameOutcome decode_jpeg_frame(std::span<const std::uint8_t> src, const FrameSpec& spec,
                               std::span<std::uint8_t> out) {
  codec_support::checked_sample_count(spec, out);
  const codec_support::JpegMarkerInfo info = codec_support::read_jpeg_markers(src);
  if (info.parsed && info.precision == 12) return decode_jpeg12_frame(src, spec, out);
  codec_support::fail_not_built(
      spec, "JPEG Baseline / Extended (transfer syntaxes 1.2.840.10008.1.2.4.50 / .51)",
      "libjpeg-turbo", "libjpeg62-turbo-dev");
}

#endif  // VOXPIPE_HAVE_LIBJPEG

}  // namespace voxpipe::dicom
