#include "gz/member_writer.hpp"

#include <libdeflate.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <string>

#include "core/bytes.hpp"
#include "core/thread_pool.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::gz {

namespace {

constexpr std::size_t kVpHeader = 24;    // 10 fixed + XLEN + 'V' 'P' SLEN + 8
constexpr std::size_t kBgzfHeader = 18;  // 10 fixed + XLEN + 'B' 'C' SLEN + 2
constexpr std::size_t kTrailer = 8;
// BGZF's end-of-file marker: an empty block (SAMv1 section 4.1.2).
constexpr std::array<std::uint8_t, 28> kBgzfEof = {0x1f, 0x8b, 8, 4, 0, 0, 0, 0, 0, 0xff, 6, 0, 0x42, 0x43,
                                                   2, 0, 0x1b, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0};

struct Compressors {
  std::array<libdeflate_compressor*, 10> by_level{};
  ~Compressors() {
    for (auto* c : by_level) libdeflate_free_compressor(c);
  }
  libdeflate_compressor* get(int level) {
    auto& c = by_level[static_cast<std::size_t>(level)];
    if (!c) c = libdeflate_alloc_compressor(level);
    if (!c) throw std::bad_alloc();
    return c;
  }
};

// One member: header, raw deflate of `data`, trailer. BGZF blocks whose deflate would not fit
// in 64 KiB are stored instead (level 0 never grows 0xff00 bytes past the limit).
//
// Every level compresses with libdeflate, ISA-L's faster deflate included in the choice: per
// 1 MiB member of bench/make_data.py's series (bold 96x96x60x300 int16, T1 256x256x176), size
// against the whole file through Python's gzip at level 1 (what nib.save writes; bold
// 177.76 MB, T1 12.29 MB), and one thread's speed (CPU time on the 2-core EPYC VM, busy):
//   engine                          bold      T1       MB/s
//   ISA-L 1 (level_buf default)     +3.1%    +4.6%     330
//   ISA-L 1 (16 K-token buffer)     +2.8%    +3.9%     315
//   ISA-L 2 (16 K-token buffer)     +0.7%    +1.1%     290
//   ISA-L 3 (16 K-token buffer)     +0.4%    +0.9%     265   (8 K tokens: +0.6% / +0.2%)
//   zlib 1                          +0.1%    +0.0%      70
//   libdeflate 1                    -0.8%    -0.6%     173
//   libdeflate 2                    -2.2%    -2.8%      97
// (igzip -1/-3 on the whole file: +3.1%/+0.6% bold, +4.5%/+1.7% T1.) ISA-L's best level makes
// both files larger than nibabel's, and every full member larger than zlib 1's, so it can serve
// neither the default level (whose file must be no larger than nibabel's) nor a higher one;
// mixing ISA-L and libdeflate members would need about two thirds libdeflate to stay below on
// T1, for ~12% less CPU. (Overlapping the caller's copy-in and write-out with the compression
// was tried too: at 0.86-0.87 of 2 cores busy either way, it saved nothing measurable.)
void compress_member(std::span<const std::byte> data, int level, GzipLayout layout,
                     std::vector<std::uint8_t>& out) {
  thread_local Compressors compressors;
  const std::size_t header = layout == GzipLayout::bgzf ? kBgzfHeader : kVpHeader;
  libdeflate_compressor* c = compressors.get(level);
  out.resize(header + libdeflate_deflate_compress_bound(c, data.size()) + kTrailer);
  std::size_t n = libdeflate_deflate_compress(c, data.data(), data.size(), out.data() + header,
                                              out.size() - header - kTrailer);
  if (layout == GzipLayout::bgzf && (n == 0 || header + n + kTrailer > 65536)) {
    c = compressors.get(0);
    n = libdeflate_deflate_compress(c, data.data(), data.size(), out.data() + header,
                                    out.size() - header - kTrailer);
  }
  if (n == 0) throw Error(ErrorCode::io, "", "gzip member", "libdeflate could not compress a member");
  const std::size_t total = header + n + kTrailer;
  out.resize(total);
  std::uint8_t* h = out.data();
  // XFL as gzip sets it: 2 for the best levels, 4 for the fastest.
  const std::uint8_t xfl = level >= 9 ? 2 : level == 1 ? 4 : 0;
  const std::uint8_t fixed[10] = {0x1f, 0x8b, 8, 4, 0, 0, 0, 0, xfl, 0xff};
  std::memcpy(h, fixed, 10);
  if (layout == GzipLayout::bgzf) {
    const std::uint8_t extra[8] = {6, 0, 'B', 'C', 2, 0, static_cast<std::uint8_t>((total - 1) & 0xff),
                                   static_cast<std::uint8_t>((total - 1) >> 8)};
    std::memcpy(h + 10, extra, 8);
  } else {
    const std::uint8_t extra[6] = {12, 0, 'V', 'P', 8, 0};
    std::memcpy(h + 10, extra, 6);
    core::store_le(h + 16, total, 4);
    core::store_le(h + 20, data.size(), 4);
  }
  core::store_le(h + total - 8, libdeflate_crc32(0, data.data(), data.size()), 4);
  core::store_le(h + total - 4, data.size(), 4);  // ISIZE: modulo 2^32
}

}  // namespace

MemberWriter::MemberWriter(core::AtomicOutputFile& out, int level, GzipLayout layout,
                           unsigned threads)
    : out_(out), level_(level), layout_(layout),
      threads_(std::max(threads, 1u)),
      member_size_(layout == GzipLayout::bgzf ? kBgzfBlockSize : kMemberSize) {
  if (level < 0 || level > 9)
    throw Error(ErrorCode::invalid_argument, out.path(), "gzip level",
                "expected 0..9, but received " + std::to_string(level));
  if (layout == GzipLayout::single)
    throw Error(ErrorCode::invalid_argument, out.path(), "gzip layout",
                "MemberWriter writes the members and bgzf layouts");
  // Two members per thread per batch: the pool stays busy when members compress unevenly.
  const std::size_t per_batch =
      std::max<std::size_t>(2 * threads_, layout == GzipLayout::bgzf ? 32 : 2);
  input_.resize(per_batch * member_size_);
  for (auto& set : compressed_) set.resize(per_batch);
}

MemberWriter::~MemberWriter() = default;

void MemberWriter::write(std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const std::size_t n = std::min(bytes.size(), input_.size() - filled_);
    std::memcpy(input_.data() + filled_, bytes.data(), n);
    filled_ += n;
    bytes = bytes.subspan(n);
    if (filled_ == input_.size()) flush_batch();
  }
}

void MemberWriter::flush_batch() {
  const std::size_t count = std::max<std::size_t>((filled_ + member_size_ - 1) / member_size_,
                                                  wrote_member_ ? 0 : 1);
  std::vector<std::vector<std::uint8_t>>& current = compressed_[current_set_];
  const std::vector<std::vector<std::uint8_t>>& previous = compressed_[current_set_ ^ 1];
  // One task writes the previous batch to the file, in order, while the others compress this
  // one: the write (page cache allocation included) no longer leaves the other cores idle.
  const std::size_t writer = pending_ > 0 ? 1 : 0;
  core::parallel_for(count + writer, threads_, [&](std::size_t i) {
    if (writer) {
      if (i == 0) {
        for (std::size_t k = 0; k < pending_; ++k) out_.write(std::as_bytes(std::span(previous[k])));
        return;
      }
      --i;
    }
    const std::size_t lo = std::min(i * member_size_, filled_);
    const std::size_t hi = std::min(lo + member_size_, filled_);
    compress_member(std::span(input_.data() + lo, hi - lo), level_, layout_, current[i]);
  });
  if (layout_ == GzipLayout::members) {
    for (std::size_t k = 0; k < count; ++k)
      sizes_.push_back(static_cast<std::uint32_t>(current[k].size()));
    if (count > 0)
      last_uncompressed_ = static_cast<std::uint32_t>(filled_ - (count - 1) * member_size_);
  }
  pending_ = count;
  current_set_ ^= 1;
  wrote_member_ = wrote_member_ || count > 0;
  filled_ = 0;
}

void MemberWriter::finish() {
  if (filled_ > 0 || !wrote_member_) flush_batch();
  const std::vector<std::vector<std::uint8_t>>& last = compressed_[current_set_ ^ 1];
  for (std::size_t k = 0; k < pending_; ++k) out_.write(std::as_bytes(std::span(last[k])));
  pending_ = 0;
  if (layout_ == GzipLayout::bgzf) out_.write(std::as_bytes(std::span(kBgzfEof)));
  if (layout_ == GzipLayout::members) {
    const std::vector<std::uint8_t> table =
        encode_table_member(sizes_, static_cast<std::uint32_t>(member_size_), last_uncompressed_);
    if (!table.empty()) out_.write(std::as_bytes(std::span(table)));
  }
}

}  // namespace voxpipe::gz
