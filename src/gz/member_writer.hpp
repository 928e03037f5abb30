// Parallel gzip output in the sized-member layouts of members.hpp: the input is cut into
// members, a batch of members is compressed at once on the pool (libdeflate) while the previous
// batch is written, and the members are written in order. Every gzip reader reads the result; voxpipe reads it in parallel.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/file.hpp"
#include "gz/members.hpp"

namespace voxpipe::gz {

class MemberWriter {
 public:
  // `level` 0..9 (0 stores; libdeflate's levels, which at 1 compress better than zlib's 1 and
  // at 6 about as well as zlib's 6). `layout` is members or bgzf. `threads`: as resolved by the
  // public call (write_nifti); 0 is taken as 1.
  // Throws Error(invalid_argument) for a bad level or layout.
  MemberWriter(core::AtomicOutputFile& out, int level, GzipLayout layout, unsigned threads);
  ~MemberWriter();
  MemberWriter(const MemberWriter&) = delete;
  MemberWriter& operator=(const MemberWriter&) = delete;

  void write(std::span<const std::byte> bytes);
  // Compresses what is buffered and writes the last members, then BGZF's end marker, or for
  // 'VP' members their table member (members.hpp: a reader by ranges finds every member in one
  // request); the file is not committed. An empty input still gives one (empty) member: a valid
  // gzip file.
  void finish();

 private:
  void flush_batch();

  core::AtomicOutputFile& out_;
  int level_;
  GzipLayout layout_;
  unsigned threads_;
  std::size_t member_size_;
  std::vector<std::byte> input_;  // a batch of members, filled by write()
  std::size_t filled_ = 0;
  // Two sets of compressed members: one being compressed, the other (the previous batch,
  // `pending_` members) being written to the file meanwhile.
  std::array<std::vector<std::vector<std::uint8_t>>, 2> compressed_;
  std::size_t current_set_ = 0;
  std::size_t pending_ = 0;
  bool wrote_member_ = false;
  // The sizes of the 'VP' members written, for their table, and the last one's data size.
  std::vector<std::uint32_t> sizes_;
  std::uint32_t last_uncompressed_ = 0;
};

}  // namespace voxpipe::gz
