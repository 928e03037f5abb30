// voxpipe._core's bindings of the streaming resampler (vp.resample). Argument normalisation
// (images, transform files, per-volume stacks, chains, the output) lives in
// voxpipe/_many/resample_series.py; here the chains arrive as lists of steps and the output as a
// Fortran-ordered array or a path, and the GIL is released while the volumes are resampled.
// The moving data: a path (volumes read from the file) or a NumPy array of any layout and its
// affine (interpolated in place; the argument keeps the array alive for the call).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "gil.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/resample_series.hpp"

namespace nb = nanobind;
using namespace voxpipe;

namespace {

// A field as Python gives it: (X, Y, Z, 3) float64 in Fortran order (three component volumes
// one after another, DisplacementField's layout) and its 16 affine values.
using FieldArray = nb::ndarray<const double, nb::ndim<4>, nb::f_contig, nb::device::cpu>;
using OutArray = nb::ndarray<nb::f_contig, nb::device::cpu>;
using MovingArray = nb::ndarray<nb::ro, nb::device::cpu>;
// A step: (0, 16 affine values, -1) or (1, [], index into the fields).
using Step = std::tuple<int, std::vector<double>, int>;

Matrix4 matrix_of(const std::vector<double>& v, const char* field) {
  if (v.size() != 16)
    throw Error(ErrorCode::invalid_argument, "", field,
                "expected 16 values, but received " + std::to_string(v.size()));
  Matrix4 m;
  std::copy(v.begin(), v.end(), m.begin());
  return m;
}

Grid grid_of(const std::vector<std::int64_t>& shape, const std::vector<double>& affine) {
  if (shape.size() != 3)
    throw Error(ErrorCode::invalid_argument, "", "reference",
                "expected a 3-D grid, but received " + std::to_string(shape.size()) + " dimensions");
  Grid g;
  std::copy(shape.begin(), shape.end(), g.shape.begin());
  g.affine = matrix_of(affine, "reference affine");
  return g;
}

std::vector<TransformChain> chains_of(const std::vector<std::vector<Step>>& chains,
                                      const std::vector<std::tuple<FieldArray, std::vector<double>>>& fields) {
  std::vector<std::shared_ptr<const DisplacementField>> made;
  for (const auto& [data, affine] : fields) {
    if (data.shape(3) != 3)
      throw Error(ErrorCode::invalid_argument, "", "field",
                  "expected a field of shape (X, Y, Z, 3), but its last axis has " +
                      std::to_string(data.shape(3)));
    auto f = std::make_shared<DisplacementField>();
    for (int d = 0; d < 3; ++d) f->grid.shape[d] = static_cast<std::int64_t>(data.shape(d));
    f->grid.affine = matrix_of(affine, "field affine");
    f->data.assign(data.data(), data.data() + data.size());
    made.push_back(std::move(f));
  }
  std::vector<TransformChain> out;
  for (const auto& chain : chains) {
    TransformChain c;
    for (const auto& [kind, matrix, index] : chain) {
      TransformStep s;
      if (kind == 0) {
        s.kind = TransformStep::Kind::affine;
        s.matrix = matrix_of(matrix, "affine");
      } else {
        if (index < 0 || static_cast<std::size_t>(index) >= made.size())
          throw Error(ErrorCode::invalid_argument, "", "transforms", "field index out of range");
        s.kind = TransformStep::Kind::field;
        s.field = made[static_cast<std::size_t>(index)];
      }
      c.push_back(std::move(s));
    }
    out.push_back(std::move(c));
  }
  return out;
}

SeriesResampleOptions options_of(int order, const std::string& mode, double cval, bool prefilter,
                                 const std::string& dtype, unsigned threads,
                                 std::uint64_t memory_limit,
                                 const std::optional<nb::bytes>& reference_header) {
  SeriesResampleOptions o;
  o.interp.order = order;
  const auto m = interp_mode_from_name(mode);
  if (!m)
    throw Error(ErrorCode::invalid_argument, "", "mode",
                "expected constant, grid-constant, nearest, reflect, grid-mirror, mirror, wrap "
                "or grid-wrap, but received " + mode);
  o.interp.mode = *m;
  o.interp.cval = cval;
  o.interp.prefilter = prefilter;
  const auto t = dtype_from_name(dtype);
  if (!t) throw Error(ErrorCode::invalid_argument, "", "dtype", "unknown dtype " + dtype);
  o.output_dtype = *t;
  o.threads = threads;
  o.memory_limit = memory_limit;
  if (reference_header) {
    const auto* p = static_cast<const std::uint8_t*>(reference_header->data());
    o.reference_header = decode_nifti_header(std::span(p, reference_header->size()), "reference header");
  }
  return o;
}

// The moving array as a SeriesArray: a strided view of the caller's memory, no copy.
SeriesArray series_array_of(const MovingArray& a, const std::string& dtype,
                            const std::vector<double>& affine, double time_step, int xyzt_units) {
  SeriesArray s;
  const auto t = dtype_from_name(dtype);
  if (!t || a.itemsize() != dtype_size(*t))
    throw Error(ErrorCode::invalid_argument, "", "moving",
                "expected an integer, float32 or float64 array, but received " + dtype);
  s.data.data = const_cast<void*>(a.data());
  s.data.dtype = *t;
  for (std::size_t i = 0; i < a.ndim(); ++i) {
    s.data.shape.push_back(static_cast<std::int64_t>(a.shape(i)));
    s.data.strides.push_back(static_cast<std::int64_t>(a.stride(i)));
  }
  s.affine = matrix_of(affine, "moving_affine");
  s.time_step = time_step;
  s.xyzt_units = xyzt_units;
  return s;
}

// One run for either kind of moving data.
template <typename Moving>
void run(const Moving& moving, const std::vector<std::int64_t>& ref_shape,
         const std::vector<double>& ref_affine, const std::vector<std::vector<Step>>& chains,
         const std::vector<std::tuple<FieldArray, std::vector<double>>>& fields, int order,
         const std::string& mode, double cval, bool prefilter, const std::string& dtype,
         unsigned threads, std::uint64_t memory_limit, const std::optional<OutArray>& out,
         const std::optional<std::string>& out_path,
         const std::optional<nb::bytes>& reference_header, const nb::object& progress,
         bool fast) {
  const Grid ref = grid_of(ref_shape, ref_affine);
  const auto cs = chains_of(chains, fields);
  SeriesResampleOptions o =
      options_of(order, mode, cval, prefilter, dtype, threads, memory_limit, reference_header);
  o.interp.fast = fast;
  if (!progress.is_none())
    o.progress = [progress](std::int64_t done, std::int64_t total) {
      python::GilAcquire gil;
      progress(done, total);
    };
  if (out_path) {
    python::GilRelease release;
    resample_series_to_file(moving, ref, cs, *out_path, o);
    return;
  }
  if (!out)
    throw Error(ErrorCode::invalid_argument, "", "out", "expected an output array or path");
  ArrayRef a;
  a.data = out->data();
  a.dtype = o.output_dtype;
  std::int64_t stride = 1;
  for (std::size_t i = 0; i < out->ndim(); ++i) {
    a.shape.push_back(static_cast<std::int64_t>(out->shape(i)));
    a.strides.push_back(stride);
    stride *= a.shape.back();
  }
  if (out->itemsize() != dtype_size(o.output_dtype))
    throw Error(ErrorCode::invalid_argument, "", "out",
                "expected an array of " + dtype + " elements");
  python::GilRelease release;
  resample_series(moving, ref, cs, a, o);
}

}  // namespace

void bind_resample_series(nb::module_& m) {
  m.def(
      "resample_series",
      [](const std::string& moving_path, const std::vector<std::int64_t>& ref_shape,
         const std::vector<double>& ref_affine, const std::vector<std::vector<Step>>& chains,
         const std::vector<std::tuple<FieldArray, std::vector<double>>>& fields, int order,
         const std::string& mode, double cval, bool prefilter, const std::string& dtype,
         unsigned threads, std::uint64_t memory_limit, std::optional<OutArray> out,
         const std::optional<std::string>& out_path,
         const std::optional<nb::bytes>& reference_header, nb::object progress, bool fast) {
        const NiftiImage moving = open_nifti(moving_path);
        run(moving, ref_shape, ref_affine, chains, fields, order, mode, cval, prefilter, dtype,
            threads, memory_limit, out, out_path, reference_header, progress, fast);
      },
      nb::arg("moving_path"), nb::arg("ref_shape"), nb::arg("ref_affine"), nb::arg("chains"),
      nb::arg("fields"), nb::arg("order"), nb::arg("mode"), nb::arg("cval"), nb::arg("prefilter"),
      nb::arg("dtype"), nb::arg("threads"), nb::arg("memory_limit"), nb::arg("out").none(),
      nb::arg("out_path").none(), nb::arg("reference_header").none(), nb::arg("progress").none(),
      nb::arg("fast") = false,
      "Resample a NIfTI series onto a grid into a Fortran-ordered array or a file.");

  m.def(
      "resample_series_array",
      [](MovingArray moving, const std::string& moving_dtype,
         const std::vector<double>& moving_affine, double time_step, int xyzt_units,
         const std::vector<std::int64_t>& ref_shape, const std::vector<double>& ref_affine,
         const std::vector<std::vector<Step>>& chains,
         const std::vector<std::tuple<FieldArray, std::vector<double>>>& fields, int order,
         const std::string& mode, double cval, bool prefilter, const std::string& dtype,
         unsigned threads, std::uint64_t memory_limit, std::optional<OutArray> out,
         const std::optional<std::string>& out_path,
         const std::optional<nb::bytes>& reference_header, nb::object progress, bool fast) {
        // `moving` holds a reference to the array until the call returns.
        const SeriesArray series =
            series_array_of(moving, moving_dtype, moving_affine, time_step, xyzt_units);
        run(series, ref_shape, ref_affine, chains, fields, order, mode, cval, prefilter, dtype,
            threads, memory_limit, out, out_path, reference_header, progress, fast);
      },
      nb::arg("moving"), nb::arg("moving_dtype"), nb::arg("moving_affine"), nb::arg("time_step"),
      nb::arg("xyzt_units"), nb::arg("ref_shape"), nb::arg("ref_affine"), nb::arg("chains"),
      nb::arg("fields"), nb::arg("order"), nb::arg("mode"), nb::arg("cval"), nb::arg("prefilter"),
      nb::arg("dtype"), nb::arg("threads"), nb::arg("memory_limit"), nb::arg("out").none(),
      nb::arg("out_path").none(), nb::arg("reference_header").none(), nb::arg("progress").none(),
      nb::arg("fast") = false,
      "Resample a 3-D or 4-D array (any layout, read in place) with its affine onto a grid.");

  m.def(
      "series_memory_estimate",
      [](const std::string& moving_path, const std::vector<std::int64_t>& ref_shape,
         const std::vector<double>& ref_affine, const std::vector<std::vector<Step>>& chains,
         const std::vector<std::tuple<FieldArray, std::vector<double>>>& fields, int order,
         const std::string& mode, bool prefilter, const std::string& dtype, unsigned threads,
         std::uint64_t memory_limit, bool to_file) {
        const NiftiImage moving = open_nifti(moving_path);
        const auto cs = chains_of(chains, fields);
        const auto o = options_of(order, mode, 0.0, prefilter, dtype, threads, memory_limit, std::nullopt);
        const auto e = series_memory_estimate(moving, grid_of(ref_shape, ref_affine), cs, to_file, o);
        return std::make_tuple(e.per_volume, e.shared, e.volumes_in_flight, e.total);
      },
      "(per_volume, shared, volumes_in_flight, total) bytes the executor holds.");

  m.def(
      "series_voxel_matrix",
      [](const std::vector<double>& moving_affine, const std::vector<std::vector<double>>& chain,
         const std::vector<double>& reference_affine) {
        TransformChain c;
        for (const auto& m16 : chain) {
          TransformStep s;
          s.matrix = matrix_of(m16, "affine");
          c.push_back(s);
        }
        const Matrix4 v = series_voxel_matrix(matrix_of(moving_affine, "moving affine"), c,
                                              matrix_of(reference_affine, "reference affine"));
        return std::vector<double>(v.begin(), v.end());
      },
      "inverse(moving) @ A[n-1] @ ... @ A[0] @ reference, as the executor computes it.");
}
