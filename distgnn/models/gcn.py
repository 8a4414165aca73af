"""GCN (Kipf and Welling, 2017): h' = D^-1/2 (A + I) D^-1/2 h W + b, with global degrees on both
sides (in-degree of the destination, out-degree of the source, each counting the self loop).

Each layer equals DGL 1.1.3's ``GraphConv(in, out, norm="both")`` on ``dgl.add_self_loop(g)``:
W is applied before the aggregation when it narrows the width (in > out), as DGL does. State dict
(DGL's names, so ``GraphConv`` weights load one-to-one per layer)::

    layers.{i}.weight   [in_i, out_i]   (DGL's orientation: h @ weight)
    layers.{i}.bias     [out_i]
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn

from distgnn.models.base import LayerStack, linear_first


class GCNLayer(nn.Module):
    """One graph convolution; ``aggregate`` must perform the ``sym`` normalisation."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.weight = nn.Parameter(torch.empty(in_dim, out_dim))
        self.bias = nn.Parameter(torch.zeros(out_dim))
        nn.init.xavier_uniform_(self.weight)  # DGL's initialisation

    def forward(self, h: torch.Tensor, aggregate: Callable[[torch.Tensor], torch.Tensor],
                h_aggregate: Optional[torch.Tensor] = None) -> torch.Tensor:
        """h [n_src, in_dim] -> [n_dst, out_dim]; ``h_aggregate``: ``aggregate(h)`` precomputed."""
        if h_aggregate is not None:
            return self.affine(h_aggregate)
        if linear_first(self.in_dim, self.out_dim):
            return aggregate(h @ self.weight) + self.bias
        return self.affine(aggregate(h))

    def affine(self, a: torch.Tensor) -> torch.Tensor:
        """a W + b. Under bf16 autocast the bias joins the GEMM, so the output stays bfloat16 for
        the next layer (a float32 bias added to a bfloat16 product would promote it, and the next
        layer cast it back); in float32, the product then the sum, as always (a GEMM's C + A B
        rounds by its blocking, which follows the row count: cd-0 would differ from one process)."""
        if torch.is_autocast_enabled("cpu"):
            return torch.addmm(self.bias, a, self.weight)
        return a @ self.weight + self.bias


class GCN(LayerStack):
    """``layers`` graph convolutions in_dim -> hidden -> ... -> out_dim, ReLU and dropout between."""

    norm = "sym"
    takes_bf16_input = True  # layer 0: x and x_aggregate meet only linear maps and aggregate

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int = 2,
                 dropout: float = 0.5) -> None:
        super().__init__("GCN", layers, dropout)
        dims = self.widths(in_dim, hidden, out_dim, layers)
        self.layers = nn.ModuleList(GCNLayer(dims[i], dims[i + 1]) for i in range(layers))

    @property
    def aggregates_input_first(self) -> bool:
        first = self.layers[0]
        return not linear_first(first.in_dim, first.out_dim)
