// Shared by the fuzz targets: a per-process scratch directory for the files the library must
// read from disk, and writing bytes there.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace vpfuzz {

// A directory made once per process (libFuzzer runs every input in the same process).
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/voxpipe-fuzz-XXXXXX";
    if (!::mkdtemp(templ.data())) std::abort();
    return templ;
  }();
  return dir;
}

inline std::string scratch_file(const std::string& name) { return scratch_dir() + "/" + name; }

inline void write_bytes(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

}  // namespace vpfuzz
