"""python/voxpipe/_core.pyi, the types of the extension module voxpipe._core, stays true to the
built module: the same names (functions, classes, class members, private ones too), every
function and method with its binding's parameters (names, order, positional-only, defaults and
whether None is accepted), properties writable exactly where bound, the values real objects
return of the types the stub gives, and the stub itself clean under mypy --strict.

The module's signatures come from nanobind (each function's ``__nb_signature__``: the signature
text, whose defaults are placeholders ``\\N`` for the values in its third element)."""

from __future__ import annotations

import ast
import gzip
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from voxpipe import _core

STUB = Path(__file__).resolve().parents[2] / "python" / "voxpipe" / "_core.pyi"

# Bound only in a build with the command line (CMakeLists.txt: VOXPIPE_PYTHON_CLI), as every
# build of the package is; a module without them still matches the stub.
OPTIONAL = {"cli_main", "cli_install_signal_handlers"}


# ---- the stub, parsed --------------------------------------------------------------------------

class Stub:
    """The stub's module-level functions, classes (name -> {member -> [defs]}), and the names
    that are types for the stub only (aliases, TypeVars, TypedDicts, Protocols)."""

    def __init__(self, source: str) -> None:
        tree = ast.parse(source)
        self.functions: dict[str, list[ast.FunctionDef]] = {}
        self.classes: dict[str, dict[str, list[ast.FunctionDef]]] = {}
        self.type_only: dict[str, ast.AST] = {}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                self.functions.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.ClassDef):
                bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
                if bases & {"TypedDict", "Protocol"}:
                    self.type_only[node.name] = node
                    continue
                members: dict[str, list[ast.FunctionDef]] = {}
                for item in node.body:
                    if isinstance(item, ast.FunctionDef):
                        members.setdefault(item.name, []).append(item)
                self.classes[node.name] = members
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                    node.targets[0], ast.Name):
                self.type_only[node.targets[0].id] = node.value
            elif isinstance(node, (ast.Import, ast.ImportFrom, ast.Expr)):
                pass
            else:
                raise AssertionError(f"_core.pyi:{node.lineno}: unexpected {ast.dump(node)[:80]}")

    def names(self) -> set[str]:
        return set(self.functions) | set(self.classes)


@pytest.fixture(scope="module")
def stub() -> Stub:
    return Stub(STUB.read_text())


def _is_bound(value: Any) -> bool:
    return isinstance(value, property) or hasattr(value, "__nb_signature__")


def _module_names() -> set[str]:
    return {n for n in dir(_core) if not (n.startswith("__") and n.endswith("__"))}


def _class_members(cls: type) -> dict[str, Any]:
    # What the binding defined: properties and nanobind functions (not the default __init__
    # of a class without a constructor, nor __new__, __doc__ or __module__).
    return {k: v for k, v in vars(cls).items() if _is_bound(v)}


def _decorators(fn: ast.FunctionDef) -> list[str]:
    return [ast.unparse(d) for d in fn.decorator_list]


# ---- nanobind's signatures, parsed -------------------------------------------------------------

def _split_top(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside brackets and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


class Param:
    def __init__(self, name: str, kind: str, annotation: str | None, default: Any,
                 has_default: bool) -> None:
        self.name, self.kind, self.annotation = name, kind, annotation
        self.default, self.has_default = default, has_default

    def __repr__(self) -> str:
        d = f" = {self.default!r}" if self.has_default else ""
        return f"{self.kind} {self.name}{d}"


def _nb_overloads(fn: Any) -> list[tuple[list[Param], str]]:
    """(parameters, return annotation) of each overload nanobind bound as `fn`."""
    out = []
    for text, _doc, defaults in fn.__nb_signature__:
        open_at = text.index("(")
        depth = 0
        for close_at in range(open_at, len(text)):
            depth += {"(": 1, ")": -1}.get(text[close_at], 0)
            if depth == 0:
                break
        returns = text[close_at + 1:].strip()
        assert returns.startswith("->"), text
        raw = _split_top(text[open_at + 1:close_at], ",")
        kind = "positional_or_keyword"
        if "/" in raw:
            kind = "positional_only"
        params = []
        for item in raw:
            if item == "/":
                kind = "positional_or_keyword"
                continue
            if item == "*":
                kind = "keyword_only"
                continue
            head, _, default = item.partition(" = ")
            name, _, annotation = head.partition(":")
            value: Any = None
            if default:
                assert default.startswith("\\"), f"{text}: default {default}"
                value = defaults[int(default[1:])]
            params.append(Param(name.strip(), kind, annotation.strip() or None, value,
                                bool(default)))
        out.append((params, returns[2:].strip()))
    return out


def _stub_params(fn: ast.FunctionDef) -> list[Param]:
    a = fn.args
    assert a.vararg is None and a.kwarg is None, f"{fn.name}: *args/**kwargs in the stub"
    positional = [(p, "positional_only") for p in a.posonlyargs] + [
        (p, "positional_or_keyword") for p in a.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(
        a.defaults)
    out = []
    for (p, kind), d in zip(positional, defaults):
        out.append(Param(p.arg, kind, ast.unparse(p.annotation) if p.annotation else None,
                         ast.literal_eval(d) if d is not None else None, d is not None))
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append(Param(p.arg, "keyword_only",
                         ast.unparse(p.annotation) if p.annotation else None,
                         ast.literal_eval(d) if d is not None else None, d is not None))
    return out


def _union_members(annotation: ast.expr, stub: Stub) -> list[ast.expr]:
    """The members of a union annotation, through the stub's own aliases."""
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _union_members(annotation.left, stub) + _union_members(annotation.right, stub)
    if isinstance(annotation, ast.Name) and isinstance(stub.type_only.get(annotation.id),
                                                       ast.expr):
        return _union_members(stub.type_only[annotation.id], stub)  # type: ignore[arg-type]
    return [annotation]


def _stub_accepts_none(annotation: str | None, stub: Stub) -> bool:
    if annotation is None:
        return False
    members = _union_members(ast.parse(annotation, mode="eval").body, stub)
    return any(isinstance(m, ast.Constant) and m.value is None for m in members)


def _nb_accepts_none(annotation: str | None) -> bool:
    return annotation is not None and "None" in _split_top(annotation, "|")


def _compare(where: str, nb_fn: Any, stub_defs: list[ast.FunctionDef], stub: Stub,
             skip_self: bool) -> list[str]:
    problems = []
    overloads = _nb_overloads(nb_fn)
    if len(overloads) != len(stub_defs):
        return [f"{where}: {len(overloads)} overload(s) bound, {len(stub_defs)} in the stub"]
    for (nb_params, nb_returns), fn in zip(overloads, stub_defs):
        st_params = _stub_params(fn)
        if skip_self:
            assert nb_params and nb_params[0].name == "self", f"{where}: {nb_params}"
            if not st_params or st_params[0].name != "self":
                problems.append(f"{where}: the stub's method has no self")
                continue
            nb_params, st_params = nb_params[1:], st_params[1:]
        shape_nb = [(p.name, p.kind, p.has_default) for p in nb_params]
        shape_st = [(p.name, p.kind, p.has_default) for p in st_params]
        if shape_nb != shape_st:
            problems.append(f"{where}: bound {nb_params}, but the stub has {st_params}")
            continue
        for p, q in zip(nb_params, st_params):
            if p.has_default and (p.default != q.default or type(p.default) is not type(
                    q.default)):
                problems.append(f"{where}: {p.name} defaults to {p.default!r}, but to "
                                f"{q.default!r} in the stub")
            if _nb_accepts_none(p.annotation) != _stub_accepts_none(q.annotation, stub):
                problems.append(f"{where}: {p.name} is bound as {p.annotation}, but the stub "
                                f"says {q.annotation}")
        st_returns = ast.unparse(fn.returns) if fn.returns else None
        if (nb_returns == "None") != (st_returns == "None"):
            problems.append(f"{where}: returns {nb_returns} as bound, {st_returns} in the stub")
    return problems


# ---- names ----------------------------------------------------------------------------------

def _name_problems(stub: Stub) -> list[str]:
    problems = []
    module = _module_names()
    for name in sorted(module - stub.names()):
        problems.append(f"voxpipe._core.{name} is not in _core.pyi")
    for name in sorted(stub.names() - module - OPTIONAL):
        problems.append(f"_core.pyi declares {name}, which voxpipe._core does not have")
    for name in sorted(stub.type_only):
        if not name.startswith("_"):
            problems.append(f"_core.pyi: the stub-only type {name} should be private (_{name})")
        if hasattr(_core, name):
            problems.append(f"_core.pyi: {name} is a type of the stub only, but the module has it")
    for name, members in sorted(stub.classes.items()):
        cls = getattr(_core, name, None)
        if not isinstance(cls, type):
            continue
        bound = _class_members(cls)
        for m in sorted(set(bound) - set(members)):
            problems.append(f"voxpipe._core.{name}.{m} is not in _core.pyi")
        for m in sorted(set(members) - set(bound)):
            problems.append(f"_core.pyi declares {name}.{m}, which voxpipe._core does not have")
        for m in sorted(set(bound) & set(members)):
            value, defs = bound[m], members[m]
            if isinstance(value, property):
                getters = [d for d in defs if _decorators(d) == ["property"]]
                setters = [d for d in defs if _decorators(d) == [f"{m}.setter"]]
                if len(getters) != 1 or len(defs) != len(getters) + len(setters):
                    problems.append(f"_core.pyi: {name}.{m} is a property as bound")
                if bool(setters) != (value.fset is not None):
                    problems.append(f"_core.pyi: {name}.{m} is "
                                    f"{'writable' if value.fset else 'read-only'} as bound")
            elif any(_decorators(d) for d in defs):
                problems.append(f"_core.pyi: {name}.{m} is a method as bound")
    return problems


def test_stub_names_match_the_module(stub: Stub) -> None:
    assert not _name_problems(stub), "\n".join(_name_problems(stub))
    # The check sees what it must: every function and class of the module, and class members.
    assert "open" in stub.functions and "read" in stub.classes["Reader"]
    assert len(stub.functions) + len(stub.classes) >= len(_module_names() - OPTIONAL)


def test_name_check_fails_when_a_name_is_missing_or_extra() -> None:
    source = STUB.read_text()
    dropped = Stub(source.replace("def resolve_threads(", "def _resolve_threads_gone("))
    problems = _name_problems(dropped)
    assert "voxpipe._core.resolve_threads is not in _core.pyi" in problems
    assert ("_core.pyi declares _resolve_threads_gone, which voxpipe._core does not have"
            in problems)
    member = Stub(source.replace("    def check_data_size(self) -> None: ...\n", ""))
    assert _name_problems(member) == ["voxpipe._core.Reader.check_data_size is not in _core.pyi"]
    setter = ("    @header_identity.setter\n"
              "    def header_identity(self, arg: _Identity | None, /) -> None: ...\n")
    readonly = Stub(source.replace(setter, ""))
    assert _name_problems(readonly) == [
        "_core.pyi: NiftiImage.header_identity is writable as bound"]


# ---- signatures -------------------------------------------------------------------------------

def _signature_problems(stub: Stub) -> list[str]:
    problems = []
    for name, defs in sorted(stub.functions.items()):
        fn = getattr(_core, name, None)
        if fn is not None:
            problems += _compare(name, fn, defs, stub, skip_self=False)
    for cname, members in sorted(stub.classes.items()):
        cls = getattr(_core, cname, None)
        if not isinstance(cls, type):
            continue
        for m, value in sorted(_class_members(cls).items()):
            if m not in members:
                continue
            if isinstance(value, property):
                if value.fset is not None:
                    setters = [d for d in members[m] if _decorators(d) == [f"{m}.setter"]]
                    problems += _compare(f"{cname}.{m} (setter)", value.fset, setters, stub,
                                         skip_self=True)
            else:
                problems += _compare(f"{cname}.{m}", value, members[m], stub, skip_self=True)
    return problems


def test_stub_signatures_match_the_bindings(stub: Stub) -> None:
    problems = _signature_problems(stub)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("old, new, expected", [
    # a parameter gone
    ("def write(path: str, header: bytes,", "def write(path: str,",
     "write: bound [positional_or_keyword path, positional_or_keyword header"),
    # a default changed
    ('open_bytes(buffer: _BufferLike, name: str = "<bytes>")',
     'open_bytes(buffer: _BufferLike, name: str = "<mem>")',
     "open_bytes: name defaults to '<bytes>', but to '<mem>' in the stub"),
    # None no longer accepted
    ("modality: str | None = None", "modality: str = None",
     "dicom_decode_frames: modality is bound as str | None, but the stub says str"),
    # positional-only lost
    ("arg11: bool,\n                           /)", "arg11: bool)",
     "series_memory_estimate: bound [positional_only arg0"),
    # a method's parameter renamed
    ("def prefetch(self, ranges:", "def prefetch(self, spans:",
     "RemoteInput.prefetch: bound [positional_or_keyword ranges]"),
])
def test_signature_check_fails_on_a_changed_signature(old: str, new: str, expected: str) -> None:
    source = STUB.read_text()
    assert old in source
    problems = _signature_problems(Stub(source.replace(old, new)))
    assert any(p.startswith(expected) for p in problems), problems


# ---- values of real objects against the stub's types --------------------------------------------

class TypeChecker:
    """Whether a value is of a stub annotation: the builtin scalars, None, unions, tuple, list,
    dict, NDArray[dtype], the stub's aliases and TypedDicts, and the module's classes."""

    def __init__(self, stub: Stub) -> None:
        self.stub = stub

    def check(self, value: Any, node: ast.expr) -> bool:
        if isinstance(node, ast.Constant) and node.value is None:
            return value is None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.check(value, node.left) or self.check(value, node.right)
        if isinstance(node, ast.Name):
            return self._named(value, node.id)
        if isinstance(node, ast.Subscript):
            base = ast.unparse(node.value)
            args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if base == "tuple":
                if not isinstance(value, tuple):
                    return False
                if len(args) == 2 and isinstance(args[1], ast.Constant) and args[1].value is ...:
                    return all(self.check(v, args[0]) for v in value)
                return len(value) == len(args) and all(map(self.check, value, args))
            if base == "list":
                return isinstance(value, list) and all(self.check(v, args[0]) for v in value)
            if base == "dict":
                return isinstance(value, dict) and all(
                    self.check(k, args[0]) and self.check(v, args[1]) for k, v in value.items())
            if base == "NDArray":
                want = ast.unparse(args[0])
                return isinstance(value, np.ndarray) and (
                    want == "Any" or value.dtype == np.dtype(want.removeprefix("numpy.")))
        raise AssertionError(f"no check for the annotation {ast.unparse(node)}")

    def _named(self, value: Any, name: str) -> bool:
        scalars: dict[str, Callable[[Any], bool]] = {
            "int": lambda v: type(v) is int, "float": lambda v: type(v) is float,
            "bool": lambda v: type(v) is bool, "str": lambda v: type(v) is str,
            "bytes": lambda v: type(v) is bytes, "object": lambda v: True}
        if name in scalars:
            return scalars[name](value)
        node = self.stub.type_only.get(name)
        if isinstance(node, ast.ClassDef) and "Protocol" in {ast.unparse(b) for b in node.bases}:
            return all(callable(getattr(value, f.name, None)) for f in node.body
                       if isinstance(f, ast.FunctionDef))
        if isinstance(node, ast.ClassDef):  # a TypedDict: exactly its keys, each of its type
            fields = {s.target.id: s.annotation for s in node.body  # type: ignore[union-attr]
                      if isinstance(s, ast.AnnAssign)}
            return isinstance(value, dict) and set(value) == set(fields) and all(
                self.check(value[k], a) for k, a in fields.items())
        if isinstance(node, ast.expr):
            return self.check(value, node)
        if name in self.stub.classes:
            return isinstance(value, getattr(_core, name))
        raise AssertionError(f"no check for the name {name}")

    def returns(self, function: ast.FunctionDef) -> ast.expr:
        assert function.returns is not None, function.name
        return function.returns


def _property_values(obj: Any) -> dict[str, Any]:
    cls = type(obj)
    return {m: getattr(obj, m) for m, v in _class_members(cls).items() if isinstance(v, property)}


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real object of each class of the module, and results of functions that have no side
    effects outside a temporary folder, by name."""
    import nibabel as nib
    pytest.importorskip("pydicom")
    from pydicom.data import get_testdata_file

    tmp = tmp_path_factory.mktemp("core_stub")
    data = np.arange(2 * 3 * 4 * 2, dtype=np.int16).reshape(2, 3, 4, 2)
    nii = nib.Nifti1Image(data, np.diag([2.0, 3.0, 4.0, 1.0]))
    nii.header.extensions.append(nib.nifti1.Nifti1Extension(6, b"a comment"))
    path = str(tmp / "image.nii")
    nib.save(nii, path)
    with open(path, "rb") as f:
        raw = f.read()
    gz_path = str(tmp / "image.nii.gz")
    with open(gz_path, "wb") as f:
        f.write(gzip.compress(raw))
    image = _core.open(path)
    dicom_path = get_testdata_file("CT_small.dcm")
    dicom = _core.read_dicom(dicom_path, max_value_size=1 << 20)
    scan = _core.dicom_scan([dicom_path], recursive=False)
    remote = _core.RemoteInput("mem://image.nii", len(raw),
                               lambda ranges: [raw[o:o + n] for o, n in ranges], initial=raw[:400])
    remote.prefetch([(0, 352)])
    memory = _core._host_memory_for_tests(64)
    element = dicom.dataset.find(dicom.dataset.tags[0])
    assert dicom.pixel_data is not None and element is not None
    return {
        "NiftiImage": image, "bytes_image": _core.open_bytes(raw, "image.nii"),
        "remote_image": _core.open_remote(remote), "Reader": _core.Reader(image),
        "DicomFile": dicom, "DicomDataset": dicom.dataset, "DicomElement": element,
        "DicomTransferSyntax": dicom.transfer_syntax,
        "DicomPixelData": dicom.pixel_data, "DicomPixelInfo": _core.dicom_pixel_info(dicom),
        "DicomScanResult": scan, "DicomSeries": scan.series[0], "RemoteInput": remote,
        "Memory": memory,
        # results of functions ("name") and methods ("Class.name")
        "open": image, "open_bytes": _core.open_bytes(raw, "image.nii"),
        "open_remote": _core.open_remote(remote),
        "is_pair_path": _core.is_pair_path("a.hdr"), "resolve_threads": _core.resolve_threads(0),
        "pool_stats": _core.pool_stats(), "pool_buffer": _core.pool_buffer(16),
        "build_index": _core.build_index(gz_path, 1 << 20, str(tmp / "image.gzidx"), False),
        "affines": _core.affines(image.header_bytes),
        "parse_header": _core.parse_header(image.header_bytes),
        "read_dicom": dicom, "dicom_scan": scan,
        "dicom_scan_buffers": _core.dicom_scan_buffers(["x.dcm"], [Path(dicom_path).read_bytes()]),
        "dicom_keyword_tag": _core.dicom_keyword_tag("PatientName"),
        "dicom_tag_keyword": _core.dicom_tag_keyword(0x00100010),
        "dicom_pixel_info": _core.dicom_pixel_info(dicom),
        "cuda_status": _core.cuda_status(), "_memory_frees": _core._memory_frees(),
        "_host_memory_for_tests": memory,
        "Memory.view": memory.view(8, [2, 3], [3, 1], "float32"),
        "DicomDataset.find": element, "DicomDataset.__len__": len(dicom.dataset),
        "view_png": _core.view_png(np.asfortranarray(np.zeros((2, 3, 4), np.float32)),
                                   [1.0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1], False, "x"),
        "series_voxel_matrix": _core.series_voxel_matrix(
            [1.0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1], [],
            [1.0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]),
    }


def _value_problems(stub: Stub, objects: dict[str, Any]) -> tuple[list[str], set[str]]:
    """What is not of its stub type, and the properties read."""
    checker = TypeChecker(stub)
    problems, seen = [], set()
    for key, obj in objects.items():
        cls = type(obj).__name__
        if key in stub.functions or "." in key:
            owner, _, method = key.rpartition(".")
            fn = stub.classes[owner][method][0] if owner else stub.functions[key][0]
            if not checker.check(obj, checker.returns(fn)):
                problems.append(f"{key}() returned {obj!r}, not {ast.unparse(fn.returns)}")
            continue
        if obj is None:
            continue
        assert cls in stub.classes, key
        for m, value in _property_values(obj).items():
            getter = next(d for d in stub.classes[cls][m] if _decorators(d) == ["property"])
            seen.add(f"{cls}.{m}")
            if not checker.check(value, checker.returns(getter)):
                problems.append(f"{key}.{m} is {value!r}, not {ast.unparse(getter.returns)}")
    return problems, seen


def test_values_are_of_the_stubs_types(stub: Stub, objects: dict[str, Any]) -> None:
    problems, seen = _value_problems(stub, objects)
    assert not problems, "\n".join(problems)
    # Every property of every class was read from a real object.
    every = {f"{c}.{m}" for c, members in stub.classes.items() for m, defs in members.items()
             if any(_decorators(d) == ["property"] for d in defs)}
    assert seen == every, sorted(every - seen)


def test_value_check_fails_on_a_wrong_type(stub: Stub, objects: dict[str, Any]) -> None:
    checker = TypeChecker(stub)
    image = objects["NiftiImage"]
    assert checker.check(image.shape, ast.parse("tuple[int, ...]", mode="eval").body)
    assert not checker.check(image.shape, ast.parse("list[int]", mode="eval").body)
    assert not checker.check(image.extensions,
                             ast.parse("list[tuple[int, str]]", mode="eval").body)
    assert not checker.check(image.slope, ast.parse("int", mode="eval").body)
    assert not checker.check(None, ast.parse("_Identity", mode="eval").body)
    assert checker.check(objects["Memory.view"], ast.parse("_DLPackArray", mode="eval").body)
    assert not checker.check(objects["Memory"], ast.parse("_DLPackArray", mode="eval").body)
    wrong = Stub(STUB.read_text().replace("def affine(self) -> list[float]: ...  # 16",
                                          "def affine(self) -> list[int]: ...  # 16"))
    assert any(p.startswith("NiftiImage.affine is [2.0") for p in _value_problems(wrong, objects)[0])
    summary = dict(objects["build_index"])
    assert checker.check(summary, ast.parse("_IndexSummary", mode="eval").body)
    del summary["points"]
    assert not checker.check(summary, ast.parse("_IndexSummary", mode="eval").body)


# ---- the stub under mypy --strict --------------------------------------------------------------

def test_stub_passes_mypy_strict(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    # With the project's mypy configuration: checking voxpipe/_core.pyi makes mypy read the
    # package it belongs to (voxpipe/__init__.py and what it imports), whose few calls into
    # unannotated nibabel functions pyproject.toml's [tool.mypy] names.
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-color-output", "--config-file",
         str(STUB.parents[2] / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
         str(STUB)],
        cwd=tmp_path, env=dict(os.environ), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found in 1 source file" in result.stdout
