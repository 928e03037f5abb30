// Generated from pydicom 3.0's data dictionary (pydicom.datadict) for the keywords voxpipe
// uses; ambiguous VRs carry their Ambiguity and the implicit VR reading.
#include "dicom/dictionary.hpp"

#include <algorithm>
#include <array>
#include <cstring>

namespace voxpipe::dicom {
namespace {

constexpr DictEntry kEntries[] = {
    {0x00020000, DicomVR::UL, Ambiguity::none, "FileMetaInformationGroupLength"},
    {0x00020001, DicomVR::OB, Ambiguity::none, "FileMetaInformationVersion"},
    {0x00020002, DicomVR::UI, Ambiguity::none, "MediaStorageSOPClassUID"},
    {0x00020003, DicomVR::UI, Ambiguity::none, "MediaStorageSOPInstanceUID"},
    {0x00020010, DicomVR::UI, Ambiguity::none, "TransferSyntaxUID"},
    {0x00020012, DicomVR::UI, Ambiguity::none, "ImplementationClassUID"},
    {0x00020013, DicomVR::SH, Ambiguity::none, "ImplementationVersionName"},
    {0x00020016, DicomVR::AE, Ambiguity::none, "SourceApplicationEntityTitle"},
    {0x00020100, DicomVR::UI, Ambiguity::none, "PrivateInformationCreatorUID"},
    {0x00020102, DicomVR::OB, Ambiguity::none, "PrivateInformation"},
    {0x00080005, DicomVR::CS, Ambiguity::none, "SpecificCharacterSet"},
    {0x00080008, DicomVR::CS, Ambiguity::none, "ImageType"},
    {0x00080012, DicomVR::DA, Ambiguity::none, "InstanceCreationDate"},
    {0x00080013, DicomVR::TM, Ambiguity::none, "InstanceCreationTime"},
    {0x00080016, DicomVR::UI, Ambiguity::none, "SOPClassUID"},
    {0x00080018, DicomVR::UI, Ambiguity::none, "SOPInstanceUID"},
    {0x00080020, DicomVR::DA, Ambiguity::none, "StudyDate"},
    {0x00080021, DicomVR::DA, Ambiguity::none, "SeriesDate"},
    {0x00080022, DicomVR::DA, Ambiguity::none, "AcquisitionDate"},
    {0x00080023, DicomVR::DA, Ambiguity::none, "ContentDate"},
    {0x0008002A, DicomVR::DT, Ambiguity::none, "AcquisitionDateTime"},
    {0x00080030, DicomVR::TM, Ambiguity::none, "StudyTime"},
    {0x00080031, DicomVR::TM, Ambiguity::none, "SeriesTime"},
    {0x00080032, DicomVR::TM, Ambiguity::none, "AcquisitionTime"},
    {0x00080033, DicomVR::TM, Ambiguity::none, "ContentTime"},
    {0x00080050, DicomVR::SH, Ambiguity::none, "AccessionNumber"},
    {0x00080060, DicomVR::CS, Ambiguity::none, "Modality"},
    {0x00080070, DicomVR::LO, Ambiguity::none, "Manufacturer"},
    {0x00080080, DicomVR::LO, Ambiguity::none, "InstitutionName"},
    {0x00080090, DicomVR::PN, Ambiguity::none, "ReferringPhysicianName"},
    {0x00081010, DicomVR::SH, Ambiguity::none, "StationName"},
    {0x00081030, DicomVR::LO, Ambiguity::none, "StudyDescription"},
    {0x0008103E, DicomVR::LO, Ambiguity::none, "SeriesDescription"},
    {0x00081090, DicomVR::LO, Ambiguity::none, "ManufacturerModelName"},
    {0x00081115, DicomVR::SQ, Ambiguity::none, "ReferencedSeriesSequence"},
    {0x00081140, DicomVR::SQ, Ambiguity::none, "ReferencedImageSequence"},
    {0x00081150, DicomVR::UI, Ambiguity::none, "ReferencedSOPClassUID"},
    {0x00081155, DicomVR::UI, Ambiguity::none, "ReferencedSOPInstanceUID"},
    {0x00082111, DicomVR::ST, Ambiguity::none, "DerivationDescription"},
    {0x00082112, DicomVR::SQ, Ambiguity::none, "SourceImageSequence"},
    {0x00089209, DicomVR::CS, Ambiguity::none, "AcquisitionContrast"},
    {0x00100010, DicomVR::PN, Ambiguity::none, "PatientName"},
    {0x00100020, DicomVR::LO, Ambiguity::none, "PatientID"},
    {0x00100030, DicomVR::DA, Ambiguity::none, "PatientBirthDate"},
    {0x00100040, DicomVR::CS, Ambiguity::none, "PatientSex"},
    {0x00101010, DicomVR::AS, Ambiguity::none, "PatientAge"},
    {0x00101030, DicomVR::DS, Ambiguity::none, "PatientWeight"},
    {0x00180010, DicomVR::LO, Ambiguity::none, "ContrastBolusAgent"},
    {0x00180015, DicomVR::CS, Ambiguity::none, "BodyPartExamined"},
    {0x00180020, DicomVR::CS, Ambiguity::none, "ScanningSequence"},
    {0x00180021, DicomVR::CS, Ambiguity::none, "SequenceVariant"},
    {0x00180022, DicomVR::CS, Ambiguity::none, "ScanOptions"},
    {0x00180023, DicomVR::CS, Ambiguity::none, "MRAcquisitionType"},
    {0x00180024, DicomVR::SH, Ambiguity::none, "SequenceName"},
    {0x00180050, DicomVR::DS, Ambiguity::none, "SliceThickness"},
    {0x00180060, DicomVR::DS, Ambiguity::none, "KVP"},
    {0x00180080, DicomVR::DS, Ambiguity::none, "RepetitionTime"},
    {0x00180081, DicomVR::DS, Ambiguity::none, "EchoTime"},
    {0x00180082, DicomVR::DS, Ambiguity::none, "InversionTime"},
    {0x00180083, DicomVR::DS, Ambiguity::none, "NumberOfAverages"},
    {0x00180084, DicomVR::DS, Ambiguity::none, "ImagingFrequency"},
    {0x00180085, DicomVR::SH, Ambiguity::none, "ImagedNucleus"},
    {0x00180086, DicomVR::IS, Ambiguity::none, "EchoNumbers"},
    {0x00180087, DicomVR::DS, Ambiguity::none, "MagneticFieldStrength"},
    {0x00180088, DicomVR::DS, Ambiguity::none, "SpacingBetweenSlices"},
    {0x00180089, DicomVR::IS, Ambiguity::none, "NumberOfPhaseEncodingSteps"},
    {0x00180091, DicomVR::IS, Ambiguity::none, "EchoTrainLength"},
    {0x00180093, DicomVR::DS, Ambiguity::none, "PercentSampling"},
    {0x00180094, DicomVR::DS, Ambiguity::none, "PercentPhaseFieldOfView"},
    {0x00180095, DicomVR::DS, Ambiguity::none, "PixelBandwidth"},
    {0x00181000, DicomVR::LO, Ambiguity::none, "DeviceSerialNumber"},
    {0x00181020, DicomVR::LO, Ambiguity::none, "SoftwareVersions"},
    {0x00181030, DicomVR::LO, Ambiguity::none, "ProtocolName"},
    {0x00181060, DicomVR::DS, Ambiguity::none, "TriggerTime"},
    {0x00181063, DicomVR::DS, Ambiguity::none, "FrameTime"},
    {0x00181100, DicomVR::DS, Ambiguity::none, "ReconstructionDiameter"},
    {0x00181120, DicomVR::DS, Ambiguity::none, "GantryDetectorTilt"},
    {0x00181164, DicomVR::DS, Ambiguity::none, "ImagerPixelSpacing"},
    {0x00181210, DicomVR::SH, Ambiguity::none, "ConvolutionKernel"},
    {0x00181250, DicomVR::SH, Ambiguity::none, "ReceiveCoilName"},
    {0x00181251, DicomVR::SH, Ambiguity::none, "TransmitCoilName"},
    {0x00181310, DicomVR::US, Ambiguity::none, "AcquisitionMatrix"},
    {0x00181312, DicomVR::CS, Ambiguity::none, "InPlanePhaseEncodingDirection"},
    {0x00181314, DicomVR::DS, Ambiguity::none, "FlipAngle"},
    {0x00181316, DicomVR::DS, Ambiguity::none, "SAR"},
    {0x00185100, DicomVR::CS, Ambiguity::none, "PatientPosition"},
    {0x00189004, DicomVR::CS, Ambiguity::none, "ContentQualification"},
    {0x00189082, DicomVR::FD, Ambiguity::none, "EffectiveEchoTime"},
    {0x00189087, DicomVR::FD, Ambiguity::none, "DiffusionBValue"},
    {0x00189089, DicomVR::FD, Ambiguity::none, "DiffusionGradientOrientation"},
    {0x00189114, DicomVR::SQ, Ambiguity::none, "MREchoSequence"},
    {0x00189117, DicomVR::SQ, Ambiguity::none, "MRDiffusionSequence"},
    {0x00189226, DicomVR::SQ, Ambiguity::none, "MRImageFrameTypeSequence"},
    {0x0020000D, DicomVR::UI, Ambiguity::none, "StudyInstanceUID"},
    {0x0020000E, DicomVR::UI, Ambiguity::none, "SeriesInstanceUID"},
    {0x00200010, DicomVR::SH, Ambiguity::none, "StudyID"},
    {0x00200011, DicomVR::IS, Ambiguity::none, "SeriesNumber"},
    {0x00200012, DicomVR::IS, Ambiguity::none, "AcquisitionNumber"},
    {0x00200013, DicomVR::IS, Ambiguity::none, "InstanceNumber"},
    {0x00200032, DicomVR::DS, Ambiguity::none, "ImagePositionPatient"},
    {0x00200037, DicomVR::DS, Ambiguity::none, "ImageOrientationPatient"},
    {0x00200052, DicomVR::UI, Ambiguity::none, "FrameOfReferenceUID"},
    {0x00200100, DicomVR::IS, Ambiguity::none, "TemporalPositionIdentifier"},
    {0x00200105, DicomVR::IS, Ambiguity::none, "NumberOfTemporalPositions"},
    {0x00201002, DicomVR::IS, Ambiguity::none, "ImagesInAcquisition"},
    {0x00201040, DicomVR::LO, Ambiguity::none, "PositionReferenceIndicator"},
    {0x00201041, DicomVR::DS, Ambiguity::none, "SliceLocation"},
    {0x00209056, DicomVR::SH, Ambiguity::none, "StackID"},
    {0x00209057, DicomVR::UL, Ambiguity::none, "InStackPositionNumber"},
    {0x00209111, DicomVR::SQ, Ambiguity::none, "FrameContentSequence"},
    {0x00209113, DicomVR::SQ, Ambiguity::none, "PlanePositionSequence"},
    {0x00209116, DicomVR::SQ, Ambiguity::none, "PlaneOrientationSequence"},
    {0x00209128, DicomVR::UL, Ambiguity::none, "TemporalPositionIndex"},
    {0x00209157, DicomVR::UL, Ambiguity::none, "DimensionIndexValues"},
    {0x00209165, DicomVR::AT, Ambiguity::none, "DimensionIndexPointer"},
    {0x00209167, DicomVR::AT, Ambiguity::none, "FunctionalGroupPointer"},
    {0x00209221, DicomVR::SQ, Ambiguity::none, "DimensionOrganizationSequence"},
    {0x00209222, DicomVR::SQ, Ambiguity::none, "DimensionIndexSequence"},
    {0x00280002, DicomVR::US, Ambiguity::none, "SamplesPerPixel"},
    {0x00280004, DicomVR::CS, Ambiguity::none, "PhotometricInterpretation"},
    {0x00280006, DicomVR::US, Ambiguity::none, "PlanarConfiguration"},
    {0x00280008, DicomVR::IS, Ambiguity::none, "NumberOfFrames"},
    {0x00280009, DicomVR::AT, Ambiguity::none, "FrameIncrementPointer"},
    {0x00280010, DicomVR::US, Ambiguity::none, "Rows"},
    {0x00280011, DicomVR::US, Ambiguity::none, "Columns"},
    {0x00280030, DicomVR::DS, Ambiguity::none, "PixelSpacing"},
    {0x00280100, DicomVR::US, Ambiguity::none, "BitsAllocated"},
    {0x00280101, DicomVR::US, Ambiguity::none, "BitsStored"},
    {0x00280102, DicomVR::US, Ambiguity::none, "HighBit"},
    {0x00280103, DicomVR::US, Ambiguity::none, "PixelRepresentation"},
    {0x00280106, DicomVR::US, Ambiguity::us_or_ss, "SmallestImagePixelValue"},
    {0x00280107, DicomVR::US, Ambiguity::us_or_ss, "LargestImagePixelValue"},
    {0x00280108, DicomVR::US, Ambiguity::us_or_ss, "SmallestPixelValueInSeries"},
    {0x00280109, DicomVR::US, Ambiguity::us_or_ss, "LargestPixelValueInSeries"},
    {0x00280120, DicomVR::US, Ambiguity::us_or_ss, "PixelPaddingValue"},
    {0x00280121, DicomVR::US, Ambiguity::us_or_ss, "PixelPaddingRangeLimit"},
    {0x00281050, DicomVR::DS, Ambiguity::none, "WindowCenter"},
    {0x00281051, DicomVR::DS, Ambiguity::none, "WindowWidth"},
    {0x00281052, DicomVR::DS, Ambiguity::none, "RescaleIntercept"},
    {0x00281053, DicomVR::DS, Ambiguity::none, "RescaleSlope"},
    {0x00281054, DicomVR::LO, Ambiguity::none, "RescaleType"},
    {0x00281101, DicomVR::US, Ambiguity::us_or_ss, "RedPaletteColorLookupTableDescriptor"},
    {0x00281102, DicomVR::US, Ambiguity::us_or_ss, "GreenPaletteColorLookupTableDescriptor"},
    {0x00281103, DicomVR::US, Ambiguity::us_or_ss, "BluePaletteColorLookupTableDescriptor"},
    {0x00281201, DicomVR::OW, Ambiguity::none, "RedPaletteColorLookupTableData"},
    {0x00281202, DicomVR::OW, Ambiguity::none, "GreenPaletteColorLookupTableData"},
    {0x00281203, DicomVR::OW, Ambiguity::none, "BluePaletteColorLookupTableData"},
    {0x00282110, DicomVR::CS, Ambiguity::none, "LossyImageCompression"},
    {0x00283000, DicomVR::SQ, Ambiguity::none, "ModalityLUTSequence"},
    {0x00283002, DicomVR::US, Ambiguity::us_or_ss, "LUTDescriptor"},
    {0x00283003, DicomVR::LO, Ambiguity::none, "LUTExplanation"},
    {0x00283004, DicomVR::LO, Ambiguity::none, "ModalityLUTType"},
    {0x00283006, DicomVR::OW, Ambiguity::us_or_ow, "LUTData"},
    {0x00283010, DicomVR::SQ, Ambiguity::none, "VOILUTSequence"},
    {0x00289110, DicomVR::SQ, Ambiguity::none, "PixelMeasuresSequence"},
    {0x00289132, DicomVR::SQ, Ambiguity::none, "FrameVOILUTSequence"},
    {0x00289145, DicomVR::SQ, Ambiguity::none, "PixelValueTransformationSequence"},
    {0x00409096, DicomVR::SQ, Ambiguity::none, "RealWorldValueMappingSequence"},
    {0x00409211, DicomVR::US, Ambiguity::us_or_ss, "RealWorldValueLastValueMapped"},
    {0x00409216, DicomVR::US, Ambiguity::us_or_ss, "RealWorldValueFirstValueMapped"},
    {0x00409224, DicomVR::FD, Ambiguity::none, "RealWorldValueIntercept"},
    {0x00409225, DicomVR::FD, Ambiguity::none, "RealWorldValueSlope"},
    {0x00880200, DicomVR::SQ, Ambiguity::none, "IconImageSequence"},
    {0x3004000C, DicomVR::DS, Ambiguity::none, "GridFrameOffsetVector"},
    {0x3004000E, DicomVR::DS, Ambiguity::none, "DoseGridScaling"},
    {0x30060010, DicomVR::SQ, Ambiguity::none, "ReferencedFrameOfReferenceSequence"},
    {0x52009229, DicomVR::SQ, Ambiguity::none, "SharedFunctionalGroupsSequence"},
    {0x52009230, DicomVR::SQ, Ambiguity::none, "PerFrameFunctionalGroupsSequence"},
    {0x60000010, DicomVR::US, Ambiguity::none, "OverlayRows"},
    {0x60000011, DicomVR::US, Ambiguity::none, "OverlayColumns"},
    {0x60000040, DicomVR::CS, Ambiguity::none, "OverlayType"},
    {0x60000050, DicomVR::SS, Ambiguity::none, "OverlayOrigin"},
    {0x60000100, DicomVR::US, Ambiguity::none, "OverlayBitsAllocated"},
    {0x60000102, DicomVR::US, Ambiguity::none, "OverlayBitPosition"},
    {0x60003000, DicomVR::OW, Ambiguity::ob_or_ow, "OverlayData"},
    {0x7FE00001, DicomVR::OV, Ambiguity::none, "ExtendedOffsetTable"},
    {0x7FE00002, DicomVR::OV, Ambiguity::none, "ExtendedOffsetTableLengths"},
    {0x7FE00008, DicomVR::OF, Ambiguity::none, "FloatPixelData"},
    {0x7FE00009, DicomVR::OD, Ambiguity::none, "DoubleFloatPixelData"},
    {0x7FE00010, DicomVR::OW, Ambiguity::ob_or_ow, "PixelData"},
    {0xFFFCFFFC, DicomVR::OB, Ambiguity::none, "DataSetTrailingPadding"},
};

constexpr bool sorted_by_tag() {
  for (std::size_t i = 1; i < std::size(kEntries); ++i)
    if (kEntries[i - 1].tag >= kEntries[i].tag) return false;
  return true;
}
static_assert(sorted_by_tag(), "kEntries must be sorted by tag (binary search)");

bool is_overlay_group(std::uint16_t g) { return g >= 0x6000 && g <= 0x601E && g % 2 == 0; }

}  // namespace

const DictEntry* find_entry(DicomTag tag) noexcept {
  if (is_overlay_group(dicom_group(tag))) tag = dicom_tag(0x6000, dicom_element(tag));
  const auto* end = std::end(kEntries);
  const auto* it = std::lower_bound(std::begin(kEntries), end, tag,
                                    [](const DictEntry& e, DicomTag t) { return e.tag < t; });
  return it != end && it->tag == tag ? it : nullptr;
}

ImplicitVR implicit_vr(DicomTag tag) noexcept {
  if (const DictEntry* e = find_entry(tag)) return {e->vr, e->ambiguity, true};
  const std::uint16_t group = dicom_group(tag), element = dicom_element(tag);
  if (group % 2 == 1) {
    if (element >= 0x0010 && element <= 0x00FF) return {DicomVR::LO, Ambiguity::none, true};
    if (element == 0) return {DicomVR::UL, Ambiguity::none, true};
    return {DicomVR::UN, Ambiguity::none, false};
  }
  if (element == 0) return {DicomVR::UL, Ambiguity::none, true};
  return {DicomVR::UN, Ambiguity::none, false};
}

}  // namespace voxpipe::dicom

namespace voxpipe {

std::optional<DicomTag> dicom_keyword_tag(std::string_view keyword) noexcept {
  for (const auto& e : dicom::kEntries)
    if (keyword == e.keyword) return e.tag;
  return std::nullopt;
}

const char* dicom_tag_keyword(DicomTag tag) noexcept {
  const dicom::DictEntry* e = dicom::find_entry(tag);
  return e ? e->keyword : nullptr;
}

}  // namespace voxpipe
