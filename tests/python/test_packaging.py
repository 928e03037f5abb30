"""pyproject.toml against the package: each extra lists every third-party package its framework
module imports, `all` is every extra, and the version is the one CMakeLists.txt declares."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "voxpipe"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
EXTRAS = PROJECT["optional-dependencies"]


def _names(requirements):
    # "dask[array]>=2024" -> "dask"; distribution names equal import names for every package here.
    return {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in requirements}


def _top_level_imports(path: Path) -> set[str]:
    mods = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            mods.update(a.name.partition(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mods.add(node.module.partition(".")[0])
    return mods - set(sys.stdlib_module_names) - {"__future__", "voxpipe"}


def _required_extras(path: Path) -> dict[str, str]:
    """The require(module, extra, ...) calls of a module: {import name: extra}."""
    calls = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "require"):
            module, extra = (ast.literal_eval(a) for a in node.args[:2])
            calls[module] = extra
    return calls


FRAMEWORK_MODULES = sorted(p for p in PACKAGE.glob("*.py") if _required_extras(p))


def test_framework_modules_are_found():
    assert {p.stem for p in FRAMEWORK_MODULES} >= {"torch", "monai", "torchio"}


@pytest.mark.parametrize("path", FRAMEWORK_MODULES, ids=lambda p: p.name)
def test_extra_lists_every_package_the_module_imports(path):
    base = _names(PROJECT["dependencies"])
    (extra,) = set(_required_extras(path).values())
    assert extra in EXTRAS, f"{path.name} names the extra {extra!r}, which pyproject.toml lacks"
    missing = _top_level_imports(path) - base - _names(EXTRAS[extra])
    assert not missing, f"voxpipe[{extra}] does not bring {sorted(missing)}, which {path.name} imports"


def test_core_modules_import_only_the_base_dependencies():
    base = _names(PROJECT["dependencies"])
    for path in PACKAGE.glob("*.py"):
        if path in FRAMEWORK_MODULES:
            continue
        # voxpipe.demo and the typing helpers import nothing beyond the base either.
        extra = _top_level_imports(path) - base
        assert not extra, f"{path.name} imports {sorted(extra)}, not in project.dependencies"


def test_all_is_every_extra():
    (all_req,) = EXTRAS["all"]
    listed = set(re.fullmatch(r"voxpipe\[(.*)\]", all_req).group(1).split(","))
    assert listed == set(EXTRAS) - {"all"}


def test_version_is_cmakes():
    import voxpipe
    cmake = re.search(r"project\(voxpipe\s+VERSION\s+([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    assert voxpipe.__version__ == cmake.group(1)
