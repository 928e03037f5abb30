// Writing .nii / .nii.gz / .hdr+.img (+.gz): header, extensions, padding to vox_offset, data.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/checked.hpp"
#include "core/file.hpp"
#include "gz/gzip_writer.hpp"
#include "gz/member_writer.hpp"
#include "nifti/internal.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/threads.hpp"

namespace voxpipe {

namespace {

bool is_gz_name(const std::string& path) {
  if (path.size() < 3) return false;
  std::string tail = path.substr(path.size() - 3);
  for (auto& ch : tail) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return tail == ".gz";
}

// One output file, compressed or not, committed only when complete.
class Sink {
 public:
  // Into `stream` when given (write_nifti_stream), else into a file at `path`.
  Sink(const std::string& path, const WriteOptions& options, const OutputStream* stream = nullptr)
      : file_(stream ? std::make_unique<core::AtomicOutputFile>(path, *stream)
                     : std::make_unique<core::AtomicOutputFile>(path)) {
    if (!is_gz_name(path)) return;
    if (options.gzip_layout == GzipLayout::single)
      single_.emplace(*file_, options.gzip_level);
    else
      members_.emplace(*file_, options.gzip_level, options.gzip_layout, options.threads);
  }
  void write(std::span<const std::byte> bytes) {
    if (single_)
      single_->write(bytes);
    else if (members_)
      members_->write(bytes);
    else
      file_->write(bytes);
    written_ += bytes.size();
  }
  void zeros(std::uint64_t n) {
    static const std::byte kZeros[4096] = {};
    while (n > 0) {
      std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, sizeof kZeros));
      write(std::span(kZeros, k));
      n -= k;
    }
  }
  std::uint64_t written() const { return written_; }
  void finish() {
    if (single_) single_->finish();
    if (members_) members_->finish();
  }
  void commit() { file_->commit(); }

 private:
  std::unique_ptr<core::AtomicOutputFile> file_;
  std::optional<gz::GzipWriter> single_;
  std::optional<gz::MemberWriter> members_;
  std::uint64_t written_ = 0;
};

}  // namespace

DataProducer producer_from_bytes(std::span<const std::byte> bytes) {
  auto pos = std::make_shared<std::size_t>(0);
  return [bytes, pos](std::span<std::byte> buffer) {
    std::size_t n = std::min(buffer.size(), bytes.size() - *pos);
    if (n == 0) return n;  // an empty span may have a null data pointer
    std::memcpy(buffer.data(), bytes.data() + *pos, n);
    *pos += n;
    return n;
  };
}

namespace {

// write_nifti, into `stream` when given (a single-file output only).
void write_nifti_to(const std::string& path, NiftiHeader header,
                    const std::vector<NiftiExtension>& extensions, const DataProducer& producer,
                    const WriteOptions& given, const OutputStream* stream) {
  WriteOptions options = given;  // both files of a pair compress on the one resolved count
  options.threads = resolve_threads(given.threads);
  const nifti::FilePaths paths = nifti::file_paths(path);
  const bool pair = paths.pair;
  if (pair && stream)
    throw Error(ErrorCode::invalid_argument, path, "",
                "a .hdr/.img pair is two outputs: it cannot be written into one stream");
  const bool single = !pair;
  const char v = header.version == 2 ? '2' : '1';
  header.magic = {'n', single ? '+' : 'i', v, '\0'};
  header.sizeof_hdr = header.version == 2 ? 540 : 348;
  if (header.version == 2) header.eol_check = {13, 10, 26, 10};

  const std::vector<std::uint8_t> ext_bytes =
      nifti::encode_extensions(extensions, header.big_endian, single);
  const std::uint64_t min_offset = header.header_size() + ext_bytes.size();
  if (single) {
    if (header.vox_offset == 0)
      header.vox_offset = static_cast<double>(min_offset);
    else if (header.vox_offset < static_cast<double>(min_offset))
      throw Error(ErrorCode::invalid_argument, path, "vox_offset",
                  "vox offset set to " + std::to_string(header.vox_offset) +
                      ", but need at least " + std::to_string(min_offset));
  }
  // Validate what we are about to write exactly as a reader will see it.
  const std::vector<std::uint8_t> hdr_bytes = encode_nifti_header(header);
  ParsedHeader check = parse_nifti_header(hdr_bytes, path);
  auto dt = dtype_from_nifti_code(check.header.datatype);
  std::uint64_t expected = dtype_size(*dt);
  for (std::int64_t d : nifti::data_shape(check.header, path)) {
    auto m = core::checked_mul(expected, static_cast<std::uint64_t>(d));
    if (!m) throw Error(ErrorCode::limit, path, "dim", "data size overflows 64 bits");
    expected = *m;
  }

  std::unique_ptr<Sink> hdr_sink = std::make_unique<Sink>(paths.header, options, stream);
  hdr_sink->write(std::as_bytes(std::span(hdr_bytes)));
  hdr_sink->write(std::as_bytes(std::span(ext_bytes)));
  std::unique_ptr<Sink> img_sink;
  Sink* data_sink = hdr_sink.get();
  if (pair) {
    img_sink = std::make_unique<Sink>(paths.image, options);
    data_sink = img_sink.get();
  }
  const auto offset = static_cast<std::uint64_t>(header.vox_offset);
  if (data_sink->written() < offset) data_sink->zeros(offset - data_sink->written());

  std::vector<std::byte> buffer(std::size_t{1} << 20);
  std::uint64_t total = 0;
  for (;;) {
    std::size_t n = producer(buffer);
    if (n == 0) break;
    total += n;
    if (total > expected) break;
    data_sink->write(std::span(buffer.data(), n));
  }
  if (total != expected)
    throw Error(ErrorCode::invalid_argument, path, "data",
                "expected " + std::to_string(expected) + " bytes of voxel data for the header's "
                "shape and datatype, but received " + (total > expected ? "more" : std::to_string(total)));
  hdr_sink->finish();
  if (img_sink) img_sink->finish();
  hdr_sink->commit();
  if (img_sink) img_sink->commit();
}

}  // namespace

void write_nifti(const std::string& path, NiftiHeader header,
                 const std::vector<NiftiExtension>& extensions, const DataProducer& producer,
                 const WriteOptions& options) {
  write_nifti_to(path, std::move(header), extensions, producer, options, nullptr);
}

void write_nifti_stream(const std::string& name, const OutputStream& stream, NiftiHeader header,
                        const std::vector<NiftiExtension>& extensions,
                        const DataProducer& producer, const WriteOptions& options) {
  try {
    write_nifti_to(name, std::move(header), extensions, producer, options, &stream);
  } catch (...) {
    // Failures before the sink existed (a header refused): nothing was sent, but the stream
    // was opened; abort is idempotent for the streams voxpipe makes.
    if (stream.abort) stream.abort();
    throw;
  }
}

}  // namespace voxpipe
