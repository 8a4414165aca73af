"""The figures the README and docs/ cite, computed from bench/results and the scaling model.

A page marks a figure it cites with an HTML comment right after the number (and its unit):
``78.2x<!--fig:model.speedup.cd-5.128-->``. The number is checked against :func:`figure` of the
key, rounded to the decimals the page prints, by tests/test_doc_figures.py, so a figure that no
longer matches its source fails the suite instead of going stale.

    python -m bench.figures            every marked figure of the pages: page value, source value
    python -m bench.figures KEY ...    the source value of each key

Keys (P a number of parts, ALGO cd-0, cd-5 or 0c):

* ``model.speedup.ALGO.P``, ``model.epoch.ALGO.P``: ``distgnn scaling-model predict`` on
  docs/scale-calibration.json for the papers100M shape (speedup against P = 1, epoch in s);
* ``papers.fetch.min``, ``papers.fetch.gib``: the full-size twin's fetch (minutes, peak GiB) and
  ``papers.libra.P.min``, ``papers.libra.P.gib``: libra's assignment at P, from the newest
  bench/results/papers-scale*.jsonl record of that stage; ``papers.rf.P``: its RF;
* ``link.ALGO.WIDTH.epoch``, ``link.ALGO.WIDTH.bytes``: bench.link_widths over 400 Mbit/s, epoch
  and bytes per rank against the same algorithm's float32 run (bench/results/link-widths-*.json);
* ``packing.ALGO.WIDTH``: on one host (bench.link_widths' ``one host`` runs), the % change of
  the median epoch at WIDTH against the same algorithm's float32 run;
* ``messages.WIDTH.worst``: the lowest test accuracy (points) of a message width against float32
  over the GraphSAGE and GCN cells of the message-precision grids (bench/results/
  algorithms-*-messages-*.txt, GAT's left out, one scale per row), same algorithm and file;
  ``messages.WIDTH.bytes``: a row of 256 columns on the wire against float32's (the codec's size);
* ``peers.WxT``: SAR's steady epoch over our cd-0's at W workers x T threads, from the newest
  bench/results/peers-*.txt (bench.peers), e.g. ``peers.2x1``; ``peers.WxT.bf16``: over our
  cd-0's under ``--precision bf16``;
* ``vsdgl.FILE.users``, ``vsdgl.FILE.pages``: our ``distgnn train`` epoch against DGL 1.1.3's as
  users run it and on 2 MB pages both (like for like), from bench/results/FILE.txt (bench.epoch,
  bench.models), e.g. ``vsdgl.epoch-intel-256-2026-12-03.users``; ``vsdgl.FILE.bf16``: its
  ``--precision bf16`` line against DGL as users run it;
* ``cdr.papers.gap``, ``cdr.papers.bytes``: the default cd-5 (``recompute``, budget 1) on the
  papers twin at P = 4 against cd-0 (seeds 0-2): test accuracy points below cd-0 and forward
  bytes in % of cd-0's, from the rows of bench/results/algorithms-papers-fresh-2026-12-02.txt
  (cd-0) and algorithms-papers-cdr-recompute-budgets-2026-12-03.txt (the default);
* ``model.dgl.ALGO.P``, ``model.dglusers.ALGO.P``: the modelled speedup at P against DGL on one
  socket like for like and as users run it, the model's own speedup times bench.scaling's
  DGL_OVER_OURS (itself checked against vsdgl).
"""
from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
#: the pages whose marked figures are checked
PAGES = ("README.md", "docs/*.md", "bench/README.md")
#: a number, an optional unit, then the marker
MARKED = re.compile(r"(-?[0-9][0-9,]*(?:\.[0-9]+)?)\**\s*(?:x|%|s|min|GiB|MB|points)?\**\s*<!--\s*fig:([\w.\-]+)\s*-->")


@functools.lru_cache(maxsize=None)
def _model_rows(parts: int) -> tuple[dict, ...]:
    proc = subprocess.run([sys.executable, "-m", "distgnn", "scaling-model", "predict", "--calibration",
                           str(REPO / "docs" / "scale-calibration.json"), "--graph", "ogbn-papers100M",
                           "--parts", str(parts), "--json"], capture_output=True, text=True, check=True)
    return tuple(json.loads(proc.stdout))


@functools.lru_cache(maxsize=None)
def _papers_records() -> dict[str, dict]:
    """The newest record of each stage over bench/results/papers-scale*.jsonl."""
    newest: dict[str, dict] = {}
    for path in sorted(RESULTS.glob("papers-scale*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("rc") != 0:
                continue
            if record.get("at", "") > newest.get(record["stage"], {}).get("at", ""):
                newest[record["stage"]] = record
    return newest


@functools.lru_cache(maxsize=None)
def _link_runs() -> tuple[dict, ...]:
    """The runs of the newest bench/results/link-widths-*.json holding each place (a link's
    rate, or "one host": a run with ``--rates ''`` measures the one host alone)."""
    by_place: dict[str, list[dict]] = {}
    for path in sorted(RESULTS.glob("link-widths-*.json")):
        runs = json.loads(path.read_text())["runs"]
        for place in {r["place"] for r in runs}:
            by_place[place] = [r for r in runs if r["place"] == place]
    return tuple(r for runs in by_place.values() for r in runs)


def _link_median(place: str, case: str, field: str) -> float:
    import statistics

    values = [r[field] for r in _link_runs() if r["place"] == place and r["case"] == case]
    if not values:
        raise KeyError(f"no bench.link_widths run {case!r} at {place}")
    return statistics.median(values)


@functools.lru_cache(maxsize=None)
def _message_cells() -> tuple[tuple[str, str, str, float], ...]:
    """(grid file, algorithm, width, test accuracy %) of every per-row cell of the GraphSAGE and
    GCN message-precision grids."""
    cells = []
    for path in sorted(RESULTS.glob("algorithms-*-messages-*.txt")):
        if "-gat-" in path.name:
            continue
        for line in path.read_text().splitlines():
            fields = [f.strip() for f in line.strip().strip("|").split("|")]
            if len(fields) < 4 or "+msg=" not in fields[0] or "+group=" in fields[0]:
                continue
            algo = fields[0].split("+msg=")[0]
            cells.append((path.name, algo, fields[2], float(fields[3].split()[0])))
    return tuple(cells)


def _message_worst(width: str) -> float:
    base = {(f, a): acc for f, a, w, acc in _message_cells() if w == "fp32"}
    gaps = [acc - base[f, a] for f, a, w, acc in _message_cells() if w == width and (f, a) in base]
    if not gaps:
        raise KeyError(f"no message-precision cell of width {width}")
    return min(gaps)


@functools.lru_cache(maxsize=None)
def _ours_against_dgl(stem: str, row: str = "ours, distgnn train") -> tuple[float, float]:
    """(against DGL as users run it, against DGL on 2 MB pages) of the ``row`` line of
    bench/results/STEM.txt, as printed there."""
    for line in (RESULTS / f"{stem}.txt").read_text().splitlines():
        fields = [f.strip() for f in line.strip().strip("|").split("|")]
        if fields[0] == row:
            return float(fields[2].rstrip("x")), float(fields[3].rstrip("x"))
    raise KeyError(f"no {row!r} row in bench/results/{stem}.txt")


@functools.lru_cache(maxsize=None)
def _algorithms_row(stem: str, algo: str) -> tuple[float, float]:
    """(test accuracy %, forward MB per epoch) of the ``algo`` row of a bench.algorithms table in
    bench/results/STEM.txt."""
    for line in (RESULTS / f"{stem}.txt").read_text().splitlines():
        fields = [f.strip() for f in line.strip().strip("|").split("|")]
        if fields[0] == algo and len(fields) >= 9:
            return float(fields[2].split()[0]), float(fields[8])
    raise KeyError(f"no {algo!r} row in bench/results/{stem}.txt")


#: the rows ``cdr.papers.*`` compares: cd-0 and the default cd-5 on the papers twin, P = 4
PAPERS_CD0 = ("algorithms-papers-fresh-2026-12-02", "cd-0")
PAPERS_DEFAULT = ("algorithms-papers-cdr-recompute-budgets-2026-12-03", "cd-5+rule=recompute+budget=1")


@functools.lru_cache(maxsize=None)
def _peer_epochs() -> dict[tuple[str, str], float]:
    """{(system, "W x T"): steady epoch s} of the newest bench.peers table."""
    newest = sorted(RESULTS.glob("peers-*.txt"))[-1]
    epochs = {}
    for line in newest.read_text().splitlines():
        fields = [f.strip() for f in line.strip().strip("|").split("|")]
        if len(fields) >= 3 and " x " in fields[1] and re.fullmatch(r"[0-9.,]+", fields[2]):
            system = ("ours bf16" if "bf16" in fields[0] else "ours" if fields[0].startswith("distgnn")
                      else fields[0].split()[0].lower())
            epochs[system, fields[1]] = float(fields[2].replace(",", ""))
    return epochs


def figure(key: str) -> float:
    """The source value of a figure key (module docstring); KeyError for an unknown key."""
    parts = key.split(".")
    if parts[0] == "model" and len(parts) == 4 and parts[1] in ("dgl", "dglusers"):
        from bench.scaling import DGL_OVER_OURS

        against = "like for like (2 MB pages)" if parts[1] == "dgl" else "as users run it"
        return figure(f"model.speedup.{parts[2]}.{parts[3]}") * DGL_OVER_OURS[against]
    if parts[0] == "model" and len(parts) == 4:
        _, what, algo, p = parts
        row = next(r for r in _model_rows(int(p)) if r["algo"] == algo)
        return {"speedup": row["speedup"], "epoch": row["epoch_s"]}[what]
    if parts[0] == "papers":
        records = _papers_records()
        if parts[1] == "fetch":
            record = records["fetch"]
        elif parts[1] in ("libra", "rf"):
            record = records[f"assign libra store P={parts[2]}"]
            if parts[1] == "rf":
                return record["rf"]
        else:
            raise KeyError(key)
        return {"min": record["wall_s"] / 60, "gib": record["peak_bytes"] / 2**30}[parts[-1]]
    if parts[0] == "link" and len(parts) == 4:
        _, algo, width, what = parts
        field = {"epoch": "epoch_s", "bytes": "bytes"}[what]
        return (_link_median("400mbit", f"{algo} {width}", field)
                / _link_median("400mbit", f"{algo} fp32", field))
    if parts[0] == "packing" and len(parts) == 3:
        _, algo, width = parts
        return 100 * (_link_median("one host", f"{algo} {width}", "epoch_s")
                      / _link_median("one host", f"{algo} fp32", "epoch_s") - 1)
    if parts[0] == "vsdgl" and len(parts) == 3 and parts[2] == "bf16":
        return _ours_against_dgl(parts[1], "ours, distgnn train, bf16")[0]
    if parts[0] == "vsdgl" and len(parts) == 3:
        return _ours_against_dgl(parts[1])[{"users": 0, "pages": 1}[parts[2]]]
    if parts[0] == "peers" and len(parts) in (2, 3):
        shape = parts[1].replace("x", " x ")
        ours = "ours bf16" if parts[2:] == ["bf16"] else "ours"
        return _peer_epochs()["sar", shape] / _peer_epochs()[ours, shape]
    if parts[0] == "cdr" and parts[1:2] == ["papers"] and len(parts) == 3:
        (acc0, mb0), (acc, mb) = _algorithms_row(*PAPERS_CD0), _algorithms_row(*PAPERS_DEFAULT)
        return {"gap": acc0 - acc, "bytes": 100 * mb / mb0}[parts[2]]
    if parts[0] == "messages" and len(parts) == 3:
        _, width, what = parts
        if what == "worst":
            return _message_worst(width)
        if what == "bytes":
            from distgnn.vocabulary import message_row_bytes

            return message_row_bytes(256, width, 0) / message_row_bytes(256, "fp32", 0)
    raise KeyError(key)


def marked_figures(root: Path = REPO) -> list[tuple[str, str, str]]:
    """(page, number as printed, key) for every marked figure of :data:`PAGES`."""
    found = []
    for pattern in PAGES:
        for page in sorted(root.glob(pattern)):
            for m in MARKED.finditer(page.read_text()):
                found.append((str(page.relative_to(root)), m.group(1), m.group(2)))
    return found


def stale(printed: str, key: str) -> str | None:
    """Why the printed number disagrees with its source (None when it agrees at its decimals)."""
    try:
        value = figure(key)
    except (KeyError, StopIteration):
        return f"fig:{key} is not a known figure (bench/figures.py)"
    decimals = len(printed.split(".", 1)[1]) if "." in printed else 0
    if float(printed.replace(",", "")) != round(value, decimals):
        return f"fig:{key} reads {printed}, its source gives {value:.{decimals}f} ({value:.4g})"
    return None


def main(argv: list[str] | None = None) -> int:
    keys = sys.argv[1:] if argv is None else argv
    if keys:
        for key in keys:
            print(f"{key}: {figure(key):.4g}")
        return 0
    bad = 0
    for page, printed, key in marked_figures():
        why = stale(printed, key)
        bad += why is not None
        print(f"{page}: {printed} fig:{key}: {why or 'ok'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
