// The nibabel side of `voxpipe bench-load`: the same files loaded by nibabel in a child Python,
// one at a time, as people use it, timed there over the same rounds.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "progress.hpp"

namespace voxpipe::cli {

struct NibabelRun {
  std::string unavailable;  // why there are no figures; empty when there are
  std::string version, python_version;
  std::vector<double> rounds;                       // seconds, successful files only
  std::vector<std::pair<std::size_t, std::string>> errors;  // index into the files given, message
};

// The Python to run nibabel with: --python, $VOXPIPE_PYTHON (which the command pip installs sets
// to the Python it runs in, when unset), `python` beside this executable (a C++ build installed
// into a venv's bin/), else python3 on PATH.
std::string find_python(const std::optional<std::string>& given);

// Runs the nibabel script in a child process over `paths`, `repeat` rounds (`native`: the
// stored dtype, else float32), and collects its figures; `progress` ticks once per file loaded
// when `show_progress`. Nothing here is an error of the command: a missing Python, a missing
// nibabel or a failed child come back as `unavailable`.
NibabelRun run_nibabel(const std::string& python, const std::vector<std::string>& paths, int repeat,
                       bool native, Progress& progress, bool show_progress);

}  // namespace voxpipe::cli
