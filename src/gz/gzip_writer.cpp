#include "gz/gzip_writer.hpp"

#include <zlib.h>

#include <string>

#include "voxpipe/error.hpp"

namespace voxpipe::gz {

struct GzipWriter::Stream {
  z_stream z{};
};

GzipWriter::GzipWriter(core::AtomicOutputFile& out, int level)
    : out_(out), stream_(new Stream), buffer_(std::size_t{1} << 18) {
  if (level < 0 || level > 9) {
    delete stream_;
    throw Error(ErrorCode::invalid_argument, out.path(), "gzip level",
                "expected 0..9, but received " + std::to_string(level));
  }
  // Raw deflate with the parameters Python's zlib.compressobj uses for gzip.GzipFile.
  if (deflateInit2(&stream_->z, level, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    delete stream_;
    throw Error(ErrorCode::io, out.path(), "", "cannot initialise zlib deflate");
  }
  // XFL as Python's gzip: 2 for the slowest level, 4 for the fastest, else 0.
  std::uint8_t xfl = level == 9 ? 2 : level == 1 ? 4 : 0;
  const std::uint8_t header[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, xfl, 0xff};
  out_.write(std::as_bytes(std::span(header)));
  crc_ = static_cast<std::uint32_t>(crc32(0, nullptr, 0));
}

GzipWriter::~GzipWriter() {
  deflateEnd(&stream_->z);
  delete stream_;
}

void GzipWriter::pump(int flush) {
  z_stream& z = stream_->z;
  do {
    z.next_out = reinterpret_cast<Bytef*>(buffer_.data());
    z.avail_out = static_cast<uInt>(buffer_.size());
    int rc = deflate(&z, flush);
    if (rc == Z_STREAM_ERROR) throw Error(ErrorCode::io, out_.path(), "", "zlib deflate failed");
    out_.write(std::span(buffer_.data(), buffer_.size() - z.avail_out));
  } while (z.avail_out == 0);
}

void GzipWriter::write(std::span<const std::byte> bytes) {
  z_stream& z = stream_->z;
  while (!bytes.empty()) {
    // zlib counts in uInt: feed at most 1 GiB at a time.
    std::size_t n = std::min<std::size_t>(bytes.size(), std::size_t{1} << 30);
    const auto* p = reinterpret_cast<const Bytef*>(bytes.data());
    crc_ = static_cast<std::uint32_t>(crc32_z(crc_, p, n));
    size_ += n;
    z.next_in = const_cast<Bytef*>(p);
    z.avail_in = static_cast<uInt>(n);
    pump(Z_NO_FLUSH);
    bytes = bytes.subspan(n);
  }
}

void GzipWriter::finish() {
  stream_->z.avail_in = 0;
  pump(Z_FINISH);
  std::uint8_t trailer[8];
  std::uint32_t isize = static_cast<std::uint32_t>(size_);  // modulo 2^32, per RFC 1952
  for (int i = 0; i < 4; ++i) {
    trailer[i] = static_cast<std::uint8_t>(crc_ >> (8 * i));
    trailer[4 + i] = static_cast<std::uint8_t>(isize >> (8 * i));
  }
  out_.write(std::as_bytes(std::span(trailer)));
}

}  // namespace voxpipe::gz
