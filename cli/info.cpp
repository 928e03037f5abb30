// voxpipe info: each FILE's header as nibabel reads it, in full, as one JSON line, or as one row
// of the nib-ls table. NIfTI files and stores here; DICOM files and folders in info_dicom.cpp.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "cli_common.hpp"
#include "commands.hpp"
#include "info.hpp"
#include "inputs.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/remote.hpp"

namespace voxpipe::cli {

namespace info {

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

std::string affine_json(const std::array<double, 16>& affine) {
  std::string o = "[";
  for (int r = 0; r < 4; ++r)
    o += (r ? ", " : "") + tuple(std::vector<double>(affine.begin() + 4 * r, affine.begin() + 4 * r + 4), true);
  return o + "]";
}

std::string json_strings(const std::vector<std::string>& items) {
  std::string o = "[";
  for (std::size_t i = 0; i < items.size(); ++i) o += (i ? ", " : "") + json_str(items[i]);
  return o + "]";
}

std::string zooms_text(const std::vector<double>& z) { return z.empty() ? "-" : shape_text(z); }

std::string scaling_text(double slope, double inter) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "*%.3g%+.3g", slope, inter);
  return buf;
}

namespace {

const char* const kInfoUsage =
    "usage: voxpipe info FILE... [--json] [--long | --brief]\n"
    "\n"
    "Prints each FILE's header as nibabel reads it. NIfTI-1/2 (.nii, .nii.gz, .hdr/.img pairs):\n"
    "format, byte order and compression, shape, dtype, zooms, units (xyzt_units, with nibabel's\n"
    "unit names), scale factors, qform and sform codes, the affine (nibabel's img.affine: sform,\n"
    "else qform, else the fallback), where the data lies, descrip, extensions, and each header\n"
    "field nibabel fixes on load (\"fixed:\" lines). DICOM (\"DICM\" at byte 128, or a .dcm\n"
    "name): transfer syntax, UIDs, the image pixel module, geometry, rescale and where the pixel\n"
    "data lies. A folder of DICOM files (FILE may be one): its series as dcm2nii finds them, each\n"
    "as the image dcm2nii writes (number, description, images, shape, dtype, zooms, scaling).\n"
    "A NIfTI-Zarr store (.nii.zarr): its header, codec, levels and chunks. The byte order is also\n"
    "given as nibabel's endianness ('<', '>'), as nib-ls shows it in its dtype column.\n"
    "\n"
    "One FILE is described in full; several get one aligned line each, as nibabel's nib-ls:\n"
    "path, dtype ('>i2' for big-endian data), shape, zooms, scaling (*slope+inter), #exts: N,\n"
    "sform and qform codes (the modality for DICOM), format; a DICOM folder gets a line per series.\n"
    "\n"
    "  --json            one JSON object per FILE, one per line (JSON Lines), with every field\n"
    "                    of the full form (\"format\": \"NIfTI-1\", \"NIfTI-2\", \"DICOM\" or, one\n"
    "                    per series of a folder, \"DICOM series\"; \"endianness\", \"extension_count\";\n"
    "                    fixes as \"warnings\")\n"
    "  -l, --long        the full form for every FILE, even several\n"
    "  --brief           the one-line form, even for one FILE\n"
    "\n"
    "Only the header is read: a file whose data is short or corrupt is still described. A FILE\n"
    "that cannot be read gets its error line on stderr and the others are still described. Exit\n"
    "status: 0, or the code of the first FILE that failed (docs/exit_codes.md): 3 for a missing\n"
    "FILE, 5 for one that is neither NIfTI nor DICOM (nor a DICOM or NIfTI-Zarr folder), 6 for\n"
    "Analyze 7.5, MGH/MGZ and MINC files, which nibabel reads (named with the nibabel.load call).\n";

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

// nibabel's names of the xyzt_units codes (nibabel.nifti1.unit_codes), as get_xyzt_units gives
// them: the space unit in bits 0-2, the time unit in bits 3-5.
std::pair<const char*, const char*> xyzt_unit_names(std::int32_t code) {
  const char* space = "unknown";
  switch (code & 0x07) {
    case 1: space = "meter"; break;
    case 2: space = "mm"; break;
    case 3: space = "micron"; break;
  }
  const char* time = "unknown";
  switch (code & 0x38) {
    case 8: time = "sec"; break;
    case 16: time = "msec"; break;
    case 24: time = "usec"; break;
    case 32: time = "hz"; break;
    case 40: time = "ppm"; break;
    case 48: time = "rads"; break;
  }
  return {space, time};
}

// How the image at `path` is stored, for info: its data's compression (gzip or none for a file)
// and, for a NIfTI-Zarr store (which open_nifti reads as an uncompressed .nii), the store's own
// description as its handler gives it: the chunks' codec as the store's metadata name it on the
// first line, then "key=value" lines (zarr_format, levels, chunks and shards in NIfTI's axis
// order, "x,y,z[,t]").
struct Storage {
  std::string compression;
  bool store = false;
  std::string zarr_format, levels, chunks, shards;
};

Storage storage_of(const std::string& path, const NiftiImage& img) {
  Storage st;
  st.compression = img.data_compression == Compression::gzip ? "gzip" : "none";
  if (!is_zarr_path(path)) return st;
  const UrlHandlers& handlers = url_handlers();
  if (!handlers.zarr_compression) return st;
  st.store = true;
  std::istringstream lines(handlers.zarr_compression(path));
  std::getline(lines, st.compression);
  for (std::string line; std::getline(lines, line);) {
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "zarr_format") st.zarr_format = value;
    else if (key == "levels") st.levels = value;
    else if (key == "chunks") st.chunks = value;
    else if (key == "shards") st.shards = value;
  }
  return st;
}

// "16,14,5" as a JSON array or a text tuple; null or "" when empty.
std::string sizes(const std::string& csv, bool json) {
  if (csv.empty()) return json ? "null" : "";
  std::string o = json ? "[" : "(";
  for (char c : csv) o += c == ',' ? std::string(", ") : std::string(1, c);
  return o + (json ? "]" : ")");
}

void info_nifti(const std::string& path, const NiftiImage& img, bool json, std::ostream& out) {
  const NiftiHeader& h = img.header;
  const Storage st = storage_of(path, img);
  const std::string storage = st.store ? "NIfTI-Zarr store"
                              : img.header_path == img.data_path ? "single file" : "pair";
  const std::string& compression = st.compression;
  // nibabel's header.endianness, which nib-ls shows in its dtype column ('>i2').
  const char* endianness = h.big_endian ? ">" : "<";
  const auto [space_unit, time_unit] = xyzt_unit_names(h.xyzt_units);
  if (json) {
    out << "{\"path\": " << json_str(path);
    out << ", \"format\": \"NIfTI-" << h.version << "\"";
    out << ", \"header_path\": " << json_str(img.header_path);
    out << ", \"data_path\": " << json_str(img.data_path);
    out << ", \"version\": " << h.version;
    out << ", \"storage\": " << json_str(storage);
    out << ", \"compression\": " << json_str(compression);
    out << ", \"byte_order\": " << json_str(h.big_endian ? "big" : "little");
    out << ", \"endianness\": " << json_str(endianness);
    out << ", \"shape\": " << tuple(img.shape, true);
    out << ", \"dtype\": " << json_str(std::string(dtype_name(img.dtype)));
    out << ", \"zooms\": " << tuple(zooms(img), true);
    out << ", \"xyzt_units\": {\"code\": " << h.xyzt_units << ", \"space\": " << json_str(space_unit)
        << ", \"time\": " << json_str(time_unit) << "}";
    out << ", \"scl_slope\": " << json_num(img.scaling.slope);
    out << ", \"scl_inter\": " << json_num(img.scaling.inter);
    out << ", \"scaled\": " << (img.scaling.active() ? "true" : "false");
    out << ", \"qform_code\": " << h.qform_code;
    out << ", \"sform_code\": " << h.sform_code;
    out << ", \"affine\": " << affine_json(img.affine);
    out << ", \"vox_offset\": " << img.data_offset;
    out << ", \"data_bytes\": " << img.data_bytes();
    out << ", \"intent_code\": " << h.intent_code;
    out << ", \"descrip\": " << json_str(cstr(h.descrip));
    out << ", \"extensions\": [";
    for (std::size_t i = 0; i < img.extensions.size(); ++i)
      out << (i ? ", " : "") << "{\"code\": " << img.extensions[i].code
          << ", \"size\": " << img.extensions[i].content.size() << "}";
    out << "], \"extension_count\": " << img.extensions.size();
    if (st.store)
      out << ", \"zarr\": {\"zarr_format\": " << (st.zarr_format.empty() ? "null" : st.zarr_format)
          << ", \"levels\": " << (st.levels.empty() ? "null" : st.levels)
          << ", \"chunks\": " << sizes(st.chunks, true) << ", \"shards\": " << sizes(st.shards, true)
          << "}";
    out << ", \"warnings\": " << json_strings(img.warnings) << "}\n";
    return;
  }
  out << "file:        " << path << "\n";
  if (img.header_path != img.data_path) out << "data file:   " << img.data_path << "\n";
  out << "format:      NIfTI-" << h.version;
  if (st.store) {
    out << " in a NIfTI-Zarr store (";
    if (!st.zarr_format.empty()) out << "Zarr v" << st.zarr_format << ", ";
    out << (st.levels.empty() ? "?" : st.levels) << (st.levels == "1" ? " level" : " levels") << ")";
  } else {
    out << ", " << storage;
  }
  out << ", " << (h.big_endian ? "big" : "little") << "-endian (" << endianness << "), compression "
      << compression << "\n";
  out << "shape:       " << tuple(img.shape, false) << "\n";
  out << "dtype:       " << dtype_name(img.dtype) << "\n";
  out << "zooms:       " << tuple(zooms(img), false) << "\n";
  out << "units:       " << space_unit << ", " << time_unit << " (xyzt_units " << h.xyzt_units << ")\n";
  if (img.scaling.active())
    out << "scaling:     slope " << num(img.scaling.slope) << ", inter " << num(img.scaling.inter)
        << " (values read as " << dtype_name(scaled_dtype(img.dtype, img.scaling, path)) << ")\n";
  else
    out << "scaling:     none\n";
  out << "qform_code:  " << h.qform_code << " (" << xform_name(h.qform_code) << ")\n";
  out << "sform_code:  " << h.sform_code << " (" << xform_name(h.sform_code) << ")\n";
  out << "affine:";
  for (int r = 0; r < 4; ++r) {
    out << (r ? "             " : "      ") << "[";
    for (int c = 0; c < 4; ++c) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%12.6g", img.affine[r * 4 + c]);
      out << buf;
    }
    out << " ]\n";
  }
  if (st.store) {
    // Chunks of the finest level, not bytes of a file.
    out << "data:        " << img.data_bytes() << " bytes";
    if (!st.chunks.empty()) out << " in chunks of " << sizes(st.chunks, false);
    if (!st.shards.empty()) out << ", shards of " << sizes(st.shards, false);
    out << "\n";
  } else {
    out << "data:        " << img.data_bytes() << " bytes at offset " << img.data_offset << "\n";
  }
  if (!cstr(h.descrip).empty()) out << "descrip:     " << cstr(h.descrip) << "\n";
  out << "extensions:  " << img.extensions.size();
  for (const auto& e : img.extensions) out << " [code " << e.code << ", " << e.content.size() << " bytes]";
  out << "\n";
  for (const auto& w : img.warnings) out << "fixed:       " << w << "\n";
}

// ---- the row of a NIfTI file

InfoRow nifti_row(const std::string& path, const NiftiImage& img) {
  const NiftiHeader& h = img.header;
  std::string format = "NIfTI-" + std::to_string(h.version);
  if (is_zarr_path(path))
    format += " zarr";
  else if (img.header_path != img.data_path)
    format += " pair";
  if (img.data_compression == Compression::gzip) format += " gz";
  // nib-ls's dtype column is numpy's str() of the header's dtype: its name in native (little-
  // endian) order, '>i2', '>f4', ... in big-endian order; and "#exts: N" when there are any.
  std::string dtype(dtype_name(img.dtype));
  if (h.big_endian && dtype_component_size(img.dtype) > 1 && !dtype_is_rgb(img.dtype)) {
    const char kind = dtype_is_complex(img.dtype) ? 'c'
                      : dtype_is_float(img.dtype) ? 'f'
                      : dtype.front() == 'u'      ? 'u'
                                                  : 'i';
    dtype = ">" + std::string(1, kind) + std::to_string(dtype_size(img.dtype));
  }
  return {path,
          dtype,
          tuple(img.shape, true),
          zooms_text(zooms(img)),
          img.scaling.active() ? scaling_text(img.scaling.slope, img.scaling.inter) : "",
          img.extensions.empty() ? "" : "#exts: " + std::to_string(img.extensions.size()),
          "sform " + std::to_string(h.sform_code) + " qform " + std::to_string(h.qform_code),
          format};
}

// Columns padded to their widest cell, two spaces apart; a column empty on every line is left out.
void print_rows(const std::vector<InfoRow>& rows, std::ostream& out) {
  std::vector<std::size_t> width;
  for (const auto& r : rows)
    for (std::size_t c = 0; c < r.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], r[c].size());
    }
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t c = 0; c < r.size(); ++c) {
      if (!width[c]) continue;
      if (!line.empty()) line += "  ";
      line += r[c] + std::string(width[c] - r[c].size(), ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

}  // namespace

}  // namespace info

int cmd_info(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  using namespace info;
  std::vector<std::string> paths;
  bool json = false;
  std::optional<bool> long_form;
  OptionParser parser("voxpipe info", kInfoUsage, out, err);
  parser.flag("--json", json)
      .flag({"-l", "--long"}, [&] { long_form = true; })
      .flag("--brief", [&] { long_form = false; })
      .positionals(paths, 1, SIZE_MAX, "expected FILE")
      .lone_dash_is_positional();
  if (const auto code = parser.parse(args)) return *code;
  // One FILE: the detailed form; several: one line each, as nib-ls.
  const bool detailed = long_form.value_or(paths.size() == 1);
  std::vector<InfoRow> rows;
  int code = 0;
  bool block_written = false;
  for (const std::string& path : paths) {
    // Each file's output is complete before it is written, so that a failing file leaves no
    // half of its block in the output.
    std::ostringstream one;
    try {
      if (is_local_folder(path)) {
        info_dicom_folder(path, scan_folder(path), json, detailed, one, rows);
      } else if (is_dicom_file(path)) {
        const DicomFile f = read_dicom(path);
        if (json || detailed)
          info_dicom(path, f, json, one);
        else
          rows.push_back(dicom_row(path, f));
      } else {
        const NiftiImage img = open_input(path);
        if (json || detailed)
          info_nifti(path, img, json, one);
        else
          rows.push_back(nifti_row(path, img));
      }
    } catch (const Error& e) {
      // As bench-load: go on with the next file; the first failure decides the exit code.
      out << std::flush;
      err << "voxpipe info: error (" << error_code_name(e.code()) << "): " << e.what() << "\n";
      if (!code) code = exit_code(e.code());
      continue;
    }
    if (detailed && !json && block_written) out << "\n";
    out << one.str() << std::flush;
    block_written = true;
  }
  print_rows(rows, out);
  return code;
}

}  // namespace voxpipe::cli
