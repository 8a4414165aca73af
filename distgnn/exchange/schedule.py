"""cd-r's schedule at the root: which bin moves at a step, and the delayed gradients' round trip.

Split vertex v is in bin ``global_id(v) mod r``; at a layer's training step e, bin ``e mod r``
moves, and each message is consumed r steps after it was posted (docs/design.md#cd-r-at-the-root).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from distgnn.comm import Communicator, Direction, RowPlan, Traffic
from distgnn.exchange.mailbox import Mailbox
from distgnn.exchange.plans import RootPlans, root_bins
from distgnn.timers import Timers


@dataclass
class DelayedSchedule:
    """The bins of cd-r (``delay`` = r >= 1) at the root and the communicator they move on."""

    comm: Communicator
    timers: Timers
    delay: int
    n_roots: int
    bins: list[RootPlans]            #: per bin, the root plans restricted to it
    #: per bin, int64: where that bin's rows lie among the reduce plan's received rows
    reduce_positions: list[torch.Tensor]
    delayed_gradients: bool          #: each exchange's adjoint also moves, r steps late
    #: some rank's broadcast plan has rows (False when every leaf recomputes: no copies move)
    moves_copies: bool = True

    @classmethod
    def build(cls, plans: RootPlans, global_ids: torch.Tensor, delay: int, comm: Communicator,
              timers: Timers, n_roots: int, delayed_gradients: bool) -> "DelayedSchedule":
        received_bins = global_ids[plans.reduce_root.ids] % delay
        return cls(comm, timers, delay, n_roots, root_bins(plans, global_ids, delay),
                   [torch.nonzero(received_bins == b).flatten() for b in range(delay)],
                   delayed_gradients, comm.sum(len(plans.bcast_leaf.ids)) > 0)

    def leaves_at(self, reduce_position: torch.Tensor,
                  bcast_position: torch.Tensor) -> "DelayedSchedule":
        """The same schedule with each bin's leaf rows moved (:meth:`RootPlans.leaves_at`)."""
        return replace(self, bins=[b.leaves_at(reduce_position, bcast_position)
                                   for b in self.bins])

    def bin(self, step: int) -> RootPlans:
        """The plans of the bin that moves at ``step``."""
        return self.bins[step % self.delay]

    def post(self, mailbox: Mailbox, channel: str, step: int, rows: torch.Tensor, send: RowPlan,
             recv: RowPlan, direction: Direction) -> None:
        """Post this step's forward rows of its bin (non-blocking)."""
        self.timers.rows("copied", rows.shape[0])  # gathered by the caller
        mailbox.post(channel, step, self.comm.exchange_rows_async(rows, send, recv,
                                                                  Traffic.FORWARD, direction))

    def post_and_take_gradient(self, mailbox: Mailbox, channel: str, step: int,
                               rows: torch.Tensor, send: RowPlan, recv: RowPlan,
                               direction: Direction) -> torch.Tensor | None:
        """Delayed gradients: post this step's gradient rows of its bin (non-blocking) and return
        the ones posted r steps ago for the same bin (None before the first)."""
        with self.timers("exchange_wait"):
            self.timers.rows("copied", rows.shape[0])  # gathered by the caller
            mailbox.post(channel, step, self.comm.exchange_rows_async(rows, send, recv,
                                                                      Traffic.BACKWARD, direction))
            earlier = step - self.delay
            return mailbox.take(channel, earlier) if mailbox.holds(channel, earlier) else None

    def copies_gradient(self, mailbox: Mailbox, channel: str, step: int,
                        grad_table: torch.Tensor, leaf_plan: RowPlan,
                        root_plan: RowPlan, grad_h: torch.Tensor | None = None) -> torch.Tensor:
        """The gradient of the rows a cd-r table was filled from, from the table's [n_k, w]:
        ``grad_h`` (default: the table's prefix [n_roots, w]; its first n_roots rows are the
        roots'), plus, with delayed gradients, at the roots the copies' gradients their leaves
        posted r steps ago (this step's are posted)."""
        if grad_h is None:
            grad_h = grad_table[:self.n_roots]
        if not self.delayed_gradients or not self.moves_copies:
            return grad_h
        got = self.post_and_take_gradient(mailbox, channel, step, grad_table[leaf_plan.ids],
                                          leaf_plan, root_plan, Direction.REDUCE)
        if got is None:
            return grad_h
        self.timers.rows("copied", grad_h.shape[0] + got.shape[0])
        return grad_h.clone().index_add_(0, root_plan.ids, got)
