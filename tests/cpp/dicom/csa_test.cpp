// The Siemens CSA header parser (src/dicom/csa.hpp): against nibabel.nicom.csareader's values for
// nibabel's own test headers (found in the .venv's nibabel, or VOXPIPE_NIBABEL_DATA), on
// hand-built headers in both formats, and on hostile ones: every count and length that lies, and
// every truncation, is Error(format) naming the source, the field and the file offset.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "dicom/csa.hpp"
#include "dicom/dicom_writer.hpp"
#include "test_support.hpp"
#include "voxpipe/dicom.hpp"
#include "voxpipe/error.hpp"

namespace {

using namespace voxpipe;
using namespace voxpipe::dicom;
namespace fs = std::filesystem;

// nibabel's nicom test data: VOXPIPE_NIBABEL_DATA, else the nibabel of the checkout's .venv
// (scripts/setup.sh installs it); empty when neither is there.
fs::path nibabel_data() {
  if (const char* env = std::getenv("VOXPIPE_NIBABEL_DATA"); env && *env) return env;
  std::error_code ec;
  for (fs::path dir = fs::path(__FILE__).parent_path(); !dir.empty() && dir != dir.parent_path();
       dir = dir.parent_path()) {
    const fs::path lib = dir / ".venv" / "lib";
    if (!fs::is_directory(lib, ec)) continue;
    for (const auto& py : fs::directory_iterator(lib, ec)) {
      const fs::path data = py.path() / "site-packages/nibabel/nicom/tests/data";
      if (fs::is_regular_file(data / "csa2_b1000.bin", ec)) return data;
    }
  }
  return {};
}

std::vector<std::uint8_t> read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

#define NIBABEL_DATA_OR_SKIP(var)                                                   \
  const fs::path var = nibabel_data();                                              \
  if (var.empty()) GTEST_SKIP() << "nibabel's test data not found (.venv missing; " \
                                   "set VOXPIPE_NIBABEL_DATA)"

// A CSA header written element by element (format 2 "SV10", or format 1).
struct CsaItem {
  std::string value;
  std::optional<std::int32_t> length = std::nullopt;  // as stored; nullopt: the value's size
};
struct CsaSpec {
  std::string name, vr;
  std::int32_t vm = 1;
  std::vector<CsaItem> items;
  std::uint32_t n_items = 0xFFFFFFFF;  // as stored; all ones: items.size()
};
vptest::DBytes write_csa(const std::vector<CsaSpec>& elements, bool format2 = true,
                         std::uint32_t count = 0xFFFFFFFF) {
  vptest::DicomWriter w(false, false);
  const auto raw = [&](const std::string& s) {
    for (char c : s) w.raw({static_cast<std::uint8_t>(c)});
  };
  if (format2) raw(std::string("SV10\4\3\2\1", 8));
  w.u32(count == 0xFFFFFFFF ? std::uint32_t(elements.size()) : count);
  w.u32(77);
  const std::uint32_t first_items = elements.empty() ? 0 : std::uint32_t(elements[0].items.size());
  for (const CsaSpec& e : elements) {
    std::string name = e.name;
    name.resize(64, '\0');
    raw(name);
    w.u32(static_cast<std::uint32_t>(e.vm));
    std::string vr = e.vr;
    vr.resize(4, '\0');
    raw(vr);
    w.u32(6);
    w.u32(e.n_items == 0xFFFFFFFF ? std::uint32_t(e.items.size()) : e.n_items);
    w.u32(77);
    for (const CsaItem& it : e.items) {
      const auto len = static_cast<std::uint32_t>(it.length.value_or(std::int32_t(it.value.size())));
      // Format 1 stores the length plus the first element's item count (SPM's read_CSA).
      w.u32(format2 ? len : len + first_items);
      w.u32(len);
      w.u32(77);
      w.u32(len);
      std::string v = it.value;
      v.resize((v.size() + 3) / 4 * 4, '\0');
      raw(v);
    }
  }
  return w.bytes();
}

// The Error parse_csa throws, or a test failure.
Error csa_error(const vptest::DBytes& b) {
  try {
    parse_csa(b, "x.dcm (0029,1010)", 1000);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error(ErrorCode::format, "", "", "");
}

// nibabel.nicom.csareader.read(csa2_b1000.bin), values as it converts them (numeric VRs) or as
// text: every element with items.
TEST(Csa, MatchesNibabelOnItsDiffusionMosaicHeader) {
  NIBABEL_DATA_OR_SKIP(data);
  const auto bytes = read_all(data / "csa2_b1000.bin");
  const CsaHeader h = parse_csa(bytes, "csa2_b1000.bin");
  ASSERT_EQ(h.elements().size(), 83u);
  const std::vector<std::pair<const char*, std::vector<double>>> numbers = {
      {"EchoLinePosition", {64}},
      {"EchoColumnPosition", {64}},
      {"EchoPartitionPosition", {32}},
      {"UsedChannelMask", {4095}},
      {"B_value", {1000}},
      {"ProtocolSliceNumber", {0}},
      {"RealDwellTime", {2800}},
      {"SliceMeasurementDuration", {40.0}},
      {"SequenceMask", {134217732}},
      {"MeasuredFourierLines", {0}},
      {"PhaseEncodingDirectionPositive", {1}},
      {"NumberOfImagesInMosaic", {48}},
      {"DiffusionGradientDirection", {0.99997449, 0.00505012, -0.00505012}},
      {"SliceNormalVector", {0.0, 0.00523632, 0.99998629}},
      {"TimeAfterStart", {19.74}},
      {"ImaAbsTablePosition", {0, 0, -1252}},
      {"NonPlanarImage", {0}},
      {"SlicePosition_PCS", {-805.0, -825.01911853, -75.0976409}},
      {"MultistepIndex", {0}},
      {"ImaRelTablePosition", {0, 0, 0}},
      {"B_matrix", {992.0, 5.0, -5.0, 1.0, -1.0, 1.0}},
      {"BandwidthPerPixelPhaseEncode", {19.055}},
  };
  std::size_t with_items = 0;
  for (const CsaElement& e : h.elements()) with_items += !e.items.empty();
  // The 22 numeric elements above, 7 text ones and MosaicRefAcqTimes; the other 53 are empty.
  EXPECT_EQ(with_items, numbers.size() + 8);
  for (const auto& [name, want] : numbers) {
    const std::vector<double> got = h.numbers(name);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-9) << name;
  }
  const std::vector<std::pair<const char*, const char*>> texts = {
      {"ICE_Dims", "X_1_1_1_2_1_1_48_1_1_1_1_201"},
      {"AcquisitionMatrixText", "128p*128"},
      {"DiffusionDirectionality", "DIRECTIONAL"},
      {"ImaCoilString", "T:HEA;HEP"},
      {"RFSWDDataType", "predicted"},
      {"GSWDDataType", "predicted"},
      {"ImaPATModeText", "p2"},
  };
  for (const auto& [name, want] : texts) {
    EXPECT_EQ(h.string(name).value_or("<none>"), want) << name;
    EXPECT_TRUE(h.numbers(name).empty()) << name;  // not numbers
  }
  const CsaElement* times = h.find("MosaicRefAcqTimes");
  ASSERT_NE(times, nullptr);
  EXPECT_EQ(times->vr, "FD");
  EXPECT_EQ(times->vm, 0);  // VM 0: as many values as items
  const auto t = h.numbers("MosaicRefAcqTimes");
  ASSERT_EQ(t.size(), 48u);
  EXPECT_NEAR(t[0], 6489.99999999, 1e-6);
  EXPECT_NEAR(t[2], 6212.49999999, 1e-6);
  EXPECT_EQ(t[47], 0.0);
  EXPECT_EQ(h.number("B_value"), 1000.0);
  EXPECT_EQ(h.number("B_value", 1), std::nullopt);
  EXPECT_EQ(h.find("NoSuchElement"), nullptr);

  const CsaHeader b0 = parse_csa(read_all(data / "csa2_b0.bin"), "csa2_b0.bin");
  EXPECT_EQ(b0.elements().size(), 83u);
  EXPECT_EQ(b0.number("B_value"), 0.0);
  EXPECT_TRUE(b0.numbers("DiffusionGradientDirection").empty());  // nibabel: None
  EXPECT_EQ(b0.string("ICE_Dims"), "X_1_1_1_1_1_1_48_1_1_1_1_201");
}

// nibabel's csa_str_valid.bin (one element, one empty item) and csa_str_1001n_items.bin (1001
// empty items: nibabel refuses more than 1000, voxpipe reads them as the bytes hold them).
TEST(Csa, NibabelsSmallHeaders) {
  NIBABEL_DATA_OR_SKIP(data);
  for (const char* file : {"csa_str_valid.bin", "csa_str_1001n_items.bin"}) {
    const CsaHeader h = parse_csa(read_all(data / file), file);
    ASSERT_EQ(h.elements().size(), 1u) << file;
    EXPECT_EQ(h.elements()[0].name, "EchoLinePosition");
    EXPECT_EQ(h.elements()[0].vr, "IS");
    EXPECT_TRUE(h.elements()[0].items.empty());
  }
}

// The CSA image and series headers of a Siemens file (nibabel's 0.dcm: 83 and 65 elements, as
// nibabel counts them), and its Phoenix protocol, as nibabel.nicom.ascconv parses it.
TEST(Csa, HeadersAndPhoenixProtocolOfASiemensFile) {
  NIBABEL_DATA_OR_SKIP(data);
  const std::string path = (data / "0.dcm").string();
  const DicomFile f = read_dicom(path);
  const auto image = csa_header(f.dataset, CsaKind::image, path, {}, false);
  const auto series = csa_header(f.dataset, CsaKind::series, path, {}, false);
  ASSERT_TRUE(image && series);
  EXPECT_EQ(image->elements().size(), 83u);
  EXPECT_EQ(series->elements().size(), 65u);
  EXPECT_EQ(image->number("NumberOfImagesInMosaic"), 48.0);
  // The series header's value (some 70 KiB) was located, not read, with a small value limit:
  // csa_header reads it from the file, or from the bytes in memory.
  DicomReadOptions small;
  small.max_value_size = 1024;
  const DicomFile located = read_dicom(path, small);
  const auto bytes = read_all(path);
  for (std::span<const std::uint8_t> b : {std::span<const std::uint8_t>(),
                                          std::span<const std::uint8_t>(bytes)}) {
    const auto s = csa_header(located.dataset, CsaKind::series, path, b, false);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->elements().size(), 65u);
  }
  EXPECT_FALSE(csa_header(located.dataset, CsaKind::series, path, {}, true));  // inflated offsets
  const std::string text = series->string("MrPhoenixProtocol").value_or("");
  ASSERT_EQ(text.size(), 68174u);  // nibabel: 68175, with the trailing blank
  const auto protocol = parse_ascconv(text);
  // nibabel's parse_ascconv, flattened to these keys, has 917 values; voxpipe keeps every key
  // as written, the same 917.
  EXPECT_EQ(protocol.size(), 917u);
  const std::map<std::string, std::string> want = {
      {"sKSpace.ucMultiSliceMode", "0x2"},
      {"sSliceArray.asSlice[0].dThickness", "2.5"},
      {"tProtocolName", "CBU+AF8-DTI+AF8-64D+AF8-1A"},
      {"sRXSPEC.alDwellTime[0]", "2800"},
      {"lTotalScanTimeSec", "450"},
      {"sDiffusion.lDiffDirections", "64"},
      {"sAdjData.uiAdjFreMode", "0x1"},
      {"alTR[0]", "6600000"},
      {"sSliceArray.lSize", "48"},
  };
  for (const auto& [k, v] : want) {
    const auto it = protocol.find(k);
    ASSERT_NE(it, protocol.end()) << k;
    EXPECT_EQ(it->second, v) << k;
  }
  // A file without CSA headers: nullopt.
  const std::string plain = (data / "decimal_rescale.dcm").string();
  EXPECT_FALSE(csa_header(read_dicom(plain).dataset, CsaKind::image, plain, {}, false));
}

TEST(Csa, BothFormatsAndTheItemRules) {
  const std::vector<CsaSpec> spec = {
      {"B_value", "IS", 1, {{"1000 "}, {""}, {""}}},
      // VM 3 of 6 items: the last three are padding; text values keep spaces inside.
      {"DiffusionGradientDirection", "FD", 3, {{"0.5"}, {"-0.5"}, {"0.70710678"}, {""}, {""}, {""}}},
      {"ImaCoilString", "LO", 1, {{std::string("T:HEA;HEP\0junk", 14)}}},
      // A numeric element ends at its first empty item (nibabel's rule).
      {"MosaicRefAcqTimes", "FD", 0, {{"1.5"}, {""}, {"2.5"}}},
      {"Empty", "UN", 0, {}},
      {"NotANumber", "DS", 1, {{"1.5x"}}},
  };
  for (bool format2 : {true, false}) {
    const CsaHeader h = parse_csa(write_csa(spec, format2), "x");
    ASSERT_EQ(h.elements().size(), spec.size()) << format2;
    EXPECT_EQ(h.number("B_value"), 1000.0);
    EXPECT_EQ(h.find("B_value")->items, std::vector<std::string>{"1000"});
    EXPECT_EQ(h.numbers("DiffusionGradientDirection"),
              (std::vector<double>{0.5, -0.5, 0.70710678}));
    EXPECT_EQ(h.string("ImaCoilString"), "T:HEA;HEP");
    EXPECT_EQ(h.numbers("MosaicRefAcqTimes"), std::vector<double>{1.5});
    EXPECT_TRUE(h.find("Empty")->items.empty());
    EXPECT_EQ(h.find("Empty")->vr, "UN");
    EXPECT_TRUE(h.numbers("NotANumber").empty());
    EXPECT_EQ(h.string("NotANumber"), "1.5x");
  }
  EXPECT_TRUE(parse_csa({}, "x").elements().empty());
  EXPECT_TRUE(parse_csa(write_csa({}), "x").elements().empty());
}

// Counts that claim more than the bytes hold are refused before anything is allocated from
// them; the error names the source, the field and the offset in the file.
TEST(Csa, LyingCountsAndLengthsAreFormatErrors) {
  const CsaSpec one{"B_value", "IS", 1, {{"1000"}}};
  {
    const Error e = csa_error(write_csa({one}, true, 0x80000000u));  // 2^31 elements
    EXPECT_EQ(e.code(), ErrorCode::format);
    EXPECT_EQ(e.path(), "x.dcm (0029,1010)");
    EXPECT_NE(e.field().find("element count"), std::string::npos) << e.what();
    EXPECT_EQ(e.offset(), 1000u + 8);
  }
  {
    const Error e = csa_error(write_csa({one}, true, 2));  // 2 elements, bytes for 1
    EXPECT_NE(e.field().find("element count 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("168 bytes"), std::string::npos) << e.what();
  }
  for (std::uint32_t items : {0x80000000u, 2u, 0xFFFFFFFEu}) {
    CsaSpec lying = one;
    lying.n_items = items;
    const Error e = csa_error(write_csa({lying}));
    EXPECT_EQ(e.code(), ErrorCode::format);
    EXPECT_NE(e.field().find("element 0 (B_value) item count"), std::string::npos) << e.what();
    EXPECT_EQ(e.offset(), 1000u + 16 + 76);
  }
  for (std::int32_t length : {5, 0x7FFFFFFF, -1 - 0x7FFFFFFF, -4}) {
    CsaSpec lying = one;
    lying.items[0].length = length;
    const Error e = csa_error(write_csa({lying}));
    EXPECT_EQ(e.code(), ErrorCode::format) << length;
    EXPECT_NE(e.field().find("element 0 (B_value) item 0 length"), std::string::npos)
        << length << ": " << e.what();
  }
  // Format 1: a stored length below the first element's item count is negative.
  {
    vptest::DBytes b = write_csa({one}, false);
    b[8 + 84] = 0;  // x0 = 0, less than 1
    const Error e = csa_error(b);
    EXPECT_NE(std::string(e.what()).find("negative"), std::string::npos) << e.what();
    EXPECT_EQ(e.offset(), 1000u + 8 + 84);
  }
}

// Every truncation of a valid header is refused with Error(format) (or, where the cut falls in
// the last value's padding, parses to the same values).
TEST(Csa, EveryTruncationIsAFormatError) {
  const std::vector<CsaSpec> spec = {
      {"B_value", "IS", 1, {{"1000"}, {""}}},
      {"DiffusionGradientDirection", "FD", 3, {{"0.5"}, {"-0.5"}, {"0.7"}}},
  };
  for (bool format2 : {true, false}) {
    const vptest::DBytes full = write_csa(spec, format2);
    for (std::size_t n = 1; n < full.size(); ++n) {
      const vptest::DBytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
      try {
        const CsaHeader h = parse_csa(cut, "x.dcm", 0);
        // Only the padding of the last value ("0.7" + 1 byte) may be cut.
        EXPECT_GE(n, full.size() - 1) << n;
        EXPECT_EQ(h.numbers("DiffusionGradientDirection"), (std::vector<double>{0.5, -0.5, 0.7}));
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::format) << n;
        EXPECT_EQ(e.path(), "x.dcm");
        ASSERT_TRUE(e.offset()) << n;
        EXPECT_LE(*e.offset(), n) << n << ": " << e.what();
      }
    }
  }
}

TEST(Csa, Ascconv) {
  const std::string text =
      "junk before\n"
      "### ASCCONV BEGIN object=MrProtDataImpl@MrProtocolData version=51130001 ###\n"
      "ulVersion                                = 0x14b44b6\n"
      "tSequenceFileName                        = \"\"%SiemensSeq%\\ep2d_diff\"\"\n"
      "sSliceArray.asSlice[0].dThickness        = 2.5\r\n"
      "sWipMemBlock.alFree[3]                   = 7    # a comment\n"
      "tComment                                 = \"\"a # inside\"\"\n"
      "not a pair\n"
      "ulVersion                                = 2\n"
      "### ASCCONV END ###\n"
      "after                                    = 1\n"
      "### ASCCONV BEGIN ###\nsecond = 1\n### ASCCONV END ###\n";
  const auto p = parse_ascconv(text);
  const std::map<std::string, std::string> want = {
      {"ulVersion", "0x14b44b6"},  // the first of a repeated key
      {"tSequenceFileName", "%SiemensSeq%\\ep2d_diff"},
      {"sSliceArray.asSlice[0].dThickness", "2.5"},
      {"sWipMemBlock.alFree[3]", "7"},
      {"tComment", "a # inside"},
  };
  EXPECT_EQ(p, want);
  EXPECT_TRUE(parse_ascconv("no protocol = here").empty());
  EXPECT_TRUE(parse_ascconv("### ASCCONV BEGIN ###").empty());
  // Cut short: the lines that are there.
  EXPECT_EQ(parse_ascconv("### ASCCONV BEGIN ###\na = 1\nb = 2"),
            (std::map<std::string, std::string>{{"a", "1"}, {"b", "2"}}));
}

}  // namespace
