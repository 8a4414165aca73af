"""The models ``distgnn train --model`` builds, and the contract a user's own model follows
(:mod:`distgnn.models.base`): a model is handed its aggregation and dropout and knows nothing
about graphs, partitions or MPI."""
from __future__ import annotations

from torch import nn

from distgnn.errors import DistgnnError
from distgnn.models.base import NORMS, AggregateFn, DropoutFn, LayerStack, linear_first
from distgnn.models.gat import GAT, GATLayer
from distgnn.models.gcn import GCN, GCNLayer
from distgnn.models.gin import GIN, GINLayer
from distgnn.models.sage import AGGREGATORS, GraphSAGE, SAGELayer

from distgnn.train.config import MODELS

__all__ = ["AGGREGATORS", "MODELS", "NORMS", "AggregateFn", "DropoutFn", "GAT", "GATLayer", "GCN",
           "GCNLayer", "GIN",
           "GINLayer", "GraphSAGE", "LayerStack", "SAGELayer", "build_model", "linear_first"]


def build_model(model: str, in_dim: int, hidden: int, out_dim: int, layers: int,
                aggregator: str = "mean", dropout: float = 0.5, heads: int = 8) -> nn.Module:
    """The ``--model`` network for ``in_dim`` input columns and ``out_dim`` classes (``aggregator``:
    GraphSAGE's only; ``heads``: GAT's only, ``hidden`` per head)."""
    if model == "sage":
        return GraphSAGE(in_dim, hidden, out_dim, layers, aggregator, dropout)
    if model == "gcn":
        return GCN(in_dim, hidden, out_dim, layers, dropout)
    if model == "gin":
        return GIN(in_dim, hidden, out_dim, layers, dropout)
    if model == "gat":
        return GAT(in_dim, hidden, out_dim, layers, heads, dropout)
    raise DistgnnError(f"--model must be one of {', '.join(MODELS)}, got {model!r}")
