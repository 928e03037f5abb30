// Loading into device memory: a NIfTI image's data (plain or gzip-compressed) or host bytes,
// through the staging pipeline (staging.hpp) and the device sink (device_sink.hpp), converted on
// the device exactly as the CPU path converts them (nifti::make_conversion -> nifti_element_op).
// Everything here is synchronous: when a function returns, the output is complete on the device
// (the sink's finish() has synchronised its streams). Needs cuda_status().available, or a driver
// passed through `ctx`. Internal.
#pragma once

#include <cstdint>
#include <span>

#include "cuda/cufile.hpp"
#include "cuda/device_sink.hpp"
#include "cuda/staging.hpp"
#include "voxpipe/dicom_series.hpp"
#include "voxpipe/nifti.hpp"

namespace voxpipe::cuda {

// Reads all of `image`'s data, converted as read_nifti_data would convert it for `spec` (F
// order, the shape of the image), into `dst`, device memory of exactly voxels * size of
// spec.type bytes in `ctx`. Uncompressed data are read through cuFile straight into device
// staging buffers where options.cufile_policy (default $VOXPIPE_CUFILE, automatic) chooses it
// (choose_cufile in cufile.hpp: by default only with GPUDirect Storage, 16 MiB or more, not in
// the page cache; a file that cannot be opened for direct I/O falls back), else with concurrent
// preads at image.data_offset into the pinned ring; gzip data through the CPU path's data source, whose parallel inflate
// (read_range on options.decode_threads threads: sized members, a seek index, or speculative decoding
// of a plain gzip) writes its pieces into the pinned staging buffers while earlier chunks go to
// the device (stage(PushSource)). Errors: as
// read_nifti_data (Error(invalid_argument) for a conversion the CPU path refuses or a wrong
// dst_bytes, Error(truncated) for a short file, gzip errors), and the driver's errors.
// `source` chooses the seek index of a plain gzip (as for NiftiReader).
void load_nifti_to_device(const NiftiImage& image, const OutputSpec& spec,
                          const PrimaryContext& ctx, drv::CUdeviceptr dst,
                          std::uint64_t dst_bytes, const StagingOptions& options = {},
                          const DataSourceOptions& source = {});

// Streams all of `image`'s stored data bytes through `sink` (which converts them): concurrent
// preads for uncompressed data; for gzip, the push source below when the data source prefers
// read_range (GzipSource always does), else chunks read from it in order. load_nifti_to_device
// with the device sink; the tests and the CPU-only benchmark with the host sink. Errors: those
// of stage() and of the data source.
void stage_nifti_data(const NiftiImage& image, StagingSink& sink, const StagingOptions& options = {},
                      const DataSourceOptions& source = {});

// The payload of `image` (data bytes of a .nii.gz) pushed by `data`'s read_range on
// options.decode_threads threads: the parallel inflate delivers its pieces into the staging ring as it
// decodes them. For sized members and seek indexes the payload is read in consecutive ranges of
// about the ring's bytes (M x chunk_bytes), cut where a member or seek span starts, so that
// the pipeline's overflow stays within the ring's bytes plus a span (see load.cpp). `data`
// (from nifti::open_data_source(image)) must outlive the source.
PushSource nifti_push_source(const NiftiImage& image, core::ByteSource& data,
                             const StagingOptions& options);

// cuFile reads of bytes [payload_offset, payload_offset + payload_bytes) of `file` into the
// device-resident buffers of a DeviceConvertSink set up with use_device_buffers(payload_offset
// % kDirectAlign): each chunk's whole aligned blocks are read around it (for chunks of a
// multiple of kDirectAlign bytes, aligned file offsets, sizes and device addresses). `file`
// must outlive the source. A file that ends early is Error(truncated) naming it and the offset.
ChunkSource cufile_chunk_source(const CufileFile& file, std::uint64_t payload_offset,
                                std::uint64_t payload_bytes);

// read_dicom_series's bytes for `out_type` (checked as it checks them), pushed image by image
// from `threads` decoding threads as they finish them (dicom::decode_dicom_series). `series`
// must outlive the source.
PushSource dicom_push_source(const DicomSeries& series, DType out_type, unsigned threads);

// Reads a DICOM series into `dst` (device memory of exactly the bytes read_dicom_series needs
// for `out_type`), with read_dicom_series's values and layout. When every image is native pixel
// data, one value per element (dicom_element_op accepts it) and not a mosaic tile, the files'
// pixel bytes are read with concurrent preads (consecutive images with the same conversion in
// one pipeline, across file boundaries) and converted on the device (BitsStored correction,
// each image's Rescale Slope/Intercept for f32/f64). Otherwise the series is decoded on the CPU
// as read_dicom_series decodes it (compressed frames in parallel on `threads`), each image's
// plane pushed into the pinned ring as it is finished (a push source), so the copies overlap
// the decoding and the host holds the ring and a frame per thread, not the volume.
// Errors: read_dicom_series's, and the driver's.
void load_dicom_series_to_device(const DicomSeries& series, DType out_type,
                                 const PrimaryContext& ctx, drv::CUdeviceptr dst,
                                 std::uint64_t dst_bytes, unsigned threads = 0,
                                 const StagingOptions& options = {});

// Copies host bytes to `dst` (device memory of at least src.size() bytes in `ctx`) through
// pinned staging buffers.
void copy_to_device(std::span<const std::byte> src, const PrimaryContext& ctx,
                    drv::CUdeviceptr dst, const StagingOptions& options = {});

// Copies device memory back to the host (cuMemcpyDtoH, synchronous), in `ctx`.
void copy_to_host(const PrimaryContext& ctx, drv::CUdeviceptr src, std::span<std::byte> dst);

}  // namespace voxpipe::cuda
