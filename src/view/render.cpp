// render_view (voxpipe/view.hpp): the intensity window, the panel layout and the orientation
// letters. Conventions are stated in the public header and in docs/view.md.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/checked.hpp"
#include "view/orientation.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/view.hpp"

namespace voxpipe {

namespace {

// ---- orientation letters

// 5x7 bitmaps of the six letters the panels need, one row per byte, bit 4 the leftmost pixel.
// Six glyphs do not justify a font library (and its licence in the wheel).
struct Glyph {
  char letter;
  std::uint8_t rows[7];
};
constexpr Glyph kGlyphs[] = {
    {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}},
    {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}},
    {'A', {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
    {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}},
    {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
};
constexpr int kGlyphScale = 2;                      // each bitmap pixel is 2x2 pixels
constexpr int kGlyphW = 5 * kGlyphScale, kGlyphH = 7 * kGlyphScale;
constexpr int kMargin = kGlyphH + 6;                // black border that holds the letters
constexpr int kTileGap = 2;                         // between mosaic tiles
constexpr std::uint8_t kInk = 255;

// Panel sizes (docs/view.md): the largest panel spans [min, max] pixels.
constexpr double kOrthoMinPixels = 256, kOrthoMaxPixels = 1024;
constexpr double kMosaicMinPixels = 128, kMosaicMaxWidth = 2048;
constexpr std::int64_t kMosaicMaxSlices = 36;

class Canvas {
 public:
  Canvas(std::int64_t w, std::int64_t h) : w_(w), h_(h), px_(static_cast<std::size_t>(w * h), 0) {}
  void set(std::int64_t x, std::int64_t y, std::uint8_t v) {
    if (x >= 0 && y >= 0 && x < w_ && y < h_) px_[static_cast<std::size_t>(y * w_ + x)] = v;
  }
  // The letter with its top-left corner at (x, y); clipped at the picture's edges.
  void letter(char c, std::int64_t x, std::int64_t y) {
    for (const Glyph& g : kGlyphs) {
      if (g.letter != c) continue;
      for (int r = 0; r < 7; ++r)
        for (int col = 0; col < 5; ++col)
          if (g.rows[r] & (0x10 >> col))
            for (int dy = 0; dy < kGlyphScale; ++dy)
              for (int dx = 0; dx < kGlyphScale; ++dx)
                set(x + col * kGlyphScale + dx, y + r * kGlyphScale + dy, kInk);
    }
  }
  GrayImage take() {
    return GrayImage{static_cast<std::uint32_t>(w_), static_cast<std::uint32_t>(h_),
                     std::move(px_)};
  }

 private:
  std::int64_t w_, h_;
  std::vector<std::uint8_t> px_;
};

// ---- intensity window

// numpy.percentile(v, q) with its default (linear) method, in float64 as NumPy computes it for
// float32 data; `v` (non-empty) is reordered. nth_element: O(n), no full sort.
double percentile(std::vector<float>& v, double q) {
  const double n1 = static_cast<double>(v.size() - 1);
  const double virtual_index = n1 * (q / 100);
  const double prev = std::floor(virtual_index);
  const auto i = static_cast<std::size_t>(prev);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  const double a = v[i];
  if (i + 1 >= v.size()) return a;
  const double b = *std::min_element(v.begin() + static_cast<std::ptrdiff_t>(i) + 1, v.end());
  // numpy's _lerp: from the nearer end, so that t = 0 and t = 1 give a and b exactly.
  const double t = virtual_index - prev;
  const double diff = b - a;
  return t >= 0.5 ? b - diff * (1 - t) : a + diff * t;
}

struct Window {
  double lo = 0, hi = 0;
  bool any = false;  // the volume has finite values
  std::uint8_t map(float value) const {
    if (std::isnan(value) || !any) return 0;
    const double v = value;
    if (hi == lo) return v > lo ? 255 : 0;
    const double t = (v - lo) * (255 / (hi - lo)) + 0.5;
    if (!(t > 0)) return 0;
    if (t >= 255) return 255;
    return static_cast<std::uint8_t>(t);  // floor: t > 0
  }
};

Window window_of(std::span<const float> data, const ViewOptions& o) {
  std::vector<float> finite;
  finite.reserve(data.size());
  for (float v : data)
    if (std::isfinite(v)) finite.push_back(v);
  Window w;
  if (finite.empty()) return w;
  w.any = true;
  w.lo = percentile(finite, o.low_percentile);
  w.hi = percentile(finite, o.high_percentile);
  return w;
}

// ---- panels

// A slice of the canonical grid drawn as a panel: `h_axis` runs left to right in increasing
// index, `v_axis` bottom to top; `fixed` is the slice (canonical axis and index).
struct Panel {
  int h_axis, v_axis, fixed_axis;
  std::int64_t fixed_index;
  char left, right, top, bottom;
  std::int64_t width = 0, height = 0;  // pixels
};

std::int64_t pixels(std::int64_t n, double zoom, double pixel_mm) {
  return std::max<std::int64_t>(1, std::llround(static_cast<double>(n) * zoom / pixel_mm));
}

// The pixel size (mm): the smallest voxel size, divided by the smallest integer that makes the
// largest extent at least `min_px` pixels, or larger when it would exceed `max_px`.
double pixel_size(double largest_mm, double smallest_zoom, double min_px, double max_px) {
  const double span = largest_mm / smallest_zoom;
  if (span > max_px) return largest_mm / max_px;
  if (span < min_px) return smallest_zoom / std::ceil(min_px / span);
  return smallest_zoom;
}

void size_panel(Panel& p, const view::CanonicalGrid& g, double pixel_mm) {
  p.width = pixels(g.shape[p.h_axis], g.zooms[p.h_axis], pixel_mm);
  p.height = pixels(g.shape[p.v_axis], g.zooms[p.v_axis], pixel_mm);
}

void draw_panel(Canvas& c, const Panel& p, std::int64_t x0, std::int64_t y0,
                const view::CanonicalGrid& g, std::span<const float> data, const Window& w) {
  const std::int64_t nh = g.shape[p.h_axis], nv = g.shape[p.v_axis];
  std::vector<std::int64_t> h_index(static_cast<std::size_t>(p.width));
  for (std::int64_t u = 0; u < p.width; ++u)
    h_index[static_cast<std::size_t>(u)] =
        std::min(nh - 1, static_cast<std::int64_t>((static_cast<double>(u) + 0.5) * nh / p.width));
  std::array<std::int64_t, 3> idx{};
  idx[p.fixed_axis] = p.fixed_index;
  for (std::int64_t y = 0; y < p.height; ++y) {
    const auto from_bottom =
        std::min(nv - 1, static_cast<std::int64_t>((static_cast<double>(y) + 0.5) * nv / p.height));
    idx[p.v_axis] = nv - 1 - from_bottom;  // top row: the largest index (superior, anterior)
    for (std::int64_t u = 0; u < p.width; ++u) {
      idx[p.h_axis] = h_index[static_cast<std::size_t>(u)];
      const std::int64_t at = g.offset(idx[0], idx[1], idx[2]);
      c.set(x0 + u, y0 + y, w.map(data[static_cast<std::size_t>(at)]));
    }
  }
}

// The four letters around a rectangle, centred on its sides, in the margin outside it.
void label_box(Canvas& c, std::int64_t x0, std::int64_t y0, std::int64_t w, std::int64_t h,
               char left, char right, char top, char bottom) {
  const std::int64_t pad = (kMargin - kGlyphW) / 2;
  const std::int64_t mid_y = y0 + (h - kGlyphH) / 2, mid_x = x0 + (w - kGlyphW) / 2;
  c.letter(left, x0 - kMargin + pad, mid_y);
  c.letter(right, x0 + w + pad, mid_y);
  c.letter(top, mid_x, y0 - kMargin + (kMargin - kGlyphH) / 2);
  c.letter(bottom, mid_x, y0 + h + (kMargin - kGlyphH) / 2);
}

GrayImage render_orthogonal(const view::CanonicalGrid& g, std::span<const float> data,
                            const Window& w) {
  // Canonical axes: 0 R, 1 A, 2 S. Neurological display (left on the left), as nilearn.
  Panel panels[3] = {
      {1, 2, 0, g.shape[0] / 2, 'P', 'A', 'S', 'I'},  // sagittal
      {0, 2, 1, g.shape[1] / 2, 'L', 'R', 'S', 'I'},  // coronal
      {0, 1, 2, g.shape[2] / 2, 'L', 'R', 'A', 'P'},  // axial
  };
  double largest = 0;
  for (int a = 0; a < 3; ++a)
    largest = std::max(largest, static_cast<double>(g.shape[a]) * g.zooms[a]);
  const double pixel_mm = pixel_size(largest, std::min({g.zooms[0], g.zooms[1], g.zooms[2]}),
                                     kOrthoMinPixels, kOrthoMaxPixels);
  std::int64_t width = 0, max_h = 0;
  for (Panel& p : panels) {
    size_panel(p, g, pixel_mm);
    width += p.width + 2 * kMargin;
    max_h = std::max(max_h, p.height);
  }
  Canvas c(width, max_h + 2 * kMargin);
  std::int64_t x = kMargin;
  for (const Panel& p : panels) {
    const std::int64_t y = kMargin + (max_h - p.height) / 2;
    draw_panel(c, p, x, y, g, data, w);
    label_box(c, x, y, p.width, p.height, p.left, p.right, p.top, p.bottom);
    x += p.width + 2 * kMargin;
  }
  return c.take();
}

GrayImage render_mosaic(const view::CanonicalGrid& g, std::span<const float> data,
                        const Window& w) {
  const std::int64_t nz = g.shape[2];
  const std::int64_t m = std::min(nz, kMosaicMaxSlices);
  std::int64_t cols = 1;
  while (cols * cols < m) ++cols;
  const std::int64_t rows = (m + cols - 1) / cols;
  const double largest = std::max(static_cast<double>(g.shape[0]) * g.zooms[0],
                                  static_cast<double>(g.shape[1]) * g.zooms[1]);
  const double max_px = kMosaicMaxWidth / static_cast<double>(cols);
  const double pixel_mm = pixel_size(largest, std::min(g.zooms[0], g.zooms[1]),
                                     std::min(kMosaicMinPixels, max_px), max_px);
  Panel tile{0, 1, 2, 0, 'L', 'R', 'A', 'P'};
  size_panel(tile, g, pixel_mm);
  const std::int64_t grid_w = cols * tile.width + (cols - 1) * kTileGap;
  const std::int64_t grid_h = rows * tile.height + (rows - 1) * kTileGap;
  Canvas c(grid_w + 2 * kMargin, grid_h + 2 * kMargin);
  for (std::int64_t j = 0; j < m; ++j) {
    // Evenly spaced slices, inferior first; every slice when there are few.
    tile.fixed_index =
        std::min(nz - 1, static_cast<std::int64_t>((static_cast<double>(j) + 0.5) * nz / m));
    draw_panel(c, tile, kMargin + (j % cols) * (tile.width + kTileGap),
               kMargin + (j / cols) * (tile.height + kTileGap), g, data, w);
  }
  label_box(c, kMargin, kMargin, grid_w, grid_h, 'L', 'R', 'A', 'P');
  return c.take();
}

}  // namespace

GrayImage render_view(const ViewVolume& volume, const ViewOptions& options,
                      const std::string& name) {
  std::uint64_t count = 1;
  for (std::int64_t n : volume.shape) {
    if (n <= 0)
      throw Error(ErrorCode::invalid_argument, name, "shape",
                  "expected at least one voxel along each axis, but found " + std::to_string(n));
    const auto c = core::checked_mul(count, static_cast<std::uint64_t>(n));
    if (!c) throw Error(ErrorCode::limit, name, "shape", "the voxel count overflows 64 bits");
    count = *c;
  }
  if (volume.data.size() != count)
    throw Error(ErrorCode::invalid_argument, name, "data",
                "expected " + std::to_string(count) + " values for the shape, but received " +
                    std::to_string(volume.data.size()));
  const double lo = options.low_percentile, hi = options.high_percentile;
  if (!(lo >= 0 && lo < hi && hi <= 100))
    throw Error(ErrorCode::invalid_argument, name, "percentiles",
                "expected 0 <= low < high <= 100, but received " + std::to_string(lo) + " and " +
                    std::to_string(hi));
  const view::CanonicalGrid g = view::canonical_grid(volume.shape, volume.affine, name);
  const Window w = window_of(volume.data, options);
  return options.layout == ViewLayout::mosaic ? render_mosaic(g, volume.data, w)
                                              : render_orthogonal(g, volume.data, w);
}

}  // namespace voxpipe
