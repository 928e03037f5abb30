"""Many files handed over one by one as they are decoded: iter_load (a LoadIterator) and
load_many (its list, or the files' device arrays). loading.py holds what they share with
load_batch: the thread plan, opening and decoding one file, the file workers.

Memory: a file's decoded size is known from its header before anything is allocated. A file is
admitted (its output allocated) only when the decoded data admitted and not yet taken by the
caller fits in ``max_inflight_bytes`` (one file at a time is always admitted, however large), and
files are admitted in input order, so the oldest file the caller waits for can always start. A
URL's fetched bytes count against the same budget from its admission on.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, Union, overload

import numpy as np
import numpy.typing as npt

from .._sources import prefetch as _remote_many
from .._formats.nifti.open import open_fetched
from .._foundation.redact import redact
from .._foundation.types import Array, Device, NiftiImage, StrPath
from .._foundation.errors import SkippedFileWarning
from .loading import (IndexChoice, StorageOptions, check_dtype, decode, load_path,
                      open_file, result_dtype, plan_threads, remote_entries, run_files,
                      note_path)

if TYPE_CHECKING:
    from .._foundation.device import DeviceArray

_ON_ERROR = ("raise", "skip")

_T = TypeVar("_T", Array, NiftiImage)

# A file's outcome, held until the caller takes it: (True, its array or image, the bytes it
# holds) or (False, its error, 0).
_Result = Union[tuple[Literal[True], Union[Array, NiftiImage], int],
                tuple[Literal[False], BaseException, int]]


class _Loader:
    """The state shared by a LoadIterator and its file workers. The workers reference this, not
    the iterator, so an iterator the caller drops is collected and stops them."""

    def __init__(self, paths: Sequence[StrPath], dtype: npt.DTypeLike | None,
                 threads: int | None, io_threads: int | None, prefetch: int | None,
                 max_inflight_bytes: int | None, on_error: str, images: bool,
                 index: IndexChoice, storage_options: StorageOptions = None) -> None:
        if on_error not in _ON_ERROR:
            raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
        self._paths = [os.fspath(p) for p in paths]
        self._dtype = check_dtype(dtype)
        if images and (self._dtype is None or self._dtype.kind != "f"):
            raise ValueError("images=True needs a floating-point dtype (the image's get_fdata "
                             "cache holds the data)")
        if max_inflight_bytes is not None and int(max_inflight_bytes) < 0:
            raise ValueError(f"max_inflight_bytes must be >= 0 or None, not {max_inflight_bytes}")
        n = len(self._paths)
        workers, self._file_threads = plan_threads(threads, io_threads, n)
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
        self._results: dict[int, _Result] = {}
        self._closed = False
        self._pid = os.getpid()
        self._storage_options = storage_options
        # URLs: fetched ahead on threads of their own, the bytes held counting with _inflight.
        self._fetch = _remote_many.prefetcher_for(
            self._paths, remote_entries(self._paths), storage_options, io_threads,
            ahead=self._prefetch, budget=self._budget, cond=self._cond,
            held_elsewhere=lambda: self._inflight)
        self._threads = [threading.Thread(target=self._work, name=f"voxpipe-load-{i}",
                                          daemon=True) for i in range(min(workers, n))]
        for t in self._threads:
            t.start()

    # -- workers -------------------------------------------------------------------------------
    def _work(self) -> None:
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

    def _load_one(self, i: int) -> None:
        path = self._paths[i]
        img: NiftiImage | None = None
        nbytes = 0
        error: Exception | None = None
        value: Array | NiftiImage
        fetched = self._fetch if self._fetch is not None and i in self._fetch else None
        try:
            if fetched is not None:  # the object's bytes: counted here from its admission on
                obj = fetched.take(i)
                nbytes = obj.size
                img = open_fetched(obj, self._file_threads, self._index)
                del obj
            else:
                img = load_path(path, self._file_threads, self._index,
                                self._storage_options)
            dtype = result_dtype(img, self._dtype)
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
            if fetched is not None:
                fetched.release(i)  # (the lock is reentrant)
            self._cond.notify_all()
        if error is None and img is not None:  # (no error: the image is open)
            try:
                if self._images and self._dtype is not None:  # (a float dtype: see __init__)
                    img.get_fdata(dtype=self._dtype, caching="fill")
                    value = img
                else:
                    value = decode(img, self._dtype)
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

    def next(self) -> Array | NiftiImage:
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
                result = self._results.pop(i)
                self._next_take += 1
                self._inflight -= result[2]
                self._cond.notify_all()
            if result[0]:
                return result[1]
            if self._on_error == "raise":
                self.close()
                raise result[1]
            warnings.warn(redact(f"skipped {self._paths[i]} (input {i}): {result[1]}"),
                          SkippedFileWarning, stacklevel=3)

    def close(self) -> None:
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
        # An array or an image as the loader's `images` says, which iter_load's overloads
        # pair with this iterator's item type: a pairing made at run time, unseen here.
        return self._loader.next()  # type: ignore[return-value]

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
def iter_load(paths: Iterable[StrPath], dtype: npt.DTypeLike | None = ..., *,
              threads: int | None = ..., io_threads: int | None = ..., prefetch: int | None = ...,
              max_inflight_bytes: int | None = ..., on_error: Literal["raise", "skip"] = ...,
              images: Literal[False] = ..., index: IndexChoice = ...,
              storage_options: StorageOptions = ...) -> LoadIterator[Array]: ...
@overload
def iter_load(paths: Iterable[StrPath], dtype: npt.DTypeLike | None = ..., *,
              threads: int | None = ..., io_threads: int | None = ..., prefetch: int | None = ...,
              max_inflight_bytes: int | None = ..., on_error: Literal["raise", "skip"] = ...,
              images: Literal[True], index: IndexChoice = ...,
              storage_options: StorageOptions = ...) -> LoadIterator[NiftiImage]: ...
@overload
def iter_load(paths: Iterable[StrPath], dtype: npt.DTypeLike | None = ..., *,
              threads: int | None = ..., io_threads: int | None = ..., prefetch: int | None = ...,
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
        want = check_dtype(dtype)
        workers, file_threads = plan_threads(threads, io_threads, len(files))
        out: list[Any] = [None] * len(files)
        fetch = _remote_many.prefetcher_for(files, remote_entries(files), storage_options,
                                            io_threads, ahead=workers)

        def load_one(i: int) -> None:
            img = open_file(files, i, fetch, file_threads, index, storage_options)
            out[i] = _device.image_to_device(img, want, ordinal)

        try:
            run_files(files, workers, load_one)
        finally:
            if fetch is not None:
                fetch.close()
        return out
    with iter_load(paths, dtype, threads=threads, io_threads=io_threads,
                   max_inflight_bytes=max_inflight_bytes, on_error=on_error, images=images,
                   index=index, storage_options=storage_options) as it:
        items: list[Any] = list(it)  # arrays or images, as `images` says
        return items
