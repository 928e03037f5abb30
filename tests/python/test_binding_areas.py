"""The C++ bindings of voxpipe._core (python/src) keep their layers: one file per binding area
(``*_bindings.cpp``), none calling another; module.cpp makes the module and calls each area's
``bind_*`` (declared in areas.hpp); the foundation (conversions.hpp/.cpp, gil.hpp/.cpp) serves
every area and includes none.

The sources are read as text (comments and string literals removed, braces followed), so the
check needs no build. An area file may:

- include only the foundation headers, the public headers (``voxpipe/...``) and the CLI's entry
  (commands.hpp, which remote_bindings.cpp binds for ``python -m voxpipe``);
- define with external linkage one function only, its own ``bind_*`` declared in areas.hpp;
  everything else lives in its anonymous namespace;
- declare no function outside its anonymous namespace (no forward declaration of another
  file's function) and name no ``bind_*`` but its own.

So no area can reach a function of another: there is none it could name. The last test breaks a
copy of the sources in the ways the rule forbids and checks that each is found.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "python" / "src"
FOUNDATION = ("conversions.hpp", "conversions.cpp", "gil.hpp", "gil.cpp")
FOUNDATION_HEADERS = {"conversions.hpp", "gil.hpp"}
OTHER_HEADERS = {"commands.hpp"}  # the CLI's entry (cli/), bound for python -m voxpipe


def _strip(text: str) -> str:
    """The code of a C++ source: comments, string and character literals (raw strings too) and
    preprocessor lines blanked, line breaks kept."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":
            j = i
            while j < n and text[j] != "\n":  # a directive, with its continuation lines
                j += 2 if text[j] == "\\" else 1
            i = j
            continue
        if c in " \t":
            out.append(c)
            i += 1
            continue
        line_start = c == "\n"
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            j = text.index("*/", i + 2) + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            delim = text[i + 2 : text.index("(", i)]
            j = text.index(")" + delim + '"', i) + len(delim) + 2
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _includes(text: str) -> list[str]:
    return re.findall(r'^\s*#\s*include\s*"([^"]+)"', text, re.M)


def _name_before_paren(head: str) -> str | None:
    """The (qualified) name a function head declares: the identifier before its first '('."""
    m = re.search(r"([A-Za-z_][\w:]*)\s*\(", head)
    return m.group(1).split("::")[-1] if m else None


def _scan(code: str):
    """What a stripped source declares and defines at namespace scope: a list of
    (kind, name, in_anonymous_namespace), kind 'definition', 'declaration' or 'class'."""
    found = []
    stack: list[str] = []  # 'ns', 'anon' or 'other' (function, class, initializer bodies)
    head = ""
    for c in code:
        at_namespace_scope = all(s in ("ns", "anon") for s in stack)
        anon = "anon" in stack
        if c == "{":
            h = " ".join(head.split())
            kind = "other"
            if at_namespace_scope:
                if re.fullmatch(r"(inline\s+)?namespace", h):
                    kind = "anon"
                elif re.fullmatch(r"(inline\s+)?namespace\s+[\w:]+", h) or h.startswith('extern "'):
                    kind = "ns"
                elif re.match(r"(template\s*<.*>\s*)?(class|struct|union|enum)\b", h):
                    m = re.match(r"(?:template\s*<.*>\s*)?(?:class|struct|union|enum)\s+(?:class\s+)?(\w+)", h)
                    found.append(("class", m.group(1) if m else h, anon))
                elif "(" in h and "=" not in h.split("(")[0]:
                    found.append(("definition", _name_before_paren(h), anon))
            stack.append(kind)
            head = ""
        elif c == "}":
            if stack:
                stack.pop()
            head = ""
        elif c == ";":
            h = " ".join(head.split())
            if at_namespace_scope and "(" in h and "=" not in h.split("(")[0]:
                if not re.match(r"(using|typedef|static_assert|namespace)\b", h):
                    found.append(("declaration", _name_before_paren(h), anon))
            head = ""
        else:
            head += c
    return found


def area_problems(src: Path) -> list[str]:
    """Every breach of the layering of the binding sources in `src`, as a line each."""
    problems: list[str] = []
    declared = re.findall(
        r"^void (bind_\w+)\(nanobind::module_& m\);$", (src / "areas.hpp").read_text(), re.M
    )
    if not declared:
        problems.append("areas.hpp: declares no bind_* function")
    defined_in: dict[str, list[str]] = {name: [] for name in declared}

    for path in sorted(src.glob("*_bindings.cpp")):
        text = path.read_text()
        code = _strip(text)
        for inc in _includes(text):
            if not (inc in FOUNDATION_HEADERS or inc.startswith("voxpipe/") or inc in OTHER_HEADERS):
                problems.append(f"{path.name}: includes {inc} (only the foundation and public headers)")
        own = []
        for kind, name, anon in _scan(code):
            if anon:
                continue
            if kind == "definition" and name in defined_in:
                defined_in[name].append(path.name)
                own.append(name)
            elif kind == "definition":
                problems.append(f"{path.name}: defines {name} outside its anonymous namespace")
            elif kind == "declaration":
                problems.append(f"{path.name}: declares {name} (a function of another file)")
            else:
                problems.append(f"{path.name}: defines class {name} outside its anonymous namespace")
        if len(own) != 1:
            problems.append(f"{path.name}: defines {own or 'no'} bind_* of areas.hpp, not one")
        for name in sorted(set(re.findall(r"\bbind_\w+", code)) - set(own)):
            problems.append(f"{path.name}: names {name}, another area's")

    for name, files in defined_in.items():
        if len(files) != 1:
            problems.append(f"areas.hpp: {name} is defined in {files or 'no area file'}, not one")

    module = src / "module.cpp"
    module_code = _strip(module.read_text())
    if "areas.hpp" not in _includes(module.read_text()):
        problems.append("module.cpp: does not include areas.hpp")
    for name in declared:
        calls = len(re.findall(rf"\b{name}\(m\);", module_code))
        if calls != 1:
            problems.append(f"module.cpp: calls {name} {calls} times, not once")

    for path in sorted(src.glob("*.?pp")):
        if path.name == "module.cpp":
            continue
        text = path.read_text()
        bad = [inc for inc in _includes(text) if inc == "areas.hpp" or inc.endswith("_bindings.cpp")]
        if bad:
            problems.append(f"{path.name}: includes {', '.join(bad)} (module.cpp's alone)")
        if path.name in FOUNDATION and re.search(r"\bbind_\w+", _strip(text)):
            problems.append(f"{path.name}: the foundation names a bind_* function")
    return problems


def test_each_binding_area_reaches_only_the_foundation():
    assert area_problems(SRC) == []


def test_every_binding_source_is_compiled_into_the_module():
    cmake = (REPO / "CMakeLists.txt").read_text()
    call = re.search(r"nanobind_add_module\(_core\b(.*?)\)", cmake, re.S)
    assert call, "CMakeLists.txt: no nanobind_add_module(_core ...)"
    listed = set(re.findall(r"python/src/([\w.]+\.cpp)", call.group(1)))
    assert listed == {p.name for p in SRC.glob("*.cpp")}


def _add_before_bind(text: str, bind: str, lines: str) -> str:
    marker = f"void {bind}(nb::module_& m) {{"
    assert marker in text
    return text.replace(marker, lines + "\n" + marker)


BREAKAGES = {
    # One area defines a helper with external linkage and another declares and calls it (the
    # shape of the old bindings.cpp / remote_bindings.cpp pair).
    "shared helper": (
        lambda s: {
            "nifti_bindings.cpp": _add_before_bind(
                s["nifti_bindings.cpp"], "bind_nifti", "nb::dict summary() { return nb::dict(); }"
            ),
            "remote_bindings.cpp": _add_before_bind(
                s["remote_bindings.cpp"], "bind_remote", "nb::dict summary();"
            ),
        },
        [
            "nifti_bindings.cpp: defines summary outside its anonymous namespace",
            "remote_bindings.cpp: declares summary (a function of another file)",
        ],
    ),
    # An area declares and calls another area's bind_*.
    "bind call": (
        lambda s: {
            "view_bindings.cpp": _add_before_bind(
                s["view_bindings.cpp"], "bind_view", "void bind_zarr(nb::module_& m);"
            ).replace("void bind_view(nb::module_& m) {", "void bind_view(nb::module_& m) {\n  bind_zarr(m);")
        },
        [
            "view_bindings.cpp: declares bind_zarr (a function of another file)",
            "view_bindings.cpp: names bind_zarr, another area's",
        ],
    ),
    # A declaration spread over lines, in a named namespace.
    "multi-line declaration": (
        lambda s: {
            "zarr_bindings.cpp": _add_before_bind(
                s["zarr_bindings.cpp"],
                "bind_zarr",
                "namespace voxpipe::python {\nstd::shared_ptr<const void> held(\n"
                "    nb::handle object);\n}  // namespace voxpipe::python",
            )
        },
        ["zarr_bindings.cpp: declares held (a function of another file)"],
    ),
    # An area includes the list of areas; module.cpp no longer adds one.
    "include and missing call": (
        lambda s: {
            "dicom_bindings.cpp": s["dicom_bindings.cpp"].replace(
                '#include "conversions.hpp"', '#include "areas.hpp"\n#include "conversions.hpp"'
            ),
            "module.cpp": s["module.cpp"].replace("  bind_view(m);\n", ""),
        },
        [
            "dicom_bindings.cpp: includes areas.hpp (only the foundation and public headers)",
            "module.cpp: calls bind_view 0 times, not once",
            "dicom_bindings.cpp: includes areas.hpp (module.cpp's alone)",
        ],
    ),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_the_check_finds_each_breach(tmp_path, breakage):
    copy = tmp_path / "src"
    shutil.copytree(SRC, copy)
    sources = {p.name: p.read_text() for p in copy.iterdir() if p.is_file()}
    edit, expected = BREAKAGES[breakage]
    for name, text in edit(sources).items():
        assert text != sources[name], name
        (copy / name).write_text(text)
    assert sorted(area_problems(copy)) == sorted(expected)
