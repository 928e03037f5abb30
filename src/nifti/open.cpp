// open_nifti: file names, header, extensions, shape, offset, scaling and affine.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>
#include <string>

#include "core/checked.hpp"
#include "core/file.hpp"
#include "core/memory_input.hpp"
#include "core/range_input.hpp"
#include "gz/gzip_reader.hpp"
#include "nifti/internal.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/remote.hpp"

namespace voxpipe {

namespace {

std::string lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct SplitName {
  std::string stem;  // path without extension(s)
  std::string ext;   // ".nii", ".hdr" or ".img", in the case given
  std::string gz;    // ".gz" in the case given, or empty
};

SplitName split_name(const std::string& path) {
  SplitName s;
  std::string rest = path;
  if (ends_with(lower(rest), ".gz")) {
    s.gz = rest.substr(rest.size() - 3);
    rest.resize(rest.size() - 3);
  }
  const std::string l = lower(rest);
  for (const char* e : {".nii", ".hdr", ".img"}) {
    if (ends_with(l, e)) {
      s.ext = rest.substr(rest.size() - 4);
      s.stem = rest.substr(0, rest.size() - 4);
      return s;
    }
  }
  const std::string full = lower(path);
  if (ends_with(full, ".bz2") || ends_with(full, ".zst"))
    throw Error(ErrorCode::unsupported, path, "file name",
                "bz2 and zstd compressed NIfTI files are not supported yet");
  throw Error(ErrorCode::format, path, "file name",
              "expected a .nii, .nii.gz, .hdr, .img (optionally .gz) file name");
}

// The header stream of `input` (inflated when `gz`): everything open_nifti reads after the file
// names, for files and for bytes in memory alike.
void read_header_stream(NiftiImage& img, std::shared_ptr<const core::RandomAccessInput> input,
                        bool gz, bool pair, const OpenOptions& options) {
  if (input->size() == 0) throw Error(ErrorCode::format, img.header_path, "", "empty file");
  std::unique_ptr<core::ByteSource> source;
  if (gz)
    source = std::make_unique<gz::GzipByteSource>(std::move(input));
  else
    source = std::make_unique<core::InputByteSource>(std::move(input));
  // A NIfTI-1 header and its extension flag are 352 bytes, NIfTI-2's 544: the rest is read only
  // for NIfTI-2 (sizeof_hdr 540 in either byte order), so that opening reads nothing past a
  // header's extension flag (a NIfTI-Zarr store, opened as a .nii, decodes data to serve them).
  std::vector<std::uint8_t> head(544);
  std::size_t got = source->read_at(0, std::as_writable_bytes(std::span(head).first(352)));
  if (got == 352) {
    const std::uint8_t* p = head.data();
    const bool nifti2 = (p[0] == 0x1c && p[1] == 0x02 && p[2] == 0 && p[3] == 0) ||
                        (p[0] == 0 && p[1] == 0 && p[2] == 0x02 && p[3] == 0x1c);
    if (nifti2) got += source->read_at(352, std::as_writable_bytes(std::span(head).subspan(352)));
  }
  head.resize(got);
  ParsedHeader parsed = parse_nifti_header(head, img.header_path);
  img.header = parsed.header;
  img.warnings = std::move(parsed.warnings);
  const NiftiHeader& h = img.header;

  img.shape = nifti::data_shape(h, img.header_path);
  std::uint64_t voxels = 1;
  for (std::size_t i = 0; i < img.shape.size(); ++i) {
    auto v = core::checked_mul(voxels, static_cast<std::uint64_t>(img.shape[i]));
    if (!v || *v > options.limits.max_voxels)
      throw Error(ErrorCode::limit, img.header_path, "dim",
                  "the image has more voxels than the limit of " +
                      std::to_string(options.limits.max_voxels));
    voxels = *v;
  }
  img.dtype = *dtype_from_nifti_code(h.datatype);  // validated by parse_nifti_header
  auto bytes = core::checked_mul(voxels, dtype_size(img.dtype));
  if (!bytes) throw Error(ErrorCode::limit, img.header_path, "dim", "data size overflows 64 bits");

  // Data offset: int(vox_offset), truncating as nibabel's get_data_offset.
  if (!std::isfinite(h.vox_offset) || h.vox_offset < 0 || h.vox_offset >= 9.2e18)
    throw Error(ErrorCode::format, img.header_path, "vox_offset",
                "expected a non-negative byte offset", h.version == 2 ? 168 : 108);
  img.data_offset = static_cast<std::uint64_t>(h.vox_offset);
  if (!core::checked_add(img.data_offset, *bytes))
    throw Error(ErrorCode::limit, img.header_path, "vox_offset", "data end overflows 64 bits");

  // Scaling: nibabel's get_slope_inter, then ArrayProxy's defaults.
  if (h.scl_slope != 0 && std::isfinite(h.scl_slope)) {
    if (!std::isfinite(h.scl_inter))
      throw Error(ErrorCode::format, img.header_path, "scl_inter",
                  "valid slope but invalid intercept " + std::to_string(h.scl_inter),
                  h.version == 2 ? 184 : 116);
    img.scaling = Scaling{h.scl_slope, h.scl_inter};
  }

  img.affine = nifti_best_affine(h, img.header_path);
  img.extensions = nifti::read_extensions(*source, h, head, pair, img.header_path, options.limits);
}

}  // namespace

bool nifti_is_pair_path(const std::string& path) {
  const std::string e = lower(split_name(path).ext);
  return e == ".hdr" || e == ".img";
}

bool nifti_is_gzip_name(const std::string& path) noexcept {
  try {
    return !split_name(path).gz.empty();
  } catch (const Error&) {
    return false;  // not a NIfTI name
  } catch (const std::bad_alloc&) {
    return false;
  }
}

std::string nifti_pair_partner(const std::string& path) {
  SplitName s = split_name(path);
  const bool upper = std::all_of(s.ext.begin() + 1, s.ext.end(),
                                 [](char ch) { return std::isupper(static_cast<unsigned char>(ch)); });
  std::string other = lower(s.ext) == ".hdr" ? ".img" : lower(s.ext) == ".img" ? ".hdr" : "";
  if (other.empty())
    throw Error(ErrorCode::invalid_argument, path, "file name", "not a .hdr/.img pair name");
  if (upper)
    for (auto& ch : other) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s.stem + other + s.gz;
}

std::uint64_t NiftiImage::voxel_count() const {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);  // checked in open_nifti
  return n;
}

std::uint64_t NiftiImage::data_bytes() const { return voxel_count() * dtype_size(dtype); }

bool NiftiImage::swapped() const noexcept {
  return header.big_endian != (std::endian::native == std::endian::big);
}

void check_data_size(const NiftiImage& image) {
  // Opening names a missing, unreadable or replaced data file before any size is judged.
  if (!image.data_input) nifti::open_data_file(image);
  nifti::check_data_size(image, image.data_file_size);
}

void nifti::check_data_size(const NiftiImage& image, std::uint64_t file_size) {
  const std::uint64_t need = image.data_offset + image.data_bytes();  // checked in open_nifti
  if (image.data_compression == Compression::none) {
    if (file_size < need)
      throw Error(ErrorCode::truncated, image.data_path, "data",
                  "expected " + std::to_string(image.data_bytes()) + " bytes of voxel data from byte " +
                      std::to_string(image.data_offset) + ", but the file is " +
                      std::to_string(file_size) + " bytes long",
                  file_size);
    return;
  }
  // Deflate cannot expand more than 1032:1, so a small gzip file cannot justify a huge output.
  auto bound = core::checked_mul(file_size, 1032);
  if (bound && *bound < need)
    throw Error(ErrorCode::truncated, image.data_path, "data",
                "expected " + std::to_string(need) + " uncompressed bytes, but a gzip file of " +
                    std::to_string(file_size) + " bytes cannot hold more than " +
                    std::to_string(*bound));
}

namespace nifti {
std::vector<std::int64_t> data_shape(const NiftiHeader& h, const std::string& path) {
  const std::int64_t ndim = h.dim[0];
  if (ndim < 0 || ndim > 7)
    throw Error(ErrorCode::format, path, "dim[0]",
                "expected 0..7 dimensions, but found " + std::to_string(ndim),
                h.version == 2 ? 16 : 40);
  if (ndim == 0) return {0};
  std::vector<std::int64_t> shape(h.dim.begin() + 1, h.dim.begin() + 1 + ndim);
  if (h.version == 1 && shape.size() >= 3) {
    if (shape[0] == -1 && shape[1] == 1 && shape[2] == 1) {
      if (h.glmin == 0)
        throw Error(ErrorCode::format, path, "glmin",
                    "-1 in dim[1] but 0 in glmin; inconsistent freesurfer type header?", 144);
      shape[0] = h.glmin;
    } else if (shape[0] == 27307 && shape[1] == 1 && shape[2] == 6) {
      shape[0] = 163842;
      shape[2] = 1;
    }
  }
  for (std::size_t i = 0; i < shape.size(); ++i)
    if (shape[i] < 0)
      throw Error(ErrorCode::format, path, "dim[" + std::to_string(i + 1) + "]",
                  "expected a non-negative size, but found " + std::to_string(shape[i]));
  return shape;
}

FilePaths file_paths(const std::string& path) {
  const std::string ext = lower(split_name(path).ext);
  if (ext == ".hdr") return {path, nifti_pair_partner(path), true};
  if (ext == ".img") return {nifti_pair_partner(path), path, true};
  return {path, path, false};
}
}  // namespace nifti

namespace {
// open_nifti of a URL or a Zarr store: the object (and a .hdr's .img object), or the store as a
// .nii, through the URL handlers.
NiftiImage open_nifti_url(const std::string& url, const OpenOptions& options) {
  const UrlHandlers& handlers = url_handlers();
  if (!handlers.open)
    throw Error(ErrorCode::unsupported, url, "",
                is_zarr_path(url)
                    ? "Zarr stores are read through voxpipe's Python package (pip install "
                      "'voxpipe[zarr]'; from the shell: python -m voxpipe ...)"
                    : "objects named by URLs are read through voxpipe's Python package "
                      "(pip install 'voxpipe[s3]'; from the shell: python -m voxpipe ...)");
  const std::string name = lower(url.substr(0, url.find('?')));
  const bool pair = !is_zarr_path(url) && (ends_with(name, ".hdr") || ends_with(name, ".hdr.gz") ||
                                           ends_with(name, ".img") || ends_with(name, ".img.gz"));
  if (!pair) return open_nifti_remote(handlers.open(url), nullptr, options);
  const std::string query = url.find('?') == std::string::npos ? "" : url.substr(url.find('?'));
  const nifti::FilePaths paths = nifti::file_paths(url.substr(0, url.find('?')));
  return open_nifti_remote(handlers.open(paths.header + query), handlers.open(paths.image + query),
                           options);
}
}  // namespace

NiftiImage open_nifti(const std::string& path, const OpenOptions& options) {
  if (is_object_url(path) || is_zarr_path(path)) return open_nifti_url(path, options);
  NiftiImage img;
  const nifti::FilePaths paths = nifti::file_paths(path);
  const bool pair = paths.pair;
  img.header_path = paths.header;
  img.data_path = paths.image;
  img.header_compression = ends_with(lower(img.header_path), ".gz") ? Compression::gzip : Compression::none;
  img.data_compression = ends_with(lower(img.data_path), ".gz") ? Compression::gzip : Compression::none;
  auto header_file = std::make_shared<const core::InputFile>(img.header_path);
  // Recorded before the header is read: a change while it is read shows at the first data read.
  img.header_identity = header_file->identity();
  read_header_stream(img, std::move(header_file), img.header_compression == Compression::gzip,
                     pair, options);
  // Like nibabel, a pair whose .img is missing opens; reading its data then fails.
  img.data_identity = pair ? path_identity(img.data_path) : img.header_identity;
  img.data_file_size = img.data_identity ? img.data_identity->size : 0;
  return img;
}

NiftiImage open_nifti_bytes(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                            const std::string& name, const OpenOptions& options) {
  // The name is checked as a path would be where it says what the bytes are.
  const std::string l = lower(name);
  for (const char* e : {".hdr", ".img", ".hdr.gz", ".img.gz"})
    if (ends_with(l, e))
      throw Error(ErrorCode::unsupported, name, "file name",
                  "expected the bytes of a single .nii or .nii.gz file: .hdr/.img pairs are read "
                  "from files only");
  if (ends_with(l, ".bz2") || ends_with(l, ".zst")) split_name(name);  // Error(unsupported)
  NiftiImage img;
  img.header_path = img.data_path = name;
  // There may be no file name to go by: the magic decides. A .gz name still promises gzip
  // (GzipByteSource refuses other bytes, as it does for files).
  const bool gz = ends_with(l, ".gz") ||
                  gz::has_gzip_magic(std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                               std::min<std::size_t>(bytes.size(), 2)));
  img.header_compression = img.data_compression = gz ? Compression::gzip : Compression::none;
  img.data_input = std::make_shared<const core::MemoryInput>(bytes, std::move(owner), name);
  read_header_stream(img, img.data_input, gz, false, options);
  img.data_file_size = bytes.size();
  return img;
}

NiftiImage open_nifti_remote(std::shared_ptr<const RemoteInput> header,
                              std::shared_ptr<const RemoteInput> data, const OpenOptions& options) {
  if (!header) throw Error(ErrorCode::invalid_argument, "", "header", "expected an object");
  // A URL's query (a signed URL's token) is not part of its name.
  auto name_of = [](const std::string& url) { return lower(url.substr(0, url.find('?'))); };
  const std::string hname = name_of(header->name());
  const bool hdr = ends_with(hname, ".hdr") || ends_with(hname, ".hdr.gz");
  if (hdr != static_cast<bool>(data))
    throw Error(ErrorCode::invalid_argument, header->name(), "file name",
                data ? "expected a .hdr object with an .img object, but the header's name is not .hdr"
                     : "expected the .img object of a .hdr object");
  if (ends_with(hname, ".img") || ends_with(hname, ".img.gz"))
    throw Error(ErrorCode::invalid_argument, header->name(), "file name",
                "expected the .hdr object of a pair as the header");
  if (ends_with(hname, ".bz2") || ends_with(hname, ".zst")) split_name(hname);  // unsupported
  NiftiImage img;
  img.header_path = header->name();
  img.data_path = data ? data->name() : header->name();
  std::shared_ptr<const core::RandomAccessInput> hin = header->input();
  std::shared_ptr<const core::RandomAccessInput> din = data ? data->input() : hin;
  auto gz_of = [&](const std::shared_ptr<const core::RandomAccessInput>& in,
                   const std::string& name) {
    if (ends_with(name, ".gz")) return true;
    if (ends_with(name, ".nii") || ends_with(name, ".hdr") || ends_with(name, ".img")) return false;
    std::uint8_t magic[2] = {0, 0};
    const std::size_t got = in->read_at(0, std::as_writable_bytes(std::span(magic)));
    return gz::has_gzip_magic(std::span<const std::uint8_t>(magic, got));
  };
  img.header_compression = gz_of(hin, hname) ? Compression::gzip : Compression::none;
  img.data_compression = data ? (gz_of(din, name_of(data->name())) ? Compression::gzip
                                                                   : Compression::none)
                              : img.header_compression;
  img.data_input = din;
  read_header_stream(img, hin, img.header_compression == Compression::gzip, hdr, options);
  img.data_file_size = din->size();
  return img;
}

}  // namespace voxpipe
