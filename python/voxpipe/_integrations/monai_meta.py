"""The metadata dict monai.data.NibabelReader builds for an image, without importing MONAI:
voxpipe.monai's reader and voxpipe.torch's VolumeDataset(meta=True) both give it, so a MONAI
pipeline sees the same keys and values whichever of them loaded the volume.

Keys (MONAI's MetaKeys): every header field (little-endian, as ``dict(header)``; text fields
dropped where MONAI drops them, see ``collatable``), ``original_pixdim``, ``affine``,
``original_affine``, ``as_closest_canonical``, ``spatial_shape``, ``space`` ("RAS") and
``original_channel_dim`` (NaN, MONAI's "no_channel", or -1 for a trailing non-spatial axis).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Union

import numpy as np
from nibabel.nifti1 import Nifti1Header

from .._foundation.types import Array, NiftiImage

if TYPE_CHECKING:  # typing.TypeAlias is Python 3.10+; the annotations are not evaluated
    from typing import TypeAlias

NO_CHANNEL = float("nan")

# MONAI's channel_dim: an axis, None or "no_channel" (or NaN, NO_CHANNEL) for none.
ChannelDim: TypeAlias = Union[int, float, str, None]


def is_no_channel(channel_dim: ChannelDim) -> bool:
    """MONAI's is_no_channel: None, "no_channel" or NaN."""
    if channel_dim is None or channel_dim == "no_channel":
        return True
    return isinstance(channel_dim, float) and np.isnan(channel_dim)


def _little_endian_header(img: NiftiImage) -> Nifti1Header:
    # PyTorch has no big-endian tensors: MONAI swaps the header (nibabel raises ValueError
    # where it cannot, and then the header is kept as it is).
    try:
        swapped: Nifti1Header = img.header.as_byteswapped("<")
    except ValueError:
        return img.header
    return swapped


def spatial_shape(img: NiftiImage, channel_dim: ChannelDim = None) -> Array:
    """NibabelReader._get_spatial_shape: the header's dim without the channel axis, at most 3."""
    dim = _little_endian_header(img).get("dim", None)
    ndim = dim[0]
    size = list(dim[1:])
    if channel_dim is not None and not is_no_channel(channel_dim):
        size.pop(int(channel_dim))
    return np.asarray(size[:max(min(ndim, 3), 1)])


def image_meta(img: NiftiImage, channel_dim: ChannelDim = None) -> dict[str, Any]:
    """The header fields, pixdim copy, affines and spatial shape of `img` (a nibabel image), as
    NibabelReader.get_data records them before the data are read; ``original_channel_dim`` is
    set by ``set_channel_dim`` once the data's rank is known."""
    meta = dict(_little_endian_header(img))
    if "pixdim" in meta:
        meta["original_pixdim"] = np.array(meta["pixdim"], copy=True)
    meta["affine"] = np.array(img.affine, copy=True)
    meta["original_affine"] = np.array(img.affine, copy=True)
    meta["as_closest_canonical"] = False
    meta["spatial_shape"] = spatial_shape(img, channel_dim)
    meta["space"] = "RAS"
    return meta


def set_channel_dim(meta: dict[str, Any], data_ndim: int,
                    channel_dim: ChannelDim = None) -> dict[str, Any]:
    """``original_channel_dim``: `channel_dim` if given, else NaN ("no_channel") when the data
    have only spatial axes and -1 (channel last) when they have more."""
    if channel_dim is None:
        channel_dim = NO_CHANNEL if data_ndim == len(meta["spatial_shape"]) else -1
    meta["original_channel_dim"] = channel_dim
    return meta


def collatable(meta: Mapping[str, Any]) -> dict[str, Any]:
    """What MONAI keeps of a reader's dict (image_reader._copy_compatible_dict): no arrays of
    strings, bytes or objects (PyTorch's default_collate refuses them), None as "none"."""
    return {k: "none" if v is None else v for k, v in meta.items()
            if not (isinstance(v, np.ndarray) and v.dtype.kind in "SUO")}
