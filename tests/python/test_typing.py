"""The public API is typed: mypy --strict accepts a user's script (typing_user_script.py) and
reveals no Any from voxpipe in the type of any voxpipe call's result."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

HERE = Path(__file__).parent
SCRIPT = HERE / "typing_user_script.py"

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
