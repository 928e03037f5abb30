// NIfTI-1/2 header encoding and parsing: round trips in both byte orders, byte-order guessing,
// nibabel's load-time fixes, and the refusals with their error codes, fields and offsets.
#include <limits>

#include "nifti/nifti_support.hpp"

namespace {

using voxpipe::ErrorCode;
using voxpipe::NiftiHeader;
using vptest::Bytes;
using vptest::field;

struct Layout {
  int version;
  bool big;
};
const Layout kLayouts[] = {{1, false}, {1, true}, {2, false}, {2, true}};

std::string name(Layout l) {
  return "NIfTI-" + std::to_string(l.version) + (l.big ? " big-endian" : " little-endian");
}

voxpipe::ParsedHeader parse(const Bytes& b) { return voxpipe::parse_nifti_header(b, "h.nii"); }

TEST(NiftiHeader, EncodeParseRoundTripInBothVersionsAndByteOrders) {
  for (Layout l : kLayouts) {
    SCOPED_TRACE(name(l));
    const NiftiHeader h = vptest::full_header(l.version, l.big);
    const Bytes b = voxpipe::encode_nifti_header(h);
    ASSERT_EQ(b.size(), l.version == 2 ? 540u : 348u);
    const auto parsed = parse(b);
    EXPECT_TRUE(parsed.warnings.empty()) << parsed.warnings.front();
    vptest::expect_same_header(parsed.header, h);
    EXPECT_EQ(voxpipe::encode_nifti_header(parsed.header), b);
  }
}

TEST(NiftiHeader, Nifti1FieldsSitAtTheirOffsets) {
  for (bool big : {false, true}) {
    const NiftiHeader h = vptest::full_header(1, big);
    const Bytes b = voxpipe::encode_nifti_header(h);
    EXPECT_EQ(field<std::int32_t>(b, 0, big), 348);
    EXPECT_EQ(field<std::int16_t>(b, 40, big), 4);       // dim[0]
    EXPECT_EQ(field<std::int16_t>(b, 42, big), 5);       // dim[1]
    EXPECT_EQ(field<std::int16_t>(b, 48, big), 2);       // dim[4]
    EXPECT_EQ(field<float>(b, 56, big), 1.5f);           // intent_p1
    EXPECT_EQ(field<std::int16_t>(b, 68, big), 1002);    // intent_code
    EXPECT_EQ(field<std::int16_t>(b, 70, big), 4);       // datatype int16
    EXPECT_EQ(field<std::int16_t>(b, 72, big), 16);      // bitpix
    EXPECT_EQ(field<float>(b, 76, big), -1.0f);          // pixdim[0] = qfac
    EXPECT_EQ(field<float>(b, 84, big), 2.0f);           // pixdim[2]
    EXPECT_EQ(field<float>(b, 108, big), 352.0f);        // vox_offset
    EXPECT_EQ(field<float>(b, 112, big), 2.0f);          // scl_slope
    EXPECT_EQ(field<float>(b, 116, big), -3.5f);         // scl_inter
    EXPECT_EQ(b[122], 3);                                // slice_code
    EXPECT_EQ(b[123], 10);                               // xyzt_units
    EXPECT_EQ(field<std::int32_t>(b, 144, big), -12);    // glmin
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()) + 148), "a test header");
    EXPECT_EQ(field<std::int16_t>(b, 252, big), 1);      // qform_code
    EXPECT_EQ(field<std::int16_t>(b, 254, big), 4);      // sform_code
    EXPECT_EQ(field<float>(b, 260, big), 0.5f);          // quatern_c
    EXPECT_EQ(field<float>(b, 268, big), -90.0f);        // qoffset_x
    EXPECT_EQ(field<float>(b, 280, big), -1.5f);         // srow_x[0]
    EXPECT_EQ(field<float>(b, 308, big), -126.0f);       // srow_y[3]
    EXPECT_EQ(field<float>(b, 320, big), 2.5f);          // srow_z[2]
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()) + 328), "intent");
    EXPECT_EQ(Bytes(b.begin() + 344, b.end()), (Bytes{'n', '+', '1', 0}));
  }
}

TEST(NiftiHeader, Nifti2FieldsSitAtTheirOffsets) {
  for (bool big : {false, true}) {
    const NiftiHeader h = vptest::full_header(2, big);
    const Bytes b = voxpipe::encode_nifti_header(h);
    EXPECT_EQ(field<std::int32_t>(b, 0, big), 540);
    EXPECT_EQ(Bytes(b.begin() + 4, b.begin() + 12), (Bytes{'n', '+', '2', 0, 13, 10, 26, 10}));
    EXPECT_EQ(field<std::int16_t>(b, 12, big), 4);       // datatype
    EXPECT_EQ(field<std::int16_t>(b, 14, big), 16);      // bitpix
    EXPECT_EQ(field<std::int64_t>(b, 16, big), 4);       // dim[0]
    EXPECT_EQ(field<std::int64_t>(b, 24, big), 5);       // dim[1]
    EXPECT_EQ(field<double>(b, 80, big), 1.5);           // intent_p1
    EXPECT_EQ(field<double>(b, 104, big), -1.0);         // pixdim[0]
    EXPECT_EQ(field<double>(b, 112, big), 1.5);          // pixdim[1]
    EXPECT_EQ(field<std::int64_t>(b, 168, big), 544);    // vox_offset
    EXPECT_EQ(field<double>(b, 176, big), 2.0);          // scl_slope
    EXPECT_EQ(field<double>(b, 184, big), -3.5);         // scl_inter
    EXPECT_EQ(field<std::int64_t>(b, 224, big), 1);      // slice_start
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()) + 240), "a test header");
    EXPECT_EQ(field<std::int32_t>(b, 344, big), 1);      // qform_code
    EXPECT_EQ(field<std::int32_t>(b, 348, big), 4);      // sform_code
    EXPECT_EQ(field<double>(b, 360, big), 0.5);          // quatern_c
    EXPECT_EQ(field<double>(b, 400, big), -1.5);         // srow_x[0]
    EXPECT_EQ(field<double>(b, 480, big), 2.5);          // srow_z[2]
    EXPECT_EQ(field<std::int32_t>(b, 496, big), 3);      // slice_code
    EXPECT_EQ(field<std::int32_t>(b, 500, big), 10);     // xyzt_units
    EXPECT_EQ(field<std::int32_t>(b, 504, big), 1002);   // intent_code
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()) + 508), "intent");
    EXPECT_EQ(b[524], 57);                               // dim_info
  }
}

TEST(NiftiHeader, Nifti2VoxOffsetSurvivesReencoding) {
  // NIfTI-2 stores vox_offset as int64; the header keeps it as a double. Values up to 2^53
  // must come back exactly, larger ones as the nearest int64, never wrapped to a negative
  // offset (static_cast of 2^63 to int64 is undefined behaviour; x86 gives INT64_MIN).
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  for (std::int64_t off : {std::int64_t{544}, std::int64_t{1} << 40, (std::int64_t{1} << 53) + 16,
                           std::int64_t{1} << 62, max - 15, max}) {
    for (bool big : {false, true}) {
      Bytes b = voxpipe::encode_nifti_header(vptest::make_header(2, voxpipe::DType::u8, {4}, big));
      vptest::set_field<std::int64_t>(b, 168, off, big);
      const auto p = parse(b);
      const auto again = voxpipe::encode_nifti_header(p.header);
      const auto got = field<std::int64_t>(again, 168, big);
      if (off <= (std::int64_t{1} << 53))
        EXPECT_EQ(got, off);
      else
        EXPECT_GE(got, off - (off >> 52)) << "vox_offset " << off << " re-encoded as " << got;
    }
  }
}

TEST(NiftiHeader, ByteOrderIsGuessedFromDim0) {
  for (Layout l : kLayouts) {
    SCOPED_TRACE(name(l));
    EXPECT_EQ(parse(voxpipe::encode_nifti_header(vptest::full_header(l.version, l.big))).header.big_endian, l.big);
  }
  // dim[0] outside 1..7 in the machine's order means the other byte order (nibabel's
  // guessed_endian), even when sizeof_hdr reads correctly.
  for (int version : {1, 2}) {
    NiftiHeader h = vptest::make_header(version, voxpipe::DType::u8, {2, 2}, vptest::kNativeBig);
    h.dim[0] = version == 1 ? 0x0300 : std::int64_t{3} << 56;  // 3 in the other order
    const NiftiHeader decoded =
        voxpipe::decode_nifti_header(voxpipe::encode_nifti_header(h), "h.nii");
    EXPECT_EQ(decoded.big_endian, !vptest::kNativeBig) << "version " << version;
    EXPECT_EQ(decoded.dim[0], 3);
  }
}

// A dim[0] outside 0..7 in both byte orders makes every other field unreadable: the error names
// dim[0], not the first field that the guessed byte order garbles (vox_offset, datatype).
TEST(NiftiHeader, Dim0OutOfRangeInBothOrdersIsNamed) {
  for (int version : {1, 2}) {
    for (std::int64_t dim0 : {8, -1, 300}) {
      SCOPED_TRACE("version " + std::to_string(version) + " dim0 " + std::to_string(dim0));
      for (bool big : {false, true}) {
        NiftiHeader h = vptest::make_header(version, voxpipe::DType::f32, {2, 2}, big);
        h.dim[0] = dim0;
        h.vox_offset = version == 1 ? 352 : 544;
        const auto e = vptest::catch_error([&] { parse(voxpipe::encode_nifti_header(h)); });
        ASSERT_TRUE(e);
        EXPECT_EQ(e->code(), ErrorCode::format);
        EXPECT_EQ(e->field(), "dim[0]");
        EXPECT_EQ(e->offset(), std::optional<std::uint64_t>(version == 1 ? 40 : 16));
        EXPECT_NE(e->detail().find("expected 0 to 7 dimensions"), std::string::npos) << e->what();
      }
    }
  }
}

TEST(NiftiHeader, ByteOrderFromSizeofHdrWhenDim0IsZero) {
  for (Layout l : kLayouts) {
    SCOPED_TRACE(name(l));
    NiftiHeader h = vptest::make_header(l.version, voxpipe::DType::f32, {}, l.big);
    h.dim[0] = 0;
    const auto p = parse(voxpipe::encode_nifti_header(h));
    EXPECT_EQ(p.header.big_endian, l.big);
    EXPECT_EQ(p.header.dim[0], 0);
  }
  // NIfTI-1 with dim[0] 0 and a sizeof_hdr that is wrong in both orders: native is assumed.
  // (uint8's code 2 read in the wrong order is 512, uint16, so the rest still parses.)
  NiftiHeader h = vptest::make_header(1, voxpipe::DType::u8, {}, !vptest::kNativeBig);
  h.dim[0] = 0;
  h.sizeof_hdr = 1000;
  const auto p = parse(voxpipe::encode_nifti_header(h));
  EXPECT_EQ(p.header.big_endian, vptest::kNativeBig);
}

TEST(NiftiHeader, Nifti1MagicWinsOverNifti2SizeofHdr) {
  NiftiHeader h = vptest::make_header(1, voxpipe::DType::u8, {2, 3});
  h.sizeof_hdr = 540;
  const auto p = parse(voxpipe::encode_nifti_header(h));
  EXPECT_EQ(p.header.version, 1);
  EXPECT_EQ(p.header.sizeof_hdr, 348);  // fixed
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_NE(p.warnings[0].find("sizeof_hdr"), std::string::npos);
}

// Parses h after `patch` changed its raw bytes; returns the parse result.
template <class Patch>
voxpipe::ParsedHeader parse_patched(const NiftiHeader& h, Patch patch) {
  Bytes b = voxpipe::encode_nifti_header(h);
  patch(b);
  return parse(b);
}

bool has_warning(const voxpipe::ParsedHeader& p, const std::string& word) {
  for (const auto& w : p.warnings)
    if (w.find(word) != std::string::npos) return true;
  return false;
}

TEST(NiftiHeader, FixesSizeofHdr) {
  NiftiHeader h = vptest::make_header(1, voxpipe::DType::u8, {2, 3}, true);
  h.sizeof_hdr = 350;
  const auto p = parse(voxpipe::encode_nifti_header(h));
  EXPECT_EQ(p.header.sizeof_hdr, 348);
  EXPECT_TRUE(has_warning(p, "sizeof_hdr"));
}

TEST(NiftiHeader, FixesBitpix) {
  for (int version : {1, 2}) {
    NiftiHeader h = vptest::make_header(version, voxpipe::DType::c128, {2, 3});
    h.bitpix = 0;
    const auto p = parse(voxpipe::encode_nifti_header(h));
    EXPECT_EQ(p.header.bitpix, 128);
    EXPECT_TRUE(has_warning(p, "bitpix"));
    h.bitpix = 64;
    EXPECT_EQ(parse(voxpipe::encode_nifti_header(h)).header.bitpix, 128);
  }
}

TEST(NiftiHeader, FixesZeroAndNegativePixdim) {
  for (int version : {1, 2}) {
    NiftiHeader h = vptest::make_header(version, voxpipe::DType::u8, {2, 3, 4});
    h.pixdim = {1, 0, -2.5, 3, -4, 0, 1, 1};
    const auto p = parse(voxpipe::encode_nifti_header(h));
    // Only pixdim[1..3] are fixed: zeros become 1, negatives their absolute value.
    EXPECT_EQ(p.header.pixdim, (std::array<double, 8>{1, 1, 2.5, 3, -4, 0, 1, 1}));
    EXPECT_TRUE(has_warning(p, "pixdim[1,2,3]"));
  }
}

TEST(NiftiHeader, FixesQfac) {
  for (double qfac : {0.0, 2.0, -0.5}) {
    NiftiHeader h = vptest::make_header(1, voxpipe::DType::u8, {2, 3});
    h.pixdim[0] = qfac;
    const auto p = parse(voxpipe::encode_nifti_header(h));
    EXPECT_EQ(p.header.pixdim[0], 1.0) << qfac;
    EXPECT_TRUE(has_warning(p, "qfac"));
  }
  NiftiHeader h = vptest::make_header(2, voxpipe::DType::u8, {2, 3});
  h.pixdim[0] = -1.0;
  const auto p = parse(voxpipe::encode_nifti_header(h));
  EXPECT_EQ(p.header.pixdim[0], -1.0);
  EXPECT_TRUE(p.warnings.empty());
}

TEST(NiftiHeader, FixesQformAndSformCodes) {
  for (int version : {1, 2}) {
    NiftiHeader h = vptest::make_header(version, voxpipe::DType::u8, {2, 3});
    h.qform_code = 6;
    h.sform_code = -1;
    auto p = parse(voxpipe::encode_nifti_header(h));
    EXPECT_EQ(p.header.qform_code, 0);
    EXPECT_EQ(p.header.sform_code, 0);
    EXPECT_TRUE(has_warning(p, "qform_code"));
    EXPECT_TRUE(has_warning(p, "sform_code"));
    h.qform_code = 5;  // NIFTI_XFORM_TEMPLATE_OTHER is valid
    h.sform_code = 3;
    p = parse(voxpipe::encode_nifti_header(h));
    EXPECT_EQ(p.header.qform_code, 5);
    EXPECT_EQ(p.header.sform_code, 3);
    EXPECT_TRUE(p.warnings.empty());
  }
}

TEST(NiftiHeader, WarnsOnVoxOffsetNotDivisibleBy16) {
  NiftiHeader h = vptest::make_header(1, voxpipe::DType::u8, {2, 3});
  h.vox_offset = 360;
  auto p = parse(voxpipe::encode_nifti_header(h));
  EXPECT_TRUE(has_warning(p, "vox_offset"));
  EXPECT_EQ(p.header.vox_offset, 360.0);
  h.vox_offset = 352.5;  // NIfTI-1 stores a float: the fraction is kept
  p = parse(voxpipe::encode_nifti_header(h));
  EXPECT_EQ(p.header.vox_offset, 352.5);
}

TEST(NiftiHeader, Nifti2EolCheckZerosAreFixed) {
  NiftiHeader h = vptest::make_header(2, voxpipe::DType::u8, {2, 3});
  h.eol_check = {0, 0, 0, 0};
  const auto p = parse(voxpipe::encode_nifti_header(h));
  EXPECT_EQ(p.header.eol_check, (std::array<std::uint8_t, 4>{13, 10, 26, 10}));
  EXPECT_TRUE(has_warning(p, "eol_check"));
}

// The error parse_nifti_header throws for `b`.
voxpipe::Error parse_error(const Bytes& b) {
  auto err = vptest::catch_error([&] { parse(b); });
  if (!err) throw std::runtime_error("parse_nifti_header accepted the header");
  return *err;
}

TEST(NiftiHeader, RefusesBadMagic) {
  for (bool big : {false, true}) {
    NiftiHeader h = vptest::make_header(1, voxpipe::DType::u8, {2, 3}, big);
    for (const char* magic : {"n+3", "nx1", "ni1x", "N+1", ""}) {
      h.magic = vptest::chars<4>(magic);
      const auto e = parse_error(voxpipe::encode_nifti_header(h));
      EXPECT_EQ(e.code(), ErrorCode::format) << magic;
      EXPECT_EQ(e.field(), "magic") << magic;
      EXPECT_EQ(e.path(), "h.nii");
      EXPECT_EQ(e.offset(), std::optional<std::uint64_t>(344)) << magic;
    }
    // NIfTI-2 is recognised by sizeof_hdr; its magic must then be ni2/n+2.
    NiftiHeader h2 = vptest::make_header(2, voxpipe::DType::u8, {2, 3}, big);
    h2.magic = vptest::chars<4>("n+1");
    const auto e = parse_error(voxpipe::encode_nifti_header(h2));
    EXPECT_EQ(e.code(), ErrorCode::format);
    EXPECT_EQ(e.field(), "magic");
    EXPECT_EQ(e.offset(), std::optional<std::uint64_t>(4));
  }
  // Not NIfTI at all.
  const auto e = parse_error(vptest::text_bytes(600, 1));
  EXPECT_EQ(e.code(), ErrorCode::format);
  EXPECT_EQ(e.field(), "magic");
}

TEST(NiftiHeader, RefusesDatatypesNibabelDoesNotRead) {
  for (int version : {1, 2}) {
    for (int code : {0, 1, 255, 1536, 2048}) {
      NiftiHeader h = vptest::make_header(version, voxpipe::DType::u8, {2, 3});
      h.datatype = static_cast<std::int16_t>(code);
      const auto e = parse_error(voxpipe::encode_nifti_header(h));
      EXPECT_EQ(e.code(), ErrorCode::unsupported) << code;
      EXPECT_EQ(e.field(), "datatype");
      EXPECT_EQ(e.offset(), std::optional<std::uint64_t>(version == 2 ? 12 : 70));
    }
  }
}

TEST(NiftiHeader, RefusesUnknownDatatypeAsFormat) {
  // A code that is no NIfTI datatype at all is a bad header field (ErrorCode::format), unlike
  // the real NIfTI types nibabel cannot read (ErrorCode::unsupported, above).
  for (int version : {1, 2}) {
    for (int code : {3, 17, 32767, -1}) {
      NiftiHeader h = vptest::make_header(version, voxpipe::DType::u8, {2, 3});
      h.datatype = static_cast<std::int16_t>(code);
      const auto e = parse_error(voxpipe::encode_nifti_header(h));
      EXPECT_EQ(e.code(), ErrorCode::format) << code << ": " << e.what();
      EXPECT_EQ(e.field(), "datatype");
    }
  }
}

TEST(NiftiHeader, DatatypeIsCheckedBeforeMagic) {
  // nibabel's check order: sizeof_hdr, datatype, bitpix, pixdim, qfac, magic, offset, codes.
  NiftiHeader h = vptest::make_header(2, voxpipe::DType::u8, {2, 3});
  h.datatype = 1536;
  h.magic = vptest::chars<4>("xyz");
  EXPECT_EQ(parse_error(voxpipe::encode_nifti_header(h)).field(), "datatype");
}

TEST(NiftiHeader, RefusesLowVoxOffsetForSingleFilesOnly) {
  for (int version : {1, 2}) {
    const double min = version == 2 ? 544 : 352;
    NiftiHeader h = vptest::make_header(version, voxpipe::DType::u8, {2, 3});
    for (double off : {1.0, 100.0, min - 1}) {
      h.vox_offset = off;
      const auto e = parse_error(voxpipe::encode_nifti_header(h));
      EXPECT_EQ(e.code(), ErrorCode::format) << off;
      EXPECT_EQ(e.field(), "vox_offset");
      EXPECT_EQ(e.offset(), std::optional<std::uint64_t>(version == 2 ? 168 : 108));
    }
    for (double off : {0.0, min, min + 16}) {
      h.vox_offset = off;
      EXPECT_EQ(parse(voxpipe::encode_nifti_header(h)).header.vox_offset, off);
    }
    // A pair header (ni1/ni2) may put the data anywhere in the .img.
    h.magic = {'n', 'i', version == 2 ? '2' : '1', 0};
    h.vox_offset = 16;
    const auto p = parse(voxpipe::encode_nifti_header(h));
    EXPECT_EQ(p.header.vox_offset, 16.0);
    EXPECT_FALSE(p.header.single_file());
  }
}

TEST(NiftiHeader, RefusesCorruptNifti2EolCheck) {
  NiftiHeader h = vptest::make_header(2, voxpipe::DType::u8, {2, 3}, true);
  h.eol_check = {13, 10, 10, 10};  // what a text-mode transfer does to \r\n\x1a\n
  const auto e = parse_error(voxpipe::encode_nifti_header(h));
  EXPECT_EQ(e.code(), ErrorCode::format);
  EXPECT_EQ(e.field(), "eol_check");
  EXPECT_EQ(e.offset(), std::optional<std::uint64_t>(8));
}

TEST(NiftiHeader, RefusesShortBlocks) {
  const Bytes b1 = voxpipe::encode_nifti_header(vptest::make_header(1, voxpipe::DType::u8, {2}));
  EXPECT_VP_ERROR(parse(Bytes(b1.begin(), b1.begin() + 347)), ErrorCode::truncated);
  EXPECT_VP_ERROR(parse(Bytes{}), ErrorCode::truncated);
  const Bytes b2 = voxpipe::encode_nifti_header(vptest::make_header(2, voxpipe::DType::u8, {2}));
  EXPECT_VP_ERROR(parse(Bytes(b2.begin(), b2.begin() + 539)), ErrorCode::truncated);
  EXPECT_VP_ERROR(parse(Bytes(b2.begin(), b2.begin() + 348)), ErrorCode::truncated);
  // Extra bytes after the header are ignored.
  Bytes longer = b1;
  longer.resize(1000, 0xEE);
  EXPECT_EQ(parse(longer).header.dim[1], 2);
}

}  // namespace
