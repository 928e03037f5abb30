// DicomDataset accessors: strings trimmed per VR as pydicom trims them, numbers from binary and
// text VRs with multiplicity, ambiguous VRs, keywords, VR names and transfer syntaxes.
#include <gtest/gtest.h>

#include "dicom/dicom_writer.hpp"
#include "test_support.hpp"
#include "voxpipe/dicom.hpp"

namespace {

using namespace voxpipe;
using vptest::DBytes;
using vptest::DicomWriter;

DicomFile parse(const DBytes& b) { return parse_dicom(b, "test.dcm"); }

TEST(DicomDataset, StringsAreTrimmedPerVrAsPydicom) {
  DicomWriter w;
  w.text(0x00400001, "AE", " AE1 \\ AE2 ");  // AE: both sides, each value
  w.text(0x00080008, "CS", "ORIGINAL \\PRIMARY ");  // CS: trailing padding of the whole only
  w.text(0x00080016, "UI", std::string("1.2.3\0", 6));
  w.text(0x00081030, "LO", "one \\two ");  // LO: each value
  w.text(0x00100010, "PN", "Doe^John\\Roe ");
  w.text(0x00204000, "LT", "line one\\still one  ");  // LT: one value
  w.text(0x00081190, "UR", "http://x/y ");
  const DicomFile f = parse(w.bytes());
  const DicomDataset& d = f.dataset;
  EXPECT_EQ(d.strings(0x00400001), (std::vector<std::string>{"AE1", "AE2"}));
  EXPECT_EQ(d.strings(0x00080008), (std::vector<std::string>{"ORIGINAL ", "PRIMARY"}));
  EXPECT_EQ(d.uid(0x00080016), "1.2.3");
  EXPECT_EQ(d.strings(0x00081030), (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(d.strings(0x00100010), (std::vector<std::string>{"Doe^John", "Roe"}));
  EXPECT_EQ(d.strings(0x00204000), (std::vector<std::string>{"line one\\still one"}));
  EXPECT_EQ(d.string(0x00081190), "http://x/y");
  EXPECT_EQ(d.string(0x00099999), std::nullopt);
}

TEST(DicomDataset, NumbersWithMultiplicity) {
  DicomWriter w;
  w.text(0x00200032, "DS", " -12.5\\3e2\\+4 ");  // ImagePositionPatient
  w.text(0x00200013, "IS", "7 ");
  w.text(0x00200012, "IS", "1.0");  // pydicom's IS accepts integral decimals
  DicomWriter ss, ul, sl, at;
  ss.u16(0xFFFE);
  ss.u16(3);
  ul.u32(0xFFFFFFFF);
  sl.u32(0xFFFFFFFF);
  at.tag(0x00280010);
  w.element(0x00189219, "SS", ss.bytes());
  w.element(0x00189220, "UL", ul.bytes());
  w.element(0x00189221, "SL", sl.bytes());
  w.element(0x00209165, "AT", at.bytes());
  const DicomDataset d = parse(w.bytes()).dataset;
  EXPECT_EQ(d.numbers(0x00200032), (std::vector<double>{-12.5, 300, 4}));
  EXPECT_EQ(d.number(0x00200032, 2), 4);
  EXPECT_EQ(d.number(0x00200032, 3), std::nullopt);
  EXPECT_EQ(d.integer(0x00200013), 7);
  EXPECT_EQ(d.integer(0x00200012), 1);
  EXPECT_EQ(d.integers(0x00189219), (std::vector<std::int64_t>{-2, 3}));
  EXPECT_EQ(d.integer(0x00189220), 0xFFFFFFFF);
  EXPECT_EQ(d.integer(0x00189221), -1);
  EXPECT_EQ(d.integer(0x00209165), 0x00280010);
  EXPECT_TRUE(d.numbers(0x00990010).empty());
}

TEST(DicomDataset, BadNumbersAreFormatErrors) {
  DicomWriter w;
  w.text(0x00180050, "DS", "1.5x");
  w.text(0x00200013, "IS", "2.5");
  w.element(0x00280010, "US", {1, 2, 3});  // 3 bytes of US
  const DicomDataset d = parse(w.bytes()).dataset;
  EXPECT_VP_ERROR(d.numbers(0x00180050), ErrorCode::format);
  EXPECT_VP_ERROR(d.integers(0x00200013), ErrorCode::format);
  EXPECT_VP_ERROR(d.numbers(0x00280010), ErrorCode::format);
  EXPECT_VP_ERROR(d.integers(0x00180050), ErrorCode::format);
}

TEST(DicomDataset, AmbiguousUsOrSsFollowsPixelRepresentation) {
  for (const int rep : {0, 1}) {
    DicomWriter w(true, false);  // implicit VR: the VR comes from the dictionary
    w.text(0x00080060, "CS", "MR");
    w.us(0x00280103, static_cast<std::uint32_t>(rep));
    w.us(0x00280106, 0xFFFF);  // SmallestImagePixelValue
    DicomWriter item(true, false);
    item.us(0x00280106, 0xFFFE);  // in an item: the parent's PixelRepresentation decides
    w.header(0x00081115, "SQ", static_cast<std::uint32_t>(8 + item.bytes().size()));
    w.item(static_cast<std::uint32_t>(item.bytes().size()));
    w.raw(item.bytes());
    const DicomDataset d = parse(w.bytes()).dataset;
    EXPECT_EQ(d.find(0x00280106)->vr, rep ? DicomVR::SS : DicomVR::US);
    EXPECT_EQ(d.integer(0x00280106), rep ? -1 : 0xFFFF);
    EXPECT_EQ(d.items(0x00081115)[0].integer(0x00280106), rep ? -2 : 0xFFFE);
  }
}

TEST(DicomDataset, KeywordsVrNamesAndTransferSyntaxes) {
  EXPECT_EQ(dicom_keyword_tag("Rows"), 0x00280010u);
  EXPECT_EQ(dicom_keyword_tag("ImageOrientationPatient"), 0x00200037u);
  EXPECT_EQ(dicom_keyword_tag("SeriesInstanceUID"), 0x0020000Eu);
  EXPECT_EQ(dicom_keyword_tag("EchoNumbers"), 0x00180086u);
  EXPECT_EQ(dicom_keyword_tag("PixelData"), 0x7FE00010u);
  EXPECT_EQ(dicom_keyword_tag("NoSuchKeyword"), std::nullopt);
  EXPECT_STREQ(dicom_tag_keyword(0x00280030), "PixelSpacing");
  EXPECT_STREQ(dicom_tag_keyword(0x60000010), "OverlayRows");
  EXPECT_STREQ(dicom_tag_keyword(0x60020010), "OverlayRows");  // repeating group 60xx
  EXPECT_EQ(dicom_tag_keyword(0x00080002), nullptr);  // not in the standard
  EXPECT_EQ(dicom_tag_keyword(0x00090010), nullptr);  // private
  EXPECT_EQ(dicom_tag_keyword(0x60010010), nullptr);  // private, though 60xx matches
  EXPECT_STREQ(dicom_vr_name(DicomVR::SQ), "SQ");
  EXPECT_EQ(dicom_vr_from_name("UV"), DicomVR::UV);
  EXPECT_EQ(dicom_vr_from_name("XX"), std::nullopt);
  EXPECT_EQ(dicom_tag_name(0x7FE00010), "(7FE0,0010)");
  EXPECT_TRUE(dicom_transfer_syntax("1.2.840.10008.1.2").implicit_vr);
  EXPECT_TRUE(dicom_transfer_syntax("1.2.840.10008.1.2.2").big_endian);
  EXPECT_TRUE(dicom_transfer_syntax("1.2.840.10008.1.2.1.99").deflated);
  EXPECT_FALSE(dicom_transfer_syntax("1.2.840.10008.1.2.1").encapsulated);
  EXPECT_TRUE(dicom_transfer_syntax("1.2.840.10008.1.2.4.90").encapsulated);
}

}  // namespace
