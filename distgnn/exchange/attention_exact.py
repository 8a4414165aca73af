"""GAT's softmax attention exact across parts: every part's partials (m, s, q) over its own edges
are merged at the root (docs/design.md#attention-across-parts)."""
from __future__ import annotations

import torch

from distgnn.kernels.attention import local_attention, merge
from distgnn.comm import Communicator, RowPlan, Traffic
from distgnn.exchange.collectives import Broadcast, GatherAtRoot
from distgnn.exchange.plans import RootPlans
from distgnn.partition.part_loader import PartitionData
from distgnn.timers import Timers


def exact_attention(part: PartitionData, z: torch.Tensor, el: torch.Tensor, er: torch.Tensor,
                    sources: RootPlans, destinations: RootPlans, comm: Communicator, timers: Timers,
                    kind: Traffic, dropout, threads: int) -> torch.Tensor:
    """Softmax attention at the roots, exact across parts, [n_roots, H, D] from the roots' z
    [n_roots, H, D], el and er [n_roots, H]: z and el go to the leaves with local out-edges
    (``sources``), er to those with local in-edges (``destinations``); every part computes
    (m, s, q) over its edges, the roots' own self loops included; the leaves' partials travel to
    the root, which merges them."""
    n_roots, H, D = z.shape
    n_local = part.num_local
    if comm.size == 1 and n_local == n_roots:
        m, s, q = local_attention(part.indptr, part.indices, z, el, er, n_roots, dropout, threads,
                                  lambda: timers("aggregate"))
        return q / s.unsqueeze(2)
    rows = Broadcast.apply(torch.cat([z.reshape(n_roots, H * D), el], 1), n_local, sources, comm,
                           timers, kind)
    er_all = Broadcast.apply(er, n_local, destinations, comm, timers, kind)
    m, s, q = local_attention(part.indptr, part.indices, rows[:, :H * D].view(n_local, H, D),
                              rows[:, H * D:], er_all, n_roots, dropout, threads,
                              lambda: timers("aggregate"))
    return merge_at_roots(m, s, q, n_roots, destinations.reduce_leaf, destinations.reduce_root,
                          comm, timers, kind)


def merge_at_roots(m: torch.Tensor, s: torch.Tensor, q: torch.Tensor, n_roots: int,
                   leaf_plan: RowPlan, root_plan: RowPlan, comm: Communicator, timers: Timers,
                   kind: Traffic) -> torch.Tensor:
    """The roots' attention output [n_roots, H, D] from every local row's partials (m, s
    [n_k, H], q [n_k, H, D]): the leaves of ``leaf_plan`` send theirs (2H + H D values a row) to
    their roots, which merge them with their own (:func:`distgnn.kernels.attention.merge`)."""
    n_local, H, D = q.shape
    got = GatherAtRoot.apply(torch.cat([m, s, q.reshape(n_local, H * D)], 1), leaf_plan,
                             root_plan, comm, timers, kind)
    return merge(m[:n_roots], s[:n_roots], q[:n_roots], root_plan.ids, got[:, :H],
                 got[:, H:2 * H], got[:, 2 * H:].view(-1, H, D))
