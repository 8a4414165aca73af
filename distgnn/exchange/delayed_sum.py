"""cd-r's summed aggregation at the root, one layer's state and its two autograd pieces.

At a layer's training step e, bin ``e mod r`` moves, non-blocking: the roots post their current
row of each bin vertex to its leaves (channel ``copies``) and the leaves post their partial of it
to its root (channel ``partials``); every message is consumed r steps after it was posted, at the
start of step e + r, before that step's local sum (under a prompt rule one step after, the bins
of a step chosen by its stride: :mod:`distgnn.exchange.schedule`). So a leaf's copy of a root's row is r to 2r - 1
steps old, and a root aggregates ``a = p_root(e) + R`` where R, the sum of its leaves' last
delivered partials, is r to 2r - 1 steps old. Before the first delivery a copy and R are zero.
With delayed gradients each exchange's adjoint moves in backward for the same bin and is consumed
r steps later (one under a prompt rule: ``schedule.steps_late``; channels ``partials_grad`` and
``copies_grad``), added once, or held and added at every step under a rule that holds them
(docs/design.md#held-gradients); without them copies and R are constants in backward
(docs/design.md#cd-r-at-the-root).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from distgnn.comm import Direction
from distgnn.exchange.local_sum import LocalKernel
from distgnn.exchange.mailbox import Mailbox
from distgnn.exchange.schedule import DelayedSchedule
from distgnn.kernels.output_pool import POOL

#: the messages of one summed layer: forward rows and the gradients of each (a rule may post on
#: channels of its own: a mailbox opens a channel at its first message)
CHANNELS = ("copies", "partials", "partials_grad", "copies_grad")


@dataclass
class DelayedSumState:
    """cd-r state of one summed layer at the root."""

    step: int = 0
    #: float [n_src, w]: the compact source table (docs/design.md#compact-rows); rows
    #: [n_roots:) are the leaves' last delivered copies (None when the layer reads no copies:
    #: stored input, or ``--fresh-copies``)
    table: torch.Tensor | None = None
    remote: torch.Tensor | None = None    #: R, float [n_roots, w]: leaves' last delivered partials
    mailbox: Mailbox = field(default_factory=lambda: Mailbox(CHANNELS))
    #: the rule's own tensors for this layer, by name (:mod:`distgnn.exchange.rules`; saved in
    #: checkpoints beside the fields above)
    extra: dict[str, torch.Tensor] = field(default_factory=dict)

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "table": self.table, "remote": self.remote,
                "mailbox": self.mailbox.state_dict(), **self.extra}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "DelayedSumState":
        own = ("step", "table", "remote", "mailbox")
        return cls(step=state["step"], table=state["table"], remote=state["remote"],
                   mailbox=Mailbox.from_state(state["mailbox"]),
                   extra={k: v for k, v in state.items() if k not in own})


class DelayedReduceGrad(torch.autograd.Function):
    """a = p[:n_roots] + R, whose backward also posts the roots' gradient of this step's bin to
    the leaves that sent partials, and adds to the leaves' partials the gradient posted
    ``steps_late`` steps ago (a delayed adjoint of the reduce; held: every leaf row's last one)."""

    @staticmethod
    def forward(ctx, p: torch.Tensor, remote: torch.Tensor, schedule: DelayedSchedule,
                state: DelayedSumState, step: int) -> torch.Tensor:
        ctx.schedule, ctx.state, ctx.step, ctx.n_dst = schedule, state, step, p.shape[0]
        return p[:remote.shape[0]] + remote

    @staticmethod
    def backward(ctx, grad_a: torch.Tensor):
        schedule, e = ctx.schedule, ctx.step
        bins = schedule.bin(e)
        n_roots = grad_a.shape[0]
        grad_p = POOL.empty((ctx.n_dst, grad_a.shape[1]), grad_a.dtype)   # every row written below
        grad_p[:n_roots] = grad_a
        schedule.timers.rows("copied", grad_a.shape[0] + 2 * len(bins.reduce_root.ids))
        got = schedule.post_and_take_gradient(ctx.state.mailbox, "partials_grad", e, grad_a,
                                              bins.reduce_root, bins.reduce_leaf,
                                              Direction.BROADCAST, gather=True)
        arrived = None if got is None else schedule.bin(e - schedule.steps_late).reduce_leaf.ids
        held = ctx.state.extra.get("held_partials_grad") if schedule.hold_gradients else None
        if schedule.hold_gradients and got is not None:
            # every leaf row's last delivered gradient, over the leaf rows [n_dst - n_roots, w]
            if held is None:
                held = got.new_zeros((ctx.n_dst - n_roots, got.shape[1]))
                ctx.state.extra["held_partials_grad"] = held
            held[arrived - n_roots] = got
        if held is not None:   # each leaf row adds its last delivered gradient
            grad_p[n_roots:] = held
            schedule.timers.rows("copied", ctx.n_dst - n_roots)
        else:
            grad_p[n_roots:] = 0.0  # the leaves outside this step's bin
            schedule.timers.rows("zeroed", ctx.n_dst - n_roots)
            if got is not None:  # the gradient of the bins posted steps_late steps ago
                grad_p[arrived] += got
        return grad_p, None, None, None, None


class TableSum(torch.autograd.Function):
    """cd-r's local sum at the root: the roots' rows h are copied into the prefix of the layer's
    persistent source table (whose leaf rows hold the last delivered copies), and the kernel runs
    over it; so a step copies n_roots rows, not the whole table. Under ``--cdr-rule recompute``
    h [len(rows), w] also holds the leaves' recomputed rows and is copied into the table rows
    ``rows`` (positions in the table, the roots first). Backward runs the kernel on the transpose and returns the rows'
    gradient; with delayed gradients it also posts the gradient of this step's bin copies to
    their roots and adds the one posted r steps ago."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, kernel: LocalKernel, schedule: DelayedSchedule,
                state: DelayedSumState, step: int, rows: torch.Tensor | None = None
                ) -> torch.Tensor:
        ctx.kernel, ctx.schedule, ctx.state, ctx.step, ctx.rows = kernel, schedule, state, step, rows
        with kernel.timers("aggregate"):
            kernel.timers.rows("copied", h.shape[0])
            if rows is None:
                state.table[:h.shape[0]].copy_(h.detach())
            else:
                state.table.index_copy_(0, rows, h.detach().to(state.table.dtype))
            return kernel.forward_rows(state.table)

    @staticmethod
    def backward(ctx, grad_p: torch.Tensor):
        kernel, schedule, e = ctx.kernel, ctx.schedule, ctx.step
        with kernel.timers("aggregate"):
            grad_src = kernel.transposed(grad_p, ctx.state.table.dtype)
        bins = schedule.bin(e)
        grad_h = None if ctx.rows is None else grad_src.index_select(0, ctx.rows)
        taken = schedule.bin(e - schedule.steps_late).bcast_root if e >= schedule.steps_late else None
        return schedule.copies_gradient(ctx.state.mailbox, "copies_grad", e, grad_src,
                                        bins.bcast_leaf, bins.bcast_root, grad_h, taken,
                                        ctx.state.extra), \
            None, None, None, None, None
