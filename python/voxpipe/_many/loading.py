"""Many files at once: load_many, iter_load and load_batch.

Files are opened and decoded by a few Python worker threads ("file workers"), each of which hands
the decode of its file to the C++ core with the GIL released; the core splits a file further on
its shared thread pool. Workers times the threads each file gets never exceeds ``threads``, so
file-level and chunk-level parallelism share the cores instead of multiplying. Loads to a device
(load_many and load_batch with ``device=``) use the same workers: each worker's file is read,
converted and copied by the core with the GIL released, so while one file is being read or
inflated another's bytes are on their way to the device. Each file's device load gets the
per-file thread count (the inflate's threads for a .nii.gz, at most that many readers for a
.nii) and the ``index=`` choice, as a host read does.

Memory: a file's decoded size is known from its header before anything is allocated. A file is
admitted (its output allocated) only when the decoded data admitted and not yet taken by the
caller fits in ``max_inflight_bytes`` (one file at a time is always admitted, however large), and
files are admitted in input order, so the oldest file the caller waits for can always start.

URLs (s3://, gs://, az://, http(s)://) may stand among the paths: each object is fetched whole in
one GET on I/O threads of their own (``io_threads`` at once, default 8), ahead of the file
workers, and decoded from memory as ``vp.load(url)`` decodes it (_sources/prefetch.py); its fetched
bytes count against ``max_inflight_bytes`` with its decoded data. Local paths take the path
above, untouched.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, Optional, TypeVar, Union, overload

import numpy as np
import numpy.typing as npt

from .._foundation.native import core as _core
from .._foundation import pool as _pool
from .._sources import remote as _remote
from .._sources import prefetch as _remote_many
from .._formats.nifti.open import open_fetched
from .._formats.zarr.read import is_nifti_zarr
from .._images.image import load
from .._foundation.redact import redact
from .._foundation.types import Array, Device, NiftiImage, StrPath
from .._foundation.errors import SkippedFileWarning

if TYPE_CHECKING:
    from .._foundation.device import DeviceArray

_ON_ERROR = ("raise", "skip")

# A seek-index choice, as vp.load takes it: None (find one), False (none) or an index file.
IndexChoice = Union[Literal[False], StrPath, None]  # Union: evaluated at run time, Python 3.9

# Store configuration for the URLs among the paths, as vp.load(url, storage_options=) takes it.
StorageOptions = Optional[Mapping[str, Any]]

_T = TypeVar("_T", Array, NiftiImage)


def _plan_threads(threads: int | None, io_threads: int | None, nfiles: int) -> tuple[int, int]:
    """(file workers, decode threads per file) for `threads` in all."""
    total = int(threads) if threads else _core.resolve_threads(0)
    if total < 1:
        raise ValueError(f"threads must be >= 0 or None, not {threads}")
    if io_threads is not None and int(io_threads) < 1:
        raise ValueError(f"io_threads must be >= 1 or None, not {io_threads}")
    workers = min(total, max(1, nfiles)) if io_threads is None else int(io_threads)
    workers = max(1, min(workers, max(1, nfiles)))
    return workers, max(1, total // workers)


def _check_dtype(dtype: npt.DTypeLike | None) -> np.dtype[Any] | None:
    """None (the data's own dtype, as np.asanyarray(img.dataobj)) or a NumPy dtype."""
    return None if dtype is None else np.dtype(dtype)


def _natural_dtype(img: NiftiImage) -> np.dtype[Any]:
    """The dtype of np.asanyarray(img.dataobj): stored, or nibabel's scaled dtype."""
    return img.dataobj.result_dtype()  # type: ignore[attr-defined]


def _out_dtype(img: NiftiImage, dtype: np.dtype[Any] | None) -> np.dtype[Any]:
    return _natural_dtype(img) if dtype is None else dtype


def _decode(img: NiftiImage, dtype: np.dtype[Any] | None, out: Array | None = None) -> Array:
    """img's data as np.asarray(img.dataobj, dtype) would give it (np.asanyarray for None),
    written into `out` when given (F-contiguous, of the right shape and dtype)."""
    return img.dataobj.read(dtype=dtype, out=out)  # type: ignore[attr-defined]


def note_path(exc: BaseException, path: str, i: int) -> BaseException:
    """Make sure the exception names the file it came from and its position in the inputs."""
    if hasattr(exc, "add_note"):
        named = getattr(exc, "path", None) == path or str(path) in str(exc)
        exc.add_note(f"while loading input {i}" + ("" if named else f": {redact(path)}"))
    return exc


def _load_path(path: str, threads: int, index: IndexChoice,
               storage_options: StorageOptions) -> NiftiImage:
    """vp.load of a path, or of a URL the prefetcher does not fetch (a NIfTI-Zarr store, a
    .hdr/.img pair of objects), with the loader's options."""
    options: dict[str, Any] = {} if index is None else {"index": index}
    if storage_options is not None and _remote.is_url(path):
        options["storage_options"] = storage_options
    return load(path, threads=threads, **options)


def _remote_entries(sources: Sequence[str]) -> list[int]:
    """The positions in `sources` of the objects fetched whole ahead of the workers: URLs of
    .nii and .nii.gz objects. A pair (.hdr/.img: two objects) and a NIfTI-Zarr store (many
    objects, read by the chunks a read needs) are left to ``vp.load``."""
    return [i for i, s in enumerate(sources)
            if _remote.is_url(s) and not is_nifti_zarr(s)
            and not _core.is_pair_path(s.split("?", 1)[0])]


def _open_file(files: Sequence[str], i: int, fetch: _remote_many.Prefetcher | None,
               threads: int, index: IndexChoice, storage_options: StorageOptions) -> NiftiImage:
    """The image of files[i]: from its fetched bytes for a URL `fetch` holds, else vp.load."""
    if fetch is not None and i in fetch:
        obj = fetch.take(i)
        try:
            return open_fetched(obj, threads, index)
        finally:
            fetch.release(i)
    return _load_path(files[i], threads, index, storage_options)


def _run_files(paths: Sequence[str], workers: int, work: Callable[[int], object]) -> None:
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


class _Loader:
    """The state shared by a LoadIterator and its file workers. The workers reference this, not
    the iterator, so an iterator the caller drops is collected and stops them."""

    def __init__(self, paths: Sequence, dtype, threads, io_threads, prefetch, max_inflight_bytes,
                 on_error, images, index, storage_options=None):
        if on_error not in _ON_ERROR:
            raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
        self._paths = [os.fspath(p) for p in paths]
        self._dtype = _check_dtype(dtype)
        if images and (self._dtype is None or self._dtype.kind != "f"):
            raise ValueError("images=True needs a floating-point dtype (the image's get_fdata "
                             "cache holds the data)")
        if max_inflight_bytes is not None and int(max_inflight_bytes) < 0:
            raise ValueError(f"max_inflight_bytes must be >= 0 or None, not {max_inflight_bytes}")
        n = len(self._paths)
        workers, self._file_threads = _plan_threads(threads, io_threads, n)
        self._prefetch = max(1, int(prefetch)) if prefetch is not None else max(2, 2 * workers)
        if prefetch is not None and int(prefetch) < 1:
            raise ValueError(f"prefetch must be >= 1 or None, not {prefetch}")
        self._budget = None if max_inflight_bytes is None else int(max_inflight_bytes)
        self._on_error = on_error
        self._images = images
        self._index = index
        self._cond = threading.Condition()
        self._next_claim = 0    # next file a worker takes
        self._next_admit = 0    # next file allowed to allocate its output
        self._next_take = 0     # next file the caller takes
        self._inflight = 0      # bytes admitted and not taken yet
        self._peak_inflight = 0
        self._results: dict[int, tuple[bool, object, int]] = {}
        self._closed = False
        self._pid = os.getpid()
        self._storage_options = storage_options
        # URLs: fetched ahead on threads of their own, the bytes held counting with _inflight.
        self._fetch = _remote_many.prefetcher_for(
            self._paths, _remote_entries(self._paths), storage_options, io_threads,
            ahead=self._prefetch, budget=self._budget, cond=self._cond,
            held_elsewhere=lambda: self._inflight)
        self._threads = [threading.Thread(target=self._work, name=f"voxpipe-load-{i}",
                                          daemon=True) for i in range(min(workers, n))]
        for t in self._threads:
            t.start()

    # -- workers -------------------------------------------------------------------------------
    def _work(self):
        while True:
            with self._cond:
                if self._closed or self._next_claim >= len(self._paths):
                    return
                i = self._next_claim
                self._next_claim += 1
                while not self._closed and i >= self._next_take + self._prefetch:
                    self._cond.wait()
                if self._closed:
                    return
            self._load_one(i)

    def _load_one(self, i: int):
        path = self._paths[i]
        img: Any = None
        nbytes, error = 0, None
        fetched = self._fetch is not None and i in self._fetch
        try:
            if fetched:  # the object's bytes: counted here from its admission on
                obj = self._fetch.take(i)  # type: ignore[union-attr]
                nbytes = obj.size
                img = open_fetched(obj, self._file_threads, self._index)
                del obj
            else:
                img = _load_path(path, self._file_threads, self._index,
                                 self._storage_options)
            dtype = _out_dtype(img, self._dtype)
            nbytes += int(np.prod(img.shape, dtype=np.int64)) * dtype.itemsize
        except Exception as exc:  # noqa: BLE001 - handed to the caller in order
            nbytes, error = 0, exc
        with self._cond:
            while not self._closed and not (
                    self._next_admit == i and (
                        error is not None or self._budget is None or self._inflight == 0
                        or self._inflight + nbytes <= self._budget)):
                self._cond.wait()
            if self._closed:
                return
            self._next_admit += 1
            if error is None:
                self._inflight += nbytes
                self._peak_inflight = max(self._peak_inflight, self._inflight)
            if fetched:
                self._fetch.release(i)  # type: ignore[union-attr]  # (the lock is reentrant)
            self._cond.notify_all()
        if error is None:
            try:
                if self._images:
                    img.get_fdata(dtype=self._dtype, caching="fill")
                    value = img
                else:
                    value = _decode(img, self._dtype)
            except Exception as exc:  # noqa: BLE001
                error = exc
        with self._cond:
            if self._closed:
                return  # nobody will take it
            if error is not None:
                self._inflight -= nbytes
                self._results[i] = (False, note_path(error, path, i), 0)
            else:
                self._results[i] = (True, value, nbytes)
            self._cond.notify_all()

    # -- the caller's side ---------------------------------------------------------------------
    def _forked(self) -> bool:
        """Whether this is a forked child of the process that made the loader (multiprocessing,
        DataLoader workers): the child has none of its worker threads, and _cond may have been
        locked for good by one of them."""
        return self._pid != os.getpid()

    def next(self):
        if self._forked():
            raise RuntimeError(
                f"this iterator was made by process {self._pid}, whose file workers a forked "
                "child does not have: call iter_load or load_many in the child")
        while True:
            with self._cond:
                if self._next_take >= len(self._paths) or self._closed:
                    raise StopIteration
                i = self._next_take
                while i not in self._results and not self._closed:
                    self._cond.wait()
                if self._closed:  # closed from another thread while waiting
                    raise StopIteration
                ok, value, nbytes = self._results.pop(i)
                self._next_take += 1
                self._inflight -= nbytes
                self._cond.notify_all()
            if ok:
                return value
            if self._on_error == "raise":
                self.close()
                raise value
            warnings.warn(redact(f"skipped {self._paths[i]} (input {i}): {value}"),
                          SkippedFileWarning, stacklevel=3)

    def close(self):
        if self._forked():
            self._closed = True  # no workers here to stop
            return
        with self._cond:
            self._closed = True
            self._results.clear()
            if self._fetch is not None:
                self._fetch.close()
            self._cond.notify_all()


class LoadIterator(Iterator[_T], Generic[_T]):
    """The results of iter_load, in input order, decoded ahead by background file workers.

    Close it (``close()``, ``with``, or by letting it go) to stop the workers early; a file being
    decoded at that moment is finished first, nothing new is started. Its workers stay in the
    process that made it: in a forked child, ``next()`` raises RuntimeError.
    """

    def __init__(self, *args: Any) -> None:
        self._loader = _Loader(*args)

    def __next__(self) -> _T:
        return self._loader.next()

    def __len__(self) -> int:
        return len(self._loader._paths)

    def close(self) -> None:
        self._loader.close()

    def __enter__(self) -> LoadIterator[_T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    @property
    def peak_inflight_bytes(self) -> int:
        """The most decoded bytes held for the caller at once (admitted and not yet taken)."""
        return self._loader._peak_inflight


@overload
def iter_load(paths: Iterable[StrPath], dtype: npt.DTypeLike | None = ..., *, threads: int | None = ...,
              io_threads: int | None = ..., prefetch: int | None = ...,
              max_inflight_bytes: int | None = ..., on_error: Literal["raise", "skip"] = ...,
              images: Literal[False] = ..., index: IndexChoice = ...,
              storage_options: StorageOptions = ...) -> LoadIterator[Array]: ...
@overload
def iter_load(paths: Iterable[StrPath], dtype: npt.DTypeLike | None = ..., *, threads: int | None = ...,
              io_threads: int | None = ..., prefetch: int | None = ...,
              max_inflight_bytes: int | None = ..., on_error: Literal["raise", "skip"] = ...,
              images: Literal[True], index: IndexChoice = ...,
              storage_options: StorageOptions = ...) -> LoadIterator[NiftiImage]: ...
@overload
def iter_load(paths: Iterable[StrPath], dtype: npt.DTypeLike | None = ..., *, threads: int | None = ...,
              io_threads: int | None = ..., prefetch: int | None = ...,
              max_inflight_bytes: int | None = ..., on_error: Literal["raise", "skip"] = ...,
              images: bool, index: IndexChoice = ..., storage_options: StorageOptions = ...
              ) -> LoadIterator[Array] | LoadIterator[NiftiImage]: ...
def iter_load(paths: Iterable[StrPath], dtype: npt.DTypeLike | None = np.float32, *,
              threads: int | None = None, io_threads: int | None = None,
              prefetch: int | None = None, max_inflight_bytes: int | None = None,
              on_error: Literal["raise", "skip"] = "raise", images: bool = False,
              index: IndexChoice = None, storage_options: StorageOptions = None
              ) -> LoadIterator[Array] | LoadIterator[NiftiImage]:
    """Iterate over the data of many NIfTI files in input order, decoding ahead in the background.

    Each item is what ``np.asarray(vp.load(p).dataobj, dtype=dtype)`` gives (for a float dtype:
    ``img.get_fdata(dtype=dtype)``; ``dtype=None``: the data's own dtype, as
    ``np.asanyarray(img.dataobj)``), or with ``images=True`` the image itself with its data
    already in its get_fdata cache.

    ``threads``: threads in all (None or 0: the default count, docs/python.md "Thread count"),
    shared between files decoded at once and the chunks of each file. ``io_threads``: how many
    files are opened and read at once (default: as many as ``threads``); keep it low on a network
    filesystem, the decode still uses ``threads``. ``prefetch``: how many files ahead of the one
    the caller takes may be in flight (default: twice the file workers). ``max_inflight_bytes``:
    the most decoded data held that the caller has not taken yet (one file is always allowed,
    however large).
    ``on_error="raise"`` raises a file's error (naming the file) when the iteration reaches it and
    stops; ``"skip"`` warns (SkippedFileWarning) and goes on with the next file.

    ``paths`` may mix local files with URLs of .nii and .nii.gz objects (``s3://``, ``gs://``,
    ``az://``, ``http(s)://``); ``storage_options`` configures their stores as for ``vp.load``.
    Each object is fetched whole in one GET, ``io_threads`` at once (default 8), ahead of the
    decode; its fetched bytes count against ``max_inflight_bytes`` with its decoded data (GETs
    already in flight may pass it by their objects' sizes), and its errors name its URL.

    >>> for data in vp.iter_load(["demo_bold.nii.gz"] * 2, max_inflight_bytes=1 << 30):
    ...     print(data.shape, data.dtype)
    (64, 64, 40, 60) float32
    (64, 64, 40, 60) float32
    """
    return LoadIterator(list(paths), dtype, threads, io_threads, prefetch, max_inflight_bytes,
                        on_error, images, index, storage_options)


@overload
def load_many(paths: Iterable[StrPath], dtype: npt.DTypeLike | None = ..., *,
              threads: int | None = ..., io_threads: int | None = ...,
              max_inflight_bytes: int | None = ..., on_error: Literal["raise", "skip"] = ...,
              images: Literal[False] = ..., index: IndexChoice = ...,
              device: None = ..., storage_options: StorageOptions = ...) -> list[Array]: ...
@overload
def load_many(paths: Iterable[StrPath], dtype: npt.DTypeLike | None = ..., *,
              threads: int | None = ..., io_threads: int | None = ...,
              max_inflight_bytes: int | None = ..., on_error: Literal["raise", "skip"] = ...,
              images: Literal[True], index: IndexChoice = ...,
              device: None = ..., storage_options: StorageOptions = ...) -> list[NiftiImage]: ...
@overload
def load_many(paths: Iterable[StrPath], dtype: npt.DTypeLike | None = ..., *,
              threads: int | None = ..., io_threads: int | None = ...,
              max_inflight_bytes: int | None = ..., on_error: Literal["raise", "skip"] = ...,
              images: Literal[False] = ..., index: IndexChoice = ...,
              device: Device, storage_options: StorageOptions = ...
              ) -> list[Array] | list[DeviceArray]: ...
@overload
def load_many(paths: Iterable[StrPath], dtype: npt.DTypeLike | None = ..., *,
              threads: int | None = ..., io_threads: int | None = ...,
              max_inflight_bytes: int | None = ..., on_error: Literal["raise", "skip"] = ...,
              images: bool, index: IndexChoice = ..., device: Device = ...,
              storage_options: StorageOptions = ...
              ) -> list[Array] | list[NiftiImage] | list[DeviceArray]: ...
def load_many(paths: Iterable[StrPath], dtype: npt.DTypeLike | None = np.float32, *,
              threads: int | None = None, io_threads: int | None = None,
              max_inflight_bytes: int | None = None,
              on_error: Literal["raise", "skip"] = "raise", images: bool = False,
              index: IndexChoice = None, device: Device = None,
              storage_options: StorageOptions = None
              ) -> list[Array] | list[NiftiImage] | list[DeviceArray]:
    """The data of many NIfTI files, decoded in parallel, as a list in input order.

    ``device`` 'cuda', 'cuda:N' or a torch.device: each item is a DeviceArray (DLPack) decoded
    on that device by the same file workers, several files in flight at once (one file is read
    and inflated while another's bytes go to the device), each complete on the device when the
    list is returned; the first failing file in input order raises, naming it, after the loads
    in flight have ended. images=True, on_error and max_inflight_bytes are host-only. None or
    'cpu': NumPy arrays as below.

    Items and arguments as ``iter_load``; files that fail with ``on_error="skip"`` are left out
    (with a SkippedFileWarning naming them). The list holds every result, so memory is their
    total; ``max_inflight_bytes`` limits only what is decoded ahead of the list being built. For
    a bounded-memory pass over many files, iterate with ``iter_load``; for equal shapes,
    ``load_batch`` decodes straight into one array.
    """
    from .._foundation import device as _device

    ordinal = _device.parse_device(device)
    if ordinal is not None:
        if images or on_error != "raise":
            raise ValueError("load_many to a device supports neither images=True nor on_error")
        _device.require_device(ordinal)
        files = [os.fspath(p) for p in paths]
        want = _check_dtype(dtype)
        workers, file_threads = _plan_threads(threads, io_threads, len(files))
        out: list[Any] = [None] * len(files)
        fetch = _remote_many.prefetcher_for(files, _remote_entries(files), storage_options,
                                            io_threads, ahead=workers)

        def load_one(i: int) -> None:
            img = _open_file(files, i, fetch, file_threads, index, storage_options)
            out[i] = _device.image_to_device(img, want, ordinal)

        try:
            _run_files(files, workers, load_one)
        finally:
            if fetch is not None:
                fetch.close()
        return out
    with iter_load(paths, dtype, threads=threads, io_threads=io_threads,
                   max_inflight_bytes=max_inflight_bytes, on_error=on_error, images=images,
                   index=index, storage_options=storage_options) as it:
        items: list[Any] = list(it)  # arrays or images, as `images` says
        return items


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
    return _load_batch(paths, out, dtype, threads, io_threads, index, device, storage_options)[0]


def _load_batch(paths: Iterable[StrPath], out: Array | None, dtype: npt.DTypeLike | None,
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
    want_dtype = _check_dtype(dtype)
    if not files:
        raise ValueError("load_batch needs at least one file")
    workers, file_threads = _plan_threads(threads, io_threads, len(files))
    fetch = _remote_many.prefetcher_for(files, _remote_entries(files), storage_options,
                                        io_threads, ahead=len(files))
    imgs = []
    try:
        for i, p in enumerate(files):
            try:
                imgs.append(_open_file(files, i, fetch, file_threads, index, storage_options))
            except Exception as exc:
                note_path(exc, p, i)
                raise
    finally:
        if fetch is not None:
            fetch.close()
    shape = tuple(imgs[0].shape)
    out_dtype = _out_dtype(imgs[0], want_dtype)
    for p, img in zip(files[1:], imgs[1:]):
        if tuple(img.shape) != shape:
            raise ValueError(f"load_batch needs files of one shape: {files[0]} is {shape}, "
                             f"but {p} is {tuple(img.shape)}")
        if _out_dtype(img, want_dtype) != out_dtype:
            raise ValueError(f"load_batch with dtype=None needs files of one data dtype: "
                             f"{files[0]} gives {out_dtype}, but {p} gives "
                             f"{_out_dtype(img, want_dtype)}; pass a dtype")
    if ordinal is not None:
        return _device.batch_to_device(
            imgs, want_dtype, ordinal,
            run=lambda load_item: _run_files(files, workers, load_item)), imgs
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

    _run_files(files, workers, lambda i: _decode(imgs[i], want_dtype, out=out[i]))
    return out, imgs
