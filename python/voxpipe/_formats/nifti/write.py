"""NIfTI-1/2 write: any image (or an array with an affine) as nibabel's classes would save it,
its header converted as nib.save converts it, stored values kept where the data object is an
unmodified voxpipe proxy; the bytes written by the C++ core under a temporary name."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

import nibabel as nib
from nibabel.nifti1 import Nifti1Header, Nifti1Pair

from ..._foundation.native import core as _core
from ..._foundation.header import convert_header
from ..._foundation.types import Array
from ..._sources import remote as _remote
from ..._sources import upload as _upload
from .open import NIBABEL_CLASSES
from .memory import as_bytes_view
from .proxy import ArrayProxy


def _image_for(obj: Any, affine: Any, header: Any) -> Nifti1Pair:
    """A NIfTI image of `obj`: a nibabel image as it is (other formats converted as nibabel's
    from_image does), or an array with `affine` and `header`."""
    if isinstance(obj, (nib.Nifti1Pair, nib.Nifti2Pair)):
        return obj
    if hasattr(obj, "dataobj") and hasattr(obj, "affine") and hasattr(obj, "header"):
        return nib.Nifti1Image.from_image(obj)
    return nib.Nifti1Image(np.asanyarray(obj), affine, header=header)


def prepare(img: Any, affine: Any, header: Any, version: int | None,
            pair: bool) -> tuple[Nifti1Header, ArrayProxy | Array, bool]:
    """(header, values, keeps_stored) to write `img` (or an array with `affine` and `header`)
    as NIfTI-`version` (None: the image's own), single file or .hdr/.img `pair`: the header
    converted as nib.save converts it, with scale factors; the values are the image's proxy
    where its stored values are kept (keeps_stored), else the array to write."""
    img = _image_for(img, affine, header)
    is2 = isinstance(img, (nib.Nifti2Image, nib.Nifti2Pair))
    target = NIBABEL_CLASSES[(2 if (version == 2 or (version is None and is2)) else 1, pair)]
    # nibabel's conversion: a copy for the same header class, otherwise the fields both have in
    # native byte order (as nib.save converts single <-> pair).
    hdr = convert_header(img.header, target.header_class)
    # Keep the shape/affine synchronised as nibabel's update_header does.
    if hdr.get_data_shape() != img.shape:
        hdr.set_data_shape(img.shape)
    if img.affine is not None and not np.allclose(img.affine, hdr.get_best_affine()):
        hdr.set_sform(img.affine, code="aligned")
        hdr.set_qform(img.affine, code="unknown")
    out_dtype = hdr.get_data_dtype()
    proxy = img.dataobj
    # As nibabel's to_file_map, the data object is written (not a get_fdata cache).
    keeps_stored = (isinstance(proxy, ArrayProxy)
                    and proxy.dtype.newbyteorder("=") == out_dtype.newbyteorder("="))
    if keeps_stored:
        hdr.set_slope_inter(proxy.slope, proxy.inter)
        return hdr, proxy, True
    data, slope, inter = _data_for_writing(np.asanyarray(proxy), out_dtype)
    hdr.set_slope_inter(slope, inter)
    return hdr, data, False


def save(img: Any, filename: Any, affine: Any = None, *, header: Any = None,
         level: int | None = None, version: int | None = None, gzip_layout: str = "members",
         threads: int = 0, overwrite: bool = True, storage_options: Any = None,
         **_: Any) -> None:
    """The NIfTI format's writer (vp.save's for .nii, .nii.gz and .hdr/.img names; options of
    other formats are ignored, as vp.save has always ignored them). A URL of a .nii or .nii.gz
    object is streamed into an upload as the core writes it (_sources/upload.py
    StreamingUpload: parts go up while the next are compressed, the object appears whole at
    the end); a pair is written into a local temporary folder, then uploaded, its .img object
    before its .hdr."""
    path = os.fspath(filename)
    remote = _remote.is_url(path)
    pair = bool(_core.is_pair_path(path))
    if remote and not overwrite and _upload.exists(path, storage_options):
        # Refused before anything is encoded; the upload's own condition holds against a
        # writer that creates the object meanwhile.
        raise _upload.ObjectExistsError(f"{path}: already exists (overwrite replaces it)",
                                        path=path)
    if remote and pair:
        with _upload.LocalOutput(path) as out:
            save(img, out.path(), affine, header=header, level=level, version=version,
                 gzip_layout=gzip_layout, threads=threads)
            folder = path.rsplit("/", 1)[0]
            # A pair's .img first: its .hdr, last, says the pair is there.
            names = sorted(os.listdir(out.folder), key=lambda n: n == os.path.basename(out.path()))
            for name in names:
                _upload.upload_file(os.path.join(out.folder, name), f"{folder}/{name}",
                                    storage_options, overwrite=overwrite)
        return
    if not remote and not overwrite and any(os.path.lexists(p) for p in _pair_paths(path)):
        raise FileExistsError(f"{path}: already exists (overwrite replaces it)")
    hdr, values, _keeps_stored = prepare(img, affine, header, version, pair)
    # The proxy where its stored values are kept (keeps_stored), else the array.
    data = (values.get_unscaled().astype(hdr.get_data_dtype(), copy=False)
            if isinstance(values, ArrayProxy) else values)
    hdr.set_data_offset(0)
    if not data.flags.f_contiguous:
        data = np.asfortranarray(data)
    extensions = [(e.get_code(), e.content) for e in hdr.extensions]
    args = (hdr.binaryblock, extensions, as_bytes_view(data), 1 if level is None else level,
            gzip_layout, threads)
    if not remote:
        _core.write(path, *args)
        return
    # At most the header, extensions and data, and what gzip adds to incompressible data.
    bound = data.nbytes + sum(len(c) + 16 for _, c in extensions) + (1 << 20)
    sink = _upload.StreamingUpload(path, storage_options, overwrite=overwrite,
                                   max_size=bound + bound // 1024)
    try:
        _core.write(path, *args, sink=sink)
    except BaseException:
        if sink.error is not None:  # the upload's own failure, as it was raised
            raise sink.error from None
        raise


def _pair_paths(path: str) -> list[str]:
    """The files writing ``path`` makes: it, and a pair's .img beside its .hdr."""
    if not _core.is_pair_path(path):
        return [path]
    stem, gz = (path[:-3], ".gz") if path.lower().endswith(".gz") else (path, "")
    img = stem[:-4] + (".IMG" if stem.endswith(".HDR") else ".img") + gz
    return [path, img]


def _data_for_writing(data: Array, out_dtype: np.dtype[Any]) -> tuple[Array, float, float]:
    """(array in out_dtype and byte order, slope, inter) following nibabel's array writers."""
    if out_dtype.fields is not None:
        if data.dtype.fields is None or data.dtype.itemsize != out_dtype.itemsize:
            raise ValueError(f"Cannot write {data.dtype} data as {out_dtype}")
        return np.asfortranarray(data).view(out_dtype), 1.0, 0.0
    if (np.can_cast(data.dtype, out_dtype, "safe") or out_dtype.kind in "fc" or data.size == 0
            or (data.dtype.kind in "iu" and data.size and data.min() >= np.iinfo(out_dtype).min
                and data.max() <= np.iinfo(out_dtype).max)):
        return np.asarray(data, dtype=out_dtype, order="F"), 1.0, 0.0
    # Scale factors for a lossy cast: nibabel's arraywriters decide them, so results match.
    try:
        from nibabel.arraywriters import get_slope_inter, make_array_writer
    except ImportError as exc:  # pragma: no cover - nibabel is a test dependency
        raise ValueError(f"writing {data.dtype} data as {out_dtype} needs scale factors; "
                         "install nibabel or pass data in the output dtype") from exc
    import io

    writer = make_array_writer(data, out_dtype, True, True, order="F")
    slope, inter = get_slope_inter(writer)
    buf = io.BytesIO()
    writer.to_fileobj(buf, order="F")
    arr = np.frombuffer(buf.getbuffer(), dtype=out_dtype).reshape(data.shape, order="F")
    return arr, (1.0 if slope is None else slope), (0.0 if inter is None else inter)
