// voxpipe/nifti.hpp: NIfTI-1 and NIfTI-2 headers, images, reading and writing.
//
// Conventions (all as nibabel):
//  - Arrays are in Fortran (column-major) order: axis 0 varies fastest, as stored on disk.
//  - Affines map voxel indices to RAS+ millimetres; 4x4, row-major in `std::array<double,16>`.
//  - Header fields are the values nibabel exposes after its load-time checks and fixes
//    (docs/nifti.md lists them); the raw on-disk values are not kept.
// Thread-safety: all functions are re-entrant; a NiftiImage is immutable after open_nifti and may
// be read from several threads at once.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "voxpipe/dtype.hpp"
#include "voxpipe/file_identity.hpp"
#include "voxpipe/gzip.hpp"
#include "voxpipe/output_stream.hpp"

namespace voxpipe {

namespace core {
class ByteSource;
class InputFile;
class RandomAccessInput;
}  // namespace core
class RemoteInput;  // voxpipe/remote.hpp

// Every field of a NIfTI-1 or NIfTI-2 header, widened to the NIfTI-2 types (exact: NIfTI-1
// float32/int16 values convert to double/int64 without rounding). Fields that exist only in
// NIfTI-1 (data_type, db_name, extents, session_error, regular, glmax, glmin) are zero for
// NIfTI-2; `unused_str` exists only in NIfTI-2.
struct NiftiHeader {
  int version = 1;          // 1 or 2
  bool big_endian = false;  // byte order of the header and of the data on disk
  std::int32_t sizeof_hdr = 348;
  std::array<char, 10> data_type{};
  std::array<char, 18> db_name{};
  std::int32_t extents = 0;
  std::int16_t session_error = 0;
  char regular = 0;
  std::uint8_t dim_info = 0;
  std::array<std::int64_t, 8> dim{};
  double intent_p1 = 0, intent_p2 = 0, intent_p3 = 0;
  std::int32_t intent_code = 0;
  std::int16_t datatype = 0;
  std::int16_t bitpix = 0;
  std::int64_t slice_start = 0;
  std::array<double, 8> pixdim{};
  double vox_offset = 0;  // NIfTI-1 stores float32: fractional values are kept here
  double scl_slope = 0, scl_inter = 0;
  std::int64_t slice_end = 0;
  std::int32_t slice_code = 0;
  std::int32_t xyzt_units = 0;
  double cal_max = 0, cal_min = 0, slice_duration = 0, toffset = 0;
  std::int32_t glmax = 0, glmin = 0;
  std::array<char, 80> descrip{};
  std::array<char, 24> aux_file{};
  std::int32_t qform_code = 0, sform_code = 0;
  double quatern_b = 0, quatern_c = 0, quatern_d = 0;
  double qoffset_x = 0, qoffset_y = 0, qoffset_z = 0;
  std::array<double, 4> srow_x{}, srow_y{}, srow_z{};
  std::array<char, 16> intent_name{};
  std::array<char, 4> magic{};          // "n+1\0", "ni1\0", "n+2\0", "ni2\0"
  std::array<std::uint8_t, 4> eol_check{13, 10, 26, 10};  // NIfTI-2 only
  std::array<char, 15> unused_str{};    // NIfTI-2 only

  std::size_t header_size() const noexcept { return version == 2 ? 540 : 348; }
  bool single_file() const noexcept { return magic[1] == '+'; }
};

struct NiftiExtension {
  std::int32_t code = 0;
  std::vector<std::uint8_t> content;  // trailing NULs stripped, as nibabel does
};

// Limits applied while parsing untrusted files (STYLE.md: limits are parameters).
struct NiftiLimits {
  std::uint64_t max_voxels = std::uint64_t{1} << 40;
  std::uint64_t max_extension_bytes = std::uint64_t{1} << 30;
};

// What decoding a header block found: the fixed header plus what nibabel would log.
struct ParsedHeader {
  NiftiHeader header;
  std::vector<std::string> warnings;  // fixes applied, each naming the field
};

// Parses and validates a 348- or 540-byte header block (more bytes are ignored), applying
// nibabel's load-time fixes. `path` is used in error messages only. Throws Error(format /
// unsupported) for what nibabel refuses to load.
ParsedHeader parse_nifti_header(std::span<const std::uint8_t> bytes, const std::string& path);

// Decodes a header block as stored, without nibabel's fixes or checks beyond recognising the
// version (NIfTI-1 magic, else NIfTI-2 sizeof_hdr) and the byte order. Throws Error(format /
// truncated) when the block is neither.
NiftiHeader decode_nifti_header(std::span<const std::uint8_t> bytes, const std::string& path);

// Serialises a header to its 348 or 540 on-disk bytes, in header.big_endian byte order.
std::vector<std::uint8_t> encode_nifti_header(const NiftiHeader& header);

// How the image's bytes are stored.
enum class Compression { none, gzip };

struct Scaling {
  double slope = 1.0;  // as nibabel's ArrayProxy: 1/0 when the header says "unscaled"
  double inter = 0.0;
  bool active() const noexcept { return slope != 1.0 || inter != 0.0; }
};

// An opened image: everything but the voxel data.
struct NiftiImage {
  std::string header_path;  // the name given to open_nifti_bytes for an image in memory
  std::string data_path;  // equal to header_path for single files
  Compression header_compression = Compression::none;
  Compression data_compression = Compression::none;
  NiftiHeader header;
  std::vector<NiftiExtension> extensions;
  std::vector<std::string> warnings;
  std::vector<std::int64_t> shape;  // nibabel's get_data_shape(), FreeSurfer hacks included
  DType dtype = DType::f32;         // on-disk element type
  std::uint64_t data_offset = 0;    // int(vox_offset): where the data starts in data_path
  Scaling scaling;
  std::array<double, 16> affine{};  // get_best_affine(), row-major
  std::uint64_t data_file_size = 0;  // size of data_path when opened (compressed size for gzip;
                                     // 0 when it could not be stat'ed)
  // The header and data files as open_nifti found them (the same for a single file; the data's
  // taken from the descriptor the header was read through): every read of the data checks that
  // data_path still names data_identity, so that a file replaced or rewritten since is an error,
  // never new bytes under this header (NiftiReader). header_identity is unset for images not in
  // files (open_nifti_bytes, open_nifti_remote); data_identity is unset for them and for a pair
  // whose data file could not be stat'ed when it was opened (reading it then fails, or finds a
  // file that appeared since: an error too).
  std::optional<FileIdentity> header_identity;
  std::optional<FileIdentity> data_identity;
  // The stored bytes of the data when they are not the file at data_path (an image opened with
  // open_nifti_bytes): readers read them, and copies of the image and readers made from it
  // share them and keep them alive. Null for files.
  std::shared_ptr<const core::RandomAccessInput> data_input;

  std::uint64_t voxel_count() const;  // product of shape, checked at open
  std::uint64_t data_bytes() const;   // voxel_count * dtype_size, checked at open
  bool swapped() const noexcept;      // data byte order differs from the machine's
};

// Throws Error(io) naming image.data_path ("changed since it was opened") when the file open as
// `fd` is not the image's data file as opened (data_identity): for callers that map or read the
// file by themselves (NumPy's memmap). One fstat. A no-op for images not in files.
void check_nifti_data_file(const NiftiImage& image, int fd);

// Throws Error(truncated) when the data file cannot hold the bytes the header promises: for an
// uncompressed file, data_offset + data_bytes beyond its end; for gzip, more than deflate's
// maximum ratio (1032:1) allows. Call before allocating an output for the whole image. An image
// in memory is judged by the size of its buffer.
void check_data_size(const NiftiImage& image);

struct OpenOptions {
  NiftiLimits limits;
};

// Opens `.nii`, `.nii.gz`, `.hdr`/`.img` (and `.gz`, any letter case) files, reading only the
// header and extensions. Throws Error on a missing file, bad magic, bad fields, or a `.gz` name
// on a file that is not gzip.
NiftiImage open_nifti(const std::string& path, const OpenOptions& options = {});

// Opens the bytes of a single `.nii` or `.nii.gz` file held in memory, exactly as open_nifti
// opens that file (the same header checks, fixes and limits). gzip is recognised by its magic
// (1f 8b). `name` stands for the bytes in header_path, data_path and error messages; a name
// ending in .gz whose bytes are not gzip is Error(format), as for files, and a .hdr/.img name is
// Error(unsupported) (pairs are read from files only); any other name is only a label. `owner`
// keeps `bytes` valid (null when they outlive every copy of the image and its readers); the
// bytes must not change while the image or a reader of it lives. The image reads its data from
// them (NiftiReader, read_nifti_data), without copying the buffer, with the selections, gzip
// engines and integrity checks of a file; a seek index file does not apply to it.
NiftiImage open_nifti_bytes(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                            const std::string& name, const OpenOptions& options = {});

// Opens a NIfTI object read by byte ranges (voxpipe/remote.hpp: an object on S3, GCS, Azure or
// HTTP), reading the header and extensions only: one request when they lie in what `header`
// already holds or in its first request. `data` is the .img object of a .hdr/.img pair, null
// for a single file; the names (URLs) say which, and whether gzip, as file names do (the magic
// decides for a single object whose name has no NIfTI extension). The image shares the inputs
// and reads its data through them: a selection fetches the byte ranges it needs, coalesced and
// concurrently; gzip data read through a seek index (DataSourceOptions::Index::path, checked
// against the object's size and last 64 KiB) fetch the compressed span from the point before
// the range. data_file_size is the data object's size.
NiftiImage open_nifti_remote(std::shared_ptr<const RemoteInput> header,
                             std::shared_ptr<const RemoteInput> data = nullptr,
                             const OpenOptions& options = {});

// A selection along one axis: source indices start + i*step for i in [0, count); step != 0 and
// may be negative. count may be 0.
struct AxisRange {
  std::int64_t start = 0;
  std::int64_t step = 1;
  std::int64_t count = 0;
};

// What the reader writes into the destination.
struct OutputSpec {
  DType type = DType::f64;   // element type written
  bool apply_scaling = true; // multiply by slope, then add inter (two roundings, no FMA)
  bool file_byte_order = false;  // copy raw bytes in the file's order (only if type == on-disk
                                 // type and !apply_scaling); otherwise native order
  bool real_part = false;        // complex source -> real destination: keep the real part
};

struct ReadOptions {
  // Chunks of large reads are inflated and converted in parallel on this many threads; 0: the
  // default (resolve_threads, voxpipe/threads.hpp).
  unsigned threads = 0;
};

// Reads the selected voxels (empty `selection`: everything) into `dest`, which must hold exactly
// prod(count) elements of spec.type in Fortran order. Bytes are read only for the selected
// region (`.nii`: the byte ranges, small gaps merged; `.nii.gz`: inflated up to the end of the
// region). Throws Error(truncated) if the file ends early, Error(corrupt) on a bad gzip stream,
// Error(invalid_argument) on a bad selection or conversion; `dest` is then unspecified.
void read_nifti_data(const NiftiImage& image, std::span<const AxisRange> selection,
                     const OutputSpec& spec, std::span<std::byte> dest,
                     const ReadOptions& options = {});

// How a reader of a single-member .gz data file finds a seek index (gzip.hpp). Files in a
// sized-member layout, and uncompressed files, need none and ignore this. Index files belong to
// files: for an image in memory `automatic` finds none, and `path` is Error(invalid_argument).
struct DataSourceOptions {
  enum class Index {
    automatic,  // a valid sidecar (FILE.gz.gzidx) or cache entry if there is one; else none
    none,       // inflate front to back
    path,       // the GZIDX file `index_path`; Error(invalid_argument) when it is stale
  };
  Index index = Index::automatic;
  std::string index_path;
  // With Index::path, for data read by ranges from an object: its seek index read by ranges from
  // this object (its sidecar, pinned to its own version; a version-2 trailer: the table of
  // contents, then only the windows reads need, each checked), named by index_path in messages.
  std::shared_ptr<const RemoteInput> index_input;
};

// Keeps the data file open across reads (nibabel's keep_file_open=True): a sized-member table or a
// seek index is read once, and a gzip stream without either keeps its position, so selections
// read in ascending order inflate the file once. Holds a copy of `image`. The data file (and an
// index file whose windows are read lazily) stay open until the reader is destroyed. read() may
// be called from several threads at once; reads of a sequential source (gzip without sizes or
// index) are serialised.
//
// Files changed under a reader: the reader reads only the file the image was opened from
// (image.data_identity). Opening the data file checks it (no system call beyond the open's);
// each read() then checks, once it has read, the open file (one fstat: rewritten in place, before
// or during the read?) and, only when that file has no name left, the path (another file renamed
// over it?). Any change is Error(io) "changed since it was opened", never data. A data file
// renamed away, or deleted and not replaced, is still the file opened: the reader goes on
// reading it, as nibabel's keep_file_open=True does (docs/nifti.md, "Files changed under an
// image").
class NiftiReader {
 public:
  // Opens the data file: Error(not_found / io) naming it, the errors of a gzip member table or
  // of an explicit index.
  explicit NiftiReader(const NiftiImage& image, const DataSourceOptions& options = {});
  ~NiftiReader();
  NiftiReader(const NiftiReader&) = delete;
  NiftiReader& operator=(const NiftiReader&) = delete;
  // As read_nifti_data.
  void read(std::span<const AxisRange> selection, const OutputSpec& spec,
            std::span<std::byte> dest, const ReadOptions& options = {});
  const NiftiImage& image() const noexcept { return image_; }
  // As check_data_size(image()), judged by the size of the data file this reader opened (so a
  // file cut after open_nifti is caught too), without opening it again. Call once, before
  // allocating an output for the whole image.
  void check_data_size() const;
  // True when any selection is read without inflating the data before it (uncompressed data,
  // sized gzip members, or a seek index).
  bool random_access() const noexcept;

 private:
  NiftiImage image_;
  std::shared_ptr<const core::InputFile> file_;  // the data file; null for images not in files
  std::unique_ptr<core::ByteSource> source_;
  std::uint64_t data_file_size_ = 0;  // when the source was opened
  std::unique_ptr<std::mutex> sequential_mutex_;
};

// Builds the seek index of a NIfTI file whose data are gzip-compressed, with a point at the
// start of the data and at (or just before) the start of every volume of a 4D+ image, so that
// img.dataobj[..., t] inflates one volume, plus a point every `options.spacing` bytes.
// Error(invalid_argument) when the data are not gzip-compressed.
GzipIndexSummary build_nifti_gzip_index(const std::string& path, GzipIndexOptions options = {});

// The same for an opened image whose data are not in a file (open_nifti_remote): reads the data
// through the image's input and writes the index to `options.output`, which must be set, keyed
// by the object's size and last 64 KiB (an object has no modification time to record).
GzipIndexSummary build_nifti_gzip_index(const NiftiImage& image, GzipIndexOptions options);

// Is a conversion from the image's on-disk type to spec supported?  (RGB only as raw bytes,
// scaling only to float/complex outputs, complex to real only with real_part.)
bool conversion_supported(DType source, const OutputSpec& spec);

// The dtype nibabel returns from np.asanyarray(img.dataobj): the on-disk type when unscaled,
// otherwise float64 (complex128 for complex sources). Throws Error(unsupported) for scaled RGB.
DType scaled_dtype(DType source, const Scaling& scaling, const std::string& path);

struct WriteOptions {
  // 0..9. 1 is nibabel's default; the members and bgzf layouts compress with libdeflate, whose
  // level 1 makes smaller files than zlib's, the single layout with zlib.
  int gzip_level = 1;
  GzipLayout gzip_layout = GzipLayout::members;
  // Compression threads for the members and bgzf layouts; 0: the default (resolve_threads).
  unsigned threads = 0;
};

// Produces the next bytes of voxel data, in the header's dtype and byte order, Fortran order;
// returns how many bytes it wrote into `buffer` (0 only at the end).
using DataProducer = std::function<std::size_t(std::span<std::byte> buffer)>;

// Writes an image: `.nii`/`.nii.gz` single file, or `.hdr`/`.img` (+`.gz`) pair, chosen by the
// path's extension. The header's magic, vox_offset and sizeof_hdr are set to match; all other
// fields are written as given. The data comes from `producer` and must be exactly
// header's shape x dtype bytes. Each output is written to a temporary name beside it and renamed
// only when complete, so a failure never leaves a partial file.
void write_nifti(const std::string& path, NiftiHeader header,
                 const std::vector<NiftiExtension>& extensions, const DataProducer& producer,
                 const WriteOptions& options = {});

// write_nifti of one single-file output (.nii, or .nii.gz by `name`'s extension; a .hdr/.img
// pair is Error(invalid_argument)) into `stream` rather than a file, in the same bytes:
// stream.commit() once every byte is written; on any failure before that, stream.abort(),
// then the error. `name` (the destination's URL) stands for the output in errors.
void write_nifti_stream(const std::string& name, const OutputStream& stream, NiftiHeader header,
                        const std::vector<NiftiExtension>& extensions,
                        const DataProducer& producer, const WriteOptions& options = {});

// Helper for in-memory data: a producer over a byte span.
DataProducer producer_from_bytes(std::span<const std::byte> bytes);

// Affine helpers (nibabel's Nifti1Header.get_qform / get_sform / get_base_affine / get_best_affine).
std::array<double, 16> nifti_qform(const NiftiHeader& h, const std::string& path);
std::array<double, 16> nifti_sform(const NiftiHeader& h);
std::array<double, 16> nifti_base_affine(const NiftiHeader& h);
std::array<double, 16> nifti_best_affine(const NiftiHeader& h, const std::string& path);

// Sniffing: whether the path names a pair (.hdr/.img, with optional .gz) and the partner's path.
bool nifti_is_pair_path(const std::string& path);

// Whether a file name is a gzip-compressed NIfTI name (.nii.gz, .hdr.gz, .img.gz, any case):
// the files whose seek index gets a point per volume (build_nifti_gzip_index).
bool nifti_is_gzip_name(const std::string& path) noexcept;
std::string nifti_pair_partner(const std::string& path);

}  // namespace voxpipe
