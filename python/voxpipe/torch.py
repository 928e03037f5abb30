"""PyTorch datasets over voxpipe: volumes as tensors, batches decoded straight into one tensor.

    from torch.utils.data import DataLoader
    import voxpipe.torch as vpt

    ds = vpt.VolumeDataset(paths, labels=labels)
    loader = DataLoader(ds, batch_size=8, shuffle=True, collate_fn=vpt.collate)
    for volumes, targets in loader:   # volumes: (8, X, Y, Z) float32, no per-item copies
        ...

Tensors share memory with the NumPy arrays voxpipe decodes into (``torch.from_numpy``): no copy.
Their layout is NIfTI's (each volume Fortran-ordered, as nibabel's arrays), so a batch tensor
is not C-contiguous; call ``.contiguous()`` where a model needs it.

With ``collate_fn=collate`` a batch of equal-shape volumes is decoded directly into one
(batch, ...) array (``vp.load_batch``), through the ``__getitems__`` hook DataLoader's fetcher
calls. With PyTorch's default collate the same batch is stacked by ``torch.stack`` (one copy):
correct, only slower. Differently shaped volumes in one batch are returned as a list by
``collate``.

With ``meta=True`` every item also carries its image's metadata, the dict MONAI's NibabelReader
builds (header fields, ``affine``, ``original_affine``, ``spatial_shape``, ``space``,
``original_channel_dim``, ...) plus ``filename_or_obj``: ``(volume, meta)`` or
``(volume, label, meta)``; ``collate`` gives the batch's dicts collated as PyTorch's default_collate
does (arrays stacked into tensors, an affine batch of shape (batch, 4, 4); file names as a list).

Paths may be URLs of objects (``s3://``, ``gs://``, ``az://``, ``http(s)://``), mixed with local
files, read as ``vp.load`` reads them with the dataset's ``storage_options``; a batch fetches its
objects several at once (``vp.load_batch``). The dataset pickles as its URLs and options, so
DataLoader workers fetch the objects themselves. obstore, which reads them, does not work in a
process forked after it was used (its runtime's threads are not copied: a read would wait
forever): if the main process has read any URL, start the workers with
``multiprocessing_context="spawn"`` (or ``"forkserver"``).

Threads: with ``num_workers=0`` voxpipe decodes each batch on every core (``threads=None``). In a
DataLoader worker process the default is one thread per worker, so ``num_workers`` processes do
not each start a thread per core; pass ``threads`` to choose.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Union

import numpy as np
import numpy.typing as npt

from ._foundation.optional import require

# Imported once through require (which names the extra when PyTorch is missing), then by name so
# that type checkers see the module.
require("torch", "torch", "voxpipe.torch", "PyTorch")
import torch
from torch.utils.data import Dataset, get_worker_info
from torch.utils.data._utils.collate import default_collate

from ._foundation.types import Array, NiftiImage, StrPath
from ._integrations import monai_meta as _monai_meta
from ._sources import remote as _remote
from ._many.loading import decode, load_batch_and_images, empty_batch
from ._images.image import load

__all__ = ["VolumeBatch", "VolumeDataset", "collate"]

# An item of a VolumeDataset: the volume tensor alone, or a tuple (volume, label, meta) of the
# parts it has.
Sample = Union[torch.Tensor, tuple[Any, ...]]


class VolumeBatch(list[Sample]):
    """The samples of one batch (as __getitem__ gives them) together with the batch tensor their
    volumes are views of, and the batch's collated labels and metadata; ``collate`` returns the
    batch tensor without stacking."""

    def __init__(self, samples: Iterable[Sample], volumes: torch.Tensor, labels: Any = None,
                 meta: Any = None):
        super().__init__(samples)
        self.volumes = volumes
        self.labels = labels
        self.meta = meta


class VolumeDataset(Dataset[Sample]):
    """A map-style dataset of NIfTI files: item i is the volume of ``paths[i]`` as a tensor, or
    ``(volume, labels[i])`` when ``labels`` are given.

    ``dtype``: as ``vp.load_many`` (float32 by default: ``img.get_fdata(dtype=float32)``; None:
    the stored dtype, as ``np.asanyarray(img.dataobj)``). ``transform``: applied to each volume
    tensor (then batches are collated from the transformed tensors, by stacking). ``threads``:
    decode threads (None: every core in the main process, one in a DataLoader worker).
    ``channel_dim``: add a leading channel axis of 1, (1, X, Y, Z) per item, as MONAI expects.
    ``meta``: items end with the image's MONAI-style metadata dict (see the module's notes).
    ``storage_options``: the store configuration for the URLs among ``paths``, as ``vp.load``
    takes it.

    >>> from torch.utils.data import DataLoader
    >>> from voxpipe.torch import VolumeDataset, collate
    >>> loader = DataLoader(VolumeDataset(["demo_bold.nii.gz"] * 2), batch_size=2,
    ...                     collate_fn=collate)
    >>> next(iter(loader)).shape                # decoded straight into one tensor
    torch.Size([2, 64, 64, 40, 60])
    """

    def __init__(self, paths: Sequence[StrPath], labels: Sequence[Any] | None = None,
                 dtype: npt.DTypeLike = np.float32,
                 transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 threads: int | None = None, channel_dim: bool = False,
                 index: StrPath | Literal[False] | None = None, meta: bool = False,
                 storage_options: Mapping[str, Any] | None = None):
        self.paths = [os.fspath(p) for p in paths]
        if labels is not None and len(labels) != len(self.paths):
            raise ValueError(f"{len(labels)} labels for {len(self.paths)} paths")
        self.labels = labels
        self.dtype: np.dtype[Any] | None = None if dtype is None else np.dtype(dtype)
        self.transform = transform
        self.threads = threads
        self.channel_dim = channel_dim
        self.index = index
        self.meta = meta
        self.storage_options = dict(storage_options) if storage_options else None

    def __len__(self) -> int:
        return len(self.paths)

    def _threads(self) -> int:
        if self.threads is not None:
            return self.threads
        return 1 if get_worker_info() is not None else 0

    def _tensor(self, arr: Array) -> torch.Tensor:
        t = torch.from_numpy(arr)
        return t.unsqueeze(0) if self.channel_dim else t

    def _meta(self, i: int, img: NiftiImage) -> dict[str, Any]:
        """What MONAI's NibabelReader and LoadImage record for the file (no channel axis, as
        the file has none), in the form default_collate takes."""
        meta = _monai_meta.collatable(_monai_meta.set_channel_dim(_monai_meta.image_meta(img),
                                                                  len(img.shape)))
        meta["filename_or_obj"] = self.paths[i]
        return meta

    def _sample(self, i: int, volume: torch.Tensor,
                meta: dict[str, Any] | None = None) -> Sample:
        if self.transform is not None:
            volume = self.transform(volume)
        sample: tuple[Any, ...] = (volume,) if self.labels is None else (volume, self.labels[i])
        if meta is not None:
            sample += (meta,)
        return sample[0] if len(sample) == 1 else sample

    def __getitem__(self, i: int) -> Sample:
        kwargs: dict[str, Any] = {} if self.index is None else {"index": self.index}
        if self.storage_options and _remote.is_url(self.paths[i]):
            kwargs["storage_options"] = self.storage_options
        img = load(self.paths[i], threads=self._threads(), **kwargs)
        meta = self._meta(i, img) if self.meta else None
        return self._sample(i, self._tensor(decode(img, self.dtype)), meta)

    def __getitems__(self, indices: Iterable[int]) -> list[Sample]:
        """A whole batch (DataLoader's fetcher calls this with the batch's indices)."""
        indices = list(indices)
        if self.transform is not None or len(indices) < 2:
            return [self[i] for i in indices]
        paths = [self.paths[i] for i in indices]
        shared: list[torch.Tensor] = []
        allocate = _shared_batch(shared) if get_worker_info() is not None else empty_batch
        try:
            batch, imgs = load_batch_and_images(paths, None, self.dtype, self._threads(), None,
                                                self.index, None, self.storage_options, allocate)
        except ValueError as exc:
            if "one shape" not in str(exc) and "one data dtype" not in str(exc):
                raise
            return [self[i] for i in indices]  # mixed shapes: item by item, collated as a list
        volumes = shared[0] if shared else torch.from_numpy(batch)
        if self.channel_dim:
            volumes = volumes.unsqueeze(1)
        metas: list[dict[str, Any] | None] = [None] * len(indices)
        if self.meta:  # the batch's own images: their headers, nothing read again
            metas = [self._meta(i, img) for i, img in zip(indices, imgs)]
        samples = [self._sample(i, volumes[k], metas[k]) for k, i in enumerate(indices)]
        labels = None
        if self.labels is not None:
            labels = default_collate([self.labels[i] for i in indices])
        return VolumeBatch(samples, volumes, labels, default_collate(metas) if self.meta else None)


def _shared_batch(made: list[torch.Tensor]) -> Callable[[int, tuple[int, ...], np.dtype[Any]],
                                                        Array]:
    """empty_batch for a DataLoader worker: the batch in shared memory, as PyTorch's own collate
    makes it in workers, so that it reaches the main process as a handle, not copied into shared
    memory on the way. The tensor over it is appended to `made`."""
    def allocate(n: int, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Array:
        dims = tuple(int(d) for d in shape)
        volume = int(np.prod(dims, dtype=np.int64))
        tdtype = torch.from_numpy(np.empty(0, dtype)).dtype
        storage = torch.UntypedStorage._new_shared(max(1, n * volume) * dtype.itemsize)
        flat = torch.empty(0, dtype=tdtype).set_(storage, 0, (n * volume,), (1,))
        strides = [1]
        for d in dims[:-1]:
            strides.append(strides[-1] * d)
        tensor = flat.as_strided((n,) + dims, (volume,) + tuple(strides))
        made.append(tensor)
        return tensor.numpy()
    return allocate


def collate(samples: Sequence[Sample]) -> Any:
    """DataLoader collate_fn for VolumeDataset: the batch tensor of a VolumeBatch as it is (no
    copy), with its labels and metadata collated; otherwise PyTorch's default_collate, and a list
    of tensors for volumes of different shapes."""
    if isinstance(samples, VolumeBatch):
        rest = tuple(x for x in (samples.labels, samples.meta) if x is not None)
        return (samples.volumes, *rest) if rest else samples.volumes
    try:
        return default_collate(samples)
    except RuntimeError:
        # Volumes of different shapes cannot be stacked; labels and metadata can.
        if samples and isinstance(samples[0], tuple):
            return ([s[0] for s in samples],
                    *(default_collate([s[k] for s in samples]) for k in range(1, len(samples[0]))))
        return list(samples)
