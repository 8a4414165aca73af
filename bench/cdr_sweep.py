"""How far the default cd-r falls from cd-0 on graphs it was not chosen on: a sweep over every twin
family, two draws of each, the three models and two world sizes, cd-0 / cd-5 / 0c side by side.

    python -m bench.cdr_sweep [--work DIR] [--families synth-reddit ...] [--draws 0 1]
                              [--models sage gcn gat] [--parts 4 8] [--seeds 0 1 2]
                              [--algos cd-0 cd-5 0c] [--epochs E] [--markdown OUT.md]

Each cell (family, draw, model, P) is one ``python -m bench.algorithms ... --json`` run in the
family's work folder (``DIR/<family>-d<draw>``: its graph and partitions are shared by the cell's
models), the cell's figures kept in ``DIR/cells/<cell>.json`` with its seeds and epochs; only
the algorithms a cell's file lacks run, so an interrupted sweep continues where it stopped and
another algorithm joins the figures already there (a cell file without its seeds and epochs,
from before they were recorded, runs again whole). The families' recipes (scale,
twin options, epochs, hidden width, learning rate, dropout) are :data:`FAMILIES`; ``--epochs``
overrides every recipe's.

Prints one row per cell (test figure at the best validation epoch, mean over seeds, of each
algorithm; cd-5's gap to cd-0 in points; whether it falls below 0c; cd-5's steady bytes per epoch
as a fraction of cd-0's) and the distribution of the gap: mean, worst, count below 0c, with the
mean bytes fraction. The first algorithm of ``--algos`` is the reference, every other one but
0c (the floor) is measured against it in a table of its own. GAT takes no integer message width
(its attention partials travel in fp32 or bf16): its cells run an ``+msg=int*`` entry at bf16.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Recipe:
    """How one twin family is drawn and trained in the sweep."""

    scale: float
    twin: tuple[str, ...] = ()          # distgnn fetch options (bench.algorithms spelling)
    train: tuple[str, ...] = ()         # bench.algorithms training options
    epochs: int = 40
    partition: tuple[str, ...] = field(default=())


#: one small twin of each family, at sizes a 2-core machine trains in minutes
FAMILIES: dict[str, Recipe] = {
    "synth-reddit": Recipe(0.01, epochs=30),                               # the demo graph
    "synth-products": Recipe(0.004, ("--mean-degree", "50"), epochs=40),
    "synth-proteins": Recipe(0.05, ("--mean-degree", "50"), epochs=40),
    "synth-papers100M": Recipe(0.0002, ("--mean-degree", "8", "--labelled-fraction", "1"),
                               ("--hidden", "172", "--lr", "0.03", "--dropout", "0.6"), epochs=60,
                               partition=("--method", "random", "--roots", "in-edges")),
}
#: each model's options (GAT: 4 heads of 32, lr 0.005, dropout 0.2, the recipe it trains with in
#: the bf16 grid of bench/README.md; 4 heads of 8 at dropout 0.6 did not train in 30-40 epochs)
MODELS: dict[str, tuple[str, ...]] = {
    "sage": ("--model", "sage"),
    "gcn": ("--model", "gcn"),
    "gat": ("--model", "gat", "--heads", "4", "--hidden", "32", "--lr", "0.005", "--dropout", "0.2"),
}
#: GAT's attention partials travel in fp32 or bf16 only (docs/design.md#message-precision): an
#: entry of --algos with an integer width runs GAT at this one instead
GAT_WIDTH = "bf16"


def for_model(algo: str, model: str) -> str:
    """``algo`` (bench.algorithms spelling) as the cell of ``model`` runs it: GAT's integer
    ``+msg=`` widths become :data:`GAT_WIDTH`."""
    if model != "gat":
        return algo
    return "+".join(f"msg={GAT_WIDTH}" if part in ("msg=int8", "msg=int4", "msg=int2") else part
                    for part in algo.split("+"))


def cell_name(family: str, draw: int, model: str, parts: int) -> str:
    return f"{family}-d{draw}-{model}-P{parts}"


def run_cell(work: Path, family: str, draw: int, model: str, parts: int, seeds: list[int],
             algos: list[str], epochs: int | None) -> dict:
    """The cell's figures (bench.algorithms' --json) of every algorithm of ``algos``: those its
    file holds already (run with the same seeds and epochs) are kept, the others run and join
    them."""
    out = work / "cells" / f"{cell_name(family, draw, model, parts)}.json"
    recipe = FAMILIES[family]
    settings = {"seeds": list(seeds), "epochs": epochs or recipe.epochs}
    runs = list(dict.fromkeys(for_model(a, model) for a in algos))   # (GAT: int widths -> one)
    kept = json.loads(out.read_text()) if out.exists() else None
    if kept is not None and kept.get("settings") != settings:
        kept = None   # other seeds or epochs: every algorithm runs again
    missing = [a for a in runs if kept is None or a not in kept["algos"]]
    if not missing:
        return kept
    out.parent.mkdir(parents=True, exist_ok=True)
    plot = out.with_name(f"{out.stem}-{len(kept['algos']) if kept else 0}.png")
    # later options win in argparse: the model's own learning rate, width and dropout over the
    # family's (GAT keeps its recipe everywhere)
    command = [sys.executable, "-m", "bench.algorithms", "--dataset", family, "--scale",
               str(recipe.scale), *recipe.twin, *recipe.partition, "--graph-seed", str(draw),
               "--parts", str(parts), "--epochs", str(settings["epochs"]),
               "--seeds", *map(str, seeds), "--algos", *missing, *recipe.train, *MODELS[model],
               "--work", str(work / f"{family}-d{draw}"), "--no-check",
               "--plot", str(plot), "--json", str(out) + ".run"]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench.cdr_sweep: cell {out.stem} failed (exit {proc.returncode}): "
                         f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    ran = json.loads(Path(str(out) + ".run").read_text())
    if kept is not None:
        ran["algos"] = {**kept["algos"], **ran["algos"]}
    ran["settings"] = settings
    tmp = Path(str(out) + ".tmp")
    tmp.write_text(json.dumps(ran))
    tmp.replace(out)   # complete, or not there
    Path(str(out) + ".run").unlink()
    return ran


def summarize(cells: dict[str, dict], reference: str, measured: str, floor: str,
              algos: list[str] | None = None) -> tuple[list[str], dict]:
    """Markdown rows per cell and the gap's distribution (points of the test figure); a row's
    columns are ``algos`` in that order (default: every algorithm of the cell)."""
    rows, gaps, fractions, below = [], [], [], 0
    for name, cell in cells.items():
        model = name.rsplit("-", 2)[1] if name.count("-") >= 2 else ""   # (cell_name's)
        ref, mea = for_model(reference, model), for_model(measured, model)
        shown = [for_model(a, model) for a in algos] if algos else list(cell["algos"])
        acc = {a: 100 * statistics.mean(cell["algos"][a]["test"]) for a in shown}
        columns = [acc[a] for a in shown]   # one per algorithm asked, repeats kept (GAT)
        gap = acc[mea] - acc[ref]
        low = floor in acc and acc[mea] < acc[floor]
        below += low
        ref_bytes = cell["algos"][ref]["bytes_per_epoch"]
        fraction = cell["algos"][mea]["bytes_per_epoch"] / ref_bytes if ref_bytes else float("nan")
        gaps.append(gap)
        fractions.append(fraction)
        rows.append(f"| {name} | {cell['metric']} | " + " | ".join(f"{v:.2f}" for v in columns)
                    + f" | {gap:+.2f} | {'yes' if low else 'no'} | {fraction:.3f} |")
    stats = {"cells": len(gaps), "mean_gap": statistics.mean(gaps) if gaps else float("nan"),
             "worst_gap": min(gaps) if gaps else float("nan"), "below_floor": below,
             "mean_bytes_fraction": statistics.mean(fractions) if fractions else float("nan")}
    return rows, stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench/cdr-sweep"))
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--draws", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--parts", nargs="+", type=int, default=[4, 8])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--algos", nargs="+", default=["cd-0", "cd-5", "0c"],
                        help="the reference first, then the algorithms measured against it, each in a table of its "
                             "own, and 0c, the floor (bench.algorithms spelling)")
    parser.add_argument("--epochs", type=int, default=None, help="every recipe's epochs (default: each family's)")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the tables here")
    args = parser.parse_args(argv)
    if len([a for a in args.algos if a != "0c"]) < 2:
        parser.error("--algos: a reference and an algorithm to measure against it")
    reference = args.algos[0]
    cells = {}
    grid = [(f, d, m, p) for f in args.families for d in args.draws for m in args.models for p in args.parts]
    for i, (family, draw, model, parts) in enumerate(grid, 1):
        name = cell_name(family, draw, model, parts)
        print(f"[{i}/{len(grid)}] {name}", file=sys.stderr, flush=True)
        cells[name] = run_cell(args.work, family, draw, model, parts, args.seeds, args.algos, args.epochs)
    lines: list[str] = []
    measured_algos = [a for a in args.algos[1:] if a != "0c"]
    for measured in measured_algos:
        rows, stats = summarize(cells, reference, measured, "0c", args.algos)
        lines += [f"# {measured} against {reference}: the test figure at the best validation epoch "
                  f"(mean of seeds {args.seeds}, %; GAT runs integer widths at {GAT_WIDTH})", "",
                  "| cell | metric | " + " | ".join(args.algos) + f" | {measured} - {reference} | "
                  f"below 0c | {measured} bytes / {reference} |", "|" + "---|" * (len(args.algos) + 5),
                  *rows, "",
                  f"{stats['cells']} cells: gap mean {stats['mean_gap']:+.2f}, worst "
                  f"{stats['worst_gap']:+.2f} points; below 0c in {stats['below_floor']}; steady bytes "
                  f"{stats['mean_bytes_fraction']:.3f} of {reference}'s on average", ""]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
