#include "cuda/cufile.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "cuda/device_sink.hpp"
#include "voxpipe/device.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::cuda {

namespace {

// cufile.h's CUFILEOP_STATUS_ENTRIES, for the codes a read or an open can return.
const char* cufile_error_name(int err) {
  switch (err) {
    case 5001: return "CU_FILE_DRIVER_NOT_INITIALIZED (nvidia-fs driver is not loaded)";
    case 5004: return "CU_FILE_DRIVER_VERSION_MISMATCH";
    case 5007: return "CU_FILE_PLATFORM_NOT_SUPPORTED (GPUDirect Storage not supported on this platform)";
    case 5008: return "CU_FILE_IO_NOT_SUPPORTED (GPUDirect Storage not supported on this file)";
    case 5009: return "CU_FILE_DEVICE_NOT_SUPPORTED (GPUDirect Storage not supported on this GPU)";
    case 5010: return "CU_FILE_NVFS_DRIVER_ERROR (nvidia-fs driver ioctl error)";
    case 5011: return "CU_FILE_CUDA_DRIVER_ERROR";
    case 5012: return "CU_FILE_CUDA_POINTER_INVALID";
    case 5015: return "CU_FILE_CUDA_CONTEXT_MISMATCH";
    case 5018: return "CU_FILE_INVALID_FILE_TYPE";
    case 5019: return "CU_FILE_INVALID_FILE_OPEN_FLAG";
    case 5020: return "CU_FILE_DIO_NOT_SET (the file is not opened with O_DIRECT)";
    case 5022: return "CU_FILE_INVALID_VALUE";
    case 5025: return "CU_FILE_PERMISSION_DENIED";
    case 5030: return "CU_FILE_INTERNAL_ERROR";
    case 5034: return "CU_FILE_IO_DISABLED (GPUDirect Storage disabled by its configuration for this file)";
    default: return nullptr;
  }
}

template <class Fn>
bool resolve(void* handle, const std::string& library, const char* symbol, Fn& slot, std::string* why) {
  void* p = ::dlsym(handle, symbol);
  if (!p) {
    *why = library + " lacks " + symbol;
    return false;
  }
  slot = reinterpret_cast<Fn>(p);
  return true;
}

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

std::string cufile_error_text(int err) {
  err = std::abs(err);
  if (const char* name = cufile_error_name(err)) return name;
  if (err > cuf::CUFILEOP_BASE_ERR) return "cuFile error " + std::to_string(err);
  return "cuFile error " + std::to_string(err) + " (" + std::strerror(err) + ")";
}

namespace {
std::mutex g_default_library_mutex;
std::string& default_library() {
  static std::string* name = new std::string("libcufile.so.0");  // never destroyed
  return *name;
}
}  // namespace

std::string cufile_library_name() {
  const char* env = std::getenv("VOXPIPE_CUFILE_LIBRARY");
  if (env && *env) return env;
  std::lock_guard lock(g_default_library_mutex);
  return default_library();
}

}  // namespace voxpipe::cuda

namespace voxpipe {
void set_default_cufile_library(const std::string& path) {
  std::lock_guard lock(cuda::g_default_library_mutex);
  cuda::default_library() = path.empty() ? "libcufile.so.0" : path;
}
}  // namespace voxpipe

namespace voxpipe::cuda {

std::unique_ptr<CufileDriver> open_cufile(const std::string& library, const PrimaryContext& ctx) {
  auto d = std::make_unique<CufileDriver>();
  d->library = library;
  // Kept loaded for the process (never dlclose'd): see the header.
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = ::dlerror();
    d->reason = library + " not found: " + (e ? e : "dlopen failed");
    return d;
  }
  CufileApi& a = d->api;
  std::string why;
  if (!(resolve(handle, library, "cuFileDriverOpen", a.driver_open, &why) &&
        resolve(handle, library, "cuFileDriverGetProperties", a.driver_get_properties, &why) &&
        resolve(handle, library, "cuFileHandleRegister", a.handle_register, &why) &&
        resolve(handle, library, "cuFileHandleDeregister", a.handle_deregister, &why) &&
        resolve(handle, library, "cuFileRead", a.read, &why))) {
    d->reason = why;
    d->api = {};
    return d;
  }
  cuf::CUfileError st{};
  try {
    ScopedContext scope(ctx);
    st = a.driver_open();
  } catch (const Error& e) {
    d->reason = std::string("cannot make the CUDA context current to open cuFile: ") + e.what();
    return d;
  }
  if (st.err != cuf::CU_FILE_SUCCESS) {
    d->reason = "cuFileDriverOpen failed: " + cufile_error_text(st.err);
    if (st.err == cuf::CU_FILE_CUDA_DRIVER_ERROR) d->reason += " (" + cuda_error_text(ctx.api(), st.cu_err) + ")";
    return d;
  }
  d->usable = true;
  cuf::CUfileDrvProps props{};
  const bool have_props = a.driver_get_properties(&props).err == cuf::CU_FILE_SUCCESS;
  const bool p2p = have_props && (props.nvfs.dstatusflags >> cuf::CU_FILE_NVME_P2P_SUPPORTED) & 1u;
  d->gds = have_props && (props.nvfs.major_version > 0 || p2p);
  if (d->gds)
    d->reason = p2p && props.nvfs.major_version == 0
                    ? "GPUDirect Storage through PCI P2PDMA"
                    : "GPUDirect Storage through nvidia-fs " + std::to_string(props.nvfs.major_version) +
                          "." + std::to_string(props.nvfs.minor_version);
  else
    d->reason = "cuFile runs in its compatibility mode only (neither nvidia-fs nor PCI P2PDMA): its "
                "reads go through host memory, which the pinned staging path does with more reads "
                "in flight";
  return d;
}

const CufileDriver& process_cufile(const PrimaryContext& ctx) {
  static std::once_flag once;
  static const CufileDriver* driver = nullptr;  // never destroyed (see the header)
  std::call_once(once, [&] { driver = open_cufile(cufile_library_name(), ctx).release(); });
  return *driver;
}

CufilePolicy cufile_policy_from_env() {
  const char* env = std::getenv("VOXPIPE_CUFILE");
  const std::string v = lowercase(env ? env : "");
  if (v.empty() || v == "auto") return CufilePolicy::automatic;
  if (v == "on") return CufilePolicy::on;
  if (v == "off") return CufilePolicy::off;
  throw Error(ErrorCode::invalid_argument, "", "VOXPIPE_CUFILE",
              "expected auto, on or off, but it is '" + std::string(env) + "'");
}

CufileChoice choose_cufile(CufilePolicy policy, const CufileDriver* driver,
                           std::uint64_t payload_bytes, double resident_fraction) {
  if (policy == CufilePolicy::off) return {false, "VOXPIPE_CUFILE=off"};
  if (policy == CufilePolicy::automatic && payload_bytes < kCufileMinBytes)
    return {false, "the payload (" + std::to_string(payload_bytes) + " bytes) is under " +
                       std::to_string(kCufileMinBytes >> 20) +
                       " MiB, where cuFile's set-up costs more than it saves"};
  if (!driver || !driver->usable)
    return {false, "cuFile cannot be used: " + (driver ? driver->reason : std::string("not loaded"))};
  if (policy == CufilePolicy::on) return {true, "VOXPIPE_CUFILE=on (" + driver->reason + ")"};
  if (!driver->gds) return {false, driver->reason};
  if (resident_fraction >= 0.5)
    return {false, "most of the payload is in the page cache, which buffered reads copy faster "
                   "than O_DIRECT reads the disk"};
  return {true, driver->reason};
}

double page_cache_fraction(const std::string& path, std::uint64_t offset, std::uint64_t bytes) {
  if (bytes == 0) return 0;
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (page_size <= 0) return -1;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const std::uint64_t page = static_cast<std::uint64_t>(page_size);
  const std::uint64_t begin = offset / page * page, end = offset + bytes;
  const std::size_t length = static_cast<std::size_t>(end - begin);
  void* map = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(begin));
  ::close(fd);  // the mapping keeps the file
  if (map == MAP_FAILED) return -1;
  double fraction = -1;
  try {
    std::vector<unsigned char> resident((length + page - 1) / page);
    if (::mincore(map, length, resident.data()) == 0) {
      const auto in = std::count_if(resident.begin(), resident.end(), [](unsigned char c) { return c & 1; });
      fraction = static_cast<double>(in) / static_cast<double>(resident.size());
    }
  } catch (const std::bad_alloc&) {  // cannot tell
  }
  ::munmap(map, length);
  return fraction;
}

CufileFile::CufileFile(const CufileDriver& driver, const std::string& path)
    : api_(driver.api), path_(path) {
  if (!driver.usable) throw Error(ErrorCode::unsupported, path, "cuFile", driver.reason);
  fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd_ < 0) {
    const int e = errno;
    throw Error(e == ENOENT ? ErrorCode::not_found : ErrorCode::unsupported, path, "O_DIRECT",
                std::string("cannot open the file for direct I/O, which cuFile needs: ") + std::strerror(e));
  }
  cuf::CUfileDescr descr{};
  descr.type = cuf::CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  descr.handle.fd = fd_;
  const cuf::CUfileError st = api_.handle_register(&handle_, &descr);
  if (st.err != cuf::CU_FILE_SUCCESS) {
    ::close(fd_);
    throw Error(ErrorCode::unsupported, path, "cuFileHandleRegister", cufile_error_text(st.err));
  }
}

CufileFile::~CufileFile() {
  api_.handle_deregister(handle_);
  ::close(fd_);
}

std::size_t CufileFile::read(drv::CUdeviceptr dst, std::size_t size, std::uint64_t file_offset) const {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t got = api_.read(handle_, reinterpret_cast<void*>(static_cast<std::uintptr_t>(dst)), size - done,
                                  static_cast<off_t>(file_offset + done), static_cast<off_t>(done));
    if (got == 0) break;  // the end of the file
    if (got < 0) {
      // -1: an I/O error in errno; otherwise minus a CUfileOpError.
      const int err = got == -1 ? errno : static_cast<int>(-got);
      throw Error(ErrorCode::io, path_, "cuFileRead", cufile_error_text(err), file_offset + done);
    }
    done += static_cast<std::size_t>(got);
  }
  return done;
}

}  // namespace voxpipe::cuda
