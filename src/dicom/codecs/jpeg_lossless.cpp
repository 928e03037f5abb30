// JPEG Lossless, process 14 (ITU-T T.81 Annex H: SOF3, Huffman coding, predictors 1-7, point
// transform, restart intervals, 2-16 bit samples, 1-4 components in interleaved or separate
// scans). Our own code: Debian 12's libjpeg-turbo (2.1) has no lossless mode, and no other
// packaged library decodes it; the process is small (a Huffman-coded difference per sample).
//
// The references are pydicom 3's two plugins for these syntaxes, GDCM (tried first) and
// pylibjpeg-libjpeg (Thomas Richter's libjpeg); they agree, and this decoder with them, on every
// stream with point transform 0 and restart intervals of whole lines. Where the standard leaves
// room:
//   - Huffman category 16 means a difference of 32768 with no additional bits (some old 16-bit
//     encoders use it); categories above 16 are corrupt (as libjpeg has them);
//   - a sample is UINT16(difference + prediction); predictors 5 and 6 halve a signed difference
//     (arithmetic shift), 7 halves the sum of A and B;
//   - the first sample of the image and of each restart interval is predicted by
//     2^(P - Pt - 1), the rest of that line by A, the first sample of each later line by B;
//   - with a point transform Pt > 0 the output is the sample << Pt, as T.81 and GDCM have it
//     (libjpeg predicts the first sample by 2^(P - 1) instead and clamps: other values);
//   - a restart interval that is not a whole number of lines is refused as unsupported (GDCM
//     refuses it too; T.81 H.1.2.1 only defines the prediction for whole lines).
// Entropy-coded data that ends (or meets a marker) before the scan is complete is corrupt; bytes
// left over before an RSTn or after a scan, and an RSTn out of order, are damage decoded past
// (FrameSpec::recover_corrupt), as libjpeg warns about them.
// The photometric interpretation follows pydicom's DecodeRunner._conform_jpg_colorspace:
// component ids 'R','G','B' (or 'r','g','b') mean RGB, a JFIF APP segment before the frame
// header YBR_FULL.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dicom/codecs/codec.hpp"
#include "dicom/codecs/jpeg_entropy.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::dicom {
namespace {

using namespace jpeg_entropy;

inline std::int32_t decode_difference(BitReader& r, const HuffmanTable& t, const Context& ctx) {
  const int category = decode_symbol(r, t, ctx);
  if (category == 0) return 0;
  if (category == 16) return 32768;
  if (category > 16)
    ctx.corrupt("Huffman category " + std::to_string(category) + " in a lossless scan");
  const std::int32_t bits = static_cast<std::int32_t>(r.take(category));
  return bits < (std::int32_t{1} << (category - 1)) ? bits - (std::int32_t{1} << category) + 1
                                                    : bits;
}

struct Component {
  std::uint8_t id = 0;
  std::uint8_t sampling = 0x11;
  bool decoded = false;
  int pt = 0;  // the point transform of the scan that decoded it
};

struct Frame {
  bool present = false;
  int precision = 0;
  std::uint32_t rows = 0, columns = 0;
  std::vector<Component> components;
};

struct ScanComponent {
  std::size_t index;  // into Frame::components, = position in the interleaved sample buffer
  const HuffmanTable* table;
};

// Decodes one scan into `samples` (rows x columns x Nf values, colour-by-pixel, not yet shifted
// by Pt); returns where the entropy-coded data ended.
const std::uint8_t* decode_scan(const std::uint8_t* data, const std::uint8_t* end,
                                const Frame& frame, const ScanComponent* comps, std::size_t ns,
                                int predictor, int pt, std::uint32_t restart_interval,
                                std::vector<std::uint16_t>& samples, const Context& ctx) {
  const std::size_t nf = frame.components.size();
  const std::size_t columns = frame.columns, rows = frame.rows;
  const std::size_t row_stride = columns * nf;
  const std::int32_t neutral = std::int32_t{1} << (frame.precision - pt - 1);
  if (restart_interval % columns != 0)
    ctx.fail(ErrorCode::unsupported, "a restart interval of " + std::to_string(restart_interval) +
                                         " MCUs, not a whole number of lines of " +
                                         std::to_string(columns));
  BitReader reader(data, end);
  std::uint64_t mcus_left = restart_interval ? restart_interval : UINT64_MAX;
  std::uint32_t restarts = 0;  // restart intervals ended: the next RSTn is RST(restarts % 8)
  bool fresh = true;        // the next sample starts the image or a restart interval
  std::size_t first_row = 0;  // the row in which the current restart interval started

  for (std::size_t y = 0; y < rows; ++y) {
    std::uint16_t* line = samples.data() + y * row_stride;
    const std::uint16_t* above = y ? line - row_stride : nullptr;
    for (std::size_t x = 0; x < columns; ++x) {
      if (mcus_left == 0) {
        reader = BitReader(next_restart(reader, end, restarts, ctx), end);
        mcus_left = restart_interval;
        fresh = true;
        first_row = y;
      }
      --mcus_left;
      for (std::size_t s = 0; s < ns; ++s) {
        const std::size_t c = comps[s].index;
        if (reader.count() < 32) reader.refill();
        const std::int32_t diff = decode_difference(reader, *comps[s].table, ctx);
        std::int32_t prediction;
        std::uint16_t* here = line + x * nf + c;
        if (fresh) {
          prediction = neutral;
        } else if (y == first_row) {
          prediction = here[-static_cast<std::ptrdiff_t>(nf)];
        } else if (x == 0) {
          prediction = above[c];
        } else {
          const std::int32_t a = here[-static_cast<std::ptrdiff_t>(nf)];
          const std::int32_t b = above[x * nf + c];
          const std::int32_t cc = above[(x - 1) * nf + c];
          switch (predictor) {
            case 1: prediction = a; break;
            case 2: prediction = b; break;
            case 3: prediction = cc; break;
            case 4: prediction = a + b - cc; break;
            case 5: prediction = a + ((b - cc) >> 1); break;
            case 6: prediction = b + ((a - cc) >> 1); break;
            default: prediction = (a + b) >> 1; break;
          }
        }
        *here = static_cast<std::uint16_t>(prediction + diff);
      }
      fresh = false;
    }
    if (reader.overran()) ctx.corrupt("entropy-coded data ends before the scan is complete");
  }
  check_scan_end(reader, end, ctx);
  return reader.position();
}

}  // namespace

FrameOutcome decode_jpeg_lossless_frame(std::span<const std::uint8_t> src, const FrameSpec& spec,
                                        std::span<std::uint8_t> out) {
  FrameOutcome outcome{std::string(spec.photometric), false, {}};
  const Context ctx{spec, outcome};
  const std::uint32_t element = spec.bits_allocated / 8;
  if (spec.bits_allocated != 8 && spec.bits_allocated != 16 && spec.bits_allocated != 32)
    ctx.fail(ErrorCode::unsupported, "expected BitsAllocated 8, 16 or 32 for JPEG Lossless, but "
                                     "found " + std::to_string(spec.bits_allocated));
  if (spec.samples < 1 || spec.samples > 4)
    ctx.fail(ErrorCode::format, "expected SamplesPerPixel 1 to 4, but found " +
                                    std::to_string(spec.samples));
  const std::size_t values = std::size_t{spec.rows} * spec.columns * spec.samples;
  if (spec.rows != 0 && values / spec.rows / spec.samples != spec.columns)
    ctx.fail(ErrorCode::limit, "Rows x Columns overflows");
  if (values > SIZE_MAX / element || out.size() != values * element)
    ctx.fail(ErrorCode::invalid_argument,
             "expected an output buffer of Rows x Columns x SamplesPerPixel x BitsAllocated / 8 "
             "bytes, but found " + std::to_string(out.size()));

  const std::uint8_t* const begin = src.data();
  const std::uint8_t* const end = begin + src.size();
  if (src.size() < 2 || begin[0] != 0xFF || begin[1] != 0xD8)
    ctx.corrupt("expected the JPEG SOI marker (FF D8) at the start of the frame");

  std::array<HuffmanTable, 4> tables;
  Frame frame;
  std::uint32_t restart_interval = 0;
  bool jfif = false;
  std::vector<std::uint16_t> samples;
  const std::uint8_t* p = begin + 2;
  bool ended = false;
  while (!ended) {
    // Find the next marker; bytes between segments (padding after a scan) are skipped.
    while (p < end && *p != 0xFF) ++p;
    while (p + 1 < end && p[1] == 0xFF) ++p;  // fill bytes
    if (p + 1 >= end) break;
    const std::uint8_t marker = p[1];
    p += 2;
    if (marker == 0xD9) {
      ended = true;
      break;
    }
    if (marker == 0x00 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) continue;
    if (end - p < 2) ctx.corrupt("marker segment without its length");
    const std::uint32_t length = be16(p);
    if (length < 2 || length > static_cast<std::size_t>(end - p))
      ctx.corrupt("marker segment length " + std::to_string(length) + " runs past the frame");
    const std::uint8_t* const body = p + 2;
    const std::size_t size = length - 2;
    p += length;

    if (marker == 0xC3) {
      if (frame.present) ctx.corrupt("a second SOF marker");
      if (size < 6) ctx.corrupt("SOF3 segment too short");
      frame.present = true;
      frame.precision = body[0];
      frame.rows = be16(body + 1);
      frame.columns = be16(body + 3);
      const std::size_t nf = body[5];
      if (nf == 0 || size != 6 + 3 * nf) ctx.corrupt("SOF3 segment length does not match its components");
      if (frame.precision < 2 || frame.precision > 16)
        ctx.corrupt("SOF3 precision " + std::to_string(frame.precision) + " outside 2..16");
      if (frame.rows == 0)
        ctx.fail(ErrorCode::unsupported, "a frame height defined by a DNL marker");
      if (frame.columns == 0) ctx.corrupt("SOF3 with zero columns");
      for (std::size_t i = 0; i < nf; ++i) {
        Component c;
        c.id = body[6 + 3 * i];
        c.sampling = body[7 + 3 * i];
        for (const Component& other : frame.components)
          if (other.id == c.id) ctx.corrupt("two frame components with the same id");
        frame.components.push_back(c);
      }
      if (frame.rows != spec.rows || frame.columns != spec.columns || nf != spec.samples)
        ctx.fail(ErrorCode::format,
                 "expected " + std::to_string(spec.rows) + " x " + std::to_string(spec.columns) +
                     " x " + std::to_string(spec.samples) + " samples, but the JPEG frame has " +
                     std::to_string(frame.rows) + " x " + std::to_string(frame.columns) + " x " +
                     std::to_string(nf));
      if (frame.precision > static_cast<int>(spec.bits_allocated))
        ctx.fail(ErrorCode::format, "JPEG precision " + std::to_string(frame.precision) +
                                        " exceeds BitsAllocated " +
                                        std::to_string(spec.bits_allocated));
      for (const Component& c : frame.components)
        if (c.sampling != 0x11 && nf > 1)
          ctx.fail(ErrorCode::unsupported, "subsampled components in a lossless JPEG");
      samples.assign(values, 0);
    } else if ((marker >= 0xC0 && marker <= 0xCF) && marker != 0xC4 && marker != 0xC8 &&
               marker != 0xCC) {
      ctx.fail(ErrorCode::unsupported,
               "expected a lossless JPEG (SOF3), but found SOF" + std::to_string(marker - 0xC0));
    } else if (marker == 0xC4) {
      std::size_t at = 0;
      while (at < size) {
        if (size - at < 17) ctx.corrupt("bad Huffman table: DHT segment too short");
        const std::uint8_t tc_th = body[at];
        std::size_t total = 0;
        for (int i = 0; i < 16; ++i) total += body[at + 1 + i];
        if (total > 256 || size - at - 17 < total)
          ctx.corrupt("bad Huffman table: more symbols than the DHT segment holds");
        if ((tc_th & 0x0F) > 3 || (tc_th >> 4) > 1)
          ctx.corrupt("bad Huffman table: class or id out of range");
        if ((tc_th >> 4) == 0)  // lossless scans use only the DC-class tables
          build_table(tables[tc_th & 0x0F], body + at + 1, body + at + 17, total, ctx);
        at += 17 + total;
      }
    } else if (marker == 0xDD) {
      if (size != 2) ctx.corrupt("DRI segment length is not 4");
      restart_interval = be16(body);
    } else if (marker >= 0xE0 && marker <= 0xEF) {
      // pydicom looks at the APP segments before the frame header only.
      if (!frame.present && size >= 4 && std::memcmp(body, "JFIF", 4) == 0) jfif = true;
    } else if (marker == 0xDA) {
      if (!frame.present) ctx.corrupt("SOS before SOF3");
      if (size < 1) ctx.corrupt("SOS segment too short");
      const std::size_t ns = body[0];
      if (ns == 0 || ns > frame.components.size() || size != 4 + 2 * ns)
        ctx.corrupt("SOS segment length does not match its components");
      std::array<ScanComponent, 4> comps{};
      for (std::size_t i = 0; i < ns; ++i) {
        const std::uint8_t id = body[1 + 2 * i];
        const std::size_t td = body[2 + 2 * i] >> 4;
        std::size_t index = frame.components.size();
        for (std::size_t j = 0; j < frame.components.size(); ++j)
          if (frame.components[j].id == id) index = j;
        if (index == frame.components.size()) ctx.corrupt("SOS names a component not in SOF3");
        for (std::size_t j = 0; j < i; ++j)
          if (comps[j].index == index) ctx.corrupt("SOS names a component twice");
        if (frame.components[index].decoded) ctx.corrupt("a second scan of one component");
        if (td > 3 || !tables[td].defined) ctx.corrupt("SOS uses an undefined Huffman table");
        comps[i] = ScanComponent{index, &tables[td]};
      }
      const int predictor = body[1 + 2 * ns];
      const int pt = body[3 + 2 * ns] & 0x0F;
      if (predictor < 1 || predictor > 7)
        ctx.corrupt("lossless predictor " + std::to_string(predictor) + " outside 1..7");
      if (pt >= frame.precision) ctx.corrupt("point transform not below the precision");
      if (ns == 1 && frame.components[comps[0].index].sampling != 0x11 &&
          frame.components.size() > 1)
        ctx.fail(ErrorCode::unsupported, "subsampled components in a lossless JPEG");
      p = decode_scan(p, end, frame, comps.data(), ns, predictor, pt, restart_interval, samples,
                      ctx);
      for (std::size_t i = 0; i < ns; ++i) {
        frame.components[comps[i].index].decoded = true;
        frame.components[comps[i].index].pt = pt;  // applied on output
      }
    }
    // DQT, DAC, COM, DNL, DHP, EXP, JPGn and reserved markers: skipped.
  }
  if (!frame.present) ctx.corrupt("no SOF3 frame header");
  for (const Component& c : frame.components)
    if (!c.decoded) ctx.corrupt("no scan for component " + std::to_string(c.id));

  // Output: UINT16 << Pt, in the element type (precision <= bits_allocated was checked).
  const std::size_t nf = frame.components.size();
  std::array<int, 4> shift{};
  for (std::size_t c = 0; c < nf; ++c) shift[c] = frame.components[c].pt;
  const std::uint32_t max_value = (std::uint32_t{1} << frame.precision) - 1;
  const bool any_shift = std::any_of(shift.begin(), shift.end(), [](int s) { return s != 0; });
  std::uint8_t* o = out.data();
  if (element == 2 && !any_shift) {  // the common case: the samples are the output
    std::memcpy(o, samples.data(), values * 2);
  } else {
    for (std::size_t i = 0; i < values; ++i) {
      std::uint32_t v = samples[i];
      if (any_shift) v = std::min<std::uint32_t>(v << shift[i % nf], max_value);
      if (element == 1) {
        o[i] = static_cast<std::uint8_t>(v);
      } else if (element == 2) {
        const std::uint16_t w = static_cast<std::uint16_t>(v);
        std::memcpy(o + 2 * i, &w, 2);
      } else {
        std::memcpy(o + 4 * i, &v, 4);
      }
    }
  }

  if (spec.samples == 3) {
    std::array<std::uint8_t, 3> ids{frame.components[0].id, frame.components[1].id,
                                    frame.components[2].id};
    const bool rgb_ids = ids == std::array<std::uint8_t, 3>{'R', 'G', 'B'} ||
                         ids == std::array<std::uint8_t, 3>{'r', 'g', 'b'};
    if (rgb_ids) {
      outcome.photometric = "RGB";
    } else if (jfif && spec.photometric.find("YBR") == std::string_view::npos) {
      outcome.photometric = "YBR_FULL";
    }
  }
  return outcome;
}

}  // namespace voxpipe::dicom
