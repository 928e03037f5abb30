// Host-side construction and checking of ElementOp (convert_element.hpp): from the CPU path's
// own descriptions, so that the device converts with exactly the parameters the CPU would use.
// Internal.
#pragma once

#include <optional>

#include "core/convert.hpp"
#include "cuda/convert_element.hpp"
#include "dicom/modality.hpp"
#include "voxpipe/dicom.hpp"

namespace voxpipe::cuda {

// nullptr when `op` is one convert_elements handles; otherwise why not (a static string).
const char* element_op_problem(const ElementOp& op) noexcept;

// The ElementOp doing what core::select_conversion(c) does. Throws Error(invalid_argument)
// when select_conversion has no kernel for `c` either.
ElementOp nifti_element_op(const core::Conversion& c);

// The ElementOp turning the native (uncompressed) pixel data described by `info` into
// decode_dicom_frames' output: pixel_array's values (modality nullopt) or the modality
// transform to f32/f64 with the Rescale Slope/Intercept of `transform`. `big_endian`: the data
// are in Explicit VR Big Endian. Throws Error(unsupported) for data that are not one value per
// stored element in output order (encapsulated or deflated syntaxes, BitsAllocated 1, planar
// colour, YBR_FULL_422, YBR_FULL converted to RGB) and for a Modality LUT; Error(invalid_argument)
// for a modality dtype other than f32/f64.
ElementOp dicom_element_op(const DicomPixelInfo& info, bool big_endian,
                           const DicomDecodeOptions& options, const dicom::Modality& transform);

}  // namespace voxpipe::cuda
