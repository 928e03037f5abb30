// NIfTI-Zarr chunks (voxpipe/zarr.hpp): the Python layer reads the Zarr metadata with the `zarr`
// package and finds which chunks a selection touches and where they are (a local file, bytes it
// fetched, or absent); read_zarr_chunks decodes them into the output without the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <span>
#include <typeinfo>
#include <string>
#include <tuple>
#include <vector>

#include "conversions.hpp"
#include "gil.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/zarr.hpp"

namespace nb = nanobind;
using namespace voxpipe;

namespace {

[[noreturn]] void bad_spec(const std::string& name, const std::string& what) {
  throw Error(ErrorCode::invalid_argument, name, "spec", what);
}

// nb::cast of an argument's part, a TypeError naming it when the type is wrong (nanobind's own
// failure is a bare std::bad_cast).
template <class T>
T cast_part(nb::handle h, const std::string& what, const char* expected) {
  try {
    return nb::cast<T>(h);
  } catch (const std::bad_cast&) {
    throw nb::type_error((what + ": expected " + expected + ", but received " +
                          nb::cast<std::string>(nb::str(nb::handle(h.type()).attr("__name__"))))
                             .c_str());
  }
}

ZarrCompressor parse_compressor(const std::string& value, const std::string& name) {
  if (value == "none") return ZarrCompressor::none;
  if (value == "zstd") return ZarrCompressor::zstd;
  if (value == "gzip") return ZarrCompressor::gzip;
  if (value == "zlib") return ZarrCompressor::zlib;
  if (value == "blosc") return ZarrCompressor::blosc;
  bad_spec(name, "expected compressor 'none', 'zstd', 'gzip', 'zlib' or 'blosc', but received '" +
                     value + "'");
}

// The spec dict: shape, chunk_shape, dtype (a voxpipe dtype name), big_endian, chunk_f_order,
// compressor, fill_value (one element's bytes, stored order), name. Call with the GIL held.
ZarrArraySpec parse_spec(const nb::dict& d) {
  ZarrArraySpec spec;
  const std::string name =
      d.contains("name") ? cast_part<std::string>(d["name"], "spec['name']", "str") : std::string();
  auto get = [&](const char* key) -> nb::object {
    if (!d.contains(key)) bad_spec(name, std::string("expected the key '") + key + "', but it is absent");
    return d[key];
  };
  using Sizes = std::vector<std::int64_t>;
  spec.name = name;
  spec.shape = cast_part<Sizes>(get("shape"), "spec['shape']", "a sequence of int");
  spec.chunk_shape = cast_part<Sizes>(get("chunk_shape"), "spec['chunk_shape']", "a sequence of int");
  spec.dtype = python::parse_dtype(cast_part<std::string>(get("dtype"), "spec['dtype']", "str"));
  spec.big_endian = cast_part<bool>(get("big_endian"), "spec['big_endian']", "bool");
  spec.chunk_f_order = cast_part<bool>(get("chunk_f_order"), "spec['chunk_f_order']", "bool");
  spec.compressor =
      parse_compressor(cast_part<std::string>(get("compressor"), "spec['compressor']", "str"), name);
  std::span<const std::byte> fill;
  const std::shared_ptr<const void> held = python::hold_buffer(get("fill_value"), fill);
  spec.fill_value.assign(fill.begin(), fill.end());
  return spec;
}

}  // namespace

void bind_zarr(nb::module_& m) {
  m.def(
      "read_zarr_chunks",
      [](const nb::dict& spec_dict, const nb::list& chunk_list,
         const std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>& selection,
         const std::string& out_dtype, bool apply_scaling, bool file_byte_order, bool real_part,
         double slope, double inter, const python::ByteArray& out,
         const std::vector<std::int64_t>& dest_strides, unsigned threads) {
        // `out` by reference: a copy would be released inside the GIL-free scope, taking the GIL
        // back in nanobind's code (gil.hpp).
        const ZarrArraySpec spec = parse_spec(spec_dict);
        std::vector<ZarrChunk> chunks;
        std::vector<std::shared_ptr<const void>> held;  // the buffers, until the decode is done
        chunks.reserve(nb::len(chunk_list));
        for (nb::handle item : chunk_list) {
          using Entry = std::tuple<std::vector<std::int64_t>, std::string, nb::object, nb::object>;
          const auto entry = cast_part<Entry>(item, "chunks[" + std::to_string(chunks.size()) + "]",
                                              "a tuple (grid_index, key, path or None, buffer or None)");
          ZarrChunk chunk;
          chunk.grid_index = std::get<0>(entry);
          chunk.key = std::get<1>(entry);
          const nb::object& path = std::get<2>(entry);
          const nb::object& buffer = std::get<3>(entry);
          if (!path.is_none())
            chunk.path = cast_part<std::string>(path, "the path of chunk " + chunk.key, "str or None");
          if (!buffer.is_none()) {
            if (!path.is_none())
              throw Error(ErrorCode::invalid_argument, spec.name, "chunk",
                          chunk.key + ": expected a path or a buffer, but received both");
            held.push_back(python::hold_buffer(buffer, chunk.bytes));
          }
          chunk.missing = path.is_none() && buffer.is_none();
          chunks.push_back(std::move(chunk));
        }
        std::vector<AxisRange> sel;
        for (const auto& [start, step, count] : selection) sel.push_back({start, step, count});
        const OutputSpec output{python::parse_dtype(out_dtype), apply_scaling, file_byte_order,
                                real_part};
        python::GilRelease release;
        read_zarr_chunks(spec, chunks, sel, output, slope, inter,
                         std::span(reinterpret_cast<std::byte*>(out.data()), out.size()),
                         dest_strides, ReadOptions{threads});
      },
      nb::arg("spec"), nb::arg("chunks"), nb::arg("selection"), nb::arg("dtype"),
      nb::arg("apply_scaling"), nb::arg("file_byte_order"), nb::arg("real_part"), nb::arg("slope"),
      nb::arg("inter"), nb::arg("out"), nb::arg("dest_strides"), nb::arg("threads") = 0,
      "Decode the chunks of a NIfTI-Zarr array that `selection` touches into `out`.\n\n"
      "spec: dict with shape and chunk_shape (zarr axis order), dtype (the stored element type, as "
      "NiftiImage.dtype names it), big_endian, chunk_f_order (Zarr v2 order 'F'), compressor "
      "('none', 'zstd', 'gzip', 'zlib' or 'blosc'), fill_value (bytes of one stored element) and "
      "name (for errors). chunks: [(grid_index, key, path, buffer)], path a local file or None, "
      "buffer the encoded bytes (any C-contiguous buffer, held without copying) or None; both "
      "None: a missing chunk (the fill value). selection: [(start, step, count)] per zarr axis. "
      "out: a 1-D uint8 view of the output, `dtype` elements; element (i0, i1, ...) of the "
      "selection goes to element sum(i_k * dest_strides[k]). Conversion and scaling (slope, "
      "inter) as Reader.read. Runs without the GIL on `threads` threads (0: resolve_threads).");
}
