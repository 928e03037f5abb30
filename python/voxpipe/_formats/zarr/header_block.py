"""The stored NIfTI header block of a NIfTI-Zarr store (the ``nifti`` array): read within
bounds, its version and byte order decided as the core decides them, rewritten for a coarser
pyramid level, and made the head of the virtual .nii through which the core opens the store."""

from __future__ import annotations

import math
import struct

import numpy as np
import numpy.typing as npt

from ..._foundation.errors import FormatError, LimitError
from .metadata import ZarrGroup, level_scales, multiscales

# The largest header array read: the header, the extension flag and extensions of any size
# a NIfTI writer makes in practice (CIFTI-2's XML, dcm2niix's JSON: megabytes at most). The
# array is read whole, so its declared size is checked against this before anything is read.
MAX_HEADER_ARRAY_BYTES = 64 << 20
# At most this many chunks: writers store the header as one (voxpipe, niizarr); a tiny chunk
# size over a large array would be millions of requests for absent chunks.
_MAX_HEADER_CHUNKS = 1024


def read_header_array(group: ZarrGroup, name: str) -> bytes:
    """The stored header block: the ``nifti`` array, a 1-D array of bytes whose size, checked
    before it is read, is at most MAX_HEADER_ARRAY_BYTES in at most _MAX_HEADER_CHUNKS chunks
    (the block is a header of 348 or 540 bytes, then optionally the extension flag and the
    extensions; the core's parse of it checks the extensions' sizes against it)."""
    try:
        nifti = group["nifti"]
    except KeyError:
        raise FormatError(f"{name}: not a NIfTI-Zarr: expected a 'nifti' header array, but the "
                          f"group has none", path=name, field="nifti") from None
    shape = tuple(getattr(nifti, "shape", ()) or ())
    dtype = getattr(nifti, "dtype", None)
    if len(shape) != 1 or dtype is None or np.dtype(str(dtype)).itemsize != 1 \
            or np.dtype(str(dtype)).kind not in "ui":
        raise FormatError(f"{name}: expected the 'nifti' header array to be 1-D bytes (u1), but "
                          f"it has shape {shape} and dtype {dtype}", path=name, field="nifti")
    size, chunk = int(shape[0]), int(nifti.chunks[0])
    if size > MAX_HEADER_ARRAY_BYTES:
        raise LimitError(f"{name}: expected a 'nifti' header array of at most "
                         f"{MAX_HEADER_ARRAY_BYTES} bytes (a header and its extensions), but its "
                         f"metadata declare {size}", path=name, field="nifti")
    if chunk < 1 or -(-size // chunk) > _MAX_HEADER_CHUNKS:
        raise LimitError(f"{name}: expected the 'nifti' header array in at most "
                         f"{_MAX_HEADER_CHUNKS} chunks, but its chunks of {chunk} bytes make "
                         f"{-(-size // max(chunk, 1))}", path=name, field="nifti")
    return np.asarray(nifti[...]).view(np.uint8).tobytes()


def header_fields(block: bytes, name: str = "") -> tuple[int, str, int]:
    """(NIfTI version, byte order '<'/'>', sizeof_hdr) of a stored header block, decided as the
    core (and nibabel) decide them when they open the virtual .nii built from it: NIfTI-1 by its
    magic at 344, else NIfTI-2 by a sizeof_hdr of 540 in either order; the byte order by dim[0]
    (by sizeof_hdr where dim[0] is 0). Deciding otherwise would write the virtual vox_offset in
    one version's place and order and have the core read another's: data elsewhere, the
    header's own bytes read as voxels."""
    if len(block) >= 348 and block[344:347] in (b"n+1", b"ni1"):
        version, size = 1, 348
    elif len(block) >= 4 and 540 in (struct.unpack("<i", block[:4])[0],
                                     struct.unpack(">i", block[:4])[0]):
        version, size = 2, 540
    else:
        raise FormatError(f"{name}: expected a NIfTI header in the 'nifti' array (a NIfTI-1 "
                          f"magic at byte 344, or a NIfTI-2 sizeof_hdr of 540), but it holds "
                          f"{len(block)} bytes starting {block[:4].hex()}", path=name,
                          field="magic", offset=344 if len(block) >= 348 else 0)
    if len(block) < size:
        raise FormatError(f"{name}: expected a NIfTI-2 header of 540 bytes, but the 'nifti' "
                          f"array holds {len(block)}", path=name, field="sizeof_hdr", offset=0)
    dim0 = struct.unpack_from("<h", block, 40)[0] if version == 1 else \
        struct.unpack_from("<q", block, 16)[0]
    if dim0 == 0:
        swapped = struct.unpack(">i", block[:4])[0] == size
    else:
        swapped = not 1 <= dim0 <= 7
    return version, (">" if swapped else "<"), size


def level_header(block: bytes, group: ZarrGroup, path: str, path0: str,
                 shape: tuple[int, ...]) -> bytes:
    """The header of a coarser level: the level's dims, voxel sizes and affines (the finest
    level's, composed with the change of OME scale and translation between the levels, as the
    specification's reference reader does)."""
    from nibabel.nifti1 import Nifti1Header
    from nibabel.nifti2 import Nifti2Header

    version, order, size = header_fields(block, str(group.store))
    klass: type[Nifti1Header] = Nifti1Header if version == 1 else Nifti2Header
    hdr = klass(block[:size], endianness=order, check=False)
    qform, qcode = hdr.get_qform(coded=True)
    sform, scode = hdr.get_sform(coded=True)

    def phys(p: str) -> npt.NDArray[np.float64]:
        scale = level_scales(group, p)
        trans = None
        for d in (multiscales(group) or [{}])[0].get("datasets", []):
            if str(d.get("path")) == p:
                for t in d.get("coordinateTransformations", []):
                    if t.get("type") == "translation":
                        trans = [float(v) for v in t["translation"]]
        m = np.eye(4)
        if scale:
            m[[0, 1, 2], [0, 1, 2]] = list(reversed(scale[-3:]))
        if trans:
            m[:3, 3] = list(reversed(trans[-3:]))
        return m

    change = np.linalg.inv(phys(path0)) @ phys(path)
    old_shape = hdr.get_data_shape()
    hdr.set_data_shape(shape[:len(old_shape)] + tuple(old_shape[len(shape):]))
    zooms = list(hdr.get_zooms())
    for i in range(min(3, len(zooms))):
        zooms[i] = zooms[i] * change[i, i]
    hdr.set_zooms(zooms)
    if qform is not None:
        hdr.set_qform(qform @ change, int(qcode))
    if sform is not None:
        hdr.set_sform(sform @ change, int(scode))
    head: bytes = hdr.binaryblock
    return head + block[size:]


def virtual_prefix(block: bytes, name: str = "") -> tuple[bytes, int]:
    """(the bytes of a .nii before its data: the stored header block, its extension flag and
    extensions, padded to 16 bytes; the stored vox_offset where it is another, else -1). A
    stored header of a pair ('ni1') is opened as a single file's ('n+1')."""
    version, order, size = header_fields(block, name)
    hdr = bytearray(block[:size])
    rest = block[size:]
    if len(rest) == 0:
        ext = b"\x00\x00\x00\x00"
    elif len(rest) >= 4:
        ext = bytes(rest)
    else:
        raise FormatError(f"{name}: expected the header, or the header, 4 extension flag bytes "
                          f"and the extensions, but the 'nifti' array holds {len(block)} bytes",
                          path=name, field="extension", offset=size)
    magic_at, off_at, off_fmt = (344, 108, "f") if version == 1 else (4, 168, "q")
    if bytes(hdr[magic_at:magic_at + 3]) in (b"ni1", b"ni2"):
        hdr[magic_at + 1:magic_at + 2] = b"+"
    width = struct.calcsize(off_fmt)
    stored_offset = struct.unpack(order + off_fmt, bytes(hdr[off_at:off_at + width]))[0]
    # vox_offset means nothing in a store (the voxels are the array's): the virtual file's data
    # start right after the extensions, whatever the stored value (2e9 sizes no padding).
    offset = (size + len(ext) + 15) // 16 * 16
    raised = -1
    if not (math.isfinite(stored_offset) and stored_offset == offset):
        raised = stored_offset
        hdr[off_at:off_at + width] = struct.pack(order + off_fmt, offset)
    prefix = bytes(hdr) + ext
    return prefix + b"\x00" * (offset - len(prefix)), raised

