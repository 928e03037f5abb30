// Hand-built DICOM series for the series tests and the fuzz_dicom_series seeds: one image per
// file (or an enhanced multi-frame file), Explicit VR Little Endian Part 10, 16-bit stored
// values (12 bits used), with the geometry, 4D, mosaic and rescale fields series assembly reads.
#pragma once

#include <cstdio>
#include <string>

#include "dicom_writer.hpp"

namespace vptest {

// One image of a series: Explicit VR Little Endian, Part 10, 16-bit unsigned stored values.
struct SliceSpec {
  std::string series = "1.2.826.0.1.3680043.2.1125.1", sop;
  double position[3] = {0, 0, 0};
  double orientation[6] = {1, 0, 0, 0, 1, 0};
  int rows = 4, columns = 4, temporal = 0, instance = 1;
  int mosaic = 0;      // NumberOfImagesInMosaic ((0019,100A), SIEMENS MR HEADER); 0: none
  int frames = 0;      // an enhanced multi-frame file with this many frames, along the normal
  double slope = 1, intercept = 0;
  double thickness = 2, between = 0;  // SliceThickness, SpacingBetweenSlices (0: absent)
};

inline std::string decimals(const double* v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    char b[32];
    std::snprintf(b, sizeof b, "%.6g", v[i]);
    if (i) s += '\\';
    s += b;
  }
  return s;
}

// Text values are padded to an even length with a space (UIs with NUL).
inline std::string even(std::string s, char pad = ' ') {
  if (s.size() % 2) s.push_back(pad);
  return s;
}

inline DBytes dicom_slice(const SliceSpec& spec) {
  DBytes out = part10_head(kExplicitLE);
  DicomWriter w(false, false, out.size());
  const auto text = [&](std::uint32_t tag, const char* vr, const std::string& v) {
    w.text(tag, vr, even(v, std::string(vr) == "UI" ? '\0' : ' '));
  };
  text(0x00080008, "CS", spec.mosaic ? "ORIGINAL\\PRIMARY\\M\\MOSAIC" : "ORIGINAL\\PRIMARY");
  text(0x00080016, "UI", "1.2.840.10008.5.1.4.1.1.4");
  text(0x00080018, "UI", spec.sop);
  text(0x00080060, "CS", "MR");
  text(0x00180050, "DS", decimals(&spec.thickness, 1));
  if (spec.between) text(0x00180088, "DS", decimals(&spec.between, 1));
  if (spec.mosaic) {
    text(0x00190010, "LO", "SIEMENS MR HEADER");
    w.us(0x0019100A, static_cast<std::uint32_t>(spec.mosaic));
  }
  text(0x0020000E, "UI", spec.series);
  text(0x00200011, "IS", "3");
  text(0x00200013, "IS", std::to_string(spec.instance));
  if (!spec.frames) {
    text(0x00200032, "DS", decimals(spec.position, 3));
    text(0x00200037, "DS", decimals(spec.orientation, 6));
  }
  if (spec.temporal) text(0x00200100, "IS", std::to_string(spec.temporal));
  w.us(0x00280002, 1);
  text(0x00280004, "CS", "MONOCHROME2");
  if (spec.frames) text(0x00280008, "IS", std::to_string(spec.frames));
  w.us(0x00280010, static_cast<std::uint32_t>(spec.rows));
  w.us(0x00280011, static_cast<std::uint32_t>(spec.columns));
  if (!spec.frames) text(0x00280030, "DS", "0.5\\0.75");
  w.us(0x00280100, 16);
  w.us(0x00280101, 12);
  w.us(0x00280102, 11);
  w.us(0x00280103, 0);
  if (!spec.frames) {
    text(0x00281052, "DS", decimals(&spec.intercept, 1));
    text(0x00281053, "DS", decimals(&spec.slope, 1));
  }
  if (spec.frames) {
    // Shared: orientation and pixel measures; per frame: the position and the rescale.
    w.header(0x52009229, "SQ", 0xFFFFFFFF);
    w.item(0xFFFFFFFF);
    w.header(0x00209116, "SQ", 0xFFFFFFFF);
    w.item(0xFFFFFFFF);
    text(0x00200037, "DS", decimals(spec.orientation, 6));
    w.item_delimiter();
    w.sequence_delimiter();
    w.header(0x00289110, "SQ", 0xFFFFFFFF);
    w.item(0xFFFFFFFF);
    text(0x00180050, "DS", decimals(&spec.thickness, 1));
    text(0x00280030, "DS", "0.5\\0.75");
    w.item_delimiter();
    w.sequence_delimiter();
    w.item_delimiter();
    w.sequence_delimiter();
    w.header(0x52009230, "SQ", 0xFFFFFFFF);
    for (int f = 0; f < spec.frames; ++f) {
      w.item(0xFFFFFFFF);
      w.header(0x00209113, "SQ", 0xFFFFFFFF);
      w.item(0xFFFFFFFF);
      const double p[3] = {spec.position[0], spec.position[1], spec.position[2] + 2.0 * f};
      text(0x00200032, "DS", decimals(p, 3));
      w.item_delimiter();
      w.sequence_delimiter();
      w.item_delimiter();
    }
    w.sequence_delimiter();
  }
  DicomWriter pixels(false, false);
  const int count = spec.rows * spec.columns * (spec.frames ? spec.frames : 1);
  for (int i = 0; i < count; ++i)
    pixels.u16(static_cast<std::uint32_t>((i * 37 + spec.instance * 101) % 4096));
  w.element(0x7FE00010, "OW", pixels.bytes());
  out.insert(out.end(), w.bytes().begin(), w.bytes().end());
  return out;
}

}  // namespace vptest
