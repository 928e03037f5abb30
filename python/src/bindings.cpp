// The Python extension voxpipe._core: a thin layer over the public C++ API. Errors become the
// exception classes of voxpipe.errors (one table, in Python); the GIL is released around every
// call that touches files or voxel data.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <span>

#include "conversions.hpp"
#include "gil.hpp"
#include "voxpipe/buffer_pool.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/gzip.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/threads.hpp"

namespace nb = nanobind;
using namespace voxpipe;

// dicom_bindings.cpp: read_dicom and the parsed DICOM structures.
void bind_dicom(nb::module_& m);
void bind_dicom_pixels(nb::module_& m);
void bind_resample(nb::module_& m);  // resample_bindings.cpp
void bind_transforms(nb::module_& m);  // transform_bindings.cpp
void bind_resample_series(nb::module_& m);  // resample_series_bindings.cpp
void bind_device(nb::module_& m);  // device_bindings.cpp
void bind_view(nb::module_& m);  // view_bindings.cpp
void bind_remote(nb::module_& m);  // remote_bindings.cpp
void bind_zarr(nb::module_& m);  // zarr_bindings.cpp

// The bytes of `object`'s buffer (the buffer protocol; C-contiguous, read-only allowed), read in
// place: the buffer is held, so the object can be neither resized nor released, until the last
// copy of the returned owner ends (an image or a reader made from it), which may happen on any
// thread, with or without the GIL. TypeError / BufferError as Python raises them.
std::shared_ptr<const void> hold_buffer(nb::handle object, std::span<const std::byte>& bytes) {
  auto view = std::make_unique<Py_buffer>();
  if (PyObject_GetBuffer(object.ptr(), view.get(), PyBUF_C_CONTIGUOUS) != 0) throw nb::python_error();
  bytes = std::span(static_cast<const std::byte*>(view->buf), static_cast<std::size_t>(view->len));
  return std::shared_ptr<const void>(view.release(), [](Py_buffer* v) {
    python::GilAcquire gil;
    PyBuffer_Release(v);
    delete v;
  });
}

// A GzipIndexSummary as the dict build_index returns.
nb::dict index_summary_dict(const GzipIndexSummary& s) {
  nb::dict d;
  d["index_path"] = s.index_path;
  d["compressed_size"] = s.compressed_size;
  d["uncompressed_size"] = s.uncompressed_size;
  d["points"] = s.points;
  d["index_bytes"] = s.index_bytes;
  return d;
}

namespace {

using ByteArray = nb::ndarray<std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
// Input bytes may come from read-only arrays (a memory map opened with mmap='r').
using ConstByteArray = nb::ndarray<const std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

nb::bytes to_bytes(const std::vector<std::uint8_t>& v) {
  return nb::bytes(reinterpret_cast<const char*>(v.data()), v.size());
}

std::vector<std::uint8_t> from_bytes(const nb::bytes& b) {
  const auto* p = static_cast<const std::uint8_t*>(b.data());
  return std::vector<std::uint8_t>(p, p + b.size());
}

// A FileIdentity as (device, inode, size, mtime_ns); None for none.
nb::object identity_tuple(const std::optional<FileIdentity>& id) {
  if (!id) return nb::none();
  return nb::make_tuple(id->device, id->inode, id->size, id->mtime_ns);
}

// A FileIdentity from Python's (device, inode, size, mtime_ns), or None.
using IdentityTuple = std::optional<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, std::int64_t>>;

std::optional<FileIdentity> identity_from(const IdentityTuple& t) {
  if (!t) return std::nullopt;
  const auto [device, inode, size, mtime_ns] = *t;
  return FileIdentity{device, inode, size, mtime_ns};
}

nb::list affine_list(const std::array<double, 16>& a) {
  nb::list out;
  for (double v : a) out.append(v);
  return out;
}

// A write runs without the GIL, so Python's signal handlers (Ctrl-C's KeyboardInterrupt) would
// run only once it has ended. The producer this returns runs them between chunks: on the main
// thread only (the one that runs them), taking the GIL back at most every 100 ms (another thread
// may keep it for a switch interval). An exception they raise abandons the write, whose
// temporary files are removed, and propagates. Call with the GIL held.
DataProducer checking_signals(DataProducer producer) {
  const auto main_thread = nb::cast<unsigned long>(
      nb::module_::import_("threading").attr("main_thread")().attr("ident"));
  if (PyThread_get_thread_ident() != main_thread) return producer;
  using Clock = std::chrono::steady_clock;
  return [producer = std::move(producer), last = Clock::now()](std::span<std::byte> buffer) mutable {
    if (const auto now = Clock::now(); now - last >= std::chrono::milliseconds(100)) {
      last = now;
      python::GilAcquire gil;
      if (PyErr_CheckSignals() != 0) throw nb::python_error();
    }
    return producer(buffer);
  };
}

}  // namespace

NB_MODULE(_core, m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      python::GilAcquire gil;
      nb::object errors = nb::module_::import_("voxpipe.errors");
      nb::object offset = e.offset() ? nb::cast(*e.offset()) : nb::none();
      nb::object exc = errors.attr("_make")(error_code_name(e.code()), e.what(), e.path(),
                                             e.field(), offset);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });

  nb::class_<NiftiImage>(m, "NiftiImage")
      .def_ro("header_path", &NiftiImage::header_path)
      .def_ro("data_path", &NiftiImage::data_path)
      .def_prop_ro("gzip", [](const NiftiImage& i) { return i.data_compression == Compression::gzip; })
      // False for an image opened with open_bytes: data_path is then only its name.
      .def_prop_ro("data_in_file", [](const NiftiImage& i) { return !i.data_input; })
      .def_prop_ro("version", [](const NiftiImage& i) { return i.header.version; })
      .def_prop_ro("big_endian", [](const NiftiImage& i) { return i.header.big_endian; })
      .def_prop_ro("shape", [](const NiftiImage& i) {
        nb::list l;
        for (auto d : i.shape) l.append(d);
        return nb::tuple(l);
      })
      .def_prop_ro("dtype", [](const NiftiImage& i) { return std::string(dtype_name(i.dtype)); })
      .def_ro("data_offset", &NiftiImage::data_offset)
      .def_prop_ro("slope", [](const NiftiImage& i) { return i.scaling.slope; })
      .def_prop_ro("inter", [](const NiftiImage& i) { return i.scaling.inter; })
      .def_prop_ro("affine", [](const NiftiImage& i) { return affine_list(i.affine); })
      .def_prop_ro("header_bytes", [](const NiftiImage& i) { return to_bytes(encode_nifti_header(i.header)); })
      .def_prop_ro("extensions", [](const NiftiImage& i) {
        nb::list l;
        for (const auto& e : i.extensions) l.append(nb::make_tuple(e.code, to_bytes(e.content)));
        return l;
      })
      .def_ro("warnings", &NiftiImage::warnings)
      // (device, inode, size, mtime_ns) of the files when opened; None where not recorded.
      // Settable as for an image described by hand: with both None a reader checks nothing
      // (bench/bench_identity.py measures reads with and without the checks that way).
      .def_prop_rw(
          "header_identity", [](const NiftiImage& i) { return identity_tuple(i.header_identity); },
          [](NiftiImage& i, const IdentityTuple& id) { i.header_identity = identity_from(id); })
      .def_prop_rw(
          "data_identity", [](const NiftiImage& i) { return identity_tuple(i.data_identity); },
          [](NiftiImage& i, const IdentityTuple& id) { i.data_identity = identity_from(id); })
      .def_prop_ro("scaled_dtype", [](const NiftiImage& i) {
        return std::string(dtype_name(scaled_dtype(i.dtype, i.scaling, i.header_path)));
      });

  m.def("open", [](const std::string& path) { return open_nifti(path); }, nb::arg("path"),
        nb::call_guard<python::GilRelease>(),
        "Open a NIfTI file, reading the header and extensions only.");

  m.def(
      "open_bytes",
      [](nb::handle buffer, const std::string& name) {
        std::span<const std::byte> bytes;
        std::shared_ptr<const void> owner = hold_buffer(buffer, bytes);
        python::GilRelease release;
        return open_nifti_bytes(bytes, std::move(owner), name);
      },
      nb::arg("buffer"), nb::arg("name") = "<bytes>",
      "Open the bytes of a .nii or .nii.gz file held in memory (any C-contiguous object with the "
      "buffer protocol: bytes, bytearray, memoryview, mmap, numpy array), reading the header and "
      "extensions only. gzip is recognised by its magic; `name` stands for the bytes in "
      "header_path, data_path and errors (a .gz name requires gzip bytes, .hdr/.img names are "
      "refused). The bytes are not copied: the image and its readers hold the buffer, which must "
      "not change while they live. A Reader of it takes index_mode 'auto' (finds no index) or "
      "'none'.");

  m.def(
      "check_data_file",
      [](const NiftiImage& image, int fd) { check_nifti_data_file(image, fd); },
      nb::arg("image"), nb::arg("fd"),
      "Raise VoxpipeIOError ('changed since it was opened') unless the file open as `fd` is the "
      "image's data file as it was opened (one fstat).");
  m.def(
      "check_same_file",
      [](const std::string& path, const IdentityTuple& opened, const IdentityTuple& now) {
        check_same_file(path, identity_from(opened), identity_from(now));
      },
      nb::arg("path"), nb::arg("opened").none(), nb::arg("now").none(),
      "Raise VoxpipeIOError naming `path` ('changed since it was opened', and what differs) "
      "unless the identities (device, inode, size, mtime_ns), or None for no file, are equal.");

  m.def("keep_forever", [](nb::handle object) { object.inc_ref(); }, nb::arg("object"),
        "Take a reference that is never given back: `object` is never destroyed, not even at "
        "exit (a reader a forked child inherited in an unknown state).");

  m.def("is_pair_path", &nifti_is_pair_path, nb::arg("path"),
        "Whether a file name is a .hdr/.img pair name (optionally .gz).");

  m.def("resolve_threads", &resolve_threads, nb::arg("requested"),
        "The thread count a call given `requested` runs on: `requested` when > 0; for 0, "
        "$VOXPIPE_NUM_THREADS, else $OMP_NUM_THREADS (its first number), else the CPUs this "
        "process may run on (voxpipe/threads.hpp; docs/python.md#thread-count).");

  // Recycled outputs (voxpipe/buffer_pool.hpp): a uint8 array over a pooled buffer, which goes
  // back to the pool when the last array over it is freed, on whichever thread that happens.
  m.def(
      "pool_buffer",
      [](std::size_t nbytes) {
        auto* block = new BufferPool::Block(BufferPool::instance().acquire(nbytes));
        nb::capsule owner(block, [](void* p) noexcept {
          auto* b = static_cast<BufferPool::Block*>(p);
          BufferPool::instance().release(*b);
          delete b;
        });
        return nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>>(block->data, {nbytes}, owner);
      },
      nb::arg("nbytes"),
      "An uninitialised uint8 array of `nbytes` over a buffer of the recycled-output pool: a "
      "buffer released earlier (already faulted in) when one fits, else a new mapping, with "
      "huge-page advice from 4 MiB on. The buffer returns to the pool when the last array over "
      "it is freed.");
  m.def(
      "pool_stats",
      [] {
        BufferPoolStats s = BufferPool::instance().stats();
        nb::dict d;
        d["limit"] = s.limit;
        d["pooled_bytes"] = s.pooled_bytes;
        d["pooled_buffers"] = s.pooled_buffers;
        d["reused"] = s.reused;
        d["allocated"] = s.allocated;
        return d;
      },
      "The recycled-output pool's limit, what it holds now and its acquire counts.");
  m.def(
      "set_pool_limit",
      [](std::size_t limit) { return BufferPool::instance().set_limit(limit); },
      nb::arg("limit"),
      "Set the most bytes of released buffers the pool keeps (0: none) and free what no longer "
      "fits; returns the previous limit.");
  m.def("clear_pool", [] { BufferPool::instance().clear(); },
        "Free every buffer the pool keeps (the limit stays).");

  nb::class_<NiftiReader>(m, "Reader")
      .def(
          "__init__",
          [](NiftiReader* self, const NiftiImage& image, const std::string& index_mode,
             const std::string& index_path) {
            DataSourceOptions options;
            try {
              options = python::data_source_options(index_mode, index_path);
            } catch (const Error& e) {
              throw Error(e.code(), image.data_path, e.field(), e.detail());
            }
            python::GilRelease release;
            new (self) NiftiReader(image, options);
          },
          nb::arg("image"), nb::arg("index_mode") = "auto", nb::arg("index_path") = "")
      .def_prop_ro("random_access", &NiftiReader::random_access)
      .def("check_data_size", &NiftiReader::check_data_size,
           nb::call_guard<python::GilRelease>(),
           "Raise TruncatedError when the data file, as opened, cannot hold the header's data.")
      .def(
          "read",
          [](NiftiReader& reader,
             const std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>& selection,
             const std::string& out_dtype, bool apply_scaling, bool file_byte_order, bool real_part,
             const ByteArray& out, unsigned threads) {
            // `out` by reference: a copy would be released inside the call guard, taking the GIL
            // back in nanobind's code (gil.hpp).
            std::vector<AxisRange> sel;
            for (const auto& [start, step, count] : selection) sel.push_back({start, step, count});
            OutputSpec spec{python::parse_dtype(out_dtype), apply_scaling, file_byte_order, real_part};
            reader.read(sel, spec, std::span(reinterpret_cast<std::byte*>(out.data()), out.size()),
                        ReadOptions{threads});
          },
          nb::arg("selection"), nb::arg("dtype"), nb::arg("apply_scaling"),
          nb::arg("file_byte_order"), nb::arg("real_part"), nb::arg("out"), nb::arg("threads") = 0,
          nb::call_guard<python::GilRelease>(),
          "Read a selection (list of (start, step, count) per axis; empty: all) into `out`, a 1-D "
          "uint8 view of an F-ordered array of `dtype`, through the reader's open data file (and "
          "its member table or index).");

  m.def(
      "build_index",
      [](const std::string& path, std::uint64_t spacing, const std::string& output,
                     bool to_cache, bool exact, unsigned threads) {
        GzipIndexOptions options;
        options.spacing = spacing;
        options.output = output;
        options.to_cache = to_cache;
        options.exact = exact;
        options.threads = threads;
        GzipIndexSummary s;
        {
          python::GilRelease release;
          s = nifti_is_gzip_name(path) ? build_nifti_gzip_index(path, options)
                                       : build_gzip_index(path, options);
        }
        return index_summary_dict(s);
      },
      nb::arg("path"), nb::arg("spacing"), nb::arg("output"), nb::arg("to_cache"),
      nb::arg("exact") = true, nb::arg("threads") = 0,
      "Build and write the seek index of a .gz file (NIfTI names: a point per volume); returns a "
      "summary dict.");

  m.def(
      "affines",
      [](const nb::bytes& header) {
        auto bytes = from_bytes(header);
        NiftiHeader h = decode_nifti_header(bytes, "<header>");
        return nb::make_tuple(affine_list(nifti_qform(h, "<header>")), affine_list(nifti_sform(h)),
                              affine_list(nifti_base_affine(h)));
      },
      nb::arg("header"), "(qform, sform, base affine) of a header block, as stored.");

  m.def(
      "parse_header",
      [](const nb::bytes& header, const std::string& path) {
        auto bytes = from_bytes(header);
        ParsedHeader p = parse_nifti_header(bytes, path);
        return nb::make_tuple(to_bytes(encode_nifti_header(p.header)), p.warnings);
      },
      nb::arg("header"), nb::arg("path") = "<header>",
      "Apply nibabel's load-time checks and fixes; returns (fixed header bytes, warnings).");

  m.def(
      "write",
      [](const std::string& path, const nb::bytes& header,
         const std::vector<std::pair<std::int32_t, nb::bytes>>& extensions, ConstByteArray data,
         int level, const std::string& layout, unsigned threads) {
        GzipLayout gz_layout;
        if (layout == "members")
          gz_layout = GzipLayout::members;
        else if (layout == "bgzf")
          gz_layout = GzipLayout::bgzf;
        else if (layout == "single")
          gz_layout = GzipLayout::single;
        else
          throw Error(ErrorCode::invalid_argument, path, "gzip layout",
                      "expected 'members', 'bgzf' or 'single', but received '" + layout + "'");
        auto hbytes = from_bytes(header);
        std::vector<NiftiExtension> exts;
        for (const auto& [code, content] : extensions) exts.push_back({code, from_bytes(content)});
        const DataProducer producer = checking_signals(producer_from_bytes(
            std::span(reinterpret_cast<const std::byte*>(data.data()), data.size())));
        python::GilRelease release;
        NiftiHeader h = decode_nifti_header(hbytes, path);
        write_nifti(path, h, exts, producer, WriteOptions{level, gz_layout, threads});
      },
      nb::arg("path"), nb::arg("header"), nb::arg("extensions"), nb::arg("data"), nb::arg("level"),
      nb::arg("layout") = "members", nb::arg("threads") = 0,
      "Write header bytes, extensions and F-ordered data bytes (header dtype and byte order).");

  bind_dicom(m);
  bind_dicom_pixels(m);
  bind_resample(m);
  bind_transforms(m);
  bind_resample_series(m);
  bind_device(m);
  bind_view(m);
  bind_remote(m);
  bind_zarr(m);
}
