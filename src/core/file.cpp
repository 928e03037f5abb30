#include "core/file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "voxpipe/error.hpp"

namespace voxpipe::core {

namespace {
[[noreturn]] void throw_errno(const std::string& path, const char* what, int err) {
  ErrorCode code = (err == ENOENT || err == ENOTDIR) ? ErrorCode::not_found : ErrorCode::io;
  throw Error(code, path, "", std::string(what) + ": " + std::strerror(err));
}
}  // namespace

InputFile::InputFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw_errno(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    int err = errno;
    ::close(fd_);
    throw_errno(path, "cannot stat", err);
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd_);
    throw Error(ErrorCode::io, path, "", "is a directory");
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t InputFile::read_at(std::uint64_t offset, std::span<std::byte> dst) const {
  std::size_t done = 0;
  while (done < dst.size()) {
    // Linux caps one read at about 2 GiB; loop until done or EOF.
    ssize_t n = ::pread(fd_, dst.data() + done, dst.size() - done,
                        static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorCode::io, path_, "", std::string("read failed: ") + std::strerror(errno),
                  offset + done);
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return done;
}

AtomicOutputFile::AtomicOutputFile(const std::string& path) : path_(path) {
  // A unique temporary name in the target's directory, so that rename() is atomic.
  static std::atomic<unsigned> counter{0};
  temp_path_ = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ < 0) throw_errno(path, "cannot create", errno);
}

AtomicOutputFile::~AtomicOutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

void AtomicOutputFile::write(std::span<const std::byte> bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(path_, "write failed", errno);
    }
    done += static_cast<std::size_t>(n);
  }
}

void AtomicOutputFile::commit() {
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw_errno(path_, "close failed", errno);
  }
  fd_ = -1;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) throw_errno(path_, "rename failed", errno);
  committed_ = true;
}

std::optional<std::uint64_t> file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(st.st_size);
}

void ByteSource::read_range(std::uint64_t begin, std::uint64_t end, unsigned /*threads*/,
                            const ByteSink& sink) {
  constexpr std::size_t kPiece = std::size_t{1} << 20;
  std::vector<std::byte> buffer(static_cast<std::size_t>(std::min<std::uint64_t>(kPiece, end - begin)));
  while (begin < end) {
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), end - begin));
    const std::size_t got = read_at(begin, std::span(buffer.data(), want));
    if (got == 0) return;
    sink(begin, std::span<const std::byte>(buffer.data(), got));
    begin += got;
  }
}

void read_exact(ByteSource& source, std::uint64_t offset, std::span<std::byte> dst,
                const char* what) {
  std::size_t got = source.read_at(offset, dst);
  if (got != dst.size())
    throw Error(ErrorCode::truncated, source.path(), what,
                "expected " + std::to_string(dst.size()) + " bytes, but the file ends after " +
                    std::to_string(got),
                offset);
}

}  // namespace voxpipe::core
