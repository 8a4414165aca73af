"""The figures the README and docs/ cite agree with their sources (bench/figures.py: the scaling
model on docs/scale-calibration.json and the raw files of bench/results), and the user pages hold
no project history (that goes to bench/README.md or the commit log)."""
from __future__ import annotations

import re

import pytest

from bench import figures
from conftest import REPO

#: what history reads like in a user page: a dated change, a log, a figure "credited" before
HISTORY = re.compile(r"\b(?:until|since|before) 20\d\d-\d\d-\d\d|experiment log|for the record|"
                     r"was credited|used to (?:be|read|take|say)\b|\b(?:it|rank \d+|they) used to\b")
USER_PAGES = ("README.md", "docs/design.md", "docs/reliability.md", "docs/scale.md",
              "docs/scale-model.md", "docs/delayed-updates.md")


def test_every_marked_figure_agrees_with_its_source() -> None:
    marked = figures.marked_figures()
    pages = {page for page, _, _ in marked}
    # the headline pages carry marks (a page that lost them all would pass vacuously)
    assert {"README.md", "docs/scale.md", "docs/scale-model.md", "bench/README.md"} <= pages, pages
    stale = [f"{page}: {why}" for page, printed, key in marked
             if (why := figures.stale(printed, key)) is not None]
    assert not stale, "\n".join(stale)


def test_a_stale_or_unknown_figure_is_caught(tmp_path) -> None:
    speedup = figures.figure("model.speedup.cd-5.128")
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        f"the default reaches {speedup:.1f}x<!--fig:model.speedup.cd-5.128--> at 128 sockets, "
        f"and **{speedup + 15.6:.1f}x**<!-- fig:model.speedup.cd-5.128 --> in an older page; "
        "fetch 16 min<!--fig:papers.fetch.min-->; RF 9.9<!--fig:papers.rf.3-->\n")
    found = figures.marked_figures(tmp_path)
    assert [key for _, _, key in found] == ["model.speedup.cd-5.128"] * 2 + ["papers.fetch.min", "papers.rf.3"]
    verdicts = [figures.stale(printed, key) for _, printed, key in found]
    assert verdicts[0] is None
    assert "reads" in verdicts[1] and "reads 16" in verdicts[2]
    assert "not a known figure" in verdicts[3]


def test_the_model_uses_the_rf_measured_at_every_p() -> None:
    import json

    from distgnn.scaling.replication import ReplicationLaw

    law = ReplicationLaw.from_dict(json.loads((REPO / "docs" / "scale-calibration.json").read_text())
                                   ["papers_replication"])
    for parts in (2, 4, 8, 16, 32, 64, 128):
        assert law(parts) == pytest.approx(figures.figure(f"papers.rf.{parts}"), rel=1e-12), parts


@pytest.mark.parametrize("page", USER_PAGES)
def test_user_pages_hold_no_history(page: str) -> None:
    lines = [f"{page}:{n}: {m.group(0)!r}" for n, line in enumerate((REPO / page).read_text().splitlines(), 1)
             for m in HISTORY.finditer(line)]
    assert not lines, "history belongs in bench/README.md or the commit log:\n" + "\n".join(lines)


def test_help_texts_hold_no_history() -> None:
    hits = [f"{path.relative_to(REPO)}: {m.group(0)!r}" for path in sorted((REPO / "distgnn").rglob("*.py"))
            for m in HISTORY.finditer(path.read_text())]
    assert not hits, "\n".join(hits)


def test_the_scaling_benchs_dgl_ratios_are_bench_epochs() -> None:
    """bench.scaling's DGL_OVER_OURS (the model's speedups against DGL on one socket) are the
    ratios bench.epoch measured (bench/results/epoch-intel-256-2026-12-03.txt, hidden 256)."""
    from bench.figures import figure
    from bench.scaling import DGL_OVER_OURS

    stem = "epoch-intel-256-2026-12-03"
    assert DGL_OVER_OURS == {"as users run it": figure(f"vsdgl.{stem}.users"),
                             "like for like (2 MB pages)": figure(f"vsdgl.{stem}.pages")}


def test_every_marked_table_agrees_with_its_sources() -> None:
    from bench import tables

    marked = tables.marked_tables()
    # the pages whose tables come from bench/results carry marks (none lost them all)
    assert {"docs/delayed-updates.md", "docs/scale.md", "docs/scale-full-size.md"} <= {t.page for t in marked}
    stale = [f"{t.page}:{t.line}: {'; '.join(why)}" for t in marked if (why := tables.misses(t))]
    assert not stale, "\n".join(stale)


def test_every_table_of_figures_in_the_user_pages_is_checked() -> None:
    """A table with decimal numbers in README.md or docs/ is marked whole (bench/tables.py), has
    each of them marked as a figure (bench/figures.py), or lies in a generated section."""
    from bench import tables

    assert tables.unchecked_tables() == []


def test_a_stale_or_unmarked_table_is_caught(tmp_path) -> None:
    from bench import tables

    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "bench" / "results" / "run.txt").write_text(
        "| cd-0 | 81.28 ± 0.19 | 0.5137 | 125.52 |\n| cd-5 | 80.92 +- 0.03 | 1.5105 | 17.46 |\n")
    rows = ("| algo | test (%) | epoch s | MB | below cd-0 |\n|---|---|---|---|---|\n"
            "| cd-0 | 81.28 ± 0.19 | 0.514 | 125.5 | |\n| cd-5 | {acc} | 1.51 | 17.5 | 0.36 |\n")
    page = tmp_path / "docs" / "page.md"
    good = "<!--table: run.txt; derived: below cd-0-->\n" + rows.format(acc="80.92 ± 0.03")
    page.write_text(good + "\nrun with `--dropout 0.5`:\n\n| a | b |\n|---|---|\n| `--lr 0.03` | 3 |\n")
    [table] = tables.marked_tables(tmp_path)
    assert tables.misses(table) == [] and tables.unchecked_tables(tmp_path) == []
    # a figure that moved away from its file; a spread that does not go with its mean
    for stale, caught in (("80.93 ± 0.03", "80.93 ± 0.03"), ("80.92 ± 0.19", "80.92 ± 0.19")):
        page.write_text("<!--table: run.txt; derived: below cd-0-->\n" + rows.format(acc=stale))
        [table] = tables.marked_tables(tmp_path)
        assert [m.split(" (")[0] for m in tables.misses(table)] == [caught]
    # the derived column is the page's own arithmetic; without the mark it is looked up, and fails
    page.write_text("<!--table: run.txt-->\n" + rows.format(acc="80.92 ± 0.03"))
    [table] = tables.marked_tables(tmp_path)
    assert [m.split(" (")[0] for m in tables.misses(table)] == ["0.36"]
    page.write_text("<!--table: gone.txt-->\n" + rows.format(acc="80.92 ± 0.03"))
    assert "no such file" in tables.misses(tables.marked_tables(tmp_path)[0])[0]
    # a table of figures with no mark at all
    page.write_text("text\n\n" + rows.format(acc="80.92 ± 0.03"))
    assert tables.unchecked_tables(tmp_path) == ["docs/page.md:3"]


def test_a_generated_section_equals_what_its_command_writes(tmp_path) -> None:
    """docs/scale-model.md's predictions are `python -m bench.scaling --redraw` of the committed
    calibration, as written with --markdown (figure marks aside)."""
    import shlex
    import subprocess
    import sys

    from bench import tables

    sections = tables.generated_sections(REPO / "docs" / "scale-model.md")
    assert len(sections) == 1
    for command, body in sections:
        argv = shlex.split(command)
        assert argv[:2] == ["python", "-m"], command
        out = tmp_path / "section.md"
        proc = subprocess.run([sys.executable, *argv[1:], "--markdown", str(out)], cwd=REPO,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert tables.FIGURE_MARK.sub("", body).strip() == out.read_text().strip(), command
