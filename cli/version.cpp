// voxpipe --version. The only source compiled with the version and the build's inflate backend
// (CMakeLists.txt), so that a version change recompiles this file alone.
#include <ostream>

#include "cli_common.hpp"
#include "voxpipe/device.hpp"
#include "voxpipe/dicom.hpp"

#ifndef VOXPIPE_VERSION
#error "VOXPIPE_VERSION must be defined (project(VERSION) in CMakeLists.txt)"
#endif
#define VOXPIPE_STRINGIFY_(x) #x
#define VOXPIPE_STRINGIFY(x) VOXPIPE_STRINGIFY_(x)

namespace voxpipe::cli {

const char* version() { return VOXPIPE_STRINGIFY(VOXPIPE_VERSION); }

void print_version(std::ostream& out) {
  out << "voxpipe " << version() << "\n";
  out << "inflate: " << (VOXPIPE_INFLATE_ISAL ? "ISA-L" : "zlib (built without ISA-L)") << "\n";
  // The compressed DICOM syntaxes, each with the library that decodes it ("not built": a source
  // build that did not find that library).
  out << "DICOM codecs:";
  const char* sep = " ";
  for (DicomCodec c : {DicomCodec::rle, DicomCodec::jpeg_lossless, DicomCodec::jpeg,
                       DicomCodec::jpeg_ls, DicomCodec::jpeg2000}) {
    const char* library = "";
    const bool built = dicom_codec_built(c, &library);
    out << sep << dicom_codec_name(c);
    if (!built)
      out << " (not built: no " << library << ")";
    else if (*library)
      out << " (" << library << ")";
    sep = ", ";
  }
  out << "\n";
  const CudaStatus& cuda = cuda_status();
  out << "CUDA kernels: " << (cuda.kernels_built ? "built" : "not built") << "\n";
  out << "GPU: ";
  if (cuda.available) {
    out << "available, " << cuda.device_count << (cuda.device_count == 1 ? " device" : " devices");
    for (std::size_t i = 0; i < cuda.device_names.size(); ++i)
      out << (i ? ", " : ": ") << cuda.device_names[i];
    out << "\n";
  } else {
    out << "not available (" << cuda.reason << ")\n";
  }
}

}  // namespace voxpipe::cli
