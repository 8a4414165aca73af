"""Full-size twins on one machine: fetch, partition, train, with memory checked against the estimate.

    python -m bench.full_size [--scale 1] [--work DIR] [--max-epochs K] [--products-scales 1 0.5 ...]
                              [--json OUT.json] [--markdown OUT.md] [--plot OUT.png]

Stages: fetch synth-reddit at ``--scale``; partition it into P = 1, 2, 4 with libra and
hdrf (replication factor, wall time, peak memory of the partitioner); train GraphSAGE (3 layers,
hidden 256, ranks = P, threads per rank = cores / P): cd-0 3 epochs at P = 1 and 2, cd-5 12 epochs
at P = 2, 0c 3 epochs at P = 2, and cd-0 1 epoch at P = 4 (memory scaling); then synth-products at
the largest of ``--products-scales`` (times ``--scale``) whose P = 1 memory estimate fits, cd-0 3
epochs at P = 1 and 2. Before each run it prints every rank's memory estimate
(:func:`distgnn.scaling.rank_memory.estimate_run_memory`, the launcher's function) and skips,
saying why, a run whose ranks together would not fit in the available memory. The estimate's
fixed part is measured on this machine first: the interpreter's imports
(:func:`~distgnn.scaling.rank_memory.measure_baseline`) and what a rank holds beyond them (its
``runtime``, fitted to one epoch on a twin at ``CALIBRATION_SCALE``: :meth:`Bench.calibrate`).
Prints each stage's wall time, measured peak memory per rank against the estimate (target: within
``MEMORY_TOLERANCE``) and bytes per epoch by kind; writes all figures to ``--json`` and the tables
to ``--markdown``.

``--scale 0.01 --max-epochs 2`` is the smoke version run in CI (tests/test_scale_smoke.py).
Exit status: 0 when every run that was not skipped finished; 1 otherwise.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HIDDEN, LAYERS = 256, 3
#: measured peak memory per rank within this factor of the estimate, either way (the target)
MEMORY_TOLERANCE = 1.3
#: the twin whose run measures what a rank holds beyond its imports on this machine: synth-reddit
#: at this scale has a few hundred vertices, so its graph-sized memory is a few MiB
CALIBRATION_SCALE = 1e-3
#: (algo, P, epochs): the training runs on synth-reddit.
REDDIT_RUNS = (("cd-0", 1, 3), ("cd-0", 2, 3), ("cd-5", 2, 12), ("0c", 2, 3), ("cd-0", 4, 1))
PRODUCTS_RUNS = (("cd-0", 1, 3), ("cd-0", 2, 3))
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OUTDATED_IGNORE": "1"}


def run_measured(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> tuple[float, int]:
    """Run ``cmd`` (output to ``log``); returns (wall seconds, peak RSS bytes of the child tree's
    largest process, from wait4). Exits with the log's tail when it fails."""
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **MPI_ENV, **(env or {})})
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{log.read_text()[-3000:]}")
    return wall, usage.ru_maxrss * 1024


def mib(x: float | None) -> str:
    return "-" if x is None else f"{x / 2**20:,.0f}"


def twin_shape(dataset: str, scale: float) -> tuple[int, int, int, int]:
    """(vertices, edges, feat_dim, classes) a twin will have at ``scale`` (docs/design.md#synthetic-twins:
    vertices and edges times scale, mean degree capped at N/50)."""
    from distgnn.data.synthetic import TWINS

    spec = TWINS[dataset]
    n = max(2, int(round(spec.num_nodes * scale)))
    m = int(min(spec.num_edges * scale, n * n / 50))
    return n, m, spec.feat_dim, spec.num_classes


class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.work = Path(args.work or tempfile.mkdtemp(prefix="bench-full-size-"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.python = sys.executable
        self.cores = os.cpu_count() or 1
        self.stages: list[dict[str, Any]] = []
        self.partitions: list[dict[str, Any]] = []
        self.runs: list[dict[str, Any]] = []
        self.memory_scaling: list[dict[str, Any]] = []
        from distgnn.scaling.rank_memory import RUNTIME_OVERHEAD_BYTES, measure_baseline

        self.baseline = measure_baseline()
        self.runtime = RUNTIME_OVERHEAD_BYTES  # until calibrate() measures it here
        self.calibration: dict[str, Any] | None = None
        print(f"interpreter baseline (measured): {mib(self.baseline)} MiB; work folder {self.work}")
        # Figures of finished stages, kept in the work folder so that a rerun after an
        # interruption reuses the outputs *and* reports their measured times.
        self.records_path = self.work / "stage-records.json"
        self.records: dict[str, Any] = (json.loads(self.records_path.read_text())
                                        if self.records_path.exists() else {})

    def stage(self, name: str, wall: float | None, **extra: Any) -> None:
        """Record a finished stage (wall None: reuse the figures an earlier invocation recorded;
        extra["row"], a training run's full figures, is kept in the records only)."""
        reused = wall is None
        if reused:
            wall, extra = self.records[name]["wall_s"], self.records[name]["extra"]
        else:
            self.records[name] = {"wall_s": wall, "extra": extra}
            tmp = self.records_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.records, indent=1))
            tmp.replace(self.records_path)
        shown = {k: v for k, v in extra.items() if k != "row"}
        self.stages.append({"stage": name, "wall_s": wall, "reused": reused, **shown})
        print(f"[{wall:8.1f} s] {name}" + (" (measured by an earlier invocation)" if reused else "")
              + "".join(f"  {k}={v}" for k, v in shown.items()), flush=True)

    def recorded(self, name: str) -> dict[str, Any] | None:
        return self.records.get(name)

    # -- stages --------------------------------------------------------------------------------
    def fetch(self, dataset: str, scale: float) -> Path:
        from distgnn.data.fetch import store_path

        target = store_path(self.work / "data", dataset, scale, 0, None)
        name = f"fetch {dataset} --scale {scale:g}"
        if target.exists() and self.recorded(name):
            self.stage(name, None)
            return target
        wall, rss = run_measured([self.python, "-m", "distgnn", "fetch", dataset, "--scale", scale,
                                  "--root", self.work / "data", "--quiet", "--force"],
                                 self.work / f"fetch-{dataset}-{scale:g}.log")
        import zarr

        attrs = dict(zarr.open_group(str(target), mode="r").attrs)
        self.stage(name, wall, vertices=attrs["num_nodes"], edges=attrs["num_edges"],
                   peak_rss_mib=round(rss / 2**20))
        return target

    def partition(self, graph: Path, method: str, parts: int) -> Path:
        import zarr

        out = graph.parent / "partitions" / f"{method}-{parts}"
        name = f"partition {graph.parent.name} {method} P={parts}"
        record = self.recorded(name)
        if (out / f"part_{parts - 1}.zarr").exists() and record:
            wall, rss = record["wall_s"], record["extra"]["peak_rss_mib"] * 2**20
        else:
            wall, rss = run_measured([self.python, "-m", "distgnn", "partition", graph, "--parts", parts,
                                      "--method", method, "--out", out, "--threads", self.cores,
                                      "--force", "--quiet"],
                                     self.work / f"partition-{graph.parent.name}-{method}-{parts}.log")
            record = None
        attrs = dict(zarr.open_group(str(out / "assignment.zarr"), mode="r").attrs)
        row = {"store": graph.parent.name, "method": method, "P": parts, "wall_s": wall,
               "peak_rss_bytes": rss, "replication_factor": attrs["replication_factor"],
               "edge_balance": attrs.get("edge_balance"), "vertex_balance": attrs.get("vertex_balance"),
               "assign_s": attrs.get("assign_seconds")}
        self.partitions.append(row)
        if record:
            self.stage(name, None)
        else:
            self.stage(name, wall, rf=round(attrs["replication_factor"], 4), peak_rss_mib=round(rss / 2**20))
        return out

    def estimate(self, partdir: Path, algo: str) -> list:
        from distgnn.scaling.rank_memory import estimate_run_memory

        return estimate_run_memory(partdir, LAYERS, HIDDEN, algo, self.baseline, runtime=self.runtime)

    def train_command(self, partdir: Path, algo: str, parts: int, epochs: int, threads: int,
                      run_dir: Path) -> list:
        return ["mpiexec", "--oversubscribe", "-n", parts, self.python, "-m", "distgnn", "train",
                partdir, "--algo", algo, "--epochs", epochs, "--layers", LAYERS, "--hidden", HIDDEN,
                "--threads", threads, "--eval-every", 0, "--out", run_dir, "--quiet"]

    def calibrate(self) -> None:
        """Measure the estimate's ``runtime`` on this machine: cd-0 for one epoch at P = 1 on a
        synth-reddit twin at ``CALIBRATION_SCALE`` (graph-sized memory of a few MiB), its peak
        memory less the measured baseline and the (small) estimated rest
        (:func:`~distgnn.scaling.rank_memory.fit_runtime`)."""
        from distgnn.data.fetch import store_path
        from distgnn.scaling.rank_memory import fit_runtime

        work = self.work / "calibration"
        graph = store_path(work / "data", "synth-reddit", CALIBRATION_SCALE, 0, None)
        partdir, run_dir = work / "libra-1", work / "run"
        start = time.perf_counter()
        run_measured([self.python, "-m", "distgnn", "fetch", "synth-reddit", "--scale", CALIBRATION_SCALE,
                      "--root", work / "data", "--quiet", "--force"], self.work / "calibration-fetch.log")
        run_measured([self.python, "-m", "distgnn", "partition", graph, "--parts", 1, "--method", "libra",
                      "--out", partdir, "--force", "--quiet"], self.work / "calibration-partition.log")
        run_measured(self.train_command(partdir, "cd-0", 1, 1, self.cores, run_dir),
                     self.work / "calibration-train.log", {"OMP_NUM_THREADS": str(self.cores)})
        peak = json.loads((run_dir / "summary.json").read_text())["peak_rss_bytes"]
        self.runtime = fit_runtime(peak, self.estimate(partdir, "cd-0")[0])
        self.calibration = {"peak_rss_bytes": peak,
                            "estimate": self.estimate(partdir, "cd-0")[0].as_dict()}  # fitted: = peak
        self.stage(f"calibrate: train synth-reddit --scale {CALIBRATION_SCALE:g} cd-0 P=1 (1 epoch)",
                   time.perf_counter() - start, peak_mib=round(peak / 2**20),
                   runtime_mib=round(self.runtime / 2**20))

    def train(self, store: str, partdir: Path, algo: str, parts: int, epochs: int) -> None:
        from distgnn.scaling.rank_memory import available_memory_bytes, fits

        epochs = min(epochs, self.args.max_epochs) if self.args.max_epochs else epochs
        estimates = self.estimate(partdir, algo)
        worst = max(e.total for e in estimates)
        print(f"  {store} {algo} P={parts}: estimate per rank " +
              ", ".join(f"rank {e.k} {mib(e.total)} MiB" for e in estimates), flush=True)
        row: dict[str, Any] = {"store": store, "algo": algo, "P": parts, "epochs": epochs,
                               "estimate_bytes": worst, "estimates": [e.as_dict() for e in estimates]}
        ok, reason = fits(estimates, available_memory_bytes())
        if not ok:
            row["skipped"] = reason
            self.runs.append(row)
            print(f"  SKIP {store} {algo} P={parts}: {reason}", flush=True)
            return
        threads = max(1, self.cores // parts)
        run_dir = self.work / "runs" / store / f"{algo}-P{parts}"
        name = f"train {store} {algo} P={parts} ({epochs} epochs, {threads} thread(s)/rank)"
        record = self.recorded(name)
        if record and (run_dir / "summary.json").exists():
            self.runs.append(record["extra"]["row"])
            self.stage(name, None)
            return
        cmd = self.train_command(partdir, algo, parts, epochs, threads, run_dir)
        wall, _ = run_measured(cmd, self.work / f"train-{store}-{algo}-P{parts}.log",
                               {"OMP_NUM_THREADS": str(threads)})
        summary = json.loads((run_dir / "summary.json").read_text())
        measured = summary["peak_rss_bytes"]
        row.update({"threads": threads, "wall_s": wall, "mean_epoch_time_s": summary["mean_epoch_time_s"],
                    "peak_rss_bytes": measured, "ratio": measured / worst,
                    "bytes_forward": summary["bytes_forward"], "bytes_backward": summary["bytes_backward"],
                    "bytes_gradients": summary["bytes_gradients"],
                    "replication_factor": summary["replication_factor"], "run_dir": str(run_dir)})
        self.runs.append(row)
        self.stage(name, wall, row=row, epoch_s=round(summary["mean_epoch_time_s"], 3),
                   peak_mib=round(measured / 2**20), estimate_mib=round(worst / 2**20),
                   measured_over_estimate=round(measured / worst, 3))

    # -- the whole bench -----------------------------------------------------------------------
    def run(self) -> int:
        args = self.args
        t0 = time.perf_counter()
        graph = self.fetch("synth-reddit", args.scale)
        self.calibrate()
        store = graph.parent.name
        parts_dirs: dict[tuple[str, int], Path] = {}
        methods = args.methods
        if "libra" not in methods:
            methods = ["libra", *methods]  # the training runs use libra
        for method in methods:
            for parts in (1, 2, 4):
                parts_dirs[method, parts] = self.partition(graph, method, parts)
        for method in methods:
            for parts in (1, 2, 4):
                est = self.estimate(parts_dirs[method, parts], "cd-0")
                self.memory_scaling.append({"store": store, "method": method, "P": parts,
                                            "estimate_max_bytes": max(e.total for e in est),
                                            "estimate_body_bytes": max(e.total - e.baseline for e in est)})
        for algo, parts, epochs in REDDIT_RUNS:
            if parts not in args.train_parts:
                continue
            self.train(store, parts_dirs["libra", parts], algo, parts, epochs)
        for row in self.memory_scaling:
            hit = [r for r in self.runs if r["store"] == store and r["algo"] == "cd-0" and r["P"] == row["P"]
                   and row["method"] == "libra" and "peak_rss_bytes" in r]
            row["measured_bytes"] = hit[0]["peak_rss_bytes"] if hit else None
        if args.products_scales:
            self.products()
        self.total_s = sum(st["wall_s"] for st in self.stages)
        reused = sum(1 for st in self.stages if st["reused"])
        print(f"total wall time {self.total_s:.1f} s (sum of the stages; {reused} measured by an earlier "
              f"invocation, this one took {time.perf_counter() - t0:.1f} s)")
        return 0

    def products(self) -> None:
        """synth-products: cd-0 at P = 1 at the largest candidate scale whose P = 1 estimate fits;
        cd-0 at P = 2 there too when its estimate (from the real partition) fits, else P = 1 and
        P = 2 again at the largest smaller scale where both fit (replicas make P = 2 need more
        memory in all than P = 1)."""
        from distgnn.scaling.rank_memory import PartShape, available_memory_bytes, estimate_shape

        scales = [s * self.args.scale for s in sorted(self.args.products_scales, reverse=True)]
        chosen = None
        for i, scale in enumerate(scales):
            n, m, f, c = twin_shape("synth-products", scale)
            shape = PartShape(n=n, m=m, feat_dim=f, num_classes=c, multilabel=False, num_parts=1,
                              num_leaves=0, num_split=0)
            need = estimate_shape(shape, LAYERS, HIDDEN, "cd-0", 0, self.baseline,
                                  runtime=self.runtime).total
            avail = available_memory_bytes()
            print(f"synth-products --scale {scale:g}: {n:,} vertices, {m:,} edges; P=1 estimate "
                  f"{mib(need)} MiB vs {mib(avail)} MiB available", flush=True)
            if need <= avail:
                chosen = i
                break
        if chosen is None:
            print("SKIP synth-products: no candidate scale fits in memory")
            return
        self.products_scale = scales[chosen]
        for scale in scales[chosen:]:
            graph = self.fetch("synth-products", scale)
            store = graph.parent.name
            dirs = {parts: self.partition(graph, "libra", parts) for _, parts, _ in PRODUCTS_RUNS}
            both_fit = all(self.fits(dirs[parts], algo) for algo, parts, _ in PRODUCTS_RUNS)
            if scale == scales[chosen] or both_fit:
                for algo, parts, epochs in PRODUCTS_RUNS:  # train() records a run that does not fit
                    self.train(store, dirs[parts], algo, parts, epochs)
            if both_fit:
                self.products_scale_all = scale
                return
            print(f"synth-products --scale {scale:g}: P=2 does not fit; trying a smaller scale", flush=True)

    def fits(self, partdir: Path, algo: str) -> bool:
        from distgnn.scaling.rank_memory import available_memory_bytes, fits

        return fits(self.estimate(partdir, algo), available_memory_bytes())[0]

    # -- output --------------------------------------------------------------------------------
    def markdown(self) -> str:
        a = self.args
        lines = [f"Machine: {platform.node()}, {self.cores} cores, {mib(_total_memory())} MiB memory; "
                 f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
                 f"`python -m bench.full_size --scale {a.scale:g}`"
                 + (f" `--max-epochs {a.max_epochs}`" if a.max_epochs else "")
                 + f"; total {getattr(self, 'total_s', 0):.0f} s (sum of the stage wall times).", "",
                 "| stage | wall s |", "|---|---|"]
        lines += [f"| {s['stage']}{' (earlier invocation)' if s['reused'] else ''} | {s['wall_s']:.1f} |"
                  for s in self.stages]
        lines += ["", "| graph | method | P | replication factor | edge balance | partition wall s | partition peak MiB |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {p['store']} | {p['method']} | {p['P']} | {p['replication_factor']:.3f} | "
                  f"{p['edge_balance'] or 0:.3f} | {p['wall_s']:.1f} | {mib(p['peak_rss_bytes'])} |"
                  for p in self.partitions]
        lines += ["", "| graph | algo | P | threads/rank | epochs | epoch s (steady) | peak MiB/rank (max) | "
                  "estimate MiB/rank (max) | measured/estimate | fwd MB/epoch | bwd MB/epoch | grad MB/epoch |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in self.runs:
            if "skipped" in r:
                lines.append(f"| {r['store']} | {r['algo']} | {r['P']} | - | - | skipped: {r['skipped']} | - | "
                             f"{mib(r['estimate_bytes'])} | - | - | - | - |")
                continue
            lines.append(f"| {r['store']} | {r['algo']} | {r['P']} | {r['threads']} | {r['epochs']} | "
                         f"{r['mean_epoch_time_s']:.2f} | {mib(r['peak_rss_bytes'])} | {mib(r['estimate_bytes'])} | "
                         f"{r['ratio']:.2f} | {r['bytes_forward'] / 1e6:.1f} | {r['bytes_backward'] / 1e6:.1f} | "
                         f"{r['bytes_gradients'] / 1e6:.2f} |")
        lines += ["", "Memory per rank against P (cd-0, largest rank; body = estimate less the interpreter):", "",
                  "| graph | method | P | estimate MiB/rank | body MiB/rank | body x P / body at P=1 | measured MiB/rank |",
                  "|---|---|---|---|---|---|---|"]
        base = {m["method"]: m["estimate_body_bytes"] for m in self.memory_scaling if m["P"] == 1}
        for m in self.memory_scaling:
            lines.append(f"| {m['store']} | {m['method']} | {m['P']} | {mib(m['estimate_max_bytes'])} | "
                         f"{mib(m['estimate_body_bytes'])} | {m['estimate_body_bytes'] * m['P'] / base[m['method']]:.2f} | "
                         f"{mib(m.get('measured_bytes'))} |")
        return "\n".join(lines) + "\n"

    def plot(self, path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3.5))
        for method in sorted({m["method"] for m in self.memory_scaling}):
            rows = [m for m in self.memory_scaling if m["method"] == method]
            ax.plot([m["P"] for m in rows], [m["estimate_max_bytes"] / 2**30 for m in rows], "o-",
                    label=f"estimate ({method})")
        meas = [m for m in self.memory_scaling if m.get("measured_bytes")]
        ax.plot([m["P"] for m in meas], [m["measured_bytes"] / 2**30 for m in meas], "k^", label="measured (libra)")
        one = [m for m in self.memory_scaling if m["method"] == "libra" and m["P"] == 1]
        if one:
            ps = [1, 2, 4]
            ax.plot(ps, [(self.baseline + (one[0]["estimate_body_bytes"]) / p) / 2**30 for p in ps], ":",
                    color="grey", label="ideal 1/P")
        ax.set_xlabel("P (ranks)")
        ax.set_ylabel("peak memory per rank (GiB)")
        ax.set_xticks([1, 2, 4])
        ax.set_title(self.stages[0]["stage"].replace("fetch ", ""), fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="twin scale (default 1: full size)")
    parser.add_argument("--work", help="work folder (kept; default: a new temp folder)")
    parser.add_argument("--max-epochs", type=int, default=0, help="cap every run's epochs (0: the epochs listed in this script's docstring)")
    parser.add_argument("--products-scales", type=float, nargs="*", default=[1.0, 0.5, 0.25, 0.1, 0.05],
                        help="synth-products candidate scales, times --scale (the largest that fits is used; "
                             "none given: no synth-products stage)")
    parser.add_argument("--methods", nargs="+", default=["libra", "hdrf"], help="partitioners compared")
    parser.add_argument("--train-parts", type=int, nargs="+", default=[1, 2, 4],
                        help="P values whose synth-reddit training runs happen (default: all)")
    parser.add_argument("--json", help="write all figures here")
    parser.add_argument("--markdown", help="write the tables here")
    parser.add_argument("--plot", help="write the memory-against-P plot (PNG) here")
    args = parser.parse_args(argv)
    bench = Bench(args)
    status = bench.run()
    text = bench.markdown()
    print()
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.plot:
        bench.plot(Path(args.plot))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "scale": args.scale, "baseline_bytes": bench.baseline, "runtime_bytes": bench.runtime,
            "calibration": bench.calibration,
            "stages": bench.stages,
            "partitions": bench.partitions, "runs": bench.runs, "memory_scaling": bench.memory_scaling,
            "products_scale": getattr(bench, "products_scale", None),
            "products_scale_p1_and_p2": getattr(bench, "products_scale_all", None), "total_s": getattr(bench, "total_s", None)},
            indent=1))
    bad = [r for r in bench.runs if "skipped" not in r and not r.get("peak_rss_bytes")]
    return 1 if bad or status else 0


if __name__ == "__main__":
    sys.exit(main())
