"""cd-r's schedule at the root: which bins move at a step, and the delayed gradients' round trip.

Split vertex v is in bin ``global_id(v) mod r``; at a layer's training step e, bin ``e mod r``
moves, and each message is consumed r steps after it was posted (docs/design.md#cd-r-at-the-root).
A rule may shorten that *lag* to one step and choose a *stride* s <= r per step: the bins b with
b = e (mod s) then move at step e (stride 1: every bin; stride r: bin e mod r); under a constant
stride every split vertex moves once in any s consecutive steps (docs/design.md#prompt-delivery).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from distgnn.comm import Communicator, Direction, RowPlan, Traffic
from distgnn.exchange.mailbox import Mailbox
from distgnn.exchange.plans import RootPlans, root_bins
from distgnn.kernels.output_pool import pooled_copy
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
    #: steps from a message's post to the step that takes it (0: ``delay``, cd-r's own)
    lag: int = 0
    #: the bins' stride at a step (None: ``delay``, one bin per step); a stride s <= delay moves
    #: the bins b = step (mod s)
    stride: Callable[[int], int] | None = None
    #: delayed gradients held: a gradient that arrives replaces the row's last one, and every
    #: step adds the last one of every row (as the forward adds the last delivered R), where
    #: otherwise it is added once, at the step it arrives
    hold_gradients: bool = False
    #: the plans unsplit, and per plan the bin of each of its rows (for strides below ``delay``)
    whole: RootPlans | None = None
    row_bins: tuple[torch.Tensor, ...] = ()
    _merged: dict[tuple[int, int], RootPlans] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, plans: RootPlans, global_ids: torch.Tensor, delay: int, comm: Communicator,
              timers: Timers, n_roots: int, delayed_gradients: bool) -> "DelayedSchedule":
        received_bins = global_ids[plans.reduce_root.ids] % delay
        row_bins = tuple(global_ids[plan.ids] % delay for plan in (
            plans.reduce_leaf, plans.reduce_root, plans.bcast_leaf, plans.bcast_root))
        return cls(comm, timers, delay, n_roots, root_bins(plans, global_ids, delay),
                   [torch.nonzero(received_bins == b).flatten() for b in range(delay)],
                   delayed_gradients, comm.sum(len(plans.bcast_leaf.ids)) > 0,
                   whole=plans, row_bins=row_bins)

    def leaves_at(self, reduce_position: torch.Tensor,
                  bcast_position: torch.Tensor) -> "DelayedSchedule":
        """The same schedule with each bin's leaf rows moved (:meth:`RootPlans.leaves_at`)."""
        return replace(self, bins=[b.leaves_at(reduce_position, bcast_position)
                                   for b in self.bins],
                       whole=(None if self.whole is None
                              else self.whole.leaves_at(reduce_position, bcast_position)),
                       _merged={})

    def prompt(self, stride: Callable[[int], int]) -> "DelayedSchedule":
        """The same bins, each message taken one step after its post, ``stride(step)`` (1 to
        ``delay``) choosing the bins of each step."""
        return replace(self, lag=1, stride=stride, _merged={})

    @property
    def steps_late(self) -> int:
        """Steps from a message's post to its take: ``delay``, or 1 under a prompt rule."""
        return self.lag or self.delay

    def bin(self, step: int) -> RootPlans:
        """The plans of the rows that move at ``step``: bin ``step mod delay``, or under a stride
        s the bins b = step (mod s) merged (each plan's groups in their order)."""
        s = self.delay if self.stride is None else self.stride(step)
        if not 1 <= s <= self.delay:
            raise ValueError(f"cd-r stride at step {step}: expected 1 to {self.delay}, got {s}")
        if s == self.delay:
            return self.bins[step % self.delay]
        key = (s, step % s)
        if key not in self._merged:
            plans = (self.whole.reduce_leaf, self.whole.reduce_root, self.whole.bcast_leaf,
                     self.whole.bcast_root)
            self._merged[key] = RootPlans(*(plan.subset(bins % s == key[1])
                                            for plan, bins in zip(plans, self.row_bins)))
        return self._merged[key]

    def post(self, mailbox: Mailbox, channel: str, step: int, rows: torch.Tensor, send: RowPlan,
             recv: RowPlan, direction: Direction, gather: bool = False) -> None:
        """Post this step's forward rows of its bin (non-blocking): ``rows`` ordered as ``send``,
        or with ``gather`` a table whose rows ``send.ids`` are posted (gathered by the exchange,
        fused into the encode at an integer width)."""
        self.timers.rows("copied", len(send.ids) * (not gather or self.comm.copies_rows(Traffic.FORWARD)))
        mailbox.post(channel, step, self.comm.exchange_rows_async(rows, send, recv,
                                                                  Traffic.FORWARD, direction,
                                                                  gather))

    def post_and_take_gradient(self, mailbox: Mailbox, channel: str, step: int,
                               rows: torch.Tensor, send: RowPlan, recv: RowPlan,
                               direction: Direction, gather: bool = False) -> torch.Tensor | None:
        """Delayed gradients: post this step's gradient rows of its bins (non-blocking; with
        ``gather``, ``rows`` is a table whose rows ``send.ids`` are posted) and return the ones
        posted :attr:`steps_late` steps ago, rows of ``bin(step - steps_late)`` (None before the
        first)."""
        with self.timers("exchange_wait"):
            self.timers.rows("copied", len(send.ids) * (not gather
                                                        or self.comm.copies_rows(Traffic.BACKWARD)))
            mailbox.post(channel, step, self.comm.exchange_rows_async(rows, send, recv,
                                                                      Traffic.BACKWARD, direction,
                                                                      gather))
            earlier = step - self.steps_late
            return mailbox.take(channel, earlier) if mailbox.holds(channel, earlier) else None

    def copies_gradient(self, mailbox: Mailbox, channel: str, step: int,
                        grad_table: torch.Tensor, leaf_plan: RowPlan,
                        root_plan: RowPlan, grad_h: torch.Tensor | None = None,
                        taken_roots: RowPlan | None = None,
                        extra: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """The gradient of the rows a cd-r table was filled from, from the table's [n_k, w]:
        ``grad_h`` (default: the table's prefix [n_roots, w]; its first n_roots rows are the
        roots'), plus, with delayed gradients, at the roots the copies' gradients their leaves
        posted :attr:`steps_late` steps ago (this step's, of ``leaf_plan`` to ``root_plan``, are
        posted; the ones taken land on ``taken_roots``, default ``root_plan``). Held gradients
        (:attr:`hold_gradients`) live in ``extra`` (the layer's state) under ``held_copies_grad``."""
        if grad_h is None:
            grad_h = grad_table[:self.n_roots]
        if not self.delayed_gradients or not self.moves_copies:
            return grad_h
        got = self.post_and_take_gradient(mailbox, channel, step, grad_table, leaf_plan,
                                          root_plan, Direction.REDUCE, gather=True)
        roots = (root_plan if taken_roots is None else taken_roots).ids
        if self.hold_gradients:
            if extra is None:
                raise ValueError("held gradients need the layer's state (extra)")
            held = extra.get("held_copies_grad")
            if got is not None:
                if held is None:
                    held = extra["held_copies_grad"] = got.new_zeros((self.n_roots, got.shape[1]))
                held[roots] = 0.0
                held.index_add_(0, roots, got)
            if held is None:
                return grad_h
            self.timers.rows("copied", grad_h.shape[0] + self.n_roots)
            out = pooled_copy(grad_h)
            out[:self.n_roots] += held.to(grad_h.dtype)   # (the roots first)
            return out
        if got is None:
            return grad_h
        self.timers.rows("copied", grad_h.shape[0] + got.shape[0])
        return pooled_copy(grad_h).index_add_(0, roots, got)
