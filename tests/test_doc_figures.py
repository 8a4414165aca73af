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
                     r"was credited|used to (?:be|read|take|say)\b")
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
