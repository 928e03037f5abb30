// Series assembly on hand-built files (series_writer.hpp). tests/python/test_dicom_series.py
// compares whole series with nibabel and dcm2niix; these are the properties found by
// fuzz_dicom_series, checked where the sanitizer builds run them.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <optional>

#include <fcntl.h>
#include <sys/stat.h>

#include "dicom/series_writer.hpp"
#include "test_support.hpp"
#include "voxpipe/dicom_series.hpp"
#include "voxpipe/error.hpp"

namespace {

using namespace voxpipe;

std::string write_slice(const vptest::TempDir& dir, const std::string& name,
                        const vptest::SliceSpec& spec) {
  const std::string path = dir.file(name);
  vptest::write_file(path, vptest::dicom_slice(spec));
  return path;
}

DicomScanOptions one_thread() {
  DicomScanOptions o;
  o.threads = 1;
  return o;
}

// One position: the slice step comes from the first image's SpacingBetweenSlices, else its
// SliceThickness. It used to be read through a reference into the image list after the list
// was replaced (a use-after-free that ASan reports on every single-slice series).
TEST(DicomSeries, SinglePositionTakesItsStepFromTheFirstImage) {
  vptest::TempDir dir;
  vptest::SliceSpec spec;
  spec.sop = "1.2.3.1";
  spec.position[2] = 5;
  spec.thickness = 2;
  spec.between = 3;
  const DicomScanResult r = scan_dicom_series({write_slice(dir, "a.dcm", spec)}, one_thread());
  ASSERT_EQ(r.series.size(), 1u);
  const DicomSeries& s = r.series.front();
  EXPECT_EQ(s.problem, "");
  EXPECT_EQ(s.slices, 1u);
  EXPECT_DOUBLE_EQ(s.slice_spacing, 3);
  EXPECT_DOUBLE_EQ(s.affine[2 * 4 + 2], 3);  // k column along +z (LPS z = RAS z)
  EXPECT_DOUBLE_EQ(s.affine[2 * 4 + 3], 5);
  std::vector<std::uint8_t> out(4 * 4 * 2);
  read_dicom_series(s, out, DType::u16, 1);
}

TEST(DicomSeries, SinglePositionWithoutSpacingBetweenSlicesUsesTheThickness) {
  vptest::TempDir dir;
  vptest::SliceSpec spec;
  spec.sop = "1.2.3.1";
  spec.thickness = 2.5;
  // The same file under two names: the copy is dropped, which replaces the image list.
  const DicomScanResult r = scan_dicom_series(
      {write_slice(dir, "a.dcm", spec), write_slice(dir, "b.dcm", spec)}, one_thread());
  ASSERT_EQ(r.series.size(), 1u);
  const DicomSeries& s = r.series.front();
  EXPECT_EQ(s.problem, "");
  EXPECT_EQ(s.images.size(), 1u);
  EXPECT_EQ(s.warnings.size(), 1u);
  EXPECT_DOUBLE_EQ(s.slice_spacing, 2.5);
  EXPECT_DOUBLE_EQ(s.affine[2 * 4 + 2], 2.5);
}

// DS accepts "nan" and "inf": such a value compares false with every other, so a NaN position
// used to join its neighbour's position (3 slices became 1 slice of 3 volumes), with no problem.
TEST(DicomSeries, NonFiniteGeometryIsAProblem) {
  for (const bool orientation : {false, true}) {
    vptest::TempDir dir;
    std::vector<std::string> paths;
    for (int k = 0; k < 3; ++k) {
      vptest::SliceSpec spec;
      spec.sop = "1.2.3." + std::to_string(k + 1);
      spec.instance = k + 1;
      spec.position[2] = 2.0 * k;
      if (k == 1 && orientation) spec.orientation[1] = HUGE_VAL;
      if (k == 1 && !orientation) spec.position[0] = std::nan("");
      paths.push_back(write_slice(dir, "s" + std::to_string(k) + ".dcm", spec));
    }
    const DicomScanResult r = scan_dicom_series(paths, one_thread());
    // The odd orientation makes a part of its own; the NaN position spoils the whole series.
    ASSERT_EQ(r.series.size(), orientation ? 2u : 1u);
    const std::string field = orientation ? "ImageOrientationPatient (0020,0037) is not finite"
                                          : "ImagePositionPatient (0020,0032) is not finite";
    std::size_t with_problem = 0;
    for (const DicomSeries& s : r.series) {
      if (s.problem.empty()) continue;
      ++with_problem;
      EXPECT_NE(s.problem.find("s1.dcm: " + field), std::string::npos) << s.problem;
    }
    EXPECT_EQ(with_problem, 1u);
  }
}

// A multi-frame file without per-frame functional groups is one image per frame only when its
// pixel data can hold that many frames (8 bytes each at least); else it stays one image with
// that problem. One image per frame let this 500-byte RLE file (1-byte frames, which the pixel
// layer accepts up to 256 Mi of) take gigabytes.
TEST(DicomSeries, MultiFrameWithoutPositionsIsOneImageWhateverItsFrameCount) {
  vptest::TempDir dir;
  vptest::DBytes file = vptest::part10_head("1.2.840.10008.1.2.5");  // RLE Lossless
  vptest::DicomWriter w(false, false, file.size());
  w.text(0x00080018, "UI", vptest::uid_value("1.2.3.9"));
  w.text(0x0020000E, "UI", vptest::uid_value("1.2.3"));
  w.us(0x00280002, 1);
  w.text(0x00280004, "CS", "MONOCHROME2 ");
  w.text(0x00280008, "IS", "200000000 ");
  w.us(0x00280010, 1);
  w.us(0x00280011, 1);
  w.us(0x00280100, 8);
  w.us(0x00280101, 8);
  w.us(0x00280102, 7);
  w.us(0x00280103, 0);
  vptest::DicomWriter rle(false, false);  // one segment: a literal run of one byte
  rle.u32(1);
  rle.u32(64);
  for (int i = 0; i < 14; ++i) rle.u32(0);
  rle.raw({0, 7});
  w.header(0x7FE00010, "OB", 0xFFFFFFFF);
  w.item(0);
  w.item(static_cast<std::uint32_t>(rle.bytes().size()));
  w.raw(rle.bytes());
  w.sequence_delimiter();
  file.insert(file.end(), w.bytes().begin(), w.bytes().end());
  vptest::write_file(dir.file("cine.dcm"), file);

  const DicomScanResult r = scan_dicom_series({dir.file("cine.dcm")}, one_thread());
  ASSERT_EQ(r.series.size(), 1u);
  const DicomSeries& s = r.series.front();
  EXPECT_EQ(s.images.size(), 1u);
  EXPECT_NE(s.problem.find("without per-frame positions (200000000 frames)"), std::string::npos)
      << s.problem;
  std::vector<std::uint8_t> out(1);
  EXPECT_VP_ERROR(read_dicom_series(s, out, DType::u8, 1), ErrorCode::format);
}

// A Siemens CSA image header ("SV10") with one tag, NumberOfImagesInMosaic = `images`.
vptest::DBytes csa_header(const std::string& images) {
  vptest::DicomWriter w(false, false);
  for (char c : std::string("SV10\4\3\2\1")) w.raw({static_cast<std::uint8_t>(c)});
  w.u32(1);   // tags
  w.u32(77);
  std::string name = "NumberOfImagesInMosaic";
  name.resize(64, '\0');
  for (char c : name) w.raw({static_cast<std::uint8_t>(c)});
  w.u32(1);   // VM
  w.raw({'I', 'S', 0, 0});
  w.u32(6);   // SyngoDT
  w.u32(1);   // items
  w.u32(77);
  std::string value = images;
  value.resize((value.size() + 1 + 3) / 4 * 4, '\0');
  for (std::uint32_t v : {std::uint32_t(images.size() + 1), std::uint32_t(images.size() + 1),
                          std::uint32_t(77), std::uint32_t(images.size() + 1)})
    w.u32(v);
  for (char c : value) w.raw({static_cast<std::uint8_t>(c)});
  return w.bytes();
}

// NumberOfImagesInMosaic makes one image per tile: a count past max_mosaic_images (65535 by
// default) is refused with Error(limit) (the file is skipped, named, with the field), not turned
// into millions of images.
TEST(DicomSeries, MosaicWithTooManyImagesIsSkippedWithALimitError) {
  vptest::TempDir dir;
  for (const char* images : {"4", "70000"}) {
    vptest::SliceSpec spec;
    spec.rows = spec.columns = 8;
    spec.sop = "1.2.3.7";
    spec.mosaic = 1;  // ImageType MOSAIC and (0019,100A) = 1, which the CSA header overrides
    vptest::DBytes file = vptest::dicom_slice(spec);
    // Group 0029 goes between group 0028 and the pixel data (12 header bytes, 8 x 8 x 2 values).
    vptest::DicomWriter csa(false, false);
    csa.text(0x00290010, "LO", "SIEMENS CSA HEADER");
    csa.element(0x00291010, "OB", csa_header(images));
    const std::size_t pixel_at = file.size() - (12 + 8 * 8 * 2);
    file.insert(file.begin() + static_cast<std::ptrdiff_t>(pixel_at), csa.bytes().begin(),
                csa.bytes().end());
    const std::string path = dir.file(std::string("mosaic_") + images + ".dcm");
    vptest::write_file(path, file);
    const DicomScanResult r = scan_dicom_series({path}, one_thread());
    if (std::string(images) == "4") {
      ASSERT_EQ(r.series.size(), 1u);
      EXPECT_EQ(r.series.front().images.size(), 4u);
      EXPECT_EQ(r.series.front().rows, 4u);
      DicomScanOptions capped = one_thread();
      capped.max_mosaic_images = 3;
      const DicomScanResult c = scan_dicom_series({path}, capped);
      EXPECT_TRUE(c.series.empty());
      ASSERT_EQ(c.skipped.size(), 1u);
      EXPECT_NE(c.skipped.front().second.find("is 4; at most 3 tiles"), std::string::npos)
          << c.skipped.front().second;
      capped.max_mosaic_images = 4;
      EXPECT_EQ(scan_dicom_series({path}, capped).series.size(), 1u);
    } else {
      EXPECT_TRUE(r.series.empty());
      ASSERT_EQ(r.skipped.size(), 1u);
      EXPECT_NE(r.skipped.front().second.find("NumberOfImagesInMosaic"), std::string::npos)
          << r.skipped.front().second;
      DicomScanOptions strict = one_thread();
      strict.strict = true;
      EXPECT_VP_ERROR(scan_dicom_series({path}, strict), ErrorCode::limit);
    }
  }
}

}  // namespace

namespace {

// Error(io) naming the file, "changed since it was opened", from read_dicom_series.
void expect_changed(const DicomSeries& s, const std::string& path) {
  std::vector<std::uint8_t> out(4 * 4 * 2);
  try {
    read_dicom_series(s, out, DType::u16, 1);
    ADD_FAILURE() << "read a file that changed since the scan";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io);
    EXPECT_EQ(e.path(), path);
    EXPECT_NE(std::string(e.what()).find("changed since it was opened"), std::string::npos)
        << e.what();
  }
}

}  // namespace

// The scan located each file's pixel data; a file replaced (renamed over) or rewritten since is
// refused when the series is read, never decoded at the old offsets.
TEST(DicomSeries, AFileReplacedOrRewrittenSinceTheScanIsAnIoError) {
  vptest::TempDir dir;
  vptest::SliceSpec spec;
  spec.sop = "1.2.3.1";
  const std::string path = write_slice(dir, "a.dcm", spec);
  const DicomScanResult r = scan_dicom_series({path}, one_thread());
  ASSERT_EQ(r.series.size(), 1u);
  std::vector<std::uint8_t> out(4 * 4 * 2);
  read_dicom_series(r.series.front(), out, DType::u16, 1);  // unchanged: read

  spec.sop = "1.2.3.2";  // another file of the same layout, renamed over it
  const std::string other = write_slice(dir, "b.dcm", spec);
  ASSERT_EQ(std::rename(other.c_str(), path.c_str()), 0);
  expect_changed(r.series.front(), path);

  // Scanned again, then rewritten in place (same bytes, a later modification time).
  const DicomScanResult again = scan_dicom_series({path}, one_thread());
  ASSERT_EQ(again.series.size(), 1u);
  read_dicom_series(again.series.front(), out, DType::u16, 1);
  const timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  expect_changed(again.series.front(), path);
}

namespace {

// `spec` with `extra` elements before its pixel data. The parser keeps the last of a tag that
// occurs twice, as pydicom does: an ImageType written here replaces the writer's.
template <class Add>
vptest::DBytes slice_plus(const vptest::SliceSpec& spec, Add add) {
  vptest::DBytes file = vptest::dicom_slice(spec);
  vptest::DicomWriter w(false, false);
  add(w);
  const std::size_t pixel_at = file.size() - (12 + std::size_t(spec.rows) * spec.columns * 2);
  file.insert(file.begin() + static_cast<std::ptrdiff_t>(pixel_at), w.bytes().begin(),
              w.bytes().end());
  return file;
}

}  // namespace

// Magnitude and phase images of one SeriesInstanceUID (Siemens' ImageType "P", the standard's
// ComplexImageComponent) are separate series, as dcm2niix writes them (_ph, _real); the echo
// number is the series'.
TEST(DicomSeries, ImageComponentsAreSeparateSeries) {
  vptest::TempDir dir;
  std::vector<std::string> paths;
  const char* kinds[] = {"ORIGINAL\\PRIMARY\\M\\ND ", "ORIGINAL\\PRIMARY\\P\\ND ", "REAL"};
  for (int c = 0; c < 3; ++c)
    for (int k = 0; k < 2; ++k) {
      vptest::SliceSpec spec;
      spec.sop = std::string("1.2.5.").append(std::to_string(c * 2 + k + 1));
      spec.position[2] = 2.0 * k;
      spec.instance = k + 1;
      const std::string path = dir.file(std::to_string(c * 10 + k) + ".dcm");
      vptest::write_file(path, slice_plus(spec, [&](vptest::DicomWriter& w) {
                           if (c < 2) w.text(0x00080008, "CS", kinds[c]);
                           else w.text(0x00089208, "CS", "REAL");
                           w.text(0x00180086, "IS", "2 ");
                         }));
      paths.push_back(path);
    }
  const DicomScanResult r = scan_dicom_series(paths, one_thread());
  ASSERT_EQ(r.series.size(), 3u);
  std::vector<std::pair<std::string, std::string>> got;
  for (const DicomSeries& s : r.series) {
    EXPECT_EQ(s.shape(), (std::vector<std::uint64_t>{4, 4, 2}));
    EXPECT_TRUE(s.problem.empty()) << s.problem;
    EXPECT_EQ(s.echo_number, 2);
    got.emplace_back(s.split, s.image_component);
  }
  EXPECT_EQ(got, (std::vector<std::pair<std::string, std::string>>{
                     {"magnitude", ""}, {"phase", "PHASE"}, {"real", "REAL"}}));
  // One component alone: whole, no split label, but the component is stated.
  const DicomScanResult phase = scan_dicom_series({paths[2], paths[3]}, one_thread());
  ASSERT_EQ(phase.series.size(), 1u);
  EXPECT_EQ(phase.series.front().split, "");
  EXPECT_EQ(phase.series.front().image_component, "PHASE");
}

// A mosaic whose CSA image header lies (an item count past its end) is still read, its image
// count from (0019,xx0A) as before the header was parsed whole; the series names the damage.
TEST(DicomSeries, MosaicWithADamagedCsaHeaderFallsBackWithAWarning) {
  vptest::TempDir dir;
  vptest::SliceSpec spec;
  spec.rows = spec.columns = 8;
  spec.sop = "1.2.3.8";
  spec.mosaic = 4;  // (0019,100A)
  vptest::DBytes csa = csa_header("9");
  csa[16 + 76] = 0xFF;  // the element's item count: 255 items of at least 16 bytes
  const std::string path = dir.file("damaged.dcm");
  vptest::write_file(path, slice_plus(spec, [&](vptest::DicomWriter& w) {
                       w.text(0x00290010, "LO", "SIEMENS CSA HEADER");
                       w.element(0x00291010, "OB", csa);
                     }));
  const DicomScanResult r = scan_dicom_series({path}, one_thread());
  ASSERT_EQ(r.series.size(), 1u);
  const DicomSeries& s = r.series.front();
  EXPECT_EQ(s.images.size(), 4u);
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_NE(s.warnings.front().find("1 files' CSA image header could not be read"),
            std::string::npos) << s.warnings.front();
  EXPECT_NE(s.warnings.front().find("element 0 (NumberOfImagesInMosaic) item count 255"),
            std::string::npos) << s.warnings.front();
}

namespace {

// A plain image file (Explicit VR Little Endian) of `rows` x `columns`, 8-bit (or `bits`)
// samples, `samples` per pixel, `frames` frames without functional groups (0: no
// NumberOfFrames); ImagePositionPatient, ImageOrientationPatient, PixelSpacing and
// SpacingBetweenSlices only where given. Pixel values are `pixels` as stored.
struct PlainSpec {
  std::string sop = "1.2.3.1", series = "1.2.3.100";
  int instance = 1, rows = 2, columns = 3, samples = 1, planar = 0, bits = 8, frames = 0;
  std::string photometric = "MONOCHROME2";
  std::optional<std::array<double, 3>> position;
  std::optional<std::array<double, 6>> orientation;
  std::optional<std::array<double, 2>> spacing;
  double between = 0;
  vptest::DBytes pixels;
};

std::string write_plain(const vptest::TempDir& dir, const std::string& name, const PlainSpec& spec) {
  vptest::DBytes out = vptest::part10_head(vptest::kExplicitLE);
  vptest::DicomWriter w(false, false, out.size());
  const auto text = [&](std::uint32_t tag, const char* vr, const std::string& v) {
    w.text(tag, vr, vptest::even(v, std::string(vr) == "UI" ? '\0' : ' '));
  };
  text(0x00080016, "UI", "1.2.840.10008.5.1.4.1.1.7");
  text(0x00080018, "UI", spec.sop);
  text(0x00080060, "CS", "OT");
  if (spec.between) text(0x00180088, "DS", vptest::decimals(&spec.between, 1));
  text(0x0020000E, "UI", spec.series);
  text(0x00200011, "IS", "1");
  text(0x00200013, "IS", std::to_string(spec.instance));
  if (spec.position) text(0x00200032, "DS", vptest::decimals(spec.position->data(), 3));
  if (spec.orientation) text(0x00200037, "DS", vptest::decimals(spec.orientation->data(), 6));
  w.us(0x00280002, static_cast<std::uint32_t>(spec.samples));
  text(0x00280004, "CS", spec.photometric);
  if (spec.samples > 1) w.us(0x00280006, static_cast<std::uint32_t>(spec.planar));
  if (spec.frames) text(0x00280008, "IS", std::to_string(spec.frames));
  w.us(0x00280010, static_cast<std::uint32_t>(spec.rows));
  w.us(0x00280011, static_cast<std::uint32_t>(spec.columns));
  if (spec.spacing) text(0x00280030, "DS", vptest::decimals(spec.spacing->data(), 2));
  w.us(0x00280100, static_cast<std::uint32_t>(spec.bits));
  w.us(0x00280101, static_cast<std::uint32_t>(spec.bits));
  w.us(0x00280102, static_cast<std::uint32_t>(spec.bits - 1));
  w.us(0x00280103, 0);
  vptest::DBytes px = spec.pixels;
  if (px.size() % 2) px.push_back(0);
  w.element(0x7FE00010, spec.bits == 8 ? "OB" : "OW", px);
  out.insert(out.end(), w.bytes().begin(), w.bytes().end());
  const std::string path = dir.file(name);
  vptest::write_file(path, out);
  return path;
}

vptest::DBytes ramp(std::size_t n, int start = 0) {
  vptest::DBytes v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>((start + 7 * i) % 256);
  return v;
}

}  // namespace

// Colour images of 8-bit samples are a series of rgb24: each pixel's R, G, B as stored
// (PlanarConfiguration 0), or gathered from the three planes (1). Other output types are
// refused with why.
TEST(DicomSeries, ColourImagesReadAsRgb24) {
  for (const int planar : {0, 1}) {
    vptest::TempDir dir;
    PlainSpec spec;
    spec.samples = 3;
    spec.planar = planar;
    spec.photometric = "RGB";
    spec.position = std::array<double, 3>{0, 0, 0};
    spec.orientation = std::array<double, 6>{1, 0, 0, 0, 1, 0};
    spec.spacing = std::array<double, 2>{0.5, 0.5};
    spec.pixels = ramp(2 * 3 * 3);
    const DicomScanResult r = scan_dicom_series({write_plain(dir, "c.dcm", spec)}, one_thread());
    ASSERT_EQ(r.series.size(), 1u);
    const DicomSeries& s = r.series.front();
    EXPECT_EQ(s.problem, "");
    EXPECT_EQ(s.stored_dtype, DType::rgb24);
    EXPECT_FALSE(s.no_geometry);
    std::vector<std::uint8_t> out(2 * 3 * 3);
    read_dicom_series(s, out, DType::rgb24, 1);
    for (std::size_t p = 0; p < 6; ++p)
      for (std::size_t c = 0; c < 3; ++c)
        EXPECT_EQ(out[p * 3 + c], spec.pixels[planar ? c * 6 + p : p * 3 + c]) << p << " " << c;
    std::vector<std::uint8_t> f(2 * 3 * 4);
    EXPECT_VP_ERROR(read_dicom_series(s, f, DType::f32, 1), ErrorCode::invalid_argument);
  }
}

TEST(DicomSeries, ColourImagesOfSixteenBitSamplesAreAProblem) {
  vptest::TempDir dir;
  PlainSpec spec;
  spec.samples = 3;
  spec.bits = 16;
  spec.photometric = "RGB";
  spec.pixels = ramp(2 * 3 * 3 * 2);
  const DicomScanResult r = scan_dicom_series({write_plain(dir, "c.dcm", spec)}, one_thread());
  ASSERT_EQ(r.series.size(), 1u);
  EXPECT_NE(r.series.front().problem.find("(SamplesPerPixel 3, RGB, 16 bits) are read only as 8-bit RGB"),
            std::string::npos)
      << r.series.front().problem;
}

// Images that state no position or orientation are stacked in InstanceNumber order, centred on
// the origin, PixelSpacing (1 where absent) and SpacingBetweenSlices apart: the affine nibabel
// gives dcm2niix's image of them (rows flipped, sform and qform code 0).
TEST(DicomSeries, ImagesWithoutGeometryAreStackedAboutTheOrigin) {
  vptest::TempDir dir;
  std::vector<std::string> paths;
  for (int k = 0; k < 3; ++k) {
    PlainSpec spec;
    spec.sop = "1.2.3." + std::to_string(k + 1);
    spec.instance = 3 - k;  // file order is the reverse of InstanceNumber order
    spec.between = 2.5;
    if (k == 0) spec.spacing = std::array<double, 2>{0, 0};  // CR files write 0\0
    spec.pixels = ramp(6, k);
    paths.push_back(write_plain(dir, "s" + std::to_string(k) + ".dcm", spec));
  }
  const DicomScanResult r = scan_dicom_series(paths, one_thread());
  ASSERT_EQ(r.series.size(), 1u);
  const DicomSeries& s = r.series.front();
  EXPECT_EQ(s.problem, "");
  EXPECT_TRUE(s.no_geometry);
  EXPECT_EQ(s.shape(), (std::vector<std::uint64_t>{3, 2, 3}));
  ASSERT_EQ(s.images.size(), 3u);
  EXPECT_EQ(s.images[0].instance_number, 1);
  EXPECT_EQ(s.images[2].instance_number, 3);
  EXPECT_DOUBLE_EQ(s.slice_spacing, 2.5);
  const std::array<double, 16> expected{-1, 0, 0, 1, 0, -1, 0, 0.5, 0, 0, 2.5, -2.5, 0, 0, 0, 1};
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(s.affine[i], expected[i], 1e-12) << i;
  ASSERT_FALSE(s.warnings.empty());
  EXPECT_NE(s.warnings.back().find("no ImagePositionPatient or ImageOrientationPatient"),
            std::string::npos);
  std::vector<std::uint8_t> out(18);
  read_dicom_series(s, out, DType::u8, 1);
  EXPECT_EQ(out[0], ramp(6, 2)[0]);   // instance 1 is the third file
  EXPECT_EQ(out[12], ramp(6, 0)[0]);  // instance 3 the first
}

// Some images placed, others not: which frame would the others be in? A problem, as before.
TEST(DicomSeries, ImagesWithAndWithoutGeometryAreAProblem) {
  vptest::TempDir dir;
  PlainSpec a, b;
  a.sop = "1.2.3.1";
  b.sop = "1.2.3.2";
  b.instance = 2;
  a.pixels = b.pixels = ramp(6);
  a.position = std::array<double, 3>{0, 0, 0};
  a.orientation = b.orientation = std::array<double, 6>{1, 0, 0, 0, 1, 0};
  const DicomScanResult r =
      scan_dicom_series({write_plain(dir, "a.dcm", a), write_plain(dir, "b.dcm", b)}, one_thread());
  ASSERT_EQ(r.series.size(), 1u);
  EXPECT_EQ(r.series.front().problem,
            "some images have no ImagePositionPatient or ImageOrientationPatient");
  EXPECT_FALSE(r.series.front().no_geometry);
}

// A multi-frame file without functional groups: its frames are slices in frame order, stepped
// along the normal from the file's position (SpacingBetweenSlices, else 1 mm, as dcm2niix), or
// stacked without geometry when it states none.
TEST(DicomSeries, MultiFrameWithoutFunctionalGroupsStacksItsFrames) {
  for (const bool placed : {true, false}) {
    vptest::TempDir dir;
    PlainSpec spec;
    spec.frames = 4;
    spec.columns = 4;  // 8 bytes a frame: the least a frame may have (a fragment's item header)
    spec.pixels = ramp(4 * 8);
    if (placed) {
      spec.position = std::array<double, 3>{10, 20, 30};
      spec.orientation = std::array<double, 6>{1, 0, 0, 0, 1, 0};
      spec.spacing = std::array<double, 2>{2, 3};
    }
    const DicomScanResult r = scan_dicom_series({write_plain(dir, "m.dcm", spec)}, one_thread());
    ASSERT_EQ(r.series.size(), 1u);
    const DicomSeries& s = r.series.front();
    EXPECT_EQ(s.problem, "");
    EXPECT_EQ(s.no_geometry, !placed);
    EXPECT_EQ(s.shape(), (std::vector<std::uint64_t>{4, 2, 4}));
    for (std::size_t k = 0; k < 4; ++k) EXPECT_EQ(s.images[k].frame, k);
    EXPECT_DOUBLE_EQ(s.slice_spacing, 1);
    if (placed) {
      EXPECT_DOUBLE_EQ(s.images[3].position[2], 33);
      EXPECT_DOUBLE_EQ(s.affine[0 * 4 + 3], -10);  // LPS to RAS
      EXPECT_DOUBLE_EQ(s.affine[1 * 4 + 1], -2);   // column cosine * PixelSpacing[0]
      EXPECT_DOUBLE_EQ(s.affine[2 * 4 + 3], 30);
    } else {
      EXPECT_DOUBLE_EQ(s.affine[2 * 4 + 3], -1.5);
    }
    std::vector<std::uint8_t> out(32);
    read_dicom_series(s, out, DType::u8, 1);
    EXPECT_EQ(out, spec.pixels);
  }
}
