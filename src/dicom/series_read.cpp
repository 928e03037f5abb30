// Reading an assembled DICOM series' pixels: every image decoded on a thread pool (a mosaic's
// frame once for all its tiles) into its plane of the output type, rescaled where that type is
// float32 or float64; into the caller's buffer (read_dicom_series) or handed over plane by plane
// (decode_dicom_series, series_planes.hpp). Series assembly (series.cpp) decides the order.
#include <cstring>
#include <functional>
#include <iterator>
#include <map>

#include "dicom/modality.hpp"
#include "dicom/series_internal.hpp"
#include "dicom/series_planes.hpp"
#include "core/file.hpp"
#include "core/thread_pool.hpp"
#include "voxpipe/dicom_series.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/threads.hpp"

namespace voxpipe {

namespace dicom {

std::string check_series_read(const DicomSeries& series, DType out_type) {
  const std::string name = series.images.empty() ? series.series_instance_uid
                                                 : series.images.front().file->path;
  if (!series.problem.empty())
    throw Error(ErrorCode::format, name, "series " + series.series_instance_uid,
                "cannot be assembled: " + series.problem);
  if (series.stored_dtype == DType::rgb24 && out_type != DType::rgb24)
    throw Error(ErrorCode::invalid_argument, name, "dtype",
                "a colour series reads as rgb24 (its stored type) only, not as " +
                    std::string(dtype_name(out_type)));
  if (out_type != series.stored_dtype && out_type != DType::f32 && out_type != DType::f64)
    throw Error(ErrorCode::invalid_argument, name, "dtype",
                std::string("a series reads as its stored type (") +
                    std::string(dtype_name(series.stored_dtype)) + "), float32 or float64");
  return name;
}

}  // namespace dicom

namespace {

using dicom::apply_modality;
using dicom::Modality;
using dicom::series_detail::bytes_of;

// Decodes every image of the series into its plane (rows x columns of out_type) on `threads`:
// into place(n) where that is not null, else into a buffer of the decoding thread. Each complete
// plane is handed to done(n, plane) before the thread decodes anything else. One decode per
// frame: the tiles of a mosaic share theirs. Returns the decoders' warnings, in image order.
std::vector<std::string> decode_series_planes(
    const DicomSeries& series, DType out_type, unsigned threads, DicomOnCorrupt on_corrupt,
    const std::function<std::uint8_t*(std::size_t n)>& place,
    const std::function<void(std::size_t n, std::span<const std::uint8_t>)>& done) {
  const std::uint64_t plane = std::uint64_t(series.rows) * series.columns;
  const std::size_t plane_bytes = static_cast<std::size_t>(plane * dtype_size(out_type));
  DicomDecodeOptions one;
  one.threads = 1;
  one.on_corrupt = on_corrupt;
  std::vector<std::vector<std::size_t>> jobs;
  {
    std::map<std::pair<const DicomFile*, std::uint64_t>, std::size_t> job_of;
    for (std::size_t n = 0; n < series.images.size(); ++n) {
      const DicomSlice& im = series.images[n];
      if (im.tile_grid == 0) {
        jobs.push_back({n});
        continue;
      }
      auto [it, fresh] = job_of.try_emplace({im.file.get(), im.frame}, jobs.size());
      if (fresh) jobs.emplace_back();
      jobs[it->second].push_back(n);
    }
  }
  const auto emit = [&](const DicomSlice& im, const std::uint8_t* values, std::size_t count,
                        std::uint8_t* dst) {
    const DType in = im.pixel->dtype;
    if (out_type == in) {
      std::memcpy(dst, values, count * dtype_size(in));
    } else {
      Modality rescale;
      rescale.kind = Modality::Kind::rescale;
      rescale.slope = im.slope;
      rescale.intercept = im.intercept;
      apply_modality(values, in, dst, out_type, count, rescale);
    }
  };
  std::vector<std::vector<std::string>> job_warnings(jobs.size());
  const auto decode_job = [&](std::size_t j) {
    thread_local std::vector<std::uint8_t> own_plane;
    // Where image n's plane is written, and its hand-over once it is complete.
    const auto target = [&](std::size_t n) {
      if (std::uint8_t* p = place(n)) return p;
      own_plane.resize(plane_bytes);
      return own_plane.data();
    };
    const auto finished = [&](std::size_t n, const std::uint8_t* p) {
      done(n, std::span<const std::uint8_t>(p, plane_bytes));
    };
    const DicomSlice& first = series.images[jobs[j].front()];
    const DicomPixelInfo& info = *first.pixel;
    const std::span<const std::uint8_t> bytes = bytes_of(first.buffer);
    // rgb24: the decoded frame's interleaved 8-bit samples as they are.
    if (first.tile_grid == 0 && (out_type == info.dtype || out_type == DType::rgb24)) {
      // Straight into its place.
      std::uint8_t* dst = target(jobs[j].front());
      job_warnings[j] = decode_dicom_frames(*first.file, info, first.frame, 1,
                                            std::span(dst, plane_bytes), one, bytes);
      finished(jobs[j].front(), dst);
      return;
    }
    thread_local std::vector<std::uint8_t> frame;
    frame.resize(info.frame_bytes);
    job_warnings[j] = decode_dicom_frames(*first.file, info, first.frame, 1, frame, one, bytes);
    if (first.tile_grid == 0) {
      std::uint8_t* dst = target(jobs[j].front());
      emit(first, frame.data(), plane, dst);
      finished(jobs[j].front(), dst);
      return;
    }
    // Mosaic tiles: rows of each tile, from the frame (row-major, info.columns wide).
    const std::size_t in_size = dtype_size(info.dtype), out_size = dtype_size(out_type);
    for (std::size_t n : jobs[j]) {
      const DicomSlice& im = series.images[n];
      const std::size_t tile_row = im.tile / im.tile_grid, tile_col = im.tile % im.tile_grid;
      std::uint8_t* dst = target(n);
      for (std::size_t r = 0; r < series.rows; ++r) {
        const std::size_t src_row = tile_row * series.rows + r;
        const std::uint8_t* src =
            frame.data() + (src_row * info.columns + tile_col * series.columns) * in_size;
        emit(im, src, series.columns, dst + r * series.columns * out_size);
      }
      finished(n, dst);
    }
  };
  core::parallel_for(jobs.size(), threads, [&](std::size_t j) {
    // A decoder's error without an offset gets that of the frame's pixel data element.
    try {
      decode_job(j);
    } catch (const Error& e) {
      const DicomFile& file = *series.images[jobs[j].front()].file;
      if (e.offset() || e.path() != file.path || !file.pixel_data) throw;
      throw Error(e.code(), e.path(), e.field(), e.detail(), file.pixel_data->offset);
    }
  });
  std::vector<std::string> warnings;
  for (auto& w : job_warnings)
    warnings.insert(warnings.end(), std::make_move_iterator(w.begin()),
                    std::make_move_iterator(w.end()));
  return warnings;
}

}  // namespace

std::vector<std::string> read_dicom_series(const DicomSeries& series, std::span<std::uint8_t> out,
                                           DType out_type, unsigned threads,
                                           DicomOnCorrupt on_corrupt) {
  const std::string name = dicom::check_series_read(series, out_type);
  const std::uint64_t plane_bytes =
      std::uint64_t(series.rows) * series.columns * dtype_size(out_type);
  if (out.size() != plane_bytes * series.images.size())
    throw Error(ErrorCode::invalid_argument, name, "out",
                "holds " + std::to_string(out.size()) + " bytes, the series needs " +
                    std::to_string(plane_bytes * series.images.size()));
  return decode_series_planes(
      series, out_type, resolve_threads(threads), on_corrupt,
      [&](std::size_t n) { return out.data() + n * plane_bytes; },
      [](std::size_t, std::span<const std::uint8_t>) {});
}

namespace dicom {

void decode_dicom_series(const DicomSeries& series, DType out_type, unsigned threads,
                         const core::ByteSink& deliver) {
  check_series_read(series, out_type);
  const std::uint64_t plane_bytes =
      std::uint64_t(series.rows) * series.columns * dtype_size(out_type);
  decode_series_planes(
      series, out_type, threads, DicomOnCorrupt::raise,
      [](std::size_t) -> std::uint8_t* { return nullptr; },
      [&](std::size_t n, std::span<const std::uint8_t> bytes) {
        deliver(n * plane_bytes, std::as_bytes(bytes));
      });
}

}  // namespace dicom

}  // namespace voxpipe
