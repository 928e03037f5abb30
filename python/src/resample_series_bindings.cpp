// voxpipe._core's bindings of the streaming resampler (vp.resample).
#include <nanobind/nanobind.h>

namespace nb = nanobind;

void bind_resample_series(nb::module_& m) { (void)m; }
