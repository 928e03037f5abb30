// voxpipe/zarr.hpp: decoding the chunks of a NIfTI-Zarr array into a NIfTI output.
//
// A NIfTI-Zarr store is an OME-Zarr image whose arrays hold NIfTI voxels, unscaled, in the
// header's element type, with axes [t, c, z, y, x] in C order (slowest first). The Zarr metadata
// (array shape, chunk grid, codecs, which chunks exist) are read elsewhere, by the `zarr` package
// in the Python layer; this decodes the chunks a selection touches, in parallel, straight into
// the caller's output, converting byte order and element type and applying the NIfTI scaling in
// the same pass, exactly as NiftiReader::read does for a .nii file.
//
// Conventions: every axis index, shape, stride and selection here is in Zarr axis order (slowest
// axis first, as the array's "shape" lists them). Strides are in elements, sizes in bytes.
// Thread-safety: read_zarr_chunks is re-entrant; the caller's buffers must not change during it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "voxpipe/dtype.hpp"
#include "voxpipe/nifti.hpp"

namespace voxpipe {

// How each chunk's bytes are compressed: the one bytes-to-bytes codec of a Zarr array (v2
// "compressor", v3 the codec after "bytes"), with the encodings numcodecs and zarr write:
//  - zstd: one or more zstd frames, with or without the content size in their headers (numcodecs
//    Zstd writes it, other Zarr v3 writers may not); skippable frames are allowed;
//  - gzip: one or more gzip members (RFC 1952), zero bytes allowed after the last (as Python's
//    gzip module reads them);
//  - zlib: one zlib stream (RFC 1950);
//  - blosc: one Blosc 1 buffer (c-blosc's format 2: numcodecs Blosc; any shuffle, any of its
//    internal compressors that this build of c-blosc has: blosclz, lz4, lz4hc, snappy, zlib, zstd).
enum class ZarrCompressor { none, zstd, gzip, zlib, blosc };

// One Zarr array, as its metadata describe it.
struct ZarrArraySpec {
  std::vector<std::int64_t> shape;        // array shape, >= 0 each (zarr axis order)
  std::vector<std::int64_t> chunk_shape;  // the regular chunk grid, >= 1 each, same order
  DType dtype = DType::u8;                // stored element type
  bool big_endian = false;                // stored byte order (ignored for 1-byte types)
  bool chunk_f_order = false;             // Zarr v2 "order": "F": a chunk's elements in F order
  ZarrCompressor compressor = ZarrCompressor::none;
  std::vector<std::byte> fill_value;      // one element, dtype_size(dtype) bytes, stored order;
                                          // empty: none (no touched chunk may be missing)
  std::string name;                       // the array's path or URL, for errors
};

// One stored chunk. Holds no bytes of its own: `bytes` must stay valid during the call.
struct ZarrChunk {
  std::vector<std::int64_t> grid_index;  // chunk coordinates (zarr axis order)
  std::string key;                       // its store key, for errors
  std::string path;                      // a local file holding the encoded chunk, or empty
  std::span<const std::byte> bytes;      // the encoded chunk when path is empty
  bool missing = false;                  // absent from the store: every element is the fill value
};

// Decodes the chunks that `selection` touches into `dest`.
//
// `selection`: one AxisRange per Zarr axis (source indices start + i*step, i in [0, count); step
// may be negative; empty: the whole array), as in read_nifti_data. Element (i0, i1, ...) of the
// selection (indices into the selection, per Zarr axis) is written to element offset
// sum(i_k * dest_strides[k]) of `dest`, an array of output.type elements: `dest_strides` has one
// stride per Zarr axis, in elements, >= 0 (for the F-ordered NIfTI output of a NIfTI-Zarr array,
// its strides permuted to [t, c, z, y, x]). Distinct selected elements must land on distinct
// elements (checked: the strides, sorted, must each step over everything the smaller ones reach),
// and the furthest one inside `dest`; elements of `dest` the selection does not reach are left
// unchanged.
//
// `chunks` must hold every chunk the selection touches; others are ignored, whatever their grid
// index. Edge chunks are stored at the full chunk shape: only their part inside the array is
// used. A missing chunk gives the fill value. Elements are converted and scaled as
// NiftiReader::read converts a file's voxels for the same OutputSpec, with `slope` and `inter` as
// the image's Scaling (1 and 0: unscaled); `output.file_byte_order` keeps the stored byte order.
//
// Runs on options.threads threads (0: resolve_threads, voxpipe/threads.hpp), the caller's
// included, each taking one chunk at a time. Each chunk is read (a local file with one pread),
// decoded once into the worker's scratch buffer, and converted from there row by row; a chunk
// whose whole region is contiguous in `dest` and needs no conversion is decoded straight into
// `dest`. Memory: per thread, one decoded chunk (prod(chunk_shape) * dtype_size bytes) and one
// encoded chunk file; nothing is allocated beyond what the chunk shape justifies and what the
// encoded bytes can decode to (a size written inside the compressed data is checked against both
// before anything is allocated for it).
//
// Errors (voxpipe::Error, path = spec.name unless said otherwise; `dest` is then unspecified):
//  - invalid_argument: a bad spec (shape and chunk_shape of different lengths or no axes, a
//    negative size, a chunk size < 1, a fill value of the wrong size, or none while a touched
//    chunk is missing), a bad selection (field
//    "selection"), dest_strides of the wrong length, overlapping, or reaching past `dest` (field
//    "destination"), a conversion NiftiReader refuses (field "dtype"), a touched chunk absent
//    from `chunks` (field "chunk", naming the grid index of the first one in the order the
//    selection visits them, the last axis fastest; nothing is decoded then), two chunks with the
//    same grid index, or a chunk with both a path and bytes;
//  - limit: the array or one chunk has more bytes than a 64-bit size holds;
//  - not_found / io: a chunk file cannot be opened or read (path = the file);
//  - field "chunk", the detail naming the chunk's key, the compressor and what was expected
//    against what was found: truncated when the encoded bytes end early (a short uncompressed
//    chunk, a zstd frame, gzip member or zlib stream cut off, a Blosc buffer shorter than its
//    header says); corrupt when the compressed data are invalid (a bad frame, block or header, a
//    checksum or length mismatch, bytes after the end of the compressed data); format when a
//    chunk decodes, or says it decodes, to a size other than prod(chunk_shape) * dtype_size (an
//    uncompressed chunk longer than that too).
void read_zarr_chunks(const ZarrArraySpec& spec, std::span<const ZarrChunk> chunks,
                      std::span<const AxisRange> selection, const OutputSpec& output,
                      double slope, double inter, std::span<std::byte> dest,
                      std::span<const std::int64_t> dest_strides, const ReadOptions& options = {});

}  // namespace voxpipe
