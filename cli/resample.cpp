// voxpipe resample: a 3-D or 4-D NIfTI series onto a reference grid through affines, per-volume
// affines and displacement fields, streamed volume by volume into the output file
// (include/voxpipe/resample_series.hpp), with a progress bar and a closing line of time and peak
// memory.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "progress.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/resample_series.hpp"
#include "voxpipe/transform.hpp"

namespace voxpipe::cli {

namespace {

const char* const kResampleUsage =
    "usage: voxpipe resample MOVING --reference REF [TRANSFORM...] -o OUT [options]\n"
    "\n"
    "Resamples MOVING (.nii, .nii.gz; 3-D or 4-D) onto the grid of REF, volume by volume, and\n"
    "streams the result into OUT (.nii or .nii.gz) without holding the whole output. Values are\n"
    "scipy.ndimage's (B-spline interpolation in float64).\n"
    "\n"
    "Transforms map reference-space points (RAS+ mm) to the moving image, as nitransforms and\n"
    "ITK do; given several, they form a chain applied to reference points in command-line order\n"
    "(e.g. --warp FIELD --affines HMC for a distortion field, then head motion). None: identity\n"
    "in world space (the moving image's own affine places it).\n"
    "  --affine FILE       one affine for every volume: ITK .tfm/.txt, FSL .mat (converted with\n"
    "                      REF and MOVING as FLIRT's -ref and -in), or a plain 4x4 text matrix\n"
    "  --affines FILE      one affine per volume: an ITK file with one transform per volume, or\n"
    "                      a text file listing one transform file per line\n"
    "  --warp FIELD        a displacement field NIfTI in mm (ITK/ANTs convention, LPS vectors)\n"
    "  --warp-ras FIELD    a displacement field NIfTI whose vectors are RAS mm (nitransforms)\n"
    "\n"
    "Options:\n"
    "  --order N           B-spline order 0..5 (default 3)\n"
    "  --mode MODE         constant (default), grid-constant, nearest, reflect, mirror, wrap,\n"
    "                      grid-wrap, grid-mirror: scipy.ndimage's boundary modes\n"
    "  --cval V            value outside the moving image (default 0)\n"
    "  --no-prefilter      use the samples as spline coefficients (scipy's prefilter=False)\n"
    "  --fast              sum spline taps separably with fused multiply-adds (orders 3..5):\n"
    "                      faster; values within a few ulps of scipy's instead of identical\n"
    "  --dtype T           output type: float32 (default), float64, int16, uint8, ...\n"
    "  --threads N         threads; 0 (default): $VOXPIPE_NUM_THREADS, else $OMP_NUM_THREADS,\n"
    "                      else the CPUs this process may run on\n"
    "  --memory-limit SIZE bytes for volumes in flight (e.g. 512M, 2G; default: one per thread)\n"
    "  -o OUT              output file (.nii, .nii.gz, or a .hdr/.img pair); a URL (s3://...):\n"
    "                      written locally, then uploaded, visible only once complete\n"
    "  --overwrite, --force  replace an existing OUT (otherwise refused, exit 12)\n"
    "  --progress M        auto (default), bar, log or none: the progress report on stderr\n"
    "                      (volumes done, rate, ETA; docs/cli.md \"Progress\")\n"
    "\n"
    "Exit status: 0, or the code of the error (docs/exit_codes.md).\n";

// Peak resident memory of this process so far, in bytes: VmHWM of /proc/self/status, which
// starts afresh at exec. getrusage's ru_maxrss does not: Linux carries the peak of the process
// that forked us (a Python test runner of 400 MiB, say) over the exec into it. getrusage only
// where /proc is missing.
std::uint64_t peak_rss_bytes() {
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f))
      found = std::sscanf(line, "VmHWM: %llu kB", &kib) == 1;
    std::fclose(f);
    if (found) return static_cast<std::uint64_t>(kib) * 1024;
  }
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
}

std::optional<std::uint64_t> parse_size(const std::string& v) {
  if (v.empty()) return std::nullopt;
  char* end = nullptr;
  const double number = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || !(number > 0)) return std::nullopt;
  std::string unit(end);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (unit.size() == 2 && (unit[1] == 'i' || unit[1] == 'I')) unit.pop_back();
  double scale = 1;
  if (unit.empty()) scale = 1;
  else if (unit == "K" || unit == "k") scale = 1024.0;
  else if (unit == "M" || unit == "m") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "g") scale = 1024.0 * 1024 * 1024;
  else return std::nullopt;
  const double bytes = number * scale;
  if (bytes >= 1.8e19) return std::nullopt;
  return static_cast<std::uint64_t>(bytes);
}

Grid grid_of(const NiftiImage& image) {
  Grid g;
  for (std::size_t d = 0; d < 3; ++d) g.shape[d] = d < image.shape.size() ? image.shape[d] : 1;
  g.affine = nifti_best_affine(image.header, image.header_path);
  return g;
}

struct TransformArg {
  enum class Kind { affine, affines, warp, warp_ras } kind;
  std::string path;
};

}  // namespace

int cmd_resample(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                 bool err_is_terminal) {
  std::optional<std::string> moving_path, reference_path, out_path;
  std::vector<TransformArg> transforms;
  SeriesResampleOptions options;
  bool overwrite = false;
  ProgressMode progress_mode = ProgressMode::automatic;
  OptionParser parser("voxpipe resample", kResampleUsage, out, err);
  parser.progress(progress_mode)
      .flag("--no-prefilter", [&options] { options.interp.prefilter = false; })
      .flag("--fast", [&options] { options.interp.fast = true; })
      .overwrite(overwrite)
      .value("-o", out_path)
      .value("--reference", reference_path);
  const std::pair<const char*, TransformArg::Kind> transform_options[] = {
      {"--affine", TransformArg::Kind::affine},
      {"--affines", TransformArg::Kind::affines},
      {"--warp", TransformArg::Kind::warp},
      {"--warp-ras", TransformArg::Kind::warp_ras}};
  for (const auto& option : transform_options)
    parser.value(option.first, [&transforms, kind = option.second](const std::string& v) {
      transforms.push_back({kind, v});
      return std::string();
    });
  parser.value("--order",
                [&options](const std::string& v) {
                  if (v.size() != 1 || v[0] < '0' || v[0] > '5') return expects("--order", "0..5", v);
                  options.interp.order = v[0] - '0';
                  return std::string();
                })
      .value("--mode",
             [&options](const std::string& v) {
               const auto mode = interp_mode_from_name(v);
               if (!mode)
                 return expects("--mode",
                                "constant, grid-constant, nearest, reflect, grid-mirror, mirror, "
                                "wrap or grid-wrap",
                                v);
               options.interp.mode = *mode;
               return std::string();
             })
      .value("--cval",
             [&options](const std::string& v) {
               char* end = nullptr;
               const double c = std::strtod(v.c_str(), &end);
               if (v.empty() || *end) return expects("--cval", "a number", v);
               options.interp.cval = c;
               return std::string();
             })
      .value("--dtype",
             [&options](const std::string& v) {
               const auto t = dtype_from_name(v);
               if (!t || !(dtype_is_integer(*t) || dtype_is_float(*t)))
                 return expects("--dtype",
                                "an integer or float type name (float32, float64, int16, uint8, ...)", v);
               options.output_dtype = *t;
               return std::string();
             })
      .integer("--threads", 0, 1024, options.threads)
      .value("--memory-limit",
             [&options](const std::string& v) {
               const auto size = parse_size(v);
               if (!size) return expects("--memory-limit", "a size such as 512M or 2G", v);
               options.memory_limit = *size;
               return std::string();
             })
      .positionals([&moving_path](const std::string& a) {
        if (moving_path) return "expected one MOVING image, but received " + a + " too";
        moving_path = a;
        return std::string();
      })
      .usage_after_missing_value()
      .lone_dash_is_positional();
  if (const auto code = parser.parse(args)) return *code;
  if (!moving_path || !reference_path || !out_path)
    return parser.usage_error("expected MOVING, --reference REF and -o OUT");

  check_nifti_overwrite(*out_path, overwrite);
  std::optional<StagedUpload> staged;
  const std::string target = output_target(*out_path, staged);
  const auto t0 = std::chrono::steady_clock::now();
  const NiftiImage moving = open_nifti(*moving_path);
  const NiftiImage reference = open_nifti(*reference_path);
  const Grid reference_grid = grid_of(reference);
  const Grid moving_grid = grid_of(moving);
  const std::int64_t volumes = series_volume_count(moving);

  // The chain(s), in command-line order. Per-volume affines multiply the chains: every chain
  // shares the steps before and after them (and the field objects, which the executor applies
  // once for the whole grid).
  std::vector<TransformChain> chains(1);
  AffineReadOptions read_options;
  read_options.reference = &reference_grid;
  read_options.moving = &moving_grid;
  for (const TransformArg& t : transforms) {
    if (t.kind == TransformArg::Kind::warp || t.kind == TransformArg::Kind::warp_ras) {
      TransformStep step;
      step.kind = TransformStep::Kind::field;
      step.field = std::make_shared<const DisplacementField>(read_displacement_field(
          t.path, t.kind == TransformArg::Kind::warp ? FieldFormat::itk : FieldFormat::ras));
      for (auto& c : chains) c.push_back(step);
    } else if (t.kind == TransformArg::Kind::affine) {
      TransformStep step;
      step.matrix = read_affine(t.path, read_options);
      for (auto& c : chains) c.push_back(step);
    } else {
      const std::vector<Matrix4> per_volume = read_affines(t.path, read_options);
      if (static_cast<std::int64_t>(per_volume.size()) != volumes)
        throw Error(ErrorCode::invalid_argument, t.path, "",
                    "holds " + std::to_string(per_volume.size()) + " transforms, but " +
                        *moving_path + " has " + std::to_string(volumes) + " volumes");
      if (chains.size() != 1)
        throw Error(ErrorCode::invalid_argument, t.path, "",
                    "only one --affines list can be given");
      std::vector<TransformChain> expanded(per_volume.size(), chains.front());
      for (std::size_t v = 0; v < per_volume.size(); ++v) {
        TransformStep step;
        step.matrix = per_volume[v];
        expanded[v].push_back(step);
      }
      chains = std::move(expanded);
    }
  }

  options.reference_header = reference.header;
  Progress progress(err, progress_mode, err_is_terminal, static_cast<std::uint64_t>(volumes),
                    "voxpipe resample", "volumes");
  progress.show();
  options.progress = [&](std::int64_t, std::int64_t) { progress.tick(); };
  resample_series_to_file(moving, reference_grid, chains, target, options);
  if (staged) staged->upload(overwrite);
  progress.end();

  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<std::int64_t> shape(reference_grid.shape.begin(), reference_grid.shape.end());
  if (moving.shape.size() >= 4) shape.push_back(volumes);
  out << "voxpipe resample: wrote " << *out_path << " (" << shape_text(shape) << " "
      << dtype_name(options.output_dtype) << ", order " << options.interp.order << ", "
      << interp_mode_name(options.interp.mode) << "), " << volumes
      << (volumes == 1 ? " volume" : " volumes") << " in " << fixed(elapsed, 2)
      << " s, peak memory " << fixed(peak_rss_bytes() / 1048576.0, 1) << " MiB\n";
  return 0;
}

}  // namespace voxpipe::cli
