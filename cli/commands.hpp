// The voxpipe command line as a function, so that tests can call it without a process.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace voxpipe::cli {

// Runs `voxpipe ARGS...` (args excludes the program name) and returns the exit code
// (docs/exit_codes.md). Output goes to `out`, diagnostics to `err`. Progress bars (convert,
// index, resample, dcm2nii, bench-load) are drawn on `err` only when `err_is_terminal`, so that
// logs and tests get none.
int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
        bool err_is_terminal = false);

// For the program only (not for tests calling run): on SIGINT, SIGTERM and SIGHUP, remove the
// temporary files of the outputs being written and end by that signal. Signals the caller
// ignores stay ignored. SIGXFSZ (a write past `ulimit -f`) is ignored, so that the write fails
// with EFBIG, an io error, and its temporary is removed.
void install_signal_handlers();

}  // namespace voxpipe::cli
