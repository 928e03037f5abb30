"""NIfTI-Zarr: an OME-Zarr multiscale image whose raw NIfTI header is the ``u1`` array ``nifti``.

The format (neuroscales/nifti-zarr, 1.0 release candidate): data stored unscaled, axes
``[t, c, z, y, x]`` in C order, so that a ``(1, Z, Y, X)`` chunk is exactly one NIfTI volume in
NIfTI's own (Fortran) order; Zarr v3 with OME-NGFF 0.5, or Zarr v2 with 0.4; scl_slope/inter,
the affines, units and intent live in the header. Where the header and the OME metadata
disagree, the header wins.

Reading: the metadata come from the ``zarr`` package (never parsed here); the chunks a read
touches are decoded by the core (``_core.read_zarr_chunks``: zstd, blosc, gzip, zlib or none,
in parallel, straight into the output with the byte order, cast and scaling of the NIfTI
reader). Arrays whose codecs the core does not decode (sharding, transposes, filters, checksums)
are decoded by zarr's own pipeline and converted by the core. The image's header is the stored
block itself, opened by the core as the header of a .nii whose data are the store's voxels (a
virtual byte source), so every check, fix and affine is the one a .nii gets, and the C++
commands (``voxpipe info``, ``convert``, ``resample``, ``view``) read stores through it.

Here: the opened store (NiftiZarr), its reads and the virtual .nii. The metadata as zarr parses
them: metadata.py; the stored header block: header_block.py; writing: write.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._foundation.native import core as _core
from ..._sources import remote as _remote
from ..._foundation import identity as _identity
from ..._foundation.header import core_dtype_name
from ..._foundation.optional import require
from .header_block import level_header, read_header_array, virtual_prefix
from .local import StoreIdentity, local_store, walk
from .pinned import Listing, pinned_store
from .metadata import (NIFTI_AXIS, ZARR_AXES, Shards, ZarrArray, ZarrGroup, axes_of, core_spec,
                       compression_of, level_path, multiscales, shards_of, stored_dtype,
                       zarr_module)
from ..._foundation.errors import (CorruptError, FormatError, LimitError, TruncatedError,
                                   VoxpipeError, VoxpipeFileNotFoundError, VoxpipeIOError)
from ..nifti.slicing import Range

# A chunk as the core's read_zarr_chunks takes it: (grid index, key, the local file holding it
# or None, its encoded bytes or None; neither: absent, the fill value).
Chunk = tuple[tuple[int, ...], str, "str | None", "npt.NDArray[np.uint8] | None"]


def is_nifti_zarr(path: Any) -> bool:
    """Whether ``path`` (a path or URL) names a Zarr store by its name: ``*.zarr``, with or
    without a trailing slash (``.nii.zarr`` by the specification's convention, ``.ome.zarr``
    and plain ``.zarr`` too)."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        return False
    return path.split("?", 1)[0].rstrip("/").lower().endswith(".zarr")


def _group_store(location: str, storage_options: Mapping[str, Any] | None,
                 read_only: bool) -> Any:
    """A zarr store rooted at ``location``: a local folder, or a URL through voxpipe's obstore
    client (configured as for vp.load), listed now and pinned to that listing (pinned.py). Any:
    pinned.py's ObjectStore, or local.py's checked LocalStore, whose ``record`` and ``pinned``
    the open sets."""
    zarr_module()
    if _remote.is_url(location):
        return pinned_store(location, storage_options)
    if storage_options:
        raise TypeError("storage_options applies to URLs (s3://, gs://, az://, https://...) only")
    return local_store(location, read_only)


def _failure(name: str, field: str, exc: BaseException) -> VoxpipeError:
    """The voxpipe error for ``exc``, raised while the store ``name`` was read at ``field``:
    a voxpipe error as it is; an object store's or the system's refusal as an I/O error; any
    other (zarr's, JSON's, or a KeyError, TypeError, RecursionError... of metadata that are not
    what they claim) as FormatError naming the field."""
    if isinstance(exc, VoxpipeError):
        return exc
    if isinstance(exc, Exception) and type(exc).__module__.split(".")[0] == "obstore":
        return _remote.store_error(name, exc, None)
    if isinstance(exc, OSError) and not isinstance(exc, ValueError):
        if isinstance(exc, FileNotFoundError):
            return VoxpipeFileNotFoundError(f"{name}: {field}: {exc}", path=name, field=field)
        return VoxpipeIOError(f"{name}: {field}: {exc}", path=name, field=field)
    if isinstance(exc, MemoryError):
        return LimitError(f"{name}: {field}: more memory than there is", path=name, field=field)
    return FormatError(f"{name}: {field}: invalid metadata: {type(exc).__name__}: {exc}",
                       path=name, field=field)


class NiftiZarr:
    """One level of an opened NIfTI-Zarr store: its zarr array, the stored header block, and
    how the array's axes map to NIfTI's. What the proxy reads through, and what it pickles as
    (location, options, level)."""

    group: ZarrGroup
    array: ZarrArray
    name: str
    stored_header: bytes
    axes: list[str]
    stored_dtype: np.dtype[Any]
    stored_big_endian: bool
    spec: dict[str, Any] | None
    shards: Shards | None
    # What pins the store to the version opened: a local store's files (local.py), the listing
    # of one on object storage (pinned.py).
    identity: StoreIdentity | Listing

    def __init__(self, location: str, storage_options: Mapping[str, Any] | None = None,
                 level: int = 0) -> None:
        zarr = zarr_module()
        self.location = location
        # What the store pickles as: a local store by its absolute name, made so against the
        # working directory it is opened from (the receiver may run in another folder, and
        # this process may change its own before it pickles).
        self.absolute_location = (location if _remote.is_url(location) else
                                  os.path.join(_identity.working_directory(), location))
        self.storage_options = dict(storage_options) if storage_options else None
        self.level = level
        name = location
        field = "listing"
        store: Any = None
        try:
            store = _group_store(location, storage_options, True)
            local = not _remote.is_url(location)
            if local:
                store.record = {}  # the identity of every file this open reads
                # Every file of the store, listed before zarr reads any (local.py).
                listing = walk(location) if os.path.isdir(location) else {}
                store.pinned = (location, listing)
            field = "zarr.json"
            self._open(zarr, store, name)
            field = "nifti"
            self.stored_header = read_header_array(self.group, name)
            field = "axes"
            self.axes = axes_of(self.group, self.array, self.array.ndim)
            self._check_axes()
            field = "codecs"
            self.stored_dtype, self.stored_big_endian = stored_dtype(self.array)
            self.spec = core_spec(self.array, self.stored_dtype, self.stored_big_endian,
                                  self.name)
            sharded = (shards_of(self.array.metadata) if self.spec is not None
                       and getattr(self.array.metadata, "zarr_format", 3) == 3 else None)
            self.shards = sharded[0] if sharded is not None else None
            self._chunk_root = self._local_chunk_root()
            if level != 0:
                field = "multiscales"
                self.stored_header = level_header(self.stored_header, self.group, self._path,
                                                  level_path(self.group, 0, name),
                                                  self.nifti_shape_of_array())
            if local:
                self.identity = StoreIdentity(location, store.record, listing)
            else:
                pin: Listing = store.listing
                pin.freeze()  # (over http(s): the objects the open read)
                self.identity = pin
        except Exception as exc:
            raise _failure(name, field, exc) from exc
        finally:
            if store is not None and not _remote.is_url(location):
                store.record = None

    def _open(self, zarr: Any, store: Any, name: str) -> None:
        """The group, the level's array and its name."""
        try:
            # Zarr v3 first, then v2: asked for either, zarr probes both formats' files (and
            # consolidated metadata) at once, 4 requests on object storage instead of 1.
            try:
                group = zarr.open_group(store=store, mode="r", zarr_format=3,
                                        use_consolidated=False)
            except FileNotFoundError:
                group = zarr.open_group(store=store, mode="r", zarr_format=2,
                                        use_consolidated=False)
        except FileNotFoundError as exc:
            if os.path.isdir(self.location):  # a folder, but no group metadata in it
                raise FormatError(f"{name}: not a Zarr store: expected zarr.json or .zgroup in "
                                  f"it", path=name, field="zarr.json") from exc
            raise VoxpipeFileNotFoundError(f"{name}: no Zarr store there ({exc})",
                                           path=name) from exc
        except VoxpipeError:
            raise
        except Exception as exc:
            raise FormatError(f"{name}: not a Zarr group: {type(exc).__name__}: {exc}",
                              path=name, field="zarr.json") from exc
        self.group = group
        path = level_path(group, self.level, name)
        try:
            array = group[path]
        except KeyError:
            raise FormatError(f"{name}: expected the array '{path}' that the multiscales "
                              f"metadata name, but the group has none", path=name,
                              field="multiscales") from None
        if not hasattr(array, "dtype") or not hasattr(array, "chunks"):
            raise FormatError(f"{name}: expected '{path}' to be an array, but it is a group",
                              path=name, field="multiscales")
        self._path = path
        self.array = array
        self.name = f"{self.location.rstrip('/')}/{path}"

    def check_unchanged(self) -> None:
        """VoxpipeIOError where the local store is no longer the one opened (its folder, its
        metadata or its header array replaced or rewritten): a stat per recorded file. (Reads
        of a store on object storage are pinned request by request: nothing to check after.)"""
        if isinstance(self.identity, StoreIdentity):
            self.identity.check(self.location)

    def _check_axes(self) -> None:
        names = self.axes
        if (len(names) != self.array.ndim or len(set(names)) != len(names)
                or any(n not in NIFTI_AXIS for n in names)):
            raise FormatError(f"{self.name}: expected axes named from {list(ZARR_AXES)} (one per "
                              f"dimension, {self.array.ndim}), but received {names}",
                              path=self.name, field="axes")

    def nifti_shape_of_array(self) -> tuple[int, ...]:
        """The array's shape in NIfTI's axis order (x, y, z[, t[, c]])."""
        sizes = dict(zip(self.axes, self.array.shape))
        n = max(NIFTI_AXIS[a] for a in self.axes) + 1
        return tuple(int(sizes.get(a, 1)) for a in ("x", "y", "z", "t", "c")[:max(n, 3)])

    def check_against(self, shape: Sequence[int], dtype: np.dtype[Any]) -> None:
        """The header's shape and dtype against the array's: a store whose header describes
        other voxels than its array holds is refused, naming both."""
        sizes = dict(zip(self.axes, self.array.shape))
        for axis, name in enumerate(("x", "y", "z", "t", "c")):
            want = int(shape[axis]) if axis < len(shape) else 1
            have = int(sizes.get(name, 1))
            if want != have:
                raise FormatError(f"{self.name}: expected the array's {name} axis to have the "
                                  f"header's {want} voxels, but it has {have}",
                                  path=self.name, field="dim")
        if len(shape) > 5 and any(int(d) != 1 for d in shape[5:]):
            raise FormatError(f"{self.name}: NIfTI-Zarr holds up to 5 dimensions, but the "
                              f"header has {len(shape)}", path=self.name, field="dim")
        stored = self.stored_dtype
        if stored.newbyteorder("=") != np.dtype(dtype).newbyteorder("="):
            raise FormatError(f"{self.name}: expected the array's dtype to be the header's "
                              f"{np.dtype(dtype).newbyteorder('=')}, but it is {stored}",
                              path=self.name, field="datatype")

    def _local_chunk_root(self) -> str | None:
        store = self.array.store
        root = getattr(store, "root", None)
        # zarr's LocalStore or voxpipe's checked one (local.py); the core's chunk files are
        # regular files only too (core::InputFile).
        if root is None or not any(c.__name__ == "LocalStore" for c in type(store).__mro__):
            return None
        folder: str = os.fspath(root)
        return os.path.join(folder, *self.array.path.split("/"))

    # -- reads -----------------------------------------------------------------------------------
    def read(self, ranges: Sequence[Range], dtype: np.dtype[Any], apply_scaling: bool,
             file_order: bool, real_part: bool, slope: float, inter: float,
             out: npt.NDArray[Any], threads: int) -> None:
        """Decode the NIfTI-axis ranges (start, step, count) into ``out`` (F-ordered, of the
        ranges' counts), as the NIfTI reader's OutputSpec says. Afterwards, the store is checked
        to be the one opened (check_unchanged): values read from a store replaced under the
        read are an error, never data under the old header."""
        try:
            self._read(ranges, dtype, apply_scaling, file_order, real_part, slope, inter, out,
                       threads)
        except Exception as exc:
            raise _failure(self.name, "chunk", exc) from exc
        self.check_unchanged()

    def _read(self, ranges: Sequence[Range], dtype: np.dtype[Any], apply_scaling: bool,
              file_order: bool, real_part: bool, slope: float, inter: float,
              out: npt.NDArray[Any], threads: int) -> None:
        sel, strides = self._zarr_selection(ranges)
        flat = out.reshape(-1, order="F").view(np.uint8) if out.size else np.empty(0, np.uint8)
        if any(c == 0 for _, _, c in sel):
            return
        name = core_dtype_name(dtype)
        if self.spec is not None:
            chunks = self._chunks_for(sel, self.spec)
            _core.read_zarr_chunks(self.spec, chunks, sel, name, apply_scaling, file_order,
                                   real_part, slope, inter, flat, strides, threads)
            # The local chunk files the core read, checked again: one replaced or rewritten
            # while it was read is an error, never its voxels.
            for _, key, path, _ in chunks:
                if path is not None:
                    self._check_chunk(key, path)
            return
        # zarr decodes (codecs the core does not), the core converts: one uncompressed chunk
        # holding exactly the selection, read back with the selection's own steps.
        slices: list[slice] = []
        local: list[Range] = []
        for start, step, count in sel:
            lo = start if step > 0 else start + step * (count - 1)
            hi = lo + abs(step) * (count - 1) + 1
            slices.append(slice(lo, hi))
            local.append((0 if step > 0 else hi - lo - 1, step, count))
        try:
            raw = np.ascontiguousarray(self.array[tuple(slices)])
        except Exception as exc:
            if isinstance(exc, (VoxpipeError, MemoryError)) or type(exc).__module__.startswith(
                    "obstore") or (isinstance(exc, OSError) and not isinstance(exc, ValueError)):
                raise _failure(self.name, "chunk", exc) from exc
            # zarr's codecs (numcodecs, crc32c) fail with their own types on damaged chunks.
            raise CorruptError(f"{self.name}: chunk: zarr cannot decode the chunks of "
                               f"{[(sl.start, sl.stop) for sl in slices]}: "
                               f"{type(exc).__name__}: {exc}", path=self.name,
                               field="chunk") from exc
        spec = dict(self._raw_spec(), shape=list(raw.shape), chunk_shape=list(raw.shape),
                    compressor="none", chunk_f_order=False)
        raw = raw.astype(raw.dtype.newbyteorder(">" if spec["big_endian"] else "<"), copy=False)
        _core.read_zarr_chunks(spec, [(tuple(0 for _ in raw.shape), "selection", None, raw)],
                               local, name, apply_scaling, file_order, real_part, slope, inter,
                               flat, strides, threads)

    def _raw_spec(self) -> dict[str, Any]:
        return {"dtype": core_dtype_name(self.stored_dtype), "big_endian": self.stored_big_endian,
                "fill_value": b"", "name": self.name}

    def _zarr_selection(self, ranges: Sequence[Range]) -> tuple[list[Range], list[int]]:
        """(per zarr axis (start, step, count), per zarr axis the element stride in ``out``)."""
        counts = [c for _, _, c in ranges]
        fstrides = [int(np.prod(counts[:i], dtype=np.int64)) for i in range(len(counts))]
        sel: list[Range] = []
        strides: list[int] = []
        for name in self.axes:
            axis = NIFTI_AXIS[name]
            if axis < len(ranges):
                start, step, count = ranges[axis]
                sel.append((int(start), int(step), int(count)))
                strides.append(fstrides[axis])
            else:
                sel.append((0, 1, 1))
                strides.append(0)
        return sel, strides

    def _chunks_for(self, sel: Sequence[Range], spec: dict[str, Any]) -> list[Chunk]:
        """(grid index, key, local path or None, bytes or None) of every chunk ``sel`` touches."""
        cshape = spec["chunk_shape"]
        per_axis = []
        for (start, step, count), cs in zip(sel, cshape):
            idx = start + step * np.arange(count, dtype=np.int64)
            per_axis.append(np.unique(idx // cs).tolist())
        grid: list[tuple[int, ...]] = [()]
        for ids in per_axis:
            grid = [g + (i,) for g in grid for i in ids]
        encode = self.array.metadata.encode_chunk_key
        if self.shards is not None:
            return self._inner_chunks(grid, self.shards)
        keys = [encode(g) for g in grid]
        if self._chunk_root is not None:
            out: list[Chunk] = []
            for g, key in zip(grid, keys):
                path = os.path.join(self._chunk_root, *key.split("/"))
                there = self._check_chunk(key, path)
                out.append((g, key, path, None) if there else (g, key, None, None))
            return out
        return [(g, key, None, data) for g, key, data in zip(grid, keys, self._get_many(keys))]

    def _check_chunk(self, key: str, path: str) -> bool:
        """Whether the local chunk ``key`` of this array is there (at ``path``); VoxpipeIOError
        naming the store and the chunk where it is not as the store's listing at open has it."""
        assert isinstance(self.identity, StoreIdentity)
        return self.identity.check_chunk(self.location,
                                         f"{self.array.path}/{key}" if self.array.path else key,
                                         path)

    def _inner_chunks(self, grid: list[tuple[int, ...]], sh: Shards) -> list[Chunk]:
        """The inner chunks (grid indices over the inner chunk grid) of a sharded array: for
        each shard touched, its index read (one ranged read) and checked, then the span of its
        touched inner chunks (one more), fetched concurrently across shards."""
        by_shard: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        for g in grid:
            by_shard.setdefault(tuple(i // p for i, p in zip(g, sh.per)), []).append(g)
        shard_keys = {s: self.array.metadata.encode_chunk_key(s) for s in by_shard}
        indexes = self._get_many(list(shard_keys.values()), index=sh)
        absent = 0xFFFFFFFFFFFFFFFF
        # Each touched inner chunk's (offset, size) in its shard, None where it is absent (no
        # shard, or the index's marker); each shard's span over the present ones.
        where: dict[tuple[int, ...], tuple[int, int] | None] = {}
        spans: dict[tuple[int, ...], tuple[int, int]] = {}
        for s, data in zip(by_shard, indexes):
            table = None if data is None else self._shard_index(shard_keys[s], data, sh)
            for g in by_shard[s]:
                entry = None
                if table is not None:
                    flat = int(np.ravel_multi_index(tuple(i % p for i, p in zip(g, sh.per)),
                                                    sh.per))
                    offset, size = int(table[flat, 0]), int(table[flat, 1])
                    if not offset == size == absent:
                        entry = (offset, size)
                where[g] = entry
            present = [e for e in (where[g] for g in by_shard[s]) if e is not None]
            if present:
                spans[s] = (min(o for o, _ in present), max(o + n for o, n in present))
        span_keys = list(spans)
        blobs = self._get_many([shard_keys[s] for s in span_keys],
                               ranges=[spans[s] for s in span_keys])
        data_of = dict(zip(span_keys, blobs))
        out: list[Chunk] = []
        for s, members in by_shard.items():
            blob = data_of.get(s)
            for g in members:
                key = f"{shard_keys[s]} (inner chunk {tuple(i % p for i, p in zip(g, sh.per))})"
                entry = where[g]
                if entry is None:
                    out.append((g, key, None, None))
                    continue
                offset, size = entry
                lo = offset - spans[s][0]
                if blob is None or lo + size > len(blob):
                    raise TruncatedError(f"{self.name}: {key}: expected {size} bytes at offset "
                                         f"{offset} of the shard, but the shard ends before",
                                         path=self.name, field="chunk")
                out.append((g, key, None, blob[lo:lo + size]))
        return out

    def _shard_index(self, key: str, data: npt.NDArray[np.uint8],
                     sh: Shards) -> npt.NDArray[np.uint64]:
        """A shard's index as (inner chunks, 2) uint64, its CRC32C checked."""
        raw = data.data.cast("B")  # the array's memory (NumPy types no __buffer__ before 3.12)
        if len(raw) != sh.index_bytes:
            raise TruncatedError(f"{self.name}: {key}: expected a shard index of "
                                 f"{sh.index_bytes} bytes, but the shard holds {len(raw)}",
                                 path=self.name, field="shard index")
        body = raw[:16 * sh.count]
        if sh.crc:
            # zarr's own crc32c codec runs google-crc32c: the same checksum, the same library.
            google_crc32c = require("google_crc32c", "zarr", "NIfTI-Zarr", "google-crc32c")
            want = int.from_bytes(raw[16 * sh.count:], "little")
            have: int = google_crc32c.value(bytes(body))
            if want != have:
                raise CorruptError(f"{self.name}: {key}: shard index CRC32C mismatch (stored "
                                   f"{want:08x}, computed {have:08x})", path=self.name,
                                   field="shard index")
        return np.frombuffer(body, dtype="<u8").reshape(sh.count, 2)

    def _get_many(self, keys: Sequence[str], *, index: Shards | None = None,
                  ranges: Sequence[tuple[int, int]] | None = None
                  ) -> list[npt.NDArray[np.uint8] | None]:
        """The encoded objects under ``keys`` (None where absent), fetched concurrently through
        the zarr store (obstore for URLs): whole, or a shard's index (``index``: the layout), or
        [start, end) of each (``ranges``)."""
        import asyncio

        from zarr.abc.store import RangeByteRequest, SuffixByteRequest
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        store, prefix = self.array.store, self.array.path
        proto = default_buffer_prototype()

        def request(i: int) -> RangeByteRequest | SuffixByteRequest | None:
            if ranges is not None:
                return RangeByteRequest(*ranges[i])
            if index is not None:
                n = index.index_bytes
                return SuffixByteRequest(n) if index.at_end else RangeByteRequest(0, n)
            return None

        async def get_all() -> list[npt.NDArray[np.uint8] | None]:
            bufs = await asyncio.gather(*(store.get(f"{prefix}/{k}" if prefix else k, proto,
                                                    byte_range=request(i))
                                          for i, k in enumerate(keys)))
            return [None if b is None else b.as_numpy_array() for b in bufs]

        fetched: list[npt.NDArray[np.uint8] | None] = sync(get_all())
        return fetched


# -- the virtual .nii the core opens ---------------------------------------------------------
class _VirtualFetcher:
    """The core's fetcher of the virtual .nii: header bytes from the prefix, data bytes decoded
    from the store (stored values, in the header's byte order), range by range."""

    def __init__(self, store: NiftiZarr, prefix: bytes, shape: Sequence[int],
                 dtype: np.dtype[Any], threads: int) -> None:
        self._store, self._prefix = store, prefix
        self._shape, self._dtype, self._threads = tuple(shape), dtype, threads

    def __call__(self, ranges: list[tuple[int, int]]) -> list[npt.NDArray[np.uint8]]:
        return [self.get(offset, size) for offset, size in ranges]

    def get(self, offset: int, size: int) -> npt.NDArray[np.uint8]:
        out = np.empty(size, np.uint8)
        head = len(self._prefix)
        if offset < head:
            n = min(size, head - offset)
            out[:n] = np.frombuffer(self._prefix, np.uint8, n, offset)
        lo, hi = max(offset, head) - head, offset + size - head
        if hi > lo:
            item = self._dtype.itemsize
            e0, e1 = lo // item, -(-hi // item)
            data = np.empty(e1 - e0, self._dtype)
            for box, start in _flat_boxes(e0, e1, self._shape):
                count = int(np.prod([c for _, _, c in box], dtype=np.int64))
                view = data[start - e0:start - e0 + count].reshape([c for _, _, c in box],
                                                                   order="F")
                read_stored_values(self._store, box, view, self._threads)
            out[max(offset, head) - offset:] = data.view(np.uint8)[lo - e0 * item:hi - e0 * item]
        return out


def read_stored_values(store: NiftiZarr, ranges: Sequence[Range], out: npt.NDArray[Any],
                       threads: int) -> None:
    """The stored values of the NIfTI-axis ``ranges`` into ``out`` (its dtype's byte order)."""
    stored_order = ">" if store.stored_big_endian else "<"
    want = out.dtype.byteorder if out.dtype.byteorder in "<>" else ("<" if np.little_endian
                                                                    else ">")
    if out.dtype.itemsize == 1 or want == stored_order:
        store.read(ranges, out.dtype, False, True, False, 1.0, 0.0, out, threads)
        return
    store.read(ranges, out.dtype, False, False, False, 1.0, 0.0, out, threads)
    native = "<" if np.little_endian else ">"
    if want != native:
        out.view(out.dtype.newbyteorder("=")).byteswap(inplace=True)


def _flat_boxes(e0: int, e1: int,
                shape: Sequence[int]) -> Iterator[tuple[list[Range], int]]:
    """The flat F-order element range [e0, e1) of an array of ``shape`` as boxes, each a run of
    consecutive elements: ([(start, 1, count) per axis], the box's first flat index)."""
    n = len(shape)
    strides = [int(np.prod(shape[:k], dtype=np.int64)) for k in range(n)]
    while e0 < e1:
        idx: list[int] = []
        rem = e0
        for k in range(n):
            idx.append(rem % shape[k])
            rem //= shape[k]
        k = 0
        while k + 1 < n and e0 % strides[k + 1] == 0 and e0 + strides[k + 1] <= e1:
            k += 1
        count = min(shape[k] - idx[k], (e1 - e0) // strides[k])
        box = [(0, 1, shape[a]) if a < k else (idx[a], 1, count if a == k else 1)
               for a in range(n)]
        yield box, e0
        e0 += count * strides[k]


def open_input(store: NiftiZarr, threads: int = 0) -> tuple[_core.RemoteInput, int]:
    """(a _core.RemoteInput of the .nii whose header is the store's stored block and whose data
    are the store's voxels, decoded on demand; the stored vox_offset where the virtual file had
    to change it (vox_offset means nothing in a store), else -1)."""
    prefix, raised = virtual_prefix(store.stored_header, store.location)
    head = _core.RemoteInput(store.location, len(prefix),
                             _VirtualFetcher(store, prefix, (), np.dtype("u1"), threads),
                             initial=prefix)
    core = _core.open_remote(head)  # the header's checks; its shape and dtype size the data
    from ..._foundation.header import NAME_TO_DTYPE
    dtype = NAME_TO_DTYPE[core.dtype]
    store.check_against(core.shape, dtype)
    if dtype.fields is None:
        dtype = dtype.newbyteorder(">" if core.big_endian else "<")
    nbytes = int(np.prod(core.shape, dtype=np.int64)) * dtype.itemsize
    volume = int(np.prod(core.shape[:3], dtype=np.int64)) * dtype.itemsize
    # Whole volumes per request: a volume chunk is decoded once per read of it.
    part = max(1 << 20, volume)
    data = _core.RemoteInput(store.location, len(prefix) + nbytes,
                             _VirtualFetcher(store, prefix, core.shape, dtype, threads),
                             initial=prefix, min_request=part, part_size=max(part, 8 << 20))
    return data, raised


def open_core(store: NiftiZarr, threads: int = 0) -> tuple[_core.NiftiImage, int]:
    """(the core image of the store, opened as the .nii of open_input; the stored vox_offset
    where it is another, else -1)."""
    data, raised = open_input(store, threads)
    return _core.open_remote(data), raised


def open_core_input(location: str) -> _core.RemoteInput:
    """The core's handler for a store's path: the store as a .nii (voxpipe info, convert,
    resample, view)."""
    return open_input(NiftiZarr(location))[0]


def describe_layout(location: str) -> str:
    """The core's handler for a store's description (voxpipe info): its chunks' compression as
    :func:`compression_of` names it on the first line, then ``key=value`` lines of what the
    metadata say of its layout: ``zarr_format``, ``levels`` (the multiscales datasets),
    ``chunks`` and ``shards`` (of the finest level, in NIfTI's axis order x, y, z, t, c, comma
    separated; no ``shards`` line for an array without)."""
    store = NiftiZarr(location)
    array = store.array
    try:
        lines = [compression_of(array)]
        lines.append(f"zarr_format={int(getattr(array.metadata, 'zarr_format', 3))}")
        ms = multiscales(store.group)
        datasets = ms[0].get("datasets", []) if ms else []
        levels = len(datasets) or sum(1 for i in range(64) if str(i) in store.group)
        lines.append(f"levels={levels}")

        def nifti_order(sizes: Sequence[int]) -> str:
            by_axis = dict(zip(store.axes, sizes))
            return ",".join(str(int(by_axis[a]))
                            for a in sorted(by_axis, key=NIFTI_AXIS.__getitem__))

        lines.append(f"chunks={nifti_order(array.chunks)}")
        shards = getattr(array, "shards", None)
        if shards is not None:
            lines.append(f"shards={nifti_order(shards)}")
        return "\n".join(lines)
    except Exception as exc:
        raise _failure(location, "codecs", exc) from exc
