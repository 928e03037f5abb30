#include "gz/block_finder.hpp"

#include <array>
#include <cstring>

#include "gz/deflate_decoder.hpp"

namespace voxpipe::gz {

namespace {

// Kraft sums, in units of 2^-7, of four 3-bit precode lengths: a complete precode sums to 128.
// Looking four lengths up at once keeps the per-position cost a few operations.
constexpr std::array<std::uint16_t, 4096> make_kraft4() {
  std::array<std::uint16_t, 4096> t{};
  for (unsigned v = 0; v < 4096; ++v) {
    unsigned sum = 0;
    for (unsigned k = 0; k < 4; ++k) {
      const unsigned len = (v >> (3 * k)) & 7;
      if (len) sum += 128u >> len;
    }
    t[v] = static_cast<std::uint16_t>(sum);
  }
  return t;
}
constexpr std::array<std::uint16_t, 4096> kKraft4 = make_kraft4();

std::uint64_t load64(std::span<const std::uint8_t> data, std::uint64_t index) {
  std::uint64_t w = 0;
  if (index + 8 <= data.size()) {
    std::memcpy(&w, data.data() + index, 8);
  } else {
    for (std::uint64_t i = 0; i < 8 && index + i < data.size(); ++i)
      w |= std::uint64_t{data[index + i]} << (8 * i);
  }
  return w;
}

// Trial decode from `bit`: three block ends, 64 KiB of output, the end of the stream or of the
// data at hand without an error.
bool trial_decode(DeflateDecoder<std::uint16_t>& decoder, BitReader& reader, std::uint64_t bit) {
  constexpr std::size_t kEnough = 32768 + 65536;
  decoder.start_with_markers(bit, /*fill_markers=*/false);
  for (int blocks = 0; blocks < 3;) {
    const DecodeStatus s = decoder.decode(kEnough);
    if (s == DecodeStatus::error) return reader.overrun();
    if (s == DecodeStatus::output_full) return true;
    if (reader.overrun()) return true;
    ++blocks;
    if (decoder.block_final()) return true;
  }
  return true;
}

}  // namespace

std::optional<BlockCandidate> find_block_start(std::span<const std::uint8_t> data,
                                               std::uint64_t first_byte, std::uint64_t from_bit,
                                               std::uint64_t to_bit) {
  const std::uint64_t data_end_bit = (first_byte + data.size()) * 8;
  if (to_bit > data_end_bit) to_bit = data_end_bit;
  if (from_bit < first_byte * 8) from_bit = first_byte * 8;
  if (from_bit >= to_bit) return std::nullopt;
  BitReader reader(data, first_byte);
  DeflateDecoder<std::uint16_t> decoder(reader);

  for (std::uint64_t byte = from_bit / 8; byte * 8 < to_bit; ++byte) {
    const std::uint64_t index = byte - first_byte;
    const std::uint64_t w = load64(data, index);
    // Stored block whose LEN begins at `byte`: the three header bits and the padding before it
    // must be zero.
    if (index >= 1 && index + 4 <= data.size()) {
      const unsigned len = data[index] | (data[index + 1] << 8);
      const unsigned nlen = data[index + 2] | (data[index + 3] << 8);
      if (len == (~nlen & 0xffffu)) {
        unsigned zeros = 0;
        for (std::uint64_t b = byte * 8; zeros < 10 && b > first_byte * 8; ++zeros) {
          --b;
          if ((data[b / 8 - first_byte] >> (b % 8)) & 1) break;
        }
        const std::uint64_t last = byte * 8 - 3;
        std::uint64_t first = byte * 8 - zeros;
        if (first < from_bit) first = from_bit;
        if (zeros >= 3 && last >= from_bit && last < to_bit &&
            trial_decode(decoder, reader, last))
          return BlockCandidate{first, last, true};
      }
    }
    const std::uint64_t w2 = load64(data, index + 2);
    for (unsigned k = 0; k < 8; ++k) {
      const std::uint64_t p = byte * 8 + k;
      if (p < from_bit) continue;
      if (p >= to_bit) break;
      const std::uint64_t v = w >> k;
      if ((v & 7) != 4) continue;                 // BFINAL 0, BTYPE 10
      if (((v >> 3) & 31) > 29) continue;         // HLIT
      if (((v >> 8) & 31) > 29) continue;         // HDIST
      const unsigned ncode = static_cast<unsigned>((v >> 13) & 15) + 4;
      // Precode lengths start at bit p + 17 = bit 1 + k of w2.
      std::uint64_t pre = w2 >> (1 + k);
      unsigned sum = 0;
      unsigned left = ncode;
      while (left >= 4) {
        sum += kKraft4[pre & 4095];
        pre >>= 12;
        left -= 4;
      }
      if (left) sum += kKraft4[pre & ((1u << (3 * left)) - 1)];
      if (sum != 128) continue;
      if (trial_decode(decoder, reader, p)) return BlockCandidate{p, p, false};
    }
  }
  return std::nullopt;
}

}  // namespace voxpipe::gz
