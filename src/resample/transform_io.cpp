// Readers of transform files: ITK text and binary MATLAB, FSL FLIRT/MCFLIRT matrices, plain RAS
// matrices, lists and folders of those, and ITK/RAS displacement-field NIfTI files. Every matrix
// is converted to nitransforms' convention (reference-space RAS mm -> moving-space RAS mm) with
// nitransforms' arithmetic, so that it equals nitransforms' `.matrix` of the same file (where
// nitransforms rounds ITK values to float32 and ITK does not, ITK's values are kept: see
// docs/resample.md, "Transforms").
#include "resample/transform_io.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <utility>

#include "core/file.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"

namespace voxpipe::resample {

namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Lines, tokens, numbers

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

// Calls fn(line, number) for every line (numbered from 1), trimmed; stops when fn returns false.
template <typename Fn>
void for_each_line(std::string_view text, Fn&& fn) {
  std::size_t number = 0;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    ++number;
    if (!fn(trim(line), number)) return;
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
}

// A piece of the file for an error message: at most 40 characters, control and non-ASCII bytes
// shown as '?', so that a binary file makes a readable one-line message.
std::string quote(std::string_view s) {
  constexpr std::size_t kMax = 40;
  std::string out = "'";
  for (std::size_t i = 0; i < s.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    out += (c < 0x20 || c >= 0x7f) ? '?' : static_cast<char>(c);
  }
  if (s.size() > kMax) out += "...";
  return out + "'";
}

std::string line_field(std::size_t line, std::string_view what = {}) {
  std::string f = "line " + std::to_string(line);
  if (!what.empty()) f += ": " + std::string(what);
  return f;
}

[[noreturn]] void fail(const std::string& path, std::size_t line, std::string_view what,
                       std::string detail, ErrorCode code = ErrorCode::format) {
  throw Error(code, path, line_field(line, what), std::move(detail));
}

// A finite double, exactly as written (std::from_chars: correctly rounded, locale independent).
// A leading '+' is accepted, as Python's float() (nitransforms' parser) accepts it.
bool parse_double(std::string_view token, double& out) {
  if (!token.empty() && token.front() == '+') {
    token.remove_prefix(1);
    if (token.empty() || token.front() == '+' || token.front() == '-') return false;
  }
  const char* end = token.data() + token.size();
  const auto [ptr, ec] = std::from_chars(token.data(), end, out, std::chars_format::general);
  return ec == std::errc() && ptr == end && std::isfinite(out);
}

// The numbers of one line. At most `keep` values are stored: every transform this file reads
// has at most 12 parameters, so a hostile line of millions of numbers costs no memory.
struct Numbers {
  static constexpr std::size_t keep = 16;
  std::array<double, keep> values{};
  std::size_t count = 0;
};

// Splits `s` at blanks (and, with commas, at commas: "1, 0, 0, 0"), parsing each token.
Numbers parse_numbers(std::string_view s, bool commas, const std::string& path,
                      std::size_t line, std::string_view what) {
  Numbers n;
  std::size_t i = 0;
  bool after_comma = false;
  while (true) {
    while (i < s.size() && is_blank(s[i])) ++i;
    if (i == s.size()) break;
    if (commas && s[i] == ',') {
      if (n.count == 0 || after_comma)
        fail(path, line, what, "expected a number before ',', but found none");
      after_comma = true;
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < s.size() && !is_blank(s[j]) && !(commas && s[j] == ',')) ++j;
    const std::string_view token = s.substr(i, j - i);
    double v = 0;
    if (!parse_double(token, v))
      fail(path, line, what,
           "expected a finite number, but found " + quote(token) + " (value " +
               std::to_string(n.count + 1) + ")");
    if (n.count < Numbers::keep) n.values[n.count] = v;
    ++n.count;
    after_comma = false;
    i = j;
  }
  if (after_comma) fail(path, line, what, "expected a number after ',', but found none");
  return n;
}

// Whether a line is a row of numbers rather than a file name: its first token reads whole as a
// number (std::from_chars, which also reads "nan", "inf" and "infinity" in any case, as Python's
// float() does; out of range still counts), or it starts like one and has more tokens (a row
// with a malformed value). So "nan 0 0 0" is a matrix with a value that is not finite, and
// "001.tfm" a list naming a file, each reported as what it is.
bool starts_with_number(std::string_view s) {
  std::size_t end = 0;
  while (end < s.size() && !is_blank(s[end]) && s[end] != ',') ++end;
  std::string_view token = s.substr(0, end);
  if (token.starts_with('+')) token.remove_prefix(1);
  if (!token.empty()) {
    double v = 0;
    const char* last = token.data() + token.size();
    const auto [ptr, ec] = std::from_chars(token.data(), last, v, std::chars_format::general);
    if (ptr == last && (ec == std::errc() || ec == std::errc::result_out_of_range)) return true;
  }
  if (s.empty()) return false;
  const char c = s.front();
  const bool numeric_start = (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.';
  return numeric_start && end < s.size();
}

constexpr std::string_view kItkHeader = "#Insight Transform File V1.0";

// ---------------------------------------------------------------------------------------------
// 4x4 arithmetic

Matrix4 diag4(double a, double b, double c, double d) {
  return {a, 0, 0, 0, 0, b, 0, 0, 0, 0, c, 0, 0, 0, 0, d};
}


// nitransforms' _fsl_aff_adapt: FSL's scaled-voxel space of a grid. `swp` flips x (about the
// grid's far edge) when the affine's determinant is positive (neurological storage order), `spc`
// scales voxels to millimetres.
void fsl_adapt(const Grid& g, Matrix4& swp, Matrix4& spc) {
  std::array<double, 3> zooms{};
  for (int j = 0; j < 3; ++j) {
    const double a = g.affine[0 * 4 + j], b = g.affine[1 * 4 + j], c = g.affine[2 * 4 + j];
    zooms[j] = std::sqrt(a * a + b * b + c * c);  // nibabel's voxel_sizes, summed in this order
  }
  swp = kIdentity4;
  if (det4(g.affine) > 0) {
    swp[0] = -1.0;
    swp[3] = static_cast<double>(g.shape[0] - 1) * zooms[0];
  }
  spc = diag4(zooms[0], zooms[1], zooms[2], 1.0);
}

// ---------------------------------------------------------------------------------------------
// ITK text

// One transform as ITK's text or MATLAB files hold it; the *_at strings say where each part is
// for error messages ("line 3: Parameters", "variable 'fixed'").
struct ItkRecord {
  std::string type;
  bool has_parameters = false, has_fixed = false;
  Numbers parameters, fixed;
  std::string type_at, parameters_at, fixed_at;
};

[[noreturn]] void fail_at(const std::string& path, const std::string& at, std::string detail,
                          ErrorCode code = ErrorCode::format) {
  throw Error(code, path, at, std::move(detail));
}

// What a transform type reads: how many parameters and fixed parameters.
struct ItkType {
  std::string_view name;
  std::size_t parameters;
  std::size_t fixed_min, fixed_max;
};

// CompositeTransform is a container: its block has no parameters and the transforms it holds
// follow as their own blocks.
constexpr std::array<ItkType, 7> kItkTypes{{
    {"AffineTransform", 12, 3, 3},
    {"MatrixOffsetTransformBase", 12, 3, 3},
    {"Euler3DTransform", 6, 3, 4},  // ITK 5 writes a 4th fixed value: ComputeZYX
    {"VersorRigid3DTransform", 6, 3, 3},
    {"TranslationTransform", 3, 0, 0},
    {"IdentityTransform", 0, 0, 0},
    {"CompositeTransform", 0, 0, 0},
}};

// ITK's 3x3 rotation of Euler3DTransform::ComputeMatrix: Rz Rx Ry, or Rz Ry Rx with ComputeZYX.
std::array<double, 9> euler_matrix(double ax, double ay, double az, bool zyx) {
  const double cx = std::cos(ax), sx = std::sin(ax), cy = std::cos(ay), sy = std::sin(ay),
               cz = std::cos(az), sz = std::sin(az);
  const std::array<double, 9> rx{1, 0, 0, 0, cx, -sx, 0, sx, cx};
  const std::array<double, 9> ry{cy, 0, sy, 0, 1, 0, -sy, 0, cy};
  const std::array<double, 9> rz{cz, -sz, 0, sz, cz, 0, 0, 0, 1};
  const auto mul = [](const std::array<double, 9>& a, const std::array<double, 9>& b) {
    std::array<double, 9> r{};
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j)
        r[i * 3 + j] = a[i * 3] * b[j] + a[i * 3 + 1] * b[3 + j] + a[i * 3 + 2] * b[6 + j];
    return r;
  };
  return zyx ? mul(mul(rz, ry), rx) : mul(mul(rz, rx), ry);
}

// ITK's VersorRigid3DTransform::SetParameters and Versor::GetMatrix: the vector part of a unit
// quaternion (renormalised when its norm reaches 1, as ITK does), w = sqrt(1 - |v|^2).
std::array<double, 9> versor_matrix(double x, double y, double z) {
  double norm = std::sqrt(x * x + y * y + z * z);
  constexpr double kEpsilon = 1e-10;
  if (norm >= 1.0 - kEpsilon) {
    const double d = norm + kEpsilon * norm;
    x /= d, y /= d, z /= d;
    norm = std::sqrt(x * x + y * y + z * z);
  }
  const double w = std::sqrt(1.0 - norm * norm);
  const double xx = x * x, yy = y * y, zz = z * z, xy = x * y, xz = x * z, xw = x * w,
               yz = y * z, yw = y * w, zw = z * w;
  return {1.0 - 2.0 * (yy + zz), 2.0 * (xy - zw),       2.0 * (xz + yw),
          2.0 * (xy + zw),       1.0 - 2.0 * (xx + zz), 2.0 * (yz - xw),
          2.0 * (xz - yw),       2.0 * (yz + xw),       1.0 - 2.0 * (xx + yy)};
}

// One block to RAS; false for a CompositeTransform header block (nothing to return).
bool finish_itk(const ItkRecord& r, const std::string& path, bool first, Matrix4& out) {
  std::string_view base = r.type;
  bool single = false;
  if (base.ends_with("_double_3_3")) {
    base.remove_suffix(11);
  } else if (base.ends_with("_float_3_3")) {
    base.remove_suffix(10);
    single = true;
  } else {
    fail_at(path, r.type_at,
            "expected a 3-D transform type (NAME_double_3_3 or NAME_float_3_3), but found " +
                quote(r.type),
            ErrorCode::unsupported);
  }
  const ItkType* type = nullptr;
  for (const auto& t : kItkTypes)
    if (t.name == base) type = &t;
  if (!type)
    fail_at(path, r.type_at,
            "expected AffineTransform, MatrixOffsetTransformBase, Euler3DTransform, "
            "VersorRigid3DTransform, TranslationTransform, IdentityTransform or "
            "CompositeTransform, but found " + quote(r.type),
            ErrorCode::unsupported);

  const std::size_t np = r.has_parameters ? r.parameters.count : 0;
  const std::size_t nf = r.has_fixed ? r.fixed.count : 0;
  if (!r.has_parameters && type->parameters > 0)
    fail_at(path, r.parameters_at,
            "expected Parameters for " + std::string(r.type) + ", but found none");
  if (np != type->parameters)
    fail_at(path, r.parameters_at,
            "expected " + std::to_string(type->parameters) + " values for " + std::string(r.type) +
                ", but found " + std::to_string(np));
  if (!r.has_fixed && type->fixed_min > 0)
    fail_at(path, r.fixed_at,
            "expected FixedParameters for " + std::string(r.type) + ", but found none");
  if (nf < type->fixed_min || nf > type->fixed_max) {
    std::string counts = std::to_string(type->fixed_min);
    if (type->fixed_max > type->fixed_min) counts += " or " + std::to_string(type->fixed_max);
    fail_at(path, r.fixed_at,
            "expected " + counts + " values for " + r.type + ", but found " + std::to_string(nf));
  }
  if (type->name == "CompositeTransform") {
    if (!first)
      fail_at(path, r.type_at,
              "expected a CompositeTransform only as the first transform, but found it later",
              ErrorCode::unsupported);
    return false;
  }

  // What ITK itself holds: a _float_ transform's parameters are float32 (this also makes the
  // files nitransforms writes, AffineTransform_float_3_3 in "%g", equal to its matrices: it reads
  // every ITK text file into float32), fixed parameters are double for every transform (ITK 5).
  // _double_ files keep every digit, where nitransforms rounds them to float32 (io/itk.py).
  std::array<double, Numbers::keep> p = r.parameters.values, c{};
  for (std::size_t i = 0; i < std::min<std::size_t>(nf, 3); ++i) c[i] = r.fixed.values[i];
  if (single)
    for (auto& v : p) v = static_cast<double>(static_cast<float>(v));

  std::array<double, 9> m{1, 0, 0, 0, 1, 0, 0, 0, 1};
  std::array<double, 3> t{};
  if (type->parameters == 12) {
    std::copy_n(p.begin(), 9, m.begin());
    std::copy_n(p.begin() + 9, 3, t.begin());
  } else if (type->name == "Euler3DTransform") {
    m = euler_matrix(p[0], p[1], p[2], nf == 4 && r.fixed.values[3] != 0.0);
    std::copy_n(p.begin() + 3, 3, t.begin());
  } else if (type->name == "VersorRigid3DTransform") {
    m = versor_matrix(p[0], p[1], p[2]);
    std::copy_n(p.begin() + 3, 3, t.begin());
  } else if (type->name == "TranslationTransform") {
    std::copy_n(p.begin(), 3, t.begin());
  }

  // nitransforms' ITKLinearTransform.to_ras, product for product:
  // LPS @ (C+ @ (P @ (C- @ LPS))), which is the offset t + c - M c (ITK's
  // MatrixOffsetTransformBase::ComputeOffset) flipped from LPS to RAS.
  const Matrix4 params{m[0], m[1], m[2], t[0], m[3], m[4], m[5], t[1],
                       m[6], m[7], m[8], t[2], 0,    0,    0,    1};
  const Matrix4 c_pos{1, 0, 0, c[0], 0, 1, 0, c[1], 0, 0, 1, c[2], 0, 0, 0, 1};
  const Matrix4 c_neg{1, 0, 0, -c[0], 0, 1, 0, -c[1], 0, 0, 1, -c[2], 0, 0, 0, 1};
  const Matrix4 lps = diag4(-1, -1, 1, 1);
  out = matmul4(lps, matmul4(c_pos, matmul4(params, matmul4(c_neg, lps))));
  for (double v : out)
    if (!std::isfinite(v))
      fail_at(path, r.type_at,
              "expected finite values, but converting " + r.type + " to RAS overflows");
  return true;
}

// "Parameters: ..." -> ("Parameters", "..."); false when the line has no ':'.
bool split_key(std::string_view line, std::string_view& key, std::string_view& value) {
  const std::size_t colon = line.find(':');
  if (colon == std::string_view::npos) return false;
  key = trim(line.substr(0, colon));
  value = trim(line.substr(colon + 1));
  return true;
}

bool is_fsl_name(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return lower.ends_with(".mat") || name.starts_with("MAT_");
}

}  // namespace

// ---------------------------------------------------------------------------------------------

Matrix4 inverse4(const Matrix4& m, const std::string& path, const std::string& field) {
  bool singular = false;
  const std::optional<Matrix4> x = try_inverse4(m, &singular);
  if (!x)
    throw Error(ErrorCode::format, path, field,
                singular ? "expected an invertible matrix, but it is singular"
                         : "expected an invertible matrix, but its inverse overflows");
  return *x;
}

namespace {

// A 4-byte integer of a MATLAB v4 header, in the variable's byte order.
std::uint32_t matlab_u32(const char* p, bool big) {
  const auto b = [&](int i) {
    return static_cast<std::uint32_t>(static_cast<unsigned char>(p[big ? 3 - i : i]));
  };
  return b(0) | b(1) << 8 | b(2) << 16 | b(3) << 24;
}

// MATLAB v4's type code MOPT of a real, full, numeric double (P = 0) or float (P = 1) matrix:
// 0 / 10 little-endian (M = 0), 1000 / 1010 big-endian (M = 1). Returns the element size, 0
// when `p` starts no such header; `big` gets the byte order.
std::size_t matlab_type(const char* p, bool& big) {
  const std::uint32_t le = matlab_u32(p, false), be = matlab_u32(p, true);
  big = false;
  if (le == 0 || le == 10) return le == 0 ? 8 : 4;
  big = true;
  if (be == 1000 || be == 1010) return be == 1000 ? 8 : 4;
  return 0;
}

double matlab_value(const char* p, std::size_t size, bool big) {
  unsigned char bytes[8];
  for (std::size_t i = 0; i < size; ++i)
    bytes[i] = static_cast<unsigned char>(p[big != (std::endian::native == std::endian::big)
                                              ? size - 1 - i
                                              : i]);
  if (size == 8) return std::bit_cast<double>(bytes);
  float f;
  std::memcpy(&f, bytes, 4);
  return f;
}

}  // namespace

Matrix4 parse_itk_matlab(std::string_view bytes, const std::string& path) {
  ItkRecord record;
  bool have_transform = false;
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    const std::string at = "variable at byte " + std::to_string(pos);
    if (bytes.size() - pos < 20)
      throw Error(ErrorCode::truncated, path, at,
                  "expected a 20-byte MATLAB v4 header, but the file ends", pos);
    bool big = false;
    const std::size_t element = matlab_type(bytes.data() + pos, big);
    if (element == 0)
      throw Error(ErrorCode::unsupported, path, at,
                  "expected a real double or float matrix (MATLAB v4 type 0, 10, 1000 or 1010), "
                  "but found type " + std::to_string(matlab_u32(bytes.data() + pos, false)),
                  pos);
    const std::uint64_t rows = matlab_u32(bytes.data() + pos + 4, big);
    const std::uint64_t cols = matlab_u32(bytes.data() + pos + 8, big);
    const std::uint32_t imag = matlab_u32(bytes.data() + pos + 12, big);
    const std::uint32_t name_len = matlab_u32(bytes.data() + pos + 16, big);
    if (imag != 0)
      throw Error(ErrorCode::unsupported, path, at,
                  "expected a real matrix, but found a complex one", pos);
    if (name_len == 0 || name_len > 256)
      throw Error(ErrorCode::format, path, at,
                  "expected a name of 1 to 256 bytes, but found length " +
                      std::to_string(name_len), pos);
    if (name_len > bytes.size() - pos - 20)
      throw Error(ErrorCode::truncated, path, at,
                  "expected a name of " + std::to_string(name_len) + " bytes, but the file ends",
                  pos);
    const std::string_view raw_name = bytes.substr(pos + 20, name_len);
    if (raw_name.back() != '\0')
      throw Error(ErrorCode::format, path, at, "expected a NUL-terminated name, but found none",
                  pos);
    const std::string name(raw_name.substr(0, raw_name.find('\0')));
    // rows and cols are below 2^32 each: their product and its bytes fit in 64 bits only when
    // checked against what is left of the file first.
    const std::uint64_t data_at = pos + 20 + name_len, left = bytes.size() - data_at;
    if (rows != 0 && cols > left / rows / element)
      throw Error(ErrorCode::truncated, path, "variable '" + name + "'",
                  "expected " + std::to_string(rows) + " x " + std::to_string(cols) +
                      " values, but the file ends first", pos);
    const std::uint64_t count = rows * cols;
    const bool fixed = name == "fixed";
    const bool transform = !fixed && name.ends_with("_3_3");
    if (fixed || transform) {
      const std::string where = "variable '" + name + "'";
      if (count != 0 && rows != 1 && cols != 1)
        throw Error(ErrorCode::format, path, where,
                    "expected a vector, but found a " + std::to_string(rows) + " x " +
                        std::to_string(cols) + " matrix", pos);
      if (transform && have_transform)
        throw Error(ErrorCode::unsupported, path, where,
                    "expected one transform, but found a second ('" + record.type + "' before)",
                    pos);
      Numbers n;
      n.count = static_cast<std::size_t>(count);
      for (std::size_t i = 0; i < std::min<std::uint64_t>(count, Numbers::keep); ++i) {
        n.values[i] = matlab_value(bytes.data() + data_at + i * element, element, big);
        if (!std::isfinite(n.values[i]))
          throw Error(ErrorCode::format, path, where,
                      "expected finite values, but value " + std::to_string(i + 1) + " is not",
                      data_at + i * element);
      }
      if (fixed) {
        if (record.has_fixed)
          throw Error(ErrorCode::format, path, where, "expected one 'fixed', but found another",
                      pos);
        record.fixed = n;
        record.has_fixed = true;
        record.fixed_at = where;
      } else {
        record.type = name;
        record.parameters = n;
        record.has_parameters = true;
        record.type_at = record.parameters_at = where;
        have_transform = true;
      }
    }
    pos = static_cast<std::size_t>(data_at + count * element);
  }
  if (!have_transform)
    throw Error(ErrorCode::format, path, "",
                "expected a transform variable (AffineTransform_double_3_3, ...), but found none");
  if (!record.has_fixed) record.fixed_at = "variable 'fixed'";
  Matrix4 out;
  if (!finish_itk(record, path, true, out))
    throw Error(ErrorCode::unsupported, path, record.type_at,
                "expected a linear transform, but found a CompositeTransform");
  return out;
}

TransformText classify_transform_text(std::string_view text) {
  bool big = false;
  if (text.size() >= 4 && matlab_type(text.data(), big) != 0) return TransformText::itk_matlab;
  TransformText kind = TransformText::list;
  bool decided = false;
  for_each_line(text, [&](std::string_view line, std::size_t) {
    if (line.empty()) return true;
    if (line.starts_with("#Insight Transform File")) {
      kind = TransformText::itk;
      decided = true;
      return false;
    }
    if (line.front() == '#') return true;
    kind = starts_with_number(line) ? TransformText::numbers : TransformText::list;
    decided = true;
    return false;
  });
  // Nothing but comments: "numbers", so that the matrix parser says no rows were found.
  return decided ? kind : TransformText::numbers;
}

std::vector<Matrix4> parse_itk_text(std::string_view text, const std::string& path) {
  std::vector<Matrix4> out;
  ItkRecord current;
  bool header = false, have = false, first = true;
  std::size_t last_line = 0;
  const auto finish = [&] {
    Matrix4 m;
    if (finish_itk(current, path, first, m)) out.push_back(m);
    first = false;
    current = ItkRecord{};
    have = false;
  };
  for_each_line(text, [&](std::string_view line, std::size_t number) {
    last_line = number;
    if (line.empty()) return true;
    if (!header) {
      // ITK's reader and nitransforms both demand the banner on the first line.
      if (line != kItkHeader && !line.starts_with(std::string(kItkHeader) + " "))
        fail(path, number, "header",
             "expected '" + std::string(kItkHeader) + "', but found " + quote(line));
      header = true;
      return true;
    }
    if (line.front() == '#') return true;  // "#Transform N" and comments: blocks start at keys
    std::string_view key, value;
    if (!split_key(line, key, value))
      fail(path, number, "", "expected 'Key: values', but found " + quote(line));
    if (key == "Transform") {
      if (have) finish();
      if (value.empty())
        fail(path, number, "Transform", "expected a transform type, but found none");
      current.type = std::string(value);
      current.type_at = line_field(number, "Transform");
      // Until their lines are seen, a missing part is reported at the Transform line.
      current.parameters_at = line_field(number, "Parameters");
      current.fixed_at = line_field(number, "FixedParameters");
      have = true;
    } else if (key == "Parameters" || key == "FixedParameters") {
      const bool fixed = key == "FixedParameters";
      if (!have)
        fail(path, number, key,
             "expected a 'Transform:' line before " + std::string(key) + ", but found none");
      if (fixed ? current.has_fixed : current.has_parameters)
        fail(path, number, key, "expected one " + std::string(key) + " line, but found another");
      (fixed ? current.fixed : current.parameters) =
          parse_numbers(value, false, path, number, key);
      (fixed ? current.has_fixed : current.has_parameters) = true;
      (fixed ? current.fixed_at : current.parameters_at) = line_field(number, key);
    } else {
      fail(path, number, "",
           "expected Transform, Parameters or FixedParameters, but found " + quote(key));
    }
    return true;
  });
  if (!header)
    fail(path, 1, "header", "expected '" + std::string(kItkHeader) + "', but found none");
  if (have) finish();
  if (out.empty())
    fail(path, std::max<std::size_t>(last_line, 1), "",
         "expected at least one linear transform, but found none");
  return out;
}

Matrix4 parse_matrix_text(std::string_view text, const std::string& path, bool allow_3x4) {
  Matrix4 m = kIdentity4;
  std::size_t rows = 0, last_line = 0, last_row_line = 0;
  for_each_line(text, [&](std::string_view line, std::size_t number) {
    last_line = number;
    const std::size_t hash = line.find('#');
    if (hash != std::string_view::npos) line = trim(line.substr(0, hash));
    if (line.empty()) return true;
    const std::string row_name = "row " + std::to_string(rows + 1);
    if (rows == 4)
      fail(path, number, row_name, "expected 4 rows of 4 numbers, but found more rows");
    const Numbers n = parse_numbers(line, true, path, number, row_name);
    if (n.count != 4)
      fail(path, number, row_name,
           "expected 4 numbers, but found " + std::to_string(n.count));
    std::copy_n(n.values.begin(), 4, m.begin() + static_cast<std::ptrdiff_t>(rows * 4));
    ++rows;
    last_row_line = number;
    return true;
  });
  if (rows == 3 && allow_3x4) return m;  // the implicit 0 0 0 1 is kIdentity4's last row
  if (rows != 4)
    fail(path, std::max<std::size_t>(last_line, 1), "",
         std::string("expected 4 rows of 4 numbers") + (allow_3x4 ? " (or 3)" : "") +
             ", but found " + std::to_string(rows));
  // An affine's last row; anything else is not a transform this reader can apply.
  constexpr double kTolerance = 1e-12;
  if (std::fabs(m[12]) > kTolerance || std::fabs(m[13]) > kTolerance ||
      std::fabs(m[14]) > kTolerance || std::fabs(m[15] - 1.0) > kTolerance)
    fail(path, last_row_line, "row 4", "expected 0 0 0 1 (within 1e-12), but found other values");
  return m;
}

Matrix4 fsl_to_ras(const Matrix4& fsl, const Grid& reference, const Grid& moving,
                   const std::string& path) {
  Matrix4 ref_swp, ref_spc, mov_swp, mov_spc;
  fsl_adapt(reference, ref_swp, ref_spc);
  fsl_adapt(moving, mov_swp, mov_spc);
  // io/fsl.py, in its order of operations:
  //   pre  = refswp @ refspc @ inv(reference.affine)
  //   post = moving.affine @ inv(movswp @ movspc)
  //   ras  = post @ swapaxes(inv(mat.T)) @ pre       (swapaxes(inv(P.T)) == inv(P))
  const Matrix4 pre = matmul4(matmul4(ref_swp, ref_spc),
                              inverse4(reference.affine, path, "reference affine"));
  const Matrix4 post =
      matmul4(moving.affine, inverse4(matmul4(mov_swp, mov_spc), path, "moving voxel sizes"));
  return matmul4(matmul4(post, inverse4(fsl, path, "FSL matrix")), pre);
}

std::vector<ListEntry> parse_transform_list(std::string_view text, const std::string& path) {
  std::vector<ListEntry> out;
  for_each_line(text, [&](std::string_view line, std::size_t number) {
    if (line.empty() || line.front() == '#') return true;
    if (line.find('\0') != std::string_view::npos)
      fail(path, number, "",
           "expected a transform file or a list of transform files, but found binary data (a "
           "NUL byte)");
    out.push_back({std::string(line), number});
    return true;
  });
  if (out.empty()) fail(path, 1, "", "expected a list of transform files, but found none");
  return out;
}

std::vector<Matrix4> parse_affines_text(std::string_view text, const std::string& path,
                                        const AffineReadOptions& options) {
  const TransformText kind = classify_transform_text(text);
  AffineFormat format = options.format;
  if (kind == TransformText::list) {
    // Report the line that is neither a number nor the ITK banner.
    std::size_t at = 1;
    std::string_view found;
    for_each_line(text, [&](std::string_view line, std::size_t number) {
      if (line.empty() || line.front() == '#') return true;
      at = number;
      found = line;
      return false;
    });
    fail(path, at, "",
         "expected numbers or '" + std::string(kItkHeader) + "', but found " + quote(found));
  }
  if (format == AffineFormat::automatic) {
    if (kind == TransformText::itk || kind == TransformText::itk_matlab)
      format = AffineFormat::itk;
    else
      format = options.reference && is_fsl_name(path) ? AffineFormat::fsl : AffineFormat::matrix;
  }
  std::vector<Matrix4> out;
  if (kind == TransformText::itk_matlab) {
    if (format != AffineFormat::itk)
      fail(path, 1, "",
           std::string("expected ") + (format == AffineFormat::fsl ? "an FSL" : "a plain") +
               " matrix, but found an ITK MATLAB (binary) transform file");
    out.push_back(parse_itk_matlab(text, path));
  } else if (format == AffineFormat::itk) {
    if (kind != TransformText::itk)
      fail(path, 1, "header", "expected '" + std::string(kItkHeader) + "', but found numbers");
    out = parse_itk_text(text, path);
  } else {
    if (kind == TransformText::itk)
      fail(path, 1, "header",
           std::string("expected ") + (format == AffineFormat::fsl ? "an FSL" : "a plain") +
               " matrix, but found an ITK transform file");
    if (format == AffineFormat::matrix) {
      out.push_back(parse_matrix_text(text, path, true));
    } else {
      if (!options.reference)
        throw Error(ErrorCode::invalid_argument, path, "reference",
                    "an FSL matrix maps scaled voxel coordinates: expected the reference grid "
                    "(FLIRT's -ref image), but none was given");
      const Matrix4 fsl = parse_matrix_text(text, path, false);
      out.push_back(fsl_to_ras(fsl, *options.reference,
                               options.moving ? *options.moving : *options.reference, path));
    }
  }
  // Finite inputs can still overflow on the way (a centre of 1e300 times a matrix entry of 1e10).
  for (std::size_t i = 0; i < out.size(); ++i)
    for (double v : out[i])
      if (!std::isfinite(v))
        throw Error(ErrorCode::format, path, "transform " + std::to_string(i),
                    "expected finite values, but converting it to RAS overflows");
  return out;
}
}  // namespace voxpipe::resample

// ---------------------------------------------------------------------------------------------
// Files (the public entry points of transform.hpp)

namespace voxpipe {

namespace {

using namespace resample;
namespace fs = std::filesystem;

std::string read_text_file(const std::string& path) {
  core::InputFile file(path);
  if (file.size() > kMaxTransformTextBytes)
    throw Error(ErrorCode::limit, path, "",
                "expected a transform file of at most " +
                    std::to_string(kMaxTransformTextBytes >> 20) + " MiB, but found " +
                    std::to_string(file.size()) + " bytes");
  std::string text(static_cast<std::size_t>(file.size()), '\0');
  const std::size_t got = file.read_at(0, std::as_writable_bytes(std::span(text)));
  text.resize(got);
  return text;
}

bool is_directory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

std::vector<Matrix4> read_folder(const std::string& path, const AffineReadOptions& options) {
  // MCFLIRT's -mats folder: MAT_0000, MAT_0001 ...: one transform per file, in name order.
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code ec2;
    if (name.starts_with(".") || !it->is_regular_file(ec2)) continue;
    names.push_back(name);
  }
  if (ec) throw Error(ErrorCode::io, path, "", "cannot list the folder: " + ec.message());
  if (names.empty())
    throw Error(ErrorCode::format, path, "",
                "expected transform files in the folder, but found none");
  std::sort(names.begin(), names.end());
  std::vector<Matrix4> out;
  for (const auto& name : names) {
    const std::string file = (fs::path(path) / name).string();
    const std::string text = read_text_file(file);
    if (classify_transform_text(text) == TransformText::list)
      throw Error(ErrorCode::format, file, "",
                  "expected a transform file in the folder, but found a list of files");
    auto m = parse_affines_text(text, file, options);
    out.insert(out.end(), m.begin(), m.end());
  }
  return out;
}

}  // namespace

std::vector<Matrix4> read_affines(const std::string& path, const AffineReadOptions& options) {
  if (is_directory(path)) return read_folder(path, options);
  const std::string text = read_text_file(path);
  if (classify_transform_text(text) != TransformText::list)
    return parse_affines_text(text, path, options);

  // A list of transform files, relative to the list's folder. Its entries must be transform
  // files themselves (no lists of lists, no folders): a list names volumes, one file each.
  const fs::path folder = fs::path(path).parent_path();
  std::vector<Matrix4> out;
  for (const auto& entry : parse_transform_list(text, path)) {
    const fs::path p(entry.path);
    const std::string file = p.is_absolute() ? p.string() : (folder / p).string();
    std::error_code ec;
    const auto status = fs::status(file, ec);
    if (!fs::exists(status))
      fail(path, entry.line, "",
           "expected numbers, '" + std::string(kItkHeader) + "' or the name of a transform "
           "file, but found " + quote(entry.path) + " (no such file: " + file + ")",
           ErrorCode::not_found);
    if (fs::is_directory(status))
      fail(path, entry.line, "", "expected a transform file, but " + quote(entry.path) +
                                     " is a folder");
    const std::string entry_text = read_text_file(file);
    if (classify_transform_text(entry_text) == TransformText::list)
      fail(path, entry.line, "",
           "expected a transform file, but " + quote(entry.path) + " is a list of files");
    auto m = parse_affines_text(entry_text, file, options);
    out.insert(out.end(), m.begin(), m.end());
  }
  return out;
}

Matrix4 read_affine(const std::string& path, const AffineReadOptions& options) {
  const auto all = read_affines(path, options);
  if (all.size() != 1)
    throw Error(ErrorCode::format, path, "",
                "expected one transform, but found " + std::to_string(all.size()));
  return all.front();
}

DisplacementField read_displacement_field(const std::string& path, FieldFormat format) {
  const NiftiImage image = open_nifti(path);
  const auto& s = image.shape;
  // nitransforms: ITKDisplacementsField wants (X, Y, Z, 1, 3); DenseFieldTransform squeezes its
  // array, so a RAS field may carry the singleton 4th axis as well.
  const bool five = s.size() == 5 && s[3] == 1 && s[4] == 3;
  const bool four = s.size() == 4 && s[3] == 3;
  if (format == FieldFormat::itk ? !five : !(five || four)) {
    std::string found = "(";
    for (std::size_t i = 0; i < s.size(); ++i) found += (i ? ", " : "") + std::to_string(s[i]);
    found += ")";
    throw Error(ErrorCode::format, path, "dim",
                format == FieldFormat::itk
                    ? "expected an ITK displacement field of shape (X, Y, Z, 1, 3), but found " +
                          found
                    : "expected a displacement field of shape (X, Y, Z, 3), but found " + found);
  }
  OutputSpec spec;
  spec.type = DType::f64;
  spec.apply_scaling = true;
  if (!conversion_supported(image.dtype, spec))
    throw Error(ErrorCode::unsupported, path, "datatype",
                std::string("expected real-valued displacements, but found ") +
                    std::string(dtype_name(image.dtype)));
  check_data_size(image);  // before allocating what the header claims

  DisplacementField field;
  field.grid.shape = {s[0], s[1], s[2]};
  field.grid.affine = image.affine;
  field.data.resize(static_cast<std::size_t>(image.voxel_count()));
  read_nifti_data(image, {}, spec, std::as_writable_bytes(std::span(field.data)));
  if (format == FieldFormat::itk) {
    // LPS -> RAS: the first two components change sign (io/itk.py, field[..., (0, 1)] *= -1).
    const std::size_t volume = static_cast<std::size_t>(s[0] * s[1] * s[2]);
    for (std::size_t i = 0; i < 2 * volume; ++i) field.data[i] = -field.data[i];
  }
  return field;
}

}  // namespace voxpipe
