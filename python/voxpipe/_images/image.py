"""``vp.load``, ``vp.save``, ``vp.from_bytes`` and ``vp.from_stream``: nibabel's API, served by
whichever format the registry finds for a name or its bytes. No format is named here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any, Literal

import numpy.typing as npt

from .._formats import registry
from .._foundation.types import NiftiImage, StrPath


def from_bytes(data: bytes | bytearray | memoryview, *, threads: int = 0) -> NiftiImage:
    """The image whose .nii or .nii.gz bytes are `data` (bytes, bytearray, memoryview or any
    C-contiguous buffer): nibabel's ``Nifti1Image.from_bytes``, read by voxpipe. The bytes are
    held, not copied, and must not change while the image lives."""
    return load(data, threads=threads)


def from_stream(fileobj: IO[bytes], *, threads: int = 0) -> NiftiImage:
    """The image a readable binary file object holds from its position on (.nii or .nii.gz,
    recognised by its bytes): nibabel's ``from_stream``, read by voxpipe. The stream is read
    to its end now."""
    return load(fileobj, threads=threads)


def load(filename: StrPath | bytes | bytearray | memoryview | IO[bytes], *,
         mmap: bool | Literal["c", "r"] = True, keep_file_open: bool | None = None,
         threads: int = 0, index: StrPath | Literal[False] | None = None,
         storage_options: Mapping[str, Any] | None = None,
         filesystem: Any = None, level: int = 0) -> NiftiImage:
    """Open a NIfTI-1/2 file (.nii, .nii.gz, .hdr/.img pairs) or a NIfTI-Zarr store
    (.nii.zarr), reading only the header.

    ``filename``: a path (str or ``pathlib.Path``), the bytes of a .nii or .nii.gz (bytes,
    bytearray, memoryview), or a readable binary file object (read to its end now; gzip is
    recognised by its bytes). Images from memory hold their bytes; ``get_filename()`` is None.

    Returns a nibabel image (``nibabel.Nifti1Image`` / ``Nifti2Image``, or ``Nifti1Pair`` /
    ``Nifti2Pair`` for .hdr/.img: nibabel's own classes) whose ``dataobj`` is voxpipe's
    ArrayProxy: voxels are read on demand, by voxpipe. ``mmap`` (True, False, 'c', 'r') and
    ``keep_file_open`` (None, False, True) behave as in nibabel (see ArrayProxy): whole reads of
    uncompressed, unscaled data are memory-mapped unless ``mmap=False``; only
    ``keep_file_open=True`` keeps the data file open between accesses. ``threads``: threads for
    large reads (0: the default, docs/python.md "Thread count").
    ``index`` (single-member .gz data only): None uses a valid seek index next to the file
    (FILE.gz.gzidx) or in the user cache if there is one (``vp.gz.build_index`` writes them);
    a path uses that GZIDX file (from voxpipe, indexed_gzip or rapidgzip; a stale one is an
    error); False never uses one. With an index, ``img.dataobj[..., t]`` inflates only from the
    nearest seek point.

    ``filename`` may also be the URL of a .nii or .nii.gz object: ``s3://``, ``gs://``, ``az://``,
    ``http(s)://`` (through obstore: ``pip install 'voxpipe[s3]'``). Opening reads its first
    64 KiB; reads of data fetch the byte ranges they need (one volume of a ``.nii``, or of a
    ``.nii.gz`` with a seek index next to the object or in the cache: one request), every
    request pinned to the version opened (docs/python.md, "Object storage");
    ``get_filename()`` is the URL. ``storage_options``
    configures the store (obstore's keys: ``endpoint``, ``region``, ``access_key_id``,
    ``skip_signature``, ``allow_http``, ``timeout``...); without it the environment does, as for
    the clouds' own tools (``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP=true``, credential files).
    ``filesystem``: an fsspec filesystem (``s3fs.S3FileSystem(...)``, ...) to read ``filename``
    through instead, by its ``info``, ``cat_file`` and ``cat_ranges``.

    A name ending in ``.zarr`` (local or URL) is a NIfTI-Zarr store (docs/zarr.md, ``pip install
    'voxpipe[zarr]'``): opening reads its metadata and header array; reads decode only the
    chunks they touch, in parallel, with the scaling fused. ``level``: its pyramid level (0, the
    finest; a coarser level's header has the level's dims, voxel sizes and affines).

    A DICOM file (``.dcm``, or a local file with DICOM's "DICM" preamble) is read as
    ``vp.load_dicom`` reads it: its series, as an in-memory image. The format is chosen by the
    registry (docs/architecture.md): by the name's suffix, else by a local file's first bytes,
    else NIfTI.

    On the series ``python -m voxpipe.demo --dir .`` writes:

    >>> img = vp.load("demo_bold.nii.gz")       # reads the header only
    >>> img.shape, img.dataobj.dtype, img.dataobj.slope, img.dataobj.inter
    ((64, 64, 40, 60), dtype('<i2'), 0.5, 10.0)
    >>> img.get_fdata(dtype=np.float32)[32, 32, 20, 0]  # stored 989: 989 * 0.5 + 10
    np.float32(504.5)
    >>> img.dataobj[..., 7].shape               # inflates only up to the end of volume 7
    (64, 64, 40)
    """
    # (for_reading gives a format with a reader; the record's type allows None)
    img: NiftiImage = registry.for_reading(filename).load(  # type: ignore[misc]
        filename, mmap=mmap, keep_file_open=keep_file_open, threads=threads, index=index,
        storage_options=storage_options, filesystem=filesystem, level=level)
    return img


def save(img: Any, filename: StrPath, affine: npt.ArrayLike | None = None, *,
         header: Any = None, level: int | None = None, version: Literal[1, 2] | None = None,
         gzip_layout: Literal["members", "bgzf", "single"] = "members", threads: int = 0,
         chunks: int | tuple[int, ...] | None = None, shards: int | tuple[int, ...] | None = None,
         levels: int = 1, codec: Literal["zstd", "blosc", "gzip", "none"] = "zstd",
         zarr_format: Literal[2, 3] = 3, overwrite: bool = True,
         storage_options: Mapping[str, Any] | None = None) -> None:
    """Write an image (or an array with `affine`) to .nii, .nii.gz, a .hdr/.img pair or a
    NIfTI-Zarr store (.nii.zarr).

    ``img``: any nibabel image (voxpipe's or nibabel's; other formats are converted as
    ``nib.Nifti1Image.from_image`` converts them), or an array with ``affine`` (and ``header``).
    ``.gz`` outputs are compressed at ``level`` (0-9, default 1) on ``threads`` threads (0: the
    default count).
    ``gzip_layout="members"`` (the default) writes independent gzip members of 1 MiB that
    announce their sizes: every gzip reader (nibabel included) reads the file, and voxpipe reads
    it in parallel and at random. ``"bgzf"`` writes htslib's BGZF blocks; ``"single"`` writes
    one member, byte-identical to nibabel's output at the same level.

    A name ending in ``.zarr`` writes NIfTI-Zarr (docs/zarr.md): Zarr v3 with OME-NGFF 0.5
    (``zarr_format=2``: v2 with 0.4), the header as stored bytes, the data unscaled. ``chunks``
    and ``shards`` (v3) are sizes in NIfTI axis order (x, y, z, t, c; default: one volume per
    chunk for 4D/5D, slabs of whole slices of about 4 MiB for 3D); ``codec`` ``"zstd"`` (level
    ``level``, default 3), ``"blosc"`` (zstd inside, byte shuffle), ``"gzip"`` or ``"none"``;
    ``levels``: pyramid levels (1: none), each halving x, y and z (2x2x2 means; labels:
    nearest), computed one volume at a time.

    The output is written under a temporary name and renamed when complete; with
    ``overwrite=False`` an existing output is FileExistsError instead of being replaced.

    ``filename`` may be a URL (``s3://``, ``gs://``, ``az://``; ``storage_options`` or the
    environment configure the store, as for ``vp.load``): the object appears only once complete
    (large ones go up as parallel multipart uploads; a failed upload is aborted), a store's root
    metadata is written last, and ``overwrite=False`` holds against a second writer too
    (docs/remote.md, "Writing to object storage").

    An image read by
    ``vp.load`` and not modified keeps its stored values and scale factors (no re-quantisation);
    other data are written in the header's dtype with scale factors computed as nibabel does.

    >>> data = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    >>> vp.save(vp.Nifti1Image(data, np.eye(4)), "small.nii.gz")
    >>> vp.load("small.nii.gz").get_fdata()[1, 2, 3]
    np.float64(23.0)
    """
    # (for_writing gives a format with a writer; the record's type allows None)
    registry.for_writing(filename).save(  # type: ignore[misc]
        img, filename, affine, header=header, level=level, version=version,
        gzip_layout=gzip_layout, threads=threads, chunks=chunks, shards=shards, levels=levels,
        codec=codec, zarr_format=zarr_format, overwrite=overwrite,
        storage_options=storage_options)
