"""The scaling model, calibrated and checked on this machine, then extrapolated to 128 sockets.

    python -m bench.scaling [--scale 0.05] [--epochs 5] [--papers-scale 0.001] [--work DIR]
                            [--calibration OUT.json] [--markdown OUT.md] [--plot OUT.png]

1. synth-reddit at ``--scale``: partition with libra at P = 1, 2 (built) and assign at P = 4, 8, 16;
   fit RF(P) = 1 + a (P - 1)^b on P = 2 ... 16 (law and residuals printed). The same for a
   synth-papers100M twin at ``--papers-scale`` (its degree distribution; mean degree kept).
2. MPI microbenchmark under ``mpiexec -n 2``: ping-pong, Alltoallv, Allreduce, copy cost; fits the
   network model (latency, bandwidth) used below.
3. Train cd-0 at P = 1 with 1 thread (3 layers, hidden 256): fit the compute costs on it alone.
   The aggregation's split between edges and destination rows (what one row costs in edges) is
   timed on the synth-papers100M twin and on its half-edge version: that twin has the target's
   mean degree (14.5), where rows weigh; on the calibration graph (mean degree 233) rows are a
   few percent of the work and the split is poorly determined (its figure is printed beside).
4. Train cd-0, cd-5 (its default rule), cd-5 under the first rule (``--cdr-rule delayed``) and
   with ``--fresh-copies`` (each under apply-at-root, their default) and 0c (on the replicas) at
   P = 2, 1 thread per rank: the model (costs from P = 1, RF from the
   law, network and the two-ranks-on-one-machine slowdown from the microbenchmark) must predict
   their steady-state epoch time within 25% (cd-5's steady state starts after 2r epochs).
   The error is printed; the script exits 1 when it is larger.
5. Predict epoch time and speedup for P = 1 ... 128 for the calibration graph and for a
   papers100M-shaped graph (100 Gb/s InfiniBand; compute as measured here and as a 16x faster
   socket), with what dominates; compared with DistGNN's reported 97x at 128 sockets both
   against our own P = 1 and against DGL's one-socket epoch (the ratio bench.epoch measured,
   :data:`DGL_OVER_OURS`), with the gap to 97x term by term.

Checking on a machine with a core per rank (bench/device_scaling.sh does this): ``--check-ranks
4,8,16`` runs step 4 at those P (their partitions built) instead of P = 2, ``--variants`` keeps
some of its contenders, ``--mpiexec-args '--map-by core --bind-to core'`` binds each rank to a core,
``--one-socket-threads T`` also trains cd-0 at P = 1 on T threads (unbound: the one-socket
reference), ``--concurrency-at-check-ranks`` measures the slowdown of P ranks computing at once
(:mod:`bench.concurrency`) and predicts with it beside the two-rank figure, ``--final-eval`` records
each run's test accuracy, ``--json`` writes every figure after every run, ``--deadline`` stops
training runs at a time (finished epochs count) and ``--keep-going`` reports a failed run and goes
on. Without these options the bench runs as above.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, replace
import os
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import run_logged, work_folder

LAYERS, HIDDEN = 3, 256
TOLERANCE = 0.25
PAPER_SPEEDUP_128 = 97.0
#: DGL 1.1.3's one-socket epoch over ours (P = 1), 3-layer GraphSAGE hidden 256 on R24, as measured
#: by ``python -m bench.epoch`` (bench/results/epoch-intel-256-2026-12-03.txt): 2.40x against DGL
#: as users run it, 1.85x against DGL on 2 MB pages (like for like). DistGNN's 97x is its
#: 128-socket epoch against DGL on one socket, so ours against DGL is our own speedup times this.
DGL_OVER_OURS = {"as users run it": 2.40, "like for like (2 MB pages)": 1.85}


@dataclass(frozen=True)
class Variant:
    """One contender: ``distgnn train --algo ALGO --apply APPLY`` and cd-r's options (None: the
    train default)."""

    algo: str
    apply: str = "auto"
    fresh_copies: bool | None = None
    rule: str | None = None
    budget: float | None = None
    messages: str | None = None   #: --message-precision (None: the train default)

    def options(self) -> list[str]:
        copies = {True: ["--fresh-copies"], False: ["--no-fresh-copies"]}.get(self.fresh_copies, [])
        return (copies
                + (["--cdr-rule", self.rule] if self.rule else [])
                + (["--recompute-budget", f"{self.budget:g}"] if self.budget is not None else [])
                + (["--message-precision", self.messages] if self.messages else []))

    def model_options(self) -> dict:
        from distgnn.train.config import TrainConfig

        return {"fresh_copies": self.fresh_copies, "rule": self.rule or TrainConfig.cdr_rule,
                "recompute_budget": self.budget} | ({"messages": self.messages} if self.messages else {})

    @property
    def name(self) -> str:
        return "-".join([self.algo] + [o.lstrip("-") for o in self.options()])


class Stopped(SystemExit):
    """A SIGTERM under --deadline: ends the bench (--keep-going does not go on after it)."""


#: step 4's contenders: each algorithm at its default, cd-5 under its first rule and with --fresh-copies
VALIDATION = (Variant("cd-0"), Variant("cd-5"), Variant("cd-5", rule="delayed"),
              Variant("cd-5", fresh_copies=True, rule="delayed"), Variant("0c"))


def machine_facts() -> dict:
    """The CPU model, cores seen and load average, for --json."""
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), model)
    except OSError:
        pass
    return {"node": platform.node(), "cpu": model, "cores_visible": os.cpu_count(),
            "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "load_average": os.getloadavg(), "python": platform.python_version()}


def assignment_attrs(partdir: Path) -> dict:
    import zarr

    return dict(zarr.open_group(str(partdir / "assignment.zarr"), mode="r").attrs)


def replication_law(python: str, graph: Path, work: Path, parts: list[int], build: set[int]):
    """Partition ``graph`` at each P (``build``: also build the parts) and fit the RF law."""
    from distgnn.scaling.replication import fit_replication

    rfs, eb, vb, dirs = [], [], [], {}
    for p in parts:
        out = graph.parent / "partitions" / f"libra-{p}"
        if p in build:
            if not (out / f"part_{p - 1}.zarr").exists():
                run_logged(python, "-m", "distgnn", "partition", graph, "--parts", p, "--out", out, "--force",
                   "--quiet", log=work / f"partition-{graph.parent.name}-{p}.log")
        elif not (out / "assignment.zarr").exists():
            run_logged(python, "-m", "distgnn", "partition", "assign", graph, "--parts", p, "--out", out,
               "--quiet", log=work / f"assign-{graph.parent.name}-{p}.log")
        a = assignment_attrs(out)
        rfs.append(a["replication_factor"])
        eb.append(a.get("edge_balance", 1.0))
        vb.append(a.get("vertex_balance", 1.0))
        dirs[p] = out
    law = fit_replication(parts, rfs, eb, vb)
    law.leaf_in_fraction, law.leaf_out_fraction = leaf_fractions(graph, dirs[max(parts)])
    return law, dict(zip(parts, rfs)), dirs


def leaf_fractions(graph: Path, partdir: Path) -> tuple[float, float]:
    """The leaves with local in- and out-edges of ``partdir``'s assignment, as fractions."""
    import zarr

    from distgnn.data.graph_store import GraphStore
    from distgnn.scaling.replication import leaf_edge_fractions

    assignment = zarr.open_group(str(partdir / "assignment.zarr"), mode="r")
    indptr, indices = GraphStore.open(graph).csr()
    return leaf_edge_fractions(indptr, indices, assignment["edge_part"][:], assignment["root"][:])


def add_leaf_fractions(calibration: Path, work: Path, scale: float, papers_scale: float) -> None:
    """Step 1's leaf fractions only, written into an existing calibration (one made before the
    model counted the compact tables); its laws and costs are kept."""
    from distgnn.data.fetch import fetch

    cal = json.loads(calibration.read_text())
    for key, name, s in (("replication", "synth-reddit", scale),
                         ("papers_replication", "synth-papers100M", papers_scale)):
        graph = fetch(name, root=work / "data", scale=s)
        parts = max(cal[key].get("fitted_parts") or [16])
        out = graph.parent / "partitions" / f"libra-{parts}"
        if not (out / "assignment.zarr").exists():
            run_logged(sys.executable, "-m", "distgnn", "partition", "assign", graph, "--parts",
                       parts, "--out", out, "--quiet", log=work / f"assign-{name}-{parts}.log")
        f_in, f_out = leaf_fractions(graph, out)
        cal[key].update(leaf_in_fraction=f_in, leaf_out_fraction=f_out)
        print(f"{graph.parent.name}, libra P = {parts}: leaves with local in-edges {f_in:.3f}, "
              f"with local out-edges {f_out:.3f}")
    calibration.write_text(json.dumps(cal, indent=1) + "\n")


def steady_records(records: list[dict], algo: str) -> list[dict]:
    """A run's steady-state records: past epoch 1 (it builds caches), and for cd-r past 2r more."""
    from distgnn.vocabulary import parse_algorithm

    skip = 1 + 2 * parse_algorithm(algo).delay
    return records[skip:] if len(records) > skip else records


def read_metrics(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


def train(python: str, partdir: Path, algo: str, parts: int, epochs: int, run: Path, log: Path,
          *extra: str, mpiexec: tuple[str, ...] = ("--oversubscribe",), threads: int = 1,
          final_eval: bool = False, timeout: float | None = None,
          env: dict | None = None, launcher: tuple | None = None) -> list[dict]:
    """Steady-state records of a run: past epoch 1 (it builds caches), and for cd-r past 2r more
    epochs (run on top of ``epochs``); ``extra``: more ``distgnn train`` options; ``mpiexec``:
    mpiexec's options; ``threads`` per rank; ``final_eval``: evaluate at the last epoch;
    ``timeout``: see :func:`bench.common.run_logged` (a stopped run's records stay in its
    metrics.jsonl); ``launcher``: the command that starts the ranks, instead of mpiexec's."""
    from distgnn.vocabulary import parse_algorithm

    delay = parse_algorithm(algo).delay
    total = epochs + 2 * delay
    launcher = launcher or ("mpiexec", *mpiexec, "-n", parts)
    run_logged(*launcher, python, "-m", "distgnn", "train", partdir, "--algo", algo,
       "--epochs", total, "--layers", LAYERS, "--hidden", HIDDEN, "--threads", threads,
       "--eval-every", total if final_eval else 0, "--out", run, "--quiet", *extra, log=log,
       timeout=timeout, env=env)
    return steady_records(read_metrics(run), algo)


def without_binding(args: list[str]) -> list[str]:
    """mpiexec options less any binding (``--bind-to X``), for a run of one rank on many threads."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "--bind-to":
            skip = True
        elif not a.startswith("--bind-to="):
            out.append(a)
    return out


def run_summary(run: Path, records: list[dict], steady: list[dict]) -> dict:
    """What --json keeps of one training run: medians of its steady epochs, its last test
    accuracy, the epochs it finished."""
    keys = ("epoch_time_s", "time_aggregate_s", "time_dense_s", "time_exchange_wait_s", "time_allreduce_s")
    med = {k: float(np.median([r[k] for r in steady])) for k in keys if steady and all(k in r for r in steady)}
    acc = [r for r in records if "test" in r]
    out = {"run": str(run), "epochs_done": len(records), "steady_epochs": len(steady), **med,
           "epoch_times_s": [r.get("epoch_time_s") for r in records]}
    if acc:
        out.update(test=acc[-1]["test"], val=acc[-1].get("val"), train=acc[-1].get("train"),
                   eval_epoch=acc[-1]["epoch"])
    if (run / "summary.json").exists():
        summary = json.loads((run / "summary.json").read_text())
        out["replication_factor"] = summary.get("replication_factor")
        out["peak_rss_bytes"] = summary.get("peak_rss_bytes")
    return out


def predictions(graph, costs, law, papers_law, papers_name: str, say, plot: str | None = None) -> None:
    """Step 5: predicted epoch time and speedup at P = 1 ... 128, for the calibration graph and a
    papers100M-shaped graph (its RF law ``papers_law``, measured on ``papers_name``), said line by
    line through ``say``; the speedup plot (PNG) written to ``plot`` if given."""
    from distgnn.commands.scaling_model import GRAPHS, format_table, row_label
    from distgnn.scaling.costs import GraphShape, ModelShape
    from distgnn.scaling.model import speedup_table
    from distgnn.scaling.network import NetworkModel

    model = ModelShape(LAYERS, HIDDEN)
    parts = [1, 2, 4, 8, 16, 32, 64, 128]
    ib = NetworkModel()
    # each algorithm at its default, cd-5 under its first rule and with --fresh-copies, and cd-5
    # on the replicas for the gain of apply-at-root
    contenders = [Variant("cd-0"), Variant("cd-5"), Variant("cd-5", rule="delayed"),
                  Variant("cd-5", fresh_copies=True, rule="delayed"),
                  Variant("cd-5", "replicas"), Variant("0c")]

    def table(shape, c, law_):
        return [row for v in contenders
                for row in speedup_table(shape, model, c, law_, ib, [v.algo], parts, apply=v.apply,
                                         **v.model_options())]

    def label(row: dict) -> str:
        return f"{row_label(row)} ({row['apply']})"

    say("Calibration graph, 100 Gb/s InfiniBand, compute as measured here (1 thread per rank):")
    say()
    say(format_table(table(graph, costs, law), graph, law, ib))
    say()
    papers = GraphShape(*GRAPHS["ogbn-papers100M"], name="ogbn-papers100M")
    tables = {}
    for speedup in (1.0, 16.0):
        rows = table(papers, costs.scaled(speedup), papers_law)
        tables[speedup] = rows
        say(f"papers100M shape, RF law of {papers_name}, 100 Gb/s InfiniBand, compute "
            + ("as measured here (one thread per socket)" if speedup == 1 else f"{speedup:g}x faster per socket "
               "(a 28-core socket against the one thread measured here, memory-bound)") + ":")
        say()
        say(format_table([r for r in rows if r["P"] in (1, 16, 32, 64, 128)], papers, papers_law, ib))
        say()
    for speedup, rows in tables.items():
        say(f"compute x{speedup:g}: speedup at 128 sockets " + ", ".join(
            f"{label(r)} {r['speedup']:.1f}x ({r['dominant']} dominates: aggregate {r['aggregate_s']:.2f} s, dense "
            f"{r['dense_s']:.2f} s, exchange {r['exchange_s']:.2f} s)" for r in rows if r["P"] == 128)
            + f"; DistGNN reported {PAPER_SPEEDUP_128:g}x")
    say()
    say(f"Against DGL 1.1.3 on one socket (DistGNN's 97x counts so): our speedup at 128 sockets "
        f"times DGL's one-socket epoch over ours, from bench.epoch ("
        + ", ".join(f"{k}: {x:.2f}x" for k, x in DGL_OVER_OURS.items()) + "), compute as measured:")
    say()
    say("| algo | apply | vs our P = 1 | " + " | ".join(f"vs DGL, {k}" for k in DGL_OVER_OURS)
        + " | gap to 97x (like for like) |")
    say("|---|---|---|" + "---|" * len(DGL_OVER_OURS) + "---|")
    for r in (r for r in tables[1.0] if r["P"] == 128):
        like = r["speedup"] * DGL_OVER_OURS["like for like (2 MB pages)"]
        say(f"| {row_label(r)} | {r['apply']} | {r['speedup']:.1f}x | "
            + " | ".join(f"{r['speedup'] * x:.1f}x" for x in DGL_OVER_OURS.values())
            + f" | {like / PAPER_SPEEDUP_128:.2f} of 97x |")
    base = tables[1.0][0]["epoch_s"] * tables[1.0][0]["speedup"]  # the P = 1 epoch
    needed = base * DGL_OVER_OURS["like for like (2 MB pages)"] / PAPER_SPEEDUP_128
    say()
    say(f"Gap to 97x against DGL like for like, term by term at 128 sockets: 97x needs an epoch of "
        f"{needed:.2f} s (P = 1: {base:.1f} s x {DGL_OVER_OURS['like for like (2 MB pages)']:.2f} / 97).")
    for r in (r for r in tables[1.0] if r["P"] == 128 and r["algo"] == "cd-5" and r["apply"] == "root"):
        say(f"- {row_label(r)}: epoch {r['epoch_s']:.2f} s = aggregate {r['aggregate_s']:.2f} + dense "
            f"{r['dense_s']:.2f} + exchange {r['exchange_s']:.2f} + allreduce {r['allreduce_s']:.3f} "
            f"+ overhead; {r['epoch_s'] - needed:+.2f} s from 97x")
    if plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for speedup, style in ((1.0, "-"), (16.0, "--")):
            for i, key in enumerate(dict.fromkeys(label(r) for r in tables[speedup])):
                rows = [r for r in tables[speedup] if label(r) == key]
                ax.plot([r["P"] for r in rows], [r["speedup"] for r in rows], style, marker="o", ms=3,
                        color=f"C{i}", label=key if speedup == 1.0 else None)
        ax.plot([], [], "-", color="black", label="compute as measured (1 thread)")
        ax.plot([], [], "--", color="black", label="compute 16x faster per socket")
        ax.plot(parts, parts, ":", color="grey", label="linear")
        ax.plot([128], [PAPER_SPEEDUP_128], "k*", ms=10, label="DistGNN reported (97x)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("sockets (ranks)")
        ax.set_ylabel("predicted speedup over one socket")
        ax.set_title("papers100M shape, 3-layer GraphSAGE 256, 100 Gb/s InfiniBand (model)", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(plot, dpi=120)
        plt.close(fig)


def redraw(calibration: Path, markdown: str | None, plot: str | None) -> int:
    """Step 5 alone from ``calibration`` (CAL.json of an earlier run): the same tables and plot
    that run would draw with the calibration as it is now (e.g. after its papers law was
    measured at full size)."""
    from distgnn.commands.scaling_model import _papers_law, load_calibration

    graph, costs, law, _ = load_calibration(calibration)
    papers_law = _papers_law(calibration)
    if papers_law is None:
        sys.exit(f"--redraw {calibration}: no papers_replication law in it")
    measured_on = json.loads(calibration.read_text())["papers_replication"].get("measured_on")
    out: list[str] = [f"`python -m bench.scaling --redraw {calibration}`: the predictions of that "
                      f"calibration; GraphSAGE {LAYERS} layers, hidden {HIDDEN}.", ""]

    def say(line: str = "") -> None:
        print(line, flush=True)
        out.append(line)

    predictions(graph, costs, law, papers_law, measured_on or "the calibration's papers twin", say, plot)
    if markdown:
        Path(markdown).write_text("\n".join(out) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=0.05, help="synth-reddit scale of the check")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--papers-scale", type=float, default=0.001)
    parser.add_argument("--work")
    parser.add_argument("--calibration", help="write the calibration (CAL.json for distgnn scaling-model)")
    parser.add_argument("--markdown", help="write the tables here")
    parser.add_argument("--plot", help="write the speedup plot (PNG) here")
    parser.add_argument("--leaf-fractions-into", metavar="CAL.json", type=Path,
                        help="only measure the leaf fractions (step 1) and add them to this "
                             "existing calibration, keeping everything else")
    parser.add_argument("--check-ranks", default="2", metavar="P,...",
                        help="ranks of the held-out runs of step 4, in the order run (default 2); "
                             "their partitions are built")
    parser.add_argument("--variants", metavar="NAME,...",
                        help="step 4's contenders to run (default all): " + ", ".join(v.name for v in VALIDATION))
    parser.add_argument("--mpiexec-args", default="--oversubscribe",
                        help="mpiexec's options in every MPI run (default --oversubscribe; with a core "
                             "per rank: '--map-by core --bind-to core')")
    parser.add_argument("--train-args", default="",
                        help="more distgnn train options for every training run (e.g. --skip-memory-check)")
    parser.add_argument("--one-socket-threads", type=int, default=0, metavar="T",
                        help="also train cd-0 at P = 1 on T threads, unbound (the one-socket reference)")
    parser.add_argument("--concurrency-at-check-ranks", action="store_true",
                        help="measure the slowdown of P ranks computing at once (bench.concurrency) "
                             "at each checked P and predict with it too")
    parser.add_argument("--final-eval", action="store_true",
                        help="evaluate at the last epoch of every training run (test accuracy in --json)")
    parser.add_argument("--json", metavar="OUT.json",
                        help="write the measured and predicted figures here, after every run")
    parser.add_argument("--deadline", type=float, metavar="S",
                        help="seconds from the start: training runs still going then are stopped "
                             "(their finished epochs count), later ones skipped")
    parser.add_argument("--redraw", metavar="CAL.json", type=Path,
                        help="only step 5, from an existing calibration: its tables (printed, and "
                             "to --markdown) and the plot (--plot); nothing is measured")
    parser.add_argument("--keep-going", action="store_true",
                        help="a failed run of step 4 is reported and skipped instead of ending the bench")
    parser.add_argument("--microbench-repeats", type=int, default=11, metavar="N",
                        help="repeats of each step 2 measurement (median taken; default 11)")
    args = parser.parse_args(argv)
    if args.leaf_fractions_into:
        add_leaf_fractions(args.leaf_fractions_into, work_folder(args.work, "bench-scaling-"),
                           args.scale, args.papers_scale)
        return 0
    if args.redraw:
        return redraw(args.redraw, args.markdown, args.plot)
    from distgnn.data.fetch import fetch
    from distgnn.scaling.costs import GraphShape, ModelShape, fit_costs
    from distgnn.scaling.model import predict_epoch
    from distgnn.scaling.network import NetworkModel
    from distgnn.scaling.replication import ReplicationLaw

    work = work_folder(args.work, "bench-scaling-")
    python = sys.executable
    started = time.monotonic()
    if args.deadline is not None:
        import signal

        def stopped(signum, frame):  # a SIGTERM (an outer time limit) ends the run in progress too
            raise Stopped(f"bench.scaling: stopped by signal {signum}")
        signal.signal(signal.SIGTERM, stopped)
    checks = [int(p) for p in args.check_ranks.split(",") if p.strip()]
    wanted = [n.strip() for n in args.variants.split(",")] if args.variants else None
    unknown = sorted(set(wanted or []) - {v.name for v in VALIDATION})
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)} (known: {', '.join(v.name for v in VALIDATION)})")
    variants = [v for v in VALIDATION if wanted is None or v.name in wanted]
    mpiexec = tuple(shlex.split(args.mpiexec_args))
    train_args = tuple(shlex.split(args.train_args))
    results: dict = {"machine": machine_facts(), "options": vars(args) | {"leaf_fractions_into": None},
                     "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "runs": [],
                     "skipped": []}

    def dump() -> None:
        if args.json:
            results["elapsed_s"] = time.monotonic() - started
            tmp = Path(args.json + ".tmp")
            tmp.write_text(json.dumps(results, indent=1, default=str) + "\n")
            tmp.replace(args.json)

    def left() -> float | None:
        return None if args.deadline is None else args.deadline - (time.monotonic() - started)

    def timed_train(partdir: Path, algo: str, parts: int, run: Path, log: Path, *extra: str,
                    threads: int = 1, mpi: tuple[str, ...] = mpiexec, env: dict | None = None) -> dict:
        """One training run under the deadline: its records, steady records and how it ended."""
        t0 = time.monotonic()
        status = "ok"
        try:
            train(python, partdir, algo, parts, args.epochs, run, log, *extra, *train_args, mpiexec=mpi,
                  threads=threads, final_eval=args.final_eval, timeout=left(), env=env)
        except TimeoutError:
            status = "stopped at the deadline"
        records = read_metrics(run)
        steady = steady_records(records, algo)
        if status != "ok" and len(steady) == len(records):  # stopped before its steady state
            steady = []
        return {"records": records, "steady": steady, "status": status, "wall_s": time.monotonic() - t0}
    out: list[str] = [f"Machine: {platform.node()}, {os.cpu_count()} cores; `python -m bench.scaling "
                      f"--scale {args.scale:g} --epochs {args.epochs}`; GraphSAGE {LAYERS} layers, hidden {HIDDEN}.", ""]

    def say(line: str = "") -> None:
        print(line, flush=True)
        out.append(line)

    # 1. replication laws
    graph_path = fetch("synth-reddit", root=work / "data", scale=args.scale)
    import zarr

    gattrs = dict(zarr.open_group(str(graph_path), mode="r").attrs)
    graph = GraphShape(int(gattrs["num_nodes"]), int(gattrs["num_edges"]), int(gattrs["feat_dim"]),
                       int(gattrs["num_classes"]), name=graph_path.parent.name)
    law, rfs, dirs = replication_law(python, graph_path, work, sorted({1, 2, 4, 8, 16} | set(checks)),
                                     build={1} | set(checks))
    say(f"**{graph.name}** ({graph.num_nodes:,} vertices, {graph.num_edges:,} edges), libra: measured RF "
        + ", ".join(f"P={p}: {r:.3f}" for p, r in rfs.items()))
    say(f"fitted on P = 2 ... 16: {law.describe()}; at P = 16, leaves with local in-edges "
        f"{law.leaf_in_fraction:.3f}, with out-edges {law.leaf_out_fraction:.3f}")
    papers_path = fetch("synth-papers100M", root=work / "data", scale=args.papers_scale)
    papers_law, papers_rfs, _ = replication_law(python, papers_path, work, [1, 2, 4, 8, 16], build=set())
    say(f"**{papers_path.parent.name}**, libra: measured RF " +
        ", ".join(f"P={p}: {r:.3f}" for p, r in papers_rfs.items()))
    say(f"fitted on P = 2 ... 16: {papers_law.describe()}; extrapolated RF(32, 64, 128) = "
        + ", ".join(f"{papers_law(p):.2f}" for p in (32, 64, 128))
        + f"; at P = 16, leaves with local in-edges {papers_law.leaf_in_fraction:.3f}, with "
          f"out-edges {papers_law.leaf_out_fraction:.3f} (held beyond: compact rows, "
          "docs/design.md#compact-rows)")
    say()
    extrapolated = papers_law
    kept = (json.loads(Path(args.calibration).read_text()).get("papers_replication", {})
            if args.calibration and Path(args.calibration).exists() else {})
    if kept.get("measured"):
        # RF measured on the full-size twin (bench/papers_scale.py calibrate) outranks this fit
        papers_law = ReplicationLaw.from_dict(kept)
        say(f"the papers law kept from {args.calibration}: {papers_law.describe()}")
        say()
    results.update(graph=graph.__dict__, rf=rfs, replication=law.to_dict(), papers_rf=papers_rfs,
                   papers_replication=papers_law.to_dict())
    dump()

    # 2. network
    mb_path = work / "microbench.json"
    run_logged("mpiexec", *mpiexec, "-n", 2, python, "-m", "distgnn.scaling.microbench", mb_path,
               "--repeats", args.microbench_repeats, log=work / "microbench.log")
    mb = json.loads(mb_path.read_text())
    net = NetworkModel.from_dict(mb["network"])
    say(f"MPI microbenchmark (2 ranks, this machine): Alltoallv latency {net.latency * 1e6:.1f} us, "
        f"bandwidth {net.bandwidth / 1e9:.2f} GB/s; Allreduce latency {net.allreduce_latency * 1e6:.1f} us, "
        f"bandwidth {net.allreduce_bandwidth / 1e9:.2f} GB/s; {net.source}; copies "
        f"{mb['copy_s_per_float'] * 1e9:.2f} ns/float; two ranks computing at once on this machine: "
        f"aggregation {mb['concurrency_agg']:.2f}x, dense {mb['concurrency_dense']:.2f}x slower than one alone")

    # 3. compute costs from P = 1
    model = ModelShape(LAYERS, HIDDEN)
    results.update(microbench=mb, network=net.to_dict())
    dump()
    p1_run = timed_train(dirs[1], "cd-0", 1, work / "runs" / "cd-0-P1", work / "train-P1.log")
    p1 = p1_run["steady"]
    if not p1:
        sys.exit(f"the P = 1 run finished no epoch ({p1_run['status']}): see {work / 'train-P1.log'}")
    from distgnn.data.graph_store import GraphStore
    from distgnn.scaling.costs import measure_row_cost

    own_cost, t_full, t_half = measure_row_cost(*GraphStore.open(graph_path).csr(), width=HIDDEN, threads=1)
    papers_store = GraphStore.open(papers_path)
    row_cost, p_full, p_half = measure_row_cost(*papers_store.csr(), width=HIDDEN, threads=1)
    say(f"aggregation kernel, 1 thread, width {HIDDEN}, on {papers_path.parent.name} (mean degree "
        f"{papers_store.num_edges / papers_store.num_nodes:.1f}): "
        f"{p_full:.3f} s, on its half-edge version {p_half:.3f} s: one destination row costs "
        f"{row_cost:.1f} edges (used); on the P = 1 calibration graph {t_full:.3f} s / {t_half:.3f} s, "
        f"{own_cost:.1f} edges (not used: rows are {100 * graph.num_nodes / graph.num_edges:.1f}% of its edges)")
    costs = fit_costs(p1, graph, model, mb["copy_s_per_float"], threads=1,
                      concurrency_agg=mb["concurrency_agg"], concurrency_dense=mb["concurrency_dense"],
                      agg_row_per_edge=row_cost)
    say(f"compute costs (P = 1, 1 thread): aggregation {costs.agg_s_per_edge_col * 1e9:.3f} ns per edge-column, "
        f"dense {costs.dense_s_per_vertex_unit * 1e12:.2f} ps per vertex-width^2, overhead {costs.overhead_s:.3f} s; "
        f"measured epoch {np.median([r['epoch_time_s'] for r in p1]):.3f} s")
    results.update(costs=costs.to_dict(), row_cost={
        "papers": {"edges_per_row": row_cost, "full_s": p_full, "half_s": p_half},
        "calibration_graph": {"edges_per_row": own_cost, "full_s": t_full, "half_s": t_half}},
        p1={"algo": "cd-0", "apply": "root", "P": 1, "threads": 1, "status": p1_run["status"],
            "wall_s": p1_run["wall_s"], "predicted_s": predict_epoch(1, "cd-0", graph, model, costs, law, net).total_s,
            **run_summary(work / "runs" / "cd-0-P1", p1_run["records"], p1)})
    dump()
    if args.one_socket_threads:
        t = args.one_socket_threads
        if left() is not None and left() <= 0:
            results["skipped"].append(f"cd-0 P=1 {t} threads (deadline)")
            say(f"cd-0 at P = 1 on {t} threads: skipped (deadline)")
        else:
            one = timed_train(dirs[1], "cd-0", 1, work / "runs" / f"cd-0-P1-T{t}", work / f"train-P1-T{t}.log",
                              threads=t, mpi=tuple(["--bind-to", "none"] + without_binding(list(mpiexec))),
                              env={"OMP_NUM_THREADS": str(t)})
            results["one_socket"] = {"algo": "cd-0", "apply": "root", "P": 1, "threads": t, "status": one["status"],
                                     "wall_s": one["wall_s"],
                                     **run_summary(work / "runs" / f"cd-0-P1-T{t}", one["records"], one["steady"])}
            dump()
            if one["steady"]:
                say(f"cd-0 at P = 1 on {t} threads (unbound, one socket): measured epoch "
                    f"{results['one_socket']['epoch_time_s']:.3f} s ({one['status']})")
    say()

    # 4. validation at P = 2 (--check-ranks)
    concurrent = args.concurrency_at_check_ranks
    say("| algo | apply | P | measured epoch s (median) | predicted s | error | aggregate s meas/pred | dense s meas/pred | exchange s meas/pred |"
        + (" predicted s, concurrency of P ranks | error |" if concurrent else ""))
    say("|---|---|---|---|---|---|---|---|---|" + ("---|---|" if concurrent else ""))
    failures = []
    validation = []
    for parts in checks:
        costs_at_p = None
        if concurrent and parts > 1 and (left() is None or left() > 0):
            conc_path = work / f"concurrency-P{parts}.json"
            try:
                run_logged("mpiexec", *mpiexec, "-n", parts, python, "-m", "bench.concurrency", conc_path,
                           log=work / f"concurrency-P{parts}.log", timeout=left())
                conc = json.loads(conc_path.read_text())
                results.setdefault("concurrency_at", {})[parts] = conc
                costs_at_p = replace(costs, concurrency_agg=conc["concurrency_agg"],
                                     concurrency_dense=conc["concurrency_dense"])
            except (TimeoutError, SystemExit) as exc:
                if isinstance(exc, Stopped) or (not args.keep_going and not isinstance(exc, TimeoutError)):
                    raise
                results["skipped"].append(f"concurrency at P={parts}: {str(exc)[:300]}")
            dump()
        for v in variants:
            label = " ".join([v.algo] + v.options())
            if left() is not None and left() <= 0:
                results["skipped"].append(f"{label} P={parts} (deadline)")
                dump()
                continue
            run = work / "runs" / f"{v.name}-P{parts}"
            try:
                done = timed_train(dirs[parts], v.algo, parts, run, work / f"train-{v.name}-P{parts}.log",
                                   *v.options())
            except SystemExit as exc:
                if not args.keep_going or isinstance(exc, Stopped):
                    raise
                say(f"| {label} | - | {parts} | failed: {str(exc).splitlines()[0][:200]} |")
                results["runs"].append({"algo": v.algo, "label": label, "P": parts, "status": "failed",
                                        "error_text": str(exc)[-3000:]})
                dump()
                continue
            recs = done["steady"]
            if not recs:
                results["runs"].append({"algo": v.algo, "label": label, "P": parts, "status": done["status"],
                                        "epochs_done": len(done["records"]), "steady_epochs": 0})
                say(f"| {label} | - | {parts} | no steady-state epoch ({done['status']}, "
                    f"{len(done['records'])} epochs) |")
                dump()
                continue
            meas = float(np.median([r["epoch_time_s"] for r in recs]))
            pred = predict_epoch(parts, v.algo, graph, model, costs, law, net, ranks_per_node=parts,
                                 **v.model_options())
            err = (pred.total_s - meas) / meas
            med = {k: float(np.median([r[k] for r in recs])) for k in ("time_aggregate_s", "time_dense_s", "time_exchange_wait_s")}
            row = (f"| {label} | {pred.apply} | {parts} | {meas:.3f} | {pred.total_s:.3f} | {100 * err:+.1f}% | {med['time_aggregate_s']:.3f}/{pred.aggregate_s:.3f} | "
                   f"{med['time_dense_s']:.3f}/{pred.dense_s:.3f} | {med['time_exchange_wait_s']:.3f}/{pred.exchange_s:.3f} |")
            entry = {"algo": v.algo, "label": label, "variant": v.name, "apply": pred.apply, "P": parts,
                     "status": done["status"], "wall_s": done["wall_s"], "measured_s": meas,
                     "predicted": pred.__dict__ | {"total_s": pred.total_s}, "error": err,
                     **run_summary(run, done["records"], recs)}
            if costs_at_p is not None:
                pred_p = predict_epoch(parts, v.algo, graph, model, costs_at_p, law, net, ranks_per_node=parts,
                                       **v.model_options())
                entry["predicted_at_p_concurrency"] = pred_p.__dict__ | {"total_s": pred_p.total_s}
                entry["error_at_p_concurrency"] = (pred_p.total_s - meas) / meas
                row += f" {pred_p.total_s:.3f} | {100 * entry['error_at_p_concurrency']:+.1f}% |"
            elif concurrent:
                row += " - | - |"
            say(row)
            results["runs"].append(entry)
            dump()
            validation.append({"algo": label, "apply": pred.apply, "measured_s": meas,
                               "predicted_s": pred.total_s, "error": err})
            if abs(err) > TOLERANCE:
                failures.append(f"{label} at P={parts}: predicted {pred.total_s:.3f} s, measured {meas:.3f} s ({100 * err:+.1f}%)")
    say()
    if results["skipped"]:
        say("skipped: " + "; ".join(results["skipped"]))
        say()

    if args.calibration:
        Path(args.calibration).write_text(json.dumps({
            "graph": graph.__dict__, "costs": costs.to_dict(), "replication": law.to_dict(),
            "network": net.to_dict(), "papers_replication": papers_law.to_dict(),
            "papers_replication_extrapolated": extrapolated.to_dict(), "validation": validation,
            "microbench": mb}, indent=1))

    # 5. predictions
    predictions(graph, costs, law, papers_law, papers_path.parent.name, say, args.plot)
    if args.markdown:
        Path(args.markdown).write_text("\n".join(out) + "\n")
    results["validation_failures"] = failures
    dump()
    if failures:
        print("FAILED (validation, tolerance 25%): " + "; ".join(failures))
        return 1
    print("validation passed: " + (", ".join(f"{v['algo']} {100 * v['error']:+.1f}%" for v in validation)
                                   or "no run finished (see skipped)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
