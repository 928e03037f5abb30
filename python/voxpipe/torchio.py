"""A TorchIO reader over voxpipe: NIfTI files and DICOM folders, decoded by voxpipe.

    import torchio as tio
    import voxpipe.torchio

    image = tio.ScalarImage("t1.nii.gz", reader=voxpipe.torchio.read)
    subject = tio.Subject(t1=image, seg=tio.LabelMap("seg.nii.gz", reader=voxpipe.torchio.read))

``read(path)`` returns what TorchIO's default reader (SimpleITK) returns: a (C, W, H, D) tensor
and the 4x4 RAS affine. Tensors: a 3D volume gets a channel axis of 1; the volumes of a 4D
series become the channels; a 2D image is (1, W, H, 1). Their dtype is the stored one, as
SimpleITK's (uint16 and uint32 widened to int32 and int64, as TorchIO does), and float32 for
data the header scales (float64 for scaled float64 data), in native byte order for big-endian
files too (torch takes no other). The values equal SimpleITK's, with one
difference: scaled 32- and 64-bit integers, which ITK rounds to float32 before it scales them;
voxpipe scales in float64 and rounds once (nibabel's values). The affine is nibabel's
(``img.affine``), which ITK's equals for axis-aligned images; for oblique ones ITK's differs in
the last bits (around 1e-8), as it rebuilds the rotation from float32 header fields, and for 2D
images ITK drops the third axis (spacing 1, origin 0). DICOM folders are read with
``vp.load_dicom``: float32 values with each image's rescale, the same voxel order and affine as
ITK's series reader (which returns int16, int32 or float64 depending on the rescale).
"""

from __future__ import annotations

import os

import numpy as np

from ._foundation.optional import require

require("torchio", "torchio", "voxpipe.torchio", "TorchIO")

import torch
from torchio.data.io import check_uint_to_int

from ._foundation.types import Array, NiftiImage, StrPath
from ._formats.dicom.series import load_dicom
from ._formats.nifti.proxy import ArrayProxy
from ._images.image import load

__all__ = ["read"]


def _decode(img: NiftiImage) -> Array:
    proxy = img.dataobj
    if not isinstance(proxy, ArrayProxy):  # a .dcm file's image holds its decoded array
        return np.asanyarray(proxy)
    if (proxy.slope, proxy.inter) == (1.0, 0.0):
        return np.asanyarray(proxy)
    # ITK's NIfTI reader gives scaled data as float32, float64 data as float64.
    stored = np.dtype(proxy.dtype)
    dtype = np.float64 if stored.kind == "f" and stored.itemsize == 8 else np.float32  # any order
    return img.get_fdata(dtype=dtype, caching="unchanged")


def _channels_first(data: Array) -> Array:
    """(W, H, D) -> (1, W, H, D); (W, H, D, C) and (W, H, D, 1, C) -> (C, W, H, D);
    (W, H) -> (1, W, H, 1): TorchIO's layouts for what SimpleITK reads."""
    if data.ndim == 5 and data.shape[3] == 1:
        data = data[..., 0, :]
    if data.ndim == 4:
        return np.moveaxis(data, 3, 0)
    if data.ndim == 3:
        return data[np.newaxis]
    if data.ndim == 2:
        return data[np.newaxis, :, :, np.newaxis]
    return data  # TorchIO rejects other ranks with its own message


def read(path: StrPath) -> tuple[torch.Tensor, Array]:
    """A NIfTI file (.nii, .nii.gz, .hdr/.img), a DICOM folder or a .dcm file as (tensor,
    affine), for ``tio.ScalarImage(path, reader=voxpipe.torchio.read)`` and ``tio.LabelMap``."""
    path = os.fspath(path)
    img: NiftiImage
    if os.path.isdir(path):
        img = load_dicom(path)
        data = np.asanyarray(img.dataobj)
    else:
        img = load(path, mmap=False)  # the tensor owns its memory, not a map of the file
        data = _decode(img)
    if not data.dtype.isnative:
        # torch refuses other byte orders; SimpleITK gives big-endian files' values native too.
        # Swapped where it lies: the array was read for this call and is no one else's.
        data = data.byteswap(inplace=data.flags.writeable).view(data.dtype.newbyteorder("="))
    tensor = torch.as_tensor(check_uint_to_int(_channels_first(data)))
    return tensor, np.array(img.affine, dtype=np.float64)
