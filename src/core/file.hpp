// Files: RAII descriptors, positional reads, atomic output (temporary name + rename), and the
// ByteSource interface that the readers pull voxel bytes through.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

namespace voxpipe::core {

// A read-only regular file. Errors throw voxpipe::Error(not_found / io) naming the path; a path
// that is not a regular file (a directory, FIFO, socket or device) is Error(io) at once: opening
// never waits for a FIFO's writer.
class InputFile {
 public:
  explicit InputFile(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const noexcept { return path_; }
  std::uint64_t size() const noexcept { return size_; }
  // Reads up to dst.size() bytes at `offset`; returns how many were read (fewer only at EOF).
  // Thread-safe (pread).
  std::size_t read_at(std::uint64_t offset, std::span<std::byte> dst) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// An output file written under a temporary name in the same directory, `PATH.tmp-PID-N`, and
// renamed onto `path` by commit(). Destroyed without commit(), it removes the temporary file;
// until then discard_unfinished_outputs() removes it too. The temporary is locked (flock) while
// it is written, and the constructor removes the temporaries of `path` that a process which has
// ended left (killed by SIGKILL, a crash): those whose PID is gone and whose lock is free, among
// the first 4096 entries of the folder.
class AtomicOutputFile {
 public:
  explicit AtomicOutputFile(const std::string& path);
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
};

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
  // Delivers [begin, end) to `sink`, using up to `threads` pool threads (0: all cores) where the
  // source can decode in parallel. Ends early, without error, only at the end of the stream.
  // The default reads pieces with read_at on the calling thread.
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
};

class FileByteSource final : public ByteSource {
 public:
  explicit FileByteSource(const std::string& path) : file_(path) {}
  std::size_t read_at(std::uint64_t offset, std::span<std::byte> dst) override {
    return file_.read_at(offset, dst);
  }
  bool random_access() const noexcept override { return true; }
  const std::string& path() const noexcept override { return file_.path(); }
  std::uint64_t size() const noexcept { return file_.size(); }

 private:
  InputFile file_;
};

// Size of the file at `path`, or nullopt when it cannot be stat'ed (missing, no permission).
std::optional<std::uint64_t> file_size(const std::string& path);

// Reads exactly dst.size() bytes or throws Error(truncated) naming what was expected.
void read_exact(ByteSource& source, std::uint64_t offset, std::span<std::byte> dst,
                const char* what);

}  // namespace voxpipe::core
