// NIfTI-1/2 header decoding, nibabel's load-time checks and fixes, and encoding.
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"

namespace voxpipe {

namespace {

constexpr bool kLittle = std::endian::native == std::endian::little;

// Field access at a byte offset in the file's byte order.
class Fields {
 public:
  Fields(const std::uint8_t* p, bool swap) : p_(p), swap_(swap) {}
  template <class T>
  T get(std::size_t off) const {
    using U = std::conditional_t<sizeof(T) == 1, std::uint8_t,
              std::conditional_t<sizeof(T) == 2, std::uint16_t,
              std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;
    U u;
    std::memcpy(&u, p_ + off, sizeof(U));
    if (swap_) u = swap(u);
    return std::bit_cast<T>(u);
  }
  template <std::size_t N>
  std::array<char, N> chars(std::size_t off) const {
    std::array<char, N> a;
    std::memcpy(a.data(), p_ + off, N);
    return a;
  }

  template <class U>
  static U swap(U u) {
    if constexpr (sizeof(U) == 1) return u;
    if constexpr (sizeof(U) == 2) return __builtin_bswap16(u);
    if constexpr (sizeof(U) == 4) return __builtin_bswap32(u);
    if constexpr (sizeof(U) == 8) return __builtin_bswap64(u);
  }

 private:
  const std::uint8_t* p_;
  bool swap_;
};

class Writer {
 public:
  Writer(std::uint8_t* p, bool swap) : p_(p), swap_(swap) {}
  template <class T>
  void put(std::size_t off, T v) {
    using U = std::conditional_t<sizeof(T) == 1, std::uint8_t,
              std::conditional_t<sizeof(T) == 2, std::uint16_t,
              std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;
    U u = std::bit_cast<U>(v);
    if (swap_) u = Fields::swap(u);
    std::memcpy(p_ + off, &u, sizeof(U));
  }
  template <std::size_t N>
  void chars(std::size_t off, const std::array<char, N>& a) {
    std::memcpy(p_ + off, a.data(), N);
  }

 private:
  std::uint8_t* p_;
  bool swap_;
};

bool is_nifti1_magic(const std::array<char, 4>& m) {
  return m[0] == 'n' && (m[1] == 'i' || m[1] == '+') && m[2] == '1' && m[3] == '\0';
}
bool is_nifti2_magic(const std::array<char, 4>& m) {
  return m[0] == 'n' && (m[1] == 'i' || m[1] == '+') && m[2] == '2' && m[3] == '\0';
}

// NIfTI-2 stores vox_offset as int64; out-of-range doubles are clamped rather than converted
// with undefined behaviour (only hostile headers have them: open_nifti refuses such offsets).
std::int64_t to_int64(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return static_cast<std::int64_t>(v);
}

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void decode_nifti1(const Fields& f, NiftiHeader& h) {
  h.sizeof_hdr = f.get<std::int32_t>(0);
  h.data_type = f.chars<10>(4);
  h.db_name = f.chars<18>(14);
  h.extents = f.get<std::int32_t>(32);
  h.session_error = f.get<std::int16_t>(36);
  h.regular = f.get<char>(38);
  h.dim_info = f.get<std::uint8_t>(39);
  for (int i = 0; i < 8; ++i) h.dim[i] = f.get<std::int16_t>(40 + 2 * i);
  h.intent_p1 = f.get<float>(56);
  h.intent_p2 = f.get<float>(60);
  h.intent_p3 = f.get<float>(64);
  h.intent_code = f.get<std::int16_t>(68);
  h.datatype = f.get<std::int16_t>(70);
  h.bitpix = f.get<std::int16_t>(72);
  h.slice_start = f.get<std::int16_t>(74);
  for (int i = 0; i < 8; ++i) h.pixdim[i] = f.get<float>(76 + 4 * i);
  h.vox_offset = f.get<float>(108);
  h.scl_slope = f.get<float>(112);
  h.scl_inter = f.get<float>(116);
  h.slice_end = f.get<std::int16_t>(120);
  h.slice_code = f.get<std::uint8_t>(122);
  h.xyzt_units = f.get<std::uint8_t>(123);
  h.cal_max = f.get<float>(124);
  h.cal_min = f.get<float>(128);
  h.slice_duration = f.get<float>(132);
  h.toffset = f.get<float>(136);
  h.glmax = f.get<std::int32_t>(140);
  h.glmin = f.get<std::int32_t>(144);
  h.descrip = f.chars<80>(148);
  h.aux_file = f.chars<24>(228);
  h.qform_code = f.get<std::int16_t>(252);
  h.sform_code = f.get<std::int16_t>(254);
  h.quatern_b = f.get<float>(256);
  h.quatern_c = f.get<float>(260);
  h.quatern_d = f.get<float>(264);
  h.qoffset_x = f.get<float>(268);
  h.qoffset_y = f.get<float>(272);
  h.qoffset_z = f.get<float>(276);
  for (int i = 0; i < 4; ++i) {
    h.srow_x[i] = f.get<float>(280 + 4 * i);
    h.srow_y[i] = f.get<float>(296 + 4 * i);
    h.srow_z[i] = f.get<float>(312 + 4 * i);
  }
  h.intent_name = f.chars<16>(328);
  h.magic = f.chars<4>(344);
}

void decode_nifti2(const Fields& f, NiftiHeader& h) {
  h.sizeof_hdr = f.get<std::int32_t>(0);
  h.magic = f.chars<4>(4);
  for (int i = 0; i < 4; ++i) h.eol_check[i] = f.get<std::uint8_t>(8 + i);
  h.datatype = f.get<std::int16_t>(12);
  h.bitpix = f.get<std::int16_t>(14);
  for (int i = 0; i < 8; ++i) h.dim[i] = f.get<std::int64_t>(16 + 8 * i);
  h.intent_p1 = f.get<double>(80);
  h.intent_p2 = f.get<double>(88);
  h.intent_p3 = f.get<double>(96);
  for (int i = 0; i < 8; ++i) h.pixdim[i] = f.get<double>(104 + 8 * i);
  h.vox_offset = static_cast<double>(f.get<std::int64_t>(168));
  h.scl_slope = f.get<double>(176);
  h.scl_inter = f.get<double>(184);
  h.cal_max = f.get<double>(192);
  h.cal_min = f.get<double>(200);
  h.slice_duration = f.get<double>(208);
  h.toffset = f.get<double>(216);
  h.slice_start = f.get<std::int64_t>(224);
  h.slice_end = f.get<std::int64_t>(232);
  h.descrip = f.chars<80>(240);
  h.aux_file = f.chars<24>(320);
  h.qform_code = f.get<std::int32_t>(344);
  h.sform_code = f.get<std::int32_t>(348);
  h.quatern_b = f.get<double>(352);
  h.quatern_c = f.get<double>(360);
  h.quatern_d = f.get<double>(368);
  h.qoffset_x = f.get<double>(376);
  h.qoffset_y = f.get<double>(384);
  h.qoffset_z = f.get<double>(392);
  for (int i = 0; i < 4; ++i) {
    h.srow_x[i] = f.get<double>(400 + 8 * i);
    h.srow_y[i] = f.get<double>(432 + 8 * i);
    h.srow_z[i] = f.get<double>(464 + 8 * i);
  }
  h.slice_code = f.get<std::int32_t>(496);
  h.xyzt_units = f.get<std::int32_t>(500);
  h.intent_code = f.get<std::int32_t>(504);
  h.intent_name = f.chars<16>(508);
  h.dim_info = f.get<std::uint8_t>(524);
  h.unused_str = f.chars<15>(525);
}

// nibabel's AnalyzeHeader.guessed_endian: dim[0] decides; when it is 0, sizeof_hdr does.
bool guess_swapped(std::span<const std::uint8_t> b, int version) {
  std::int64_t dim0;
  std::uint32_t sizeof_native;
  std::memcpy(&sizeof_native, b.data(), 4);
  if (version == 1) {
    std::int16_t d;
    std::memcpy(&d, b.data() + 40, 2);
    dim0 = d;
  } else {
    std::memcpy(&dim0, b.data() + 16, 8);
  }
  if (dim0 == 0) {
    const std::uint32_t expected = version == 1 ? 348 : 540;
    return __builtin_bswap32(sizeof_native) == expected;
  }
  return !(dim0 >= 1 && dim0 <= 7);
}

// Applies nibabel's check_fix() for Nifti1Header / Nifti2Header in its order, after a check of
// dim[0] (which chose the byte order every other field was read in); problems of level >= 40
// raise, lower ones are fixed and recorded.
void check_fix(NiftiHeader& h, const std::string& path, std::vector<std::string>& warnings) {
  // dim[0] chose the byte order (guess_swapped): out of 0..7 here means it is out of range in
  // both orders, so every other field was read in a guessed order and would be blamed for it
  // (nibabel reports a vox_offset "too low" for dim[0] = 8). It is checked first, by name.
  if (h.dim[0] < 0 || h.dim[0] > 7) {
    const auto raw = static_cast<std::uint64_t>(h.dim[0]);
    const auto raw16 = static_cast<std::uint16_t>(raw);
    const auto swapped16 = static_cast<std::int16_t>(__builtin_bswap16(raw16));
    const std::int64_t other =
        h.version == 2 ? static_cast<std::int64_t>(__builtin_bswap64(raw)) : swapped16;
    throw Error(ErrorCode::format, path, "dim[0]",
                "expected 0 to 7 dimensions in either byte order, but found " +
                    std::to_string(h.dim[0]) + " (" + std::to_string(other) +
                    " in the other byte order)",
                h.version == 2 ? 16 : 40);
  }
  const std::int32_t expected_size = h.version == 2 ? 540 : 348;
  if (h.sizeof_hdr != expected_size) {
    warnings.push_back("sizeof_hdr: expected " + std::to_string(expected_size) + ", but found " +
                       std::to_string(h.sizeof_hdr) + "; set to " + std::to_string(expected_size));
    h.sizeof_hdr = expected_size;
  }
  auto dt = dtype_from_nifti_code(h.datatype);
  if (!dt) {
    const bool known = h.datatype == 0 || h.datatype == 1 || h.datatype == 255 ||
                       h.datatype == 1536 || h.datatype == 2048;
    throw Error(known ? ErrorCode::unsupported : ErrorCode::format, path, "datatype",
                "data code " + std::to_string(h.datatype) +
                    (known ? " is a NIfTI type that nibabel does not support"
                           : " is not a known NIfTI datatype"),
                h.version == 2 ? 12 : 70);
  }
  const auto bitpix = static_cast<std::int16_t>(8 * dtype_size(*dt));
  if (h.bitpix != bitpix) {
    warnings.push_back("bitpix: does not match datatype; set to " + std::to_string(bitpix));
    h.bitpix = bitpix;
  }
  bool any_zero = false, any_neg = false;
  for (int i = 1; i <= 3; ++i) {
    if (h.pixdim[i] == 0) any_zero = true;
    if (h.pixdim[i] < 0) any_neg = true;
  }
  if (any_zero) {
    warnings.push_back("pixdim[1,2,3]: should be non-zero; setting 0 dims to 1");
    for (int i = 1; i <= 3; ++i)
      if (h.pixdim[i] == 0) h.pixdim[i] = 1.0;
  }
  if (any_neg) {
    warnings.push_back("pixdim[1,2,3]: should be positive; setting to abs of pixdim values");
    for (int i = 1; i <= 3; ++i) h.pixdim[i] = std::fabs(h.pixdim[i]);
  }
  if (!(h.pixdim[0] == 1.0 || h.pixdim[0] == -1.0)) {
    warnings.push_back("pixdim[0] (qfac): should be 1 (default) or -1; setting qfac to 1");
    h.pixdim[0] = 1.0;
  }
  const bool magic_ok = h.version == 2 ? is_nifti2_magic(h.magic) : is_nifti1_magic(h.magic);
  if (!magic_ok)
    throw Error(ErrorCode::format, path, "magic",
                std::string("expected ") + (h.version == 2 ? "\"ni2\" or \"n+2\"" : "\"ni1\" or \"n+1\"") +
                    ", but found an invalid magic string",
                h.version == 2 ? 4 : 344);
  const double min_offset = h.version == 2 ? 544 : 352;
  const double off = h.vox_offset;
  if (off != 0) {
    if (h.single_file() && off < min_offset)
      throw Error(ErrorCode::format, path, "vox_offset",
                  "vox offset " + fmt(off) + " too low for single file nifti" +
                      std::to_string(h.version) + " (expected 0 or at least " + fmt(min_offset) + ")",
                  h.version == 2 ? 168 : 108);
    if (std::fmod(off, 16.0) != 0)
      warnings.push_back("vox_offset: " + fmt(off) + " not divisible by 16, not SPM compatible");
  }
  auto fix_code = [&](std::int32_t& code, const char* name) {
    if (code < 0 || code > 5) {
      warnings.push_back(std::string(name) + ": " + std::to_string(code) +
                         " not valid; setting to 0");
      code = 0;
    }
  };
  fix_code(h.qform_code, "qform_code");
  fix_code(h.sform_code, "sform_code");
  if (h.version == 2) {
    const std::array<std::uint8_t, 4> good{13, 10, 26, 10};
    if (h.eol_check == std::array<std::uint8_t, 4>{0, 0, 0, 0}) {
      warnings.push_back("eol_check: all zeros; setting EOL check to 13, 10, 26, 10");
      h.eol_check = good;
    } else if (h.eol_check != good) {
      throw Error(ErrorCode::format, path, "eol_check",
                  "expected 13, 10, 26, 10: the file was probably transferred in text mode", 8);
    }
  }
}

}  // namespace

NiftiHeader decode_nifti_header(std::span<const std::uint8_t> bytes, const std::string& path) {
  if (bytes.size() < 348)
    throw Error(ErrorCode::truncated, path, "header",
                "expected at least 348 header bytes, but the file holds " +
                    std::to_string(bytes.size()),
                0);
  // nibabel tries NIfTI-1 first, recognised by its magic alone; then NIfTI-2, recognised by
  // sizeof_hdr == 540 in either byte order.
  std::array<char, 4> magic1;
  std::memcpy(magic1.data(), bytes.data() + 344, 4);
  std::uint32_t size_raw;
  std::memcpy(&size_raw, bytes.data(), 4);
  int version;
  if (is_nifti1_magic(magic1)) {
    version = 1;
  } else if (size_raw == 540 || __builtin_bswap32(size_raw) == 540) {
    version = 2;
    if (bytes.size() < 540)
      throw Error(ErrorCode::truncated, path, "header",
                  "expected 540 bytes of NIfTI-2 header, but the file holds " +
                      std::to_string(bytes.size()),
                  0);
  } else {
    throw Error(ErrorCode::format, path, "magic",
                "expected a NIfTI-1 magic (\"n+1\"/\"ni1\" at byte 344) or a NIfTI-2 sizeof_hdr "
                "of 540, but found neither: not a NIfTI file",
                344);
  }
  const bool swapped = guess_swapped(bytes, version);
  NiftiHeader h;
  h.version = version;
  h.big_endian = kLittle ? swapped : !swapped;
  Fields f(bytes.data(), swapped);
  if (version == 1)
    decode_nifti1(f, h);
  else
    decode_nifti2(f, h);
  return h;
}

ParsedHeader parse_nifti_header(std::span<const std::uint8_t> bytes, const std::string& path) {
  ParsedHeader out;
  out.header = decode_nifti_header(bytes, path);
  check_fix(out.header, path, out.warnings);
  return out;
}

std::vector<std::uint8_t> encode_nifti_header(const NiftiHeader& h) {
  std::vector<std::uint8_t> out(h.header_size(), 0);
  const bool swap = kLittle ? h.big_endian : !h.big_endian;
  Writer w(out.data(), swap);
  auto f32 = [](double v) { return static_cast<float>(v); };
  if (h.version == 1) {
    w.put<std::int32_t>(0, h.sizeof_hdr);
    w.chars(4, h.data_type);
    w.chars(14, h.db_name);
    w.put<std::int32_t>(32, h.extents);
    w.put<std::int16_t>(36, h.session_error);
    w.put<char>(38, h.regular);
    w.put<std::uint8_t>(39, h.dim_info);
    for (int i = 0; i < 8; ++i) w.put<std::int16_t>(40 + 2 * i, static_cast<std::int16_t>(h.dim[i]));
    w.put<float>(56, f32(h.intent_p1));
    w.put<float>(60, f32(h.intent_p2));
    w.put<float>(64, f32(h.intent_p3));
    w.put<std::int16_t>(68, static_cast<std::int16_t>(h.intent_code));
    w.put<std::int16_t>(70, h.datatype);
    w.put<std::int16_t>(72, h.bitpix);
    w.put<std::int16_t>(74, static_cast<std::int16_t>(h.slice_start));
    for (int i = 0; i < 8; ++i) w.put<float>(76 + 4 * i, f32(h.pixdim[i]));
    w.put<float>(108, f32(h.vox_offset));
    w.put<float>(112, f32(h.scl_slope));
    w.put<float>(116, f32(h.scl_inter));
    w.put<std::int16_t>(120, static_cast<std::int16_t>(h.slice_end));
    w.put<std::uint8_t>(122, static_cast<std::uint8_t>(h.slice_code));
    w.put<std::uint8_t>(123, static_cast<std::uint8_t>(h.xyzt_units));
    w.put<float>(124, f32(h.cal_max));
    w.put<float>(128, f32(h.cal_min));
    w.put<float>(132, f32(h.slice_duration));
    w.put<float>(136, f32(h.toffset));
    w.put<std::int32_t>(140, h.glmax);
    w.put<std::int32_t>(144, h.glmin);
    w.chars(148, h.descrip);
    w.chars(228, h.aux_file);
    w.put<std::int16_t>(252, static_cast<std::int16_t>(h.qform_code));
    w.put<std::int16_t>(254, static_cast<std::int16_t>(h.sform_code));
    w.put<float>(256, f32(h.quatern_b));
    w.put<float>(260, f32(h.quatern_c));
    w.put<float>(264, f32(h.quatern_d));
    w.put<float>(268, f32(h.qoffset_x));
    w.put<float>(272, f32(h.qoffset_y));
    w.put<float>(276, f32(h.qoffset_z));
    for (int i = 0; i < 4; ++i) {
      w.put<float>(280 + 4 * i, f32(h.srow_x[i]));
      w.put<float>(296 + 4 * i, f32(h.srow_y[i]));
      w.put<float>(312 + 4 * i, f32(h.srow_z[i]));
    }
    w.chars(328, h.intent_name);
    w.chars(344, h.magic);
  } else {
    w.put<std::int32_t>(0, h.sizeof_hdr);
    w.chars(4, h.magic);
    for (int i = 0; i < 4; ++i) w.put<std::uint8_t>(8 + i, h.eol_check[i]);
    w.put<std::int16_t>(12, h.datatype);
    w.put<std::int16_t>(14, h.bitpix);
    for (int i = 0; i < 8; ++i) w.put<std::int64_t>(16 + 8 * i, h.dim[i]);
    w.put<double>(80, h.intent_p1);
    w.put<double>(88, h.intent_p2);
    w.put<double>(96, h.intent_p3);
    for (int i = 0; i < 8; ++i) w.put<double>(104 + 8 * i, h.pixdim[i]);
    w.put<std::int64_t>(168, to_int64(h.vox_offset));
    w.put<double>(176, h.scl_slope);
    w.put<double>(184, h.scl_inter);
    w.put<double>(192, h.cal_max);
    w.put<double>(200, h.cal_min);
    w.put<double>(208, h.slice_duration);
    w.put<double>(216, h.toffset);
    w.put<std::int64_t>(224, h.slice_start);
    w.put<std::int64_t>(232, h.slice_end);
    w.chars(240, h.descrip);
    w.chars(320, h.aux_file);
    w.put<std::int32_t>(344, h.qform_code);
    w.put<std::int32_t>(348, h.sform_code);
    w.put<double>(352, h.quatern_b);
    w.put<double>(360, h.quatern_c);
    w.put<double>(368, h.quatern_d);
    w.put<double>(376, h.qoffset_x);
    w.put<double>(384, h.qoffset_y);
    w.put<double>(392, h.qoffset_z);
    for (int i = 0; i < 4; ++i) {
      w.put<double>(400 + 8 * i, h.srow_x[i]);
      w.put<double>(432 + 8 * i, h.srow_y[i]);
      w.put<double>(464 + 8 * i, h.srow_z[i]);
    }
    w.put<std::int32_t>(496, h.slice_code);
    w.put<std::int32_t>(500, h.xyzt_units);
    w.put<std::int32_t>(504, h.intent_code);
    w.chars(508, h.intent_name);
    w.put<std::uint8_t>(524, h.dim_info);
    w.chars(525, h.unused_str);
  }
  return out;
}

}  // namespace voxpipe
