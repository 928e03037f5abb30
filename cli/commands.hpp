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

// ---- The commands run() dispatches to, a file each. `err_is_terminal`: whether stderr is a
// terminal, where --progress auto draws the bar (progress.hpp).

// voxpipe info (info.cpp).
int cmd_info(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// voxpipe convert (convert.cpp).
int cmd_convert(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                bool err_is_terminal);

// voxpipe index (index.cpp).
int cmd_index(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
              bool err_is_terminal);

// voxpipe bench-load (bench_load.cpp).
int cmd_bench_load(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                   bool err_is_terminal);

// voxpipe dcm2nii (dcm2nii.cpp).
int cmd_dcm2nii(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                bool err_is_terminal);

// voxpipe dcm2niix: dcm2niix's command line, its output lines and exit codes (dcm2niix.cpp).
// `written`, when given, receives the file name (without extension) of each series converted,
// in order (vp.dicom.to_nifti).
int cmd_dcm2niix(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                 std::vector<std::string>* written = nullptr);

// voxpipe resample (resample.cpp).
int cmd_resample(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                 bool err_is_terminal);

// voxpipe clean: leftovers of writers to object storage that died (clean.cpp).
int cmd_clean(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// voxpipe view (view.cpp).
int cmd_view(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace voxpipe::cli
