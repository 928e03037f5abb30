#include "dicom/reader.hpp"

#include <algorithm>
#include <cstring>

#include "voxpipe/error.hpp"

namespace voxpipe::dicom {
namespace {
// Reads of element headers are 4 to 12 bytes; 64 KiB keeps the syscalls per file few.
constexpr std::size_t kBufferSize = 64 * 1024;
constexpr std::size_t kFirstChunk = 8 * 1024;
constexpr std::size_t kMaxPeek = 256;
}  // namespace

Reader::Reader(Backend& backend, std::uint64_t position)
    : backend_(backend),
      buffer_(new std::uint8_t[kBufferSize]),
      chunk_(kFirstChunk),
      position_(position) {}

std::optional<std::uint64_t> Reader::left() const {
  const auto rest = backend_.left();
  if (!rest) return std::nullopt;
  return *rest + (tail_ - head_);
}

void Reader::fill(std::size_t want) {
  if (tail_ - head_ >= want) return;
  if (head_ > 0) {
    std::memmove(buffer_.get(), buffer_.get() + head_, tail_ - head_);
    tail_ -= head_;
    head_ = 0;
  }
  while (tail_ < want) {
    const std::size_t ask = std::min(kBufferSize - tail_, std::max(chunk_, want - tail_));
    const std::size_t got = backend_.pull(buffer_.get() + tail_, ask);
    chunk_ = std::min(kBufferSize, chunk_ * 2);
    if (got == 0) return;
    tail_ += got;
  }
}

bool Reader::at_end() {
  fill(1);
  return head_ == tail_;
}

std::size_t Reader::peek(std::uint8_t* dst, std::size_t n) {
  n = std::min(n, kMaxPeek);
  fill(n);
  const std::size_t have = std::min(n, tail_ - head_);
  std::memcpy(dst, buffer_.get() + head_, have);
  return have;
}

std::size_t Reader::read(std::uint8_t* dst, std::size_t n) {
  std::size_t done = 0;
  while (done < n) {
    if (head_ == tail_) {
      // Large reads go straight to the destination.
      if (n - done >= kBufferSize) {
        const std::size_t got = backend_.pull(dst + done, n - done);
        if (got == 0) break;
        done += got;
        position_ += got;
        continue;
      }
      fill(1);
      if (head_ == tail_) break;
    }
    const std::size_t take = std::min(n - done, tail_ - head_);
    std::memcpy(dst + done, buffer_.get() + head_, take);
    head_ += take;
    done += take;
    position_ += take;
  }
  return done;
}

std::uint64_t Reader::skip(std::uint64_t n) {
  const std::uint64_t buffered = std::min<std::uint64_t>(n, tail_ - head_);
  head_ += static_cast<std::size_t>(buffered);
  std::uint64_t done = buffered;
  if (done < n) done += backend_.discard(n - done);
  position_ += done;
  return done;
}

std::size_t MemoryBackend::pull(std::uint8_t* dst, std::size_t n) {
  const std::size_t take = std::min(n, bytes_.size() - at_);
  if (take) std::memcpy(dst, bytes_.data() + at_, take);
  at_ += take;
  return take;
}

std::uint64_t MemoryBackend::discard(std::uint64_t n) {
  const auto take = static_cast<std::size_t>(std::min<std::uint64_t>(n, bytes_.size() - at_));
  at_ += take;
  return take;
}

std::size_t FileBackend::pull(std::uint8_t* dst, std::size_t n) {
  const auto take = static_cast<std::size_t>(std::min<std::uint64_t>(n, file_.size() - at_));
  if (take == 0) return 0;
  const std::size_t got = file_.read_at(at_, std::as_writable_bytes(std::span(dst, take)));
  if (got != take)
    throw Error(ErrorCode::io, file_.path(), "", "the file shrank while being read", at_ + got);
  at_ += got;
  return got;
}

std::uint64_t FileBackend::discard(std::uint64_t n) {
  const std::uint64_t take = std::min<std::uint64_t>(n, file_.size() - at_);
  at_ += take;
  return take;
}

InflateBackend::InflateBackend(Reader& source, std::string name, std::uint64_t source_offset,
                               std::uint64_t max_output)
    : source_(source),
      name_(std::move(name)),
      source_offset_(source_offset),
      max_output_(max_output),
      input_(kBufferSize) {
  if (inflateInit2(&z_, -MAX_WBITS) != Z_OK)
    throw Error(ErrorCode::io, name_, "deflated dataset", "cannot initialise zlib");
}

InflateBackend::~InflateBackend() { inflateEnd(&z_); }

std::size_t InflateBackend::pull(std::uint8_t* dst, std::size_t n) {
  std::size_t done = 0;
  while (done < n && !finished_) {
    if (z_.avail_in == 0) {
      const std::size_t got = source_.read(input_.data(), input_.size());
      if (got == 0)
        throw Error(ErrorCode::truncated, name_, "deflated dataset",
                    "expected more compressed data, but the file ends before the deflate "
                    "stream does",
                    source_.position());
      z_.next_in = input_.data();
      z_.avail_in = static_cast<uInt>(got);
    }
    const std::size_t want = std::min<std::size_t>(n - done, 1u << 30);
    z_.next_out = dst + done;
    z_.avail_out = static_cast<uInt>(want);
    const int rc = inflate(&z_, Z_NO_FLUSH);
    done += want - z_.avail_out;
    if (rc == Z_STREAM_END) {
      finished_ = true;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      throw Error(ErrorCode::corrupt, name_, "deflated dataset",
                  std::string("the deflate stream is invalid: ") + (z_.msg ? z_.msg : "zlib error"),
                  source_offset_ + z_.total_in);
    }
    if (z_.total_out > max_output_)
      throw Error(ErrorCode::limit, name_, "deflated dataset",
                  "expected at most " + std::to_string(max_output_) +
                      " inflated bytes (DicomReadOptions::max_inflated_size), but there are more",
                  source_offset_ + z_.total_in);
  }
  return done;
}

std::uint64_t InflateBackend::discard(std::uint64_t n) {
  if (scratch_.empty()) scratch_.resize(kBufferSize);
  std::uint64_t done = 0;
  while (done < n) {
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(n - done, scratch_.size()));
    const std::size_t got = pull(scratch_.data(), want);
    if (got == 0) break;
    done += got;
  }
  return done;
}

}  // namespace voxpipe::dicom
