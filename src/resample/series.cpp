// The streaming executor: a 3-D or 4-D series resampled volume by volume (resample_series.hpp).
//
// Each of K slots loops over volumes: take the next index, read that volume (nibabel's scaling;
// a SeriesArray's volume is interpolated in place, nothing read), interpolate it into its place
// (the caller's array, or the slot's buffer that the file writer drains in order), take the
// next. The slots own their buffers for the whole run, the spline coefficients' included, so
// memory is K volumes whatever the series' length, and each buffer's pages are first touched
// once (fresh pages cost more here than the interpolation of a small volume, DESIGN.md).
//
// Coordinates: an affine-only chain is one voxel-to-voxel matrix, run through affine_transform
// (coordinates made per row, bit-identical to scipy). A chain with a displacement field has its
// shared start applied once to every reference point (3 float64 per reference voxel), and the
// per-volume affines after it folded with inverse(moving.affine) into one matrix per volume,
// applied per segment while interpolating.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/checked.hpp"
#include "core/thread_pool.hpp"
#include "resample/bspline.hpp"
#include "resample/interpolator.hpp"
#include "resample/matrix4.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/resample_series.hpp"
#include "voxpipe/threads.hpp"

namespace voxpipe {
namespace resample {
namespace {

[[noreturn]] void invalid(const std::string& field, const std::string& detail) {
  throw Error(ErrorCode::invalid_argument, "", field, detail);
}

// inverse4 of matrix4.hpp, as the transform readers invert; Error(invalid_argument) naming
// `field` when the affine is singular.
Matrix4 inverse(const Matrix4& m, const char* field) {
  const std::optional<Matrix4> x = try_inverse4(m);
  if (!x) invalid(field, "expected an invertible affine, but received a singular one");
  return *x;
}

bool same_step(const TransformStep& a, const TransformStep& b) {
  if (a.kind != b.kind) return false;
  return a.kind == TransformStep::Kind::affine ? a.matrix == b.matrix : a.field == b.field;
}

std::uint64_t mul(std::uint64_t a, std::uint64_t b, const char* what) {
  auto r = core::checked_mul(a, b);
  if (!r) throw Error(ErrorCode::limit, "", what, "the size overflows 64 bits");
  return *r;
}

// The moving data as the executor sees it: an image read from its file, or the caller's array.
struct Source {
  const NiftiImage* image = nullptr;  // exactly one of image and array
  const SeriesArray* array = nullptr;
  std::vector<std::int64_t> shape;
  Matrix4 affine = kIdentity4;
  DType dtype = DType::f64;  // element type (the file's on-disk type)
  std::string path;          // the header's path, for errors
  double time_step = 1.0;    // pixdim[4]
  int xyzt_units = 0;
};

Source source_of(const NiftiImage& m) {
  Source s;
  s.image = &m;
  s.shape = m.shape;
  s.affine = m.affine;
  s.dtype = m.dtype;
  s.path = m.header_path;
  s.time_step = m.header.pixdim[4];
  s.xyzt_units = m.header.xyzt_units;
  return s;
}

Source source_of(const SeriesArray& m) {
  const ArrayRef& a = m.data;
  if (a.strides.size() != a.shape.size())
    invalid("moving", "expected one stride per axis (" + std::to_string(a.shape.size()) +
                          "), but received " + std::to_string(a.strides.size()));
  bool empty = false;
  for (auto n : a.shape) {
    if (n < 0) invalid("moving", "expected non-negative dimensions, but received " + std::to_string(n));
    empty |= n == 0;
  }
  if (!a.data && !empty) invalid("moving", "an array without data");
  Source s;
  s.array = &m;
  s.shape = a.shape;
  s.affine = m.affine;
  s.dtype = a.dtype;
  s.time_step = m.time_step;
  s.xyzt_units = m.xyzt_units;
  return s;
}

// How the chains become coordinates.
struct ChainPlan {
  bool field = false;
  std::size_t shared = 0;        // field: the steps every chain starts with, up to the last field
  std::vector<Matrix4> per_chain;  // affine: V (voxel to voxel); field: inverse(moving) @ suffix
};

ChainPlan plan_chains(const Source& moving, const Grid& reference,
                      std::span<const TransformChain> chains, std::int64_t volumes) {
  if (chains.size() != 1 && static_cast<std::int64_t>(chains.size()) != volumes)
    invalid("transforms", "expected 1 chain or one per volume (" + std::to_string(volumes) +
                              "), but received " + std::to_string(chains.size()));
  ChainPlan plan;
  std::size_t last_field = 0;
  for (const auto& chain : chains)
    for (std::size_t s = 0; s < chain.size(); ++s) {
      const auto& step = chain[s];
      if (step.kind != TransformStep::Kind::field) continue;
      if (!step.field) invalid("transforms", "a field step without a field");
      const auto& f = *step.field;
      std::uint64_t n = 3;
      for (auto d : f.grid.shape) {
        if (d <= 0) invalid("transforms", "expected a displacement field with a non-empty grid");
        n = mul(n, static_cast<std::uint64_t>(d), "field");
      }
      if (f.data.size() != n)
        invalid("transforms", "expected a displacement field of 3 x " + std::to_string(n / 3) +
                                  " values, but received " + std::to_string(f.data.size()));
      plan.field = true;
      last_field = std::max(last_field, s + 1);
    }
  if (plan.field) {
    // Field steps are sampled once for the whole reference grid: they must come before any
    // step that differs between volumes.
    const auto& first = chains[0];
    for (const auto& chain : chains) {
      bool ok = chain.size() >= last_field && first.size() >= last_field;
      for (std::size_t s = 0; ok && s < last_field; ++s) ok = same_step(chain[s], first[s]);
      if (!ok)
        invalid("transforms",
                "a displacement field must be shared by every volume, before any per-volume "
                "step (e.g. [field, affine_t]), but the chains differ before their last field");
    }
    plan.shared = last_field;
  }
  const Matrix4 inv_moving = inverse(moving.affine, "moving affine");
  for (const auto& chain : chains) {
    Matrix4 m = kIdentity4;
    for (std::size_t s = plan.shared; s < chain.size(); ++s) m = matmul4(chain[s].matrix, m);
    plan.per_chain.push_back(plan.field ? matmul4(inv_moving, m)
                                        : matmul4(matmul4(inv_moving, m), reference.affine));
  }
  return plan;
}

// What a volume is read as: get_fdata's float64 when scaled; otherwise the on-disk type, whose
// values convert to float64 exactly as get_fdata's do, at a fraction of the memory. An array's
// volumes are interpolated in their own type.
DType read_type(const Source& moving) {
  if (dtype_is_complex(moving.dtype) || dtype_is_rgb(moving.dtype))
    throw Error(ErrorCode::unsupported, moving.path, moving.array ? "moving" : "datatype",
                "expected real (integer or float) voxels, but found " +
                    std::string(dtype_name(moving.dtype)));
  return moving.image && moving.image->scaling.active() ? DType::f64 : moving.dtype;
}

struct Sizes {
  std::uint64_t moving_voxels = 1, reference_voxels = 1;
  std::uint64_t input = 0, coeff = 0, output = 0, shared = 0;
};

Sizes sizes(const Source& moving, const Grid& reference, bool field, bool to_file,
            const SeriesResampleOptions& o) {
  Sizes s;
  const bool prefilter = o.interp.prefilter && o.interp.order > 1;
  const std::int64_t npad =
      (o.interp.mode == InterpMode::nearest || o.interp.mode == InterpMode::grid_constant) ? 12 : 0;
  std::vector<std::int64_t> logical(3);
  for (int d = 0; d < 3; ++d) logical[d] = moving.shape[d] + 2 * npad;
  const std::int64_t margin = spline_margin(logical, o.interp.order, o.interp.mode);
  std::uint64_t padded = 1;
  for (int d = 0; d < 3; ++d) {
    s.moving_voxels = mul(s.moving_voxels, static_cast<std::uint64_t>(moving.shape[d]), "moving");
    padded = mul(padded, static_cast<std::uint64_t>(logical[d] + 2 * margin), "moving");
    if (reference.shape[d] < 0) invalid("reference", "expected a grid of non-negative dimensions");
    s.reference_voxels =
        mul(s.reference_voxels, static_cast<std::uint64_t>(reference.shape[d]), "reference");
  }
  const std::uint64_t element = dtype_size(read_type(moving));
  s.input = moving.array ? 0 : mul(s.moving_voxels, element, "moving");
  s.coeff = prefilter ? mul(padded, 8, "moving") : 0;
  s.output = to_file ? mul(s.reference_voxels, dtype_size(o.output_dtype), "output") : 0;
  s.shared = field ? mul(s.reference_voxels, 24, "reference") : 0;
  return s;
}

struct Concurrency {
  unsigned slots = 1;  // volumes in flight
  unsigned inner = 1;  // threads per volume
};

// `threads`: the call's resolved count (0 is taken as 1); o.threads is not read.
Concurrency concurrency(const Sizes& s, std::int64_t volumes, unsigned threads,
                        const SeriesResampleOptions& o) {
  threads = std::max(threads, 1u);
  std::uint64_t slots = std::min<std::uint64_t>(threads, static_cast<std::uint64_t>(std::max<std::int64_t>(volumes, 1)));
  const std::uint64_t per_volume = s.input + s.coeff + s.output;
  if (o.memory_limit) {
    if (o.memory_limit < s.shared + per_volume)
      throw Error(ErrorCode::limit, "", "memory_limit",
                  "expected at least " + std::to_string(s.shared + per_volume) +
                      " bytes (one volume in flight: input " + std::to_string(s.input) +
                      " + coefficients " + std::to_string(s.coeff) + " + output " +
                      std::to_string(s.output) + ", shared field points " +
                      std::to_string(s.shared) + "), but received " + std::to_string(o.memory_limit));
    slots = std::min<std::uint64_t>(slots, per_volume ? (o.memory_limit - s.shared) / per_volume : slots);
  }
  Concurrency c;
  c.slots = static_cast<unsigned>(std::max<std::uint64_t>(slots, 1));
  c.inner = std::max(1u, threads / c.slots);
  return c;
}

std::int64_t volume_count(const Source& moving) {
  if (moving.shape.size() < 3 || moving.shape.size() > 4)
    throw Error(ErrorCode::unsupported, moving.path, moving.array ? "moving" : "dim",
                "expected a 3-D or 4-D image, but found " + std::to_string(moving.shape.size()) +
                    " dimensions");
  return moving.shape.size() == 4 ? moving.shape[3] : 1;
}

// The RAS points of every voxel of a grid, affine @ (i, j, k, 1) summed in that order
// (nitransforms' ndcoords): component c of voxel v at [c * voxels + v], voxels in Fortran order.
std::vector<double> grid_points(const Grid& grid, unsigned threads) {
  const std::int64_t X = grid.shape[0], Y = grid.shape[1], Z = grid.shape[2];
  const std::int64_t n = X * Y * Z;
  std::vector<double> P(static_cast<std::size_t>(3 * n));
  const auto& A = grid.affine;
  core::parallel_for(static_cast<std::size_t>(Z), threads, [&](std::size_t kk) {
    const auto k = static_cast<double>(kk);
    for (std::int64_t j = 0; j < Y; ++j)
      for (std::int64_t i = 0; i < X; ++i) {
        const std::int64_t v = i + X * (j + Y * static_cast<std::int64_t>(kk));
        for (int c = 0; c < 3; ++c)
          P[c * n + v] = A[c * 4 + 0] * static_cast<double>(i) +
                         A[c * 4 + 1] * static_cast<double>(j) + A[c * 4 + 2] * k + A[c * 4 + 3];
      }
  });
  return P;
}

// Maps every point of P (component c of point i at P[c * n + i]) through a displacement field
// as nitransforms' DenseFieldTransform.map does: the point's index in the field grid is computed
// from its float32 rounding; if every point is within 1e-3 voxels of a grid point, the
// deformation (grid point + displacement) there; else the cubic spline of the deformation, and
// the point itself (per component) where that is NaN (outside the grid). A rounded index outside
// the grid counts as off the grid (NumPy would wrap a negative one, or raise).
void apply_field(const DisplacementField& f, double* P, std::int64_t n, unsigned threads) {
  const Matrix4 inv = inverse(f.grid.affine, "field affine");
  const std::int64_t fx = f.grid.shape[0], fy = f.grid.shape[1], fz = f.grid.shape[2];
  const std::int64_t fn = fx * fy * fz;
  // The deformation: nitransforms' ndcoords (affine @ index) plus the displacements.
  std::vector<double> def = grid_points(f.grid, threads);
  for (std::size_t v = 0; v < def.size(); ++v) def[v] += f.data[v];
  constexpr std::int64_t kChunk = 4096;
  const auto chunks = static_cast<std::size_t>((n + kChunk - 1) / kChunk);
  auto index_of = [&](std::int64_t p, double ijk[3]) {
    double x[3];
    for (int c = 0; c < 3; ++c) x[c] = static_cast<double>(static_cast<float>(P[c * n + p]));
    for (int r = 0; r < 3; ++r)
      ijk[r] = inv[r * 4 + 0] * x[0] + inv[r * 4 + 1] * x[1] + inv[r * 4 + 2] * x[2] + inv[r * 4 + 3];
  };
  std::atomic<bool> on_grid{true};
  core::parallel_for(chunks, threads, [&](std::size_t ch) {
    const std::int64_t p1 = std::min(n, static_cast<std::int64_t>(ch + 1) * kChunk);
    for (std::int64_t p = static_cast<std::int64_t>(ch) * kChunk; p < p1 && on_grid; ++p) {
      double ijk[3], ss = 0;
      bool inside = true;
      index_of(p, ijk);
      for (int c = 0; c < 3; ++c) {
        const double r = std::nearbyint(ijk[c]);  // np.round: half to even
        ss += (ijk[c] - r) * (ijk[c] - r);
        inside &= r >= 0 && r < static_cast<double>(f.grid.shape[c]);
      }
      if (!(std::sqrt(ss) < 1e-3) || !inside) on_grid = false;
    }
  });
  if (on_grid) {
    core::parallel_for(chunks, threads, [&](std::size_t ch) {
      const std::int64_t p1 = std::min(n, static_cast<std::int64_t>(ch + 1) * kChunk);
      for (std::int64_t p = static_cast<std::int64_t>(ch) * kChunk; p < p1; ++p) {
        double ijk[3];
        index_of(p, ijk);
        const auto v = static_cast<std::int64_t>(std::nearbyint(ijk[0])) +
                       fx * (static_cast<std::int64_t>(std::nearbyint(ijk[1])) +
                             fy * static_cast<std::int64_t>(std::nearbyint(ijk[2])));
        for (int c = 0; c < 3; ++c) P[c * n + p] = def[c * fn + v];
      }
    });
    return;
  }
  InterpOptions io;
  io.order = 3;
  io.mode = InterpMode::constant;
  io.cval = std::numeric_limits<double>::quiet_NaN();
  io.prefilter = true;
  io.threads = threads;
  std::vector<std::unique_ptr<Interpolator>> comp;
  for (int c = 0; c < 3; ++c) {
    ArrayRef a;
    a.data = def.data() + c * fn;
    a.dtype = DType::f64;
    a.shape = {fx, fy, fz};
    a.strides = {1, fx, fx * fy};
    comp.push_back(std::make_unique<Interpolator>(a, io));
  }
  core::parallel_for(chunks, threads, [&](std::size_t ch) {
    const std::int64_t p0 = static_cast<std::int64_t>(ch) * kChunk;
    const std::int64_t m = std::min(n, p0 + kChunk) - p0;
    std::vector<double> coords(static_cast<std::size_t>(3 * m)), vals(static_cast<std::size_t>(3 * m));
    for (std::int64_t k = 0; k < m; ++k) {
      double ijk[3];
      index_of(p0 + k, ijk);
      for (int c = 0; c < 3; ++c) coords[c * m + k] = ijk[c];
    }
    for (int c = 0; c < 3; ++c) comp[c]->evaluate(coords.data(), m, vals.data() + c * m);
    for (int c = 0; c < 3; ++c)
      for (std::int64_t k = 0; k < m; ++k)
        if (!std::isnan(vals[c * m + k])) P[c * n + p0 + k] = vals[c * m + k];
  });
}

// The reference points after the chains' shared start (field chains only).
std::vector<double> shared_points(const Grid& ref, const TransformChain& chain, std::size_t shared,
                                  unsigned threads) {
  const std::int64_t n = ref.shape[0] * ref.shape[1] * ref.shape[2];
  std::vector<double> P = grid_points(ref, threads);
  for (std::size_t s = 0; s < shared; ++s) {
    const auto& step = chain[s];
    if (step.kind == TransformStep::Kind::field) {
      apply_field(*step.field, P.data(), n, threads);
      continue;
    }
    const auto& M = step.matrix;
    core::parallel_for(static_cast<std::size_t>((n + 65535) / 65536), threads, [&](std::size_t ch) {
      const std::int64_t p1 = std::min<std::int64_t>(n, static_cast<std::int64_t>(ch + 1) * 65536);
      for (std::int64_t p = static_cast<std::int64_t>(ch) * 65536; p < p1; ++p) {
        const double x = P[p], y = P[n + p], z = P[2 * n + p];
        for (int c = 0; c < 3; ++c)
          P[c * n + p] = M[c * 4 + 0] * x + M[c * 4 + 1] * y + M[c * 4 + 2] * z + M[c * 4 + 3];
      }
    });
  }
  return P;
}

// Volume t of a 3-D or 4-D array (the array itself when 3-D).
ArrayRef volume_view(const ArrayRef& out, std::int64_t t) {
  ArrayRef v;
  v.dtype = out.dtype;
  v.shape = {out.shape[0], out.shape[1], out.shape[2]};
  v.strides = {out.strides[0], out.strides[1], out.strides[2]};
  const std::int64_t off = out.shape.size() == 4 ? t * out.strides[3] : 0;
  v.data = static_cast<std::byte*>(out.data) + off * static_cast<std::int64_t>(dtype_size(out.dtype));
  return v;
}

// Everything one run needs, shared by the slots.
class Executor {
 public:
  // `threads`: options.threads as the public call resolved it.
  Executor(Source moving, const Grid& reference, std::span<const TransformChain> chains,
           bool to_file, const SeriesResampleOptions& options, unsigned threads)
      : moving_(std::move(moving)), reference_(reference), options_(options) {
    volumes_ = volume_count(moving_);
    plan_ = plan_chains(moving_, reference, chains, volumes_);
    read_type_ = read_type(moving_);
    sizes_ = sizes(moving_, reference, plan_.field, to_file, options);
    conc_ = concurrency(sizes_, volumes_, threads, options);
    if (!dtype_is_integer(options.output_dtype) && !dtype_is_float(options.output_dtype))
      invalid("dtype", "expected an integer or float output dtype, but received " +
                           std::string(dtype_name(options.output_dtype)));
    if (options.interp.order < 0 || options.interp.order > 5)
      invalid("order", "expected a spline order from 0 to 5, but received " +
                           std::to_string(options.interp.order));
    interp_ = options.interp;
    interp_.threads = conc_.inner;
    // scipy on get_fdata's float64 array pads grid-constant with cval itself.
    interp_.pad_value = options.interp.cval;
    if (plan_.field)
      points_ = shared_points(reference, chains[0], plan_.shared, std::max(threads, 1u));
    if (moving_.image) {
      reader_ = std::make_unique<NiftiReader>(*moving_.image);
      reader_->check_data_size();
      sequential_ = !reader_->random_access();
    }
  }

  std::int64_t volumes() const { return volumes_; }
  const Concurrency& concurrency_used() const { return conc_; }
  std::uint64_t output_volume_bytes() const { return sizes_.reference_voxels * dtype_size(options_.output_dtype); }

  struct Slot {
    std::vector<std::byte> input;
    std::vector<std::byte> output;  // file output only
    resample::Coefficients coeff;   // the volume's spline coefficients, memory kept for the next
  };

  // Takes the next volume index; -1 when there is none or the run stopped.
  std::int64_t take() {
    if (stop_) return -1;
    const std::int64_t t = next_.fetch_add(1);
    return t < volumes_ ? t : -1;
  }

  // Reads volume t into the slot; false when the run stopped while waiting for its turn.
  bool read(std::int64_t t, Slot& slot) {
    if (!reader_) return true;  // an array: volume t is interpolated in place
    slot.input.resize(static_cast<std::size_t>(sizes_.input));
    std::vector<AxisRange> sel;
    for (int d = 0; d < 3; ++d) sel.push_back({0, 1, moving_.shape[d]});
    if (moving_.shape.size() == 4) sel.push_back({t, 1, 1});
    OutputSpec spec;
    spec.type = read_type_;
    spec.apply_scaling = moving_.image->scaling.active();
    ReadOptions ro;
    ro.threads = conc_.inner;
    if (!sequential_) {
      reader_->read(sel, spec, slot.input, ro);
      return true;
    }
    // A gzip stream without an index only reads forward: volumes are read in index order, or
    // each out-of-order read would inflate the file again from its start. Indices are taken in
    // order, so the slot that holds t - 1 is running and will pass the turn on.
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return read_turn_ == t || stop_; });
      if (stop_) return false;
    }
    try {
      reader_->read(sel, spec, slot.input, ro);
    } catch (...) {
      fail(std::current_exception());
      throw;
    }
    {
      std::lock_guard lock(mutex_);
      read_turn_ = t + 1;
    }
    cv_.notify_all();
    return true;
  }

  // Interpolates the volume in the slot into `out` (shape of the reference grid).
  void interpolate(std::int64_t t, Slot& slot, const ArrayRef& out) const {
    const ArrayRef in = moving_.array ? volume_view(moving_.array->data, t) : ArrayRef{
        slot.input.data(), read_type_, {moving_.shape[0], moving_.shape[1], moving_.shape[2]},
        {1, moving_.shape[0], moving_.shape[0] * moving_.shape[1]}};
    const Matrix4& m = plan_.per_chain[plan_.per_chain.size() == 1 ? 0 : static_cast<std::size_t>(t)];
    if (!plan_.field) {
      const double mat[9] = {m[0], m[1], m[2], m[4], m[5], m[6], m[8], m[9], m[10]};
      const double off[3] = {m[3], m[7], m[11]};
      affine_transform(in, mat, false, off, out, interp_, slot.coeff);
      return;
    }
    const Interpolator interp(in, interp_, slot.coeff);
    const std::int64_t X = reference_.shape[0], Y = reference_.shape[1];
    const std::int64_t n = X * Y * reference_.shape[2];
    const double* P = points_.data();
    interp.fill(out, conc_.inner, [&](const std::int64_t* r, std::int64_t k0, std::int64_t cnt, double* b) {
      // Output rows run along the last axis (z): point (x, y, z) is P's column x + X (y + Y z).
      const std::int64_t base = r[0] + X * r[1];
      for (std::int64_t k = 0; k < cnt; ++k) {
        const std::int64_t v = base + X * Y * (k0 + k);
        const double x = P[v], y = P[n + v], z = P[2 * n + v];
        for (int c = 0; c < 3; ++c)
          b[c * cnt + k] = m[c * 4 + 0] * x + m[c * 4 + 1] * y + m[c * 4 + 2] * z + m[c * 4 + 3];
      }
    });
  }

  // Stops the run (the first error is kept) and wakes every waiter.
  void fail(std::exception_ptr e) {
    {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = e;
      stop_ = true;
    }
    cv_.notify_all();
  }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
  }

  const Source moving_;
  const Grid& reference_;
  const SeriesResampleOptions& options_;
  std::int64_t volumes_ = 0;
  ChainPlan plan_;
  DType read_type_ = DType::f64;
  Sizes sizes_;
  Concurrency conc_;
  InterpOptions interp_;
  std::vector<double> points_;
  std::unique_ptr<NiftiReader> reader_;
  bool sequential_ = false;

  std::atomic<std::int64_t> next_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::int64_t read_turn_ = 0;
  std::exception_ptr error_;
};

bool allclose(const Matrix4& a, const Matrix4& b) {
  for (int i = 0; i < 16; ++i)
    if (!(std::fabs(a[i] - b[i]) <= 1e-8 + 1e-5 * std::fabs(b[i]))) return false;
  return true;
}

NiftiHeader output_header(const Source& moving, const Grid& ref, const SeriesResampleOptions& o) {
  NiftiHeader h;
  const Matrix4& A = ref.affine;
  bool set_affine = true;
  if (o.reference_header) {
    h = *o.reference_header;
    set_affine = !allclose(A, nifti_best_affine(h, "reference header"));
  } else {
    h.pixdim.fill(1.0);
    h.xyzt_units = static_cast<decltype(h.xyzt_units)>(moving.xyzt_units);
  }
  if (set_affine) {
    // nibabel's _affine2header: sform = the affine, 'aligned'; qform 'unknown'.
    for (int c = 0; c < 4; ++c) {
      h.srow_x[c] = A[c];
      h.srow_y[c] = A[4 + c];
      h.srow_z[c] = A[8 + c];
    }
    h.sform_code = 2;
    h.qform_code = 0;
    h.quatern_b = h.quatern_c = h.quatern_d = 0;
    h.qoffset_x = A[3];
    h.qoffset_y = A[7];
    h.qoffset_z = A[11];
    for (int c = 0; c < 3; ++c)
      h.pixdim[c + 1] = std::sqrt(A[c] * A[c] + A[4 + c] * A[4 + c] + A[8 + c] * A[8 + c]);
  }
  const bool four = moving.shape.size() == 4;
  h.dim.fill(1);
  h.dim[0] = four ? 4 : 3;
  for (int d = 0; d < 3; ++d) h.dim[d + 1] = ref.shape[d];
  if (four) {
    h.dim[4] = moving.shape[3];
    h.pixdim[4] = moving.time_step;
    h.xyzt_units = static_cast<decltype(h.xyzt_units)>((h.xyzt_units & 0x07) | (moving.xyzt_units & 0x38));
  }
  for (int d = 1; d < 8; ++d)
    if (h.dim[d] > 32767 && h.version == 1) h.version = 2;
  h.sizeof_hdr = h.version == 2 ? 540 : 348;
  h.datatype = static_cast<std::int16_t>(nifti_datatype_code(o.output_dtype));
  h.bitpix = static_cast<std::int16_t>(8 * dtype_size(o.output_dtype));
  h.scl_slope = std::numeric_limits<double>::quiet_NaN();
  h.scl_inter = std::numeric_limits<double>::quiet_NaN();
  h.big_endian = false;  // the volumes are produced in the machine's order (x86-64, aarch64)
  h.vox_offset = 0;
  return h;
}

}  // namespace
}  // namespace resample

using resample::Executor;
using resample::source_of;

std::int64_t series_volume_count(const NiftiImage& moving) {
  return resample::volume_count(source_of(moving));
}
std::int64_t series_volume_count(const SeriesArray& moving) {
  return resample::volume_count(source_of(moving));
}

Matrix4 series_voxel_matrix(const Matrix4& moving_affine, const TransformChain& chain,
                            const Matrix4& reference_affine) {
  Matrix4 m = kIdentity4;
  for (const auto& step : chain) {
    if (step.kind != TransformStep::Kind::affine)
      resample::invalid("transforms", "expected a chain of affines, but received a displacement field");
    m = resample::matmul4(step.matrix, m);
  }
  return resample::matmul4(
      resample::matmul4(resample::inverse(moving_affine, "moving affine"), m), reference_affine);
}

namespace resample {
namespace {

SeriesMemoryEstimate memory_estimate(const Source& moving, const Grid& reference,
                                     std::span<const TransformChain> chains, bool to_file,
                                     const SeriesResampleOptions& options, unsigned threads) {
  const std::int64_t volumes = resample::volume_count(moving);
  const auto plan = resample::plan_chains(moving, reference, chains, volumes);
  const auto s = resample::sizes(moving, reference, plan.field, to_file, options);
  const auto c = resample::concurrency(s, volumes, threads, options);
  SeriesMemoryEstimate e;
  e.per_volume = s.input + s.coeff + s.output;
  e.shared = s.shared;
  e.volumes_in_flight = c.slots;
  e.total = e.shared + c.slots * e.per_volume;
  return e;
}

void to_array(Source moving, const Grid& reference, std::span<const TransformChain> chains,
              const ArrayRef& out, const SeriesResampleOptions& options, unsigned threads) {
  const std::int64_t volumes = resample::volume_count(moving);
  std::vector<std::int64_t> want{reference.shape[0], reference.shape[1], reference.shape[2]};
  if (moving.shape.size() == 4) want.push_back(volumes);
  if (out.shape != want || out.strides.size() != out.shape.size()) {
    std::string w = "(", g = "(";
    for (std::size_t i = 0; i < want.size(); ++i) w += (i ? ", " : "") + std::to_string(want[i]);
    for (std::size_t i = 0; i < out.shape.size(); ++i) g += (i ? ", " : "") + std::to_string(out.shape[i]);
    resample::invalid("out", "expected shape " + w + ") (the reference grid" +
                                 (want.size() == 4 ? ", then the volumes" : std::string()) +
                                 "), but received " + g + ")");
  }
  if (out.dtype != options.output_dtype)
    resample::invalid("out", "expected dtype " + std::string(dtype_name(options.output_dtype)) +
                                 ", but received " + std::string(dtype_name(out.dtype)));
  Executor ex(std::move(moving), reference, chains, false, options, threads);
  if (volumes == 0) return;
  if (!out.data) resample::invalid("out", "an array without data");
  std::mutex progress_mutex;
  std::int64_t done = 0;
  const auto& conc = ex.concurrency_used();
  core::parallel_for(conc.slots, conc.slots, [&](std::size_t) {
    Executor::Slot slot;
    try {
      for (std::int64_t t = ex.take(); t >= 0; t = ex.take()) {
        if (!ex.read(t, slot)) return;
        ex.interpolate(t, slot, resample::volume_view(out, t));
        if (options.progress) {
          std::lock_guard lock(progress_mutex);
          options.progress(++done, volumes);
        }
      }
    } catch (...) {
      ex.fail(std::current_exception());
      throw;
    }
  });
}

void to_file(Source moving, const Grid& reference, std::span<const TransformChain> chains,
             const std::string& out_path, const SeriesResampleOptions& options,
             unsigned threads) {
  Executor ex(std::move(moving), reference, chains, true, options, threads);
  const NiftiHeader header = output_header(ex.moving_, reference, options);
  // An empty reference grid has no data to produce: nothing to interpolate.
  const std::int64_t volumes = ex.output_volume_bytes() ? ex.volumes() : 0;
  const std::size_t vol_bytes = static_cast<std::size_t>(ex.output_volume_bytes());
  const auto& conc = ex.concurrency_used();

  // Volume t, once interpolated, waits in its slot until the writer has taken all of it.
  std::vector<const std::byte*> ready(static_cast<std::size_t>(volumes), nullptr);
  std::int64_t consumed = 0;  // volumes the writer has taken completely (guarded by ex.mutex_)

  auto work = [&](std::size_t) {
    Executor::Slot slot;
    slot.output.resize(vol_bytes);
    ArrayRef view;
    view.data = slot.output.data();
    view.dtype = options.output_dtype;
    view.shape = {reference.shape[0], reference.shape[1], reference.shape[2]};
    view.strides = {1, view.shape[0], view.shape[0] * view.shape[1]};
    try {
      for (std::int64_t t = ex.take(); t >= 0; t = ex.take()) {
        if (!ex.read(t, slot)) return;
        ex.interpolate(t, slot, view);
        std::unique_lock lock(ex.mutex_);
        ready[static_cast<std::size_t>(t)] = slot.output.data();
        ex.cv_.notify_all();
        ex.cv_.wait(lock, [&] { return consumed > t || ex.stop_; });
        if (ex.stop_) return;
      }
    } catch (...) {
      ex.fail(std::current_exception());
    }
  };
  // The slots run beside the caller, which writes: a thread of its own drives them on the pool,
  // so that the writer never waits for a pool worker that waits for the writer.
  std::thread driver;
  struct Join {
    Executor& ex;
    std::thread& t;
    ~Join() {
      ex.stop();
      if (t.joinable()) t.join();
    }
  } join{ex, driver};
  if (volumes > 0)
    driver = std::thread([&] {
      try {
        core::parallel_for(conc.slots, conc.slots, work);
      } catch (...) {
        ex.fail(std::current_exception());
      }
    });

  std::int64_t cur = 0;
  std::size_t offset = 0;
  const DataProducer producer = [&](std::span<std::byte> buffer) -> std::size_t {
    std::size_t written = 0;
    while (written < buffer.size() && cur < volumes) {
      const std::byte* src = nullptr;
      {
        std::unique_lock lock(ex.mutex_);
        ex.cv_.wait(lock, [&] { return ready[static_cast<std::size_t>(cur)] || ex.error_; });
        if (ex.error_) std::rethrow_exception(ex.error_);
        src = ready[static_cast<std::size_t>(cur)];
      }
      const std::size_t n = std::min(buffer.size() - written, vol_bytes - offset);
      std::memcpy(buffer.data() + written, src + offset, n);
      written += n;
      offset += n;
      if (offset == vol_bytes) {
        offset = 0;
        {
          std::lock_guard lock(ex.mutex_);
          ready[static_cast<std::size_t>(cur)] = nullptr;
          consumed = ++cur;
        }
        ex.cv_.notify_all();
        if (options.progress) options.progress(cur, volumes);
      }
    }
    return written;
  };
  WriteOptions wo = options.write;
  if (!wo.threads) wo.threads = threads;
  write_nifti(out_path, header, {}, producer, wo);
}

}  // namespace
}  // namespace resample

SeriesMemoryEstimate series_memory_estimate(const NiftiImage& moving, const Grid& reference,
                                            std::span<const TransformChain> chains, bool to_file,
                                            const SeriesResampleOptions& options) {
  return resample::memory_estimate(source_of(moving), reference, chains, to_file, options,
                                   resolve_threads(options.threads));
}

SeriesMemoryEstimate series_memory_estimate(const SeriesArray& moving, const Grid& reference,
                                            std::span<const TransformChain> chains, bool to_file,
                                            const SeriesResampleOptions& options) {
  return resample::memory_estimate(source_of(moving), reference, chains, to_file, options,
                                   resolve_threads(options.threads));
}

void resample_series(const NiftiImage& moving, const Grid& reference,
                     std::span<const TransformChain> chains, const ArrayRef& out,
                     const SeriesResampleOptions& options) {
  resample::to_array(source_of(moving), reference, chains, out, options,
                     resolve_threads(options.threads));
}

void resample_series(const SeriesArray& moving, const Grid& reference,
                     std::span<const TransformChain> chains, const ArrayRef& out,
                     const SeriesResampleOptions& options) {
  resample::to_array(source_of(moving), reference, chains, out, options,
                     resolve_threads(options.threads));
}

void resample_series_to_file(const NiftiImage& moving, const Grid& reference,
                             std::span<const TransformChain> chains, const std::string& out_path,
                             const SeriesResampleOptions& options) {
  resample::to_file(source_of(moving), reference, chains, out_path, options,
                    resolve_threads(options.threads));
}

void resample_series_to_file(const SeriesArray& moving, const Grid& reference,
                             std::span<const TransformChain> chains, const std::string& out_path,
                             const SeriesResampleOptions& options) {
  resample::to_file(source_of(moving), reference, chains, out_path, options,
                    resolve_threads(options.threads));
}

}  // namespace voxpipe
