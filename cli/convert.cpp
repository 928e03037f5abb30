// voxpipe convert: a NIfTI image, a NIfTI-Zarr store or a folder of one DICOM series rewritten
// as a NIfTI file (streamed slab by slab) or a NIfTI-Zarr store (through the Python package).
#include <algorithm>
#include <cstring>
#include <span>

#include "cli_common.hpp"
#include "commands.hpp"
#include "foreign_formats.hpp"
#include "inputs.hpp"
#include "progress.hpp"
#include "series_nifti.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/gzip.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/remote.hpp"
#include "voxpipe/threads.hpp"

namespace voxpipe::cli {

namespace {

const char* const kConvertUsage =
    "usage: voxpipe convert IN OUT [--dtype T] [--level N] [--layout L] [--threads N] [--overwrite]\n"
    "                       [--progress M]\n"
    "       voxpipe convert IN OUT.nii.zarr [--chunks X,Y,Z[,T]] [--shards X,Y,Z[,T]] [--levels N]\n"
    "                       [--codec zstd|blosc|gzip|none] [--zarr-format 3|2] [--dtype T] [--level N]\n"
    "\n"
    "Rewrites the NIfTI image IN as OUT (.nii, .nii.gz, or .hdr/.img by OUT's name), streaming\n"
    "about 64 MiB at a time. The header, affine and extensions are kept. IN may also be a\n"
    "NIfTI-Zarr store (.nii.zarr), and OUT one: Zarr v3 + OME-NGFF 0.5, the header stored as is,\n"
    "written a few volumes at a time. Stores are read and written through voxpipe's Python package\n"
    "(pip install 'voxpipe[zarr]').\n"
    "\n"
    "IN may be a folder of one DICOM series: OUT is then the image `voxpipe dcm2nii` writes of it\n"
    "(no sidecar); --dtype float32/float64 stores the rescaled values. A folder of several series\n"
    "is refused (exit 10): `voxpipe dcm2nii FOLDER -o OUT_DIR` converts each. Analyze, MGH/MGZ\n"
    "and MINC inputs are named, with the nibabel call that reads them (exit 6).\n"
    "\n"
    "  --dtype T         float32 or float64 (complex64/complex128 for complex data): store the\n"
    "                    scaled values, with scl_slope 1 and scl_inter 0. Without it (or with\n"
    "                    IN's own dtype) the stored values, byte order and scale factors are kept:\n"
    "                    the copy is lossless\n"
    "  --level N         gzip level 0-9 (default 1) for a .gz OUT\n"
    "  --layout L        members (default): independent 1 MiB gzip members that any gzip reader\n"
    "                    opens and voxpipe reads in parallel, with random access; bgzf: BGZF\n"
    "                    blocks (64 KiB); single: one member, as Python's gzip writes\n"
    "  --threads N       threads for reading and compressing; 0 (default): $VOXPIPE_NUM_THREADS,\n"
    "                    else $OMP_NUM_THREADS, else the CPUs this process may run on\n"
    "  --overwrite, --force  replace an existing OUT (otherwise refused, exit 12)\n"
    "  --progress M      auto (default), bar, log or none: the progress report on stderr (bytes\n"
    "                    written, rate, ETA; docs/cli.md \"Progress\"); none for a .nii.zarr OUT\n"
    "\n"
    "For a .nii.zarr OUT (docs/zarr.md):\n"
    "  --chunks X,Y,Z[,T] chunk sizes in NIfTI axis order (default: one volume per chunk for\n"
    "                    4D, slabs of whole slices of about 4 MiB for 3D)\n"
    "  --shards X,Y,Z[,T] shard sizes (Zarr v3): several chunks per stored object\n"
    "  --levels N        pyramid levels (default 1: none), each halving x, y and z\n"
    "  --codec C         zstd (default, --level 3), blosc (zstd inside, byte shuffle), gzip, none\n"
    "  --zarr-format V   3 (default; OME-NGFF 0.5) or 2 (OME-NGFF 0.4)\n"
    "\n"
    "OUT appears only once complete (written beside it, then renamed). OUT may be a URL\n"
    "(s3://, gs://, az://: written locally, then uploaded, an object visible only once complete,\n"
    "a store's root metadata last; `voxpipe clean` removes what an interrupted upload leaves;\n"
    "docs/remote.md). Exit status: 0, or the code of the error (docs/exit_codes.md).\n";

}  // namespace

int cmd_convert(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                bool err_is_terminal) {
  std::vector<std::string> paths;
  bool overwrite = false;
  std::optional<DType> dtype;
  int level = 1;
  GzipLayout layout = GzipLayout::members;
  unsigned threads = 0;
  // Options of a NIfTI-Zarr OUT, passed on as given (the writer checks them), and whether the
  // gzip ones were given.
  std::vector<std::pair<std::string, std::string>> zarr_options;
  bool level_given = false, layout_given = false;
  ProgressMode progress_mode = ProgressMode::automatic;
  OptionParser parser("voxpipe convert", kConvertUsage, out, err);
  parser.progress(progress_mode).overwrite(overwrite).positionals(paths, 2, 2, "expected IN and OUT");
  for (const char* option : {"--chunks", "--shards", "--levels", "--codec", "--zarr-format"})
    parser.value(option, [&zarr_options, option](const std::string& v) {
      std::string name = option + 2;
      std::replace(name.begin(), name.end(), '-', '_');
      zarr_options.emplace_back(name, v);
      return std::string();
    });
  parser.value("--dtype", [&dtype](const std::string& v) {
    dtype = dtype_from_name(v);
    return dtype ? std::string() : "unknown dtype " + v;
  });
  parser.value("--layout", [&](const std::string& v) {
    layout_given = true;
    if (v == "members")
      layout = GzipLayout::members;
    else if (v == "bgzf")
      layout = GzipLayout::bgzf;
    else if (v == "single")
      layout = GzipLayout::single;
    else
      return expects("--layout", "members, bgzf or single", v);
    return std::string();
  });
  parser.value("--level", [&](const std::string& v) {
    level_given = true;
    const std::optional<long> l = integer_in(v, 0, 9);
    if (!l) return expects("--level", "0..9", v);
    level = static_cast<int>(*l);
    return std::string();
  });
  parser.integer("--threads", 0, 1024, threads);
  if (const auto code = parser.parse(args)) return *code;
  if (is_zarr_path(paths[1])) {
    if (layout_given) return parser.error("--layout is for .gz outputs, not NIfTI-Zarr");
    check_overwrite(paths[1], overwrite);
    const UrlHandlers& handlers = url_handlers();
    if (!handlers.write_zarr)
      throw Error(ErrorCode::unsupported, paths[1], "",
                  "NIfTI-Zarr stores are written through voxpipe's Python package (pip install "
                  "'voxpipe[zarr]'; from the shell: python -m voxpipe ...)");
    // A format voxpipe does not read is named here, before the store's writer opens it.
    if (!is_object_url(paths[0]) && !is_zarr_path(paths[0]) && !is_local_folder(paths[0]))
      if (auto foreign = foreign_format_error(paths[0])) throw *foreign;
    if (dtype) zarr_options.emplace_back("dtype", std::string(dtype_name(*dtype)));
    if (level_given) zarr_options.emplace_back("level", std::to_string(level));
    zarr_options.emplace_back("threads", std::to_string(threads));
    zarr_options.emplace_back("overwrite", overwrite ? "1" : "0");
    handlers.write_zarr(paths[0], paths[1], zarr_options);
    out << "wrote " << paths[1] << "\n";
    return 0;
  }
  if (!zarr_options.empty())
    return parser.error("--" + zarr_options.front().first + " is for NIfTI-Zarr outputs (OUT.nii.zarr)");
  if (is_local_folder(paths[0])) {
    // A DICOM series folder: its one series, written as dcm2nii writes it.
    if (dtype && !dtype_is_float(*dtype))
      return parser.error(expects("--dtype for a DICOM folder", "float32 or float64 (the rescaled values)",
                                  dtype_name(*dtype)));
    check_nifti_overwrite(paths[1], overwrite);
    std::optional<StagedUpload> staged;
    const std::string target = output_target(paths[1], staged);
    const DicomScanResult scan = scan_folder(paths[0]);
    if (scan.series.size() > 1) {
      std::string names;
      for (std::size_t i = 0; i < scan.series.size() && i < 4; ++i)
        names += (i ? "; " : "") + series_name(scan.series[i]);
      if (scan.series.size() > 4) names += "; ...";
      throw Error(ErrorCode::invalid_argument, paths[0], "",
                  std::to_string(scan.series.size()) + " DICOM series in this folder (" + names +
                      "); convert writes one image: `voxpipe dcm2nii " + paths[0] +
                      " -o OUT_DIR` converts each series (`voxpipe info " + paths[0] +
                      "` lists them)");
    }
    threads = resolve_threads(threads);
    for (const std::string& w : write_dicom_series(scan.series.front(), target, dtype,
                                                   WriteOptions{level, layout, threads}, threads))
      err << "voxpipe convert: warning: " << w << "\n";
    if (staged) staged->upload(overwrite);
    out << "wrote " << paths[1] << "\n";
    return 0;
  }
  check_nifti_overwrite(paths[1], overwrite);
  threads = resolve_threads(threads);  // one count for every read and the write
  NiftiImage img = open_input(paths[0]);
  check_data_size(img);
  NiftiHeader h = img.header;
  OutputSpec spec;
  if (!dtype || *dtype == img.dtype) {
    // Keep the stored values, their byte order and the scale factors: lossless.
    spec = OutputSpec{img.dtype, false, true, false};
    h.scl_slope = img.scaling.slope;
    h.scl_inter = img.scaling.inter;
  } else {
    if (!dtype_is_float(*dtype) && !(dtype_is_complex(*dtype) && dtype_is_complex(img.dtype)))
      return parser.error("--dtype " + std::string(dtype_name(*dtype)) +
                          " needs new scale factors; only float32/float64 (or complex) outputs are "
                          "supported");
    spec = OutputSpec{*dtype, true, false, false};
    if (!conversion_supported(img.dtype, spec))
      return parser.error("cannot convert " + std::string(dtype_name(img.dtype)) + " to " +
                          std::string(dtype_name(*dtype)));
    h.datatype = static_cast<std::int16_t>(nifti_datatype_code(*dtype));
    h.bitpix = static_cast<std::int16_t>(8 * dtype_size(*dtype));
    h.scl_slope = 1.0;
    h.scl_inter = 0.0;
    h.big_endian = std::endian::native == std::endian::big;
  }
  h.vox_offset = 0;  // the writer places the data right after the extensions
  // Stream slab by slab along the last axis, so memory stays near one slab (~64 MiB).
  const std::size_t ndim = img.shape.size();
  const std::uint64_t out_item = dtype_size(spec.type);
  std::uint64_t slab_bytes = out_item;
  for (std::size_t k = 0; k + 1 < ndim; ++k) slab_bytes *= static_cast<std::uint64_t>(img.shape[k]);
  const std::int64_t last = ndim ? img.shape[ndim - 1] : 0;
  const std::int64_t per = std::max<std::int64_t>(1, static_cast<std::int64_t>((64u << 20) / std::max<std::uint64_t>(slab_bytes, 1)));
  NiftiReader reader(img);
  // Counted in output bytes as the writer takes them: a .nii.gz input inflates as it goes.
  Progress progress(err, progress_mode, err_is_terminal, img.voxel_count() * out_item,
                    "voxpipe convert", "bytes");
  progress.show();
  std::vector<std::byte> slab;
  std::size_t slab_pos = 0;
  std::int64_t next = 0;
  DataProducer producer = [&](std::span<std::byte> buffer) -> std::size_t {
    if (slab_pos == slab.size()) {
      if (next >= last || img.voxel_count() == 0) return 0;
      const std::int64_t n = std::min(per, last - next);
      std::vector<AxisRange> sel;
      for (std::size_t k = 0; k + 1 < ndim; ++k) sel.push_back({0, 1, img.shape[k]});
      sel.push_back({next, 1, n});
      slab.resize(slab_bytes * static_cast<std::uint64_t>(n));
      reader.read(sel, spec, slab, ReadOptions{threads});
      next += n;
      slab_pos = 0;
    }
    std::size_t k = std::min(buffer.size(), slab.size() - slab_pos);
    std::memcpy(buffer.data(), slab.data() + slab_pos, k);
    slab_pos += k;
    progress.tick(k);
    return k;
  };
  // At most: the header, extensions and data, and what gzip adds to incompressible data (5
  // bytes per 64 KiB stored block, a member header per MiB), with room to spare.
  std::uint64_t max_size = img.voxel_count() * out_item + (1u << 20);
  for (const NiftiExtension& e : img.extensions) max_size += e.content.size() + 16;
  max_size += max_size / 1024;
  write_nifti_output(paths[1], overwrite, h, img.extensions, producer,
                     WriteOptions{level, layout, threads}, max_size);
  progress.end();
  out << "wrote " << paths[1] << "\n";
  return 0;
}

}  // namespace voxpipe::cli
