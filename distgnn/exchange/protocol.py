"""What a model's layers and the trainer see of the exchange: one protocol both modes implement.

A model calls ``aggregate(layer, h)`` (and GAT ``attend``, through the trainer) and never sees
MPI; the trainer builds one aggregation per run (:func:`distgnn.exchange.build_aggregation`) and
uses only the members below.
"""
from __future__ import annotations

from typing import Any, Iterable, Protocol, runtime_checkable

import torch

from distgnn.exchange.mailbox import Mailbox
from distgnn.timers import Timers


@runtime_checkable
class Aggregation(Protocol):
    """One rank's neighbour aggregation across parts.

    ``rows``: how many rows the dense work runs on (the part's roots under apply-at-root, every
    local vertex under replicas); ``h`` and every result have that many rows. ``training``:
    True runs the algorithm's exchange; False (evaluation) the exact one on its own communicator,
    leaving the algorithm's state untouched.
    """

    rows: int
    training: bool

    def __call__(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        """The aggregate [rows, w] of layer ``layer``'s input h [rows, w] (degree-scaled by the
        model's norm)."""

    def attention(self, layer: int, z: torch.Tensor, el: torch.Tensor, er: torch.Tensor,
                  dropout: Any = None,
                  inputs: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """GAT's softmax attention [rows, H, D] from z [rows, H, D], el and er [rows, H];
        ``inputs`` the layer's (h, W) with z = h W^T (lets cd-r use the input form)."""

    def input_aggregate(self) -> torch.Tensor:
        """The exact aggregate of the stored features [rows, F] (the input cache), on the
        evaluation communicator."""

    def gather_features_as(self, dtype: torch.dtype) -> None:
        """Gather the stored features in ``dtype`` from now on (bfloat16 under bf16)."""

    def train(self, mode: bool = True) -> None:
        """Training (True) or evaluation (False) from now on."""

    def eval(self) -> None:
        """Evaluation from now on."""

    def finish(self) -> None:
        """Complete every message in flight (before a checkpoint or MPI finalize)."""

    def state_dict(self) -> dict[str, Any]:
        """The delayed algorithm's state, messages in flight included (for a checkpoint)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""


class ModeAndMessages:
    """What both modes share: the training/evaluation switch and draining the mailboxes of
    their delayed layers (:meth:`mailboxes`)."""

    training: bool
    timers: Timers

    def mailboxes(self) -> Iterable[Mailbox]:
        """Every mailbox with messages that may be in flight."""
        return ()

    def training_rows(self) -> torch.Tensor | None:
        return None

    def training_input_aggregate(self, roots_aggregate: torch.Tensor) -> torch.Tensor:
        return roots_aggregate

    def train(self, mode: bool = True) -> None:
        self.training = mode

    def eval(self) -> None:
        self.training = False

    def finish(self) -> None:
        """Complete every message still in flight (before a checkpoint or MPI finalize)."""
        with self.timers("exchange_wait"):
            for box in self.mailboxes():
                box.drain()
