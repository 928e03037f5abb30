// voxpipe/file_identity.hpp: which file a path named, and which version of its content, when a
// reader opened it; what lazy readers compare with before they trust a header read earlier.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace voxpipe {

// A file as stat(2) describes it. The device and inode say which file (a file renamed over the
// path is another one); the size and the modification time, in nanoseconds, which version of
// its content (a rewrite in place changes them). What equal identities cannot tell apart: a
// rewrite in place that keeps the size within one tick of the file system's clock of the
// previous write (Linux stamps files from a clock that advances every 1-10 ms), and a file
// deleted and created again that gets the same inode, size and time.
struct FileIdentity {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

// The identity of the file open as `fd` (fstat). Throws Error(io) naming `path`.
FileIdentity file_identity(int fd, const std::string& path);

// The identity of the file `path` names now (stat, following links), or nullopt when nothing can
// be stat'ed there (missing, no permission).
std::optional<FileIdentity> path_identity(const std::string& path);

// Throws Error(io) naming `path`, with "the file changed since it was opened" and what differs,
// unless `now` equals `opened` (nullopt: no file there).
void check_same_file(const std::string& path, const std::optional<FileIdentity>& opened,
                     const std::optional<FileIdentity>& now);

}  // namespace voxpipe
