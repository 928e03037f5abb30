// voxpipe/dicom.hpp: DICOM Part 10 datasets: parsing metadata and locating the pixel data.
//
// read_dicom parses the File Meta Information and the dataset of one file without any DICOM
// toolkit, as pydicom's dcmread does, and stops at the Pixel Data: it records where the pixel
// bytes are (offset and length, or the fragments of encapsulated data) but never reads them.
// Values larger than a limit are recorded (offset, length), not read. docs/dicom.md describes
// what is accepted and how it matches pydicom.
//
// Conventions:
//  - Tags are 32-bit numbers group << 16 | element, e.g. 0x00280010 for Rows (dicom_tag()).
//  - Offsets are byte offsets of the first value byte. For every transfer syntax but Deflated
//    Explicit VR Little Endian they are offsets in the file; for the deflated syntax, dataset
//    offsets are positions in the inflated dataset stream, which starts (offset 0) right after
//    the File Meta Information (DicomFile::offsets_in_inflated_stream says which). This is what
//    pydicom's value_tell reports.
//  - Value bytes are kept as stored (the dataset's byte order); the accessors convert.
// Thread-safety: read_dicom and parse_dicom are re-entrant; a DicomFile is immutable after parsing.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "voxpipe/dtype.hpp"
#include "voxpipe/file_identity.hpp"

namespace voxpipe {

using DicomTag = std::uint32_t;
constexpr DicomTag dicom_tag(std::uint16_t group, std::uint16_t element) {
  return std::uint32_t{group} << 16 | element;
}
constexpr std::uint16_t dicom_group(DicomTag t) { return static_cast<std::uint16_t>(t >> 16); }
constexpr std::uint16_t dicom_element(DicomTag t) { return static_cast<std::uint16_t>(t); }

// Value representations (PS3.5 6.2). `unknown` is an explicit VR of two capital letters that is
// not one of these (its value is read with a 2-byte length, as pydicom does).
enum class DicomVR : std::uint8_t {
  AE, AS, AT, CS, DA, DS, DT, FD, FL, IS, LO, LT, OB, OD, OF, OL, OV, OW, PN, SH, SL, SQ, SS,
  ST, SV, TM, UC, UI, UL, UN, UR, US, UT, UV, unknown
};
// "AE" ... "UV", "??" for unknown.
const char* dicom_vr_name(DicomVR vr) noexcept;
// The VR named by two characters, or nullopt.
std::optional<DicomVR> dicom_vr_from_name(std::string_view name) noexcept;

// "(GGGG,EEEE)", used in error messages.
std::string dicom_tag_name(DicomTag tag);
// The tag of a keyword of the DICOM data dictionary (PS3.6 as pydicom 3 has it, retired keywords
// included; exact, case-sensitive spelling: "PatientBirthDate"), or nullopt. A repeating-group
// keyword gives the group's first tag ("OverlayRows": 0x60000010). Thread-safe, no allocation.
std::optional<DicomTag> dicom_keyword_tag(std::string_view keyword) noexcept;
// The keyword of a public tag ("Rows" for 0x00280010; every tag of a repeating group, so
// "OverlayRows" for 0x60020010 too), or nullptr for private tags, tags the standard does not
// define and the six retired tags it gives no keyword. A static string; thread-safe.
const char* dicom_tag_keyword(DicomTag tag) noexcept;

inline constexpr std::uint64_t kDicomUndefinedLength = 0xFFFFFFFF;

class DicomDataset;
namespace dicom {
struct DatasetAccess;  // the parser's access to a dataset under construction
}

// One data element.
struct DicomElement {
  DicomTag tag = 0;
  DicomVR vr = DicomVR::UN;
  // The VR came from the file (explicit VR) rather than the data dictionary (implicit VR).
  bool explicit_vr = false;
  std::uint64_t value_offset = 0;  // first value byte (file or inflated stream, see above)
  // Value length as stored; kDicomUndefinedLength for undefined-length sequences (and values).
  std::uint64_t length = 0;
  // true when the value bytes are in `value` (and `length` bytes long); false when the value
  // exceeded DicomReadOptions::max_value_size (or is the pixel data), so only its place is known.
  bool value_read = false;
  std::vector<std::uint8_t> value;
  // Sequences (VR SQ, or UN/unknown values found to be sequences): the items, in order.
  std::vector<DicomDataset> items;
  // For each item, the offset of its item tag (FFFE,E000).
  std::vector<std::uint64_t> item_offsets;
};

// A dataset: elements sorted by tag (a tag that occurs twice keeps the last, as in pydicom).
class DicomDataset {
 public:
  DicomDataset() = default;
  DicomDataset(std::vector<DicomElement> elements, bool big_endian);

  const std::vector<DicomElement>& elements() const noexcept { return elements_; }
  bool big_endian() const noexcept { return big_endian_; }
  // The element with `tag`, or nullptr.
  const DicomElement* find(DicomTag tag) const noexcept;
  bool contains(DicomTag tag) const noexcept { return find(tag) != nullptr; }

  // The values of a string VR, split at '\' (except LT, ST, UT, UR, which have one value) and
  // trimmed as pydicom does (docs/dicom.md): empty when the element is missing or not read.
  std::vector<std::string> strings(DicomTag tag) const;
  // The first of strings(tag), or nullopt when there is none.
  std::optional<std::string> string(DicomTag tag) const;
  // A UID (UI): the value without its trailing NUL/space padding.
  std::optional<std::string> uid(DicomTag tag) const { return string(tag); }
  // The values of a numeric element: US SS UL SL FL FD SV UV (binary, in the dataset's byte
  // order), IS DS (text), AT (as tags), and OB/OW/OL/OF/OD/UN are not numbers. Empty when the
  // element is missing, not read, or empty. Throws Error(format) naming the tag when a value is
  // not a number (IS/DS text that does not parse, a binary length not a multiple of the size).
  std::vector<double> numbers(DicomTag tag) const;
  std::optional<double> number(DicomTag tag, std::size_t index = 0) const;
  // As numbers() for integer VRs and IS (exact for 64-bit integers); Error(format) for a value
  // that is not an integer.
  std::vector<std::int64_t> integers(DicomTag tag) const;
  std::optional<std::int64_t> integer(DicomTag tag, std::size_t index = 0) const;
  // The items of a sequence (empty when missing or not a sequence).
  const std::vector<DicomDataset>& items(DicomTag tag) const noexcept;

 private:
  friend struct dicom::DatasetAccess;
  std::vector<DicomElement> elements_;
  bool big_endian_ = false;
};

struct DicomTransferSyntax {
  std::string uid;  // as in (0002,0010), trimmed; empty when the file has none
  bool implicit_vr = false;
  bool big_endian = false;
  bool deflated = false;      // the dataset is raw-deflate compressed (1.2.840.10008.1.2.1.99)
  bool encapsulated = false;  // pixel data in fragments (JPEG, RLE, ...): every other syntax
};
// The properties of a transfer syntax UID (unknown UIDs: explicit VR little endian,
// encapsulated, as pydicom assumes).
DicomTransferSyntax dicom_transfer_syntax(std::string_view uid);

struct DicomFragment {
  std::uint64_t offset = 0;  // first byte of the fragment's data (after its item header)
  std::uint64_t length = 0;
};

// Where the top-level pixel data lies. Nothing of it is read but item headers and offset tables.
struct DicomPixelData {
  // 7FE0,0010 Pixel Data; 7FE0,0008 Float Pixel Data; 7FE0,0009 Double Float Pixel Data.
  DicomTag tag = 0;
  DicomVR vr = DicomVR::OB;
  // Native data: [offset, offset + length) holds it.
  // Encapsulated data (undefined length): `offset` is the first value byte (the Basic Offset
  // Table's item tag) and `length` the bytes up to and including the Sequence Delimitation Item.
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  bool encapsulated = false;
  std::vector<std::uint32_t> basic_offset_table;  // may be empty
  std::vector<DicomFragment> fragments;           // after the Basic Offset Table's item
  // Extended Offset Table (7FE0,0001) and its lengths (7FE0,0002), when present and read.
  std::vector<std::uint64_t> extended_offsets;
  std::vector<std::uint64_t> extended_lengths;
};

struct DicomReadOptions {
  // Values longer than this are recorded (offset, length) but not read; sequences are always
  // parsed. Specific Character Set is always read.
  std::uint64_t max_value_size = 64 * 1024;
  // true: parsing ends at the top-level pixel data (after its location is recorded), as
  // metadata readers want; false: the elements after it (padding, signatures) are parsed too.
  bool stop_at_pixel_data = true;
  // Nesting of sequences deeper than this is an Error(limit).
  unsigned max_depth = 64;
  // Inflated size of a deflated dataset beyond which parsing stops with Error(limit).
  std::uint64_t max_inflated_size = std::uint64_t{1} << 32;
  // false: a file without the 128-byte preamble and "DICM" is parsed (as pydicom's force=True
  // would) when its first element looks like DICOM: an explicit VR, or a group 0002 to 0010;
  // true: such files are an Error(format).
  bool require_preamble = false;
};

struct DicomFile {
  std::string path;
  bool has_preamble = false;  // 128 bytes + "DICM"
  DicomDataset meta;          // group 0002 (File Meta Information); empty when absent
  DicomDataset dataset;       // everything else
  DicomTransferSyntax transfer_syntax;
  // The encoding the dataset was actually parsed with (pydicom's rule: the first element
  // decides when it contradicts the transfer syntax, or when there is none).
  bool implicit_vr = false;
  bool big_endian = false;
  std::uint64_t dataset_offset = 0;  // where the dataset begins in the file
  // true for the deflated syntax: dataset offsets (and pixel data offsets) are positions in the
  // inflated stream, which begins at file offset dataset_offset.
  bool offsets_in_inflated_stream = false;
  std::optional<DicomPixelData> pixel_data;
  // The file as read_dicom found it (unset for parse_dicom's bytes): decoding its pixel data
  // later reads the file again, and refuses one replaced or rewritten since (Error(io), "the
  // file changed since it was opened"), since the offsets and the Image Pixel module above
  // describe this version of it only. One fstat per frame read.
  std::optional<FileIdentity> identity;
};

// Parses the file at `path`. Throws Error(not_found / io) when it cannot be read,
// Error(format) for bytes that are not a DICOM dataset (or an element or item that crosses the
// end of its item or sequence), Error(truncated) when a value or item ends beyond the end of the
// file, Error(corrupt) for a deflate stream that does not inflate, Error(limit) beyond the
// limits of `options`. Messages name the file, the
// tag and the byte offset. Memory: the values read (each at most max_value_size) and the
// element table; a bounded inflate window for deflated files.
DicomFile read_dicom(const std::string& path, const DicomReadOptions& options = {});

// The same over bytes in memory; `name` stands for the path in errors.
DicomFile parse_dicom(std::span<const std::uint8_t> bytes, const std::string& name,
                      const DicomReadOptions& options = {});

// ---------------------------------------------------------------------------------------------
// Pixel data: decoding to the values of pydicom's `Dataset.pixel_array` (pydicom 3, default
// options), and the modality transform of pydicom's `apply_modality_lut`. docs/dicom.md says
// what matches and what differs.

// How the pixel data of a transfer syntax is stored.
enum class DicomCodec : std::uint8_t {
  native,           // implicit/explicit VR little endian, explicit VR big endian
  deflated_native,  // Deflated Explicit VR Little Endian: native data inside the inflated stream
  deflated_frames,  // Deflated Image Frame Compression (1.2.840.10008.1.2.8.1): raw deflate per frame
  rle,              // RLE Lossless (1.2.840.10008.1.2.5)
  jpeg,             // JPEG Baseline / Extended (lossy, .50/.51)
  jpeg_lossless,    // JPEG Lossless, Non-Hierarchical (.57) and First-Order Prediction (.70)
  jpeg_ls,          // JPEG-LS Lossless / Near-Lossless (.80/.81)
  jpeg2000,         // JPEG 2000 (.90/.91) and High-Throughput JPEG 2000 (.201/.202/.203)
  unsupported,      // any other encapsulated syntax (MPEG, JPEG XL, ...)
};
const char* dicom_codec_name(DicomCodec codec) noexcept;
// Whether this build decodes frames of `codec`, and with which library: the JPEG, JPEG-LS and
// JPEG 2000 decoders need libjpeg-turbo, CharLS and OpenJPEG at build time, and a source build
// without one leaves that codec out (its frames are then an `unsupported` error naming the
// library). `library` is set to the library's name, or "" for voxpipe's own decoders (native,
// deflate, RLE, JPEG Lossless; 12-bit JPEG decodes without libjpeg-turbo). `unsupported`: false.
bool dicom_codec_built(DicomCodec codec, const char** library = nullptr) noexcept;
DicomCodec dicom_codec_of(std::string_view transfer_syntax_uid) noexcept;

// The Image Pixel module of a file, checked, and the shape and dtype of its pixel_array.
struct DicomPixelInfo {
  DicomTag tag = 0;  // the pixel data element: 7FE0,0010 / 0008 (float) / 0009 (double)
  DicomCodec codec = DicomCodec::native;
  std::uint32_t rows = 0, columns = 0;
  std::uint32_t samples_per_pixel = 1;
  std::uint32_t bits_allocated = 0, bits_stored = 0, high_bit = 0;
  std::uint32_t pixel_representation = 0;  // 0 unsigned, 1 two's complement
  std::uint32_t planar_configuration = 0;  // 0 colour-by-pixel, 1 colour-by-plane (as stored)
  std::uint64_t number_of_frames = 1;      // a missing, empty or 0 NumberOfFrames counts as 1
  std::string photometric;                 // (0028,0004) as stored, e.g. "MONOCHROME2"
  // The photometric interpretation of the decoded array with the default options: "RGB" where
  // YBR_FULL / YBR_FULL_422 are converted (as pydicom's as_rgb), else `photometric`.
  std::string photometric_out;
  // pixel_array's dtype: u8 for BitsAllocated 1 and 8 (i8 when signed), u16/i16, u32/i32, u64/i64,
  // f32 for Float Pixel Data, f64 for Double Float Pixel Data.
  DType dtype = DType::u8;
  // Bytes of one decoded frame: rows * columns * samples_per_pixel * dtype_size(dtype).
  std::uint64_t frame_bytes = 0;
  // pixel_array's shape, as pydicom: (rows, columns), (rows, columns, samples),
  // (frames, rows, columns) or (frames, rows, columns, samples). C order.
  std::vector<std::uint64_t> shape;
};

// Reads and checks the Image Pixel module of `file` (which must have been parsed with its pixel
// data location). Throws Error(format) naming the tag for a missing or inconsistent value
// (Rows, Columns, BitsAllocated not 1/8/16/32/64, BitsStored > BitsAllocated, SamplesPerPixel,
// native data shorter than the frames need, ...), Error(unsupported) for a transfer syntax
// voxpipe cannot decode, Error(limit) for decoded frames the encoded data cannot justify (more
// than 4096 times the encoded bytes, beyond 256 MiB). For encapsulated data whose frames are
// found by JPEG end-of-image markers, the fragments' last bytes are read.
// `bytes`: the file's bytes, for a DicomFile from parse_dicom; empty: read from file.path.
DicomPixelInfo dicom_pixel_info(const DicomFile& file, std::span<const std::uint8_t> bytes = {});

// Damage a frame decoder detects but can decode past (libjpeg's "Corrupt JPEG data" warnings,
// OpenJPEG's warnings of a damaged codestream): `raise` makes it Error(corrupt) naming the file,
// the frame and the decoder's message; `warn` returns what the decoder recovered and reports the
// damage among the warnings (docs/dicom.md lists what each codec detects).
enum class DicomOnCorrupt : std::uint8_t { raise, warn };

struct DicomDecodeOptions {
  // YBR_FULL / YBR_FULL_422 decoded to RGB (pydicom's default, as_rgb=True); false keeps YBR.
  bool as_rgb = true;
  // Frames are decoded on up to this many threads of the pool (0: the default, resolve_threads
  // in voxpipe/threads.hpp).
  unsigned threads = 0;
  // nullopt: pixel_array's values and dtype. DType::f64 / f32: the modality transform applied
  // (pydicom's apply_modality_lut: the Modality LUT Sequence where present, else Rescale Slope
  // and Intercept, computed in float64; f32 is that float64 result rounded to float32).
  std::optional<DType> modality;
  DicomOnCorrupt on_corrupt = DicomOnCorrupt::raise;
};

// The bytes one frame of decode_dicom_frames output takes for these options.
std::uint64_t dicom_output_frame_bytes(const DicomPixelInfo& info, const DicomDecodeOptions& options);

// Decodes frames [first, first + count) of `file` into `out`, which must hold
// count * dicom_output_frame_bytes(info, options) bytes: frame after frame, each in pixel_array's
// C order (row, column, sample), host byte order. The pixel bytes are read from file.path (they
// were not read by read_dicom), or taken from `bytes` when given. Frames are decoded in parallel; memory beyond `out` is the
// encoded bytes and one decoded frame per thread. Throws Error(invalid_argument) for frames
// beyond the file's, Error(truncated / corrupt / format / unsupported) naming the file, the
// frame and its offset for data that do not decode (or that a decoder reports damaged, unless
// options.on_corrupt is warn). Returns the warnings, in frame order, each naming the file and
// the frame: damage decoded past (on_corrupt warn), and what pydicom warns about without refusing
// a frame (an RLE segment that decodes to more bytes than the frame holds). The library prints
// nothing: callers pass them on (the Python layer as warnings.warn).
std::vector<std::string> decode_dicom_frames(const DicomFile& file, const DicomPixelInfo& info,
                                             std::uint64_t first, std::uint64_t count,
                                             std::span<std::uint8_t> out,
                                             const DicomDecodeOptions& options = {},
                                             std::span<const std::uint8_t> bytes = {});

// The encoded bytes of each frame of encapsulated pixel data, as pydicom's generate_frames finds
// them (Extended Offset Table, else Basic Offset Table, else one fragment per frame, one frame
// of all fragments, or fragments split at JPEG end-of-image markers): for frame i, the
// fragments (file offsets and lengths) whose data, concatenated, are that frame.
// Throws Error(format) where there are fewer frames than NumberOfFrames.
std::vector<std::vector<DicomFragment>> dicom_frame_fragments(
    const DicomFile& file, std::uint64_t number_of_frames, std::span<const std::uint8_t> bytes = {});

}  // namespace voxpipe
