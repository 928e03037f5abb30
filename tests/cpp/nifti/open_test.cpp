// open_nifti on files written by write_nifti (and a few crafted by hand): storage kinds, file
// names, offsets, extensions, scaling, shapes, warnings and refusals.
#include <sys/stat.h>

#include "nifti/internal.hpp"
#include "nifti/nifti_support.hpp"

namespace {

using voxpipe::Compression;
using voxpipe::DType;
using voxpipe::ErrorCode;
using voxpipe::NiftiExtension;
using voxpipe::NiftiHeader;
using vptest::Bytes;

std::vector<std::int16_t> ramp(std::size_t n) {
  std::vector<std::int16_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::int16_t>(i * 7 - 300);
  return v;
}

struct Kind {
  const char* write_name;  // what write_nifti gets
  const char* open_name;   // what open_nifti gets
  const char* header;      // expected header_path / data_path (file names)
  const char* data;
  bool header_gz, data_gz;
  std::uint64_t offset;  // NIfTI-1, no extensions
};
const Kind kKinds[] = {
    {"a.nii", "a.nii", "a.nii", "a.nii", false, false, 352},
    {"a.nii.gz", "a.nii.gz", "a.nii.gz", "a.nii.gz", true, true, 352},
    {"a.hdr", "a.hdr", "a.hdr", "a.img", false, false, 0},
    {"a.hdr", "a.img", "a.hdr", "a.img", false, false, 0},
    {"a.img.gz", "a.hdr.gz", "a.hdr.gz", "a.img.gz", true, true, 0},
    {"a.hdr.gz", "a.img.gz", "a.hdr.gz", "a.img.gz", true, true, 0},
    {"A.HDR", "A.IMG", "A.HDR", "A.IMG", false, false, 0},
    {"b.NII.GZ", "b.NII.GZ", "b.NII.GZ", "b.NII.GZ", true, true, 352},
};

TEST(OpenNifti, EveryStorageKind) {
  for (const Kind& k : kKinds) {
    SCOPED_TRACE(k.write_name + std::string(" opened as ") + k.open_name);
    vptest::TempDir dir;
    const NiftiHeader h = vptest::make_header(1, DType::i16, {6, 5, 4});
    vptest::write_image(dir, k.write_name, h, ramp(120));
    const auto img = voxpipe::open_nifti(dir.file(k.open_name));
    EXPECT_EQ(img.header_path, dir.file(k.header));
    EXPECT_EQ(img.data_path, dir.file(k.data));
    EXPECT_EQ(img.header_compression == Compression::gzip, k.header_gz);
    EXPECT_EQ(img.data_compression == Compression::gzip, k.data_gz);
    EXPECT_EQ(img.shape, (std::vector<std::int64_t>{6, 5, 4}));
    EXPECT_EQ(img.dtype, DType::i16);
    EXPECT_EQ(img.data_offset, k.offset);
    EXPECT_EQ(img.voxel_count(), 120u);
    EXPECT_EQ(img.data_bytes(), 240u);
    EXPECT_EQ(img.header.magic[1], k.header == std::string(k.data) ? '+' : 'i');
    struct stat st {};
    ASSERT_EQ(::stat(img.data_path.c_str(), &st), 0);
    EXPECT_EQ(img.data_file_size, static_cast<std::uint64_t>(st.st_size));
    EXPECT_TRUE(img.extensions.empty());
    EXPECT_TRUE(img.warnings.empty());
    EXPECT_FALSE(img.scaling.active());
    voxpipe::check_data_size(img);
    EXPECT_EQ(vptest::read_as<std::int16_t>(img, {}, {.type = DType::i16, .apply_scaling = false}), ramp(120));
  }
}

TEST(OpenNifti, HeaderFieldsAndByteOrderSurvive) {
  for (int version : {1, 2}) {
    for (bool big : {false, true}) {
      vptest::TempDir dir;
      const NiftiHeader h = vptest::full_header(version, big);
      vptest::write_image(dir, "f.nii", h, ramp(120));
      const auto img = voxpipe::open_nifti(dir.file("f.nii"));
      NiftiHeader want = h;
      want.magic = {'n', '+', static_cast<char>('0' + version), 0};
      vptest::expect_same_header(img.header, want);
      EXPECT_EQ(img.swapped(), big != vptest::kNativeBig);
      EXPECT_EQ(img.data_offset, version == 2 ? 544u : 352u);
      EXPECT_EQ(img.scaling.slope, 2.0);
      EXPECT_EQ(img.scaling.inter, -3.5);
      EXPECT_EQ(img.shape, (std::vector<std::int64_t>{5, 4, 3, 2}));
      EXPECT_EQ(img.affine, voxpipe::nifti_sform(want));
    }
  }
}

TEST(OpenNifti, ExtensionsRoundTripWithTrailingNulsStripped) {
  const std::vector<NiftiExtension> exts{
      {6, {'h', 'e', 'l', 'l', 'o'}},
      {4, {'a', 'b', 'c', 0, 0}},         // trailing NULs are not part of the content
      {40, {'x', 0, 'y'}},                // inner NULs are
      {0, {}},
      {44, Bytes(24, 0x7f)},              // 24 + 8 = 32: no padding needed
  };
  const std::vector<Bytes> want{{'h', 'e', 'l', 'l', 'o'}, {'a', 'b', 'c'}, {'x', 0, 'y'}, {}, Bytes(24, 0x7f)};
  // Sizes on disk: each 8 + content rounded up to 16.
  const std::uint64_t ext_bytes = 16 + 16 + 16 + 16 + 32;
  for (int version : {1, 2}) {
    for (bool big : {false, true}) {
      for (const char* name : {"e.nii", "e.nii.gz", "e.hdr", "e.img.gz"}) {
        SCOPED_TRACE(std::string(name) + " version " + std::to_string(version) + (big ? " BE" : " LE"));
        vptest::TempDir dir;
        const NiftiHeader h = vptest::make_header(version, DType::u8, {3, 2}, big);
        vptest::write_image(dir, name, h, std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6}, exts);
        const auto img = voxpipe::open_nifti(dir.file(name));
        ASSERT_EQ(img.extensions.size(), exts.size());
        for (std::size_t i = 0; i < exts.size(); ++i) {
          EXPECT_EQ(img.extensions[i].code, exts[i].code) << i;
          EXPECT_EQ(img.extensions[i].content, want[i]) << i;
        }
        const bool pair = voxpipe::nifti_is_pair_path(name);
        const std::uint64_t hsize = version == 2 ? 540 : 348;
        EXPECT_EQ(img.data_offset, pair ? 0u : hsize + 4 + ext_bytes);
        EXPECT_EQ(vptest::read_as<std::uint8_t>(img, {}, {.type = DType::u8, .apply_scaling = false}),
                  (std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6}));
      }
    }
  }
}

TEST(OpenNifti, ExtensionBytesOnDiskAreNibabels) {
  vptest::TempDir dir;
  const NiftiHeader h = vptest::make_header(1, DType::u8, {2}, true);
  vptest::write_image(dir, "x.nii", h, std::vector<std::uint8_t>{9, 8}, {{6, {'a', 'b', 'c', 'd', 'e'}}});
  const Bytes f = vptest::read_file(dir.file("x.nii"));
  ASSERT_EQ(f.size(), 348u + 4 + 16 + 2);
  EXPECT_EQ(Bytes(f.begin() + 348, f.begin() + 352), (Bytes{1, 0, 0, 0}));
  EXPECT_EQ(vptest::field<std::int32_t>(f, 352, true), 16);  // esize
  EXPECT_EQ(vptest::field<std::int32_t>(f, 356, true), 6);   // ecode
  EXPECT_EQ(Bytes(f.begin() + 360, f.begin() + 368), (Bytes{'a', 'b', 'c', 'd', 'e', 0, 0, 0}));
  EXPECT_EQ(vptest::field<float>(f, 108, true), 368.0f);     // vox_offset
  EXPECT_EQ(Bytes(f.end() - 2, f.end()), (Bytes{9, 8}));
}

// A single file assembled by hand: header bytes (patched), then `rest`.
std::string craft(const vptest::TempDir& dir, const std::string& name, const NiftiHeader& h,
                  const Bytes& rest) {
  vptest::write_file(dir.file(name), vptest::concat({voxpipe::encode_nifti_header(h), rest}));
  return dir.file(name);
}

TEST(OpenNifti, MalformedExtensionsAreRefused) {
  vptest::TempDir dir;
  NiftiHeader h = vptest::make_header(1, DType::u8, {2});
  h.vox_offset = 400;
  Bytes ext(400 - 348, 0);
  ext[0] = 1;
  vptest::set_field<std::int32_t>(ext, 4, 4, vptest::kNativeBig);  // esize 4 < 8
  auto err = vptest::catch_error([&] { voxpipe::open_nifti(craft(dir, "x.nii", h, vptest::concat({ext, Bytes{1, 2}}))); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::format);
  EXPECT_EQ(err->field(), "extension esize");
  vptest::set_field<std::int32_t>(ext, 4, 64, vptest::kNativeBig);  // runs past vox_offset
  err = vptest::catch_error([&] { voxpipe::open_nifti(craft(dir, "y.nii", h, vptest::concat({ext, Bytes{1, 2}}))); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::format);
  EXPECT_EQ(err->field(), "extension esize");
}

TEST(OpenNifti, ExtensionLimitIsEnforced) {
  vptest::TempDir dir;
  vptest::write_image(dir, "x.nii", vptest::make_header(1, DType::u8, {2}), std::vector<std::uint8_t>{1, 2},
                      {{6, Bytes(1000, 'a')}});
  voxpipe::OpenOptions opts;
  opts.limits.max_extension_bytes = 512;
  EXPECT_VP_ERROR(voxpipe::open_nifti(dir.file("x.nii"), opts), ErrorCode::limit);
  opts.limits.max_extension_bytes = 1024;
  EXPECT_EQ(voxpipe::open_nifti(dir.file("x.nii"), opts).extensions.size(), 1u);
}

TEST(OpenNifti, ScalingFollowsNibabelsGetSlopeInter) {
  struct Case {
    double slope, inter;
    bool active;
    double want_slope, want_inter;
  };
  const Case cases[] = {
      {0, 5, false, 1, 0},             // slope 0: unscaled, inter ignored
      {NAN, 5, false, 1, 0},           // non-finite slope: unscaled
      {INFINITY, 0, false, 1, 0},
      {1, 0, false, 1, 0},
      {2, 0, true, 2, 0},
      {1, -1024, true, 1, -1024},
      {0.5, 3.25, true, 0.5, 3.25},
  };
  for (const Case& c : cases) {
    vptest::TempDir dir;
    NiftiHeader h = vptest::make_header(1, DType::i16, {2});
    h.scl_slope = c.slope;
    h.scl_inter = c.inter;
    const auto img = voxpipe::open_nifti(vptest::write_image(dir, "s.nii", h, std::vector<std::int16_t>{1, 2}));
    EXPECT_EQ(img.scaling.active(), c.active) << c.slope << " " << c.inter;
    EXPECT_EQ(img.scaling.slope, c.want_slope) << c.slope;
    EXPECT_EQ(img.scaling.inter, c.want_inter) << c.inter;
  }
  // A valid slope with a non-finite intercept is refused.
  vptest::TempDir dir;
  NiftiHeader h = vptest::make_header(2, DType::i16, {2});
  h.scl_slope = 2;
  h.scl_inter = NAN;
  auto err = vptest::catch_error([&] { voxpipe::open_nifti(vptest::write_image(dir, "s.nii", h, std::vector<std::int16_t>{1, 2})); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::format);
  EXPECT_EQ(err->field(), "scl_inter");
}

TEST(OpenNifti, ShapesIncludingNibabelsSpecialCases) {
  vptest::TempDir dir;
  // dim[0] = 0: shape (0,), no voxels.
  NiftiHeader h = vptest::make_header(1, DType::f32, {});
  auto img = voxpipe::open_nifti(vptest::write_image(dir, "z.nii", h, std::vector<float>{}));
  EXPECT_EQ(img.shape, (std::vector<std::int64_t>{0}));
  EXPECT_EQ(img.voxel_count(), 0u);
  // Trailing unit dimensions are kept as written.
  h = vptest::make_header(2, DType::f32, {3, 1, 1, 1});
  img = voxpipe::open_nifti(vptest::write_image(dir, "u.nii", h, std::vector<float>{1, 2, 3}));
  EXPECT_EQ(img.shape, (std::vector<std::int64_t>{3, 1, 1, 1}));
  // A zero-length axis.
  h = vptest::make_header(1, DType::f32, {4, 0, 2});
  img = voxpipe::open_nifti(vptest::write_image(dir, "e.nii", h, std::vector<float>{}));
  EXPECT_EQ(img.voxel_count(), 0u);
  // FreeSurfer's large vectors: dim (-1, 1, 1) with the length in glmin.
  h = vptest::make_header(1, DType::f32, {1, 1, 1});
  h.dim[1] = -1;
  h.glmin = 5;
  img = voxpipe::open_nifti(craft(dir, "fs.nii", h, vptest::concat({Bytes(4, 0), vptest::to_bytes(std::vector<float>{1, 2, 3, 4, 5}, false)})));
  EXPECT_EQ(img.shape, (std::vector<std::int64_t>{5, 1, 1}));
  h.glmin = 0;
  EXPECT_VP_ERROR(voxpipe::open_nifti(craft(dir, "fs0.nii", h, Bytes(4, 0))), ErrorCode::format);
  // FreeSurfer's ico7: (27307, 1, 6) means (163842, 1, 1).
  h = vptest::make_header(1, DType::u8, {27307, 1, 6, 2});
  img = voxpipe::open_nifti(craft(dir, "ico.nii", h, Bytes(4, 0)));
  EXPECT_EQ(img.shape, (std::vector<std::int64_t>{163842, 1, 1, 2}));
}

TEST(OpenNifti, NegativeOrHugeDimsAreRefused) {
  vptest::TempDir dir;
  NiftiHeader h = vptest::make_header(2, DType::f64, {4, 4, 4});
  h.dim[2] = -4;
  auto err = vptest::catch_error([&] { voxpipe::open_nifti(craft(dir, "n.nii", h, Bytes(4, 0))); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::format);
  EXPECT_EQ(err->field(), "dim[2]");
  h.dim = {7, 1 << 20, 1 << 20, 1 << 20, 1 << 20, 1, 1, 1};  // 2^80 voxels
  EXPECT_VP_ERROR(voxpipe::open_nifti(craft(dir, "h.nii", h, Bytes(4, 0))), ErrorCode::limit);
  h.dim = {3, 1000, 1000, 1000, 1, 1, 1, 1};
  voxpipe::OpenOptions small;
  small.limits.max_voxels = 999999999;
  EXPECT_VP_ERROR(voxpipe::open_nifti(craft(dir, "l.nii", h, Bytes(4, 0)), small), ErrorCode::limit);
  h.dim[0] = 8;  // more than 7 dimensions (in this byte order)
  auto e = vptest::catch_error([&] { voxpipe::open_nifti(craft(dir, "d.nii", h, Bytes(4, 0))); });
  ASSERT_TRUE(e);  // read in the other byte order, the header no longer makes sense
}

TEST(OpenNifti, WarningsNameTheFixedFields) {
  vptest::TempDir dir;
  NiftiHeader h = vptest::make_header(1, DType::i32, {2});
  h.bitpix = 0;
  h.pixdim[1] = 0;
  const auto img = voxpipe::open_nifti(vptest::write_image(dir, "w.nii", h, std::vector<std::int32_t>{1, 2}));
  ASSERT_EQ(img.warnings.size(), 2u);
  EXPECT_NE(img.warnings[0].find("bitpix"), std::string::npos);
  EXPECT_NE(img.warnings[1].find("pixdim"), std::string::npos);
  EXPECT_EQ(img.header.bitpix, 32);
  EXPECT_EQ(img.header.pixdim[1], 1.0);
}

TEST(OpenNifti, RefusalsCarryTheRightCode) {
  vptest::TempDir dir;
  EXPECT_VP_ERROR(voxpipe::open_nifti(dir.file("missing.nii")), ErrorCode::not_found);
  EXPECT_VP_ERROR(voxpipe::open_nifti(dir.file("missing.nii.gz")), ErrorCode::not_found);
  vptest::write_image(dir, "p.hdr", vptest::make_header(1, DType::u8, {2}), std::vector<std::uint8_t>{1, 2});
  std::filesystem::remove(dir.file("p.img"));
  {
    // As nibabel: a pair whose .img is gone opens (header only); its data cannot be read.
    const auto img = voxpipe::open_nifti(dir.file("p.hdr"));
    EXPECT_VP_ERROR(voxpipe::check_data_size(img), ErrorCode::not_found);
    std::vector<std::uint8_t> out(2);
    EXPECT_VP_ERROR(voxpipe::read_nifti_data(img, {}, {.type = DType::u8, .apply_scaling = false},
                                             std::as_writable_bytes(std::span(out))),
                    ErrorCode::not_found);
  }
  vptest::write_file(dir.file("t.txt"), Bytes(400, 'a'));
  EXPECT_VP_ERROR(voxpipe::open_nifti(dir.file("t.txt")), ErrorCode::format);
  EXPECT_VP_ERROR(voxpipe::open_nifti(dir.file("t.nii.bz2")), ErrorCode::unsupported);
  vptest::write_file(dir.file("empty.nii"), Bytes{});
  EXPECT_VP_ERROR(voxpipe::open_nifti(dir.file("empty.nii")), ErrorCode::format);
  vptest::write_file(dir.file("short.nii"), Bytes(100, 0));
  EXPECT_VP_ERROR(voxpipe::open_nifti(dir.file("short.nii")), ErrorCode::truncated);
  vptest::write_file(dir.file("text.nii"), vptest::text_bytes(600, 3));
  EXPECT_VP_ERROR(voxpipe::open_nifti(dir.file("text.nii")), ErrorCode::format);
  // A .gz name on a plain NIfTI file.
  vptest::write_image(dir, "plain.nii", vptest::make_header(1, DType::u8, {2}), std::vector<std::uint8_t>{1, 2});
  std::filesystem::rename(dir.file("plain.nii"), dir.file("plain.nii.gz"));
  auto err = vptest::catch_error([&] { voxpipe::open_nifti(dir.file("plain.nii.gz")); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::format);
  EXPECT_EQ(err->path(), dir.file("plain.nii.gz"));
}

TEST(OpenNifti, GzipNames) {
  for (const char* yes : {"a.nii.gz", "d/A.HDR.GZ", "x.img.gz", "b.Nii.Gz"})
    EXPECT_TRUE(voxpipe::nifti_is_gzip_name(yes)) << yes;
  for (const char* no : {"a.nii", "a.hdr", "a.gz", "a.tar.gz", "a.nii.bz2", "a.nii.zst", ""})
    EXPECT_FALSE(voxpipe::nifti_is_gzip_name(no)) << no;
}

TEST(OpenNifti, PairNames) {
  EXPECT_TRUE(voxpipe::nifti_is_pair_path("a.hdr"));
  EXPECT_TRUE(voxpipe::nifti_is_pair_path("a.IMG.gz"));
  EXPECT_FALSE(voxpipe::nifti_is_pair_path("a.nii"));
  EXPECT_FALSE(voxpipe::nifti_is_pair_path("a.nii.gz"));
  EXPECT_EQ(voxpipe::nifti_pair_partner("d/a.hdr"), "d/a.img");
  EXPECT_EQ(voxpipe::nifti_pair_partner("d/a.img"), "d/a.hdr");
  EXPECT_EQ(voxpipe::nifti_pair_partner("a.hdr.gz"), "a.img.gz");
  EXPECT_EQ(voxpipe::nifti_pair_partner("A.IMG"), "A.HDR");
  EXPECT_EQ(voxpipe::nifti_pair_partner("A.HDR.GZ"), "A.IMG.GZ");
  EXPECT_VP_ERROR(voxpipe::nifti_pair_partner("a.nii"), ErrorCode::invalid_argument);
  EXPECT_VP_ERROR(voxpipe::nifti_pair_partner("a.txt"), ErrorCode::format);
  const auto p = voxpipe::nifti::file_paths("x/b.img.gz");
  EXPECT_TRUE(p.pair);
  EXPECT_EQ(p.header, "x/b.hdr.gz");
  EXPECT_EQ(p.image, "x/b.img.gz");
  const auto s = voxpipe::nifti::file_paths("b.nii");
  EXPECT_FALSE(s.pair);
  EXPECT_EQ(s.header, "b.nii");
  EXPECT_EQ(s.image, "b.nii");
}

TEST(OpenNifti, FractionalVoxOffsetIsTruncated) {
  // nibabel's get_data_offset: int(vox_offset).
  vptest::TempDir dir;
  NiftiHeader h = vptest::make_header(1, DType::u8, {3});
  h.vox_offset = 356.75;
  const auto img = voxpipe::open_nifti(craft(dir, "f.nii", h, Bytes{0, 0, 0, 0, 0, 0, 0, 0, 7, 8, 9}));
  EXPECT_EQ(img.data_offset, 356u);
  EXPECT_EQ(vptest::read_as<std::uint8_t>(img, {}, {.type = DType::u8, .apply_scaling = false}),
            (std::vector<std::uint8_t>{7, 8, 9}));
}

}  // namespace
