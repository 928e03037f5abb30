// What the subcommands share: exit codes, the overwrite rule, JSON strings, number and shape
// formats, and the one option parser.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "progress.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"

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

// Throws OutputExists when `path` names an existing directory entry (a dangling symlink too:
// the rename would replace it) and !overwrite. A URL `path` names an object (or, ending in
// .zarr, a store), asked of the Python package (UrlHandlers::exists).
void check_overwrite(const std::string& path, bool overwrite);

// check_overwrite for each file that write_nifti(path) writes: both files of a .hdr/.img pair.
void check_nifti_overwrite(const std::string& path, bool overwrite);

// Outputs named by URLs (s3://, gs://, az://): written first into a local temporary folder, as
// local outputs are written, then uploaded by the Python package (UrlHandlers::upload: each
// object visible only once complete, a large one as a parallel multipart upload aborted on
// failure). `prefix` is the URL of a folder ("s3://b/derived/"); local(name) is the local path
// that becomes prefix + name; upload() sends every file written there (a .hdr last, after its
// .img) and removes each once sent. The folder goes when this is destroyed, whatever happened.
// Disk: the outputs not yet uploaded; memory: the uploads' parts in flight.
class StagedUpload {
 public:
  explicit StagedUpload(std::string prefix);
  ~StagedUpload();
  StagedUpload(const StagedUpload&) = delete;
  StagedUpload& operator=(const StagedUpload&) = delete;

  // The local path of the output prefix + name (name: a file name, or a relative path).
  std::string local(const std::string& name) const;
  // Uploads the files written so far. Without `overwrite`, an object another writer created
  // since check_overwrite is OutputExists (that object untouched). Throws Error(unsupported)
  // without the Python package's handlers, Error(io) for a failed upload.
  void upload(bool overwrite);

 private:
  std::string prefix_;
  std::string folder_;
};

// (the URL of the folder of the object `url`, with its "/", the object's name): "s3://b/d/x.nii"
// -> ("s3://b/d/", "x.nii").
std::pair<std::string, std::string> split_object_url(const std::string& url);

// write_nifti to `out`; for the URL of a single-file output (.nii, .nii.gz), the bytes stream
// into an upload as they are written (UrlHandlers::open_upload: parts go up while the next are
// compressed, in bounded memory, and the object appears whole at the end), a .hdr/.img pair
// through StagedUpload. `max_size`: at most how many bytes the output has (0: unknown), which
// lets the upload choose how to create the object. Without `overwrite`, an object another
// writer created since check_overwrite is OutputExists.
void write_nifti_output(const std::string& out, bool overwrite, const NiftiHeader& header,
                        const std::vector<NiftiExtension>& extensions,
                        const DataProducer& producer, const WriteOptions& options,
                        std::uint64_t max_size);

// Where a command writes its output `out`: `out` itself, or for a URL the local file of
// `staged` (constructed here) that StagedUpload::upload() then sends to it.
std::string output_target(const std::string& out, std::optional<StagedUpload>& staged);

// Writes `text` to `path` whole or not at all: under a unique temporary name beside it (created
// exclusively, removed on failure or when the command is interrupted), then renamed into place
// (core::AtomicOutputFile, as write_nifti writes images). Throws Error(io).
void write_text_file(const std::string& path, const std::string& text);

// The exit code of an error of kind `c`.
int exit_code(ErrorCode c);

// `s` as a JSON string literal, quotes included; bytes outside printable ASCII are escaped as
// \u00XX (each byte read as Latin-1).
std::string json_str(const std::string& s);

// ---- Numbers as the commands print them.

// `v` with `decimals` digits after the point ("%.*f"): times, sizes in MB.
std::string fixed(double v, int decimals);

// The shortest text that reads back as `v` (JSON and file names); "null" for NaN and inf.
std::string shortest(double v);

// A shape as its sizes joined by 'x', "64x64x40"; floating-point values (zooms) with two
// decimals, "1.50x2.00x2.50", as nib-ls prints them. "" when `sizes` is empty.
template <class T>
std::string shape_text(const std::vector<T>& sizes) {
  std::string o;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (i) o += 'x';
    if constexpr (std::is_floating_point_v<T>) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(sizes[i]));
      o += buf;
    } else {
      o += std::to_string(sizes[i]);
    }
  }
  return o;
}

// ---- The option parser of every command. A command declares its options (the name or names,
// whether it takes a value, where that value goes) and its positionals; parse() then walks the
// arguments once, in order:
//   -h or --help prints the usage on `out` and ends the command with 0 (an error in an earlier
//     argument ends it first);
//   an option that takes a value takes the next argument, whatever it is ("-o -h" names the file
//     "-h"); "--name=value" is not a form the commands know;
//   a missing value: "COMMAND: OPTION needs a value", exit kUsage, followed by the usage where
//     the command asks for it (usage_after_missing_value);
//   a value the option's handler refuses: "COMMAND: MESSAGE" (usually expects(): "--level
//     expects 0..9, but received 12"), exit kUsage;
//   an unknown option (an argument starting with '-', but for "" and, where the command says so,
//     a lone "-"): "COMMAND: unknown option ARG" and the usage, exit kUsage;
//   anything else is a positional; after the last argument, a count outside the declared range
//     is "COMMAND: MESSAGE" and the usage, exit kUsage.
// Errors go to `err`; a handler may also throw Error, which the command's caller reports.

// "OPTION expects WHAT, but received VALUE": the message of a refused value.
std::string expects(std::string_view option, std::string_view what, std::string_view value);

// `value` as a whole decimal number in lo..hi (strtol's syntax); nullopt otherwise.
std::optional<long> integer_in(const std::string& value, long lo, long hi);

// The names of one option: "--json", or {"-l", "--long"}.
struct OptionNames {
  OptionNames(const char* name) : list{name} {}  // NOLINT: one name reads as itself
  OptionNames(std::initializer_list<const char*> names) : list(names.begin(), names.end()) {}
  std::vector<std::string> list;
};

class OptionParser {
 public:
  // Takes an option's value: returns "" when taken, else the whole message of the usage error.
  using ValueHandler = std::function<std::string(const std::string& value)>;
  // Takes a positional: returns "" when taken, else the message (the usage follows it).
  using PositionalHandler = std::function<std::string(const std::string& arg)>;

  // `command` as messages name it ("voxpipe convert"); `usage`, the text of -h.
  OptionParser(std::string command, const char* usage, std::ostream& out, std::ostream& err)
      : command_(std::move(command)), usage_(usage), out_(out), err_(err) {}

  // An option without a value: sets `target`, or runs `action`.
  OptionParser& flag(OptionNames names, bool& target);
  OptionParser& flag(OptionNames names, std::function<void()> action);
  // The flag that lifts the overwrite rule: --overwrite, or its alias --force.
  OptionParser& overwrite(bool& target);
  // An option with a value: stored as is, or given to `handler`.
  OptionParser& value(OptionNames names, std::string& target);
  OptionParser& value(OptionNames names, std::optional<std::string>& target);
  OptionParser& value(OptionNames names, ValueHandler handler);
  // A whole number in lo..hi, else "OPTION expects LO..HI, but received V". `T` is an integer
  // type or std::optional of one.
  template <class T>
  OptionParser& integer(const char* name, long lo, long hi, T& target) {
    return value(name, [name, lo, hi, &target](const std::string& v) -> std::string {
      const std::optional<long> n = integer_in(v, lo, hi);
      if (!n) return expects(name, std::to_string(lo) + ".." + std::to_string(hi), v);
      if constexpr (std::is_integral_v<T>)
        target = static_cast<T>(*n);
      else
        target = static_cast<typename T::value_type>(*n);
      return "";
    });
  }
  // --progress M of the long commands: auto, bar, log or none (progress.hpp). Its missing value
  // is "--progress needs a value (auto, bar, log or none)", without the usage.
  OptionParser& progress(ProgressMode& mode);

  // The positionals, collected into `into`; fewer than `min` or more than `max` (SIZE_MAX: no
  // limit) is "COMMAND: MESSAGE" and the usage.
  OptionParser& positionals(std::vector<std::string>& into, std::size_t min = 0,
                            std::size_t max = std::numeric_limits<std::size_t>::max(),
                            std::string message = "");
  // Or each positional given to `handler` as it comes.
  OptionParser& positionals(PositionalHandler handler);

  // A missing value is followed by the usage too.
  OptionParser& usage_after_missing_value() {
    usage_after_missing_value_ = true;
    return *this;
  }
  // A lone "-" is a positional, not an unknown option.
  OptionParser& lone_dash_is_positional() {
    lone_dash_is_positional_ = true;
    return *this;
  }

  // Walks `args`. nullopt: go on with the command; else the exit code to end it with now (0
  // after --help, kUsage after an error, written on `err`).
  std::optional<int> parse(const std::vector<std::string>& args);

  // "COMMAND: MESSAGE" and the usage on `err`; returns kUsage.
  int usage_error(std::string_view message) const;
  // "COMMAND: MESSAGE" on `err`; returns kUsage.
  int error(std::string_view message) const;

 private:
  struct Option {
    std::vector<std::string> names;
    bool takes_value = false;
    std::function<void()> action;  // a flag's
    ValueHandler handler;          // a value's
    std::string missing;           // the message of a missing value; "" for the usual one
  };
  const Option* find(const std::string& arg) const;

  std::string command_;
  const char* usage_;
  std::ostream& out_;
  std::ostream& err_;
  std::vector<Option> options_;
  PositionalHandler positional_;
  std::vector<std::string>* positionals_ = nullptr;
  std::size_t min_positionals_ = 0, max_positionals_ = std::numeric_limits<std::size_t>::max();
  std::string count_message_;
  bool usage_after_missing_value_ = false;
  bool lone_dash_is_positional_ = false;
};

}  // namespace voxpipe::cli
