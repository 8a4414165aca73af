"""Compute costs measured on one rank, in units that carry over to other graphs and P.

* aggregation: seconds per (edge x column), over the forward and backward aggregations of every
  layer (work units ``edges * sum_l 2 a_l``, a_l = layer l's aggregation width);
* dense work: seconds per (vertex x width product), over the linear maps and everything else
  per vertex (work units ``vertices * sum_l in_l out_l``);
* copies around an exchange (gather, clone, scatter-add of rows): seconds per float moved
  (from the microbenchmark).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from distgnn.train.memory_estimate import layer_widths


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

    def widths(self, graph: GraphShape) -> list[tuple[int, int, int]]:
        return layer_widths(graph.feat_dim, self.hidden, graph.num_classes, self.layers)

    def agg_units(self, graph: GraphShape) -> int:
        """Columns aggregated per edge per epoch (forward and backward of every layer)."""
        return sum(2 * a for _, _, a in self.widths(graph))

    def dense_units(self, graph: GraphShape) -> int:
        """Width products per vertex per epoch (sum over layers of in x out)."""
        return sum(i * o for i, o, _ in self.widths(graph))

    def num_parameters(self, graph: GraphShape) -> int:
        return sum(2 * i * o + o for i, o, _ in self.widths(graph))


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

    def scaled(self, speedup: float) -> "ComputeCosts":
        """The same costs on hardware ``speedup`` times faster at compute and copies."""
        return ComputeCosts(self.agg_s_per_edge_col / speedup, self.dense_s_per_vertex_unit / speedup,
                            self.copy_s_per_float / speedup, self.overhead_s / speedup, self.threads,
                            self.concurrency_agg, self.concurrency_dense)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ComputeCosts":
        return cls(**d)


def fit_costs(records: list[dict], graph: GraphShape, model: ModelShape, copy_s_per_float: float = 0.0,
              threads: int = 1, concurrency_agg: float = 1.0, concurrency_dense: float = 1.0) -> ComputeCosts:
    """Costs from a P = 1 run's steady-state ``metrics.jsonl`` records (median over epochs)."""
    agg = float(np.median([r["time_aggregate_s"] for r in records]))
    dense = float(np.median([r["time_dense_s"] for r in records]))
    total = float(np.median([r["epoch_time_s"] for r in records]))
    rest = max(total - agg - dense, 0.0)
    return ComputeCosts(agg_s_per_edge_col=agg / (graph.num_edges * model.agg_units(graph)),
                        dense_s_per_vertex_unit=dense / (graph.num_nodes * model.dense_units(graph)),
                        copy_s_per_float=copy_s_per_float, overhead_s=rest, threads=threads,
                        concurrency_agg=concurrency_agg, concurrency_dense=concurrency_dense)
