// The DICOM parser on hand-built files: every encoding, files with and without preamble and
// meta group, sequences and items of defined and undefined length, UN and private sequences,
// odd lengths, and the pixel data location (native, encapsulated, float, deflated).
#include <gtest/gtest.h>

#include "dicom/dicom_writer.hpp"
#include "test_support.hpp"
#include "voxpipe/dicom.hpp"

namespace {

using namespace voxpipe;
using vptest::DBytes;
using vptest::DicomWriter;

constexpr DicomTag kRows = 0x00280010, kColumns = 0x00280011, kModality = 0x00080060;
constexpr DicomTag kPixelData = 0x7FE00010;

DBytes concat(DBytes a, const DBytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

DicomFile parse(const DBytes& b, const DicomReadOptions& o = {}) {
  return parse_dicom(b, "test.dcm", o);
}

TEST(DicomParser, ExplicitLittleEndianWithPreambleAndMeta) {
  DBytes file = vptest::part10_head(vptest::kExplicitLE);
  DicomWriter w(false, false, file.size());
  const auto modality_at = w.text(kModality, "CS", "MR");
  const auto rows_at = w.us(kRows, 64);
  w.us(kColumns, 32);
  const auto pixels_at = w.element(kPixelData, "OW", DBytes(64 * 32 * 2, 7));
  const std::size_t dataset_offset = file.size();
  file = concat(file, w.bytes());

  const DicomFile f = parse(file);
  EXPECT_TRUE(f.has_preamble);
  EXPECT_EQ(f.transfer_syntax.uid, vptest::kExplicitLE);
  EXPECT_FALSE(f.implicit_vr);
  EXPECT_FALSE(f.big_endian);
  EXPECT_EQ(f.dataset_offset, dataset_offset);
  EXPECT_EQ(f.meta.uid(0x00020010), vptest::kExplicitLE);
  EXPECT_EQ(f.meta.elements().size(), 5u);
  ASSERT_NE(f.dataset.find(kModality), nullptr);
  EXPECT_EQ(f.dataset.find(kModality)->value_offset, modality_at);
  EXPECT_EQ(f.dataset.string(kModality), "MR");
  EXPECT_EQ(f.dataset.find(kRows)->value_offset, rows_at);
  EXPECT_EQ(f.dataset.find(kRows)->vr, DicomVR::US);
  EXPECT_EQ(f.dataset.integer(kRows), 64);
  EXPECT_EQ(f.dataset.integer(kColumns), 32);
  ASSERT_TRUE(f.pixel_data);
  EXPECT_EQ(f.pixel_data->offset, pixels_at);
  EXPECT_EQ(f.pixel_data->length, 64u * 32 * 2);
  EXPECT_FALSE(f.pixel_data->encapsulated);
  EXPECT_EQ(f.pixel_data->vr, DicomVR::OW);
  // The pixel element is listed, its value not read.
  ASSERT_NE(f.dataset.find(kPixelData), nullptr);
  EXPECT_FALSE(f.dataset.find(kPixelData)->value_read);
}

TEST(DicomParser, ImplicitVrTakesVrsFromTheDictionaryAndPydicomRules) {
  DBytes file = vptest::part10_head(vptest::kImplicitLE);
  DicomWriter w(true, false, file.size());
  w.us(0x00080000, 4);                   // public group length: UL
  w.text(0x00080002, "LO", "none");      // public, not in the standard: UN
  w.us(0x00090000, 4);                   // private group length: UN (pydicom 3)
  w.text(0x00090010, "LO", "ACME 1.0");  // private creator: LO
  w.text(0x00091001, "UN", "abcd");      // private: UN
  w.text(0x00100030, "DA", "19700101");  // PatientBirthDate: DA
  w.text(0x00180010, "LO", "Gd");        // ContrastBolusAgent: LO
  w.text(0x00180050, "DS", "1.5 ");      // SliceThickness: DS
  w.text(0x00321060, "LO", "Brain");     // RequestedProcedureDescription: LO
  w.us(kRows, 3);
  const auto px = w.element(kPixelData, "OW", DBytes(6, 1));
  file = concat(file, w.bytes());

  const DicomFile f = parse(file);
  EXPECT_TRUE(f.implicit_vr);
  const auto vr = [&](DicomTag t) { return f.dataset.find(t)->vr; };
  EXPECT_EQ(vr(0x00080000), DicomVR::UL);
  EXPECT_EQ(vr(0x00080002), DicomVR::UN);
  EXPECT_EQ(vr(0x00090000), DicomVR::UN);
  EXPECT_EQ(vr(0x00090010), DicomVR::LO);
  EXPECT_EQ(vr(0x00091001), DicomVR::UN);
  EXPECT_EQ(vr(0x00100030), DicomVR::DA);
  EXPECT_EQ(vr(0x00180010), DicomVR::LO);
  EXPECT_EQ(vr(0x00180050), DicomVR::DS);
  EXPECT_EQ(vr(0x00321060), DicomVR::LO);
  EXPECT_EQ(vr(kRows), DicomVR::US);
  EXPECT_EQ(vr(kPixelData), DicomVR::OW);  // "OB or OW": OW in implicit VR
  EXPECT_FALSE(f.dataset.find(kRows)->explicit_vr);
  EXPECT_EQ(f.dataset.number(0x00180050), 1.5);
  EXPECT_EQ(f.dataset.string(0x00090010), "ACME 1.0");
  EXPECT_EQ(f.dataset.string(0x00180010), "Gd");
  EXPECT_EQ(f.dataset.string(0x00321060), "Brain");
  EXPECT_EQ(f.pixel_data->offset, px);
}

TEST(DicomParser, ImplicitVrRepeatingGroupsTakeTheirVrs) {
  DicomWriter w(true, false);
  w.us(0x50020010, 7);                          // NumberOfPoints of curve 5002: US
  w.text(0x50020022, "LO", "ECG");              // CurveDescription: LO
  w.element(0x50023000, "OW", DBytes(4, 2));    // CurveData, "OB or OW": OW
  w.us(0x60040010, 8);                          // OverlayRows of overlay 6004: US
  w.element(0x7F020010, "OW", DBytes(2, 3));    // VariablePixelData, "OB or OW": OW
  const DicomFile f = parse(concat(vptest::meta_group(vptest::kImplicitLE, 0), w.bytes()));
  const auto vr = [&](DicomTag t) { return f.dataset.find(t)->vr; };
  EXPECT_EQ(vr(0x50020010), DicomVR::US);
  EXPECT_EQ(f.dataset.integer(0x50020010), 7);
  EXPECT_EQ(vr(0x50020022), DicomVR::LO);
  EXPECT_EQ(f.dataset.string(0x50020022), "ECG");
  EXPECT_EQ(vr(0x50023000), DicomVR::OW);
  EXPECT_EQ(vr(0x60040010), DicomVR::US);
  EXPECT_EQ(vr(0x7F020010), DicomVR::OW);
}

TEST(DicomParser, ExplicitBigEndian) {
  DBytes file = vptest::part10_head(vptest::kExplicitBE);
  DicomWriter w(false, true, file.size());
  w.us(kRows, 0x0102);
  DicomWriter fl(false, true);
  fl.u32(0x3FC00000);  // 1.5f
  w.element(0x00181314, "DS", {'2', '0'});
  w.element(0x00280030, "DS", {'0', '.', '5', '\\', '0', '.', '2', '5'});
  w.element(0x00189087, "FD", {0x40, 0x09, 0x21, 0xFB, 0x54, 0x44, 0x2D, 0x18});  // pi
  w.element(0x00281053, "FL", fl.bytes());
  const auto px = w.element(kPixelData, "OW", DBytes(4, 0));
  file = concat(file, w.bytes());

  const DicomFile f = parse(file);
  EXPECT_TRUE(f.big_endian);
  EXPECT_TRUE(f.transfer_syntax.big_endian);
  EXPECT_EQ(f.dataset.integer(kRows), 0x0102);
  EXPECT_EQ(f.dataset.numbers(0x00280030), (std::vector<double>{0.5, 0.25}));
  EXPECT_DOUBLE_EQ(*f.dataset.number(0x00189087), 3.141592653589793);
  EXPECT_EQ(f.dataset.number(0x00281053), 1.5);
  EXPECT_EQ(f.pixel_data->offset, px);
  EXPECT_EQ(f.pixel_data->length, 4u);
}

TEST(DicomParser, DeflatedOffsetsAreInTheInflatedStream) {
  const DBytes head = vptest::part10_head(vptest::kDeflatedLE);
  DicomWriter w(false, false, 0);  // offsets from 0: the inflated stream
  const auto rows_at = w.us(kRows, 9);
  const auto px = w.element(kPixelData, "OB", DBytes(100, 3));
  const DBytes file = concat(head, vptest::deflate_raw(w.bytes()));

  const DicomFile f = parse(file);
  EXPECT_TRUE(f.transfer_syntax.deflated);
  EXPECT_TRUE(f.offsets_in_inflated_stream);
  EXPECT_EQ(f.dataset_offset, head.size());
  EXPECT_EQ(f.dataset.find(kRows)->value_offset, rows_at);
  EXPECT_EQ(f.dataset.integer(kRows), 9);
  EXPECT_EQ(f.pixel_data->offset, px);
  EXPECT_EQ(f.pixel_data->length, 100u);
}

TEST(DicomParser, DeflatedStreamThatIsNotDeflateIsCorrupt) {
  DBytes file = vptest::part10_head(vptest::kDeflatedLE);
  file.insert(file.end(), {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF});
  EXPECT_VP_ERROR(parse(file), ErrorCode::corrupt);
}

TEST(DicomParser, DeflatedStreamCutShortIsTruncated) {
  DicomWriter w;
  w.us(kRows, 9);
  w.element(0x00081030, "LO", DBytes(2000, 'x'));
  const DBytes z = vptest::deflate_raw(w.bytes());
  const DBytes file = concat(vptest::part10_head(vptest::kDeflatedLE),
                             DBytes(z.begin(), z.begin() + static_cast<long>(z.size() / 2)));
  EXPECT_VP_ERROR(parse(file), ErrorCode::truncated);
}

TEST(DicomParser, DeflatedOutputLimit) {
  DicomWriter w;
  w.element(0x00081030, "OB", DBytes(100000, 0));
  const DBytes file =
      concat(vptest::part10_head(vptest::kDeflatedLE), vptest::deflate_raw(w.bytes()));
  DicomReadOptions o;
  o.max_inflated_size = 50000;
  EXPECT_VP_ERROR(parse(file, o), ErrorCode::limit);
}

TEST(DicomParser, NoPreambleNoMetaExplicitAndImplicitAndBigEndian) {
  for (const bool implicit : {false, true}) {
    for (const bool big : {false, true}) {
      if (implicit && big) continue;
      DicomWriter w(implicit, big);
      w.text(0x00080005, "CS", "ISO_IR 100");
      w.text(kModality, "CS", "CT");
      const auto rows_at = w.us(kRows, 12);
      const DicomFile f = parse(w.bytes());
      SCOPED_TRACE(std::to_string(implicit) + std::to_string(big));
      EXPECT_FALSE(f.has_preamble);
      EXPECT_TRUE(f.meta.elements().empty());
      EXPECT_EQ(f.transfer_syntax.uid, "");
      EXPECT_EQ(f.implicit_vr, implicit);
      EXPECT_EQ(f.big_endian, big);
      EXPECT_EQ(f.dataset.integer(kRows), 12);
      EXPECT_EQ(f.dataset.find(kRows)->value_offset, rows_at);
      EXPECT_EQ(f.dataset.string(kModality), "CT");
    }
  }
}

TEST(DicomParser, MetaWithoutPreamble) {
  const DBytes meta = vptest::meta_group(vptest::kImplicitLE, 0);
  DicomWriter w(true, false, meta.size());
  w.us(kRows, 5);
  const DicomFile f = parse(concat(meta, w.bytes()));
  EXPECT_FALSE(f.has_preamble);
  EXPECT_EQ(f.transfer_syntax.uid, vptest::kImplicitLE);
  EXPECT_EQ(f.dataset_offset, meta.size());
  EXPECT_EQ(f.dataset.integer(kRows), 5);
}

TEST(DicomParser, FirstElementWinsOverTheTransferSyntax) {
  // The meta group says explicit VR, the dataset is implicit (pydicom warns and reads it).
  DBytes file = vptest::part10_head(vptest::kExplicitLE);
  DicomWriter w(true, false, file.size());
  w.us(kRows, 77);
  file = concat(file, w.bytes());
  const DicomFile f = parse(file);
  EXPECT_TRUE(f.implicit_vr);
  EXPECT_EQ(f.dataset.integer(kRows), 77);
}

TEST(DicomParser, NotDicomIsAFormatError) {
  const std::string text = "This is not a DICOM file, just some text that is long enough.";
  EXPECT_VP_ERROR(parse(DBytes(text.begin(), text.end())), ErrorCode::format);
  EXPECT_VP_ERROR(parse(DBytes{}), ErrorCode::format);
  DicomReadOptions o;
  o.require_preamble = true;
  DicomWriter w;
  w.us(kRows, 1);
  EXPECT_VP_ERROR(parse(w.bytes(), o), ErrorCode::format);
}

// SQ (undefined) > item (undefined) > [Rows, SQ (defined) > item (defined) > Columns,
// SQ (undefined) > item (defined) > Modality], then an element after the sequence.
DBytes nested_sequences(bool implicit, std::size_t base, std::vector<std::size_t>& offsets) {
  DicomWriter w(implicit, false, base);
  w.header(0x00081115, "SQ", 0xFFFFFFFF);  // ReferencedSeriesSequence
  offsets.push_back(w.pos());              // [0] outer item
  w.item(0xFFFFFFFF);
  offsets.push_back(w.us(kRows, 1));  // [1]
  // Defined-length inner sequence: build its items first to know the length.
  DicomWriter inner_item(implicit, false);
  inner_item.us(kColumns, 2);
  inner_item.header(0x00081140, "SQ", 0xFFFFFFFF);  // ReferencedImageSequence
  DicomWriter deepest(implicit, false);
  deepest.text(kModality, "CS", "OT");
  inner_item.item(static_cast<std::uint32_t>(deepest.bytes().size()));
  inner_item.raw(deepest.bytes());
  inner_item.sequence_delimiter();
  const auto inner_len = static_cast<std::uint32_t>(8 + inner_item.bytes().size());
  const std::size_t inner_value = w.header(0x00089121, "SQ", inner_len);
  offsets.push_back(inner_value);  // [2] inner sequence value = its item tag
  w.item(static_cast<std::uint32_t>(inner_item.bytes().size()));
  offsets.push_back(w.pos() + 8);  // [3] Columns value (an 8-byte header in both encodings)
  w.raw(inner_item.bytes());
  w.item_delimiter();
  w.sequence_delimiter();
  offsets.push_back(w.text(0x0020000D, "UI", "1.2.3.4"));  // [4] after the sequence
  return w.bytes();
}

TEST(DicomParser, NestedSequencesOfDefinedAndUndefinedLength) {
  for (const bool implicit : {false, true}) {
    SCOPED_TRACE(implicit ? "implicit" : "explicit");
    DBytes file = vptest::part10_head(implicit ? vptest::kImplicitLE : vptest::kExplicitLE);
    std::vector<std::size_t> at;
    file = concat(file, nested_sequences(implicit, file.size(), at));
    const DicomFile f = parse(file);
    const DicomElement* seq = f.dataset.find(0x00081115);
    ASSERT_NE(seq, nullptr);
    EXPECT_EQ(seq->vr, DicomVR::SQ);
    EXPECT_EQ(seq->length, kDicomUndefinedLength);
    ASSERT_EQ(seq->items.size(), 1u);
    EXPECT_EQ(seq->item_offsets[0], at[0]);
    const DicomDataset& item = seq->items[0];
    EXPECT_EQ(item.integer(kRows), 1);
    EXPECT_EQ(item.find(kRows)->value_offset, at[1]);
    const auto& inner = item.items(0x00089121);
    ASSERT_EQ(inner.size(), 1u);
    EXPECT_EQ(item.find(0x00089121)->item_offsets[0], at[2]);
    EXPECT_EQ(inner[0].integer(kColumns), 2);
    EXPECT_EQ(inner[0].find(kColumns)->value_offset, at[3]);
    const auto& deepest = inner[0].items(0x00081140);
    ASSERT_EQ(deepest.size(), 1u);
    EXPECT_EQ(deepest[0].string(kModality), "OT");
    EXPECT_EQ(f.dataset.uid(0x0020000D), "1.2.3.4");
    EXPECT_EQ(f.dataset.find(0x0020000D)->value_offset, at[4]);
  }
}

TEST(DicomParser, EmptySequencesAndItems) {
  DicomWriter w;
  w.header(0x00081115, "SQ", 0);  // empty, defined
  w.header(0x00081140, "SQ", 0xFFFFFFFF);
  w.sequence_delimiter();  // empty, undefined
  w.header(0x00089121, "SQ", 0xFFFFFFFF);
  w.item(0);  // an empty item
  w.item(0xFFFFFFFF);
  w.item_delimiter();  // an empty undefined-length item
  w.sequence_delimiter();
  w.us(kRows, 4);
  const DicomFile f = parse(w.bytes());
  EXPECT_TRUE(f.dataset.items(0x00081115).empty());
  EXPECT_TRUE(f.dataset.items(0x00081140).empty());
  ASSERT_EQ(f.dataset.items(0x00089121).size(), 2u);
  EXPECT_TRUE(f.dataset.items(0x00089121)[0].elements().empty());
  EXPECT_EQ(f.dataset.integer(kRows), 4);
}

TEST(DicomParser, UndefinedLengthUnIsASequenceOfImplicitItems) {
  DicomWriter w;  // explicit VR LE
  w.header(0x00091010, "UN", 0xFFFFFFFF);
  w.item(0xFFFFFFFF);
  DicomWriter inner(true, false);  // PS3.5 6.2.2: the content is implicit VR LE
  inner.us(kRows, 21);
  inner.text(0x00091001, "UN", "ab");
  w.raw(inner.bytes());
  w.item_delimiter();
  w.sequence_delimiter();
  w.us(kColumns, 22);
  const DicomFile f = parse(w.bytes());
  const DicomElement* un = f.dataset.find(0x00091010);
  ASSERT_NE(un, nullptr);
  EXPECT_EQ(un->vr, DicomVR::SQ);
  ASSERT_EQ(un->items.size(), 1u);
  EXPECT_EQ(un->items[0].integer(kRows), 21);
  EXPECT_EQ(f.dataset.integer(kColumns), 22);
}

TEST(DicomParser, PrivateSequencesImplicit) {
  // Undefined length: an item follows, so a sequence. Defined length: UN bytes, as pydicom.
  DicomWriter w(true, false);
  w.text(0x00290010, "LO", "ACME");
  DicomWriter item(true, false);
  item.us(kRows, 1);
  w.header(0x00291001, "SQ", 0xFFFFFFFF);
  w.item(static_cast<std::uint32_t>(item.bytes().size()));
  w.raw(item.bytes());
  w.sequence_delimiter();
  w.header(0x00291002, "SQ", static_cast<std::uint32_t>(8 + item.bytes().size()));
  w.item(static_cast<std::uint32_t>(item.bytes().size()));
  w.raw(item.bytes());
  const DicomFile f = parse(concat(vptest::meta_group(vptest::kImplicitLE, 0), w.bytes()));
  EXPECT_EQ(f.dataset.find(0x00291001)->vr, DicomVR::SQ);
  ASSERT_EQ(f.dataset.items(0x00291001).size(), 1u);
  EXPECT_EQ(f.dataset.items(0x00291001)[0].integer(kRows), 1);
  EXPECT_EQ(f.dataset.find(0x00291002)->vr, DicomVR::UN);
  EXPECT_TRUE(f.dataset.find(0x00291002)->value_read);
}

TEST(DicomParser, ImplicitItemsInsideAnExplicitSequence) {
  DicomWriter w;  // explicit
  DicomWriter item(true, false);
  item.us(kRows, 8);
  w.header(0x00081115, "SQ", static_cast<std::uint32_t>(8 + item.bytes().size()));
  w.item(static_cast<std::uint32_t>(item.bytes().size()));
  w.raw(item.bytes());
  w.us(kColumns, 9);
  const DicomFile f = parse(w.bytes());
  ASSERT_EQ(f.dataset.items(0x00081115).size(), 1u);
  EXPECT_EQ(f.dataset.items(0x00081115)[0].integer(kRows), 8);
  EXPECT_EQ(f.dataset.integer(kColumns), 9);
}

TEST(DicomParser, OddLengthsAreKept) {
  DicomWriter w;
  const auto a = w.text(0x00081030, "LO", "abc");  // odd, non-conformant
  const auto b = w.text(0x0008103E, "LO", "de ");
  const auto c = w.us(kRows, 3);
  const DicomFile f = parse(w.bytes());
  EXPECT_EQ(f.dataset.find(0x00081030)->length, 3u);
  EXPECT_EQ(f.dataset.find(0x00081030)->value_offset, a);
  EXPECT_EQ(f.dataset.find(0x0008103E)->value_offset, b);
  EXPECT_EQ(f.dataset.find(kRows)->value_offset, c);
  EXPECT_EQ(f.dataset.string(0x00081030), "abc");
  EXPECT_EQ(f.dataset.string(0x0008103E), "de");
  EXPECT_EQ(f.dataset.integer(kRows), 3);
}

TEST(DicomParser, EncapsulatedPixelDataFragmentsAndOffsetTables) {
  DBytes file = vptest::part10_head(vptest::kJpegBaseline);
  DicomWriter w(false, false, file.size());
  w.us(kRows, 2);
  DicomWriter eot, eotl;
  for (const std::uint64_t v : {0ull, 18ull}) {
    eot.u32(static_cast<std::uint32_t>(v));
    eot.u32(0);
  }
  for (const std::uint64_t v : {10ull, 5ull}) {
    eotl.u32(static_cast<std::uint32_t>(v));
    eotl.u32(0);
  }
  w.element(0x7FE00001, "OV", eot.bytes());
  w.element(0x7FE00002, "OV", eotl.bytes());
  const auto value = w.header(kPixelData, "OB", 0xFFFFFFFF);
  w.item(8);
  w.u32(0);
  w.u32(18);
  w.item(10);
  const auto frag0 = w.pos();
  w.raw(DBytes(10, 0xAA));
  w.item(5);  // odd fragment length (non-conformant, kept)
  const auto frag1 = w.pos();
  w.raw(DBytes(5, 0xBB));
  w.sequence_delimiter();
  const auto end = w.pos();
  w.text(0xFFFCFFFC, "OB", std::string(4, '\0'));  // trailing padding, after the pixels
  file = concat(file, w.bytes());

  for (const bool stop : {true, false}) {
    DicomReadOptions o;
    o.stop_at_pixel_data = stop;
    const DicomFile f = parse(file, o);
    ASSERT_TRUE(f.pixel_data);
    const DicomPixelData& p = *f.pixel_data;
    EXPECT_TRUE(p.encapsulated);
    EXPECT_EQ(p.vr, DicomVR::OB);
    EXPECT_EQ(p.offset, value);
    EXPECT_EQ(p.length, end - value);
    EXPECT_EQ(p.basic_offset_table, (std::vector<std::uint32_t>{0, 18}));
    ASSERT_EQ(p.fragments.size(), 2u);
    EXPECT_EQ(p.fragments[0].offset, frag0);
    EXPECT_EQ(p.fragments[0].length, 10u);
    EXPECT_EQ(p.fragments[1].offset, frag1);
    EXPECT_EQ(p.fragments[1].length, 5u);
    EXPECT_EQ(p.extended_offsets, (std::vector<std::uint64_t>{0, 18}));
    EXPECT_EQ(p.extended_lengths, (std::vector<std::uint64_t>{10, 5}));
    EXPECT_EQ(f.dataset.find(kPixelData)->length, kDicomUndefinedLength);
    EXPECT_EQ(f.dataset.contains(0xFFFCFFFC), !stop);
  }
}

TEST(DicomParser, EmptyBasicOffsetTableAndNoFragments) {
  DicomWriter w;
  w.us(kRows, 1);  // a file without meta that starts at group 7FE0 would read as big endian
  w.header(kPixelData, "OB", 0xFFFFFFFF);
  w.item(0);
  w.sequence_delimiter();
  const DicomFile f = parse(w.bytes());
  ASSERT_TRUE(f.pixel_data);
  EXPECT_TRUE(f.pixel_data->basic_offset_table.empty());
  EXPECT_TRUE(f.pixel_data->fragments.empty());
}

TEST(DicomParser, FloatAndDoubleFloatPixelData) {
  for (const auto& [tag, vr] : {std::pair<DicomTag, const char*>{0x7FE00008, "OF"},
                                std::pair<DicomTag, const char*>{0x7FE00009, "OD"}}) {
    DicomWriter w;
    w.us(kRows, 1);
    const auto at = w.element(tag, vr, DBytes(16, 0));
    const DicomFile f = parse(w.bytes());
    ASSERT_TRUE(f.pixel_data);
    EXPECT_EQ(f.pixel_data->tag, tag);
    EXPECT_EQ(f.pixel_data->offset, at);
    EXPECT_EQ(f.pixel_data->length, 16u);
    EXPECT_STREQ(dicom_vr_name(f.pixel_data->vr), vr);
  }
}

TEST(DicomParser, ElementsAfterThePixelDataOnlyWhenAsked) {
  DicomWriter w;
  w.us(kRows, 1);
  w.element(kPixelData, "OB", DBytes(4, 0));
  w.element(0xFFFCFFFC, "OB", DBytes(2, 0));
  EXPECT_FALSE(parse(w.bytes()).dataset.contains(0xFFFCFFFC));
  DicomReadOptions o;
  o.stop_at_pixel_data = false;
  EXPECT_TRUE(parse(w.bytes(), o).dataset.contains(0xFFFCFFFC));
}

TEST(DicomParser, PixelDataInsideAnItemIsNotThePixelData) {
  // Icon Image Sequence: its pixel data is an ordinary (read) value.
  DicomWriter item;
  item.us(kRows, 1);
  item.element(kPixelData, "OB", DBytes(2, 9));
  DicomWriter w;
  w.header(0x00880200, "SQ", static_cast<std::uint32_t>(8 + item.bytes().size()));
  w.item(static_cast<std::uint32_t>(item.bytes().size()));
  w.raw(item.bytes());
  w.us(kColumns, 3);
  const DicomFile f = parse(w.bytes());
  EXPECT_FALSE(f.pixel_data);
  EXPECT_TRUE(f.dataset.items(0x00880200)[0].find(kPixelData)->value_read);
  EXPECT_EQ(f.dataset.integer(kColumns), 3);
}

TEST(DicomParser, LargeValuesAreRecordedNotRead) {
  DicomWriter w;
  const auto big = w.element(0x00291010, "OB", DBytes(5000, 1));
  w.text(0x00080005, "CS", std::string(3000, 'A'));  // Specific Character Set: always read
  w.us(kRows, 2);
  DicomReadOptions o;
  o.max_value_size = 1000;
  const DicomFile f = parse(w.bytes(), o);
  const DicomElement* e = f.dataset.find(0x00291010);
  EXPECT_FALSE(e->value_read);
  EXPECT_TRUE(e->value.empty());
  EXPECT_EQ(e->value_offset, big);
  EXPECT_EQ(e->length, 5000u);
  EXPECT_TRUE(f.dataset.find(0x00080005)->value_read);
  EXPECT_EQ(f.dataset.integer(kRows), 2);
}

TEST(DicomParser, RepeatedTagKeepsTheLast) {
  DicomWriter w;
  w.us(kRows, 1);
  w.us(kColumns, 2);
  w.us(kRows, 3);
  const DicomFile f = parse(w.bytes());
  EXPECT_EQ(f.dataset.elements().size(), 2u);
  EXPECT_EQ(f.dataset.integer(kRows), 3);
}

TEST(DicomParser, UnknownExplicitVrUsesAShortLength) {
  DicomWriter w;
  w.tag(0x00091001);
  w.raw({'X', 'X', 2, 0, 'h', 'i'});
  w.us(kRows, 6);
  const DicomFile f = parse(w.bytes());
  EXPECT_EQ(f.dataset.find(0x00091001)->vr, DicomVR::unknown);
  EXPECT_EQ(f.dataset.integer(kRows), 6);
}

TEST(DicomParser, ReadsFilesLikeBytes) {
  vptest::TempDir dir;
  DBytes file = vptest::part10_head(vptest::kExplicitLE);
  DicomWriter w(false, false, file.size());
  w.us(kRows, 11);
  const auto px = w.element(kPixelData, "OW", DBytes(70000, 5));  // beyond one read buffer
  file = concat(file, w.bytes());
  const std::string path = dir.file("a.dcm");
  vptest::write_file(path, file);
  const DicomFile f = read_dicom(path);
  EXPECT_EQ(f.path, path);
  EXPECT_EQ(f.dataset.integer(kRows), 11);
  EXPECT_EQ(f.pixel_data->offset, px);
  EXPECT_VP_ERROR(read_dicom(dir.file("missing.dcm")), ErrorCode::not_found);
}

}  // namespace
