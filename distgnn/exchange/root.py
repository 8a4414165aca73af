"""Apply at the root (``--apply root``): each vertex's dense work runs once, on the rank holding its
root, as PowerGraph applies a vertex program at the master (docs/design.md#apply-at-root).

A part's roots are its first ``n_roots`` local ids (layout version 2), so the rows a rank applies
the layer to are a prefix of its local rows. One layer's aggregation:

1. **broadcast** -- the roots' layer input h [n_roots, w] is sent to the leaf replicas that use it
   as a source (leaves with local out-edges), giving the source table [n_src, w]. A layer whose
   input is the stored features (layer 0 when it aggregates first) reads them instead: every
   replica has them, nothing is sent.
2. **local sum** -- the native kernel over the part's own edges, p [n_dst, w], each part's partials
   already scaled by the global in-degree (the root alone adds the self term).
3. **reduce** -- leaves with local in-edges send their partial to the root; the root adds them to
   its own: a [n_roots, w], the final aggregate.

The tables hold only the rows that carry something (:mod:`distgnn.exchange.compact`): the source
table the roots and the leaves with local out-edges, the partials the roots and the leaves with
local in-edges.

cd-0 runs them with its exact adjoints (:mod:`distgnn.exchange.collectives`), so it equals
one-process training; a summed layer's two exchanges are each overlapped by the work that needs
nothing remote (:mod:`distgnn.exchange.overlap`). cd-r moves each split vertex once every r steps, non-blocking, and
reads what arrived r steps later (:mod:`distgnn.exchange.delayed_sum`;
:mod:`distgnn.exchange.attention_delayed` for GAT). With ``fresh_copies`` (``--fresh-copies``)
the broadcast is cd-0's and only the reduce is delayed. A constant layer (the stored features
with the input cache on) posts its partials only at steps < r and, from step 2r on, when every
bin's R has arrived, returns its kept aggregate (:mod:`distgnn.exchange.settled`). The run's
cd-r rule (:mod:`distgnn.exchange.rules`) is an object whose hooks :meth:`RootAggregation._delayed`
calls at fixed points of each step; under ``recompute`` the leaves compute layer 1's source rows
themselves (:mod:`distgnn.exchange.recompute`).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable

import torch

from distgnn.comm import Communicator, Direction, Traffic
from distgnn.exchange.attention_delayed import AttentionValues, DelayedAttention
from distgnn.exchange.attention_exact import exact_attention
from distgnn.exchange.collectives import Broadcast, Reduce
from distgnn.exchange.compact import compact_rows
from distgnn.exchange.delayed_sum import DelayedReduceGrad, DelayedSumState, TableSum
from distgnn.exchange.local_sum import LocalKernel
from distgnn.exchange.mailbox import Mailbox
from distgnn.exchange.norms import check_norm, global_out_degree, kernel_weights
from distgnn.exchange.overlap import OverlapBlocks, OverlappedSum, overlap_enabled
from distgnn.exchange.plans import broadcast_to, root_plans
from distgnn.exchange.protocol import ModeAndMessages
from distgnn.exchange.recompute import (RECOMPUTED_LAYER, choose_recomputed, copy_plans,
                                        extend_input_aggregate, recomputed_rows)
from distgnn.exchange.rules import FIRST_RULE, CdrRule, rule_class
from distgnn.exchange.schedule import DelayedSchedule
from distgnn.exchange.settled import SettledLayers
from distgnn.exchange.spec import ExchangeSpec
from distgnn.partition.part_loader import PartitionData
from distgnn.timers import Timers


class RootAggregation(ModeAndMessages):
    """The :class:`~distgnn.exchange.protocol.Aggregation` of apply-at-root: h [n_roots, w] ->
    [n_roots, w].

    Training runs the exchange of ``exchange`` on ``comm`` (delay 0: cd-0, exact; r >= 1: cd-r
    under the spec's rule, delayed gradients and fresh copies); evaluation the exact one on
    ``eval_comm``. ``exchange`` None: cd-0. ``stored_input_layers``: layers whose input is the
    stored feature matrix (``h`` is then ``part.feat[:n_roots]``), aggregated from ``part.feat``
    without a broadcast; ``constant_layers`` (a subset): those whose input is also constant in
    training. ``recompute`` (cd-r only, the spec's recompute budget, models of two layers or
    more with the input cache): in training, layer 0's dense work runs on :meth:`training_rows`
    and layer 1 receives those rows, so a leaf reads its own current rows at layer 1
    (:mod:`distgnn.exchange.recompute`).
    """

    def __init__(self, part: PartitionData, norm: str, comm: Communicator, eval_comm: Communicator,
                 timers: Timers, threads: int = 0,
                 stored_input_layers: frozenset[int] = frozenset(),
                 exchange: ExchangeSpec | None = None,
                 constant_layers: frozenset[int] = frozenset(), recompute: bool = False):
        delay = 0 if exchange is None else exchange.delay
        delayed_gradients = exchange is not None and exchange.delayed_gradients
        fresh_copies = exchange is not None and exchange.fresh_copies
        check_norm(norm)
        self.part, self.comm, self.eval_comm, self.timers = part, comm, eval_comm, timers
        self.training = True
        self.n_roots = self.rows = part.num_roots
        #: the stored features as the kernel gathers them (bfloat16 after gather_features_as)
        self.feat_rows = part.feat
        self.delay = delay
        self.fresh_copies = fresh_copies and delay > 0
        #: the cd-r rule's hooks (docs/design.md#rule-hooks); the first rule where none applies
        self.rule: CdrRule = (exchange.rule if exchange is not None and delay > 0
                              else rule_class(FIRST_RULE))()
        self.stored_input_layers = frozenset(stored_input_layers)
        self.settled = SettledLayers(frozenset(constant_layers) & self.stored_input_layers)
        #: one rank holding every vertex as a root (P = 1): the exchange's copies are skipped
        self.single = comm.size == 1 and part.num_local == self.n_roots
        #: the plans over local ids (attention's), and the summed layers' over compact tables
        self.plans = root_plans(part, comm)
        self.compact = compact_rows(part, self.n_roots)
        self.sum_plans = self.compact.plans(self.plans)
        # every replica scales its partials by the global in-degree; the roots add the self term
        out_degree = global_out_degree(part, comm) if norm == "sym" else None
        weights = kernel_weights(norm, part.in_degree_global, out_degree, self.n_roots)
        self.kernel = LocalKernel(self.compact.graph, self.compact.weights(weights), threads,
                                  timers)
        #: cd-0's summed layers with their exchanges overlapped (docs/design.md#overlap; None:
        #: blocking, as with DISTGNN_OVERLAP=off or one rank)
        self.overlap = (OverlapBlocks.split(self.compact.graph, self.kernel.weights, self.n_roots)
                        if delay == 0 and comm.size > 1 and not self.single and overlap_enabled()
                        else None)
        #: the stored features' aggregation: the destinations over all local rows
        self.feature_kernel = LocalKernel(self.compact.feature_graph,
                                          self.compact.feature_weights(weights), threads, timers)
        self.layers: dict[int, DelayedSumState] = {}
        self.schedule = self.sum_schedule = self.attention_rule = None
        if delay > 0:
            self.schedule = DelayedSchedule.build(
                self.plans, part.local_to_global, delay, comm, timers, self.n_roots,
                delayed_gradients and comm.size > 1)
            self.sum_schedule = self._in_tables(self.schedule)
            self.attention_rule = DelayedAttention(part, self.plans, self.schedule, threads,
                                                   self.fresh_copies)
        self.rule.setup(self)
        #: ``--cdr-rule recompute``: the rows layer 0 runs on in training (None: the roots; local
        #: ids, and their source table rows), and layer 1's schedule, whose broadcast goes to
        #: the leaves that do not recompute
        self._recomputed = self._recomputed_in_table = self._recompute_schedule = None
        if recompute and delay > 0 and comm.size > 1:
            chosen = choose_recomputed(part, self.plans, self.n_roots, exchange.recompute_budget)
            self._recomputed = recomputed_rows(self.plans, self.n_roots, chosen)
            self._recomputed_in_table = self.compact.src_position[self._recomputed]
            self._recompute_schedule = self._in_tables(DelayedSchedule.build(
                copy_plans(self.plans, chosen, comm), part.local_to_global, delay, comm, timers,
                self.n_roots, delayed_gradients and comm.size > 1))

    def _in_tables(self, schedule: DelayedSchedule) -> DelayedSchedule:
        """``schedule`` with its leaf rows as compact table rows (the summed layers'), timed as
        the rule says (a prompt rule: each message taken at the next step, its stride)."""
        schedule = schedule.leaves_at(self.compact.dst_position, self.compact.src_position)
        if self.rule.prompt:
            rule, delay = self.rule, schedule.delay
            schedule = schedule.prompt(lambda step: rule.stride(step, delay))
        if self.rule.hold_gradients:
            schedule = replace(schedule, hold_gradients=True)
        return schedule

    # -- the Aggregation protocol ------------------------------------------------------------
    def __call__(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        expected = self.n_roots
        if self.training and self._recomputed is not None and layer == RECOMPUTED_LAYER:
            expected = len(self._recomputed)
        if h.shape[0] != expected:
            raise ValueError(f"layer {layer}: expected {expected} rows (the roots'"
                             f"{'' if expected == self.n_roots else ' and recomputed leaves'}), "
                             f"got {h.shape[0]}")
        if self.training and self.delay > 0:
            return self._delayed(layer, h)
        comm, kind = ((self.comm, Traffic.FORWARD) if self.training
                      else (self.eval_comm, Traffic.EVAL))
        if layer in self.stored_input_layers:
            p = self.feature_kernel(self.feat_rows)
        elif self.single:  # every vertex is a root: no table to fill, no partial to reduce
            p = self.kernel(h)
        elif self.overlap is not None and h.dtype == torch.float32:
            return OverlappedSum.apply(h, self.overlap, self.sum_plans, comm, self.timers, kind,
                                       self.kernel.threads)
        else:
            p = self.kernel(Broadcast.apply(h, self.kernel.graph.n_src, self.sum_plans, comm,
                                            self.timers, kind))
        return p if self.single else Reduce.apply(p, self.n_roots, self.sum_plans, comm,
                                                  self.timers, kind)

    def attention(self, layer: int, z: torch.Tensor, el: torch.Tensor, er: torch.Tensor,
                  dropout=None, inputs: tuple[torch.Tensor, torch.Tensor] | None = None
                  ) -> torch.Tensor:
        """GAT's attention at the roots, [n_roots, H, D]: exact (:func:`exact_attention`) under
        cd-0 and in evaluation; cd-r in training as :class:`DelayedAttention`. ``inputs``: the
        layer's (h [n_roots, I], W [H D, I]) with z = (h W^T).view(n, H, D), which lets cd-r use
        the input form (:class:`AttentionValues`)."""
        if self.training and self.delay > 0 and not self.single:
            return self.attention_rule(layer, AttentionValues(z, inputs), el, er, dropout)
        comm, kind = ((self.comm, Traffic.FORWARD) if self.training
                      else (self.eval_comm, Traffic.EVAL))
        return exact_attention(self.part, z, el, er, self.plans,
                               broadcast_to(self.plans.reduce_leaf, self.plans.reduce_root),
                               comm, self.timers, kind, dropout, self.kernel.threads)

    def input_aggregate(self) -> torch.Tensor:
        """The exact aggregate of the stored features at the roots, [n_roots, F] (for the input
        cache): every replica has the features, so only the reduce runs, on ``eval_comm``."""
        with torch.no_grad():
            p = self.feature_kernel(self.part.feat)
            if self.single:
                return p
            return Reduce.apply(p, self.n_roots, self.sum_plans, self.eval_comm, self.timers,
                                Traffic.EVAL)

    def training_rows(self) -> torch.Tensor | None:
        """Under ``--cdr-rule recompute``: the local ids [n] layer 0's dense work runs on in
        training, the roots first (:func:`recomputed_rows`); otherwise None (the roots)."""
        return self._recomputed

    def training_input_aggregate(self, roots_aggregate: torch.Tensor) -> torch.Tensor:
        """The input cache [n, F] of :meth:`training_rows` from the roots' [n_roots, F]
        (collective, once at set-up)."""
        if self._recomputed is None:
            return roots_aggregate
        return extend_input_aggregate(roots_aggregate, self._recomputed, self.part.num_local,
                                      self.plans, self.eval_comm, self.timers)

    def gather_features_as(self, dtype: torch.dtype) -> None:
        """Gather the stored features in ``dtype`` (bfloat16 under ``--precision bf16``)."""
        if self.stored_input_layers:
            self.feat_rows = self.part.feat.to(dtype)

    def mailboxes(self) -> Iterable[Mailbox]:
        yield from (state.mailbox for state in self.layers.values())
        if self.attention_rule is not None:
            yield from (state.mailbox for state in self.attention_rule.layers.values())

    def state_dict(self) -> dict[str, Any]:
        """Step counters, kept rows and received payloads (waits for those in flight)."""
        self.finish()
        return {"sums": {layer: s.state_dict() for layer, s in self.layers.items()},
                "attention": ({} if self.attention_rule is None
                              else self.attention_rule.state_dict()),
                "table_rows": "sources"}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.settled.clear()
        self.layers = {int(layer): DelayedSumState.from_state(s)
                       for layer, s in state["sums"].items()}
        if state.get("table_rows") != "sources":  # saved before compact tables: over local ids
            for s in self.layers.values():
                s.table = None if s.table is None else self.compact.source_rows(s.table)
                for key in set(self.rule.table_rows) & set(s.extra):
                    s.extra[key] = self.compact.source_rows(s.extra[key])
        if self.attention_rule is not None:
            self.attention_rule.load_state_dict(state["attention"])

    # -- cd-r ----------------------------------------------------------------------------------
    def _delayed(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        """cd-r at the root at this layer's current training step (module docstring)."""
        kept = self.settled.get(layer)
        if kept is not None:
            return kept
        schedule, comm = self.sum_schedule, self.comm
        r, n_roots = schedule.delay, self.n_roots
        stored, constant = layer in self.stored_input_layers, layer in self.settled.layers
        recomputed = self._recomputed is not None and layer == RECOMPUTED_LAYER
        if recomputed:  # its broadcast goes only to the leaves that do not recompute
            schedule = self._recompute_schedule
        state = self.layers.setdefault(layer, DelayedSumState())
        has_table = not stored and not self.fresh_copies
        delayed_copies = has_table and schedule.moves_copies
        if state.remote is None:
            state.remote = h.new_zeros((n_roots, h.shape[1]), dtype=torch.float32)
            self.timers.rows("zeroed", n_roots)
            if has_table:
                n_src = self.kernel.graph.n_src
                state.table = h.new_zeros((n_src, h.shape[1]))  # h's row dtype
                self.timers.rows("zeroed", n_src)
            self.rule.start(self, state, delayed_copies)
        e, box = state.step, state.mailbox
        early = self.rule.early(self, layer, h, state, stored)
        if early is not None:
            return early
        bins, lag = schedule.bin(e), schedule.steps_late
        if comm.size > 1 and e >= lag:
            arrived = schedule.bin(e - lag)   # the rows posted lag steps ago
            with self.timers("exchange_wait"):
                if box.holds("partials", e - lag):
                    rows = box.take("partials", e - lag)
                    state.remote[arrived.reduce_root.ids] = 0.0
                    state.remote.index_add_(0, arrived.reduce_root.ids, rows)
                    self.timers.rows("zeroed", rows.shape[0])
                    self.timers.rows("copied", rows.shape[0])
                copies_taken = delayed_copies and box.holds("copies", e - lag)
                if copies_taken:
                    state.table[arrived.bcast_leaf.ids] = box.take("copies", e - lag)
                    self.timers.rows("copied", len(arrived.bcast_leaf.ids))
                self.rule.delivered(self, schedule, state, e, copies_taken)
        if stored:
            p = self.feature_kernel(self.feat_rows)
        elif self.fresh_copies:
            p = self.kernel(Broadcast.apply(h, self.kernel.graph.n_src, self.sum_plans, comm,
                                            self.timers, Traffic.FORWARD))
        else:
            p = TableSum.apply(h, self.kernel, schedule, state, e,
                               self._recomputed_in_table if recomputed else None)
        if comm.size > 1:
            with self.timers("exchange_wait"):
                if delayed_copies:  # (a recomputing layer's h has its roots first)
                    schedule.post(box, "copies", e, h, bins.bcast_root,
                                  bins.bcast_leaf, Direction.BROADCAST, gather=True)
                if not constant or e < r:
                    schedule.post(box, "partials", e, p, bins.reduce_leaf,
                                  bins.reduce_root, Direction.REDUCE, gather=True)
                    self.rule.posted(self, schedule, state, e)
        state.step += 1
        if schedule.delayed_gradients and p.requires_grad:
            out = DelayedReduceGrad.apply(p, state.remote, schedule, state, e)
        else:
            out = p[:n_roots] + state.remote
        out = self.rule.merge(self, state, e, out)
        self.settled.offer(layer, out, state.step >= r + lag)  # every bin posted and taken
        return out
