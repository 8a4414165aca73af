"""Epoch time of one training run at P ranks, per algorithm and apply mode (the message pattern of
docs/design.md#scaling-model).

Per rank (the slowest one sets the epoch):

* vertices n = RF(P) N / P * vertex balance; edges m = E / P * edge balance;
  leaf rows exchanged L = (RF(P) - 1) N / P (every replica beyond the first is a leaf);
* dense rows: n under ``replicas`` (every replica runs the layers), N / P under ``root`` (each
  vertex once, at its root; roots are balanced per part);
* aggregation ``(m + r (n_dst + n_src) / 2) * sum_l 2 a_l * c_agg`` (r: a row's cost in edges;
  forward writes n_dst rows, backward n_src): n each under ``replicas``; under ``root`` only the
  roots and the leaves with local in-edges (n_dst) or out-edges (n_src) (the compact tables,
  fractions carried by the replication law); dense ``rows * sum_l in_l out_l * c_dense``;
* layers that aggregate: all, except layer 0 when its input aggregate is cached (cd-0, or P = 1);
* cd-0: per layer, forward and backward, two Alltoallv of L a_l 4 bytes per rank, plus the copies
  around them (clone of [n, a_l], gather/scatter of 4 L a_l floats); under ``root`` the same two
  (a broadcast of the roots' rows and a reduce of the leaves' partials; L is an upper bound, as
  leaves without local in- or out-edges send nothing); cd-0's summed layers at the root overlap
  each exchange with the aggregation that needs nothing remote (docs/design.md#overlap): a
  layer's two Alltoallv in one direction hide behind up to that layer's share of the
  aggregation, ``aggregate * a_l / sum a / 2`` (``overlap=False``: ``DISTGNN_OVERLAP=off``);
* cd-r: forward only, 1/r of the rows, posted non-blocking and waited r steps later: counted as
  latency plus the copies of 1/r of the rows (the transfer itself is taken as hidden behind compute,
  as the progress thread makes it: docs/scale.md#link);
  under ``root`` two messages per layer and the copy of the roots' rows into the source table;
  with ``fresh_copies`` (``distgnn train --fresh-copies``) the broadcast is cd-0's instead (one
  blocking Alltoallv forward, its adjoint backward) and only the reduce moves in bins; the rule
  (``--cdr-rule``, steady state, read from the run's :class:`~distgnn.exchange.spec.ExchangeSpec`):
  a rule whose ``input_cache`` is set caches layer 0 (no aggregation, no exchange); where the
  leaves recompute, layer 0's dense work grows by q N / P rows, q = min(the recompute budget,
  RF(P) - 1) (every leaf counted as a source: an upper bound), and layer 1's copies move only for
  the leaf rows beyond q N / P;
* rows travel as ``--message-precision`` sends them (read from the spec): ``row_bytes(a_l)``
  bytes a row (4 a_l in float32; codes, scales and padding in the integer widths), and each value
  sent under an integer width costs ``pack_s_per_float`` to encode and decode (measured by the
  microbenchmark), beside the copies, less the sender's gather where a term counts it (cd-0's
  exchanges, the fresh broadcast, the replicas' messages): the encode reads the rows in place;
  in cd-0's exchanges and the fresh broadcast the receiver's scatter or add goes too (the decode
  writes each row in its place, ``pack_into_s_per_float`` a value);
* 0c: no exchange;
* every algorithm: one Allreduce of the gradients (parameters x 4 bytes) and the per-epoch overhead;
* ranks sharing one machine (``ranks_per_node`` > 1) compute slower by the measured concurrency
  factors (shared cores, caches, memory bandwidth); one rank per socket: factor 1.

Speedup is T(1) / T(P) with the same costs.
"""
from __future__ import annotations

from dataclasses import dataclass

from distgnn.exchange.rules import DEFAULT_RULE, FIRST_RULE
from distgnn.exchange.spec import ExchangeSpec, cdr_at_root, resolve_exchange
from distgnn.models import registry
from distgnn.scaling.costs import ComputeCosts, GraphShape, ModelShape
from distgnn.scaling.network import NetworkModel
from distgnn.scaling.replication import ReplicationLaw
from distgnn.vocabulary import MESSAGE_BITS, message_row_bytes, parse_algorithm, resolve_apply

F32 = 4


@dataclass
class EpochPrediction:
    parts: int
    algo: str
    replication_factor: float
    aggregate_s: float
    dense_s: float
    exchange_s: float
    allreduce_s: float
    overhead_s: float
    apply: str = "replicas"
    fresh_copies: bool = False
    rule: str | None = None               #: cd-r at the root: its --cdr-rule (else None)
    recompute_budget: float | None = None
    #: training rows one rank sends per epoch, mean rank, bytes (``bytes_forward`` and
    #: ``bytes_backward`` of metrics.jsonl are these summed over the ranks)
    bytes_forward: float = 0.0
    bytes_backward: float = 0.0
    messages: str = "fp32"                #: how the rows travel (--message-precision resolved)

    @property
    def total_s(self) -> float:
        return self.aggregate_s + self.dense_s + self.exchange_s + self.allreduce_s + self.overhead_s

    def dominant(self) -> str:
        parts = {"aggregation": self.aggregate_s, "dense": self.dense_s, "exchange": self.exchange_s,
                 "allreduce": self.allreduce_s}
        return max(parts, key=parts.get)


def exchange_for(algo: str, model: ModelShape, apply: str = "auto", fresh_copies: bool | None = None,
                 rule: str = DEFAULT_RULE, recompute_budget: float | None = None,
                 messages: str = "auto", message_group: int = 0) -> ExchangeSpec:
    """The exchange spec a run of ``algo`` with these ``distgnn train`` options resolves to, the
    options that do not apply to ``algo`` dropped (one table covers cd-0, 0c and cd-r alike)."""
    algorithm = parse_algorithm(algo)
    resolved = resolve_apply(apply, algorithm)
    at_root = cdr_at_root(algorithm, resolved)
    shape = registry.shape_spec(model.model)
    facts = dict(input_cache=model.input_cache, layers=model.layers,
                 layer_stack=shape.recomputes, attention=shape.attention,
                 messages=messages if algorithm.exchange else "auto",
                 message_group=message_group if algorithm.exchange and messages in MESSAGE_BITS else 0)
    # None (not asked for): the run's default, on for attention at the root
    fresh = fresh_copies if at_root else None
    exchange = resolve_exchange(algorithm, resolved, fresh_copies=fresh,
                                rule=rule if at_root and not shape.attention else DEFAULT_RULE,
                                **facts)
    if recompute_budget is not None and exchange.recomputes:
        exchange = resolve_exchange(algorithm, resolved, fresh_copies=fresh, rule=rule,
                                    recompute_budget=recompute_budget, **facts)
    return exchange


def predict_epoch(parts: int, algo: str, graph: GraphShape, model: ModelShape, costs: ComputeCosts,
                  law: ReplicationLaw, net: NetworkModel, rf: float | None = None,
                  ranks_per_node: int = 1, apply: str = "auto",
                  fresh_copies: bool | None = None, rule: str = FIRST_RULE,
                  recompute_budget: float | None = None,
                  spec: ExchangeSpec | None = None, messages: str = "auto",
                  message_group: int = 0, overlap: bool = True) -> EpochPrediction:
    """Predicted epoch of ``algo`` at ``parts`` ranks (``rf`` overrides the law's RF(P));
    ``ranks_per_node`` ranks share each machine. The run's exchange: ``spec`` (a trainer's
    spec), or the spec of :func:`exchange_for` with ``apply``, ``fresh_copies``, ``rule`` and
    ``recompute_budget`` as ``distgnn train --apply``, ``--fresh-copies``, ``--cdr-rule`` and
    ``--recompute-budget`` (cd-<r> at the root only; ignored otherwise), ``messages`` and
    ``message_group`` as ``--message-precision`` and ``--message-group``. ``overlap``: cd-0 at
    the root overlaps its exchanges with the aggregation that needs nothing remote
    (docs/design.md#overlap; False: ``DISTGNN_OVERLAP=off``), so each layer's wire time in each
    direction hides behind up to that layer's share of the aggregation."""
    if spec is None:
        spec = exchange_for(algo, model, apply, fresh_copies, rule, recompute_budget, messages,
                            message_group)
    def wire(width: int) -> float:  # bytes of one row of ``width`` values on the wire
        return float(message_row_bytes(width, spec.messages, spec.message_group))

    pack = costs.pack_s_per_float if spec.messages in MESSAGE_BITS else 0.0
    # cd-0's exchanges and the fresh broadcast decode each row into its table (added or set)
    pack_into = (costs.pack_into_s_per_float or pack) if spec.messages in MESSAGE_BITS else 0.0
    # an integer width encodes the rows it sends where they lie (the gather is the encode's read)
    # and, in the exact exchanges, decodes the rows it receives into their places (the scatter or
    # the add is the decode's write): the terms below drop those copies
    fused = 1.0 if spec.messages in MESSAGE_BITS else 0.0
    a, apply, fresh_copies = spec.algorithm, spec.apply, spec.fresh_copies
    rf = 1.0 if parts == 1 else float(rf if rf is not None else law(parts))
    n = rf * graph.num_nodes / parts * (law.vertex_balance if parts > 1 else 1.0)
    m = graph.num_edges / parts * (law.edge_balance if parts > 1 else 1.0)
    leaves = (rf - 1.0) * graph.num_nodes / parts
    cached = spec.rule.input_cache and parts > 1
    widths = model.aggregated_widths(graph, algo, parts, cached)
    shared = min(parts, ranks_per_node) > 1
    rows = graph.num_nodes / parts if apply == "root" else n
    kernel_rows = n  # rows the kernel writes, the mean of forward and backward
    if apply == "root" and parts > 1:
        balance = law.vertex_balance
        kernel_rows = (rows + leaves * (law.leaf_in_fraction + law.leaf_out_fraction) / 2) * balance
    aggregate = (m + costs.agg_row_per_edge * kernel_rows) * model.agg_units(graph, algo, parts, cached) * costs.agg_s_per_edge_col * (costs.concurrency_agg if shared else 1.0)
    # rows per root whose layer-0 dense work a recompute rule adds (leaves read no copy of them)
    recomputed = 0.0
    if spec.recomputes and parts > 1:
        recomputed = min(rf - 1.0, spec.recompute_budget)
    dense_units = (rows * model.dense_units(graph)
                   + recomputed * rows * model.dense_units(graph, first_layers=1))
    dense = dense_units * costs.dense_s_per_vertex_unit * (costs.concurrency_dense if shared else 1.0)
    exchange = 0.0
    # cd-0's summed layers at the root post each exchange before the work that needs nothing
    # remote (docs/design.md#overlap); attention layers exchange blocking
    overlapped = (overlap and a.delay == 0 and apply == "root"
                  and not registry.shape_spec(model.model).attention)
    if a.exchange and parts > 1:
        for i, w in enumerate(widths):
            # under a recompute rule the first width is layer 1's (layer 0 is cached)
            copies = leaves - (recomputed * rows if i == 0 else 0.0)
            if a.delay == 0:
                on_wire = 2 * net.alltoallv(parts, leaves * wire(w))
                if overlapped:  # hidden behind this layer's aggregation, forward or backward
                    on_wire = max(on_wire - aggregate * w / sum(widths) / 2, 0.0)
                one = (on_wire + costs.copy_s_per_float * (n * w + (4 - 4 * fused) * leaves * w)
                       + pack_into * 2 * leaves * w)
                exchange += 2 * one  # forward and backward (the adjoint)
            elif fresh_copies:
                # cd-0's broadcast, blocking, forward and its adjoint backward; the reduce (and its
                # delayed gradient) in bins of 1/r of the rows, non-blocking
                broadcast = (net.alltoallv(parts, leaves * wire(w))
                             + costs.copy_s_per_float * (n * w + (2 - 2 * fused) * leaves * w)
                             + pack_into * 2 * leaves * w)
                exchange += 2 * broadcast + 2 * (parts - 1) * net.latency + (costs.copy_s_per_float + pack) * (
                    2 * leaves * w / a.delay)
            elif apply == "root":
                # two messages posted per layer (broadcast and reduce), 1/r of the rows each, and
                # their delayed gradients; the roots' rows copied into the persistent source table
                messages = 4 if copies > 0 else 2
                # held gradients (the prompt rule): the leaves' partial rows take their last
                # delivered gradient where they were zeroed (no more work), and the roots add
                # their copies' last one to their rows
                held = rows * w if spec.rule.hold_gradients and spec.delayed_gradients and copies > 0 else 0.0
                exchange += messages * (parts - 1) * net.latency + costs.copy_s_per_float * (
                    (rows + recomputed * rows * (i == 0)) * w + 2 * (leaves + copies) * w / a.delay
                    + held) + pack * 2 * (leaves + copies) * w / a.delay
            else:
                exchange += 2 * (parts - 1) * net.latency + (costs.copy_s_per_float * (3 - fused) + pack * 2) * leaves * w / a.delay
    allreduce = net.allreduce(parts, model.num_parameters(graph) * F32)
    sent = (rows_sent(a.delay, apply, fresh_copies, leaves, recomputed * rows, law, len(widths))
            if a.exchange and parts > 1 else [(0.0, 0.0)] * len(widths))
    forward = sum(f * wire(w) for (f, _), w in zip(sent, widths))
    backward = sum(b * wire(w) for (_, b), w in zip(sent, widths))
    return EpochPrediction(parts, algo, rf, aggregate, dense, exchange, allreduce, costs.overhead_s,
                           apply, fresh_copies,
                           spec.rule.name if spec.cdr_at_root else None,
                           spec.recompute_budget,
                           forward, backward, spec.messages)


def rows_sent(delay: int, apply: str, fresh_copies: bool, leaves: float, recomputed: float,
              law: ReplicationLaw, layers: int) -> list[tuple[float, float]]:
    """Rows one rank sends per epoch in each of its ``layers`` aggregated layers (mean rank), as
    the code's plans send them: ``(forward rows, backward rows)`` per layer. At the root the
    broadcast reaches only leaves with local out-edges and the reduce leaves only those with local
    in-edges (the law's fractions; the time terms above keep every leaf, an upper bound);
    ``recomputed`` leaf rows read no copy at the first aggregated layer; cd-r moves 1/r of its
    binned rows per epoch."""
    r = max(delay, 1)
    if apply != "root":  # partials to the root and sums back; cd-r binned, forward only
        return [(2 * leaves, 2 * leaves) if delay == 0 else (2 * leaves / r, 0.0)] * layers
    reduce = leaves * law.leaf_in_fraction
    broadcast = leaves * law.leaf_out_fraction
    out = []
    for i in range(layers):
        copies = max(broadcast - (recomputed if i == 0 else 0.0), 0.0)
        if delay == 0:
            one = broadcast + reduce
        elif fresh_copies:
            one = broadcast + reduce / r
        else:
            one = (copies + reduce) / r
        out.append((one, one))  # the backward pass sends each message's adjoint (or delayed gradient)
    return out


def speedup_table(graph: GraphShape, model: ModelShape, costs: ComputeCosts, law: ReplicationLaw,
                  net: NetworkModel, algos: list[str], parts: list[int], ranks_per_node: int = 1,
                  apply: str = "auto", fresh_copies: bool | None = None, rule: str = FIRST_RULE,
                  recompute_budget: float | None = None, messages: str = "auto",
                  message_group: int = 0) -> list[dict]:
    """One row per (algo, P): the prediction's parts, total and speedup over P = 1 (cd-0 at P = 1
    is the single-socket reference for every algorithm: at P = 1 they coincide). ``apply``:
    ``auto`` (each algorithm's default), ``root`` (refused for 0c and cd-r-orig) or ``replicas``;
    ``fresh_copies``, ``rule``, ``recompute_budget``: cd-<r> at the root as under ``distgnn train
    --fresh-copies``, ``--cdr-rule``, ``--recompute-budget``; ``messages``, ``message_group``: as
    ``--message-precision`` and ``--message-group`` for every algorithm that sends rows (the
    P = 1 reference sends none)."""
    base = predict_epoch(1, "cd-0", graph, model, costs, law, net).total_s
    attention = registry.shape_spec(model.model).attention
    rows = []
    for algo in algos:
        for p in parts:
            e = predict_epoch(p, algo, graph, model, costs, law, net, ranks_per_node=ranks_per_node,
                              apply=apply, fresh_copies=fresh_copies, rule=rule,
                              recompute_budget=recompute_budget, messages=messages,
                              message_group=message_group)
            rows.append({"algo": algo, "apply": e.apply, "fresh_copies": e.fresh_copies,
                         "copies_option": copies_option(algo, e, attention),
                         "attention": attention, "P": p,
                         "messages": e.messages,
                         "rule": e.rule, "recompute_budget": e.recompute_budget,
                         "rf": e.replication_factor,
                         "epoch_s": e.total_s,
                         "speedup": base / e.total_s, "aggregate_s": e.aggregate_s, "dense_s": e.dense_s,
                         "exchange_s": e.exchange_s, "allreduce_s": e.allreduce_s, "dominant": e.dominant()})
    return rows


def copies_option(algo: str, prediction: EpochPrediction, attention: bool) -> str:
    """The ``distgnn train`` option that gives a prediction's copies, "" where they are the run's
    default (fresh for attention under cd-<r> at the root, stale elsewhere)."""
    default = cdr_at_root(parse_algorithm(algo), prediction.apply) and attention
    if prediction.fresh_copies == default:
        return ""
    return "--fresh-copies" if prediction.fresh_copies else "--no-fresh-copies"
