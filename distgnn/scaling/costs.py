"""Compute costs measured on one rank, in units that carry over to other graphs and P.

* aggregation: seconds per (edge x column), over the forward and backward aggregations of every
  layer (work units ``(edges + r * vertices) * sum_l 2 a_l``, a_l = layer l's aggregation width,
  r = what one destination row costs in edges: :func:`measure_row_cost`, on the same graph);
* dense work: seconds per (vertex x width product), over the linear maps and everything else
  per vertex (work units ``vertices * sum_l in_l out_l``);
* copies around an exchange (gather, clone, scatter-add of rows): seconds per float moved
  (from the microbenchmark).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from distgnn.models import registry
from distgnn.models.registry import DEFAULT_MODEL
from distgnn.scaling.rank_memory import layer_widths, num_parameters
from distgnn.vocabulary import parse_algorithm


@dataclass
class GraphShape:
    """What the model needs of a graph."""

    num_nodes: int
    num_edges: int    #: directed edges the aggregation runs over
    feat_dim: int
    num_classes: int
    name: str = ""


@dataclass
class ModelShape:
    layers: int = 3
    hidden: int = 256
    #: the trainer's input cache (``--no-input-cache`` turns it off): layer 0's aggregate of the
    #: features is computed once, so cd-0 (and any algorithm on one rank) skips layer 0's
    #: aggregation and exchange every epoch; 0c and cd-r (not cd-r-orig) do too in steady state
    #: when layer 0 aggregates before its linear map (their own aggregate of the constant input)
    input_cache: bool = True
    #: a registered model (distgnn/models/registry.py): its widths, aggregation widths and dense work
    model: str = DEFAULT_MODEL

    def widths(self, graph: GraphShape) -> list[tuple[int, int, int]]:
        return layer_widths(graph.feat_dim, self.hidden, graph.num_classes, self.layers, self.model)

    def aggregated_widths(self, graph: GraphShape, algo: str = "cd-0", parts: int = 1,
                          rule_input_cache: bool = False) -> list[int]:
        """Aggregation width of every layer that aggregates in a training epoch of ``algo`` at
        ``parts`` ranks (``rule_input_cache``: cd-r under a ``--cdr-rule`` that trains layer 0
        on the input cache)."""
        algorithm, widths = parse_algorithm(algo), self.widths(graph)
        in_dim, _, aggregated = widths[0]
        cached = self.input_cache and (algorithm.trains_with_input_cache(parts) or rule_input_cache
                                       or algorithm.keeps_own_input_aggregate(parts, aggregated == in_dim))
        return [w for _, _, w in widths[1 if cached else 0:]]

    def agg_units(self, graph: GraphShape, algo: str = "cd-0", parts: int = 1,
                  rule_input_cache: bool = False) -> int:
        """Columns aggregated per edge per epoch (forward and backward of every aggregating layer)."""
        return sum(2 * a for a in self.aggregated_widths(graph, algo, parts, rule_input_cache))

    def dense_units(self, graph: GraphShape, first_layers: int | None = None) -> int:
        """Width products per vertex per epoch (the model's registered count: in x out per layer;
        GIN's MLP: in x hidden + hidden x out); ``first_layers``: of those layers only."""
        return registry.shape_spec(self.model).dense_units(self.widths(graph)[:first_layers],
                                                           self.hidden)

    def num_parameters(self, graph: GraphShape) -> int:
        return num_parameters(graph.feat_dim, self.hidden, graph.num_classes, self.layers, self.model)


@dataclass
class ComputeCosts:
    agg_s_per_edge_col: float
    dense_s_per_vertex_unit: float
    copy_s_per_float: float = 0.0
    overhead_s: float = 0.0        #: per-epoch time not in the parts above (P = 1)
    threads: int = 1
    #: slowdown of aggregation / dense work when ranks share one machine (measured with two
    #: ranks computing at once; 1 when every rank has its own socket)
    concurrency_agg: float = 1.0
    concurrency_dense: float = 1.0
    #: one destination row of the aggregation costs as much as this many edges
    agg_row_per_edge: float = 0.0
    #: encoding one float32 value in an integer --message-precision and decoding it again
    #: (distgnn.scaling.microbench.pack_cost; 0 in calibrations made before it)
    pack_s_per_float: float = 0.0
    #: the same where the decode adds each row into its table (cd-0's exchanges and the fresh
    #: broadcast: pack_cost(into=True)); 0: ``pack_s_per_float``
    pack_into_s_per_float: float = 0.0

    def scaled(self, speedup: float) -> "ComputeCosts":
        """The same costs on hardware ``speedup`` times faster at compute and copies."""
        return ComputeCosts(self.agg_s_per_edge_col / speedup, self.dense_s_per_vertex_unit / speedup,
                            self.copy_s_per_float / speedup, self.overhead_s / speedup, self.threads,
                            self.concurrency_agg, self.concurrency_dense, self.agg_row_per_edge,
                            self.pack_s_per_float / speedup, self.pack_into_s_per_float / speedup)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ComputeCosts":
        return cls(**d)


def fit_costs(records: list[dict], graph: GraphShape, model: ModelShape, copy_s_per_float: float = 0.0,
              threads: int = 1, concurrency_agg: float = 1.0, concurrency_dense: float = 1.0,
              agg_row_per_edge: float = 0.0) -> ComputeCosts:
    """Costs from a P = 1 run's steady-state ``metrics.jsonl`` records (median over epochs)."""
    agg = float(np.median([r["time_aggregate_s"] for r in records]))
    dense = float(np.median([r["time_dense_s"] for r in records]))
    total = float(np.median([r["epoch_time_s"] for r in records]))
    rest = max(total - agg - dense, 0.0)
    edges = graph.num_edges + agg_row_per_edge * graph.num_nodes
    return ComputeCosts(agg_s_per_edge_col=agg / (edges * model.agg_units(graph)),
                        dense_s_per_vertex_unit=dense / (graph.num_nodes * model.dense_units(graph)),
                        copy_s_per_float=copy_s_per_float, overhead_s=rest, threads=threads,
                        concurrency_agg=concurrency_agg, concurrency_dense=concurrency_dense,
                        agg_row_per_edge=agg_row_per_edge)


def half_edges(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The CSR keeping every other edge of each row (same vertices, about half the edges)."""
    deg = np.diff(indptr)
    position = np.arange(len(indices)) - np.repeat(indptr[:-1], deg)
    keep = position % 2 == 0
    new_indptr = np.zeros_like(indptr)
    np.cumsum((deg + 1) // 2, out=new_indptr[1:])
    return new_indptr, np.ascontiguousarray(indices[keep])


def measure_row_cost(indptr: np.ndarray, indices: np.ndarray, width: int = 256, threads: int = 1,
                     repeats: int = 5) -> tuple[float, float, float]:
    """What one destination row of the aggregation kernel costs, in edges, on this graph:
    ``t = c (E + r N)`` timed on the graph and on its half-edge version (same N) gives r.
    Returns (r, t_full s, t_half s), times the minimum over ``repeats``."""
    import time

    import torch

    from distgnn.kernels import ops

    n = len(indptr) - 1
    x = torch.randn(n, width)
    half = half_edges(indptr, indices)

    def timed(ip: np.ndarray, ix: np.ndarray) -> float:
        ip_t, ix_t = torch.from_numpy(ip), torch.from_numpy(ix)
        ops.aggregate(ip_t, ix_t, x, norm="sum", threads=threads)  # warm-up: first touch of pages
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            ops.aggregate(ip_t, ix_t, x, norm="sum", threads=threads)
            best = min(best, time.perf_counter() - start)
        return best

    full_t, half_t = timed(indptr, indices), timed(*half)
    e_full, e_half = len(indices), len(half[1])
    # c (e_full + r n) = full_t, c (e_half + r n) = half_t
    c = (full_t - half_t) / max(e_full - e_half, 1)
    r = (full_t / c - e_full) / n if c > 0 else 0.0
    return max(r, 0.0), full_t, half_t
