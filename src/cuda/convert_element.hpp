// The per-element conversion of voxel bytes, written once for the host compiler and for nvcc:
// byte swap, cast and NIfTI scaling (nibabel's rules, as core::select_conversion), or DICOM
// BitsStored correction and the Rescale Slope/Intercept modality transform (pydicom's rules, as
// dicom/pixels.cpp and dicom/modality.hpp). The host staging sink runs it on the CPU; the kernels
// of kernels.cu run the very same functions on the device. Internal.
//
// Why the device result is bit-identical to the CPU path:
// - the arithmetic is the CPU path's, operation by operation, in double: x * slope, then
//   + inter, each rounded (round to nearest even) on its own, then one rounding to the
//   destination. The host build uses -ffp-contract=off and nvcc gets -fmad=false, so neither
//   forms a fused multiply-add; neither uses fast-math (IEEE division, no flush to zero);
// - integer -> double and double -> float conversions round to nearest on both (cvt.rn);
// - NaN payloads are the one place where hardware differs: x86 (and Arm) propagate the NaN
//   operand's payload, quieted, and x86 makes a negative "default NaN" for an invalid operation,
//   while the GPU returns its canonical NaN. So wherever a NaN can come out, the result is built
//   from bits here, following the host's rules, instead of being left to the hardware
//   (tests/cpp/cuda/convert_element_test.cpp checks the host rules against the CPU path).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "voxpipe/dtype.hpp"

#if defined(__CUDACC__)
#define VOXPIPE_HD __host__ __device__
#else
#define VOXPIPE_HD
#endif

namespace voxpipe::cuda {

// Which CPU path an ElementOp reproduces.
enum class ElementKind : std::uint8_t {
  raw,    // elements copied unchanged (dest == source), each component byte-swapped if `swap`
  nifti,  // core::select_conversion: real or complex source -> f32/f64 (or complex) dest
  dicom,  // pixel values: byte swap, BitsStored correction, then the dest is the stored type
          // (pixel_array) or f32/f64 through the modality transform (Rescale Slope/Intercept)
};

// Which of slope and inter apply: NIfTI skips `* slope` when slope == 1 and `+ inter` when
// inter == 0 (nibabel); the DICOM rescale always applies both (pydicom).
enum class Scaling : std::uint8_t { none, slope, inter, both };

// One conversion, passed by value to the kernels: a trivially copyable struct whose layout is
// the same for the host compiler and nvcc (fixed-width fields, natural alignment).
struct ElementOp {
  DType source = DType::u8;
  DType dest = DType::u8;
  ElementKind kind = ElementKind::raw;
  bool swap = false;              // the source bytes are in the non-native order
  Scaling scaling = Scaling::none;
  std::uint8_t unused_bits = 0;   // DICOM: BitsAllocated - BitsStored to correct (0: none)
  bool real_part = false;         // NIfTI complex source -> real dest: the real part
  bool modality = false;          // DICOM: the modality transform to f32/f64 (else dest == source)
  double slope = 1.0;
  double inter = 0.0;
};
// Passed to cuLaunchKernel as raw bytes: both compilers must agree on this layout.
static_assert(sizeof(ElementOp) == 24 && alignof(ElementOp) == 8);
static_assert(std::is_trivially_copyable_v<ElementOp> && std::is_standard_layout_v<ElementOp>);

namespace element {

// ---- sizes ------------------------------------------------------------------------------

// dtype_size and dtype_component_size, usable in device code.
VOXPIPE_HD constexpr unsigned size_of(DType t) {
  switch (t) {
    case DType::u8: case DType::i8: return 1;
    case DType::u16: case DType::i16: return 2;
    case DType::u32: case DType::i32: case DType::f32: case DType::rgba32: return 4;
    case DType::u64: case DType::i64: case DType::f64: case DType::c64: return 8;
    case DType::c128: return 16;
    case DType::rgb24: return 3;
  }
  return 0;
}
VOXPIPE_HD constexpr unsigned component_size_of(DType t) {
  switch (t) {
    case DType::c64: return 4;
    case DType::c128: return 8;
    case DType::rgb24: case DType::rgba32: return 1;
    default: return size_of(t);
  }
}

// ---- loads and stores -------------------------------------------------------------------

template <unsigned N> struct UintN;
template <> struct UintN<1> { using type = std::uint8_t; };
template <> struct UintN<2> { using type = std::uint16_t; };
template <> struct UintN<4> { using type = std::uint32_t; };
template <> struct UintN<8> { using type = std::uint64_t; };
template <class T> using UintOf = typename UintN<sizeof(T)>::type;

template <class U>
VOXPIPE_HD inline U byte_swap(U v) {
  U r = 0;
  for (unsigned i = 0; i < sizeof(U); ++i) {
    r = static_cast<U>((r << 8) | (v & 0xFF));
    v = static_cast<U>(v >> 8);
  }
  return r;
}

template <class T>
VOXPIPE_HD inline T load(const unsigned char* p, bool swap) {
  UintOf<T> u;
  std::memcpy(&u, p, sizeof(u));
  if (swap) u = byte_swap(u);
  T t;
  std::memcpy(&t, &u, sizeof(t));
  return t;
}

template <class T>
VOXPIPE_HD inline void store(unsigned char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// ---- IEEE arithmetic with the host's NaN results ----------------------------------------

VOXPIPE_HD inline std::uint64_t bits_of(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, 8);
  return b;
}
VOXPIPE_HD inline double double_of(std::uint64_t b) {
  double x;
  std::memcpy(&x, &b, 8);
  return x;
}
VOXPIPE_HD inline std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}
VOXPIPE_HD inline float float_of(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

VOXPIPE_HD inline bool is_nan(double x) { return x != x; }

// The NaN an invalid operation (inf - inf, 0 * inf) makes: negative on x86, positive elsewhere
// (Arm, and what a GPU would give).
#if defined(__x86_64__) || defined(__i386__)
inline constexpr std::uint64_t kDefaultNan = 0xFFF8000000000000ull;
#else
inline constexpr std::uint64_t kDefaultNan = 0x7FF8000000000000ull;
#endif
inline constexpr std::uint64_t kQuietBit = 0x0008000000000000ull;

// The NaN result of `a op b` on the host: the first NaN operand, quieted (SSE returns the
// first source operand; the compiler keeps the source order of - and, in the CPU path's
// expressions, of * and +), else the default NaN.
VOXPIPE_HD inline double nan_result(double a, double b) {
  if (is_nan(a)) return double_of(bits_of(a) | kQuietBit);
  if (is_nan(b)) return double_of(bits_of(b) | kQuietBit);
  return double_of(kDefaultNan);
}
VOXPIPE_HD inline double mul(double a, double b) {
  const double r = a * b;
  return is_nan(r) ? nan_result(a, b) : r;
}
VOXPIPE_HD inline double add(double a, double b) {
  const double r = a + b;
  return is_nan(r) ? nan_result(a, b) : r;
}
VOXPIPE_HD inline double sub(double a, double b) {
  const double r = a - b;
  return is_nan(r) ? nan_result(a, b) : r;
}

// float -> double: exact, but a NaN is quieted with its payload moved to the top (cvtss2sd).
VOXPIPE_HD inline double widen(float x) {
  if (x == x) return static_cast<double>(x);
  const std::uint32_t b = bits_of(x);
  const std::uint64_t sign = static_cast<std::uint64_t>(b >> 31) << 63;
  const std::uint64_t payload = static_cast<std::uint64_t>(b & 0x007FFFFFu) << 29;
  return double_of(sign | 0x7FF0000000000000ull | kQuietBit | payload);
}
// double -> float: round to nearest even; a NaN keeps sign and top payload bits, quieted
// (cvtsd2ss).
VOXPIPE_HD inline float narrow(double x) {
  if (x == x) return static_cast<float>(x);
  const std::uint64_t b = bits_of(x);
  const std::uint32_t sign = static_cast<std::uint32_t>(b >> 63) << 31;
  const std::uint32_t payload = static_cast<std::uint32_t>((b >> 29) & 0x003FFFFFu);
  return float_of(sign | 0x7FC00000u | payload);
}

template <class S>
VOXPIPE_HD inline double to_double(S x) {
  if constexpr (std::is_same_v<S, float>) return widen(x);
  else return static_cast<double>(x);
}
template <class D>
VOXPIPE_HD inline D from_double(double x) {
  if constexpr (std::is_same_v<D, float>) return narrow(x);
  else return x;
}

// ---- the element routines ---------------------------------------------------------------
// Each converts one element at `in` to `out`; in_size/out_size are its byte strides.

// Unchanged element of `parts` components of type U, each swapped when op.swap.
template <class U>
struct Raw {
  unsigned parts;
  unsigned in_size, out_size;
  VOXPIPE_HD void operator()(const ElementOp& op, const unsigned char* in, unsigned char* out) const {
    for (unsigned p = 0; p < parts; ++p)
      store<U>(out + p * sizeof(U), load<U>(in + p * sizeof(U), op.swap));
  }
};

VOXPIPE_HD inline double scale(double x, const ElementOp& op) {
  if (op.scaling == Scaling::slope || op.scaling == Scaling::both) x = mul(x, op.slope);
  if (op.scaling == Scaling::inter || op.scaling == Scaling::both) x = add(x, op.inter);
  return x;
}

// NIfTI, real source S -> real dest D: D(scale(double(x))).
// Unscaled to the same float type, the value is copied unchanged, signalling NaNs included: that
// is NumPy's no-op astype, and what the compiler makes of the CPU path's float(double(x)).
template <class S, class D>
struct NiftiReal {
  unsigned in_size = sizeof(S), out_size = sizeof(D);
  VOXPIPE_HD void operator()(const ElementOp& op, const unsigned char* in, unsigned char* out) const {
    if constexpr (std::is_same_v<S, D>) {
      if (op.scaling == Scaling::none) {
        store<D>(out, load<S>(in, op.swap));
        return;
      }
    }
    store<D>(out, from_double<D>(scale(to_double(load<S>(in, op.swap)), op)));
  }
};

// NIfTI, complex source of components S -> complex of components D, or its real part (NumPy:
// z * (slope + 0j) is (re*s - im*0, re*0 + im*s), then z + (inter + 0j)).
template <class S, class D, bool RealPart>
struct NiftiComplex {
  unsigned in_size = 2 * sizeof(S), out_size = (RealPart ? 1 : 2) * sizeof(D);
  VOXPIPE_HD void operator()(const ElementOp& op, const unsigned char* in, unsigned char* out) const {
    if constexpr (std::is_same_v<S, D>) {  // unscaled, same component type: copied (as NiftiReal)
      if (op.scaling == Scaling::none) {
        store<D>(out, load<S>(in, op.swap));
        if constexpr (!RealPart) store<D>(out + sizeof(D), load<S>(in + sizeof(S), op.swap));
        return;
      }
    }
    double re = to_double(load<S>(in, op.swap));
    double im = to_double(load<S>(in + sizeof(S), op.swap));
    if (op.scaling == Scaling::slope || op.scaling == Scaling::both) {
      const double r = sub(mul(re, op.slope), mul(im, 0.0));
      // When re and im are both NaNs, which payload this sum keeps is not defined on the CPU
      // either: the compiler orders the operands of + as it likes (GCC 12 differs between the
      // complex64 and complex128 kernels). Here the first one, as written.
      const double m = add(mul(re, 0.0), mul(im, op.slope));
      re = r;
      im = m;
    }
    if (op.scaling == Scaling::inter || op.scaling == Scaling::both) {
      re = add(re, op.inter);
      im = add(im, 0.0);
    }
    store<D>(out, from_double<D>(re));
    if constexpr (!RealPart) store<D>(out + sizeof(D), from_double<D>(im));
  }
};

// pydicom's correct_unused_bits: shift left and back in the stored type, so that a signed value
// is sign-extended from BitsStored and an unsigned one masked to it. The left shift runs on the
// unsigned type (no signed overflow); the right shift is arithmetic for signed types.
template <class S>
VOXPIPE_HD inline S correct_unused_bits(S v, unsigned shift) {
  const UintOf<S> u = static_cast<UintOf<S>>(static_cast<UintOf<S>>(v) << shift);
  return static_cast<S>(static_cast<S>(u) >> shift);
}

// DICOM: stored value S (byte-swapped, BitsStored-corrected for integers) -> S itself
// (Modality false: pixel_array's values) or D = f32/f64 through double, then * slope + intercept
// (both always, as pydicom) when rescaled, then one rounding (the modality transform).
template <class S, class D, bool Modality>
struct Dicom {
  unsigned in_size = sizeof(S), out_size = sizeof(D);
  VOXPIPE_HD void operator()(const ElementOp& op, const unsigned char* in, unsigned char* out) const {
    S v = load<S>(in, op.swap);
    if constexpr (std::is_integral_v<S>) {
      if (op.unused_bits) v = correct_unused_bits(v, op.unused_bits);
    }
    if constexpr (!Modality) {
      store<S>(out, v);
    } else {
      double x = to_double(v);
      if (op.scaling != Scaling::none) x = add(mul(x, op.slope), op.inter);
      store<D>(out, from_double<D>(x));
    }
  }
};

// ---- dispatch ---------------------------------------------------------------------------

template <class T> struct Type { using type = T; };

// Calls f(Type<S>{}) for a real (integer or float) source type; false for others.
template <class F>
VOXPIPE_HD inline bool visit_real(DType t, F&& f) {
  switch (t) {
    case DType::u8: f(Type<std::uint8_t>{}); return true;
    case DType::i8: f(Type<std::int8_t>{}); return true;
    case DType::u16: f(Type<std::uint16_t>{}); return true;
    case DType::i16: f(Type<std::int16_t>{}); return true;
    case DType::u32: f(Type<std::uint32_t>{}); return true;
    case DType::i32: f(Type<std::int32_t>{}); return true;
    case DType::u64: f(Type<std::uint64_t>{}); return true;
    case DType::i64: f(Type<std::int64_t>{}); return true;
    case DType::f32: f(Type<float>{}); return true;
    case DType::f64: f(Type<double>{}); return true;
    default: return false;
  }
}

template <class F>
VOXPIPE_HD inline bool visit_raw(const ElementOp& op, F&& f) {
  const unsigned size = size_of(op.source), comp = component_size_of(op.source);
  const unsigned parts = comp ? size / comp : 0;
  switch (comp) {
    case 1: f(Raw<std::uint8_t>{parts, size, size}); return true;
    case 2: f(Raw<std::uint16_t>{parts, size, size}); return true;
    case 4: f(Raw<std::uint32_t>{parts, size, size}); return true;
    case 8: f(Raw<std::uint64_t>{parts, size, size}); return true;
  }
  return false;
}

template <class F>
VOXPIPE_HD inline bool visit_nifti(const ElementOp& op, F&& f) {
  const bool to_f32 = op.dest == DType::f32 || op.dest == DType::c64;
  if (op.source == DType::c64 || op.source == DType::c128) {
    const bool real = op.real_part;
    const auto go = [&](auto s) {
      using S = typename decltype(s)::type;
      if (to_f32) {
        if (real) f(NiftiComplex<S, float, true>{});
        else f(NiftiComplex<S, float, false>{});
      } else {
        if (real) f(NiftiComplex<S, double, true>{});
        else f(NiftiComplex<S, double, false>{});
      }
    };
    if (op.source == DType::c64) go(Type<float>{});
    else go(Type<double>{});
    return true;
  }
  return visit_real(op.source, [&](auto s) {
    using S = typename decltype(s)::type;
    if (to_f32) f(NiftiReal<S, float>{});
    else f(NiftiReal<S, double>{});
  });
}

template <class F>
VOXPIPE_HD inline bool visit_dicom(const ElementOp& op, F&& f) {
  return visit_real(op.source, [&](auto s) {
    using S = typename decltype(s)::type;
    if (!op.modality) f(Dicom<S, S, false>{});
    else if (op.dest == DType::f32) f(Dicom<S, float, true>{});
    else f(Dicom<S, double, true>{});
  });
}

// Calls f(routine) with the element routine of `op` (which element_op_check accepted).
template <class F>
VOXPIPE_HD inline bool visit(const ElementOp& op, F&& f) {
  switch (op.kind) {
    case ElementKind::raw: return visit_raw(op, f);
    case ElementKind::nifti: return visit_nifti(op, f);
    case ElementKind::dicom: return visit_dicom(op, f);
  }
  return false;
}

// Elements [begin, end) in steps of `step` (1 on the host, the grid size on the device).
template <class E>
VOXPIPE_HD inline void run(const E& e, const ElementOp& op, const unsigned char* src,
                           unsigned char* dst, std::uint64_t begin, std::uint64_t end,
                           std::uint64_t step) {
  for (std::uint64_t i = begin; i < end; i += step) e(op, src + i * e.in_size, dst + i * e.out_size);
}

}  // namespace element

// Converts elements [begin, end) (in steps of `step`) of the contiguous `src` into the
// contiguous `dst`. `op` must have passed element_op_check. Never throws.
VOXPIPE_HD inline void convert_elements(const ElementOp& op, const unsigned char* src,
                                        unsigned char* dst, std::uint64_t begin,
                                        std::uint64_t end, std::uint64_t step = 1) {
  element::visit(op, [&](const auto& e) { element::run(e, op, src, dst, begin, end, step); });
}

}  // namespace voxpipe::cuda
