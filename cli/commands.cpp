// The voxpipe command line: the usage of `voxpipe`, run() dispatching to the commands (a file
// each, commands.hpp), and the signal handlers of the program.
#include "commands.hpp"

#include <csignal>

#include "cli_common.hpp"
#include "core/file.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::cli {

static const char* const kUsageText =
    "usage: voxpipe <command> [options]\n"
    "       voxpipe --version | -V\n"
    "\n"
    "commands:\n"
    "  info FILE... [--json] [--long | --brief]\n"
    "                           header summary: shape, dtype, zooms, units, affine, scaling,\n"
    "                           codes, extensions, storage; for DICOM (\"DICM\" at byte 128, or\n"
    "                           .dcm): transfer syntax, UIDs, image pixel module, geometry,\n"
    "                           rescale, where the pixel data lies; a DICOM folder: its series\n"
    "                           (as dcm2nii finds them); several FILEs: one line each (as\n"
    "                           nib-ls), --json: one JSON object per line; see info --help\n"
    "  convert IN OUT [--dtype T] [--level N] [--layout L] [--threads N] [--overwrite]\n"
    "                           rewrite IN (NIfTI, or a folder of one DICOM series) as OUT (.nii,\n"
    "                           .nii.gz, .hdr/.img, .nii.zarr); --dtype float32 or\n"
    "                           float64 stores the scaled values, otherwise the stored values and\n"
    "                           scale factors are kept; --level is the gzip level (0-9, default 1);\n"
    "                           --layout members (default: parallel, random access), bgzf, or\n"
    "                           single (one member, as Python's gzip); see convert --help\n"
    "  index FILE [--spacing MIB] [--cache] [--fast] [--threads N] [-o OUT] [--overwrite]\n"
    "                           build the seek index of a .gz file (GZIDX, as indexed_gzip and\n"
    "                           rapidgzip): FILE.gz.gzidx, or the user cache with --cache; NIfTI\n"
    "                           files get a point at every volume; default spacing 4 MiB;\n"
    "                           --fast: from a parallel inflate, points every ~8 MiB compressed;\n"
    "                           see index --help\n"
    "  bench-load FILES... [--threads N] [--io-threads N] [--repeat R] [--dtype float32|native]\n"
    "             [--no-nibabel] [--python PATH]\n"
    "                           load FILES with voxpipe and with nibabel (a child Python) and\n"
    "                           compare: median wall time, files/s, MB/s; see bench-load --help\n"
    "  dcm2nii INPUT... -o OUT_DIR [-f FORMAT] [-z y|n] [--float32] [--overwrite] [--threads N]\n"
    "                           convert DICOM series (files or folders, searched recursively) to\n"
    "                           NIfTI-1 (.nii.gz) with a BIDS-style JSON sidecar, as dcm2niix;\n"
    "                           see dcm2nii --help\n"
    "  resample MOVING --reference REF [--affine X | --affines LIST | --warp FIELD] -o OUT\n"
    "           [--order 3] [--mode constant] [--dtype float32] [--threads N] [--memory-limit SIZE]\n"
    "           [--overwrite]\n"
    "                           resample a 3-D/4-D series onto REF's grid volume by volume,\n"
    "                           streamed to OUT; see resample --help\n"
    "  view INPUT... [-o OUT.png] [--volume T] [--mosaic] [--overwrite]\n"
    "                           PNG of a NIfTI image or DICOM series: three orthogonal slices\n"
    "                           (or an axial mosaic), RAS-labelled; see view --help\n"
    "  clean URL [--older-than D] [--dry-run]\n"
    "                           remove what interrupted writes to object storage left under URL\n"
    "                           (temporary objects, incomplete stores, unfinished multipart\n"
    "                           uploads); see clean --help\n"
    "\n"
    "--threads 0, every command's default, means $VOXPIPE_NUM_THREADS, else $OMP_NUM_THREADS\n"
    "(its first number), else the CPUs this process may run on (taskset, cgroup cpusets).\n"
    "A command that writes refuses an existing output (exit 12) unless given --overwrite (or\n"
    "--force). OUT may be a URL (s3://, gs://, az://): written, then uploaded, visible only once\n"
    "complete. Long commands (convert, index, bench-load, dcm2nii, resample) report progress on\n"
    "stderr as --progress says: auto (default: a bar on a terminal, else a line every 5 s once\n"
    "the command has run that long), bar, log or none. Exit codes: docs/exit_codes.md;\n"
    "reference: docs/cli.md.\n";

namespace {
// Removes the temporaries of the outputs being written, then ends the process by the same signal
// with its default action, so that the parent sees how it ended (a shell prints 128 + N). The
// destinations are untouched: an output replaces its destination only once complete.
// A signal that arrived while an output was being streamed (an upload): re-raised by run() once
// the command has returned, its uploads aborted. 0: none.
volatile std::sig_atomic_t g_pending_signal = 0;

extern "C" void discard_outputs_and_reraise(int sig) {
  core::discard_unfinished_outputs();
  if (core::interrupt_streams()) {
    // The writing thread fails at its next write and aborts its upload (a second signal ends
    // the process at once: SA_RESETHAND restored the default action).
    g_pending_signal = sig;
    return;
  }
  ::raise(sig);  // SA_RESETHAND restored the default action; delivered when the handler returns
}

// run()'s result, after re-raising a signal that interrupted a streamed output.
int end_by_pending_signal(int code) {
  if (const int sig = g_pending_signal) ::raise(sig);
  return code;
}
}  // namespace

void install_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = discard_outputs_and_reraise;
  action.sa_flags = SA_RESETHAND;
  ::sigemptyset(&action.sa_mask);
  const int signals[] = {SIGINT, SIGTERM, SIGHUP};
  for (int sig : signals) ::sigaddset(&action.sa_mask, sig);
  for (int sig : signals) {
    // A signal the caller ignores stays ignored (nohup, SIGINT of a background job), as gzip does.
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler != SIG_IGN)
      ::sigaction(sig, &action, nullptr);
  }
  // A write past `ulimit -f` raises SIGXFSZ, whose default action kills the process at once and
  // leaves the temporary. Ignored, the write fails with EFBIG instead: an io error that names
  // the output, and the writer removes its temporary (Python ignores it at start-up for the
  // same reason).
  ::signal(SIGXFSZ, SIG_IGN);
}

namespace {
int run_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                bool err_is_terminal);
}  // namespace

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
        bool err_is_terminal) {
  const int code = run_command(args, out, err, err_is_terminal);
  out.flush();
  return end_by_pending_signal(code);
}

namespace {
int run_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                bool err_is_terminal) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    (args.empty() ? err : out) << kUsageText;
    return args.empty() ? kUsage : 0;
  }
  if (args[0] == "--version" || args[0] == "-V") {
    print_version(out);
    return 0;
  }
  const std::string cmd = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  try {
    if (cmd == "info") return cmd_info(rest, out, err);
    if (cmd == "convert") return cmd_convert(rest, out, err, err_is_terminal);
    if (cmd == "index") return cmd_index(rest, out, err, err_is_terminal);
    if (cmd == "bench-load") return cmd_bench_load(rest, out, err, err_is_terminal);
    if (cmd == "dcm2nii") return cmd_dcm2nii(rest, out, err, err_is_terminal);
    if (cmd == "dcm2niix") return cmd_dcm2niix(rest, out, err);
    if (cmd == "resample") return cmd_resample(rest, out, err, err_is_terminal);
    if (cmd == "view") return cmd_view(rest, out, err);
    if (cmd == "clean") return cmd_clean(rest, out, err);
    err << "voxpipe: unknown command " << cmd << "\n" << kUsageText;
    return kUsage;
  } catch (const OutputExists& e) {
    err << "voxpipe " << cmd << ": error (exists): " << e.what() << "\n";
    return kExists;
  } catch (const Error& e) {
    err << "voxpipe " << cmd << ": error (" << error_code_name(e.code()) << "): " << e.what() << "\n";
    return exit_code(e.code());
  } catch (const std::exception& e) {
    err << "voxpipe " << cmd << ": internal error: " << e.what() << "\n";
    return kInternal;
  }
}
}  // namespace

}  // namespace voxpipe::cli
