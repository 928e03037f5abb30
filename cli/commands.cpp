#include "commands.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <sstream>

#include "cli_common.hpp"
#include "foreign_formats.hpp"
#include "series_nifti.hpp"
#include "core/file.hpp"
#include "gz/seek_index.hpp"
#include "nifti/internal.hpp"
#include "progress.hpp"
#include "voxpipe/dicom.hpp"
#include "voxpipe/dicom_series.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/gzip.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/remote.hpp"
#include "voxpipe/threads.hpp"

namespace voxpipe::cli {

static const char* const kUsageText =
    "usage: voxpipe <command> [options]\n"
    "       voxpipe --version | -V\n"
    "\n"
    "commands:\n"
    "  info FILE... [--json] [--long | --brief]\n"
    "                           header summary: shape, dtype, zooms, units, affine, scaling,\n"
    "                           codes, extensions, storage; for DICOM (\"DICM\" at byte 128, or\n"
    "                           .dcm): transfer syntax, UIDs, image pixel module, geometry,\n"
    "                           rescale, where the pixel data lies; a DICOM folder: its series\n"
    "                           (as dcm2nii finds them); several FILEs: one line each (as\n"
    "                           nib-ls), --json: one JSON object per line; see info --help\n"
    "  convert IN OUT [--dtype T] [--level N] [--layout L] [--threads N] [--overwrite]\n"
    "                           rewrite IN (NIfTI, or a folder of one DICOM series) as OUT (.nii,\n"
    "                           .nii.gz, .hdr/.img, .nii.zarr); --dtype float32 or\n"
    "                           float64 stores the scaled values, otherwise the stored values and\n"
    "                           scale factors are kept; --level is the gzip level (0-9, default 1);\n"
    "                           --layout members (default: parallel, random access), bgzf, or\n"
    "                           single (one member, as Python's gzip); see convert --help\n"
    "  index FILE [--spacing MIB] [--cache] [--fast] [--threads N] [-o OUT] [--overwrite]\n"
    "                           build the seek index of a .gz file (GZIDX, as indexed_gzip and\n"
    "                           rapidgzip): FILE.gz.gzidx, or the user cache with --cache; NIfTI\n"
    "                           files get a point at every volume; default spacing 4 MiB;\n"
    "                           --fast: from a parallel inflate, points every ~8 MiB compressed;\n"
    "                           see index --help\n"
    "  bench-load FILES... [--threads N] [--io-threads N] [--repeat R] [--dtype float32|native]\n"
    "             [--no-nibabel] [--python PATH]\n"
    "                           load FILES with voxpipe and with nibabel (a child Python) and\n"
    "                           compare: median wall time, files/s, MB/s; see bench-load --help\n"
    "  dcm2nii INPUT... -o OUT_DIR [-f FORMAT] [-z y|n] [--float32] [--overwrite] [--threads N]\n"
    "                           convert DICOM series (files or folders, searched recursively) to\n"
    "                           NIfTI-1 (.nii.gz) with a BIDS-style JSON sidecar, as dcm2niix;\n"
    "                           see dcm2nii --help\n"
    "  resample MOVING --reference REF [--affine X | --affines LIST | --warp FIELD] -o OUT\n"
    "           [--order 3] [--mode constant] [--dtype float32] [--threads N] [--memory-limit SIZE]\n"
    "           [--overwrite]\n"
    "                           resample a 3-D/4-D series onto REF's grid volume by volume,\n"
    "                           streamed to OUT; see resample --help\n"
    "  view INPUT... [-o OUT.png] [--volume T] [--mosaic] [--overwrite]\n"
    "                           PNG of a NIfTI image or DICOM series: three orthogonal slices\n"
    "                           (or an axial mosaic), RAS-labelled; see view --help\n"
    "\n"
    "--threads 0, every command's default, means $VOXPIPE_NUM_THREADS, else $OMP_NUM_THREADS\n"
    "(its first number), else the CPUs this process may run on (taskset, cgroup cpusets).\n"
    "A command that writes refuses an existing output (exit 12) unless given --overwrite (or\n"
    "--force). Long commands (convert, index, bench-load, dcm2nii, resample) report progress on\n"
    "stderr as --progress says: auto (default: a bar on a terminal, else a line every 5 s once\n"
    "the command has run that long), bar, log or none. Exit codes: docs/exit_codes.md;\n"
    "reference: docs/cli.md.\n";

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

const char* const kConvertUsage =
    "usage: voxpipe convert IN OUT [--dtype T] [--level N] [--layout L] [--threads N] [--overwrite]\n"
    "                       [--progress M]\n"
    "       voxpipe convert IN OUT.nii.zarr [--chunks X,Y,Z[,T]] [--shards X,Y,Z[,T]] [--levels N]\n"
    "                       [--codec zstd|blosc|gzip|none] [--zarr-format 3|2] [--dtype T] [--level N]\n"
    "\n"
    "Rewrites the NIfTI image IN as OUT (.nii, .nii.gz, or .hdr/.img by OUT's name), streaming\n"
    "about 64 MiB at a time. The header, affine and extensions are kept. IN may also be a\n"
    "NIfTI-Zarr store (.nii.zarr), and OUT one: Zarr v3 + OME-NGFF 0.5, the header stored as is,\n"
    "written a few volumes at a time. Stores are read and written through voxpipe's Python package\n"
    "(pip install 'voxpipe[zarr]').\n"
    "\n"
    "IN may be a folder of one DICOM series: OUT is then the image `voxpipe dcm2nii` writes of it\n"
    "(no sidecar); --dtype float32/float64 stores the rescaled values. A folder of several series\n"
    "is refused (exit 10): `voxpipe dcm2nii FOLDER -o OUT_DIR` converts each. Analyze, MGH/MGZ\n"
    "and MINC inputs are named, with the nibabel call that reads them (exit 6).\n"
    "\n"
    "  --dtype T         float32 or float64 (complex64/complex128 for complex data): store the\n"
    "                    scaled values, with scl_slope 1 and scl_inter 0. Without it (or with\n"
    "                    IN's own dtype) the stored values, byte order and scale factors are kept:\n"
    "                    the copy is lossless\n"
    "  --level N         gzip level 0-9 (default 1) for a .gz OUT\n"
    "  --layout L        members (default): independent 1 MiB gzip members that any gzip reader\n"
    "                    opens and voxpipe reads in parallel, with random access; bgzf: BGZF\n"
    "                    blocks (64 KiB); single: one member, as Python's gzip writes\n"
    "  --threads N       threads for reading and compressing; 0 (default): $VOXPIPE_NUM_THREADS,\n"
    "                    else $OMP_NUM_THREADS, else the CPUs this process may run on\n"
    "  --overwrite, --force  replace an existing OUT (otherwise refused, exit 12)\n"
    "  --progress M      auto (default), bar, log or none: the progress report on stderr (bytes\n"
    "                    written, rate, ETA; docs/cli.md \"Progress\"); none for a .nii.zarr OUT\n"
    "\n"
    "For a .nii.zarr OUT (docs/zarr.md):\n"
    "  --chunks X,Y,Z[,T] chunk sizes in NIfTI axis order (default: one volume per chunk for\n"
    "                    4D, slabs of whole slices of about 4 MiB for 3D)\n"
    "  --shards X,Y,Z[,T] shard sizes (Zarr v3): several chunks per stored object\n"
    "  --levels N        pyramid levels (default 1: none), each halving x, y and z\n"
    "  --codec C         zstd (default, --level 3), blosc (zstd inside, byte shuffle), gzip, none\n"
    "  --zarr-format V   3 (default; OME-NGFF 0.5) or 2 (OME-NGFF 0.4)\n"
    "\n"
    "OUT appears only once complete (written beside it, then renamed). Exit status: 0, or the\n"
    "code of the error (docs/exit_codes.md).\n";

const char* const kIndexUsage =
    "usage: voxpipe index FILE [--spacing MIB] [--cache] [--fast] [--threads N] [-o OUT] [--overwrite]\n"
    "                     [--progress M]\n"
    "\n"
    "Builds the seek index of the gzip file FILE in the GZIDX format that indexed_gzip and\n"
    "rapidgzip read, so that any byte range inflates from the nearest point instead of the start.\n"
    "A .nii.gz also gets a point at the start of every volume. voxpipe's readers find the index\n"
    "by themselves, and use it only while FILE is unchanged (size, mtime and its last 64 KiB).\n"
    "\n"
    "  --spacing MIB     uncompressed MiB between points (default 4; 0: volume and gzip member\n"
    "                    starts only)\n"
    "  --cache           write to the user cache ($VOXPIPE_CACHE_DIR, $XDG_CACHE_HOME/voxpipe or\n"
    "                    ~/.cache/voxpipe) instead of FILE.gzidx beside FILE; an entry there is\n"
    "                    replaced without --overwrite (it is voxpipe's, not a file you named)\n"
    "  --fast            build from a parallel inflate: points every ~8 MiB of compressed\n"
    "                    data, no volume points\n"
    "  --threads N       threads of the build; 0 (default): $VOXPIPE_NUM_THREADS, else\n"
    "                    $OMP_NUM_THREADS, else the CPUs this process may run on\n"
    "  -o OUT            write the index to OUT\n"
    "  --overwrite, --force  replace an existing FILE.gzidx or OUT (otherwise refused, exit 12)\n"
    "  --progress M      auto (default), bar, log or none: the progress report on stderr (how far\n"
    "                    the build is, in compressed bytes, rate, ETA; docs/cli.md \"Progress\")\n"
    "\n"
    "Exit status: 0, or the code of the error (docs/exit_codes.md).\n";

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

// ---- voxpipe info FILE.dcm

// "DICM" at byte 128 (Part 10), or a .dcm name (files without the preamble).
bool is_dicom_file(const std::string& path) {
  std::string lower = path;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower.size() >= 4 && lower.compare(lower.size() - 4, 4, ".dcm") == 0) return true;
  // Through InputFile, which refuses a FIFO instead of waiting for its writer; the NIfTI reader
  // then reports why the file cannot be read.
  try {
    const core::InputFile f(path);
    char magic[4] = {};
    return f.read_at(128, std::as_writable_bytes(std::span(magic))) == 4 &&
           std::memcmp(magic, "DICM", 4) == 0;
  } catch (const Error&) {
    return false;
  }
}

// pydicom's UID names of the transfer syntaxes; other UIDs are shown as themselves (as pydicom).
std::string transfer_syntax_name(const std::string& uid) {
  static const std::pair<const char*, const char*> names[] = {
      {"1.2.840.10008.1.2", "Implicit VR Little Endian"},
      {"1.2.840.10008.1.2.1", "Explicit VR Little Endian"},
      {"1.2.840.10008.1.2.1.98", "Encapsulated Uncompressed Explicit VR Little Endian"},
      {"1.2.840.10008.1.2.1.99", "Deflated Explicit VR Little Endian"},
      {"1.2.840.10008.1.2.2", "Explicit VR Big Endian"},
      {"1.2.840.10008.1.2.4.50", "JPEG Baseline (Process 1)"},
      {"1.2.840.10008.1.2.4.51", "JPEG Extended (Process 2 and 4)"},
      {"1.2.840.10008.1.2.4.57", "JPEG Lossless, Non-Hierarchical (Process 14)"},
      {"1.2.840.10008.1.2.4.70",
       "JPEG Lossless, Non-Hierarchical, First-Order Prediction (Process 14 [Selection Value 1])"},
      {"1.2.840.10008.1.2.4.80", "JPEG-LS Lossless Image Compression"},
      {"1.2.840.10008.1.2.4.81", "JPEG-LS Lossy (Near-Lossless) Image Compression"},
      {"1.2.840.10008.1.2.4.90", "JPEG 2000 Image Compression (Lossless Only)"},
      {"1.2.840.10008.1.2.4.91", "JPEG 2000 Image Compression"},
      {"1.2.840.10008.1.2.4.92", "JPEG 2000 Part 2 Multi-component Image Compression (Lossless Only)"},
      {"1.2.840.10008.1.2.4.93", "JPEG 2000 Part 2 Multi-component Image Compression"},
      {"1.2.840.10008.1.2.4.94", "JPIP Referenced"},
      {"1.2.840.10008.1.2.4.95", "JPIP Referenced Deflate"},
      {"1.2.840.10008.1.2.4.100", "MPEG2 Main Profile / Main Level"},
      {"1.2.840.10008.1.2.4.101", "MPEG2 Main Profile / High Level"},
      {"1.2.840.10008.1.2.4.102", "MPEG-4 AVC/H.264 High Profile / Level 4.1"},
      {"1.2.840.10008.1.2.4.103", "MPEG-4 AVC/H.264 BD-compatible High Profile / Level 4.1"},
      {"1.2.840.10008.1.2.4.104", "MPEG-4 AVC/H.264 High Profile / Level 4.2 For 2D Video"},
      {"1.2.840.10008.1.2.4.105", "MPEG-4 AVC/H.264 High Profile / Level 4.2 For 3D Video"},
      {"1.2.840.10008.1.2.4.106", "MPEG-4 AVC/H.264 Stereo High Profile / Level 4.2"},
      {"1.2.840.10008.1.2.4.107", "HEVC/H.265 Main Profile / Level 5.1"},
      {"1.2.840.10008.1.2.4.108", "HEVC/H.265 Main 10 Profile / Level 5.1"},
      {"1.2.840.10008.1.2.4.201", "High-Throughput JPEG 2000 Image Compression (Lossless Only)"},
      {"1.2.840.10008.1.2.4.202",
       "High-Throughput JPEG 2000 with RPCL Options Image Compression (Lossless Only)"},
      {"1.2.840.10008.1.2.4.203", "High-Throughput JPEG 2000 Image Compression"},
      {"1.2.840.10008.1.2.5", "RLE Lossless"},
  };
  for (const auto& [u, name] : names)
    if (uid == u) return name;
  return uid;
}

// One field of the summary, read leniently: a value that is not a number shows as missing
// rather than failing the whole command.
struct DicomSummaryField {
  const char* key;    // JSON key
  const char* label;  // text label
  DicomTag tag;
  enum Kind { text, integer, numbers, number } kind;
};

const DicomSummaryField kDicomFields[] = {
    {"sop_class_uid", "SOP class", 0x00080016, DicomSummaryField::text},
    {"sop_instance_uid", "SOP instance", 0x00080018, DicomSummaryField::text},
    {"modality", "modality", 0x00080060, DicomSummaryField::text},
    {"patient_id", "patient ID", 0x00100020, DicomSummaryField::text},
    {"study_instance_uid", "study UID", 0x0020000D, DicomSummaryField::text},
    {"series_instance_uid", "series UID", 0x0020000E, DicomSummaryField::text},
    {"rows", "rows", 0x00280010, DicomSummaryField::integer},
    {"columns", "columns", 0x00280011, DicomSummaryField::integer},
    {"number_of_frames", "frames", 0x00280008, DicomSummaryField::integer},
    {"samples_per_pixel", "samples", 0x00280002, DicomSummaryField::integer},
    {"photometric_interpretation", "photometric", 0x00280004, DicomSummaryField::text},
    {"bits_allocated", "bits allocated", 0x00280100, DicomSummaryField::integer},
    {"bits_stored", "bits stored", 0x00280101, DicomSummaryField::integer},
    {"pixel_representation", "pixel repr.", 0x00280103, DicomSummaryField::integer},
    {"pixel_spacing", "spacing", 0x00280030, DicomSummaryField::numbers},
    {"image_orientation_patient", "orientation", 0x00200037, DicomSummaryField::numbers},
    {"image_position_patient", "position", 0x00200032, DicomSummaryField::numbers},
    {"rescale_slope", "rescale slope", 0x00281053, DicomSummaryField::number},
    {"rescale_intercept", "rescale inter.", 0x00281052, DicomSummaryField::number},
};

// The field's value as JSON (null when missing, empty or not a number) and as text ("" then).
std::pair<std::string, std::string> dicom_field(const DicomDataset& ds, const DicomSummaryField& f) {
  if (!ds.contains(f.tag)) return {"null", ""};
  try {
    switch (f.kind) {
      case DicomSummaryField::text: {
        const std::string v = ds.string(f.tag).value_or("");
        return {json_str(v), v};
      }
      case DicomSummaryField::integer: {
        auto v = ds.integer(f.tag);
        if (!v) break;
        return {std::to_string(*v), std::to_string(*v)};
      }
      case DicomSummaryField::number: {
        auto v = ds.number(f.tag);
        if (!v) break;
        return {json_num(*v), num(*v)};
      }
      case DicomSummaryField::numbers: {
        auto v = ds.numbers(f.tag);
        if (v.empty()) break;
        return {tuple(v, true), tuple(v, false)};
      }
    }
  } catch (const Error&) {
    return {"null", "(not a number)"};
  }
  return {"null", ""};
}

// One file's JSON object on one line (JSON Lines), or its text block.
void info_dicom(const std::string& path, const DicomFile& f, bool json, std::ostream& out) {
  const DicomTransferSyntax& ts = f.transfer_syntax;
  const std::string ts_name = ts.uid.empty() ? "" : transfer_syntax_name(ts.uid);
  const auto& px = f.pixel_data;
  constexpr std::size_t kFragmentsShown = 8;
  if (json) {
    out << "{\"path\": " << json_str(path) << ", \"format\": \"DICOM\""
        << ", \"preamble\": " << (f.has_preamble ? "true" : "false");
    out << ", \"transfer_syntax\": {\"uid\": " << json_str(ts.uid) << ", \"name\": " << json_str(ts_name)
        << ", \"implicit_vr\": " << (f.implicit_vr ? "true" : "false")
        << ", \"big_endian\": " << (f.big_endian ? "true" : "false")
        << ", \"deflated\": " << (ts.deflated ? "true" : "false")
        << ", \"encapsulated\": " << (ts.encapsulated ? "true" : "false") << "}";
    for (const auto& field : kDicomFields)
      out << ", \"" << field.key << "\": " << dicom_field(f.dataset, field).first;
    out << ", \"pixel_data\": ";
    if (!px) {
      out << "null}\n";
      return;
    }
    out << "{\"tag\": " << px->tag << ", \"offset\": " << px->offset << ", \"length\": " << px->length
        << ", \"encapsulated\": " << (px->encapsulated ? "true" : "false")
        << ", \"offsets_in_inflated_stream\": " << (f.offsets_in_inflated_stream ? "true" : "false");
    if (px->encapsulated) {
      out << ", \"fragment_count\": " << px->fragments.size() << ", \"fragments\": [";
      for (std::size_t i = 0; i < px->fragments.size() && i < kFragmentsShown; ++i)
        out << (i ? ", " : "") << "[" << px->fragments[i].offset << ", " << px->fragments[i].length << "]";
      out << "]";
    }
    out << "}}\n";
    return;
  }
  out << "file:            " << path << "\n";
  out << "format:          DICOM" << (f.has_preamble ? "" : " (no preamble)") << "\n";
  out << "transfer syntax: " << (ts.uid.empty() ? "(none)" : ts.uid);
  if (!ts_name.empty() && ts_name != ts.uid) out << " (" << ts_name << ")";
  out << "\n";
  for (const auto& field : kDicomFields) {
    const auto [json_value, text] = dicom_field(f.dataset, field);
    if (json_value == "null" && text.empty()) continue;
    char label[32];
    std::snprintf(label, sizeof label, "%-17s", (std::string(field.label) + ":").c_str());
    out << label << text << "\n";
  }
  out << "pixel data:      ";
  if (!px) {
    out << "none\n";
    return;
  }
  const char* where = f.offsets_in_inflated_stream ? " of the inflated dataset stream" : "";
  if (!px->encapsulated) {
    out << px->length << " bytes at offset " << px->offset << where << "\n";
    return;
  }
  out << "encapsulated, " << px->fragments.size() << " fragment(s), " << px->length
      << " bytes at offset " << px->offset << where << "\n";
  out << "fragments:      ";
  for (std::size_t i = 0; i < px->fragments.size() && i < kFragmentsShown; ++i)
    out << " " << px->fragments[i].offset << " (" << px->fragments[i].length << " bytes)";
  if (px->fragments.size() > kFragmentsShown) out << " ...";
  out << "\n";
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
  std::vector<double> affine(img.affine.begin(), img.affine.end());
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
    out << ", \"affine\": [";
    for (int r = 0; r < 4; ++r)
      out << (r ? ", " : "") << tuple(std::vector<double>(affine.begin() + 4 * r, affine.begin() + 4 * r + 4), true);
    out << "]";
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
    out << ", \"warnings\": [";
    for (std::size_t i = 0; i < img.warnings.size(); ++i) out << (i ? ", " : "") << json_str(img.warnings[i]);
    out << "]}\n";
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
      std::snprintf(buf, sizeof buf, "%12.6g", affine[r * 4 + c]);
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

// ---- the compact line per file (as nibabel's nib-ls): path, dtype, shape, zooms, scaling,
// xform codes, format.

std::string zooms_text(const std::vector<double>& z) { return z.empty() ? "-" : shape_text(z); }

using InfoRow = std::vector<std::string>;

InfoRow nifti_row(const std::string& path, const NiftiImage& img) {
  const NiftiHeader& h = img.header;
  std::string scaling;
  if (img.scaling.active()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "*%.3g%+.3g", img.scaling.slope, img.scaling.inter);
    scaling = buf;
  }
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
          scaling,
          img.extensions.empty() ? "" : "#exts: " + std::to_string(img.extensions.size()),
          "sform " + std::to_string(h.sform_code) + " qform " + std::to_string(h.qform_code),
          format};
}

InfoRow dicom_row(const std::string& path, const DicomFile& f) {
  std::string dtype = "-", shape = "-";
  if (f.pixel_data) {
    try {
      const DicomPixelInfo px = dicom_pixel_info(f);
      dtype = dtype_name(px.dtype);
      shape = tuple(px.shape, true);
    } catch (const Error&) {
      dtype = shape = "?";  // the detailed form (info FILE) says what is wrong
    }
  }
  std::string zoom = "-";
  try {
    if (const auto spacing = f.dataset.numbers(0x00280030); !spacing.empty()) zoom = zooms_text(spacing);
  } catch (const Error&) {
  }
  std::string scaling;
  try {
    const auto slope = f.dataset.number(0x00281053), inter = f.dataset.number(0x00281052);
    if ((slope && *slope != 1) || (inter && *inter != 0)) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "*%.3g%+.3g", slope.value_or(1.0), inter.value_or(0.0));
      scaling = buf;
    }
  } catch (const Error&) {
  }
  const std::string modality = f.dataset.contains(0x00080060) ? f.dataset.string(0x00080060).value_or("") : "";
  return {path, dtype, shape, zoom, scaling, "", modality.empty() ? "-" : modality, "DICOM"};
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

// ---- voxpipe info DIR, voxpipe convert DIR OUT: a folder of DICOM files, scanned into series
// as dcm2nii scans it (scan_dicom_series), each described as the image dcm2nii writes of it.

bool is_local_folder(const std::string& path) {
  if (is_object_url(path) || is_zarr_path(path)) return false;
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

// The series of the folder at `path`. Error(format) when it has none: a folder that is neither
// a DICOM series folder nor a NIfTI-Zarr store (named as the store it may be).
DicomScanResult scan_folder(const std::string& path) {
  DicomScanOptions options;
  options.threads = resolve_threads(0);
  DicomScanResult scan = scan_dicom_series({path}, options);
  if (!scan.series.empty()) return scan;
  std::error_code ec;
  for (const char* meta : {"zarr.json", ".zgroup", ".zattrs", ".zarray"})
    if (std::filesystem::exists(std::filesystem::path(path) / meta, ec))
      throw Error(ErrorCode::format, path, "",
                  std::string("a Zarr store (it holds ") + meta +
                      ") whose name does not end in .zarr: voxpipe knows NIfTI-Zarr stores by "
                      "their name (rename it NAME.nii.zarr)");
  throw Error(ErrorCode::format, path, "",
              "neither a folder of DICOM images (" + std::to_string(scan.skipped.size()) +
                  " files, none a DICOM image) nor a NIfTI-Zarr store (NAME.nii.zarr); info and "
                  "convert take a DICOM series folder, a NIfTI-Zarr store or a NIfTI or DICOM file");
}

std::string series_name(const DicomSeries& s) {
  std::string o = "series " + std::to_string(s.series_number);
  if (!s.series_description.empty()) o += " \"" + s.series_description + "\"";
  if (!s.split.empty()) o += " (" + s.split + ")";
  return o;
}

// Each series of `scan` as JSON Lines, a text block, or nib-ls rows: the image dcm2nii writes of
// it (dtype, shape, zooms, scale factors and affine of its NIfTI header).
void info_dicom_folder(const std::string& path, const DicomScanResult& scan, bool json, bool detailed,
                       std::ostream& out, std::vector<InfoRow>& rows) {
  std::size_t images = 0;
  for (const DicomSeries& s : scan.series) images += s.images.size();
  if (!json && detailed) {
    out << "folder:      " << path << "\n";
    out << "format:      DICOM series folder, " << scan.series.size() << " series, " << images
        << " images";
    if (!scan.skipped.empty()) out << " (" << scan.skipped.size() << " other files)";
    out << "\n";
  }
  for (const DicomSeries& s : scan.series) {
    std::vector<std::string> warnings = s.warnings;
    const NiftiHeader h = dicom_series_header(s, std::nullopt, warnings);
    const DType dtype = *dtype_from_nifti_code(h.datatype);
    std::vector<std::int64_t> shape;
    for (auto d : s.shape()) shape.push_back(static_cast<std::int64_t>(d));
    std::vector<double> zoom;
    for (std::size_t i = 0; i < shape.size(); ++i) zoom.push_back(h.pixdim[i + 1]);
    const bool scaled = h.scl_slope != 1 || h.scl_inter != 0;
    const std::array<double, 16> affine = nifti_sform(h);
    if (json) {
      out << "{\"path\": " << json_str(path) << ", \"format\": \"DICOM series\"";
      out << ", \"series_number\": " << s.series_number;
      out << ", \"series_description\": " << json_str(s.series_description);
      out << ", \"series_instance_uid\": " << json_str(s.series_instance_uid);
      out << ", \"modality\": " << json_str(s.modality);
      out << ", \"split\": " << json_str(s.split);
      out << ", \"images\": " << s.images.size();
      out << ", \"shape\": " << tuple(shape, true);
      out << ", \"dtype\": " << json_str(std::string(dtype_name(dtype)));
      out << ", \"zooms\": " << tuple(zoom, true);
      out << ", \"scl_slope\": " << json_num(h.scl_slope);
      out << ", \"scl_inter\": " << json_num(h.scl_inter);
      out << ", \"scaled\": " << (scaled ? "true" : "false");
      out << ", \"affine\": [";
      for (int r = 0; r < 4; ++r)
        out << (r ? ", " : "")
            << tuple(std::vector<double>(affine.begin() + 4 * r, affine.begin() + 4 * r + 4), true);
      out << "]";
      out << ", \"problem\": " << (s.problem.empty() ? "null" : json_str(s.problem));
      out << ", \"warnings\": [";
      for (std::size_t i = 0; i < warnings.size(); ++i) out << (i ? ", " : "") << json_str(warnings[i]);
      out << "]}\n";
    } else if (detailed) {
      out << series_name(s) << ": " << (s.modality.empty() ? "" : s.modality + ", ") << s.images.size()
          << " images, shape " << tuple(shape, false) << ", " << dtype_name(dtype) << ", zooms "
          << tuple(zoom, false);
      if (scaled) out << ", scl_slope " << num(h.scl_slope) << ", scl_inter " << num(h.scl_inter);
      out << "\n";
      if (!s.problem.empty()) out << "  not convertible: " << s.problem << "\n";
      for (const auto& w : warnings) out << "  warning: " << w << "\n";
    } else {
      std::string scaling;
      if (scaled) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "*%.3g%+.3g", h.scl_slope, h.scl_inter);
        scaling = buf;
      }
      rows.push_back({path, std::string(dtype_name(dtype)), tuple(shape, true), zooms_text(zoom), scaling,
                      "", s.modality.empty() ? "-" : s.modality,
                      "DICOM " + series_name(s) + ", " + std::to_string(s.images.size()) + " images"});
    }
  }
}

// The NIfTI image at `path`, or, when it cannot be opened and is a format voxpipe does not read
// (Analyze, MGH/MGZ, MINC), the error that names that format.
NiftiImage open_input(const std::string& path) {
  try {
    return open_nifti(path);
  } catch (const Error&) {
    if (auto foreign = foreign_format_error(path)) throw *foreign;
    throw;
  }
}

}  // namespace

int cmd_info(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
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

int cmd_convert(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                bool err_is_terminal) {
  std::vector<std::string> paths;
  bool overwrite = false;
  std::optional<DType> dtype;
  int level = 1;
  GzipLayout layout = GzipLayout::members;
  unsigned threads = 0;
  // Options of a NIfTI-Zarr OUT, passed on as given (the writer checks them), and whether the
  // gzip ones were given.
  std::vector<std::pair<std::string, std::string>> zarr_options;
  bool level_given = false, layout_given = false;
  ProgressMode progress_mode = ProgressMode::automatic;
  OptionParser parser("voxpipe convert", kConvertUsage, out, err);
  parser.progress(progress_mode).overwrite(overwrite).positionals(paths, 2, 2, "expected IN and OUT");
  for (const char* option : {"--chunks", "--shards", "--levels", "--codec", "--zarr-format"})
    parser.value(option, [&zarr_options, option](const std::string& v) {
      std::string name = option + 2;
      std::replace(name.begin(), name.end(), '-', '_');
      zarr_options.emplace_back(name, v);
      return std::string();
    });
  parser.value("--dtype", [&dtype](const std::string& v) {
    dtype = dtype_from_name(v);
    return dtype ? std::string() : "unknown dtype " + v;
  });
  parser.value("--layout", [&](const std::string& v) {
    layout_given = true;
    if (v == "members")
      layout = GzipLayout::members;
    else if (v == "bgzf")
      layout = GzipLayout::bgzf;
    else if (v == "single")
      layout = GzipLayout::single;
    else
      return expects("--layout", "members, bgzf or single", v);
    return std::string();
  });
  parser.value("--level", [&](const std::string& v) {
    level_given = true;
    const std::optional<long> l = integer_in(v, 0, 9);
    if (!l) return expects("--level", "0..9", v);
    level = static_cast<int>(*l);
    return std::string();
  });
  parser.integer("--threads", 0, 1024, threads);
  if (const auto code = parser.parse(args)) return *code;
  if (is_zarr_path(paths[1])) {
    if (layout_given) return parser.error("--layout is for .gz outputs, not NIfTI-Zarr");
    check_overwrite(paths[1], overwrite);
    const UrlHandlers& handlers = url_handlers();
    if (!handlers.write_zarr)
      throw Error(ErrorCode::unsupported, paths[1], "",
                  "NIfTI-Zarr stores are written through voxpipe's Python package (pip install "
                  "'voxpipe[zarr]'; from the shell: python -m voxpipe ...)");
    // A format voxpipe does not read is named here, before the store's writer opens it.
    if (!is_object_url(paths[0]) && !is_zarr_path(paths[0]) && !is_local_folder(paths[0]))
      if (auto foreign = foreign_format_error(paths[0])) throw *foreign;
    if (dtype) zarr_options.emplace_back("dtype", std::string(dtype_name(*dtype)));
    if (level_given) zarr_options.emplace_back("level", std::to_string(level));
    zarr_options.emplace_back("threads", std::to_string(threads));
    handlers.write_zarr(paths[0], paths[1], zarr_options);
    out << "wrote " << paths[1] << "\n";
    return 0;
  }
  if (!zarr_options.empty())
    return parser.error("--" + zarr_options.front().first + " is for NIfTI-Zarr outputs (OUT.nii.zarr)");
  if (is_local_folder(paths[0])) {
    // A DICOM series folder: its one series, written as dcm2nii writes it.
    if (dtype && !dtype_is_float(*dtype))
      return parser.error(expects("--dtype for a DICOM folder", "float32 or float64 (the rescaled values)",
                                  dtype_name(*dtype)));
    check_nifti_overwrite(paths[1], overwrite);
    const DicomScanResult scan = scan_folder(paths[0]);
    if (scan.series.size() > 1) {
      std::string names;
      for (std::size_t i = 0; i < scan.series.size() && i < 4; ++i)
        names += (i ? "; " : "") + series_name(scan.series[i]);
      if (scan.series.size() > 4) names += "; ...";
      throw Error(ErrorCode::invalid_argument, paths[0], "",
                  std::to_string(scan.series.size()) + " DICOM series in this folder (" + names +
                      "); convert writes one image: `voxpipe dcm2nii " + paths[0] +
                      " -o OUT_DIR` converts each series (`voxpipe info " + paths[0] +
                      "` lists them)");
    }
    threads = resolve_threads(threads);
    for (const std::string& w : write_dicom_series(scan.series.front(), paths[1], dtype,
                                                   WriteOptions{level, layout, threads}, threads))
      err << "voxpipe convert: warning: " << w << "\n";
    out << "wrote " << paths[1] << "\n";
    return 0;
  }
  check_nifti_overwrite(paths[1], overwrite);
  threads = resolve_threads(threads);  // one count for every read and the write
  NiftiImage img = open_input(paths[0]);
  check_data_size(img);
  NiftiHeader h = img.header;
  OutputSpec spec;
  if (!dtype || *dtype == img.dtype) {
    // Keep the stored values, their byte order and the scale factors: lossless.
    spec = OutputSpec{img.dtype, false, true, false};
    h.scl_slope = img.scaling.slope;
    h.scl_inter = img.scaling.inter;
  } else {
    if (!dtype_is_float(*dtype) && !(dtype_is_complex(*dtype) && dtype_is_complex(img.dtype)))
      return parser.error("--dtype " + std::string(dtype_name(*dtype)) +
                          " needs new scale factors; only float32/float64 (or complex) outputs are "
                          "supported");
    spec = OutputSpec{*dtype, true, false, false};
    if (!conversion_supported(img.dtype, spec))
      return parser.error("cannot convert " + std::string(dtype_name(img.dtype)) + " to " +
                          std::string(dtype_name(*dtype)));
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
  // Counted in output bytes as the writer takes them: a .nii.gz input inflates as it goes.
  Progress progress(err, progress_mode, err_is_terminal, img.voxel_count() * out_item,
                    "voxpipe convert", "bytes");
  progress.show();
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
    progress.tick(k);
    return k;
  };
  write_nifti(paths[1], h, img.extensions, producer, WriteOptions{level, layout, threads});
  progress.end();
  out << "wrote " << paths[1] << "\n";
  return 0;
}

int cmd_index(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
              bool err_is_terminal) {
  std::vector<std::string> paths;
  bool overwrite = false;
  GzipIndexOptions options;
  ProgressMode progress_mode = ProgressMode::automatic;
  OptionParser parser("voxpipe index", kIndexUsage, out, err);
  parser.progress(progress_mode)
      .overwrite(overwrite)
      .flag("--cache", options.to_cache)
      .flag("--fast", [&options] { options.exact = false; })
      .value("-o", options.output)
      .integer("--threads", 0, 1024, options.threads)
      .value("--spacing",
             [&options](const std::string& v) {
               char* end = nullptr;
               const double mib = std::strtod(v.c_str(), &end);
               if (v.empty() || *end || !(mib >= 0) || mib > 1 << 20)
                 return expects("--spacing", "MiB >= 0", v);
               options.spacing = static_cast<std::uint64_t>(mib * (1 << 20));
               return std::string();
             })
      .positionals(paths, 1, 1, "expected one FILE");
  if (const auto code = parser.parse(args)) return *code;
  const bool nifti = nifti_is_gzip_name(paths[0]);
  // A cache entry is voxpipe's own, rebuilt at will: only a file the user names is protected.
  if (!options.output.empty())
    check_overwrite(options.output, overwrite);
  else if (!options.to_cache && !is_object_url(paths[0]))  // an object's sidecar is replaced
    check_overwrite(gz::sidecar_path(nifti ? open_nifti(paths[0]).data_path : paths[0]), overwrite);
  Progress progress(err, progress_mode, err_is_terminal, 1, "voxpipe index", "bytes");
  progress.show();
  options.progress = [&progress](std::uint64_t done, std::uint64_t total) {
    progress.expect(total);
    progress.at(done);
  };
  const GzipIndexSummary s =
      nifti ? build_nifti_gzip_index(paths[0], options) : build_gzip_index(paths[0], options);
  progress.end();
  char line[256];
  std::snprintf(line, sizeof line, "%llu points, index %.1f MiB for %.1f MiB of data (%.1f MiB compressed)",
                static_cast<unsigned long long>(s.points), s.index_bytes / 1048576.0,
                s.uncompressed_size / 1048576.0, s.compressed_size / 1048576.0);
  out << "wrote " << s.index_path << ": " << line << "\n";
  return 0;
}

namespace {
// Removes the temporaries of the outputs being written, then ends the process by the same signal
// with its default action, so that the parent sees how it ended (a shell prints 128 + N). The
// destinations are untouched: an output replaces its destination only once complete.
extern "C" void discard_outputs_and_reraise(int sig) {
  core::discard_unfinished_outputs();
  ::raise(sig);  // SA_RESETHAND restored the default action; delivered when the handler returns
}
}  // namespace

void install_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = discard_outputs_and_reraise;
  action.sa_flags = SA_RESETHAND;
  ::sigemptyset(&action.sa_mask);
  const int signals[] = {SIGINT, SIGTERM, SIGHUP};
  for (int sig : signals) ::sigaddset(&action.sa_mask, sig);
  for (int sig : signals) {
    // A signal the caller ignores stays ignored (nohup, SIGINT of a background job), as gzip does.
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler != SIG_IGN)
      ::sigaction(sig, &action, nullptr);
  }
  // A write past `ulimit -f` raises SIGXFSZ, whose default action kills the process at once and
  // leaves the temporary. Ignored, the write fails with EFBIG instead: an io error that names
  // the output, and the writer removes its temporary (Python ignores it at start-up for the
  // same reason).
  ::signal(SIGXFSZ, SIG_IGN);
}

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
        bool err_is_terminal) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    (args.empty() ? err : out) << kUsageText;
    return args.empty() ? kUsage : 0;
  }
  if (args[0] == "--version" || args[0] == "-V") {
    print_version(out);
    return 0;
  }
  const std::string cmd = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  try {
    if (cmd == "info") return cmd_info(rest, out, err);
    if (cmd == "convert") return cmd_convert(rest, out, err, err_is_terminal);
    if (cmd == "index") return cmd_index(rest, out, err, err_is_terminal);
    if (cmd == "bench-load") return cmd_bench_load(rest, out, err, err_is_terminal);
    if (cmd == "dcm2nii") return cmd_dcm2nii(rest, out, err, err_is_terminal);
    if (cmd == "resample") return cmd_resample(rest, out, err, err_is_terminal);
    if (cmd == "view") return cmd_view(rest, out, err);
    err << "voxpipe: unknown command " << cmd << "\n" << kUsageText;
    return kUsage;
  } catch (const OutputExists& e) {
    err << "voxpipe " << cmd << ": error (exists): " << e.what() << "\n";
    return kExists;
  } catch (const Error& e) {
    err << "voxpipe " << cmd << ": error (" << error_code_name(e.code()) << "): " << e.what() << "\n";
    return exit_code(e.code());
  } catch (const std::exception& e) {
    err << "voxpipe " << cmd << ": internal error: " << e.what() << "\n";
    return kInternal;
  }
}

}  // namespace voxpipe::cli
