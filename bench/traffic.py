"""cd-r's steady training traffic at the root against cd-0's, per layer: where the bytes come from.

    python -m bench.traffic [--scale 0.005] [--seed 5] [--parts 4] [--layers 3] [--hidden 32]
                            [--epochs 15] [--steady 11 15] [--rules delayed recompute ...]

Fetches synth-reddit at ``--scale`` (generator seed ``--seed``), partitions it with Libra into P
parts, trains cd-0 and cd-<r> under each ``--cdr-rule`` (GraphSAGE, ``--layers`` deep), and prints
per run the mean of ``bytes_forward`` and ``bytes_backward`` over the steady epochs (1-based,
inclusive) as a multiple of cd-0's and of cd-0's / r. Beside it, the same ratio derived from the
partition alone: per layer, the rows each exchange moves (cd-0: every row of the pruned broadcast
and reduce plans; cd-r: the bin of each step) times the layer's width, which says which layer
and which plan the bytes come from (uneven bins, a layer cd-0 does not move, ...).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def run(cmd: list[str]) -> None:
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OUTDATED_IGNORE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")


def plan_rows(partdir: Path, delay: int) -> dict:
    """Rows the pruned root plans move, summed over parts: per plan, every row (cd-0) and, per
    bin, the rows of that bin (cd-r)."""
    from distgnn.partition.part_loader import load_partition, read_assignment_attrs

    parts = int(read_assignment_attrs(partdir)["P"])
    totals = {"broadcast": 0, "reduce": 0, "bins_broadcast": np.zeros(delay, np.int64),
              "bins_reduce": np.zeros(delay, np.int64)}
    for k in range(parts):
        part = load_partition(partdir, k)
        leaves = part.leaf_send.ids
        out_degree = part.t_indptr[1:] - part.t_indptr[:-1]
        gids = part.local_to_global[leaves].numpy()
        for plan, has in (("broadcast", (out_degree[leaves] > 0).numpy()),
                          ("reduce", (part.local_degree[leaves] > 0).numpy())):
            totals[plan] += int(has.sum())
            totals[f"bins_{plan}"] += np.bincount(gids[has] % delay, minlength=delay)
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.005)
    parser.add_argument("--seed", type=int, default=5, help="the twin's generator seed")
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--steady", type=int, nargs=2, default=[11, 15],
                        help="first and last steady epoch, 1-based, inclusive")
    parser.add_argument("--delay", type=int, default=5, help="r of cd-<r>")
    parser.add_argument("--rules", nargs="+", default=["delayed", "input", "recompute"])
    parser.add_argument("--work", default=None)
    args = parser.parse_args()

    from distgnn.data.fetch import fetch
    from distgnn.data.graph_store import GraphStore
    from distgnn.models.base import linear_first

    work = Path(args.work or tempfile.mkdtemp(prefix="bench-traffic-"))
    graph = fetch("synth-reddit", root=work / "data", scale=args.scale, seed=args.seed)
    partdir = work / f"libra-{args.parts}"
    if not partdir.exists():
        run([sys.executable, "-m", "distgnn", "partition", str(graph), "--parts", str(args.parts),
             "--method", "libra", "--out", str(partdir), "--quiet"])
    attrs = GraphStore.open(graph).attrs
    features, classes = int(attrs["feat_dim"]), int(attrs["num_classes"])
    r = args.delay
    first, last = args.steady
    names = ["cd-0"] + [f"cd-{r} {rule}" for rule in args.rules]
    steady = {}
    for name in names:
        algo, _, rule = name.partition(" ")
        out = work / "runs" / name.replace(" ", "-")
        if not (out / "summary.json").exists():
            run(["mpiexec", "--oversubscribe", "-n", str(args.parts), sys.executable, "-m",
                 "distgnn", "train", str(partdir), "--algo", algo, "--epochs", str(args.epochs),
                 "--layers", str(args.layers), "--hidden", str(args.hidden), "--threads", "1",
                 "--eval-every", "0", "--out", str(out), "--quiet",
                 *(["--cdr-rule", rule] if rule else [])])
        lines = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
        window = [l for l in lines if first - 1 <= l["epoch"] <= last - 1]
        steady[name] = {k: float(np.mean([l[k] for l in window]))
                        for k in ("bytes_forward", "bytes_backward")}

    rows = plan_rows(partdir, r)
    widths = [features] + [args.hidden] * (args.layers - 1) + [classes]
    print(f"# cd-{r} traffic at the root against cd-0: synth-reddit --scale {args.scale:g} --seed "
          f"{args.seed}, Libra P = {args.parts}, {args.layers}-layer GraphSAGE (mean) hidden "
          f"{args.hidden}, epochs {first}-{last} of {args.epochs} (mean bytes per epoch)")
    print(f"pruned plans, summed over parts: broadcast {rows['broadcast']} rows (per bin "
          f"{rows['bins_broadcast'].tolist()}), reduce {rows['reduce']} rows (per bin "
          f"{rows['bins_reduce'].tolist()})")
    print("per layer (in -> out, the width it exchanges): " + ", ".join(
        f"{i}: {widths[i]} -> {widths[i + 1]} exchanges "
        f"{min(widths[i], widths[i + 1]) if linear_first(widths[i], widths[i + 1]) else widths[i]}"
        for i in range(args.layers)))
    print()
    print("| run | fwd MB/epoch | bwd MB/epoch | fwd / cd-0 | bwd / cd-0 | fwd / (cd-0 / r) |")
    print("|---|---|---|---|---|---|")
    base = steady["cd-0"]
    for name in names:
        got = steady[name]
        ratio_f = got["bytes_forward"] / base["bytes_forward"]
        ratio_b = got["bytes_backward"] / base["bytes_backward"]
        print(f"| {name} | {got['bytes_forward'] / 1e6:.3f} | {got['bytes_backward'] / 1e6:.3f} | "
              f"{ratio_f:.3f} | {ratio_b:.3f} | {ratio_f * r:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
