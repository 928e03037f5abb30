"""A MONAI image reader over voxpipe: NIfTI files and DICOM folders, decoded by voxpipe.

    from monai.transforms import LoadImage, LoadImaged
    from voxpipe.monai import VoxpipeReader

    load = LoadImage(reader=VoxpipeReader())   # or reader="voxpipe.monai.VoxpipeReader"
    loadd = LoadImaged(keys=["image", "label"], reader=VoxpipeReader())

For NIfTI (.nii, .nii.gz) the arrays and metadata equal ``monai.data.NibabelReader``'s (the same
keys and values: header fields, ``affine``, ``original_affine``, ``spatial_shape``,
``original_channel_dim``, ...; ``channel_dim``, ``as_closest_canonical`` and
``squeeze_non_spatial_dims`` as there). The difference is where the data come from: voxpipe
inflates on every core and decodes straight into ``dtype``.

``dtype`` (float32 by default, as LoadImage's own default): the dtype ``get_data`` returns. With
LoadImage's default the volume is decoded once, into its final dtype, with the values
NibabelReader's float64 array gives after LoadImage's cast, and handed over C-contiguous, the
layout LoadImage copies every image into. ``dtype=None`` returns exactly what
NibabelReader returns (``np.asanyarray(img.dataobj)``: the stored dtype, float64 for scaled
data); use it, or the same dtype, when LoadImage is given ``dtype=None`` or an integer dtype
(label maps), so the reader does not round values LoadImage would keep.

A folder is read as a DICOM series with ``vp.load_dicom``: each image's rescale applied,
voxel axes (column, row, slice) and the RAS affine, which is what ``monai.data.PydicomReader``
gives (its ``swap_ij`` and ``affine_lps_to_ras`` defaults) when the InstanceNumbers run along
the slice normal; voxpipe orders slices by position along the normal whatever their numbers.
Its metadata are those of the NIfTI image the series converts to, plus PydicomReader's
``spacing``; ``dtype=None`` gives float32 there (PydicomReader's dtype for rescaled images).

Keyword arguments other than those go to ``vp.load`` (``threads``, ``index``, ``mmap``,
``keep_file_open``); ``threads`` also to ``vp.load_dicom``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt

from ._foundation.optional import require

require("monai", "monai", "voxpipe.monai", "MONAI")

import nibabel as nib
# MONAI's own helpers for several files (metadata checks, stacking), so that they behave exactly
# as with its readers.
from monai.data.image_reader import ImageReader, _copy_compatible_dict, _stack_images
from monai.data.utils import affine_to_spacing, correct_nifti_header_if_necessary
from monai.data.utils import is_supported_format
from monai.utils import SpaceKeys, ensure_tuple

from ._foundation.native import core as _core
from ._integrations import monai_meta as _monai_meta
from ._foundation import pool as _pool
from ._foundation.types import Array, NiftiImage, StrPath
from ._formats.dicom.series import load_dicom
from ._formats.nifti.proxy import ArrayProxy
from ._images.image import load

__all__ = ["VoxpipeReader"]

_NIFTI_SUFFIXES = ("nii", "nii.gz")


def _decodes_exactly(proxy: ArrayProxy, dtype: np.dtype[Any]) -> bool:
    """Whether voxpipe's decode into float `dtype` equals LoadImage's cast of NibabelReader's
    array (float64 for scaled data, else the stored dtype). Both round once where that array is
    float64 computed from the stored values, or the stored values widen to float64 exactly;
    unscaled int64/uint64 would round twice on voxpipe's path (to float64, then to `dtype`),
    and complex and RGB data are not decoded to real floats."""
    stored = np.dtype(proxy.dtype)
    if dtype.kind != "f" or stored.kind not in "iuf":
        return False
    scaled = (proxy.slope, proxy.inter) != (1.0, 0.0)
    return scaled or stored.kind == "f" or stored.itemsize <= 4


# Bytes read per step by _decode_c_order: about 1 MiB, so that a slab is still in cache when it
# is copied (4 planes of 256x256 float32; 16 planes measured no faster).
_SLAB_BYTES = 1 << 20


def _decode_c_order(proxy: ArrayProxy, dtype: np.dtype[Any], threads: int) -> Array:
    """The proxy's data in `dtype`, C-contiguous. Read whole, voxpipe's output is in the file's
    (Fortran) order, and NumPy's transposing copy of it takes about as long as the decode (0.09
    to 0.12 s for 256x256x176 float32 on the 2-core build machine). Here a few planes of the last
    axis at a time are read into a small Fortran-ordered buffer and copied into place plane by
    plane while in cache, on a second thread while the next slab is read: 0.08 s in all, as
    long as the whole read alone (one thread: 0.10 s). Forward reads of a .gz continue where the
    last one stopped."""
    shape = tuple(proxy.shape)
    out = _pool.empty(shape, dtype, "C")
    long_axes = [k for k, n in enumerate(shape) if n > 1]
    if out.size == 0 or len(long_axes) < 2:  # C and Fortran order are the same
        proxy.read(dtype=dtype, out=out)  # returns `out`
        return out
    last = long_axes[-1]
    n = shape[last]
    step = max(1, _SLAB_BYTES // (int(np.prod(shape[:last])) * dtype.itemsize))
    lead, trail = (slice(None),) * last, (0,) * (len(shape) - last - 1)
    dest = out.reshape(shape[:last + 1])  # the trailing axes are 1 long: a view
    bufs = [np.empty(shape[:last] + (min(step, n),), dtype, order="F")
            for _ in range(2 if threads > 1 else 1)]

    def read(buf: Array, k: int) -> Array:
        part = buf[..., :min(step, n - k)]
        proxy.read(lead + (slice(k, k + part.shape[-1]),) + trail, dtype, out=part)
        return part

    def place(part: Array, k: int) -> None:
        for j in range(part.shape[-1]):  # plane by plane: NumPy's inner loop then runs along
            dest[..., k + j] = part[..., j]  # a row, not across the few planes (1.4x faster)

    if len(bufs) == 1:
        for k in range(0, n, step):
            place(read(bufs[0], k), k)
        return out
    copies: list[Future[None] | None] = [None, None]
    with ThreadPoolExecutor(1) as pool:
        for i, k in enumerate(range(0, n, step)):
            before = copies[i % 2]
            if before is not None:
                before.result()  # the slab before in this buffer is in place
            copies[i % 2] = pool.submit(place, read(bufs[i % 2], k), k)
        for copy in copies:
            if copy is not None:
                copy.result()
    return out


def _c_contiguous(data: Array, threads: int) -> Array:
    """`data` as a C-contiguous array, the layout LoadImage gives every image (its
    convert_to_numpy calls np.ascontiguousarray). NumPy's transposing copy of a Fortran-ordered
    volume walks the source across whole planes for every output row, on one core: 0.09 s for
    256x256x176 float32 here. Copied four planes of the last axis at a time, on `threads`
    threads, it takes about 0.03 s on 2 cores."""
    if data.flags.c_contiguous or data.ndim < 2:
        return data
    out = _pool.empty(data.shape, data.dtype, "C")
    n = data.shape[-1]
    blocks = [slice(k, min(k + 4, n)) for k in range(0, n, 4)]

    def copy(block: slice) -> None:
        out[..., block] = data[..., block]  # NumPy releases the GIL while it copies

    if threads > 1 and len(blocks) > 1:
        with ThreadPoolExecutor(min(threads, len(blocks))) as pool:
            list(pool.map(copy, blocks))
    else:
        for block in blocks:
            copy(block)
    return out


class VoxpipeReader(ImageReader):
    """Load NIfTI images and DICOM series with voxpipe (see the module's documentation).

    Args:
        channel_dim: as NibabelReader: the channel axis of the data, None (``original_channel_dim``
            NaN, "no_channel", or -1 when the data have a non-spatial axis) or "no_channel".
        as_closest_canonical: reorient to the closest RAS axes, as NibabelReader.
        squeeze_non_spatial_dims: drop non-spatial singleton axes, as NibabelReader.
        dtype: dtype of the arrays ``get_data`` returns: float32 (the default), another float
            type (then C-contiguous, LoadImage's layout), or None for NibabelReader's own array
            (the stored dtype, float64 when scaled, in the file's order).
        kwargs: passed to ``vp.load`` (``threads``, ``index``, ``mmap``, ``keep_file_open``).
    """

    def __init__(self, channel_dim: str | int | None = None, as_closest_canonical: bool = False,
                 squeeze_non_spatial_dims: bool = False, dtype: npt.DTypeLike = np.float32,
                 **kwargs: Any):
        super().__init__()
        self.channel_dim: _monai_meta.ChannelDim = (
            _monai_meta.NO_CHANNEL if channel_dim == "no_channel" else channel_dim)
        self.as_closest_canonical = as_closest_canonical
        self.squeeze_non_spatial_dims = squeeze_non_spatial_dims
        self.dtype: np.dtype[Any] | None = None if dtype is None else np.dtype(dtype)
        self.kwargs = kwargs

    def verify_suffix(self, filename: Sequence[StrPath] | StrPath) -> bool:
        """True for .nii / .nii.gz files and for folders (DICOM series), every one of a list."""
        names = ensure_tuple(filename)
        return all(os.path.isdir(n) or is_supported_format(n, _NIFTI_SUFFIXES) for n in names)

    def read(self, data: Sequence[StrPath] | StrPath,
             **kwargs: Any) -> NiftiImage | list[NiftiImage]:
        """Open each file (header only; DICOM folders are decoded here): one nibabel image, or a
        list of them for a list of names. `kwargs` override the constructor's for ``vp.load``."""
        kwargs_ = {**self.kwargs, **kwargs}
        filenames = ensure_tuple(data)
        images: list[NiftiImage] = []
        for name in filenames:
            img: NiftiImage
            if os.path.isdir(name):
                dtype = np.float32 if self.dtype is None else self.dtype
                img = load_dicom(name, dtype=dtype, threads=kwargs_.get("threads"))
            else:
                img = load(name, **kwargs_)
            images.append(correct_nifti_header_if_necessary(img))
        return images if len(filenames) > 1 else images[0]

    def get_data(self, img: NiftiImage | Sequence[NiftiImage]) -> tuple[Array, dict[str, Any]]:
        """The data and metadata of an image from ``read`` (several: stacked on a new first axis,
        or concatenated on ``channel_dim``, with the first one's metadata), as NibabelReader."""
        arrays: list[Array] = []
        compatible_meta: dict[str, Any] = {}
        for image in ensure_tuple(img):
            meta = _monai_meta.image_meta(image, self.channel_dim)
            meta["space"] = SpaceKeys.RAS  # the same value as "RAS", in MONAI's enum
            if getattr(image, "dicom", None) is not None:  # a series from vp.load_dicom
                meta["spacing"] = affine_to_spacing(meta["original_affine"],
                                                    r=len(meta["spatial_shape"]))
            data = self._array(image)
            if self.as_closest_canonical:
                # nibabel's reorientation, applied to the decoded array (not a float64 read).
                image = nib.as_closest_canonical(image.__class__(data, image.affine, image.header))
                data = np.asanyarray(image.dataobj)
                meta["as_closest_canonical"] = True
                meta["affine"] = np.array(image.affine, copy=True)
                meta["spatial_shape"] = _monai_meta.spatial_shape(image, self.channel_dim)
            if self.squeeze_non_spatial_dims:
                for d in range(data.ndim, len(meta["spatial_shape"]), -1):
                    if data.shape[d - 1] == 1:
                        data = data.squeeze(axis=d - 1)
            _monai_meta.set_channel_dim(meta, data.ndim, self.channel_dim)
            if self.dtype is not None:
                data = _c_contiguous(data, self._threads())
            arrays.append(data)
            _copy_compatible_dict(meta, compatible_meta)
        return _stack_images(arrays, compatible_meta), compatible_meta

    def _threads(self) -> int:
        return _core.resolve_threads(self.kwargs.get("threads", 0))

    def _array(self, img: NiftiImage) -> Array:
        if self.dtype is None:
            return np.asanyarray(img.dataobj)
        # Images from ``read`` hold voxpipe's proxy or, for DICOM, an array.
        if isinstance(img.dataobj, ArrayProxy) and _decodes_exactly(img.dataobj, self.dtype):
            return _decode_c_order(img.dataobj, self.dtype, self._threads())
        return np.asanyarray(img.dataobj).astype(self.dtype, copy=False)
