"""cd-r's attention at the root: GraphSAGE's bins and delays for GAT's three messages.

For a bin vertex v: its root's [values, el] go to the leaves with local out-edges (channel
``sources``) and its er to those with local in-edges (``destinations``): the copies their kernels
read, zero before the first delivery; those leaves' partials (m, s, q) go to the root
(``partials``), which merges its fresh own partial with the last delivered ones (none before the
first delivery). The *values* are z, or in the input form (:class:`AttentionValues`) the layer
input h, the root then mapping the merge by the current W. With delayed gradients each of the
three travels back r steps late, as for the summed layers (docs/design.md#attention-across-parts).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from distgnn.kernels.attention import local_attention, merge
from distgnn.comm import Direction, RowPlan, Traffic
from distgnn.errors import DistgnnError
from distgnn.exchange.collectives import Broadcast
from distgnn.exchange.mailbox import Mailbox
from distgnn.exchange.plans import RootPlans, broadcast_to
from distgnn.exchange.schedule import DelayedSchedule
from distgnn.partition.part_loader import PartitionData

CHANNELS = ("sources", "destinations", "partials", "sources_grad", "destinations_grad",
            "partials_grad")


@dataclass
class AttentionLayerState:
    """cd-r state of one attention layer at the root: tables whose leaf rows hold the last
    delivered copies, the leaves' last delivered partials, and the messages in flight."""

    step: int = 0
    #: float [n_k, H D + H]: z and el; in the input form [n_k, I + H]: h and el
    sources: torch.Tensor | None = None
    destinations: torch.Tensor | None = None   #: float [n_k, H]: er
    #: float [n_in, 2H + H V]: (m, s, q) of every leaf partial a root receives, in the order of
    #: the reduce plan (V = D, or I in the input form); m = -inf, s = q = 0 before the first
    #: delivery (a merge ignores them)
    partials: torch.Tensor | None = None
    mailbox: Mailbox = field(default_factory=lambda: Mailbox(CHANNELS))

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "sources": self.sources, "destinations": self.destinations,
                "partials": self.partials, "mailbox": self.mailbox.state_dict()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "AttentionLayerState":
        return cls(step=state["step"], sources=state["sources"],
                   destinations=state["destinations"], partials=state["partials"],
                   mailbox=Mailbox.from_state(state["mailbox"]))


class AttentionValues:
    """What a layer's attention partials weight under cd-r: z [n_roots, H, D] (the z form), or,
    in the input form, the layer input h [n_roots, I] with z = (h W^T).view(n, H, D), whose
    merged weighted sum the root maps by the current W (linear, so it commutes with the
    softmax's weighted sum). The input form is used where it moves and computes no more than the
    z form (I <= D): then a stale partial carries stale weights and inputs but today's W."""

    def __init__(self, z: torch.Tensor, inputs: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        n, self.heads, self.out_dim = z.shape
        self.shared = inputs is not None and inputs[0].shape[1] <= self.out_dim
        if self.shared:
            self.rows, self.weight = inputs
            self.width = self.rows.shape[1]     #: V, each head's value width
        else:
            self.rows, self.weight, self.width = z.reshape(n, -1), None, self.out_dim

    @property
    def row_width(self) -> int:
        """Columns of a source row's values (I in the input form, H D in the z form)."""
        return self.width if self.shared else self.heads * self.width

    def per_head(self, rows: torch.Tensor) -> torch.Tensor:
        """Source value rows [n, row_width] as the kernel reads them, [n, H, V]."""
        if self.shared:
            return rows.unsqueeze(1).expand(-1, self.heads, -1)
        return rows.view(rows.shape[0], self.heads, self.width)

    def output(self, merged: torch.Tensor) -> torch.Tensor:
        """The merged weighted sums [n, H, V] as the layer's attention output [n, H, D]."""
        if not self.shared:
            return merged
        w = self.weight.view(self.heads, self.out_dim, self.width)
        return torch.einsum("nhi,hdi->nhd", merged, w)


class StaleCopies(torch.autograd.Function):
    """A cd-r table with the roots' fresh rows h [n_roots, w] in front of the leaves' last
    delivered copies, [n_k, w]; backward as :meth:`DelayedSchedule.copies_gradient`."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, table: torch.Tensor, schedule: DelayedSchedule,
                mailbox: Mailbox, channel: str, leaf_plan: RowPlan, root_plan: RowPlan,
                step: int) -> torch.Tensor:
        ctx.schedule, ctx.mailbox, ctx.channel = schedule, mailbox, channel
        ctx.plans, ctx.step = (leaf_plan, root_plan), step
        out = table.clone()
        out[:h.shape[0]] = h
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return (ctx.schedule.copies_gradient(ctx.mailbox, ctx.channel, ctx.step, grad, *ctx.plans),
                None, None, None, None, None, None, None)


def intensive_gradient(rows: torch.Tensor, grad: torch.Tensor, heads: int) -> torch.Tensor:
    """The gradient of attention partials (m, s, q) [n, 2H + H D] as the gradient of their
    m-free form, the local softmax output o = q / s and log-mass l = m + log s: [n, H + H D]
    (dL/dl, then dL/do). A delayed gradient travels in this form (:func:`extensive_gradient`
    maps it onto the partial it is applied to), so a shift of the row's max m between the two
    steps does not scale it."""
    n, H = rows.shape[0], heads
    s, q = rows[:, H:2 * H], rows[:, 2 * H:].reshape(n, H, -1)
    gs, gq = grad[:, H:2 * H], grad[:, 2 * H:].reshape(n, H, -1)
    g_o = s.unsqueeze(2) * gq
    o = q / s.clamp_min(torch.finfo(s.dtype).tiny).unsqueeze(2)   # rows never delivered: s = 0
    g_l = s * gs + (g_o * o).sum(2)
    return torch.cat([g_l, g_o.reshape(n, -1)], 1)


def extensive_gradient(rows: torch.Tensor, got: torch.Tensor, heads: int) -> torch.Tensor:
    """The inverse of :func:`intensive_gradient` on the partials ``rows`` [n, 2H + H D] it is
    applied to: (dL/dm = 0, dL/ds, dL/dq) [n, 2H + H D] from (dL/dl, dL/do) [n, H + H D]."""
    n, H = rows.shape[0], heads
    s, q = rows[:, H:2 * H], rows[:, 2 * H:].reshape(n, H, -1)
    g_l, g_o = got[:, :H], got[:, H:].reshape(n, H, -1)
    gq = g_o / s.unsqueeze(2)
    gs = (g_l - (g_o * q).sum(2) / s) / s
    return torch.cat([torch.zeros_like(g_l), gs, gq.reshape(n, -1)], 1)


class StalePartials(torch.autograd.Function):
    """(the roots' own partials [n_roots, C], the leaves' last delivered ones [n_in, C]) from this
    step's partials [n_k, C], C = 2H + H D. With delayed gradients, backward posts the delivered
    rows' gradient of this step's bin to the leaves that sent them, in the m-free form of
    :func:`intensive_gradient`, and adds to the leaves' partials the gradient posted r steps
    ago, mapped onto them (the attention's delayed adjoint of the reduce)."""

    @staticmethod
    def forward(ctx, p: torch.Tensor, delivered: torch.Tensor, schedule: DelayedSchedule,
                state: AttentionLayerState, step: int, heads: int):
        ctx.schedule, ctx.state, ctx.step, ctx.heads = schedule, state, step, heads
        ctx.n_local = p.shape[0]
        if schedule.delayed_gradients:
            b = step % schedule.delay
            ctx.sent = delivered[schedule.reduce_positions[b]].detach().clone()  # the rows it uses
            ctx.mine = p[schedule.bins[b].reduce_leaf.ids].detach()             # the rows it sent
        return p[:schedule.n_roots].clone(), delivered.clone()

    @staticmethod
    def backward(ctx, grad_own: torch.Tensor, grad_delivered: torch.Tensor | None):
        schedule, e, H = ctx.schedule, ctx.step, ctx.heads
        grad_p = grad_own.new_zeros((ctx.n_local, grad_own.shape[1]))
        grad_p[:schedule.n_roots] = grad_own
        if schedule.delayed_gradients:
            b = e % schedule.delay
            bins = schedule.bins[b]
            grad_sent = (torch.zeros_like(ctx.sent) if grad_delivered is None
                         else grad_delivered[schedule.reduce_positions[b]])
            got = schedule.post_and_take_gradient(
                ctx.state.mailbox, "partials_grad", e, intensive_gradient(ctx.sent, grad_sent, H),
                bins.reduce_root, bins.reduce_leaf, Direction.BROADCAST)
            if got is not None:
                grad_p[bins.reduce_leaf.ids] += extensive_gradient(ctx.mine, got, H)
        return grad_p, None, None, None, None, None


class DelayedAttention:
    """cd-r attention at the root for every attention layer (module docstring)."""

    def __init__(self, part: PartitionData, plans: RootPlans, schedule: DelayedSchedule,
                 threads: int, fresh_copies: bool):
        self.part, self.plans, self.schedule = part, plans, schedule
        self.threads, self.fresh_copies = threads, fresh_copies
        self.layers: dict[int, AttentionLayerState] = {}

    def __call__(self, layer: int, values: AttentionValues, el: torch.Tensor, er: torch.Tensor,
                 dropout) -> torch.Tensor:
        """This layer's attention output [n_roots, H, D] at its current training step."""
        schedule, part = self.schedule, self.part
        r, n_roots, comm, timers = schedule.delay, schedule.n_roots, schedule.comm, schedule.timers
        n_local, H, V = part.num_local, values.heads, values.width
        state = self.layers.setdefault(layer, AttentionLayerState())
        if state.partials is None:
            if not self.fresh_copies:
                state.sources = el.new_zeros((n_local, values.row_width + H))
                state.destinations = el.new_zeros((n_local, H))
            state.partials = el.new_zeros((int(self.plans.reduce_root.ids.numel()), 2 * H + H * V))
            state.partials[:, :H] = float("-inf")
        elif state.partials.shape[1] != 2 * H + H * V:
            raise DistgnnError(f"attention layer {layer}: the checkpoint's cd-r partials are "
                               f"{state.partials.shape[1]} wide, this run's {2 * H + H * V} "
                               "(written by another version or model shape); resume with the same")
        e, box = state.step, state.mailbox
        b = e % r
        bins = schedule.bins[b]
        if e >= r:
            with timers("exchange_wait"):
                if not self.fresh_copies:
                    state.sources[bins.bcast_leaf.ids] = box.take("sources", e - r)
                    state.destinations[bins.reduce_leaf.ids] = box.take("destinations", e - r)
                state.partials[schedule.reduce_positions[b]] = box.take("partials", e - r)
        own_rows = torch.cat([values.rows, el], 1)
        if self.fresh_copies:
            src = Broadcast.apply(own_rows, n_local, self.plans, comm, timers, Traffic.FORWARD)
            dst = Broadcast.apply(er, n_local, broadcast_to(self.plans.reduce_leaf,
                                                            self.plans.reduce_root),
                                  comm, timers, Traffic.FORWARD)
        else:
            src = StaleCopies.apply(own_rows, state.sources, schedule, box, "sources_grad",
                                    bins.bcast_leaf, bins.bcast_root, e)
            dst = StaleCopies.apply(er, state.destinations, schedule, box, "destinations_grad",
                                    bins.reduce_leaf, bins.reduce_root, e)
        w = values.row_width
        m, s, q = local_attention(part.indptr, part.indices, values.per_head(src[:, :w]),
                                  src[:, w:], dst, n_roots, dropout, self.threads,
                                  lambda: timers("aggregate"))
        p = torch.cat([m, s, q.reshape(n_local, H * V)], 1)
        with timers("exchange_wait"):
            if not self.fresh_copies:
                schedule.post(box, "sources", e, own_rows, bins.bcast_root,
                              bins.bcast_leaf, Direction.BROADCAST, gather=True)
                schedule.post(box, "destinations", e, er, bins.reduce_root,
                              bins.reduce_leaf, Direction.BROADCAST, gather=True)
            schedule.post(box, "partials", e, p, bins.reduce_leaf,
                          bins.reduce_root, Direction.REDUCE, gather=True)
        state.step += 1
        own, got = StalePartials.apply(p, state.partials, schedule, state, e, H)
        return values.output(merge(own[:, :H], own[:, H:2 * H], own[:, 2 * H:].view(n_roots, H, V),
                                   self.plans.reduce_root.ids, got[:, :H], got[:, H:2 * H],
                                   got[:, 2 * H:].view(-1, H, V)))

    def state_dict(self) -> dict[int, dict[str, Any]]:
        return {layer: state.state_dict() for layer, state in self.layers.items()}

    def load_state_dict(self, state: dict[int, dict[str, Any]]) -> None:
        self.layers = {int(layer): AttentionLayerState.from_state(s) for layer, s in state.items()}
