"""Training a user's own model from Python (docs/design.md#own-model): the same trainer, exchange,
algorithms, checkpoints and metrics as ``distgnn train``, with the user's module in place of the
``--model`` network. Run the script under ``mpiexec -n P`` (or ``srun -n P``), one rank per part."""
from __future__ import annotations

import os
import sys
import traceback
from dataclasses import fields
from typing import Any, Callable

import torch

from distgnn.errors import DistgnnError
from distgnn.train.config import TrainConfig
from distgnn.vocabulary import CUSTOM_PREFIX

#: TrainConfig fields a caller may set (``model`` is the module itself)
SETTINGS = tuple(f.name for f in fields(TrainConfig) if f.name != "model")


def train_model(partition_dir: str | os.PathLike, model: torch.nn.Module, *,
                out: str | os.PathLike | None = None,
                on_epoch: Callable[[dict[str, Any], int], None] | None = None,
                comm: Any = None, **settings: Any) -> dict[str, Any] | None:
    """Train ``model`` on every rank's part of ``partition_dir``; returns the run's summary on
    rank 0 (``summary.json``), None on the other ranks.

    ``model`` follows :mod:`distgnn.models.base`: ``forward(x, aggregate, dropout=None)`` (plus
    ``x_aggregate`` when it declares ``takes_input_aggregate``, ``attend`` when it declares
    ``uses_attention``), a ``norm`` attribute, and optionally ``aggregates_input_first``. Rank 0's initial parameters are copied to every rank,
    so the replicas start equal however the module was seeded. ``settings``: the
    :class:`~distgnn.train.config.TrainConfig` fields (``algo``, ``epochs``, ``lr``, ``dropout``,
    ``weight_decay``, ``seed``, ``apply``, ``eval_every``, ``checkpoint_every``, ``resume``,
    ``threads``, ...), with ``distgnn train``'s defaults; ``out``: the run folder (default as
    ``distgnn train``'s, the model's class name in place of the model name). ``on_epoch(record,
    epochs)`` is called on rank 0 after each epoch with its ``metrics.jsonl`` record.
    """
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise DistgnnError(f"train_model: unknown setting {unknown[0]!r} (expected one of "
                           f"{', '.join(SETTINGS)})")
    if not isinstance(model, torch.nn.Module) or not isinstance(getattr(model, "norm", None), str):
        raise DistgnnError("train_model: model must be a torch module with a norm attribute "
                           "(sum, mean, gcn or sym; see distgnn.models.base)")
    from distgnn.comm import Communicator
    from distgnn.train.trainer import Trainer

    config = TrainConfig(model=custom_model_name(model), **settings)
    if getattr(model, "uses_attention", False):
        from dataclasses import replace

        from distgnn.exchange.spec import default_messages
        from distgnn.train.config import check_attention, check_config

        algorithm = check_config(config).algorithm
        check_attention(config, algorithm, f"train_model({config.model})")
        if config.message_precision == "auto":  # attention partials: never an integer width
            config = replace(config, message_precision=default_messages(algorithm, config.precision,
                                                                        attention=True))
    comm = comm or Communicator()
    try:
        return Trainer(partition_dir, config, out, comm, on_epoch, model=model).run()
    except Exception:
        if comm.size > 1:  # the other ranks would wait for this one forever: end the job
            traceback.print_exc()
            print(f"distgnn.train_model: rank {comm.rank} failed; ending the job", file=sys.stderr,
                  flush=True)
            comm.abort(1)
        raise


def custom_model_name(model: torch.nn.Module) -> str:
    """``custom:<class name>``: how summaries, checkpoints and run folders name a user's model."""
    return f"{CUSTOM_PREFIX}{type(model).__name__}"
