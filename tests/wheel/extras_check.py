"""What one extra of an installed voxpipe wheel brings, checked in the fresh virtual environment
scripts/test_extras.sh installed it into (with `pip install "voxpipe[EXTRA]"`): its packages
import, at the versions pyproject.toml allows, and voxpipe's feature over them gives nibabel's
values; where the extra installs nothing on this Python (its python_version marker), the
install succeeded without its packages and the feature says which Python it needs.

Usage: python extras_check.py EXTRA   (dask, zarr or s3; run from a folder outside the source
tree)
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from importlib.metadata import requires, version
from pathlib import Path

import nibabel as nib
import numpy as np

import voxpipe as vp
from voxpipe._foundation.optional import python_floor


def check(cond: bool, what: str) -> None:
    if not cond:
        raise SystemExit(f"FAIL: {what}")
    print(f"ok: {what}")


def release(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("+")[0].split(".")[:3] if p.isdigit())


def floors(extra: str) -> dict[str, tuple[int, ...]]:
    """{distribution: the lower bound voxpipe[extra] gives it}, from the wheel's metadata."""
    out = {}
    for r in requires("voxpipe") or []:
        req, _, marker = r.partition(";")
        if f'extra == "{extra}"' in marker and ">=" in req:
            name, _, bound = req.partition(">=")
            out[name.split("[")[0].strip().lower()] = release(bound.strip())
    return out


def image(work: Path, name: str) -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(7)
    data = rng.integers(-500, 500, size=(9, 8, 7, 4), dtype=np.int16)
    path = work / name
    nib.save(nib.Nifti1Image(data, np.diag([2.0, 2.0, 2.5, 1.0])), path)
    return path, np.asanyarray(nib.load(path).dataobj)


def versions_within_floors(extra: str) -> None:
    bounds = floors(extra)
    check(bool(bounds), f"the wheel's metadata gives voxpipe[{extra}] lower bounds {bounds}")
    for name, floor in bounds.items():
        got = version(name)
        check(release(got) >= floor, f"{name} {got} >= {'.'.join(map(str, floor))}, "
                                     f"voxpipe[{extra}]'s lower bound")


def absent(extra: str, modules: list[str], use) -> None:
    """The extra installs nothing on this Python: none of its packages, and the feature's error
    names the Python it needs."""
    floor = python_floor(extra)
    check(floor is not None and sys.version_info[:2] < floor,
          f"voxpipe[{extra}] needs Python {floor[0]}.{floor[1]} (this is {sys.version.split()[0]})")
    for m in modules:
        check(importlib.util.find_spec(m) is None, f"voxpipe[{extra}] installed no {m} here")
    try:
        use()
    except ModuleNotFoundError as exc:
        want = f"needs Python {floor[0]}.{floor[1]} or newer"
        check(want in str(exc) and f"'voxpipe[{extra}]' installs nothing here" in str(exc),
              f"the feature says so: {exc}")
    else:
        raise SystemExit(f"FAIL: voxpipe[{extra}]'s feature worked without its packages")


def dask_extra(work: Path) -> None:
    path, ref = image(work, "x.nii")  # uncompressed: each chunk read on its own
    if sys.version_info < (3, 10):
        absent("dask", ["dask", "distributed"], lambda: vp.to_dask(path))
        return
    import dask
    import distributed
    from dask.distributed import Client  # what a mismatched distributed breaks
    check(dask.__version__ == distributed.__version__,
          f"distributed {distributed.__version__} is dask's version ({dask.__version__})")
    versions_within_floors("dask")
    arr = vp.to_dask(path, chunks=(9, 8, 7, 1))
    check(arr.shape == ref.shape and arr.numblocks == (1, 1, 1, 4),
          f"vp.to_dask: shape {arr.shape}, blocks {arr.numblocks}")
    with Client(processes=False, n_workers=1, threads_per_worker=2,
                dashboard_address=None) as client:
        got = client.compute(arr).result()
    check(got.dtype == ref.dtype and np.array_equal(got, ref),
          f"vp.to_dask computed on a distributed Client equals nibabel's values ({got.dtype})")


def zarr_extra(work: Path) -> None:
    path, ref = image(work, "x.nii.gz")
    store = work / "x.nii.zarr"
    if sys.version_info < (3, 11):
        absent("zarr", ["zarr", "numcodecs", "google_crc32c"],
               lambda: vp.save(nib.load(path), store))
        return
    import google_crc32c  # noqa: F401
    import numcodecs  # noqa: F401
    import zarr  # noqa: F401
    versions_within_floors("zarr")
    vp.save(vp.load(path), store)
    got = vp.load(store)
    check(got.shape == ref.shape and np.array_equal(np.asanyarray(got.dataobj), ref),
          "vp.save to .nii.zarr and vp.load back give nibabel's values")


def s3_extra(work: Path) -> None:
    import fsspec  # noqa: F401
    import obstore
    import obstore.store  # noqa: F401
    versions_within_floors("s3")
    # A store for a URL, built by voxpipe's client code (no request is made).
    from voxpipe._sources import remote as _remote
    store, name = _remote.store_for("s3://voxpipe-bucket/sub-01/x.nii.gz",
                                    {"region": "us-east-1", "skip_signature": True})
    check(name == "x.nii.gz" and type(store).__name__ == "S3Store",
          f"an obstore S3Store for an s3:// URL ({type(store).__name__}, {name!r}; obstore "
          f"{obstore.__version__})")


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1] not in ("dask", "zarr", "s3"):
        raise SystemExit(__doc__.split("\n\n")[1])
    with tempfile.TemporaryDirectory() as d:
        {"dask": dask_extra, "zarr": zarr_extra, "s3": s3_extra}[sys.argv[1]](Path(d))
    print(f"voxpipe[{sys.argv[1]}] on Python {sys.version.split()[0]}: passed")


if __name__ == "__main__":
    main()
