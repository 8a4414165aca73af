"""The exact exchanges (cd-0 and evaluation), each an autograd function whose backward is its
adjoint, so cd-0 equals one-process training for any number of ranks.

Gather-apply-scatter in PowerGraph's words: a *reduce* gathers the leaves' partials at the root, a
*broadcast* scatters the root's row to its leaves. Reduce's adjoint is a broadcast of the
gradient and vice versa. Every function takes a traffic ``kind`` (``forward``, ``eval``,
``setup``); the bytes of training traffic are also counted under their direction.
"""
from __future__ import annotations

import torch

from distgnn.comm import Communicator, Direction, RowPlan, Traffic
from distgnn.exchange.plans import RootPlans
from distgnn.kernels.output_pool import POOL, pooled_copy, pooled_zeros
from distgnn.partition.part_loader import PartitionData
from distgnn.timers import Timers


def training_direction(kind: Traffic, direction: Direction) -> Direction | None:
    """Directions are counted for training traffic only (evaluation and set-up have their own
    counters)."""
    return None if kind in (Traffic.EVAL, Traffic.SETUP) else direction


def reduce_broadcast(x: torch.Tensor, part: PartitionData, comm: Communicator, kind: Traffic,
                     timers: Timers) -> torch.Tensor:
    """Every replica of a split vertex gets the sum of all replicas' rows (leaves -> root ->
    leaves); x [n_k, w] -> [n_k, w]."""
    if comm.size == 1:
        return x
    with timers("exchange_wait"):
        # gather and scatter-add of the leaves' rows, the clone, then the same back
        timers.rows("copied", x.shape[0] + comm.copies_rows(kind) * 2 * (len(part.leaf_send.ids)
                                                                        + len(part.root_recv.ids)))
        # the received rows land in place: an integer width decodes them there
        received = comm.exchange_rows_async(x, part.leaf_send, part.root_recv, kind,
                                            training_direction(kind, Direction.REDUCE), gather=True)
        total = pooled_copy(x)
        received.wait_into(total, part.root_recv.ids, add=True)
        comm.exchange_rows_async(total, part.root_recv, part.leaf_send, kind,
                                 training_direction(kind, Direction.BROADCAST),
                                 gather=True).wait_into(total, part.leaf_send.ids)
    return total


class ReduceBroadcast(torch.autograd.Function):
    """The replicas mode's cd-0 exchange (:func:`reduce_broadcast`); its adjoint is the same
    reduce-then-broadcast on the gradient."""

    @staticmethod
    def forward(ctx, p: torch.Tensor, part: PartitionData, comm: Communicator, timers: Timers,
                kind: Traffic) -> torch.Tensor:
        ctx.part, ctx.comm, ctx.timers = part, comm, timers
        return reduce_broadcast(p.detach(), part, comm, kind, timers)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return (reduce_broadcast(grad.contiguous(), ctx.part, ctx.comm, Traffic.BACKWARD,
                                 ctx.timers),
                None, None, None, None)


class Broadcast(torch.autograd.Function):
    """h [n_roots, w] -> source table [n, w]: the roots' rows, then the leaves' copies at the
    rows ``plans.bcast_leaf`` names (a compact table, docs/design.md#compact-rows: n = n_roots +
    its rows, each written once; a table over local ids, n = n_k: the other rows zero)."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, n_rows: int, plans: RootPlans, comm: Communicator,
                timers: Timers, kind: Traffic) -> torch.Tensor:
        ctx.plans, ctx.comm, ctx.timers, ctx.n_roots = plans, comm, timers, h.shape[0]
        src = POOL.empty((n_rows, h.shape[1]), h.dtype)
        src[:h.shape[0]] = h
        if n_rows > h.shape[0] + len(plans.bcast_leaf.ids):
            src[h.shape[0]:] = 0.0
            timers.rows("zeroed", n_rows - h.shape[0])
        timers.rows("copied", h.shape[0] + comm.copies_rows(kind) * (len(plans.bcast_root.ids)
                                                                    + len(plans.bcast_leaf.ids)))
        if comm.size > 1:
            with timers("exchange_wait"):
                comm.exchange_rows_async(h, plans.bcast_root, plans.bcast_leaf, kind,
                                         training_direction(kind, Direction.BROADCAST),
                                         gather=True).wait_into(src, plans.bcast_leaf.ids)
        return src

    @staticmethod
    def backward(ctx, grad_src: torch.Tensor):
        plans = ctx.plans
        grad_h = pooled_copy(grad_src[:ctx.n_roots])
        ctx.timers.rows("copied", ctx.n_roots + ctx.comm.copies_rows(Traffic.BACKWARD) * (
            len(plans.bcast_leaf.ids) + len(plans.bcast_root.ids)))
        if ctx.comm.size > 1:
            with ctx.timers("exchange_wait"):
                ctx.comm.exchange_rows_async(grad_src, plans.bcast_leaf, plans.bcast_root,
                                             Traffic.BACKWARD, Direction.REDUCE,
                                             gather=True).wait_into(grad_h, plans.bcast_root.ids,
                                                                    add=True)
        return grad_h, None, None, None, None, None


class Reduce(torch.autograd.Function):
    """p [n, w] -> a [n_roots, w]: each root's own partial plus its leaves' partials (the rows
    ``plans.reduce_leaf`` names; n = n_roots + those rows in a compact table)."""

    @staticmethod
    def forward(ctx, p: torch.Tensor, n_roots: int, plans: RootPlans, comm: Communicator,
                timers: Timers, kind: Traffic) -> torch.Tensor:
        ctx.plans, ctx.comm, ctx.timers, ctx.n_local = plans, comm, timers, p.shape[0]
        a = pooled_copy(p[:n_roots])
        timers.rows("copied", n_roots + comm.copies_rows(kind) * (len(plans.reduce_leaf.ids)
                                                                 + len(plans.reduce_root.ids)))
        if comm.size > 1:
            with timers("exchange_wait"):
                comm.exchange_rows_async(p, plans.reduce_leaf, plans.reduce_root, kind,
                                         training_direction(kind, Direction.REDUCE),
                                         gather=True).wait_into(a, plans.reduce_root.ids, add=True)
        return a

    @staticmethod
    def backward(ctx, grad_a: torch.Tensor):
        plans = ctx.plans
        if ctx.n_local > grad_a.shape[0] + len(plans.reduce_leaf.ids):
            grad_p = pooled_zeros((ctx.n_local, grad_a.shape[1]), grad_a.dtype)
            ctx.timers.rows("zeroed", ctx.n_local)
        else:  # every row is written below
            grad_p = POOL.empty((ctx.n_local, grad_a.shape[1]), grad_a.dtype)
        grad_p[:grad_a.shape[0]] = grad_a
        ctx.timers.rows("copied", grad_a.shape[0] + ctx.comm.copies_rows(Traffic.BACKWARD) * (
            len(plans.reduce_root.ids) + len(plans.reduce_leaf.ids)))
        if ctx.comm.size > 1:
            with ctx.timers("exchange_wait"):
                ctx.comm.exchange_rows_async(grad_a, plans.reduce_root, plans.reduce_leaf,
                                             Traffic.BACKWARD, Direction.BROADCAST,
                                             gather=True).wait_into(grad_p, plans.reduce_leaf.ids)
        return grad_p, None, None, None, None, None


class GatherAtRoot(torch.autograd.Function):
    """p [n_k, w] -> the rows the leaves in ``leaf_plan`` send, as received at their roots
    ([R, w], ordered as ``root_plan``, row i belonging to root ``root_plan.ids[i]``): the
    attention partials, which the root merges rather than sums. Backward sends each row's
    gradient back to the leaf it came from."""

    @staticmethod
    def forward(ctx, p: torch.Tensor, leaf_plan: RowPlan, root_plan: RowPlan, comm: Communicator,
                timers: Timers, kind: Traffic) -> torch.Tensor:
        ctx.leaf_plan, ctx.root_plan, ctx.comm, ctx.timers = leaf_plan, root_plan, comm, timers
        ctx.shape = p.shape
        with timers("exchange_wait"):
            return comm.exchange_rows(p, leaf_plan, root_plan, kind,
                                      training_direction(kind, Direction.REDUCE), gather=True)

    @staticmethod
    def backward(ctx, grad_rows: torch.Tensor):
        grad_p = grad_rows.new_zeros(ctx.shape)
        with ctx.timers("exchange_wait"):
            back = ctx.comm.exchange_rows(grad_rows.contiguous(), ctx.root_plan, ctx.leaf_plan,
                                          Traffic.BACKWARD, Direction.BROADCAST)
        grad_p[ctx.leaf_plan.ids] = back
        return grad_p, None, None, None, None, None
