"""Which rows move: the stored plan pruned to the rows that carry something, and cd-r's bins.

A part's stored plan pairs every leaf replica with its root (``leaf_send`` on the leaf's rank,
``root_recv`` on the root's). Under apply-at-root only some of those rows move: a leaf without
local in-edges has no partial to send, and a leaf without local out-edges reads no copy of its
root's row. cd-r moves split vertex v only at the steps e with e mod r = global_id(v) mod r: its
*bin*.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from distgnn.comm import Communicator, RowPlan, Traffic
from distgnn.partition.part_loader import PartitionData


@dataclass
class RootPlans:
    """The row plans of apply-at-root, each a sub-plan of the part's stored plan (same order)."""

    reduce_leaf: RowPlan    #: my leaves with local in-edges, grouped by the rank of their root
    reduce_root: RowPlan    #: my roots' rows that receive those partials, grouped by leaf rank
    bcast_leaf: RowPlan     #: my leaves with local out-edges (they need their root's row)
    bcast_root: RowPlan     #: my roots' rows sent to those leaves, grouped by leaf rank

    def leaves_at(self, reduce_position: torch.Tensor, bcast_position: torch.Tensor) -> "RootPlans":
        """The same plans with the leaf rows moved: ``reduce_leaf``'s ids to
        ``reduce_position[ids]``, ``bcast_leaf``'s to ``bcast_position[ids]`` (each int64 [n_k]);
        the roots' rows stay."""
        return RootPlans(RowPlan(reduce_position[self.reduce_leaf.ids], self.reduce_leaf.offsets),
                         self.reduce_root,
                         RowPlan(bcast_position[self.bcast_leaf.ids], self.bcast_leaf.offsets),
                         self.bcast_root)


def every_replica(part: PartitionData) -> RootPlans:
    """The stored plan unpruned: every leaf sends and receives (the replicas mode)."""
    return RootPlans(part.leaf_send, part.root_recv, part.leaf_send, part.root_recv)


def broadcast_to(leaf_plan: RowPlan, root_plan: RowPlan) -> RootPlans:
    """Plans whose broadcast goes from ``root_plan``'s roots to ``leaf_plan``'s leaves (for
    :class:`~distgnn.exchange.collectives.Broadcast`: e.g. attention's destination terms, to the
    leaves with in-edges)."""
    return RootPlans(leaf_plan, root_plan, leaf_plan, root_plan)


def root_plans(part: PartitionData, comm: Communicator) -> RootPlans:
    """Prune the stored plan to the rows that move (collective: one exchange of flags)."""
    leaves = part.leaf_send.ids
    out_degree = part.t_indptr[1:] - part.t_indptr[:-1]
    has_in = part.local_degree[leaves] > 0
    has_out = out_degree[leaves] > 0
    flags = torch.stack([has_in, has_out], dim=1).to(torch.float32)
    if comm.size > 1:
        at_root = comm.exchange_rows(flags, part.leaf_send, part.root_recv, Traffic.SETUP) > 0
    else:
        at_root = torch.zeros((0, 2), dtype=torch.bool)
    return RootPlans(part.leaf_send.subset(has_in), part.root_recv.subset(at_root[:, 0]),
                     part.leaf_send.subset(has_out), part.root_recv.subset(at_root[:, 1]))


def bin_of(plan: RowPlan, global_ids: torch.Tensor, delay: int, b: int) -> RowPlan:
    """The rows of ``plan`` in bin ``b``: global id mod ``delay`` = b (``global_ids``: int64 [n_k],
    local id -> global id)."""
    return plan.subset((global_ids[plan.ids] % delay) == b)


def root_bins(plans: RootPlans, global_ids: torch.Tensor, delay: int) -> list[RootPlans]:
    """``plans`` split into the ``delay`` bins (none for delay 0)."""
    return [RootPlans(*(bin_of(plan, global_ids, delay, b) for plan in (
        plans.reduce_leaf, plans.reduce_root, plans.bcast_leaf, plans.bcast_root)))
        for b in range(delay)]
