#include "commands.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "cli_common.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/gzip.hpp"
#include "voxpipe/nifti.hpp"

namespace voxpipe::cli {

int exit_code(ErrorCode c) {
  switch (c) {
    case ErrorCode::not_found: return 3;
    case ErrorCode::io: return 4;
    case ErrorCode::format: return 5;
    case ErrorCode::unsupported: return 6;
    case ErrorCode::truncated: return 7;
    case ErrorCode::corrupt: return 8;
    case ErrorCode::limit: return 9;
    case ErrorCode::invalid_argument: return 10;
  }
  return kInternal;
}

static const char* const kUsageText =
    "usage: voxpipe <command> [options]\n"
    "\n"
    "commands:\n"
    "  info FILE [--json]       header summary: shape, dtype, zooms, affine, scaling, codes,\n"
    "                           extensions, storage\n"
    "  convert IN OUT [--dtype T] [--level N] [--layout L] [--threads N]\n"
    "                           rewrite IN as OUT (.nii, .nii.gz, .hdr/.img); --dtype float32 or\n"
    "                           float64 stores the scaled values, otherwise the stored values and\n"
    "                           scale factors are kept; --level is the gzip level (0-9, default 1);\n"
    "                           --layout members (default: parallel, random access), bgzf, or\n"
    "                           single (one member, as Python's gzip); --threads 0 = all cores\n"
    "  index FILE [--spacing MIB] [--cache] [--fast] [-o OUT]\n"
    "                           build the seek index of a .gz file (GZIDX, as indexed_gzip and\n"
    "                           rapidgzip): FILE.gz.gzidx, or the user cache with --cache; NIfTI\n"
    "                           files get a point at every volume; default spacing 4 MiB;\n"
    "                           --fast: from a parallel inflate, points every ~8 MiB compressed\n"
    "  bench-load FILES... [--threads N] [--io-threads N] [--repeat R] [--dtype float32|native]\n"
    "             [--no-nibabel] [--python PATH]\n"
    "                           load FILES with voxpipe and with nibabel (a child Python) and\n"
    "                           compare: median wall time, files/s, MB/s; see bench-load --help\n";

namespace {

std::string num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      o += '\\';
      o += static_cast<char>(ch);
    } else if (ch < 0x20 || ch >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      o += buf;
    } else {
      o += static_cast<char>(ch);
    }
  }
  return o + "\"";
}

template <std::size_t N>
std::string cstr(const std::array<char, N>& a) {
  return std::string(a.data(), strnlen(a.data(), N));
}

const char* xform_name(int code) {
  static const char* names[] = {"unknown", "scanner", "aligned", "talairach", "mni", "template"};
  return code >= 0 && code <= 5 ? names[code] : "invalid";
}

std::vector<double> zooms(const NiftiImage& img) {
  std::vector<double> z;
  const std::size_t n = img.shape.size();
  for (std::size_t i = 0; i < n && i < 7; ++i) z.push_back(img.header.pixdim[i + 1]);
  return z;
}

template <class T>
std::string tuple(const std::vector<T>& v, bool json) {
  std::ostringstream o;
  o << (json ? "[" : "(");
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) o << ", ";
    if constexpr (std::is_floating_point_v<T>)
      o << (json ? json_num(v[i]) : num(v[i]));
    else
      o << v[i];
  }
  if (!json && v.size() == 1) o << ",";
  o << (json ? "]" : ")");
  return o.str();
}

int cmd_info(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::optional<std::string> path;
  bool json = false;
  for (const auto& a : args) {
    if (a == "--json")
      json = true;
    else if (!a.empty() && a[0] == '-') {
      err << "voxpipe info: unknown option " << a << "\n" << kUsageText;
      return kUsage;
    } else if (!path) {
      path = a;
    } else {
      err << "voxpipe info: expected one FILE\n" << kUsageText;
      return kUsage;
    }
  }
  if (!path) {
    err << "voxpipe info: expected FILE\n" << kUsageText;
    return kUsage;
  }
  NiftiImage img = open_nifti(*path);
  const NiftiHeader& h = img.header;
  const std::string storage = img.header_path == img.data_path ? "single file" : "pair";
  const std::string compression = img.data_compression == Compression::gzip ? "gzip" : "none";
  std::vector<double> affine(img.affine.begin(), img.affine.end());
  if (json) {
    out << "{\n";
    out << "  \"path\": " << json_str(*path) << ",\n";
    out << "  \"header_path\": " << json_str(img.header_path) << ",\n";
    out << "  \"data_path\": " << json_str(img.data_path) << ",\n";
    out << "  \"version\": " << h.version << ",\n";
    out << "  \"storage\": " << json_str(storage) << ",\n";
    out << "  \"compression\": " << json_str(compression) << ",\n";
    out << "  \"byte_order\": " << json_str(h.big_endian ? "big" : "little") << ",\n";
    out << "  \"shape\": " << tuple(img.shape, true) << ",\n";
    out << "  \"dtype\": " << json_str(std::string(dtype_name(img.dtype))) << ",\n";
    out << "  \"zooms\": " << tuple(zooms(img), true) << ",\n";
    out << "  \"scl_slope\": " << json_num(img.scaling.slope) << ",\n";
    out << "  \"scl_inter\": " << json_num(img.scaling.inter) << ",\n";
    out << "  \"scaled\": " << (img.scaling.active() ? "true" : "false") << ",\n";
    out << "  \"qform_code\": " << h.qform_code << ",\n";
    out << "  \"sform_code\": " << h.sform_code << ",\n";
    out << "  \"affine\": [";
    for (int r = 0; r < 4; ++r) {
      out << (r ? ", " : "") << tuple(std::vector<double>(affine.begin() + 4 * r, affine.begin() + 4 * r + 4), true);
    }
    out << "],\n";
    out << "  \"vox_offset\": " << img.data_offset << ",\n";
    out << "  \"data_bytes\": " << img.data_bytes() << ",\n";
    out << "  \"intent_code\": " << h.intent_code << ",\n";
    out << "  \"descrip\": " << json_str(cstr(h.descrip)) << ",\n";
    out << "  \"extensions\": [";
    for (std::size_t i = 0; i < img.extensions.size(); ++i)
      out << (i ? ", " : "") << "{\"code\": " << img.extensions[i].code
          << ", \"size\": " << img.extensions[i].content.size() << "}";
    out << "],\n";
    out << "  \"warnings\": [";
    for (std::size_t i = 0; i < img.warnings.size(); ++i) out << (i ? ", " : "") << json_str(img.warnings[i]);
    out << "]\n}\n";
    return 0;
  }
  out << "file:        " << *path << "\n";
  if (img.header_path != img.data_path) out << "data file:   " << img.data_path << "\n";
  out << "format:      NIfTI-" << h.version << ", " << storage << ", "
      << (h.big_endian ? "big" : "little") << "-endian, compression " << compression << "\n";
  out << "shape:       " << tuple(img.shape, false) << "\n";
  out << "dtype:       " << dtype_name(img.dtype) << "\n";
  out << "zooms:       " << tuple(zooms(img), false) << "\n";
  if (img.scaling.active())
    out << "scaling:     slope " << num(img.scaling.slope) << ", inter " << num(img.scaling.inter)
        << " (values read as " << dtype_name(scaled_dtype(img.dtype, img.scaling, *path)) << ")\n";
  else
    out << "scaling:     none\n";
  out << "qform_code:  " << h.qform_code << " (" << xform_name(h.qform_code) << ")\n";
  out << "sform_code:  " << h.sform_code << " (" << xform_name(h.sform_code) << ")\n";
  out << "affine:";
  for (int r = 0; r < 4; ++r) {
    out << (r ? "             " : "      ") << "[";
    for (int c = 0; c < 4; ++c) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%12.6g", affine[r * 4 + c]);
      out << buf;
    }
    out << " ]\n";
  }
  out << "data:        " << img.data_bytes() << " bytes at offset " << img.data_offset << "\n";
  if (!cstr(h.descrip).empty()) out << "descrip:     " << cstr(h.descrip) << "\n";
  out << "extensions:  " << img.extensions.size();
  for (const auto& e : img.extensions) out << " [code " << e.code << ", " << e.content.size() << " bytes]";
  out << "\n";
  for (const auto& w : img.warnings) out << "fixed:       " << w << "\n";
  return 0;
}

int cmd_convert(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::vector<std::string> paths;
  std::optional<DType> dtype;
  int level = 1;
  GzipLayout layout = GzipLayout::members;
  unsigned threads = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--dtype" || a == "--level" || a == "--layout" || a == "--threads") {
      if (i + 1 >= args.size()) {
        err << "voxpipe convert: " << a << " needs a value\n";
        return kUsage;
      }
      const std::string v = args[++i];
      if (a == "--dtype") {
        dtype = dtype_from_name(v);
        if (!dtype) {
          err << "voxpipe convert: unknown dtype " << v << "\n";
          return kUsage;
        }
      } else if (a == "--layout") {
        if (v == "members") {
          layout = GzipLayout::members;
        } else if (v == "bgzf") {
          layout = GzipLayout::bgzf;
        } else if (v == "single") {
          layout = GzipLayout::single;
        } else {
          err << "voxpipe convert: --layout expects members, bgzf or single, but received " << v << "\n";
          return kUsage;
        }
      } else {
        const bool is_level = a == "--level";
        char* end = nullptr;
        long l = std::strtol(v.c_str(), &end, 10);
        if (v.empty() || *end || l < 0 || l > (is_level ? 9 : 1024)) {
          err << "voxpipe convert: " << a << " expects " << (is_level ? "0..9" : "0..1024")
              << ", but received " << v << "\n";
          return kUsage;
        }
        if (is_level)
          level = static_cast<int>(l);
        else
          threads = static_cast<unsigned>(l);
      }
    } else if (!a.empty() && a[0] == '-') {
      err << "voxpipe convert: unknown option " << a << "\n" << kUsageText;
      return kUsage;
    } else {
      paths.push_back(a);
    }
  }
  if (paths.size() != 2) {
    err << "voxpipe convert: expected IN and OUT\n" << kUsageText;
    return kUsage;
  }
  NiftiImage img = open_nifti(paths[0]);
  check_data_size(img);
  NiftiHeader h = img.header;
  OutputSpec spec;
  if (!dtype || *dtype == img.dtype) {
    // Keep the stored values, their byte order and the scale factors: lossless.
    spec = OutputSpec{img.dtype, false, true, false};
    h.scl_slope = img.scaling.slope;
    h.scl_inter = img.scaling.inter;
  } else {
    if (!dtype_is_float(*dtype) && !(dtype_is_complex(*dtype) && dtype_is_complex(img.dtype))) {
      err << "voxpipe convert: --dtype " << dtype_name(*dtype)
          << " needs new scale factors; only float32/float64 (or complex) outputs are supported\n";
      return kUsage;
    }
    spec = OutputSpec{*dtype, true, false, false};
    if (!conversion_supported(img.dtype, spec)) {
      err << "voxpipe convert: cannot convert " << dtype_name(img.dtype) << " to "
          << dtype_name(*dtype) << "\n";
      return kUsage;
    }
    h.datatype = static_cast<std::int16_t>(nifti_datatype_code(*dtype));
    h.bitpix = static_cast<std::int16_t>(8 * dtype_size(*dtype));
    h.scl_slope = 1.0;
    h.scl_inter = 0.0;
    h.big_endian = std::endian::native == std::endian::big;
  }
  h.vox_offset = 0;  // the writer places the data right after the extensions
  // Stream slab by slab along the last axis, so memory stays near one slab (~64 MiB).
  const std::size_t ndim = img.shape.size();
  const std::uint64_t out_item = dtype_size(spec.type);
  std::uint64_t slab_bytes = out_item;
  for (std::size_t k = 0; k + 1 < ndim; ++k) slab_bytes *= static_cast<std::uint64_t>(img.shape[k]);
  const std::int64_t last = ndim ? img.shape[ndim - 1] : 0;
  const std::int64_t per = std::max<std::int64_t>(1, static_cast<std::int64_t>((64u << 20) / std::max<std::uint64_t>(slab_bytes, 1)));
  NiftiReader reader(img);
  std::vector<std::byte> slab;
  std::size_t slab_pos = 0;
  std::int64_t next = 0;
  DataProducer producer = [&](std::span<std::byte> buffer) -> std::size_t {
    if (slab_pos == slab.size()) {
      if (next >= last || img.voxel_count() == 0) return 0;
      const std::int64_t n = std::min(per, last - next);
      std::vector<AxisRange> sel;
      for (std::size_t k = 0; k + 1 < ndim; ++k) sel.push_back({0, 1, img.shape[k]});
      sel.push_back({next, 1, n});
      slab.resize(slab_bytes * static_cast<std::uint64_t>(n));
      reader.read(sel, spec, slab, ReadOptions{threads});
      next += n;
      slab_pos = 0;
    }
    std::size_t k = std::min(buffer.size(), slab.size() - slab_pos);
    std::memcpy(buffer.data(), slab.data() + slab_pos, k);
    slab_pos += k;
    return k;
  };
  write_nifti(paths[1], h, img.extensions, producer, WriteOptions{level, layout, threads});
  out << "wrote " << paths[1] << "\n";
  return 0;
}


}  // namespace

int cmd_index(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::vector<std::string> paths;
  GzipIndexOptions options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--spacing" || a == "-o") {
      if (i + 1 >= args.size()) {
        err << "voxpipe index: " << a << " needs a value\n";
        return kUsage;
      }
      const std::string v = args[++i];
      if (a == "-o") {
        options.output = v;
        continue;
      }
      char* end = nullptr;
      const double mib = std::strtod(v.c_str(), &end);
      if (v.empty() || *end || !(mib >= 0) || mib > 1 << 20) {
        err << "voxpipe index: --spacing expects MiB >= 0, but received " << v << "\n";
        return kUsage;
      }
      options.spacing = static_cast<std::uint64_t>(mib * (1 << 20));
    } else if (a == "--cache") {
      options.to_cache = true;
    } else if (a == "--fast") {
      options.exact = false;
    } else if (!a.empty() && a[0] == '-') {
      err << "voxpipe index: unknown option " << a << "\n" << kUsageText;
      return kUsage;
    } else {
      paths.push_back(a);
    }
  }
  if (paths.size() != 1) {
    err << "voxpipe index: expected one FILE\n" << kUsageText;
    return kUsage;
  }
  const GzipIndexSummary s = nifti_is_gzip_name(paths[0]) ? build_nifti_gzip_index(paths[0], options)
                                                     : build_gzip_index(paths[0], options);
  char line[256];
  std::snprintf(line, sizeof line, "%llu points, index %.1f MiB for %.1f MiB of data (%.1f MiB compressed)",
                static_cast<unsigned long long>(s.points), s.index_bytes / 1048576.0,
                s.uncompressed_size / 1048576.0, s.compressed_size / 1048576.0);
  out << "wrote " << s.index_path << ": " << line << "\n";
  return 0;
}

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
        bool err_is_terminal) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    (args.empty() ? err : out) << kUsageText;
    return args.empty() ? kUsage : 0;
  }
  const std::string cmd = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  try {
    if (cmd == "info") return cmd_info(rest, out, err);
    if (cmd == "convert") return cmd_convert(rest, out, err);
    if (cmd == "index") return cmd_index(rest, out, err);
    if (cmd == "bench-load") return cmd_bench_load(rest, out, err, err_is_terminal);
    err << "voxpipe: unknown command " << cmd << "\n" << kUsageText;
    return kUsage;
  } catch (const Error& e) {
    err << "voxpipe " << cmd << ": error (" << error_code_name(e.code()) << "): " << e.what() << "\n";
    return exit_code(e.code());
  } catch (const std::exception& e) {
    err << "voxpipe " << cmd << ": internal error: " << e.what() << "\n";
    return kInternal;
  }
}

}  // namespace voxpipe::cli
