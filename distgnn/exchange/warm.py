"""cd-r's warm start at the root (``--cdr-rule warm``): a summed layer's first r training steps
run cd-0's exchange, blocking and with its exact adjoint, and keep what it delivered.

Under the first rule (``delayed``) a leaf's copies and a root's R are zero until their first
delivery (steps < r; a copy's bin arrives at step r + bin), while the aggregate is still divided
by the global in-degree. A warm step instead broadcasts every root row to its leaves and reduces
every leaf partial to its root, as cd-0 does, and keeps the leaves' copies (the table's leaf rows)
and each root's remote part R = a - p_root in the layer's :class:`DelayedSumState`. From step r on
the delayed rule runs unchanged (each bin moves at its steps and is consumed r steps later); until
a bin's first delayed message arrives (steps r to 2r - 1) its copies and R are those of step r - 1.
Nothing is posted in a warm step, so the messages of steps r .. 2r - 1 find nothing to take, and
bytes are cd-0's in the first r steps only (docs/design.md#cdr-rules).
"""
from __future__ import annotations

import torch

from distgnn.comm import Communicator, Traffic
from distgnn.exchange.collectives import Reduce
from distgnn.exchange.delayed_sum import DelayedSumState
from distgnn.exchange.local_sum import LocalKernel
from distgnn.exchange.plans import RootPlans
from distgnn.train.timers import Timers


def warm_step(src: torch.Tensor, n_roots: int, kernel: LocalKernel, plans: RootPlans,
              comm: Communicator, timers: Timers, state: DelayedSumState) -> torch.Tensor:
    """One warm step of a summed layer: cd-0's aggregate [n_roots, w] of the source rows ``src``
    that ``kernel`` reads (cd-0's broadcast of the roots' rows into the compact source table, or
    the stored features every replica has), keeping the copies (when the layer has a table) and R
    in ``state``, and advancing its step."""
    p = kernel(src)
    out = Reduce.apply(p, n_roots, plans, comm, timers, Traffic.FORWARD)
    with torch.no_grad():
        state.remote.copy_(out.detach() - p.detach()[:n_roots])
        if state.table is not None:
            state.table.copy_(src.detach())
    state.step += 1
    return out
