"""GraphSAGE (Hamilton et al., 2017) as a plain module: it is handed its aggregation and dropout,
and knows nothing about graphs, partitions or MPI.

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
from torch import nn

from distgnn.errors import DistgnnError
from distgnn.models.base import LayerStack, first_rows, linear_first
from distgnn.vocabulary import AGGREGATORS


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
        # h_neigh added into fc_self's fresh output: the same sums bit for bit as `a + b`, without
        # a new [n, out] tensor (its allocation and first-touch page faults cost more than the add).
        # (fc_self's GEMM accumulating into h_neigh would save the add too, but a GEMM's rounding
        # of C + AB depends on the row count: cd-0 would then differ from one process.)
        out = self.fc_self(first_rows(h, h_neigh.shape[0]))
        # (under bf16 a float32 h_neigh must promote the sum, as `+` does: added in place only
        # when the dtypes agree)
        return out.add_(h_neigh) if out.dtype == h_neigh.dtype else out + h_neigh


class GraphSAGE(LayerStack):
    """``layers`` SAGE layers in_dim -> hidden -> ... -> out_dim, ReLU and dropout between layers
    (the forward pass and its callables: :class:`distgnn.models.base.LayerStack`)."""

    takes_bf16_input = True  # layer 0: x and x_aggregate meet only linear maps and aggregate

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int = 2,
                 aggregator: str = "mean", dropout: float = 0.5) -> None:
        super().__init__("GraphSAGE", layers, dropout)
        dims = self.widths(in_dim, hidden, out_dim, layers)
        self.layers = nn.ModuleList(SAGELayer(dims[i], dims[i + 1], aggregator) for i in range(layers))
        self.aggregator = aggregator

    @property
    def norm(self) -> str:
        return self.aggregator

    @property
    def aggregates_input_first(self) -> bool:
        return not self.layers[0].lin_before_mp
