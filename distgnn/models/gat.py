"""GAT (Velickovic et al., 2018): multi-head attention over the in-neighbours and the vertex
itself; hidden layers concatenate their heads, the output layer has one head; ELU between layers;
dropout on every layer's input (layer 0 included) and, inside the attention, on its weights.

Each layer equals DGL 1.1.3's ``GATConv(in, out, heads)`` on ``dgl.add_self_loop(g)`` (LeakyReLU
slope 0.2, no residual, bias on). The attention runs through the ``attend(layer, z, el, er)``
callable the trainer hands in (:mod:`distgnn.kernels.attention`: exact across parts under cd-0, the
attention dropout keyed by edge and head). State dict (DGL's names)::

    layers.{i}.fc.weight  [heads_i * out_i, in_i]   no bias
    layers.{i}.attn_l     [1, heads_i, out_i]
    layers.{i}.attn_r     [1, heads_i, out_i]
    layers.{i}.bias       [heads_i * out_i]
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from distgnn.errors import DistgnnError
from distgnn.models.base import DropoutFn

#: attend(layer, z, el, er, inputs=None) -> [n, H, D] (distgnn/models/base.py)
AttendFn = Callable[..., torch.Tensor]


class GATLayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.out_dim = heads, out_dim
        self.fc = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.attn_l = nn.Parameter(torch.empty(1, heads, out_dim))
        self.attn_r = nn.Parameter(torch.empty(1, heads, out_dim))
        self.bias = nn.Parameter(torch.zeros(heads * out_dim))
        gain = nn.init.calculate_gain("relu")  # DGL's initialisation
        for p in (self.fc.weight, self.attn_l, self.attn_r):
            nn.init.xavier_normal_(p, gain=gain)

    def forward(self, h: torch.Tensor,
                attend: Callable[..., torch.Tensor]) -> torch.Tensor:
        """h [n, in_dim] -> [n, heads, out_dim]."""
        z = self.fc(h).view(-1, self.heads, self.out_dim)
        el = (z * self.attn_l).sum(-1)
        er = (z * self.attn_r).sum(-1)
        # (h, W): z is linear in h, so cd-r may weight h and apply today's W after the merge
        return attend(z, el, er, inputs=(h, self.fc.weight)) + self.bias.view(1, self.heads, self.out_dim)


class GAT(nn.Module):
    """``layers`` GAT layers: in_dim -> heads x hidden (concatenated) -> ... -> out_dim (one head)."""

    norm = "sum"                   # its aggregate callable is not used; attend is
    aggregates_input_first = False  # layer 0 maps (and drops out) its input first
    takes_input_aggregate = False
    uses_attention = True

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int = 2, heads: int = 8,
                 dropout: float = 0.6) -> None:
        super().__init__()
        if layers < 1 or heads < 1:
            raise DistgnnError(f"GAT: layers and heads must be >= 1, got {layers} and {heads}")
        if not 0.0 <= dropout < 1.0:
            raise DistgnnError(f"GAT: dropout must lie in [0, 1), got {dropout}")
        widths = [in_dim] + [hidden * heads] * (layers - 1)
        self.layers = nn.ModuleList(
            GATLayer(widths[i], hidden, heads) if i < layers - 1 else GATLayer(widths[i], out_dim, 1)
            for i in range(layers))
        self.dropout, self.heads = dropout, heads

    def hidden_output(self, layer: int, out: torch.Tensor) -> torch.Tensor:
        """A hidden layer's output as the next layer sees it before dropout: heads concatenated, ELU."""
        return F.elu(out.flatten(1))

    def forward(self, x: torch.Tensor, aggregate: Optional[Callable] = None,
                dropout: Optional[DropoutFn] = None, attend: Optional[AttendFn] = None) -> torch.Tensor:
        """x [n, in_dim] -> logits [n, out_dim]; ``attend`` is required."""
        if attend is None:
            raise DistgnnError("GAT: needs the attend callable (distgnn.kernels.attention or the trainer's)")
        h = x
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            h = dropout(i, h) if dropout is not None else F.dropout(h, self.dropout, self.training)
            out = layer(h, lambda z, el, er, i=i, **kw: attend(i, z, el, er, **kw))
            h = self.hidden_output(i, out) if i < last else out.mean(1)
        return h
