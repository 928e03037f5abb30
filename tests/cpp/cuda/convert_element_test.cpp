// The shared per-element conversion (src/cuda/convert_element.hpp), host instantiation, against
// the CPU path: core::select_conversion for every NIfTI conversion (every source dtype, both
// byte orders, unscaled and scaled, NaN payloads, infinities, subnormals and extremes), and
// decode_dicom_frames on hand-built native DICOM files (BitsAllocated 8 to 64, BitsStored
// masking and sign extension, both byte orders, Float Pixel Data, Rescale Slope/Intercept to
// float32/float64). Bit for bit: the device runs the same functions, so these tests are the
// host half of the bit-exactness argument.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/convert.hpp"
#include "cuda/convert_element.hpp"
#include "cuda/element_op.hpp"
#include "dicom/dicom_writer.hpp"
#include "dicom/modality.hpp"
#include "test_support.hpp"
#include "voxpipe/dicom.hpp"

namespace {

using voxpipe::DType;
using voxpipe::core::Conversion;
using voxpipe::cuda::ElementKind;
using voxpipe::cuda::ElementOp;
using vptest::Bytes;

constexpr DType kAllTypes[] = {DType::u8,  DType::i8,  DType::u16,  DType::i16,   DType::u32,
                               DType::i32, DType::u64, DType::i64,  DType::f32,   DType::f64,
                               DType::c64, DType::c128, DType::rgb24, DType::rgba32};

template <class F>
std::optional<voxpipe::ErrorCode> code_of(F&& f) {
  const auto e = vptest::catch_error(f);
  return e ? std::optional(e->code()) : std::nullopt;
}

template <class T>
void put(Bytes& b, T v) {
  const auto at = b.size();
  b.resize(at + sizeof(T));
  std::memcpy(b.data() + at, &v, sizeof(T));
}

// Scalars of one component type that stress the conversion: extremes, zeros of both signs,
// infinities, subnormals, NaNs with payloads (quiet and signalling, both signs), then random bits.
template <class T>
void special_values(Bytes& b) {
  using L = std::numeric_limits<T>;
  for (T v : {L::min(), L::max(), L::lowest(), T(0), T(1), T(-1), T(2), T(L::max() - 1)}) put(b, v);
  if constexpr (std::is_floating_point_v<T>) {
    for (T v : {-T(0), L::infinity(), -L::infinity(), L::denorm_min(), -L::denorm_min(),
                L::quiet_NaN(), -L::quiet_NaN(), L::signaling_NaN(), L::epsilon(),
                T(0.1), T(1e-30), T(3.4e38)})
      put(b, v);
    using U = voxpipe::cuda::element::UintOf<T>;
    for (U u : {U(sizeof(T) == 4 ? 0x7F800001u : 0x7FF0000000000001ull),     // sNaN, payload 1
                U(sizeof(T) == 4 ? 0xFFA5A5A5u : 0xFFF5A5A5A5A5A5A5ull),     // negative sNaN
                U(sizeof(T) == 4 ? 0x7FC12345u : 0x7FF8123456789ABCull)}) {  // qNaN with payload
      T v;
      std::memcpy(&v, &u, sizeof(T));
      put(b, v);
    }
  }
}

Bytes test_payload(DType t, std::size_t random_elements) {
  Bytes b;
  switch (voxpipe::dtype_component_size(t) == 1 ? DType::u8 : t) {
    case DType::u8: special_values<std::uint8_t>(b); special_values<std::int8_t>(b); break;
    case DType::u16: special_values<std::uint16_t>(b); break;
    case DType::i16: special_values<std::int16_t>(b); break;
    case DType::u32: special_values<std::uint32_t>(b); break;
    case DType::i32: special_values<std::int32_t>(b); break;
    case DType::u64: special_values<std::uint64_t>(b); break;
    case DType::i64: special_values<std::int64_t>(b); break;
    case DType::f32: case DType::c64: special_values<float>(b); break;
    case DType::f64: case DType::c128: special_values<double>(b); break;
    default: break;
  }
  // Swapped variants of the specials, then random bytes.
  const std::size_t comp = voxpipe::dtype_component_size(t);
  const std::size_t n = b.size();
  for (std::size_t i = 0; i + comp <= n; i += comp)
    for (std::size_t k = 0; k < comp; ++k) b.push_back(b[i + comp - 1 - k]);
  std::mt19937_64 rng(static_cast<unsigned>(t) * 7919 + 1);
  for (std::size_t i = 0; i < random_elements * voxpipe::dtype_size(t); ++i)
    b.push_back(static_cast<std::uint8_t>(rng()));
  const std::size_t size = voxpipe::dtype_size(t);
  b.resize(b.size() / size * size);
  return b;
}

Bytes run_cpu(const Conversion& c, const Bytes& src) {
  const auto fn = voxpipe::core::select_conversion(c);
  const std::size_t n = src.size() / voxpipe::dtype_size(c.source);
  const std::size_t out_size = voxpipe::dtype_size(c.dest);
  Bytes out(n * out_size, 0xAB);
  fn(c, reinterpret_cast<const std::byte*>(src.data()),
     static_cast<std::ptrdiff_t>(voxpipe::dtype_size(c.source)),
     reinterpret_cast<std::byte*>(out.data()), static_cast<std::ptrdiff_t>(out_size), n);
  return out;
}

Bytes run_shared(const ElementOp& op, const Bytes& src) {
  EXPECT_EQ(voxpipe::cuda::element_op_problem(op), nullptr);
  const std::size_t n = src.size() / voxpipe::dtype_size(op.source);
  Bytes out(n * voxpipe::dtype_size(op.dest), 0xCD);
  voxpipe::cuda::convert_elements(op, src.data(), out.data(), 0, n);
  return out;
}

// The first differing element, for a readable failure.
std::string first_difference(const Bytes& a, const Bytes& b, std::size_t size) {
  if (a.size() != b.size()) return "sizes differ";
  for (std::size_t i = 0; i < a.size(); i += size)
    if (std::memcmp(a.data() + i, b.data() + i, size) != 0) {
      std::string s = "element " + std::to_string(i / size) + ": cpu";
      char hex[4];
      for (std::size_t k = 0; k < size; ++k) s += (std::snprintf(hex, 4, " %02x", a[i + k]), hex);
      s += " shared";
      for (std::size_t k = 0; k < size; ++k) s += (std::snprintf(hex, 4, " %02x", b[i + k]), hex);
      return s;
    }
  return "";
}

bool is_nan_at(const Bytes& b, std::size_t at, std::size_t size) {
  if (size == 4) {
    float f;
    std::memcpy(&f, b.data() + at, 4);
    return std::isnan(f);
  }
  double d;
  std::memcpy(&d, b.data() + at, 8);
  return std::isnan(d);
}

// The one result the CPU path leaves to its compiler: scaling a complex value whose real and
// imaginary parts are both NaNs, the imaginary part re*0 + im*slope is the NaN of either
// operand, as the compiler orders the + (GCC 12 picks differently for complex64 and complex128).
// There the shared result must be a NaN; which payload is not checked.
void accept_either_nan_payload(const Conversion& c, const Bytes& src, const Bytes& cpu, Bytes& shared) {
  if (!voxpipe::dtype_is_complex(c.source) || !voxpipe::dtype_is_complex(c.dest) || !c.scale ||
      c.slope == 1.0)
    return;
  const std::size_t in = voxpipe::dtype_size(c.source), out = voxpipe::dtype_size(c.dest);
  for (std::size_t i = 0; i < src.size() / in; ++i) {
    Bytes element(src.begin() + i * in, src.begin() + (i + 1) * in);
    if (c.swap)
      for (std::size_t k = 0; k < 2; ++k) std::reverse(element.begin() + k * in / 2, element.begin() + (k + 1) * in / 2);
    if (!is_nan_at(element, 0, in / 2) || !is_nan_at(element, in / 2, in / 2)) continue;
    EXPECT_TRUE(is_nan_at(shared, i * out + out / 2, out / 2)) << "element " << i;
    std::memcpy(shared.data() + i * out + out / 2, cpu.data() + i * out + out / 2, out / 2);
  }
}

struct Scale {
  bool scale;
  double slope, inter;
};
constexpr Scale kScales[] = {
    {false, 1, 0},       {true, 1, 0},         {true, 2.5, 0},         {true, 1, -3.25},
    {true, 0.1, 1e10},   {true, -1e-3, 7},     {true, 1e300, -1e300},  {true, 3e-320, 0},
    {true, -0.0, 0.5},   {true, 1.0 / 3, 1e-310}, {true, 65504.0, -2.0}};

TEST(ConvertElement, SizesMatchTheDtypeTable) {
  for (DType t : kAllTypes) {
    EXPECT_EQ(voxpipe::cuda::element::size_of(t), voxpipe::dtype_size(t)) << voxpipe::dtype_name(t);
    EXPECT_EQ(voxpipe::cuda::element::component_size_of(t), voxpipe::dtype_component_size(t));
  }
}

TEST(ConvertElement, NiftiEqualsSelectConversionBitForBit) {
  int checked = 0;
  for (DType source : kAllTypes) {
    const Bytes src = test_payload(source, 257);
    for (DType dest : {DType::f32, DType::f64, DType::c64, DType::c128}) {
      for (bool swap : {false, true}) {
        for (const Scale& s : kScales) {
          Conversion c{source, swap, dest, false, s.scale, s.slope, s.inter};
          if (!voxpipe::core::select_conversion(c)) continue;
          const ElementOp op = voxpipe::cuda::nifti_element_op(c);
          EXPECT_EQ(op.kind, ElementKind::nifti);
          const Bytes cpu = run_cpu(c, src);
          Bytes shared = run_shared(op, src);
          accept_either_nan_payload(c, src, cpu, shared);
          ASSERT_EQ(first_difference(cpu, shared, voxpipe::dtype_size(dest)), "")
              << voxpipe::dtype_name(source) << " -> " << voxpipe::dtype_name(dest)
              << " swap=" << swap << " scale=" << s.scale << " slope=" << s.slope
              << " inter=" << s.inter;
          ++checked;
        }
      }
    }
  }
  // 10 real sources x 2 dests + 2 complex x 4 dests, 2 orders, 11 scalings.
  EXPECT_EQ(checked, (10 * 2 + 2 * 4) * 2 * 11);
}

TEST(ConvertElement, RawCopiesEqualSelectConversion) {
  for (DType t : kAllTypes) {
    const Bytes src = test_payload(t, 100);
    for (bool swap : {false, true}) {
      Conversion c{t, swap, t, true, false, 1, 0};
      const ElementOp op = voxpipe::cuda::nifti_element_op(c);
      EXPECT_EQ(op.kind, ElementKind::raw);
      EXPECT_EQ(first_difference(run_cpu(c, src), run_shared(op, src), voxpipe::dtype_size(t)), "")
          << voxpipe::dtype_name(t) << " swap=" << swap;
    }
  }
}

TEST(ConvertElement, UnsupportedNiftiConversionsAreRefused) {
  const auto refused = [](Conversion c) {
    return code_of([&] { voxpipe::cuda::nifti_element_op(c); });
  };
  EXPECT_EQ(refused({DType::rgb24, false, DType::f32, false, false, 1, 0}),
            voxpipe::ErrorCode::invalid_argument);
  EXPECT_EQ(refused({DType::i16, false, DType::i32, false, false, 1, 0}),
            voxpipe::ErrorCode::invalid_argument);
  ElementOp bad;
  bad.kind = ElementKind::nifti;
  bad.source = DType::i16;
  bad.dest = DType::i16;
  EXPECT_NE(voxpipe::cuda::element_op_problem(bad), nullptr);
  bad.kind = ElementKind::raw;
  bad.dest = DType::f32;
  EXPECT_NE(voxpipe::cuda::element_op_problem(bad), nullptr);
}

// ---- DICOM ----------------------------------------------------------------------------------

struct DicomCase {
  unsigned bits_allocated, bits_stored, representation;
  bool float_data;  // Float Pixel Data (7FE0,0008) instead of Pixel Data
  bool big_endian;
  std::string slope, intercept;  // empty: no Rescale elements
};

std::string even(std::string s) {
  if (s.size() % 2) s.push_back(' ');
  return s;
}

// A native MONOCHROME2 file of rows x columns holding `pixel`.
vptest::DBytes dicom_file(const DicomCase& k, unsigned rows, unsigned columns,
                          const vptest::DBytes& pixel) {
  const std::string ts = k.big_endian ? vptest::kExplicitBE : vptest::kExplicitLE;
  vptest::DBytes file = vptest::part10_head(ts);
  vptest::DicomWriter w(false, k.big_endian, file.size());
  w.us(0x00280002, 1);
  w.text(0x00280004, "CS", "MONOCHROME2 ");
  w.us(0x00280010, rows);
  w.us(0x00280011, columns);
  w.us(0x00280100, k.bits_allocated);
  if (!k.float_data) {
    w.us(0x00280101, k.bits_stored);
    w.us(0x00280102, k.bits_stored - 1);
    w.us(0x00280103, k.representation);
  }
  if (!k.slope.empty()) {
    w.text(0x00281052, "DS", even(k.intercept));
    w.text(0x00281053, "DS", even(k.slope));
  }
  w.element(k.float_data ? 0x7FE00008 : 0x7FE00010,
            k.float_data ? "OF" : (k.bits_allocated == 8 ? "OB" : "OW"), pixel);
  file.insert(file.end(), w.bytes().begin(), w.bytes().end());
  return file;
}

// What read_modality does with the Rescale elements.
voxpipe::dicom::Modality rescale_of(const voxpipe::DicomFile& f) {
  voxpipe::dicom::Modality m;
  const auto slope = f.dataset.number(0x00281053), inter = f.dataset.number(0x00281052);
  if (slope && inter) {
    m.kind = voxpipe::dicom::Modality::Kind::rescale;
    m.slope = *slope;
    m.intercept = *inter;
  }
  return m;
}

TEST(ConvertElement, DicomEqualsDecodeDicomFramesBitForBit) {
  std::vector<DicomCase> cases;
  for (bool big : {false, true}) {
    for (unsigned ba : {8u, 16u, 32u, 64u}) {
      for (unsigned bs : {ba, ba - 1, ba / 2 + 1, 1u}) {
        for (unsigned rep : {0u, 1u}) {
          for (auto [s, i] : {std::pair<std::string, std::string>{"", ""}, {"1", "0"},
                              {"2.5", "-1024"}, {"-0.5", "0"}, {"0", "3"}, {"1e-3", "1e9"}})
            cases.push_back({ba, bs, rep, false, big, s, i});
        }
      }
    }
    for (auto [s, i] : {std::pair<std::string, std::string>{"", ""}, {"0", "1"}, {"-3", "0.25"}})
      cases.push_back({32, 32, 0, true, big, s, i});
  }
  const unsigned rows = 7, columns = 9;
  int checked = 0;
  for (const DicomCase& k : cases) {
    // Pixel bytes in the file's byte order: specials of the stored type, then random bytes.
    const DType stored = k.float_data ? DType::f32
                         : k.bits_allocated == 8 ? (k.representation ? DType::i8 : DType::u8)
                         : k.bits_allocated == 16 ? (k.representation ? DType::i16 : DType::u16)
                         : k.bits_allocated == 32 ? (k.representation ? DType::i32 : DType::u32)
                                                  : (k.representation ? DType::i64 : DType::u64);
    Bytes pixel = test_payload(stored, rows * columns);
    pixel.resize(std::size_t(rows) * columns * voxpipe::dtype_size(stored));
    const vptest::DBytes file = dicom_file(k, rows, columns, pixel);
    const voxpipe::DicomFile f = voxpipe::parse_dicom(file, "case.dcm");
    const voxpipe::DicomPixelInfo info = voxpipe::dicom_pixel_info(f, file);
    for (std::optional<DType> modality : {std::optional<DType>{}, std::optional<DType>{DType::f32},
                                          std::optional<DType>{DType::f64}}) {
      voxpipe::DicomDecodeOptions options;
      options.modality = modality;
      Bytes cpu(voxpipe::dicom_output_frame_bytes(info, options));
      voxpipe::decode_dicom_frames(f, info, 0, 1, cpu, options, file);
      const ElementOp op = voxpipe::cuda::dicom_element_op(info, k.big_endian, options, rescale_of(f));
      const Bytes shared = run_shared(op, pixel);
      ASSERT_EQ(first_difference(cpu, shared, voxpipe::dtype_size(op.dest)), "")
          << "BitsAllocated " << k.bits_allocated << " BitsStored " << k.bits_stored
          << " PixelRepresentation " << k.representation << " float " << k.float_data
          << " big-endian " << k.big_endian << " slope '" << k.slope << "' intercept '"
          << k.intercept << "' modality " << (modality ? voxpipe::dtype_name(*modality) : "none");
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(cases.size()) * 3);
}

TEST(ConvertElement, DicomLayoutsThatAreNotElementWiseAreRefused) {
  voxpipe::DicomPixelInfo info;
  info.tag = 0x7FE00010;
  info.bits_allocated = 16;
  info.bits_stored = 12;
  info.dtype = DType::u16;
  info.photometric = "MONOCHROME2";
  const voxpipe::dicom::Modality none;
  const auto code = [&](const voxpipe::DicomPixelInfo& i, const voxpipe::DicomDecodeOptions& o,
                        const voxpipe::dicom::Modality& m) {
    return code_of([&] { voxpipe::cuda::dicom_element_op(i, false, o, m); });
  };
  EXPECT_EQ(code(info, {}, none), std::nullopt);
  auto packed = info;
  packed.bits_allocated = packed.bits_stored = 1;
  EXPECT_EQ(code(packed, {}, none), voxpipe::ErrorCode::unsupported);
  auto jpeg = info;
  jpeg.codec = voxpipe::DicomCodec::jpeg;
  EXPECT_EQ(code(jpeg, {}, none), voxpipe::ErrorCode::unsupported);
  auto planar = info;
  planar.samples_per_pixel = 3;
  planar.planar_configuration = 1;
  EXPECT_EQ(code(planar, {}, none), voxpipe::ErrorCode::unsupported);
  voxpipe::dicom::Modality lut;
  lut.kind = voxpipe::dicom::Modality::Kind::lut;
  voxpipe::DicomDecodeOptions to_f32;
  to_f32.modality = DType::f32;
  EXPECT_EQ(code(info, to_f32, lut), voxpipe::ErrorCode::unsupported);
  voxpipe::DicomDecodeOptions to_i32;
  to_i32.modality = DType::i32;
  EXPECT_EQ(code(info, to_i32, none), voxpipe::ErrorCode::invalid_argument);
}

}  // namespace
