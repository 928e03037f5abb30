// read_zarr_chunks against an independent reference: chunks encoded by the codec libraries' own
// encoders (libzstd, c-blosc, zlib), padded edge chunks holding junk, C and F chunk orders, every
// selection step, permuted destinations and the NIfTI conversion; damaged chunks of every
// compressor fail with the right code, naming the array, the chunk's key and the field "chunk".
#include <blosc.h>
#include <zlib.h>
#include <zstd.h>

#include <functional>
#include <map>

#include "core/convert.hpp"
#include "test_support.hpp"
#include "voxpipe/zarr.hpp"

namespace {

using voxpipe::AxisRange;
using voxpipe::DType;
using voxpipe::ErrorCode;
using voxpipe::OutputSpec;
using voxpipe::ZarrArraySpec;
using voxpipe::ZarrChunk;
using voxpipe::ZarrCompressor;
using vptest::Bytes;

using Shape = std::vector<std::int64_t>;

std::int64_t product(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// ---- encoders: the libraries' own, as numcodecs and zarr call them --------------------------

enum class Encoding {
  none,
  zstd_sized,      // content size in the frame header (numcodecs Zstd)
  zstd_unsized,    // no content size (streaming writers)
  zstd_checksum,   // content size and a checksum
  zstd_two_frames, // the chunk split over two frames, the first without content size
  gzip,
  zlib,
  blosc_noshuffle,
  blosc_shuffle,
  blosc_bitshuffle,
};

const char* encoding_name(Encoding e) {
  switch (e) {
    case Encoding::none: return "none";
    case Encoding::zstd_sized: return "zstd_sized";
    case Encoding::zstd_unsized: return "zstd_unsized";
    case Encoding::zstd_checksum: return "zstd_checksum";
    case Encoding::zstd_two_frames: return "zstd_two_frames";
    case Encoding::gzip: return "gzip";
    case Encoding::zlib: return "zlib";
    case Encoding::blosc_noshuffle: return "blosc_noshuffle";
    case Encoding::blosc_shuffle: return "blosc_shuffle";
    case Encoding::blosc_bitshuffle: return "blosc_bitshuffle";
  }
  return "?";
}

ZarrCompressor compressor_of(Encoding e) {
  switch (e) {
    case Encoding::none: return ZarrCompressor::none;
    case Encoding::zstd_sized:
    case Encoding::zstd_unsized:
    case Encoding::zstd_checksum:
    case Encoding::zstd_two_frames: return ZarrCompressor::zstd;
    case Encoding::gzip: return ZarrCompressor::gzip;
    case Encoding::zlib: return ZarrCompressor::zlib;
    default: return ZarrCompressor::blosc;
  }
}

const Encoding kEncodings[] = {Encoding::none,          Encoding::zstd_sized,
                               Encoding::zstd_unsized,  Encoding::zstd_checksum,
                               Encoding::zstd_two_frames, Encoding::gzip,
                               Encoding::zlib,          Encoding::blosc_noshuffle,
                               Encoding::blosc_shuffle, Encoding::blosc_bitshuffle};

Bytes zstd_frame(std::span<const std::uint8_t> data, bool content_size, bool checksum) {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 3);
  ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, content_size ? 1 : 0);
  ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, checksum ? 1 : 0);
  Bytes out(ZSTD_compressBound(data.size()));
  std::size_t n;
  if (content_size) {
    n = ZSTD_compress2(c, out.data(), out.size(), data.data(), data.size());
  } else {
    // A stream whose size is never announced: the frame header has no content size.
    ZSTD_inBuffer in{data.data(), data.size(), 0};
    ZSTD_outBuffer o{out.data(), out.size(), 0};
    n = ZSTD_compressStream2(c, &o, &in, ZSTD_e_end);
    if (n == 0) n = o.pos;
    else n = static_cast<std::size_t>(-1);
  }
  ZSTD_freeCCtx(c);
  if (ZSTD_isError(n) || n == static_cast<std::size_t>(-1)) throw std::runtime_error("zstd failed");
  out.resize(n);
  if (!content_size && ZSTD_getFrameContentSize(out.data(), out.size()) != ZSTD_CONTENTSIZE_UNKNOWN)
    throw std::runtime_error("the frame states its content size");
  return out;
}

Bytes zlib_stream(std::span<const std::uint8_t> data) {
  uLongf n = compressBound(static_cast<uLong>(data.size()));
  Bytes out(n);
  if (compress2(out.data(), &n, data.data(), static_cast<uLong>(data.size()), 6) != Z_OK)
    throw std::runtime_error("compress2 failed");
  out.resize(n);
  return out;
}

Bytes blosc_buffer(std::span<const std::uint8_t> data, int shuffle, const char* compressor,
                   std::size_t typesize) {
  Bytes out(data.size() + BLOSC_MAX_OVERHEAD);
  const int n = blosc_compress_ctx(5, shuffle, typesize, data.size(), data.data(), out.data(),
                                   out.size(), compressor, 0, 1);
  if (n <= 0) throw std::runtime_error("blosc_compress_ctx failed");
  out.resize(static_cast<std::size_t>(n));
  return out;
}

Bytes encode(Encoding e, std::span<const std::uint8_t> raw, std::size_t typesize) {
  switch (e) {
    case Encoding::none: return Bytes(raw.begin(), raw.end());
    case Encoding::zstd_sized: return zstd_frame(raw, true, false);
    case Encoding::zstd_unsized: return zstd_frame(raw, false, false);
    case Encoding::zstd_checksum: return zstd_frame(raw, true, true);
    case Encoding::zstd_two_frames: {
      const std::size_t half = raw.size() / 2;
      return vptest::concat({zstd_frame(raw.first(half), false, false),
                             zstd_frame(raw.subspan(half), true, true)});
    }
    case Encoding::gzip: return vptest::gzip_compress(raw, 6);
    case Encoding::zlib: return zlib_stream(raw);
    case Encoding::blosc_noshuffle: return blosc_buffer(raw, BLOSC_NOSHUFFLE, "lz4", typesize);
    case Encoding::blosc_shuffle: return blosc_buffer(raw, BLOSC_SHUFFLE, "zstd", typesize);
    case Encoding::blosc_bitshuffle: return blosc_buffer(raw, BLOSC_BITSHUFFLE, "blosclz", typesize);
  }
  throw std::runtime_error("unknown encoding");
}

// ---- a test array: values, its chunks as stored, the reference selection --------------------

// What the padding of edge chunks holds: no element of a test array has this value.
template <class T>
const T kJunk = static_cast<T>(-20000);

// Values of element `flat` (C order of the array): distinct, and never kJunk.
template <class T>
T value_at(std::int64_t flat) {
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(flat) * T(0.75) - T(100.5);
  else return static_cast<T>(flat * 37 % 30011 - 15000);
}

template <class T>
struct TestArray {
  ZarrArraySpec spec;
  std::vector<T> values;  // C order of spec.shape
  std::map<Shape, Bytes> raw;  // each chunk, decoded: full chunk shape, padding = junk
  std::map<Shape, Bytes> encoded;
  std::vector<ZarrChunk> chunks;

  // Lists every chunk, from `encoded`; those in `missing` as absent.
  void list_chunks(const std::vector<Shape>& missing = {}) {
    chunks.clear();
    for (auto& [g, bytes] : encoded) {
      ZarrChunk c;
      c.grid_index = g;
      c.key = "c";
      for (auto i : g) c.key.append("/").append(std::to_string(i));
      c.bytes = vptest::as_bytes(bytes);
      c.missing = std::find(missing.begin(), missing.end(), g) != missing.end();
      if (c.missing) c.bytes = {};
      chunks.push_back(c);
    }
  }
};

template <class T>
TestArray<T> make_array(const Shape& shape, const Shape& chunk, Encoding enc, bool big_endian = false,
                        bool f_order = false) {
  TestArray<T> a;
  a.spec.shape = shape;
  a.spec.chunk_shape = chunk;
  a.spec.dtype = std::is_same_v<T, float> ? DType::f32 : std::is_same_v<T, std::int16_t> ? DType::i16
                 : std::is_same_v<T, std::uint8_t> ? DType::u8 : DType::f64;
  a.spec.big_endian = big_endian;
  a.spec.chunk_f_order = f_order;
  a.spec.compressor = compressor_of(enc);
  a.spec.name = "test.nii.zarr/0";
  const Bytes fill = vptest::to_bytes(std::vector<T>{T(7)}, big_endian);
  for (std::uint8_t b : fill) a.spec.fill_value.push_back(std::byte{b});
  const std::size_t nd = shape.size();
  a.values.resize(static_cast<std::size_t>(product(shape)));
  for (std::size_t i = 0; i < a.values.size(); ++i) a.values[i] = value_at<T>(static_cast<std::int64_t>(i));
  Shape grid(nd);
  for (std::size_t k = 0; k < nd; ++k) grid[k] = (shape[k] + chunk[k] - 1) / chunk[k];
  const std::int64_t cells = product(grid), per_chunk = product(chunk);
  for (std::int64_t cell = 0; cell < cells; ++cell) {
    Shape g(nd);
    for (std::size_t k = nd, rest = static_cast<std::size_t>(cell); k-- > 0;) {
      g[k] = static_cast<std::int64_t>(rest % static_cast<std::size_t>(grid[k]));
      rest /= static_cast<std::size_t>(grid[k]);
    }
    std::vector<T> elems(static_cast<std::size_t>(per_chunk), kJunk<T>);  // padding
    for (std::int64_t e = 0; e < per_chunk; ++e) {
      // Local coordinates of element e in the chunk's own order.
      Shape l(nd);
      std::int64_t rest = e;
      for (std::size_t j = 0; j < nd; ++j) {
        const std::size_t k = f_order ? j : nd - 1 - j;
        l[k] = rest % chunk[k];
        rest /= chunk[k];
      }
      std::int64_t flat = 0;
      bool inside = true;
      for (std::size_t k = 0; k < nd; ++k) {
        const std::int64_t x = g[k] * chunk[k] + l[k];
        inside = inside && x < shape[k];
        flat = flat * shape[k] + x;
      }
      if (inside) elems[static_cast<std::size_t>(e)] = a.values[static_cast<std::size_t>(flat)];
    }
    a.raw[g] = vptest::to_bytes(elems, big_endian);
    a.encoded[g] = encode(enc, a.raw[g], sizeof(T));
  }
  a.list_chunks();
  return a;
}

// The strides of the F-ordered NIfTI output of a selection, in zarr axis order (reversed axes):
// C-order strides of the selection's counts.
Shape nifti_strides(const std::vector<AxisRange>& sel) {
  Shape s(sel.size());
  std::int64_t acc = 1;
  for (std::size_t k = sel.size(); k-- > 0;) {
    s[k] = acc;
    acc *= sel[k].count;
  }
  return s;
}

std::vector<AxisRange> whole(const Shape& shape) {
  std::vector<AxisRange> sel;
  for (auto d : shape) sel.push_back({0, 1, d});
  return sel;
}

// The naive reference: out[sum i_k * strides_k] = f(values[flat index of start + i*step]).
template <class T, class O>
std::vector<O> reference(const TestArray<T>& a, const std::vector<AxisRange>& sel,
                         const Shape& strides, std::size_t out_elements,
                         const std::function<O(T)>& f, O untouched) {
  std::vector<O> out(out_elements, untouched);
  const std::size_t nd = sel.size();
  std::int64_t n = 1;
  for (const auto& r : sel) n *= r.count;
  for (std::int64_t e = 0; e < n; ++e) {
    std::int64_t rest = e, flat = 0, dst = 0;
    Shape i(nd);
    for (std::size_t k = nd; k-- > 0;) {
      i[k] = rest % sel[k].count;
      rest /= sel[k].count;
    }
    for (std::size_t k = 0; k < nd; ++k) {
      flat = flat * a.spec.shape[k] + sel[k].start + i[k] * sel[k].step;
      dst += i[k] * strides[k];
    }
    out[static_cast<std::size_t>(dst)] = f(a.values[static_cast<std::size_t>(flat)]);
  }
  return out;
}

template <class O, class T>
std::vector<O> read(const TestArray<T>& a, const std::vector<AxisRange>& sel, const OutputSpec& out,
                    double slope, double inter, const Shape& strides, std::size_t out_elements,
                    O untouched, unsigned threads = 2) {
  std::vector<O> dest(out_elements, untouched);
  voxpipe::read_zarr_chunks(a.spec, a.chunks, sel, out, slope, inter,
                            std::as_writable_bytes(std::span(dest)), strides, {threads});
  return dest;
}

template <class T>
std::vector<T> read_raw(const TestArray<T>& a, const std::vector<AxisRange>& sel,
                        unsigned threads = 2) {
  std::int64_t n = 1;
  for (const auto& r : sel) n *= r.count;
  return read<T>(a, sel, OutputSpec{a.spec.dtype, false, false, false}, 1.0, 0.0, nifti_strides(sel),
                 static_cast<std::size_t>(n), T(0), threads);
}

template <class T>
std::vector<T> expected_raw(const TestArray<T>& a, const std::vector<AxisRange>& sel) {
  std::int64_t n = 1;
  for (const auto& r : sel) n *= r.count;
  return reference<T, T>(a, sel, nifti_strides(sel), static_cast<std::size_t>(n),
                         [](T v) { return v; }, T(0));
}

// ---- properties --------------------------------------------------------------------------------

TEST(ZarrChunks, EveryCompressorRoundTripsChunksOfItsOwnEncoder) {
  for (Encoding enc : kEncodings) {
    SCOPED_TRACE(encoding_name(enc));
    // 3 x 2 x 3 chunks of 4 x 4 x 5; the last ones along every axis are edge chunks.
    const auto a = make_array<std::int16_t>({10, 7, 13}, {4, 4, 5}, enc);
    const auto sel = whole(a.spec.shape);
    EXPECT_EQ(read_raw(a, sel), expected_raw(a, sel));
    EXPECT_EQ(read_raw(a, sel, 1), expected_raw(a, sel));
  }
}

TEST(ZarrChunks, FloatChunksOfEveryCompressorRoundTripIntoFloat64) {
  for (Encoding enc : kEncodings) {
    SCOPED_TRACE(encoding_name(enc));
    const auto a = make_array<float>({6, 9}, {4, 4}, enc, /*big_endian=*/true);
    const auto sel = whole(a.spec.shape);
    const auto got = read<double>(a, sel, OutputSpec{DType::f64, true, false, false}, 1.0, 0.0,
                                  nifti_strides(sel), 54, 0.0);
    EXPECT_EQ(got, (reference<float, double>(a, sel, nifti_strides(sel), 54,
                                             [](float v) { return static_cast<double>(v); }, 0.0)));
  }
}

TEST(ZarrChunks, ChunkFilesAreReadLikeBytes) {
  for (Encoding enc : {Encoding::none, Encoding::zstd_sized, Encoding::gzip, Encoding::blosc_shuffle}) {
    SCOPED_TRACE(encoding_name(enc));
    auto a = make_array<std::int16_t>({9, 10}, {4, 3}, enc);
    vptest::TempDir dir;
    int n = 0;
    for (auto& c : a.chunks) {
      c.path = dir.file("chunk" + std::to_string(n++));
      vptest::write_file(c.path, a.encoded[c.grid_index]);
      c.bytes = {};
    }
    for (const auto& sel : {whole(a.spec.shape), std::vector<AxisRange>{{1, 2, 4}, {9, -1, 10}}})
      EXPECT_EQ(read_raw(a, sel), expected_raw(a, sel));
  }
}

TEST(ZarrChunks, EdgeChunksGiveOnlyTheirPartInsideTheArray) {
  // The padding of the edge chunks holds kJunk, which no element of the array has.
  for (Encoding enc : {Encoding::none, Encoding::zstd_sized, Encoding::blosc_noshuffle}) {
    SCOPED_TRACE(encoding_name(enc));
    const auto a = make_array<std::int16_t>({5, 3}, {4, 2}, enc);
    const auto got = read_raw(a, whole(a.spec.shape));
    EXPECT_EQ(got, expected_raw(a, whole(a.spec.shape)));
    EXPECT_EQ(std::count(got.begin(), got.end(), kJunk<std::int16_t>), 0);
    // The last row and column alone: only edge chunks.
    const std::vector<AxisRange> corner{{4, 1, 1}, {1, 1, 2}};
    EXPECT_EQ(read_raw(a, corner), expected_raw(a, corner));
  }
}

TEST(ZarrChunks, NegativeAndLargeStepsPickTheSameElementsAsTheNaiveLoop) {
  for (Encoding enc : {Encoding::none, Encoding::zstd_unsized, Encoding::zlib}) {
    SCOPED_TRACE(encoding_name(enc));
    const auto a = make_array<std::int16_t>({11, 8, 9}, {3, 4, 2}, enc);
    const std::vector<std::vector<AxisRange>> selections = {
        {{10, -1, 11}, {7, -1, 8}, {8, -1, 9}},  // everything reversed
        {{10, -3, 4}, {0, 5, 2}, {8, -2, 5}},    // steps across chunk boundaries
        {{2, 1, 1}, {6, -4, 2}, {0, 9, 1}},      // single elements
        {{0, 7, 2}, {1, 1, 6}, {3, -1, 3}},      // a step longer than a chunk: chunks skipped
    };
    for (const auto& sel : selections) EXPECT_EQ(read_raw(a, sel), expected_raw(a, sel));
  }
}

TEST(ZarrChunks, FOrderChunksAreReadInTheirOwnOrder) {
  for (Encoding enc : {Encoding::none, Encoding::gzip, Encoding::blosc_bitshuffle}) {
    SCOPED_TRACE(encoding_name(enc));
    const auto a = make_array<std::int16_t>({7, 6, 5}, {3, 4, 5}, enc, false, /*f_order=*/true);
    for (const auto& sel : {whole(a.spec.shape), std::vector<AxisRange>{{6, -2, 4}, {1, 1, 4}, {4, -1, 5}}})
      EXPECT_EQ(read_raw(a, sel), expected_raw(a, sel));
  }
}

TEST(ZarrChunks, BigEndianScaledDataEqualTheConversionKernelsResult) {
  const double slope = 0.37, inter = -12.5;
  const auto a = make_array<std::int16_t>({6, 5, 7}, {2, 5, 3}, Encoding::zstd_sized, /*big_endian=*/true);
  const auto sel = whole(a.spec.shape);
  // The NIfTI reader's kernel on each element's stored bytes, one at a time.
  voxpipe::core::Conversion c;
  c.source = DType::i16;
  c.swap = !vptest::kNativeBig;
  c.dest = DType::f32;
  c.scale = true;
  c.slope = slope;
  c.inter = inter;
  const auto kernel = voxpipe::core::select_conversion(c);
  ASSERT_NE(kernel, nullptr);
  const std::function<float(std::int16_t)> by_kernel = [&](std::int16_t v) {
    const Bytes stored = vptest::to_bytes(std::vector<std::int16_t>{v}, true);
    float out;
    kernel(c, vptest::as_bytes(stored).data(), 2, reinterpret_cast<std::byte*>(&out), 4, 1);
    return out;
  };
  const auto got = read<float>(a, sel, OutputSpec{DType::f32, true, false, false}, slope, inter,
                               nifti_strides(sel), 210, 0.0f);
  EXPECT_EQ(got, (reference<std::int16_t, float>(a, sel, nifti_strides(sel), 210, by_kernel, 0.0f)));
  // In float64: nibabel's order of operations (x * slope, then + inter, rounded each).
  const auto f64 = read<double>(a, sel, OutputSpec{DType::f64, true, false, false}, slope, inter,
                                nifti_strides(sel), 210, 0.0);
  const auto want = reference<std::int16_t, double>(
      a, sel, nifti_strides(sel), 210,
      [&](std::int16_t v) { volatile double x = v; x = x * slope; x = x + inter; return double(x); },
      0.0);
  EXPECT_EQ(f64, want);
  // file_byte_order keeps the stored bytes: the big-endian chunks, unswapped.
  const auto stored = read<std::int16_t>(a, sel, OutputSpec{DType::i16, false, true, false}, slope,
                                         inter, nifti_strides(sel), 210, std::int16_t{0});
  const auto swapped = reference<std::int16_t, std::int16_t>(
      a, sel, nifti_strides(sel), 210,
      [](std::int16_t v) {
        const Bytes b = vptest::to_bytes(std::vector<std::int16_t>{v}, true);
        std::int16_t out;
        std::memcpy(&out, b.data(), 2);
        return out;
      },
      std::int16_t{0});
  EXPECT_EQ(stored, swapped);
}

TEST(ZarrChunks, MissingChunksGiveTheFillValueConvertedAndScaled) {
  auto a = make_array<std::int16_t>({6, 6}, {3, 4}, Encoding::zstd_sized, /*big_endian=*/true);
  a.list_chunks({{0, 1}, {1, 0}});
  const auto sel = whole(a.spec.shape);
  const double slope = 2.0, inter = 0.5;
  const auto got = read<double>(a, sel, OutputSpec{DType::f64, true, false, false}, slope, inter,
                                nifti_strides(sel), 36, -1.0);
  for (std::int64_t i = 0; i < 6; ++i)
    for (std::int64_t j = 0; j < 6; ++j) {
      const bool absent = (i < 3 && j >= 4) || (i >= 3 && j < 4);
      const double v = absent ? 7.0 : a.values[static_cast<std::size_t>(i * 6 + j)];
      EXPECT_EQ(got[static_cast<std::size_t>(i * 6 + j)], v * slope + inter) << i << "," << j;
    }
  // Unconverted: the fill value's stored bytes as given.
  const auto raw = read<std::int16_t>(a, sel, OutputSpec{DType::i16, false, false, false}, 1, 0,
                                      nifti_strides(sel), 36, std::int16_t{0});
  EXPECT_EQ(raw[4], 7);
  EXPECT_EQ(raw[18], 7);
  EXPECT_EQ(raw[0], a.values[0]);
}

TEST(ZarrChunks, DestStridesPlaceEachAxisWhereTheCallerSays) {
  // 5D [t, c, z, y, x] into a NIfTI (x, y, z, t, c) F-ordered output: t and c are swapped with
  // respect to the zarr order (c is slower than t in the output).
  for (Encoding enc : {Encoding::none, Encoding::zstd_sized, Encoding::blosc_shuffle}) {
    SCOPED_TRACE(encoding_name(enc));
    const auto a = make_array<std::int16_t>({3, 2, 4, 5, 6}, {1, 1, 4, 5, 6}, enc);
    const std::vector<AxisRange> sel = {{0, 1, 3}, {0, 1, 2}, {0, 1, 4}, {0, 1, 5}, {0, 1, 6}};
    const std::int64_t X = 6, Y = 5, Z = 4, T = 3;
    const Shape strides = {X * Y * Z, X * Y * Z * T, X * Y, X, 1};
    const auto got = read<std::int16_t>(a, sel, OutputSpec{DType::i16, false, false, false}, 1, 0,
                                        strides, 720, std::int16_t{0});
    EXPECT_EQ(got, (reference<std::int16_t, std::int16_t>(a, sel, strides, 720,
                                                          [](std::int16_t v) { return v; }, 0)));
    // The same with scaling into float32, reversed in time.
    const std::vector<AxisRange> back = {{2, -1, 3}, {0, 1, 2}, {0, 1, 4}, {0, 1, 5}, {0, 1, 6}};
    const auto scaled = read<float>(a, back, OutputSpec{DType::f32, true, false, false}, 0.5, 1.0,
                                    strides, 720, 0.0f);
    EXPECT_EQ(scaled, (reference<std::int16_t, float>(
                          a, back, strides, 720,
                          [](std::int16_t v) { return static_cast<float>(v * 0.5 + 1.0); }, 0.0f)));
  }
}

TEST(ZarrChunks, ElementsTheSelectionDoesNotReachAreLeftUnchanged) {
  const auto a = make_array<std::int16_t>({4, 4}, {2, 2}, Encoding::zlib);
  const std::vector<AxisRange> sel = {{1, 1, 2}, {0, 2, 2}};
  // A 3 x 5 destination, the selection in its top-left 2 x 2 corner.
  const Shape strides = {5, 1};
  const auto got = read<std::int16_t>(a, sel, OutputSpec{DType::i16, false, false, false}, 1, 0,
                                      strides, 15, std::int16_t{99});
  EXPECT_EQ(got, (reference<std::int16_t, std::int16_t>(a, sel, strides, 15,
                                                        [](std::int16_t v) { return v; }, 99)));
}

TEST(ZarrChunks, ManyThreadsGiveTheSameResultAsOne) {
  auto a = make_array<std::int16_t>({8, 9, 10}, {2, 3, 4}, Encoding::zstd_sized);
  a.list_chunks({{1, 1, 1}, {3, 2, 0}});
  const std::vector<AxisRange> sel = {{7, -1, 8}, {0, 1, 9}, {1, 3, 3}};
  const auto one = read<float>(a, sel, OutputSpec{DType::f32, true, false, false}, 3.0, 1.0,
                               nifti_strides(sel), 216, 0.0f, 1);
  for (unsigned threads : {2u, 4u, 8u})
    EXPECT_EQ(read<float>(a, sel, OutputSpec{DType::f32, true, false, false}, 3.0, 1.0,
                          nifti_strides(sel), 216, 0.0f, threads),
              one);
}

TEST(ZarrChunks, ExtraChunksAreIgnoredAndTheFirstMissingOneIsNamed) {
  auto a = make_array<std::int16_t>({6, 6}, {3, 3}, Encoding::none);
  ZarrChunk extra;
  extra.grid_index = {5, 5};  // outside the grid
  extra.key = "c/5/5";
  a.chunks.push_back(extra);
  extra.grid_index = {1};  // wrong rank
  a.chunks.push_back(extra);
  EXPECT_EQ(read_raw(a, {{0, 1, 3}, {0, 1, 3}}), expected_raw(a, {{0, 1, 3}, {0, 1, 3}}));
  // Only the chunk (0, 0) touched: the others may be absent.
  std::erase_if(a.chunks, [](const ZarrChunk& c) { return c.grid_index != Shape{0, 0}; });
  EXPECT_EQ(read_raw(a, {{2, -1, 3}, {0, 1, 3}}), expected_raw(a, {{2, -1, 3}, {0, 1, 3}}));
  auto e = vptest::catch_error([&] { read_raw(a, {{0, 1, 6}, {1, 1, 1}}); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::invalid_argument);
  EXPECT_EQ(e->field(), "chunk");
  EXPECT_NE(std::string(e->what()).find("(1, 0)"), std::string::npos) << e->what();
}

TEST(ZarrChunks, BadArgumentsAreRefusedNamingTheField) {
  auto a = make_array<std::int16_t>({4, 4}, {2, 2}, Encoding::none);
  const auto sel = whole(a.spec.shape);
  std::vector<std::int16_t> dest(16);
  const auto out = std::as_writable_bytes(std::span(dest));
  auto error_of = [&](const ZarrArraySpec& spec, std::vector<AxisRange> s, Shape strides,
                      std::span<std::byte> d, OutputSpec o = OutputSpec{DType::i16, false, false, false}) {
    return vptest::catch_error([&] { voxpipe::read_zarr_chunks(spec, a.chunks, s, o, 1, 0, d, strides); });
  };
  auto expect = [](const std::optional<voxpipe::Error>& e, ErrorCode code, const char* field) {
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code(), code) << e->what();
    EXPECT_EQ(e->field(), field) << e->what();
    EXPECT_EQ(e->path(), "test.nii.zarr/0");
  };
  expect(error_of(a.spec, sel, {4, 2}, out), ErrorCode::invalid_argument, "destination");  // overlap
  expect(error_of(a.spec, sel, {4}, out), ErrorCode::invalid_argument, "destination");
  expect(error_of(a.spec, sel, {4, 1}, out.first(30)), ErrorCode::invalid_argument, "destination");
  expect(error_of(a.spec, sel, {-4, 1}, out), ErrorCode::invalid_argument, "destination");
  expect(error_of(a.spec, {{0, 1, 5}, {0, 1, 4}}, {4, 1}, out), ErrorCode::invalid_argument, "selection");
  expect(error_of(a.spec, sel, {4, 1}, out, OutputSpec{DType::i16, true, true, false}),
         ErrorCode::invalid_argument, "dtype");
  auto spec = a.spec;
  spec.fill_value.pop_back();
  expect(error_of(spec, sel, {4, 1}, out), ErrorCode::invalid_argument, "fill_value");
  spec = a.spec;
  spec.chunk_shape = {2, 0};
  expect(error_of(spec, sel, {4, 1}, out), ErrorCode::invalid_argument, "chunk_shape");
  spec.chunk_shape = {2};
  expect(error_of(spec, sel, {4, 1}, out), ErrorCode::invalid_argument, "chunk_shape");
  spec = a.spec;
  spec.chunk_shape = {std::int64_t{1} << 40, std::int64_t{1} << 40};
  expect(error_of(spec, sel, {4, 1}, out), ErrorCode::limit, "chunk_shape");
  // No fill value: fine while every touched chunk is stored, refused when one is missing.
  spec = a.spec;
  spec.fill_value.clear();
  EXPECT_FALSE(error_of(spec, sel, {4, 1}, out));
  a.chunks[1].missing = true;
  expect(error_of(spec, sel, {4, 1}, out), ErrorCode::invalid_argument, "fill_value");
  a.chunks[1].missing = false;
  // Two chunks with one grid index.
  a.chunks.push_back(a.chunks.front());
  expect(error_of(a.spec, sel, {4, 1}, out), ErrorCode::invalid_argument, "chunk");
  // Still fine: the strides of a transposed output.
  a.chunks.pop_back();
  EXPECT_FALSE(error_of(a.spec, sel, {1, 4}, out));
}

// ---- damage ------------------------------------------------------------------------------------

struct Damaged {
  const char* what;
  Encoding encoding;
  std::function<Bytes(const Bytes& encoded, const Bytes& raw)> damage;
  ErrorCode code;
};

Bytes cut(const Bytes& b, std::size_t n) { return Bytes(b.begin(), b.end() - static_cast<std::ptrdiff_t>(n)); }
Bytes plus(const Bytes& b, std::string_view tail) {
  Bytes out = b;
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}
Bytes flip(const Bytes& b, std::size_t at_from_end) {
  Bytes out = b;
  out[out.size() - 1 - at_from_end] ^= 0x5a;
  return out;
}
Bytes half(const Bytes& raw) { return Bytes(raw.begin(), raw.begin() + static_cast<std::ptrdiff_t>(raw.size() / 2)); }
Bytes twice(const Bytes& raw) { return vptest::concat({raw, raw}); }

const Damaged kDamaged[] = {
    {"short", Encoding::none, [](const Bytes& e, const Bytes&) { return cut(e, 1); }, ErrorCode::truncated},
    {"long", Encoding::none, [](const Bytes& e, const Bytes&) { return plus(e, "x"); }, ErrorCode::format},
    {"cut", Encoding::zstd_sized, [](const Bytes& e, const Bytes&) { return cut(e, 3); }, ErrorCode::truncated},
    {"cut in the header", Encoding::zstd_sized, [](const Bytes& e, const Bytes&) { return Bytes(e.begin(), e.begin() + 3); }, ErrorCode::truncated},
    {"trailing garbage", Encoding::zstd_sized, [](const Bytes& e, const Bytes&) { return plus(e, "garbage!"); }, ErrorCode::corrupt},
    {"trailing bytes", Encoding::zstd_unsized, [](const Bytes& e, const Bytes&) { return plus(e, "\x01\x02"); }, ErrorCode::corrupt},
    {"not zstd", Encoding::zstd_sized, [](const Bytes& e, const Bytes&) { return flip(e, e.size() - 1); }, ErrorCode::corrupt},
    {"checksum", Encoding::zstd_checksum, [](const Bytes& e, const Bytes&) { return flip(e, 0); }, ErrorCode::corrupt},
    {"too small, sized", Encoding::zstd_sized, [](const Bytes&, const Bytes& r) { return zstd_frame(half(r), true, false); }, ErrorCode::format},
    {"too small, unsized", Encoding::zstd_unsized, [](const Bytes&, const Bytes& r) { return zstd_frame(half(r), false, false); }, ErrorCode::format},
    {"too large, unsized", Encoding::zstd_unsized, [](const Bytes&, const Bytes& r) { return zstd_frame(twice(r), false, false); }, ErrorCode::format},
    {"too large, sized", Encoding::zstd_sized, [](const Bytes&, const Bytes& r) { return zstd_frame(twice(r), true, false); }, ErrorCode::format},
    {"cut", Encoding::gzip, [](const Bytes& e, const Bytes&) { return cut(e, 5); }, ErrorCode::truncated},
    {"trailing garbage", Encoding::gzip, [](const Bytes& e, const Bytes&) { return plus(e, "garbage!"); }, ErrorCode::corrupt},
    {"zeros then garbage", Encoding::gzip, [](const Bytes& e, const Bytes&) { return plus(plus(e, std::string(4, '\0')), "x"); }, ErrorCode::corrupt},
    {"crc", Encoding::gzip, [](const Bytes& e, const Bytes&) { return flip(e, 5); }, ErrorCode::corrupt},
    {"isize", Encoding::gzip, [](const Bytes& e, const Bytes&) { return flip(e, 1); }, ErrorCode::corrupt},
    {"bad block", Encoding::gzip, [](const Bytes& e, const Bytes&) { Bytes b = e; b[10] = 0xff; b[11] = 0xff; return b; }, ErrorCode::corrupt},
    {"too small", Encoding::gzip, [](const Bytes&, const Bytes& r) { return vptest::gzip_compress(half(r)); }, ErrorCode::format},
    {"too large", Encoding::gzip, [](const Bytes&, const Bytes& r) { return vptest::gzip_compress(twice(r)); }, ErrorCode::format},
    {"cut", Encoding::zlib, [](const Bytes& e, const Bytes&) { return cut(e, 2); }, ErrorCode::truncated},
    {"trailing garbage", Encoding::zlib, [](const Bytes& e, const Bytes&) { return plus(e, "garbage!"); }, ErrorCode::corrupt},
    {"adler32", Encoding::zlib, [](const Bytes& e, const Bytes&) { return flip(e, 0); }, ErrorCode::corrupt},
    {"header", Encoding::zlib, [](const Bytes& e, const Bytes&) { Bytes b = e; b[0] = 0x77; return b; }, ErrorCode::corrupt},
    {"too small", Encoding::zlib, [](const Bytes&, const Bytes& r) { return zlib_stream(half(r)); }, ErrorCode::format},
    {"too large", Encoding::zlib, [](const Bytes&, const Bytes& r) { return zlib_stream(twice(r)); }, ErrorCode::format},
    {"cut", Encoding::blosc_shuffle, [](const Bytes& e, const Bytes&) { return cut(e, 1); }, ErrorCode::truncated},
    {"cut in the header", Encoding::blosc_shuffle, [](const Bytes& e, const Bytes&) { return Bytes(e.begin(), e.begin() + 10); }, ErrorCode::truncated},
    {"trailing garbage", Encoding::blosc_noshuffle, [](const Bytes& e, const Bytes&) { return plus(e, "garbage!"); }, ErrorCode::corrupt},
    {"version", Encoding::blosc_noshuffle, [](const Bytes& e, const Bytes&) { Bytes b = e; b[0] = 9; return b; }, ErrorCode::corrupt},
    {"block size", Encoding::blosc_noshuffle, [](const Bytes& e, const Bytes&) { Bytes b = e; b[8] = b[9] = b[10] = 0; b[11] = 0; return b; }, ErrorCode::corrupt},
    {"too small", Encoding::blosc_bitshuffle, [](const Bytes&, const Bytes& r) { return blosc_buffer(half(r), BLOSC_BITSHUFFLE, "lz4", 2); }, ErrorCode::format},
    {"too large", Encoding::blosc_bitshuffle, [](const Bytes&, const Bytes& r) { return blosc_buffer(twice(r), BLOSC_BITSHUFFLE, "lz4", 2); }, ErrorCode::format},
    {"empty", Encoding::zstd_sized, [](const Bytes&, const Bytes&) { return Bytes{}; }, ErrorCode::truncated},
    {"empty", Encoding::gzip, [](const Bytes&, const Bytes&) { return Bytes{}; }, ErrorCode::truncated},
    {"empty", Encoding::blosc_shuffle, [](const Bytes&, const Bytes&) { return Bytes{}; }, ErrorCode::truncated},
};

TEST(ZarrChunks, EveryDamagedChunkIsAnErrorNamingTheArrayKeyAndField) {
  for (const Damaged& d : kDamaged) {
    SCOPED_TRACE(std::string(encoding_name(d.encoding)) + ": " + d.what);
    // Two chunks, the second damaged: part of it read into float32 (decoded into the scratch
    // buffer), then the whole array as stored (decoded straight into the output).
    auto a = make_array<std::int16_t>({12, 10}, {6, 10}, d.encoding);
    a.encoded[{1, 0}] = d.damage(a.encoded[{1, 0}], a.raw[{1, 0}]);
    a.list_chunks();
    for (bool direct : {false, true}) {
      SCOPED_TRACE(direct ? "decoded into the output" : "decoded into scratch");
      const auto e = vptest::catch_error([&] {
        if (direct) read_raw(a, whole(a.spec.shape));
        else read<float>(a, {{7, 1, 4}, {0, 2, 5}}, OutputSpec{DType::f32, true, false, false}, 2.0,
                         0.0, {5, 1}, 20, 0.0f);
      });
      ASSERT_TRUE(e) << "no error";
      EXPECT_EQ(e->code(), d.code) << e->what();
      EXPECT_EQ(e->field(), "chunk");
      EXPECT_EQ(e->path(), "test.nii.zarr/0");
      const std::string msg = e->what();
      EXPECT_NE(msg.find("c/1/0"), std::string::npos) << msg;
      EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
    }
  }
}

TEST(ZarrChunks, ValidVariantsOfEachFormatAreAccepted) {
  // gzip: two members, and zero padding after the last (Python's gzip reads both); zstd: a
  // skippable frame before the data.
  auto a = make_array<std::int16_t>({6, 4}, {6, 4}, Encoding::gzip);
  const Bytes raw = a.raw[{0, 0}];
  const std::span<const std::uint8_t> r(raw);
  a.encoded[{0, 0}] = vptest::concat({vptest::gzip_compress(r.first(10)),
                                      vptest::gzip_compress(r.subspan(10)), Bytes(7, 0)});
  a.list_chunks();
  EXPECT_EQ(read_raw(a, whole(a.spec.shape)), expected_raw(a, whole(a.spec.shape)));
  auto z = make_array<std::int16_t>({6, 4}, {6, 4}, Encoding::zstd_sized);
  const Bytes skippable = {0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 'a', 'b', 'c'};
  z.encoded[{0, 0}] = vptest::concat({skippable, z.encoded[{0, 0}]});
  z.list_chunks();
  EXPECT_EQ(read_raw(z, whole(z.spec.shape)), expected_raw(z, whole(z.spec.shape)));
}

TEST(ZarrChunks, AChunkItsEncodingCannotFillIsRefusedBeforeAnythingIsAllocated) {
  // A chunk shape of 2^40 bytes and a few encoded bytes: refused from the sizes alone (a
  // decode, or a scratch buffer of that size, would not end well).
  for (Encoding enc : {Encoding::none, Encoding::zstd_sized, Encoding::zstd_unsized, Encoding::gzip,
                       Encoding::zlib, Encoding::blosc_shuffle}) {
    SCOPED_TRACE(encoding_name(enc));
    auto a = make_array<std::uint8_t>({64}, {64}, enc);
    a.spec.shape = {std::int64_t{1} << 40};
    a.spec.chunk_shape = {std::int64_t{1} << 40};
    std::uint8_t dest = 0;
    const auto e = vptest::catch_error([&] {
      voxpipe::read_zarr_chunks(a.spec, a.chunks, std::vector<AxisRange>{{5, 1, 1}},
                                OutputSpec{DType::u8, false, false, false}, 1, 0,
                                std::as_writable_bytes(std::span(&dest, 1)), Shape{1});
    });
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code(), enc == Encoding::none ? ErrorCode::truncated : ErrorCode::format) << e->what();
    EXPECT_EQ(e->field(), "chunk");
  }
}

TEST(ZarrChunks, AChunkFileThatIsMissingOrShortIsAnError) {
  auto a = make_array<std::int16_t>({4, 4}, {4, 4}, Encoding::none);
  vptest::TempDir dir;
  a.chunks[0].bytes = {};
  a.chunks[0].path = dir.file("absent");
  EXPECT_VP_ERROR(read_raw(a, whole(a.spec.shape)), ErrorCode::not_found);
  a.chunks[0].path = dir.file("short");
  vptest::write_file(a.chunks[0].path, cut(a.encoded[{0, 0}], 2));
  auto e = vptest::catch_error([&] { read_raw(a, whole(a.spec.shape)); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::truncated);
  EXPECT_EQ(e->field(), "chunk");
  EXPECT_NE(std::string(e->what()).find("c/0/0"), std::string::npos) << e->what();
}

}  // namespace
