"""Every citation of docs/design.md names an anchor that exists there, and none cites it by number.

Code, help texts, tests, workflow files, bench scripts and the other docs cite the design page as
``docs/design.md#<id>`` (``design.md#<id>`` or ``(#<id>)`` inside docs/). An id counts only as an
explicit ``<a id="<id>"></a>`` in docs/design.md, placed just before the part it names: a heading's
GitHub slug is *not* accepted, because it changes whenever the heading is renumbered or retitled
("## 3. Stores" is ``3-stores``), which is exactly the drift these anchors exist to prevent.

Old-style citations fail too: the page's name followed, within a few words, by "section(s)" and a
digit, or by a quoted section title (the page's name, a comma, then "Models" in quotes); and inside
docs/design.md itself "section" and a digit (it links its own anchors instead). This file's own
examples of old-style citations are split string literals, so that it passes its own scan.

Files scanned: what git tracks or would track (``git ls-files --cached --others
--exclude-standard``), or, without git, every file under the project's own folders; text files only,
never bench/results/ (raw outputs quoted as they were printed). Needs no native build.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DESIGN = "docs/design.md"

#: never scanned: raw benchmark outputs, quoted as printed
SKIP_PREFIXES = ("bench/results/",)
#: folders and top-level files scanned when git is not available
FALLBACK_ROOTS = ("distgnn", "tests", "bench", "workflow", "cluster", "scripts", "examples",
                  "native", "docs", "config", "Snakefile", "README.md", "pyproject.toml")
#: suffixes (and exact names) of text files that may cite the design page
TEXT_SUFFIXES = (".py", ".md", ".smk", ".yaml", ".yml", ".toml", ".cfg", ".txt", ".sh", ".hpp",
                 ".cpp", ".h", ".cc", ".ini", ".rst", ".json")
TEXT_NAMES = ("Snakefile", "Makefile", "CMakeLists.txt")

ID_RE = re.compile(r"""<a\s+id=["']([a-z0-9][a-z0-9-]*)["']\s*>\s*</a>""")
CITED_RE = re.compile(r"design\.md#([A-Za-z0-9_.-]*[A-Za-z0-9_-])")
LOCAL_LINK_RE = re.compile(r"\]\(#([^)\s]+)\)")
# the page's name not followed by an anchor, then within about 40 characters (a comma, a
# markdown link's closing bracket and one line break allowed) "section" or "sections" and a digit
BY_NUMBER_RE = re.compile(r"design\.md(?!#)[^#\n]{0,40}(?:\n[^#\n]{0,40})?\bsections?\s+\d",
                          re.IGNORECASE)
# the page's name, then at most a closing parenthesis, a comma and blanks before a quoted title
# starting with a capital or digit (a backslash before the quote: a quote inside a string literal)
BY_TITLE_RE = re.compile(r"""design\.md(?!#)\)?,?\s+\\?["“][A-Z0-9]""")
SECTION_IN_DESIGN_RE = re.compile(r"\bsections?\s+\d", re.IGNORECASE)


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                             cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
        names = [n for n in out.decode().split("\0") if n]
        if names:
            return names
    except (OSError, subprocess.SubprocessError):
        pass
    names = []
    for top in FALLBACK_ROOTS:
        path = ROOT / top
        if path.is_file():
            names.append(top)
        elif path.is_dir():
            names += [p.relative_to(ROOT).as_posix() for p in path.rglob("*") if p.is_file()]
    return names


def _text_files() -> dict[str, str]:
    files = {}
    for name in _tracked():
        if name.startswith(SKIP_PREFIXES):
            continue
        if not (name.endswith(TEXT_SUFFIXES) or Path(name).name in TEXT_NAMES):
            continue
        path = ROOT / name
        if not path.is_file():  # deleted in the work tree, not yet in the index
            continue
        try:
            files[name] = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
    return files


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def design_ids(text: str) -> list[str]:
    """The explicit ids of docs/design.md, in order (duplicates kept, so they can be refused)."""
    return ID_RE.findall(text)


def cited_anchors(files: dict[str, str]) -> list[tuple[str, int, str]]:
    """(file, line, id) of every design.md#<id>, and of every (#<id>) link inside design.md."""
    cited = []
    for name, text in files.items():
        for m in CITED_RE.finditer(text):
            cited.append((name, _line(text, m.start()), m.group(1)))
        if name == DESIGN:
            for m in LOCAL_LINK_RE.finditer(text):
                cited.append((name, _line(text, m.start()), m.group(1)))
    return cited


def old_style_citations(files: dict[str, str]) -> list[tuple[str, int, str]]:
    """(file, line, excerpt) of every citation of design.md by section number or quoted title."""
    found = []
    for name, text in files.items():
        hits = list(BY_NUMBER_RE.finditer(text)) + list(BY_TITLE_RE.finditer(text))
        if name == DESIGN:
            hits += list(SECTION_IN_DESIGN_RE.finditer(text))
        for m in hits:
            found.append((name, _line(text, m.start()), " ".join(m.group(0).split())))
    return sorted(set(found))


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    found = _text_files()
    assert DESIGN in found, f"{DESIGN} not found under {ROOT}"
    return found


def test_design_ids_are_unique(files):
    ids = design_ids(files[DESIGN])
    assert ids, f"{DESIGN} has no <a id> anchors"
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicates, f"{DESIGN}: ids defined more than once: {', '.join(duplicates)}"


def test_every_cited_anchor_exists(files):
    ids = set(design_ids(files[DESIGN]))
    cited = cited_anchors(files)
    assert cited, "no design.md#<id> citation found: is the scan looking at the right folder?"
    missing = [f"{name}:{line}: #{anchor}" for name, line, anchor in cited if anchor not in ids]
    assert not missing, (f"anchors cited but not defined as <a id=...></a> in {DESIGN}:\n  "
                         + "\n  ".join(missing))


def test_no_citation_by_section_number_or_title(files):
    old = old_style_citations(files)
    assert not old, ("cite docs/design.md by an explicit anchor (docs/design.md#<id>), not by "
                     "section number or title:\n  "
                     + "\n  ".join(f"{name}:{line}: {excerpt}" for name, line, excerpt in old))


# The old-style examples are split literals ("design" ".md, ...") so this file passes its own scan.
@pytest.mark.parametrize("text, expected", [
    ('see docs/design' '.md, section 6 for', 1),
    ('[docs/design' '.md](docs/design' '.md),\nsections 5 and 6.', 1),
    ('(docs/design' '.md, "Models")', 1),
    ('(docs/design' '.md, \\"Models\\"; default)', 1),
    ('(docs/design' '.md section 3)', 1),
    ('(docs/design.md#models), section 3 of bench/README.md', 0),
    ('(docs/design.md#summary-keys)', 0),
    ('README.md, docs/design.md).', 0),
])
def test_old_style_patterns(text, expected):
    assert len(old_style_citations({"x.py": text})) == expected


def test_anchor_pattern_reads_ids_and_citations():
    assert design_ids('<a id="apply-at-root"></a>\n### Where\n- <a id="cd-r"></a>**cd-r**') == [
        "apply-at-root", "cd-r"]
    got = cited_anchors({"a.py": "docs/design.md#stores. and (docs/design.md#cd-r-at-the-root)"})
    assert [a for _, _, a in got] == ["stores", "cd-r-at-the-root"]
