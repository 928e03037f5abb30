// Writes the seed corpora for the fuzz targets: small valid NIfTI headers and files of every
// flavour, gzip streams with the features the reader handles, small DICOM series (sets of
// files joined by fuzz_dicom_series's separator), and raw deflate streams that refer into the
// window fuzz_marker_decoder makes from their parameters, and programs for the gzip members
// fuzz_index_build compresses.
//   fuzz_make_seeds tests/fuzz/corpus
// The output is committed; rerun after changing this file.
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../cpp/dicom/series_writer.hpp"
#include "index_build_input.hpp"
#include "marker_decoder_input.hpp"
#include "voxpipe/nifti.hpp"

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

void save(const fs::path& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

Bytes load(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

Bytes gzip(const Bytes& data, int level, gz_header* head = nullptr) {
  z_stream z{};
  deflateInit2(&z, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  if (head) deflateSetHeader(&z, head);
  Bytes out(deflateBound(&z, data.size()) + 256);
  z.next_in = const_cast<Bytef*>(data.data());
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

voxpipe::NiftiHeader header(int version, voxpipe::DType t, std::vector<std::int64_t> shape, bool big) {
  voxpipe::NiftiHeader h;
  h.version = version;
  h.big_endian = big;
  h.dim[0] = static_cast<std::int64_t>(shape.size());
  for (std::size_t i = 0; i < 7; ++i) h.dim[i + 1] = i < shape.size() ? shape[i] : 1;
  h.datatype = static_cast<std::int16_t>(voxpipe::nifti_datatype_code(t));
  h.bitpix = static_cast<std::int16_t>(8 * voxpipe::dtype_size(t));
  h.pixdim = {1, 1.5, 2, 2.5, 1, 1, 1, 1};
  return h;
}

struct Image {
  const char* name;
  voxpipe::NiftiHeader h;
  std::vector<voxpipe::NiftiExtension> ext;
};

// ---- DICOM series (fuzz_dicom_series) --------------------------------------------------------

// The files of one seed, joined as fuzz_dicom_series splits its input.
Bytes series_seed(const std::vector<vptest::SliceSpec>& slices) {
  static const std::string separator = "VPSERIES";
  Bytes out;
  for (std::size_t i = 0; i < slices.size(); ++i) {
    if (i) out.insert(out.end(), separator.begin(), separator.end());
    const Bytes b = vptest::dicom_slice(slices[i]);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

void dicom_series_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  const auto stack = [](int n, int volumes, const double step[3]) {
    std::vector<vptest::SliceSpec> v;
    for (int t = 0; t < volumes; ++t)
      for (int k = 0; k < n; ++k) {
        vptest::SliceSpec s;
        // Files in reverse spatial order: the scan must sort them.
        const int at = n - 1 - k;
        for (int r = 0; r < 3; ++r) s.position[r] = -10 + step[r] * at;
        s.instance = t * n + at + 1;
        s.temporal = volumes > 1 ? t + 1 : 0;
        s.sop = "1.2.3.4." + std::to_string(s.instance);
        v.push_back(s);
      }
    return v;
  };
  const double axial[3] = {0, 0, 2};
  save(dir / "axial_3_slices", series_seed(stack(3, 1, axial)));
  save(dir / "axial_2_slices_2_volumes", series_seed(stack(2, 2, axial)));
  {
    // Oblique orientation (30 degrees about x), positions stepping off the normal (a tilt), and
    // a different rescale on each image.
    auto v = stack(4, 1, axial);
    for (vptest::SliceSpec& s : v) {
      const double c = std::sqrt(3.0) / 2, d = 0.5;
      const double o[6] = {1, 0, 0, 0, c, d};
      std::copy(o, o + 6, s.orientation);
      s.position[1] = s.position[2] * 0.2;
      s.slope = 1 + 0.5 * s.instance;
      s.intercept = -s.instance;
    }
    save(dir / "oblique_tilted_4_slices", series_seed(v));
  }
  {
    auto v = stack(3, 1, axial);
    v.erase(v.begin());  // leaves -8 and -10 (2 mm apart); one at 8 makes a gap
    vptest::SliceSpec gap = v.front();
    gap.position[2] = 8, gap.instance = 9, gap.sop = "1.2.3.4.9";
    v.push_back(gap);
    save(dir / "uneven_spacing", series_seed(v));
  }
  {
    vptest::SliceSpec m;
    m.rows = m.columns = 8, m.mosaic = 4, m.sop = "1.2.3.5.1";
    vptest::SliceSpec m2 = m;
    m2.temporal = 2, m2.instance = 2, m2.sop = "1.2.3.5.2";
    m.temporal = 1;
    save(dir / "mosaic_2_volumes", series_seed({m, m2}));
  }
  {
    vptest::SliceSpec e;
    e.frames = 3, e.sop = "1.2.3.6.1";
    vptest::SliceSpec other;  // a second series alongside
    other.series = "1.2.826.0.1.3680043.2.1125.2", other.sop = "1.2.3.6.2";
    save(dir / "enhanced_3_frames_and_one_slice", series_seed({e, other}));
  }
}

// ---- Marker decoder (fuzz_marker_decoder) ----------------------------------------------------

// An input whose body is zlib's stream of `data` after the window the parameters make (so that
// the stream refers into it), compressed with the parameters' level, strategy and memLevel and
// the given flushes, followed by the parameters.
Bytes marker_seed(std::array<std::uint8_t, vpfuzz::marker::kParams> params, const Bytes& data,
                  const std::vector<vpfuzz::marker::Flush>& flushes = {}) {
  namespace mi = vpfuzz::marker;
  mi::Input in;
  std::copy(params.begin(), params.end(), in.p);
  const Bytes window = mi::make_window(in);  // not made from the body (content kind 3 unused)
  Bytes out = mi::compress(in, data, window, flushes);
  out.insert(out.end(), params.begin(), params.end());
  return out;
}

void marker_decoder_seeds(const fs::path& dir) {
  namespace mi = vpfuzz::marker;
  fs::create_directories(dir);
  // Each under the 4096 bytes scripts/test.sh fuzzes with (-max_len), or its parameters are cut off.
  // What the windows below hold, so that data can copy from them.
  auto window_of = [](std::uint8_t p0, std::uint8_t p1, std::uint8_t p2) {
    mi::Input in;
    in.p[0] = p0, in.p[1] = p1, in.p[2] = p2;
    return mi::make_window(in);
  };
  // Data that copies pieces of `window` (far and near), with text and a little noise between.
  auto refers_into = [](const Bytes& window, std::size_t n, std::uint64_t seed) {
    mi::Rng rng{seed};
    Bytes d;
    while (d.size() < n) {
      const std::size_t len = 3 + rng.next() % 200;
      const std::size_t at = window.empty() ? 0 : rng.next() % window.size();
      for (std::size_t k = 0; k < len && !window.empty(); ++k) d.push_back(window[(at + k) % window.size()]);
      for (int k = 0; k < 8; ++k) d.push_back(static_cast<std::uint8_t>("voxels, "[k]));
      if (rng.next() % 4 == 0) d.push_back(static_cast<std::uint8_t>(rng.next()));
    }
    return d;
  };
  Bytes volume(5000);  // int16 noise around a smooth field, little-endian
  {
    mi::Rng rng{7};
    for (std::size_t i = 0; i + 1 < volume.size(); i += 2) {
      const int v = static_cast<int>(400 + (i / 2) % 97 * 3) + static_cast<int>(rng.next() % 17) - 8;
      volume[i] = static_cast<std::uint8_t>(v), volume[i + 1] = static_cast<std::uint8_t>(v >> 8);
    }
  }
  Bytes skewed(12000);
  {
    mi::Rng rng{9};
    for (auto& b : skewed) b = mi::skewed_byte(rng);
  }
  const Bytes text_window = window_of(0x04, 0, 0);     // 32 KiB of text
  const Bytes random_window = window_of(0x00, 1, 2);   // 32 KiB pseudo-random
  const Bytes short_window = window_of(0x06, 100, 0);  // 101 bytes of text
  // p: window, seed, seed, level + 10 * strategy, memLevel and options, bit and drives, seed, pick
  save(dir / "level6_text_window", marker_seed({0x04, 0, 0, 6, 0x08, 0x08, 1, 3}, refers_into(text_window, 20000, 1)));
  save(dir / "level1_random_window", marker_seed({0x00, 1, 2, 1, 0x08, 0x30, 2, 5}, refers_into(random_window, 9000, 2)));
  save(dir / "level9_memlevel1_volume", marker_seed({0x01, 0, 0, 9, 0x09, 0x48, 3, 7}, volume));
  save(dir / "short_window", marker_seed({0x06, 100, 0, 6, 0x38, 0x50, 4, 9}, refers_into(short_window, 5000, 3)));
  save(dir / "fixed", marker_seed({0x04, 0, 0, 46, 0x00, 0x18, 5, 0}, refers_into(text_window, 8000, 4)));
  save(dir / "rle_volume", marker_seed({0x01, 0, 0, 36, 0x00, 0x28, 6, 0}, volume));
  save(dir / "huffman_only_skewed", marker_seed({0x09, 3, 4, 26, 0x06, 0x00, 7, 0}, skewed));
  {
    // Stored blocks, some of a few bytes, between sync and full flushes.
    const Bytes d = refers_into(text_window, 3000, 5);
    std::vector<mi::Flush> f;
    for (std::size_t at : {1, 3, 6, 10, 700, 701, 2000})
      f.push_back(mi::Flush{at, at % 2 ? Z_SYNC_FLUSH : Z_FULL_FLUSH});
    save(dir / "stored_flushes", marker_seed({0x04, 0, 0, 0, 0x08, 0xe8, 8, 2}, d, f));
  }
  {
    // A change of level and strategy mid-stream, and Z_BLOCK / partial flushes.
    const Bytes d = refers_into(random_window, 8000, 6);
    std::vector<mi::Flush> f = {{1500, Z_BLOCK}, {3000, -1, 1, Z_FIXED}, {4500, Z_PARTIAL_FLUSH},
                                {6000, -1, 9, Z_DEFAULT_STRATEGY}, {7000, -1, 0, Z_DEFAULT_STRATEGY}};
    save(dir / "params_changes", marker_seed({0x00, 1, 2, 6, 0x28, 0x88, 9, 4}, d, f));
  }
  {
    // A fixed block whose match reaches 200 bytes back, after a window of 101: too far for zlib,
    // a marker for an unknown byte in marker mode. Bits: final, fixed, literal 'a' (0x30 + 'a',
    // 8 bits), length 3 (code 257: 7 bits 0000001), distance 200 (code 15: 01111 + 6 extra
    // bits 200 - 193 = 7), end of block (7 zero bits).
    Bytes b;
    std::uint64_t acc = 0;
    unsigned n = 0;
    auto put = [&](std::uint32_t v, unsigned bits) {
      acc |= std::uint64_t{v} << n, n += bits;
      while (n >= 8) b.push_back(static_cast<std::uint8_t>(acc)), acc >>= 8, n -= 8;
    };
    auto code = [&](std::uint32_t c, unsigned len) {
      for (unsigned i = len; i-- > 0;) put((c >> i) & 1, 1);
    };
    put(1, 1), put(1, 2);
    code(0x30 + 'a', 8), code(1, 7), code(15, 5), put(7, 6), code(0, 7);
    if (n) b.push_back(static_cast<std::uint8_t>(acc));
    const std::uint8_t p[8] = {0x06, 100, 0, 6, 0x00, 0x60, 0, 0};
    b.insert(b.end(), p, p + 8);
    save(dir / "too_far_for_short_window", b);
  }
  // A program rather than a stream: copy 43 window bytes, 4 literals, a sync flush, a repeat
  // from 16 back, 384 skewed bytes, new parameters (level 1, RLE), 256 random bytes, a run.
  save(dir / "program", Bytes{0x45, 0x00, 0x10, 0x03, 'a', 'b', 'c', 'd', 0xc2, 0x6f, 0x10, 0x00, 0xe5,
                              0xc5, 31, 0xa3, 0x84, 0x41, 0x04, 0, 0, 9, 0x38, 0x70, 10, 1});
}

}  // namespace

// ---- Index build (fuzz_index_build) ----------------------------------------------------------

// An input of fuzz_index_build: mode, 4 parameter bytes, body (index_build_input.hpp).
Bytes index_seed(std::uint8_t mode, std::array<std::uint8_t, 4> p, const Bytes& body) {
  Bytes out{mode};
  out.insert(out.end(), p.begin(), p.end());
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

void index_build_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  // Programs (marker_decoder_input.hpp's decode_program) whose members compress to more than
  // 4 KiB, the smallest chunk of the two-thread build: several chunks each.
  const std::uint8_t random2k = 0xbf, skewed2k = 0xff, sync = 0xc2, full = 0xc3, block = 0xc4;
  const Bytes mixed{random2k, 0x9f, 'x', random2k, sync, 0x7f, 0x10, 0x00, random2k, full,
                    0x0f, 't', 'h', 'e', ' ', 'v', 'o', 'x', 'e', 'l', 's', ' ', 'o', 'f', ' ',
                    't', 'h', 0x7f, 0x20, 0x00, random2k, block, random2k, 0xc5, 23, random2k,
                    skewed2k, random2k};
  const Bytes skewed{skewed2k, skewed2k, skewed2k, sync, skewed2k, skewed2k, 0x9f, 0, skewed2k,
                     skewed2k, full, skewed2k, skewed2k};
  const Bytes stored{random2k, sync, 0x9f, 'a', random2k, sync, random2k, full, 0x9f, 'b'};
  // mode: 1 program, bits 1-2 spacing (0, 1, 1000, 32768), 3-4 wanted offsets, 5 ahead first.
  // p[0]: members - 1 (of 3) and padding; p[1]: level + 10 * strategy; p[2]: memLevel, window
  // bits, damage; p[3]: cuts, damage position, wanted offsets.
  save(dir / "three_members_level6", index_seed(0x1 | 2 << 1 | 2 << 3, {2 | 4 | 8, 6, 6 << 3, 7}, mixed));
  save(dir / "one_member_level1_ahead", index_seed(0x1 | 3 << 1 | 0x20, {0, 1, 6 << 3, 0}, mixed));
  save(dir / "every_block_level9_w9", index_seed(0x1 | 1 << 1, {1, 9, 0, 3}, mixed));
  save(dir / "stored_flushes", index_seed(0x1 | 2 << 1 | 1 << 3 | 0x20, {1 | 4, 0, 6 << 3, 5}, stored));
  save(dir / "rle_memlevel1", index_seed(0x1 | 3 << 1 | 3 << 3, {0, 31, 1 | 6 << 3, 9}, mixed));
  save(dir / "huffman_only_skewed", index_seed(0x1 | 2 << 1 | 0x20, {2, 29, 2 | 5 << 3, 11}, skewed));
  save(dir / "fixed", index_seed(0x1 | 2 << 1, {1, 46, 6 << 3, 13}, mixed));
  save(dir / "bit_flipped", index_seed(0x1 | 2 << 1 | 0x20, {1, 6, 1 << 6 | 6 << 3, 77}, mixed));
  save(dir / "cut_short", index_seed(0x1 | 2 << 1, {2, 6, 2 << 6 | 6 << 3, 100}, mixed));
  // The body as the gzip file: two members with zero padding between.
  Bytes text;
  for (int i = 0; i < 40; ++i)
    for (const char c : std::string("the voxels of the mask, the volume of the brain. "))
      text.push_back(static_cast<std::uint8_t>(c));
  Bytes file = gzip(text, 6);
  file.insert(file.end(), 5, 0);
  const Bytes second = gzip(Bytes(text.begin(), text.begin() + 300), 1);
  file.insert(file.end(), second.begin(), second.end());
  save(dir / "gzip_file_two_members", index_seed(1 << 1 | 1 << 3, {0, 0, 0, 3}, file));
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  for (const char* t : {"fuzz_nifti_header", "fuzz_nifti_file", "fuzz_gzip"}) fs::create_directories(root / t);
  using voxpipe::DType;

  std::vector<Image> images;
  {
    auto h = header(1, DType::i16, {3, 2, 2}, false);
    h.scl_slope = 0.5, h.scl_inter = -1;
    h.qform_code = 1, h.quatern_c = 0.5, h.quatern_d = 0.5, h.pixdim[0] = -1;
    images.push_back({"n1_le_i16_scaled", h, {}});
  }
  {
    auto h = header(1, DType::f32, {2, 2, 2, 2}, true);
    h.sform_code = 2;
    h.srow_x = {-2, 0, 0, 90}, h.srow_y = {0, 2, 0, -126}, h.srow_z = {0, 0, 2, -72};
    images.push_back({"n1_be_f32_ext", h, {{6, {'s', 'e', 'e', 'd'}}, {4, {'a', 'f', 'n', 'i', 0, 0}}}});
  }
  images.push_back({"n1_le_u8_2d", header(1, DType::u8, {5, 3}, false), {}});
  images.push_back({"n1_le_rgb24", header(1, DType::rgb24, {2, 2}, false), {}});
  {
    auto h = header(2, DType::c64, {2, 2}, false);
    h.scl_slope = 2;
    images.push_back({"n2_le_c64_scaled", h, {}});
  }
  images.push_back({"n2_be_i32_4d", header(2, DType::i32, {2, 1, 2, 3}, true), {{0, {1, 2, 3}}}});
  images.push_back({"n2_le_f64", header(2, DType::f64, {3}, false), {}});
  images.push_back({"n1_le_empty", header(1, DType::f32, {}, false), {}});
  {
    auto h = header(1, DType::i8, {4}, false);
    h.vox_offset = 400;
    images.push_back({"n1_le_i8_offset400", h, {}});
  }

  const fs::path tmp = fs::temp_directory_path() / "voxpipe-seeds.nii";
  for (auto& img : images) {
    const std::size_t bytes = [&] {
      std::uint64_t n = voxpipe::dtype_size(*voxpipe::dtype_from_nifti_code(img.h.datatype));
      if (img.h.dim[0] == 0) return std::size_t{0};
      for (int i = 1; i <= img.h.dim[0]; ++i) n *= static_cast<std::uint64_t>(img.h.dim[i]);
      return static_cast<std::size_t>(n);
    }();
    Bytes data(bytes);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 29 + 3);
    // (An empty image gets a producer of its own: producer_from_bytes does not accept an empty
    // span under UBSan, see tests/cpp/nifti/write_test.cpp.)
    const voxpipe::DataProducer none = [](std::span<std::byte>) { return std::size_t{0}; };
    voxpipe::write_nifti(tmp.string(), img.h, img.ext,
                         data.empty() ? none : voxpipe::producer_from_bytes(std::as_bytes(std::span(data))));
    const Bytes file = load(tmp);
    save(root / "fuzz_nifti_file" / (std::string(img.name) + ".nii"), file);
    const std::size_t hsize = img.h.version == 2 ? 540 : 348;
    save(root / "fuzz_nifti_header" / (std::string(img.name) + ".hdr"), Bytes(file.begin(), file.begin() + hsize));
  }
  fs::remove(tmp);

  const std::string text = "voxpipe gzip seed: the quick brown fox jumps over the lazy dog. ";
  Bytes payload;
  for (int i = 0; i < 8; ++i) payload.insert(payload.end(), text.begin(), text.end());
  const fs::path g = root / "fuzz_gzip";
  save(g / "level1.gz", gzip(payload, 1));
  save(g / "level0_stored.gz", gzip(payload, 0));
  save(g / "level9.gz", gzip(payload, 9));
  save(g / "empty_member.gz", gzip({}, 6));
  {
    Bytes two = gzip(payload, 6), second = gzip(Bytes(payload.begin(), payload.begin() + 40), 1);
    two.insert(two.end(), second.begin(), second.end());
    save(g / "two_members.gz", two);
    Bytes padded = gzip(payload, 6);
    padded.insert(padded.end(), 12, 0);
    save(g / "zero_padded.gz", padded);
  }
  {
    gz_header head{};
    std::string name = "seed.nii", comment = "comment";
    Bytes extra{'V', 'P', 2, 0, 1, 2};
    head.name = reinterpret_cast<Bytef*>(name.data());
    head.comment = reinterpret_cast<Bytef*>(comment.data());
    head.extra = extra.data();
    head.extra_len = static_cast<uInt>(extra.size());
    head.hcrc = 1;
    save(g / "header_fields.gz", gzip(payload, 6, &head));
  }
  dicom_series_seeds(root / "fuzz_dicom_series");
  marker_decoder_seeds(root / "fuzz_marker_decoder");
  index_build_seeds(root / "fuzz_index_build");
  std::printf("seeds written under %s\n", root.c_str());
  return 0;
}
