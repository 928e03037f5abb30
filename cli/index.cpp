// voxpipe index: the seek index (GZIDX) of a gzip file, with a point at every volume of a .nii.gz.
#include <cstdio>
#include <cstdlib>

#include "cli_common.hpp"
#include "commands.hpp"
#include "gz/seek_index.hpp"
#include "progress.hpp"
#include "voxpipe/gzip.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/remote.hpp"

namespace voxpipe::cli {

namespace {

const char* const kIndexUsage =
    "usage: voxpipe index FILE [--spacing MIB] [--cache] [--fast] [--threads N] [-o OUT] [--overwrite]\n"
    "                     [--progress M]\n"
    "\n"
    "Builds the seek index of the gzip file FILE in the GZIDX format that indexed_gzip and\n"
    "rapidgzip read, so that any byte range inflates from the nearest point instead of the start.\n"
    "A .nii.gz also gets a point at the start of every volume. voxpipe's readers find the index\n"
    "by themselves, and use it only while FILE is unchanged (size, mtime and its last 64 KiB).\n"
    "FILE may be the URL of an object (s3://, gs://, az://, https://): it is read once, as a\n"
    "whole read is (8 MiB parts, several in flight), and the index goes next to it as\n"
    "URL.gzidx (or to the cache with --cache, or to OUT).\n"
    "\n"
    "  --spacing MIB     uncompressed MiB between points (default 4; 0: volume and gzip member\n"
    "                    starts only)\n"
    "  --cache           write to the user cache ($VOXPIPE_CACHE_DIR, $XDG_CACHE_HOME/voxpipe or\n"
    "                    ~/.cache/voxpipe) instead of FILE.gzidx beside FILE; an entry there is\n"
    "                    replaced without --overwrite (it is voxpipe's, not a file you named)\n"
    "  --fast            build from a parallel inflate: points every ~8 MiB of compressed\n"
    "                    data, no volume points\n"
    "  --threads N       threads of the build; 0 (default): $VOXPIPE_NUM_THREADS, else\n"
    "                    $OMP_NUM_THREADS, else the CPUs this process may run on\n"
    "  -o OUT            write the index to OUT\n"
    "  --overwrite, --force  replace an existing FILE.gzidx or OUT (otherwise refused, exit 12)\n"
    "  --progress M      auto (default), bar, log or none: the progress report on stderr (how far\n"
    "                    the build is, in compressed bytes, rate, ETA; docs/cli.md \"Progress\")\n"
    "\n"
    "Exit status: 0, or the code of the error (docs/exit_codes.md).\n";

}  // namespace

int cmd_index(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
              bool err_is_terminal) {
  std::vector<std::string> paths;
  bool overwrite = false;
  GzipIndexOptions options;
  ProgressMode progress_mode = ProgressMode::automatic;
  OptionParser parser("voxpipe index", kIndexUsage, out, err);
  parser.progress(progress_mode)
      .overwrite(overwrite)
      .flag("--cache", options.to_cache)
      .flag("--fast", [&options] { options.exact = false; })
      .value("-o", options.output)
      .integer("--threads", 0, 1024, options.threads)
      .value("--spacing",
             [&options](const std::string& v) {
               char* end = nullptr;
               const double mib = std::strtod(v.c_str(), &end);
               if (v.empty() || *end || !(mib >= 0) || mib > 1 << 20)
                 return expects("--spacing", "MiB >= 0", v);
               options.spacing = static_cast<std::uint64_t>(mib * (1 << 20));
               return std::string();
             })
      .positionals(paths, 1, 1, "expected one FILE");
  if (const auto code = parser.parse(args)) return *code;
  const bool nifti = nifti_is_gzip_name(paths[0]);
  // A cache entry is voxpipe's own, rebuilt at will: only a file the user names is protected.
  if (!options.output.empty())
    check_overwrite(options.output, overwrite);
  else if (!options.to_cache && !is_object_url(paths[0]))  // an object's sidecar is replaced
    check_overwrite(gz::sidecar_path(nifti ? open_nifti(paths[0]).data_path : paths[0]), overwrite);
  Progress progress(err, progress_mode, err_is_terminal, 1, "voxpipe index", "bytes");
  progress.show();
  options.progress = [&progress](std::uint64_t done, std::uint64_t total) {
    progress.expect(total);
    progress.at(done);
  };
  const GzipIndexSummary s =
      nifti ? build_nifti_gzip_index(paths[0], options) : build_gzip_index(paths[0], options);
  progress.end();
  char line[256];
  std::snprintf(line, sizeof line, "%llu points, index %.1f MiB for %.1f MiB of data (%.1f MiB compressed)",
                static_cast<unsigned long long>(s.points), s.index_bytes / 1048576.0,
                s.uncompressed_size / 1048576.0, s.compressed_size / 1048576.0);
  out << "wrote " << s.index_path << ": " << line << "\n";
  return 0;
}

}  // namespace voxpipe::cli
