// The streaming executor on hand-checked cases: identity and whole-voxel shifts give the samples
// themselves (scaled as get_fdata), per-volume affines move each volume by its own amount, a
// displacement field on the reference grid acts as its samples, the file output equals the
// in-memory one with the reference affine and the moving image's time step, sequential gzip
// sources read in order with several volumes in flight, a caller's array (C order, int16) equals
// the file it came from, every volume equals affine_transform of it alone bit for bit (slots
// reuse their coefficient memory), and the errors.
// (tests/python/test_resample_series.py compares against scipy.ndimage and nitransforms.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "test_support.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/resample_series.hpp"

namespace {

using namespace voxpipe;
using vptest::TempDir;

constexpr std::int64_t NX = 7, NY = 6, NZ = 5, NT = 4;

// Voxel (i, j, k, t) holds 1000 t + 100 k + 10 j + i: every value names its voxel.
std::int16_t sample(std::int64_t i, std::int64_t j, std::int64_t k, std::int64_t t) {
  return static_cast<std::int16_t>(1000 * t + 100 * k + 10 * j + i);
}

Matrix4 moving_affine() { return {2, 0, 0, -6, 0, 2, 0, -5, 0, 0, 3, -4, 0, 0, 0, 1}; }

// A 4-D int16 image (scl_slope 2, scl_inter 1 when scaled) in `name`.
std::string write_moving(const TempDir& dir, const std::string& name, bool scaled,
                         GzipLayout layout = GzipLayout::members, std::int64_t nt = NT) {
  NiftiHeader h = vptest::make_header(1, DType::i16, {NX, NY, NZ, nt});
  const Matrix4 a = moving_affine();
  for (int c = 0; c < 4; ++c) {
    h.srow_x[c] = a[c];
    h.srow_y[c] = a[4 + c];
    h.srow_z[c] = a[8 + c];
  }
  h.sform_code = 1;
  h.pixdim[4] = 2.5;
  h.xyzt_units = 2 | 8;  // mm, s
  h.scl_slope = scaled ? 2.0 : 1.0;
  h.scl_inter = scaled ? 1.0 : 0.0;
  std::vector<std::int16_t> v;
  for (std::int64_t t = 0; t < nt; ++t)
    for (std::int64_t k = 0; k < NZ; ++k)
      for (std::int64_t j = 0; j < NY; ++j)
        for (std::int64_t i = 0; i < NX; ++i) v.push_back(sample(i, j, k, t));
  std::vector<std::uint8_t> bytes(v.size() * 2);
  std::memcpy(bytes.data(), v.data(), bytes.size());
  write_nifti(dir.file(name), h, {}, producer_from_bytes(std::as_bytes(std::span(bytes))),
              WriteOptions{1, layout, 0});
  return dir.file(name);
}

Grid same_grid() {
  Grid g;
  g.shape = {NX, NY, NZ};
  g.affine = moving_affine();
  return g;
}

Matrix4 translation(double x, double y, double z) { return {1, 0, 0, x, 0, 1, 0, y, 0, 0, 1, z, 0, 0, 0, 1}; }

TransformStep affine_step(const Matrix4& m) {
  TransformStep s;
  s.matrix = m;
  return s;
}

TransformChain affine_chain(const Matrix4& m) { return TransformChain(1, affine_step(m)); }

struct Output {
  std::vector<float> data;
  ArrayRef ref;
  explicit Output(std::array<std::int64_t, 3> s, std::int64_t nt = NT) : data(static_cast<std::size_t>(s[0] * s[1] * s[2] * nt)) {
    ref.data = data.data();
    ref.dtype = DType::f32;
    ref.shape = {s[0], s[1], s[2], nt};
    ref.strides = {1, s[0], s[0] * s[1], s[0] * s[1] * s[2]};
  }
  float at(std::int64_t i, std::int64_t j, std::int64_t k, std::int64_t t) const {
    return data[static_cast<std::size_t>(i + NX * (j + NY * (k + NZ * t)))];
  }
};

SeriesResampleOptions linear(unsigned threads = 0) {
  SeriesResampleOptions o;
  o.interp.order = 1;
  o.threads = threads;
  return o;
}

TEST(ResampleSeries, identity_gives_the_scaled_samples) {
  TempDir dir;
  const NiftiImage moving = open_nifti(write_moving(dir, "m.nii", true));
  for (int order : {0, 1, 3}) {
    Output out(same_grid().shape);
    SeriesResampleOptions o = linear();
    o.interp.order = order;
    const std::vector<TransformChain> chains{affine_chain(kIdentity4)};
    resample_series(moving, same_grid(), chains, out.ref, o);
    for (std::int64_t t = 0; t < NT; ++t)
      for (std::int64_t k = 0; k < NZ; ++k)
        for (std::int64_t j = 0; j < NY; ++j)
          for (std::int64_t i = 0; i < NX; ++i) {
            const double want = 2.0 * sample(i, j, k, t) + 1.0;
            // Cubic through the prefilter reproduces the samples to rounding, not exactly.
            EXPECT_NEAR(out.at(i, j, k, t), want, order == 3 ? 1e-3 : 0.0) << order;
          }
  }
}

TEST(ResampleSeries, per_volume_shifts_move_each_volume) {
  // Volume t reads the moving point t voxels (2 mm each) further along x; beyond the edge: cval.
  TempDir dir;
  const NiftiImage moving = open_nifti(write_moving(dir, "m.nii.gz", false));
  std::vector<TransformChain> chains;
  for (std::int64_t t = 0; t < NT; ++t) chains.push_back(affine_chain(translation(2.0 * t, 0, 0)));
  Output out(same_grid().shape);
  SeriesResampleOptions o = linear(2);
  o.interp.cval = -1;
  resample_series(moving, same_grid(), chains, out.ref, o);
  for (std::int64_t t = 0; t < NT; ++t)
    for (std::int64_t i = 0; i < NX; ++i) {
      const double want = i + t < NX ? sample(i + t, 3, 2, t) : -1.0;
      EXPECT_EQ(out.at(i, 3, 2, t), want) << i << " " << t;
    }
}

std::shared_ptr<const DisplacementField> constant_field(const Grid& g, double dx, double dy, double dz) {
  auto f = std::make_shared<DisplacementField>();
  f->grid = g;
  const std::int64_t n = g.shape[0] * g.shape[1] * g.shape[2];
  f->data.resize(static_cast<std::size_t>(3 * n));
  for (std::int64_t v = 0; v < n; ++v) {
    f->data[static_cast<std::size_t>(v)] = dx;
    f->data[static_cast<std::size_t>(n + v)] = dy;
    f->data[static_cast<std::size_t>(2 * n + v)] = dz;
  }
  return f;
}

TEST(ResampleSeries, field_on_the_reference_grid_then_per_volume_affines) {
  // Field: +3 mm along z (one voxel); then volume t moves t voxels along y (2 mm each).
  TempDir dir;
  const NiftiImage moving = open_nifti(write_moving(dir, "m.nii", false));
  TransformStep field;
  field.kind = TransformStep::Kind::field;
  field.field = constant_field(same_grid(), 0, 0, 3.0);
  std::vector<TransformChain> chains;
  for (std::int64_t t = 0; t < NT; ++t) {
    TransformChain c(2, field);
    c[1] = affine_step(translation(0, 2.0 * t, 0));
    chains.push_back(c);
  }
  Output out(same_grid().shape);
  resample_series(moving, same_grid(), chains, out.ref, linear());
  for (std::int64_t t = 0; t < NT; ++t)
    for (std::int64_t k = 0; k < NZ; ++k)
      for (std::int64_t j = 0; j < NY; ++j) {
        const bool inside = k + 1 < NZ && j + t < NY;
        EXPECT_EQ(out.at(4, j, k, t), inside ? sample(4, j + t, k + 1, t) : 0.0) << j << k << t;
      }
  // The shared part is 3 float64 per reference voxel, once.
  const auto e = series_memory_estimate(moving, same_grid(), chains, false, linear(2));
  EXPECT_EQ(e.shared, static_cast<std::uint64_t>(24 * NX * NY * NZ));
}

TEST(ResampleSeries, points_outside_the_field_grid_are_not_moved) {
  // A field grid far from the reference: every point falls outside it and is not moved (NaN
  // from the cubic spline's cval means no displacement, as nitransforms).
  TempDir dir;
  const NiftiImage moving = open_nifti(write_moving(dir, "m.nii", false));
  Grid far = same_grid();
  far.affine[3] = 1000.5;
  TransformStep field;
  field.kind = TransformStep::Kind::field;
  field.field = constant_field(far, 50, 50, 50);
  Output a(same_grid().shape), b(same_grid().shape);
  const std::vector<TransformChain> with(1, TransformChain(1, field)), without(1, affine_chain(kIdentity4));
  resample_series(moving, same_grid(), with, a.ref, linear());
  resample_series(moving, same_grid(), without, b.ref, linear());
  EXPECT_EQ(a.data, b.data);
}

TEST(ResampleSeries, file_equals_memory_with_reference_affine_and_time_step) {
  TempDir dir;
  for (GzipLayout layout : {GzipLayout::members, GzipLayout::single}) {
    // single: a sequential gzip source, read in volume order with several volumes in flight.
    const NiftiImage moving = open_nifti(write_moving(dir, "m.nii.gz", true, layout, 9));
    Grid ref;
    ref.shape = {5, 4, 6};
    ref.affine = {1.5, 0, 0.125, -4, 0, 1.75, 0, -3, 0, 0, 2.25, -2, 0, 0, 0, 1};  // float32-exact
    std::vector<TransformChain> chains;
    for (int t = 0; t < 9; ++t) chains.push_back(affine_chain(translation(0.3 * t, -0.2, 0.1 * t)));
    SeriesResampleOptions o;
    o.interp.order = 3;
    o.threads = 3;
    std::vector<std::int64_t> progress;
    o.progress = [&](std::int64_t done, std::int64_t total) {
      EXPECT_EQ(total, 9);
      progress.push_back(done);
    };
    const std::string path = dir.file("out.nii.gz");
    resample_series_to_file(moving, ref, chains, path, o);
    EXPECT_EQ(progress, (std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));

    o.progress = nullptr;
    Output mem(ref.shape, 9);
    resample_series(moving, ref, chains, mem.ref, o);
    const NiftiImage written = open_nifti(path);
    ASSERT_EQ(written.shape, (std::vector<std::int64_t>{5, 4, 6, 9}));
    EXPECT_EQ(written.dtype, DType::f32);
    EXPECT_EQ(written.affine, ref.affine);
    EXPECT_EQ(written.header.sform_code, 2);
    EXPECT_EQ(written.header.pixdim[4], 2.5);
    EXPECT_EQ(written.header.xyzt_units, 2 | 8);
    EXPECT_FALSE(written.scaling.active());
    std::vector<float> back(mem.data.size());
    read_nifti_data(written, {}, OutputSpec{DType::f32, false}, std::as_writable_bytes(std::span(back)));
    EXPECT_EQ(back, mem.data);
    // Not all zeros: the shifts keep most of the grid inside the moving image.
    EXPECT_GT(std::count_if(back.begin(), back.end(), [](float v) { return v > 100; }), 300);
  }
}

TEST(ResampleSeries, voxel_matrix_and_memory_estimate) {
  const Matrix4 v = series_voxel_matrix(moving_affine(), affine_chain(translation(2, 4, 6)), moving_affine());
  // inverse(M) @ T @ M: a shift of (1, 2, 2) voxels.
  const Matrix4 want{1, 0, 0, 1, 0, 1, 0, 2, 0, 0, 1, 2, 0, 0, 0, 1};
  for (int i = 0; i < 16; ++i) EXPECT_DOUBLE_EQ(v[i], want[i]) << i;

  TempDir dir;
  const NiftiImage moving = open_nifti(write_moving(dir, "m.nii", true));
  const std::vector<TransformChain> chains{affine_chain(kIdentity4)};
  SeriesResampleOptions o;  // cubic, prefilter, float32
  o.threads = 3;
  const auto e = series_memory_estimate(moving, same_grid(), chains, true, o);
  const std::uint64_t voxels = NX * NY * NZ;
  EXPECT_EQ(e.per_volume, voxels * 8 /* scaled: float64 */ + voxels * 8 + voxels * 4);
  EXPECT_EQ(e.shared, 0u);
  EXPECT_EQ(e.volumes_in_flight, 3u);
  EXPECT_EQ(e.total, 3 * e.per_volume);
  o.memory_limit = 2 * e.per_volume + 10;
  EXPECT_EQ(series_memory_estimate(moving, same_grid(), chains, true, o).volumes_in_flight, 2u);
  o.interp.mode = InterpMode::nearest;  // 12 samples of padding per side
  o.memory_limit = 0;
  EXPECT_EQ(series_memory_estimate(moving, same_grid(), chains, false, o).per_volume,
            voxels * 8 + static_cast<std::uint64_t>((NX + 24) * (NY + 24) * (NZ + 24) * 8));
}

// threads = 0 is resolved once at the call (voxpipe/threads.hpp): the volumes in flight follow
// $VOXPIPE_NUM_THREADS and $OMP_NUM_THREADS, read when the call is made; a count given is kept.
TEST(ResampleSeries, threads_zero_takes_the_environment_at_the_call) {
  TempDir dir;
  const NiftiImage moving = open_nifti(write_moving(dir, "m.nii", false));
  const std::vector<TransformChain> chains{affine_chain(kIdentity4)};
  auto in_flight = [&](unsigned threads) {
    return series_memory_estimate(moving, same_grid(), chains, false, linear(threads))
        .volumes_in_flight;
  };
  {
    const vptest::ScopedEnv vp("VOXPIPE_NUM_THREADS", "3");
    const vptest::ScopedEnv omp("OMP_NUM_THREADS", "2");
    EXPECT_EQ(in_flight(0), 3u);
    EXPECT_EQ(in_flight(1), 1u);
  }
  const vptest::ScopedEnv vp("VOXPIPE_NUM_THREADS", nullptr);
  const vptest::ScopedEnv omp("OMP_NUM_THREADS", "2,1");
  EXPECT_EQ(in_flight(0), 2u);
  // And the run itself: the same values on the count the environment gives.
  Output a(same_grid().shape), b(same_grid().shape);
  resample_series(moving, same_grid(), chains, a.ref, linear(0));
  resample_series(moving, same_grid(), chains, b.ref, linear(1));
  EXPECT_EQ(a.data, b.data);
}

TEST(ResampleSeries, bad_arguments_and_read_errors_reach_the_caller) {
  TempDir dir;
  const NiftiImage moving = open_nifti(write_moving(dir, "m.nii", false));
  Output out(same_grid().shape);
  const std::vector<TransformChain> one{affine_chain(kIdentity4)};
  const std::vector<TransformChain> three(3, affine_chain(kIdentity4));
  EXPECT_VP_ERROR(resample_series(moving, same_grid(), three, out.ref, linear()), ErrorCode::invalid_argument);
  Output small({NX, NY, NZ - 1});
  EXPECT_VP_ERROR(resample_series(moving, same_grid(), one, small.ref, linear()), ErrorCode::invalid_argument);
  SeriesResampleOptions o = linear();
  o.output_dtype = DType::f64;  // out is float32
  EXPECT_VP_ERROR(resample_series(moving, same_grid(), one, out.ref, o), ErrorCode::invalid_argument);
  o = linear();
  o.memory_limit = 100;
  EXPECT_VP_ERROR(resample_series(moving, same_grid(), one, out.ref, o), ErrorCode::limit);
  const std::string path = dir.file("never.nii");
  EXPECT_VP_ERROR(resample_series_to_file(moving, same_grid(), one, path, o), ErrorCode::limit);
  EXPECT_FALSE(std::filesystem::exists(path));
  // A field after a per-volume step cannot be sampled once for every volume.
  TransformStep field;
  field.kind = TransformStep::Kind::field;
  field.field = constant_field(same_grid(), 0, 0, 0);
  std::vector<TransformChain> late;
  for (std::int64_t t = 0; t < NT; ++t) {
    TransformChain c(2, field);
    c[0] = affine_step(translation(static_cast<double>(t), 0, 0));
    late.push_back(c);
  }
  EXPECT_VP_ERROR(resample_series(moving, same_grid(), late, out.ref, linear()), ErrorCode::invalid_argument);
  // A read error stops the run and reaches the caller: a file cut short before it was opened
  // (truncated), and one cut after (changed since it was opened: never read under the header).
  const std::string cut = write_moving(dir, "cut.nii", false);
  std::filesystem::resize_file(cut, std::filesystem::file_size(cut) - 100);
  EXPECT_VP_ERROR(resample_series(open_nifti(cut), same_grid(), one, out.ref, linear(2)), ErrorCode::truncated);
  const std::string changed = write_moving(dir, "changed.nii", false);
  const NiftiImage changed_image = open_nifti(changed);
  std::filesystem::resize_file(changed, std::filesystem::file_size(changed) - 100);
  EXPECT_VP_ERROR(resample_series(changed_image, same_grid(), one, out.ref, linear(2)), ErrorCode::io);
}

}  // namespace

namespace {

TEST(ResampleSeries, an_exception_from_progress_stops_the_run_and_leaves_no_file) {
  TempDir dir;
  const NiftiImage moving = open_nifti(write_moving(dir, "m.nii.gz", false, GzipLayout::single, 12));
  const std::vector<TransformChain> one{affine_chain(translation(0.5, 0, 0))};
  for (unsigned threads : {1u, 2u, 4u}) {
    SeriesResampleOptions o = linear(threads);
    o.progress = [](std::int64_t done, std::int64_t) {
      if (done == 3) throw std::runtime_error("stop at 3");
    };
    const std::string path = dir.file("out.nii");
    EXPECT_THROW(resample_series_to_file(moving, same_grid(), one, path, o), std::runtime_error);
    EXPECT_FALSE(std::filesystem::exists(path));
    Output out(same_grid().shape, 12);
    EXPECT_THROW(resample_series(moving, same_grid(), one, out.ref, o), std::runtime_error);
  }
}

}  // namespace

namespace {

// The unscaled image's samples as a caller's int16 array, C-ordered (t, k, j, i in memory: the
// strides of axes x, y, z, t are 1 apart from each other in reverse), read through strides.
struct CArray {
  std::vector<std::int16_t> data;
  SeriesArray series;
  CArray() : data(static_cast<std::size_t>(NX * NY * NZ * NT)) {
    for (std::int64_t i = 0; i < NX; ++i)
      for (std::int64_t j = 0; j < NY; ++j)
        for (std::int64_t k = 0; k < NZ; ++k)
          for (std::int64_t t = 0; t < NT; ++t)
            data[static_cast<std::size_t>(t + NT * (k + NZ * (j + NY * i)))] = sample(i, j, k, t);
    series.data.data = data.data();
    series.data.dtype = DType::i16;
    series.data.shape = {NX, NY, NZ, NT};
    series.data.strides = {NY * NZ * NT, NZ * NT, NT, 1};
    series.affine = moving_affine();
    series.time_step = 2.5;
    series.xyzt_units = 2 | 8;
  }
};

}  // namespace

TEST(ResampleSeries, an_array_in_any_layout_equals_the_file) {
  TempDir dir;
  const NiftiImage moving = open_nifti(write_moving(dir, "m.nii", false));
  const CArray array;
  EXPECT_EQ(series_volume_count(array.series), NT);
  Grid ref;
  ref.shape = {5, 4, 6};
  ref.affine = {1.5, 0, 0.125, -4, 0, 1.75, 0, -3, 0, 0, 2.25, -2, 0, 0, 0, 1};
  std::vector<TransformChain> chains;
  for (std::int64_t t = 0; t < NT; ++t)
    chains.push_back(affine_chain(translation(0.3 * t, -0.2, 0.1 * t)));
  for (int order : {0, 1, 3}) {
    SeriesResampleOptions o;
    o.interp.order = order;
    o.threads = 3;
    Output from_file(ref.shape), from_array(ref.shape);
    resample_series(moving, ref, chains, from_file.ref, o);
    std::int64_t calls = 0;
    o.progress = [&](std::int64_t done, std::int64_t total) {
      EXPECT_EQ(total, NT);
      calls = std::max(calls, done);
    };
    resample_series(array.series, ref, chains, from_array.ref, o);
    EXPECT_EQ(calls, NT);
    EXPECT_EQ(from_array.data, from_file.data) << order;
    EXPECT_GT(std::count_if(from_array.data.begin(), from_array.data.end(),
                            [](float v) { return v > 100; }), 100);

    // The file output: the array's time step and units.
    o.progress = nullptr;
    const std::string path = dir.file("out.nii");
    resample_series_to_file(array.series, ref, chains, path, o);
    const NiftiImage written = open_nifti(path);
    ASSERT_EQ(written.shape, (std::vector<std::int64_t>{5, 4, 6, NT}));
    EXPECT_EQ(written.header.pixdim[4], 2.5);
    EXPECT_EQ(written.header.xyzt_units, 2 | 8);
    std::vector<float> back(from_file.data.size());
    read_nifti_data(written, {}, OutputSpec{DType::f32, false}, std::as_writable_bytes(std::span(back)));
    EXPECT_EQ(back, from_file.data) << order;
  }
}

TEST(ResampleSeries, an_array_holds_no_input_and_bad_arrays_are_refused) {
  const CArray array;
  const std::vector<TransformChain> chains{affine_chain(kIdentity4)};
  SeriesResampleOptions o;  // cubic, prefilter, float32
  o.threads = 3;
  const auto e = series_memory_estimate(array.series, same_grid(), chains, true, o);
  const std::uint64_t voxels = NX * NY * NZ;
  EXPECT_EQ(e.per_volume, voxels * 8 + voxels * 4);  // coefficients + output, no input
  o.interp.order = 1;
  EXPECT_EQ(series_memory_estimate(array.series, same_grid(), chains, false, o).per_volume, 0u);

  SeriesArray bad = array.series;
  bad.data.strides.pop_back();
  Output out(same_grid().shape);
  auto code = [&](const SeriesArray& a) -> std::optional<ErrorCode> {
    try {
      resample_series(a, same_grid(), chains, out.ref, o);
    } catch (const Error& err) {
      return err.code();
    }
    return std::nullopt;
  };
  EXPECT_EQ(code(bad), ErrorCode::invalid_argument);
  bad = array.series;
  bad.data.data = nullptr;
  EXPECT_EQ(code(bad), ErrorCode::invalid_argument);
  bad = array.series;
  bad.data.dtype = DType::c64;
  EXPECT_EQ(code(bad), ErrorCode::unsupported);
  bad = array.series;
  bad.affine = Matrix4{};
  EXPECT_EQ(code(bad), ErrorCode::invalid_argument);
  EXPECT_EQ(code(array.series), std::nullopt);
}

// Each slot keeps its spline coefficients' memory from one volume to the next: every volume,
// whichever slot took it and whatever that slot held before, equals affine_transform of that
// volume alone with the executor's matrix, bit for bit. Orders and modes with a coefficient
// margin (last axis >= 16) and with padding (nearest, grid-constant), one slot and two.
TEST(ResampleSeries, volumes_after_the_first_in_a_slot_equal_affine_transform_bit_for_bit) {
  constexpr std::int64_t X = 9, Y = 8, Z = 17, T = 7;
  std::vector<std::int16_t> data(static_cast<std::size_t>(X * Y * Z * T));
  for (std::size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<std::int16_t>((i * 2654435761u >> 9) % 3000) - 1000;
  SeriesArray moving;
  moving.data = ArrayRef{data.data(), DType::i16, {X, Y, Z, T}, {1, X, X * Y, X * Y * Z}};
  moving.affine = {2, 0, 0, -9, 0, 2, 0, -8, 0, 0, 1.5, -12, 0, 0, 0, 1};
  Grid ref;
  ref.shape = {8, 9, 18};
  ref.affine = {1.9, 0.1, 0, -8, -0.1, 1.9, 0, -9, 0, 0, 1.4, -12.5, 0, 0, 0, 1};
  std::vector<TransformChain> chains;
  for (std::int64_t t = 0; t < T; ++t) {
    const double a = 0.03 * static_cast<double>(t), c = std::cos(a), s = std::sin(a);
    chains.push_back(affine_chain({c, -s, 0, 0.4 * t, s, c, 0, -0.3 * t, 0, 0, 1, 0.2, 0, 0, 0, 1}));
  }
  const std::int64_t n = ref.shape[0] * ref.shape[1] * ref.shape[2];
  for (int order : {2, 3, 5}) {
    for (InterpMode mode : {InterpMode::constant, InterpMode::mirror, InterpMode::nearest,
                            InterpMode::grid_constant}) {
      SeriesResampleOptions o;
      o.interp.order = order;
      o.interp.mode = mode;
      o.interp.cval = -3.5;
      std::vector<float> want(static_cast<std::size_t>(n * T));
      for (std::int64_t t = 0; t < T; ++t) {
        const Matrix4 v = series_voxel_matrix(moving.affine, chains[t], ref.affine);
        const double mat[9] = {v[0], v[1], v[2], v[4], v[5], v[6], v[8], v[9], v[10]};
        const double off[3] = {v[3], v[7], v[11]};
        ArrayRef in = moving.data;
        in.data = data.data() + t * X * Y * Z;
        in.shape.pop_back();
        in.strides.pop_back();
        ArrayRef out{want.data() + t * n, DType::f32,
                     {ref.shape[0], ref.shape[1], ref.shape[2]},
                     {1, ref.shape[0], ref.shape[0] * ref.shape[1]}};
        InterpOptions io = o.interp;
        io.threads = 1;
        io.pad_value = io.cval;  // grid-constant pads with cval, as on get_fdata's float64
        affine_transform(in, mat, false, off, out, io);
      }
      for (unsigned threads : {1u, 2u}) {
        o.threads = threads;
        std::vector<float> got(want.size());
        ArrayRef out{got.data(), DType::f32, {ref.shape[0], ref.shape[1], ref.shape[2], T},
                     {1, ref.shape[0], ref.shape[0] * ref.shape[1], n}};
        resample_series(moving, ref, chains, out, o);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << "order " << order << " mode " << interp_mode_name(mode) << " threads " << threads;
      }
    }
  }
}
