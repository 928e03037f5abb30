// Multi-member gzip whose members announce their own sizes, so that a reader finds every member
// from the headers alone and inflates them in parallel, or only the ones a range needs, with no
// index: voxpipe's own 'VP' layout and BGZF (htslib's 'BC'). Any gzip reader still reads these
// files, because RFC 1952 allows members to follow one another.
//
// 'VP' member: 1f 8b 08 04 | mtime 0 | XFL | OS ff | XLEN 12 | 'V' 'P' | SLEN 8 |
//              u32 member size (header to trailer, bytes) | u32 uncompressed size |
//              raw deflate | CRC32 | ISIZE                     (all integers little-endian)
// BGZF member: the same with subfield 'B' 'C', SLEN 2, u16 member size - 1 (SAMv1 section 4.1);
//              at most 64 KiB before and after compression; an empty member marks the end.
//
// A 'VP' file ends with a table member: an empty member (no data: every gzip reader passes over
// it) whose extra field lists the members' sizes, so that a reader by ranges finds every member
// in one request of the file's end instead of one request per member header:
//   1f 8b 08 04 | mtime 0 | XFL 0 | OS ff | XLEN u16 = 36 + 4n |
//   'V' 'P' 08 00 | u32 its own size | u32 0          (an empty sized member to a member walk)
//   'V' 'T' SLEN = 12 + 4n | u32 n (data members) | u32 uncompressed size of each member but
//       the last | u32 the last one's | n x u32 member size (header to trailer)
//   'V' 'E' 04 00 | u32 its own size                  (the last 18 bytes of the file start here)
//   03 00 (an empty final block) | CRC32 0 | ISIZE 0
// Its size is 58 + 4n; XLEN's 16 bits limit n to kMaxTableMembers (16 GiB of data); a file with
// more members has no table and is walked.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/file.hpp"
#include "gz/stream.hpp"
#include "voxpipe/gzip.hpp"

namespace voxpipe::gz {

using voxpipe::GzipLayout;

// Uncompressed bytes per 'VP' member. 1 MiB: on the 4D benchmark series a file of 1 MiB members
// is 0.1% larger than one of 4 MiB members, and a random read inflates at most ~2 MiB more than
// it needs; 300+ members keep all cores busy on a 300 MB image.
inline constexpr std::uint32_t kMemberSize = 1u << 20;
// Uncompressed bytes per BGZF block, as bgzip writes them.
inline constexpr std::uint32_t kBgzfBlockSize = 0xff00;

// The most data members a table member lists.
inline constexpr std::uint32_t kMaxTableMembers = (0xffff - 36) / 4;

struct Member {
  std::uint64_t offset = 0;               // of the member's header in the file
  std::uint64_t size = 0;                 // header to trailer, bytes
  std::uint64_t uncompressed_offset = 0;  // of its first byte in the uncompressed stream
  std::uint32_t uncompressed_size = 0;
};

// The members of `file` when its first member announces its size ('VP' or 'BC' subfield);
// std::nullopt for a plain gzip file, or when a later member does not announce its size (a
// sized file concatenated with another: the caller reads it as plain gzip). A file that ends
// with a table member whose sizes add up to its offset, and whose first entry is the first
// member's 'VP' size, is read from the table (its first member's header and the file's last
// 64 KiB: two reads, whatever the member count; the end is read only when the first member is
// 'VP'; the members themselves are checked when inflated); otherwise the members' headers and
// trailers are read one after another. Zero bytes after the last member are accepted, as gzip
// does. Throws Error(truncated) when a member
// runs past the end of the file and Error(corrupt) when sizes are inconsistent (a member too
// small, ISIZE not matching 'VP', garbage after the end). The table member is listed too (an
// empty member), as a walk lists it.
std::optional<std::vector<Member>> read_member_table(const core::RandomAccessInput& file);

// The table member of the 'VP' members whose sizes are `sizes`, each holding
// `member_uncompressed` bytes but the last, which holds `last_uncompressed`; empty when there
// are more than kMaxTableMembers (the file then has no table).
std::vector<std::uint8_t> encode_table_member(std::span<const std::uint32_t> sizes,
                                              std::uint32_t member_uncompressed,
                                              std::uint32_t last_uncompressed);

// Inflates the members that overlap [begin, end) of the uncompressed stream, on up to `threads`
// pool threads (0 is taken as 1), and delivers exactly the bytes of [begin, end) to `sink`.
// Every inflated member's CRC32 and ISIZE are checked: Error(corrupt) names the member and its
// offset. Memory: two buffers of one member per thread.
void inflate_members(const core::RandomAccessInput& file, std::span<const Member> members,
                     std::uint64_t begin, std::uint64_t end, unsigned threads, const Sink& sink);

}  // namespace voxpipe::gz
