"""The documentation is checked like code: README.md and docs/*.md link only to files and
headings that exist in the repository, name nothing outside it, and the examples in the Python
package's docstrings run and give what they show.

Links: every relative Markdown link or image (inline ``[text](target)`` and reference
definitions ``[label]: target``; code spans and fenced blocks excepted) must resolve to a file
inside the repository, and a ``#anchor`` to a heading of its target, by GitHub's slug rule
(lowercase; characters other than letters, digits, ``_``, ``-`` and spaces removed; spaces to
``-``; ``-1``, ``-2`` ... for repeated headings). Absolute http(s)/mailto links are not fetched.

Docstrings: doctest runs every module of the package whose source holds ``>>>``, in a folder that
holds the demo's sample series (``python -m voxpipe.demo --dir .`` writes the same file), with
``np`` and ``vp`` imported, as the examples assume. Examples that need a GPU are marked
``# doctest: +SKIP``.
"""

from __future__ import annotations

import doctest
import importlib
import io
import re
from pathlib import Path

import numpy as np
import pytest

import voxpipe as vp

REPO = Path(__file__).resolve().parents[2]
PACKAGE = Path(vp.__file__).resolve().parent


def doc_files(root: Path = REPO) -> list[Path]:
    return [root / "README.md"] + sorted((root / "docs").glob("*.md"))


# --- Markdown -------------------------------------------------------------------------------------

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
# [text](target "title") and ![alt](target); the text may hold one level of brackets (an image
# inside a link, `[x]` in code already blanked out).
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"
                          r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
_REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
_HTML_ANCHOR = re.compile(r"<a\s+[^>]*(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.I)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _unfenced_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    out, fence = [], None
    for number, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        out.append((number, line))
    return out


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, code spans blanked out."""
    out = _unfenced_lines(text)
    joined = "\n".join(line for _, line in out)
    # Code spans may not cross a blank line; blank them (keeping line breaks) so that what they
    # show is never read as a link.
    joined = _CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), joined)
    return list(zip((n for n, _ in out), joined.split("\n")))


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text lowercased, everything but letters,
    digits, '_', '-' and spaces removed, spaces turned into '-'."""
    text = _CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)                     # inline HTML tags
    text = re.sub(r"(\*\*|__|\*|~~)", "", text)             # emphasis markers ('_' is a word char)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file offers: its headings' slugs (repeats numbered as GitHub
    numbers them) and explicit <a name/id> anchors."""
    text = path.read_text(encoding="utf-8")
    seen: dict[str, int] = {}
    found: set[str] = set()
    previous = ""
    for _, line in _unfenced_lines(text):
        heading = None
        m = _ATX.match(line)
        if m:
            heading = m.group(2)
        elif (_SETEXT.match(line) and previous.strip() and not previous.lstrip().startswith(("|", "-", "*", ">"))
              and not _ATX.match(previous)):
            heading = previous
        if heading is not None:
            slug = github_slug(heading)
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
        found.update(a.lower() for a in _HTML_ANCHOR.findall(line))
        previous = line
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every inline link, image and reference definition."""
    out = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        targets = [m.group(1) for m in _INLINE_LINK.finditer(line)]
        m = _REF_DEF.match(line)
        if m:
            targets.append(m.group(1))
        out.extend((number, t[1:-1] if t.startswith("<") else t) for t in targets)
    return out


def link_problems(files: list[Path], root: Path = REPO) -> list[str]:
    """'file:line: target: why' for every relative link that does not resolve inside `root`."""
    root = root.resolve()
    problems = []
    anchor_cache: dict[Path, set[str]] = {}
    for md in files:
        for number, target in links(md):
            where = f"{md.relative_to(root)}:{number}: {target}"
            if _SCHEME.match(target):
                if not target.lower().startswith(("http://", "https://", "mailto:")):
                    problems.append(f"{where}: not a repository file or a web address")
                continue
            path_part, _, anchor = target.partition("#")
            path_part = path_part.split("?", 1)[0]
            if not path_part:
                dest = md.resolve()
            elif path_part.startswith("/"):
                dest = (root / path_part.lstrip("/")).resolve()
            else:
                dest = (md.parent / path_part).resolve()
            if dest != root and root not in dest.parents:
                problems.append(f"{where}: outside the repository")
                continue
            if not dest.exists():
                problems.append(f"{where}: no such file")
                continue
            if anchor:
                if dest.suffix.lower() != ".md":
                    problems.append(f"{where}: an anchor into a file that is not Markdown")
                    continue
                if dest not in anchor_cache:
                    anchor_cache[dest] = anchors(dest)
                if anchor.lower() not in anchor_cache[dest]:
                    problems.append(f"{where}: no heading with anchor #{anchor} in "
                                    f"{dest.relative_to(root)}")
    return problems


def test_every_relative_link_resolves_inside_the_repository():
    files = doc_files()
    assert len(files) > 1, "docs/*.md not found"
    assert link_problems(files) == []


# Pointers a reader of the repository cannot follow: notes kept outside it, this machine's paths,
# and numbers of the project's tracker. Another project's tracker, as the text of a link to it,
# is a reference the reader can follow, so absolute links are removed before the search.
_OUTSIDE_REFERENCES = re.compile(
    r"\.\./shared|shared/research|\bresearch/\w+\.md|/work/|\bissues? #?\d+\b|(?<![\w&/])#\d+\b",
    re.I)


def outside_references(files: list[Path], root: Path = REPO) -> list[str]:
    problems = []
    for md in files:
        for number, line in enumerate(md.read_text(encoding="utf-8").splitlines(), 1):
            line = re.sub(r"\[[^\]]*\]\(https?://[^)]*\)", "", line)
            for m in _OUTSIDE_REFERENCES.finditer(line):
                problems.append(f"{md.relative_to(root)}:{number}: {m.group(0)!r}")
    return problems


def test_docs_name_nothing_outside_the_repository():
    assert outside_references(doc_files()) == []


def test_link_check_reports_missing_files_anchors_and_escapes(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "# A page\n\n## Lazy access (`img.dataobj`)\n\n## Notes\n\n## Notes\n", encoding="utf-8")
    (tmp_path / "README.md").write_text(
        "# Top\n"
        "[ok](docs/a.md) [ok](docs/a.md#lazy-access-imgdataobj) [ok](docs/a.md#notes-1)\n"
        "[ok](#top) ![ok](docs/a.md) [web](https://example.org/x.md) `[code](nowhere.md)`\n"
        "```\n[fenced](nowhere.md)\n```\n"
        "[missing](docs/b.md) [bad anchor](docs/a.md#lazy-access) [outside](../x.md)\n"
        "![missing image](img/x.png) [self](#nowhere)\n[ref]: docs/c.md\n",
        encoding="utf-8")
    problems = link_problems(doc_files(tmp_path), tmp_path)
    assert [p.split(": ")[1] for p in problems] == [
        "docs/b.md", "docs/a.md#lazy-access", "../x.md", "img/x.png", "#nowhere", "docs/c.md"]


def test_github_slugs():
    assert github_slug("Status report (`voxpipe::cuda_status()`)") == "status-report-voxpipecuda_status"
    assert github_slug("voxpipe's extras on `img.dataobj`") == "voxpipes-extras-on-imgdataobj"
    assert github_slug("Streaming resampling (vp.resample)") == "streaming-resampling-vpresample"
    assert github_slug("cuFile (GPUDirect Storage)") == "cufile-gpudirect-storage"
    assert github_slug("1. bold_4d.nii.gz -> float32") == "1-bold_4dniigz---float32"


def test_outside_reference_check_reports_notes_paths_and_tracker_numbers(tmp_path):
    md = tmp_path / "README.md"
    md.write_text("see ../shared/DESIGN.md\nas issue 7 asks\nfixed in #14\n"
                  "nibabel [issue 940](https://github.com/nipy/nibabel/issues/940)\n"
                  "`&#10;` and a heading [x](#a) are fine\n", encoding="utf-8")
    assert [p.split(": ", 1)[1] for p in outside_references([md], tmp_path)] == [
        "'../shared'", "'issue 7'", "'#14'"]


# --- Docstring examples ----------------------------------------------------------------------------

def modules_with_examples() -> list[str]:
    names = []
    for source in sorted(PACKAGE.rglob("*.py")):
        if ">>>" in source.read_text(encoding="utf-8"):
            parts = source.relative_to(PACKAGE).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names.append(".".join(("voxpipe",) + parts))
    return names


@pytest.fixture(scope="module")
def examples_dir(tmp_path_factory):
    """A folder with what the examples open: the demo's sample series."""
    from voxpipe import demo

    folder = tmp_path_factory.mktemp("doctest")
    demo.make_sample(str(folder / "demo_bold.nii.gz"))
    return folder


def run_examples(module, name: str) -> tuple[int, int, str]:
    """(examples tried, failed, doctest's report) for the docstrings of `module`."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = io.StringIO()
    for test in finder.find(module, name, globs={"np": np, "vp": vp}):
        runner.run(test, out=report.write)
    result = runner.summarize(verbose=False)
    return result.attempted, result.failed, report.getvalue()


def test_the_package_has_examples():
    assert "voxpipe._images.image" in modules_with_examples()


@pytest.mark.parametrize("name", modules_with_examples())
def test_docstring_examples(name, examples_dir, monkeypatch):
    try:
        module = importlib.import_module(name)
    except ImportError as exc:  # an optional framework (torch, monai, torchio) is not installed
        pytest.skip(f"{name}: {exc}")
    monkeypatch.chdir(examples_dir)
    attempted, failed, report = run_examples(module, name)
    assert attempted > 0, f"{name} has '>>>' in its source, but doctest found no example"
    assert failed == 0, report


def test_a_wrong_example_fails(examples_dir, monkeypatch):
    import types

    module = types.ModuleType("voxpipe_doc_probe", """
    >>> vp.load("demo_bold.nii.gz").shape
    (64, 64, 40, 61)
    """)
    monkeypatch.chdir(examples_dir)
    attempted, failed, report = run_examples(module, module.__name__)
    assert (attempted, failed) == (1, 1)
    assert "(64, 64, 40, 60)" in report
