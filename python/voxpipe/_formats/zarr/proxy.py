"""NIfTI-Zarr stores as nibabel images: the proxy over one level of a store (the NIfTI proxy's
API; reads decode only the chunks they touch) and the format's reader."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typing.Self is Python 3.11+; the annotations are not evaluated
    from typing_extensions import Self

import numpy as np

import nibabel as nib
from nibabel.fileholders import FileHolder
from nibabel.nifti1 import Nifti1Pair

from ..._foundation.native import core as _core
from ..._foundation.types import Array
from ..._sources import remote as _remote
from ..nifti.open import image_from_core
from ..nifti.proxy import ArrayProxy
from ..nifti.slicing import Range, empty_for
from .header_block import virtual_prefix
from .read import NiftiZarr, open_core, read_stored_values


class ZarrProxy(ArrayProxy):
    """nibabel's proxy contract (and voxpipe's ``read``/``read_into``) over one level of a
    NIfTI-Zarr store: reads decode only the chunks they touch, in parallel, straight into
    the output with the scaling fused, as for .nii.gz. Pickles as (location, options,
    level), never as data."""

    def __init__(self, core_image: _core.NiftiImage, store: NiftiZarr, threads: int = 0) -> None:
        super().__init__(core_image, threads, "none", "", mmap=False, keep_file_open=False,
                         source=store)
        self._store = store

    @property
    def chunks(self) -> tuple[int, ...]:
        """The storage chunk shape in NIfTI's axis order (x, y, z[, t[, c]]): reads aligned
        to it decode each chunk once."""
        cshape = dict(zip(self._store.axes, self._store.array.chunks))
        return tuple(int(cshape.get(a, 1)) for a in ("x", "y", "z", "t", "c")[:self.ndim])

    @property
    def store(self) -> NiftiZarr:
        return self._store

    def __copy__(self) -> Self:
        new = type(self)(self._img, self._store, self._threads)
        new._shape = self._shape
        return new

    def __reduce__(self) -> tuple[Callable[..., ZarrProxy], tuple[Any, ...]]:
        s = self._store  # by its absolute name (NiftiZarr.absolute_location)
        # With what pins the store (a local store's files, the listing of one on object
        # storage): a task reading it after the store was replaced or rewritten (a chunk
        # included) fails rather than reading the new voxels under this header.
        state = s.identity.state()
        return (_reopened_zarr_proxy, (s.absolute_location, s.storage_options, s.level,
                                       self._threads, self._shape, state))

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        s = self._store
        # The store's header and array metadata (a store rewritten in place with new
        # metadata is another array), and what pins it: a local store's files, the ETags of
        # one on object storage (a rewritten chunk is another version); not the thread count,
        # which changes no value.
        where = (s.location if _remote.is_url(s.location)
                 else os.path.normpath(s.absolute_location))
        return ("voxpipe.ZarrProxy", where, s.level, repr(s.storage_options), s.stored_header,
                repr(s.array.metadata.to_dict()), self._shape,
                s.identity.state())

    def _read_stored(self, stored: Sequence[Range], dtype: np.dtype[Any], apply_scaling: bool,
                     file_order: bool, real_part: bool, out: Array | None,
                     shape: tuple[int, ...], subtype: type[Array] = np.ndarray) -> Array:
        if out is None:
            out = empty_for(shape, dtype, subtype)
        view = out.reshape([c for _, _, c in stored], order="F")
        if file_order and not apply_scaling:
            read_stored_values(self._store, stored, view, self._threads)
        else:
            self._store.read(stored, np.dtype(dtype), apply_scaling, file_order, real_part,
                             self._img.slope, self._img.inter, view, self._threads)
        return out

    def __repr__(self) -> str:
        return (f"<ZarrProxy shape={self._shape} dtype={self._dtype} "
                f"store={self._store.name!r}>")


def _reopened_zarr_proxy(location: str, storage_options: Mapping[str, Any] | None, level: int,
                         threads: int, shape: Sequence[int],
                         identity: tuple[Any, ...] | None = None) -> ZarrProxy:
    store = NiftiZarr(location, storage_options, level)
    if identity is not None:
        store.identity.check_same(location, identity)
    core, _ = open_core(store, threads)
    proxy = ZarrProxy(core, store, threads)
    return proxy if tuple(shape) == proxy.shape else proxy.reshape(shape)


def load(location: Any, *, storage_options: Mapping[str, Any] | None = None, threads: int = 0,
         level: int = 0) -> Nifti1Pair:
    """A NIfTI-Zarr store as a nibabel image (Nifti1Image/Nifti2Image by its header) whose
    ``dataobj`` reads the store's chunks on demand; opening reads the metadata and the header
    array only. ``level``: the pyramid level (0, the finest, by default; its header's dims,
    voxel sizes and affines are the level's)."""
    location = os.fspath(location)
    store = NiftiZarr(location, storage_options, level)
    core, raised = open_core(store, threads)
    klass = nib.Nifti1Image if core.version == 1 else nib.Nifti2Image
    prefix, _ = virtual_prefix(store.stored_header, store.location)
    proxy = ZarrProxy(core, store, threads)
    img = image_from_core(klass, core, {"image": FileHolder(filename=location)}, False, None,
                          threads, False, prefix, proxy=proxy)
    if raised != -1:  # the header as stored: the virtual file's offset is not the store's
        img.header.set_data_offset(raised)
        # nibabel's from_file_map sets _load_cache, which its classes do not declare.
        img._load_cache["header"].set_data_offset(raised)  # type: ignore[attr-defined]
    return img
