"""cd-r's degree of what is present at the root (``--cdr-rule present``).

Under the first rule (``delayed``) a leaf's copy of a root's row is zero until its first delivery
(step r + bin) and a root's R is zero until its leaves' first partials arrive, while every part
scales its partial by the global in-degree: early aggregates are sums of the present rows divided
by the full degree, too small. Under ``present`` each summed layer also moves, with its partials,
the *mass* of the rows present at the step: the kernel run on a mask column (1 for a present row:
the part's roots, stored or fresh rows, leaf copies once delivered) gives c_k(v), the sum of the
kernel's weights over v's local edges with a present source (plus v's own term at its root). The
root scales its aggregate by M(v) / (c_root(v) + C(v)), with C the sum of its leaves' delivered
masses (zero before the first delivery) and M(v) the mass of all v's edges (the exact aggregate
of a column of ones, computed once): for ``mean`` the aggregate becomes the mean over the present
edges, as cd-r-orig's local degree does on the replicas. Every copy is present from step 2r - 1,
so partials posted from then on are whole and, r steps later, so is C: from step 4r - 1 on
(:meth:`DegreePresent.active`) nothing is scaled or sent. Extra bytes: one value per moved
partial while it is active (docs/design.md#cdr-rules).
"""
from __future__ import annotations

import torch

from distgnn.comm import Communicator
from distgnn.exchange.collectives import Reduce
from distgnn.exchange.delayed_sum import DelayedSumState
from distgnn.exchange.local_sum import LocalKernel
from distgnn.exchange.plans import RootPlans
from distgnn.exchange.schedule import DelayedSchedule
from distgnn.train.timers import Timers


class DegreePresent:
    """The mass of every root's edges and, per layer state, the present rows' masses."""

    def __init__(self, kernel: LocalKernel, plans: RootPlans, eval_comm: Communicator,
                 timers: Timers, n_roots: int):
        self.kernel, self.n_roots = kernel, n_roots
        ones = torch.ones((kernel.graph.n_src, 1), dtype=torch.float32)
        with torch.no_grad():
            self.full = Reduce.apply(kernel.forward_rows(ones), n_roots, plans, eval_comm, timers,
                                     "setup")

    @staticmethod
    def active(step: int, delay: int) -> bool:
        """Whether a layer's aggregate at ``step`` may still lack a row (steps < 4r - 1)."""
        return step < 4 * delay - 1

    def start(self, state: DelayedSumState, delayed_copies: bool) -> None:
        """A new layer: its roots present, its leaf copies absent until delivered."""
        state.present = torch.ones((self.kernel.graph.n_src, 1), dtype=torch.float32)
        if delayed_copies:
            state.present[self.n_roots:] = 0.0
        state.counts = torch.zeros((self.n_roots, 1), dtype=torch.float32)

    def masses(self, state: DelayedSumState) -> torch.Tensor:
        """c_k [n_dst, 1]: the present rows' mass at every destination row."""
        return self.kernel.forward_rows(state.present)

    def scale(self, own: torch.Tensor, state: DelayedSumState) -> torch.Tensor:
        """M / (c_root + C) [n_roots, 1] (1 where nothing is present)."""
        present = own[:self.n_roots] + state.counts
        return torch.where(present > 0, self.full / present.clamp_min(1e-30),
                           torch.ones_like(present))


def post_masses(schedule: DelayedSchedule, state: DelayedSumState, step: int,
                masses: torch.Tensor) -> None:
    """Post this step's bin of the leaves' masses to their roots, with the partials."""
    bins = schedule.bin(step)
    schedule.post(state.mailbox, "counts", step, masses[bins.reduce_leaf.ids], bins.reduce_leaf,
                  bins.reduce_root, "reduce")


def take_delivered(schedule: DelayedSchedule, state: DelayedSumState, step: int,
                   copies_taken: bool) -> None:
    """At the start of ``step``: the masses posted r steps ago replace their roots' C, and the
    leaf rows whose copies just arrived become present."""
    bins, earlier = schedule.bin(step), step - schedule.delay
    if state.mailbox.holds("counts", earlier):
        rows = state.mailbox.take("counts", earlier)
        state.counts[bins.reduce_root.ids] = 0.0
        state.counts.index_add_(0, bins.reduce_root.ids, rows.float())
    if copies_taken:
        state.present[bins.bcast_leaf.ids] = 1.0
