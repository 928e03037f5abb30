// voxpipe clean: what writers to object storage that died left under a prefix (temporary
// objects, incomplete NIfTI-Zarr stores, unfinished multipart uploads), listed and removed
// through the Python package (UrlHandlers::clean; voxpipe/_sources/upload.py).
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "commands.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/remote.hpp"

namespace voxpipe::cli {

namespace {

const char* const kCleanUsage =
    "usage: voxpipe clean URL [--older-than D] [--dry-run]\n"
    "\n"
    "Removes what writers to object storage that ended before finishing (killed, crashed, lost\n"
    "their network) left under the prefix URL (s3://bucket/derived/): the temporary objects of\n"
    "uploads that must not replace an object (NAME.voxpipe-upload-HEX), NIfTI-Zarr stores whose\n"
    "writing never finished (a STORE.voxpipe-incomplete marker beside them, their objects), and\n"
    "on S3 multipart uploads never completed nor aborted (hidden parts, billed; listed through\n"
    "boto3 where it is installed). Complete objects and stores are never touched.\n"
    "\n"
    "  --older-than D   only what is older than D (default 1h): a writer at work now keeps its\n"
    "                   own; D is a number of seconds, or with a unit s, m, h or d (90m, 2d)\n"
    "  --dry-run        list what would be removed, remove nothing\n"
    "\n"
    "Prints one line per thing removed (or that would be). Exit status: 0, or the code of the\n"
    "error (docs/exit_codes.md).\n";

// Seconds of D ("3600", "90m", "1.5h", "2d"); nullopt for anything else.
std::optional<double> duration_seconds(const std::string& v) {
  if (v.empty()) return std::nullopt;
  double unit = 1;
  std::string number = v;
  switch (v.back()) {
    case 's': unit = 1; number.pop_back(); break;
    case 'm': unit = 60; number.pop_back(); break;
    case 'h': unit = 3600; number.pop_back(); break;
    case 'd': unit = 86400; number.pop_back(); break;
    default: break;
  }
  if (number.empty()) return std::nullopt;
  std::size_t used = 0;
  double x = 0;
  try {
    x = std::stod(number, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != number.size() || !std::isfinite(x) || x < 0) return std::nullopt;
  return x * unit;
}

}  // namespace

int cmd_clean(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::vector<std::string> urls;
  bool dry_run = false;
  double older_than = 3600;
  OptionParser parser("voxpipe clean", kCleanUsage, out, err);
  parser.flag("--dry-run", dry_run).positionals(urls, 1, 1, "expected one URL");
  parser.value("--older-than", [&older_than](const std::string& v) {
    const std::optional<double> s = duration_seconds(v);
    if (!s) return expects("--older-than", "a duration (3600, 90m, 1h, 2d)", v);
    older_than = *s;
    return std::string();
  });
  if (const auto code = parser.parse(args)) return *code;
  if (!is_object_url(urls[0]))
    return parser.error(expects("URL", "a prefix on object storage (s3://, gs://, az://)", urls[0]));
  const UrlHandlers& handlers = url_handlers();
  if (!handlers.clean)
    throw Error(ErrorCode::unsupported, urls[0], "",
                "object storage is reached through voxpipe's Python package (pip install "
                "'voxpipe[s3]'; from the shell: python -m voxpipe ...)");
  const std::vector<std::string> lines = handlers.clean(urls[0], older_than, dry_run);
  for (const std::string& line : lines) out << line << "\n";
  if (lines.empty()) out << "voxpipe clean: nothing to remove under " << urls[0] << "\n";
  return 0;
}

}  // namespace voxpipe::cli
