"""Writing NIfTI-Zarr (read.py reads it): the header array, the OME metadata, pyramid levels,
and the voxels written a block of whole chunks at a time from the source image's proxy (bounded
memory), into a temporary folder that replaces the output only once complete. The metadata are
zarr's (arrays created through it); the chunks of plain codecs are encoded by the numcodecs codecs
zarr itself runs, on our threads."""

from __future__ import annotations

import errno
import fcntl
import itertools
import math
import os
import re
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from nibabel.nifti1 import Nifti1Header

from ..._foundation.native import core as _core
from ..._sources import remote as _remote
from ..._sources import upload as _upload
from ..._foundation.optional import require
from .metadata import NIFTI_AXIS, ZARR_AXES, ZarrArray, zarr_module
from ..._foundation.errors import InvalidArgumentError, UnsupportedError
from ..._foundation.types import Array
from ..nifti.proxy import ArrayProxy

# What write takes as a codec's name, and as the Zarr version.
Codec = Literal["zstd", "blosc", "gzip", "none"]
ZarrFormat = Literal[2, 3]

# (the stored bytes of a chunk from its C-ordered values, the dtype chunks are stored in).
Encoder = tuple[Callable[[npt.NDArray[Any]], bytes], np.dtype[Any]]

_OME_TYPES = {"x": "space", "y": "space", "z": "space", "t": "time", "c": "channel"}

# NIfTI xyzt_units codes and OME-NGFF unit names (the ones both know).
_SPACE_UNITS = {1: "meter", 2: "millimeter", 3: "micrometer"}
_TIME_UNITS = {8: "second", 16: "millisecond", 24: "microsecond"}


def _compressor(codec: str, level: int | None, zarr_format: int, itemsize: int) -> Any:
    """The codec object create_array takes for ``codec`` (zarr's for v3, numcodecs' for v2),
    or None for "none"."""
    zarr = zarr_module()
    if codec == "none":
        return None
    if zarr_format == 3:
        if codec == "zstd":
            # With zstd's content checksum: a flipped bit in a chunk is then CorruptError on
            # read, never a wrong voxel (docs/zarr.md, "Damage").
            return zarr.codecs.ZstdCodec(level=3 if level is None else level, checksum=True)
        if codec == "blosc":
            return zarr.codecs.BloscCodec(cname="zstd", clevel=5 if level is None else level,
                                          shuffle="shuffle", typesize=itemsize)
        if codec == "gzip":
            return zarr.codecs.GzipCodec(level=6 if level is None else level)
    else:
        numcodecs = require("numcodecs", "zarr", "NIfTI-Zarr", "numcodecs")
        if codec == "zstd":
            return numcodecs.Zstd(level=3 if level is None else level, checksum=True)
        if codec == "blosc":
            return numcodecs.Blosc(cname="zstd", clevel=5 if level is None else level,
                                   shuffle=numcodecs.Blosc.SHUFFLE)
        if codec == "gzip":
            return numcodecs.GZip(level=6 if level is None else level)
    raise InvalidArgumentError(f"expected codec 'zstd', 'blosc', 'gzip' or 'none', but received "
                               f"{codec!r}", field="codec")


def _zarr_axes(ndim: int) -> list[str]:
    return ["z", "y", "x"] if ndim <= 3 else ["t", "z", "y", "x"] if ndim == 4 else list(ZARR_AXES)


# A 3D image is cut into slabs of whole slices of about this size: chunks are then runs of the
# NIfTI data (a read of slices decodes only theirs) and a whole read decodes several in parallel.
_SLAB_BYTES = 4 << 20
# Volumes written per zarr call: bounded memory, and enough chunks per call to encode in
# parallel.
_WRITE_BLOCK_BYTES = 64 << 20


def _default_chunks(nshape: Sequence[int], itemsize: int) -> list[int]:
    """Chunks in NIfTI axis order: one volume per chunk for 4D/5D, slabs of whole slices for
    3D."""
    x, y, z = nshape[:3]
    if len(nshape) > 3:
        return [x, y, z] + [1] * (len(nshape) - 3)
    slice_bytes = max(1, x * y * itemsize)
    return [x, y, max(1, min(z, _SLAB_BYTES // slice_bytes))]


def _nifti_order(values: Sequence[int] | int | None, nshape: Sequence[int],
                 what: str) -> list[int] | None:
    if values is None:
        return None
    if isinstance(values, int):
        values = [values] * 3
    values = [int(v) for v in values]
    if not 1 <= len(values) <= len(nshape) or any(v < 1 for v in values):
        raise InvalidArgumentError(f"expected {what} of 1 to {len(nshape)} positive sizes in "
                                   f"NIfTI axis order (x, y, z, t, c), but received {values}",
                                   field=what)
    # Axes not given: the whole axis for spatial ones, one per chunk for t and c.
    rest = [nshape[i] if i < 3 else 1 for i in range(len(values), len(nshape))]
    return [min(v, d) for v, d in zip(values + rest, nshape)]


def _ome_metadata(hdr: Nifti1Header, axes: list[str], shapes: list[list[int]], method: str,
                  zarr_format: int, name: str) -> dict[str, Any]:
    zooms = list(hdr.get_zooms()) + [1.0] * 5
    units = int(hdr["xyzt_units"])
    space_unit, time_unit = _SPACE_UNITS.get(units & 7), _TIME_UNITS.get(units & 0x38)

    def positive(v: float) -> float:
        v = float(v)
        return v if math.isfinite(v) and v > 0 else 1.0

    base = {"x": positive(zooms[0]), "y": positive(zooms[1]), "z": positive(zooms[2]),
            "t": positive(zooms[3]), "c": 1.0}
    ome_axes = []
    for a in axes:
        entry: dict[str, Any] = {"name": a, "type": _OME_TYPES[a]}
        unit = space_unit if _OME_TYPES[a] == "space" else time_unit if a == "t" else None
        if unit:
            entry["unit"] = unit
        ome_axes.append(entry)
    datasets = []
    for n, shape in enumerate(shapes):
        scale, trans = [], []
        for a, d0, dn in zip(axes, shapes[0], shape):
            if _OME_TYPES[a] == "space" and n:
                factor = d0 / dn
                scale.append(base[a] * factor)
                trans.append(base[a] * (factor - 1) * 0.5)
            else:
                scale.append(base[a])
                trans.append(0.0)
        datasets.append({"path": str(n), "coordinateTransformations": [
            {"type": "scale", "scale": scale}, {"type": "translation", "translation": trans}]})
    ms = {"name": name, "axes": ome_axes, "datasets": datasets,
          "type": method}
    if zarr_format == 3:
        return {"ome": {"version": "0.5", "multiscales": [ms]}}
    return {"multiscales": [dict(ms, version="0.4")]}


def _header_array_bytes(hdr: Nifti1Header) -> bytes:
    """The header block as the specification stores it: the header, then, where there are
    extensions, the extension flag and the extensions (nibabel's write_to, vox_offset set as
    for a .nii)."""
    import io
    hdr = hdr.copy()
    hdr.set_data_offset(0)
    buf = io.BytesIO()
    hdr.write_to(buf)
    data = buf.getvalue()
    return data if len(hdr.extensions) else data[:hdr.sizeof_hdr]


def _downsample(volume: Array, nearest: bool) -> Array:
    """A C-ordered (..., Z, Y, X) block halved along each spatial axis longer than 1: the mean
    of each 2x2x2 cell (edges repeated on odd sizes; integers rounded half to even and clipped),
    or, for labels, the cell's first voxel."""
    spatial = volume.shape[-3:]
    if nearest:
        return np.ascontiguousarray(volume[..., ::2 if spatial[0] > 1 else 1,
                                           ::2 if spatial[1] > 1 else 1,
                                           ::2 if spatial[2] > 1 else 1])
    factors = [2 if d > 1 else 1 for d in spatial]
    pad = [(0, 0)] * (volume.ndim - 3) + [(0, d % f) for d, f in zip(spatial, factors)]
    v = np.pad(volume, pad, mode="edge") if any(p[1] for p in pad) else volume
    lead = v.shape[:-3]
    cells = v.reshape(lead + sum(((d // f, f) for d, f in zip(v.shape[-3:], factors)), ()))
    # Means in float64, rounded once to the stored type.
    acc: Array = cells.mean(axis=(-5, -3, -1), dtype=np.complex128 if v.dtype.kind == "c"
                            else np.float64)
    if volume.dtype.kind in "iub":
        acc = np.rint(acc)
        if volume.dtype.kind != "b":
            info = np.iinfo(volume.dtype)
            acc = np.clip(acc, info.min, info.max)
    return acc.astype(volume.dtype)


def write(path: str, hdr: Nifti1Header, values: ArrayProxy | Array, *,
          chunks: Sequence[int] | int | None = None, shards: Sequence[int] | int | None = None,
          levels: int = 1, codec: Codec = "zstd", level: int | None = None,
          zarr_format: ZarrFormat = 3, threads: int = 0, overwrite: bool = True,
          storage_options: Mapping[str, Any] | None = None,
          chunk_sink: Callable[[str, bytes], None] | None = None) -> None:
    """Write the NIfTI-Zarr store ``path``: ``hdr`` (slope/inter already those of the stored
    values) and ``values``, the stored values (an ArrayProxy read unscaled block by block, or an
    array in the header's dtype), with ``levels`` pyramid levels. Written into a temporary
    folder beside ``path`` that replaces it when complete; without ``overwrite`` an existing
    store is FileExistsError.

    A URL ``path`` (a prefix on a bucket, configured by ``storage_options``) is written object
    by object with its root metadata last (_sources/upload.py StoreUpload: a reader finds no
    store there until it is complete): the chunks of level 0 go up as they are encoded
    (``chunk_sink(key, bytes)`` in place of their files), the metadata, and the chunks zarr
    encodes itself (sharded arrays) or reads back (coarser pyramid levels), from a local
    temporary folder at the end."""
    zarr = zarr_module()
    if _remote.is_url(path):
        with _upload.LocalOutput(path) as out, \
                _upload.StoreUpload(path, storage_options, overwrite=overwrite) as up:
            write(out.path(), hdr, values, chunks=chunks, shards=shards, levels=levels,
                  codec=codec, level=level, zarr_format=zarr_format, threads=threads,
                  chunk_sink=up.put if int(levels) == 1 else None)
            up.finish(out.path())
        return
    if zarr_format not in (2, 3):
        raise InvalidArgumentError(f"expected zarr_format 2 or 3, but received {zarr_format}",
                                   path=path, field="zarr_format")
    if shards is not None and zarr_format != 3:
        raise InvalidArgumentError("shards need Zarr v3 (zarr_format=3)", path=path,
                                   field="shards")
    if int(levels) < 1:
        raise InvalidArgumentError(f"expected levels >= 1, but received {levels}", path=path,
                                   field="levels")
    shape = tuple(int(d) for d in hdr.get_data_shape())
    if len(shape) > 5 and any(d != 1 for d in shape[5:]):
        raise UnsupportedError(f"{path}: NIfTI-Zarr holds up to 5 dimensions, but the image has "
                               f"shape {shape}", path=path, field="dim")
    nshape = list(shape[:5]) + [1] * max(0, 3 - len(shape))
    dtype = np.dtype(hdr.get_data_dtype())
    if dtype.fields is not None:
        raise UnsupportedError(f"{path}: NIfTI-Zarr of RGB data is not supported by voxpipe yet",
                               path=path, field="datatype")
    axes = _zarr_axes(len(nshape))
    perm = [NIFTI_AXIS[a] for a in axes]
    zshape = [nshape[i] for i in perm]
    nchunks = _nifti_order(chunks, nshape, "chunks") or _default_chunks(nshape, dtype.itemsize)
    zchunks = [nchunks[i] for i in perm]
    nshards = _nifti_order(shards, nshape, "shards")
    zshards = None
    if nshards is not None:
        zshards = [max(c, s // c * c) for c, s in zip(zchunks, (nshards[i] for i in perm))]
    compressors = _compressor(codec, level, zarr_format, dtype.itemsize)
    parent = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.exists(path) and not _is_zarr_folder(path):
        raise FileExistsError(f"{path}: exists and is not a Zarr store; not replacing it")
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path}: a Zarr store exists there (overwrite replaces it)")
    base = os.path.basename(path.rstrip('/'))
    remove_stale_temporaries(parent, base)
    # os.mkdir, not tempfile.mkdtemp: the folder is renamed into the store, which should get
    # the permissions any new folder gets (the umask's), not mkdtemp's owner-only 0700.
    tmp = os.path.join(parent, f".{base}.tmp-{os.getpid()}-{uuid.uuid4().hex[:12]}")
    os.mkdir(tmp)
    lock = _lock_folder(tmp)
    try:
        group = zarr.open_group(store=zarr.storage.LocalStore(tmp), mode="w",
                                zarr_format=zarr_format)
        extra: dict[str, Any] = {"dimension_names": axes} if zarr_format == 3 else {}
        if zshards is not None:
            extra["shards"] = zshards
        arr = group.create_array("0", shape=zshape, chunks=zchunks, dtype=dtype,
                                 compressors=compressors, fill_value=0, **extra)
        _write_values(arr, tmp, values, nshape, perm, zchunks, dtype, threads, chunk_sink)
        shapes = [zshape]
        nearest = int(hdr["intent_code"]) in (1002, 2001)  # NIFTI_INTENT_LABEL, NEURONAME
        prev = arr
        for n in range(1, int(levels)):
            small = [-(-d // 2) if a in "xyz" and d > 1 else d for a, d in zip(axes, shapes[-1])]
            if small == shapes[-1]:
                break
            cur = group.create_array(str(n), shape=small,
                                     chunks=[min(c, d) for c, d in zip(zchunks, small)],
                                     dtype=dtype, compressors=compressors, fill_value=0,
                                     **({"dimension_names": axes} if zarr_format == 3 else {}))
            _write_level(prev, cur, nearest)
            shapes.append(small)
            prev = cur
        block = _header_array_bytes(hdr)
        nifti = group.create_array("nifti", shape=(len(block),), chunks=(len(block),),
                                   dtype="u1", compressors=None, fill_value=0)
        nifti[:] = np.frombuffer(block, np.uint8)
        group.attrs.update(_ome_metadata(hdr, axes, shapes, "nearest" if nearest else "mean",
                                         zarr_format, ""))
        _replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if lock is not None:
            os.close(lock)


def _is_zarr_folder(path: str) -> bool:
    return os.path.isdir(path) and any(os.path.exists(os.path.join(path, f))
                                       for f in ("zarr.json", ".zgroup", ".zarray"))


def _replace(tmp: str, path: str) -> None:
    """Put the complete store ``tmp`` at ``path`` in one atomic step, so that a reader sees the
    old store or the new one, and writers racing to one output each end with a complete store
    there (the last one's) and nothing else: a rename where ``path`` is free, else an exchange
    of the two folders (Linux renameat2 RENAME_EXCHANGE) after which ``tmp`` holds the old
    store, removed. Where the system cannot exchange folders, two renames under a lock of the
    parent folder that voxpipe's writers share."""
    while True:
        try:
            os.rename(tmp, path)  # replaces nothing but an empty folder
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        try:
            if not _exchange(tmp, path):
                break
        except FileNotFoundError:
            continue  # the store at path went between the two calls: rename again
        shutil.rmtree(tmp, ignore_errors=True)
        return
    parent = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(parent, fcntl.LOCK_EX)
        old = tmp + ".old"
        if os.path.exists(path):
            os.replace(path, old)
        try:
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(old):
                os.replace(old, path)
            raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        os.close(parent)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: str, b: str) -> bool:
    """Swap the folders ``a`` and ``b`` atomically (renameat2 RENAME_EXCHANGE); False where the
    system or the file system cannot."""
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), b)


def _lock_folder(folder: str) -> int | None:
    """An exclusive lock on ``folder`` (its descriptor, to close when the write ends; None
    where the file system has no locks), held for as long as the process writes into it, and
    released however the process ends: what tells a live temporary from a stale one."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pass
    return fd


# Listing a folder of many thousands of entries for a rare leftover is not worth its time on
# each write: as for files (src/core/file.cpp), the search stops after this many.
_MAX_LISTED_ENTRIES = 4096
_TEMPORARY = re.compile(r"([1-9][0-9]*)-[0-9a-f]{12}(\.old)?")


def remove_stale_temporaries(parent: str, base: str) -> None:
    """Remove the temporary folders (``.BASE.tmp-PID-HEX``, and ``...old`` of the fallback in
    _replace) that writers of the store ``base`` in ``parent`` which have ended left behind
    (SIGKILL, power loss): those of a process that no longer exists, owned by this user, and
    not locked (a live writer on another host sharing the folder holds its lock). The rule
    src/core/file.cpp applies to files' temporaries. Best effort: what cannot be checked
    stays."""
    prefix = f".{base}.tmp-"
    me = os.getpid()
    try:
        entries = os.scandir(parent)
    except OSError:
        return
    with entries:
        for listed, entry in enumerate(entries):
            if listed >= _MAX_LISTED_ENTRIES:
                break
            if not entry.name.startswith(prefix):
                continue
            m = _TEMPORARY.fullmatch(entry.name[len(prefix):])
            if m is None or int(m.group(1)) == me or _alive(int(m.group(1))):
                continue
            try:
                fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW |
                             os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if os.fstat(fd).st_uid != os.geteuid():
                    continue
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue
            finally:
                os.close(fd)
            shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` may exist (another user's answers EPERM: alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True
    return True


def _chunk_encoder(arr: ZarrArray) -> Encoder | None:
    """(a function giving the stored bytes of one chunk, the dtype chunks are stored in) where
    the array's codecs are zarr's plain ones (v3: bytes, then zstd, blosc or gzip; v2: one
    numcodecs compressor, no filters): the bytes zarr would store, made by the same numcodecs
    codecs zarr runs, on our own threads (numcodecs releases the GIL while it compresses; zarr
    3.1 encodes a write's chunks with little concurrency: 2.0 s against 0.8 s for 300 volumes of
    96x96x60 int16 on 2 cores). None elsewhere (sharding): zarr writes those."""
    numcodecs = require("numcodecs", "zarr", "NIfTI-Zarr", "numcodecs")

    meta = arr.metadata
    if getattr(meta, "zarr_format", 3) == 2:
        if meta.filters:
            return None
        comp = meta.compressor
        return (comp.encode if comp is not None else bytes), np.dtype(arr.dtype)
    codecs = list(meta.codecs)
    if not codecs or type(codecs[0]).__name__ != "BytesCodec" or len(codecs) > 2:
        return None
    endian = getattr(codecs[0].endian, "value", codecs[0].endian) or "little"
    dtype = np.dtype(arr.dtype).newbyteorder("<" if endian == "little" else ">")
    if len(codecs) == 1:
        return bytes, dtype
    c = codecs[1]
    name = type(c).__name__
    if name == "ZstdCodec":
        return numcodecs.Zstd(level=c.level, checksum=c.checksum).encode, dtype
    if name == "GzipCodec":
        return numcodecs.GZip(level=c.level).encode, dtype
    if name == "BloscCodec":
        shuffle = {"noshuffle": numcodecs.Blosc.NOSHUFFLE, "shuffle": numcodecs.Blosc.SHUFFLE,
                   "bitshuffle": numcodecs.Blosc.BITSHUFFLE}[getattr(c.shuffle, "value", c.shuffle)]
        blosc = numcodecs.Blosc(cname=getattr(c.cname, "value", c.cname), clevel=c.clevel,
                                shuffle=shuffle, blocksize=c.blocksize, typesize=c.typesize)
        return blosc.encode, dtype
    return None


def _write_values(arr: ZarrArray, root: str, values: ArrayProxy | Array, nshape: list[int],
                  perm: list[int], zchunks: list[int], dtype: np.dtype[Any],
                  threads: int, sink: Callable[[str, bytes], None] | None = None) -> None:
    """The stored values into level 0, a block of whole chunks along the slowest axis at a
    time (volumes for 4D/5D, slabs for 3D): each block decoded from the source straight into
    one buffer; its chunks encoded on `threads` threads and written into the store's folder
    `root` (or given to `sink` as (the chunk's key in the store, its bytes)) while the next
    block is read (or, for codecs _chunk_encoder leaves to zarr, handed to zarr). Memory: two
    blocks, and what `sink` holds."""
    from concurrent.futures import Future, ThreadPoolExecutor

    lead = perm[0]  # the NIfTI axis of zarr's slowest axis: t (4D/5D) or z (3D)
    per_index = int(np.prod([d for i, d in enumerate(nshape) if i != lead], dtype=np.int64))
    step = zchunks[0]
    per_block = max(step, _WRITE_BLOCK_BYTES // max(1, per_index * dtype.itemsize) // step * step)
    n = nshape[lead]
    read = getattr(values, "read", None)
    vdims = len(values.shape)
    encoder = _chunk_encoder(arr)
    workers = max(1, _core.resolve_threads(threads))
    folder = os.path.join(root, *arr.path.split("/"))
    made: set[str] = set()

    def store(block: Array, start: int, grid: tuple[int, ...], encoder: Encoder) -> None:
        """Chunk `grid` of the block whose slowest index starts at `start`: padded to the whole
        chunk shape as zarr stores edge chunks, encoded, written."""
        encode, stored = encoder
        region = tuple(slice(g * c, min((g + 1) * c, d))
                       for g, c, d in zip(grid, zchunks, arr.shape))
        local = (slice(region[0].start - start, region[0].stop - start),) + region[1:]
        part = block[local]
        if part.shape == tuple(zchunks):
            chunk = np.ascontiguousarray(part, dtype=stored)  # a volume: no copy
        else:
            chunk = np.zeros(zchunks, stored)
            chunk[tuple(slice(0, e) for e in part.shape)] = part
        data = encode(chunk)
        key = arr.metadata.encode_chunk_key(grid)
        if sink is not None:
            sink(f"{arr.path}/{key}", data)
            return
        path = os.path.join(folder, *key.split("/"))
        parent = os.path.dirname(path)
        if parent not in made:
            os.makedirs(parent, exist_ok=True)
            made.add(parent)
        with open(path, "wb") as f:
            f.write(data)

    pending: list[Future[None]] = []
    with ThreadPoolExecutor(workers) as pool:
        for i0 in range(0, n, per_block):
            i1 = min(n, i0 + per_block)
            sel = tuple(slice(i0, i1) if i == lead else slice(None) for i in range(vdims))
            block: Array = read(sel, scaling=False) if read is not None else \
                np.asarray(values)[sel]
            block = block.reshape([i1 - i0 if i == lead else d for i, d in enumerate(nshape)],
                                  order="F").transpose(perm)
            if encoder is None:
                region = tuple(slice(i0, i1) if k == 0 else slice(None) for k in range(len(perm)))
                arr[region] = block.astype(dtype, copy=False)
                continue
            for f in pending:  # the previous block's chunks are written: its memory can go
                f.result()
            grids = [range(i0 // zchunks[0], -(-i1 // zchunks[0]))] + \
                [range(-(-d // c)) for d, c in zip(arr.shape[1:], zchunks[1:])]
            pending = [pool.submit(store, block, i0, g, encoder)
                       for g in itertools.product(*grids)]
        for f in pending:
            f.result()


def _write_level(prev: ZarrArray, cur: ZarrArray, nearest: bool) -> None:
    """Level n from level n-1, one index of the slowest non-spatial axis at a time (one volume
    in memory), or whole for 3D."""
    lead = prev.shape[:-3]
    if not lead:
        cur[...] = _downsample(np.asarray(prev[...]), nearest)
        return
    for idx in np.ndindex(*lead):
        cur[idx] = _downsample(np.asarray(prev[idx]), nearest)

