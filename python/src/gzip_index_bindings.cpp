// voxpipe._core's seek indexes of gzip files (voxpipe/gzip.hpp): build_index over a local file
// and build_remote_index over a NIfTI object read by ranges (open_remote), both returning the
// index's summary as a dict. The GIL is released while the file is read.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>

#include "gil.hpp"
#include "voxpipe/gzip.hpp"
#include "voxpipe/nifti.hpp"

namespace nb = nanobind;
using namespace voxpipe;

namespace {

GzipIndexOptions index_options(std::uint64_t spacing, const std::string& output, bool exact,
                               unsigned threads) {
  GzipIndexOptions options;
  options.spacing = spacing;
  options.output = output;
  options.exact = exact;
  options.threads = threads;
  return options;
}

// build() run without the GIL; the GzipIndexSummary it returns, as a dict.
template <class Build>
nb::dict summary_of(const Build& build) {
  GzipIndexSummary s;
  {
    python::GilRelease release;
    s = build();
  }
  nb::dict d;
  d["index_path"] = s.index_path;
  d["compressed_size"] = s.compressed_size;
  d["uncompressed_size"] = s.uncompressed_size;
  d["points"] = s.points;
  d["index_bytes"] = s.index_bytes;
  return d;
}

}  // namespace

void bind_gzip_index(nb::module_& m) {
  m.def(
      "build_index",
      [](const std::string& path, std::uint64_t spacing, const std::string& output, bool to_cache,
         bool exact, unsigned threads) {
        GzipIndexOptions options = index_options(spacing, output, exact, threads);
        options.to_cache = to_cache;
        return summary_of([&] {
          return nifti_is_gzip_name(path) ? build_nifti_gzip_index(path, options)
                                          : build_gzip_index(path, options);
        });
      },
      nb::arg("path"), nb::arg("spacing"), nb::arg("output"), nb::arg("to_cache"),
      nb::arg("exact") = true, nb::arg("threads") = 0,
      "Build and write the seek index of a .gz file (NIfTI names: a point per volume); returns a "
      "summary dict.");

  m.def(
      "build_remote_index",
      [](const NiftiImage& image, const std::string& output, std::uint64_t spacing, bool exact,
         unsigned threads) {
        const GzipIndexOptions options = index_options(spacing, output, exact, threads);
        return summary_of([&] { return build_nifti_gzip_index(image, options); });
      },
      nb::arg("image"), nb::arg("output"), nb::arg("spacing"), nb::arg("exact") = true,
      nb::arg("threads") = 0,
      "Build the seek index of a gzip NIfTI object opened with open_remote (a point per volume), "
      "reading it once front to back, and write it to `output` keyed by the object's size and "
      "last 64 KiB; returns a summary dict.");
}
