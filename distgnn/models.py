"""GraphSAGE as a plain module: it is handed its aggregation and dropout, and knows nothing about
graphs, partitions or MPI.

Layer math equals DGL 1.1.3's ``SAGEConv`` (no feat_drop, norm or activation inside the layer):

* ``mean``: out = fc_self(h) + fc_neigh(mean_{u in N(v)} h_u), with fc_self's bias;
* ``gcn``:  out = fc_neigh((sum_{u in N(v)} h_u + h_v) / (deg_v + 1)) + bias.

fc_neigh is applied *before* aggregation when it narrows the width (in > out), as DGL does
(aggregation commutes with a linear map, so this only changes cost and rounding). The input
features are constant and layer 0 has no dropout on its input, so the trainer may hand in layer 0's
neighbour aggregate of ``x`` computed once (``x_aggregate``); layer 0 then applies fc_neigh to it,
which removes one aggregation forward and backward per epoch.

State dict (parameter names equal DGL's, so ``SAGEConv`` weights load one-to-one per layer)::

    layers.{i}.fc_neigh.weight   [out_i, in_i]   no bias
    layers.{i}.fc_self.weight    [out_i, in_i]   mean only
    layers.{i}.fc_self.bias      [out_i]         mean only
    layers.{i}.bias              [out_i]         gcn only

with widths in_0 = in_dim, out_i = hidden for i < layers - 1, and out_{layers-1} = out_dim.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from distgnn.errors import DistgnnError

#: aggregate(layer_index, h [n_src, w]) -> [n_dst, w]: the neighbour mean (``mean``) or
#: (sum + h_v) / (deg + 1) (``gcn``) of the rows of h; destinations are the first n_dst rows.
AggregateFn = Callable[[int, torch.Tensor], torch.Tensor]
#: dropout(layer_index, h) -> h: dropout applied to the input of layer ``layer_index`` (>= 1).
DropoutFn = Callable[[int, torch.Tensor], torch.Tensor]

AGGREGATORS = ("mean", "gcn")


def linear_first(in_dim: int, out_dim: int) -> bool:
    """Whether a layer mapping ``in_dim`` to ``out_dim`` columns applies its neighbour linear map
    before aggregating (it narrows the width); otherwise it aggregates its input as it comes."""
    return in_dim > out_dim


class SAGELayer(nn.Module):
    """One GraphSAGE layer (see the module docstring for the math and parameter names)."""

    def __init__(self, in_dim: int, out_dim: int, aggregator: str) -> None:
        super().__init__()
        if aggregator not in AGGREGATORS:
            raise DistgnnError(f"GraphSAGE: aggregator must be one of {', '.join(AGGREGATORS)}, got {aggregator!r}")
        self.in_dim, self.out_dim, self.aggregator = in_dim, out_dim, aggregator
        self.fc_neigh = nn.Linear(in_dim, out_dim, bias=False)
        if aggregator == "mean":
            self.fc_self = nn.Linear(in_dim, out_dim, bias=True)
        else:
            self.bias = nn.Parameter(torch.zeros(out_dim))
        self.reset_parameters()

    @property
    def lin_before_mp(self) -> bool:
        """Whether fc_neigh runs before aggregation (it narrows the width)."""
        return linear_first(self.in_dim, self.out_dim)

    def reset_parameters(self) -> None:
        """DGL's initialisation: Xavier-uniform weights with ReLU gain; biases as nn.Linear/zeros."""
        gain = nn.init.calculate_gain("relu")
        nn.init.xavier_uniform_(self.fc_neigh.weight, gain=gain)
        if self.aggregator == "mean":
            nn.init.xavier_uniform_(self.fc_self.weight, gain=gain)

    def forward(self, h: torch.Tensor, aggregate: Callable[[torch.Tensor], torch.Tensor],
                h_aggregate: Optional[torch.Tensor] = None) -> torch.Tensor:
        """h [n_src, in_dim] -> [n_dst, out_dim], n_dst = the aggregation's row count.

        ``h_aggregate`` [n_dst, in_dim]: ``aggregate(h)`` computed beforehand (h is then constant);
        ``aggregate`` is not called."""
        if h_aggregate is not None:
            h_neigh = self.fc_neigh(h_aggregate)
        elif self.lin_before_mp:
            h_neigh = aggregate(self.fc_neigh(h))
        else:
            h_neigh = self.fc_neigh(aggregate(h))
        if self.aggregator == "gcn":
            return h_neigh + self.bias
        return self.fc_self(h[: h_neigh.shape[0]]) + h_neigh


class GraphSAGE(nn.Module):
    """``layers`` SAGE layers in_dim -> hidden -> ... -> out_dim, ReLU and dropout between layers.

    ``forward(x, aggregate, dropout=None)``: ``aggregate(i, h)`` performs layer i's neighbour
    aggregation (its normalisation must match ``aggregator``); ``dropout(i, h)`` is applied to the
    input of layer i >= 1 (after the ReLU); when None, torch's dropout with probability
    ``dropout`` is used in training mode. The trainer passes keyed, partition-aware callables."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int = 2,
                 aggregator: str = "mean", dropout: float = 0.5) -> None:
        super().__init__()
        if layers < 1:
            raise DistgnnError(f"GraphSAGE: layers must be >= 1, got {layers}")
        if not 0.0 <= dropout < 1.0:
            raise DistgnnError(f"GraphSAGE: dropout must lie in [0, 1), got {dropout}")
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.layers = nn.ModuleList(SAGELayer(dims[i], dims[i + 1], aggregator) for i in range(layers))
        self.aggregator = aggregator
        self.dropout = dropout

    def forward(self, x: torch.Tensor, aggregate: AggregateFn,
                dropout: Optional[DropoutFn] = None,
                x_aggregate: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x [n, in_dim] -> logits [n_dst, out_dim].

        ``x_aggregate`` [n_dst, in_dim]: ``aggregate(0, x)`` computed once by the caller (x must not
        require grad); layer 0 then does no aggregation."""
        if x_aggregate is not None and x.requires_grad:
            raise DistgnnError("GraphSAGE: x_aggregate needs constant input features (x requires grad)")
        h = x
        for i, layer in enumerate(self.layers):
            if i > 0:
                h = F.relu(h)
                h = dropout(i, h) if dropout is not None else F.dropout(h, self.dropout, self.training)
            h = layer(h, lambda t, i=i: aggregate(i, t), x_aggregate if i == 0 else None)
        return h
