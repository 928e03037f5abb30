// Helpers for the NIfTI tests: field access in the raw bytes (written independently of the
// library's decoder), whole-header comparison, writing images, and the naive selection
// reference that read_nifti_data is compared with.
#pragma once

#include <cmath>

#include "test_support.hpp"

namespace vptest {

// The value of type T at byte `off` of `bytes`, stored in the given byte order.
template <class T>
T field(const Bytes& bytes, std::size_t off, bool big_endian) {
  std::uint8_t b[sizeof(T)];
  std::memcpy(b, bytes.data() + off, sizeof(T));
  if (big_endian != kNativeBig) std::reverse(b, b + sizeof(T));
  T v;
  std::memcpy(&v, b, sizeof(T));
  return v;
}

template <class T>
void set_field(Bytes& bytes, std::size_t off, T v, bool big_endian) {
  std::uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  if (big_endian != kNativeBig) std::reverse(b, b + sizeof(T));
  std::memcpy(bytes.data() + off, b, sizeof(T));
}

template <std::size_t N>
std::array<char, N> chars(const char* s) {
  std::array<char, N> a{};
  for (std::size_t i = 0; i < N && s[i]; ++i) a[i] = s[i];
  return a;
}

// A header with every field set to a distinct value that both versions store exactly.
inline voxpipe::NiftiHeader full_header(int version, bool big_endian) {
  voxpipe::NiftiHeader h = make_header(version, voxpipe::DType::i16, {5, 4, 3, 2}, big_endian);
  if (version == 1) {
    h.data_type = chars<10>("dtype");
    h.db_name = chars<18>("database");
    h.extents = 16384;
    h.session_error = -3;
    h.regular = 'r';
  }
  h.dim_info = 57;
  h.intent_p1 = 1.5;
  h.intent_p2 = -2.25;
  h.intent_p3 = 1024.0;
  h.intent_code = 1002;
  h.slice_start = 1;
  h.pixdim = {-1.0, 1.5, 2.0, 2.5, 0.75, 1, 1, 1};
  h.vox_offset = version == 2 ? 544 : 352;
  h.scl_slope = 2.0;
  h.scl_inter = -3.5;
  h.slice_end = 2;
  h.slice_code = 3;
  h.xyzt_units = 10;
  h.cal_max = 255.0;
  h.cal_min = -1.0;
  h.slice_duration = 0.125;
  h.toffset = 4.5;
  if (version == 1) {
    h.glmax = 4000;
    h.glmin = -12;
  }
  h.descrip = chars<80>("a test header");
  h.aux_file = chars<24>("aux.txt");
  h.qform_code = 1;
  h.sform_code = 4;
  h.quatern_b = 0.0;
  h.quatern_c = 0.5;
  h.quatern_d = -0.5;
  h.qoffset_x = -90.0;
  h.qoffset_y = 126.0;
  h.qoffset_z = -72.0;
  h.srow_x = {-1.5, 0, 0, 90};
  h.srow_y = {0, 2, 0.25, -126};
  h.srow_z = {0, 0, 2.5, -72};
  h.intent_name = chars<16>("intent");
  if (version == 2) h.unused_str = chars<15>("unused");
  return h;
}

inline void expect_same_header(const voxpipe::NiftiHeader& a, const voxpipe::NiftiHeader& b) {
#define VP_SAME(f) EXPECT_EQ(a.f, b.f) << #f
  VP_SAME(version); VP_SAME(big_endian); VP_SAME(sizeof_hdr); VP_SAME(data_type); VP_SAME(db_name);
  VP_SAME(extents); VP_SAME(session_error); VP_SAME(regular); VP_SAME(dim_info); VP_SAME(dim);
  VP_SAME(intent_p1); VP_SAME(intent_p2); VP_SAME(intent_p3); VP_SAME(intent_code);
  VP_SAME(datatype); VP_SAME(bitpix); VP_SAME(slice_start); VP_SAME(pixdim); VP_SAME(vox_offset);
  VP_SAME(scl_slope); VP_SAME(scl_inter); VP_SAME(slice_end); VP_SAME(slice_code);
  VP_SAME(xyzt_units); VP_SAME(cal_max); VP_SAME(cal_min); VP_SAME(slice_duration);
  VP_SAME(toffset); VP_SAME(glmax); VP_SAME(glmin); VP_SAME(descrip); VP_SAME(aux_file);
  VP_SAME(qform_code); VP_SAME(sform_code); VP_SAME(quatern_b); VP_SAME(quatern_c);
  VP_SAME(quatern_d); VP_SAME(qoffset_x); VP_SAME(qoffset_y); VP_SAME(qoffset_z); VP_SAME(srow_x);
  VP_SAME(srow_y); VP_SAME(srow_z); VP_SAME(intent_name); VP_SAME(magic); VP_SAME(eol_check);
  VP_SAME(unused_str);
#undef VP_SAME
}

// Writes an image through write_nifti with `values` as its data (in the header's byte order).
template <class T>
std::string write_image(const TempDir& dir, const std::string& name, const voxpipe::NiftiHeader& h,
                        const std::vector<T>& values,
                        const std::vector<voxpipe::NiftiExtension>& extensions = {},
                        int level = 1, voxpipe::GzipLayout layout = voxpipe::GzipLayout::members) {
  const std::size_t comp = voxpipe::dtype_component_size(*voxpipe::dtype_from_nifti_code(h.datatype));
  const Bytes data = to_bytes(values, h.big_endian, comp);
  voxpipe::write_nifti(dir.file(name), h, extensions, voxpipe::producer_from_bytes(as_bytes(data)),
                       voxpipe::WriteOptions{level, layout});
  return dir.file(name);
}

// The elements a selection picks from an F-ordered array of `shape`, in F order of the output:
// each output index maps to source index start + i * step on every axis.
template <class T>
std::vector<T> naive_select(const std::vector<T>& values, const std::vector<std::int64_t>& shape,
                            const std::vector<voxpipe::AxisRange>& sel) {
  std::size_t n = 1;
  for (const auto& a : sel) n *= static_cast<std::size_t>(a.count);
  std::vector<T> out;
  out.reserve(n);
  std::vector<std::int64_t> i(sel.size(), 0);
  for (std::size_t k = 0; k < n; ++k) {
    std::int64_t flat = 0, stride = 1;
    for (std::size_t d = 0; d < sel.size(); ++d) {
      flat += (sel[d].start + i[d] * sel[d].step) * stride;
      stride *= shape[d];
    }
    out.push_back(values[static_cast<std::size_t>(flat)]);
    for (std::size_t d = 0; d < sel.size(); ++d) {
      if (++i[d] < sel[d].count) break;
      i[d] = 0;
    }
  }
  return out;
}

template <class T>
std::vector<T> read_as(const voxpipe::NiftiImage& img, const std::vector<voxpipe::AxisRange>& sel,
                       const voxpipe::OutputSpec& spec, unsigned threads = 1) {
  std::size_t n = 1;
  if (sel.empty())
    n = static_cast<std::size_t>(img.voxel_count());
  else
    for (const auto& a : sel) n *= static_cast<std::size_t>(a.count);
  const std::size_t elems = n * voxpipe::dtype_size(spec.type) / sizeof(T);
  std::vector<T> out(elems);
  voxpipe::read_nifti_data(img, sel, spec,
                           std::as_writable_bytes(std::span(out.data(), out.size())),
                           voxpipe::ReadOptions{threads});
  return out;
}

// nibabel's apply_read_scaling in float64: x * slope only if slope != 1, + inter only if != 0.
inline double nib_scale(double x, double slope, double inter) {
  volatile double v = x;
  if (slope != 1.0) v = v * slope;
  if (inter != 0.0) v = v + inter;
  return v;
}

}  // namespace vptest
