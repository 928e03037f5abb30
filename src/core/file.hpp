// Files: RAII descriptors, positional reads, atomic output (temporary name + rename), the
// RandomAccessInput interface under which stored bytes are read (a file here, a buffer in memory
// in memory_input.hpp), and the ByteSource interface that the readers pull voxel bytes through.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "voxpipe/file_identity.hpp"
#include "voxpipe/output_stream.hpp"
#include "voxpipe/remote.hpp"

namespace voxpipe::core {

// Bytes as they are stored (a file, a buffer in memory), read by position: what the NIfTI reader
// reads uncompressed data from and what every gzip engine reads compressed data from, so that
// each works on any storage. Implementations are immutable after construction and thread-safe.
class RandomAccessInput {
 public:
  virtual ~RandomAccessInput() = default;
  // Reads up to dst.size() bytes at `offset`; returns how many were read (fewer only at the
  // end). Errors throw voxpipe::Error naming path().
  virtual std::size_t read_at(std::uint64_t offset, std::span<std::byte> dst) const = 0;
  // The size when opened; reads end there.
  virtual std::uint64_t size() const noexcept = 0;
  // Names the bytes in error messages (a path, or the name given to a buffer).
  virtual const std::string& path() const noexcept = 0;
  // True when reads cost a request each (RangeInput): readers then announce the ranges they
  // will read with prefetch(), which fetches them coalesced and concurrently.
  virtual bool fetches() const noexcept { return false; }
  // Reads ahead `ranges` (sorted or not); a no-op for files and memory.
  virtual void prefetch(std::span<const ByteRange> /*ranges*/) const {}
  // As prefetch, but returns at once: the ranges are fetched in the background while the caller
  // reads what has arrived (a whole stream decoded as its parts come in).
  virtual void read_ahead(std::span<const ByteRange> ranges) const { prefetch(ranges); }
};

// A read-only regular file. Errors throw voxpipe::Error(not_found / io) naming the path; a path
// that is not a regular file (a directory, FIFO, socket or device) is Error(io) at once: opening
// never waits for a FIFO's writer.
class InputFile final : public RandomAccessInput {
 public:
  explicit InputFile(const std::string& path);
  ~InputFile() override;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const noexcept override { return path_; }
  std::uint64_t size() const noexcept override { return identity_.size; }
  // Thread-safe (pread).
  std::size_t read_at(std::uint64_t offset, std::span<std::byte> dst) const override;

  // The file as fstat described it when it was opened.
  const FileIdentity& identity() const noexcept { return identity_; }
  // Throws Error(io) naming the path ("changed since it was opened") unless the open file is
  // still `expected` (fstat: a rewrite in place changes its size or time) and, with `path_too`,
  // when it has no name left (link count 0: deleted, or another file renamed over the path), the
  // path names no file (stat: a file there now replaced it). A file renamed away, or deleted and
  // not replaced, is still the file opened. One system call (fstat); a stat more only for a file
  // without a name, with `path_too`.
  void check_unchanged(const FileIdentity& expected, bool path_too) const;

 private:
  std::string path_;
  int fd_ = -1;
  FileIdentity identity_;
};

// An output file written under a temporary name in the same directory, `PATH.tmp-PID-N`, and
// renamed onto `path` by commit(). Destroyed without commit(), it removes the temporary file;
// until then discard_unfinished_outputs() removes it too. The temporary is locked (flock) while
// it is written, and the constructor removes the temporaries of `path` that a process which has
// ended left (killed by SIGKILL, a crash): those whose PID is gone and whose lock is free, among
// the first 4096 entries of the folder.
//
// Or, made with a stream, the bytes go to `stream.write` as they are written instead of a file
// (an upload, voxpipe/output_stream.hpp): commit() calls stream.commit(), and destruction
// without commit() calls stream.abort(). `name` stands for the output in errors.
class AtomicOutputFile {
 public:
  explicit AtomicOutputFile(const std::string& path);
  AtomicOutputFile(const std::string& name, const OutputStream& stream);
  ~AtomicOutputFile();
  AtomicOutputFile(const AtomicOutputFile&) = delete;
  AtomicOutputFile& operator=(const AtomicOutputFile&) = delete;

  const std::string& path() const noexcept { return path_; }
  void write(std::span<const std::byte> bytes);
  void commit();

 private:
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  int slot_ = -1;  // in the list of discard_unfinished_outputs
  bool committed_ = false;
  const OutputStream* stream_ = nullptr;
};

// Streamed outputs (AtomicOutputFile made with a stream: an upload) cannot be discarded from a
// signal handler: their abort runs on the writing thread, through the stream. The handler
// instead calls interrupt_streams(), which returns whether any was being written; if so, each
// fails at its next write or commit (Error io, "interrupted"), which aborts it, and the handler
// leaves ending the process to the code that called the writer (the CLI: once the command has
// returned). Async-signal-safe.
bool interrupt_streams() noexcept;

// Removes the temporary file of every AtomicOutputFile of this process that is neither committed
// nor destroyed. Async-signal-safe (no allocation, no lock): for a signal handler that then ends
// the process (the CLI's, on SIGINT, SIGTERM and SIGHUP). A write that goes on afterwards fails at
// its commit. Tracks up to 128 outputs at once; the temporaries of further ones stay until the
// next write to their destination after this process has ended.
void discard_unfinished_outputs() noexcept;

// A source of the bytes of one stored stream (a file, or the inflated content of a gzip file),
// addressed by offset in the uncompressed stream.
// Receives bytes of a stream: `offset` is the position of data[0]. Producers may call it from
// pool threads, concurrently, for disjoint ranges and in any order; every requested byte is
// delivered exactly once. `data` is valid only during the call. An exception thrown by the sink
// stops the producer and reaches its caller.
using ByteSink = std::function<void(std::uint64_t offset, std::span<const std::byte> data)>;

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Delivers [begin, end) to `sink`, using up to `threads` pool threads (the count the public
  // call resolved, voxpipe/threads.hpp; 0 is taken as 1) where the source can decode in
  // parallel. Ends early, without error, only at the end of the stream. The default reads
  // pieces with read_at on the calling thread.
  virtual void read_range(std::uint64_t begin, std::uint64_t end, unsigned threads,
                          const ByteSink& sink);
  // True when read_range is faster than the caller splitting the range into read_at calls
  // (it decodes in parallel, or overlaps decoding with the sink's work).
  virtual bool prefers_read_range() const noexcept { return false; }
  // Reads up to dst.size() bytes starting at `offset`; returns how many were read (fewer only at
  // the end of the stream). Sequential sources require offsets not to go backwards.
  virtual std::size_t read_at(std::uint64_t offset, std::span<std::byte> dst) = 0;
  // True when reads may go in any order and from several threads at once.
  virtual bool random_access() const noexcept = 0;
  virtual const std::string& path() const noexcept = 0;
  // True when the stored bytes cost a request per read (RandomAccessInput::fetches): a reader
  // then announces the ranges [begin, end) of this source it will read, in ascending order.
  virtual bool wants_prefetch() const noexcept { return false; }
  virtual void prefetch(std::span<const ByteRange> /*ranges*/) {}
};

// The stored bytes of an input, undecoded, as a ByteSource. Shares ownership of the input.
class InputByteSource final : public ByteSource {
 public:
  explicit InputByteSource(std::shared_ptr<const RandomAccessInput> input)
      : input_(std::move(input)) {}
  std::size_t read_at(std::uint64_t offset, std::span<std::byte> dst) override {
    return input_->read_at(offset, dst);
  }
  bool random_access() const noexcept override { return true; }
  const std::string& path() const noexcept override { return input_->path(); }
  bool wants_prefetch() const noexcept override { return input_->fetches(); }
  // Large selections are read ahead: their first bytes are converted while the rest arrive.
  void prefetch(std::span<const ByteRange> ranges) override {
    std::uint64_t total = 0;
    for (const ByteRange& r : ranges) total += r.size;
    if (total > (std::uint64_t{16} << 20))
      input_->read_ahead(ranges);
    else
      input_->prefetch(ranges);
  }
  std::uint64_t size() const noexcept { return input_->size(); }

 private:
  std::shared_ptr<const RandomAccessInput> input_;
};

// Size of the file at `path`, or nullopt when it cannot be stat'ed (missing, no permission).
std::optional<std::uint64_t> file_size(const std::string& path);

// Reads exactly dst.size() bytes or throws Error(truncated) naming what was expected.
void read_exact(ByteSource& source, std::uint64_t offset, std::span<std::byte> dst,
                const char* what);

}  // namespace voxpipe::core
