// read_nifti_data against an independent reference: every selection (ints, steps, negative
// steps, empty) picks the same voxels as a naive index loop, converted the way nibabel converts
// them; truncated files and bad requests fail with the right codes.
#include <complex>
#include <limits>
#include <sstream>

#include "nifti/nifti_support.hpp"

namespace {

using voxpipe::AxisRange;
using voxpipe::DType;
using voxpipe::ErrorCode;
using voxpipe::NiftiHeader;
using voxpipe::OutputSpec;
using vptest::Bytes;

const std::vector<std::int64_t> kShape{7, 5, 4, 3};

std::vector<std::int16_t> distinct_i16(std::size_t n) {
  std::vector<std::int16_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::int16_t>(static_cast<int>(i) * 37 - 5000);
  return v;
}

// A random selection that stays inside `shape`: whole axes, single indices, positive and
// negative steps, and now and then an empty axis.
std::vector<AxisRange> random_selection(std::mt19937_64& rng, const std::vector<std::int64_t>& shape,
                                        bool allow_empty) {
  std::vector<AxisRange> sel;
  for (std::int64_t d : shape) {
    const int kind = static_cast<int>(rng() % 6);
    if (kind == 0) {
      sel.push_back({0, 1, d});
      continue;
    }
    if (kind == 1) {
      sel.push_back({static_cast<std::int64_t>(rng() % d), 1, 1});
      continue;
    }
    const std::int64_t steps[] = {1, 2, 3, -1, -2, -3, d, -d};
    const std::int64_t step = steps[rng() % 8];
    const std::int64_t start = static_cast<std::int64_t>(rng() % d);
    const std::int64_t max_count = step > 0 ? (d - 1 - start) / step + 1 : start / (-step) + 1;
    std::int64_t count = 1 + static_cast<std::int64_t>(rng() % max_count);
    if (allow_empty && rng() % 25 == 0) count = 0;
    sel.push_back({start, step, count});
  }
  return sel;
}

std::string describe(const std::vector<AxisRange>& sel) {
  std::ostringstream s;
  for (const auto& a : sel) s << '[' << a.start << ':' << a.step << 'x' << a.count << ']';
  return s.str();
}

struct Storage {
  const char* name;
  int version;
  bool big;
};
const Storage kStorages[] = {{"r.nii", 1, false},   {"r.nii", 1, true},     {"r.nii.gz", 1, true},
                             {"r.img.gz", 1, false}, {"r.hdr", 2, true},     {"r.nii", 2, false},
                             {"r.nii.gz", 2, false}};

TEST(ReadNifti, RandomSelectionsMatchTheNaiveReference) {
  const std::vector<std::int16_t> values = distinct_i16(7 * 5 * 4 * 3);
  const double slope = 0.5, inter = -3.25;
  std::vector<double> scaled(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) scaled[i] = vptest::nib_scale(values[i], slope, inter);
  for (const Storage& s : kStorages) {
    SCOPED_TRACE(std::string(s.name) + " v" + std::to_string(s.version) + (s.big ? " BE" : " LE"));
    vptest::TempDir dir;
    NiftiHeader h = vptest::make_header(s.version, DType::i16, kShape, s.big);
    h.scl_slope = slope;
    h.scl_inter = inter;
    const auto img = voxpipe::open_nifti(vptest::write_image(dir, s.name, h, values));
    ASSERT_TRUE(img.scaling.active());
    std::mt19937_64 rng(42);
    for (int round = 0; round < 120; ++round) {
      const auto sel = random_selection(rng, kShape, true);
      SCOPED_TRACE(describe(sel));
      const auto want_raw = vptest::naive_select(values, kShape, sel);
      const auto want = vptest::naive_select(scaled, kShape, sel);
      ASSERT_EQ(vptest::read_as<double>(img, sel, {.type = DType::f64}), want);
      const auto f32 = vptest::read_as<float>(img, sel, {.type = DType::f32});
      for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(f32[i], static_cast<float>(want[i])) << i;
      ASSERT_EQ(vptest::read_as<std::int16_t>(img, sel, {.type = DType::i16, .apply_scaling = false}), want_raw);
      // Unscaled to float64: the stored integers.
      const auto unscaled = vptest::read_as<double>(img, sel, {.type = DType::f64, .apply_scaling = false});
      for (std::size_t i = 0; i < want_raw.size(); ++i) ASSERT_EQ(unscaled[i], want_raw[i]) << i;
      // The file's own bytes, in the file's order.
      std::vector<std::uint8_t> raw(want_raw.size() * 2);
      voxpipe::read_nifti_data(img, sel, {.type = DType::i16, .apply_scaling = false, .file_byte_order = true},
                               std::as_writable_bytes(std::span(raw)));
      ASSERT_EQ(raw, vptest::to_bytes(want_raw, s.big));
    }
  }
}

TEST(ReadNifti, ExplicitSelections) {
  vptest::TempDir dir;
  const std::vector<std::int16_t> values = distinct_i16(7 * 5 * 4 * 3);
  const auto img = voxpipe::open_nifti(vptest::write_image(dir, "x.nii", vptest::make_header(1, DType::i16, kShape), values));
  const OutputSpec spec{.type = DType::i16, .apply_scaling = false};
  const std::vector<std::vector<AxisRange>> sels{
      {{3, 1, 1}, {2, 1, 1}, {1, 1, 1}, {2, 1, 1}},           // one voxel: [3, 2, 1, 2]
      {{6, -1, 7}, {4, -1, 5}, {3, -1, 4}, {2, -1, 3}},       // everything reversed: [::-1] x4
      {{0, 2, 4}, {0, 1, 5}, {0, 3, 2}, {1, 1, 1}},           // [::2, :, ::3, 1]
      {{5, -2, 3}, {1, 3, 2}, {0, 1, 4}, {0, 1, 3}},          // [5::-2, 1::3]
      {{0, 1, 7}, {0, 1, 5}, {0, 1, 4}, {2, -2, 2}},          // whole volumes, backwards
      {{0, 1, 7}, {0, 1, 0}, {0, 1, 4}, {0, 1, 3}},           // empty
  };
  for (const auto& sel : sels) {
    SCOPED_TRACE(describe(sel));
    EXPECT_EQ(vptest::read_as<std::int16_t>(img, sel, spec), vptest::naive_select(values, kShape, sel));
  }
  // One voxel by its value: index (3, 2, 1, 2) in F order.
  const std::size_t flat = 3 + 7 * (2 + 5 * (1 + 4 * 2));
  EXPECT_EQ(vptest::read_as<std::int16_t>(img, sels[0], spec), std::vector<std::int16_t>{values[flat]});
  // An empty selection writes nothing and needs no buffer.
  voxpipe::read_nifti_data(img, sels.back(), spec, {});
  // No selection at all means everything.
  EXPECT_EQ(vptest::read_as<std::int16_t>(img, {}, spec), values);
}

template <class T>
void check_type_to_float(DType t, const std::vector<T>& values, double slope, double inter) {
  for (int version : {1, 2}) {
    for (bool big : {false, true}) {
      SCOPED_TRACE(std::string(voxpipe::dtype_name(t)) + " v" + std::to_string(version) + (big ? " BE" : " LE"));
      vptest::TempDir dir;
      const std::vector<std::int64_t> shape{static_cast<std::int64_t>(values.size())};
      NiftiHeader h = vptest::make_header(version, t, shape, big);
      h.scl_slope = slope;
      h.scl_inter = inter;
      const auto img = voxpipe::open_nifti(vptest::write_image(dir, "t.nii", h, values));
      const auto f64 = vptest::read_as<double>(img, {}, {.type = DType::f64});
      const auto f32 = vptest::read_as<float>(img, {}, {.type = DType::f32});
      const auto same = vptest::read_as<T>(img, {}, {.type = t, .apply_scaling = false});
      for (std::size_t i = 0; i < values.size(); ++i) {
        const double want = vptest::nib_scale(static_cast<double>(values[i]), img.scaling.slope, img.scaling.inter);
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(f64[i])) << i;
          EXPECT_TRUE(std::isnan(f32[i])) << i;
        } else {
          EXPECT_EQ(f64[i], want) << i;
          EXPECT_EQ(f32[i], static_cast<float>(want)) << i;
        }
        EXPECT_EQ(std::memcmp(&same[i], &values[i], sizeof(T)), 0) << i;
      }
    }
  }
}

TEST(ReadNifti, EveryRealTypeScaledAndUnscaledInBothByteOrders) {
  for (auto [slope, inter] : {std::pair<double, double>{0, 0}, {2.0, 0.0}, {0.25, -100.5}, {1.0, 7.0}}) {
    check_type_to_float<std::uint8_t>(DType::u8, {0, 1, 127, 128, 255}, slope, inter);
    check_type_to_float<std::int8_t>(DType::i8, {-128, -1, 0, 1, 127}, slope, inter);
    check_type_to_float<std::uint16_t>(DType::u16, {0, 258, 65535}, slope, inter);
    check_type_to_float<std::int16_t>(DType::i16, {-32768, -2, 513, 32767}, slope, inter);
    check_type_to_float<std::uint32_t>(DType::u32, {0, 16777217u, 4294967295u}, slope, inter);
    check_type_to_float<std::int32_t>(DType::i32, {INT32_MIN, -16777217, 16909060, INT32_MAX}, slope, inter);
    check_type_to_float<std::uint64_t>(DType::u64, {0, (1ull << 53) + 1, UINT64_MAX}, slope, inter);
    check_type_to_float<std::int64_t>(DType::i64, {INT64_MIN, -3, (1ll << 53) + 1, INT64_MAX}, slope, inter);
    check_type_to_float<float>(DType::f32, {-0.0f, 1.5f, 3.0e38f, -1e-40f, INFINITY, NAN}, slope, inter);
    check_type_to_float<double>(DType::f64, {-0.0, 0.1, 1e300, -5e-324, -INFINITY, NAN}, slope, inter);
  }
}

TEST(ReadNifti, ComplexScalingAndRealPart) {
  vptest::TempDir dir;
  const std::vector<std::complex<float>> zs{{1.5f, -2.0f}, {INFINITY, 0.0f}, {-0.0f, 3.0f}, {4.0f, -0.0f}};
  NiftiHeader h = vptest::make_header(1, DType::c64, {2, 2}, true);
  h.scl_slope = 2.0;
  h.scl_inter = 1.0;
  const auto img = voxpipe::open_nifti(vptest::write_image(dir, "c.nii", h, zs));
  EXPECT_EQ(voxpipe::scaled_dtype(img.dtype, img.scaling, img.header_path), DType::c128);
  const auto out = vptest::read_as<std::complex<double>>(img, {}, {.type = DType::c128});
  ASSERT_EQ(out.size(), 4u);
  // (re*2 - im*0 + 1, re*0 + im*2 + 0)
  EXPECT_EQ(out[0], std::complex<double>(4.0, -4.0));
  EXPECT_TRUE(std::isinf(out[1].real()));
  EXPECT_TRUE(std::isnan(out[1].imag()));  // inf * 0 in the imaginary part, as NumPy
  EXPECT_EQ(out[2].real(), 1.0);
  EXPECT_EQ(out[2].imag(), 6.0);
  EXPECT_EQ(out[3], std::complex<double>(9.0, 0.0));
  EXPECT_FALSE(std::signbit(out[3].imag()));  // -0.0 * 2 + 0.0 = +0.0
  const auto re = vptest::read_as<double>(img, {{1, -1, 2}, {1, 1, 1}}, {.type = DType::f64, .real_part = true});
  EXPECT_EQ(re, (std::vector<double>{9.0, 1.0}));
  std::vector<double> buf(4);
  EXPECT_VP_ERROR(voxpipe::read_nifti_data(img, {}, {.type = DType::f64}, std::as_writable_bytes(std::span(buf))),
                  ErrorCode::invalid_argument);
  // Unscaled, complex64 as stored.
  EXPECT_EQ(vptest::read_as<std::complex<float>>(img, {}, {.type = DType::c64, .apply_scaling = false})[0],
            zs[0]);
}

TEST(ReadNifti, RgbIsReadAsRawBytesOnly) {
  vptest::TempDir dir;
  std::vector<std::uint8_t> rgb(3 * 4 * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<std::uint8_t>(i * 5);
  NiftiHeader h = vptest::make_header(1, DType::rgb24, {4, 3}, true);
  voxpipe::write_nifti(dir.file("rgb.nii"), h, {}, voxpipe::producer_from_bytes(vptest::as_bytes(rgb)));
  const auto img = voxpipe::open_nifti(dir.file("rgb.nii"));
  std::vector<std::uint8_t> out(3 * 2);
  const std::vector<AxisRange> sel{{3, -2, 2}, {2, 1, 1}};
  voxpipe::read_nifti_data(img, sel, {.type = DType::rgb24, .apply_scaling = false},
                           std::as_writable_bytes(std::span(out)));
  // Voxels (3, 2) and (1, 2): flat 11 and 9.
  EXPECT_EQ(out, (std::vector<std::uint8_t>{165, 170, 175, 135, 140, 145}));
  std::vector<float> f(12);
  EXPECT_VP_ERROR(voxpipe::read_nifti_data(img, {}, {.type = DType::f32}, std::as_writable_bytes(std::span(f))),
                  ErrorCode::invalid_argument);
  voxpipe::Scaling s{2.0, 0.0};
  EXPECT_VP_ERROR(voxpipe::scaled_dtype(DType::rgb24, s, "rgb.nii"), ErrorCode::unsupported);
}

TEST(ReadNifti, ConversionRules) {
  using voxpipe::conversion_supported;
  EXPECT_TRUE(conversion_supported(DType::i16, {.type = DType::f32}));
  EXPECT_TRUE(conversion_supported(DType::i16, {.type = DType::i16, .apply_scaling = false}));
  EXPECT_FALSE(conversion_supported(DType::i16, {.type = DType::i16}));  // scaling needs float
  EXPECT_FALSE(conversion_supported(DType::i16, {.type = DType::i32, .apply_scaling = false}));
  EXPECT_TRUE(conversion_supported(DType::i16, {.type = DType::i16, .apply_scaling = false, .file_byte_order = true}));
  EXPECT_FALSE(conversion_supported(DType::i16, {.type = DType::f32, .apply_scaling = false, .file_byte_order = true}));
  EXPECT_FALSE(conversion_supported(DType::c64, {.type = DType::f32}));
  EXPECT_TRUE(conversion_supported(DType::c64, {.type = DType::f32, .real_part = true}));
  EXPECT_TRUE(conversion_supported(DType::c64, {.type = DType::c128}));
  EXPECT_FALSE(conversion_supported(DType::rgb24, {.type = DType::f32}));
  EXPECT_TRUE(conversion_supported(DType::rgba32, {.type = DType::rgba32, .apply_scaling = false}));

  const voxpipe::Scaling none{}, some{2.0, 1.0};
  EXPECT_EQ(voxpipe::scaled_dtype(DType::u8, none, "p"), DType::u8);
  EXPECT_EQ(voxpipe::scaled_dtype(DType::u8, some, "p"), DType::f64);
  EXPECT_EQ(voxpipe::scaled_dtype(DType::f32, some, "p"), DType::f64);
  EXPECT_EQ(voxpipe::scaled_dtype(DType::c64, some, "p"), DType::c128);
  EXPECT_EQ(voxpipe::scaled_dtype(DType::rgb24, none, "p"), DType::rgb24);
}

TEST(ReadNifti, BadRequestsAreInvalidArguments) {
  vptest::TempDir dir;
  const auto img = voxpipe::open_nifti(vptest::write_image(dir, "b.nii", vptest::make_header(1, DType::i16, {4, 3}),
                                                           distinct_i16(12)));
  std::vector<double> buf(12);
  auto dest = std::as_writable_bytes(std::span(buf));
  const OutputSpec spec{.type = DType::f64};
  auto bad = [&](std::vector<AxisRange> sel, std::size_t n) {
    auto err = vptest::catch_error([&] { voxpipe::read_nifti_data(img, sel, spec, dest.first(n * 8)); });
    if (!err) return std::string("no error");
    return std::string(voxpipe::error_code_name(err->code())) + ":" + err->field();
  };
  EXPECT_EQ(bad({{0, 1, 4}}, 4), "invalid_argument:selection");                      // too few axes
  EXPECT_EQ(bad({{0, 1, 4}, {0, 1, 3}, {0, 1, 1}}, 12), "invalid_argument:selection");  // too many
  EXPECT_EQ(bad({{0, 1, 5}, {0, 1, 3}}, 12), "invalid_argument:selection");          // past the end
  EXPECT_EQ(bad({{-1, 1, 2}, {0, 1, 3}}, 6), "invalid_argument:selection");          // negative start
  EXPECT_EQ(bad({{2, -1, 4}, {0, 1, 3}}, 12), "invalid_argument:selection");         // below 0
  EXPECT_EQ(bad({{0, 0, 2}, {0, 1, 3}}, 6), "invalid_argument:selection");           // step 0
  EXPECT_EQ(bad({{0, 1, -1}, {0, 1, 3}}, 0), "invalid_argument:selection");          // count < 0
  EXPECT_EQ(bad({{4, 1, 1}, {0, 1, 3}}, 3), "invalid_argument:selection");           // start == dim
  EXPECT_EQ(bad({{0, 1, 4}, {0, 1, 3}}, 11), "invalid_argument:destination");        // wrong size
  EXPECT_EQ(bad({{0, std::numeric_limits<std::int64_t>::max(), 2}, {0, 1, 1}}, 2), "invalid_argument:selection");
  EXPECT_EQ(bad({{0, 1, 4}, {0, 1, 3}}, 12), "no error");
  // An empty axis may start anywhere; the other axes must still be valid.
  EXPECT_EQ(bad({{99, 1, 0}, {0, 1, 3}}, 0), "no error");
  EXPECT_EQ(bad({{0, 1, 0}, {99, 1, 3}}, 0), "invalid_argument:selection");
  std::vector<std::int32_t> i32(12);
  EXPECT_VP_ERROR(voxpipe::read_nifti_data(img, {}, {.type = DType::i32, .apply_scaling = false},
                                           std::as_writable_bytes(std::span(i32))),
                  ErrorCode::invalid_argument);
}

TEST(ReadNifti, ZeroVoxelImages) {
  vptest::TempDir dir;
  const auto img = voxpipe::open_nifti(vptest::write_image(dir, "z.nii.gz", vptest::make_header(2, DType::f32, {3, 0, 2}),
                                                           std::vector<float>{}));
  voxpipe::check_data_size(img);
  voxpipe::read_nifti_data(img, {}, {.type = DType::f64}, {});
}

// Large enough that whole-image reads go through the split, parallel and pipelined paths.
struct Big {
  vptest::TempDir dir;
  std::vector<std::int64_t> shape;
  std::vector<std::int16_t> values;
  Big(std::vector<std::int64_t> s) : shape(std::move(s)) {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    values.resize(n);
    std::mt19937_64 rng(7);
    for (auto& v : values) v = static_cast<std::int16_t>(rng());
  }
  voxpipe::NiftiImage write(const char* name, bool big_endian, double slope, double inter) {
    NiftiHeader h = vptest::make_header(1, DType::i16, shape, big_endian);
    h.scl_slope = slope;
    h.scl_inter = inter;
    return voxpipe::open_nifti(vptest::write_image(dir, name, h, values));
  }
};

TEST(ReadNiftiLarge, WholeImageConvertedInPiecesSequentially) {
  Big big({256, 256, 24});  // 3 MiB of int16
  for (const char* name : {"big.nii", "big.nii.gz"}) {
    SCOPED_TRACE(name);
    const auto img = big.write(name, true, 0.5, 10.0);
    const auto f32 = vptest::read_as<float>(img, {}, {.type = DType::f32}, 1);
    for (std::size_t i = 0; i < big.values.size(); ++i)
      ASSERT_EQ(f32[i], static_cast<float>(vptest::nib_scale(big.values[i], 0.5, 10.0))) << i;
    const auto raw = vptest::read_as<std::int16_t>(img, {}, {.type = DType::i16, .apply_scaling = false}, 1);
    ASSERT_EQ(raw, big.values);
  }
}

TEST(ReadNiftiLarge, WholeImageWithSeveralThreads) {
  Big big({512, 512, 20});  // 10 MiB of int16: more than one direct piece
  for (const char* name : {"big.nii", "big.nii.gz"}) {
    const auto img = big.write(name, false, 0.5, 10.0);
    for (unsigned threads : {2u, 4u}) {
      SCOPED_TRACE(std::string(name) + " threads " + std::to_string(threads));
      const auto f32 = vptest::read_as<float>(img, {}, {.type = DType::f32}, threads);
      for (std::size_t i = 0; i < big.values.size(); ++i)
        ASSERT_EQ(f32[i], static_cast<float>(vptest::nib_scale(big.values[i], 0.5, 10.0))) << i;
      ASSERT_EQ(vptest::read_as<std::int16_t>(img, {}, {.type = DType::i16, .apply_scaling = false}, threads), big.values);
    }
  }
}

TEST(ReadNiftiLarge, SelectionsOfALargeImage) {
  Big big({300, 200, 8, 3});
  for (const char* name : {"s.nii", "s.nii.gz"}) {
    const auto img = big.write(name, true, 2.0, 0.0);
    const std::vector<std::vector<AxisRange>> sels{
        {{0, 1, 300}, {0, 1, 200}, {0, 1, 8}, {1, 1, 1}},        // one volume
        {{0, 1, 300}, {0, 1, 200}, {7, -1, 8}, {2, -2, 2}},      // slices backwards
        {{5, 150, 2}, {0, 7, 29}, {1, 3, 3}, {0, 1, 3}},         // far apart elements
        {{299, -1, 300}, {10, 1, 100}, {0, 1, 8}, {0, 1, 3}},    // reversed rows
    };
    for (const auto& sel : sels) {
      SCOPED_TRACE(std::string(name) + " " + describe(sel));
      const auto want = vptest::naive_select(big.values, big.shape, sel);
      const auto got = vptest::read_as<double>(img, sel, {.type = DType::f64}, 1);
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i] * 2.0) << i;
    }
  }
}

TEST(NiftiReader, SuccessiveSelectionsThroughOneSource) {
  Big big({64, 64, 10, 6});
  for (const char* name : {"v.nii", "v.nii.gz"}) {
    const auto img = big.write(name, false, 0, 0);
    voxpipe::NiftiReader reader(img);
    std::vector<std::int16_t> vol(64 * 64 * 10);
    auto read_volume = [&](std::int64_t t) {
      const std::vector<AxisRange> sel{{0, 1, 64}, {0, 1, 64}, {0, 1, 10}, {t, 1, 1}};
      reader.read(sel, {.type = DType::i16, .apply_scaling = false}, std::as_writable_bytes(std::span(vol)));
      return vptest::naive_select(big.values, big.shape, sel) == vol;
    };
    for (std::int64_t t : {0, 1, 3, 5, 2, 0, 5}) EXPECT_TRUE(read_volume(t)) << name << " volume " << t;
  }
}

TEST(ReadNifti, TruncatedDataIsTruncated) {
  vptest::TempDir dir;
  const auto values = distinct_i16(7 * 5 * 4 * 3);
  const std::string path = vptest::write_image(dir, "t.nii", vptest::make_header(1, DType::i16, kShape), values);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1);
  const auto img = voxpipe::open_nifti(path);
  auto err = vptest::catch_error([&] { voxpipe::check_data_size(img); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::truncated);
  EXPECT_EQ(err->path(), path);
  EXPECT_VP_ERROR(vptest::read_as<double>(img, {}, {.type = DType::f64}), ErrorCode::truncated);
  // What lies before the cut is still readable.
  const std::vector<AxisRange> first{{0, 1, 7}, {0, 1, 5}, {0, 1, 4}, {0, 1, 1}};
  EXPECT_EQ(vptest::read_as<std::int16_t>(img, first, {.type = DType::i16, .apply_scaling = false}),
            vptest::naive_select(values, kShape, first));
  // Only the header left.
  std::filesystem::resize_file(path, 352);
  const auto empty = voxpipe::open_nifti(path);
  EXPECT_VP_ERROR(voxpipe::check_data_size(empty), ErrorCode::truncated);
  EXPECT_VP_ERROR(vptest::read_as<double>(empty, {}, {.type = DType::f64}), ErrorCode::truncated);
}

TEST(ReadNifti, TruncatedGzipDataIsTruncated) {
  vptest::TempDir dir;
  Big big({128, 128, 16});
  const auto img0 = big.write("t.nii.gz", false, 0, 0);
  const std::string path = img0.data_path;
  const auto size = std::filesystem::file_size(path);
  for (auto cut : {size - 20, size / 2, std::uintmax_t{400}}) {
    std::filesystem::resize_file(path, cut);
    const auto img = voxpipe::open_nifti(path);
    for (unsigned threads : {1u, 2u}) {
      auto err = vptest::catch_error([&] { vptest::read_as<float>(img, {}, {.type = DType::f32}, threads); });
      ASSERT_TRUE(err) << "cut " << cut;
      EXPECT_EQ(err->code(), ErrorCode::truncated) << "cut " << cut << ": " << err->what();
      err = vptest::catch_error([&] { vptest::read_as<std::int16_t>(img, {}, {.type = DType::i16, .apply_scaling = false}, threads); });
      ASSERT_TRUE(err) << "cut " << cut;
      EXPECT_EQ(err->code(), ErrorCode::truncated) << "cut " << cut << ": " << err->what();
    }
  }
}

TEST(ReadNifti, GzipCutInsideTheTrailerGivesTheDataOrTruncated) {
  // All voxel bytes are there; only CRC/ISIZE are cut. Python's gzip (so nibabel) returns the
  // data when it reads exactly the image's bytes; an error must then say "truncated".
  Big big({64, 64, 8});
  const auto img0 = big.write("t.nii.gz", false, 0, 0);
  std::filesystem::resize_file(img0.data_path, std::filesystem::file_size(img0.data_path) - 3);
  const auto img = voxpipe::open_nifti(img0.data_path);
  std::vector<std::int16_t> got;
  auto err = vptest::catch_error([&] {
    got = vptest::read_as<std::int16_t>(img, {}, {.type = DType::i16, .apply_scaling = false}, 1);
  });
  if (err)
    EXPECT_EQ(err->code(), ErrorCode::truncated) << err->what();
  else
    EXPECT_EQ(got, big.values);
}

TEST(ReadNifti, CorruptGzipDataIsCorrupt) {
  vptest::TempDir dir;
  Big big({64, 64, 8});
  const auto img = big.write("c.nii.gz", false, 0, 0);
  Bytes gz = vptest::read_file(img.data_path);
  gz[gz.size() - 6] ^= 0xff;  // CRC32
  vptest::write_file(img.data_path, gz);
  EXPECT_VP_ERROR(vptest::read_as<std::int16_t>(voxpipe::open_nifti(img.data_path), {},
                                               {.type = DType::i16, .apply_scaling = false}),
                  ErrorCode::corrupt);
}

TEST(CheckDataSize, UncompressedNeedsOffsetPlusData) {
  vptest::TempDir dir;
  const auto img = voxpipe::open_nifti(vptest::write_image(dir, "c.nii", vptest::make_header(1, DType::f64, {10}),
                                                           std::vector<double>(10, 1.0)));
  EXPECT_EQ(img.data_file_size, 352u + 80u);
  voxpipe::check_data_size(img);  // exactly enough
  auto bigger = img;
  bigger.shape = {11};
  EXPECT_VP_ERROR(voxpipe::check_data_size(bigger), ErrorCode::truncated);
}

TEST(NiftiReader, ChecksTheSizeOfTheFileItOpened) {
  vptest::TempDir dir;
  const auto values = distinct_i16(7 * 5 * 4 * 3);
  const std::string path = vptest::write_image(dir, "r.nii", vptest::make_header(1, DType::i16, kShape), values);
  const auto img = voxpipe::open_nifti(path);
  voxpipe::NiftiReader(img).check_data_size();  // exactly enough
  // Cut after open_nifti: not the file opened (file_change_test.cpp).
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1);
  EXPECT_VP_ERROR(voxpipe::check_data_size(img), ErrorCode::io);
  EXPECT_VP_ERROR(voxpipe::NiftiReader{img}, ErrorCode::io);
  // An image described by hand, without the identity: it still records the old size, the
  // reader sees the cut.
  auto by_hand = img;
  by_hand.header_identity.reset();
  by_hand.data_identity.reset();
  voxpipe::check_data_size(by_hand);
  voxpipe::NiftiReader reader(by_hand);
  auto err = vptest::catch_error([&] { reader.check_data_size(); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::truncated);
  EXPECT_EQ(err->path(), path);
  std::filesystem::remove(path);
  EXPECT_VP_ERROR(voxpipe::NiftiReader{img}, ErrorCode::not_found);
}

TEST(CheckDataSize, GzipCannotExpandBeyondDeflatesRatio) {
  vptest::TempDir dir;
  // A header promising 2000^3 int16 (16 GB) followed by nothing, gzipped: ~100 bytes.
  NiftiHeader h = vptest::make_header(2, DType::i16, {2000, 2000, 2000});
  h.vox_offset = 544;
  h.magic = vptest::chars<4>("n+2");
  const Bytes raw = vptest::concat({voxpipe::encode_nifti_header(h), Bytes(4, 0)});
  vptest::write_file(dir.file("bomb.nii.gz"), vptest::gzip_compress(raw));
  const auto img = voxpipe::open_nifti(dir.file("bomb.nii.gz"));
  EXPECT_EQ(img.data_bytes(), 16000000000u);
  EXPECT_VP_ERROR(voxpipe::check_data_size(img), ErrorCode::truncated);
  EXPECT_VP_ERROR(voxpipe::NiftiReader(img).check_data_size(), ErrorCode::truncated);
  // Highly compressible real data passes: 8 MB of zeros compresses ~1000:1.
  Big zeros({1024, 1024, 4});
  std::fill(zeros.values.begin(), zeros.values.end(), 0);
  const auto ok = zeros.write("zeros.nii.gz", false, 0, 0);
  EXPECT_LT(ok.data_file_size * 100, ok.data_bytes());
  voxpipe::check_data_size(ok);
  voxpipe::NiftiReader(ok).check_data_size();
}

}  // namespace
