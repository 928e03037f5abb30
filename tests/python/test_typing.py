"""The public API is typed: mypy --strict accepts a user's script (typing_user_script.py) and
reveals no Any from voxpipe in the type of any voxpipe call's result; and the package itself,
its sources with the extension's stub (python/voxpipe/_core.pyi), passes mypy --strict."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

HERE = Path(__file__).parent
SCRIPT = HERE / "typing_user_script.py"
ROOT = HERE.parent.parent
SOURCES = ROOT / "python"  # holds voxpipe/, with _core.pyi standing in for the built extension

# NumPy's own Any in its array type, not voxpipe's: NDArray's shape parameter, and the dtype of
# an array whose dtype follows a run-time argument (as NumPy types np.asarray(x, dtype)).
_NUMPY_ANY = re.compile(r"tuple\[Any, \.\.\.\]|numpy\.dtype\[Any\]")


def _run_mypy(cache_dir: Path) -> subprocess.CompletedProcess[str]:
    # The tests' own environment (PYTHONPATH), so that the package under test is checked.
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-color-output", "--no-error-summary",
         "--cache-dir", str(cache_dir), SCRIPT.name],
        cwd=HERE, env=dict(os.environ), capture_output=True, text=True, timeout=600)


def test_user_script_has_no_any_from_voxpipe(pytestconfig: pytest.Config,
                                             tmp_path: Path) -> None:
    # A cache kept between runs (outside the tree) makes repeated runs take about a second
    # instead of about ten; mypy rechecks whatever changed. Without pytest's cache, a fresh one.
    cache = getattr(pytestconfig, "cache", None)
    result = _run_mypy(cache.mkdir("mypy-typing") if cache is not None else tmp_path)
    lines = (result.stdout + result.stderr).splitlines()
    errors = [line for line in lines if ": error:" in line]
    assert not errors, "\n".join(errors)
    revealed = [line for line in lines if "Revealed type is" in line]
    assert len(revealed) == SCRIPT.read_text().count("reveal_type("), "\n".join(lines)
    with_any = [line for line in revealed if "Any" in _NUMPY_ANY.sub("", line)]
    assert not with_any, "revealed types with Any:\n" + "\n".join(with_any)
    assert result.returncode == 0, "\n".join(lines)


# What the package imports and mypy follows for the types it checks against: the optional
# frameworks included, as each of voxpipe's integration modules names its framework's classes.
_CHECKED_AGAINST = ("numpy", "nibabel", "dask", "distributed", "zarr", "torch", "monai",
                    "torchio")


def test_package_passes_mypy_strict(pytestconfig: pytest.Config, tmp_path: Path) -> None:
    missing = [m for m in _CHECKED_AGAINST if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"mypy checks voxpipe against {', '.join(missing)}, not installed here")
    cache = getattr(pytestconfig, "cache", None)
    cache_dir = cache.mkdir("mypy-package") if cache is not None else tmp_path
    # The sources of this tree, not a copy installed in site-packages: MYPYPATH comes first in
    # mypy's search. The project's [tool.mypy] named outright, so that no other configuration
    # (a mypy.ini or setup.cfg of the working folder) takes its place.
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-color-output",
         "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache_dir),
         "-p", "voxpipe"],
        cwd=SOURCES, env={**os.environ, "MYPYPATH": str(SOURCES)}, capture_output=True,
        text=True, timeout=600)
    output = (result.stdout + result.stderr).strip()
    errors = [line for line in output.splitlines() if ": error:" in line]
    assert not errors, f"mypy --strict -p voxpipe found {len(errors)} error(s):\n{output}"
    assert result.returncode == 0, output
