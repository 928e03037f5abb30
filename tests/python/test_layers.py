"""The package's layering contracts (pyproject.toml, [tool.importlinter]; docs/architecture.md)
hold, and break when a module imports upward, imports the package's face, or makes a cycle: run
on a copy of the package's Python files with one import added each time."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter")

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "python" / "voxpipe"
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([str(LINT), "--no-logo", "--no-cache", str(REPO / "pyproject.toml")],
                          capture_output=True, text=True, env=env, cwd=root, timeout=300)


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory):
    """The package's Python sources (no extension: the contracts see Python files only)."""
    root = tmp_path_factory.mktemp("layers")
    shutil.copytree(PACKAGE, root / "voxpipe", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    return root


def _with_line(package_copy, module: str, line: str):
    path = package_copy / "voxpipe" / module
    original = path.read_text()
    path.write_text(original + "\n" + line + "\n")
    return path, original


@pytest.mark.skipif(not LINT.exists(), reason="lint-imports is not installed beside this Python")
def test_the_package_keeps_its_contracts_and_breaks_them_when_changed(package_copy):
    ok = _lint(package_copy)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "6 kept, 0 broken" in ok.stdout
    cases = [
        # formats reaching up into many-and-lazy
        ("_formats/nifti/slicing.py", "from ..._many import loading as _loading",
         "voxpipe._formats is not allowed to import voxpipe._many"),
        # a source that knows a format
        ("_sources/listing.py", "import nibabel", "voxpipe._sources is not allowed to import nibabel"),
        # the face imported from inside
        ("_many/loading.py", "from .. import load as _face_load",
         "Illegal imports of protected package voxpipe"),
        # images naming a format
        ("_images/image.py", "from .._formats.zarr import read as _zarr_read",
         "voxpipe._images is not allowed to import voxpipe._formats.zarr"),
        # a cycle inside one layer
        ("_formats/nifti/slicing.py", "from . import proxy as _proxy", "No cycles are allowed"),
        # formats importing Dask
        ("_formats/zarr/local.py", "import dask", "voxpipe._formats is not allowed to import dask"),
    ]
    for module, line, expected in cases:
        path, original = _with_line(package_copy, module, line)
        try:
            broken = _lint(package_copy)
        finally:
            path.write_text(original)
        assert broken.returncode != 0, (module, line)
        assert expected in broken.stdout, (module, line, broken.stdout[-3000:])
