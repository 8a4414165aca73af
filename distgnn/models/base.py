"""What a model trained by distgnn receives and must declare (docs/design.md#own-model).

A model is a torch module that knows nothing about graphs, partitions or MPI. Its forward is
``model(x, aggregate, dropout=None, x_aggregate=None) -> logits``:

* ``x`` [n_src, F]: the input features of the rows it computes on (a part's roots under
  ``--apply root``, every local vertex under ``replicas``; one process: the whole graph);
* ``aggregate(layer, h [n_src, w]) -> [n_dst, w]``: layer ``layer``'s neighbour aggregation of
  the rows of h with the normalisation the model declares as ``norm`` (:data:`NORMS`), the
  destinations being the first n_dst rows of h, exact across parts (or the algorithm's delayed
  version); differentiable in h;
* ``dropout(layer, h) -> h``: dropout of layer ``layer``'s input (layer >= 1), keyed by the rows'
  global ids so that every replica of a vertex drops the same entries; None: the model's own
  ``F.dropout``;
* ``x_aggregate`` [n_dst, F]: ``aggregate(0, x)`` computed once by the trainer (the input cache),
  passed only when the model declares ``takes_input_aggregate``;
* ``attend`` (keyword), passed only when the model declares ``uses_attention``:
  ``attend(layer, z [n_src, H, D], el [n_src, H], er [n_src, H], inputs=None) -> [n_dst, H, D]``,
  per destination v and head the softmax over v's in-edges and its self loop of
  LeakyReLU_0.2(el[u] + er[v]) weighting z[u], exact across parts (or the algorithm's delayed
  version), with the keyed attention dropout in training; ``inputs = (h [n_src, I], W [H D, I])``
  declares z = (h W^T).view(n, H, D), which lets cd-r weight h and apply the current W after the
  merge (docs/design.md#input-form); differentiable in z, el, er (and h, W).

``aggregate`` and ``attend`` exchange rows between ranks, so a model must call them the same
number of times, in the same order, with the same layer indices, on every rank: a branch on this
rank's data that skips or adds a call leaves the other ranks waiting forever (or failing deep in
MPI). The environment variable ``DISTGNN_CHECK_COLLECTIVES=1`` turns that into one error line
naming the first collective that differs (docs/design.md#one-mpi-surface).

Three attributes tell the trainer how to run it (and ``uses_attention``, above):

* ``norm``: ``sum``, ``mean``, ``gcn`` ((sum + h_v) / (deg + 1)) or ``sym`` (D^-1/2 (A + I)
  D^-1/2, self loops counted), with global degrees;
* ``aggregates_input_first``: True only when layer 0 calls ``aggregate(0, x)`` on ``x`` itself (no
  map or dropout before it). The trainer then may cache that aggregate, and under ``--apply root``
  it aggregates the stored features on every replica instead of broadcasting x. Declaring it for a
  model that aggregates something else at layer 0 would give wrong results, so the default is
  False (always correct, a broadcast more);
* ``takes_input_aggregate``: the forward uses ``x_aggregate`` when given, in place of layer 0's
  aggregation (the built-in models do: layer 0's map is linear, so aggregating x first gives the
  same result whichever side the map runs on); default False;
* ``takes_bf16_input``: layer 0 reads ``x`` and ``x_aggregate`` only through linear maps and
  ``aggregate``, which take them in bfloat16 anyway under ``--precision bf16``: the trainer then
  casts both once, before the first epoch, instead of autocast casting them on every call (the
  same values; built-in GraphSAGE and GCN). Default False (float32, cast where used).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from distgnn.errors import DistgnnError
from distgnn.vocabulary import NORMS  # noqa: F401  (the norms a model declares; the docstring's NORMS)

#: aggregate(layer_index, h [n_src, w]) -> [n_dst, w] (see the module docstring)
AggregateFn = Callable[[int, torch.Tensor], torch.Tensor]
#: dropout(layer_index, h) -> h: dropout applied to the input of layer ``layer_index`` (>= 1).
DropoutFn = Callable[[int, torch.Tensor], torch.Tensor]


def first_rows(h: torch.Tensor, n: int) -> torch.Tensor:
    """The first ``n`` rows of h [m, w] (the destinations' own rows): h itself when m == n, since
    autograd's slice would cost a zero-filled [m, w] gradient and a copy for nothing."""
    return h if h.shape[0] == n else h[:n]


def linear_first(in_dim: int, out_dim: int) -> bool:
    """Whether a layer mapping ``in_dim`` to ``out_dim`` columns applies its linear map before
    aggregating (it narrows the width, as DGL's SAGEConv and GraphConv do); otherwise it
    aggregates its input as it comes."""
    return in_dim > out_dim


class LayerStack(nn.Module):
    """``layers`` graph layers with ReLU and dropout between them: the forward pass shared by the
    built-in models. A subclass sets ``self.layers`` (each ``layer(h, aggregate, h_aggregate)``
    with ``aggregate`` a one-argument callable), ``norm`` and ``aggregates_input_first``."""

    norm: str = "sum"
    aggregates_input_first: bool = False
    takes_input_aggregate: bool = True
    takes_bf16_input: bool = False

    def __init__(self, name: str, layers: int, dropout: float) -> None:
        super().__init__()
        if layers < 1:
            raise DistgnnError(f"{name}: layers must be >= 1, got {layers}")
        if not 0.0 <= dropout < 1.0:
            raise DistgnnError(f"{name}: dropout must lie in [0, 1), got {dropout}")
        self.name, self.dropout = name, dropout

    def hidden_output(self, layer: int, out: torch.Tensor) -> torch.Tensor:
        """A hidden layer's output as the next layer sees it before dropout (after the ReLU)."""
        return F.relu(out)

    @staticmethod
    def widths(in_dim: int, hidden: int, out_dim: int, layers: int) -> list[int]:
        """[in_dim, hidden, ..., hidden, out_dim]: layer i maps widths[i] to widths[i + 1]."""
        return [in_dim] + [hidden] * (layers - 1) + [out_dim]

    def forward(self, x: torch.Tensor, aggregate: AggregateFn,
                dropout: Optional[DropoutFn] = None,
                x_aggregate: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x [n, in_dim] -> logits [n_dst, out_dim].

        ``x_aggregate`` [n_dst, in_dim]: ``aggregate(0, x)`` computed once by the caller (x must not
        require grad); layer 0 then does no aggregation."""
        if x_aggregate is not None and x.requires_grad:
            raise DistgnnError(f"{self.name}: x_aggregate needs constant input features (x requires grad)")
        h = x
        # ReLU and the trainer's keyed dropout in one pass, where both are the stock ones
        fused = getattr(dropout, "after_relu", None) if type(self).hidden_output is LayerStack.hidden_output else None
        for i, layer in enumerate(self.layers):
            if i > 0 and fused is not None:
                h = fused(i, h)
            elif i > 0:
                h = self.hidden_output(i - 1, h)
                h = dropout(i, h) if dropout is not None else F.dropout(h, self.dropout, self.training)
            h = layer(h, lambda t, i=i: aggregate(i, t), x_aggregate if i == 0 else None)
        return h
