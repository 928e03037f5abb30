#include <limits.h>
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "commands.hpp"
#include "voxpipe/remote.hpp"

namespace {

// The program of a C++ build (pip's `voxpipe` runs the commands inside Python instead:
// cli/python_launcher.py). Objects named by URLs are read through voxpipe's Python package
// (obstore signs the requests and finds the credentials), and Zarr stores through its `zarr`
// package: a command given one runs in $VOXPIPE_PYTHON, else the python3 next to this program
// (a virtual environment's bin/), as `python3 -c 'kPythonWithoutCwd; voxpipe.__main__.main()'
// ARGS...`, never `-m`, which would import a voxpipe.py or numpy.py from the folder the command
// runs in. Returns only when there is no such Python; the command then says how to read URLs.
constexpr const char* kRunInPython =
    "from voxpipe.__main__ import main\n"
    "sys.exit(main())\n";

void run_in_python_for_urls(const std::vector<std::string>& args) {
  bool url = false;
  for (const std::string& a : args)
    url = url || voxpipe::is_object_url(a) || voxpipe::is_zarr_path(a);
  if (!url) return;
  std::string python;
  if (const char* p = std::getenv("VOXPIPE_PYTHON"); p && *p) {
    python = p;
  } else {
    char self[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return;
    std::string dir(self, static_cast<std::size_t>(n));
    dir.resize(dir.rfind('/') + 1);
    python = dir + "python3";
  }
  if (::access(python.c_str(), X_OK) != 0) return;
  // sys.argv[1:] are ARGS: `python -c CODE A B` gives sys.argv == ['-c', 'A', 'B'].
  std::vector<std::string> argv_s{python, "-c",
                                  std::string(voxpipe::cli::kPythonWithoutCwd) + kRunInPython};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  ::execv(python.c_str(), argv.data());  // returns only on failure
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  run_in_python_for_urls(args);
  voxpipe::cli::install_signal_handlers();
  return voxpipe::cli::run(args, std::cout, std::cerr, isatty(STDERR_FILENO) == 1);
}
