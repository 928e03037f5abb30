"""pyproject.toml against the package: each extra lists every third-party package its framework
module imports, each with a lower bound (dask and distributed in lockstep), `all` is every extra
but the PyTorch ones, and the version is the one CMakeLists.txt declares. (scripts/test_extras.sh
installs each extra from the wheelhouse on the oldest and newest Python.)"""

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


# A requirement: name, its extras, its version bounds, and an optional environment marker.
REQUIREMENT = re.compile(r"(?P<name>[A-Za-z0-9_.-]+)(?:\[(?P<extras>[a-z0-9_,-]+)\])?"
                         r"(?P<bounds>[^;]*)(?:;\s*(?P<marker>.*))?")
# The packages that come with an extra of another one: dask[distributed] is distributed at
# dask's own version.
VIA_EXTRA = {("dask", "distributed"): "distributed"}
TORCH_EXTRAS = {"torch", "monai", "torchio"}


def _names(requirements):
    # "dask[array,distributed]>=2025.1" -> {"dask", "distributed"}; distribution names equal
    # import names for every package here.
    names = set()
    for r in requirements:
        m = REQUIREMENT.fullmatch(r)
        names.add(m["name"].lower())
        for extra in (m["extras"] or "").split(","):
            if (m["name"].lower(), extra) in VIA_EXTRA:
                names.add(VIA_EXTRA[m["name"].lower(), extra])
    return names


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


def test_all_is_every_extra_but_the_pytorch_ones():
    # A plain `pip install torch` takes a CUDA build of several GB: README.md says how to get the
    # CPU build, then the torch extras.
    (all_req,) = EXTRAS["all"]
    listed = set(re.fullmatch(r"voxpipe\[(.*)\]", all_req).group(1).split(","))
    assert listed == set(EXTRAS) - {"all"} - TORCH_EXTRAS
    assert "torch" not in _names(r for e in listed for r in EXTRAS[e])


@pytest.mark.parametrize("extra", sorted(set(EXTRAS) - {"all"}))
def test_every_requirement_of_an_extra_has_a_lower_bound(extra):
    # An unbounded requirement lets pip pick any release a mirror holds (distributed 2021 beside
    # dask 2026, whose dask.distributed then fails to import).
    for r in EXTRAS[extra]:
        m = REQUIREMENT.fullmatch(r)
        assert m and re.fullmatch(r"\s*>=\s*[0-9][0-9.]*\s*", m["bounds"]), \
            f"voxpipe[{extra}]: {r!r} has no lower bound (>=X.Y)"


def test_distributed_comes_with_dask_at_its_version():
    # dask[distributed] requires distributed==dask's version; a separate "distributed" would not.
    (req,) = EXTRAS["dask"]
    m = REQUIREMENT.fullmatch(req)
    assert m["name"] == "dask" and {"array", "distributed"} <= set(m["extras"].split(","))


@pytest.mark.parametrize("extra", sorted(set(EXTRAS) - {"all"}))
def test_markers_are_python_floors_the_package_reads(extra):
    # voxpipe._foundation.optional.python_floor reads `python_version >= "X.Y"` to say which Python an
    # extra needs; any other marker would make it wrong. One floor per extra, on every package
    # of it, so that the extra is all or nothing.
    markers = {REQUIREMENT.fullmatch(r)["marker"] for r in EXTRAS[extra]}
    assert len(markers) == 1, f"voxpipe[{extra}]: one marker for all its packages, not {markers}"
    (marker,) = markers
    assert marker is None or re.fullmatch(r'python_version >= "3\.1[0-9]"', marker), marker
    supported = [c.rsplit(" ", 1)[1] for c in PROJECT["classifiers"]
                 if re.fullmatch(r"Programming Language :: Python :: 3\.[0-9]+", c)]
    assert marker is None or marker.split('"')[1] in supported


def test_version_is_cmakes():
    import voxpipe
    cmake = re.search(r"project\(voxpipe\s+VERSION\s+([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    assert voxpipe.__version__ == cmake.group(1)
