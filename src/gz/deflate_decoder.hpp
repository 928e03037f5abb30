// Our own raw DEFLATE (RFC 1951) block decoder, for the parallel engine's speculative stage and
// for its block finder. It starts at any bit offset, stops at every block boundary (so a caller
// can see where blocks begin and end), and writes either plain bytes after a known window, or
// 16-bit symbols after a window of "markers" standing for 32 KiB of unknown bytes.
//
// Validity rules follow zlib's inflate exactly (what the differential tests compare against):
// over-subscribed codes are errors; an incomplete code is accepted only for a literal/length or
// distance code made of a single code of length 1; an all-zero distance code is accepted (and any
// distance symbol then is an error); symbols 286/287 and distances 30/31 are errors; a distance
// beyond the available history is an error.
//
// Hot loops report failures through DecodeStatus; the callers turn them into voxpipe::Error
// where the position is known to be real data (a speculative decode may fail quietly).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace voxpipe::gz {

// Reads up to dst.size() bytes at `offset` of some byte stream; returns how many were read
// (fewer only at the end of the stream).
using ByteFetch = std::function<std::size_t(std::uint64_t offset, std::span<std::uint8_t> dst)>;

template <class T>
class DeflateDecoder;

// LSB-first bit reader with a 64-bit buffer. Either over a span in memory (no copy) or over a
// ByteFetch with its own sliding buffer. Reading past the end yields zero bits and counts them:
// overrun() tells the caller that what it decoded relied on bits the stream does not have.
class BitReader {
 public:
  // `data` must outlive the reader; data[0] is byte `first_byte` of the stream.
  BitReader(std::span<const std::uint8_t> data, std::uint64_t first_byte = 0);
  BitReader(ByteFetch fetch, std::uint64_t stream_size, std::size_t buffer_bytes = 256 * 1024);

  // Positions the reader at absolute bit `bit` (bit b is bit b % 8 of byte b / 8).
  void seek(std::uint64_t bit);
  // Absolute bit position of the next unread bit.
  std::uint64_t position() const noexcept {
    return (base_ + pos_ + zeros_) * 8 - bitcount_;
  }
  bool overrun() const noexcept { return position() > stream_bits_; }
  std::uint64_t stream_bits() const noexcept { return stream_bits_; }

  // Ensures at least 56 bits are buffered.
  void refill() {
    if (end_ - pos_ >= 8) [[likely]] {
      std::uint64_t w;
      __builtin_memcpy(&w, data_ + pos_, 8);
      bits_ |= w << bitcount_;
      pos_ += (63 - bitcount_) >> 3;
      bitcount_ |= 56;
    } else {
      refill_slow();
    }
  }
  std::uint64_t peek() const noexcept { return bits_; }
  void consume(unsigned n) noexcept {
    bits_ >>= n;
    bitcount_ -= n;
  }
  // Reads n <= 32 bits.
  std::uint32_t read(unsigned n) {
    if (bitcount_ < n) refill();
    std::uint32_t v = static_cast<std::uint32_t>(bits_ & ((std::uint64_t{1} << n) - 1));
    consume(n);
    return v;
  }
  void align_to_byte() { consume(bitcount_ & 7); }
  // After align_to_byte(): copies n bytes of the stream to dst (zeros past the end).
  void copy_bytes(std::uint8_t* dst, std::size_t n);

 private:
  template <class T>
  friend class DeflateDecoder;
  void refill_slow();
  void load();

  const std::uint8_t* data_ = nullptr;
  std::size_t pos_ = 0;  // next byte of data_ to enter bits_
  std::size_t end_ = 0;  // bytes valid in data_
  std::uint64_t base_ = 0;   // stream offset of data_[0]
  std::uint64_t zeros_ = 0;  // zero bytes fed past the end
  std::uint64_t bits_ = 0;
  unsigned bitcount_ = 0;
  std::uint64_t stream_bits_ = 0;
  ByteFetch fetch_;
  std::unique_ptr<std::uint8_t[]> buffer_;
  std::size_t buffer_size_ = 0;
  bool memory_ = false;
};

// Canonical Huffman decoding table with a direct lookup of the first TableBits bits and the
// remaining bits decoded bit by bit (the precode: 19 symbols of at most 7 bits).
template <unsigned TableBits, unsigned MaxSymbols>
struct HuffmanTable {
  // entry: (symbol << 4) | code length; 0 for "not in the direct table".
  std::uint16_t direct[1u << TableBits];
  std::uint16_t count[16];
  std::uint16_t sorted[MaxSymbols];
  unsigned max_length = 0;
  unsigned used = 0;      // symbols with a code
  bool incomplete = false;

  // False when the lengths over-subscribe the code space.
  bool build(const std::uint8_t* lengths, unsigned n);
};

// The literal/length and distance decoding tables of the hot loop, after the fastest software
// inflaters (libdeflate's decode tables, zlib's root tables with subtables): one 32-bit entry
// per lookup of the next RootBits stream bits says everything the loop needs, with no further
// table: a literal's byte (two literals when both codes fit in the root bits), a length's or
// distance's base and extra-bit count, the bits to consume. Codes longer than RootBits go
// through one subtable, indexed by the bits after the root.
//
// Entry layout (bits):
//   0-4    bits to consume: the code length, plus the extra bits of a length or distance
//   8-11   the code length alone (lengths and distances: where their extra bits start)
//   16-31  literal entries: the first literal byte (16-23) and the second (24-31);
//          length entries: the base length; distance entries: the base distance;
//          subtable pointers: the subtable's first index
// flags below.
namespace decode_entry {
inline constexpr std::uint32_t kLiteral = 1u << 15;   // one or two literals
inline constexpr std::uint32_t kTwo = 1u << 14;       // two literals
inline constexpr std::uint32_t kLength = 1u << 13;    // a match length
inline constexpr std::uint32_t kEndOfBlock = 1u << 7;
inline constexpr std::uint32_t kSubtable = 1u << 6;   // bits 8-11: the subtable's index bits
inline constexpr std::uint32_t kInvalid = 1u << 5;    // no code (incomplete code, symbol 286+)
// Entries that leave the fast path (literal/length: neither literal nor length).
inline constexpr std::uint32_t kSpecial = kSubtable | kInvalid | kEndOfBlock;
}  // namespace decode_entry

template <unsigned RootBits, unsigned MaxEntries>
struct DecodeTable {
  static constexpr unsigned kRootBits = RootBits;
  std::uint32_t entries[MaxEntries];
  unsigned max_length = 0;
  unsigned used = 0;  // symbols with a code
  bool incomplete = false;
};

// 11 root bits for literal/length codes: neuroimaging data (int16, float32) has flat literal
// statistics, with most codes 7-11 bits long; the rest go through a subtable (at most 16
// entries each). The bound on subtables: each of at most 288 codes longer than the root opens
// at most one subtable of at most 2^(15 - 11) entries.
using LitLenTable = DecodeTable<11, (1u << 11) + 288 * 16>;
using DistTable = DecodeTable<10, (1u << 10) + 32 * 32>;

// Fill a literal/length or distance table from code lengths; false when they over-subscribe
// the code space. Literal/length symbols 286 and 287 and distance symbols 30 and 31 (the fixed
// code has them) decode as invalid.
bool build_litlen_table(LitLenTable& table, const std::uint8_t* lengths, unsigned n);
bool build_dist_table(DistTable& table, const std::uint8_t* lengths, unsigned n);

enum class DecodeStatus {
  block_end,    // a block ended; block_final() tells whether it was the last of the stream
  output_full,  // the output reached the limit given; decode() resumes where it stopped
  error,        // invalid data: error_message() / error_bit()
};

// Marker values: window position i (0 = oldest of the 32 KiB before the start) is 0x8000 + i.
inline constexpr std::uint16_t kMarkerBase = 0x8000;

// Turns marker-mode output (16-bit symbols: bytes, and markers for the 32 KiB before the
// chunk) into bytes once that window is known, in one pass: runs of 64 symbols without a
// marker are narrowed by vector code; a run holding one goes through a table indexed by the
// symbol itself (bytes map to themselves, markers to the window): one load per symbol, no
// branch. Level-1 streams carry markers in most runs of their marker phase.
class MarkerResolver {
 public:
  // `window`: the bytes before the chunk, at most 32 KiB; shorter when the chunk's member began
  // less than 32 KiB before it, and then markers for the missing bytes are invalid data.
  explicit MarkerResolver(std::span<const std::uint8_t> window);
  // Writes n bytes to `out`. Returns false when a marker referred to a byte before the member
  // (out then holds zeros there): "invalid distance too far back".
  bool resolve(const std::uint16_t* symbols, std::size_t n, std::uint8_t* out) const noexcept;

 private:
  std::unique_ptr<std::uint8_t[]> table_;  // 65536 entries, indexed by symbol
  std::size_t missing_ = 0;                // window positions before the member's start
};

// Decodes a raw deflate stream block by block into an output buffer of T: std::uint8_t for
// plain bytes after a known window, std::uint16_t for marker mode. The buffer starts with the
// window (the 32768 markers, or the known bytes) so that back-references need no special case.
template <class T>
class DeflateDecoder {
 public:
  explicit DeflateDecoder(BitReader& in);
  ~DeflateDecoder();

  // Starts decoding at bit `bit` (a block header) with a window of 32768 markers. With
  // fill_markers false the window content is left as it is (trial decodes that only check
  // validity).
  void start_with_markers(std::uint64_t bit, bool fill_markers = true)
    requires std::is_same_v<T, std::uint16_t>;
  // Starts at bit `bit` after the known window (at most 32768 bytes; empty at a member start).
  void start_with_window(std::uint64_t bit, std::span<const std::uint8_t> window)
    requires std::is_same_v<T, std::uint8_t>;

  // Decodes until the current block ends or the output holds `limit` elements (window
  // included).
  DecodeStatus decode(std::size_t limit);

  // Buffer: window, then output. size() counts both.
  const T* data() const noexcept { return out_.get(); }
  std::size_t size() const noexcept { return pos_; }
  std::size_t window_size() const noexcept { return window_size_; }
  // Drops all but the last `keep` elements of the buffer (keeps history for back-references).
  void discard_front(std::size_t keep);
  // Allocates room for n elements (window included) up front: pages are touched only as output
  // reaches them, and the buffer is not copied while growing.
  void reserve_output(std::size_t n) { reserve(n); }
  // Hands the buffer (data(), size() elements) to the caller; the decoder must be started again.
  std::unique_ptr<T[]> take_buffer() {
    capacity_ = pos_ = 0;
    return std::move(out_);
  }
  // Elements dropped from the front so far: data()[0] is element dropped() of the whole
  // sequence (window included).
  std::uint64_t dropped() const noexcept { return dropped_; }

  bool block_final() const noexcept { return final_; }
  bool in_block() const noexcept { return in_block_; }
  // Bit position of the current (or last) block's header.
  std::uint64_t block_start_bit() const noexcept { return block_start_; }
  // Marker mode: true while the last 32 KiB of the buffer contains markers. Scans the output
  // written since the last call (at most 32 KiB of it), from its end: the hot loop keeps no
  // account of markers.
  bool window_has_markers() const noexcept;

  const char* error_message() const noexcept { return error_; }
  std::uint64_t error_bit() const noexcept { return error_bit_; }

 private:
  DecodeStatus fail(const char* message);
  DecodeStatus read_header();
  DecodeStatus read_dynamic_tables();
  DecodeStatus decode_huffman(std::size_t limit);
  DecodeStatus decode_stored(std::size_t limit);
  void reserve(std::size_t n);

  BitReader& in_;
  std::unique_ptr<T[]> out_;
  std::size_t capacity_ = 0;
  std::size_t pos_ = 0;
  std::size_t window_size_ = 0;
  std::uint64_t dropped_ = 0;
  // (Absolute) element index just past the last marker seen, and how far window_has_markers()
  // has looked.
  mutable std::uint64_t marker_end_ = 0;
  mutable std::uint64_t scanned_ = 0;
  bool in_block_ = false;
  bool final_ = false;
  unsigned type_ = 0;
  std::uint32_t stored_left_ = 0;
  std::uint64_t block_start_ = 0;
  const LitLenTable* lit_ = nullptr;
  const DistTable* dist_ = nullptr;
  std::unique_ptr<LitLenTable> dyn_lit_;
  std::unique_ptr<DistTable> dyn_dist_;
  const char* error_ = nullptr;
  std::uint64_t error_bit_ = 0;
};

extern template class DeflateDecoder<std::uint8_t>;
extern template class DeflateDecoder<std::uint16_t>;

}  // namespace voxpipe::gz
