"""Whole tables of the README and docs/ checked against the raw files they were copied from.

A page marks a table with an HTML comment on the line right above its header row, naming its
raw files in bench/results (or a path from the repository root, or ``scaling-model(ARGS)``: the
rows of ``distgnn scaling-model predict ARGS --json``, run when checked) and, optionally, the
columns derived from the source rather than printed by it (a gap, a ratio, a model term the
command does not output), which are not looked up:

    <!--table: algorithms-papers-2026-11-30.txt; derived: below cd-0-->
    | algo | test accuracy (%) | below cd-0 |
    ...

Every decimal number of the table's other cells must be a number of one of its files (of a JSON
file: any number in it, a byte count or a large count also in M, G, MiB or GiB), printed to the page's decimals (``71.9 ± 4.0`` matches ``71.91 ± 4.03``; a ``±`` pair must be a pair of
the file, which may print it ``+-``), so a table that no longer matches its source fails tests/test_doc_figures.py.
A table's numbers can instead each carry their own figure mark (bench/figures.py); a table with
decimal numbers and neither is reported by :func:`unchecked_tables`.

    python -m bench.tables        every marked table: its numbers not found in its files
"""
from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
#: the pages whose tables must be checked: the user's pages
USER_PAGES = ("README.md", "docs/*.md")
MARK = re.compile(r"^<!--\s*table:\s*(?P<files>[^;]*?)\s*(?:;\s*derived:\s*(?P<derived>.*?)\s*)?-->\s*$")
#: a decimal number, with its ``± spread`` when it has one; not a version (1.1.3) or a time of day
NUMBER = re.compile(r"(?<![\w.:/])(-?[0-9][0-9,]*\.[0-9]+)(?:\s*(?:±|\+-)\s*([0-9]+\.[0-9]+))?(?![\w.]*[0-9])")
#: any number of a source file, integers too (a page may print 35 as 35.0)
ANY_NUMBER = re.compile(r"(?<![\w.])-?[0-9][0-9,]*(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?(?![\w])")
FIGURE_MARK = re.compile(r"<!--\s*fig:[\w.\-]+\s*-->")
SEPARATOR = re.compile(r"^\|[\s:|-]+\|$")


@dataclass(frozen=True)
class Table:
    page: str          #: relative to the repository
    line: int          #: the header row's line, 1-based
    sources: tuple[Path | str, ...]  #: files, or ``scaling-model(ARGS)``
    derived: frozenset[str]
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def _cells(line: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in line.strip().strip("|").split("|"))


def _tables(text: str):
    """(index of the header line, the line above it, header line, body lines) of each table."""
    lines = text.splitlines()
    i = 0
    while i < len(lines) - 1:
        if lines[i].startswith("|") and SEPARATOR.match(lines[i + 1].strip()):
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            yield i, lines[i - 1] if i else "", lines[i], lines[i + 2:j]
            i = j
        else:
            i += 1


#: one source of a mark: ``scaling-model(ARGS)`` or a file name
SOURCE = re.compile(r"scaling-model\([^)]*\)|\S+")


def _resolve(name: str, root: Path) -> Path | str:
    if name.startswith("scaling-model("):
        return name
    return root / name if "/" in name else root / "bench" / "results" / name


def marked_tables(root: Path = REPO) -> list[Table]:
    """Every table of :data:`USER_PAGES` with a ``<!--table: ...-->`` mark above it."""
    found = []
    for pattern in USER_PAGES:
        for page in sorted(root.glob(pattern)):
            for i, above, header, body in _tables(page.read_text()):
                m = MARK.match(above.strip())
                if not m:
                    continue
                sources = tuple(_resolve(n, root) for n in SOURCE.findall(m.group("files")))
                derived = frozenset(d.strip() for d in (m.group("derived") or "").split(",") if d.strip())
                found.append(Table(str(page.relative_to(root)), i + 1, sources, derived,
                                   _cells(header), tuple(_cells(r) for r in body)))
    return found


#: a number with its own figure mark (checked by bench/figures.py, not here)
MARKED_FIGURE = re.compile(r"-?[0-9][0-9,.]*\**\s*(?:x|%|s|min|GiB|MB|points)?\**\s*<!--\s*fig:[\w.\-]+\s*-->")


#: inline code on a page: a command or an option's value, not a figure
CODE_SPAN = re.compile(r"`[^`]*`")


def _numbers(text: str) -> list[tuple[str, str | None]]:
    """The decimal numbers of a page's text (not in inline code, not carrying a figure mark)."""
    return NUMBER.findall(FIGURE_MARK.sub("", MARKED_FIGURE.sub("", CODE_SPAN.sub("", text))).replace("**", ""))


def _json_numbers(node, key: str = "") -> list[float]:
    """Every number of a JSON document; a count of bytes (a key naming bytes) or any integer of
    a million or more also in millions, billions, MiB and GiB (pages print 34.1 GB, 2.45M)."""
    if isinstance(node, dict):
        return [v for k, child in node.items() for v in _json_numbers(child, k)]
    if isinstance(node, list):
        return [v for child in node for v in _json_numbers(child, key)]
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        return []
    if "bytes" in key or (isinstance(node, int) and node >= 10**6):
        return [node, node / 1e6, node / 1e9, node / 2**20, node / 2**30]
    return [node]


def _model_output(source: str) -> list:
    """The rows of ``distgnn scaling-model predict ARGS --json`` for ``scaling-model(ARGS)``."""
    import json
    import shlex
    import subprocess

    args = shlex.split(source[len("scaling-model("):-1])
    proc = subprocess.run([sys.executable, "-m", "distgnn", "scaling-model", "predict", *args, "--json"],
                          capture_output=True, text=True, cwd=REPO)
    if proc.returncode:
        raise ValueError(f"{source}: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout)


@functools.lru_cache(maxsize=None)
def _source_numbers(path: Path | str) -> tuple[set[float], set[tuple[float, float]]]:
    values, pairs = set(), set()
    if isinstance(path, str):  # scaling-model(ARGS)
        values.update(_json_numbers(_model_output(path)))
        return values, pairs
    values.update(float(n.replace(",", "")) for n in ANY_NUMBER.findall(path.read_text(errors="replace")))
    if path.suffix in (".json", ".jsonl"):
        import json

        text = path.read_text()
        documents = [json.loads(line) for line in text.splitlines() if line.strip()] \
            if path.suffix == ".jsonl" else [json.loads(text)]
        values.update(v for d in documents for v in _json_numbers(d))
    for value, spread in NUMBER.findall(path.read_text(errors="replace")):
        v = float(value.replace(",", ""))
        values.add(v)
        if spread:
            pairs.add((v, float(spread)))
    return values, pairs


def _decimals(printed: str) -> int:
    return len(printed.split(".", 1)[1])


def _printed_as(value: float, printed: str) -> bool:
    """Whether ``value`` printed to ``printed``'s decimals reads ``printed``."""
    return abs(value - float(printed.replace(",", ""))) <= 0.5 * 10 ** -_decimals(printed) + 1e-9


def misses(table: Table) -> list[str]:
    """The numbers of ``table`` (outside its derived columns) that none of its files holds."""
    missing = [f"{p}: no such file" for p in table.sources if isinstance(p, Path) and not p.is_file()]
    if missing or not table.sources:
        return missing or ["the mark names no file"]
    unknown = table.derived - set(table.header)
    if unknown:
        return [f"derived column(s) {sorted(unknown)} not in the header {list(table.header)}"]
    values: set[float] = set()
    pairs: set[tuple[float, float]] = set()
    for path in table.sources:
        v, p = _source_numbers(path)
        values |= v
        pairs |= p
    for row in table.rows:
        for column, cell in zip(table.header, row):
            if column in table.derived:
                continue
            for value, spread in _numbers(cell):
                if spread:
                    found = any(_printed_as(a, value) and _printed_as(b, spread) for a, b in pairs)
                else:
                    found = any(_printed_as(v, value) for v in values)
                if not found:
                    missing.append(f"{value}{' ± ' + spread if spread else ''} ({column!r}, row {row[0]!r})")
    return missing


def unchecked_tables(root: Path = REPO) -> list[str]:
    """``page:line`` of each table of :data:`USER_PAGES` that holds decimal numbers and is neither
    marked whole nor has every decimal number marked as a figure; tables inside a section a test
    regenerates (``<!--generated: ...-->`` up to the next heading) are checked by that test."""
    bare = []
    for pattern in USER_PAGES:
        for page in sorted(root.glob(pattern)):
            text = page.read_text()
            generated = _generated_lines(text)
            for i, above, header, body in _tables(text):
                if MARK.match(above.strip()) or i in generated:
                    continue
                if _numbers("\n".join(body)):
                    bare.append(f"{page.relative_to(root)}:{i + 1}")
    return bare


GENERATED = re.compile(r"^<!--\s*generated:\s*(.*?)\s*-->\s*$")


def _generated_lines(text: str) -> set[int]:
    """Line indices inside a ``<!--generated: COMMAND-->`` section (to the next heading)."""
    inside, lines = False, set()
    for i, line in enumerate(text.splitlines()):
        if GENERATED.match(line.strip()):
            inside = True
        elif line.startswith("#"):
            inside = False
        if inside:
            lines.add(i)
    return lines


def generated_sections(page: Path) -> list[tuple[str, str]]:
    """(command, the section's text after the mark, to the next heading) of each generated
    section of ``page``."""
    sections, command, body = [], None, []
    for line in page.read_text().splitlines() + ["#"]:
        m = GENERATED.match(line.strip())
        if m or (command is not None and line.startswith("#")):
            if command is not None:
                sections.append((command, "\n".join(body).strip("\n")))
            command, body = (m.group(1), []) if m else (None, [])
        elif command is not None:
            body.append(line)
    return sections


def main() -> int:
    bad = 0
    for table in marked_tables():
        missing = misses(table)
        bad += bool(missing)
        print(f"{table.page}:{table.line} ({', '.join(getattr(p, 'name', p) for p in table.sources)}): "
              + ("ok" if not missing else "not in its files: " + "; ".join(missing)))
    for where in unchecked_tables():
        bad += 1
        print(f"{where}: a table of decimal numbers with no mark")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
