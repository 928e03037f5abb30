// The diffusion encoding of each image (DicomSlice::diffusion) as each vendor states it, and the
// gradient table in FSL's convention (dicom_gradient_table), against hand-computed values,
// dcm2niix's rule (siemensPhilipsCorrectBvecs: the direction in the image's read, phase and
// slice axes, with its row flip) and nibabel's CSA values for its Siemens DWI file.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "dicom/series_writer.hpp"
#include "test_support.hpp"
#include "voxpipe/dicom_series.hpp"
#include "voxpipe/error.hpp"

namespace {

using namespace voxpipe;
namespace fs = std::filesystem;

DicomScanOptions one_thread() {
  DicomScanOptions o;
  o.threads = 1;
  return o;
}

vptest::DBytes le_doubles(std::initializer_list<double> v) {
  vptest::DBytes out;
  for (double d : v) {
    std::uint8_t b[8];
    std::memcpy(b, &d, 8);
    out.insert(out.end(), b, b + 8);
  }
  return out;
}
vptest::DBytes le_float(float f) {
  std::uint8_t b[4];
  std::memcpy(b, &f, 4);
  return vptest::DBytes(b, b + 4);
}

// A slice (series_writer.hpp) with `extra` elements, written by `add`, before its pixel data
// (the parser sorts elements by tag).
template <class Add>
vptest::DBytes slice_with(const vptest::SliceSpec& spec, Add add) {
  vptest::DBytes file = vptest::dicom_slice(spec);
  vptest::DicomWriter w(false, false);
  add(w);
  const std::size_t pixel_at = file.size() - (12 + std::size_t(spec.rows) * spec.columns * 2);
  file.insert(file.begin() + static_cast<std::ptrdiff_t>(pixel_at), w.bytes().begin(),
              w.bytes().end());
  return file;
}

// Two positions x two volumes, each image's extra elements by (slice, volume).
template <class Add>
DicomSeries two_by_two(const vptest::TempDir& dir, Add add) {
  std::vector<std::string> paths;
  for (int v = 0; v < 2; ++v)
    for (int k = 0; k < 2; ++k) {
      vptest::SliceSpec spec;
      spec.sop = std::string("1.2.3.").append(std::to_string(v * 2 + k + 1));
      spec.position[2] = 2.0 * k;
      spec.temporal = v + 1;
      spec.instance = v * 2 + k + 1;
      const std::string path = dir.file(std::to_string(v * 10 + k) + ".dcm");
      vptest::write_file(path, slice_with(spec, [&](vptest::DicomWriter& w) { add(w, k, v); }));
      paths.push_back(path);
    }
  DicomScanResult r = scan_dicom_series(paths, one_thread());
  EXPECT_EQ(r.series.size(), 1u);
  EXPECT_TRUE(r.skipped.empty()) << (r.skipped.empty() ? "" : r.skipped.front().second);
  if (r.series.empty()) return {};
  EXPECT_EQ(r.series.front().volumes, 2u);
  return std::move(r.series.front());
}

void expect_vec(const std::array<double, 3>& got, const std::array<double, 3>& want,
                double tol = 1e-9) {
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], want[i], tol) << "component " << i;
}

// The standard attributes: b = 0 in volume 0, b = 1000 along LPS (0, 0.6, 0.8) in volume 1.
// The writer's images are axial (rows along L, columns along P): the series' affine has columns
// RAS (-1,0,0), (0,-1,0), (0,0,1) (determinant > 0: x negated); dcm2niix's, rows flipped, has
// (0,1,0) for j (determinant < 0) and writes (dot(g, read), -dot(g, phase), dot(g, slice)).
TEST(DicomDiffusion, StandardAttributesAndTheFslTableForAnyAffine) {
  vptest::TempDir dir;
  const DicomSeries s = two_by_two(dir, [](vptest::DicomWriter& w, int, int v) {
    w.element(0x00189087, "FD", le_doubles({v == 0 ? 0.0 : 1000.0}));
    if (v == 1) w.element(0x00189089, "FD", le_doubles({0, 1.2, 1.6}));  // not unit: normalised
  });
  ASSERT_EQ(s.images.size(), 4u);
  ASSERT_TRUE(s.images[2].diffusion);
  EXPECT_EQ(s.images[2].diffusion->source, "standard");
  EXPECT_EQ(s.images[2].diffusion->b_value, 1000);
  expect_vec(*s.images[2].diffusion->direction, {0, 0.6, 0.8});
  ASSERT_TRUE(s.images[0].diffusion);
  EXPECT_FALSE(s.images[0].diffusion->direction);  // b = 0

  const auto t = dicom_gradient_table(s, s.affine);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->bvals, (std::vector<double>{0, 1000}));
  expect_vec(t->bvecs[0], {0, 0, 0});
  expect_vec(t->bvecs[1], {0, 0.6, 0.8});
  // dcm2niix's axes (rows flipped): j = -column direction.
  std::array<double, 16> flipped = s.affine;
  for (int r = 0; r < 3; ++r) flipped[r * 4 + 1] = -flipped[r * 4 + 1];
  expect_vec(dicom_gradient_table(s, flipped)->bvecs[1], {0, -0.6, 0.8});
  // Axes permuted (i <-> k, determinant < 0): the vector's components follow.
  std::array<double, 16> permuted = s.affine;
  for (int r = 0; r < 3; ++r) std::swap(permuted[r * 4 + 0], permuted[r * 4 + 2]);
  expect_vec(dicom_gradient_table(s, permuted)->bvecs[1], {0.8, 0.6, 0});
  // Scaled columns change nothing.
  std::array<double, 16> scaled = s.affine;
  for (int r = 0; r < 3; ++r) scaled[r * 4 + 0] *= 3;
  expect_vec(dicom_gradient_table(s, scaled)->bvecs[1], {0, 0.6, 0.8});
}

// ISOTROPIC images (trace) have a b-value and no direction: (0, 0, 0) in the table, as dcm2niix.
TEST(DicomDiffusion, IsotropicImagesHaveNoDirection) {
  vptest::TempDir dir;
  const DicomSeries s = two_by_two(dir, [](vptest::DicomWriter& w, int, int v) {
    w.text(0x00189075, "CS", v == 0 ? "DIRECTIONAL " : "ISOTROPIC ");
    w.element(0x00189087, "FD", le_doubles({1000.0}));
    w.element(0x00189089, "FD", le_doubles({1, 0, 0}));
  });
  const auto t = dicom_gradient_table(s, s.affine);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->bvals, (std::vector<double>{1000, 1000}));
  expect_vec(t->bvecs[0], {-1, 0, 0});  // L is RAS -x: +1 on i, negated (determinant > 0)
  expect_vec(t->bvecs[1], {0, 0, 0});
}

// Siemens' (0019,xx0C) B_value and (0019,xx0E) DiffusionGradientDirection ("SIEMENS MR HEADER",
// here in block 0x11); Philips' (2001,xx03) and (2005,xxB0..B2); GE's (0043,xx39), whose first
// value may carry 10^9 (dcm2niix issue 602).
TEST(DicomDiffusion, VendorPrivateElements) {
  {
    vptest::TempDir dir;
    const DicomSeries s = two_by_two(dir, [](vptest::DicomWriter& w, int, int v) {
      w.text(0x00190011, "LO", "SIEMENS MR HEADER ");
      w.text(0x0019110C, "IS", v == 0 ? "0 " : "1500");
      if (v == 1) w.element(0x0019110E, "FD", le_doubles({0.99999642, 0.0, 0.00266664}));
    });
    ASSERT_TRUE(s.images[2].diffusion);
    EXPECT_EQ(s.images[2].diffusion->source, "CSA");
    const double n = std::hypot(0.99999642, 0.00266664);
    expect_vec(*s.images[2].diffusion->direction, {0.99999642 / n, 0, 0.00266664 / n});
    EXPECT_EQ(dicom_gradient_table(s, s.affine)->bvals, (std::vector<double>{0, 1500}));
  }
  {
    vptest::TempDir dir;
    const DicomSeries s = two_by_two(dir, [](vptest::DicomWriter& w, int, int v) {
      w.text(0x00200010, "LO", "x");  // unrelated group: not read
      w.text(0x20010010, "LO", "Philips Imaging DD 001 ");
      w.element(0x20011003, "FL", le_float(v == 0 ? 0.0f : 800.0f));
      w.text(0x20050010, "LO", "Philips MR Imaging DD 001 ");
      w.element(0x200510B0, "FL", le_float(0.0f));
      w.element(0x200510B1, "FL", le_float(v == 0 ? 0.0f : -1.0f));
      w.element(0x200510B2, "FL", le_float(0.0f));
    });
    ASSERT_TRUE(s.images[2].diffusion);
    EXPECT_EQ(s.images[2].diffusion->source, "Philips");
    EXPECT_EQ(s.images[2].diffusion->b_value, 800);
    expect_vec(*s.images[2].diffusion->direction, {0, -1, 0});
    const auto t = dicom_gradient_table(s, s.affine);
    EXPECT_EQ(t->bvals, (std::vector<double>{0, 800}));
    expect_vec(t->bvecs[1], {0, -1, 0});  // RAS (0, 1, 0) on j = (0, -1, 0)
  }
  {
    vptest::TempDir dir;
    const DicomSeries s = two_by_two(dir, [](vptest::DicomWriter& w, int, int v) {
      w.text(0x00430010, "LO", "GEMS_PARM_01");
      w.text(0x00431039, "IS", v == 0 ? "0\\8\\0\\0 " : "1000001500\\8\\0\\0 ");
    });
    ASSERT_TRUE(s.images[2].diffusion);
    EXPECT_EQ(s.images[2].diffusion->source, "GE");
    EXPECT_FALSE(s.images[2].diffusion->direction);  // no (0019,xxBB..BD)
    EXPECT_EQ(dicom_gradient_table(s, s.affine)->bvals, (std::vector<double>{0, 1500}));
  }
  {
    // GE's direction, in the encoding frame, for axial slices and COL phase encoding: LPS
    // (-x, -y, z) of (0019,xxBB..BD), as dcm2niix's world directions (test_dicom_diffusion.py
    // checks every orientation against dcm2niix); a vector of length 0.5 scales b by 0.25.
    vptest::TempDir dir;
    const DicomSeries s = two_by_two(dir, [](vptest::DicomWriter& w, int, int v) {
      w.text(0x00181312, "CS", "COL ");
      w.text(0x00190010, "LO", "GEMS_ACQU_01");
      w.text(0x001910BB, "DS", v == 0 ? "0.4 " : "0.8 ");
      w.text(0x001910BC, "DS", v == 0 ? "0 " : "0.6 ");
      w.text(0x001910BD, "DS", "0 ");
      w.text(0x00430010, "LO", "GEMS_PARM_01");
      w.text(0x00431039, "IS", "1000\\8\\0\\0 ");
    });
    ASSERT_TRUE(s.images[0].diffusion && s.images[2].diffusion);
    EXPECT_EQ(s.images[0].diffusion->b_value, 160);  // 1000 * 0.4^2
    expect_vec(*s.images[0].diffusion->direction, {-1, 0, 0});
    EXPECT_EQ(s.images[2].diffusion->b_value, 1000);
    expect_vec(*s.images[2].diffusion->direction, {-0.8, -0.6, 0});
  }
}

// A Siemens file that is not a mosaic: its CSA image header is read for the encoding only when
// the file can be a DWI (ImageType DIFFUSION, or a sequence name like ep_b1000): the scan does
// not read the 10-20 KiB header of every other Siemens file.
TEST(DicomDiffusion, CsaImageHeaderOfASingleImageIsReadForDiffusionSequencesOnly) {
  // CSA: B_value 1000, DiffusionGradientDirection (0, 0, 1).
  const auto csa = [] {
    vptest::DicomWriter w(false, false);
    for (char c : std::string("SV10\4\3\2\1", 8)) w.raw({static_cast<std::uint8_t>(c)});
    w.u32(2);
    w.u32(77);
    const auto element = [&](std::string name, const char* vr, std::vector<std::string> items) {
      name.resize(64, '\0');
      for (char c : name) w.raw({static_cast<std::uint8_t>(c)});
      w.u32(std::uint32_t(items.size()));
      w.raw({static_cast<std::uint8_t>(vr[0]), static_cast<std::uint8_t>(vr[1]), 0, 0});
      w.u32(6);
      w.u32(std::uint32_t(items.size()));
      w.u32(77);
      for (std::string v : items) {
        const auto n = std::uint32_t(v.size());
        for (std::uint32_t x : {n, n, 77u, n}) w.u32(x);
        v.resize((v.size() + 3) / 4 * 4, '\0');
        for (char c : v) w.raw({static_cast<std::uint8_t>(c)});
      }
    };
    element("B_value", "IS", {"1000"});
    element("DiffusionGradientDirection", "FD", {"0", "0", "1"});
    return w.bytes();
  }();
  for (const char* sequence : {"ep_b1000#1", "fl3d1"}) {
    vptest::TempDir dir;
    vptest::SliceSpec spec;
    spec.sop = "1.2.3.9";
    const std::string path = dir.file("one.dcm");
    vptest::write_file(path, slice_with(spec, [&](vptest::DicomWriter& w) {
                         w.text(0x00180024, "SH", vptest::even(sequence));
                         w.text(0x00290010, "LO", "SIEMENS CSA HEADER");
                         w.element(0x00291010, "OB", csa);
                       }));
    const DicomScanResult r = scan_dicom_series({path}, one_thread());
    ASSERT_EQ(r.series.size(), 1u);
    const auto& d = r.series.front().images.front().diffusion;
    if (std::string(sequence) == "fl3d1") {
      EXPECT_FALSE(d);
      EXPECT_FALSE(dicom_gradient_table(r.series.front(), r.series.front().affine));
    } else {
      ASSERT_TRUE(d);
      EXPECT_EQ(d->source, "CSA");
      EXPECT_EQ(d->b_value, 1000);
      expect_vec(*d->direction, {0, 0, 1});
    }
  }
}

// Two slices of one volume with different b-values: Error(format) naming the image.
TEST(DicomDiffusion, AVolumeWhoseSlicesDisagreeIsAFormatError) {
  vptest::TempDir dir;
  const DicomSeries s = two_by_two(dir, [](vptest::DicomWriter& w, int k, int v) {
    w.element(0x00189087, "FD", le_doubles({v == 1 && k == 1 ? 500.0 : 1000.0 * v}));
    w.element(0x00189089, "FD", le_doubles({1, 0, 0}));
  });
  try {
    dicom_gradient_table(s, s.affine);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::format);
    EXPECT_NE(std::string(e.what()).find("differs within volume 1"), std::string::npos) << e.what();
  }
  // Without any encoding: nullopt.
  vptest::TempDir plain;
  const DicomSeries none = two_by_two(plain, [](vptest::DicomWriter&, int, int) {});
  EXPECT_FALSE(dicom_gradient_table(none, none.affine));
}

// An enhanced MR file: 3 positions x 4 volumes, each frame's MR Diffusion Sequence giving
// b = 0 (directionality NONE), 1000 along LPS (1, 0, 0), 1000 along (0, 0.6, 0.8), 2000 along
// (0.3, -0.4, 0.866). dcm2niix on the same file (made with pydicom) writes .bval 0 1000 1000 2000
// and .bvec whose world directions equal these tables' (to 1e-6).
TEST(DicomDiffusion, EnhancedFilePerFrameMrDiffusionSequence) {
  const double g[4][3] = {{0, 0, 0}, {1, 0, 0}, {0, 0.6, 0.8}, {0.3, -0.4, std::sqrt(0.75)}};
  const double b[4] = {0, 1000, 1000, 2000};
  vptest::DBytes file = vptest::part10_head(vptest::kExplicitLE);
  vptest::DicomWriter w(false, false, file.size());
  w.text(0x00080016, "UI", vptest::even("1.2.840.10008.5.1.4.1.1.4.1", '\0'));
  w.text(0x00080018, "UI", vptest::even("1.2.3.77", '\0'));
  w.text(0x00080060, "CS", "MR");
  w.text(0x0020000E, "UI", vptest::even("1.2.3.78", '\0'));
  w.us(0x00280002, 1);
  w.text(0x00280004, "CS", "MONOCHROME2 ");
  w.text(0x00280008, "IS", "12");
  w.us(0x00280010, 4);
  w.us(0x00280011, 4);
  w.us(0x00280100, 16);
  w.us(0x00280101, 16);
  w.us(0x00280102, 15);
  w.us(0x00280103, 0);
  const auto seq = [&](std::uint32_t tag, auto body) {
    w.header(tag, "SQ", 0xFFFFFFFF);
    w.item(0xFFFFFFFF);
    body();
    w.item_delimiter();
    w.sequence_delimiter();
  };
  seq(0x52009229, [&] {
    seq(0x00209116, [&] { w.text(0x00200037, "DS", "1\\0\\0\\0\\1\\0 "); });
    seq(0x00289110, [&] {
      w.text(0x00180050, "DS", "3 ");
      w.text(0x00280030, "DS", "2\\2 ");
    });
  });
  w.header(0x52009230, "SQ", 0xFFFFFFFF);
  for (int v = 0; v < 4; ++v)
    for (int k = 0; k < 3; ++k) {
      w.item(0xFFFFFFFF);
      seq(0x00189117, [&] {
        w.text(0x00189075, "CS", v == 0 ? "NONE" : "DIRECTIONAL ");
        if (v > 0) seq(0x00189076, [&] { w.element(0x00189089, "FD", le_doubles({g[v][0], g[v][1], g[v][2]})); });
        w.element(0x00189087, "FD", le_doubles({b[v]}));
      });
      seq(0x00209111, [&] {
        vptest::DicomWriter index(false, false);
        index.u32(static_cast<std::uint32_t>(4 - v));  // TemporalPositionIndex: volumes reversed
        w.element(0x00209128, "UL", index.bytes());
      });
      seq(0x00209113, [&] {
        const double p[3] = {-8, -8, 10.0 + 3 * k};
        w.text(0x00200032, "DS", vptest::even(vptest::decimals(p, 3)));
      });
      w.item_delimiter();
    }
  w.sequence_delimiter();
  vptest::DicomWriter pixels(false, false);
  for (int i = 0; i < 12 * 16; ++i) pixels.u16(static_cast<std::uint32_t>(i));
  w.element(0x7FE00010, "OW", pixels.bytes());
  file.insert(file.end(), w.bytes().begin(), w.bytes().end());
  // TemporalPositionIndex runs backwards (4 for the file's first volume): the table follows
  // the series' volume order, which is by that index.
  vptest::TempDir dir;
  vptest::write_file(dir.file("enhanced.dcm"), file);
  const DicomScanResult r = scan_dicom_series({dir.file("enhanced.dcm")}, one_thread());
  ASSERT_EQ(r.series.size(), 1u);
  const DicomSeries& s = r.series.front();
  ASSERT_TRUE(s.problem.empty()) << s.problem;
  EXPECT_EQ(s.shape(), (std::vector<std::uint64_t>{4, 4, 3, 4}));
  const auto t = dicom_gradient_table(s, s.affine);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->bvals, (std::vector<double>{2000, 1000, 1000, 0}));
  // The series' affine: columns RAS (-2,0,0), (0,-2,0), (0,0,3): determinant > 0.
  expect_vec(t->bvecs[3], {0, 0, 0});
  expect_vec(t->bvecs[2], {-1, 0, 0});
  expect_vec(t->bvecs[1], {0, 0.6, 0.8});
  expect_vec(t->bvecs[0], {-0.3, -0.4, std::sqrt(0.75)});
  EXPECT_EQ(s.images[3].diffusion->source, "standard");
}

fs::path nibabel_data() {
  if (const char* env = std::getenv("VOXPIPE_NIBABEL_DATA"); env && *env) return env;
  std::error_code ec;
  for (fs::path dir = fs::path(__FILE__).parent_path(); !dir.empty() && dir != dir.parent_path();
       dir = dir.parent_path()) {
    const fs::path lib = dir / ".venv" / "lib";
    if (!fs::is_directory(lib, ec)) continue;
    for (const auto& py : fs::directory_iterator(lib, ec)) {
      const fs::path data = py.path() / "site-packages/nibabel/nicom/tests/data";
      if (fs::is_regular_file(data / "siemens_dwi_1000.dcm.gz", ec)) return data;
    }
  }
  return {};
}

std::vector<std::uint8_t> gunzip(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  const std::vector<std::uint8_t> in{std::istreambuf_iterator<char>(f),
                                     std::istreambuf_iterator<char>()};
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return {};
  std::vector<std::uint8_t> out(std::size_t(8) << 20);
  z.next_in = const_cast<Bytef*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  out.resize(z.total_out);
  inflateEnd(&z);
  return rc == Z_STREAM_END ? out : std::vector<std::uint8_t>{};
}

// nibabel's Siemens DWI mosaic (b = 1000): the encoding of its CSA image header as nibabel's
// csareader reads it (B_value 1000, DiffusionGradientDirection (0.99997449, 0.00505012,
// -0.00505012)); its b = 0 sibling has no direction.
TEST(DicomDiffusion, NibabelsSiemensDwiMosaic) {
  const fs::path data = nibabel_data();
  if (data.empty()) GTEST_SKIP() << "nibabel's test data not found (set VOXPIPE_NIBABEL_DATA)";
  for (const char* name : {"siemens_dwi_1000.dcm.gz", "siemens_dwi_0.dcm.gz"}) {
    auto bytes = std::make_shared<std::vector<std::uint8_t>>(gunzip(data / name));
    ASSERT_FALSE(bytes->empty());
    const DicomScanResult r =
        scan_dicom_buffers({{name, std::span<const std::uint8_t>(*bytes), bytes}}, one_thread());
    ASSERT_EQ(r.series.size(), 1u);
    const DicomSeries& s = r.series.front();
    ASSERT_GT(s.images.size(), 1u);  // a mosaic: every tile has the file's encoding
    for (const DicomSlice& im : s.images) {
      ASSERT_TRUE(im.diffusion);
      EXPECT_EQ(im.diffusion->source, "CSA");
    }
    const auto& d = *s.images.back().diffusion;
    if (std::string(name) == "siemens_dwi_0.dcm.gz") {
      EXPECT_EQ(d.b_value, 0);
      EXPECT_FALSE(d.direction);
      continue;
    }
    EXPECT_EQ(d.b_value, 1000);
    const double n = std::sqrt(0.99997449 * 0.99997449 + 2 * 0.00505012 * 0.00505012);
    expect_vec(*d.direction, {0.99997449 / n, 0.00505012 / n, -0.00505012 / n}, 1e-8);
    // The table: the direction in the voxel axes, through the series' own affine.
    const auto t = dicom_gradient_table(s, s.affine);
    ASSERT_TRUE(t);
    ASSERT_EQ(t->bvecs.size(), 1u);
    std::array<double, 3> world{};  // RAS, from the table: undo the x flip, then the columns
    double det = 0;
    {
      const auto& a = s.affine;
      det = a[0] * (a[5] * a[10] - a[6] * a[9]) - a[1] * (a[4] * a[10] - a[6] * a[8]) +
            a[2] * (a[4] * a[9] - a[5] * a[8]);
      std::array<double, 3> b = t->bvecs[0];
      if (det > 0) b[0] = -b[0];
      for (int c = 0; c < 3; ++c) {
        const double len = std::sqrt(a[c] * a[c] + a[4 + c] * a[4 + c] + a[8 + c] * a[8 + c]);
        for (int r = 0; r < 3; ++r) world[r] += b[c] * a[r * 4 + c] / len;
      }
    }
    // The slice column of this mosaic's affine is the CSA slice normal (orthogonal to the
    // others within 1e-6), so the round trip is exact to that.
    expect_vec(world, {-d.direction->at(0), -d.direction->at(1), d.direction->at(2)}, 1e-5);
  }
}

}  // namespace
