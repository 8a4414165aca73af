"""Apply at the root (``--apply root``): each vertex's dense work runs once, on the rank holding its
root, as PowerGraph applies a vertex program at the master (docs/design.md, "Where the dense work
runs").

Layout: a part's roots are its first ``n_roots`` local ids (layout version 2), so the rows a rank
applies the layer to are a prefix of its local rows. One layer's aggregation under ``root``:

1. **broadcast** -- the roots' layer input h [n_roots, w] (``W_neigh h`` for a layer that maps
   first) is sent to the leaf replicas that use it as a source (leaves with local out-edges),
   giving the source table [n_k, w]. A layer whose input is the stored features (layer 0 when it
   aggregates first) reads them instead: every replica has them, nothing is sent.
2. **local sum** -- the native kernel over the part's own edges, p [n_k, w].
3. **reduce** -- leaves with local in-edges send their partial to the root; the root adds them to
   its own: a [n_roots, w]. The degree scaling is linear and every replica knows v's global
   in-degree, so each part's kernel scales the partials it produces (and adds the gcn self term
   h_v at the root only): the reduce's sum is the final aggregate, with no pass of its own.

Backward is the adjoint, so cd-0 under ``root`` equals one-process training: a reduce's gradient
goes back from the root to the leaves that sent partials (the kernel on the transpose then runs on
every part), and a broadcast's gradient, summed over the leaves that used the row, comes back to
the root. Only rows that carry something move: a leaf without local in-edges sends no partial and
a leaf without local out-edges gets no source row; which leaves those are, the roots learn once at
load time (:func:`root_plans`, one exchange of two flags per leaf).

**cd-r under root** (r >= 1). Split vertex v is in bin ``global_id(v) mod r``; at a layer's
training step e, bin ``e mod r`` moves, non-blocking: the roots post their current row of each
bin-b vertex to its leaves (broadcast) and the leaves post their partial of each bin-b vertex to
its root (reduce); every message is consumed r steps after it was posted, at the start of step
e + r, before that step's local sum. So a leaf's copy of a root's row is r to 2r - 1 steps old,
and a root aggregates ``a = p_root(e) + R`` where R, the sum of its leaves' last delivered
partials, is r to 2r - 1 steps old. Before the first delivery a copy and R are zero. With delayed
gradients (the rule; ``delayed_gradients=False`` turns them off) each exchange's adjoint moves in
backward for the same bin and is consumed r steps later (:class:`_DelayedReduceGrad`,
:class:`_TableSum`); without them copies and R are constants in backward. The measurement behind
the rule is in docs/design.md. From step r on, forward (and backward) bytes per epoch are 1/r of
cd-0's.
With ``fresh_copies`` (``--fresh-copies``) the broadcast is cd-0's, every step with its exact
adjoint, and only the reduce moves in bins as above (docs/design.md says when it pays).
GAT's attention (:meth:`RootAggregation._delayed_attention`) follows the same bins and delays
for its three messages: the roots' [z, el] and er, and the leaves' partials (m, s, q), which the
root keeps per leaf and merges with its fresh own. A layer whose input h is no wider than one
head's output (I <= D) sends [h, el] instead and its partials weight h; the root maps the merge by
the current W (the input form, :class:`AttentionValues`).
A layer whose input is the stored features sends no broadcast; when it is also constant in
training (``constant_layers``: the trainer's input cache on), its partials never change, so it
posts them only at steps < r and, from step 2r on, when every bin's R has arrived, returns its kept
aggregate without the kernel or messages.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from distgnn import ops
from distgnn.comm import Communicator, RowPlan
from distgnn.errors import DistgnnError
from distgnn.train.exchange import (_LocalSum, complete_pending, delivered, global_out_degree, received,
                                    transposed_sum)
from distgnn.train.partition_data import PartitionData
from distgnn.train.timers import Timers


@dataclass
class RootPlans:
    """The row plans of apply-at-root, each a sub-plan of the part's stored plan (same order)."""

    reduce_leaf: RowPlan    #: my leaves with local in-edges, grouped by the rank of their root
    reduce_root: RowPlan    #: my roots' rows that receive those partials, grouped by leaf rank
    bcast_leaf: RowPlan     #: my leaves with local out-edges (they need their root's row)
    bcast_root: RowPlan     #: my roots' rows sent to those leaves, grouped by leaf rank


def root_plans(part: PartitionData, comm: Communicator) -> RootPlans:
    """Prune the stored plan to the rows that move (collective: one exchange of flags)."""
    leaves = part.leaf_send.ids
    out_degree = part.t_indptr[1:] - part.t_indptr[:-1]
    has_in = part.local_degree[leaves] > 0
    has_out = out_degree[leaves] > 0
    flags = torch.stack([has_in, has_out], dim=1).to(torch.float32)
    if comm.size > 1:
        at_root = comm.exchange_rows(flags, part.leaf_send, part.root_recv, "setup") > 0
    else:
        at_root = torch.zeros((0, 2), dtype=torch.bool)
    return RootPlans(part.leaf_send.subset(has_in), part.root_recv.subset(at_root[:, 0]),
                     part.leaf_send.subset(has_out), part.root_recv.subset(at_root[:, 1]))


def _training_direction(kind: str, direction: str) -> str | None:
    """Directions are counted for training traffic only (evaluation has its own counter)."""
    return None if kind == "eval" else direction


class _Broadcast(torch.autograd.Function):
    """h [n_roots, w] -> source table [n_k, w]: the roots' rows, then the leaves' copies (rows of
    leaves without local out-edges are zero; no kernel reads them)."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, n_local: int, plans: RootPlans, comm: Communicator,
                timers: Timers, kind: str) -> torch.Tensor:
        ctx.plans, ctx.comm, ctx.timers, ctx.n_roots = plans, comm, timers, h.shape[0]
        src = h.new_empty((n_local, h.shape[1]))
        src[:h.shape[0]] = h
        src[h.shape[0]:] = 0.0
        if comm.size > 1:
            with timers("exchange_wait"):
                rows = comm.exchange_rows(h[plans.bcast_root.ids], plans.bcast_root,
                                          plans.bcast_leaf, kind, _training_direction(kind, "broadcast"))
                src[plans.bcast_leaf.ids] = rows
        return src

    @staticmethod
    def backward(ctx, grad_src: torch.Tensor):
        plans = ctx.plans
        grad_h = grad_src[:ctx.n_roots].clone()
        if ctx.comm.size > 1:
            with ctx.timers("exchange_wait"):
                rows = ctx.comm.exchange_rows(grad_src[plans.bcast_leaf.ids], plans.bcast_leaf,
                                              plans.bcast_root, "backward", "reduce")
                grad_h.index_add_(0, plans.bcast_root.ids, rows)
        return grad_h, None, None, None, None, None


class _GatherAtRoot(torch.autograd.Function):
    """p [n_k, w] -> the rows the leaves in ``leaf_plan`` send, as received at their roots
    ([R, w], ordered as ``root_plan``, row i belonging to root ``root_plan.ids[i]``): the
    attention partials, which the root merges rather than sums. Backward sends each row's
    gradient back to the leaf it came from."""

    @staticmethod
    def forward(ctx, p: torch.Tensor, leaf_plan: RowPlan, root_plan: RowPlan, comm: Communicator,
                timers: Timers, kind: str) -> torch.Tensor:
        ctx.leaf_plan, ctx.root_plan, ctx.comm, ctx.timers = leaf_plan, root_plan, comm, timers
        ctx.shape = p.shape
        with timers("exchange_wait"):
            return comm.exchange_rows(p[leaf_plan.ids], leaf_plan, root_plan, kind,
                                      _training_direction(kind, "reduce"))

    @staticmethod
    def backward(ctx, grad_rows: torch.Tensor):
        grad_p = grad_rows.new_zeros(ctx.shape)
        with ctx.timers("exchange_wait"):
            back = ctx.comm.exchange_rows(grad_rows.contiguous(), ctx.root_plan, ctx.leaf_plan,
                                          "backward", "broadcast")
        grad_p[ctx.leaf_plan.ids] = back
        return grad_p, None, None, None, None, None


def broadcast_to(leaf_plan: RowPlan, root_plan: RowPlan) -> RootPlans:
    """Plans whose broadcast goes from ``root_plan``'s roots to ``leaf_plan``'s leaves (for
    :class:`_Broadcast`: e.g. the attention's destination terms, to the leaves with in-edges)."""
    return RootPlans(leaf_plan, root_plan, leaf_plan, root_plan)


def exact_attention(part: PartitionData, z: torch.Tensor, el: torch.Tensor, er: torch.Tensor,
                    sources: RootPlans, destinations: RootPlans, comm: Communicator, timers: Timers,
                    kind: str, dropout, threads: int) -> torch.Tensor:
    """Softmax attention at the roots, exact across parts, [n_roots, H, D] from the roots' z
    [n_roots, H, D], el and er [n_roots, H] (docs/design.md, "Graph attention across parts"):
    z and el go to the leaves with local out-edges (``sources``), er to those with local in-edges
    (``destinations``); every part computes (m, s, q) over its edges, the roots' own self loops
    included; the leaves' partials travel to the root, which merges them."""
    from distgnn.attention import local_attention

    n_roots, H, D = z.shape
    n_local = part.num_local
    if comm.size == 1 and n_local == n_roots:
        m, s, q = local_attention(part.indptr, part.indices, z, el, er, n_roots, dropout, threads,
                                  lambda: timers("aggregate"))
        return q / s.unsqueeze(2)
    rows = _Broadcast.apply(torch.cat([z.reshape(n_roots, H * D), el], 1), n_local, sources, comm,
                            timers, kind)
    er_all = _Broadcast.apply(er, n_local, destinations, comm, timers, kind)
    m, s, q = local_attention(part.indptr, part.indices, rows[:, :H * D].view(n_local, H, D),
                              rows[:, H * D:], er_all, n_roots, dropout, threads,
                              lambda: timers("aggregate"))
    return merge_at_roots(m, s, q, n_roots, destinations.reduce_leaf, destinations.reduce_root,
                          comm, timers, kind)


def merge_at_roots(m: torch.Tensor, s: torch.Tensor, q: torch.Tensor, n_roots: int,
                   leaf_plan: RowPlan, root_plan: RowPlan, comm: Communicator, timers: Timers,
                   kind: str) -> torch.Tensor:
    """The roots' attention output [n_roots, H, D] from every local row's partials (m, s
    [n_k, H], q [n_k, H, D]): the leaves of ``leaf_plan`` send theirs (2H + H D values a row) to
    their roots, which merge them with their own (:func:`distgnn.attention.merge`)."""
    from distgnn.attention import merge

    n_local, H, D = q.shape
    got = _GatherAtRoot.apply(torch.cat([m, s, q.reshape(n_local, H * D)], 1), leaf_plan,
                              root_plan, comm, timers, kind)
    return merge(m[:n_roots], s[:n_roots], q[:n_roots], root_plan.ids, got[:, :H],
                 got[:, H:2 * H], got[:, 2 * H:].view(-1, H, D))


class _Reduce(torch.autograd.Function):
    """p [n_k, w] -> a [n_roots, w]: each root's own partial plus its leaves' partials."""

    @staticmethod
    def forward(ctx, p: torch.Tensor, n_roots: int, plans: RootPlans, comm: Communicator,
                timers: Timers, kind: str) -> torch.Tensor:
        ctx.plans, ctx.comm, ctx.timers, ctx.n_local = plans, comm, timers, p.shape[0]
        a = p[:n_roots].clone()
        if comm.size > 1:
            with timers("exchange_wait"):
                rows = comm.exchange_rows(p[plans.reduce_leaf.ids], plans.reduce_leaf,
                                          plans.reduce_root, kind, _training_direction(kind, "reduce"))
                a.index_add_(0, plans.reduce_root.ids, rows)
        return a

    @staticmethod
    def backward(ctx, grad_a: torch.Tensor):
        plans = ctx.plans
        grad_p = grad_a.new_zeros((ctx.n_local, grad_a.shape[1]))
        grad_p[:grad_a.shape[0]] = grad_a
        if ctx.comm.size > 1:
            with ctx.timers("exchange_wait"):
                rows = ctx.comm.exchange_rows(grad_a[plans.reduce_root.ids].contiguous(),
                                              plans.reduce_root, plans.reduce_leaf, "backward",
                                              "broadcast")
                grad_p[plans.reduce_leaf.ids] = rows
        return grad_p, None, None, None, None, None


@dataclass
class RootLayerState:
    """cd-r state of one layer under root: step counter, kept rows, messages in flight."""

    step: int = 0
    #: float [n_k, w]: the source table; rows [n_roots:) are the leaves' last delivered copies
    table: torch.Tensor | None = None
    remote: torch.Tensor | None = None    #: R, float [n_roots, w]: leaves' last delivered partials
    pending_bcast: dict[int, Any] = field(default_factory=dict)    #: step posted -> rows to leaves
    pending_reduce: dict[int, Any] = field(default_factory=dict)   #: step posted -> partials to roots
    #: with delayed gradients: step posted -> gradients of the partials (to leaves) and of the
    #: copies (to roots)
    pending_grad_reduce: dict[int, Any] = field(default_factory=dict)
    pending_grad_bcast: dict[int, Any] = field(default_factory=dict)

    def pending(self) -> tuple[dict[int, Any], ...]:
        return (self.pending_bcast, self.pending_reduce, self.pending_grad_reduce,
                self.pending_grad_bcast)


def _post_and_take(agg: "RootAggregation", pending: dict[int, Any], step: int, rows: torch.Tensor,
                   send: RowPlan, recv: RowPlan, direction: str) -> torch.Tensor | None:
    """Delayed gradients: post this step's gradient rows of its bin (non-blocking) and return the
    ones posted r steps ago for the same bin (None before the first)."""
    with agg.timers("exchange_wait"):
        pending[step] = agg.comm.exchange_rows_async(rows, send, recv, "backward", direction)
        earlier = step - agg.delay
        return pending.pop(earlier).wait() if earlier in pending else None


class _DelayedReduceGrad(torch.autograd.Function):
    """a = p[:n_roots] + R, whose backward also posts the roots' gradient of this step's bin to
    the leaves that sent partials, and adds to the leaves' partials the gradient posted r steps
    ago (a delayed adjoint of the reduce)."""

    @staticmethod
    def forward(ctx, p: torch.Tensor, remote: torch.Tensor, agg: "RootAggregation",
                state: RootLayerState, step: int) -> torch.Tensor:
        ctx.agg, ctx.state, ctx.step, ctx.n_local = agg, state, step, p.shape[0]
        return p[:remote.shape[0]] + remote

    @staticmethod
    def backward(ctx, grad_a: torch.Tensor):
        agg, e = ctx.agg, ctx.step
        bins = agg.bins[e % agg.delay]
        grad_p = grad_a.new_zeros((ctx.n_local, grad_a.shape[1]))
        grad_p[:grad_a.shape[0]] = grad_a
        got = _post_and_take(agg, ctx.state.pending_grad_reduce, e, grad_a[bins.reduce_root.ids],
                             bins.reduce_root, bins.reduce_leaf, "broadcast")
        if got is not None:
            grad_p[bins.reduce_leaf.ids] += got
        return grad_p, None, None, None, None


class _TableSum(torch.autograd.Function):
    """cd-r's local sum under root: the roots' rows h are copied into the prefix of the layer's
    persistent source table (whose leaf rows hold the last delivered copies), and the kernel runs
    over it; so a step copies n_roots rows, not the whole table. Backward runs the kernel on the
    transpose and returns the roots' rows; with delayed gradients it also posts the gradient of
    this step's bin copies to their roots and adds the one posted r steps ago."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, agg: "RootAggregation", state: "RootLayerState",
                step: int) -> torch.Tensor:
        ctx.agg, ctx.state, ctx.step = agg, state, step
        part = agg.part
        with agg.timers("aggregate"):
            state.table[:h.shape[0]].copy_(h.detach())
            return ops.weighted_sum(part.indptr, part.indices, state.table, scale=agg.scale,
                                    weight=agg.weight, self_rows=agg.self_rows, threads=agg.threads)

    @staticmethod
    def backward(ctx, grad_p: torch.Tensor):
        agg, e = ctx.agg, ctx.step
        part = agg.part
        with agg.timers("aggregate"):
            grad_src = transposed_sum(part, grad_p, ctx.state.table.dtype, agg.threads, agg.scale,
                                      agg.self_rows, agg.weight)
        return _copies_gradient(agg, ctx.state.pending_grad_bcast, e, grad_src,
                                agg.bins[e % agg.delay].bcast_leaf,
                                agg.bins[e % agg.delay].bcast_root), None, None, None


def _copies_gradient(agg: "RootAggregation", pending: dict[int, Any], step: int,
                     grad_table: torch.Tensor, leaf_plan: RowPlan, root_plan: RowPlan) -> torch.Tensor:
    """The roots' rows' gradient [n_roots, w] from a cd-r table's [n_k, w]: its prefix, plus, with
    delayed gradients, the copies' gradients their leaves posted r steps ago (this step's are
    posted)."""
    grad_h = grad_table[:agg.n_roots]
    if not agg.delayed_gradients:
        return grad_h
    got = _post_and_take(agg, pending, step, grad_table[leaf_plan.ids], leaf_plan, root_plan,
                         "reduce")
    if got is None:
        return grad_h
    return grad_h.clone().index_add_(0, root_plan.ids, got)


@dataclass
class AttentionLayerState:
    """cd-r state of one attention layer under root (docs/design.md, "Graph attention across
    parts"): tables whose leaf rows hold the last delivered copies, the leaves' last delivered
    partials, and the messages in flight (step posted -> rows)."""

    step: int = 0
    #: float [n_k, H D + H]: z and el; in the input form (:class:`AttentionValues`) [n_k, I + H]:
    #: h and el
    sources: torch.Tensor | None = None
    destinations: torch.Tensor | None = None   #: float [n_k, H]: er
    #: float [n_in, 2H + H V]: (m, s, q) of every leaf partial a root receives, in the order of
    #: the reduce plan (V = D, or I in the input form); m = -inf, s = q = 0 before the first
    #: delivery (a merge ignores them)
    partials: torch.Tensor | None = None
    pending_sources: dict[int, Any] = field(default_factory=dict)
    pending_destinations: dict[int, Any] = field(default_factory=dict)
    pending_partials: dict[int, Any] = field(default_factory=dict)
    pending_grad_sources: dict[int, Any] = field(default_factory=dict)
    pending_grad_destinations: dict[int, Any] = field(default_factory=dict)
    pending_grad_partials: dict[int, Any] = field(default_factory=dict)

    TABLES = ("step", "sources", "destinations", "partials")

    def pending(self) -> dict[str, dict[int, Any]]:
        return {name: value for name, value in vars(self).items() if name.startswith("pending_")}


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


class _StaleCopies(torch.autograd.Function):
    """A cd-r table with the roots' fresh rows h [n_roots, w] in front of the leaves' last
    delivered copies, [n_k, w]; backward as :func:`_copies_gradient`."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, table: torch.Tensor, agg: "RootAggregation",
                pending: dict[int, Any], leaf_plan: RowPlan, root_plan: RowPlan,
                step: int) -> torch.Tensor:
        ctx.agg, ctx.pending, ctx.plans, ctx.step = agg, pending, (leaf_plan, root_plan), step
        out = table.clone()
        out[:h.shape[0]] = h
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return (_copies_gradient(ctx.agg, ctx.pending, ctx.step, grad, *ctx.plans),
                None, None, None, None, None, None)


def _intensive_gradient(rows: torch.Tensor, grad: torch.Tensor, heads: int) -> torch.Tensor:
    """The gradient of attention partials (m, s, q) [n, 2H + H D] as the gradient of their
    m-free form, the local softmax output o = q / s and log-mass l = m + log s: [n, H + H D]
    (dL/dl, then dL/do). A delayed gradient travels in this form (:func:`_extensive_gradient`
    maps it onto the partial it is applied to), so a shift of the row's max m between the two
    steps does not scale it."""
    n, H = rows.shape[0], heads
    s, q = rows[:, H:2 * H], rows[:, 2 * H:].reshape(n, H, -1)
    gs, gq = grad[:, H:2 * H], grad[:, 2 * H:].reshape(n, H, -1)
    g_o = s.unsqueeze(2) * gq
    o = q / s.clamp_min(torch.finfo(s.dtype).tiny).unsqueeze(2)   # rows never delivered: s = 0
    g_l = s * gs + (g_o * o).sum(2)
    return torch.cat([g_l, g_o.reshape(n, -1)], 1)


def _extensive_gradient(rows: torch.Tensor, got: torch.Tensor, heads: int) -> torch.Tensor:
    """The inverse of :func:`_intensive_gradient` on the partials ``rows`` [n, 2H + H D] it is
    applied to: (dL/dm = 0, dL/ds, dL/dq) [n, 2H + H D] from (dL/dl, dL/do) [n, H + H D]."""
    n, H = rows.shape[0], heads
    s, q = rows[:, H:2 * H], rows[:, 2 * H:].reshape(n, H, -1)
    g_l, g_o = got[:, :H], got[:, H:].reshape(n, H, -1)
    gq = g_o / s.unsqueeze(2)
    gs = (g_l - (g_o * q).sum(2) / s) / s
    return torch.cat([torch.zeros_like(g_l), gs, gq.reshape(n, -1)], 1)


class _StalePartials(torch.autograd.Function):
    """(the roots' own partials [n_roots, C], the leaves' last delivered ones [n_in, C]) from this
    step's partials [n_k, C], C = 2H + H D. With delayed gradients, backward posts the delivered
    rows' gradient of this step's bin to the leaves that sent them, in the m-free form of
    :func:`_intensive_gradient`, and adds to the leaves' partials the gradient posted r steps
    ago, mapped onto them (the attention's delayed adjoint of the reduce)."""

    @staticmethod
    def forward(ctx, p: torch.Tensor, delivered: torch.Tensor, agg: "RootAggregation",
                state: AttentionLayerState, step: int, heads: int):
        ctx.agg, ctx.state, ctx.step, ctx.n_local, ctx.heads = agg, state, step, p.shape[0], heads
        if agg.delayed_gradients:
            b = step % agg.delay
            ctx.sent = delivered[agg.reduce_positions[b]].detach().clone()  # the rows it uses
            ctx.mine = p[agg.bins[b].reduce_leaf.ids].detach()             # the rows it sent
        return p[:agg.n_roots].clone(), delivered.clone()

    @staticmethod
    def backward(ctx, grad_own: torch.Tensor, grad_delivered: torch.Tensor | None):
        agg, e, H = ctx.agg, ctx.step, ctx.heads
        grad_p = grad_own.new_zeros((ctx.n_local, grad_own.shape[1]))
        grad_p[:agg.n_roots] = grad_own
        if agg.delayed_gradients:
            b = e % agg.delay
            bins = agg.bins[b]
            grad_sent = (torch.zeros_like(ctx.sent) if grad_delivered is None
                         else grad_delivered[agg.reduce_positions[b]])
            got = _post_and_take(agg, ctx.state.pending_grad_partials, e,
                                 _intensive_gradient(ctx.sent, grad_sent, H), bins.reduce_root,
                                 bins.reduce_leaf, "broadcast")
            if got is not None:
                grad_p[bins.reduce_leaf.ids] += _extensive_gradient(ctx.mine, got, H)
        return grad_p, None, None, None, None, None


class RootAggregation:
    """``aggregate(layer, h)`` for the model under apply-at-root: h [n_roots, w] -> [n_roots, w].

    Training runs the algorithm's exchange on ``comm`` (``delay`` 0: cd-0, exact; r >= 1: cd-r as
    in the module docstring); evaluation (``training = False``) the exact one on ``eval_comm``.
    ``stored_input_layers``: layers whose input is the stored feature matrix (``h`` is then
    ``part.feat[:n_roots]``), aggregated from ``part.feat`` without a broadcast;
    ``constant_layers`` (a subset): those whose input is also constant in training.
    ``delayed_gradients`` (cd-r only): each exchange's gradient also travels back, r steps late
    (see :class:`_DelayedReduceGrad` and :class:`_TableSum`); the trainer turns it on for cd-r.
    ``fresh_copies`` (cd-r only): the broadcast is cd-0's (every step, exact adjoint); only the
    reduce is delayed.
    """

    def __init__(self, part: PartitionData, norm: str, comm: Communicator, eval_comm: Communicator,
                 timers: Timers, threads: int = 0,
                 stored_input_layers: frozenset[int] = frozenset(), delay: int = 0,
                 constant_layers: frozenset[int] = frozenset(), delayed_gradients: bool = False,
                 fresh_copies: bool = False):
        if norm not in ops.NORMS:
            raise ValueError(f"norm must be one of {ops.NORMS}, got {norm}")
        self.part, self.norm, self.comm, self.eval_comm = part, norm, comm, eval_comm
        #: the stored features as the kernel gathers them (a bfloat16 copy under --precision bf16)
        self.feat_rows = part.feat
        self.timers, self.threads, self.delay = timers, threads, delay
        self.delayed_gradients = delayed_gradients and delay > 0 and comm.size > 1
        self.fresh_copies = fresh_copies and delay > 0
        self.stored_input_layers = frozenset(stored_input_layers)
        self.constant_layers = frozenset(constant_layers) & self.stored_input_layers
        self.training = True
        self.n_roots = part.num_roots
        #: float32 [n_k]: every replica's scale of its partials (global in-degree: mean 1/deg,
        #: gcn 1/(deg + 1), sym (deg + 1)^-1/2, sum none); the self term (gcn, sym) is added at the
        #: roots, the first n_roots rows
        self.scale = ops.row_scale(norm, part.in_degree_global, torch.float32)
        self.self_rows = self.n_roots if norm in ops.SELF_TERM_NORMS else 0
        #: sym: float32 [n_k], each gathered row's weight (global out-degree + 1)^-1/2
        self.weight = (ops.source_weight(norm, global_out_degree(part, comm), torch.float32)
                       if norm == "sym" else None)
        #: one rank holding every vertex as a root (P = 1): the exchange's copies are skipped
        self.single = comm.size == 1 and part.num_local == self.n_roots
        self.plans = root_plans(part, comm)
        self.layers: dict[int, RootLayerState] = {}
        #: layer -> its training aggregate, once it can no longer change (constant layers)
        self.settled: dict[int, torch.Tensor] = {}
        self.bins: list[RootPlans] = []
        g = part.local_to_global
        if delay > 0:

            def split(plan: RowPlan, b: int) -> RowPlan:
                return plan.subset((g[plan.ids] % delay) == b)

            self.bins = [RootPlans(*(split(plan, b) for plan in (
                self.plans.reduce_leaf, self.plans.reduce_root, self.plans.bcast_leaf,
                self.plans.bcast_root))) for b in range(delay)]
        #: int64 per bin: where that bin's rows lie in the reduce plan's received rows
        received_bins = g[self.plans.reduce_root.ids] % delay if delay > 0 else None
        self.reduce_positions = [torch.nonzero(received_bins == b).flatten() for b in range(delay)]
        self.attention_layers: dict[int, AttentionLayerState] = {}

    def __call__(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        if h.shape[0] != self.n_roots:
            raise ValueError(f"layer {layer}: expected the roots' {self.n_roots} rows, got {h.shape[0]}")
        if self.training and self.delay > 0:
            return self._delayed(layer, h)
        comm, kind = (self.comm, "forward") if self.training else (self.eval_comm, "eval")
        stored = layer in self.stored_input_layers
        if self.single:  # every vertex is a root: no table to fill, no partial to reduce
            return self._local(self.feat_rows if stored else h)
        if stored:
            src = self.feat_rows
        else:
            src = _Broadcast.apply(h, self.part.num_local, self.plans, comm, self.timers, kind)
        p = self._local(src)
        return _Reduce.apply(p, self.n_roots, self.plans, comm, self.timers, kind)

    def attention(self, layer: int, z: torch.Tensor, el: torch.Tensor, er: torch.Tensor,
                  dropout=None, inputs: tuple[torch.Tensor, torch.Tensor] | None = None
                  ) -> torch.Tensor:
        """GAT's attention at the roots, [n_roots, H, D]: exact (:func:`exact_attention`) under
        cd-0 and in evaluation; cd-r in training as :meth:`_delayed_attention`. ``inputs``: the
        layer's (h [n_roots, I], W [H D, I]) with z = (h W^T).view(n, H, D), which lets cd-r use
        the input form (:class:`AttentionValues`)."""
        if self.training and self.delay > 0 and not self.single:
            return self._delayed_attention(layer, AttentionValues(z, inputs), el, er, dropout)
        comm, kind = (self.comm, "forward") if self.training else (self.eval_comm, "eval")
        return exact_attention(self.part, z, el, er, self.plans,
                               broadcast_to(self.plans.reduce_leaf, self.plans.reduce_root),
                               comm, self.timers, kind, dropout, self.threads)

    def _local(self, src: torch.Tensor) -> torch.Tensor:
        """This part's scaled partials of every local vertex, [n_k, w], from the source table."""
        return _LocalSum.apply(src, self.part, self.timers, self.threads, self.scale, self.self_rows,
                               self.weight)

    def feature_aggregate(self) -> torch.Tensor:
        """The exact aggregate of the stored features at the roots, [n_roots, F] (for the input
        cache): every replica has the features, so only the reduce runs, on ``eval_comm``."""
        p = self._local(self.part.feat)
        if self.single:
            return p
        return _Reduce.apply(p, self.n_roots, self.plans, self.eval_comm, self.timers, "eval")

    def _delayed(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        """cd-r under root at this layer's current training step (module docstring)."""
        if layer in self.settled:
            return self.settled[layer]
        r, n_roots, comm = self.delay, self.n_roots, self.comm
        stored, constant = layer in self.stored_input_layers, layer in self.constant_layers
        state = self.layers.setdefault(layer, RootLayerState())
        delayed_copies = not stored and not self.fresh_copies
        if state.remote is None:
            state.remote = h.new_zeros((n_roots, h.shape[1]), dtype=torch.float32)
            if delayed_copies:
                state.table = h.new_zeros((self.part.num_local, h.shape[1]))  # h's row dtype
        e = state.step
        bins = self.bins[e % r]
        if comm.size > 1 and e >= r:
            with self.timers("exchange_wait"):
                if e - r in state.pending_reduce:
                    rows = state.pending_reduce.pop(e - r).wait()
                    state.remote[bins.reduce_root.ids] = 0.0
                    state.remote.index_add_(0, bins.reduce_root.ids, rows)
                if delayed_copies:
                    rows = state.pending_bcast.pop(e - r).wait()
                    state.table[bins.bcast_leaf.ids] = rows
        if stored:
            p = self._local(self.feat_rows)
        elif self.fresh_copies:
            p = self._local(_Broadcast.apply(h, self.part.num_local, self.plans, comm, self.timers,
                                             "forward"))
        else:
            p = _TableSum.apply(h, self, state, e)
        if comm.size > 1:
            with self.timers("exchange_wait"):
                if delayed_copies:
                    state.pending_bcast[e] = comm.exchange_rows_async(
                        h[bins.bcast_root.ids], bins.bcast_root, bins.bcast_leaf, "forward",
                        "broadcast")
                if not constant or e < r:
                    state.pending_reduce[e] = comm.exchange_rows_async(
                        p[bins.reduce_leaf.ids], bins.reduce_leaf, bins.reduce_root, "forward",
                        "reduce")
        state.step += 1
        if self.delayed_gradients and p.requires_grad:
            out = _DelayedReduceGrad.apply(p, state.remote, self, state, e)
        else:
            out = p[:n_roots] + state.remote
        if constant and state.step >= 2 * r:
            self.settled[layer] = out.detach()
        return out

    def _delayed_attention(self, layer: int, values: AttentionValues, el: torch.Tensor,
                           er: torch.Tensor, dropout) -> torch.Tensor:
        """cd-r attention under root at this layer's training step, [n_roots, H, D]: GraphSAGE's
        bins and delays (module docstring) for three messages of a bin vertex v: its root's
        [values, el] (z, or h in the input form) to the leaves with local out-edges and its er to
        those with local in-edges (the copies their kernels read, zero before the first
        delivery), and those leaves' partials (m, s, q) to the root, which merges its fresh
        partial with the last delivered ones (none before the first delivery) and, in the input
        form, maps the result by the current W. Delayed gradients travel back as for GraphSAGE."""
        from distgnn.attention import local_attention, merge

        r, n_roots, comm, part = self.delay, self.n_roots, self.comm, self.part
        n_local, H, V = part.num_local, values.heads, values.width
        state = self.attention_layers.setdefault(layer, AttentionLayerState())
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
        e = state.step
        b = e % r
        bins = self.bins[b]
        if e >= r:
            with self.timers("exchange_wait"):
                if not self.fresh_copies:
                    state.sources[bins.bcast_leaf.ids] = state.pending_sources.pop(e - r).wait()
                    state.destinations[bins.reduce_leaf.ids] = \
                        state.pending_destinations.pop(e - r).wait()
                state.partials[self.reduce_positions[b]] = state.pending_partials.pop(e - r).wait()
        fresh = torch.cat([values.rows, el], 1)
        if self.fresh_copies:
            src = _Broadcast.apply(fresh, n_local, self.plans, comm, self.timers, "forward")
            dst = _Broadcast.apply(er, n_local, broadcast_to(self.plans.reduce_leaf,
                                                             self.plans.reduce_root),
                                   comm, self.timers, "forward")
        else:
            src = _StaleCopies.apply(fresh, state.sources, self, state.pending_grad_sources,
                                     bins.bcast_leaf, bins.bcast_root, e)
            dst = _StaleCopies.apply(er, state.destinations, self, state.pending_grad_destinations,
                                     bins.reduce_leaf, bins.reduce_root, e)
        w = values.row_width
        m, s, q = local_attention(part.indptr, part.indices, values.per_head(src[:, :w]),
                                  src[:, w:], dst, n_roots, dropout, self.threads,
                                  lambda: self.timers("aggregate"))
        p = torch.cat([m, s, q.reshape(n_local, H * V)], 1)
        with self.timers("exchange_wait"):
            if not self.fresh_copies:
                state.pending_sources[e] = comm.exchange_rows_async(
                    fresh[bins.bcast_root.ids], bins.bcast_root, bins.bcast_leaf, "forward",
                    "broadcast")
                state.pending_destinations[e] = comm.exchange_rows_async(
                    er[bins.reduce_root.ids], bins.reduce_root, bins.reduce_leaf, "forward",
                    "broadcast")
            state.pending_partials[e] = comm.exchange_rows_async(
                p[bins.reduce_leaf.ids], bins.reduce_leaf, bins.reduce_root, "forward", "reduce")
        state.step += 1
        own, got = _StalePartials.apply(p, state.partials, self, state, e, H)
        return values.output(merge(own[:, :H], own[:, H:2 * H], own[:, 2 * H:].view(n_roots, H, V),
                                   self.plans.reduce_root.ids, got[:, :H], got[:, H:2 * H],
                                   got[:, 2 * H:].view(-1, H, V)))

    def finish(self) -> None:
        """Complete every message still in flight (before a checkpoint or MPI finalize)."""
        with self.timers("exchange_wait"):
            complete_pending(m for s in self.layers.values() for m in s.pending())
            complete_pending(pending for s in self.attention_layers.values()
                             for pending in s.pending().values())

    def state_dict(self) -> dict[str, Any]:
        """Step counters, kept rows and received payloads (waits for those in flight)."""
        self.finish()
        out: dict[Any, Any] = {
            layer: {"step": s.step, "table": s.table, "remote": s.remote,
                    "pending_bcast": received(s.pending_bcast),
                    "pending_reduce": received(s.pending_reduce),
                    "pending_grad_reduce": received(s.pending_grad_reduce),
                    "pending_grad_bcast": received(s.pending_grad_bcast)}
            for layer, s in self.layers.items()}
        for layer, s in self.attention_layers.items():
            out[f"attention/{layer}"] = {
                **{name: getattr(s, name) for name in AttentionLayerState.TABLES},
                **{name: received(pending) for name, pending in s.pending().items()}}
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.layers, self.settled, self.attention_layers = {}, {}, {}
        for layer, s in state.items():
            if isinstance(layer, str) and layer.startswith("attention/"):
                self.attention_layers[int(layer.split("/")[1])] = AttentionLayerState(**{
                    name: (delivered(value) if name.startswith("pending_") else value)
                    for name, value in s.items()})
                continue
            self.layers[int(layer)] = RootLayerState(
                step=s["step"], table=s["table"], remote=s["remote"],
                pending_bcast=delivered(s["pending_bcast"]),
                pending_reduce=delivered(s["pending_reduce"]),
                pending_grad_reduce=delivered(s["pending_grad_reduce"]),
                pending_grad_bcast=delivered(s["pending_grad_bcast"]))
