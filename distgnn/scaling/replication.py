"""Replication factor against the number of parts: RF(P) = 1 + a * (P - 1)^b.

The law is fitted by least squares on log(RF - 1) against log(P - 1) over measured P >= 2 (P = 1
has RF = 1 exactly). Extrapolation to P = 128 is the law's job; its residuals on the fitted points
are reported, not hidden. Balance (largest part over the mean) is carried as the largest measured
value (Libra and HDRF balance edges to within a few percent).

The law also carries which leaves carry rows at the root (docs/design.md#compact-rows): the
fraction of leaf replicas with local in-edges (their partials are written) and with local
out-edges (their source rows are read), measured at the largest P partitioned and held there
(both fall as P grows, so the rows are overcounted, not under); 1 where not measured.

Where RF has been measured on the graph the law stands for (``measured``: the full-size
papers100M twin at P = 16..128, bench/papers_scale.py), the measurement is used at those P and the
law, refitted on them, between them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from distgnn.errors import DistgnnError


@dataclass
class ReplicationLaw:
    """RF(P) = 1 + a (P - 1)^b, capped at P (a vertex has at most one replica per part)."""

    a: float
    b: float
    edge_balance: float = 1.0     #: max / mean edges per part
    vertex_balance: float = 1.0   #: max / mean vertices (replicas) per part
    residuals: tuple[float, ...] = ()  #: relative errors (fitted - measured) / measured, per P
    fitted_parts: tuple[int, ...] = ()
    leaf_in_fraction: float = 1.0      #: leaves with local in-edges / leaves
    leaf_out_fraction: float = 1.0     #: leaves with local out-edges / leaves
    #: RF measured at these P on the graph the law stands for: used there instead of the law
    measured: dict[int, float] = field(default_factory=dict)
    measured_on: str = ""              #: the graph (and partitioner) ``measured`` comes from

    def __call__(self, parts: int | np.ndarray) -> np.ndarray | float:
        p = np.asarray(parts, dtype=float)
        rf = np.minimum(1.0 + self.a * np.power(np.maximum(p - 1.0, 0.0), self.b), np.maximum(p, 1.0))
        if self.measured:
            rf = np.where(np.isin(p, list(self.measured)),
                          np.vectorize(lambda q: self.measured.get(int(q), 0.0), otypes=[float])(p), rf)
        return float(rf) if rf.ndim == 0 else rf

    def describe(self) -> str:
        res = ", ".join(f"P={p}: {100 * r:+.1f}%" for p, r in zip(self.fitted_parts, self.residuals))
        out = f"RF(P) = 1 + {self.a:.4f} (P - 1)^{self.b:.4f}  (residuals {res})"
        if self.measured:
            out += ("; measured " + ", ".join(f"RF({p}) = {r:.3f}" for p, r in sorted(self.measured.items()))
                    + f" on {self.measured_on}, used at those P")
        return out

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ReplicationLaw":
        return cls(a=d["a"], b=d["b"], edge_balance=d.get("edge_balance", 1.0),
                   vertex_balance=d.get("vertex_balance", 1.0), residuals=tuple(d.get("residuals", ())),
                   fitted_parts=tuple(d.get("fitted_parts", ())),
                   leaf_in_fraction=d.get("leaf_in_fraction", 1.0),
                   leaf_out_fraction=d.get("leaf_out_fraction", 1.0),
                   measured={int(p): float(r) for p, r in d.get("measured", {}).items()},
                   measured_on=d.get("measured_on", ""))


def fit_replication(parts: list[int], rf: list[float], edge_balance: list[float] | None = None,
                    vertex_balance: list[float] | None = None) -> ReplicationLaw:
    """Fit the law on measured (P, RF) pairs; needs at least two with P >= 2 and RF > 1."""
    p = np.asarray(parts, dtype=float)
    r = np.asarray(rf, dtype=float)
    keep = (p >= 2) & (r > 1.0)
    if keep.sum() < 2:
        raise DistgnnError("replication law: need RF measured at two or more P >= 2")
    x, y = np.log(p[keep] - 1.0), np.log(r[keep] - 1.0)
    b, log_a = np.polyfit(x, y, 1)
    law = ReplicationLaw(a=float(np.exp(log_a)), b=float(b),
                         edge_balance=float(max(edge_balance or [1.0])),
                         vertex_balance=float(max(vertex_balance or [1.0])),
                         fitted_parts=tuple(int(v) for v in p[keep]))
    law.residuals = tuple(float((law(int(pp)) - rr) / rr) for pp, rr in zip(p[keep], r[keep]))
    return law


def leaf_edge_fractions(indptr: np.ndarray, indices: np.ndarray, edge_part: np.ndarray,
                        root: np.ndarray) -> tuple[float, float]:
    """Of a vertex cut's leaf replicas (every (part, vertex) pair holding an edge of the vertex,
    but not its root), the fractions with a local in-edge and with a local out-edge.

    ``indptr`` int64 [N + 1] and ``indices`` [E]: the graph by destination (store order);
    ``edge_part`` [E]: each edge's part in that order; ``root`` [N]: each vertex's root part."""
    n = len(indptr) - 1
    parts = int(edge_part.max()) + 1 if len(edge_part) else 1
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    part = edge_part.astype(np.int64)
    has_in = np.unique(part * n + dst)
    has_out = np.unique(part * n + indices.astype(np.int64))
    replicas = np.union1d(has_in, has_out)
    roots = np.asarray(root, dtype=np.int64) * n + np.arange(n, dtype=np.int64)
    leaves = len(replicas) - len(np.intersect1d(replicas, roots, assume_unique=True))
    if leaves == 0 or parts == 1:
        return 1.0, 1.0
    leaf_in = len(has_in) - len(np.intersect1d(has_in, roots, assume_unique=True))
    leaf_out = len(has_out) - len(np.intersect1d(has_out, roots, assume_unique=True))
    return leaf_in / leaves, leaf_out / leaves
