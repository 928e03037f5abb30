// What the subcommands share, and the ones that live in their own files.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "voxpipe/error.hpp"

namespace voxpipe::cli {

// Exit codes: docs/exit_codes.md.
inline constexpr int kUsage = 2;
inline constexpr int kInternal = 1;

// Some inputs could not be converted; the others were (dcm2nii).
inline constexpr int kPartial = 11;

// The exit code of an error of kind `c`.
int exit_code(ErrorCode c);

// `s` as a JSON string literal, quotes included; bytes outside printable ASCII are escaped as
// \u00XX (each byte read as Latin-1).
std::string json_str(const std::string& s);

// voxpipe bench-load (bench_load.cpp). The progress bar is drawn only when `err_is_terminal`.
int cmd_bench_load(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                   bool err_is_terminal);

// voxpipe dcm2nii (dcm2nii.cpp). The progress bar is drawn only when `err_is_terminal`.
int cmd_dcm2nii(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                bool err_is_terminal);

// voxpipe resample (resample.cpp). The progress bar is drawn only when `err_is_terminal`.
int cmd_resample(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                 bool err_is_terminal);

}  // namespace voxpipe::cli
