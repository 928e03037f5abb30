"""The one import of an optional dependency: voxpipe's framework modules (voxpipe.torch,
voxpipe.monai, voxpipe.torchio) each need a package that ``pip install voxpipe`` does not bring,
and say which extra brings it when it is missing."""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, extra: str, feature: str, project: str) -> ModuleType:
    """Imports and returns ``module``. When the module itself is not installed, raises
    ModuleNotFoundError (an ImportError, ``name`` = the missing module) whose message names the
    extra: "voxpipe.torch needs PyTorch: pip install 'voxpipe[torch]'". Any other import error
    (the package is there but something it imports is missing or broken) propagates unchanged,
    so a broken install is not reported as an absent one."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise ModuleNotFoundError(f"{feature} needs {project}: pip install 'voxpipe[{extra}]'",
                                  name=module) from exc
