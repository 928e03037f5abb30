// voxpipe._core's NIfTI part: NiftiImage and how it is opened (a path, bytes in memory), the
// Reader of its voxels, the file identity checks, the header helpers (affines, parse_header) and
// write. The GIL is released while files are read and written.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <tuple>

#include "conversions.hpp"
#include "gil.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/remote.hpp"

namespace nb = nanobind;
using namespace voxpipe;

namespace {

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

void bind_nifti(nb::module_& m) {
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
      .def_prop_ro("header_bytes",
                   [](const NiftiImage& i) { return python::to_bytes(encode_nifti_header(i.header)); })
      .def_prop_ro("extensions", [](const NiftiImage& i) {
        nb::list l;
        for (const auto& e : i.extensions)
          l.append(nb::make_tuple(e.code, python::to_bytes(e.content)));
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
        std::shared_ptr<const void> owner = python::hold_buffer(buffer, bytes);
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


  m.def("is_pair_path", &nifti_is_pair_path, nb::arg("path"),
        "Whether a file name is a .hdr/.img pair name (optionally .gz).");

  nb::class_<NiftiReader>(m, "Reader")
      .def(
          "__init__",
          [](NiftiReader* self, const NiftiImage& image, const std::string& index_mode,
             const std::string& index_path, std::shared_ptr<const RemoteInput> index_input) {
            DataSourceOptions options;
            try {
              options = python::data_source_options(index_mode, index_path);
            } catch (const Error& e) {
              throw Error(e.code(), image.data_path, e.field(), e.detail());
            }
            options.index_input = std::move(index_input);
            python::GilRelease release;
            new (self) NiftiReader(image, options);
          },
          nb::arg("image"), nb::arg("index_mode") = "auto", nb::arg("index_path") = "",
          nb::arg("index_input").none() = nb::none())
      .def_prop_ro("random_access", &NiftiReader::random_access)
      .def("check_data_size", &NiftiReader::check_data_size,
           nb::call_guard<python::GilRelease>(),
           "Raise TruncatedError when the data file, as opened, cannot hold the header's data.")
      .def(
          "read",
          [](NiftiReader& reader,
             const std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>& selection,
             const std::string& out_dtype, bool apply_scaling, bool file_byte_order, bool real_part,
             const python::ByteArray& out, unsigned threads) {
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
        return nb::make_tuple(python::to_bytes(encode_nifti_header(p.header)), p.warnings);
      },
      nb::arg("header"), nb::arg("path") = "<header>",
      "Apply nibabel's load-time checks and fixes; returns (fixed header bytes, warnings).");

  m.def(
      "write",
      [](const std::string& path, const nb::bytes& header,
         const std::vector<std::pair<std::int32_t, nb::bytes>>& extensions,
         python::ConstByteArray data, int level, const std::string& layout, unsigned threads,
         nb::handle sink) {
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
        std::optional<OutputStream> stream;
        if (!sink.is_none())  // the sink keeps its own exception for the Python layer to raise
          stream = python::python_output_stream(sink, [path](nb::python_error& e) {
            return Error(ErrorCode::io, path, "", nb::str(e.value()).c_str());
          });
        python::GilRelease release;
        NiftiHeader h = decode_nifti_header(hbytes, path);
        if (stream)
          write_nifti_stream(path, *stream, h, exts, producer, WriteOptions{level, gz_layout, threads});
        else
          write_nifti(path, h, exts, producer, WriteOptions{level, gz_layout, threads});
      },
      nb::arg("path"), nb::arg("header"), nb::arg("extensions"), nb::arg("data"), nb::arg("level"),
      nb::arg("layout") = "members", nb::arg("threads") = 0, nb::arg("sink").none() = nb::none(),
      "Write header bytes, extensions and F-ordered data bytes (header dtype and byte order); "
      "with `sink` (write(bytes), commit(), abort()), a .nii/.nii.gz output named `path` into it "
      "rather than a file.");
}
