"""cd-r's recomputed copies at the root (``--cdr-rule recompute``): a leaf computes layer 1's
source rows itself, with today's weights, instead of reading copies the root sent r steps ago.

Layer 1's input at vertex v is layer 0's output, a function of the weights, v's stored features
and v's exact layer-0 aggregate of the stored features (the input cache). Every replica holds the
features; the aggregate is sent once, at set-up, from each root to its leaves that are sources of
local edges (:func:`extend_input_aggregate`). In a training step the dense work of layer 0 then
runs on the roots and on those leaves (:func:`recomputed_rows`), with the keyed dropout drawing
the same mask a root would draw, so the rows a leaf reads at layer 1 equal cd-0's copies of that
step exactly, and their gradient reaches the weights on the leaf's rank without travelling back.
Only layer 1's partials (and their gradient) still move in cd-r's bins. Deeper layers keep
delayed copies (docs/design.md#cdr-rules).

The cost is dense work for the leaf rows that are sources of local edges. ``--recompute-budget
B`` bounds it to B times the part's roots: the leaves with the most local out-edges recompute, the
others keep cd-r's delayed copies, which their roots send in bins as before
(:func:`copy_plans`).
"""
from __future__ import annotations

import torch

from distgnn.comm import Communicator, Traffic
from distgnn.exchange.collectives import Broadcast
from distgnn.exchange.plans import RootPlans
from distgnn.partition.part_loader import PartitionData
from distgnn.timers import Timers

#: the layer whose source rows the leaves recompute (its input is layer 0's output)
RECOMPUTED_LAYER = 1


def choose_recomputed(part: PartitionData, plans: RootPlans, n_roots: int,
                      budget: float | None) -> torch.Tensor:
    """Which of the leaves that are sources of local edges (``plans.bcast_leaf``, in its order)
    recompute: all (``budget`` None), or the ``floor(budget * n_roots)`` with the most local
    out-edges (ties: the lower local id), bool [len(plans.bcast_leaf.ids)]."""
    ids = plans.bcast_leaf.ids.to(torch.int64)
    chosen = torch.ones(len(ids), dtype=torch.bool)
    if budget is None or len(ids) <= budget * n_roots:
        return chosen
    out_degree = (part.t_indptr[1:] - part.t_indptr[:-1])[ids]
    # stable sort of (-degree): equal degrees keep their plan order; break ties by local id
    order = torch.argsort(ids, stable=True)
    order = order[torch.argsort(-out_degree[order], stable=True)]
    chosen[:] = False
    chosen[order[:int(budget * n_roots)]] = True
    return chosen


def recomputed_rows(plans: RootPlans, n_roots: int, chosen: torch.Tensor) -> torch.Tensor:
    """Local ids, int64 [n_roots + n_chosen]: the roots (0 .. n_roots - 1), then the ``chosen``
    leaves of ``plans.bcast_leaf``, ascending. Layer 0's dense work runs on these rows in
    training."""
    sources = torch.unique(plans.bcast_leaf.ids.to(torch.int64)[chosen])
    return torch.cat([torch.arange(n_roots, dtype=torch.int64), sources])


def copy_plans(plans: RootPlans, chosen: torch.Tensor, comm: Communicator) -> RootPlans:
    """``plans`` with the broadcast pruned to the leaves that do not recompute (collective: one
    exchange of flags, so each root learns which of its leaves still read its copies)."""
    keep = ~chosen
    at_root = comm.exchange_rows(keep.to(torch.float32).unsqueeze(1), plans.bcast_leaf,
                                 plans.bcast_root, Traffic.SETUP)[:, 0] > 0
    return RootPlans(plans.reduce_leaf, plans.reduce_root, plans.bcast_leaf.subset(keep),
                     plans.bcast_root.subset(at_root))


def extend_input_aggregate(roots_aggregate: torch.Tensor, rows: torch.Tensor, num_local: int,
                           plans: RootPlans, comm: Communicator, timers: Timers) -> torch.Tensor:
    """The exact layer-0 aggregate of ``rows`` [len(rows), F] from the roots' [n_roots, F]: the
    roots send theirs to the leaves that read them (once, at set-up, on ``comm``)."""
    with torch.no_grad():
        table = Broadcast.apply(roots_aggregate, num_local, plans, comm, timers, Traffic.SETUP)
        return table.index_select(0, rows).contiguous()
