"""Apply-at-root's compact row tables: a summed layer's kernel writes and reads only the rows that
carry something (docs/design.md#compact-rows).

At the root a leaf replica without local in-edges has no partial to send, and one without local
out-edges is read by no local edge. So the kernel's output holds only the *destinations* (the
roots and the leaves with local in-edges, n_dst rows) and its source table only the *sources*
(the roots and the leaves with local out-edges, n_src rows), not all n_k local rows each. Both
keep ascending local id: the roots stay the prefix, every row's edges keep their order (the same
sums, bit for bit) and ascending rows still ascend (source tiling still applies). The leaf rows of
the root plans become positions in these tables: a reduce leaf's in the output, a broadcast
leaf's in the source table.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from distgnn.exchange.local_sum import KernelGraph
from distgnn.exchange.norms import KernelWeights
from distgnn.exchange.plans import RootPlans
from distgnn.partition.part_loader import PartitionData


def positions(ids: torch.Tensor, n: int) -> torch.Tensor:
    """int64 [n]: the position of each local id in ``ids`` (ascending, int64), -1 where absent."""
    out = torch.full((n,), -1, dtype=torch.int64)
    out[ids] = torch.arange(len(ids), dtype=torch.int64)
    return out


@dataclass(frozen=True)
class CompactRows:
    """One part's compact tables under apply-at-root (module text)."""

    destinations: torch.Tensor   #: int64 [n_dst]: the output rows' local ids, the roots first
    sources: torch.Tensor        #: int64 [n_src]: the source table rows' local ids, the roots first
    dst_position: torch.Tensor   #: int64 [n_k]: local id -> output row (-1: none)
    src_position: torch.Tensor   #: int64 [n_k]: local id -> source table row (-1: none)
    graph: KernelGraph           #: destination rows over source rows, and its transpose
    #: destination rows over local ids: reads the stored features [n_k, F] (forward only)
    feature_graph: KernelGraph

    def weights(self, full: KernelWeights) -> KernelWeights:
        """``full`` (over local ids) for :attr:`graph`: scales of the destinations, source weights
        of the sources (the roots, the prefix, keep their own term)."""
        return KernelWeights(None if full.scale is None else full.scale[self.destinations],
                             full.self_rows,
                             None if full.weight is None else full.weight[self.sources])

    def feature_weights(self, full: KernelWeights) -> KernelWeights:
        """``full`` for :attr:`feature_graph`: destinations' scales, local ids' source weights."""
        return KernelWeights(None if full.scale is None else full.scale[self.destinations],
                             full.self_rows, full.weight)

    def plans(self, plans: RootPlans) -> RootPlans:
        """``plans`` (over local ids) with their leaf rows as table positions."""
        return plans.leaves_at(self.dst_position, self.src_position)

    def source_rows(self, table: torch.Tensor) -> torch.Tensor:
        """A source table kept over local ids ([n_k, w], as checkpoints before compact tables hold
        it) as the compact one [n_src, w]."""
        return table.index_select(0, self.sources)


def compact_rows(part: PartitionData, n_roots: int) -> CompactRows:
    """The compact tables of ``part`` whose first ``n_roots`` local ids are its roots."""
    n = part.num_local
    root = torch.arange(n) < n_roots
    in_degree = part.indptr[1:] - part.indptr[:-1]
    out_degree = part.t_indptr[1:] - part.t_indptr[:-1]
    destinations = torch.nonzero(root | (in_degree > 0)).flatten()
    sources = torch.nonzero(root | (out_degree > 0)).flatten()
    dst_position, src_position = positions(destinations, n), positions(sources, n)
    end = torch.tensor([n], dtype=torch.int64)
    # rows left out have no edges on that side, so the kept rows' ranges are the stored ones
    every_dst, every_src = len(destinations) == n, len(sources) == n
    indptr = part.indptr if every_dst else part.indptr[torch.cat([destinations, end])]
    t_indptr = part.t_indptr if every_src else part.t_indptr[torch.cat([sources, end])]
    indices = part.indices if every_src else src_position[part.indices].to(part.indices.dtype)
    t_indices = (part.t_indices if every_dst
                 else dst_position[part.t_indices].to(part.t_indices.dtype))
    return CompactRows(destinations, sources, dst_position, src_position,
                       KernelGraph(indptr, indices, t_indptr, t_indices),
                       KernelGraph(indptr, part.indices))
