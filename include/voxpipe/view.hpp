// voxpipe/view.hpp: a quick look at a volume, as an 8-bit grayscale PNG.
//
// What is drawn (docs/view.md has pictures of the conventions):
//  - The volume is first put in the closest canonical orientation, as nibabel's
//    as_closest_canonical does: each voxel axis is matched to the world (RAS+) axis it is closest
//    to (io_orientation: the polar factor of the affine's normalised 3x3 part, then greedily the
//    largest entry) and flipped where it runs against it. Nothing is interpolated: an oblique
//    volume is shown in that closest orientation, not resampled into world space.
//  - Orthogonal layout: three slices through voxel n // 2 of each canonical axis, side by side:
//    sagittal (posterior left, anterior right, superior up), coronal and axial (both in
//    neurological convention, the subject's left on the left as nilearn's plot_anat shows it;
//    coronal superior up, axial anterior up). Mosaic layout: up to 36 axial slices, evenly
//    spaced from inferior (top left) to superior (bottom right), in a near-square grid.
//  - Pixels are square in millimetres: a panel of n voxels of size z mm along an axis is
//    round(n * z / p) pixels, with one pixel size p for the whole picture; pixel u shows voxel
//    floor((u + 0.5) * n / pixels) (nearest neighbour). p is the smallest voxel size, divided by
//    the smallest integer that makes the largest panel at least 256 pixels (mosaic: 128), or
//    larger when a panel would exceed 1024 pixels (mosaic: 2048 / columns).
//  - Intensities: the window [lo, hi] is the 1st and 99th percentile of the volume's finite
//    values (numpy.percentile's default, linear method); a value v becomes
//    floor((v - lo) * (255 / (hi - lo)) + 0.5), clipped to 0..255. NaN is 0; when hi == lo,
//    values above lo are 255 and the others 0; a volume without finite values is black.
//  - Orientation letters (R/L, A/P, S/I), white, in the black margin beside each panel's edges
//    (mosaic: around the whole grid).
//
// Thread-safety: every function is re-entrant. Errors: voxpipe::Error, as each function says.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace voxpipe {

// A 3-D volume of float32 values, Fortran order (x fastest, as NIfTI stores them), borrowed
// for the call. affine: voxel (i, j, k) -> RAS+ millimetres, row-major 4x4 (nibabel's
// img.affine).
struct ViewVolume {
  std::span<const float> data;
  std::array<std::int64_t, 3> shape{};
  std::array<double, 16> affine{};
};

enum class ViewLayout { orthogonal, mosaic };

struct ViewOptions {
  ViewLayout layout = ViewLayout::orthogonal;
  // The intensity window, in percent of the finite values: 0 <= low < high <= 100.
  double low_percentile = 1.0;
  double high_percentile = 99.0;
};

// An 8-bit grayscale picture, row-major, top row first.
struct GrayImage {
  std::uint32_t width = 0, height = 0;
  std::vector<std::uint8_t> pixels;
};

// Renders `volume` as described above. `name` stands for the volume in error messages.
// Error(invalid_argument): data.size() is not the product of shape, an axis has no voxel, the
// percentiles are out of order or range, or the affine is not finite or its 3x3 part is
// singular (no orientation can be read from it).
GrayImage render_view(const ViewVolume& volume, const ViewOptions& options = {},
                      const std::string& name = "");

// The PNG file of `image` (8-bit grayscale, no metadata chunks: the same picture always gives
// the same bytes). Error(invalid_argument) for an empty image or pixels of the wrong size.
std::vector<std::uint8_t> encode_png(const GrayImage& image);

// Writes encode_png(image) to `path`, replacing the file there, atomically: under a temporary
// name beside it, renamed once complete (as the NIfTI writer does). Error(not_found) when the
// folder does not exist, Error(io) when it cannot be written.
void write_png(const std::string& path, const GrayImage& image);

}  // namespace voxpipe
