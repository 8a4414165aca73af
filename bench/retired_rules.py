"""cd-r rules at the root that distgnn no longer offers (``--cdr-rule``), kept here so that the
figures which retired them can be rerun and ``bench.fixed_losses`` keeps checking their
arithmetic: each is a :class:`~distgnn.exchange.rules.CdrRule` registered from outside the package,
as a user's own rule would be (docs/design.md#rule-hooks).

    python -m bench.retired_rules train PARTDIR --algo cd-5 --cdr-rule warm-input ...

runs ``distgnn`` with these rules registered (under mpiexec too). What each one does, and the
figures that retired it (``recompute``, the default, beats each of them on the papers twin and on
the demo graph: docs/delayed-updates.md, "Retired rules"):

* ``warm``: a summed layer's first r training steps run cd-0's exchange, blocking and with its exact
  adjoint, and keep what it delivered (every leaf's copies, every root's R = a - p_root); from
  step r the first rule runs unchanged, and until a bin's first delayed message arrives (steps r
  to 2r - 1) its copies and R are those of step r - 1, never zero. Bytes are cd-0's in steps < r.
* ``input``: layer 0 trains on the exact aggregate of the stored features computed once (the input
  cache, as cd-0): nothing of layer 0 moves in training. ``warm-input``: both.
* ``present``: until every row has arrived (steps < 4r - 1) each part also sends with its partials
  the *mass* of the rows present (the kernel on a mask column: its roots, stored or fresh rows,
  leaf copies once delivered), and each root scales its aggregate by M(v) / (c_root(v) + C(v)),
  M the mass of all v's edges (the exact aggregate of a column of ones), C its leaves' delivered
  masses: for ``mean`` the mean over the present edges. ``present-input``: with ``input``.
* ``warm-recompute``: ``recompute`` with ``warm``'s start.
"""
from __future__ import annotations

import sys

import torch

from distgnn.comm import Communicator
from distgnn.exchange.collectives import Broadcast, Reduce
from distgnn.exchange.delayed_sum import DelayedSumState
from distgnn.exchange.local_sum import LocalKernel
from distgnn.exchange.plans import RootPlans
from distgnn.exchange.rules import CdrRule, Recompute, register_rule
from distgnn.exchange.schedule import DelayedSchedule
from distgnn.row_exchange import Direction, Traffic
from distgnn.timers import Timers


def warm_step(src: torch.Tensor, n_roots: int, kernel: LocalKernel, plans: RootPlans,
              comm: Communicator, timers: Timers, state: DelayedSumState) -> torch.Tensor:
    """One warm step of a summed layer: cd-0's aggregate [n_roots, w] of the source rows ``src``
    that ``kernel`` reads (cd-0's broadcast of the roots' rows into the compact source table, or
    the stored features every replica has), keeping the copies (when the layer has a table) and R
    in ``state``, and advancing its step. Nothing is posted, so the delayed messages of steps
    r .. 2r - 1 find nothing to take."""
    p = kernel(src)
    out = Reduce.apply(p, n_roots, plans, comm, timers, Traffic.FORWARD)
    with torch.no_grad():
        state.remote.copy_(out.detach() - p.detach()[:n_roots])
        if state.table is not None:
            state.table.copy_(src.detach())
    state.step += 1
    return out


class Warm(CdrRule):
    """``warm`` (module docstring)."""

    name = "warm"
    summary = "the first r epochs run cd-0's exchange and keep what it delivered"

    def early(self, root, layer: int, h: torch.Tensor, state: DelayedSumState,
              stored: bool) -> torch.Tensor | None:
        if state.step >= root.delay or root.comm.size == 1:
            return None
        n_roots = root.n_roots
        # a recomputed leaf's row equals its root's: cd-0's broadcast of the roots' rows
        src = root.feat_rows if stored else Broadcast.apply(
            h[:n_roots], root.kernel.graph.n_src, root.sum_plans, root.comm, root.timers,
            Traffic.FORWARD)
        out = warm_step(src, n_roots, root.feature_kernel if stored else root.kernel,
                        root.sum_plans, root.comm, root.timers, state)
        root.settled.offer(layer, out, True)  # R of a constant layer is final at once
        return out


class Input(CdrRule):
    """``input`` (module docstring)."""

    name = "input"
    summary = "layer 0 on the input cache, as cd-0"
    input_cache = True


class WarmInput(Warm):
    name = "warm-input"
    summary = "warm and input"
    input_cache = True


class DegreePresent:
    """The mass of every root's edges (computed once, collective) and the present rows' masses."""

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

    def masses(self, state: DelayedSumState) -> torch.Tensor:
        """c_k [n_dst, 1]: the present rows' mass at every destination row."""
        return self.kernel.forward_rows(state.extra["present"])

    def scale(self, own: torch.Tensor, state: DelayedSumState) -> torch.Tensor:
        """M / (c_root + C) [n_roots, 1] (1 where nothing is present)."""
        present = own[:self.n_roots] + state.extra["counts"]
        return torch.where(present > 0, self.full / present.clamp_min(1e-30),
                           torch.ones_like(present))


class Present(CdrRule):
    """``present`` (module docstring). Per layer, ``state.extra``: ``present`` float [n_src, 1]
    (1 for a row the kernel reads as present) and ``counts`` C float [n_roots, 1]; the masses
    travel on the channel ``counts``."""

    name = "present"
    summary = "until every row has arrived, scale each aggregate to the rows present"
    table_rows = ("present",)

    def setup(self, root) -> None:
        self.degree = None
        self._masses: dict[int, torch.Tensor] = {}
        if root.delay > 0 and root.comm.size > 1:
            self.degree = DegreePresent(root.kernel, root.sum_plans, root.eval_comm, root.timers,
                                        root.n_roots)

    def start(self, root, state: DelayedSumState, delayed_copies: bool) -> None:
        if self.degree is None:
            return
        present = torch.ones((root.kernel.graph.n_src, 1), dtype=torch.float32)
        if delayed_copies:
            present[root.n_roots:] = 0.0
        state.extra["present"] = present
        state.extra["counts"] = torch.zeros((root.n_roots, 1), dtype=torch.float32)

    def delivered(self, root, schedule: DelayedSchedule, state: DelayedSumState, step: int,
                  copies_taken: bool) -> None:
        """The masses posted r steps ago replace their roots' C; the leaf rows whose copies
        just arrived become present."""
        if self.degree is None:
            return
        bins, earlier = schedule.bin(step), step - schedule.steps_late
        if state.mailbox.holds("counts", earlier):
            rows = state.mailbox.take("counts", earlier)
            state.extra["counts"][bins.reduce_root.ids] = 0.0
            state.extra["counts"].index_add_(0, bins.reduce_root.ids, rows.float())
        if copies_taken:
            state.extra["present"][bins.bcast_leaf.ids] = 1.0

    def posted(self, root, schedule: DelayedSchedule, state: DelayedSumState, step: int) -> None:
        if self.degree is None or not DegreePresent.active(step, root.delay):
            return
        masses = self._masses[id(state)] = self.degree.masses(state)
        if DegreePresent.active(step + root.delay, root.delay):
            bins = schedule.bin(step)
            schedule.post(state.mailbox, "counts", step, masses[bins.reduce_leaf.ids],
                          bins.reduce_leaf, bins.reduce_root, Direction.REDUCE)

    def merge(self, root, state: DelayedSumState, step: int, out: torch.Tensor) -> torch.Tensor:
        if self.degree is None or not DegreePresent.active(step, root.delay):
            return out
        masses = self._masses.pop(id(state), None)
        if masses is None:  # a constant layer past step r posts nothing
            masses = self.degree.masses(state)
        return out * self.degree.scale(masses, state)


class PresentInput(Present):
    name = "present-input"
    summary = "present and input"
    input_cache = True


class WarmRecompute(Warm, Recompute):
    name = "warm-recompute"
    summary = "recompute with warm's start"


RETIRED = (Warm, Input, WarmInput, Present, PresentInput, WarmRecompute)
NAMES = tuple(rule.name for rule in RETIRED)
for rule in RETIRED:
    register_rule(rule)


def main(argv: list[str] | None = None) -> int:
    """``distgnn`` with the retired rules registered."""
    from distgnn.cli import main as distgnn_main

    return distgnn_main(argv)


if __name__ == "__main__":
    sys.exit(main())
