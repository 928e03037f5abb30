"""What the C++ core calls back into Python for (the CLI's commands under ``python -m voxpipe``,
and the core's open of a path that is a URL or a store): objects named by URLs read through
obstore, NIfTI-Zarr stores read and written through zarr. Installed when the package is
imported; the core knows these handlers only as callables."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

import numpy as np

from .._foundation.native import core as _core
from .._formats.dicom.series import load_dicom
from .._formats.zarr import read as _zarr
from .._images.image import load, save
from .._sources import listing, remote, upload
from .._foundation.errors import InvalidArgumentError
from .._foundation.types import NiftiImage


def _open_for_core(url: str) -> Any:
    """The core's URL handler: the object opened with the environment's configuration; a Zarr
    store (local or not) as the .nii of its NIfTI-Zarr image."""
    if _zarr.is_nifti_zarr(url):
        return _zarr.open_core_input(url)
    return remote.RemoteFile(url).input


def _put_file_for_core(path: str, url: str) -> None:
    upload.upload_file(path, url)


def _upload_for_core(path: str, url: str, overwrite: bool) -> bool:
    """The CLI's upload of an output it wrote locally: False when the object exists (created
    by another writer since the command checked) and ``overwrite`` is false."""
    try:
        upload.upload_file(path, url, overwrite=overwrite)
    except upload.ObjectExistsError:
        return False
    return True


def _open_upload_for_core(url: str, overwrite: bool, max_size: int) -> upload.StreamingUpload:
    return upload.StreamingUpload(url, overwrite=overwrite, max_size=max_size or None)


def _clean_for_core(url: str, older_than: float, dry_run: bool) -> list[str]:
    return upload.clean(url, older_than=older_than, dry_run=dry_run)


def _fetch_all_for_core(url: str) -> list[tuple[str, Any]]:
    """The objects a URL names (an object, or those under a prefix), fetched whole."""
    return [(o.url, o.data) for o in listing.fetch_all([url], None)]


def _sizes(value: str, option: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in value.split(","))
    except ValueError:
        raise InvalidArgumentError(f"--{option} expects sizes X,Y,Z[,T[,C]], but received "
                                   f"{value!r}", field=option) from None


def _write_zarr_for_core(source: str, output: str, options: Sequence[tuple[str, str]]) -> None:
    """The core's handler of ``voxpipe convert IN OUT.nii.zarr``: IN (a NIfTI file or object, a
    store, or a DICOM series folder or prefix) written as the store OUT."""
    opts = dict(options)
    kwargs: dict[str, Any] = {}
    for key in ("chunks", "shards"):
        if key in opts:
            kwargs[key] = _sizes(opts[key], key)
    for key in ("levels", "level", "zarr_format", "threads"):
        if key in opts:
            try:
                kwargs[key] = int(opts[key])
            except ValueError:
                raise InvalidArgumentError(f"--{key.replace('_', '-')} expects an integer, but "
                                           f"received {opts[key]!r}", field=key) from None
    if "codec" in opts:
        kwargs["codec"] = opts["codec"]
    if "overwrite" in opts:
        kwargs["overwrite"] = opts["overwrite"] == "1"
    threads = kwargs.get("threads", 0)
    dicom = (not _zarr.is_nifti_zarr(source)
             and (os.path.isdir(source) or source.endswith("/")
                  or source.lower().endswith((".dcm", ".ima"))))
    img: NiftiImage
    if dicom:
        img = load_dicom(source, threads=threads or None)
    else:
        img = load(source, threads=threads)
    if "dtype" in opts:
        dtype = np.dtype(opts["dtype"])
        if img.get_data_dtype() != dtype:
            data = img.dataobj.read(dtype=dtype) if hasattr(img.dataobj, "read") else \
                np.asanyarray(img.dataobj, dtype=dtype)
            hdr = img.header.copy()
            hdr.set_data_dtype(dtype)
            hdr.set_slope_inter(1.0, 0.0)
            img = type(img)(data, img.affine, hdr)
    with _signals_end_the_write():
        save(img, output, **kwargs)


class _Signalled(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _signals_end_the_write() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP during ``voxpipe convert``'s write: the command's own handlers
    remove the files the core writes, but not the store's temporary folder, written here. While
    the store is written, they raise instead (between Python statements), the write removes its
    folder as for any error, and the process then ends by the same signal, as the command does.
    A signal the caller ignores stays ignored."""
    import signal

    def handler(signum: int, frame: FrameType | None) -> None:
        raise _Signalled(signum)

    previous: dict[signal.Signals,
                   Callable[[int, FrameType | None], Any] | int | signal.Handlers | None] = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    except _Signalled as exc:
        signal.signal(exc.signum, signal.SIG_DFL)
        os.kill(os.getpid(), exc.signum)
        raise  # not reached: the default action ends the process
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


def install() -> None:
    """Make calls that take paths (the core's open, build_index, the CLI's commands under
    ``python -m voxpipe``) read URLs, and read and write Zarr stores, through these handlers."""
    _core.set_url_handlers(_open_for_core, remote.index_cache_path, _put_file_for_core,
                           _fetch_all_for_core, _write_zarr_for_core, _zarr.describe_layout,
                           upload.exists, _upload_for_core, _clean_for_core,
                           _open_upload_for_core)
