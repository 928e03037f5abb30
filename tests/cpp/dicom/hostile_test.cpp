// Hostile and broken DICOM input: every truncation of a file with all the structures gives a
// clean voxpipe::Error or a consistent shorter dataset, lengths beyond the data are refused
// before anything is allocated, and nesting is limited.
#include <gtest/gtest.h>

#include "dicom/dicom_writer.hpp"
#include "test_support.hpp"
#include "voxpipe/dicom.hpp"

namespace {

using namespace voxpipe;
using vptest::DBytes;
using vptest::DicomWriter;

constexpr DicomTag kRows = 0x00280010, kPixelData = 0x7FE00010;

DBytes concat(DBytes a, const DBytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

DicomFile parse(const DBytes& b, const DicomReadOptions& o = {}) {
  return parse_dicom(b, "hostile.dcm", o);
}

// A file with a bit of everything: meta, a defined and an undefined sequence, an odd length,
// encapsulated pixel data.
DBytes everything(bool implicit) {
  DBytes file = vptest::part10_head(implicit ? vptest::kImplicitLE : vptest::kExplicitLE);
  DicomWriter w(implicit, false, file.size());
  w.text(0x00080060, "CS", "MR");
  w.text(0x00081030, "LO", "odd");
  DicomWriter item(implicit, false);
  item.us(kRows, 1);
  w.header(0x00081115, "SQ", static_cast<std::uint32_t>(8 + item.bytes().size()));
  w.item(static_cast<std::uint32_t>(item.bytes().size()));
  w.raw(item.bytes());
  w.header(0x00081140, "SQ", 0xFFFFFFFF);
  w.item(0xFFFFFFFF);
  w.us(0x00280011, 2);
  w.item_delimiter();
  w.sequence_delimiter();
  w.us(kRows, 3);
  w.header(kPixelData, "OB", 0xFFFFFFFF);
  w.item(4);
  w.u32(0);
  w.item(3);
  w.raw({1, 2, 3});
  w.sequence_delimiter();
  return concat(file, w.bytes());
}

TEST(DicomHostile, EveryTruncationIsACleanErrorOrAShorterDataset) {
  for (const bool implicit : {false, true}) {
    const DBytes full = everything(implicit);
    const DicomFile whole = parse(full);
    ASSERT_TRUE(whole.pixel_data);
    std::size_t errors = 0;
    for (std::size_t n = 0; n < full.size(); ++n) {
      const DBytes cut(full.begin(), full.begin() + static_cast<long>(n));
      try {
        const DicomFile f = parse(cut);
        // A cut at an element boundary is a valid, shorter file: what it has matches the whole.
        for (const auto& e : f.dataset.elements()) {
          const DicomElement* w = whole.dataset.find(e.tag);
          ASSERT_NE(w, nullptr) << n;
          EXPECT_EQ(e.value_offset, w->value_offset) << n;
        }
        EXPECT_FALSE(f.pixel_data) << n;
      } catch (const Error& e) {
        ++errors;
        EXPECT_TRUE(e.code() == ErrorCode::truncated || e.code() == ErrorCode::format)
            << n << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find("hostile.dcm"), std::string::npos);
      }
    }
    EXPECT_GT(errors, full.size() / 2);
  }
}

TEST(DicomHostile, TruncatedDeflatedDatasetEveryByte) {
  DicomWriter w;
  w.us(kRows, 3);
  w.text(0x00081030, "LO", "some text to compress");
  w.element(kPixelData, "OB", DBytes(40, 0));
  const DBytes head = vptest::part10_head(vptest::kDeflatedLE);
  const DBytes z = vptest::deflate_raw(w.bytes());
  for (std::size_t n = 0; n < z.size(); ++n) {
    const DBytes file = concat(head, DBytes(z.begin(), z.begin() + static_cast<long>(n)));
    const auto err = vptest::catch_error([&] { parse(file); });
    ASSERT_TRUE(err) << n;
    EXPECT_TRUE(err->code() == ErrorCode::truncated || err->code() == ErrorCode::corrupt) << n;
  }
}

TEST(DicomHostile, HugeValueLengthIsTruncatedWithoutAllocating) {
  DicomWriter w;
  w.header(0x00291010, "OB", 0xFFFFFFF0);
  w.raw(DBytes(16, 0));
  DicomReadOptions o;
  o.max_value_size = UINT64_MAX;  // would read it if it were there
  const auto err = vptest::catch_error([&] { parse(w.bytes(), o); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::truncated);
  EXPECT_EQ(err->field(), "(0029,1010)");
  EXPECT_EQ(err->offset(), 12u);
}

TEST(DicomHostile, HugeValueInADeflatedStreamIsReadOnlyAsFarAsItGoes) {
  DicomWriter w;
  w.header(0x00291010, "OB", 0xFFFFFFF0);
  w.raw(DBytes(16, 0));
  const DBytes file =
      concat(vptest::part10_head(vptest::kDeflatedLE), vptest::deflate_raw(w.bytes()));
  DicomReadOptions o;
  o.max_value_size = UINT64_MAX;
  EXPECT_VP_ERROR(parse(file, o), ErrorCode::truncated);
}

TEST(DicomHostile, ItemLongerThanItsSequence) {
  DicomWriter w;
  w.header(0x00081115, "SQ", 16);
  w.item(100);
  w.us(kRows, 1);
  w.raw(DBytes(200, 0));
  EXPECT_VP_ERROR(parse(w.bytes()), ErrorCode::format);
}

TEST(DicomHostile, ElementLongerThanItsItem) {
  DicomWriter item;
  item.text(0x00081030, "LO", "abcdef");
  DicomWriter w;
  w.header(0x00081115, "SQ", static_cast<std::uint32_t>(8 + item.bytes().size()));
  w.item(static_cast<std::uint32_t>(item.bytes().size() - 4));  // cuts the LO value
  w.raw(item.bytes());
  w.us(kRows, 1);
  EXPECT_VP_ERROR(parse(w.bytes()), ErrorCode::format);
}

TEST(DicomHostile, NotAnItemInsideASequence) {
  DicomWriter w;
  w.header(0x00081115, "SQ", 0xFFFFFFFF);
  w.us(kRows, 1);  // an element where an item should be
  w.sequence_delimiter();
  EXPECT_VP_ERROR(parse(w.bytes()), ErrorCode::format);
}

TEST(DicomHostile, UndefinedItemWithoutDelimiterIsTruncated) {
  DicomWriter w;
  w.header(0x00081115, "SQ", 0xFFFFFFFF);
  w.item(0xFFFFFFFF);
  w.us(kRows, 1);
  EXPECT_VP_ERROR(parse(w.bytes()), ErrorCode::truncated);
}

TEST(DicomHostile, DeepNestingHitsTheLimit) {
  DicomWriter w;
  for (int i = 0; i < 100; ++i) {
    w.header(0x00081115, "SQ", 0xFFFFFFFF);
    w.item(0xFFFFFFFF);
  }
  for (int i = 0; i < 100; ++i) {
    w.item_delimiter();
    w.sequence_delimiter();
  }
  EXPECT_VP_ERROR(parse(w.bytes()), ErrorCode::limit);
  DicomReadOptions o;
  o.max_depth = 128;
  EXPECT_EQ(parse(w.bytes(), o).dataset.items(0x00081115).size(), 1u);
}

TEST(DicomHostile, EncapsulatedPixelDataErrors) {
  {  // Basic Offset Table of 6 bytes
    DicomWriter w;
    w.us(kRows, 1);
    w.header(kPixelData, "OB", 0xFFFFFFFF);
    w.item(6);
    w.raw(DBytes(6, 0));
    w.sequence_delimiter();
    EXPECT_VP_ERROR(parse(w.bytes()), ErrorCode::format);
  }
  {  // a fragment of undefined length
    DicomWriter w;
    w.us(kRows, 1);
    w.header(kPixelData, "OB", 0xFFFFFFFF);
    w.item(0);
    w.item(0xFFFFFFFF);
    EXPECT_VP_ERROR(parse(w.bytes()), ErrorCode::format);
  }
  {  // a fragment longer than the file
    DicomWriter w;
    w.us(kRows, 1);
    w.header(kPixelData, "OB", 0xFFFFFFFF);
    w.item(0);
    w.item(0x7FFFFFFF);
    w.raw(DBytes(10, 0));
    EXPECT_VP_ERROR(parse(w.bytes()), ErrorCode::truncated);
  }
  {  // no sequence delimiter
    DicomWriter w;
    w.us(kRows, 1);
    w.header(kPixelData, "OB", 0xFFFFFFFF);
    w.item(0);
    w.item(2);
    w.raw({1, 2});
    EXPECT_VP_ERROR(parse(w.bytes()), ErrorCode::truncated);
  }
  {  // something else than an item
    DicomWriter w;
    w.us(kRows, 1);
    w.header(kPixelData, "OB", 0xFFFFFFFF);
    w.us(kRows, 1);
    EXPECT_VP_ERROR(parse(w.bytes()), ErrorCode::format);
  }
}

TEST(DicomHostile, RandomBytesAfterAValidStartNeverCrash) {
  DicomWriter w;
  w.us(kRows, 1);
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const DBytes file = concat(w.bytes(), vptest::random_bytes(64 + seed % 200, seed));
    try {
      parse(file);
    } catch (const Error&) {
    }
  }
}

}  // namespace
