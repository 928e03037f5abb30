// Streaming gzip decompression as a ByteSource: inflates a (possibly multi-member) gzip file
// front to back, verifying every member's CRC32 and ISIZE. Memory: one compressed input buffer
// (kInputChunk) plus the inflate state, whatever the file size.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/file.hpp"

namespace voxpipe::gz {

// True when the first bytes are the gzip magic 1f 8b.
bool has_gzip_magic(std::span<const std::uint8_t> head) noexcept;

class GzipByteSource final : public core::ByteSource {
 public:
  // Throws Error(format) if the file does not start with the gzip magic.
  explicit GzipByteSource(const std::string& path);
  // The same over stored bytes it shares (a file, a buffer in memory).
  explicit GzipByteSource(std::shared_ptr<const core::RandomAccessInput> input);
  ~GzipByteSource() override;

  // Sequential: an offset before the current position restarts inflation from the beginning;
  // an offset after it inflates and discards the bytes in between. Reading ends early only at
  // the end of the last member. Throws Error(corrupt) on invalid deflate data, a checksum
  // mismatch or data after a member that is neither zero padding nor a member, and
  // Error(truncated) when the file ends inside a member (its trailer included). A read that
  // ends where a member's data end checks that member's trailer before it returns.
  std::size_t read_at(std::uint64_t offset, std::span<std::byte> dst) override;
  bool random_access() const noexcept override { return false; }
  const std::string& path() const noexcept override { return file_.path(); }

  // Bytes of compressed input consumed so far (for tests of "inflates only what it needs").
  std::uint64_t compressed_consumed() const noexcept;

 private:
  struct State;
  std::size_t inflate_into(std::byte* out, std::size_t n);
  std::size_t inflate_raw(std::byte* out, std::size_t n);
  // True when the last member's deflate data have ended (its trailer is due or read, or the
  // next member has given nothing yet).
  bool member_data_ended() const noexcept;
  void restart();

  std::shared_ptr<const core::RandomAccessInput> input_;
  const core::RandomAccessInput& file_;  // *input_
  std::unique_ptr<State> state_;
  std::uint64_t position_ = 0;  // uncompressed offset of the next byte inflate_into produces
  std::unique_ptr<std::byte[]> discard_;  // where skipped bytes are inflated
};

}  // namespace voxpipe::gz
