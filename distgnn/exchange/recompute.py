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

The cost is dense work for the leaf rows that are sources of local edges (counted in
``summary.json`` as ``recomputed_rows``) and one table of the part's rows per layer 1, which
:class:`RowsSum` keeps instead of zeroing a new one each step.
"""
from __future__ import annotations

import torch

from distgnn.comm import Communicator, Traffic
from distgnn.exchange.collectives import Broadcast
from distgnn.exchange.local_sum import LocalKernel
from distgnn.exchange.plans import RootPlans
from distgnn.train.timers import Timers

#: the layer whose source rows the leaves recompute (its input is layer 0's output)
RECOMPUTED_LAYER = 1


def recomputed_rows(plans: RootPlans, n_roots: int) -> torch.Tensor:
    """Local ids, int64 [n_roots + n_sources]: the roots (0 .. n_roots - 1), then the leaves that
    are sources of local edges, ascending. Layer 0's dense work runs on these rows in training."""
    sources = torch.unique(plans.bcast_leaf.ids.to(torch.int64))
    return torch.cat([torch.arange(n_roots, dtype=torch.int64), sources])


def extend_input_aggregate(roots_aggregate: torch.Tensor, rows: torch.Tensor, num_local: int,
                           plans: RootPlans, comm: Communicator, timers: Timers) -> torch.Tensor:
    """The exact layer-0 aggregate of ``rows`` [len(rows), F] from the roots' [n_roots, F]: the
    roots send theirs to the leaves that read them (once, at set-up, on ``comm``)."""
    with torch.no_grad():
        table = Broadcast.apply(roots_aggregate, num_local, plans, comm, timers, Traffic.SETUP)
        return table.index_select(0, rows).contiguous()


class RowsSum(torch.autograd.Function):
    """Layer 1's local sum from the recomputed rows: h [len(rows), w] is copied into the rows
    ``rows`` of the layer's persistent source table [n_k, w] (rows the kernel never reads are left
    as they are) and the kernel runs over it. Backward: the kernel on the transpose, the gradient
    of those rows."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, kernel: LocalKernel, table: torch.Tensor,
                rows: torch.Tensor) -> torch.Tensor:
        ctx.kernel, ctx.rows, ctx.dtype = kernel, rows, table.dtype
        with kernel.timers("aggregate"):
            table.index_copy_(0, rows, h.detach().to(table.dtype))
            return kernel.forward_rows(table)

    @staticmethod
    def backward(ctx, grad_p: torch.Tensor):
        with ctx.kernel.timers("aggregate"):
            grad_src = ctx.kernel.transposed(grad_p, ctx.dtype)
        return grad_src.index_select(0, ctx.rows), None, None, None
