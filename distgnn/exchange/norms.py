"""Degree scaling of aggregates: which weights the local kernel applies, and the scaling of a sum.

``norm`` is one of :data:`distgnn.kernels.ops.NORMS`: ``mean`` divides by the in-degree, ``gcn`` adds the
vertex's own row once, ``(a + h_v) / (deg + 1)``; ``sym`` (GCN) weights each gathered row by its
source's (out-degree + 1)^-1/2 inside the kernel, adds the own row so weighted and scales by
(deg + 1)^-1/2; ``sum`` (GIN) does not scale. Where the degree is final before the exchange (cd-0,
0c, evaluation), the kernel scales each part's partials and only the root adds the self term, so
the exchange sums final rows (docs/design.md#degrees).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from distgnn.kernels import ops
from distgnn.comm import Communicator, Traffic
from distgnn.exchange.collectives import reduce_broadcast
from distgnn.partition.part_loader import PartitionData
from distgnn.timers import Timers


def check_norm(norm: str) -> None:
    if norm not in ops.NORMS:
        raise ValueError(f"norm must be one of {ops.NORMS}, got {norm}")


@dataclass(frozen=True)
class KernelWeights:
    """What the local kernel applies: p[v] = scale[v] (sum of weight[u] h[u] over in-edges
    u -> v, plus weight[v] h[v] for v < self_rows)."""

    scale: torch.Tensor | None = None    #: float32 [n_k] per destination row; None: 1
    self_rows: int = 0                   #: the first rows that add their own row
    weight: torch.Tensor | None = None   #: float32 [n_k] per source row (sym); None: 1


def kernel_weights(norm: str, in_degree: torch.Tensor | None, out_degree: torch.Tensor | None,
                   self_rows: int) -> KernelWeights:
    """The kernel's weights for ``norm``: ``in_degree`` [n_k] (None: no scaling in the kernel),
    ``out_degree`` [n_k] (sym's source weights), ``self_rows`` the rows that add their own term
    where the norm has one."""
    scale = None if in_degree is None else ops.row_scale(norm, in_degree, torch.float32)
    weight = ops.source_weight(norm, out_degree, torch.float32) if norm == "sym" else None
    return KernelWeights(scale, self_rows if norm in ops.SELF_TERM_NORMS else 0, weight)


def scale_aggregate(a: torch.Tensor, h: torch.Tensor, degree: torch.Tensor, norm: str,
                    weight: torch.Tensor | None = None) -> torch.Tensor:
    """The degree scaling of a summed aggregate ``a`` [n, w]: ``mean`` a / max(deg, 1), ``gcn``
    (a + h) / (deg + 1) with h [n, w] the rows' own layer input, ``sym`` (a + weight h) /
    (deg + 1)^1/2 (``a`` summed with the sources' weights, ``weight`` float32 [n] the rows' own),
    ``sum`` a; degree float32 [n]."""
    if norm == "gcn":
        return (a + h) / (degree + 1.0).unsqueeze(1)
    if norm == "sym":
        return (a + weight.unsqueeze(1) * h) * (degree + 1.0).rsqrt().unsqueeze(1)
    if norm == "sum":
        return a
    return a / degree.clamp(min=1.0).unsqueeze(1)


def local_out_degree(part: PartitionData) -> torch.Tensor:
    """Each local vertex's out-degree over this part's edges, int64 [n_k]."""
    return part.t_indptr[1:] - part.t_indptr[:-1]


def global_out_degree(part: PartitionData, comm: Communicator) -> torch.Tensor:
    """Each local vertex's out-degree in the whole graph, int64 [n_k]: every edge lies on one part,
    so it is the sum of the replicas' local out-degrees (one reduce and broadcast, at load time)."""
    local = local_out_degree(part).to(torch.float64).unsqueeze(1)
    total = reduce_broadcast(local, part, comm, Traffic.SETUP, Timers())
    return total.squeeze(1).round().long()
