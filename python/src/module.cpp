// The Python extension voxpipe._core: a thin layer over the public C++ API. Errors become the
// exception classes of voxpipe.errors (one table, in Python); the GIL is released around every
// call that touches files or voxel data.
//
// The module is made of binding areas (areas.hpp), one file each, added in turn below. An area
// calls only the foundation helpers (conversions.hpp, gil.hpp) and the public C++ API, never
// another area: a helper two areas need goes into the foundation
// (tests/python/test_binding_areas.py keeps it so).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <exception>

#include "areas.hpp"
#include "gil.hpp"
#include "voxpipe/error.hpp"

namespace nb = nanobind;
using namespace voxpipe;

NB_MODULE(_core, m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      python::GilAcquire gil;
      nb::object errors = nb::module_::import_("voxpipe._foundation.errors");
      nb::object offset = e.offset() ? nb::cast(*e.offset()) : nb::none();
      nb::object exc = errors.attr("make_error")(error_code_name(e.code()), e.what(), e.path(),
                                             e.field(), offset);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });

  bind_nifti(m);
  bind_gzip_index(m);
  bind_runtime(m);
  bind_dicom(m);
  bind_dicom_pixels(m);
  bind_resample(m);
  bind_transforms(m);
  bind_resample_series(m);
  bind_device(m);
  bind_view(m);
  bind_remote(m);
  bind_zarr(m);
}
