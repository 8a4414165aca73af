"""Replication factor against the number of parts: RF(P) = 1 + a * (P - 1)^b.

The law is fitted by least squares on log(RF - 1) against log(P - 1) over measured P >= 2 (P = 1
has RF = 1 exactly). Extrapolation to P = 128 is the law's job; its residuals on the fitted points
are reported, not hidden. Balance (largest part over the mean) is carried as the largest measured
value (Libra and HDRF balance edges to within a few percent).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

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

    def __call__(self, parts: int | np.ndarray) -> np.ndarray | float:
        p = np.asarray(parts, dtype=float)
        rf = np.minimum(1.0 + self.a * np.power(np.maximum(p - 1.0, 0.0), self.b), np.maximum(p, 1.0))
        return float(rf) if rf.ndim == 0 else rf

    def describe(self) -> str:
        res = ", ".join(f"P={p}: {100 * r:+.1f}%" for p, r in zip(self.fitted_parts, self.residuals))
        return f"RF(P) = 1 + {self.a:.4f} (P - 1)^{self.b:.4f}  (residuals {res})"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ReplicationLaw":
        return cls(a=d["a"], b=d["b"], edge_balance=d.get("edge_balance", 1.0),
                   vertex_balance=d.get("vertex_balance", 1.0), residuals=tuple(d.get("residuals", ())),
                   fitted_parts=tuple(d.get("fitted_parts", ())))


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
