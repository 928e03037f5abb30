// read_zarr_chunks (voxpipe/zarr.hpp): the plan, source and convert stages for the chunks of a
// NIfTI-Zarr array. The plan splits each axis of the selection into the runs of indices that fall
// in one chunk; every combination of runs is one task, one chunk. Tasks go to the pool's threads
// one at a time (an atomic counter), each thread keeping its own decoder and buffers across the
// chunks it takes; a chunk is read, decoded once and converted row by row into the destination,
// where a row is the longest run of elements evenly spaced both in the chunk and in the
// destination (a whole chunk when the selection covers it in the same layout).

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/checked.hpp"
#include "core/convert.hpp"
#include "core/file.hpp"
#include "core/thread_pool.hpp"
#include "nifti/internal.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/threads.hpp"
#include "voxpipe/zarr.hpp"
#include "zarr/chunk_codecs.hpp"

namespace voxpipe {

namespace {

using zarr::ChunkLabel;

[[noreturn]] void bad_argument(const ZarrArraySpec& spec, const char* field, const std::string& what) {
  throw Error(ErrorCode::invalid_argument, spec.name, field, what);
}

// A buffer reused across chunks: grows, never shrinks, and is not zero-filled (first touch of
// fresh pages costs more than the decode that fills them, DESIGN.md).
class Buffer {
 public:
  std::span<std::byte> get(std::size_t n) {
    if (n > capacity_) {
      data_.reset();
      data_.reset(new std::byte[n]);
      capacity_ = n;
    }
    return {data_.get(), n};
  }

 private:
  std::unique_ptr<std::byte[]> data_;
  std::size_t capacity_ = 0;
};

// The selected indices of one axis that fall in one chunk: selection indices [first, first+count).
struct AxisPiece {
  std::int64_t chunk;
  std::int64_t first;
  std::int64_t count;
};

// Splits a checked selection of one axis into its runs per chunk, in selection order.
std::vector<AxisPiece> axis_pieces(const AxisRange& a, std::int64_t chunk) {
  std::vector<AxisPiece> out;
  for (std::int64_t i = 0; i < a.count;) {
    const std::int64_t s = a.start + i * a.step;  // inside the axis (checked_selection)
    const std::int64_t g = s / chunk;
    // Indices of this run: those still inside chunk g (computed in 128 bits: g*chunk + chunk may
    // pass the largest int64 when the chunk is longer than the axis).
    const __int128 lo = static_cast<__int128>(g) * chunk, hi = lo + chunk;
    const __int128 n = a.step > 0 ? (hi - s + a.step - 1) / a.step : (s - lo) / -static_cast<__int128>(a.step) + 1;
    const std::int64_t count = static_cast<std::int64_t>(std::min<__int128>(n, a.count - i));
    out.push_back({g, i, count});
    i += count;
  }
  return out;
}

// One axis of a chunk's region: `count` elements, `src` elements apart in the decoded chunk and
// `dst` elements apart in the destination.
struct Step {
  std::int64_t count;
  std::int64_t src;
  std::int64_t dst;
};

// Where a chunk's selected elements are: rows of `row.count` elements starting at `src0`/`dst0`
// (elements), one per combination of the `outer` axes.
struct Region {
  std::int64_t src0 = 0;
  std::int64_t dst0 = 0;
  Step row{1, 1, 1};
  std::vector<Step> outer;
};

class ChunkReader {
 public:
  ChunkReader(const ZarrArraySpec& spec, std::span<const ZarrChunk> chunks,
              std::vector<AxisRange> selection, const OutputSpec& output, double slope, double inter,
              std::span<std::byte> dest, std::span<const std::int64_t> dest_strides)
      : spec_(spec), chunks_(chunks), sel_(std::move(selection)), dest_(dest),
        dest_strides_(dest_strides.begin(), dest_strides.end()), ndim_(spec.shape.size()),
        in_size_(dtype_size(spec.dtype)), out_size_(dtype_size(output.type)) {
    const bool swapped = dtype_component_size(spec.dtype) > 1 &&
                         spec.big_endian != (std::endian::native == std::endian::big);
    conv_ = nifti::make_conversion(spec.dtype, swapped, Scaling{slope, inter}, output);
    convert_ = nifti::conversion_kernel(spec.dtype, output, conv_, spec.name);
    // The fill value, converted once; missing chunks copy it (raw, in the output type) to each
    // element.
    if (!spec.fill_value.empty()) {
      fill_.resize(out_size_);
      convert_(conv_, spec.fill_value.data(), static_cast<std::ptrdiff_t>(in_size_), fill_.data(),
               static_cast<std::ptrdiff_t>(out_size_), 1);
    }
    fill_conv_.source = fill_conv_.dest = output.type;
    fill_conv_.raw = true;
    copy_ = core::select_conversion(fill_conv_);
    direct_ = conv_.raw && !conv_.swap;

    // Elements of one chunk, and their strides in its C or F order.
    chunk_strides_.assign(ndim_, 1);
    std::uint64_t elements = 1;
    for (std::size_t j = 0; j < ndim_; ++j) {
      const std::size_t k = spec.chunk_f_order ? j : ndim_ - 1 - j;
      chunk_strides_[k] = static_cast<std::int64_t>(elements);
      elements *= static_cast<std::uint64_t>(spec.chunk_shape[k]);  // checked by read_zarr_chunks
    }
    chunk_elements_ = elements;
    chunk_bytes_ = static_cast<std::size_t>(elements * in_size_);
    // Axes from the one fastest in the chunk to the slowest: rows run along the first of them.
    for (std::size_t j = 0; j < ndim_; ++j)
      source_order_.push_back(spec.chunk_f_order ? j : ndim_ - 1 - j);

    for (std::size_t k = 0; k < ndim_; ++k) pieces_.push_back(axis_pieces(sel_[k], spec.chunk_shape[k]));
  }

  // Matches every touched chunk to its entry in `chunks`; Error(invalid_argument) for the first
  // one (C order of the grid) that has none.
  void find_chunks() {
    std::vector<std::int64_t> grid(ndim_);
    std::vector<std::uint64_t> grid_stride(ndim_);
    std::uint64_t cells = 1;
    for (std::size_t k = ndim_; k-- > 0;) {
      grid[k] = spec_.shape[k] / spec_.chunk_shape[k] + (spec_.shape[k] % spec_.chunk_shape[k] != 0);
      grid_stride[k] = cells;
      cells *= static_cast<std::uint64_t>(grid[k]);  // <= the array's elements
    }
    std::unordered_map<std::uint64_t, std::size_t> index;
    index.reserve(chunks_.size());
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      const ZarrChunk& chunk = chunks_[c];
      if (chunk.grid_index.size() != ndim_) continue;
      std::uint64_t cell = 0;
      bool inside = true;
      for (std::size_t k = 0; k < ndim_ && inside; ++k) {
        inside = chunk.grid_index[k] >= 0 && chunk.grid_index[k] < grid[k];
        if (inside) cell += static_cast<std::uint64_t>(chunk.grid_index[k]) * grid_stride[k];
      }
      if (!inside) continue;
      if (!chunk.missing && !chunk.path.empty() && !chunk.bytes.empty())
        bad_argument(spec_, "chunk",
                     chunk.key + ": expected a path or bytes, but received both");
      if (!index.emplace(cell, c).second)
        bad_argument(spec_, "chunk",
                     "expected one chunk per grid index, but received two with " +
                         grid_text(chunk.grid_index) + " (" + chunks_[index[cell]].key + ", " +
                         chunk.key + ")");
    }
    tasks_ = 1;
    for (const auto& p : pieces_) tasks_ *= p.size();
    task_chunk_.resize(tasks_);
    std::vector<std::size_t> at(ndim_, 0);
    for (std::size_t t = 0; t < tasks_; ++t) {
      std::uint64_t cell = 0;
      for (std::size_t k = 0; k < ndim_; ++k)
        cell += static_cast<std::uint64_t>(pieces_[k][at[k]].chunk) * grid_stride[k];
      const auto found = index.find(cell);
      if (found == index.end()) {
        std::vector<std::int64_t> g(ndim_);
        for (std::size_t k = 0; k < ndim_; ++k) g[k] = pieces_[k][at[k]].chunk;
        bad_argument(spec_, "chunk",
                     "expected the chunk at grid index " + grid_text(g) +
                         ", which the selection touches, but it is not among the " +
                         std::to_string(chunks_.size()) + " chunks given");
      }
      if (chunks_[found->second].missing && fill_.empty())
        bad_argument(spec_, "fill_value",
                     "expected a fill value for the missing chunk " + chunks_[found->second].key +
                         ", which the selection touches, but the array has none");
      task_chunk_[t] = found->second;
      for (std::size_t k = ndim_; k-- > 0;) {  // C order: the last axis fastest
        if (++at[k] < pieces_[k].size()) break;
        at[k] = 0;
      }
    }
  }

  void run(unsigned threads) {
    const auto slots = static_cast<unsigned>(std::clamp<std::size_t>(tasks_, 1, std::max(threads, 1u)));
    std::atomic<std::size_t> next{0};
    std::atomic<bool> failed{false};
    // One task per thread, each taking chunks until none is left: a thread keeps its decoder and
    // buffers for every chunk it decodes (parallel_for names no thread, so per-thread state
    // lives in the task), and a slow chunk holds up no other.
    core::parallel_for(slots, slots, [&](std::size_t) {
      Worker worker;
      try {
        for (std::size_t t; !failed.load(std::memory_order_relaxed) && (t = next++) < tasks_;)
          read_chunk(worker, t);
      } catch (...) {
        failed = true;
        throw;
      }
    });
  }

 private:
  struct Worker {
    zarr::ChunkDecoder decoder;
    Buffer encoded;  // a chunk file's bytes
    Buffer decoded;  // a decoded chunk
    Region region;
    std::vector<Step> axes;
    std::vector<std::size_t> at;
  };

  static std::string grid_text(std::span<const std::int64_t> g) {
    std::string s = "(";
    for (std::size_t k = 0; k < g.size(); ++k) s += (k ? ", " : "") + std::to_string(g[k]);
    return s + (g.size() == 1 ? ",)" : ")");
  }

  // The region of task t: its chunk's selected elements and where they go.
  void plan(std::size_t t, Worker& w) const {
    Region& r = w.region;
    r.src0 = r.dst0 = 0;
    r.outer.clear();
    std::vector<Step>& axes = w.axes;
    axes.resize(ndim_);
    for (std::size_t k = ndim_; k-- > 0;) {
      const AxisPiece& p = pieces_[k][t % pieces_[k].size()];
      t /= pieces_[k].size();
      const AxisRange& a = sel_[k];
      const std::int64_t local = a.start + p.first * a.step - p.chunk * spec_.chunk_shape[k];
      r.src0 += local * chunk_strides_[k];
      r.dst0 += p.first * dest_strides_[k];
      axes[k] = {p.count, a.step * chunk_strides_[k], dest_strides_[k]};
    }
    // The row: the fastest axis in the chunk with more than one element, merged with the next
    // ones while the elements stay evenly spaced on both sides.
    r.row = {1, 1, 1};
    bool merging = true, started = false;
    for (std::size_t k : source_order_) {
      const Step& s = axes[k];
      if (s.count == 1) continue;
      if (!started) {
        r.row = s;
        started = true;
      } else if (merging && s.src == r.row.count * r.row.src && s.dst == r.row.count * r.row.dst) {
        r.row.count *= s.count;
      } else {
        merging = false;
        r.outer.push_back(s);
      }
    }
  }

  // Whether the chunk, decoded, is exactly its region of the destination.
  bool lands_whole(const Region& r) const {
    return direct_ && static_cast<std::uint64_t>(r.row.count) == chunk_elements_ &&
           r.row.src == 1 && r.row.dst == 1;
  }

  std::byte* dest_at(std::int64_t element) const {
    return dest_.data() + static_cast<std::size_t>(element) * out_size_;
  }

  // Calls row(src_offset, dst_offset) (elements) for each row of the region.
  template <class F>
  void for_each_row(Worker& w, F&& row) const {
    const Region& r = w.region;
    w.at.assign(r.outer.size(), 0);
    std::int64_t s = r.src0, d = r.dst0;
    for (;;) {
      row(s, d);
      std::size_t k = 0;
      for (; k < r.outer.size(); ++k) {
        const Step& o = r.outer[k];
        s += o.src;
        d += o.dst;
        if (++w.at[k] < static_cast<std::size_t>(o.count)) break;
        s -= o.src * o.count;
        d -= o.dst * o.count;
        w.at[k] = 0;
      }
      if (k == r.outer.size()) break;
    }
  }

  void convert_rows(Worker& w, const std::byte* chunk) const {
    const Region& r = w.region;
    const auto ss = static_cast<std::ptrdiff_t>(r.row.src * static_cast<std::int64_t>(in_size_));
    const auto ds = static_cast<std::ptrdiff_t>(r.row.dst * static_cast<std::int64_t>(out_size_));
    const auto n = static_cast<std::size_t>(r.row.count);
    for_each_row(w, [&](std::int64_t s, std::int64_t d) {
      convert_(conv_, chunk + s * static_cast<std::int64_t>(in_size_), ss, dest_at(d), ds, n);
    });
  }

  void fill_rows(Worker& w) const {
    const Region& r = w.region;
    const auto ds = static_cast<std::ptrdiff_t>(r.row.dst * static_cast<std::int64_t>(out_size_));
    const auto n = static_cast<std::size_t>(r.row.count);
    for_each_row(w, [&](std::int64_t, std::int64_t d) { copy_(fill_conv_, fill_.data(), 0, dest_at(d), ds, n); });
  }

  void read_chunk(Worker& w, std::size_t t) const {
    plan(t, w);
    const ZarrChunk& chunk = chunks_[task_chunk_[t]];
    if (chunk.missing) return fill_rows(w);
    const ChunkLabel label{spec_.name, chunk.key};
    const bool whole = lands_whole(w.region);
    const bool stored = spec_.compressor == ZarrCompressor::none;
    std::span<const std::byte> encoded = chunk.bytes;
    if (!chunk.path.empty()) {
      const core::InputFile file(chunk.path);
      const std::uint64_t size = file.size();
      if (stored) zarr::check_stored_size(size, chunk_bytes_, label);
      // An uncompressed chunk that is its region of the destination is read straight there.
      const std::span<std::byte> into =
          stored && whole ? std::span(dest_at(w.region.dst0), chunk_bytes_) : w.encoded.get(size);
      const std::size_t got = file.read_at(0, into);
      if (got != size)
        throw Error(ErrorCode::truncated, chunk.path, "chunk",
                    chunk.key + ": expected " + std::to_string(size) +
                        " bytes (the file's size when opened), but the file ends after " +
                        std::to_string(got),
                    got);
      if (stored && whole) return;
      encoded = into;
    }
    if (stored) {
      zarr::check_stored_size(encoded.size(), chunk_bytes_, label);
      return convert_rows(w, encoded.data());
    }
    if (whole) {
      w.decoder.decode(spec_.compressor, encoded, chunk_bytes_,
                       [&] { return std::span(dest_at(w.region.dst0), chunk_bytes_); }, label);
      return;
    }
    std::span<std::byte> decoded;
    w.decoder.decode(spec_.compressor, encoded, chunk_bytes_,
                     [&] { return decoded = w.decoded.get(chunk_bytes_); }, label);
    convert_rows(w, decoded.data());
  }

  const ZarrArraySpec& spec_;
  std::span<const ZarrChunk> chunks_;
  const std::vector<AxisRange> sel_;
  std::span<std::byte> dest_;
  const std::vector<std::int64_t> dest_strides_;
  const std::size_t ndim_;
  const std::size_t in_size_, out_size_;
  core::Conversion conv_;
  core::ConvertFn convert_ = nullptr;
  std::vector<std::byte> fill_;
  core::Conversion fill_conv_;
  core::ConvertFn copy_ = nullptr;
  bool direct_ = false;
  std::vector<std::int64_t> chunk_strides_;
  std::uint64_t chunk_elements_ = 0;
  std::size_t chunk_bytes_ = 0;
  std::vector<std::size_t> source_order_;
  std::vector<std::vector<AxisPiece>> pieces_;
  std::size_t tasks_ = 0;
  std::vector<std::size_t> task_chunk_;
};

// The spec's sizes: Error(invalid_argument) for impossible ones, Error(limit) for an array or a
// chunk whose bytes a 64-bit size cannot count.
void check_spec(const ZarrArraySpec& spec) {
  const std::size_t ndim = spec.shape.size();
  if (ndim == 0) bad_argument(spec, "shape", "expected at least one axis, but the shape is empty");
  if (spec.chunk_shape.size() != ndim)
    bad_argument(spec, "chunk_shape",
                 "expected a chunk size for each of the " + std::to_string(ndim) +
                     " axes, but received " + std::to_string(spec.chunk_shape.size()));
  const std::uint64_t item = dtype_size(spec.dtype);
  std::optional<std::uint64_t> array_bytes = item, chunk_bytes = item;
  for (std::size_t k = 0; k < ndim; ++k) {
    if (spec.shape[k] < 0)
      bad_argument(spec, "shape",
                   "axis " + std::to_string(k) + ": expected a size >= 0, but received " +
                       std::to_string(spec.shape[k]));
    if (spec.chunk_shape[k] < 1)
      bad_argument(spec, "chunk_shape",
                   "axis " + std::to_string(k) + ": expected a chunk size >= 1, but received " +
                       std::to_string(spec.chunk_shape[k]));
    if (array_bytes) array_bytes = core::checked_mul(*array_bytes, static_cast<std::uint64_t>(spec.shape[k]));
    if (chunk_bytes) chunk_bytes = core::checked_mul(*chunk_bytes, static_cast<std::uint64_t>(spec.chunk_shape[k]));
  }
  if (!array_bytes)
    throw Error(ErrorCode::limit, spec.name, "shape",
                "expected an array of at most 2^64 bytes, but its shape holds more");
  if (!chunk_bytes || *chunk_bytes > std::numeric_limits<std::size_t>::max() / 2)
    throw Error(ErrorCode::limit, spec.name, "chunk_shape",
                "expected a chunk of at most 2^63 bytes, but the chunk shape holds more");
  if (!spec.fill_value.empty() && spec.fill_value.size() != item)
    bad_argument(spec, "fill_value",
                 "expected one " + std::string(dtype_name(spec.dtype)) + " element (" +
                     std::to_string(item) + " bytes) or none, but received " +
                     std::to_string(spec.fill_value.size()) + " bytes");
}

// The destination: one stride per axis, >= 0; selected elements on distinct elements (the axes,
// by increasing stride, each step over all that the smaller ones reach) and inside `dest`.
void check_destination(const ZarrArraySpec& spec, std::span<const AxisRange> sel,
                       std::span<const std::int64_t> strides, std::size_t dest_elements) {
  const std::size_t ndim = sel.size();
  if (strides.size() != ndim)
    bad_argument(spec, "destination",
                 "expected " + std::to_string(ndim) + " strides, but received " +
                     std::to_string(strides.size()));
  std::vector<std::size_t> axes;
  for (std::size_t k = 0; k < ndim; ++k) {
    if (strides[k] < 0)
      bad_argument(spec, "destination",
                   "axis " + std::to_string(k) + ": expected a stride >= 0, but received " +
                       std::to_string(strides[k]));
    if (sel[k].count == 0) return;  // nothing is written
    if (sel[k].count > 1) axes.push_back(k);
  }
  std::sort(axes.begin(), axes.end(), [&](std::size_t a, std::size_t b) { return strides[a] < strides[b]; });
  std::uint64_t reach = 0;  // the furthest element the axes so far reach
  for (std::size_t k : axes) {
    const auto stride = static_cast<std::uint64_t>(strides[k]);
    if (stride <= reach)
      bad_argument(spec, "destination",
                   "axis " + std::to_string(k) + ": expected a stride > " + std::to_string(reach) +
                       " (the smaller strides reach that far), but received " +
                       std::to_string(stride) + ": selected elements would overlap");
    const auto span = core::checked_mul(static_cast<std::uint64_t>(sel[k].count - 1), stride);
    const auto next = span ? core::checked_add(reach, *span) : std::nullopt;
    if (!next)
      bad_argument(spec, "destination",
                   "expected strides that reach at most 2^64 elements, but they reach further");
    reach = *next;
  }
  if (reach >= dest_elements)
    bad_argument(spec, "destination",
                 "expected room for element " + std::to_string(reach) +
                     " (the furthest the strides reach), but received " +
                     std::to_string(dest_elements) + " elements");
}

}  // namespace

void read_zarr_chunks(const ZarrArraySpec& spec, std::span<const ZarrChunk> chunks,
                      std::span<const AxisRange> selection, const OutputSpec& output,
                      double slope, double inter, std::span<std::byte> dest,
                      std::span<const std::int64_t> dest_strides, const ReadOptions& options) {
  check_spec(spec);
  std::vector<AxisRange> sel = nifti::checked_selection(selection, spec.shape, spec.name);
  check_destination(spec, sel, dest_strides, dest.size() / dtype_size(output.type));
  const bool empty = std::any_of(sel.begin(), sel.end(), [](const AxisRange& a) { return a.count == 0; });
  // The conversion is checked (Error "dtype") even when nothing is selected, as read_nifti_data
  // checks it.
  ChunkReader reader(spec, chunks, std::move(sel), output, slope, inter, dest, dest_strides);
  if (empty) return;
  reader.find_chunks();
  reader.run(resolve_threads(options.threads));
}

}  // namespace voxpipe
