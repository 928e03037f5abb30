// A stand-in for libcufile.so.0, for tests on machines without a GPU, used with the stand-in
// driver (fake_cuda.cpp), whose "device" memory is host memory: cuFileRead preads the file
// (opened with O_DIRECT, as cuFile wants it) through an aligned bounce buffer into that memory,
// as cuFile's compatibility mode does. It checks what cuFile would reject (a descriptor without
// O_DIRECT, an unregistered handle), counts what is outstanding and how aligned the reads are
// (voxpipe_fake_cufile_counters), and can be told to report GPUDirect Storage or to fail
// (voxpipe_fake_cufile_configure). It says nothing about real GPUDirect Storage.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>
#include <sys/types.h>

namespace {

struct CUfileError {
  int err;
  int cu_err;
};
struct CUfileDescr {
  int type;
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
};
struct CUfileDrvProps {
  struct {
    unsigned major_version, minor_version;
    std::size_t poll_thresh_size, max_direct_io_size;
    unsigned dstatusflags, dcontrolflags;
  } nvfs;
  unsigned fflags, max_device_cache_size, per_buffer_cache_size, max_device_pinned_mem_size,
      max_batch_io_size, max_batch_io_timeout_msecs;
};

constexpr int kDriverNotInitialized = 5001, kIoNotSupported = 5008, kDioNotSet = 5020,
              kInvalidValue = 5022, kHandleNotRegistered = 5027;
constexpr std::uint64_t kBlock = 4096;

std::atomic<int> g_gds{0}, g_fail_open{0}, g_fail_register{0}, g_read_errno{0};
std::atomic<long> g_opens{0}, g_handles{0}, g_reads{0}, g_aligned_reads{0}, g_bytes{0};

struct Handle {
  int fd;
  int magic = 0x0F11E;
};

}  // namespace

extern "C" {

#define FAKE_API __attribute__((visibility("default")))

struct VoxpipeFakeCufileCounters {
  long opens, handles, reads, aligned_reads, bytes;
};

FAKE_API VoxpipeFakeCufileCounters voxpipe_fake_cufile_counters() {
  return {g_opens, g_handles, g_reads, g_aligned_reads, g_bytes};
}

// gds: report nvidia-fs (2.17); fail_open: cuFileDriverOpen fails as without nvidia-fs;
// fail_register: cuFileHandleRegister refuses the file; read_errno: cuFileRead fails with -1
// and this errno. Resets the read counters.
FAKE_API void voxpipe_fake_cufile_configure(int gds, int fail_open, int fail_register, int read_errno) {
  g_gds = gds;
  g_fail_open = fail_open;
  g_fail_register = fail_register;
  g_read_errno = read_errno;
  g_reads = 0;
  g_aligned_reads = 0;
  g_bytes = 0;
}

FAKE_API CUfileError cuFileDriverOpen() {
  if (g_fail_open) return {kDriverNotInitialized, 0};
  ++g_opens;
  return {0, 0};
}

FAKE_API CUfileError cuFileDriverGetProperties(CUfileDrvProps* props) {
  if (!props) return {kInvalidValue, 0};
  std::memset(props, 0, sizeof(*props));
  if (g_gds) {
    props->nvfs.major_version = 2;
    props->nvfs.minor_version = 17;
    props->nvfs.dstatusflags = 1u << 4;  // CU_FILE_NVME_SUPPORTED
  }
  return {0, 0};
}

FAKE_API CUfileError cuFileHandleRegister(void** fh, CUfileDescr* descr) {
  if (!fh || !descr || descr->type != 1) return {kInvalidValue, 0};
  const int flags = ::fcntl(descr->handle.fd, F_GETFL);
  if (flags < 0) return {kInvalidValue, 0};
  if (!(flags & O_DIRECT)) return {kDioNotSet, 0};
  if (g_fail_register) return {kIoNotSupported, 0};
  *fh = new Handle{descr->handle.fd};
  ++g_handles;
  return {0, 0};
}

FAKE_API void cuFileHandleDeregister(void* fh) {
  delete static_cast<Handle*>(fh);
  --g_handles;
}

FAKE_API ssize_t cuFileRead(void* fh, void* base, std::size_t size, off_t file_offset, off_t buffer_offset) {
  const auto* h = static_cast<const Handle*>(fh);
  if (!h || h->magic != 0x0F11E) return -kHandleNotRegistered;
  if (!base || file_offset < 0 || buffer_offset < 0) return -kInvalidValue;
  if (g_read_errno) {
    errno = g_read_errno;
    return -1;
  }
  auto* dst = static_cast<unsigned char*>(base) + buffer_offset;
  const auto off = static_cast<std::uint64_t>(file_offset);
  const bool aligned =
      off % kBlock == 0 && size % kBlock == 0 && reinterpret_cast<std::uintptr_t>(dst) % kBlock == 0;
  // O_DIRECT: whole aligned blocks into aligned memory.
  const std::uint64_t first = off / kBlock * kBlock, last = (off + size + kBlock - 1) / kBlock * kBlock;
  auto* bounce = static_cast<unsigned char*>(::operator new(last - first, std::align_val_t{kBlock}, std::nothrow));
  if (!bounce) return -1;
  std::uint64_t got = 0;
  while (got < last - first) {
    const ssize_t n = ::pread(h->fd, bounce + got, last - first - got, static_cast<off_t>(first + got));
    if (n < 0) {
      const int e = errno;
      ::operator delete(bounce, std::align_val_t{kBlock});
      errno = e;
      return -1;
    }
    if (n == 0) break;
    got += static_cast<std::uint64_t>(n);
  }
  const std::uint64_t skip = off - first;
  const std::uint64_t n = got > skip ? std::min<std::uint64_t>(got - skip, size) : 0;
  std::memcpy(dst, bounce + skip, n);
  ::operator delete(bounce, std::align_val_t{kBlock});
  // Counted when bytes moved (a read at the end of the file, which finds nothing, is not).
  if (n > 0) {
    ++g_reads;
    if (aligned) ++g_aligned_reads;
  }
  g_bytes += static_cast<long>(n);
  return static_cast<ssize_t>(n);
}

}  // extern "C"
