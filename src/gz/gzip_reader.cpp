#include "gz/gzip_reader.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <vector>

#include "voxpipe/error.hpp"

#if VOXPIPE_HAVE_ISAL
#include <isa-l/igzip_lib.h>
#else
#include <zlib.h>
#endif

namespace voxpipe::gz {

namespace {
// 1 MiB of compressed input per file read: large enough that read syscalls are noise next to
// inflate (~0.5 GB/s), small enough to stay bounded for any file size.
constexpr std::size_t kInputChunk = std::size_t{1} << 20;
constexpr std::size_t kRemoteFirstChunk = std::size_t{16} << 10;
}  // namespace

bool has_gzip_magic(std::span<const std::uint8_t> head) noexcept {
  return head.size() >= 2 && head[0] == 0x1f && head[1] == 0x8b;
}

struct GzipByteSource::State {
  // Not zero-filled: first touch of fresh pages is what costs here (DESIGN.md).
  std::unique_ptr<std::uint8_t[]> input{new std::uint8_t[kInputChunk]};
  std::size_t input_begin = 0;    // next unconsumed byte in `input`
  std::size_t input_end = 0;      // bytes valid in `input`
  std::uint64_t file_offset = 0;  // file offset of input[input_end]
  bool in_member = false;         // inside a gzip member (header seen, trailer not yet)
  std::uint64_t member_output = 0;  // bytes the current member has given so far
  bool finished = false;          // end of the last member reached
  // One byte inflated past the last request (see inflate_into), handed out first next time.
  std::uint8_t ahead = 0;
  bool has_ahead = false;
  // An error met while inflating that byte inside a member's data: it belongs to the next read.
  std::exception_ptr deferred;
#if VOXPIPE_HAVE_ISAL
  inflate_state isal{};
#else
  z_stream z{};
  bool z_init = false;
  ~State() {
    if (z_init) inflateEnd(&z);
  }
#endif

  std::uint64_t consumed() const { return file_offset - (input_end - input_begin); }
};

GzipByteSource::GzipByteSource(const std::string& path)
    : GzipByteSource(std::make_shared<const core::InputFile>(path)) {}

GzipByteSource::GzipByteSource(std::shared_ptr<const core::RandomAccessInput> input)
    : input_(std::move(input)), file_(*input_) {
  std::uint8_t head[2] = {0, 0};
  std::size_t got = file_.read_at(0, std::as_writable_bytes(std::span(head)));
  if (!has_gzip_magic(std::span<const std::uint8_t>(head, got)))
    throw Error(ErrorCode::format, file_.path(), "gzip magic",
                "expected a gzip file (1f 8b) because of the .gz name, but it is not a gzip file", 0);
  restart();
}

GzipByteSource::~GzipByteSource() = default;

std::uint64_t GzipByteSource::compressed_consumed() const noexcept { return state_->consumed(); }

void GzipByteSource::restart() {
  state_ = std::make_unique<State>();
  position_ = 0;
}

// Inflates up to n bytes into out; returns fewer only at the end of the stream.
std::size_t GzipByteSource::inflate_into(std::byte* out, std::size_t n) {
  State& s = *state_;
  if (n == 0) return 0;
  if (s.deferred) std::rethrow_exception(s.deferred);
  std::size_t produced = 0;
  if (s.has_ahead) {
    out[0] = static_cast<std::byte>(s.ahead);
    s.has_ahead = false;
    produced = 1;
  }
  produced += inflate_raw(out + produced, n - produced);
  // A read that ends where the stream ends must still check the trailer (CRC32, ISIZE) and what
  // follows it (zero padding, another member, or an error), or a damaged file whose data happen
  // to fill the request would pass. So one more byte is inflated: it either shows that the
  // stream goes on (kept for the next read) or runs the decoder through the member's end. Damage
  // after the member's data (trailer, what follows it) fails this read; damage inside the data
  // after the bytes asked for fails the read that reaches it, as without the look-ahead (a
  // header read of a file cut in its data still succeeds, as nibabel's does).
  if (produced == n) {
    try {
      if (inflate_raw(reinterpret_cast<std::byte*>(&s.ahead), 1) == 1) s.has_ahead = true;
    } catch (const Error&) {
      if (member_data_ended()) throw;
      s.deferred = std::current_exception();
    }
  }
  position_ += produced;
  return produced;
}

bool GzipByteSource::member_data_ended() const noexcept {
  const State& s = *state_;
  // Between members, or in a member that has given nothing yet (its header): after the data.
  if (!s.in_member || s.member_output == 0) return true;
#if VOXPIPE_HAVE_ISAL
  return s.isal.block_state == ISAL_BLOCK_INPUT_DONE || s.isal.block_state == ISAL_BLOCK_FINISH ||
         s.isal.block_state == ISAL_CHECKSUM_CHECK;
#else
  return (s.z.data_type & 64) != 0;  // zlib: inside the last block (or past it)
#endif
}

std::size_t GzipByteSource::inflate_raw(std::byte* out, std::size_t n) {
  State& s = *state_;
  std::size_t produced = 0;
  while (produced < n && !s.finished) {
    if (s.input_begin == s.input_end) {
      // Stored bytes that cost a request per read (an object) are read in pieces that grow
      // with the position: a header needs only the first few KiB.
      const std::size_t chunk =
          file_.fetches() ? static_cast<std::size_t>(std::clamp<std::uint64_t>(
                                s.file_offset, kRemoteFirstChunk, kInputChunk))
                          : kInputChunk;
      std::size_t got = file_.read_at(
          s.file_offset, std::as_writable_bytes(std::span(s.input.get(), chunk)));
      s.input_begin = 0;
      s.input_end = got;
      s.file_offset += got;
      if (got == 0) {
        if (s.in_member)
          throw Error(ErrorCode::truncated, path(), "gzip stream",
                      "expected more compressed data, but the file ends inside a gzip member",
                      s.file_offset);
        s.finished = true;
        break;
      }
    }
    if (!s.in_member) {
      // Between members: zero padding is allowed (as Python's gzip); anything else must be the
      // next member's magic.
      while (s.input_begin < s.input_end && s.input[s.input_begin] == 0) ++s.input_begin;
      if (s.input_begin == s.input_end) continue;
      if (s.input[s.input_begin] != 0x1f)
        throw Error(ErrorCode::corrupt, path(), "gzip member",
                    "expected a gzip member (1f 8b) or the end of the file, but found other data",
                    s.consumed());
      // Reserved flag bits: an error, as for zlib, GNU gzip and the parallel engine (ISA-L
      // ignores them). The header may straddle the input buffer: read the byte from the file.
      std::uint8_t flags = 0;
      const std::uint64_t flags_at = s.consumed() + 3;
      if (file_.read_at(flags_at, std::as_writable_bytes(std::span(&flags, 1))) == 1 && (flags & 0xe0))
        throw Error(ErrorCode::corrupt, path(), "gzip header",
                    "expected no reserved flag bits, but found flags " + std::to_string(flags),
                    flags_at);
#if VOXPIPE_HAVE_ISAL
      isal_inflate_init(&s.isal);
      s.isal.crc_flag = ISAL_GZIP;
#else
      if (s.z_init) inflateEnd(&s.z);
      s.z = z_stream{};
      if (inflateInit2(&s.z, 16 + MAX_WBITS) != Z_OK)
        throw Error(ErrorCode::io, path(), "", "cannot initialise zlib");
      s.z_init = true;
#endif
      s.in_member = true;
      s.member_output = 0;
    }
    const std::uint64_t at = s.consumed();
#if VOXPIPE_HAVE_ISAL
    s.isal.next_in = s.input.get() + s.input_begin;
    s.isal.avail_in = static_cast<std::uint32_t>(s.input_end - s.input_begin);
    std::size_t want = std::min<std::size_t>(n - produced, 1u << 30);
    s.isal.next_out = reinterpret_cast<std::uint8_t*>(out + produced);
    s.isal.avail_out = static_cast<std::uint32_t>(want);
    int rc = isal_inflate(&s.isal);
    produced += want - s.isal.avail_out;
    s.member_output += want - s.isal.avail_out;
    s.input_begin = s.input_end - s.isal.avail_in;
    if (rc == ISAL_INCORRECT_CHECKSUM)
      throw Error(ErrorCode::corrupt, path(), "gzip trailer",
                  "CRC32 or ISIZE does not match the inflated data", s.consumed());
    if (rc < 0)
      throw Error(ErrorCode::corrupt, path(), "gzip stream",
                  "invalid compressed data (ISA-L error " + std::to_string(rc) + ")", at);
    if (s.isal.block_state == ISAL_BLOCK_FINISH) s.in_member = false;
#else
    s.z.next_in = s.input.get() + s.input_begin;
    s.z.avail_in = static_cast<uInt>(s.input_end - s.input_begin);
    std::size_t want = std::min<std::size_t>(n - produced, 1u << 30);
    s.z.next_out = reinterpret_cast<Bytef*>(out + produced);
    s.z.avail_out = static_cast<uInt>(want);
    int rc = inflate(&s.z, Z_NO_FLUSH);
    produced += want - s.z.avail_out;
    s.member_output += want - s.z.avail_out;
    s.input_begin = s.input_end - s.z.avail_in;
    if (rc == Z_DATA_ERROR && s.z.msg && std::strstr(s.z.msg, "check"))
      throw Error(ErrorCode::corrupt, path(), "gzip trailer",
                  "CRC32 or ISIZE does not match the inflated data", s.consumed());
    if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_MEM_ERROR)
      throw Error(ErrorCode::corrupt, path(), "gzip stream",
                  std::string("invalid compressed data (") + (s.z.msg ? s.z.msg : "zlib") + ")",
                  at);
    if (rc == Z_STREAM_END) s.in_member = false;
#endif
  }
  return produced;
}

std::size_t GzipByteSource::read_at(std::uint64_t offset, std::span<std::byte> dst) {
  if (offset < position_) restart();
  if (offset > position_) {
    // Skipped bytes are inflated into a scratch buffer kept for the source's lifetime.
    constexpr std::size_t kDiscard = 256 * 1024;
    if (!discard_) discard_.reset(new std::byte[kDiscard]);
    while (position_ < offset) {
      std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(offset - position_, kDiscard));
      if (inflate_into(discard_.get(), want) < want) return 0;
    }
  }
  return inflate_into(dst.data(), dst.size());
}

}  // namespace voxpipe::gz
