"""Dask arrays over voxpipe's lazy images (``vp.to_dask``); many-input jobs on a Dask cluster
(``vp.convert_many``, ``vp.resample_many``) are convert.py's. docs/dask.md is the user's guide.

Graphs: every chunk is one task that reads its block through voxpipe's proxy
(``proxy.read(slicer, dtype, scaling=...)``), or a DICOM series' ``get_data``, into a new array.
A task holds what to read as a ``_Source``: the proxy's (or series') pickle, which is a path or
URL and options (a few hundred bytes, never data), opened on first use in the process that
reads. Building a graph opens headers only. The scheduler unpickles the graphs it is sent and
may not see the files: unpickling a ``_Source`` opens nothing. Where an image has several
chunks, its ``_Source`` is one key of the graph that its chunks depend on, so the tasks a worker
runs share one opened proxy (and with it a gzip file's member table or seek index, found once
per worker rather than once per chunk).

A .nii.gz that is one gzip stream without a seek index can only be read from its start:
reading its volume t inflates volumes 0..t-1 again, and Dask's order does not follow the file
(200 one-volume chunks of a 50 MB file: 20 s, against 0.4 s for the file in one chunk). Such a
file is one chunk unless the caller asks for chunks (then with a PerformanceWarning). Learning
this reads the gzip member table, never the data, and only where an image has several chunks.

Names are deterministic (``dask.base.tokenize``) over what identifies the values read: the
file's path, device, inode, size and modification time as it was opened (a URL's ETag; a
NIfTI-Zarr store's metadata and what pins it: the identities of its files, the ETags of its
objects), the output dtype, scaling and the chunks. The same file gives the same name; a
rewritten file (a store with one chunk rewritten) a new one. A graph is bound to the files its
images opened: a task that finds one replaced or rewritten since (the proxy's pickle carries the
identity; the reader checks it on every read, a store's chunks included) raises VoxpipeIOError,
never reads the new file under the old header, nor chunks of two versions of a store.

Threads: a task reads with the thread count ``to_dask(threads=)`` gives, else with the worker's
budget: voxpipe's default (``VOXPIPE_NUM_THREADS``, then ``OMP_NUM_THREADS``, which the nanny of
``distributed`` sets to 1 in every worker it starts) when either variable is set, else 1, since
Dask already runs one task per core (the threaded scheduler sets neither variable).

Dask is imported on first use, by ``to_dask``: ``import voxpipe`` does not need it.
"""

from __future__ import annotations

import operator
import os
import pickle
import threading
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import accumulate, product
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import numpy.typing as npt

from .._foundation.native import core as _core
from .._sources import remote as _remote
from .._formats.dicom.series import Series, scan, unpickled_series
from .._formats.nifti.proxy import ArrayProxy
from .._images.image import load
from .loading import note_path
from .._foundation.optional import require
from .._sources.prefetch import DEFAULT_FETCHES
from .._foundation.types import Array, NiftiImage, StrPath
from .._foundation.errors import FormatError, InvalidArgumentError, VoxpipeError

if TYPE_CHECKING:
    import dask.array

__all__ = ["to_dask"]

# What a chunk holds when to_dask chooses: Dask advises chunks of about 100 MB. A volume of up to
# 64 MiB of output goes with others into chunks of max(1, 128 MiB // volume) volumes (so
# between 64 and 128 MiB); a larger volume is a chunk of its own.
TARGET_CHUNK_BYTES = 128 << 20

# The variables that set voxpipe's default thread count (docs/python.md, "Thread count").
_BUDGET_VARIABLES = ("VOXPIPE_NUM_THREADS", "OMP_NUM_THREADS")

# A chunks= argument: None or "auto" (to_dask chooses), a size ("64 MiB"), a count of volumes
# (slices for 3D) per chunk, or Dask's own forms (a shape, or sizes per axis).
Chunks = Union[None, int, str, Sequence[Any]]


def _dask() -> Any:
    """dask.array, imported on first use (the 'dask' extra brings it)."""
    require("dask", "dask", "vp.to_dask", "Dask")
    import dask.array

    return dask.array


# -- what a task reads from ----------------------------------------------------------------------
class _Source:
    """A proxy or DICOM series in its pickled form, opened on first use in the process that
    reads and shared by the tasks of that process that hold this object. Pickles as the same
    bytes: never an open file, never data."""

    def __init__(self, pickled: bytes) -> None:
        self._pickled = pickled
        self._opened: Any = None
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Source, (self._pickled,))

    def open(self, threads: int) -> Any:
        """The proxy (or series), reading with `threads` threads. Each process unpickles its
        own copy, so the thread count set here is never a caller's image's."""
        with self._lock:
            if self._opened is None:
                obj = pickle.loads(self._pickled)
                if isinstance(obj, ArrayProxy):  # a series is given its threads per read
                    obj.threads = threads
                self._opened = obj
            return self._opened


def task_threads(threads: int | None) -> int:
    """The threads a task reads with: `threads` when given; else voxpipe's default where
    VOXPIPE_NUM_THREADS or OMP_NUM_THREADS is set (the nanny of distributed sets OMP_NUM_THREADS
    to 1 in its workers), else 1: Dask runs a task per core already."""
    if threads:
        return int(threads)
    if any(os.environ.get(name, "").strip() for name in _BUDGET_VARIABLES):
        return _core.resolve_threads(0)
    return 1


def _read_block(source: _Source, slicer: tuple[slice, ...], dtype: np.dtype[Any] | None,
                scaling: bool, threads: int | None, stacked: bool) -> Array:
    """One chunk: ``proxy.read(slicer, dtype, scaling=scaling)``, with a trailing axis of 1
    for a chunk of a stack of files."""
    arr: Array = source.open(task_threads(threads)).read(slicer, dtype, scaling=scaling)
    return arr[..., np.newaxis] if stacked else arr


def _read_series_block(source: _Source, read_dtype: np.dtype[Any] | None,
                       out_dtype: np.dtype[Any], shape: tuple[int, ...],
                       threads: int | None) -> Array:
    """One chunk of a DICOM series: the volumes (or slices) of its part, ``get_data``'s
    values, as `out_dtype`."""
    n = task_threads(threads)
    data: Array = source.open(n).get_data(read_dtype, threads=n).reshape(shape, order="F")
    return data if data.dtype == out_dtype else data.astype(out_dtype)


# -- tokens --------------------------------------------------------------------------------------
def _check_reopenable(proxy: Any) -> None:
    """Refuse a proxy of an image opened from memory: it has no file or URL to open again,
    and its pickle (which every task would carry) is its bytes."""
    if isinstance(proxy, ArrayProxy) and not proxy.reopenable:
        raise TypeError(f"{proxy.file_like}: an image opened from memory has no file or "
                        "URL for Dask's tasks to read (they would carry its bytes): save it to "
                        "a file, or use dask.array.from_array on its data")


def _identity(obj: Any) -> Any:
    method = getattr(obj, "__dask_tokenize__", None)
    if method is not None:
        return method()
    from dask.base import normalize_token

    return normalize_token(obj)


# -- chunks --------------------------------------------------------------------------------------
def _runs(length: int, size: int) -> tuple[int, ...]:
    """`length` cut into runs of `size` (the last one shorter)."""
    if length == 0:
        return (0,)
    size = max(1, min(size, length))
    return (size,) * (length // size) + ((length % size,) if length % size else ())


def _split_axis(ndim: int) -> int:
    """The first axis chunks split: 3 (volumes) for 4D and more, else the last (slices)."""
    return 3 if ndim > 3 else max(ndim - 1, 0)


def chunk_plan(shape: Sequence[int], itemsize: int, chunks: Chunks = None,
               storage: Sequence[int] | None = None) -> tuple[tuple[int, ...], ...]:
    """The chunks (sizes along every axis) of an image of `shape` whose output items take
    `itemsize` bytes.

    ``chunks`` None or "auto": whole volumes (the first three axes whole), as many per chunk as
    fit in TARGET_CHUNK_BYTES (at least one), gathered along the volume axes in NIfTI order
    (t, then c for 5D); 3D (and smaller) images are cut along their last axis into slabs of
    whole slices the same way. A size ("64 MiB") sets that target instead. An int: that many
    volumes (slices for 3D) per chunk. Anything else is Dask's own chunks argument (normalized
    by ``dask.array.core.normalize_chunks``).
    ``storage``: the storage chunk shape in NIfTI axis order (a NIfTI-Zarr proxy's ``chunks``):
    chunks chosen here are whole multiples of it along every axis they cut.
    """
    shape = tuple(int(d) for d in shape)
    ndim = len(shape)
    first = _split_axis(ndim)
    units: int | None = None
    target = TARGET_CHUNK_BYTES
    if isinstance(chunks, str):
        if chunks != "auto":
            from dask.utils import parse_bytes

            target = int(parse_bytes(chunks))
        chunks = None
    if chunks is None:
        unit_bytes = int(np.prod(shape[:first], dtype=np.int64)) * max(1, itemsize)
        units = max(1, target // max(1, unit_bytes))
    elif isinstance(chunks, (int, np.integer)) and not isinstance(chunks, bool):
        units = operator.index(chunks)
        if units < 1:
            raise InvalidArgumentError(f"chunks: expected a positive count, but received {units}",
                                       field="chunks")
        storage = None  # the caller's count, as given
    if units is None:
        from dask.array.core import normalize_chunks

        # (dask.array.core.normalize_chunks is not annotated)
        normalized = normalize_chunks(chunks, shape)  # type: ignore[no-untyped-call]
        return tuple(tuple(int(c) for c in axis) for axis in normalized)
    sizes = list(shape[:first])
    left = units
    for d in shape[first:]:
        sizes.append(max(1, min(left, d)))
        left = left // d if d and left >= d else 1
    if storage is not None:
        for a, (d, s) in enumerate(zip(shape, storage)):
            s = int(s)
            if s > 0 and sizes[a] < d:
                sizes[a] = min(d, max(s, sizes[a] // s * s))
    return tuple(_runs(d, c) for d, c in zip(shape, sizes))


def _offsets(plan: tuple[tuple[int, ...], ...]) -> list[list[int]]:
    return [[0, *accumulate(axis)] for axis in plan]


# -- inputs --------------------------------------------------------------------------------------
def absolute_path(path: str) -> str:
    """A local path made absolute (tasks may run elsewhere, in another folder); URLs as given."""
    return path if _remote.is_url(path) else os.path.abspath(path)


def _is_dicom_location(path: str) -> bool:
    """Whether a path or URL names DICOM images: a folder or a .dcm file, or a prefix (a URL
    ending in '/') or a .dcm object. NIfTI-Zarr stores (.zarr), folders themselves, are not."""
    head = path.split("?", 1)[0] if _remote.is_url(path) else path
    name = head.rstrip("/" + os.sep).lower()
    if name.endswith(".zarr"):
        return False
    if name.endswith(".dcm"):
        return True
    return head.endswith("/") if _remote.is_url(path) else os.path.isdir(path)


def _proxy_of(x: Any) -> Any:
    """The proxy of an image from vp.load (or the proxy itself)."""
    proxy = getattr(x, "dataobj", x)
    if not (callable(getattr(proxy, "read", None)) and hasattr(proxy, "shape")):
        kind = type(proxy).__name__ if hasattr(x, "dataobj") else type(x).__name__
        raise TypeError(
            "to_dask reads through voxpipe's proxy: expected an image from vp.load (or its "
            "dataobj), a path or URL, a list of them, or a vp.dicom.Series, but received "
            f"{kind}; an array in memory is dask.array.from_array's")
    return proxy


def _open_image(path: str, storage_options: Mapping[str, Any] | None) -> Any:
    options = storage_options if _remote.is_url(path) else None
    return load(absolute_path(path), storage_options=options).dataobj


def _open_all(items: Sequence[Any], storage_options: Mapping[str, Any] | None
              ) -> list[tuple[str, Any]]:
    """(name, proxy) of every item, headers read a few at once (a URL's is one request)."""
    def open_one(i: int) -> tuple[str, Any]:
        item = items[i]
        if isinstance(item, (str, os.PathLike)):
            path = os.fspath(item)
            try:
                return path, _open_image(path, storage_options)
            except Exception as exc:
                raise note_path(exc, path, i)
        proxy = _proxy_of(item)
        get = getattr(item, "get_filename", None)
        return (get() if callable(get) else None) or f"input {i}", proxy

    with ThreadPoolExecutor(max_workers=max(1, min(DEFAULT_FETCHES, len(items)))) as pool:
        return list(pool.map(open_one, range(len(items))))


def _one_series(path: str, storage_options: Mapping[str, Any] | None) -> Series:
    url = _remote.is_url(path)
    found = scan(path if url else os.path.abspath(path),
                 storage_options=storage_options if url else None)
    if len(found) != 1:
        listing = "".join(f"\n  [{i}] {s!r}" for i, s in enumerate(found))
        raise InvalidArgumentError(
            f"{path}: expected one DICOM series, but found {len(found)} "
            f"({len(found.skipped)} files skipped); pass one of vp.dicom.scan({path!r}) to "
            f"to_dask{listing}", path=path)
    return found[0]


# -- graphs --------------------------------------------------------------------------------------
def _array(da: Any, name: str, layer: dict[Any, Any], chunks: tuple[tuple[int, ...], ...],
           dtype: np.dtype[Any]) -> dask.array.Array:
    from dask.highlevelgraph import HighLevelGraph

    graph = HighLevelGraph.from_collections(name, layer, dependencies=())
    arr: dask.array.Array = da.Array(graph, name, chunks,
                                     meta=np.empty((0,) * len(chunks), dtype))
    return arr


def _image_array(da: Any, sources: list[tuple[str, Any]], want: np.dtype[Any] | None,
                 scaling: bool, chunks: Chunks, threads: int | None, stacked: bool
                 ) -> dask.array.Array:
    """The dask array of one image (`stacked` False) or of a stack of images along a new last
    axis, every chunk a block of one image."""
    from dask.base import tokenize
    from dask.task_spec import DataNode, Task, TaskRef

    for _, proxy in sources:
        _check_reopenable(proxy)
    label0, proxy0 = sources[0]
    shape = tuple(int(d) for d in proxy0.shape)
    out_dtype = _result_dtype(proxy0, want, scaling)
    for label, proxy in sources[1:]:
        if tuple(proxy.shape) != shape:
            raise ValueError(f"to_dask stacks files of one shape: {label0} is {shape}, but "
                             f"{label} is {tuple(proxy.shape)}")
        if _result_dtype(proxy, want, scaling) != out_dtype:
            raise ValueError(f"to_dask stacks files of one output dtype: {label0} gives "
                             f"{out_dtype}, but {label} gives "
                             f"{_result_dtype(proxy, want, scaling)}; pass a dtype")
    plan = chunk_plan(shape, out_dtype.itemsize, chunks, getattr(proxy0, "chunks", None))
    if any(len(axis) > 1 for axis in plan) and any(_reads_from_start(p) for _, p in sources):
        if chunks is None or isinstance(chunks, str):
            plan = tuple((d,) for d in shape)
        else:
            from dask.array.core import PerformanceWarning

            warnings.warn(
                "to_dask: a .nii.gz stream read only from its start (one gzip member, no seek "
                "index) is inflated again up to each chunk: build an index with "
                "vp.gz.build_index, or use chunks=None (one chunk)", PerformanceWarning,
                stacklevel=3)
    token = tokenize([_identity(p) for _, p in sources], out_dtype, scaling, plan, stacked)
    name = f"voxpipe-read-{token}"
    offsets = _offsets(plan)
    blocks = list(product(*(range(len(axis)) for axis in plan)))
    layer: dict[Any, Any] = {}
    for i, (_, proxy) in enumerate(sources):
        source = _Source(pickle.dumps(proxy))
        ref: Any = source
        if len(blocks) > 1:  # the image's chunks share one opened proxy per worker
            source_key = f"voxpipe-source-{token}-{i}"
            layer[source_key] = DataNode(source_key, source)
            ref = TaskRef(source_key)
        for b in blocks:
            slicer = tuple(slice(offsets[a][k], offsets[a][k + 1]) for a, k in enumerate(b))
            key = (name, *b, i) if stacked else (name, *b)
            layer[key] = Task(key, _read_block, ref, slicer, want, scaling, threads, stacked)
    if stacked:
        plan = plan + ((1,) * len(sources),)
    return _array(da, name, layer, plan, out_dtype)


def _reads_from_start(proxy: Any) -> bool:
    """Whether a block of the image is read only by inflating all the data before it: a gzip
    stream of one member without a seek index (what nibabel and most tools write). Learning
    it reads the gzip member table (or finds the index), not the data; a damaged file is left
    to the reads to report."""
    try:
        return getattr(proxy, "random_access", True) is False
    except VoxpipeError:
        return False


def _result_dtype(proxy: Any, want: np.dtype[Any] | None, scaling: bool) -> np.dtype[Any]:
    get = getattr(proxy, "result_dtype", None)
    if get is not None:
        dtype: np.dtype[Any] = np.dtype(get(want, scaling))
        return dtype
    return want if want is not None else np.dtype(proxy.dtype)


def _series_dtypes(series: Series, want: np.dtype[Any] | None, scaling: bool
                   ) -> tuple[np.dtype[Any] | None, np.dtype[Any]]:
    """(what get_data is asked for, the chunks' dtype). Scaled: float32 by default (as
    vp.load_dicom), float32/float64 decoded so, other dtypes cast from float64. Unscaled: the
    stored values, cast to `want` when given."""
    floats = (np.dtype(np.float32), np.dtype(np.float64))
    if not scaling:
        return None, series.stored_dtype if want is None else want
    if want is None:
        return floats[0], floats[0]
    return (want if want in floats else floats[1]), want


def _series_array(da: Any, series: Series, want: np.dtype[Any] | None, scaling: bool,
                  chunks: Chunks, threads: int | None) -> dask.array.Array:
    """A DICOM series: chunks of whole volumes (4D) or slices (3D), each read by a series of
    its own images (rescanned where it is read); one chunk where a file's frames would fall
    in two chunks (multi-frame files, mosaics)."""
    from dask.base import tokenize
    from dask.task_spec import Task

    if series.problem:
        raise FormatError(f"series {series.series_number} ({series.series_description!r}, "
                          f"{series.series_instance_uid}) cannot be assembled: {series.problem}")
    shape = tuple(series.shape)
    read_dtype, out_dtype = _series_dtypes(series, want, scaling)
    axis = _split_axis(len(shape))
    plan = chunk_plan(shape, out_dtype.itemsize, chunks)
    if any(len(plan[a]) != 1 for a in range(len(shape)) if a != axis):
        raise InvalidArgumentError(
            f"chunks: a DICOM series is read in whole {'volumes' if len(shape) > 3 else 'slices'}"
            f": expected chunks that cut axis {axis} only, but received {plan}", field="chunks")
    # Absolute names (workers may run in another folder): as the series pickles.
    _, state = series.__reduce__()
    names, etags, options, series_threads, uid, split, files = state
    files = [tuple(f) for f in files]
    etag_of = dict(zip(names, etags)) if etags is not None else None
    per_unit = int(np.prod(shape[2:axis], dtype=np.int64)) if len(shape) > 3 else 1
    bounds = _offsets(plan)[axis]
    parts = [files[a * per_unit:b * per_unit] for a, b in zip(bounds, bounds[1:])]
    if len(files) != int(np.prod(shape[2:], dtype=np.int64)) or not _files_apart(parts):
        if chunks is not None and not isinstance(chunks, str) and len(parts) > 1:
            raise InvalidArgumentError(
                "chunks: the images of one file (a multi-frame file or a mosaic) would fall in "
                "two chunks: use chunks=None (one chunk)", field="chunks")
        plan = tuple((d,) for d in shape)
        parts = [files]
    token = tokenize(series.__dask_tokenize__(), out_dtype, read_dtype, scaling, plan)
    name = f"voxpipe-read-{token}"
    layer: dict[Any, Any] = {}
    for k, part in enumerate(parts):
        part_names = list(dict.fromkeys(p for p, _ in part))
        part_etags = None if etag_of is None else [etag_of[n] for n in part_names]
        sub = unpickled_series(part_names, part_etags, options, series_threads, uid, split,
                               part)
        block = tuple(k if a == axis else 0 for a in range(len(shape)))
        block_shape = tuple(plan[a][block[a]] for a in range(len(shape)))
        key = (name, *block)
        layer[key] = Task(key, _read_series_block, _Source(pickle.dumps(sub)), read_dtype,
                          out_dtype, block_shape, threads)
    return _array(da, name, layer, plan, out_dtype)


def _files_apart(parts: Sequence[Sequence[tuple[str, int]]]) -> bool:
    """Whether no file has images in two parts."""
    owner: dict[str, int] = {}
    return all(owner.setdefault(path, k) == k for k, part in enumerate(parts) for path, _ in part)


def to_dask(x: StrPath | NiftiImage | Series | Sequence[StrPath | NiftiImage] | Any,
            dtype: npt.DTypeLike | None = None, *, chunks: Chunks = None, scaling: bool = True,
            threads: int | None = None,
            storage_options: Mapping[str, Any] | None = None) -> dask.array.Array:
    """A dask array of an image's data, read by voxpipe chunk by chunk; building it reads
    headers only.

    ``x``: an image from ``vp.load`` (NIfTI or NIfTI-Zarr) or its ``dataobj``; a path or URL
    (opened with ``vp.load``); a list of them, stacked along a new last axis (each file its own
    chunk or chunks; every header is read now and the shapes and output dtypes must agree, or
    ValueError names the first file that differs); a ``vp.dicom.Series`` or a DICOM folder,
    ``.dcm`` file or prefix URL ending in '/' (one series; its images are scanned now).

    Values: a chunk holds ``proxy.read(block, dtype, scaling=scaling)``: ``dtype=None``
    gives ``np.asanyarray(img.dataobj)``'s values and dtype (a float dtype:
    ``img.get_fdata(dtype=dtype)``'s); ``scaling=False`` the stored values. A DICOM series
    gives ``get_data``'s: float32 by default (as ``vp.load_dicom``), float64 when asked,
    ``scaling=False`` the stored values.

    ``chunks``: None (the default) chooses whole volumes, as many per chunk as make at most
    128 MiB of output (one volume per chunk from 64 MiB up), aligned to a NIfTI-Zarr store's
    own chunks; a 3D image larger than that is cut into slabs of whole slices along z. A size
    (``"64 MiB"``) sets that target; an int is the volumes (3D: slices) per chunk; any other
    value is Dask's own chunks argument. A .nii.gz written as one gzip stream without a seek
    index (nibabel's output) is read only from its start: such a file is one chunk unless
    chunks are asked for (then with Dask's PerformanceWarning); ``vp.gz.build_index`` once, or
    a copy written by ``vp.save``, lets its volumes be read apart.
    ``threads``: threads each task reads with; None: the worker's budget (voxpipe's default
    where ``VOXPIPE_NUM_THREADS`` or ``OMP_NUM_THREADS`` is set, as distributed's workers set
    it, else 1). ``storage_options``: for the URLs among the inputs, as ``vp.load``'s.

    >>> arr = vp.to_dask("demo_bold.nii.gz", np.float32)  # reads the header only
    >>> arr.shape, arr.dtype
    ((64, 64, 40, 60), dtype('float32'))
    >>> float(arr[32, 32, 20, 0].compute())  # stored 989: 989 * 0.5 + 10
    504.5
    >>> vp.to_dask(["demo_bold.nii.gz"] * 3).chunks[4]  # a stack: one file per chunk
    (1, 1, 1)
    """
    da = _dask()
    want = None if dtype is None else np.dtype(dtype)
    if threads is not None and operator.index(threads) < 0:
        raise InvalidArgumentError(f"threads: expected None or a count >= 0, but received "
                                   f"{threads}", field="threads")
    scaling = bool(scaling)
    if isinstance(x, Series):
        return _series_array(da, x, want, scaling, chunks, threads)
    if isinstance(x, (str, os.PathLike)):
        path = os.fspath(x)
        if _is_dicom_location(path):
            return _series_array(da, _one_series(path, storage_options), want, scaling, chunks,
                                 threads)
        return _image_array(da, [(path, _open_image(path, storage_options))], want, scaling,
                            chunks, threads, stacked=False)
    if isinstance(x, (list, tuple)):
        if not x:
            raise ValueError("to_dask needs at least one file to stack")
        return _image_array(da, _open_all(x, storage_options), want, scaling, chunks, threads,
                            stacked=True)
    if storage_options:
        raise TypeError("storage_options applies to URLs given as strings; an image carries "
                        "its own")
    get = getattr(x, "get_filename", None)
    label = (get() if callable(get) else None) or repr(x)
    return _image_array(da, [(label, _proxy_of(x))], want, scaling, chunks, threads,
                        stacked=False)
