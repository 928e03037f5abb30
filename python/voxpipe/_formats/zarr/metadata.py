"""NIfTI-Zarr metadata as zarr parses them: the axes, the OME multiscales levels and their
scales, how elements are stored (dtype, byte order, shards), the description of an array whose
chunks the core decodes itself, and the chunks' compression in words. Nothing here reads a
chunk or the header array (header_block.py); the opened store is read.py's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from ..._foundation.header import core_dtype_name
from ..._foundation.optional import require
from ..._foundation.errors import FormatError, InvalidArgumentError

# zarr's objects: a group, an array, an array's metadata (v2 or v3). zarr is an optional extra,
# imported when a store is opened, and its metadata are read alike across both formats' classes
# (getattr where only one has a field): they are typed as what they are, any object.
ZarrGroup = Any
ZarrArray = Any
ZarrMetadata = Any

# The axes a NIfTI-Zarr array may have, slowest first, and the NIfTI axis each one is.
ZARR_AXES = ("t", "c", "z", "y", "x")
NIFTI_AXIS = {"x": 0, "y": 1, "z": 2, "t": 3, "c": 4}

# Codecs the core decodes itself (class names of zarr's v3 codecs and numcodecs' v2 ones).
_CORE_COMPRESSORS = {"ZstdCodec": "zstd", "BloscCodec": "blosc", "GzipCodec": "gzip",
                     "Zstd": "zstd", "Blosc": "blosc", "GZip": "gzip", "Zlib": "zlib"}


def zarr_module() -> ModuleType:
    return require("zarr", "zarr", "NIfTI-Zarr", "zarr")


def axes_of(group: ZarrGroup, array: ZarrArray, ndim: int) -> list[str]:
    """The names of the array's axes, slowest first: the OME multiscales axes, else the
    array's dimension_names, else the specification's order cut to ``ndim``."""
    ms = multiscales(group)
    if ms:
        names = [str(a.get("name", "")) if isinstance(a, Mapping) else str(a)
                 for a in ms[0].get("axes", [])]
    else:
        names = list(getattr(array.metadata, "dimension_names", None) or [])
    if not names:
        names = list(ZARR_AXES[-ndim:]) if ndim <= 5 else []
    return names


def multiscales(group: ZarrGroup) -> list[Any]:
    attrs = group.attrs.asdict()
    ome = attrs.get("ome")
    ms = ome.get("multiscales") if isinstance(ome, Mapping) else attrs.get("multiscales")
    return ms if isinstance(ms, list) else []


def level_path(group: ZarrGroup, level: int, name: str) -> str:
    ms = multiscales(group)
    datasets = ms[0].get("datasets", []) if ms else []
    paths = [str(d["path"]) for d in datasets if isinstance(d, Mapping) and "path" in d]
    if not paths:
        paths = [str(i) for i in range(64) if str(i) in group]
    if not paths:
        raise FormatError(f"{name}: not an OME-Zarr image: expected multiscales metadata or an "
                          f"array '0', but the group has neither", path=name, field="multiscales")
    if not -len(paths) <= level < len(paths):
        raise InvalidArgumentError(f"{name}: expected a level in 0..{len(paths) - 1}, but "
                                   f"received {level}", path=name, field="level")
    return paths[level]


def level_scales(group: ZarrGroup, path: str) -> list[float] | None:
    for d in (multiscales(group) or [{}])[0].get("datasets", []):
        if str(d.get("path")) == path:
            for t in d.get("coordinateTransformations", []):
                if t.get("type") == "scale":
                    return [float(s) for s in t["scale"]]
    return None


def stored_dtype(array: ZarrArray) -> tuple[np.dtype[Any], bool]:
    """(the elements' dtype, whether they are stored big-endian): zarr v3 says the byte order in
    its bytes codec, v2 in the dtype."""
    meta = array.metadata
    if getattr(meta, "zarr_format", 3) == 2:
        dt = np.dtype(array.dtype)
        big = dt.byteorder == ">" or (dt.byteorder == "=" and not np.little_endian)
        return dt.newbyteorder("="), big and dt.itemsize > 1
    dt = np.dtype(meta.data_type.to_native_dtype()).newbyteorder("=")
    big = False
    codecs = list(meta.codecs)
    if len(codecs) == 1 and type(codecs[0]).__name__ == "ShardingCodec":
        codecs = list(codecs[0].codecs)  # a shard's inner chunks say how elements are stored
    for codec in codecs:
        endian = getattr(codec, "endian", None)
        if type(codec).__name__ == "BytesCodec" and endian is not None:
            big = getattr(endian, "value", endian) == "big"
    return dt, big and dt.itemsize > 1


class Shards:
    """How a sharded array (Zarr v3 sharding_indexed) stores its inner chunks: the shard shape,
    inner chunks per shard along each axis, and where the shard index is and how it is checked
    (each inner chunk's (offset, size) as little-endian uint64, C order over the shard's inner
    grid; (2^64-1, 2^64-1) for an absent one; a CRC32C after it where the index has one)."""

    def __init__(self, shard_shape: Sequence[int], inner_shape: Sequence[int], at_end: bool,
                 crc: bool) -> None:
        self.shape = [int(d) for d in shard_shape]
        self.per = [int(d) // int(c) for d, c in zip(shard_shape, inner_shape)]
        self.count = int(np.prod(self.per, dtype=np.int64))
        self.at_end, self.crc = at_end, crc
        self.index_bytes = 16 * self.count + (4 if crc else 0)


def shards_of(meta: ZarrMetadata) -> tuple[Shards, list[Any]] | None:
    """(the shard layout, the inner chunks' codecs) of a v3 array sharded in the layout the core
    reads (a plain inner bytes codec and compressor; an index of bytes and optionally crc32c),
    else None."""
    codecs = list(getattr(meta, "codecs", ()))  # v2 metadata have none: never sharded
    if len(codecs) != 1 or type(codecs[0]).__name__ != "ShardingCodec":
        return None
    sharding = codecs[0]
    index = [type(c).__name__ for c in sharding.index_codecs]
    endian = getattr(sharding.index_codecs[0], "endian", None) if index else None
    if index not in (["BytesCodec"], ["BytesCodec", "Crc32cCodec"]) or \
            getattr(endian, "value", endian) not in (None, "little"):
        return None
    location = getattr(sharding.index_location, "value", sharding.index_location)
    shards = Shards(meta.chunk_grid.chunk_shape, sharding.chunk_shape, location == "end",
                    len(index) == 2)
    return shards, list(sharding.codecs)


def _sizes(values: Sequence[Any], minimum: int, field: str, name: str) -> list[int]:
    """Sizes from metadata as ints in [minimum, 2^62]: what a shape or chunk shape can be, and
    what index arithmetic over them holds without overflow."""
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) \
                or not minimum <= int(v) <= 1 << 62:
            raise FormatError(f"{name}: expected the {field} to be integers from {minimum} to "
                              f"2^62, but it is {list(values)}", path=name, field=field)
        out.append(int(v))
    return out


def core_spec(array: ZarrArray, dtype: np.dtype[Any], big_endian: bool,
              name: str) -> dict[str, Any] | None:
    """The core's description of the array where the core decodes its chunks (regular chunks,
    or the inner chunks of regular shards; zstd, blosc, gzip, zlib or none; no filters or
    transposes), else None."""
    if dtype.fields is not None or dtype.kind not in "biufc":
        return None
    try:
        dtype_name = core_dtype_name(dtype)
    except ValueError:
        return None
    meta = array.metadata
    order_f = False
    if getattr(meta, "zarr_format", 3) == 2:
        if meta.filters:
            return None
        comp = meta.compressor
        compressor = "none" if comp is None else _CORE_COMPRESSORS.get(type(comp).__name__)
        order_f = meta.order == "F"
        chunk_shape = list(meta.chunks)
    else:
        codecs = list(meta.codecs)
        sharded = shards_of(meta)
        if sharded is not None:
            codecs = sharded[1]
        if not codecs or type(codecs[0]).__name__ != "BytesCodec":
            return None
        rest = codecs[1:]
        if not rest:
            compressor = "none"
        elif len(rest) == 1:
            compressor = _CORE_COMPRESSORS.get(type(rest[0]).__name__)
        else:
            return None
        grid = meta.chunk_grid
        if type(grid).__name__ != "RegularChunkGrid":
            return None
        chunk_shape = list(grid.chunk_shape)
        if sharded is not None:  # the core decodes the inner chunks
            chunk_shape = list(meta.codecs[0].chunk_shape)
    if compressor is None:
        return None
    fill = np.asarray(array.metadata.fill_value if getattr(meta, "zarr_format", 3) == 3
                      else (meta.fill_value if meta.fill_value is not None else 0))
    fill_bytes = fill.astype(dtype.newbyteorder(">" if big_endian else "<")).tobytes()
    return {"shape": _sizes(array.shape, 0, "shape", name),
            "chunk_shape": _sizes(chunk_shape, 1, "chunk_shape", name),
            "dtype": dtype_name, "big_endian": big_endian, "chunk_f_order": order_f,
            "compressor": compressor, "fill_value": fill_bytes, "name": name}


# Codecs that compress nothing: how elements are laid out (bytes, transpose) and checksums.
_NOT_COMPRESSORS = frozenset({"bytes", "transpose", "crc32c"})


def compression_of(array: ZarrArray) -> str:
    """How the array's chunks are compressed, as its metadata say: each compressor's name, blosc's
    inner compressor, and the level ("blosc zstd 5", "gzip 1"; chained ones joined by " + "),
    followed by " (sharded)" for the inner chunks of a sharded array; "none" where the chunks
    are stored as they are."""
    meta = array.metadata.to_dict()
    sharded = False
    if meta.get("zarr_format") == 2:
        comp = meta.get("compressor")
        codecs = [] if comp is None else [{"name": comp.get("id"), "configuration": comp}]
    else:
        codecs = list(meta.get("codecs") or ())
        if len(codecs) == 1 and codecs[0].get("name") == "sharding_indexed":
            sharded = True
            codecs = list(codecs[0].get("configuration", {}).get("codecs") or ())
    parts = []
    for codec in codecs:
        if codec.get("name") in _NOT_COMPRESSORS:
            continue
        config = codec.get("configuration") or {}
        words = [codec.get("name"), config.get("cname"), config.get("clevel", config.get("level"))]
        parts.append(" ".join(str(w) for w in words if w is not None))
    text = " + ".join(parts) or "none"
    return f"{text} (sharded)" if sharded else text

