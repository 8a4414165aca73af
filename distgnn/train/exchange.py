"""Distributed aggregation: the local kernel, then the algorithm's exchange of split vertices.

A split vertex has one *root* replica and one or more *leaf* replicas on other ranks. Each rank
first computes the partial aggregate ``p`` of every local vertex over its local in-edges. Then:

* ``cd-0`` (exact): leaves send p to the root, the root sums, the root sends the total back
  (two Alltoallv). Backward is the adjoint: the same reduce-then-broadcast on gradients.
* ``cd-r`` (r >= 1): split vertex v is in bin ``global_id(v) mod r``; at training step e only
  bin ``e mod r`` moves. Leaves post p(e) to the root (non-blocking, message A); at step e + r the
  root waits for it, computes ``S = p_root(e+r) + sum_leaves p(e)``, keeps
  ``R_root = S - p_root(e+r)`` and posts ``S - p_i(e)`` to leaf i (message B), which leaf i waits
  for at step e + 2r and keeps as ``R_i``. Every replica aggregates ``a = p + R`` (R = 0 before its
  first delivery); R is a constant in backward. No backward exchange.
* ``cd-r-orig`` (DistGNN's rule): same messages and steps, but at a delivery step the root
  aggregates ``p_root + sum_leaves p`` and the leaf aggregates the root's total S (posted instead of
  ``S - p_i``) in place of its own partial; at other steps a split vertex uses its partial alone.
* ``0c``: no exchange.

Constant layers (layer 0 when its input is the constant feature matrix and it aggregates before
its linear map; the trainer marks them for 0c and cd-r only, see
``Algorithm.keeps_own_input_aggregate``: cd-r-orig's aggregate alternates, and cd-0 uses the exact
input cache): once the algorithm's own aggregate can no longer change (0c at once, cd-r from step
3r on, when every bin's root and leaf deliveries are done) it is kept and returned without the
kernel or messages. For cd-r the R of a
constant layer is set once and never changes after, so a constant layer posts to roots only at
steps < r, replies only at steps < 2r and receives only at steps < 3r: the values are the rule's,
bit for bit, without the steady-state messages.

Degrees: cd-0 and cd-r divide by the global in-degree, 0c by the local one, cd-r-orig by the local
one until the vertex's first delivery and the global one after. ``gcn`` adds the vertex's own row
once: ``(a + h_v) / (deg + 1)``; ``sym`` (GCN) weights each gathered row by its source's
(out-degree + 1)^-1/2 inside the kernel (global out-degree, 0c: local), adds the own row so
weighted and scales by (deg + 1)^-1/2; ``sum`` (GIN) does not scale. Where the degree is final before the exchange (cd-0, 0c,
evaluation) the kernel scales each part's partials and the root adds h_v (docs/design.md,
section 5), so the exchange sums final rows; cd-r and cd-r-orig scale after it. Evaluation always uses the exact cd-0 exchange, on
its own communicator, and does not advance the cd-r step counters.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from distgnn import ops
from distgnn.comm import Communicator, RowPlan
from distgnn.train.algorithms import Algorithm
from distgnn.train.partition_data import PartitionData
from distgnn.train.timers import Timers


class _Delivered:
    """A payload already received (restored from a checkpoint): waits immediately."""

    def __init__(self, rows: torch.Tensor):
        self.rows = rows

    def wait(self) -> torch.Tensor:
        return self.rows


def complete_pending(pending_maps) -> None:
    """Wait for every message of ``{step: message}`` maps, replacing each by its payload."""
    for pending in pending_maps:
        for step, message in list(pending.items()):
            pending[step] = _Delivered(message.wait())


def received(pending: dict[int, Any]) -> dict[int, torch.Tensor]:
    """The payloads of a completed ``{step: message}`` map (for a checkpoint)."""
    return {step: message.wait() for step, message in pending.items()}


def delivered(payloads: dict[int, torch.Tensor]) -> dict[int, _Delivered]:
    """The ``{step: message}`` map of payloads restored from a checkpoint."""
    return {step: _Delivered(rows) for step, rows in payloads.items()}


def scale_aggregate(a: torch.Tensor, h: torch.Tensor, degree: torch.Tensor, norm: str,
                    weight: torch.Tensor | None = None) -> torch.Tensor:
    """The degree scaling of a summed aggregate ``a`` [n, w]: ``mean`` a / max(deg, 1), ``gcn``
    (a + h) / (deg + 1) with h [n, w] the rows' own layer input, ``sym`` (a + weight h) /
    (deg + 1)^1/2 (``a`` summed with the sources' weights, ``weight`` float32 [n] the rows' own),
    ``sum`` a; degree float32 [n]."""
    if norm == "gcn":
        return (a + h) / (degree + 1.0).unsqueeze(1)
    if norm == "sym":
        return (a + weight.unsqueeze(1) * h) * (degree + 1.0).rsqrt().unsqueeze(1)
    if norm == "sum":
        return a
    return a / degree.clamp(min=1.0).unsqueeze(1)


def global_out_degree(part: PartitionData, comm: Communicator) -> torch.Tensor:
    """Each local vertex's out-degree in the whole graph, int64 [n_k]: every edge lies on one part,
    so it is the sum of the replicas' local out-degrees (one reduce and broadcast, at load time)."""
    local = (part.t_indptr[1:] - part.t_indptr[:-1]).to(torch.float64).unsqueeze(1)
    total = _reduce_broadcast(local, part, comm, "setup", Timers())
    return total.squeeze(1).round().long()


class _LocalSum(torch.autograd.Function):
    """p[v] = scale[v] * (sum of weight[u] h[u] over local in-edges u -> v
    + (v < self_rows ? weight[v] h[v] : 0)) (scale, weight None: 1); backward runs the kernel on
    the transpose with the two swapped."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, part: PartitionData, timers: Timers, threads: int,
                scale: torch.Tensor | None = None, self_rows: int = 0,
                weight: torch.Tensor | None = None) -> torch.Tensor:
        ctx.part, ctx.timers, ctx.threads, ctx.dtype = part, timers, threads, h.dtype
        ctx.scale, ctx.self_rows, ctx.weight = scale, self_rows, weight
        with timers("aggregate"):
            return ops.weighted_sum(part.indptr, part.indices, h.detach(), scale=scale,
                                    weight=weight, self_rows=self_rows, threads=threads)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        with ctx.timers("aggregate"):
            grad_h = transposed_sum(ctx.part, grad, ctx.dtype, ctx.threads, ctx.scale, ctx.self_rows,
                                    ctx.weight)
        return grad_h, None, None, None, None, None, None


def transposed_sum(part: PartitionData, grad: torch.Tensor, dtype: torch.dtype, threads: int,
                   scale: torch.Tensor | None = None, self_rows: int = 0,
                   weight: torch.Tensor | None = None) -> torch.Tensor:
    """The local sum's backward, the adjoint of diag(scale) (A + S) diag(weight): the kernel over
    the transpose with the forward's ``scale`` as the weight of each gradient row and its
    ``weight`` as the scale, the first ``self_rows`` rows' own term; the gradient rows gathered
    in the forward rows' dtype (bfloat16 rows: bfloat16 gradient rows, float32 sums), returned
    in it."""
    return ops.weighted_sum(part.t_indptr, part.t_indices, grad.to(dtype).contiguous(),
                            scale=weight, weight=scale, self_rows=self_rows,
                            threads=threads).to(dtype)


def _reduce_broadcast(x: torch.Tensor, part: PartitionData, comm: Communicator, kind: str,
                      timers: Timers) -> torch.Tensor:
    """Every replica of a split vertex gets the sum of all replicas' rows (leaves -> root -> leaves)."""
    if comm.size == 1:
        return x
    with timers("exchange_wait"):
        direction = (lambda d: None) if kind in ("eval", "setup") else (lambda d: d)
        received = comm.exchange_rows(x[part.leaf_send.ids], part.leaf_send, part.root_recv, kind,
                                      direction("reduce"))
        total = x.clone()
        total.index_add_(0, part.root_recv.ids, received)
        back = comm.exchange_rows(total[part.root_recv.ids], part.root_recv, part.leaf_send, kind,
                                  direction("broadcast"))
        total[part.leaf_send.ids] = back
    return total


class _ExactExchange(torch.autograd.Function):
    """cd-0's exchange; its adjoint is the same reduce-then-broadcast on the gradient."""

    @staticmethod
    def forward(ctx, p: torch.Tensor, part: PartitionData, comm: Communicator, timers: Timers,
                kind: str) -> torch.Tensor:
        ctx.part, ctx.comm, ctx.timers = part, comm, timers
        return _reduce_broadcast(p.detach(), part, comm, kind, timers)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return (_reduce_broadcast(grad.contiguous(), ctx.part, ctx.comm, "backward", ctx.timers),
                None, None, None, None)


@dataclass
class DelayedLayerState:
    """cd-r state of one layer: its step counter, remote parts R, and messages in flight."""

    step: int = 0
    remote: torch.Tensor | None = None        #: R, float [n_k, F]
    delivered: torch.Tensor | None = None     #: bool [n_k]: has had a delivery (cd-r-orig degree)
    pending_to_root: dict[int, Any] = field(default_factory=dict)   #: step -> message A
    pending_to_leaf: dict[int, Any] = field(default_factory=dict)   #: step -> message B


class DistributedAggregation:
    """``aggregate(layer, h)`` for the model under ``--apply replicas``: local kernel, exchange,
    degree scaling (inside the kernel where the degree is final: cd-0, 0c, evaluation).

    ``norm``: one of :data:`distgnn.models.NORMS`. In training mode the algorithm's exchange runs; in evaluation
    mode (:meth:`evaluation`) the exact exchange runs on ``eval_comm``.
    """

    def __init__(self, part: PartitionData, algorithm: Algorithm, norm: str, comm: Communicator,
                 eval_comm: Communicator, timers: Timers, threads: int = 0,
                 constant_layers: frozenset[int] = frozenset()):
        if norm not in ops.NORMS:
            raise ValueError(f"norm must be one of {ops.NORMS}, got {norm}")
        self.part, self.algorithm, self.norm = part, algorithm, norm
        self.comm, self.eval_comm, self.timers, self.threads = comm, eval_comm, timers, threads
        self.training = True
        self.local_degree = part.local_degree.clamp(min=0).to(torch.float32)
        self.global_degree = part.in_degree_global.to(torch.float32)
        self.local_scale = ops.row_scale(norm, self.local_degree, torch.float32)
        self.global_scale = ops.row_scale(norm, self.global_degree, torch.float32)
        self_term = norm in ops.SELF_TERM_NORMS
        self.root_self_rows = part.num_roots if self_term else 0
        self.local_self_rows = part.num_local if self_term else 0
        #: sym: each gathered row's source weight, from the global (0c: local) out-degree
        self.global_weight = self.local_weight = None
        if norm == "sym":
            self.local_weight = ops.source_weight(norm, part.t_indptr[1:] - part.t_indptr[:-1],
                                                  torch.float32)
            self.global_weight = ops.source_weight(norm, global_out_degree(part, comm), torch.float32)
        self.layers: dict[int, DelayedLayerState] = {}
        #: layers whose input is constant in training (see the module docstring)
        self.constant_layers = frozenset(constant_layers)
        #: layer -> its training aggregate, once it can no longer change
        self.settled: dict[int, torch.Tensor] = {}
        r = max(algorithm.delay, 1)
        self.bins_leaf: list[RowPlan] = []
        self.bins_root: list[RowPlan] = []
        if algorithm.delay > 0:
            g = part.local_to_global
            for b in range(r):
                self.bins_leaf.append(part.leaf_send.subset((g[part.leaf_send.ids] % r) == b))
                self.bins_root.append(part.root_recv.subset((g[part.root_recv.ids] % r) == b))

    # -- public ------------------------------------------------------------------------------
    def __call__(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        if self.training and layer in self.settled:
            return self.settled[layer]
        algo = self.algorithm
        # Exact and local aggregates have a final degree: the kernel scales the partials (and
        # adds the gcn self term once, at the root, the first n_roots rows, for the exact sum)
        if not self.training or algo.delay == 0 and algo.exchange:
            comm, kind = (self.comm, "forward") if self.training else (self.eval_comm, "eval")
            p = _LocalSum.apply(h, self.part, self.timers, self.threads, self.global_scale,
                                self.root_self_rows, self.global_weight)
            out = _ExactExchange.apply(p, self.part, comm, self.timers, kind)
            if not self.training:
                return out
        elif not algo.exchange:
            out = _LocalSum.apply(h, self.part, self.timers, self.threads, self.local_scale,
                                  self.local_self_rows, self.local_weight)
        else:
            p = _LocalSum.apply(h, self.part, self.timers, self.threads, None, 0, self.global_weight)
            a, degree = self._delayed(layer, p)
            out = self._scale(a, h, degree)
        if layer in self.constant_layers and self._can_settle(layer):
            self.settled[layer] = out.detach()
        return out

    def attention(self, layer: int, z: torch.Tensor, el: torch.Tensor, er: torch.Tensor,
                  dropout=None, inputs=None) -> torch.Tensor:
        """GAT's attention on every replica, [n_k, H, D] from z [n_k, H, D], el, er [n_k, H]:
        0c in training takes the softmax over each part's own edges (every local vertex's self
        loop); cd-0 and evaluation are exact: each part's partials (m, s, q) over its edges (the
        self loop at the root) are merged at the root, whose result goes back to every leaf.
        ``inputs`` (the layer's h and W) is not needed here: nothing is stale.
        cd-r and cd-r-orig have no attention rule on the replicas (refused by the config)."""
        from distgnn.attention import local_attention
        from distgnn.train.root_exchange import RootPlans, _Broadcast, merge_at_roots

        part = self.part
        local_softmax = self.training and not self.algorithm.exchange
        n_self = part.num_local if local_softmax else part.num_roots
        m, s, q = local_attention(part.indptr, part.indices, z, el, er, n_self, dropout,
                                  self.threads, lambda: self.timers("aggregate"))
        if local_softmax or self.comm.size == 1:
            return q / s.unsqueeze(2)
        comm, kind = (self.comm, "forward") if self.training else (self.eval_comm, "eval")
        n_local, H, D = z.shape
        n_roots = part.num_roots
        at_roots = merge_at_roots(m, s, q, n_roots, part.leaf_send, part.root_recv, comm,
                                  self.timers, kind)
        every = RootPlans(part.leaf_send, part.root_recv, part.leaf_send, part.root_recv)
        return _Broadcast.apply(at_roots.reshape(n_roots, H * D), n_local, every, comm, self.timers,
                                kind).view(n_local, H, D)

    def finish(self) -> None:
        """Complete every message still in flight (before a checkpoint or MPI finalize)."""
        with self.timers("exchange_wait"):
            complete_pending(m for s in self.layers.values()
                             for m in (s.pending_to_root, s.pending_to_leaf))

    def state_dict(self) -> dict[str, Any]:
        """Step counters, R, delivery flags and received payloads (call :meth:`finish` first)."""
        self.finish()
        return {layer: {"step": s.step, "remote": s.remote, "delivered": s.delivered,
                        "pending_to_root": received(s.pending_to_root),
                        "pending_to_leaf": received(s.pending_to_leaf)}
                for layer, s in self.layers.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.layers, self.settled = {}, {}
        for layer, s in state.items():
            self.layers[int(layer)] = DelayedLayerState(
                step=s["step"], remote=s["remote"], delivered=s["delivered"],
                pending_to_root=delivered(s["pending_to_root"]),
                pending_to_leaf=delivered(s["pending_to_leaf"]))

    # -- internals ---------------------------------------------------------------------------
    def _can_settle(self, layer: int) -> bool:
        """Whether a constant layer's training aggregate is final (after this step's call): 0c's
        at once, cd-r's from step 3r (the trainer marks layers constant only for these two; see
        :meth:`Algorithm.keeps_own_input_aggregate`)."""
        return self.algorithm.delay == 0 or self.layers[layer].step >= 3 * self.algorithm.delay

    def _scale(self, a: torch.Tensor, h: torch.Tensor, degree: torch.Tensor) -> torch.Tensor:
        return scale_aggregate(a, h, degree, self.norm, self.global_weight)

    def _delayed(self, layer: int, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cd-r and cd-r-orig at this layer's current training step; returns (a, degree)."""
        r, original = self.algorithm.delay, self.algorithm.original
        n, width = p.shape
        state = self.layers.setdefault(layer, DelayedLayerState())
        if state.remote is None:
            state.remote = torch.zeros((n, width), dtype=p.dtype)
            state.delivered = torch.zeros(n, dtype=torch.bool)
        e, b = state.step, state.step % r
        # a constant layer's R is final after every bin's first deliveries: no later messages
        horizon = r if layer in self.constant_layers else None
        leaf_plan, root_plan = self.bins_leaf[b], self.bins_root[b]
        fresh = p.detach()
        remote = state.remote
        keep = None            # cd-r-orig: rows whose own partial is replaced (leaf delivery)
        extra_rows = None      # cd-r-orig: (ids, rows) added this step only
        if self.comm.size > 1:
            with self.timers("exchange_wait"):
                if e >= r and (horizon is None or e < 2 * horizon):  # root: leaves' p(e - r) arrived
                    from_leaves = state.pending_to_root.pop(e - r).wait()
                    root_ids = root_plan.ids
                    remote[root_ids] = 0.0
                    remote.index_add_(0, root_ids, from_leaves)
                    total = fresh[root_ids] + remote[root_ids]
                    reply = total if original else total - from_leaves
                    state.pending_to_leaf[e] = self.comm.exchange_rows_async(
                        reply, root_plan, leaf_plan, "forward", "broadcast")
                    state.delivered[root_ids] = True
                    if original:
                        extra_rows = (root_ids, remote[root_ids].clone())
                if e >= 2 * r and (horizon is None or e < 3 * horizon):  # leaf: root's reply arrived
                    from_root = state.pending_to_leaf.pop(e - r).wait()
                    leaf_ids = leaf_plan.ids
                    remote[leaf_ids] = from_root
                    state.delivered[leaf_ids] = True
                    if original:
                        keep = leaf_ids
                if horizon is None or e < horizon:
                    state.pending_to_root[e] = self.comm.exchange_rows_async(
                        fresh[leaf_plan.ids], leaf_plan, root_plan, "forward", "reduce")
        state.step += 1
        if not original:
            return p + remote, self.global_degree
        a = p
        if keep is not None or extra_rows is not None:
            mask = torch.ones((n, 1), dtype=p.dtype)
            extra = torch.zeros_like(fresh)
            if extra_rows is not None:
                extra.index_copy_(0, extra_rows[0], extra_rows[1])
            if keep is not None:
                mask[keep] = 0.0
                extra[keep] = remote[keep]
            a = p * mask + extra
        degree = torch.where(state.delivered, self.global_degree, self.local_degree)
        return a, degree
