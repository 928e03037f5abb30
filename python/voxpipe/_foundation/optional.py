"""The one import of an optional dependency: voxpipe's framework modules (voxpipe.torch,
voxpipe.monai, voxpipe.torchio, and the Dask, NIfTI-Zarr and object-store code) each need a
package that ``pip install voxpipe`` does not bring, and say which extra brings it when it is
missing, or which Python it needs where that extra installs nothing (pyproject.toml gives an
extra whose packages need a newer Python than voxpipe's a ``python_version`` marker)."""

from __future__ import annotations

import importlib
import re
import sys
from types import ModuleType


def require(module: str, extra: str, feature: str, project: str) -> ModuleType:
    """Imports and returns ``module``. When the module itself (or the package it is in) is not
    installed, raises ModuleNotFoundError (an ImportError, ``name`` = the missing module) whose
    message names the extra: "voxpipe.torch needs PyTorch: pip install 'voxpipe[torch]'", or,
    on a Python older than the extra's packages need, that Python: "NIfTI-Zarr needs zarr, which
    needs Python 3.11 or newer (this is Python 3.9): 'voxpipe[zarr]' installs nothing here".
    Any other import error (the package is there but something it imports is missing or
    broken) propagates unchanged, so a broken install is not reported as an absent one."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):
            raise
        floor = python_floor(extra)
        if floor is not None and sys.version_info[:2] < floor:
            raise ModuleNotFoundError(
                f"{feature} needs {project}, which needs Python {floor[0]}.{floor[1]} or newer "
                f"(this is Python {sys.version_info[0]}.{sys.version_info[1]}): "
                f"'voxpipe[{extra}]' installs nothing here", name=module) from exc
        raise ModuleNotFoundError(f"{feature} needs {project}: pip install 'voxpipe[{extra}]'",
                                  name=module) from exc


def python_floor(extra: str) -> tuple[int, int] | None:
    """The oldest Python on which ``voxpipe[extra]`` installs its packages, from the
    ``python_version >= "X.Y"`` markers of the installed voxpipe's requirements; None when it
    has none (or voxpipe's metadata cannot be read: a source tree on sys.path)."""
    from importlib.metadata import PackageNotFoundError, requires
    try:
        reqs = requires("voxpipe") or []
    except PackageNotFoundError:
        return None
    floors = [(int(m.group(1)), int(m.group(2)))
              for r in reqs if re.search(rf"""extra\s*==\s*["']{re.escape(extra)}["']""", r)
              for m in re.finditer(r"""python_version\s*>=\s*["'](\d+)\.(\d+)["']""", r)]
    return max(floors) if floors else None
