#include "gz/members.hpp"

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

constexpr std::uint8_t kFlagExtra = 0x04;
// A 'VP' member bigger than this is not one we wrote: read such files as plain gzip rather
// than allocate per-thread buffers the size a header claims.
constexpr std::uint32_t kMaxMemberSize = 64u << 20;
// Header bytes read per member: the fixed part, XLEN and a 'VP' or 'BC' subfield fit easily.
constexpr std::size_t kHeaderProbe = 64;
// The smallest 'VP' member: its 24-byte header, an empty block (2 bytes) and the trailer.
constexpr std::uint64_t kVpMinMember = 24 + 2 + 8;

std::uint32_t le32(const std::uint8_t* p) { return static_cast<std::uint32_t>(core::load_le(p, 4)); }
std::uint16_t le16(const std::uint8_t* p) { return static_cast<std::uint16_t>(core::load_le(p, 2)); }

struct SizedHeader {
  std::uint64_t member_size = 0;
  std::optional<std::uint32_t> uncompressed_size;  // 'VP' only; BGZF's comes from ISIZE
};

// The announced size of the member whose header starts `head`, or nullopt when the header is
// not gzip or has no size subfield.
std::optional<SizedHeader> parse_sized_header(std::span<const std::uint8_t> head) {
  if (head.size() < 12 || head[0] != 0x1f || head[1] != 0x8b || head[2] != 8 ||
      !(head[3] & kFlagExtra))
    return std::nullopt;
  const std::size_t xlen = le16(&head[10]);
  std::span<const std::uint8_t> extra = head.subspan(12, std::min(xlen, head.size() - 12));
  while (extra.size() >= 4) {
    const std::size_t len = le16(&extra[2]);
    if (extra.size() < 4 + len) break;
    if (extra[0] == 'V' && extra[1] == 'P' && len == 8)
      return SizedHeader{le32(&extra[4]), le32(&extra[8])};
    if (extra[0] == 'B' && extra[1] == 'C' && len == 2)
      return SizedHeader{std::uint64_t{le16(&extra[4])} + 1, std::nullopt};
    extra = extra.subspan(4 + len);
  }
  return std::nullopt;
}

bool all_zero(const core::RandomAccessInput& file, std::uint64_t from) {
  std::array<std::byte, 4096> buf;
  while (from < file.size()) {
    const std::size_t n = file.read_at(from, buf);
    if (n == 0) break;
    for (std::size_t i = 0; i < n; ++i)
      if (buf[i] != std::byte{0}) return false;
    from += n;
  }
  return true;
}

struct Decompressor {
  libdeflate_decompressor* d = libdeflate_alloc_decompressor();
  ~Decompressor() { libdeflate_free_decompressor(d); }
};

constexpr std::size_t kTableFixed = 58;  // a table member's size less 4 bytes a member
constexpr std::size_t kTableEnd = 18;    // 'V' 'E' 04 00 u32 | 03 00 | CRC32 | ISIZE
// What is read of the file's end to find a table member: the whole table of 16,000 members.
constexpr std::size_t kTableProbe = 64u << 10;

// The members listed by the table member that ends `file`, or nullopt when there is none or it
// does not add up (the caller then walks the members, which reports what is wrong). A table is
// only a faster way to the list a walk would find: every length in it is checked against the
// file, and each member is checked again when it is inflated.
std::optional<std::vector<Member>> members_from_table(const core::RandomAccessInput& file) {
  const std::uint64_t file_size = file.size();
  if (file_size < kTableFixed + 4 + kVpMinMember) return std::nullopt;
  // Only a file whose first member is 'VP' can end with a table: others (plain gzip, BGZF) are
  // not asked for their end.
  std::array<std::uint8_t, kHeaderProbe> head{};
  const std::size_t got = file.read_at(0, std::as_writable_bytes(std::span(head)));
  const auto first = parse_sized_header(std::span<const std::uint8_t>(head.data(), got));
  if (!first || !first->uncompressed_size) return std::nullopt;
  const auto probe = static_cast<std::size_t>(std::min<std::uint64_t>(file_size, kTableProbe));
  std::vector<std::uint8_t> tail(probe);
  if (file.read_at(file_size - probe, std::as_writable_bytes(std::span(tail))) != probe)
    return std::nullopt;
  const std::uint8_t* end = tail.data() + probe;
  static constexpr std::uint8_t kClose[10] = {3, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::memcmp(end - 10, kClose, 10) != 0 || end[-18] != 'V' || end[-17] != 'E' ||
      end[-16] != 4 || end[-15] != 0)
    return std::nullopt;
  const std::uint64_t size = le32(end - 14);
  if (size < kTableFixed || size > probe || (size - kTableFixed) % 4 != 0) return std::nullopt;
  const std::uint64_t n = (size - kTableFixed) / 4;
  const std::uint8_t* t = end - size;
  static constexpr std::uint8_t kHead[4] = {0x1f, 0x8b, 8, 4};
  if (n == 0 || n > kMaxTableMembers || std::memcmp(t, kHead, 4) != 0 ||
      le16(t + 10) != size - 22 || t[12] != 'V' || t[13] != 'P' || le16(t + 14) != 8 ||
      le32(t + 16) != size || le32(t + 20) != 0 || t[24] != 'V' || t[25] != 'T' ||
      le16(t + 26) != 12 + 4 * n || le32(t + 28) != n)
    return std::nullopt;
  const std::uint32_t each = le32(t + 32), last = le32(t + 36);
  if (each == 0 || each > kMaxMemberSize || last > each) return std::nullopt;
  const std::uint64_t table_offset = file_size - size;
  std::vector<Member> members;
  members.reserve(static_cast<std::size_t>(n) + 1);
  std::uint64_t offset = 0, uncompressed = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t m = le32(t + 40 + 4 * i);
    const std::uint32_t usize = i + 1 == n ? last : each;
    // The smallest member ('VP' header, an empty block, trailer) and deflate's 1032:1 bound.
    if (m < kVpMinMember || m > table_offset - offset || usize / 1032 > m) return std::nullopt;
    members.push_back({offset, m, uncompressed, usize});
    offset += m;
    uncompressed += usize;
  }
  if (offset != table_offset) return std::nullopt;
  members.push_back({table_offset, size, uncompressed, 0});
  // The first member's header says the same as the table.
  if (first->member_size != members[0].size ||
      *first->uncompressed_size != members[0].uncompressed_size)
    return std::nullopt;
  return members;
}

}  // namespace

std::vector<std::uint8_t> encode_table_member(std::span<const std::uint32_t> sizes,
                                              std::uint32_t member_uncompressed,
                                              std::uint32_t last_uncompressed) {
  if (sizes.empty() || sizes.size() > kMaxTableMembers) return {};
  const std::size_t size = kTableFixed + 4 * sizes.size();
  std::vector<std::uint8_t> out(size, 0);
  std::uint8_t* t = out.data();
  const std::uint8_t fixed[10] = {0x1f, 0x8b, 8, 4, 0, 0, 0, 0, 0, 0xff};
  std::memcpy(t, fixed, 10);
  core::store_le(t + 10, size - 22, 2);
  t[12] = 'V', t[13] = 'P', t[14] = 8;
  core::store_le(t + 16, size, 4);
  t[24] = 'V', t[25] = 'T';
  core::store_le(t + 26, 12 + 4 * sizes.size(), 2);
  core::store_le(t + 28, sizes.size(), 4);
  core::store_le(t + 32, member_uncompressed, 4);
  core::store_le(t + 36, last_uncompressed, 4);
  for (std::size_t i = 0; i < sizes.size(); ++i) core::store_le(t + 40 + 4 * i, sizes[i], 4);
  std::uint8_t* e = t + size - kTableEnd;
  e[0] = 'V', e[1] = 'E', e[2] = 4;
  core::store_le(e + 4, size, 4);
  e[8] = 3;  // an empty final block (fixed Huffman: its end-of-block code), then CRC32 and ISIZE 0
  return out;
}

std::optional<std::vector<Member>> read_member_table(const core::RandomAccessInput& file) {
  if (auto members = members_from_table(file)) return members;
  const std::string& path = file.path();
  const std::uint64_t file_size = file.size();
  std::vector<Member> members;
  std::array<std::uint8_t, 8 + kHeaderProbe> buf{};
  std::uint64_t offset = 0, uncompressed = 0;
  // buf holds [offset - 8, offset + kHeaderProbe): the previous trailer, then this header.
  std::size_t got = file.read_at(0, std::as_writable_bytes(std::span(buf).subspan(8)));
  for (;;) {
    auto header = parse_sized_header(std::span<const std::uint8_t>(buf).subspan(8, got));
    if (!header) {
      if (members.empty()) return std::nullopt;
      if (got >= 2 && buf[8] == 0x1f && buf[9] == 0x8b) return std::nullopt;  // plain member follows
      if (!all_zero(file, offset))
        throw Error(ErrorCode::corrupt, path, "gzip member", "expected a gzip header or zero padding "
                    "after member " + std::to_string(members.size() - 1) + ", but found other bytes",
                    offset);
      break;
    }
    const std::uint64_t size = header->member_size;
    const std::size_t min_size = 12 + le16(&buf[8 + 10]) + 2 + 8;
    if (size < min_size)
      throw Error(ErrorCode::corrupt, path, "gzip member size",
                  "member " + std::to_string(members.size()) + " announces " +
                      std::to_string(size) + " bytes, less than its header and trailer",
                  offset);
    if (size > file_size - offset)
      throw Error(ErrorCode::truncated, path, "gzip member",
                  "member " + std::to_string(members.size()) + " announces " +
                      std::to_string(size) + " bytes, but the file ends " +
                      std::to_string(file_size - offset) + " bytes after its start",
                  offset);
    const std::uint64_t next = offset + size;
    got = file.read_at(next - 8, std::as_writable_bytes(std::span(buf)));
    if (got < 8)
      throw Error(ErrorCode::io, path, "gzip member", "short read of a member trailer", next - 8);
    got -= 8;
    const std::uint32_t isize = le32(&buf[4]);
    if (header->uncompressed_size) {
      if (*header->uncompressed_size != isize)
        throw Error(ErrorCode::corrupt, path, "ISIZE",
                    "member " + std::to_string(members.size()) + " announces " +
                        std::to_string(*header->uncompressed_size) + " bytes, but its trailer says " +
                        std::to_string(isize),
                    next - 4);
      if (isize > kMaxMemberSize) return std::nullopt;
    }
    // Deflate expands at most 1032:1; a larger claim cannot be true.
    if (isize / 1032 > size)
      throw Error(ErrorCode::corrupt, path, "ISIZE",
                  "member of " + std::to_string(size) + " bytes cannot inflate to " +
                      std::to_string(isize),
                  next - 4);
    members.push_back({offset, size, uncompressed, isize});
    uncompressed += isize;
    offset = next;
    if (offset == file_size) break;
  }
  return members;
}

void inflate_members(const core::RandomAccessInput& file, std::span<const Member> members,
                     std::uint64_t begin, std::uint64_t end, unsigned threads, const Sink& sink) {
  if (begin >= end) return;
  auto first = std::upper_bound(members.begin(), members.end(), begin,
                                [](std::uint64_t v, const Member& m) {
                                  return v < m.uncompressed_offset + m.uncompressed_size;
                                });
  auto last = std::lower_bound(first, members.end(), end, [](const Member& m, std::uint64_t v) {
    return m.uncompressed_offset < v;
  });
  // Empty members where the range ends (BGZF's end-of-file marker) are reached by it: they are
  // inflated too, so that their trailers are checked.
  while (last != members.end() && last->uncompressed_size == 0 && last->uncompressed_offset == end)
    ++last;
  const std::span<const Member> todo(first, last);
  if (todo.empty()) return;
  // Tasks of about one 'VP' member each: BGZF blocks are grouped so that a task is worth the
  // hand-over.
  std::vector<std::size_t> task_start{0};
  std::uint64_t acc = 0;
  for (std::size_t i = 0; i < todo.size(); ++i) {
    acc += todo[i].uncompressed_size;
    if (acc >= kMemberSize && i + 1 < todo.size()) {
      task_start.push_back(i + 1);
      acc = 0;
    }
  }
  task_start.push_back(todo.size());
  const std::string& path = file.path();
  core::parallel_for(task_start.size() - 1, threads, [&](std::size_t t) {
    thread_local Decompressor decompressor;
    thread_local std::vector<std::byte> in, out;
    if (!decompressor.d) throw std::bad_alloc();
    for (std::size_t i = task_start[t]; i < task_start[t + 1]; ++i) {
      const Member& m = todo[i];
      if (in.size() < m.size) in.resize(m.size);
      if (out.size() < std::max<std::size_t>(m.uncompressed_size, 1)) out.resize(std::max<std::size_t>(m.uncompressed_size, 1));
      const std::size_t n = file.read_at(m.offset, std::span(in.data(), m.size));
      if (n != m.size)
        throw Error(ErrorCode::truncated, path, "gzip member", "file shrank while reading", m.offset);
      std::size_t in_used = 0, out_used = 0;
      const libdeflate_result r = libdeflate_gzip_decompress_ex(
          decompressor.d, in.data(), m.size, out.data(), m.uncompressed_size, &in_used, &out_used);
      if (r != LIBDEFLATE_SUCCESS || in_used != m.size || out_used != m.uncompressed_size)
        throw Error(ErrorCode::corrupt, path, "gzip member",
                    "member " + std::to_string(static_cast<std::size_t>(&m - members.data())) +
                        ": invalid deflate data, or CRC32 or ISIZE mismatch",
                    m.offset);
      const std::uint64_t lo = std::max(begin, m.uncompressed_offset);
      const std::uint64_t hi = std::min(end, m.uncompressed_offset + m.uncompressed_size);
      if (lo < hi)
        sink(lo, std::span<const std::byte>(out.data() + (lo - m.uncompressed_offset), hi - lo));
    }
  });
}

}  // namespace voxpipe::gz
