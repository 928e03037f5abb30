// 12-bit lossy JPEG: JPEG Extended, process 4 (ITU-T T.81: sequential DCT, Huffman coding, 12-bit
// samples, SOF0/SOF1), for DICOM's 1.2.840.10008.1.2.4.51 with one component (CT, MR). Our own
// code: Debian 12's libjpeg-turbo (2.1) has no 12-bit mode (its 12-bit API came with 3.0) and
// its 8-bit build refuses these streams.
//
// The reference is pydicom 3's pixel_array with its plugins. GDCM, tried first, refuses 12-bit
// JPEG Extended, so pydicom's values come from pylibjpeg-libjpeg (Thomas Richter's libjpeg).
// This decoder repeats that library's integer arithmetic, so the values are the same bit for bit:
//   - dequantization: coefficient x (quantizer << 4), the 4 fraction bits its colour transform
//     carries;
//   - the inverse DCT: the Loeffler-Ligtenberg-Moschytz factorization (as IJG's jidctint.c) with
//     constants of 9 fraction bits, rows first, each row output rounded back to integers
//     ((x + 256) >> 9), each column output rounded by (x + 2^11) >> 12 (the 9 fraction bits and
//     the DCT's scale of 8);
//   - output: the level shift 2048, the 4 fraction bits removed with rounding ((x + 8) >> 4),
//     clamped to 0..4095.
// A dequantized coefficient is limited to +-2^24 so that int64 arithmetic cannot overflow on
// hostile input; a conforming 12-bit stream never comes near (its DCT values are within +-2^15).
// Scans other than Ss 0, Se 63, Ah 0, Al 0 are corrupt for a sequential frame, as libjpeg has them
// (pydicom refuses JPEG-lossy.dcm, whose scan ends at Se 0). Restart intervals (DRI / RSTn) are
// supported; entropy-coded data that ends (or meets a marker) before the scan is complete is
// corrupt; bytes left over before an RSTn or after the scan, and an RSTn out of order, are damage
// decoded past (FrameSpec::recover_corrupt), as libjpeg warns about them. Three components,
// progressive, lossless, hierarchical and arithmetic-coded frames are refused as unsupported.
#include "dicom/codecs/jpeg12.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>

#include "dicom/codecs/codec_support.hpp"
#include "dicom/codecs/jpeg_entropy.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::dicom {
namespace {

using namespace jpeg_entropy;

// The value of `category` additional bits (T.81 F.2.2.1, EXTEND).
inline std::int32_t extend(std::uint32_t bits, int category) {
  if (category == 0) return 0;
  const auto v = static_cast<std::int32_t>(bits);
  return v < (std::int32_t{1} << (category - 1)) ? v - (std::int32_t{1} << category) + 1 : v;
}

// Zig-zag position -> natural (row-major) position in the 8x8 block.
constexpr std::array<std::uint8_t, 64> kNaturalOrder = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33, 40, 48,
    41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23,
    30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63};

// Fixed-point constants with 9 fraction bits, rounded as the reference rounds them.
constexpr std::int64_t fix(double x) { return static_cast<std::int64_t>(x * 512.0 + 0.5); }
constexpr std::int64_t k0541 = fix(0.541196100), k0765 = fix(0.765366865),
                       k1847 = fix(1.847759065), k1175 = fix(1.175875602),
                       k0298 = fix(0.298631336), k2053 = fix(2.053119869),
                       k3072 = fix(3.072711026), k1501 = fix(1.501321110),
                       k0899 = fix(0.899976223), k2562 = fix(2.562915447),
                       k1961 = fix(1.961570560), k0390 = fix(0.390180644);
constexpr int kFixBits = 9;
constexpr int kColorBits = 4;  // fraction bits of the dequantized values and the IDCT output

// One 8-point inverse DCT of in[0], in[stride], ... in[7 * stride] (integers) into
// out[0], out[stride], ... scaled by 2^9 before `round_shift` is removed with rounding.
inline void idct_1d(const std::int64_t* in, std::int64_t* out, int stride, int round_shift) {
  const auto at = [&](int i) { return in[i * stride]; };
  const std::int64_t half = std::int64_t{1} << (round_shift - 1);
  // Even part.
  const std::int64_t z1 = (at(2) + at(6)) * k0541;
  const std::int64_t e2 = z1 - at(6) * k1847;
  const std::int64_t e3 = z1 + at(2) * k0765;
  const std::int64_t e0 = (at(0) + at(4)) * (std::int64_t{1} << kFixBits);
  const std::int64_t e1 = (at(0) - at(4)) * (std::int64_t{1} << kFixBits);
  const std::int64_t t10 = e0 + e3, t13 = e0 - e3, t11 = e1 + e2, t12 = e1 - e2;
  // Odd part.
  const std::int64_t o0 = at(7), o1 = at(5), o2 = at(3), o3 = at(1);
  const std::int64_t z5 = (o0 + o2 + o1 + o3) * k1175;
  const std::int64_t za = (o0 + o3) * -k0899;
  const std::int64_t zb = (o1 + o2) * -k2562;
  const std::int64_t zc = (o0 + o2) * -k1961 + z5;
  const std::int64_t zd = (o1 + o3) * -k0390 + z5;
  const std::int64_t d0 = o0 * k0298 + za + zc;
  const std::int64_t d1 = o1 * k2053 + zb + zd;
  const std::int64_t d2 = o2 * k3072 + zb + zc;
  const std::int64_t d3 = o3 * k1501 + za + zd;
  const auto round = [&](std::int64_t x) { return (x + half) >> round_shift; };
  out[0 * stride] = round(t10 + d3);
  out[7 * stride] = round(t10 - d3);
  out[1 * stride] = round(t11 + d2);
  out[6 * stride] = round(t11 - d2);
  out[2 * stride] = round(t12 + d1);
  out[5 * stride] = round(t12 - d1);
  out[3 * stride] = round(t13 + d0);
  out[4 * stride] = round(t13 - d0);
}

// Dequantizes and inverse-transforms one block of coefficients (natural order) into 64 samples
// of 0..4095.
void reconstruct_block(const std::array<std::int32_t, 64>& coefficients,
                       const std::array<std::uint16_t, 64>& quantizer,
                       std::array<std::uint16_t, 64>& samples) {
  constexpr std::int64_t kLimit = std::int64_t{1} << 24;
  std::array<std::int64_t, 64> block{};
  for (int i = 0; i < 64; ++i) {
    const std::int64_t v = std::clamp<std::int64_t>(
        std::int64_t{coefficients[i]} * quantizer[i], -kLimit, kLimit);
    block[i] = v * (std::int64_t{1} << kColorBits);
  }
  std::array<std::int64_t, 64> rows{};
  for (int y = 0; y < 8; ++y) idct_1d(block.data() + 8 * y, rows.data() + 8 * y, 1, kFixBits);
  std::array<std::int64_t, 64> columns{};
  for (int x = 0; x < 8; ++x) idct_1d(rows.data() + x, columns.data() + x, 8, kFixBits + 3);
  constexpr std::int64_t kLevelShift = 2048;
  for (int i = 0; i < 64; ++i) {
    const std::int64_t v =
        ((columns[i] + (std::int64_t{1} << (kColorBits - 1))) >> kColorBits) + kLevelShift;
    samples[i] = static_cast<std::uint16_t>(std::clamp<std::int64_t>(v, 0, 4095));
  }
}

// One 8x8 block's coefficients (T.81 F.2.2), in natural order; `dc` is the component's predictor.
void decode_block(BitReader& r, const HuffmanTable& dc_table, const HuffmanTable& ac_table,
                  std::int32_t& dc, std::array<std::int32_t, 64>& coefficients,
                  const Context& ctx) {
  coefficients.fill(0);
  if (r.count() < 32) r.refill();
  const int category = decode_symbol(r, dc_table, ctx);
  if (category > 15)
    ctx.corrupt("DC difference category " + std::to_string(category) + " above 15");
  const std::int32_t diff = extend(r.take(category), category);
  // Wrap-around as in a 32-bit register: hostile streams cannot overflow into undefined behaviour.
  dc = static_cast<std::int32_t>(static_cast<std::uint32_t>(dc) + static_cast<std::uint32_t>(diff));
  coefficients[0] = dc;
  for (int k = 1; k < 64;) {
    if (r.count() < 32) r.refill();
    const int symbol = decode_symbol(r, ac_table, ctx);
    const int run = symbol >> 4, size = symbol & 0x0F;
    if (size == 0) {
      if (run != 15) break;  // end of block
      k += 16;               // ZRL: sixteen zeros
      continue;
    }
    k += run;
    if (k > 63) ctx.corrupt("AC coefficients run past the end of the block");
    coefficients[kNaturalOrder[k]] = extend(r.take(size), size);
    ++k;
  }
}

struct Frame {
  bool present = false;
  std::uint32_t rows = 0, columns = 0;
  std::uint8_t id = 0;
  std::uint8_t quant_table = 0;
};

// Decodes the single-component scan into `out`; returns where the entropy-coded data ended.
const std::uint8_t* decode_scan(const std::uint8_t* data, const std::uint8_t* end,
                                const Frame& frame, const HuffmanTable& dc_table,
                                const HuffmanTable& ac_table,
                                const std::array<std::uint16_t, 64>& quantizer,
                                std::uint32_t restart_interval, std::span<std::uint8_t> out,
                                const Context& ctx) {
  const std::uint32_t block_rows = (frame.rows + 7) / 8, block_columns = (frame.columns + 7) / 8;
  BitReader reader(data, end);
  std::uint64_t mcus_left = restart_interval ? restart_interval : UINT64_MAX;
  std::uint32_t restarts = 0;  // restart intervals ended: the next RSTn is RST(restarts % 8)
  std::int32_t dc = 0;
  std::array<std::int32_t, 64> coefficients{};
  std::array<std::uint16_t, 64> samples{};
  for (std::uint32_t by = 0; by < block_rows; ++by) {
    for (std::uint32_t bx = 0; bx < block_columns; ++bx) {
      if (mcus_left == 0) {
        reader = BitReader(next_restart(reader, end, restarts, ctx), end);
        mcus_left = restart_interval;
        dc = 0;
      }
      --mcus_left;
      decode_block(reader, dc_table, ac_table, dc, coefficients, ctx);
      reconstruct_block(coefficients, quantizer, samples);
      const std::uint32_t y0 = by * 8, x0 = bx * 8;
      const std::uint32_t height = std::min<std::uint32_t>(8, frame.rows - y0);
      const std::uint32_t width = std::min<std::uint32_t>(8, frame.columns - x0);
      for (std::uint32_t y = 0; y < height; ++y)
        for (std::uint32_t x = 0; x < width; ++x)
          codec_support::store_sample(out, std::uint64_t{y0 + y} * frame.columns + x0 + x,
                                      samples[y * 8 + x], ctx.spec.bits_allocated);
    }
    if (reader.overran()) ctx.corrupt("entropy-coded data ends before the scan is complete");
  }
  check_scan_end(reader, end, ctx);
  return reader.position();
}

}  // namespace

FrameOutcome decode_jpeg12_frame(std::span<const std::uint8_t> src, const FrameSpec& spec,
                                 std::span<std::uint8_t> out) {
  FrameOutcome outcome{std::string(spec.photometric), false, {}};
  const Context ctx{spec, outcome};
  codec_support::checked_sample_count(spec, out);
  if (spec.samples != 1)
    ctx.fail(ErrorCode::unsupported,
             "12-bit lossy JPEG with " + std::to_string(spec.samples) + " samples per pixel");
  if (spec.bits_allocated < 16)
    ctx.fail(ErrorCode::format, "12-bit JPEG samples do not fit BitsAllocated " +
                                    std::to_string(spec.bits_allocated));

  const std::uint8_t* const begin = src.data();
  const std::uint8_t* const end = begin + src.size();
  if (src.size() < 2 || begin[0] != 0xFF || begin[1] != 0xD8)
    ctx.corrupt("expected the JPEG SOI marker (FF D8) at the start of the frame");

  std::array<HuffmanTable, 4> dc_tables, ac_tables;
  std::array<std::array<std::uint16_t, 64>, 4> quantizers{};  // natural order
  std::array<bool, 4> quantizer_defined{};
  Frame frame;
  std::uint32_t restart_interval = 0;
  const std::uint8_t* p = begin + 2;
  bool scanned = false;
  while (!scanned) {
    // Find the next marker; bytes between segments are skipped.
    while (p < end && *p != 0xFF) ++p;
    while (p + 1 < end && p[1] == 0xFF) ++p;  // fill bytes
    if (p + 1 >= end) break;
    const std::uint8_t marker = p[1];
    p += 2;
    if (marker == 0xD9) break;
    if (marker == 0x00 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) continue;
    if (end - p < 2) ctx.corrupt("marker segment without its length");
    const std::uint32_t length = be16(p);
    if (length < 2 || length > static_cast<std::size_t>(end - p))
      ctx.corrupt("marker segment length " + std::to_string(length) + " runs past the frame");
    const std::uint8_t* const body = p + 2;
    const std::size_t size = length - 2;
    p += length;

    if (marker == 0xC0 || marker == 0xC1) {
      if (frame.present) ctx.corrupt("a second SOF marker");
      if (size < 6) ctx.corrupt("SOF segment too short");
      const int precision = body[0];
      frame.rows = be16(body + 1);
      frame.columns = be16(body + 3);
      const std::size_t nf = body[5];
      if (nf == 0 || size != 6 + 3 * nf)
        ctx.corrupt("SOF segment length does not match its components");
      if (precision != 12)
        ctx.fail(ErrorCode::unsupported,
                 "expected 12-bit samples, but the codestream has " + std::to_string(precision));
      if (nf != 1)
        ctx.fail(ErrorCode::unsupported,
                 "12-bit lossy JPEG with " + std::to_string(nf) + " components");
      if (frame.rows == 0)
        ctx.fail(ErrorCode::unsupported, "a frame height defined by a DNL marker");
      if (frame.columns == 0) ctx.corrupt("SOF with zero columns");
      frame.id = body[6];
      frame.quant_table = body[8];
      if (frame.quant_table > 3) ctx.corrupt("SOF names quantization table " +
                                             std::to_string(frame.quant_table));
      if (frame.rows != spec.rows || frame.columns != spec.columns || nf != spec.samples)
        ctx.fail(ErrorCode::format,
                 "expected " + std::to_string(spec.rows) + " x " + std::to_string(spec.columns) +
                     " x " + std::to_string(spec.samples) + " samples, but the JPEG frame has " +
                     std::to_string(frame.rows) + " x " + std::to_string(frame.columns) + " x " +
                     std::to_string(nf));
      frame.present = true;
    } else if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 &&
               marker != 0xCC) {
      ctx.fail(ErrorCode::unsupported,
               "expected a sequential Huffman JPEG (SOF0 or SOF1), but found SOF" +
                   std::to_string(marker - 0xC0));
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
        auto& tables = (tc_th >> 4) == 0 ? dc_tables : ac_tables;
        build_table(tables[tc_th & 0x0F], body + at + 1, body + at + 17, total, ctx);
        at += 17 + total;
      }
    } else if (marker == 0xDB) {
      std::size_t at = 0;
      while (at < size) {
        const int pq = body[at] >> 4, tq = body[at] & 0x0F;
        if (pq > 1 || tq > 3) ctx.corrupt("bad quantization table: precision or id out of range");
        const std::size_t bytes = pq ? 128 : 64;
        if (size - at - 1 < bytes) ctx.corrupt("bad quantization table: DQT segment too short");
        for (std::size_t k = 0; k < 64; ++k)
          quantizers[tq][kNaturalOrder[k]] = static_cast<std::uint16_t>(
              pq ? be16(body + at + 1 + 2 * k) : body[at + 1 + k]);
        quantizer_defined[tq] = true;
        at += 1 + bytes;
      }
    } else if (marker == 0xDD) {
      if (size != 2) ctx.corrupt("DRI segment length is not 4");
      restart_interval = be16(body);
    } else if (marker == 0xDA) {
      if (!frame.present) ctx.corrupt("SOS before SOF");
      if (size < 1) ctx.corrupt("SOS segment too short");
      const std::size_t ns = body[0];
      if (ns != 1 || size != 4 + 2 * ns)
        ctx.corrupt("SOS segment length does not match its components");
      if (body[1] != frame.id) ctx.corrupt("SOS names a component not in the SOF");
      const std::size_t td = body[2] >> 4, ta = body[2] & 0x0F;
      if (td > 3 || !dc_tables[td].defined || ta > 3 || !ac_tables[ta].defined)
        ctx.corrupt("SOS uses an undefined Huffman table");
      if (body[3] != 0 || body[4] != 63 || body[5] != 0)
        ctx.corrupt("a sequential scan must have Ss 0, Se 63, Ah 0 and Al 0, but has Ss " +
                    std::to_string(body[3]) + ", Se " + std::to_string(body[4]) + ", Ah/Al " +
                    std::to_string(body[5]));
      if (!quantizer_defined[frame.quant_table])
        ctx.corrupt("quantization table " + std::to_string(frame.quant_table) +
                    " is not defined before the scan");
      p = decode_scan(p, end, frame, dc_tables[td], ac_tables[ta], quantizers[frame.quant_table],
                      restart_interval, out, ctx);
      scanned = true;
    }
    // APPn, COM, DNL, DHP, EXP, JPGn and reserved markers: skipped.
  }
  if (!frame.present) ctx.corrupt("no SOF frame header");
  if (!scanned) ctx.corrupt("no scan of the frame's component");
  // No EOI needed: every sample is out (what follows the scan does not change them).
  return outcome;
}

}  // namespace voxpipe::dicom
