#include "core/file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
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

FileIdentity identity_of(const struct stat& st) {
  return FileIdentity{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
                      static_cast<std::uint64_t>(st.st_size),
                      static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 +
                          st.st_mtim.tv_nsec};
}

[[noreturn]] void throw_not_regular(const std::string& path, mode_t mode) {
  const char* kind = S_ISDIR(mode)    ? "directory"
                     : S_ISFIFO(mode) ? "FIFO"
                     : S_ISSOCK(mode) ? "socket"
                     : S_ISCHR(mode)  ? "character device"
                     : S_ISBLK(mode)  ? "block device"
                                      : "special file";
  throw Error(ErrorCode::io, path, "", std::string("expected a regular file, but found a ") + kind);
}
}  // namespace

InputFile::InputFile(const std::string& path) : path_(path) {
  // Only regular files are read: opening a FIFO waits for a writer (forever), and opening a
  // device can act on it. The type is checked before opening, and again on the descriptor, which
  // is opened with O_NONBLOCK in case another file took the name in between.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) throw_not_regular(path, st.st_mode);
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd_ < 0) throw_errno(path, "cannot open", errno);
  const char* failed = nullptr;
  int err = 0;
  if (::fstat(fd_, &st) != 0) {
    failed = "cannot stat";
    err = errno;
  } else if (S_ISREG(st.st_mode)) {
    // Local file systems ignore O_NONBLOCK on regular files, but network and FUSE ones may not.
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) != 0) {
      failed = "cannot open";
      err = errno;
    }
  }
  if (failed || !S_ISREG(st.st_mode)) {
    ::close(fd_);  // no destructor runs for a constructor that throws
    if (failed) throw_errno(path, failed, err);
    throw_not_regular(path, st.st_mode);
  }
  identity_ = identity_of(st);
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

void InputFile::check_unchanged(const FileIdentity& expected, bool path_too) const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw_errno(path_, "cannot stat", errno);
  check_same_file(path_, expected, identity_of(st));
  // The open file has no name left: deleted, or another file renamed over the path (which
  // unlinks the file it replaces). Only then is the path looked at: a file there now is another
  // one; none leaves the open file as it was, and readers that keep it go on reading it, as
  // nibabel's keep_file_open does.
  if (path_too && st.st_nlink == 0) {
    if (const std::optional<FileIdentity> now = path_identity(path_)) check_same_file(path_, expected, now);
  }
}

namespace {

// The temporaries that discard_unfinished_outputs() removes, in fixed slots that a signal handler
// reads without allocating or locking. A slot is free, being filled, live, or taken by
// discard_unfinished_outputs, for good (the process is ending). `owner` keeps a child made by
// fork() from removing its parent's files.
enum SlotState : int { kFree, kFilling, kLive, kTaken };
struct TempSlot {
  std::atomic<int> state{kFree};
  pid_t owner;
  char path[PATH_MAX];
};
constexpr int kTempSlots = 128;
TempSlot g_temp_slots[kTempSlots];
static_assert(std::atomic<int>::is_always_lock_free, "read in a signal handler");

int track_temporary(const std::string& path) noexcept {
  if (path.size() >= PATH_MAX) return -1;
  for (int i = 0; i < kTempSlots; ++i) {
    TempSlot& slot = g_temp_slots[i];
    int expected = kFree;
    if (!slot.state.compare_exchange_strong(expected, kFilling, std::memory_order_acquire)) continue;
    slot.owner = ::getpid();
    std::memcpy(slot.path, path.c_str(), path.size() + 1);
    slot.state.store(kLive, std::memory_order_release);
    return i;
  }
  return -1;  // all taken: this temporary is left to the next write after a signal
}

void untrack_temporary(int i) noexcept {
  if (i < 0) return;
  int expected = kLive;
  // Fails only when discard_unfinished_outputs has taken the slot.
  g_temp_slots[i].state.compare_exchange_strong(expected, kFree, std::memory_order_release);
}

// "PID-N" with PID and N in decimal as the writer prints them (no sign, no leading zero); the
// PID, or 0 when `s` is anything else.
pid_t temporary_pid(const char* s) {
  const auto number = [&s](long long limit) -> long long {
    if (*s < '0' || *s > '9' || (*s == '0' && s[1] >= '0' && s[1] <= '9')) return -1;
    long long v = 0;
    for (; *s >= '0' && *s <= '9'; ++s)
      if ((v = v * 10 + (*s - '0')) > limit) return -1;
    return v;
  };
  const long long pid = number(INT_MAX);
  if (pid <= 0 || *s++ != '-' || number(UINT_MAX) < 0 || *s != '\0') return 0;
  return static_cast<pid_t>(pid);
}

// Listing a folder costs about 2.5 us per entry (ext4, cached, on the 2-core build machine):
// the search stops after this many, so that each write into a folder of many thousands of files
// does not pay tens of milliseconds for a rare leftover.
constexpr int kMaxListedEntries = 4096;

// Removes `path`.tmp-PID-N files that a writer which has ended left: those of another process
// that no longer exists, owned by this user, and not locked. PIDs say nothing about a folder
// other hosts share; there the lock keeps another host's live temporary (on file systems that
// share locks). Best effort: whatever cannot be checked stays.
void remove_stale_temporaries(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string prefix = path.substr(slash == std::string::npos ? 0 : slash + 1) + ".tmp-";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const pid_t self = ::getpid();
  for (int listed = 0; listed < kMaxListedEntries; ++listed) {
    const dirent* e = ::readdir(d);
    if (!e) break;
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    const pid_t pid = temporary_pid(e->d_name + prefix.size());
    // kill() fails with EPERM for a live process of another user.
    if (pid == 0 || pid == self || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    // For writing: over NFS an exclusive flock is a write lock, which needs it.
    const int fd = ::openat(::dirfd(d), e->d_name,
                            O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
        ::flock(fd, LOCK_EX | LOCK_NB) == 0)
      ::unlinkat(::dirfd(d), e->d_name, 0);
    ::close(fd);
  }
  ::closedir(d);
}

}  // namespace

namespace {
std::atomic<int> g_live_streams{0};
std::atomic<bool> g_streams_interrupted{false};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "read in a signal handler");

void check_not_interrupted(const std::string& name) {
  if (g_streams_interrupted.load(std::memory_order_relaxed))
    throw Error(ErrorCode::io, name, "", "interrupted: the upload is aborted");
}
}  // namespace

bool interrupt_streams() noexcept {
  g_streams_interrupted.store(true);
  return g_live_streams.load() > 0;
}

void discard_unfinished_outputs() noexcept {
  const int saved = errno;
  const pid_t self = ::getpid();
  for (TempSlot& slot : g_temp_slots) {
    int expected = kLive;
    if (slot.state.compare_exchange_strong(expected, kTaken, std::memory_order_acquire) &&
        slot.owner == self)
      ::unlink(slot.path);
  }
  errno = saved;
}

AtomicOutputFile::AtomicOutputFile(const std::string& path) : path_(path) {
  remove_stale_temporaries(path);
  // A unique temporary name in the target's directory, so that rename() is atomic. It is listed
  // before the file exists, so that there is no moment when a signal would leave it behind.
  static std::atomic<unsigned> counter{0};
  temp_path_ = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  slot_ = track_temporary(temp_path_);
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    const int err = errno;
    untrack_temporary(slot_);
    throw_errno(path, "cannot create", err);
  }
  // Held until the descriptor is closed, by commit or by the end of the process however it
  // ends: what tells a live temporary from a stale one. File systems without locks go without.
  ::flock(fd_, LOCK_EX | LOCK_NB);
}

AtomicOutputFile::AtomicOutputFile(const std::string& name, const OutputStream& stream)
    : path_(name), stream_(&stream) {
  g_live_streams.fetch_add(1);
}

AtomicOutputFile::~AtomicOutputFile() {
  if (stream_) {
    if (!committed_ && stream_->abort) stream_->abort();
    g_live_streams.fetch_sub(1);
    return;
  }
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
  untrack_temporary(slot_);
}

void AtomicOutputFile::write(std::span<const std::byte> bytes) {
  if (stream_) {
    check_not_interrupted(path_);
    if (!bytes.empty()) stream_->write(bytes);
    return;
  }
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
  if (stream_) {
    check_not_interrupted(path_);  // before committing: the destructor then aborts
    committed_ = true;  // a failed commit leaves nothing to abort: the stream has ended
    stream_->commit();
    return;
  }
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw_errno(path_, "close failed", errno);
  }
  fd_ = -1;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) throw_errno(path_, "rename failed", errno);
  committed_ = true;
  untrack_temporary(slot_);
  slot_ = -1;
}

}  // namespace voxpipe::core

namespace voxpipe {

FileIdentity file_identity(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) core::throw_errno(path, "cannot stat", errno);
  return core::identity_of(st);
}

std::optional<FileIdentity> path_identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return core::identity_of(st);
}

void check_same_file(const std::string& path, const std::optional<FileIdentity>& opened,
                     const std::optional<FileIdentity>& now) {
  if (opened == now) return;
  std::string what;
  if (!opened)
    what = "no file was there then";
  else if (!now)
    what = "it was removed or renamed";
  else if (opened->device != now->device || opened->inode != now->inode)
    what = "another file was put in its place (inode " + std::to_string(opened->inode) + ", now " +
           std::to_string(now->inode) + ")";
  else if (opened->size != now->size)
    what = "it was rewritten (" + std::to_string(opened->size) + " bytes, now " +
           std::to_string(now->size) + ")";
  else
    what = "it was rewritten (modified at " + std::to_string(opened->mtime_ns) + " ns, now " +
           std::to_string(now->mtime_ns) + ")";
  throw Error(ErrorCode::io, path, "",
              "the file changed since it was opened: " + what +
                  "; open it again to read the new file");
}

}  // namespace voxpipe

namespace voxpipe::core {

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
