// Objects read by byte ranges: the bytes of a NIfTI file on an object store (S3, GCS, Azure,
// HTTP), fetched on demand by a caller-supplied fetcher, so that opening an image reads its
// header in one ranged request and a selection reads the byte ranges it needs, coalesced and
// fetched concurrently. The requests themselves (signing, credentials, retries, timeouts) are the
// fetcher's: voxpipe's Python package passes one built on obstore.
//
// What is fetched is kept in a bounded cache of extents, so that the header, a member table or
// a seek point's span is requested once however many small reads it serves. Reads that find no
// cached extent fetch what they miss, growing the request geometrically while they run forward
// through the object (a sequential decode; each of several threads decoding its own part of the
// object grows its own), up to part_size. A pass over a whole object (a whole read, an index
// build) is read ahead in part_size requests, several in flight, within a bounded window ahead
// of the decoder (read_ahead_bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "voxpipe/output_stream.hpp"

namespace voxpipe {

namespace core {
class RangeInput;
}

struct ByteRange {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
};

// Bytes a fetcher returns for one range: `bytes` stays valid while `owner` lives.
struct FetchedBytes {
  std::span<const std::byte> bytes;
  std::shared_ptr<const void> owner;
};

// Returns the bytes of each range, in order, each exactly its size (the ranges asked for lie
// within the object): an answer of another length fails the read (Error truncated when shorter,
// io when longer), never reaches it. May fetch the ranges concurrently; is called from any
// thread, possibly several at once.
// Throws voxpipe::Error naming the object on failure (not found, denied, timed out, changed).
using RangeFetcher = std::function<std::vector<FetchedBytes>(std::span<const ByteRange>)>;

struct RemoteInputOptions {
  // The smallest request a read that misses the cache makes (a header with its extensions, a
  // run of small reads).
  std::uint64_t min_request = 64u << 10;
  // Ranges at most this far apart are fetched as one (the cost of a request exceeds that of the bytes
  // between them on object stores).
  std::uint64_t coalesce_gap = 1u << 20;
  // Longer ranges are split into parts of this size fetched concurrently (above 0).
  std::uint64_t part_size = 8u << 20;
  // Bytes kept in the cache; prefetches beyond it fetch their first part only, the rest as read.
  std::uint64_t max_cached_bytes = 256u << 20;
  // A read ahead (a whole-object pass) keeps at most this many bytes fetched or in flight beyond
  // what its reader has reached (at least one part; at most 8 requests at once): the next part is
  // requested as the reader reaches one. A pass over an object holds at most this plus
  // max_cached_bytes, whatever the object's size.
  std::uint64_t read_ahead_bytes = 64u << 20;
};

struct RemoteInputStats {
  std::uint64_t requests = 0;  // ranges passed to the fetcher
  std::uint64_t bytes = 0;     // bytes it returned
};

// An object read through a RangeFetcher. `name` stands for it in errors (its URL); `size` is the
// object's size as seen when opened, `version` what identifies that version (an ETag; empty when
// the server gives none), which the fetcher pins its requests to. `initial` holds bytes already
// fetched from offset 0 (the response that told the size), or is empty.
class RemoteInput {
 public:
  RemoteInput(std::string name, std::uint64_t size, RangeFetcher fetch, FetchedBytes initial = {},
              const RemoteInputOptions& options = {}, std::string version = {});
  ~RemoteInput();
  RemoteInput(const RemoteInput&) = delete;
  RemoteInput& operator=(const RemoteInput&) = delete;

  const std::string& name() const noexcept;
  std::uint64_t size() const noexcept;
  const std::string& version() const noexcept;
  RemoteInputStats stats() const;
  // Fetches `ranges` into the cache now (coalesced, concurrently) unless they are there.
  void prefetch(std::span<const ByteRange> ranges) const;

  // The input readers read (internal: src/core/range_input.hpp).
  const std::shared_ptr<core::RangeInput>& input() const noexcept { return input_; }

 private:
  std::shared_ptr<core::RangeInput> input_;
};

// How calls that take paths (open_nifti, build_nifti_gzip_index, the CLI's commands) reach
// objects named by URLs (s3://, gs://, az://, http(s)://...). voxpipe's Python package sets them
// when imported (over obstore, configured by the environment as the clouds' own tools are);
// without them a URL is Error(unsupported) naming the package to install.
struct UrlHandlers {
  // Opens the object at `url` for reads by ranges (its first request made: size and version).
  std::function<std::shared_ptr<const RemoteInput>(const std::string& url)> open;
  // The local path of the seek-index cache entry of version `version` of the object at `url`.
  std::function<std::string(const std::string& url, const std::string& version)> index_cache_path;
  // Writes the local file `path` as the object at `url`.
  std::function<void(const std::string& path, const std::string& url)> put;
  // The objects `url` names, fetched whole, with their URLs: one object, or every object under
  // a prefix (a URL ending in "/", in key order, as a folder's files), each read pinned to the
  // version listed.
  std::function<std::vector<std::pair<std::string, FetchedBytes>>(const std::string& url)>
      fetch_all;
  // Writes the image at `input` (a NIfTI file or object, a NIfTI-Zarr store, a DICOM series
  // folder or prefix) as the NIfTI-Zarr store `output`, with the CLI's options as name/value
  // pairs ("chunks", "shards", "levels", "codec", "level", "zarr_format", "dtype", "threads").
  // Zarr stores are read and written through the `zarr` package, so through these handlers too:
  // open(path) of a store's path opens it as a .nii whose data are the store's voxels.
  std::function<void(const std::string& input, const std::string& output,
                     const std::vector<std::pair<std::string, std::string>>& options)>
      write_zarr;
  // The description of the NIfTI-Zarr store at `path` for `voxpipe info`: on its first line how
  // the chunks of its finest level are compressed, as its metadata name it ("blosc zstd 5",
  // "gzip 1", "zstd 3 (sharded)"; "none" when they are stored as they are), then key=value
  // lines of its layout: zarr_format, levels, chunks and shards (x,y,z,t,c order; no shards line
  // for an unsharded array). open() reads a store as an uncompressed .nii: `voxpipe info` asks
  // this instead.
  std::function<std::string(const std::string& path)> zarr_compression;
  // Writes to object storage (the Python package: voxpipe/_sources/upload.py). Each may be
  // empty (then a URL output is Error(unsupported)).
  // Whether something exists at `url`: an object, or for a Zarr store's URL its root metadata.
  std::function<bool(const std::string& url)> exists;
  // Writes the local file `path` as the object at `url`, visible only once complete (a large one
  // as a parallel multipart upload, aborted on failure). With !overwrite the create is
  // conditional: returns false, writing nothing, when the object exists (another writer made it
  // after the command's check); true when written.
  std::function<bool(const std::string& path, const std::string& url, bool overwrite)> upload;
  // Opens an upload of the object at `url` that a writer streams into (write_nifti_stream): its
  // bytes go up as they come, in parts, and the object appears at commit, whole; an abandoned
  // or failed upload is aborted. `max_size`: at most how many bytes will come (0: unknown).
  // With !overwrite the create is conditional: its commit fails when the object exists.
  std::function<OutputStream(const std::string& url, bool overwrite, std::uint64_t max_size)>
      open_upload;
  // Removes what writers that died left under the prefix `url` (temporary objects, incomplete
  // stores, unfinished multipart uploads) older than `older_than_seconds`, or with `dry_run`
  // only lists them: one line per thing ("removed URL (what)" / "would remove URL (what)").
  std::function<std::vector<std::string>(const std::string& url, double older_than_seconds,
                                         bool dry_run)>
      clean;
};
// Process-wide; call before the threads that open URLs start (the Python package does so at
// import).
void set_url_handlers(UrlHandlers handlers);
const UrlHandlers& url_handlers() noexcept;

// Whether `path` names an object by URL: SCHEME:// with one of s3, s3a, gs, az, abfs, abfss,
// adl, azure, http, https (file:// is a path, not an object).
bool is_object_url(const std::string& path) noexcept;

// Whether `path` (a path or URL) names a Zarr store by its name: it ends in ".zarr", with or
// without a trailing "/" (NIfTI-Zarr's ".nii.zarr", ".ome.zarr"). Stores are read through the
// handlers, as URLs are.
bool is_zarr_path(const std::string& path) noexcept;

}  // namespace voxpipe
