// voxpipe/resample_series.hpp: resampling a 3-D or 4-D NIfTI series onto a reference grid,
// volume by volume, in memory bounded by the thread count and a memory limit.
//
// Convention (transform.hpp): a chain maps a reference point (RAS+ mm) to the moving image's
// point, steps[0] first. Volume t of the output is
//   out[i, t] = interpolate(moving[..., t], inverse(moving.affine) @ chain_t(reference.affine @ i))
// with the interpolation of resample.hpp (scipy.ndimage's values, float64 computation).
//  - A chain of affines only collapses to one voxel-to-voxel matrix
//    V = inverse(moving.affine) @ A[n-1] @ ... @ A[0] @ reference.affine (series_voxel_matrix),
//    and volume t equals scipy.ndimage.affine_transform(moving[..., t], V, ...) bit for bit.
//  - A displacement field is sampled as nitransforms' DenseFieldTransform.map samples it: when
//    every point it receives lies within 1e-3 voxel (Euclidean norm) of a field grid point, the
//    field's own value there; otherwise cubic B-spline (prefiltered, mode constant) interpolation
//    of the deformation x + d(x), and a point outside the field grid is not moved.
//  - Field steps must be shared by every volume: with one chain per volume, each field step must
//    sit in the part that all chains have in common at their start (same matrices, same field
//    object), e.g. [field, A_t] or [A_ref, field, A_t]. That part is applied once for the whole
//    reference grid (3 float64 per reference voxel, the only array the size of the grid), the
//    per-volume affines after it point by point.
//
// The moving data: a NiftiImage (volumes read from its file) or a SeriesArray (the caller's
// array in memory, interpolated in place). Both take the same path through the executor.
//
// Memory. Volumes are read lazily, one at a time, with nibabel's scaling (get_fdata's values);
// each volume in flight holds
//   input:        voxels(moving volume) x (8 when scaled; else the on-disk element size);
//                 0 for a SeriesArray (volume t is read in place)
//   coefficients: voxels(moving volume, each axis + 24 for nearest/grid-constant) x 8
//                 when order > 1 and prefilter (else 0)
//   output:       voxels(reference grid) x size(output dtype), file output only (in memory the
//                 values go straight into `out`)
// plus, once, 24 bytes per reference voxel when a chain holds a displacement field, plus the
// fields themselves (owned by the caller). Volumes in flight = min(threads, volumes, what
// memory_limit allows); series_memory_estimate gives the figures. Peak memory does not depend on
// the number of volumes.
//
// Threads: `threads` threads of the process's pool in all (0: the default, resolve_threads in
// voxpipe/threads.hpp, resolved once per call), split between volumes in flight and the
// interpolation of each. Functions are re-entrant; calls on different outputs may run
// concurrently.
// Errors: voxpipe::Error, thrown before any output is written where the arguments decide it
// (invalid_argument: a bad chain count, out shape or dtype, a field step after per-volume steps,
// a SeriesArray without data or with strides that do not match its shape;
// unsupported: complex or RGB moving data, more than 4 dimensions; limit: memory_limit below
// one volume in flight); the errors of reading the moving image and writing the output file
// otherwise. After a read error `out` is partly written; the output file never appears partly
// written.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "voxpipe/dtype.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/resample.hpp"
#include "voxpipe/transform.hpp"

namespace voxpipe {

struct SeriesResampleOptions {
  // order, mode, cval, prefilter as resample.hpp. interp.threads and interp.pad_value are not
  // used: the executor splits `threads` itself, and grid-constant pads with cval, as scipy does
  // on get_fdata's float64 arrays.
  InterpOptions interp;
  // Element type of the output (any integer type, float32, float64). Integer outputs are
  // rounded and clipped as resample.hpp says.
  DType output_dtype = DType::f32;
  // Bytes the executor may hold for volumes in flight (the formula above); 0: automatic (as
  // many volumes as threads). Error(limit) when it cannot hold one volume.
  std::uint64_t memory_limit = 0;
  unsigned threads = 0;  // 0: the default (resolve_threads)
  // Called after each volume is complete (written into `out`, or handed to the file writer),
  // with done increasing from 1 to total, one call at a time, from any of the executor's threads
  // (resample_series_to_file: the caller's). It must not call back into the executor. An
  // exception it throws stops the run and is rethrown.
  std::function<void(std::int64_t done, std::int64_t total)> progress;

  // resample_series_to_file only.
  // The reference image's header, when it came from a file: its fields are kept as nibabel
  // keeps them in Nifti1Image(data, reference.affine, header) (sform/qform and their codes when
  // its best affine is reference.affine; else sform = the affine with code 2 and qform code 0,
  // nibabel's rule). Without it, the header nibabel gives Nifti1Image(data, affine): sform =
  // the affine with code 2, qform code 0, pixdim[1:4] the affine's column norms.
  std::optional<NiftiHeader> reference_header;
  WriteOptions write;  // gzip level and layout for .nii.gz; write.threads 0: `threads`
};

// Moving data the caller holds in memory: a 3-D or 4-D strided view (resample.hpp's ArrayRef:
// element strides, any layout, any integer type, float32 or float64) and its voxel-to-RAS
// affine. Volume t is the view data[..., t], interpolated straight from the caller's memory
// (nothing is read or copied; the prefilter still makes its float64 coefficients per volume when
// order > 1). Values are taken as they are, converted to float64 (get_fdata's values for an
// unscaled image), and grid-constant pads with cval as on a float64 array. The data must stay
// valid and unchanged for the call and must not overlap the output.
struct SeriesArray {
  ArrayRef data;
  Matrix4 affine = kIdentity4;
  // resample_series_to_file only: the output's pixdim[4] and xyzt_units (its time bits; all of
  // it when there is no reference_header), as a NiftiImage's header gives them.
  double time_step = 1.0;
  int xyzt_units = 0;
};

// Number of volumes of the moving image: shape[3] for 4-D images, 1 for 3-D ones.
// Error(unsupported) for images of more than 4 dimensions (or fewer than 3 non-trivial ones).
std::int64_t series_volume_count(const NiftiImage& moving);
std::int64_t series_volume_count(const SeriesArray& moving);

// V = inverse(moving_affine) @ M_chain @ reference_affine for a chain of affine steps only
// (Error(invalid_argument) for a chain with a field), computed as the executor computes it, so
// that scipy.ndimage.affine_transform(moving_volume, V) is what it must equal bit for bit.
// Error(invalid_argument) when moving_affine is singular.
Matrix4 series_voxel_matrix(const Matrix4& moving_affine, const TransformChain& chain,
                            const Matrix4& reference_affine);

struct SeriesMemoryEstimate {
  std::uint64_t per_volume = 0;  // bytes of one volume in flight (input + coefficients + output)
  std::uint64_t shared = 0;      // bytes held once (the field chain's reference points)
  unsigned volumes_in_flight = 0;
  std::uint64_t total = 0;       // shared + volumes_in_flight * per_volume
};

// What resample_series (to_file: true, resample_series_to_file) would hold with these
// arguments, by the formula above; the process's own memory (interpreter, libraries, the output
// array in memory, the writer's compression buffers) comes on top. Throws what the executor
// throws for its arguments (Error(limit) when memory_limit cannot hold one volume).
SeriesMemoryEstimate series_memory_estimate(const NiftiImage& moving, const Grid& reference,
                                            std::span<const TransformChain> chains,
                                            bool to_file, const SeriesResampleOptions& options);
SeriesMemoryEstimate series_memory_estimate(const SeriesArray& moving, const Grid& reference,
                                            std::span<const TransformChain> chains,
                                            bool to_file, const SeriesResampleOptions& options);

// Resamples every volume of `moving` onto `reference` into `out`: shape (X, Y, Z) of the
// reference grid for a 3-D moving image, (X, Y, Z, T) for a 4-D one (T = its volume count; a
// 4-D image of one volume keeps its 4th axis), dtype options.output_dtype, any strides
// (Fortran order writes each volume contiguously). chains: 1 (for every volume) or one per
// volume. The caller owns `out`, which must stay valid and must not overlap anything read.
void resample_series(const NiftiImage& moving, const Grid& reference,
                     std::span<const TransformChain> chains, const ArrayRef& out,
                     const SeriesResampleOptions& options);
void resample_series(const SeriesArray& moving, const Grid& reference,
                     std::span<const TransformChain> chains, const ArrayRef& out,
                     const SeriesResampleOptions& options);

// As resample_series, streamed into a NIfTI file (.nii, .nii.gz, or a pair, by the extension):
// volumes are handed to the writer in order and the whole output is never held. The header: the
// reference grid's affine (options.reference_header's rules), dim and datatype of the output,
// no scaling (scl_slope NaN, as nibabel writes floats), pixdim[4] and the time bits of
// xyzt_units from the moving image. The file appears only when complete (write_nifti).
void resample_series_to_file(const NiftiImage& moving, const Grid& reference,
                             std::span<const TransformChain> chains, const std::string& out_path,
                             const SeriesResampleOptions& options);
void resample_series_to_file(const SeriesArray& moving, const Grid& reference,
                             std::span<const TransformChain> chains, const std::string& out_path,
                             const SeriesResampleOptions& options);

}  // namespace voxpipe
