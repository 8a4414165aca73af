"""What a run reports: one ``metrics.jsonl`` record per epoch and ``summary.json`` at the end
(docs/design.md#metrics-keys, docs/design.md#summary-keys).

Each rank measures its own epoch (wall time, the timed parts, bytes posted by kind, peak memory);
one gather per epoch brings the figures to rank 0, which keeps the largest time and memory and
the summed bytes over ranks.
"""
from __future__ import annotations

import os
import resource
import time
from typing import Any

import numpy as np
import torch

from distgnn.comm import Communicator
from distgnn.train.context import RankContext
from distgnn.train.provenance import git_commit, slurm_job_id, versions
from distgnn.timers import ROW_KINDS, Timers
from distgnn.vocabulary import steady_start

#: byte counters reported per epoch, each summed over ranks
BYTE_KINDS = ("forward", "backward", "gradients", "broadcast", "reduce")


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far, bytes."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def process_cpus() -> list[int]:
    """The CPUs this process's threads may run on: the union over its threads, since OpenMP's
    OMP_PROC_BIND pins each thread of its team, the main thread included, to one core of its own
    (the main thread's set alone then reads as one core however many the team has)."""
    cpus: set[int] = set()
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        tasks = []
    for tid in tasks:
        try:
            cpus |= os.sched_getaffinity(int(tid))
        except (OSError, ValueError):
            continue   # a thread that ended meanwhile
    return sorted(cpus or os.sched_getaffinity(0))


def cpus_and_threads() -> tuple[list[int], int]:
    """(the CPUs this process may run on, the threads its dense work uses)."""
    return process_cpus(), int(torch.get_num_threads())


def placement(hosts: list[str], cpus_by_rank: list[list[int]], threads_by_rank: list[int]
              ) -> dict[str, Any]:
    """How the ranks sat on their hosts, for ``summary.json``: each host's CPUs (the union of the
    CPUs its ranks' threads may run on, :func:`process_cpus`) and threads (the sum over its ranks), and whether any host ran more threads
    than it has CPUs (``oversubscribed``: then epoch times measure the sharing, not the run)."""
    cpus: dict[str, set[int]] = {}
    threads: dict[str, int] = {}
    for host, mine, n in zip(hosts, cpus_by_rank, threads_by_rank):
        cpus.setdefault(host, set()).update(mine)
        threads[host] = threads.get(host, 0) + int(n)
    return {"threads_by_rank": list(threads_by_rank),
            "cpus_by_host": {h: len(c) for h, c in cpus.items()},
            "threads_by_host": threads,
            "oversubscribed": any(threads[h] > len(cpus[h]) for h in threads)}


def reduce_over_ranks(figures: list[dict[str, Any]]) -> dict[str, Any]:
    """Rank 0's view of every rank's ``figures`` (same keys, same order on each): ``bytes_*`` and
    ``rows_*`` summed, everything else (times, peak memory, metrics that agree) the largest."""
    return {key: (sum if key.startswith(("bytes_", "rows_")) else max)(f[key] for f in figures)
            for key in figures[0]}


class EpochMeter:
    """Measures one training epoch of one rank: :meth:`start`, the step, then :meth:`stop`."""

    def __init__(self, comm: Communicator, eval_comm: Communicator, timers: Timers):
        self.comm, self.eval_comm, self.timers = comm, eval_comm, timers
        self._bytes: dict[str, int] = {}
        self._start = 0.0

    def start(self) -> None:
        self._bytes = dict(self.comm.bytes_sent)
        self.timers.reset()
        self._start = time.perf_counter()

    def stop(self) -> dict[str, Any]:
        """This rank's figures of the step just run, in ``metrics.jsonl``'s order."""
        elapsed = time.perf_counter() - self._start
        rows = dict(self.timers.row_counts)
        parts = self.timers.reset()
        aggregate = parts.get("aggregate", 0.0)
        wait = parts.get("exchange_wait", 0.0)
        allreduce = parts.get("allreduce", 0.0)
        figures: dict[str, Any] = {
            "epoch_time_s": elapsed,
            "time_aggregate_s": aggregate,
            "time_exchange_wait_s": wait,
            "time_dense_s": max(elapsed - aggregate - wait - allreduce, 0.0),
            "time_allreduce_s": allreduce,
        }
        for kind in BYTE_KINDS:
            figures[f"bytes_{kind}"] = self.comm.bytes_sent.get(kind, 0) - self._bytes.get(kind, 0)
        for kind in ROW_KINDS:
            figures[f"rows_{kind}"] = rows.get(kind, 0)
        return figures

    def evaluation(self, evaluate) -> dict[str, Any]:
        """Run ``evaluate()`` and return its metrics with this rank's ``time_eval_s`` and
        ``bytes_eval``."""
        sent = self.eval_comm.bytes_sent.get("eval", 0)
        start = time.perf_counter()
        out = dict(evaluate())
        self.timers.reset()
        out["time_eval_s"] = time.perf_counter() - start
        out["bytes_eval"] = self.eval_comm.bytes_sent.get("eval", 0) - sent
        return out

    def record(self, epoch: int, loss: float, figures: dict[str, Any]) -> dict[str, Any] | None:
        """The epoch's ``metrics.jsonl`` record on rank 0 (None elsewhere): one gather."""
        figures = {**figures, "peak_rss_bytes": peak_rss_bytes()}
        gathered = self.comm.gather(figures)
        if gathered is None:
            return None
        return {"epoch": epoch + 1, "loss": loss, **reduce_over_ranks(gathered)}


def run_summary(ctx: RankContext, records: list[dict[str, Any]]) -> dict[str, Any]:
    """``summary.json`` (without the per-rank keys the trainer adds) from the epochs' records."""
    attrs, config = ctx.part.attrs, ctx.config
    first = steady_start(ctx.algorithm, config.epochs)
    steady = [r for r in records if r["epoch"] > first] or records
    evaluated = [r for r in records if "val" in r]
    best = max(evaluated, key=lambda r: (r["val"], -r["epoch"])) if evaluated else None

    def mean(key: str) -> float:
        return float(np.mean([r[key] for r in steady])) if steady else float("nan")

    return {
        "store": attrs.get("store"),
        "method": attrs.get("method"),
        "num_parts": int(attrs.get("P")),
        "algo": config.algo,
        "model": config.model,
        "apply": ctx.apply,
        "epochs": config.epochs,
        "hyperparameters": config.hyperparameters(),
        "seeds": {"model": config.seed, "partition": attrs.get("seed")},
        "versions": versions(),
        "git_commit": git_commit(),
        "slurm_job_id": slurm_job_id(),
        "partition_dir": str(ctx.partition_dir.resolve()),
        "replication_factor": ctx.replication_factor,
        "steady_state_from_epoch": first + 1,
        "input_cache_time_s": ctx.input_cache_time_s,
        "recomputed_rows": ctx.recomputed_rows,
        "mean_epoch_time_s": mean("epoch_time_s"),
        "best_val": best["val"] if best else None,
        "test_at_best_val": best["test"] if best else None,
        "final_test": evaluated[-1]["test"] if evaluated else None,
        **{f"bytes_{kind}": mean(f"bytes_{kind}") for kind in BYTE_KINDS},
        **{f"rows_{kind}": mean(f"rows_{kind}") for kind in ROW_KINDS},
        "peak_rss_bytes": max(r["peak_rss_bytes"] for r in records) if records else None,
    }
