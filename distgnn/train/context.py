"""One rank's context for a run: the checks, its part, the model, the aggregation and the
precision. Training (:mod:`distgnn.train.trainer`) and prediction (:mod:`distgnn.train.predict`)
open it the same way.

Opening is two steps, so a trainer can start its hang watchdog between them: :func:`check_ranks`
reads the partition folder's assignment (cheap, every rank) and refuses a wrong rank count;
:func:`open_rank` checks memory, loads the part, checks that every part belongs to this assignment
and graph, and builds the model and the aggregation (collective).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from distgnn.comm import Communicator
from distgnn.errors import CollectiveError, DistgnnError
from distgnn.exchange import Aggregation, build_aggregation
from distgnn.models import registry
from distgnn.models.base import LayerStack
from distgnn.train.agreement import agreed
from distgnn.exchange.spec import ExchangeSpec
from distgnn.kernels.message_codec import MessageCodec
from distgnn.train.config import TrainConfig, check_config
from distgnn.partition.part_loader import PartitionData, load_partition, read_assignment_attrs
from distgnn.train.staging import stage_part, unstage
from distgnn.timers import Timers
from distgnn.vocabulary import CUSTOM_PREFIX, Algorithm


@dataclass
class RankContext:
    """What one rank holds for a run (module docstring)."""

    config: TrainConfig
    exchange: ExchangeSpec       #: the run's exchange, resolved once from ``config``
    algorithm: Algorithm
    comm: Communicator
    eval_comm: Communicator      #: evaluation's own communicator (never mixed with cd-r traffic)
    partition_dir: Path
    assignment: dict[str, Any]   #: the attributes of ``assignment.zarr``
    part: PartitionData
    apply: str                   #: ``root`` or ``replicas``
    model: torch.nn.Module
    aggregation: Aggregation
    timers: Timers
    rows: int                    #: rows the dense work runs on (roots, or every local vertex)
    #: [rows, F]: the stored features of those rows (float32; bfloat16 under --precision bf16
    #: for a model that ``takes_bf16_input``, and so the input cache)
    x: torch.Tensor
    multilabel: bool
    num_classes: int
    #: [rows, F]: layer 0's exact aggregate of the features (the input cache; dtype as x), or None
    input_aggregate: torch.Tensor | None = None
    input_cache_time_s: float = 0.0
    #: ``--cdr-rule recompute`` (else None): int64 [n]: the local ids layer 0 runs on in training
    #: (the roots first, then the leaves whose rows layer 1 reads), their features [n, F] and
    #: input cache [n, F] (docs/design.md#cdr-rules)
    train_rows: torch.Tensor | None = None
    train_x: torch.Tensor | None = None
    train_input_aggregate: torch.Tensor | None = None
    #: ``--cdr-rule`` recompute rules: the leaf rows that recompute, summed over ranks
    recomputed_rows: int | None = None

    @property
    def replication_factor(self) -> float | None:
        value = self.assignment.get("replication_factor")
        return float(value) if value is not None else None


def check_ranks(partition_dir: str | os.PathLike, comm: Communicator) -> dict[str, Any]:
    """The assignment's attributes, refusing (on every rank alike) a rank count other than P."""
    attrs = agreed(comm, lambda: read_assignment_attrs(partition_dir))
    num_parts = int(attrs["P"])
    if comm.size != num_parts:
        raise CollectiveError(f"{partition_dir} has {num_parts} parts but {comm.size} ranks were "
                              f"started (run mpiexec -n {num_parts} or srun -n {num_parts})")
    return attrs


def open_rank(partition_dir: str | os.PathLike, config: TrainConfig, comm: Communicator,
              assignment: dict[str, Any], model: torch.nn.Module | None = None,
              note: Callable[[str], None] = lambda text: None) -> RankContext:
    """Load this rank's part and build everything a run needs (collective; ``assignment`` from
    :func:`check_ranks`). ``model``: a user's module following :mod:`distgnn.models.base`
    (rank 0's parameters are copied to every rank); default: ``config``'s built-in model.
    ``note`` prints a warning line (rank 0)."""
    exchange = check_config(config)
    partition_dir = Path(partition_dir)
    if config.memory_check:
        check_memory(partition_dir, config, comm)
    source = partition_dir
    if config.stage_dir:  # node-local copy of this rank's part (docs/design.md#staging)
        source = agreed(comm, lambda: stage_part(partition_dir, comm.rank, config.stage_dir))
    try:
        part = agreed(comm, lambda: load_partition(source, comm.rank,
                                                   huge_pages=config.huge_pages))
    finally:
        if source != partition_dir:
            unstage(source)
    check_consistency(partition_dir, part, assignment, comm)
    timers = Timers()
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    eval_comm = comm.dup()
    torch.manual_seed(config.seed)
    if model is None and config.model.startswith(CUSTOM_PREFIX):
        raise CollectiveError(f"{config.model}: a user's model is trained from Python "
                           f"(distgnn.train_model), not rebuilt from its name")
    num_classes = int(part.attrs["num_classes"])
    if model is None:
        model = registry.build_model(config.model, part.feat.shape[1], config.hidden, num_classes,
                                     config.layers, config.dropout,
                                     **registry.spec(config.model).option_values(config))
    elif comm.size > 1:  # the replicas start equal however the user's module was seeded
        model.load_state_dict(comm.bcast(model.state_dict()))
    recompute = exchange.recomputes and isinstance(model, LayerStack)
    aggregation = build_aggregation(
        part, exchange, model.norm, comm, eval_comm, timers, config.threads,
        aggregates_first=bool(getattr(model, "aggregates_input_first", False)),
        recompute=recompute)
    # training rows on the wire (docs/design.md#message-precision)
    comm.set_messages(MessageCodec(exchange.messages, exchange.message_group, config.threads),
                      config.seed)
    if config.precision == "bf16":  # rows gathered in bfloat16 (distgnn/kernels/precision.py)
        aggregation.gather_features_as(torch.bfloat16)
    ctx = RankContext(config, exchange, exchange.algorithm, comm, eval_comm, partition_dir,
                      assignment, part, exchange.apply,
                      model, aggregation, timers, aggregation.rows, part.feat[:aggregation.rows],
                      bool(part.attrs.get("multilabel", False)), num_classes)
    if config.input_cache and getattr(model, "takes_input_aggregate", False):
        # layer 0's input is constant: its exact aggregate is computed once; evaluation always
        # uses it, training where the algorithm's own layer-0 aggregate equals it (cd-0, or one
        # rank, or cd-r under --cdr-rule input), so the training semantics of 0c and cd-r are
        # otherwise unchanged
        start = time.perf_counter()
        ctx.input_aggregate = aggregation.input_aggregate()
        ctx.train_rows = aggregation.training_rows()
        if recompute:
            extra = 0 if ctx.train_rows is None else len(ctx.train_rows) - aggregation.rows
            ctx.recomputed_rows = int(comm.sum(extra))
        if ctx.train_rows is not None:
            ctx.train_x = part.feat.index_select(0, ctx.train_rows)
            ctx.train_input_aggregate = aggregation.training_input_aggregate(ctx.input_aggregate)
        timers.reset()
        ctx.input_cache_time_s = comm.max(time.perf_counter() - start)
    if config.precision == "bf16" and getattr(model, "takes_bf16_input", False):
        cast_constant_inputs(ctx, torch.bfloat16)
    return ctx


def cast_constant_inputs(ctx: RankContext, dtype: torch.dtype) -> None:
    """Layer 0's constant inputs (the features, the input cache, their training rows) in
    ``dtype`` once, for a model whose layer 0 would cast them on every call anyway
    (``takes_bf16_input``, distgnn/models/base.py): the same values, without a cast of a
    [rows, F] table in every epoch's forward."""
    for name in ("x", "input_aggregate", "train_x", "train_input_aggregate"):
        value = getattr(ctx, name)
        if value is not None:
            setattr(ctx, name, value.to(dtype))


def check_memory(partition_dir: Path, config: TrainConfig, comm: Communicator) -> None:
    """Refuse, before loading anything, a run whose ranks on some machine would need more
    memory than it has available (per-rank estimate from the partition attributes)."""
    from distgnn.scaling.rank_memory import estimate_rank_memory, memory_budget

    c = config
    shape = registry.shape_spec(c.model)  # a user's model is estimated as the default one
    mine = agreed(comm, lambda: estimate_rank_memory(
        partition_dir, comm.rank, c.layers, c.hidden, c.exchange_spec(), model=c.model,
        **shape.option_values(c)))
    budget, source = memory_budget()
    need, available = comm.node_sum_and_min(mine, budget)
    ratio, need, available, source = comm.max((need / max(available, 1), need, available, source))
    if available and ratio > 1.0:
        raise CollectiveError(
            f"the run would not fit in memory: the ranks on one machine need an estimated "
            f"{need / 2**30:.2f} GiB but {available / 2**30:.2f} GiB are available ({source}; "
            f"estimate from the partition attributes; use more machines, more parts or a smaller "
            f"--hidden, or --skip-memory-check)")


def check_consistency(partition_dir: Path, part: PartitionData, assignment: dict[str, Any],
                      comm: Communicator) -> None:
    """All parts come from this folder's assignment (whose checksum they carry), the same graph
    store and P; the graph is unchanged since."""
    attrs = part.attrs
    mine = (attrs.get("graph_checksum"), attrs.get("assignment_checksum"), attrs.get("P"),
            attrs.get("method"), attrs.get("seed"))
    everyone = comm.allgather(mine)
    for k, theirs in enumerate(everyone):
        if theirs != everyone[0]:
            raise CollectiveError(f"{partition_dir}: part_{k}.zarr disagrees with part_0.zarr "
                                  f"(graph checksum, assignment, P, method or seed): rebuild the folder")
    if everyone[0][1] != assignment.get("checksum"):
        raise CollectiveError(f"{partition_dir}: assignment.zarr (checksum "
                              f"{assignment.get('checksum')}) is not the assignment the parts were "
                              f"built from ({everyone[0][1]}): rebuild the parts (distgnn partition "
                              f"build) or restore the assignment")
    agreed(comm, lambda: check_graph_unchanged(partition_dir, attrs) if comm.rank == 0 else None)


def check_graph_unchanged(partition_dir: Path, attrs: dict[str, Any]) -> None:
    """The graph store the parts were built from, where it still exists, has the checksum they
    recorded."""
    graph = attrs.get("graph")
    if graph and Path(graph).exists():
        import zarr

        now = dict(zarr.open_group(str(graph), mode="r").attrs).get("checksum")
        if now != attrs.get("graph_checksum"):
            raise DistgnnError(f"{graph}: graph store changed since {partition_dir} was "
                               f"built (checksum {now} != {attrs.get('graph_checksum')}): "
                               f"repartition it")
