// The binding areas of voxpipe._core, one file each (python/src/<area>_bindings.cpp): each adds
// its classes and functions to the module. module.cpp, which makes the module, is the only file
// that includes this header; an area includes the foundation (conversions.hpp, gil.hpp) and the
// public headers (include/voxpipe/), never another area
// (tests/python/test_binding_areas.py checks it).
#pragma once

#include <nanobind/nanobind.h>

// nifti_bindings.cpp: NiftiImage, open, open_bytes, Reader, write and the header helpers.
void bind_nifti(nanobind::module_& m);
// gzip_index_bindings.cpp: build_index and build_remote_index.
void bind_gzip_index(nanobind::module_& m);
// runtime_bindings.cpp: the thread count, the recycled-output pool, keep_forever.
void bind_runtime(nanobind::module_& m);
// dicom_bindings.cpp: read_dicom and the parsed DICOM structures.
void bind_dicom(nanobind::module_& m);
// dicom_pixel_bindings.cpp: the pixel layer and series.
void bind_dicom_pixels(nanobind::module_& m);
// resample_bindings.cpp: map_coordinates and affine_transform.
void bind_resample(nanobind::module_& m);
// transform_bindings.cpp: the transform readers.
void bind_transforms(nanobind::module_& m);
// resample_series_bindings.cpp: the streaming resampler.
void bind_resample_series(nanobind::module_& m);
// device_bindings.cpp: CUDA status, device memory and loads into it.
void bind_device(nanobind::module_& m);
// view_bindings.cpp: the viewer's PNGs.
void bind_view(nanobind::module_& m);
// remote_bindings.cpp: objects read by byte ranges, URL handlers, the CLI's entry.
void bind_remote(nanobind::module_& m);
// zarr_bindings.cpp: NIfTI-Zarr chunks.
void bind_zarr(nanobind::module_& m);
