"""The replicas mode (``--apply replicas``, DistGNN's own): every replica of a vertex runs the
dense work, so each rank aggregates for all its local vertices, h [n_k, w] -> [n_k, w].

Each rank first computes the partial aggregate ``p`` of every local vertex over its local
in-edges. Then:

* ``cd-0`` (exact): leaves send p to the root, the root sums, the root sends the total back
  (two Alltoallv). Backward is the adjoint: the same reduce-then-broadcast on gradients.
* ``cd-r`` (r >= 1): split vertex v is in bin ``global_id(v) mod r``; at training step e only
  bin ``e mod r`` moves. Leaves post p(e) to the root (non-blocking, channel ``to_root``); at
  step e + r the root waits for it, computes ``S = p_root(e+r) + sum_leaves p(e)``, keeps
  ``R_root = S - p_root(e+r)`` and posts ``S - p_i(e)`` to leaf i (``to_leaf``), which leaf i
  waits for at step e + 2r and keeps as ``R_i``. Every replica aggregates ``a = p + R`` (R = 0
  before its first delivery); R is a constant in backward. No backward exchange.
* ``cd-r-orig`` (DistGNN's rule): same messages and steps, but at a delivery step the root
  aggregates ``p_root + sum_leaves p`` and the leaf aggregates the root's total S (posted instead
  of ``S - p_i``) in place of its own partial; at other steps a split vertex uses its partial
  alone.
* ``0c``: no exchange.

Constant layers (:mod:`distgnn.exchange.settled`; the trainer marks them for 0c and cd-r only,
see ``Algorithm.keeps_own_input_aggregate``: cd-r-orig's aggregate alternates, and cd-0 uses the
exact input cache): 0c keeps the aggregate at once, cd-r from step 3r on, when every bin's root and
leaf deliveries are done. A constant layer's R never changes after them, so it posts to roots
only at steps < r, replies only at steps < 2r and receives only at steps < 3r: the values are the
rule's, bit for bit, without the steady-state messages.

Degrees: cd-0 and cd-r divide by the global in-degree, 0c by the local one, cd-r-orig by the
local one until the vertex's first delivery and the global one after. Where the degree is final
before the exchange (cd-0, 0c, evaluation) the kernel scales each part's partials and the root
adds the self term (:mod:`distgnn.exchange.norms`); cd-r and cd-r-orig scale after the exchange.
Evaluation always uses the exact cd-0 exchange, on its own communicator, and does not advance the
cd-r step counters.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import torch

from distgnn.kernels.attention import local_attention
from distgnn.comm import Communicator, Direction, Traffic
from distgnn.exchange.attention_exact import merge_at_roots
from distgnn.exchange.collectives import Broadcast, ReduceBroadcast
from distgnn.exchange.local_sum import KernelGraph, LocalKernel
from distgnn.exchange.mailbox import Mailbox
from distgnn.exchange.norms import (check_norm, global_out_degree, kernel_weights,
                                    local_out_degree, scale_aggregate)
from distgnn.exchange.plans import every_replica, root_bins
from distgnn.exchange.protocol import ModeAndMessages
from distgnn.exchange.settled import SettledLayers
from distgnn.partition.part_loader import PartitionData
from distgnn.timers import Timers
from distgnn.vocabulary import Algorithm

CHANNELS = ("to_root", "to_leaf")


@dataclass
class ReplicaLayerState:
    """cd-r state of one layer in the replicas mode."""

    step: int = 0
    remote: torch.Tensor | None = None        #: R, float [n_k, w]
    has_delivery: torch.Tensor | None = None  #: bool [n_k]: has had one (cd-r-orig's degree)
    mailbox: Mailbox = field(default_factory=lambda: Mailbox(CHANNELS))

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "remote": self.remote, "has_delivery": self.has_delivery,
                "mailbox": self.mailbox.state_dict()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "ReplicaLayerState":
        return cls(step=state["step"], remote=state["remote"], has_delivery=state["has_delivery"],
                   mailbox=Mailbox.from_state(state["mailbox"]))


class ReplicaAggregation(ModeAndMessages):
    """The :class:`~distgnn.exchange.protocol.Aggregation` of the replicas mode: local kernel,
    exchange, degree scaling (inside the kernel where the degree is final: cd-0, 0c, evaluation).

    ``norm``: one of :data:`distgnn.kernels.ops.NORMS`. In training the algorithm's exchange runs; in
    evaluation the exact exchange runs on ``eval_comm``.
    """

    def __init__(self, part: PartitionData, algorithm: Algorithm, norm: str, comm: Communicator,
                 eval_comm: Communicator, timers: Timers, threads: int = 0,
                 constant_layers: frozenset[int] = frozenset()):
        check_norm(norm)
        self.part, self.algorithm, self.norm = part, algorithm, norm
        self.comm, self.eval_comm, self.timers = comm, eval_comm, timers
        self.training = True
        self.rows = part.num_local
        self.local_degree = part.local_degree.clamp(min=0).to(torch.float32)
        self.global_degree = part.in_degree_global.to(torch.float32)
        out_degree = global_out_degree(part, comm) if norm == "sym" else None
        edges = KernelGraph.of(part)
        #: exact (cd-0, evaluation): global degree in the kernel, the self term at the roots
        self.exact_kernel = LocalKernel(edges, kernel_weights(norm, self.global_degree, out_degree,
                                                              part.num_roots), threads, timers)
        #: 0c: the local degree and out-degree, every replica adds its own row
        self.local_kernel = LocalKernel(edges, kernel_weights(
            norm, self.local_degree, local_out_degree(part) if norm == "sym" else None,
            part.num_local), threads, timers)
        #: cd-r: a plain sum (sym's source weights only), scaled after the exchange
        self.delayed_kernel = LocalKernel(edges, kernel_weights(norm, None, out_degree, 0),
                                          threads, timers)
        self.layers: dict[int, ReplicaLayerState] = {}
        self.settled = SettledLayers(frozenset(constant_layers))
        self.bins = root_bins(every_replica(part), part.local_to_global, algorithm.delay)

    # -- the Aggregation protocol ------------------------------------------------------------
    def __call__(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        kept = self.settled.get(layer) if self.training else None
        if kept is not None:
            return kept
        algo = self.algorithm
        if not self.training or algo.exact:
            comm, kind = ((self.comm, Traffic.FORWARD) if self.training
                          else (self.eval_comm, Traffic.EVAL))
            out = ReduceBroadcast.apply(self.exact_kernel(h), self.part, comm, self.timers, kind)
            if not self.training:
                return out
        elif not algo.exchange:
            out = self.local_kernel(h)
        else:
            a, degree = self._delayed(layer, self.delayed_kernel(h))
            out = scale_aggregate(a, h, degree, self.norm, self.delayed_kernel.weights.weight)
        self.settled.offer(layer, out, layer in self.settled.layers and self._can_settle(layer))
        return out

    def attention(self, layer: int, z: torch.Tensor, el: torch.Tensor, er: torch.Tensor,
                  dropout=None, inputs=None) -> torch.Tensor:
        """GAT's attention on every replica, [n_k, H, D] from z [n_k, H, D], el, er [n_k, H]:
        0c in training takes the softmax over each part's own edges (every local vertex's self
        loop); cd-0 and evaluation are exact: each part's partials (m, s, q) over its edges (the
        self loop at the root) are merged at the root, whose result goes back to every leaf.
        ``inputs`` (the layer's h and W) is not needed here: nothing is stale.
        cd-r and cd-r-orig have no attention rule on the replicas (refused by the config)."""
        part = self.part
        local_softmax = self.training and not self.algorithm.exchange
        n_self = part.num_local if local_softmax else part.num_roots
        m, s, q = local_attention(part.indptr, part.indices, z, el, er, n_self, dropout,
                                  self.exact_kernel.threads, lambda: self.timers("aggregate"))
        if local_softmax or self.comm.size == 1:
            return q / s.unsqueeze(2)
        comm, kind = ((self.comm, Traffic.FORWARD) if self.training
                      else (self.eval_comm, Traffic.EVAL))
        n_local, H, D = z.shape
        n_roots = part.num_roots
        at_roots = merge_at_roots(m, s, q, n_roots, part.leaf_send, part.root_recv, comm,
                                  self.timers, kind)
        return Broadcast.apply(at_roots.reshape(n_roots, H * D), n_local, every_replica(part), comm,
                               self.timers, kind).view(n_local, H, D)

    def input_aggregate(self) -> torch.Tensor:
        """The exact aggregate of the stored features at every local vertex, [n_k, F]."""
        with torch.no_grad():
            return ReduceBroadcast.apply(self.exact_kernel(self.part.feat), self.part,
                                         self.eval_comm, self.timers, Traffic.EVAL)

    def gather_features_as(self, dtype: torch.dtype) -> None:
        """Nothing to do: the replicas mode gathers the layer input as the model hands it."""

    def mailboxes(self) -> Iterable[Mailbox]:
        return (state.mailbox for state in self.layers.values())

    def state_dict(self) -> dict[str, Any]:
        """Step counters, R, delivery flags and received payloads (waits for those in flight)."""
        self.finish()
        return {"sums": {layer: s.state_dict() for layer, s in self.layers.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.settled.clear()
        self.layers = {int(layer): ReplicaLayerState.from_state(s)
                       for layer, s in state["sums"].items()}

    # -- cd-r and cd-r-orig --------------------------------------------------------------------
    def _can_settle(self, layer: int) -> bool:
        """Whether a constant layer's training aggregate is final (after this step's call): 0c's
        at once, cd-r's from step 3r."""
        return self.algorithm.delay == 0 or self.layers[layer].step >= 3 * self.algorithm.delay

    def _delayed(self, layer: int, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cd-r and cd-r-orig at this layer's current training step; returns (a, degree)."""
        r, original = self.algorithm.delay, self.algorithm.paper_rule
        n, width = p.shape
        state = self.layers.setdefault(layer, ReplicaLayerState())
        if state.remote is None:
            state.remote = torch.zeros((n, width), dtype=p.dtype)
            state.has_delivery = torch.zeros(n, dtype=torch.bool)
        e, box = state.step, state.mailbox
        bins = self.bins[e % r]
        # a constant layer's R is final after every bin's first deliveries: no later messages
        horizon = r if layer in self.settled.layers else None
        own = p.detach()
        remote = state.remote
        keep = None            # cd-r-orig: rows whose own partial is replaced (leaf delivery)
        extra_rows = None      # cd-r-orig: (ids, rows) added this step only
        if self.comm.size > 1:
            with self.timers("exchange_wait"):
                if e >= r and (horizon is None or e < 2 * horizon):  # root: leaves' p(e - r) arrived
                    from_leaves = box.take("to_root", e - r)
                    root_ids = bins.reduce_root.ids
                    remote[root_ids] = 0.0
                    remote.index_add_(0, root_ids, from_leaves)
                    total = own[root_ids] + remote[root_ids]
                    reply = total if original else total - from_leaves
                    box.post("to_leaf", e, self.comm.exchange_rows_async(
                        reply, bins.reduce_root, bins.reduce_leaf, Traffic.FORWARD,
                        Direction.BROADCAST))
                    state.has_delivery[root_ids] = True
                    if original:
                        extra_rows = (root_ids, remote[root_ids].clone())
                if e >= 2 * r and (horizon is None or e < 3 * horizon):  # leaf: root's reply arrived
                    leaf_ids = bins.reduce_leaf.ids
                    remote[leaf_ids] = box.take("to_leaf", e - r)
                    state.has_delivery[leaf_ids] = True
                    if original:
                        keep = leaf_ids
                if horizon is None or e < horizon:
                    box.post("to_root", e, self.comm.exchange_rows_async(
                        own, bins.reduce_leaf, bins.reduce_root, Traffic.FORWARD,
                        Direction.REDUCE, gather=True))
        state.step += 1
        if not original:
            return p + remote, self.global_degree
        a = p
        if keep is not None or extra_rows is not None:
            mask = torch.ones((n, 1), dtype=p.dtype)
            extra = torch.zeros_like(own)
            if extra_rows is not None:
                extra.index_copy_(0, extra_rows[0], extra_rows[1])
            if keep is not None:
                mask[keep] = 0.0
                extra[keep] = remote[keep]
            a = p * mask + extra
        degree = torch.where(state.has_delivery, self.global_degree, self.local_degree)
        return a, degree
