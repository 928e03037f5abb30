// What the subcommands share, and the ones that live in their own files.
#pragma once

#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "voxpipe/error.hpp"

namespace voxpipe::cli {

// Exit codes: docs/exit_codes.md.
inline constexpr int kUsage = 2;
inline constexpr int kInternal = 1;

// Some inputs could not be converted; the others were (dcm2nii).
inline constexpr int kPartial = 11;

// An output exists and --overwrite was not given (check_overwrite).
inline constexpr int kExists = 12;

// The first lines of every `python -c CODE` the command runs (main.cpp's hand-off of URLs and
// stores, bench-load's nibabel child). `-c` (as `-m`) puts the current folder first on sys.path,
// so that a numpy.py or voxpipe.py in the user's data folder would be imported in place of the
// installed one; these lines take that entry off before anything else is imported (`sys` is
// built in; `site` ran before the entry was added). Not `python -I`: it would also drop
// PYTHONPATH and the user's site-packages, where voxpipe itself may be installed.
inline constexpr const char* kPythonWithoutCwd =
    "import sys\nif sys.path[:1] == ['']: del sys.path[0]\n";

// The version of this build (project(VERSION) in CMakeLists.txt), e.g. "0.1.0".
const char* version();

// `voxpipe --version`: the version on the first line, then what this build can do.
void print_version(std::ostream& out);

// ---- The overwrite rule, one for every command that writes a file the user names: an output
// that exists is refused, before any work, unless --overwrite (or its alias --force) was given.
// Outputs appear only once complete (written beside, then renamed), so replacing one is safe.

// The error check_overwrite throws; run() reports it as
// "voxpipe CMD: error (exists): PATH: already exists (--overwrite replaces it)" and exits with
// kExists. dcm2nii catches it to skip the one series instead.
class OutputExists : public std::runtime_error {
 public:
  explicit OutputExists(const std::string& path)
      : std::runtime_error(path + ": already exists (--overwrite replaces it)"), path_(path) {}
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

// Whether `arg` is the flag that lifts the rule: --overwrite or --force.
bool is_overwrite_flag(const std::string& arg);

// Throws OutputExists when `path` names an existing directory entry (a dangling symlink too:
// the rename would replace it) and !overwrite.
void check_overwrite(const std::string& path, bool overwrite);

// check_overwrite for each file that write_nifti(path) writes: both files of a .hdr/.img pair.
void check_nifti_overwrite(const std::string& path, bool overwrite);

// The exit code of an error of kind `c`.
int exit_code(ErrorCode c);

// `s` as a JSON string literal, quotes included; bytes outside printable ASCII are escaped as
// \u00XX (each byte read as Latin-1).
std::string json_str(const std::string& s);

// voxpipe bench-load (bench_load.cpp). `err_is_terminal`: whether stderr is a terminal, where
// --progress auto draws the bar (progress.hpp).
int cmd_bench_load(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                   bool err_is_terminal);

// voxpipe dcm2nii (dcm2nii.cpp). `err_is_terminal`: whether stderr is a terminal, where
// --progress auto draws the bar (progress.hpp).
int cmd_dcm2nii(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                bool err_is_terminal);

// voxpipe resample (resample.cpp). `err_is_terminal`: whether stderr is a terminal, where
// --progress auto draws the bar (progress.hpp).
int cmd_resample(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                 bool err_is_terminal);

// voxpipe view (view.cpp).
int cmd_view(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace voxpipe::cli
