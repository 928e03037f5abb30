// What the core takes from a NIfTI-Zarr store's metadata and header array, written by the
// fuzzer: the array's description (shape, chunk shape, element type, byte order, codec, fill
// value) with a selection over it, and the `nifti` header array's bytes.
//
// Input: 1 byte of axes (1..5, low 3 bits), element type and flags; per axis 8 bytes of shape,
// 8 of chunk size (int64, little-endian: any value, negative and huge ones included, as damaged
// metadata can say), 2 of selection start, 1 of step (signed, 0 read as 1), 1 of count; then
// the header block (the bytes of the `nifti` array).
//
// Must hold:
//  1. read_zarr_chunks over every touched chunk absent (the fill value), one touched chunk an
//     uncompressed file of the wrong size, or no chunks at all: every failure is a voxpipe::Error;
//     where the description is sound (sizes >= 0 and >= 1, the selection inside the array, every
//     size small) the read of absent chunks succeeds and writes the fill value's bytes to every
//     selected element and nothing else, and a chunk of the wrong size is refused. An absent
//     chunk allocates nothing (however large its chunk shape says it is: libFuzzer's
//     -malloc_limit_mb catches a chunk-sized buffer).
//  2. The header block opened as the store's virtual .nii (the rule of
//     voxpipe._formats.zarr.header_block.virtual_prefix: the header, the extension flag and
//     extensions, padded to 16 bytes;
//     vox_offset set there, whatever it held) through open_nifti_remote: an Error, or an image
//     whose data start where the block ends and whose extensions lie inside it; then a second
//     open over the virtual file of the data size the header declares (never fetched whole) and
//     a read of its first voxels as float64: an Error or those voxels (all 0: the fake store's
//     voxels are zeros), with the fetcher asked only for ranges inside the virtual file.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/remote.hpp"
#include "voxpipe/zarr.hpp"

namespace {

using voxpipe::AxisRange;
using voxpipe::DType;

constexpr DType kTypes[] = {DType::u8, DType::i16, DType::u16, DType::f32, DType::f64, DType::c64,
                            DType::i64, DType::rgb24};

std::int64_t le64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return static_cast<std::int64_t>(v);
}

// ---- 1. the array's description ---------------------------------------------------------------
void fuzz_array(const std::uint8_t* data, std::size_t ndim, std::uint8_t flags) {
  voxpipe::ZarrArraySpec spec;
  spec.dtype = kTypes[(flags >> 3) & 7];
  spec.big_endian = flags & 0x40;
  spec.chunk_f_order = flags & 0x80;
  spec.compressor = voxpipe::ZarrCompressor::none;
  spec.name = "fuzz.nii.zarr/0";
  const std::size_t item = voxpipe::dtype_size(spec.dtype);
  for (std::size_t i = 0; i < item; ++i) spec.fill_value.push_back(std::byte(0xA0 + i));
  std::vector<AxisRange> sel;
  for (std::size_t a = 0; a < ndim; ++a, data += 20) {
    spec.shape.push_back(le64(data));
    spec.chunk_shape.push_back(le64(data + 8));
    const auto step = static_cast<std::int8_t>(data[18]);
    sel.push_back({data[16] | data[17] << 8, step == 0 ? 1 : step, data[19] % 9});
  }
  // Sound: what a store's metadata may say (voxpipe._formats.zarr.metadata._sizes) and a selection inside it,
  // every size small enough that the chunk grid and the array's and a chunk's bytes (2^60 at
  // most) are far from overflow.
  bool sound = true;
  std::int64_t elements = 1;
  double array_bytes = static_cast<double>(item), chunk_bytes = array_bytes;
  for (std::size_t a = 0; a < ndim; ++a) {
    const std::int64_t n = spec.shape[a], c = spec.chunk_shape[a];
    sound = sound && n >= 0 && n <= (1 << 20) && c >= 1 && c <= (1 << 20);
    array_bytes *= static_cast<double>(n);
    chunk_bytes *= static_cast<double>(c);
    sound = sound && array_bytes <= 0x1p60 && chunk_bytes <= 0x1p60;
    const AxisRange& r = sel[a];
    const std::int64_t last = r.start + r.step * (r.count - 1);
    sound = sound && (r.count == 0 || (r.start < n && last >= 0 && last < n));
    elements *= r.count;
  }
  // The destination: the selection's elements, C-ordered over the zarr axes.
  std::vector<std::int64_t> strides(ndim);
  std::int64_t s = 1;
  for (std::size_t a = ndim; a-- > 0;) {
    strides[a] = s;
    s *= sel[a].count;
  }
  std::vector<std::byte> dest(static_cast<std::size_t>(elements) * item + item, std::byte{0x5c});
  const std::span<std::byte> out(dest.data(), static_cast<std::size_t>(elements) * item);
  voxpipe::OutputSpec os;
  os.type = spec.dtype;
  os.apply_scaling = false;
  os.file_byte_order = true;
  voxpipe::ReadOptions ro;
  ro.threads = 1;

  // The touched chunks' grid indices (where the selection is sound).
  std::vector<std::vector<std::int64_t>> grid{{}};
  if (sound && elements > 0) {
    for (std::size_t a = 0; a < ndim; ++a) {
      std::vector<std::int64_t> ids;
      for (std::int64_t i = 0; i < sel[a].count; ++i)
        ids.push_back((sel[a].start + i * sel[a].step) / spec.chunk_shape[a]);
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      std::vector<std::vector<std::int64_t>> next;
      for (const auto& g : grid)
        for (const std::int64_t id : ids) {
          next.push_back(g);
          next.back().push_back(id);
        }
      grid = std::move(next);
    }
  } else {
    grid.clear();
  }
  std::vector<voxpipe::ZarrChunk> chunks;
  for (const auto& g : grid) {
    voxpipe::ZarrChunk c;
    c.grid_index = g;
    c.key = "c";
    c.missing = true;
    chunks.push_back(std::move(c));
  }

  // (a) every touched chunk absent: the fill value.
  bool ok = true;
  try {
    voxpipe::read_zarr_chunks(spec, chunks, sel, os, 1.0, 0.0, out, strides, ro);
  } catch (const voxpipe::Error& e) {
    ok = false;
    if (sound) {
      std::fprintf(stderr, "a sound description refused: %s\n", e.what());
      std::abort();
    }
  }
  if (ok) {
    for (std::int64_t e = 0; e < elements; ++e)
      if (std::memcmp(dest.data() + e * item, spec.fill_value.data(), item) != 0) std::abort();
    for (std::size_t i = 0; i < item; ++i)
      if (dest[out.size() + i] != std::byte{0x5c}) std::abort();  // nothing past the selection
  }

  // (b) the first touched chunk present, uncompressed, one byte short of its chunk shape's size
  // (a chunk whose size its shape does not justify: never decoded, never a buffer of that size).
  if (!chunks.empty()) {
    std::uint64_t want = item;
    bool small = true;
    for (const std::int64_t c : spec.chunk_shape) {
      small = small && want * static_cast<std::uint64_t>(c) <= (1u << 16);
      want *= static_cast<std::uint64_t>(c);
    }
    std::vector<std::byte> stored(small ? want - 1 : 16);
    chunks[0].missing = false;
    chunks[0].bytes = stored;
    bool read = true;
    try {
      voxpipe::read_zarr_chunks(spec, chunks, sel, os, 1.0, 0.0, out, strides, ro);
    } catch (const voxpipe::Error&) {
      read = false;
    }
    if (read) std::abort();
  }

  // (c) no chunks given: an Error unless nothing is touched.
  try {
    voxpipe::read_zarr_chunks(spec, {}, sel, os, 1.0, 0.0, out, strides, ro);
    if (!grid.empty()) std::abort();
  } catch (const voxpipe::Error&) {
  }
}

// ---- 2. the header block ----------------------------------------------------------------------
// voxpipe._formats.zarr.header_block.virtual_prefix: the bytes of the virtual .nii before its data, the NIfTI version
// and whether big-endian, or nullopt where it refuses the block (a FormatError there). The version and byte
// order are decided as header_fields decides them: NIfTI-1 by its magic at 344, else NIfTI-2 by
// a sizeof_hdr of 540 in either order; the order by dim[0] (by sizeof_hdr where dim[0] is 0).
struct Prefix {
  std::vector<std::uint8_t> bytes;
  int version;
  bool big_endian;
};

std::optional<Prefix> virtual_prefix(
    std::span<const std::uint8_t> block) {
  const auto u32 = [&](bool big) {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= std::uint32_t{block[big ? 3 - i : i]} << (8 * i);
    return v;
  };
  int version = 0;
  std::size_t size = 0;
  if (block.size() >= 348 && block[344] == 'n' && (block[345] == '+' || block[345] == 'i') &&
      block[346] == '1') {
    version = 1;
    size = 348;
  } else if (block.size() >= 4 && (u32(false) == 540 || u32(true) == 540)) {
    version = 2;
    size = 540;
  } else {
    return std::nullopt;
  }
  if (block.size() < size) return std::nullopt;
  std::int64_t dim0 = 0;
  if (version == 1) {
    dim0 = static_cast<std::int16_t>(block[40] | block[41] << 8);
  } else {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = v << 8 | block[16 + i];
    dim0 = static_cast<std::int64_t>(v);
  }
  const bool big = dim0 == 0 ? u32(true) == size : !(dim0 >= 1 && dim0 <= 7);
  std::vector<std::uint8_t> hdr(block.begin(), block.begin() + size);
  const auto rest = block.subspan(static_cast<std::size_t>(size));
  std::vector<std::uint8_t> ext;
  if (rest.empty()) {
    ext = {0, 0, 0, 0};
  } else if (rest.size() >= 4) {
    ext.assign(rest.begin(), rest.end());
  } else {
    return std::nullopt;
  }
  const std::size_t magic_at = version == 1 ? 344 : 4, off_at = version == 1 ? 108 : 168;
  if (hdr[magic_at] == 'n' && hdr[magic_at + 1] == 'i' &&
      (hdr[magic_at + 2] == '1' || hdr[magic_at + 2] == '2'))
    hdr[magic_at + 1] = '+';
  const std::size_t offset = (hdr.size() + ext.size() + 15) / 16 * 16;
  std::uint8_t raw[8];
  if (version == 1) {
    const float f = static_cast<float>(offset);
    std::memcpy(raw, &f, 4);
  } else {
    const std::int64_t q = static_cast<std::int64_t>(offset);
    std::memcpy(raw, &q, 8);
  }
  const std::size_t width = version == 1 ? 4 : 8;
  for (std::size_t i = 0; i < width; ++i) hdr[off_at + i] = raw[big ? width - 1 - i : i];
  hdr.insert(hdr.end(), ext.begin(), ext.end());
  hdr.resize(offset, 0);
  return Prefix{std::move(hdr), version, big};
}

// The virtual file: the prefix, then zeros (the store's voxels), `size` bytes in all, served by
// ranges; a range outside it is a bug of the reader.
voxpipe::RangeFetcher fetcher(std::shared_ptr<const std::vector<std::uint8_t>> prefix,
                              std::uint64_t size) {
  return [prefix, size](std::span<const voxpipe::ByteRange> ranges) {
    std::vector<voxpipe::FetchedBytes> out;
    for (const voxpipe::ByteRange& r : ranges) {
      if (r.offset > size || r.size > size - r.offset || r.size > (64u << 20)) std::abort();
      auto buf = std::make_shared<std::vector<std::byte>>(r.size);
      for (std::uint64_t i = 0; i < r.size && r.offset + i < prefix->size(); ++i)
        (*buf)[i] = std::byte((*prefix)[r.offset + i]);
      out.push_back({std::span<const std::byte>(*buf), buf});
    }
    return out;
  };
}

void fuzz_header(std::span<const std::uint8_t> block) {
  const auto built = virtual_prefix(block);
  if (!built) return;
  const auto prefix = std::make_shared<const std::vector<std::uint8_t>>(built->bytes);
  const voxpipe::FetchedBytes initial{
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(prefix->data()), prefix->size()),
      prefix};
  voxpipe::NiftiImage image;
  try {
    auto head = std::make_shared<const voxpipe::RemoteInput>(
        "fuzz.nii.zarr", prefix->size(), fetcher(prefix, prefix->size()), initial);
    image = voxpipe::open_nifti_remote(head);
  } catch (const voxpipe::Error&) {
    return;
  }
  // The core reads the header as the prefix was built for: its version, its byte order, and so
  // the vox_offset written there.
  if (image.data_offset != prefix->size() || image.header.version != built->version ||
      image.header.big_endian != built->big_endian) {
    std::fprintf(stderr, "data at %llu, virtual prefix %zu; NIfTI-%d, big-endian %d\n",
                 static_cast<unsigned long long>(image.data_offset), prefix->size(),
                 image.header.version, static_cast<int>(image.header.big_endian));
    std::abort();
  }
  // Extensions: each inside the block (8 bytes of size and code, then its content).
  std::uint64_t ext_bytes = 0;
  for (const auto& e : image.extensions) ext_bytes += 8 + e.content.size();
  if (ext_bytes + image.header.header_size() + 4 > prefix->size()) std::abort();

  // The data as the header declares them: a virtual file never fetched whole.
  std::uint64_t data_bytes = 0;
  try {
    data_bytes = image.data_bytes();
  } catch (const voxpipe::Error&) {
    return;
  }
  if (data_bytes > (std::uint64_t{1} << 62)) return;  // not a size the store's array can have
  const std::uint64_t size = prefix->size() + data_bytes;
  voxpipe::NiftiImage full;
  try {
    auto input = std::make_shared<const voxpipe::RemoteInput>("fuzz.nii.zarr", size,
                                                              fetcher(prefix, size), initial);
    full = voxpipe::open_nifti_remote(input);
  } catch (const voxpipe::Error&) {
    return;
  }
  // The first voxels (up to 16 along the first axis, index 0 of the others), scaled, as float64.
  std::vector<AxisRange> sel;
  std::int64_t n = 1;
  for (std::size_t a = 0; a < full.shape.size(); ++a) {
    const std::int64_t count = a == 0 ? std::min<std::int64_t>(full.shape[a], 16)
                                      : std::min<std::int64_t>(full.shape[a], 1);
    sel.push_back({0, 1, count});
    n *= count;
  }
  std::vector<double> out(static_cast<std::size_t>(n));
  voxpipe::OutputSpec os;
  os.type = DType::f64;
  os.real_part = voxpipe::dtype_is_complex(full.dtype);
  try {
    voxpipe::read_nifti_data(full, sel, os, std::as_writable_bytes(std::span(out)));
  } catch (const voxpipe::Error&) {
    return;
  }
  // Zeros, scaled: inter where the scaling applies, else 0 (NaN where the factors make it so).
  const double want = full.scaling.slope * 0.0 + full.scaling.inter;
  for (const double v : out)
    if (!(v == want || (std::isnan(v) && std::isnan(want)) || v == 0.0)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t flags = data[0];
  const std::size_t ndim = 1 + (flags & 7) % 5;
  if (size < 1 + 20 * ndim) return 0;
  fuzz_array(data + 1, ndim, flags);
  fuzz_header(std::span(data + 1 + 20 * ndim, size - 1 - 20 * ndim));
  return 0;
}
