#include "gz/known_window.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/bytes.hpp"
#include "gz/deflate_decoder.hpp"
#include "gz/stream.hpp"
#include "voxpipe/error.hpp"

#if VOXPIPE_HAVE_ISAL
#include <isa-l/crc.h>
#include <isa-l/igzip_lib.h>
#endif
#include <zlib.h>

namespace voxpipe::gz::inflate_detail {

namespace {

// Compressed input per read: large enough that pread calls are noise next to inflate.
constexpr std::size_t kInputBytes = std::size_t{1} << 18;
// From stored bytes that cost a request per read (an object), which readers fetch ahead
// (GzipSource::prefetch_compressed): a smaller piece, so that a read that ends at a seek point
// needs little fetched beyond it.
constexpr std::size_t kFetchedInputBytes = std::size_t{1} << 16;
// Block starts are searched for only in the first MiB of a chunk: real blocks are far shorter
// (gzip -6 writes ~16-64 KiB), and a stream without findable starts (one giant block) would
// otherwise cost a full bit-by-bit scan of every chunk.
constexpr std::uint64_t kMaxSearch = std::uint64_t{1} << 20;
// Bytes after the searched range given to the finder's trial decode (64 KiB of output).
constexpr std::uint64_t kTrialMargin = std::uint64_t{128} << 10;

// Sequential byte reads for the few framing bytes.
class ByteCursor {
 public:
  ByteCursor(const core::RandomAccessInput& file, std::uint64_t offset)
      : file_(file), offset_(offset) {}
  int next() {
    if (pos_ == len_) {
      len_ = file_.read_at(offset_, std::as_writable_bytes(std::span(buf_)));
      pos_ = 0;
      if (len_ == 0) return -1;
    }
    ++offset_;
    return buf_[pos_++];
  }
  std::uint64_t offset() const { return offset_; }

 private:
  const core::RandomAccessInput& file_;
  std::uint64_t offset_;
  std::uint8_t buf_[4096];
  std::size_t pos_ = 0;
  std::size_t len_ = 0;
};

[[noreturn]] void truncated(const core::RandomAccessInput& file, const char* field,
                            const char* what, std::uint64_t at) {
  throw Error(ErrorCode::truncated, file.path(), field,
              std::string("expected ") + what + ", but the file ends", at);
}

}  // namespace

void RunOutput::write(std::span<const std::uint8_t> bytes) {
  while (!bytes.empty()) {
    const std::span<std::uint8_t> dst = space();
    const std::size_t n = std::min(dst.size(), bytes.size());
    std::memcpy(dst.data(), bytes.data(), n);
    commit(n);
    bytes = bytes.subspan(n);
  }
}

std::uint32_t crc32_update(std::uint32_t crc, const std::uint8_t* data, std::size_t n) {
#if VOXPIPE_HAVE_ISAL
  return crc32_gzip_refl(crc, data, n);
#else
  while (n > 0) {
    const std::size_t k = std::min<std::size_t>(n, 1u << 30);
    crc = static_cast<std::uint32_t>(::crc32(crc, data, static_cast<uInt>(k)));
    data += k;
    n -= k;
  }
  return crc;
#endif
}

void MemberChecker::add(std::span<const Segment> segments, bool at_member_start) {
  if (at_member_start) {
    known_ = true;
    crc_ = 0;
    size_ = 0;
  }
  for (const Segment& s : segments) {
    crc_ = static_cast<std::uint32_t>(
        ::crc32_combine(crc_, s.crc, static_cast<z_off_t>(s.length)));
    size_ += s.length;
    if (!s.member_end) continue;
    if (known_) {
      if (crc_ != s.want_crc)
        throw Error(ErrorCode::corrupt, *path_, "gzip trailer",
                    "CRC32 of the inflated data does not match the trailer", s.trailer_byte);
      if (static_cast<std::uint32_t>(size_) != s.want_isize)
        throw Error(ErrorCode::corrupt, *path_, "gzip trailer",
                    "expected ISIZE " + std::to_string(size_ & 0xffffffffu) + " (the inflated " +
                        "size mod 2^32), but found " + std::to_string(s.want_isize),
                    s.trailer_byte + 4);
    }
    // The next segment starts a member.
    known_ = true;
    crc_ = 0;
    size_ = 0;
  }
}

std::uint64_t read_gzip_header(const core::RandomAccessInput& file, std::uint64_t offset,
                               bool first) {
  ByteCursor c(file, offset);
  const int id1 = c.next();
  const int id2 = c.next();
  if (id1 != 0x1f || id2 != 0x8b) {
    if (first)
      throw Error(ErrorCode::format, file.path(), "gzip magic",
                  "expected a gzip file (1f 8b), but it is not a gzip file", offset);
    if (id1 == 0x1f && id2 < 0) truncated(file, "gzip header", "a gzip member header", offset);
    throw Error(ErrorCode::corrupt, file.path(), "gzip member",
                "expected a gzip member (1f 8b) or the end of the file, but found other data",
                offset);
  }
  const int method = c.next();
  const int flags = c.next();
  if (flags < 0) truncated(file, "gzip header", "a gzip member header", offset);
  if (method != 8)
    throw Error(ErrorCode::corrupt, file.path(), "gzip header",
                "expected compression method 8 (deflate), but found " + std::to_string(method),
                offset + 2);
  if (flags & 0xe0)
    throw Error(ErrorCode::corrupt, file.path(), "gzip header",
                "expected no reserved flag bits, but found flags " + std::to_string(flags),
                offset + 3);
  for (int i = 0; i < 6; ++i)
    if (c.next() < 0) truncated(file, "gzip header", "a gzip member header", offset);
  if (flags & 4) {
    const int lo = c.next();
    const int hi = c.next();
    if (hi < 0) truncated(file, "gzip header", "the FEXTRA length", c.offset());
    for (int i = 0; i < (lo | (hi << 8)); ++i)
      if (c.next() < 0) truncated(file, "gzip header", "the FEXTRA field", c.offset());
  }
  for (int flag : {8, 16}) {
    if (!(flags & flag)) continue;
    for (int b;;) {
      b = c.next();
      if (b < 0) truncated(file, "gzip header", "a zero-terminated name or comment", c.offset());
      if (b == 0) break;
    }
  }
  if (flags & 2) {
    const std::uint64_t crc_at = c.offset();
    const int lo = c.next();
    const int hi = c.next();
    if (hi < 0) truncated(file, "gzip header", "the header CRC16", crc_at);
    std::vector<std::uint8_t> head(crc_at - offset);
    if (file.read_at(offset, std::as_writable_bytes(std::span(head))) != head.size())
      truncated(file, "gzip header", "a gzip member header", offset);
    const std::uint32_t crc = crc32_update(0, head.data(), head.size());
    if ((crc & 0xffff) != static_cast<std::uint32_t>(lo | (hi << 8)))
      throw Error(ErrorCode::corrupt, file.path(), "gzip header",
                  "header CRC16 does not match the header", crc_at);
  }
  return c.offset();
}

std::optional<std::uint64_t> finish_member(const core::RandomAccessInput& file,
                                           std::uint64_t end_bit, RunOutput& out) {
  const std::uint64_t trailer_byte = (end_bit + 7) / 8;
  std::uint8_t t[8];
  if (file.read_at(trailer_byte, std::as_writable_bytes(std::span(t))) != 8)
    truncated(file, "gzip trailer", "the 8-byte gzip trailer (CRC32, ISIZE)", trailer_byte);
  const auto crc = static_cast<std::uint32_t>(core::load_le(t, 4));
  const auto isize = static_cast<std::uint32_t>(core::load_le(t + 4, 4));
  out.member_end(crc, isize, trailer_byte);
  // Zero padding may follow the last member (as GzipByteSource accepts); anything else must be
  // the next member.
  ByteCursor c(file, trailer_byte + 8);
  for (;;) {
    const std::uint64_t at = c.offset();
    const int b = c.next();
    if (b < 0) return std::nullopt;
    if (b == 0) continue;
    const std::uint64_t first = read_gzip_header(file, at, false) * 8;
    out.member_start(first);
    return first;
  }
}

bool lands_on(const TargetFn& target, std::size_t& chunk, std::size_t chunk_count,
              std::uint64_t bit) {
  while (chunk < chunk_count) {
    const std::optional<BlockCandidate> c = target(chunk);
    if (!c || c->last_bit < bit) {
      ++chunk;
      continue;
    }
    return c->first_bit <= bit;
  }
  return false;
}

std::optional<RunEnd> end_member(const core::RandomAccessInput& file, std::uint64_t end_bit,
                                 RunOutput& out, const TargetFn& target, std::size_t& chunk,
                                 std::size_t chunk_count, std::uint64_t& bit) {
  const std::optional<std::uint64_t> next = finish_member(file, end_bit, out);
  if (!next) return RunEnd{chunk_count, file.size() * 8};
  bit = *next;
  if (lands_on(target, chunk, chunk_count, bit)) return RunEnd{chunk, bit};
  return std::nullopt;
}

ByteFetch file_fetch(const core::RandomAccessInput& file) {
  return [&file](std::uint64_t offset, std::span<std::uint8_t> dst) {
    return file.read_at(offset, std::as_writable_bytes(dst));
  };
}

std::size_t reader_buffer_bytes(const core::RandomAccessInput& file) {
  return file.fetches() ? kFetchedInputBytes : kInputBytes;
}

std::size_t chunk_search_bytes(std::size_t chunk_size) {
  return static_cast<std::size_t>(std::min<std::uint64_t>(chunk_size, kMaxSearch) + kTrialMargin);
}

std::optional<BlockCandidate> find_chunk_start(const core::RandomAccessInput& file,
                                               std::size_t chunk, std::size_t chunk_size,
                                               std::span<std::uint8_t> scratch) {
  const std::uint64_t from = std::uint64_t{chunk} * chunk_size;
  const std::uint64_t search = std::min<std::uint64_t>(chunk_size, kMaxSearch);
  const std::uint64_t end = std::min(file.size(), from + search + kTrialMargin);
  if (from >= end) return std::nullopt;
  std::span<std::uint8_t> data = scratch.first(static_cast<std::size_t>(end - from));
  data = data.first(file.read_at(from, std::as_writable_bytes(data)));
  return find_block_start(data, from, from * 8, (from + search) * 8);
}

RunEnd run_blocks(const core::RandomAccessInput& file, BitReader& reader,
                  DeflateDecoder<std::uint8_t>& dec, std::uint64_t bit,
                  std::span<const std::uint8_t> window, std::size_t chunk, std::size_t chunk_count,
                  const TargetFn& target, RunOutput& out) {
  // The decoder's buffer: the 32 KiB of history, then up to 2 x kFlush of output; output is
  // handed on at every block end (block_start() needs it written) and whenever kFlush is waiting.
  constexpr std::size_t kFlush = std::size_t{1} << 20;
  for (;;) {
    dec.start_with_window(bit, window);
    std::size_t emitted = dec.window_size();
    const auto emit = [&] {
      out.write(std::span<const std::uint8_t>(dec.data() + emitted, dec.size() - emitted));
      if (dec.size() > kWindowSize + kFlush) dec.discard_front(kWindowSize);
      emitted = dec.size();
    };
    std::uint64_t end_bit = 0;
    for (;;) {
      const DecodeStatus s = dec.decode(dec.size() + kFlush);
      if (s == DecodeStatus::error) {
        if (reader.overrun()) truncated(file, "deflate data", "more compressed data", file.size());
        throw Error(ErrorCode::corrupt, file.path(), "deflate data",
                    "bit " + std::to_string(dec.error_bit() % 8) + ": " + dec.error_message(),
                    dec.error_bit() / 8);
      }
      if (reader.overrun()) truncated(file, "deflate data", "more compressed data", file.size());
      if (s == DecodeStatus::output_full) {
        emit();
        if (out.done()) return RunEnd{chunk_count, 0};
        continue;
      }
      emit();
      if (out.done()) return RunEnd{chunk_count, 0};
      const std::uint64_t at = reader.position();
      if (dec.block_final()) {
        end_bit = at;
        break;
      }
      if (lands_on(target, chunk, chunk_count, at)) return RunEnd{chunk, at};
      out.block_start(at);
    }
    const std::optional<RunEnd> end =
        end_member(file, end_bit, out, target, chunk, chunk_count, bit);
    if (end) return *end;
    window = {};
    out.block_start(bit);
  }
}

#if VOXPIPE_HAVE_ISAL

RunEnd run_known_window(const core::RandomAccessInput& file, std::uint64_t bit,
                        std::span<const std::uint8_t> window, std::size_t chunk,
                        std::size_t chunk_count, const TargetFn& target, RunOutput& out) {
  std::unique_ptr<std::uint8_t[]> in(new std::uint8_t[kInputBytes]);
  auto st = std::make_unique<inflate_state>();
  const std::uint64_t file_size = file.size();
  for (;;) {
    isal_inflate_init(st.get());
    st->crc_flag = ISAL_DEFLATE;
    if (!window.empty()) {
      const std::size_t w = std::min<std::size_t>(window.size(), 32768);
      if (isal_inflate_set_dict(st.get(), const_cast<std::uint8_t*>(window.data() + window.size() - w),
                                static_cast<std::uint32_t>(w)) != 0)
        throw Error(ErrorCode::io, file.path(), "", "ISA-L refused the window");
    }
    std::uint64_t next_byte = bit / 8;
    if (bit % 8) {
      std::uint8_t b;
      if (file.read_at(next_byte, std::as_writable_bytes(std::span(&b, 1))) != 1)
        truncated(file, "deflate data", "more compressed data", next_byte);
      st->read_in = b >> (bit % 8);
      st->read_in_length = static_cast<std::int32_t>(8 - bit % 8);
      ++next_byte;
    }
    st->avail_in = 0;
    std::optional<BlockCandidate> stop;
    auto pick_target = [&](std::uint64_t at) {
      stop.reset();
      while (chunk < chunk_count) {
        stop = target(chunk);
        if (stop && stop->last_bit >= at) return;
        ++chunk;
      }
      stop.reset();
    };
    pick_target(bit + 1);
    std::uint64_t end_bit = 0;
    for (;;) {
      if (st->avail_in == 0) {
        const std::uint64_t limit = stop ? std::min(file_size, (stop->last_bit + 7) / 8) : file_size;
        if (next_byte < limit) {
          const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(
              file.fetches() ? kFetchedInputBytes : kInputBytes, limit - next_byte));
          const std::size_t got = file.read_at(next_byte, std::as_writable_bytes(std::span(in.get(), want)));
          if (got == 0) truncated(file, "deflate data", "more compressed data", next_byte);
          st->next_in = in.get();
          st->avail_in = static_cast<std::uint32_t>(got);
          next_byte += got;
        } else if (stop) {
          // All input up to the candidate is in: ISA-L is either at a block header that
          // starts exactly there, or the candidate was not a block boundary of this stream.
          const std::uint64_t at = next_byte * 8 - static_cast<std::uint64_t>(st->read_in_length) -
                                   8 * static_cast<std::uint64_t>(st->tmp_in_size);
          if ((st->block_state == ISAL_BLOCK_NEW_HDR || st->block_state == ISAL_BLOCK_HDR) &&
              stop->first_bit <= at && at <= stop->last_bit)
            return RunEnd{chunk, at};
          ++chunk;
          pick_target(at);
          continue;
        } else {
          truncated(file, "deflate data", "more compressed data", file_size);
        }
      }
      const std::span<std::uint8_t> space = out.space();
      st->next_out = space.data();
      st->avail_out = static_cast<std::uint32_t>(std::min<std::size_t>(space.size(), 1u << 30));
      const std::uint32_t avail = st->avail_out;
      const int rc = isal_inflate(st.get());
      out.commit(avail - st->avail_out);
      if (rc < 0)
        throw Error(ErrorCode::corrupt, file.path(), "deflate data",
                    "invalid compressed data (ISA-L error " + std::to_string(rc) + ")",
                    next_byte - st->avail_in);
      if (out.done()) return RunEnd{chunk_count, 0};
      if (st->block_state == ISAL_BLOCK_FINISH) {
        end_bit = (next_byte - st->avail_in) * 8 - static_cast<std::uint64_t>(st->read_in_length);
        break;
      }
    }
    const std::optional<RunEnd> end =
        end_member(file, end_bit, out, target, chunk, chunk_count, bit);
    if (end) return *end;
    window = {};
  }
}

#else

RunEnd run_known_window(const core::RandomAccessInput& file, std::uint64_t bit,
                        std::span<const std::uint8_t> window, std::size_t chunk,
                        std::size_t chunk_count, const TargetFn& target, RunOutput& out) {
  BitReader reader(file_fetch(file), file.size(), reader_buffer_bytes(file));
  DeflateDecoder<std::uint8_t> dec(reader);
  return run_blocks(file, reader, dec, bit, window, chunk, chunk_count, target, out);
}

#endif

}  // namespace voxpipe::gz::inflate_detail
