"""GIN (Xu et al., 2019): h' = MLP((1 + eps) h_v + sum_{u in N(v)} h_u), eps learned, the MLP
Linear(in, hidden) -> ReLU -> Linear(hidden, out).

Each layer equals DGL 1.1.3's ``GINConv(MLP, "sum", init_eps=0, learn_eps=True)``. The MLP has no
batch normalisation (its statistics over all vertices would need an exchange of their own).
State dict (DGL's names)::

    layers.{i}.eps                  [1]
    layers.{i}.apply_func.0.weight  [hidden, in_i]    layers.{i}.apply_func.0.bias  [hidden]
    layers.{i}.apply_func.2.weight  [out_i, hidden]   layers.{i}.apply_func.2.bias  [out_i]
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn

from distgnn.models.base import LayerStack, first_rows


class GINLayer(nn.Module):
    """One GIN layer; ``aggregate`` must perform the plain ``sum``."""

    def __init__(self, in_dim: int, out_dim: int, mlp_width: int) -> None:
        super().__init__()
        self.apply_func = nn.Sequential(nn.Linear(in_dim, mlp_width), nn.ReLU(),
                                        nn.Linear(mlp_width, out_dim))
        self.eps = nn.Parameter(torch.zeros(1))

    def forward(self, h: torch.Tensor, aggregate: Callable[[torch.Tensor], torch.Tensor],
                h_aggregate: Optional[torch.Tensor] = None) -> torch.Tensor:
        """h [n_src, in_dim] -> [n_dst, out_dim]; ``h_aggregate``: ``aggregate(h)`` precomputed."""
        neigh = aggregate(h) if h_aggregate is None else h_aggregate
        return self.apply_func((1 + self.eps) * first_rows(h, neigh.shape[0]) + neigh)


class GIN(LayerStack):
    """``layers`` GIN layers in_dim -> hidden -> ... -> out_dim (each MLP ``hidden`` wide), ReLU
    and dropout between layers."""

    norm = "sum"
    aggregates_input_first = True

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int = 2,
                 dropout: float = 0.5) -> None:
        super().__init__("GIN", layers, dropout)
        dims = self.widths(in_dim, hidden, out_dim, layers)
        self.layers = nn.ModuleList(GINLayer(dims[i], dims[i + 1], hidden) for i in range(layers))
