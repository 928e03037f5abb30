#include <unistd.h>

#include <iostream>

#include "commands.hpp"

int main(int argc, char** argv) {
  voxpipe::cli::install_signal_handlers();
  std::vector<std::string> args(argv + 1, argv + argc);
  return voxpipe::cli::run(args, std::cout, std::cerr, isatty(STDERR_FILENO) == 1);
}
