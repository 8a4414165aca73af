"""Where the dense work runs: cd-0 with ``--apply root`` against ``--apply replicas``, side by side.

    python -m bench.apply [--dataset synth-reddit] [--scale 1] [--mean-degree D] [--parts 2]
                          [--epochs 6] [--repeats 3] [--memory-dataset synth-products]
                          [--memory-scale 0.5] [--out FILE]

1. Time: fetch the twin, partition it with Libra into P parts, train cd-0 under both apply modes
   (same weights and dropout masks: the two compute the same model), one thread per rank, the
   modes alternating for ``--repeats`` rounds. Per mode: median steady-state epoch (epoch 1 left
   out) over all rounds, its split (dense, aggregate, exchange wait; each the max over ranks),
   bytes per epoch by kind and direction, the largest rank's peak memory, and the ratio root /
   replicas. Both modes' losses must agree (1e-4 relative; 2e-2 under ``--precision bf16``, whose
   partials are rounded before the root sums them): a faster wrong answer does not count.
2. Memory: on ``--memory-dataset`` at ``--memory-scale``, cd-0 at P = 1 against P = 2 under both
   modes (a few epochs each): the sum over ranks of their peak memory against the P = 1 peak, and
   the memory estimate for the same dataset at scale 1, P = 2, from the assignment's figures (the
   parts of the full-size graph are not built).

The load average is printed before and after; the machine is shared, so repeat on a quiet one.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from bench.common import Transcript, machine_line, run_logged, work_folder

MODES = ("root", "replicas")


def partition(python: str, graph: Path, out: Path, parts: int, work: Path) -> Path:
    if not (out / "part_0.zarr").exists():
        run_logged(python, "-m", "distgnn", "partition", graph, "--parts", parts, "--method", "libra",
           "--out", out, "--quiet", "--force", log=work / f"partition-{out.name}.log")
    return out


def train(python: str, partdir: Path, parts: int, apply: str, run: Path, args, epochs: int) -> tuple[list, dict]:
    run_logged("mpiexec", "--oversubscribe", "-n", parts, python, "-m", "distgnn", "train", partdir,
       "--algo", "cd-0", "--apply", apply, "--epochs", epochs, "--layers", args.layers,
       "--hidden", args.hidden, "--dropout", args.dropout, "--threads", 1, "--eval-every", 0,
       "--precision", args.precision,
       "--out", run, "--quiet", "--skip-memory-check", log=run.with_suffix(".log"))
    records = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines() if l.strip()]
    return records, json.loads((run / "summary.json").read_text())


def load() -> str:
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def mib(b: float) -> str:
    return f"{b / 2**20:,.0f}"


def time_section(args, python: str, work: Path, say) -> bool:
    from distgnn.data.fetch import fetch

    graph = fetch(args.dataset, root=work / "data", scale=args.scale, mean_degree=args.mean_degree)
    partdir = partition(python, graph, work / "parts" / f"{graph.parent.name}-libra-{args.parts}",
                        args.parts, work)
    import zarr

    attrs = dict(zarr.open_group(str(partdir / "assignment.zarr"), mode="r").attrs)
    say(f"**{graph.parent.name}**: {attrs['num_nodes']:,} vertices, {attrs['num_edges']:,} edges; "
        f"Libra P = {args.parts}, replication factor {attrs['replication_factor']:.3f}; cd-0, "
        f"{args.layers} layers, hidden {args.hidden}, dropout {args.dropout}, {args.precision}, "
        f"1 thread per rank, "
        f"{args.epochs} epochs x {args.repeats} rounds per mode, alternating; load before: {load()}")
    steady: dict[str, list[dict]] = {m: [] for m in MODES}
    summaries, loss = {}, {}
    for rnd in range(args.repeats):
        for mode in (MODES if rnd % 2 == 0 else MODES[::-1]):
            records, summary = train(python, partdir, args.parts, mode, work / "runs" / f"{mode}-{rnd}",
                                     args, args.epochs)
            steady[mode] += records[1:]
            summaries[mode], loss[mode] = summary, np.array([r["loss"] for r in records])
    say("")
    say("| apply | epoch s (median) | dense s | aggregate s | exchange wait s | fwd MB | bwd MB | "
        "broadcast MB | reduce MB | peak MiB (largest rank) |")
    say("|---|---|---|---|---|---|---|---|---|---|")
    med = {}
    for mode in MODES:
        rs = steady[mode]
        m = {k: float(np.median([r[k] for r in rs])) for k in (
            "epoch_time_s", "time_dense_s", "time_aggregate_s", "time_exchange_wait_s",
            "bytes_forward", "bytes_backward", "bytes_broadcast", "bytes_reduce")}
        med[mode] = m
        say(f"| {mode} | {m['epoch_time_s']:.3f} | {m['time_dense_s']:.3f} | {m['time_aggregate_s']:.3f} | "
            f"{m['time_exchange_wait_s']:.3f} | {m['bytes_forward'] / 1e6:.2f} | {m['bytes_backward'] / 1e6:.2f} | "
            f"{m['bytes_broadcast'] / 1e6:.2f} | {m['bytes_reduce'] / 1e6:.2f} | "
            f"{mib(summaries[mode]['peak_rss_bytes'])} |")
    ratio = med["root"]["epoch_time_s"] / med["replicas"]["epoch_time_s"]
    dense = med["root"]["time_dense_s"] / max(med["replicas"]["time_dense_s"], 1e-12)
    say("")
    rf = attrs["replication_factor"]
    say(f"root / replicas: epoch {ratio:.3f}x, dense work {dense:.3f}x (replication factor "
        f"{rf:.3f}: the dense rows shrink by 1/RF); load after: {load()}")
    # where the saving comes from: apply-at-root removes dense work; the wait shrinks with it when
    # the ranks' dense work was what the exchange waited for
    saved = {k: med["replicas"][k] - med["root"][k] for k in (
        "epoch_time_s", "time_dense_s", "time_exchange_wait_s", "time_aggregate_s")}
    say(f"root saves {saved['epoch_time_s']:.3f} s per epoch: dense {saved['time_dense_s']:.3f} s, exchange "
        f"wait {saved['time_exchange_wait_s']:.3f} s, aggregation {saved['time_aggregate_s']:.3f} s; with "
        f"no dense work at all and nothing else changed the ratio would be "
        f"{(med['replicas']['epoch_time_s'] - med['replicas']['time_dense_s']) / med['replicas']['epoch_time_s']:.3f}x")
    tolerance = 1e-4 if args.precision == "fp32" else 2e-2
    same = np.allclose(loss["root"], loss["replicas"], rtol=tolerance)
    say(f"losses of the two modes agree to {tolerance:g}: {same}")
    return same


def memory_section(args, python: str, work: Path, say) -> None:
    from distgnn.data.fetch import fetch
    from distgnn.partition.assign import assign_graph
    from distgnn.scaling.rank_memory import (assignment_part_shapes, estimate_run_memory,
                                                estimate_shape)

    graph = fetch(args.memory_dataset, root=work / "data", scale=args.memory_scale)
    peaks, estimates = {}, {}
    for parts, mode in ((1, "root"), (2, "root"), (2, "replicas")):
        partdir = partition(python, graph, work / "parts" / f"{graph.parent.name}-libra-{parts}", parts, work)
        _, summary = train(python, partdir, parts, mode, work / "runs" / f"mem-P{parts}-{mode}", args,
                           args.memory_epochs)
        peaks[parts, mode] = summary["peak_rss_bytes_by_rank"]
        estimates[parts, mode] = [e.total for e in estimate_run_memory(partdir, args.layers, args.hidden,
                                                                         "cd-0", apply=mode)]
    one = peaks[1, "root"][0]
    say("")
    say(f"**Memory, {graph.parent.name}** (cd-0, {args.layers} layers, hidden {args.hidden}, "
        f"{args.memory_epochs} epochs): P = 1 peak {mib(one)} MiB")
    say("")
    say("| P | apply | peak MiB per rank | sum over ranks MiB | sum / P = 1 peak | estimate MiB per rank | peak / estimate |")
    say("|---|---|---|---|---|---|---|")
    for (parts, mode), per_rank in peaks.items():
        est = estimates[parts, mode]
        say(f"| {parts} | {mode} | {', '.join(mib(b) for b in per_rank)} | {mib(sum(per_rank))} | "
            f"{sum(per_rank) / one:.3f} | {', '.join(mib(e) for e in est)} | "
            f"{', '.join(f'{b / e:.2f}' for b, e in zip(per_rank, est))} |")
    # the full-size graph at P = 2, by the estimate, from the assignment's per-part figures
    full = fetch(args.memory_dataset, root=work / "data", scale=1.0) if args.memory_full else None
    if full is None:
        return
    out = work / "parts" / f"{full.parent.name}-libra-2"
    if not (out / "assignment.zarr").exists():
        assign_graph(full, 2, "libra", 0, out, overwrite=True)
    shapes = assignment_part_shapes(out)
    totals = {mode: [estimate_shape(shape, args.layers, args.hidden, "cd-0", k, apply=mode).total
                     for k, shape in enumerate(shapes)] for mode in MODES}
    budget = 24 * 2**30
    say("")
    say(f"Estimate for {full.parent.name} at P = 2 on one 24 GiB machine (from the assignment's "
        f"per-part figures): " + "; ".join(
            f"{mode} {mib(sum(t))} MiB ({', '.join(mib(x) for x in t)} per rank): "
            f"{'fits' if sum(t) <= budget else 'does not fit'}" for mode, t in totals.items()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="synth-reddit")
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--mean-degree", type=float, default=None)
    p.add_argument("--parts", type=int, default=2)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="as distgnn train --precision (bf16: dense work and gathered rows)")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--memory-dataset", default="synth-products")
    p.add_argument("--memory-scale", type=float, default=0.5)
    p.add_argument("--memory-epochs", type=int, default=3)
    p.add_argument("--memory-full", action="store_true",
                   help="also fetch the memory dataset at scale 1 and assign it (P = 2) for the estimate")
    p.add_argument("--skip-time", action="store_true")
    p.add_argument("--skip-memory", action="store_true")
    p.add_argument("--work", help="work folder (kept; default: a temporary folder)")
    p.add_argument("--out", help="also append the output to this file")
    args = p.parse_args(argv)
    work = work_folder(args.work, "bench-apply-")
    (work / "runs").mkdir(exist_ok=True)
    say = Transcript()
    say(f"`python -m bench.apply {' '.join(argv if argv is not None else sys.argv[1:])}`; {machine_line(1)}")
    ok = True
    if not args.skip_time:
        ok = time_section(args, sys.executable, work, say)
    if not args.skip_memory:
        memory_section(args, sys.executable, work, say)
    say.append_to(args.out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
