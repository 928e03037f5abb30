#include "cuda/element_op.hpp"

#include <string>

#include "voxpipe/error.hpp"

namespace voxpipe::cuda {

namespace {

bool is_real(DType t) { return dtype_is_integer(t) || dtype_is_float(t); }

const char* nifti_problem(const ElementOp& op) {
  if (op.unused_bits || op.modality) return "NIfTI conversions have no DICOM steps";
  if (dtype_is_complex(op.source)) {
    const bool real_dest = dtype_is_float(op.dest);
    if (!real_dest && !dtype_is_complex(op.dest)) return "a complex source converts to complex or float";
    if (op.real_part != real_dest) return "real_part must be set exactly for a real destination";
    return nullptr;
  }
  if (!is_real(op.source)) return "rgb24/rgba32 are copied raw only";
  if (!dtype_is_float(op.dest)) return "NIfTI conversions write float32 or float64";
  if (op.real_part) return "real_part applies to complex sources only";
  return nullptr;
}

const char* dicom_problem(const ElementOp& op) {
  if (!is_real(op.source)) return "DICOM values are integers or floats";
  if (op.modality ? !dtype_is_float(op.dest) : op.dest != op.source)
    return "the DICOM output is the stored type, or float32/float64 with the modality transform";
  if (op.unused_bits >= 8 * dtype_size(op.source) || (op.unused_bits && !dtype_is_integer(op.source)))
    return "BitsStored correction needs an integer type wider than the unused bits";
  if (!op.modality && op.scaling != Scaling::none) return "rescaling is part of the modality transform";
  if (op.scaling != Scaling::none && op.scaling != Scaling::both)
    return "the DICOM rescale applies slope and intercept together";
  if (op.real_part) return "real_part applies to complex sources only";
  return nullptr;
}

}  // namespace

const char* element_op_problem(const ElementOp& op) noexcept {
  if (static_cast<unsigned>(op.source) > static_cast<unsigned>(DType::rgba32) ||
      static_cast<unsigned>(op.dest) > static_cast<unsigned>(DType::rgba32))
    return "unknown dtype";
  switch (op.kind) {
    case ElementKind::raw:
      if (op.dest != op.source) return "a raw copy keeps the source dtype";
      if (op.scaling != Scaling::none || op.unused_bits || op.real_part || op.modality)
        return "a raw copy neither scales nor corrects bits";
      return nullptr;
    case ElementKind::nifti: return nifti_problem(op);
    case ElementKind::dicom: return dicom_problem(op);
  }
  return "unknown element kind";
}

ElementOp nifti_element_op(const core::Conversion& c) {
  if (!core::select_conversion(c))
    throw Error(ErrorCode::invalid_argument, "", "dtype",
                "no conversion from " + std::string(dtype_name(c.source)) + " to " +
                    std::string(dtype_name(c.dest)) + (c.raw ? " (raw)" : ""));
  ElementOp op;
  op.source = c.source;
  op.dest = c.dest;
  op.swap = c.swap && dtype_component_size(c.source) > 1;
  if (c.raw) return op;  // kind raw
  op.kind = ElementKind::nifti;
  op.real_part = dtype_is_complex(c.source) && dtype_is_float(c.dest);
  if (c.scale) {
    // The same choice as select_conversion: each operation only where it changes the value.
    const bool s = c.slope != 1.0, i = c.inter != 0.0;
    op.scaling = s && i ? Scaling::both : s ? Scaling::slope : i ? Scaling::inter : Scaling::none;
    op.slope = c.slope;
    op.inter = c.inter;
  }
  return op;
}

ElementOp dicom_element_op(const DicomPixelInfo& info, bool big_endian,
                           const DicomDecodeOptions& options, const dicom::Modality& transform) {
  const auto unsupported = [](const std::string& why) {
    return Error(ErrorCode::unsupported, "", "PixelData", why + ": not converted element by element");
  };
  if (info.codec != DicomCodec::native) throw unsupported("encapsulated or deflated pixel data");
  if (info.bits_allocated < 8) throw unsupported("bit-packed pixel data (BitsAllocated 1)");
  if (info.samples_per_pixel > 1 && info.planar_configuration == 1)
    throw unsupported("colour-by-plane pixel data (PlanarConfiguration 1)");
  if (info.photometric == "YBR_FULL_422") throw unsupported("YBR_FULL_422 pixel data");
  if (options.as_rgb && info.samples_per_pixel == 3 && info.photometric == "YBR_FULL")
    throw unsupported("YBR_FULL converted to RGB");
  ElementOp op;
  op.kind = ElementKind::dicom;
  op.source = info.dtype;
  op.dest = info.dtype;
  op.swap = big_endian && dtype_size(info.dtype) > 1;
  // pixels.cpp corrects unused bits of native Pixel Data (not Float/Double Float Pixel Data).
  constexpr DicomTag kPixelData = 0x7FE00010;
  if (info.tag == kPixelData && info.bits_allocated > info.bits_stored && info.bits_allocated > 1)
    op.unused_bits = static_cast<std::uint8_t>(info.bits_allocated - info.bits_stored);
  if (!options.modality) return op;
  if (*options.modality != DType::f32 && *options.modality != DType::f64)
    throw Error(ErrorCode::invalid_argument, "", "modality",
                "the modality transform gives float32 or float64");
  op.dest = *options.modality;
  op.modality = true;
  switch (transform.kind) {
    case dicom::Modality::Kind::none: break;
    case dicom::Modality::Kind::rescale:
      op.scaling = Scaling::both;
      op.slope = transform.slope;
      op.inter = transform.intercept;
      break;
    case dicom::Modality::Kind::lut: throw unsupported("a Modality LUT");
  }
  return op;
}

}  // namespace voxpipe::cuda
