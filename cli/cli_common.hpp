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

// The exit code of an error of kind `c`.
int exit_code(ErrorCode c);

// voxpipe bench-load (bench_load.cpp). The progress bar is drawn only when `err_is_terminal`.
int cmd_bench_load(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                   bool err_is_terminal);

}  // namespace voxpipe::cli
