"""voxpipe: fast, exact loading of neuroimaging volumes.

The API follows nibabel's, so that switching is a one-line change::

    import voxpipe as vp
    img = vp.load("bold.nii.gz")          # a nibabel.Nifti1Image; header only
    vol = img.dataobj[..., 10]            # reads (inflates) only what is needed
    data = img.get_fdata(dtype="float32") # no float64 detour

Images are nibabel's own classes (``vp.Nifti1Image is nibabel.Nifti1Image``) whose ``dataobj`` is
voxpipe's ArrayProxy; ``vp.accelerate_nibabel()`` makes ``nibabel.load`` itself return them.
"""

from nibabel import Nifti1Header, Nifti1Image, Nifti1Pair, Nifti2Header, Nifti2Image, Nifti2Pair

# The built-in formats, each registered in the format registry as it is imported.
from ._formats import dicom as _dicom_format, nifti as _nifti_format, zarr as _zarr_format
from . import dicom, errors, gz, transforms
from ._formats.nifti.open import Extension
from ._formats.nifti.proxy import ArrayProxy
from ._formats.dicom.series import load_dicom
from ._foundation.device import (CudaStatus, CufileStatus, DeviceArray, cuda_empty_cache,
                                 cuda_status, cufile_status, to_device)
from ._foundation.interpolate import affine_transform, map_coordinates
from ._foundation.pool import clear_pool, pool_stats, set_pool_limit
from ._images.accelerate import NibabelAcceleration, accelerate_nibabel, nibabel_accelerated
from ._images.image import from_bytes, from_stream, load, save
from ._integrations import core_hooks as _core_hooks
from ._integrations.view import view
from ._many.convert import ConvertResult, convert_many, resample_many
from ._many.dask import to_dask
from ._many.iterate import LoadIterator, iter_load, load_many
from ._many.loading import empty_batch, load_batch
from ._many.resample_series import resample
from ._foundation.errors import DeviceUnavailableError, SkippedFileWarning, VoxpipeError

# The version is written once, in CMakeLists.txt's project(); the wheel's metadata carries it
# (pyproject.toml reads it from there).
from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _dist_version

try:
    __version__ = _dist_version("voxpipe")
except _PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

# The core reads URLs and stores (through obstore and zarr) wherever it is given a path.
_core_hooks.install()
del _dicom_format, _nifti_format, _zarr_format

__all__ = [
    "ArrayProxy", "Extension", "Nifti1Header", "Nifti1Image", "Nifti1Pair", "Nifti2Header",
    "Nifti2Image", "Nifti2Pair",
    "LoadIterator", "SkippedFileWarning", "load_dicom", "VoxpipeError", "dicom", "empty_batch",
    "errors",
    "NibabelAcceleration", "accelerate_nibabel", "nibabel_accelerated",
    "gz", "iter_load", "load", "from_bytes", "from_stream", "load_batch", "load_many", "save",
    "__version__",
    "affine_transform", "map_coordinates", "resample",
    "CudaStatus", "CufileStatus", "DeviceArray", "DeviceUnavailableError", "cuda_empty_cache",
    "cuda_status", "cufile_status",
    "to_device", "view", "ConvertResult", "convert_many", "resample_many", "to_dask",
    "clear_pool", "pool_stats", "set_pool_limit",
]
