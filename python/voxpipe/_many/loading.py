"""Many files at once: what every many-file loader shares (the thread plan, opening and
decoding one file, the file workers of a batch) and load_batch; iter_load and load_many, which
hand files over one by one as they are decoded, are iterate.py's.

Files are opened and decoded by a few Python worker threads ("file workers"), each of which hands
the decode of its file to the C++ core with the GIL released; the core splits a file further on
its shared thread pool. Workers times the threads each file gets never exceeds ``threads``, so
file-level and chunk-level parallelism share the cores instead of multiplying. Loads to a device
(load_many and load_batch with ``device=``) use the same workers: each worker's file is read,
converted and copied by the core with the GIL released, so while one file is being read or
inflated another's bytes are on their way to the device. Each file's device load gets the
per-file thread count (the inflate's threads for a .nii.gz, at most that many readers for a
.nii) and the ``index=`` choice, as a host read does.

URLs (s3://, gs://, az://, http(s)://) may stand among the paths: each object is fetched whole in
one GET on I/O threads of their own (``io_threads`` at once, default 8), ahead of the file
workers, and decoded from memory as ``vp.load(url)`` decodes it (_sources/prefetch.py); its fetched
bytes count against ``max_inflight_bytes`` with its decoded data. Local paths take the path
above, untouched.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Optional, Union, overload

import numpy as np
import numpy.typing as npt

from .._foundation.native import core as _core
from .._foundation import pool as _pool
from .._sources import remote as _remote
from .._sources import prefetch as _remote_many
from .._formats.nifti.open import open_fetched
from .._formats.nifti.proxy import ArrayProxy
from .._formats.zarr.read import is_nifti_zarr
from .._images.image import load
from .._foundation.redact import redact
from .._foundation.types import Array, Device, NiftiImage, StrPath

if TYPE_CHECKING:
    from .._foundation.device import DeviceArray

# A seek-index choice, as vp.load takes it: None (find one), False (none) or an index file.
IndexChoice = Union[Literal[False], StrPath, None]  # Union: evaluated at run time, Python 3.9

# Store configuration for the URLs among the paths, as vp.load(url, storage_options=) takes it.
StorageOptions = Optional[Mapping[str, Any]]

def plan_threads(threads: int | None, io_threads: int | None, nfiles: int) -> tuple[int, int]:
    """(file workers, decode threads per file) for `threads` in all."""
    total = int(threads) if threads else _core.resolve_threads(0)
    if total < 1:
        raise ValueError(f"threads must be >= 0 or None, not {threads}")
    if io_threads is not None and int(io_threads) < 1:
        raise ValueError(f"io_threads must be >= 1 or None, not {io_threads}")
    workers = min(total, max(1, nfiles)) if io_threads is None else int(io_threads)
    workers = max(1, min(workers, max(1, nfiles)))
    return workers, max(1, total // workers)


def check_dtype(dtype: npt.DTypeLike | None) -> np.dtype[Any] | None:
    """None (the data's own dtype, as np.asanyarray(img.dataobj)) or a NumPy dtype."""
    return None if dtype is None else np.dtype(dtype)


def _natural_dtype(img: NiftiImage) -> np.dtype[Any]:
    """The dtype of np.asanyarray(img.dataobj): stored, or nibabel's scaled dtype."""
    obj = img.dataobj
    if isinstance(obj, ArrayProxy):
        return obj.result_dtype()
    return np.asanyarray(obj).dtype  # an image whose data are in memory (a DICOM file's)


def result_dtype(img: NiftiImage, dtype: np.dtype[Any] | None) -> np.dtype[Any]:
    return _natural_dtype(img) if dtype is None else dtype


def decode(img: NiftiImage, dtype: np.dtype[Any] | None, out: Array | None = None) -> Array:
    """img's data as np.asarray(img.dataobj, dtype) would give it (np.asanyarray for None),
    written into `out` when given (F-contiguous, of the right shape and dtype)."""
    obj = img.dataobj
    if isinstance(obj, ArrayProxy):
        proxy: Any = obj  # read gives a host array where no device is asked for
        data: Array = proxy.read(dtype=dtype, out=out)
        return data
    values: Array = np.asanyarray(obj) if dtype is None else np.asarray(obj, dtype=dtype)
    if out is None:
        return values
    out[...] = values
    return out


def note_path(exc: BaseException, path: str, i: int) -> BaseException:
    """Make sure the exception names the file it came from and its position in the inputs."""
    if hasattr(exc, "add_note"):
        named = getattr(exc, "path", None) == path or str(path) in str(exc)
        exc.add_note(f"while loading input {i}" + ("" if named else f": {redact(path)}"))
    return exc


def load_path(path: str, threads: int, index: IndexChoice,
              storage_options: StorageOptions) -> NiftiImage:
    """vp.load of a path, or of a URL the prefetcher does not fetch (a NIfTI-Zarr store, a
    .hdr/.img pair of objects), with the loader's options."""
    options: dict[str, Any] = {} if index is None else {"index": index}
    if storage_options is not None and _remote.is_url(path):
        options["storage_options"] = storage_options
    return load(path, threads=threads, **options)


def remote_entries(sources: Sequence[str]) -> list[int]:
    """The positions in `sources` of the objects fetched whole ahead of the workers: URLs of
    .nii and .nii.gz objects. A pair (.hdr/.img: two objects) and a NIfTI-Zarr store (many
    objects, read by the chunks a read needs) are left to ``vp.load``."""
    return [i for i, s in enumerate(sources)
            if _remote.is_url(s) and not is_nifti_zarr(s)
            and not _core.is_pair_path(s.split("?", 1)[0])]


def open_file(files: Sequence[str], i: int, fetch: _remote_many.Prefetcher | None,
              threads: int, index: IndexChoice, storage_options: StorageOptions) -> NiftiImage:
    """The image of files[i]: from its fetched bytes for a URL `fetch` holds, else vp.load."""
    if fetch is not None and i in fetch:
        obj = fetch.take(i)
        try:
            return open_fetched(obj, threads, index)
        finally:
            fetch.release(i)
    return load_path(files[i], threads, index, storage_options)


def run_files(paths: Sequence[str], workers: int, work: Callable[[int], object]) -> None:
    """Call ``work(i)`` for every file i on ``workers`` threads, the caller's included, files
    claimed in input order. After a failure no file is claimed any more; the files in hand are
    finished and every thread is joined before this returns or raises, and the error raised is
    that of the first failing file in input order (every file before it was claimed), naming it.
    `work` must be safe to call on several threads at once."""
    errors: dict[int, BaseException] = {}
    lock = threading.Lock()
    next_file = 0
    stop = False

    def run() -> None:
        nonlocal next_file
        while True:
            with lock:
                if stop or errors or next_file >= len(paths):
                    return
                i = next_file
                next_file += 1
            try:
                work(i)
            except Exception as exc:  # noqa: BLE001 - raised below, in input order
                with lock:
                    errors[i] = exc
                return

    pool = [threading.Thread(target=run, name=f"voxpipe-load-{k}", daemon=True)
            for k in range(1, min(workers, len(paths)))]
    for t in pool:
        t.start()
    try:
        run()
    finally:
        with lock:
            stop = True  # the caller was interrupted (KeyboardInterrupt): claim nothing more
        for t in pool:
            t.join()
    if errors:
        i = min(errors)
        raise note_path(errors[i], paths[i], i)


def empty_batch(n: int, shape: Sequence[int], dtype: npt.DTypeLike = np.float32) -> Array:
    """An uninitialised (n, *shape) array whose items ``out[i]`` are Fortran-ordered, as
    ``load_batch`` writes them (NIfTI data order, nibabel's)."""
    dims = tuple(int(s) for s in shape)
    base = _pool.empty(dims + (int(n),), np.dtype(dtype), "F")
    return np.moveaxis(base, -1, 0)


@overload
def load_batch(paths: Iterable[StrPath], out: Array | None = ..., dtype: npt.DTypeLike | None = ...,
               *, threads: int | None = ..., io_threads: int | None = ...,
               index: IndexChoice = ..., device: None = ...,
               storage_options: StorageOptions = ...) -> Array: ...
@overload
def load_batch(paths: Iterable[StrPath], out: Array | None = ..., dtype: npt.DTypeLike | None = ...,
               *, threads: int | None = ..., io_threads: int | None = ...,
               index: IndexChoice = ..., device: Device,
               storage_options: StorageOptions = ...) -> Array | DeviceArray: ...
def load_batch(paths: Iterable[StrPath], out: Array | None = None,
               dtype: npt.DTypeLike | None = np.float32, *, threads: int | None = None,
               io_threads: int | None = None, index: IndexChoice = None,
               device: Device = None,
               storage_options: StorageOptions = None) -> Array | DeviceArray:
    """Decode files of equal shape straight into one (batch, *shape) array.

    Item ``i`` is what ``iter_load`` gives for ``paths[i]``, written into ``out[i]`` without an
    intermediate array. ``out``: a caller-supplied array (for example reused across batches) of
    shape (len(paths), *shape) and the output dtype whose items are Fortran-contiguous, as
    ``empty_batch`` makes; by default one is allocated that way. Every header is read and the
    shapes and dtypes are checked before anything is decoded: mixed shapes raise ValueError
    naming the first file that differs. Decode errors raise, naming the file.

    ``device`` 'cuda', 'cuda:N' or a torch.device: the batch is one DeviceArray (DLPack) on that
    device, in the same layout (items F-ordered), each file decoded into its item by the file
    workers, several at once as on the host, and complete on the device when it is returned;
    ``out`` must then be None. None or 'cpu': a NumPy array as above.

    ``storage_options``: as ``vp.load``'s, for the URLs among ``paths``. Every object is
    fetched (several GETs at once, ``io_threads``, default 8) and its header checked before any
    file is decoded, so the fetched bytes of the whole batch are held until it is returned.

    >>> vp.load_batch(["demo_bold.nii.gz"] * 2).shape
    (2, 64, 64, 40, 60)
    """
    return load_batch_and_images(paths, out, dtype, threads, io_threads, index, device,
                                 storage_options)[0]


def load_batch_and_images(
        paths: Iterable[StrPath], out: Array | None, dtype: npt.DTypeLike | None,
        threads: int | None, io_threads: int | None, index: IndexChoice, device: Device,
        storage_options: StorageOptions,
        allocate: Callable[[int, tuple[int, ...], np.dtype[Any]], Array] = empty_batch,
) -> tuple[Array | DeviceArray, list[NiftiImage]]:
    """load_batch's (batch, the images of its files): their headers serve the caller's metadata
    without opening (or fetching) the files again. ``allocate(n, shape, dtype)`` makes the batch
    when ``out`` is None, in empty_batch's layout (VolumeDataset's workers: shared memory)."""
    from .._foundation import device as _device

    ordinal = _device.parse_device(device)
    if ordinal is not None:
        if out is not None:
            raise ValueError("out is a host array: it cannot be combined with a device")
        _device.require_device(ordinal)
    files = [os.fspath(p) for p in paths]
    want_dtype = check_dtype(dtype)
    if not files:
        raise ValueError("load_batch needs at least one file")
    workers, file_threads = plan_threads(threads, io_threads, len(files))
    fetch = _remote_many.prefetcher_for(files, remote_entries(files), storage_options,
                                        io_threads, ahead=len(files))
    imgs = []
    try:
        for i, p in enumerate(files):
            try:
                imgs.append(open_file(files, i, fetch, file_threads, index, storage_options))
            except Exception as exc:
                note_path(exc, p, i)
                raise
    finally:
        if fetch is not None:
            fetch.close()
    shape = tuple(imgs[0].shape)
    out_dtype = result_dtype(imgs[0], want_dtype)
    for p, img in zip(files[1:], imgs[1:]):
        if tuple(img.shape) != shape:
            raise ValueError(f"load_batch needs files of one shape: {files[0]} is {shape}, "
                             f"but {p} is {tuple(img.shape)}")
        if result_dtype(img, want_dtype) != out_dtype:
            raise ValueError(f"load_batch with dtype=None needs files of one data dtype: "
                             f"{files[0]} gives {out_dtype}, but {p} gives "
                             f"{result_dtype(img, want_dtype)}; pass a dtype")
    if ordinal is not None:
        return _device.batch_to_device(
            imgs, want_dtype, ordinal,
            run=lambda load_item: run_files(files, workers, load_item)), imgs
    want = (len(files),) + shape
    if out is None:
        out = allocate(len(files), shape, out_dtype)
    else:
        if not isinstance(out, np.ndarray):
            raise TypeError(f"out must be a NumPy array, not {type(out).__name__}")
        if out.shape != want or out.dtype != out_dtype:
            raise ValueError(f"out must be a {out_dtype} array of shape {want}, but is "
                             f"{out.dtype} {out.shape}")
        if not out.flags.writeable or (len(shape) > 0 and not out[0].flags.f_contiguous):
            raise ValueError("out must be writeable with Fortran-contiguous items out[i] "
                             "(vp.empty_batch makes one)")

    run_files(files, workers, lambda i: decode(imgs[i], want_dtype, out=out[i]))
    return out, imgs
