"""``distgnn predict RUNDIR``: the trained model's output for every vertex, as a zarr store.

Each rank computes the logits (and, with ``layer``, a hidden layer's output) for its roots with
the exact cd-0 aggregation, whatever algorithm trained the model, so every vertex gets one row,
computed once. The rows are written in global id order: each chunk of the output has one owner
rank (chunk c belongs to rank c mod P); rows travel to their chunk's owner in rounds of P chunks
(memory per rank: about P chunks), and each owner writes whole chunks, so no two ranks ever write
one chunk. The store is written under a temporary name and renamed by rank 0 when every rank is
done (docs/design.md#predictions); an old store stays in place until the new one replaces it
(:func:`distgnn.atomic.commit_dir`).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import zarr

from distgnn import atomic
from distgnn.comm import Communicator
from distgnn.errors import CollectiveError, DistgnnError
from distgnn.models.registry import FIRST_MODEL
from distgnn.train.agreement import agreed
from distgnn.train.config import TrainConfig
from distgnn.vocabulary import CUSTOM_PREFIX
from distgnn.zarr_io import create_array

PREDICTIONS = "predictions.zarr"


def read_run(run_dir: Path) -> dict[str, Any]:
    """summary.json of a finished run (with model.pt beside it), or one line saying what is missing."""
    for name in ("summary.json", "model.pt"):
        if not (run_dir / name).is_file():
            raise DistgnnError(f"{run_dir}: no {name} (not a finished distgnn train run folder)")
    return json.loads((run_dir / "summary.json").read_text())


def predict_config(summary: dict[str, Any], threads: int = 0) -> TrainConfig:
    """The run's model settings, with the exact aggregation (cd-0 at the roots) and no memory check."""
    hp = summary["hyperparameters"]
    return TrainConfig(algo="cd-0", apply="root", epochs=1, model=hp.get("model", FIRST_MODEL),
                       heads=hp.get("heads", TrainConfig.heads),
                       layers=hp["layers"], hidden=hp["hidden"],
                       aggregator=hp["aggregator"], dropout=hp["dropout"], seed=hp["seed"],
                       precision=hp.get("precision", "fp32"), threads=threads, memory_check=False)


#: the ``kind`` attribute of a predictions store (stores from before it: recognised by the
#: attributes every predictions store has, :func:`is_predictions_store`)
PREDICTIONS_KIND = "predictions"


def is_predictions_store(path: Path) -> bool:
    """Whether ``path`` is a store ``distgnn predict`` wrote (its own kind, which it may replace)."""
    try:
        attrs = json.loads((path / "zarr.json").read_text()).get("attributes", {})
    except (OSError, ValueError, AttributeError):
        return False
    return attrs.get("kind") == PREDICTIONS_KIND or (
        attrs.get("rows") == "global id order" and "run" in attrs and "aggregation" in attrs)


def check_predictions_target(target: Path) -> None:
    """Refuse, in one line, an ``--out`` that exists and is not a predictions store (a dataset, a
    partition folder, a run folder, a plain file): predict replaces only its own kind."""
    if target.exists() and not is_predictions_store(target):
        what = "a file" if not target.is_dir() else "a folder that is not a predictions store"
        raise DistgnnError(f"--out {target}: exists and is {what}; nothing was written (give a "
                           f"new path; predict replaces only a predictions store)")


def predict(run_dir: str | os.PathLike, out: str | os.PathLike | None = None, layer: int | None = None,
            partition_dir: str | os.PathLike | None = None, threads: int = 0,
            comm: Communicator | None = None) -> Path:
    """Write ``out`` (default ``RUNDIR/predictions.zarr``): ``logits`` float32 [N, C] and, with
    ``layer`` = l, ``embeddings`` float32 [N, hidden] (layer l's output after its ReLU; GAT:
    [N, heads x hidden], the heads concatenated after the ELU; the input
    of layer l + 1; 0 <= l < layers - 1), rows in global id order. Returns the store's path."""
    from distgnn.train.context import check_ranks, open_rank
    from distgnn.train.step import infer

    run_dir = Path(run_dir)
    comm = comm or Communicator()
    summary = read_run(run_dir)
    model = str(summary["hyperparameters"].get("model", FIRST_MODEL))
    if model.startswith(CUSTOM_PREFIX):
        raise CollectiveError(f"{run_dir}: trained a user's module from Python ({model[len(CUSTOM_PREFIX):]}), "
                              f"which distgnn predict cannot rebuild: load model.pt into the module, or "
                              f"train it with --model package.module:{model[len(CUSTOM_PREFIX):]} "
                              f"(docs/design.md#own-model)")
    target = Path(out) if out else run_dir / PREDICTIONS
    agreed(comm, lambda: check_predictions_target(target) if comm.rank == 0 else None)
    config = predict_config(summary, threads)
    if layer is not None and not 0 <= layer < config.layers - 1:
        raise CollectiveError(f"--layer: expected a hidden layer 0..{config.layers - 2} of this "
                              f"{config.layers}-layer model, got {layer}")
    partdir = Path(partition_dir or summary["partition_dir"])
    if not partdir.exists():
        raise CollectiveError(f"{partdir}: partition folder of {run_dir} not found (pass --partdir)")
    ctx = open_rank(partdir, config, comm, check_ranks(partdir, comm))
    state = torch.load(run_dir / "model.pt", weights_only=False)
    ctx.model.load_state_dict(state["model"])
    captured: dict[str, torch.Tensor] = {}
    hook = None
    if layer is not None:
        # the layer's output as the next layer sees it (GraphSAGE, GCN, GIN: after the ReLU; GAT:
        # heads concatenated, after the ELU)
        shape = getattr(ctx.model, "hidden_output", lambda i, out: F.relu(out))
        hook = ctx.model.layers[layer].register_forward_hook(
            lambda module, inputs, output: captured.__setitem__("h", shape(layer, output).float()))
    logits = infer(ctx)
    if hook is not None:
        hook.remove()
    gids = ctx.part.local_to_global[:ctx.rows].numpy()
    rows = {"logits": logits.numpy()}
    if layer is not None:
        rows["embeddings"] = captured["h"].numpy()
    num_nodes = int(ctx.part.attrs["num_nodes"])
    attrs = {"kind": PREDICTIONS_KIND, "run": str(run_dir.resolve()), "algo": summary["algo"], "apply": summary.get("apply"),
             "model": summary.get("model", FIRST_MODEL),
             "num_nodes": num_nodes, "num_classes": ctx.num_classes, "layer": layer,
             "aggregation": "cd-0 (exact), no dropout", "rows": "global id order"}
    return write_rows_by_global_id(comm, target, rows, gids, num_nodes, attrs)


def write_rows_by_global_id(comm: Communicator, target: Path, rows: dict[str, np.ndarray],
                            gids: np.ndarray, num_nodes: int, attrs: dict[str, Any]) -> Path:
    """Write each array of ``rows`` ([n_k, w] per rank, row i for global id ``gids[i]``; every id
    in [0, num_nodes) on exactly one rank) as one [num_nodes, w] array of a new store at
    ``target``, atomically (see the module docstring)."""
    tmp = None
    if comm.rank == 0:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic.remove_orphans(target)
        tmp = atomic.temp_path(target)
        group = zarr.open_group(str(tmp), mode="w")
        for name, block in rows.items():
            create_array(group, name, (num_nodes, block.shape[1]), np.float32)
    tmp = Path(comm.bcast(str(tmp) if tmp else None))
    comm.barrier()
    try:
        group = zarr.open_group(str(tmp), mode="r+")
        order = np.argsort(gids, kind="stable")
        sorted_gids = gids[order]
        for name, block in rows.items():
            _write_array(comm, group[name], sorted_gids, block[order].astype(np.float32, copy=False))
        comm.barrier()
    except BaseException:
        if comm.rank == 0:
            atomic.remove(tmp)
        raise
    if comm.rank == 0:
        group = zarr.open_group(str(tmp), mode="r+")
        group.update_attributes(attrs)
        atomic.commit_dir(tmp, target)
    comm.barrier()
    return target


def _write_array(comm: Communicator, array: zarr.Array, gids: np.ndarray, block: np.ndarray) -> None:
    """Send rows (``gids`` ascending) to the owners of their chunks, round by round, and write the
    chunks this rank owns."""
    step, n, P = array.chunks[0], array.shape[0], comm.size
    chunks = -(-n // step)
    bounds = np.searchsorted(gids, np.arange(0, chunks + 1) * step)
    for first in range(0, chunks, P):  # round: chunks first .. first + P - 1, chunk c to rank c % P
        # rank d owns chunk first + d of this round (first is a multiple of P)
        outgoing = [(gids[bounds[c]:bounds[c + 1]], block[bounds[c]:bounds[c + 1]])
                    if c < chunks else None for c in range(first, first + P)]
        received = comm.alltoall(outgoing)
        mine = first + comm.rank
        if mine >= chunks:
            continue
        start, stop = mine * step, min((mine + 1) * step, n)
        chunk = np.empty((stop - start, array.shape[1]), dtype=np.float32)
        filled = 0
        for ids, values in received:
            chunk[ids - start] = values
            filled += len(ids)
        if filled != stop - start:
            raise DistgnnError(f"predictions: chunk {mine} got {filled} rows of {stop - start} "
                               f"(every vertex needs exactly one root)")
        array[start:stop] = chunk
