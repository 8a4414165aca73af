"""The training loop of one rank (``distgnn train``; ranks = partitions, under mpiexec or srun).

Every rank holds one partition and an identical model (same seed). Per epoch: forward over all
local vertices with the algorithm's aggregation, loss summed over this rank's root training
vertices divided by the global training count, backward, gradients summed over ranks, Adam.
Rank 0 writes ``metrics.jsonl`` (one JSON line per epoch), and at the end ``summary.json`` and
``model.pt``. See docs/design.md, section 6 for the keys.
"""
from __future__ import annotations

import json
import math
import os
import resource
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from distgnn import ops, tiling
from distgnn.comm import Communicator
from distgnn.errors import CollectiveError, DistgnnError
from distgnn.exchange import Aggregation, build_aggregation
from distgnn.memory import huge_page_bytes, thp_mode
from distgnn.models import build_model
from distgnn.precision import dense_autocast, in_dtype, in_float32
from distgnn.progress import is_quiet
from distgnn.train import checkpoint as ckpt
from distgnn.train.algorithms import Algorithm, parse_algorithm, resolve_apply, run_name, steady_start
from distgnn.train.config import TrainConfig, check_config, resolve_delayed_gradients
from distgnn.train.metrics import loss_sum, mean_roc_auc
from distgnn.train.partition_data import PartitionData, load_partition, read_num_parts
from distgnn.train.provenance import git_commit, slurm_job_id, versions
from distgnn.train.adam import Adam
from distgnn.train.timers import Timers
from distgnn.train.watchdog import Watchdog

FAIL_RANK_ENV = "DISTGNN_TEST_FAIL_RANK"    #: test-only: this rank raises ...
FAIL_EPOCH_ENV = "DISTGNN_TEST_FAIL_EPOCH"  #: ... at this (0-based) epoch (default 0)


def default_run_dir(attrs: dict[str, Any], algo: str, apply: str = "auto",
                    model: str = "sage") -> Path:
    return (Path("runs") / str(attrs["store"]) / f"{attrs['method']}-{attrs['P']}"
            / run_name(algo, apply, model))


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Trainer:
    """One rank's training run."""

    def __init__(self, partition_dir: str | os.PathLike, config: TrainConfig,
                 run_dir: str | os.PathLike | None = None, comm: Communicator | None = None,
                 on_epoch: Callable[[dict[str, Any], int], None] | None = None,
                 model: torch.nn.Module | None = None):
        """``on_epoch(record, epochs)``: called on rank 0 after every epoch (progress output).
        ``model``: a user's module following :mod:`distgnn.models.base` (built on every rank with
        the same seed, before this call); default: the ``--model`` network of ``config``."""
        self.config = config
        self.on_epoch = on_epoch
        self.algorithm = check_config(config)
        self.comm = comm or Communicator()
        self.partition_dir = Path(partition_dir)
        num_parts = read_num_parts(self.partition_dir)
        if self.comm.size != num_parts:
            raise CollectiveError(f"{self.partition_dir} has {num_parts} parts but {self.comm.size} "
                               f"ranks were started (run mpiexec -n {num_parts} or srun -n {num_parts})")
        if config.memory_check:
            self._check_memory()
        self.part: PartitionData = load_partition(self.partition_dir, self.comm.rank,
                                                  huge_pages=config.huge_pages)
        self._check_consistency()
        attrs = self.part.attrs
        self.apply = resolve_apply(config.apply, self.algorithm)
        self.run_dir = Path(run_dir) if run_dir else default_run_dir(attrs, config.algo, config.apply,
                                                                         config.model)
        self.multilabel = bool(attrs.get("multilabel", False))
        self.num_classes = int(attrs["num_classes"])
        self.timers = Timers()
        if config.threads > 0:
            torch.set_num_threads(config.threads)
        self.eval_comm = self.comm.dup()
        torch.manual_seed(config.seed)
        if model is None and config.model.startswith("custom:"):
            raise DistgnnError(f"{config.model}: a user's model is trained from Python "
                               f"(distgnn.train_model), not rebuilt from its name")
        self.model = model if model is not None else build_model(
            config.model, self.part.feat.shape[1], config.hidden, self.num_classes, config.layers,
            config.aggregator, config.dropout, config.heads)
        if model is not None and self.comm.size > 1:  # replicas start equal however it was seeded
            self.model.load_state_dict(self.comm.bcast(self.model.state_dict()))
        self.aggregation: Aggregation = build_aggregation(
            self.part, self.algorithm, self.apply, self.model.norm, self.comm, self.eval_comm,
            self.timers, config.threads, bool(getattr(self.model, "aggregates_input_first", False)),
            config.input_cache,
            resolve_delayed_gradients(config.delayed_gradients, self.algorithm, self.apply),
            config.fresh_copies)
        #: rows the dense work runs on: this part's roots under apply-at-root (a prefix of the
        #: local ids), every local vertex under replicas
        self.rows = self.aggregation.rows
        self.x = self.part.feat[:self.rows]
        if config.precision == "bf16":  # rows gathered and exchanged in bfloat16 (distgnn/precision.py)
            self.comm.payload_dtype = torch.bfloat16
            self.aggregation.gather_features_as(torch.bfloat16)
        self.optimizer = Adam(self.model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        train_mask = self.part.masks["train_mask"][:self.rows]  # true only at roots
        self.global_train_count = int(self.comm.sum(int(train_mask.sum())))
        if self.global_train_count == 0:
            raise CollectiveError(f"{self.partition_dir}: no training vertex (train_mask is empty)")
        if not self.multilabel and self.global_train_count < self.num_classes:
            self._note(f"warning: {self.global_train_count} training vertices for "
                       f"{self.num_classes} classes: some classes are never trained on")
        self.train_ids = torch.nonzero(train_mask).flatten()
        self.start_epoch = 0
        self.current_epoch = 0
        self.input_aggregate: torch.Tensor | None = None
        self.input_cache_time_s = 0.0
        if config.input_cache and getattr(self.model, "takes_input_aggregate", False):
            self._cache_input_aggregate()

    def _cache_input_aggregate(self) -> None:
        """Layer 0's exact (cd-0) neighbour aggregate of the constant input features, [n_k, F]
        float32, computed once. Evaluation always uses it; training uses it where the algorithm's
        own layer-0 aggregate equals it (cd-0, or one rank), so the training semantics of 0c and
        cd-r are unchanged."""
        start = time.perf_counter()
        self.input_aggregate = self.aggregation.input_aggregate()
        self.timers.reset()
        self.input_cache_time_s = self.comm.max(time.perf_counter() - start)

    # -- checks --------------------------------------------------------------------------
    def _check_memory(self) -> None:
        """Refuse, before loading anything, a run whose ranks on some machine would need more
        memory than it has available (per-rank estimate from the partition attributes)."""
        from distgnn.train.memory_estimate import available_memory_bytes, estimate_rank_memory

        c = self.config
        mine = estimate_rank_memory(self.partition_dir, self.comm.rank, c.layers, c.hidden, c.algo,
                                    input_cache=c.input_cache and c.model != "gat", apply=c.apply,
                                    model=c.model if c.model in ("gcn", "gin", "gat") else "sage",
                                    heads=c.heads)
        need, available = self.comm.node_sum_and_min(mine, available_memory_bytes())
        ratio, need, available = self.comm.max((need / max(available, 1), need, available))
        if available and ratio > 1.0:
            raise CollectiveError(
                f"the run would not fit in memory: the ranks on one machine need an estimated "
                f"{need / 2**30:.2f} GiB but {available / 2**30:.2f} GiB are available (estimate from "
                f"the partition attributes; use more machines, more parts or a smaller --hidden, or "
                f"--skip-memory-check)")

    def _check_consistency(self) -> None:
        """All parts come from the same graph store, assignment and P; the graph is unchanged."""
        attrs = self.part.attrs
        mine = (attrs.get("graph_checksum"), attrs.get("assignment_checksum"), attrs.get("P"),
                attrs.get("method"), attrs.get("seed"))
        everyone = self.comm.comm.allgather(mine)
        for k, theirs in enumerate(everyone):
            if theirs != everyone[0]:
                raise CollectiveError(f"{self.partition_dir}: part_{k}.zarr disagrees with part_0.zarr "
                                   f"(graph checksum, assignment, P, method or seed): rebuild the folder")
        graph = attrs.get("graph")
        if self.comm.rank == 0 and graph and Path(graph).exists():
            import zarr

            now = dict(zarr.open_group(str(graph), mode="r").attrs).get("checksum")
            if now != attrs.get("graph_checksum"):
                raise DistgnnError(f"{graph}: graph store changed since {self.partition_dir} was "
                                   f"built (checksum {now} != {attrs.get('graph_checksum')}): "
                                   f"repartition it")

    # -- one epoch -------------------------------------------------------------------------
    def _dropout(self, epoch: int):
        p, seed, gids = self.config.dropout, self.config.seed, self.part.local_to_global

        def apply(layer: int, h: torch.Tensor) -> torch.Tensor:
            # h holds the first rows of the part (its roots under apply-at-root, or all)
            return ops.dropout(h, p, seed, epoch, layer, gids[:h.shape[0]], training=True,
                               threads=self.config.threads)
        return apply

    def _attend(self, epoch: int | None):
        """GAT's attend(layer, z, el, er, inputs=None) callable (distgnn/models/base.py): the
        aggregation's attention, with the keyed attention dropout in a training epoch (None:
        evaluation, no dropout)."""
        from distgnn.attention import AttentionDropout

        p, seed, gids = self.config.dropout, self.config.seed, self.part.local_to_global

        def attend(layer: int, z: torch.Tensor, el: torch.Tensor, er: torch.Tensor,
                   inputs: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
            drop = None
            if epoch is not None and p > 0:
                drop = AttentionDropout(p, seed, epoch, layer, gids, gids)
            return self.aggregation.attention(layer, z, el, er, drop, inputs)
        return attend

    def _forward(self, dropout, epoch: int | None = None) -> torch.Tensor:
        """Logits [rows, classes] in float32 (rows: the roots under apply-at-root, else all
        local; dense work in bf16 under --precision bf16); ``epoch``: the training epoch (None:
        evaluation)."""
        aggregate = (in_dtype(self.aggregation, torch.bfloat16) if self.config.precision == "bf16"
                     else self.aggregation)
        if dropout is not None and self.config.precision != "fp32":
            dropout = in_float32(dropout)
        cached = self.input_aggregate
        if self.aggregation.training and not self.algorithm.trains_with_input_cache(self.comm.size):
            cached = None
        with dense_autocast(self.config.precision):
            # a user's model that never takes the input cache need not accept the keyword
            extra = {} if cached is None else {"x_aggregate": cached}
            if getattr(self.model, "uses_attention", False):
                extra["attend"] = self._attend(epoch)
            logits = self.model(self.x, aggregate, dropout, **extra)
        return logits.float()

    def _train_step(self, epoch: int) -> float:
        self.model.train()
        self.aggregation.train()
        self.optimizer.zero_grad(set_to_none=False)
        logits = self._forward(self._dropout(epoch), epoch)
        ids = self.train_ids
        loss = loss_sum(logits[ids], self.part.label[ids], self.multilabel) / self.global_train_count
        loss.backward()
        with self.timers("allreduce"):
            grads = [p.grad for p in self.model.parameters()]
            flat = torch.cat([g.reshape(-1) for g in grads])
            self.comm.allreduce_sum_(flat, "gradients")
            offset = 0
            for g in grads:
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()
            total_loss = self.comm.sum(float(loss.detach()))
        self.optimizer.step()
        return total_loss

    @torch.no_grad()
    def infer(self) -> torch.Tensor:
        """Logits [rows, classes] of the current model with the exact aggregation and no dropout
        (rows: the roots under apply-at-root); the model is left in training mode."""
        self.model.eval()
        self.aggregation.eval()
        try:
            return self._forward(None)
        finally:
            self.model.train()
            self.aggregation.train()

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Exact distributed evaluation (cd-0 aggregation, no dropout), metrics at roots."""
        logits = self.infer()
        out = {}
        for name, key in (("train", "train_mask"), ("val", "val_mask"), ("test", "test_mask")):
            ids = torch.nonzero(self.part.masks[key][:self.rows]).flatten()
            if self.multilabel:
                gathered = self.eval_comm.gather((logits[ids].numpy(), self.part.label[ids].numpy()))
                value = None
                if self.eval_comm.rank == 0:
                    scores = np.concatenate([g[0] for g in gathered])
                    labels = np.concatenate([g[1] for g in gathered])
                    value = mean_roc_auc(scores, labels) if len(labels) else float("nan")
                out[name] = self.eval_comm.bcast(value)
            else:
                correct = int((logits[ids].argmax(1) == self.part.label[ids]).sum())
                total = self.eval_comm.sum(len(ids))
                out[name] = self.eval_comm.sum(correct) / total if total else float("nan")
        return out

    # -- checkpoints -------------------------------------------------------------------------
    def _save_checkpoint(self, epoch: int) -> None:
        folder = ckpt.checkpoint_dir(self.run_dir, epoch)
        if self.comm.rank == 0:
            folder.mkdir(parents=True, exist_ok=True)
        self.comm.barrier()
        with self.timers("exchange_wait"):
            exchange_state = self.aggregation.state_dict()
        ckpt.atomic_torch_save({"exchange": exchange_state, "rng": torch.get_rng_state()},
                               folder / f"rank_{self.comm.rank}.pt")
        if self.comm.rank == 0:
            ckpt.atomic_torch_save({"model": self.model.state_dict(),
                                    "optimizer": self.optimizer.state_dict()}, folder / "model.pt")
        self.comm.barrier()
        if self.comm.rank == 0:
            ckpt.write_manifest(folder, epoch, self.config.hyperparameters(), self.comm.size)
            ckpt.prune(self.run_dir)
        self.comm.barrier()

    def _resume(self) -> None:
        found = None
        if self.comm.rank == 0:
            try:
                found = ckpt.newest_checkpoint(self.run_dir, self.config.hyperparameters())
            except DistgnnError as exc:
                found = exc
        found = self.comm.bcast(found)
        if isinstance(found, DistgnnError):
            raise CollectiveError(str(found))
        if found is None:  # nothing to resume from: start at epoch 0 (a requeued job's first start)
            self._note(f"--resume: no checkpoint under {self.run_dir / 'checkpoints'}; "
                       f"starting at epoch 1")
            return
        epoch, folder = found
        self._note(f"--resume: continuing after epoch {epoch} from {folder}")
        state = torch.load(folder / "model.pt", weights_only=False)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        mine = torch.load(folder / f"rank_{self.comm.rank}.pt", weights_only=False)
        self.aggregation.load_state_dict(mine["exchange"])
        torch.set_rng_state(mine["rng"])
        self.start_epoch = epoch
        if self.comm.rank == 0:
            self._truncate_metrics(epoch)

    def _note(self, text: str) -> None:
        """One line on stderr from rank 0 (silenced by --quiet)."""
        if self.comm.rank == 0 and not is_quiet():
            print(f"distgnn train: {text}", file=sys.stderr, flush=True)

    def _truncate_metrics(self, epoch: int) -> None:
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return
        kept = [line for line in path.read_text().splitlines()
                if line.strip() and json.loads(line)["epoch"] <= epoch]
        ckpt.atomic_write_text("".join(line + "\n" for line in kept), path)

    # -- the run -----------------------------------------------------------------------------
    def _prepare_run_dir(self) -> None:
        if self.comm.rank == 0:
            try:
                self.run_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise DistgnnError(f"--out {self.run_dir}: cannot create ({exc.strerror})") from exc
            if not os.access(self.run_dir, os.W_OK):
                raise DistgnnError(f"--out {self.run_dir}: not writable")
            if not self.config.resume:
                for name in ("metrics.jsonl", "summary.json", "model.pt"):
                    (self.run_dir / name).unlink(missing_ok=True)
                shutil.rmtree(self.run_dir / "checkpoints", ignore_errors=True)
        self.comm.barrier()

    def run(self) -> dict[str, Any] | None:
        """Train; returns the summary on rank 0 (None elsewhere)."""
        self._prepare_run_dir()
        watchdog = None
        if self.comm.size > 1 and self.config.hang_timeout_s > 0:
            watchdog = Watchdog(self.run_dir, self.comm.rank, self.comm.size,
                                self.config.hang_timeout_s, self._phase).start()
        try:
            return self._run()
        finally:
            if watchdog is not None:
                watchdog.stop()

    def _phase(self) -> str:
        """What this rank is doing now, for the hang watchdog's report."""
        return f"epoch {self.current_epoch + 1}: {self.timers.current or 'between timed parts'}"

    def _run(self) -> dict[str, Any] | None:
        if self.config.resume:
            self._resume()
        fail_rank = os.environ.get(FAIL_RANK_ENV)
        fail_epoch = int(os.environ.get(FAIL_EPOCH_ENV, "0"))
        records: list[dict[str, Any]] = []
        if self.comm.rank == 0 and self.start_epoch > 0:
            path = self.run_dir / "metrics.jsonl"
            if path.exists():
                records = [json.loads(l) for l in path.read_text().splitlines() if l.strip()]
        metrics_file = open(self.run_dir / "metrics.jsonl", "a") if self.comm.rank == 0 else None
        try:
            for epoch in range(self.start_epoch, self.config.epochs):
                self.current_epoch = epoch
                if fail_rank is not None and int(fail_rank) == self.comm.rank and epoch == fail_epoch:
                    raise RuntimeError(f"injected failure ({FAIL_RANK_ENV}={fail_rank}) at epoch {epoch + 1}")
                record = self._epoch(epoch)
                if self.comm.rank == 0:
                    metrics_file.write(json.dumps(record) + "\n")
                    metrics_file.flush()
                    records.append(record)
                    if self.on_epoch is not None:
                        self.on_epoch(record, self.config.epochs)
                if not math.isfinite(record["loss"]):
                    raise CollectiveError(f"loss is {record['loss']} at epoch {epoch + 1}: training diverged "
                                       f"(the last good checkpoint is kept)")
                if self.config.checkpoint_every and (epoch + 1) % self.config.checkpoint_every == 0 \
                        and epoch + 1 < self.config.epochs:
                    self._save_checkpoint(epoch + 1)
        finally:
            if metrics_file is not None:
                metrics_file.close()
        self.aggregation.finish()
        peaks = self.comm.gather(_peak_rss_bytes())
        huge = self.comm.gather(huge_page_bytes())  # while the part and its caches are alive
        tiles = self.comm.gather(ops.tiling_report())
        if self.comm.rank != 0:
            return None
        summary = self._summary(records)
        summary["peak_rss_bytes_by_rank"] = peaks
        summary["huge_pages"] = {"requested": self.config.huge_pages, "thp_mode": thp_mode(),
                                 "bytes_by_rank": huge}
        summary["source_tiling"] = {"mode": str(tiling.mode()), "choices_by_rank": tiles}
        ckpt.atomic_torch_save({"model": self.model.state_dict(), "config": asdict(self.config),
                                "in_dim": int(self.part.feat.shape[1]),
                                "num_classes": self.num_classes}, self.run_dir / "model.pt")
        ckpt.atomic_write_text(json.dumps(summary, indent=1), self.run_dir / "summary.json")
        return summary

    def _epoch(self, epoch: int) -> dict[str, Any]:
        comm = self.comm
        before = dict(comm.bytes_sent)
        self.timers.reset()
        start = time.perf_counter()
        loss = self._train_step(epoch)
        elapsed = time.perf_counter() - start
        parts = self.timers.reset()
        sent = {k: comm.bytes_sent.get(k, 0) - before.get(k, 0)
                for k in ("forward", "backward", "gradients", "broadcast", "reduce")}
        aggregate = parts.get("aggregate", 0.0)
        wait = parts.get("exchange_wait", 0.0)
        allreduce = parts.get("allreduce", 0.0)
        record: dict[str, Any] = {
            "epoch": epoch + 1,
            "loss": loss,
            "epoch_time_s": comm.max(elapsed),
            "time_aggregate_s": comm.max(aggregate),
            "time_exchange_wait_s": comm.max(wait),
            "time_dense_s": comm.max(max(elapsed - aggregate - wait - allreduce, 0.0)),
            "time_allreduce_s": comm.max(allreduce),
            "bytes_forward": comm.sum(sent["forward"]),
            "bytes_backward": comm.sum(sent["backward"]),
            "bytes_gradients": comm.sum(sent["gradients"]),
            "bytes_broadcast": comm.sum(sent["broadcast"]),
            "bytes_reduce": comm.sum(sent["reduce"]),
        }
        every = self.config.eval_every
        if every and ((epoch + 1) % every == 0 or epoch + 1 == self.config.epochs):
            eval_bytes = self.eval_comm.bytes_sent.get("eval", 0)
            start = time.perf_counter()
            record.update(self.evaluate())
            self.timers.reset()
            record["time_eval_s"] = comm.max(time.perf_counter() - start)
            record["bytes_eval"] = comm.sum(self.eval_comm.bytes_sent.get("eval", 0) - eval_bytes)
        record["peak_rss_bytes"] = comm.max(_peak_rss_bytes())
        return record

    def _summary(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        attrs = self.part.attrs
        first = steady_start(self.algorithm, self.config.epochs)
        steady = [r for r in records if r["epoch"] > first] or records
        evaluated = [r for r in records if "val" in r]
        best = max(evaluated, key=lambda r: (r["val"], -r["epoch"])) if evaluated else None

        def mean(key: str) -> float:
            return float(np.mean([r[key] for r in steady])) if steady else float("nan")

        return {
            "store": attrs.get("store"),
            "method": attrs.get("method"),
            "num_parts": int(attrs.get("P")),
            "algo": self.config.algo,
            "model": self.config.model,
            "apply": self.apply,
            "epochs": self.config.epochs,
            "hyperparameters": self.config.hyperparameters(),
            "seeds": {"model": self.config.seed, "partition": attrs.get("seed")},
            "versions": versions(),
            "git_commit": git_commit(),
            "slurm_job_id": slurm_job_id(),
            "partition_dir": str(self.partition_dir.resolve()),
            "replication_factor": _replication_factor(self.partition_dir),
            "steady_state_from_epoch": first + 1,
            "input_cache_time_s": self.input_cache_time_s,
            "mean_epoch_time_s": mean("epoch_time_s"),
            "best_val": best["val"] if best else None,
            "test_at_best_val": best["test"] if best else None,
            "final_test": evaluated[-1]["test"] if evaluated else None,
            "bytes_forward": mean("bytes_forward"),
            "bytes_backward": mean("bytes_backward"),
            "bytes_gradients": mean("bytes_gradients"),
            "bytes_broadcast": mean("bytes_broadcast"),
            "bytes_reduce": mean("bytes_reduce"),
            "peak_rss_bytes": max(r["peak_rss_bytes"] for r in records) if records else None,
        }


def _replication_factor(partition_dir: Path) -> float | None:
    import zarr

    attrs = dict(zarr.open_group(str(partition_dir / "assignment.zarr"), mode="r").attrs)
    value = attrs.get("replication_factor")
    return float(value) if value is not None else None
