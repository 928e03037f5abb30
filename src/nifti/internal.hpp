// Internals of the NIfTI module shared between its files; not installed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/convert.hpp"
#include "core/file.hpp"
#include "voxpipe/nifti.hpp"

namespace voxpipe::nifti {

// The header and image file names for a path: for .hdr/.img (optionally .gz) the pair, in the
// case nibabel's types_filenames gives; for .nii both are the path. Throws Error(format) on an
// unknown extension.
struct FilePaths {
  std::string header;
  std::string image;
  bool pair = false;
};
FilePaths file_paths(const std::string& path);

// nibabel's get_data_shape: dim[1..dim[0]], with NIfTI-1's FreeSurfer conventions for long
// vectors. Throws Error(format) for dim[0] outside 0..7 or a negative size.
std::vector<std::int64_t> data_shape(const NiftiHeader& h, const std::string& path);

// Reads the extensions that follow the header (nibabel's Nifti1Extensions.from_fileobj):
// `head` holds the first bytes of the header stream (the 4-byte extension flag included when
// present). Single files read up to vox_offset, pair headers to the end of the .hdr.
std::vector<NiftiExtension> read_extensions(core::ByteSource& source, const NiftiHeader& h,
                                            std::span<const std::uint8_t> head, bool pair,
                                            const std::string& path, const NiftiLimits& limits);

// The bytes written after the header: the 4-byte flag (single files always, pairs only with
// extensions) and each extension padded to a multiple of 16 as nibabel writes them.
std::vector<std::uint8_t> encode_extensions(const std::vector<NiftiExtension>& extensions,
                                            bool big_endian, bool single_file);

// The stored bytes of the image's data: its data_input, else the file at data_path (opened:
// Error(not_found / io); Error(io) when it is not the file the image was opened from,
// open_data_file).
std::shared_ptr<const core::RandomAccessInput> open_data_input(const NiftiImage& image);

// The file at data_path, checked to be the one the image was opened from (its data_identity):
// Error(io) "changed since it was opened" otherwise. No system call beyond the open's.
std::shared_ptr<const core::InputFile> open_data_file(const NiftiImage& image);

// The stream of the image's data (plain or inflated), for reading several selections in
// ascending order through one source (a gzip stream is then inflated once); from `input`, the
// image's open_data_input, when given.
std::unique_ptr<core::ByteSource> open_data_source(const NiftiImage& image,
                                                   const DataSourceOptions& options = {});
std::unique_ptr<core::ByteSource> open_data_source(
    const NiftiImage& image, std::shared_ptr<const core::RandomAccessInput> input,
    const DataSourceOptions& options);

// check_data_size against `file_size`, the size of the data file as read now (compressed size for
// gzip), without opening anything.
void check_data_size(const NiftiImage& image, std::uint64_t file_size);

// The conversion read_nifti_data applies for `spec` (byte swap, cast, scaling), for other
// consumers of the same bytes (the device path, src/cuda/load.cpp) to apply the same one.
core::Conversion make_conversion(const NiftiImage& image, const OutputSpec& spec);
// The same for elements of type `source` stored in the non-native byte order when `swapped`,
// scaled by `scaling`: what NIfTI voxels kept elsewhere (NIfTI-Zarr chunks, src/zarr) convert by.
core::Conversion make_conversion(DType source, bool swapped, const Scaling& scaling,
                                 const OutputSpec& spec);

// The kernel for `conversion`, made by make_conversion for data of type `source` and `spec`.
// Throws Error(invalid_argument) naming `path` and the field "dtype" when conversion_supported
// refuses the pair (the message read_nifti_data gives).
core::ConvertFn conversion_kernel(DType source, const OutputSpec& spec,
                                  const core::Conversion& conversion, const std::string& path);

// The selection read_nifti_data reads for `selection` over an array of `shape`: one AxisRange per
// axis, every index of each axis when `selection` is empty. Throws Error(invalid_argument) naming
// `path` and the field "selection" when the number of axes is not shape's, a count is negative, a
// step is zero or a selected index lies outside its axis.
std::vector<AxisRange> checked_selection(std::span<const AxisRange> selection,
                                         std::span<const std::int64_t> shape,
                                         const std::string& path);

// read_nifti_data through a given source, on options.threads as resolved by the caller (0 is
// taken as 1).
void read_selection(core::ByteSource& source, const NiftiImage& image,
                    std::span<const AxisRange> selection, const OutputSpec& spec,
                    std::span<std::byte> dest, const ReadOptions& options);

}  // namespace voxpipe::nifti
