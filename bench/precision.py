"""Accuracy effect of the opt-in bf16 dense work (``distgnn train --precision bf16``) on a twin.

    python -m bench.precision [--dataset synth-reddit] [--scale 0.01] [--epochs 100]
                              [--seeds 0 1 2] [--layers 3] [--hidden 256]

Trains one process (P = 1, cd-0) in float32 and in bf16 for every seed, same partition and
hyperparameters, and prints one table: test accuracy at the best validation epoch (mean ± std over
seeds), final training loss and median epoch time. The speed of bf16 dense work on R24 is the
"ours, bf16 dense" line of ``bench/epoch.py``; neither counts toward the float32 targets.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench.algorithms import sh
from bench.common import machine_line, markdown_table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="synth-reddit")
    parser.add_argument("--scale", type=float, default=0.01)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--work", default=None, help="work folder (default: a temp folder)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-precision-"))
    from distgnn.data.fetch import fetch

    graph = fetch(args.dataset, root=work / "data", scale=args.scale)
    partdir = work / "parts-1"
    if not partdir.exists():
        sh(sys.executable, "-m", "distgnn", "partition", graph, "--parts", "1", "--out", partdir, "--quiet")
    rows = []
    for precision in ("fp32", "bf16"):
        accs, losses, times = [], [], []
        for seed in args.seeds:
            run = work / "runs" / f"{precision}-seed{seed}"
            if not (run / "summary.json").exists():
                sh(sys.executable, "-m", "distgnn", "train", partdir, "--algo", "cd-0",
                   "--epochs", str(args.epochs), "--layers", str(args.layers), "--hidden",
                   str(args.hidden), "--seed", str(seed), "--threads", str(args.threads),
                   "--precision", precision, "--out", run, "--quiet")
            summary = json.loads((run / "summary.json").read_text())
            lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
            accs.append(100 * summary["test_at_best_val"])
            losses.append(lines[-1]["loss"])
            times.append(float(np.median([l["epoch_time_s"] for l in lines[1:]])))
        rows.append([precision, f"{np.mean(accs):.2f} ± {np.std(accs):.2f}",
                     f"{np.mean(losses):.4f}", f"{np.median(times):.3f}"])
    print(f"Machine: {machine_line(args.threads)}; {datetime.date.today()}")
    print(f"{args.dataset} --scale {args.scale:g}, one process (P = 1, cd-0), {args.layers}-layer "
          f"GraphSAGE hidden {args.hidden}, {args.epochs} epochs, seeds {args.seeds}\n")
    print(markdown_table(["dense precision", "test acc at best val (%)", "final train loss",
                          "epoch s (median)"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
