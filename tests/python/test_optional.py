"""voxpipe._foundation.optional.require, the one import of an optional dependency: a framework module whose
package is missing names the extra that brings it; a package that is installed but broken is
reported as itself, not as a missing extra. (voxpipe.monai and voxpipe.torchio are checked the
same way in test_monai.py and test_torchio.py.)"""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from voxpipe._foundation.optional import require


def test_voxpipe_torch_without_torch_names_the_extra(monkeypatch):
    monkeypatch.delitem(sys.modules, "voxpipe.torch", raising=False)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ModuleNotFoundError
    with pytest.raises(ModuleNotFoundError) as info:
        importlib.import_module("voxpipe.torch")
    assert str(info.value) == "voxpipe.torch needs PyTorch: pip install 'voxpipe[torch]'"
    assert info.value.name == "torch"


def test_missing_package_names_feature_project_and_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vp_absent_framework", None)
    with pytest.raises(ImportError, match=r"^voxpipe\.fake needs Fake: pip install 'voxpipe\[fake\]'$"):
        require("vp_absent_framework", "fake", "voxpipe.fake", "Fake")


def test_broken_dependency_inside_the_package_is_not_reported_as_missing(tmp_path, monkeypatch):
    # The optional package is installed, but a module it imports is not: the original error,
    # naming that module, is what the user needs to see.
    (tmp_path / "vp_fake_framework").mkdir()
    (tmp_path / "vp_fake_framework" / "__init__.py").write_text("import vp_absent_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as info:
        require("vp_fake_framework", "fake", "voxpipe.fake", "Fake")
    assert info.value.name == "vp_absent_dependency"
    assert "pip install" not in str(info.value)


def test_present_package_is_returned():
    assert require("json", "x", "voxpipe.x", "X") is json


def test_missing_parent_package_names_the_extra(monkeypatch):
    # require("obstore.store", ...) without obstore: Python names the package, not the module.
    monkeypatch.setitem(sys.modules, "vp_absent_framework", None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'voxpipe\[fake\]'$") as info:
        require("vp_absent_framework.store", "fake", "voxpipe.fake", "Fake")
    assert info.value.name == "vp_absent_framework.store"


def test_extra_for_a_newer_python_says_which_python(monkeypatch):
    # pyproject.toml's markers, as the installed metadata carries them: voxpipe[zarr] installs
    # nothing before Python 3.11, and the error says so instead of suggesting the extra again.
    import importlib.metadata
    from voxpipe._foundation import optional as _optional

    reqs = ['numpy>=2.0', 'zarr>=3.1; python_version >= "3.11" and extra == "zarr"',
            'numcodecs>=0.16; python_version >= "3.11" and extra == "zarr"',
            'dask[array,distributed]>=2025.1; python_version >= "3.10" and extra == "dask"',
            'obstore>=0.7; extra == "s3"']
    monkeypatch.setattr(importlib.metadata, "requires", lambda name: reqs)
    assert _optional.python_floor("zarr") == (3, 11)
    assert _optional.python_floor("dask") == (3, 10)
    assert _optional.python_floor("s3") is None
    monkeypatch.setitem(sys.modules, "vp_absent_framework", None)
    monkeypatch.setattr(sys, "version_info", (3, 9, 18, "final", 0))
    with pytest.raises(ModuleNotFoundError) as info:
        require("vp_absent_framework", "zarr", "NIfTI-Zarr", "zarr")
    assert str(info.value) == ("NIfTI-Zarr needs zarr, which needs Python 3.11 or newer (this is "
                               "Python 3.9): 'voxpipe[zarr]' installs nothing here")
    with pytest.raises(ModuleNotFoundError, match=r"^Obstore needs obstore: pip install 'voxpipe\[s3\]'$"):
        require("vp_absent_framework", "s3", "Obstore", "obstore")
    monkeypatch.setattr(sys, "version_info", (3, 11, 7, "final", 0))
    with pytest.raises(ModuleNotFoundError, match=r"^NIfTI-Zarr needs zarr: pip install 'voxpipe\[zarr\]'$"):
        require("vp_absent_framework", "zarr", "NIfTI-Zarr", "zarr")
