// The data dictionary (src/dicom/dictionary.cpp, generated from PS3.6 as pydicom 3 has it): VRs
// and ambiguities of tags of every kind, the repeating groups as pydicom matches them, keywords
// both ways, and the order the binary searches rely on.
#include "dicom/dictionary.hpp"

#include <gtest/gtest.h>

#include <string>

#include "voxpipe/dicom.hpp"

namespace {

using namespace voxpipe;
using voxpipe::dicom::Ambiguity;
using voxpipe::dicom::find_entry;
using voxpipe::dicom::implicit_vr;

DicomVR vr_of(DicomTag tag) { return implicit_vr(tag).vr; }

TEST(DicomDictionary, PublicTagsOutsideImagingHaveTheirVrs) {
  EXPECT_EQ(vr_of(0x00180010), DicomVR::LO);  // ContrastBolusAgent
  EXPECT_EQ(vr_of(0x00100030), DicomVR::DA);  // PatientBirthDate
  EXPECT_EQ(vr_of(0x00321060), DicomVR::LO);  // RequestedProcedureDescription
  EXPECT_EQ(vr_of(0x0040A730), DicomVR::SQ);  // ContentSequence (structured reports)
  EXPECT_EQ(vr_of(0x00000000), DicomVR::UL);  // CommandGroupLength
  EXPECT_EQ(vr_of(0x00080001), DicomVR::UL);  // LengthToEnd (retired: kept, as in pydicom)
  EXPECT_EQ(vr_of(0x0072006D), DicomVR::UN);  // SelectorUNValue: UN is its VR
  EXPECT_TRUE(implicit_vr(0x0072006D).known);
}

TEST(DicomDictionary, AmbiguousVrsCarryTheirAmbiguity) {
  const auto check = [](DicomTag tag, DicomVR vr, Ambiguity a) {
    const dicom::DictEntry* e = find_entry(tag);
    ASSERT_NE(e, nullptr) << dicom_tag_name(tag);
    EXPECT_EQ(e->vr, vr) << dicom_tag_name(tag);
    EXPECT_EQ(e->ambiguity, a) << dicom_tag_name(tag);
  };
  check(0x00280106, DicomVR::US, Ambiguity::us_or_ss);        // SmallestImagePixelValue
  check(0x00189810, DicomVR::US, Ambiguity::us_or_ss);        // ZeroVelocityPixelValue
  check(0x7FE00010, DicomVR::OW, Ambiguity::ob_or_ow);        // PixelData
  check(0x54001010, DicomVR::OW, Ambiguity::ob_or_ow);        // WaveformData
  check(0x00283006, DicomVR::OW, Ambiguity::us_or_ow);        // LUTData
  check(0x00281200, DicomVR::OW, Ambiguity::us_or_ss_or_ow);  // GrayLookupTableData (retired)
  check(0x50023000, DicomVR::OW, Ambiguity::ob_or_ow);        // CurveData of curve 5002
  check(0x00280010, DicomVR::US, Ambiguity::none);            // Rows
}

TEST(DicomDictionary, RepeatingGroupsMatchAsInPydicom) {
  // 50xx curves, 60xx overlays and 7Fxx variable pixel data, in any even group of the range.
  for (const DicomTag tag : {0x50000010u, 0x50020010u, 0x50FE0010u})
    EXPECT_STREQ(dicom_tag_keyword(tag), "NumberOfPoints") << dicom_tag_name(tag);
  EXPECT_EQ(vr_of(0x501E2600), DicomVR::SQ);  // CurveReferencedOverlaySequence
  for (const DicomTag tag : {0x60000010u, 0x601E0010u, 0x60200010u, 0x60FE0010u})
    EXPECT_STREQ(dicom_tag_keyword(tag), "OverlayRows") << dicom_tag_name(tag);
  EXPECT_EQ(vr_of(0x60020050), DicomVR::SS);   // OverlayOrigin
  EXPECT_EQ(vr_of(0x7F000010), DicomVR::OW);   // VariablePixelData
  EXPECT_EQ(find_entry(0x7F000010)->ambiguity, Ambiguity::ob_or_ow);
  EXPECT_EQ(vr_of(0x7F020011), DicomVR::US);   // VariableNextDataGroup
  EXPECT_EQ(vr_of(0x10100123), DicomVR::US);   // ZonalMap: (1010,xxxx)
  EXPECT_STREQ(dicom_tag_keyword(0x00203105), "SourceImageIDs");  // (0020,31xx)
  // A masked element: the main dictionary comes first, (0028,04x0) covers the rest.
  EXPECT_STREQ(dicom_tag_keyword(0x00280400), "TransformLabel");
  EXPECT_STREQ(dicom_tag_keyword(0x00280410), "RowsForNthOrderCoefficients");
  EXPECT_STREQ(dicom_tag_keyword(0x002804F0), "RowsForNthOrderCoefficients");
  EXPECT_EQ(vr_of(0x00280402), DicomVR::US);   // NumberOfTransformSteps
  EXPECT_EQ(vr_of(0x00280412), DicomVR::LO);   // CoefficientCoding
  // Private groups never match, and tags next to a mask do not either.
  EXPECT_EQ(find_entry(0x60010010), nullptr);
  EXPECT_EQ(find_entry(0x50010005), nullptr);
  EXPECT_EQ(find_entry(0x61000010), nullptr);
  EXPECT_EQ(find_entry(0x60000013), nullptr);
}

TEST(DicomDictionary, UnknownTagsFollowPydicomRules) {
  const auto check = [](DicomTag tag, DicomVR vr, bool known) {
    EXPECT_EQ(implicit_vr(tag).vr, vr) << dicom_tag_name(tag);
    EXPECT_EQ(implicit_vr(tag).known, known) << dicom_tag_name(tag);
    EXPECT_EQ(find_entry(tag), nullptr) << dicom_tag_name(tag);
  };
  check(0x00080002, DicomVR::UN, false);  // public, not in the standard
  check(0x00180000, DicomVR::UL, true);   // public group length
  check(0x00090000, DicomVR::UN, false);  // private group length: UN in pydicom 3
  check(0x00090010, DicomVR::LO, true);   // private creator
  check(0x000900FF, DicomVR::LO, true);
  check(0x00090005, DicomVR::UN, false);  // below the private creators
  check(0x00091010, DicomVR::UN, false);  // private element
}

TEST(DicomDictionary, KeywordsBothWays) {
  const struct {
    const char* keyword;
    DicomTag tag;
  } cases[] = {
      {"ContrastBolusAgent", 0x00180010},       {"PatientBirthDate", 0x00100030},
      {"CommandGroupLength", 0x00000000},       {"FileMetaInformationGroupLength", 0x00020000},
      {"LUTData", 0x00283006},                  {"GrayLookupTableData", 0x00281200},
      {"ContentSequence", 0x0040A730},          {"PixelData", 0x7FE00010},
      {"DataSetTrailingPadding", 0xFFFCFFFC},   {"Item", 0xFFFEE000},
      {"CurveData", 0x50003000},                {"OverlayData", 0x60003000},
      {"VariablePixelData", 0x7F000010},        {"RowsForNthOrderCoefficients", 0x00280410},
      {"ZonalMap", 0x10100000},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(dicom_keyword_tag(c.keyword), c.tag) << c.keyword;
    EXPECT_STREQ(dicom_tag_keyword(c.tag), c.keyword) << c.keyword;
  }
  EXPECT_EQ(dicom_keyword_tag("patientbirthdate"), std::nullopt);  // keywords are exact
  EXPECT_EQ(dicom_keyword_tag("PatientBirthDat"), std::nullopt);
  EXPECT_EQ(dicom_keyword_tag("PatientBirthDateX"), std::nullopt);
  EXPECT_EQ(dicom_keyword_tag(""), std::nullopt);
  EXPECT_EQ(dicom_keyword_tag(std::string("Rows\0", 5)), std::nullopt);
}

TEST(DicomDictionary, EveryKeywordLeadsBackToItsTag) {
  // Walk every tag of the main groups that have many: the keyword of each known tag must give
  // the tag back (keywords are unique, the keyword index is complete and sorted).
  int known = 0;
  for (const std::uint16_t group : {0x0000, 0x0008, 0x0010, 0x0018, 0x0020, 0x0028, 0x0040,
                                    0x0054, 0x0070, 0x3006, 0x300A, 0x5200, 0x7FE0}) {
    for (std::uint32_t element = 0; element <= 0xFFFF; ++element) {
      const DicomTag tag = dicom_tag(group, static_cast<std::uint16_t>(element));
      const dicom::DictEntry* e = find_entry(tag);
      if (!e || e->tag != tag || !*e->keyword) continue;
      ++known;
      EXPECT_EQ(dicom_keyword_tag(e->keyword), tag) << e->keyword;
    }
  }
  EXPECT_GT(known, 2900);  // of the 5,091 tags of the standard
}

}  // namespace
