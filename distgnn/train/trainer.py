"""The training run of one rank (``distgnn train``; ranks = partitions, under mpiexec or srun).

Every rank holds one partition and an identical model (same seed). The run: make the run folder,
start the hang watchdog, open the rank's context (:mod:`distgnn.train.context`: checks, part,
model, aggregation), resume from the newest checkpoint if asked, then per epoch one step
(:mod:`distgnn.train.step`), its record (:mod:`distgnn.train.telemetry`, one gather; rank 0
appends it to ``metrics.jsonl``) and, every ``--checkpoint-every`` epochs, a checkpoint
(:mod:`distgnn.train.checkpoint`). At the end the watchdog stops on every rank, and only then
does rank 0 write ``summary.json`` and ``model.pt``, so a slow final write is never taken for a
hang (docs/design.md#metrics-keys, docs/design.md#summary-keys, docs/design.md#watchdog).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import socket
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import torch

from distgnn.kernels import ops, tiling
from distgnn.comm import Communicator
from distgnn.errors import CollectiveError, DistgnnError
from distgnn.host_memory import huge_page_bytes, thp_mode
from distgnn.progress import is_quiet
from distgnn.train import checkpoint as ckpt
from distgnn.train.adam import Adam
from distgnn.train.agreement import agreed
from distgnn.train.config import TrainConfig, check_config, with_precision_resolved
from distgnn.train.context import RankContext, check_ranks, open_rank
from distgnn.train.shared_folder import check_shared_folder, startup_grace_s
from distgnn.train.step import evaluate, train_step
from distgnn.train.telemetry import (EpochMeter, cpus_and_threads, peak_rss_bytes, placement,
                                     run_summary)
from distgnn.train.watchdog import StartupGuard, Watchdog
from distgnn.models.registry import DEFAULT_MODEL, run_name
from distgnn.train.run_folder import RunLock, check_resume_length, check_run_folder


def default_run_dir(attrs: dict[str, Any], algo: str, apply: str = "auto",
                    model: str = DEFAULT_MODEL) -> Path:
    """``runs/<store>/<method>-<P>/<run>`` from a partition's attributes."""
    return (Path("runs") / str(attrs["store"]) / f"{attrs['method']}-{attrs['P']}"
            / run_name(algo, apply, model))


class Trainer:
    """One rank's training run (module docstring)."""

    def __init__(self, partition_dir: str | os.PathLike, config: TrainConfig,
                 run_dir: str | os.PathLike | None = None, comm: Communicator | None = None,
                 on_epoch: Callable[[dict[str, Any], int], None] | None = None,
                 model: torch.nn.Module | None = None):
        """``on_epoch(record, epochs)``: called on rank 0 after every epoch (progress output).
        ``model``: a user's module following :mod:`distgnn.models.base` (built on every rank with
        the same seed, before this call); default: the ``--model`` network of ``config``."""
        check_config(config)
        self.config, self.on_epoch, self.user_model = config, on_epoch, model
        self.comm = comm or Communicator()
        self.partition_dir = Path(partition_dir)
        #: the watchdog's stand-in until the run folder holds the heartbeats
        self.startup: StartupGuard | None = None
        if self.comm.size > 1 and config.hang_timeout_s > 0:
            self.startup = StartupGuard(self.comm.rank, config.hang_timeout_s,
                                        grace=startup_grace_s()).start()
        try:
            self.config = config = with_precision_resolved(config, self.comm)
            self.assignment = check_ranks(self.partition_dir, self.comm)
        except BaseException:
            self._end_startup()
            raise
        self.run_dir = Path(run_dir) if run_dir else default_run_dir(
            self.assignment, config.algo, config.apply, config.model)
        self.ctx: RankContext | None = None
        self.current_epoch = 0
        self.lock: RunLock | None = None   #: rank 0's lock on the run folder

    def run(self) -> dict[str, Any] | None:
        """Train; returns the summary on rank 0 (None elsewhere)."""
        try:
            return self._run()
        finally:
            self._end_startup()
            if self.lock is not None:
                self.lock.release()

    def _end_startup(self) -> None:
        if self.startup is not None:
            self.startup.stop()
            self.startup = None

    def _run(self) -> dict[str, Any] | None:
        self._make_run_dir()
        watchdog = None
        if self.comm.size > 1 and self.config.hang_timeout_s > 0:
            watchdog = Watchdog(self.run_dir, self.comm.rank, self.comm.size,
                                self.config.hang_timeout_s, self._phase).start()
        self._end_startup()
        try:
            records = self._train(watchdog)
            per_rank = self._per_rank_figures()
        finally:
            if watchdog is not None:
                watchdog.stop()
        # every rank waits for rank 0's writes, so a failure there is one agreed line
        return agreed(self.comm, lambda: self._write_outputs(records, per_rank)
                      if self.comm.rank == 0 else None)

    # -- the run, under the watchdog -----------------------------------------------------------
    def _train(self, watchdog: Watchdog | None) -> list[dict[str, Any]]:
        """Open the context, resume if asked, run the epochs; rank 0's records (else [])."""
        self.ctx = ctx = open_rank(self.partition_dir, self.config, self.comm, self.assignment,
                                   self.user_model, self._note)
        if watchdog is not None:
            watchdog.beat()  # loaded: the next report of this rank says training
        config = self.config
        if config.precision_reason.startswith("auto"):
            self._note(config.precision_reason)
        optimizer = Adam(ctx.model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        train_mask = ctx.part.masks["train_mask"][:ctx.rows]  # true only at roots
        global_train_count = int(self.comm.sum(int(train_mask.sum())))
        if global_train_count == 0:
            raise CollectiveError(f"{self.partition_dir}: no training vertex (train_mask is empty)")
        if not ctx.multilabel and global_train_count < ctx.num_classes:
            self._note(f"warning: {global_train_count} training vertices for "
                       f"{ctx.num_classes} classes: some classes are never trained on")
        train_ids = torch.nonzero(train_mask).flatten()
        self._clear_previous_outputs()
        start = ckpt.resume(ctx, optimizer, self.run_dir, self._note) if config.resume else 0
        records = self._read_records() if self.comm.rank == 0 and start > 0 else []
        meter = EpochMeter(self.comm, ctx.eval_comm, ctx.timers)
        metrics = open(self.run_dir / "metrics.jsonl", "a") if self.comm.rank == 0 else None
        try:
            for epoch in range(start, config.epochs):
                self.current_epoch = epoch
                loss, record = self._epoch(epoch, optimizer, meter, train_ids, global_train_count)
                if metrics is not None:
                    metrics.write(json.dumps(record) + "\n")
                    metrics.flush()
                    records.append(record)
                    if self.on_epoch is not None:
                        self.on_epoch(record, config.epochs)
                if not math.isfinite(loss):  # the same loss on every rank: every rank stops here
                    raise CollectiveError(f"loss is {loss} at epoch {epoch + 1}: training diverged "
                                          f"(the last good checkpoint is kept)")
                if config.checkpoint_every and (epoch + 1) % config.checkpoint_every == 0 \
                        and epoch + 1 < config.epochs:
                    ckpt.save(ctx, optimizer, self.run_dir, epoch + 1)
        finally:
            if metrics is not None:
                metrics.close()
        ctx.aggregation.finish()
        return records

    def _epoch(self, epoch: int, optimizer: Adam, meter: EpochMeter, train_ids: torch.Tensor,
               global_train_count: int) -> tuple[float, dict[str, Any] | None]:
        """One epoch: the step, the evaluation when due; (the loss summed over ranks, the
        record on rank 0, None elsewhere)."""
        ctx, every = self.ctx, self.config.eval_every
        meter.start()
        loss = train_step(ctx, optimizer, epoch, train_ids, global_train_count)
        figures = meter.stop()
        if every and ((epoch + 1) % every == 0 or epoch + 1 == self.config.epochs):
            figures.update(meter.evaluation(lambda: evaluate(ctx)))
        return loss, meter.record(epoch, loss, figures)

    def _per_rank_figures(self) -> tuple[list, list, list, list, list] | None:
        """(peak memory, huge-page bytes, tiling choices, host name, (CPUs, threads)) by rank, on
        rank 0, while the part and its caches are alive."""
        peaks = self.comm.gather(peak_rss_bytes())
        huge = self.comm.gather(huge_page_bytes())
        tiles = self.comm.gather(ops.tiling_report())
        hosts = self.comm.gather(socket.gethostname())
        seats = self.comm.gather(cpus_and_threads())
        return None if self.comm.rank != 0 else (peaks, huge, tiles, hosts, seats)

    def _phase(self) -> str:
        """What this rank is doing now, for the hang watchdog's report."""
        if self.ctx is None:
            return "loading its part"
        return f"epoch {self.current_epoch + 1}: {self.ctx.timers.current or 'between timed parts'}"

    # -- the run folder ------------------------------------------------------------------------
    def _make_run_dir(self) -> None:
        """Rank 0 checks that the run folder may be written (a new, empty or run folder; with
        --resume, no fewer epochs than it has trained), makes it and locks it for the run (an
        agreed step: its failure is every rank's one line), and every rank must see it
        (docs/design.md#shared-run-folder, docs/design.md#run-folder)."""
        def make() -> None:
            if self.comm.rank != 0:
                return
            try:
                check_run_folder(self.run_dir)
                if self.config.resume:
                    check_resume_length(self.run_dir, self.config.epochs)
                self.run_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:   # a name too long, a parent that is a file, no permission
                raise DistgnnError(f"--out {self.run_dir}: cannot create ({exc.strerror})") from exc
            # checked now, not at the first checkpoint an hour in (access() sees a read-only
            # mount even for root)
            checkpoints = self.run_dir / "checkpoints"
            for folder in (self.run_dir, checkpoints):
                if folder.exists() and not os.access(folder, os.W_OK):
                    raise DistgnnError(f"--out {folder}: not writable (read-only or no permission); "
                                       f"nothing was written")
            self.lock = RunLock(self.run_dir).acquire()
        agreed(self.comm, make)
        check_shared_folder(self.run_dir, self.comm)

    def _clear_previous_outputs(self) -> None:
        """A new run (no --resume) starts from an empty folder: the previous run's outputs and
        checkpoints are removed once this one has loaded."""
        def clear() -> None:
            if self.comm.rank == 0 and not self.config.resume:
                for name in ("metrics.jsonl", "summary.json", "model.pt"):
                    (self.run_dir / name).unlink(missing_ok=True)
                shutil.rmtree(self.run_dir / "checkpoints", ignore_errors=True)
        agreed(self.comm, clear)

    def _read_records(self) -> list[dict[str, Any]]:
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def _write_outputs(self, records: list[dict[str, Any]],
                       per_rank: tuple[list, list, list, list, list]) -> dict[str, Any]:
        """Rank 0, after every rank has stopped its watchdog: ``model.pt``, then
        ``summary.json`` (temporary name, then rename)."""
        ctx = self.ctx
        peaks, huge, tiles, hosts, seats = per_rank
        summary = run_summary(ctx, records)
        summary["hosts_by_rank"] = hosts
        summary["placement"] = placement(hosts, [c for c, _ in seats], [n for _, n in seats])
        summary["peak_rss_bytes_by_rank"] = peaks
        summary["huge_pages"] = {"requested": self.config.huge_pages, "thp_mode": thp_mode(),
                                 "bytes_by_rank": huge}
        summary["source_tiling"] = {"mode": str(tiling.mode()), "choices_by_rank": tiles}
        summary["precision_reason"] = self.config.precision_reason
        ckpt.atomic_torch_save({"model": ctx.model.state_dict(), "config": asdict(self.config),
                                "in_dim": int(ctx.part.feat.shape[1]),
                                "num_classes": ctx.num_classes}, self.run_dir / "model.pt")
        ckpt.atomic_write_text(json.dumps(summary, indent=1), self.run_dir / "summary.json")
        return summary

    def _note(self, text: str) -> None:
        """One line on stderr from rank 0 (silenced by --quiet)."""
        if self.comm.rank == 0 and not is_quiet():
            print(f"distgnn train: {text}", file=sys.stderr, flush=True)
