// Helpers shared by the C++ unit tests: temporary directories, files, zlib round trips, byte
// order, headers, and catching voxpipe::Error. Everything here is written independently of the
// library code it helps to test (own byte swapping, own gzip via zlib).
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <ostream>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "voxpipe/dtype.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"

namespace voxpipe {
// Readable gtest output for error codes (found by ADL).
inline void PrintTo(ErrorCode code, std::ostream* os) { *os << error_code_name(code); }
inline void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }
}  // namespace voxpipe

namespace vptest {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

inline constexpr bool kNativeBig = std::endian::native == std::endian::big;

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/voxpipe-test-XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Names of everything in the directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, std::span<const std::uint8_t> bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("cannot create " + path);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

inline Bytes read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  return Bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline Bytes concat(std::initializer_list<std::span<const std::uint8_t>> parts) {
  Bytes out;
  for (auto p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

inline Bytes random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes out(n);
  for (auto& b : out) b = static_cast<std::uint8_t>(rng());
  return out;
}

// Compressible but not trivial: text-like bytes from a small alphabet.
inline Bytes text_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes out(n);
  for (auto& b : out) b = static_cast<std::uint8_t>("abcdefgh \n"[rng() % 10]);
  return out;
}

// One gzip member made by zlib itself (not by voxpipe's writer).
struct GzipHeaderFields {
  std::string name;     // FNAME when non-empty
  std::string comment;  // FCOMMENT when non-empty
  Bytes extra;          // FEXTRA when non-empty
  bool hcrc = false;    // FHCRC
};

inline Bytes gzip_compress(std::span<const std::uint8_t> data, int level = 6,
                           const GzipHeaderFields* fields = nullptr) {
  z_stream z{};
  if (deflateInit2(&z, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2");
  gz_header head{};
  std::string name, comment;
  Bytes extra;
  if (fields) {
    name = fields->name;
    comment = fields->comment;
    extra = fields->extra;
    head.name = name.empty() ? Z_NULL : reinterpret_cast<Bytef*>(name.data());
    head.comment = comment.empty() ? Z_NULL : reinterpret_cast<Bytef*>(comment.data());
    head.extra = extra.empty() ? Z_NULL : extra.data();
    head.extra_len = static_cast<uInt>(extra.size());
    head.hcrc = fields->hcrc ? 1 : 0;
    head.os = 3;
    deflateSetHeader(&z, &head);
  }
  Bytes out(deflateBound(&z, static_cast<uLong>(data.size())) + 64 + name.size() + comment.size() +
            extra.size());
  z.next_in = const_cast<Bytef*>(data.data());
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&z, Z_FINISH);
  if (rc != Z_STREAM_END) throw std::runtime_error("deflate did not finish");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// Inflates a whole (possibly multi-member) gzip stream with zlib; throws on any error.
// Raw deflate (no header) as zlib writes it at `level` with `strategy`, window 2^15, memLevel 8:
// what Python's zlib.compressobj(level, DEFLATED, -15) produces for gzip.GzipFile.
inline Bytes raw_deflate(const Bytes& data, int level, int strategy = Z_DEFAULT_STRATEGY) {
  z_stream z{};
  if (deflateInit2(&z, level, Z_DEFLATED, -MAX_WBITS, 8, strategy) != Z_OK)
    throw std::runtime_error("deflateInit2");
  Bytes out(deflateBound(&z, static_cast<uLong>(data.size())) + 64);
  z.next_in = const_cast<Bytef*>(data.data());
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw std::runtime_error("deflate did not finish");
  return out;
}

inline Bytes gunzip(std::span<const std::uint8_t> data) {
  Bytes out;
  std::size_t pos = 0;
  while (pos < data.size()) {
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw std::runtime_error("inflateInit2");
    z.next_in = const_cast<Bytef*>(data.data() + pos);
    z.avail_in = static_cast<uInt>(data.size() - pos);
    std::uint8_t buf[65536];
    int rc;
    do {
      z.next_out = buf;
      z.avail_out = sizeof buf;
      rc = inflate(&z, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END) {
        inflateEnd(&z);
        throw std::runtime_error("zlib inflate failed");
      }
      out.insert(out.end(), buf, buf + (sizeof buf - z.avail_out));
    } while (rc != Z_STREAM_END);
    pos += z.total_in;
    inflateEnd(&z);
  }
  return out;
}

// Bytes of `values` in the requested byte order, each scalar component of `component` bytes
// reversed on its own (complex: real and imaginary parts separately).
template <class T>
Bytes to_bytes(const std::vector<T>& values, bool big_endian, std::size_t component = sizeof(T)) {
  Bytes out(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  if (big_endian != kNativeBig)
    for (std::size_t i = 0; i + component <= out.size(); i += component)
      std::reverse(out.begin() + static_cast<std::ptrdiff_t>(i),
                   out.begin() + static_cast<std::ptrdiff_t>(i + component));
  return out;
}

inline std::span<const std::byte> as_bytes(const Bytes& b) { return std::as_bytes(std::span(b)); }

// A header for `shape`, with pixdim 1 and no scaling; magic and vox_offset are set by
// write_nifti.
inline voxpipe::NiftiHeader make_header(int version, voxpipe::DType type,
                                        const std::vector<std::int64_t>& shape,
                                        bool big_endian = false) {
  voxpipe::NiftiHeader h;
  h.version = version;
  h.big_endian = big_endian;
  h.sizeof_hdr = version == 2 ? 540 : 348;
  h.dim[0] = static_cast<std::int64_t>(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) h.dim[i + 1] = shape[i];
  for (std::size_t i = shape.size() + 1; i < 8; ++i) h.dim[i] = 1;
  h.datatype = static_cast<std::int16_t>(voxpipe::nifti_datatype_code(type));
  h.bitpix = static_cast<std::int16_t>(8 * voxpipe::dtype_size(type));
  h.pixdim = {1, 1, 1, 1, 1, 1, 1, 1};
  h.magic = {'n', '+', version == 2 ? '2' : '1', '\0'};
  return h;
}

// Sets (or, with nullptr, unsets) an environment variable for the scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ScopedEnv(const char* name, const std::string& value) : ScopedEnv(name, value.c_str()) {}
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Runs f and returns the voxpipe::Error it threw, or nullopt when it returned normally.
// Other exception types propagate (and fail the test).
template <class F>
std::optional<voxpipe::Error> catch_error(F&& f) {
  try {
    f();
  } catch (const voxpipe::Error& e) {
    return e;
  }
  return std::nullopt;
}

}  // namespace vptest

// Expects `stmt` to throw voxpipe::Error with code `ecode`; evaluates to nothing.
#define EXPECT_VP_ERROR(stmt, ecode)                                                  \
  do {                                                                                \
    auto vp_err_ = ::vptest::catch_error([&] { stmt; });                              \
    if (!vp_err_) {                                                                   \
      ADD_FAILURE() << "expected voxpipe::Error(" << ::voxpipe::error_code_name(ecode) \
                    << ") from: " #stmt;                                              \
    } else {                                                                          \
      EXPECT_EQ(vp_err_->code(), ecode) << vp_err_->what();                           \
    }                                                                                 \
  } while (0)
