"""The two forms of the `voxpipe` command, for tests that must hold for both:

- ``program``: the executable of a C++ build (cli/main.cpp), which hands URLs and stores to
  Python: $VOXPIPE_CLI or .venv/bin/voxpipe when either is that executable, else
  build/manylinux/voxpipe (scripts/setup.sh's CMake tree; build/python/voxpipe of an older
  setup). Run with $VOXPIPE_PYTHON naming this
  Python, as the python3 next to an installed program would be found.
- ``pip``: the command the wheel installs (cli/python_launcher.py), run by this Python as pip's
  bin/voxpipe runs it, without $VOXPIPE_PYTHON.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = REPO / "cli" / "python_launcher.py"


def _is_executable_file(path: Path) -> bool:
    try:
        return path.read_bytes()[:4] == b"\x7fELF"
    except OSError:
        return False


def cxx_program() -> Path | None:
    for candidate in (os.environ.get("VOXPIPE_CLI"), REPO / ".venv" / "bin" / "voxpipe",
                      REPO / "build" / "manylinux" / "voxpipe", REPO / "build" / "python" / "voxpipe"):
        if candidate and _is_executable_file(Path(candidate)):
            return Path(candidate)
    return None


def command(kind: str, env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv prefix, environment) that run `voxpipe` of `kind` ('program' or 'pip'); the
    environment is `env` (default os.environ) with $VOXPIPE_PYTHON as that kind needs it."""
    env = dict(os.environ if env is None else env)
    env.pop("VOXPIPE_PYTHON", None)
    if kind == "pip":
        return [sys.executable, str(LAUNCHER)], env
    program = cxx_program()
    if program is None:
        raise FileNotFoundError("no voxpipe executable built (.venv/bin, build/manylinux)")
    env["VOXPIPE_PYTHON"] = sys.executable
    return [str(program)], env


KINDS = ["program", "pip"]
