"""cd-0 at the root with its exchanges overlapped by the work that needs nothing remote
(docs/design.md#overlap).

One summed layer is a broadcast of the roots' rows to the leaves that read them, the local sum,
and a reduce of the leaves' partials to their roots (:mod:`distgnn.exchange.root`). The compact
tables put the roots first on both sides, so the part's edges fall into four blocks: destination
rows (roots | leaves with in-edges) by source rows (roots | leaf copies). Forward:

1. post the broadcast; sum the leaves' edges from roots (the copies are not needed);
2. wait for the copies; add the leaves' edges from copies; post the reduce of the leaves' partials;
3. sum the roots' own rows (every edge; the copies are here) while the reduce travels;
4. wait; add the leaves' partials at their roots.

Backward is the adjoint in the same shape: post the broadcast of the roots' gradients to the
leaves that sent partials; sum the copies' gradients from root rows; wait; add those from leaf
rows and post their reduce; sum the roots' source gradients while it travels; wait; add. Every
edge is summed once, by its own block, so the result equals the blocking exchange up to the order
of float additions (cd-0 still equals one process to float tolerance; tests/test_train_mpi.py).
``DISTGNN_OVERLAP=off`` runs the blocking exchange instead (for comparisons).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from distgnn.comm import Communicator, Direction, RowPlan, Traffic
from distgnn.exchange.collectives import training_direction
from distgnn.exchange.local_sum import KernelGraph
from distgnn.exchange.norms import KernelWeights
from distgnn.exchange.plans import RootPlans
from distgnn.kernels import ops
from distgnn.kernels.output_pool import POOL, pooled_zeros
from distgnn.timers import Timers

#: the environment variable that turns the overlap off (``off``)
OVERLAP = "DISTGNN_OVERLAP"


def overlap_enabled() -> bool:
    return os.environ.get(OVERLAP, "on").lower() not in ("off", "0", "no")


@dataclass(frozen=True)
class Block:
    """A slice of a CSR: rows [r0, r1) keeping the edges into columns [c0, c1), with the kernel's
    per-row ``scale`` (sliced) and per-column ``weight`` (whole), and the own-row term on its first
    ``self_rows`` rows. Its indices still count the whole column range, so it reads the whole
    table."""

    indptr: torch.Tensor
    indices: torch.Tensor
    scale: torch.Tensor | None
    weight: torch.Tensor | None
    self_rows: int

    def __call__(self, x: torch.Tensor, threads: int) -> torch.Tensor:
        return ops.weighted_sum(self.indptr, self.indices, x, scale=self.scale,
                                weight=self.weight, self_rows=self.self_rows, threads=threads)

    @property
    def rows(self) -> int:
        return int(self.indptr.shape[0]) - 1


def block(indptr: torch.Tensor, indices: torch.Tensor, rows: tuple[int, int],
          cols: tuple[int, int], scale: torch.Tensor | None, weight: torch.Tensor | None,
          self_rows: int) -> Block:
    """The :class:`Block` of rows ``rows`` and columns ``cols`` of the CSR (``indptr``, ``indices``);
    each row keeps its edges' order."""
    r0, r1 = rows
    lo, hi = int(indptr[r0]), int(indptr[r1])
    idx = indices[lo:hi]
    counts = (indptr[r0 + 1:r1 + 1] - indptr[r0:r1])
    row = torch.repeat_interleave(torch.arange(r1 - r0), counts)
    keep = (idx >= cols[0]) & (idx < cols[1])
    kept = torch.bincount(row[keep], minlength=r1 - r0)
    new_indptr = torch.zeros(r1 - r0 + 1, dtype=torch.int64)
    torch.cumsum(kept, 0, out=new_indptr[1:])
    return Block(new_indptr, idx[keep].contiguous(), None if scale is None else scale[r0:r1].contiguous(),
                 weight, self_rows)


@dataclass(frozen=True)
class OverlapBlocks:
    """The four-block split of one part's summed-layer kernel (module text); ``n_roots`` rows
    lead both tables, ``n_dst`` destination and ``n_src`` source rows in all."""

    n_roots: int
    n_dst: int
    n_src: int
    leaves_from_roots: Block    #: forward: leaf destinations, root sources
    leaves_from_copies: Block   #: forward: leaf destinations, copy sources
    roots: Block                #: forward: root destinations, every source (own term)
    copies_from_roots: Block    #: backward: copy sources, root destinations
    copies_from_leaves: Block   #: backward: copy sources, leaf destinations
    root_sources: Block         #: backward: root sources, every destination (own term)

    @classmethod
    def split(cls, graph: KernelGraph, weights: KernelWeights, n_roots: int) -> "OverlapBlocks":
        n_dst, n_src = graph.n_dst, graph.n_src
        s, w, own = weights.scale, weights.weight, weights.self_rows
        fwd = lambda rows, cols, self_rows: block(graph.indptr, graph.indices, rows, cols, s, w, self_rows)  # noqa: E731
        # the transpose: rows are sources, the forward's source weight its scale and the
        # destinations' scale its weight (distgnn.exchange.local_sum.LocalKernel.transposed)
        bwd = lambda rows, cols, self_rows: block(graph.t_indptr, graph.t_indices, rows, cols, w, s, self_rows)  # noqa: E731
        return cls(n_roots, n_dst, n_src,
                   fwd((n_roots, n_dst), (0, n_roots), 0), fwd((n_roots, n_dst), (n_roots, n_src), 0),
                   fwd((0, n_roots), (0, n_src), own),
                   bwd((n_roots, n_src), (0, n_roots), 0), bwd((n_roots, n_src), (n_roots, n_dst), 0),
                   bwd((0, n_roots), (0, n_dst), own))


@dataclass(frozen=True)
class Leg:
    """One exchange of the schedule: rows of ``send`` go to ``recv``, counted under ``kind`` and
    ``direction``."""

    send: RowPlan
    recv: RowPlan
    kind: Traffic
    direction: Direction | None


def overlapped(x: torch.Tensor, n_table: int, n_roots: int, spread: Leg, early: Block,
               late: Block, gather: Leg, own: Block, comm: Communicator, timers: Timers,
               threads: int) -> torch.Tensor:
    """The schedule both directions share (module text): the table [n_table, w] holds ``x``
    [n_roots, w] and the leaf rows ``spread`` brings; the leaf rows' sums ``early`` (from root
    rows, while ``spread`` travels) plus ``late`` travel back to their roots by ``gather``, while
    ``own`` sums the roots' rows; returns the roots' [n_roots, w]."""
    leaf_rows = len(spread.recv.ids)
    # pooled (a fresh table costs a page fault per 4 KB); zeroed where rows stay unwritten
    table = (pooled_zeros((n_table, x.shape[1]), x.dtype) if n_table > n_roots + leaf_rows
             else POOL.empty((n_table, x.shape[1]), x.dtype))
    table[:n_roots] = x
    # the rows gathered and scattered (none at an integer width: the codec reads and writes them)
    timers.rows("copied", n_roots + comm.copies_rows(spread.kind) * (len(spread.send.ids) + leaf_rows))
    with timers("exchange_wait"):
        arriving = comm.exchange_rows_async(x, spread.send, spread.recv, spread.kind,
                                            spread.direction, gather=True)
    with timers("aggregate"):
        leaves = early(table, threads)
    with timers("exchange_wait"):
        arriving.wait_into(table, spread.recv.ids)   # an integer width decodes in place
    with timers("aggregate"):
        leaves += late(table, threads)
    timers.rows("written", n_roots + leaves.shape[0])
    with timers("exchange_wait"):
        # the leaf rows [n_roots, n_table) are leaves' rows [0, ...): the plan's ids shifted
        send = RowPlan(gather.send.ids.to(torch.int64) - n_roots, gather.send.offsets)
        returning = comm.exchange_rows_async(leaves, send, gather.recv, gather.kind,
                                             gather.direction, gather=True)
    with timers("aggregate"):
        out = own(table, threads)
    timers.rows("copied", comm.copies_rows(gather.kind) * (len(gather.send.ids) + len(gather.recv.ids)))
    with timers("exchange_wait"):
        returning.wait_into(out, gather.recv.ids, add=True)
    return out


class OverlappedSum(torch.autograd.Function):
    """h [n_roots, w] -> the roots' aggregate [n_roots, w]: cd-0's broadcast, local sum and
    reduce with each exchange overlapped (module text); backward its adjoint, overlapped alike."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, blocks: OverlapBlocks, plans: RootPlans, comm: Communicator,
                timers: Timers, kind: Traffic, threads: int) -> torch.Tensor:
        ctx.blocks, ctx.plans, ctx.comm, ctx.timers, ctx.threads = blocks, plans, comm, timers, threads
        b = blocks
        return overlapped(
            h.detach(), b.n_src, b.n_roots,
            Leg(plans.bcast_root, plans.bcast_leaf, kind, training_direction(kind, Direction.BROADCAST)),
            b.leaves_from_roots, b.leaves_from_copies,
            Leg(plans.reduce_leaf, plans.reduce_root, kind, training_direction(kind, Direction.REDUCE)),
            b.roots, comm, timers, threads)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        b, plans = ctx.blocks, ctx.plans
        grad_h = overlapped(
            grad.contiguous(), b.n_dst, b.n_roots,
            Leg(plans.reduce_root, plans.reduce_leaf, Traffic.BACKWARD, Direction.BROADCAST),
            b.copies_from_roots, b.copies_from_leaves,
            Leg(plans.bcast_leaf, plans.bcast_root, Traffic.BACKWARD, Direction.REDUCE),
            b.root_sources, ctx.comm, ctx.timers, ctx.threads)
        return grad_h, None, None, None, None, None, None
