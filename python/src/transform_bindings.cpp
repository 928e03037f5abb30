// voxpipe._core's bindings of the transform readers (voxpipe/transforms.py).
#include <nanobind/nanobind.h>

namespace nb = nanobind;

void bind_transforms(nb::module_& m) { (void)m; }
