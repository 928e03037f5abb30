#include "gz/deflate_decoder.hpp"

#include <algorithm>
#include <cstring>

#include "gz/stream.hpp"

namespace voxpipe::gz {

// ---------------------------------------------------------------------------------------------
// BitReader

BitReader::BitReader(std::span<const std::uint8_t> data, std::uint64_t first_byte)
    : data_(data.data()), end_(data.size()), base_(first_byte),
      stream_bits_((first_byte + data.size()) * 8), memory_(true) {}

BitReader::BitReader(ByteFetch fetch, std::uint64_t stream_size, std::size_t buffer_bytes)
    : stream_bits_(stream_size * 8), fetch_(std::move(fetch)),
      buffer_(new std::uint8_t[std::max<std::size_t>(buffer_bytes, 64)]),
      buffer_size_(std::max<std::size_t>(buffer_bytes, 64)) {
  data_ = buffer_.get();
}

void BitReader::seek(std::uint64_t bit) {
  const std::uint64_t byte = bit / 8;
  bits_ = 0;
  bitcount_ = 0;
  zeros_ = 0;
  if (memory_) {
    if (byte < base_) {
      pos_ = 0;  // callers never seek before the span; stay defined
    } else if (byte - base_ > end_) {
      pos_ = end_;
      zeros_ = byte - base_ - end_;
    } else {
      pos_ = static_cast<std::size_t>(byte - base_);
    }
  } else {
    base_ = byte;
    pos_ = end_ = 0;
    load();
  }
  refill();
  consume(static_cast<unsigned>(bit % 8));
}

void BitReader::load() {
  if (memory_) return;
  const std::size_t rest = end_ - pos_;
  std::memmove(buffer_.get(), buffer_.get() + pos_, rest);
  base_ += pos_;
  pos_ = 0;
  end_ = rest;
  const std::uint64_t at = base_ + end_;
  if (at * 8 < stream_bits_) {
    end_ += fetch_(at, std::span(buffer_.get() + end_, buffer_size_ - end_));
  }
}

void BitReader::refill_slow() {
  if (end_ - pos_ < 8 && !memory_ && (base_ + end_) * 8 < stream_bits_) load();
  if (end_ - pos_ >= 8) {
    refill();
    return;
  }
  while (bitcount_ <= 56) {
    if (pos_ < end_) {
      bits_ |= std::uint64_t{data_[pos_++]} << bitcount_;
    } else {
      ++zeros_;  // past the end: zero bits (bits_ holds no stale bits there)
    }
    bitcount_ += 8;
  }
}

void BitReader::copy_bytes(std::uint8_t* dst, std::size_t n) {
  while (n > 0 && bitcount_ >= 8) {
    *dst++ = static_cast<std::uint8_t>(bits_);
    consume(8);
    --n;
  }
  if (n == 0) return;  // the copy ended inside the buffered bits: they stay for what follows
  // The buffered bits are used up (bitcount_ is 0 after align_to_byte()), but bits_ may still
  // hold stale copies of the bytes about to be skipped; they must not be OR-ed into later
  // refills.
  bits_ = 0;
  while (n > 0) {
    if (pos_ == end_) load();
    if (pos_ == end_) {
      std::memset(dst, 0, n);
      zeros_ += n;
      return;
    }
    const std::size_t take = std::min(n, end_ - pos_);
    std::memcpy(dst, data_ + pos_, take);
    pos_ += take;
    dst += take;
    n -= take;
  }
}

// ---------------------------------------------------------------------------------------------
// Huffman tables

template <unsigned TableBits, unsigned MaxSymbols>
bool HuffmanTable<TableBits, MaxSymbols>::build(const std::uint8_t* lengths, unsigned n) {
  std::fill(std::begin(count), std::end(count), 0);
  for (unsigned s = 0; s < n; ++s) ++count[lengths[s]];
  count[0] = 0;
  int left = 1;
  max_length = 0;
  used = 0;
  for (unsigned len = 1; len <= 15; ++len) {
    left <<= 1;
    left -= count[len];
    if (left < 0) return false;  // over-subscribed
    if (count[len]) max_length = len;
    used += count[len];
  }
  incomplete = left > 0;
  std::uint16_t offsets[16];
  offsets[1] = 0;
  for (unsigned len = 1; len < 15; ++len) offsets[len + 1] = offsets[len] + count[len];
  for (unsigned s = 0; s < n; ++s)
    if (lengths[s]) sorted[offsets[lengths[s]]++] = static_cast<std::uint16_t>(s);
  std::fill(std::begin(direct), std::end(direct), 0);
  // Canonical codes in (length, symbol) order; stream bits are the code reversed.
  unsigned code = 0;
  unsigned index = 0;
  for (unsigned len = 1; len <= TableBits && len <= max_length; ++len) {
    for (unsigned k = 0; k < count[len]; ++k, ++index, ++code) {
      unsigned rev = 0;
      for (unsigned b = 0; b < len; ++b) rev |= ((code >> b) & 1u) << (len - 1 - b);
      const std::uint16_t entry = static_cast<std::uint16_t>((sorted[index] << 4) | len);
      for (unsigned i = rev; i < (1u << TableBits); i += 1u << len) direct[i] = entry;
    }
    code <<= 1;
  }
  return true;
}

template struct HuffmanTable<7, 19>;

namespace {

constexpr std::uint16_t kLengthBase[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,
                                           15, 17, 19, 23, 27, 31, 35, 43, 51,  59,
                                           67, 83, 99, 115, 131, 163, 195, 227, 258};
constexpr std::uint8_t kLengthExtra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                           2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
constexpr std::uint16_t kDistBase[30] = {1,    2,    3,    4,    5,    7,     9,     13,
                                         17,   25,   33,   49,   65,   97,    129,   193,
                                         257,  385,  513,  769,  1025, 1537,  2049,  3073,
                                         4097, 6145, 8193, 12289, 16385, 24577};
constexpr std::uint8_t kDistExtra[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                         6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
constexpr std::uint8_t kCodeLengthOrder[19] = {16, 17, 18, 0, 8,  7, 9,  6, 10, 5,
                                               11, 4,  12, 3, 13, 2, 14, 1, 15};

unsigned reverse_bits(unsigned code, unsigned length) {
  unsigned rev = 0;
  for (unsigned b = 0; b < length; ++b) rev |= ((code >> b) & 1u) << (length - 1 - b);
  return rev;
}

// Fills `t` for the code given by `lengths` (canonical, RFC 1951 3.2.2), each code's entry made
// by make(symbol, code length). Codes longer than the root go to subtables, each sized for the
// codes that share its root prefix (zlib's inflate_table rule: canonical order makes them
// consecutive). Slots no code reaches decode as kInvalid.
template <unsigned Root, unsigned MaxEntries, class Make>
bool build_table(DecodeTable<Root, MaxEntries>& t, const std::uint8_t* lengths, unsigned n,
                 Make make) {
  using namespace decode_entry;
  unsigned count[16] = {};
  for (unsigned s = 0; s < n; ++s) ++count[lengths[s]];
  count[0] = 0;
  int left = 1;
  t.max_length = 0;
  t.used = 0;
  for (unsigned len = 1; len <= 15; ++len) {
    left <<= 1;
    left -= static_cast<int>(count[len]);
    if (left < 0) return false;  // over-subscribed
    if (count[len]) t.max_length = len;
    t.used += count[len];
  }
  t.incomplete = left > 0;
  unsigned offsets[16];
  offsets[1] = 0;
  for (unsigned len = 1; len < 15; ++len) offsets[len + 1] = offsets[len] + count[len];
  std::uint16_t sorted[288];
  for (unsigned s = 0; s < n; ++s)
    if (lengths[s]) sorted[offsets[lengths[s]]++] = static_cast<std::uint16_t>(s);
  std::fill(t.entries, t.entries + (1u << Root), kInvalid);
  unsigned remaining[16];
  std::copy(count, count + 16, remaining);
  unsigned code = 0;  // canonical code, most significant bit first
  unsigned index = 0;
  unsigned next = 1u << Root;  // first free subtable entry
  unsigned prefix = ~0u;       // root bits of the current subtable's codes
  unsigned sub_start = 0;
  unsigned sub_bits = 0;
  for (unsigned len = 1; len <= t.max_length; ++len) {
    for (unsigned k = 0; k < count[len]; ++k, ++index, ++code) {
      const std::uint32_t e = make(sorted[index], len);
      const unsigned rev = reverse_bits(code, len);
      if (len <= Root) {
        for (unsigned i = rev; i < (1u << Root); i += 1u << len) t.entries[i] = e;
      } else {
        if ((rev & ((1u << Root) - 1)) != prefix) {
          prefix = rev & ((1u << Root) - 1);
          // Enough index bits for the codes left that share this prefix.
          unsigned bits = len - Root;
          int room = 1 << bits;
          while (bits + Root < t.max_length) {
            room -= static_cast<int>(remaining[bits + Root]);
            if (room <= 0) break;
            ++bits;
            room <<= 1;
          }
          sub_start = next;
          sub_bits = bits;
          next += 1u << bits;
          std::fill(t.entries + sub_start, t.entries + next, kInvalid);
          t.entries[prefix] = kSubtable | (sub_start << 16) | (sub_bits << 8);
        }
        for (unsigned i = rev >> Root; i < (1u << sub_bits); i += 1u << (len - Root))
          t.entries[sub_start + i] = e;
      }
      --remaining[len];
    }
    code <<= 1;
  }
  return true;
}

std::uint32_t litlen_entry(unsigned sym, unsigned len) {
  using namespace decode_entry;
  if (sym < 256) return kLiteral | (sym << 16) | len;
  if (sym == 256) return kEndOfBlock | len;
  if (sym > 285) return kInvalid;
  const unsigned i = sym - 257;
  return kLength | (std::uint32_t{kLengthBase[i]} << 16) | (len << 8) | (len + kLengthExtra[i]);
}

std::uint32_t dist_entry(unsigned sym, unsigned len) {
  if (sym > 29) return decode_entry::kInvalid;
  return (std::uint32_t{kDistBase[sym]} << 16) | (len << 8) | (len + kDistExtra[sym]);
}

struct FixedTables {
  LitLenTable lit;
  DistTable dist;
  FixedTables() {
    std::uint8_t lengths[288];
    std::fill(lengths, lengths + 144, 8);
    std::fill(lengths + 144, lengths + 256, 9);
    std::fill(lengths + 256, lengths + 280, 7);
    std::fill(lengths + 280, lengths + 288, 8);
    build_litlen_table(lit, lengths, 288);
    std::fill(lengths, lengths + 32, 5);
    build_dist_table(dist, lengths, 32);
  }
};

const FixedTables& fixed_tables() {
  static const FixedTables tables;
  return tables;
}

}  // namespace

bool build_litlen_table(LitLenTable& t, const std::uint8_t* lengths, unsigned n) {
  using namespace decode_entry;
  if (!build_table(t, lengths, n, litlen_entry)) return false;
  // Two literals per entry where both codes fit in the root bits. From the top down: the entry
  // at i >> l1 (< i) still holds its single symbol when entry i is rewritten.
  constexpr unsigned kRoot = LitLenTable::kRootBits;
  for (unsigned i = (1u << kRoot); i-- > 0;) {
    const std::uint32_t e1 = t.entries[i];
    if (!(e1 & kLiteral)) continue;
    const unsigned l1 = e1 & 31;
    if (l1 >= kRoot) continue;
    const std::uint32_t e2 = t.entries[i >> l1];
    if (!(e2 & kLiteral) || l1 + (e2 & 31) > kRoot) continue;
    t.entries[i] = kLiteral | kTwo | (e1 & 0xff0000u) | ((e2 & 0xff0000u) << 8) | (l1 + (e2 & 31));
  }
  return true;
}

bool build_dist_table(DistTable& t, const std::uint8_t* lengths, unsigned n) {
  return build_table(t, lengths, n, dist_entry);
}

// ---------------------------------------------------------------------------------------------
// DeflateDecoder

template <class T>
DeflateDecoder<T>::DeflateDecoder(BitReader& in)
    : in_(in), dyn_lit_(new LitLenTable), dyn_dist_(new DistTable) {}

template <class T>
DeflateDecoder<T>::~DeflateDecoder() = default;

template <class T>
void DeflateDecoder<T>::reserve(std::size_t n) {
  if (n <= capacity_) return;
  const std::size_t cap = std::max(n, capacity_ * 2);
  std::unique_ptr<T[]> next(new T[cap]);
  if (pos_) std::memcpy(next.get(), out_.get(), pos_ * sizeof(T));
  out_ = std::move(next);
  capacity_ = cap;
}

template <class T>
void DeflateDecoder<T>::start_with_markers(std::uint64_t bit, bool fill_markers)
  requires std::is_same_v<T, std::uint16_t>
{
  reserve(std::size_t{1} << 17);
  if (fill_markers)
    for (std::size_t i = 0; i < 32768; ++i) out_[i] = static_cast<T>(kMarkerBase + i);
  pos_ = window_size_ = 32768;
  dropped_ = 0;
  marker_end_ = scanned_ = 32768;
  in_block_ = final_ = false;
  error_ = nullptr;
  in_.seek(bit);
}

template <class T>
void DeflateDecoder<T>::start_with_window(std::uint64_t bit, std::span<const std::uint8_t> window)
  requires std::is_same_v<T, std::uint8_t>
{
  const std::size_t w = std::min<std::size_t>(window.size(), 32768);
  reserve(std::size_t{1} << 17);
  if (w) std::memcpy(out_.get(), window.data() + window.size() - w, w);
  pos_ = window_size_ = w;
  dropped_ = 0;
  marker_end_ = scanned_ = 0;
  in_block_ = final_ = false;
  error_ = nullptr;
  in_.seek(bit);
}

template <class T>
void DeflateDecoder<T>::discard_front(std::size_t keep) {
  if (pos_ <= keep) return;
  const std::size_t drop = pos_ - keep;
  std::memmove(out_.get(), out_.get() + drop, keep * sizeof(T));
  pos_ = keep;
  dropped_ += drop;
}

template <class T>
DecodeStatus DeflateDecoder<T>::fail(const char* message) {
  error_ = in_.overrun() ? "unexpected end of compressed data" : message;
  error_bit_ = in_.position();
  return DecodeStatus::error;
}

template <class T>
DecodeStatus DeflateDecoder<T>::read_header() {
  block_start_ = in_.position();
  in_.refill();
  final_ = in_.read(1) != 0;
  type_ = in_.read(2);
  switch (type_) {
    case 0: {
      in_.align_to_byte();
      const std::uint32_t len = in_.read(16);
      const std::uint32_t nlen = in_.read(16);
      if (len != (~nlen & 0xffffu)) return fail("invalid stored block lengths");
      stored_left_ = len;
      break;
    }
    case 1:
      lit_ = &fixed_tables().lit;
      dist_ = &fixed_tables().dist;
      break;
    case 2: {
      const DecodeStatus s = read_dynamic_tables();
      if (s == DecodeStatus::error) return s;
      break;
    }
    default:
      return fail("invalid block type");
  }
  in_block_ = true;
  return DecodeStatus::block_end;  // "no error"; the caller continues into the block
}

template <class T>
DecodeStatus DeflateDecoder<T>::read_dynamic_tables() {
  in_.refill();
  const unsigned nlit = in_.read(5) + 257;
  const unsigned ndist = in_.read(5) + 1;
  const unsigned ncode = in_.read(4) + 4;
  if (nlit > 286 || ndist > 30) return fail("too many length or distance symbols");
  std::uint8_t lengths[320] = {};
  in_.refill();
  for (unsigned i = 0; i < ncode; ++i) lengths[kCodeLengthOrder[i]] = static_cast<std::uint8_t>(in_.read(3));
  HuffmanTable<7, 19> pre;
  if (!pre.build(lengths, 19) || pre.incomplete) return fail("invalid code lengths set");
  std::fill(lengths, lengths + 19, 0);
  const unsigned total = nlit + ndist;
  unsigned n = 0;
  while (n < total) {
    in_.refill();
    const std::uint32_t e = pre.direct[in_.peek() & 127];
    in_.consume(e & 15);
    const unsigned sym = e >> 4;
    if (sym < 16) {
      lengths[n++] = static_cast<std::uint8_t>(sym);
      continue;
    }
    std::uint8_t value = 0;
    unsigned repeat;
    if (sym == 16) {
      if (n == 0) return fail("invalid bit length repeat");
      value = lengths[n - 1];
      repeat = 3 + in_.read(2);
    } else if (sym == 17) {
      repeat = 3 + in_.read(3);
    } else {
      repeat = 11 + in_.read(7);
    }
    if (n + repeat > total) return fail("invalid bit length repeat");
    std::fill(lengths + n, lengths + n + repeat, value);
    n += repeat;
  }
  if (lengths[256] == 0) return fail("invalid code -- missing end-of-block");
  if (!build_litlen_table(*dyn_lit_, lengths, nlit) ||
      (dyn_lit_->incomplete && dyn_lit_->max_length != 1))
    return fail("invalid literal/lengths set");
  if (!build_dist_table(*dyn_dist_, lengths + nlit, ndist) ||
      (dyn_dist_->incomplete && dyn_dist_->used > 0 && dyn_dist_->max_length != 1))
    return fail("invalid distances set");
  lit_ = dyn_lit_.get();
  dist_ = dyn_dist_.get();
  return DecodeStatus::block_end;
}

template <class T>
DecodeStatus DeflateDecoder<T>::decode_stored(std::size_t limit) {
  while (stored_left_ > 0) {
    if (pos_ >= limit) return DecodeStatus::output_full;
    const std::size_t n = std::min<std::size_t>(stored_left_, limit - pos_);
    reserve(pos_ + n + 16);
    if constexpr (std::is_same_v<T, std::uint8_t>) {
      in_.copy_bytes(out_.get() + pos_, n);
    } else {
      std::uint8_t tmp[4096];
      for (std::size_t done = 0; done < n;) {
        const std::size_t k = std::min(n - done, sizeof tmp);
        in_.copy_bytes(tmp, k);
        for (std::size_t i = 0; i < k; ++i) out_[pos_ + done + i] = tmp[i];
        done += k;
      }
    }
    pos_ += n;
    stored_left_ -= static_cast<std::uint32_t>(n);
  }
  in_block_ = false;
  return DecodeStatus::block_end;
}

template <class T>
bool DeflateDecoder<T>::window_has_markers() const noexcept {
  if constexpr (std::is_same_v<T, std::uint8_t>) {
    return false;
  } else {
    const std::uint64_t end = dropped_ + pos_;
    const std::uint64_t from = std::max<std::uint64_t>({scanned_, dropped_, end >= 32768 ? end - 32768 : 0});
    // Backwards in groups of 64 (an OR the compiler vectorises); the last marker found is the
    // one that matters.
    std::uint64_t at = end;
    while (at > from) {
      const std::uint64_t g = at - std::min<std::uint64_t>(64, at - from);
      const T* p = out_.get() + (g - dropped_);
      const std::size_t n = static_cast<std::size_t>(at - g);
      unsigned acc = 0;
      for (std::size_t i = 0; i < n; ++i) acc |= p[i];
      if (acc >= 256) {
        std::size_t i = n;
        while (p[i - 1] < 256) --i;
        marker_end_ = std::max(marker_end_, g + i);
        break;
      }
      at = g;
    }
    scanned_ = end;
    return marker_end_ + 32768 > end;
  }
}

namespace {

// Stores the one or two literals of a literal entry at `dst` (always two elements: the slack
// after the output absorbs the second).
template <class T>
inline void store_literals(T* dst, std::uint32_t e) {
  if constexpr (std::is_same_v<T, std::uint8_t>) {
    const auto v = static_cast<std::uint16_t>(e >> 16);
    std::memcpy(dst, &v, 2);
  } else {
    const std::uint32_t v = ((e >> 16) & 0xffu) | ((e >> 8) & 0xff0000u);
    std::memcpy(dst, &v, 4);
  }
}

// Copies a match of `length` elements from `distance` back. Writes up to 16 bytes past the end:
// the output keeps that much slack. Word copies read only elements already final: a step of
// at most `distance` elements never reads what it writes.
template <class T>
inline void copy_match(T* dst, std::size_t distance, std::size_t length) {
  const T* src = dst - distance;
  constexpr std::size_t kWord = 8 / sizeof(T);    // elements per 8 bytes
  constexpr std::size_t kWide = 16 / sizeof(T);   // elements per 16 bytes
  if (distance >= kWide) [[likely]] {
    std::memcpy(dst, src, 16);
    for (std::size_t i = kWide; i < length; i += kWide) std::memcpy(dst + i, src + i, 16);
  } else if (distance >= kWord) {
    std::memcpy(dst, src, 8);
    for (std::size_t i = kWord; i < length; i += kWord) std::memcpy(dst + i, src + i, 8);
  } else if (distance == 1) {
    // A run of one element: broadcast it to 16 bytes.
    T run[kWide];
    for (std::size_t i = 0; i < kWide; ++i) run[i] = *src;
    for (std::size_t i = 0; i < length; i += kWide) std::memcpy(dst + i, run, 16);
  } else {
    for (std::size_t i = 0; i < length; ++i) dst[i] = src[i];
  }
}

}  // namespace

template <class T>
DecodeStatus DeflateDecoder<T>::decode_huffman(std::size_t limit) {
  using namespace decode_entry;
  const std::uint32_t* const lit = lit_->entries;
  const std::uint32_t* const dist = dist_->entries;
  constexpr std::uint64_t kLitMask = (1u << LitLenTable::kRootBits) - 1;
  constexpr std::uint64_t kDistMask = (1u << DistTable::kRootBits) - 1;
  constexpr std::size_t kSlack = 258 + 16;
  // The hot state lives in locals: stores through T* (uint8_t aliases everything) would
  // otherwise force the reader's fields to be reloaded after every output byte.
  BitReader& in = in_;
  std::uint64_t bits = in.bits_;
  unsigned count = in.bitcount_;
  const std::uint8_t* data = in.data_;
  std::size_t ipos = in.pos_;
  std::size_t iend = in.end_;
  std::size_t pos = pos_;
  T* out = out_.get();
  std::size_t room = std::min(limit, capacity_ - 16);  // pos + 258 <= room: a symbol fits
  auto save = [&] {
    in.bits_ = bits;
    in.bitcount_ = count;
    in.pos_ = ipos;
    pos_ = pos;
  };
  // At least 56 bits in `bits`: a whole match (15 + 5 + 15 + 13 bits) or three literal entries.
  // Bits above `count` are zero until refilled, and a refill leaves the `count` bits below as
  // they were: an entry looked up with at least 15 valid bits stays valid across a refill.
  auto refill = [&] {
    if (iend - ipos >= 8) [[likely]] {
      std::uint64_t w;
      std::memcpy(&w, data + ipos, 8);
      bits |= w << count;
      ipos += (63 - count) >> 3;
      count |= 56;
    } else {
      save();
      in.refill_slow();
      bits = in.bits_;
      count = in.bitcount_;
      data = in.data_;
      ipos = in.pos_;
      iend = in.end_;
    }
  };
  auto consume = [&](unsigned n) {
    bits >>= n;
    count -= n;
  };
  DecodeStatus status;
  const char* message = nullptr;
  refill();
  std::uint32_t e = lit[bits & kLitMask];
  for (;;) {
    if (pos + 258 > room) [[unlikely]] {
      if (pos + 258 > limit) {
        status = DecodeStatus::output_full;
        break;
      }
      pos_ = pos;
      reserve(pos + kSlack);
      out = out_.get();
      room = std::min(limit, capacity_ - 16);
    }
    refill();
    if (e & kLiteral) {
      // Up to three literal entries (each of at most 15 bits, the later ones from the root
      // table: at most 11) from one refill.
      consume(e & 31);
      store_literals(out + pos, e);
      pos += 1 + ((e >> 14) & 1);
      e = lit[bits & kLitMask];
      if (!(e & kLiteral)) continue;
      consume(e & 31);
      store_literals(out + pos, e);
      pos += 1 + ((e >> 14) & 1);
      e = lit[bits & kLitMask];
      if (!(e & kLiteral)) continue;
      consume(e & 31);
      store_literals(out + pos, e);
      pos += 1 + ((e >> 14) & 1);
      e = lit[bits & kLitMask];
      continue;
    }
    if (e & kSpecial) [[unlikely]] {
      if (e & kSubtable) {
        // A code longer than the root: its entry in the subtable, then as any other.
        e = lit[(e >> 16) + ((bits >> LitLenTable::kRootBits) & ((1u << ((e >> 8) & 15)) - 1))];
        if (e & kLiteral) {
          consume(e & 31);
          store_literals(out + pos, e);
          pos += 1;
          e = lit[bits & kLitMask];
          continue;
        }
      }
      if (e & kLength) goto length;
      if (e & kEndOfBlock) {
        consume(e & 31);
        in_block_ = false;
        status = DecodeStatus::block_end;
        break;
      }
      message = "invalid literal/length code";
      status = DecodeStatus::error;
      break;
    }
  length:
    // A length: its base and extra bits, then the distance, from the same 56 bits.
    const std::uint64_t at_length = bits;
    const unsigned count_at_length = count;
    std::uint64_t saved = bits;
    consume(e & 31);
    const std::size_t length =
        (e >> 16) + ((saved & ((std::uint64_t{1} << (e & 31)) - 1)) >> ((e >> 8) & 15));
    std::uint32_t d = dist[bits & kDistMask];
    if (d & (kSubtable | kInvalid)) [[unlikely]] {
      if (d & kSubtable)
        d = dist[(d >> 16) + ((bits >> DistTable::kRootBits) & ((1u << ((d >> 8) & 15)) - 1))];
      if (d & kInvalid) {
        bits = at_length;
        count = count_at_length;
        message = "invalid distance code";
        status = DecodeStatus::error;
        break;
      }
    }
    saved = bits;
    consume(d & 31);
    const std::size_t distance =
        (d >> 16) + ((saved & ((std::uint64_t{1} << (d & 31)) - 1)) >> ((d >> 8) & 15));
    if (distance > pos) [[unlikely]] {
      message = "invalid distance too far back";
      status = DecodeStatus::error;
      break;
    }
    // The next entry is looked up before the copy, so that its load overlaps the copy.
    refill();
    e = lit[bits & kLitMask];
    copy_match(out + pos, distance, length);
    pos += length;
  }
  save();
  if (status == DecodeStatus::error) return fail(message);
  return status;
}

template <class T>
DecodeStatus DeflateDecoder<T>::decode(std::size_t limit) {
  if (!in_block_) {
    const DecodeStatus s = read_header();
    if (s == DecodeStatus::error) return s;
  }
  return type_ == 0 ? decode_stored(limit) : decode_huffman(limit);
}

template class DeflateDecoder<std::uint8_t>;
template class DeflateDecoder<std::uint16_t>;

MarkerResolver::MarkerResolver(std::span<const std::uint8_t> window)
    : table_(std::make_unique<std::uint8_t[]>(65536)),  // zeroed: missing positions read 0
      missing_(kWindowSize - std::min(window.size(), kWindowSize)) {
  for (unsigned v = 0; v < 256; ++v) table_[v] = static_cast<std::uint8_t>(v);
  const std::span<const std::uint8_t> w = window.last(kWindowSize - missing_);
  std::copy(w.begin(), w.end(), table_.get() + kMarkerBase + missing_);
}

bool MarkerResolver::resolve(const std::uint16_t* symbols, std::size_t n,
                             std::uint8_t* out) const noexcept {
  const std::uint8_t* const table = table_.get();
  unsigned low = 0xffff;  // lowest window position referred to (only looked for if missing_)
  for (std::size_t g = 0; g < n; g += 64) {
    const std::size_t e = std::min(n, g + 64);
    unsigned high = 0;
    for (std::size_t i = g; i < e; ++i) {
      out[i] = static_cast<std::uint8_t>(symbols[i]);
      high |= symbols[i];
    }
    if (high < 256) continue;
    for (std::size_t i = g; i < e; ++i) out[i] = table[symbols[i]];
    if (missing_)
      for (std::size_t i = g; i < e; ++i)
        if (symbols[i] >= kMarkerBase) low = std::min<unsigned>(low, symbols[i] - kMarkerBase);
  }
  return low >= missing_;
}

}  // namespace voxpipe::gz
