// Forward-only byte readers for the parser: a file, bytes in memory, or the raw-deflate stream
// of a Deflated Explicit VR Little Endian dataset, all behind one buffered Reader that counts
// positions, peeks a few bytes ahead and skips values without reading them.
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/file.hpp"

namespace voxpipe::dicom {

class Backend {
 public:
  virtual ~Backend() = default;
  // Copies up to n bytes to dst; fewer only at the end of the stream.
  virtual std::size_t pull(std::uint8_t* dst, std::size_t n) = 0;
  // Passes over up to n bytes; fewer only at the end of the stream.
  virtual std::uint64_t discard(std::uint64_t n) = 0;
  // Bytes not yet pulled, when the backend knows (files and memory do, inflate does not).
  virtual std::optional<std::uint64_t> left() const = 0;
};

class Reader {
 public:
  // `position` is the stream position of the backend's next byte.
  Reader(Backend& backend, std::uint64_t position);

  std::uint64_t position() const noexcept { return position_; }
  // Bytes left to read, when known.
  std::optional<std::uint64_t> left() const;
  // True when no byte is left.
  bool at_end();
  // Copies up to n (<= 256) bytes ahead without consuming them; returns how many there are.
  std::size_t peek(std::uint8_t* dst, std::size_t n);
  // Reads up to n bytes; fewer only at the end.
  std::size_t read(std::uint8_t* dst, std::size_t n);
  // Skips up to n bytes; fewer only at the end.
  std::uint64_t skip(std::uint64_t n);

 private:
  void fill(std::size_t want);

  Backend& backend_;
  // Not zeroed: only bytes in [head_, tail_) are ever read.
  std::unique_ptr<std::uint8_t[]> buffer_;
  std::size_t head_ = 0, tail_ = 0;
  // Bytes asked of the backend by the next fill: small first (a dataset's metadata is usually a
  // few KiB, and the pixel data that follows need not be copied), doubling up to the buffer.
  std::size_t chunk_;
  std::uint64_t position_;
};

class MemoryBackend final : public Backend {
 public:
  explicit MemoryBackend(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
  std::size_t pull(std::uint8_t* dst, std::size_t n) override;
  std::uint64_t discard(std::uint64_t n) override;
  std::optional<std::uint64_t> left() const override { return bytes_.size() - at_; }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t at_ = 0;
};

class FileBackend final : public Backend {
 public:
  explicit FileBackend(const core::InputFile& file) : file_(file) {}
  std::size_t pull(std::uint8_t* dst, std::size_t n) override;
  std::uint64_t discard(std::uint64_t n) override;
  std::optional<std::uint64_t> left() const override { return file_.size() - at_; }

 private:
  const core::InputFile& file_;
  std::uint64_t at_ = 0;
};

// Raw deflate (RFC 1951, no zlib or gzip wrapper) of everything `source` has left. Memory: the
// zlib state (~40 KiB) and one input buffer, whatever the sizes. Throws Error(corrupt) for an
// invalid stream, Error(truncated) when the input ends before the stream does, Error(limit)
// when the output would exceed `max_output`.
class InflateBackend final : public Backend {
 public:
  InflateBackend(Reader& source, std::string name, std::uint64_t source_offset,
                 std::uint64_t max_output);
  ~InflateBackend() override;
  InflateBackend(const InflateBackend&) = delete;
  InflateBackend& operator=(const InflateBackend&) = delete;

  std::size_t pull(std::uint8_t* dst, std::size_t n) override;
  std::uint64_t discard(std::uint64_t n) override;
  std::optional<std::uint64_t> left() const override { return std::nullopt; }

 private:
  Reader& source_;
  std::string name_;
  std::uint64_t source_offset_;
  std::uint64_t max_output_;
  z_stream z_{};
  bool finished_ = false;
  std::vector<std::uint8_t> input_;
  std::vector<std::uint8_t> scratch_;
};

}  // namespace voxpipe::dicom
