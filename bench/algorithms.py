"""Accuracy, epoch time and traffic of the delayed-update algorithms on a twin, side by side.

    python -m bench.algorithms [--dataset synth-reddit] [--scale 0.01] [--parts 4] [--epochs 100]
                               [--seeds 0 1 2] [--algos cd-0 cd-5 cd-5-orig 0c]

An entry of ``--algos`` is ``ALGO[@APPLY][+nodg][+fresh][+rule=NAME]``: the algorithm, optionally its
``--apply`` mode (default: auto), ``+nodg`` for ``--no-delayed-gradients``, ``+fresh`` for
``--fresh-copies`` (``+stale`` for ``--no-fresh-copies``), ``+rule=NAME`` for ``--cdr-rule NAME`` and ``+budget=B`` for
``--recompute-budget B``, ``+msg=W`` for ``--message-precision W`` and ``+group=G`` for
``--message-group G``, ``+prec=P`` for ``--precision P`` (e.g. ``cd-5+rule=delayed``, ``cd-0+msg=int8``; a rule retired from ``--cdr-rule``, such as
``cd-5+rule=warm-input``, runs through ``python -m bench.retired_rules``; ``cd-5@replicas``; ``cd-5+nodg``: cd-5 at the root without its delayed
gradients; ``cd-5+fresh``: cd-5 at the root, only the partials delayed). ``--model`` trains another model
(``--heads`` for GAT; ``--aggregator`` is GraphSAGE's).

Fetches the twin, partitions it with Libra into P parts, trains every algorithm for every seed
(mpiexec -n P, threads per rank = cores / P) and prints one markdown table: mean test accuracy at
the best validation epoch (± std over seeds), steady-state epoch time with its split, and bytes per
epoch by kind. Checks: 0c loses >= 2 points to cd-0; cd-5 within 1 point of cd-0; cd-5's epoch time
at most 1.1x 0c's. Exits non-zero when a check fails (unless --no-check).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
import numpy as np

REPO = Path(__file__).resolve().parents[1]
#: ``--algos`` suffixes and the ``distgnn train`` option each adds
SUFFIXES = {"nodg": "--no-delayed-gradients", "fresh": "--fresh-copies", "stale": "--no-fresh-copies"}
#: ``--algos`` suffixes NAME=VALUE and the ``distgnn train`` option each sets
VALUE_SUFFIXES = {"rule": "--cdr-rule", "budget": "--recompute-budget",
                  "msg": "--message-precision", "group": "--message-group", "prec": "--precision"}


def sh(*args: str, env: dict | None = None) -> None:
    proc = subprocess.run([str(a) for a in args], env={**os.environ, **(env or {})},
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, args))}\n{proc.stderr[-3000:]}")


def _matches(run: Path, args: argparse.Namespace) -> bool:
    """Whether ``run`` holds a finished run with the requested epochs and hyperparameters (a kept
    run is reused; one with other settings is trained again). A code change is not seen: delete
    WORK/runs to retrain after one."""
    summary = run / "summary.json"
    if not summary.exists():
        return False
    got = json.loads(summary.read_text())
    hyper = got.get("hyperparameters", {})
    want = {"lr": args.lr, "dropout": args.dropout, "weight_decay": args.weight_decay,
            "hidden": args.hidden, "layers": args.layers, "model": args.model}
    return got.get("epochs") == args.epochs and all(hyper.get(k) == v for k, v in want.items())


def retired_names() -> tuple[str, ...]:
    from bench.retired_rules import NAMES

    return NAMES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="synth-reddit")
    parser.add_argument("--scale", type=float, default=0.01)
    parser.add_argument("--mean-degree", type=float, default=None,
                        help="twin's mean in-degree instead of the scaled one (distgnn fetch --mean-degree)")
    parser.add_argument("--labelled-fraction", type=float, default=None,
                        help="twin's fraction of vertices in train/val/test (distgnn fetch --labelled-fraction)")
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--method", default="libra")
    parser.add_argument("--roots", default="balance", help="root rule (distgnn partition --roots)")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--algos", nargs="+", default=["cd-0", "cd-5", "cd-5-orig", "0c"])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--aggregator", choices=("mean", "gcn"), default="mean",
                        help="GraphSAGE's aggregator (sage only)")
    parser.add_argument("--model", choices=("sage", "gcn", "gin", "gat"), default="sage",
                        help="distgnn train --model")
    parser.add_argument("--heads", type=int, default=8, help="GAT's heads (gat only)")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--source", default=None,
                        help="a local copy of the dataset's files (distgnn fetch --source)")
    parser.add_argument("--normalize-features", action="store_true",
                        help="distgnn fetch --normalize-features (the citation graphs' recipe)")
    parser.add_argument("--work", default=None, help="work folder (default: a temp folder)")
    parser.add_argument("--plot", default=None,
                        help="learning-curve figure (PNG; default: <work>/algorithms.png)")
    parser.add_argument("--no-check", action="store_true")
    parser.add_argument("--graph-seed", type=int, default=0,
                        help="the twin's draw (distgnn fetch --seed); each draw needs its own --work")
    parser.add_argument("--json", default=None, metavar="OUT.json",
                        help="also write each algorithm's per-seed test figure, steady bytes per "
                             "epoch and median epoch (bench.cdr_sweep reads it)")
    args = parser.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-algorithms-"))
    python = sys.executable
    env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OUTDATED_IGNORE": "1"}
    from distgnn.data.fetch import fetch
    from distgnn.data.graph_store import GraphStore
    from distgnn.report.plots import learning_curves, metric_name

    graph = fetch(args.dataset, root=work / "data", source=args.source, scale=args.scale,
                  mean_degree=args.mean_degree, normalize_features=args.normalize_features,
                  labelled_fraction=args.labelled_fraction, seed=args.graph_seed)
    metric = metric_name(bool(GraphStore.open(graph).attrs.get("multilabel", False)))
    partition = f"{args.method}-{args.parts}" + ("" if args.roots == "balance" else f"-{args.roots}")
    partdir = work / partition
    if not partdir.exists():
        sh(python, "-m", "distgnn", "partition", graph, "--parts", str(args.parts), "--method",
           args.method, "--roots", args.roots, "--out", partdir, "--quiet")
    threads = max(1, (os.cpu_count() or 1) // args.parts)
    model_options = {"sage": ["--aggregator", args.aggregator], "gat": ["--heads", str(args.heads)]}.get(args.model, [])
    results: dict[str, list[dict]] = {}
    for algo in args.algos:
        base, *suffixes = algo.split("+")
        name, _, apply = base.partition("@")
        values = [s.split("=", 1) for s in suffixes if "=" in s]
        rules = [v for k, v in values if k == "rule"]
        suffixes = [s for s in suffixes if "=" not in s]
        unknown = set(suffixes) - set(SUFFIXES) | {f"{k}=" for k, _ in values} - {f"{k}=" for k in VALUE_SUFFIXES}
        if unknown:
            parser.error(f"--algos {algo}: unknown suffix +{', +'.join(sorted(unknown))} (known: "
                         f"+{', +'.join(SUFFIXES)}, +{'=, +'.join(VALUE_SUFFIXES)}=)")
        variant = (["--apply", apply or "auto"] + [SUFFIXES[s] for s in suffixes]
                   + [a for k, v in values for a in (VALUE_SUFFIXES[k], v)])
        for seed in args.seeds:
            prefix = {"sage": f"{args.aggregator}-" if args.aggregator != "mean" else "",
                      "gat": f"gat-h{args.heads}-"}.get(args.model, f"{args.model}-")
            run = work / "runs" / partition / f"{prefix}{algo.replace('@', '-').replace('+', '-').replace('=', '-')}-seed{seed}"
            if not _matches(run, args):
                shutil.rmtree(run, ignore_errors=True)
                # a retired rule (bench/retired_rules.py) runs through the CLI that registers it
                cli = "bench.retired_rules" if set(rules) & set(retired_names()) else "distgnn"
                sh("mpiexec", "--oversubscribe", "-n", str(args.parts), python, "-m", cli, "train",
                   partdir, "--algo", name, *variant, "--epochs", str(args.epochs), "--seed", str(seed),
                   "--hidden", str(args.hidden), "--layers", str(args.layers), "--lr", str(args.lr),
                   "--model", args.model, *model_options,
                   "--dropout", str(args.dropout), "--weight-decay", str(args.weight_decay), "--threads", str(threads), "--eval-every", "1",
                   "--out", run, "--quiet", env={**env, "OMP_NUM_THREADS": str(threads),
                                                 "PYTHONPATH": str(REPO)})
            summary = json.loads((run / "summary.json").read_text())
            lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
            summary["metrics"] = lines
            steady = [l for l in lines if l["epoch"] >= summary["steady_state_from_epoch"]]
            summary["split"] = {k: float(np.median([l[k] for l in steady])) for k in (
                "epoch_time_s", "time_aggregate_s", "time_exchange_wait_s", "time_dense_s", "time_allreduce_s")}
            results.setdefault(algo, []).append(summary)

    def stat(algo: str, key: str) -> tuple[float, float]:
        values = [s[key] for s in results[algo]]
        return float(np.mean(values)), float(np.std(values))

    rf = results[args.algos[0]][0]["replication_factor"]
    model_label = {"sage": f"GraphSAGE ({args.aggregator})", "gcn": "GCN", "gin": "GIN",
                   "gat": f"GAT ({args.heads} heads)"}[args.model]
    twin_options = "".join(f" --{flag} {value:g}" for flag, value in (
        ("mean-degree", args.mean_degree), ("labelled-fraction", args.labelled_fraction)) if value is not None)
    roots = "" if args.roots == "balance" else f" (roots: {args.roots})"
    print(f"# Delayed-update algorithms: {args.dataset} --scale {args.scale:g}{twin_options}, {args.method}{roots} P={args.parts} "
          f"(replication factor {rf:.3f}), {args.layers}-layer {model_label} hidden {args.hidden}, "
          f"lr {args.lr:g}, dropout {args.dropout:g}, weight decay {args.weight_decay:g}, "
          f"{args.epochs} epochs, seeds {args.seeds}, {threads} thread(s) per rank")
    print(f"machine: {platform.node()}, {os.cpu_count()} cores; {datetime.date.today()}")
    print()
    print(f"| algo | apply | messages | test {metric} at best val (%) | epoch s (median, steady) | aggregate s | exchange wait s | dense s | allreduce s | fwd MB/epoch | bwd MB/epoch | grad MB/epoch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for algo in args.algos:
        acc, acc_std = stat(algo, "test_at_best_val")
        split = {k: float(np.median([s["split"][k] for s in results[algo]])) for k in results[algo][0]["split"]}
        mb = {k: stat(algo, k)[0] / 1e6 for k in ("bytes_forward", "bytes_backward", "bytes_gradients")}
        messages = results[algo][0].get("hyperparameters", {}).get("message_precision", "fp32")
        print(f"| {algo} | {results[algo][0]['apply']} | {messages} | {100 * acc:.2f} ± {100 * acc_std:.2f} | {split['epoch_time_s']:.4f} | "
              f"{split['time_aggregate_s']:.4f} | {split['time_exchange_wait_s']:.4f} | {split['time_dense_s']:.4f} | "
              f"{split['time_allreduce_s']:.4f} | {mb['bytes_forward']:.2f} | {mb['bytes_backward']:.2f} | "
              f"{mb['bytes_gradients']:.3f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "replication_factor": rf, "metric": metric,
            "algos": {algo: {"test": [s["test_at_best_val"] for s in runs],
                             "bytes_per_epoch": float(np.mean([s["bytes_forward"] + s["bytes_backward"]
                                                               for s in runs])),
                             "epoch_s": float(np.median([s["split"]["epoch_time_s"] for s in runs]))}
                      for algo, runs in results.items()}}, indent=1))
    plot = Path(args.plot) if args.plot else work / "algorithms.png"
    learning_curves({algo: [s["metrics"] for s in runs] for algo, runs in results.items()}, plot,
                    title=f"{args.dataset} x{args.scale:g}{twin_options}, {args.method}{roots} P={args.parts}", metric=metric)
    print(f"\nlearning curves: {plot}")
    failures = []
    if {"cd-0", "0c"} <= results.keys():
        gap = 100 * (stat("cd-0", "test_at_best_val")[0] - stat("0c", "test_at_best_val")[0])
        print(f"\n0c loses {gap:.2f} points of test {metric} to cd-0 (target >= 2)")
        if gap < 2:
            failures.append("0c does not lose 2 points to cd-0")
    if {"cd-0", "cd-5"} <= results.keys():
        gap = 100 * abs(stat("cd-5", "test_at_best_val")[0] - stat("cd-0", "test_at_best_val")[0])
        print(f"cd-5 is within {gap:.2f} points of cd-0 (target <= 1.0)")
        if gap > 1.0:
            failures.append("cd-5 is not within 1 point of cd-0")
    if {"cd-5", "0c"} <= results.keys():
        t5 = np.median([s["split"]["epoch_time_s"] for s in results["cd-5"]])
        t0 = np.median([s["split"]["epoch_time_s"] for s in results["0c"]])
        print(f"cd-5 epoch time / 0c epoch time = {t5 / t0:.3f} (target <= 1.1)")
        if t5 / t0 > 1.1:
            failures.append("cd-5 epoch time above 1.1x 0c's")
    if failures and not args.no_check:
        print("FAILED: " + "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
