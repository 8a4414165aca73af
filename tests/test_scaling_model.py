"""The scaling model on synthetic inputs: fits recover known parameters, predictions behave."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from distgnn.errors import DistgnnError
from distgnn.scaling.costs import ComputeCosts, GraphShape, ModelShape, fit_costs
from distgnn.scaling.model import predict_epoch, speedup_table
from distgnn.scaling.network import NetworkModel, fit_latency_bandwidth, fitted_network
from distgnn.scaling.replication import ReplicationLaw, fit_replication

GRAPH = GraphShape(100_000, 5_000_000, 128, 40, name="g")
MODEL = ModelShape(3, 256)


def test_replication_law_recovers_known_parameters():
    parts = [1, 2, 4, 8, 16]
    a, b = 0.7, 0.55
    rf = [1.0 + a * (p - 1) ** b for p in parts]
    law = fit_replication(parts, rf, [1.0, 1.01, 1.02, 1.03, 1.05], [1.0, 1.1, 1.0, 1.0, 1.2])
    assert law.a == pytest.approx(a, rel=1e-9) and law.b == pytest.approx(b, rel=1e-9)
    assert max(abs(r) for r in law.residuals) < 1e-9
    assert law.edge_balance == pytest.approx(1.05) and law.vertex_balance == pytest.approx(1.2)
    assert law(1) == 1.0 and law(128) == pytest.approx(1 + a * 127 ** b)
    # noisy measurements: residuals are reported, not zero
    noisy = fit_replication(parts, [r * (1 + e) for r, e in zip(rf, [0, 0.03, -0.02, 0.02, -0.03])])
    assert max(abs(r) for r in noisy.residuals) > 1e-3
    # capped at P: never more replicas than parts
    assert ReplicationLaw(a=5.0, b=1.0)(3) == 3.0


def test_replication_law_needs_two_points():
    with pytest.raises(DistgnnError):
        fit_replication([1, 2], [1.0, 1.5])


def test_latency_bandwidth_fit_recovers_known_values():
    sizes = [2 ** k for k in range(3, 26, 2)]
    lat, bw = 3e-6, 5e9
    lat_fit, bw_fit = fit_latency_bandwidth(sizes, [lat + s / bw for s in sizes])
    assert lat_fit == pytest.approx(lat, rel=1e-6) and bw_fit == pytest.approx(bw, rel=1e-6)
    times = {"bytes": sizes, "seconds": [lat + s / bw for s in sizes]}
    ar = {"bytes": sizes, "seconds": [2 * lat + s / bw for s in sizes]}
    net = fitted_network(times, times, ar)
    assert net.latency == pytest.approx(lat, rel=1e-6)
    assert net.allreduce_latency == pytest.approx(lat, rel=1e-6)
    # the ring allreduce at P = 2 costs what was measured
    assert net.allreduce(2, 1e6) == pytest.approx(2 * lat + 1e6 / bw, rel=1e-6)
    assert net.alltoallv(1, 1e9) == 0.0 and net.allreduce(1, 1e9) == 0.0


def test_fit_costs_reproduces_the_fitted_run():
    records = [{"epoch_time_s": 3.1, "time_aggregate_s": 1.0, "time_dense_s": 2.0}] * 3
    costs = fit_costs(records, GRAPH, MODEL, copy_s_per_float=1e-9)
    law = ReplicationLaw(a=0.8, b=0.5)
    pred = predict_epoch(1, "cd-0", GRAPH, MODEL, costs, law, NetworkModel())
    assert pred.aggregate_s == pytest.approx(1.0) and pred.dense_s == pytest.approx(2.0)
    assert pred.total_s == pytest.approx(3.1)
    assert pred.exchange_s == 0.0 and pred.allreduce_s == 0.0


def _costs() -> ComputeCosts:
    return ComputeCosts(agg_s_per_edge_col=1e-9, dense_s_per_vertex_unit=2e-12, copy_s_per_float=5e-10)


def _calibration(folder: Path) -> Path:
    """A calibration file of GRAPH with _costs(), as bench.scaling writes one."""
    cal = folder / "cal.json"
    cal.write_text(json.dumps({"graph": GRAPH.__dict__, "costs": _costs().to_dict(),
                               "replication": ReplicationLaw(a=0.8, b=0.5).to_dict(),
                               "network": NetworkModel().to_dict()}))
    return cal


def test_predictions_monotone_where_they_must_be():
    law = ReplicationLaw(a=0.8, b=0.5)
    net = NetworkModel()
    parts = [1, 2, 4, 8, 16, 32, 64, 128]
    # every layer aggregating every epoch (with the input cache cd-0 skips layer 0's work and
    # exchange, so it may beat cd-5 and 0c: see test_input_cache_...)
    every_epoch = ModelShape(MODEL.layers, MODEL.hidden, input_cache=False)
    # all on the replicas (the same dense work), so only the communication differs
    rows = speedup_table(GRAPH, every_epoch, _costs(), law, net, ["cd-0", "cd-5", "0c"], parts,
                         apply="replicas")
    by = {(r["algo"], r["P"]): r for r in rows}
    for p in parts[1:]:
        # less communication, never slower: 0c <= cd-5 <= cd-0
        assert by["0c", p]["epoch_s"] <= by["cd-5", p]["epoch_s"] <= by["cd-0", p]["epoch_s"]
        # replication factor grows with P
        assert by["cd-0", p]["rf"] > by["cd-0", p // 2]["rf"]
    # all algorithms coincide at P = 1
    assert by["0c", 1]["epoch_s"] == pytest.approx(by["cd-0", 1]["epoch_s"])
    # a slower network never speeds cd-0 up; a faster compute never slows it down
    slow = NetworkModel(latency=1e-4, bandwidth=1e8)
    for p in parts[1:]:
        assert predict_epoch(p, "cd-0", GRAPH, every_epoch, _costs(), law, slow,
                             apply="replicas").total_s >= by["cd-0", p]["epoch_s"]
        assert predict_epoch(p, "cd-0", GRAPH, every_epoch, _costs().scaled(4), law, net,
                             apply="replicas").total_s < by["cd-0", p]["epoch_s"]
    # speedup is sublinear when replication adds work: RF(P) > 1 makes dense work shrink slower than 1/P
    assert all(by["0c", p]["speedup"] < p for p in parts[1:])


def test_exchange_bytes_follow_replication():
    """cd-0's exchange grows with the leaves (RF - 1) and vanishes without replication."""
    net = NetworkModel()
    none = predict_epoch(4, "cd-0", GRAPH, MODEL, _costs(), ReplicationLaw(a=0.0, b=1.0), net, rf=1.0)
    some = predict_epoch(4, "cd-0", GRAPH, MODEL, _costs(), ReplicationLaw(a=0.0, b=1.0), net, rf=1.5)
    more = predict_epoch(4, "cd-0", GRAPH, MODEL, _costs(), ReplicationLaw(a=0.0, b=1.0), net, rf=2.5)
    assert none.exchange_s < some.exchange_s < more.exchange_s


def test_cli_predict(tmp_path, capsys):
    from distgnn.cli import main

    cal = _calibration(tmp_path)
    assert main(["scaling-model", "predict", "--calibration", str(cal), "--graph", "ogbn-papers100M",
                 "--parts", "1", "16", "128", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["P"] for r in rows} == {1, 16, 128}
    assert main(["scaling-model", "predict", "--calibration", str(tmp_path / "missing.json")]) == 2
    assert "--calibration" in capsys.readouterr().err


def test_concurrency_slowdown_applies_only_to_shared_machines():
    law = ReplicationLaw(a=0.8, b=0.5)
    costs = ComputeCosts(1e-9, 2e-12, 5e-10, concurrency_agg=1.5, concurrency_dense=2.0)
    own = predict_epoch(2, "0c", GRAPH, MODEL, costs, law, NetworkModel(), ranks_per_node=1)
    shared = predict_epoch(2, "0c", GRAPH, MODEL, costs, law, NetworkModel(), ranks_per_node=2)
    assert shared.aggregate_s == pytest.approx(1.5 * own.aggregate_s)
    assert shared.dense_s == pytest.approx(2.0 * own.dense_s)
    one = predict_epoch(1, "0c", GRAPH, MODEL, costs, law, NetworkModel(), ranks_per_node=2)
    assert one.dense_s == pytest.approx(predict_epoch(1, "0c", GRAPH, MODEL, costs, law, NetworkModel()).dense_s)


def test_half_edges_and_row_cost_split():
    from distgnn.scaling.costs import half_edges

    indptr = np.array([0, 3, 3, 7, 8], dtype=np.int64)
    indices = np.arange(8, dtype=np.int32)
    hp, hi = half_edges(indptr, indices)
    assert hp.tolist() == [0, 2, 2, 4, 5] and hi.tolist() == [0, 2, 3, 5, 7]
    # a row cost shifts aggregation time towards parts with many vertices per edge
    law = ReplicationLaw(a=0.8, b=0.5)
    records = [{"epoch_time_s": 3.0, "time_aggregate_s": 1.0, "time_dense_s": 2.0}]
    flat = fit_costs(records, GRAPH, MODEL)
    rows = fit_costs(records, GRAPH, MODEL, agg_row_per_edge=50.0)
    p1 = [predict_epoch(1, "0c", GRAPH, MODEL, c, law, NetworkModel()).aggregate_s for c in (flat, rows)]
    assert p1 == pytest.approx([1.0, 1.0])
    p4 = [predict_epoch(4, "0c", GRAPH, MODEL, c, law, NetworkModel()).aggregate_s for c in (flat, rows)]
    assert p4[1] > p4[0]


def test_input_cache_removes_layer0_from_cd0_and_one_rank_only() -> None:
    """With the trainer's input cache, cd-0 (any P) and every algorithm at P = 1 aggregate and
    exchange no layer 0; 0c and cd-r at P > 1 still aggregate every layer."""
    graph = GraphShape(232_965, 114_615_892, 602, 41)
    cached, every = ModelShape(3, 256, True), ModelShape(3, 256, False)
    assert every.aggregated_widths(graph, "cd-0", 4) == [256, 256, 41]
    assert cached.aggregated_widths(graph, "cd-0", 4) == [256, 41]
    assert cached.aggregated_widths(graph, "0c", 1) == [256, 41]
    assert cached.aggregated_widths(graph, "0c", 4) == [256, 256, 41]
    assert cached.aggregated_widths(graph, "cd-5", 4) == [256, 256, 41]
    assert cached.agg_units(graph) == 2 * (256 + 41)


def test_settled_layer0_leaves_0c_and_cdr_when_layer0_aggregates_first() -> None:
    """128 features under hidden 172: layer 0 aggregates the constant input first, so 0c and cd-r
    keep their own layer-0 aggregate in steady state; cd-r-orig's alternates."""
    graph = GraphShape(111_059_956, 1_615_685_872, 128, 172)
    cached, every = ModelShape(2, 172, True), ModelShape(2, 172, False)
    for algo in ("cd-0", "0c", "cd-5"):
        assert cached.aggregated_widths(graph, algo, 4) == [172], algo
        assert every.aggregated_widths(graph, algo, 4) == [128, 172], algo
    assert cached.aggregated_widths(graph, "cd-5-orig", 4) == [128, 172]


def test_apply_at_root_runs_each_vertex_dense_work_once() -> None:
    """Under root the dense rows are N / P, so its dense time is the replicas' divided by RF(P);
    aggregation is the same, and root is refused for 0c (DistGNN's scheme)."""
    law, net = ReplicationLaw(a=0.8, b=0.5), NetworkModel()
    for p in (2, 16, 128):
        root = predict_epoch(p, "cd-5", GRAPH, MODEL, _costs(), law, net, apply="root")
        replicas = predict_epoch(p, "cd-5", GRAPH, MODEL, _costs(), law, net, apply="replicas")
        assert root.dense_s == pytest.approx(replicas.dense_s / replicas.replication_factor, rel=1e-9)
        assert root.aggregate_s == pytest.approx(replicas.aggregate_s)
        assert root.apply == "root" and replicas.apply == "replicas"
    assert predict_epoch(1, "cd-0", GRAPH, MODEL, _costs(), law, net, apply="root").total_s == \
        pytest.approx(predict_epoch(1, "cd-0", GRAPH, MODEL, _costs(), law, net, apply="replicas").total_s)
    with pytest.raises(DistgnnError, match="DistGNN's scheme"):
        predict_epoch(4, "0c", GRAPH, MODEL, _costs(), law, net, apply="root")
    rows = speedup_table(GRAPH, MODEL, _costs(), law, net, ["cd-0", "0c"], [1, 4])
    assert {(r["algo"], r["apply"]) for r in rows} == {("cd-0", "root"), ("0c", "replicas")}


def test_fresh_copies_pay_the_broadcast_every_step():
    """cd-r --fresh-copies at the root: the broadcast is cd-0's (blocking, forward and backward),
    the reduce stays in bins, so its exchange lies between cd-5's and cd-0's; it is the same run
    at P = 1 and means nothing for algorithms without a delay or off the root."""
    law = ReplicationLaw(a=0.8, b=0.5)
    net = NetworkModel()
    for p in (2, 16, 128):
        plain, fresh, exact = (predict_epoch(p, algo, GRAPH, MODEL, _costs(), law, net, fresh_copies=f)
                               for algo, f in (("cd-5", False), ("cd-5", True), ("cd-0", False)))
        assert fresh.fresh_copies and not plain.fresh_copies
        assert plain.exchange_s < fresh.exchange_s < exact.exchange_s
        assert fresh.dense_s == plain.dense_s and fresh.aggregate_s == plain.aggregate_s
    one = [predict_epoch(1, "cd-5", GRAPH, MODEL, _costs(), law, net, fresh_copies=f).total_s
           for f in (False, True)]
    assert one[0] == pytest.approx(one[1])
    for algo, apply in (("cd-0", "auto"), ("0c", "auto"), ("cd-5", "replicas")):
        assert not predict_epoch(4, algo, GRAPH, MODEL, _costs(), law, net, apply=apply,
                                 fresh_copies=True).fresh_copies


def test_cli_predict_fresh_copies(tmp_path, capsys):
    from distgnn.cli import main

    cal = _calibration(tmp_path)
    common = ["scaling-model", "predict", "--calibration", str(cal), "--parts", "1", "8",
              "--algos", "cd-0", "cd-5"]
    assert main(common + ["--json"]) == 0
    plain = {(r["algo"], r["P"]): r for r in json.loads(capsys.readouterr().out)}
    assert main(common + ["--json", "--fresh-copies"]) == 0
    fresh = {(r["algo"], r["P"]): r for r in json.loads(capsys.readouterr().out)}
    assert fresh["cd-5", 8]["fresh_copies"] and not fresh["cd-0", 8]["fresh_copies"]
    assert fresh["cd-5", 8]["speedup"] < plain["cd-5", 8]["speedup"]
    assert fresh["cd-0", 8]["speedup"] == pytest.approx(plain["cd-0", 8]["speedup"])
    assert {"algo", "P", "speedup", "dominant"} <= set(fresh["cd-5", 8])
    assert main(common + ["--fresh-copies"]) == 0
    assert "| cd-5 --fresh-copies | root | 8 |" in capsys.readouterr().out


def test_gat_predictions_take_fresh_copies_by_default_and_stale_ones_when_asked(tmp_path, capsys):
    """As distgnn train resolves them: GAT's cd-r copies are fresh unless --no-fresh-copies, and
    the table names only the option that differs from that default (never a rule GAT has not)."""
    from distgnn.cli import main

    cal = _calibration(tmp_path)
    common = ["scaling-model", "predict", "--calibration", str(cal), "--parts", "1", "8",
              "--algos", "cd-0", "cd-5", "--model", "gat", "--layers", "2", "--hidden", "16"]
    runs = {}
    for option in ("", "--fresh-copies", "--no-fresh-copies"):
        assert main(common + ["--json"] + ([option] if option else [])) == 0
        runs[option] = {(r["algo"], r["P"]): r for r in json.loads(capsys.readouterr().out)}
    assert runs[""]["cd-5", 8]["fresh_copies"] and runs["--fresh-copies"]["cd-5", 8]["fresh_copies"]
    assert not runs["--no-fresh-copies"]["cd-5", 8]["fresh_copies"]
    assert runs["--no-fresh-copies"]["cd-5", 8]["speedup"] > runs[""]["cd-5", 8]["speedup"]
    assert not runs["--no-fresh-copies"]["cd-0", 8]["fresh_copies"]   # nothing to keep stale
    assert main(common) == 0
    text = capsys.readouterr().out
    assert "| cd-5 | root | 8 |" in text and "fresh-copies" not in text and "--cdr-rule" not in text
    assert main(common + ["--no-fresh-copies"]) == 0
    assert "| cd-5 --no-fresh-copies | root | 8 |" in capsys.readouterr().out
    sage = [a for a in common if a not in ("--model", "gat")]
    assert main(sage + ["--no-fresh-copies"]) == 0   # GraphSAGE: stale copies are its default
    assert "| cd-5 | root | 8 |" in capsys.readouterr().out


def test_held_gradients_cost_one_pass_over_the_root_rows_per_layer():
    """The prompt rule's held gradients: the same messages as recompute's, plus one pass over
    the roots' rows [N / P, w] per aggregated layer whose leaves read copies (the copies' last
    gradient added); nothing at P = 1."""
    law = ReplicationLaw(a=0.8, b=0.5)
    net = NetworkModel()
    costs = _costs()
    for p in (2, 16, 128):
        plain, held = (predict_epoch(p, "cd-5", GRAPH, MODEL, costs, law, net, rule=rule)
                       for rule in ("recompute", "prompt"))
        widths = MODEL.aggregated_widths(GRAPH, "cd-5", p, True)
        # the first aggregated layer reads copies only where RF - 1 exceeds the recompute budget
        # (1 leaf row per root); below it every leaf recomputes its row, and nothing is held
        read = widths if law(p) - 1 > 1 else widths[1:]
        assert (p == 2) == (read != widths)   # RF(2) = 1.8, RF(16) = 4.1
        assert held.exchange_s - plain.exchange_s == pytest.approx(
            costs.copy_s_per_float * GRAPH.num_nodes / p * sum(read), rel=1e-9)
        assert (held.dense_s, held.aggregate_s, held.bytes_forward) == (
            plain.dense_s, plain.aggregate_s, plain.bytes_forward)
    one = [predict_epoch(1, "cd-5", GRAPH, MODEL, costs, law, net, rule=rule).total_s
           for rule in ("recompute", "prompt")]
    assert one[0] == one[1]


def test_root_aggregation_counts_the_compact_tables_rows() -> None:
    """Under root the kernel writes n_dst rows forward and n_src backward (docs/design.md#
    compact-rows): the row term is N / P (1 + (RF - 1) (f_in + f_out) / 2) x vertex balance;
    on the replicas every replica's row; fractions of 1 (a calibration without them) count every
    local row, as before."""
    costs = ComputeCosts(agg_s_per_edge_col=1e-9, dense_s_per_vertex_unit=1e-9, agg_row_per_edge=10.0)
    every = ReplicationLaw(a=0.8, b=0.5, vertex_balance=1.1)
    compact = ReplicationLaw(a=0.8, b=0.5, vertex_balance=1.1, leaf_in_fraction=0.5,
                             leaf_out_fraction=0.7)
    p, rf = 16, every(16)
    units = MODEL.agg_units(GRAPH, "cd-0", p, False) * costs.agg_s_per_edge_col
    edges = GRAPH.num_edges / p * every.edge_balance
    full = predict_epoch(p, "cd-0", GRAPH, MODEL, costs, every, NetworkModel(), apply="root")
    assert full.aggregate_s == pytest.approx((edges + 10.0 * rf * GRAPH.num_nodes / p * 1.1) * units)
    rows = GRAPH.num_nodes / p * (1 + (rf - 1) * 0.6) * 1.1
    got = predict_epoch(p, "cd-0", GRAPH, MODEL, costs, compact, NetworkModel(), apply="root")
    assert got.aggregate_s == pytest.approx((edges + 10.0 * rows) * units)
    replicas = [predict_epoch(p, "cd-5", GRAPH, MODEL, costs, law, NetworkModel(), apply="replicas")
                for law in (every, compact)]
    assert replicas[0].aggregate_s == replicas[1].aggregate_s
    assert ReplicationLaw.from_dict(compact.to_dict()) == compact


def test_leaf_edge_fractions_of_a_hand_cut() -> None:
    """Four vertices, two parts; roots: 0, 1 on part 0, 2, 3 on part 1. Edges (src -> dst, part):
    0->1 (0), 0->2 (1), 3->1 (1), 2->3 (1), 1->0 (0). Leaves: (1, v0) out only, (1, v1) in only;
    (0, *) and (1, 2/3) are roots. So half the leaves have local in-edges, half out-edges."""
    from distgnn.scaling.replication import leaf_edge_fractions

    edges = [(0, 1, 0), (0, 2, 1), (3, 1, 1), (2, 3, 1), (1, 0, 0)]
    edges.sort(key=lambda e: e[1])  # store order: by destination
    indptr = np.zeros(5, np.int64)
    np.add.at(indptr, [d + 1 for _, d, _ in edges], 1)
    indptr = np.cumsum(indptr)
    indices = np.array([s for s, _, _ in edges], np.int32)
    edge_part = np.array([k for _, _, k in edges], np.uint8)
    assert leaf_edge_fractions(indptr, indices, edge_part, np.array([0, 0, 1, 1])) == (0.5, 0.5)
    # with vertex 1's root on part 1, its part-0 replica (in 0->1, out 1->0) is the other leaf
    assert leaf_edge_fractions(indptr, indices, edge_part, np.array([0, 1, 1, 1])) == (0.5, 1.0)


def test_measured_rf_is_used_where_it_exists_and_survives_the_calibration_file():
    """A law carrying RF measured on the graph it stands for (the full-size papers twin) returns
    the measurement at those P and the law between them; the file keeps both."""
    law = fit_replication([16, 32, 64, 128], [3.53, 4.32, 5.14, 5.97])
    plain = law(100)
    law.measured, law.measured_on = {16: 3.53, 128: 5.97}, "the twin at scale 1"
    assert law(128) == 5.97 and law(16) == 3.53 and law(100) == plain
    assert list(law([16, 100, 128])) == [3.53, plain, 5.97]
    again = ReplicationLaw.from_dict(json.loads(json.dumps(law.to_dict())))
    assert again(128) == 5.97 and again.measured_on == "the twin at scale 1"
    assert "measured RF(16) = 3.530, RF(128) = 5.970 on the twin at scale 1" in again.describe()


def test_bytes_per_rank_count_what_the_plans_send() -> None:
    """Bytes one rank sends per epoch, derived by hand (docs/design.md#scaling-model): N = 100k,
    P = 4, RF 2 gives L = 25,000 leaves a rank, f_out = 0.8 of them read a broadcast row, f_in =
    0.5 send a partial; aggregated widths 256 and 40 (layer 0 cached), 4 bytes a value."""
    law = ReplicationLaw(a=1.0, b=0.0, leaf_in_fraction=0.5, leaf_out_fraction=0.8)
    assert MODEL.aggregated_widths(GRAPH, "cd-5", 4, True) == [256, 40]

    def sent(algo: str, **kw) -> tuple[float, float]:
        e = predict_epoch(4, algo, GRAPH, MODEL, _costs(), law, NetworkModel(), rf=2.0, **kw)
        return e.bytes_forward, e.bytes_backward
    both = lambda rows_256, rows_40: (rows_256 * 256 + rows_40 * 40) * 4  # noqa: E731
    # cd-0 at the root: every broadcast row (20,000) and partial (12,500), each way
    assert sent("cd-0") == (both(32_500, 32_500),) * 2
    # cd-5 at the root under the first rule: a fifth of them
    assert sent("cd-5", rule="delayed") == (both(6_500, 6_500),) * 2
    # the recompute rule: 25,000 leaves (budget 1 x N / P) recompute, so layer 1 sends no copies
    assert sent("cd-5", rule="recompute") == (both(2_500, 6_500),) * 2
    assert sent("cd-5", rule="recompute", recompute_budget=0.5) == (both(4_000, 6_500),) * 2
    # --fresh-copies: cd-0's broadcast and a fifth of the partials
    assert sent("cd-5", fresh_copies=True) == (both(22_500, 22_500),) * 2
    # on the replicas every leaf sends its partial and gets the sum back; cd-r a fifth, forward only
    assert sent("cd-0", apply="replicas") == (both(50_000, 50_000),) * 2
    assert sent("cd-5", apply="replicas") == (both(10_000, 10_000), 0.0)
    assert sent("0c") == (0.0, 0.0)
    one = predict_epoch(1, "cd-0", GRAPH, MODEL, _costs(), law, NetworkModel())
    assert (one.bytes_forward, one.bytes_backward) == (0.0, 0.0)


def test_message_widths_scale_the_bytes_and_add_the_pack_term() -> None:
    """The hand count of the test above under --message-precision: a row of 256 values is 264
    bytes in int8 and 72 in int2, one of 40 values 48 and 20 (codes, a float32 scale and low,
    padding to 4 bytes); bf16 halves float32. The epoch pays the wire for those bytes and
    ``pack_s_per_float`` for each value encoded and decoded; 0c sends nothing either way."""
    law = ReplicationLaw(a=1.0, b=0.0, leaf_in_fraction=0.5, leaf_out_fraction=0.8)
    slow = NetworkModel(latency=1e-6, bandwidth=1e8, allreduce_latency=1e-6, allreduce_bandwidth=1e8)

    def epoch(messages: str, pack: float = 0.0, algo: str = "cd-0"):
        costs = ComputeCosts(**{**_costs().to_dict(), "pack_s_per_float": pack})
        return predict_epoch(4, algo, GRAPH, MODEL, costs, law, slow, rf=2.0, messages=messages)
    rows = 32_500  # per width, each way (cd-0 at the root)
    for messages, b256, b40 in (("fp32", 1024, 160), ("bf16", 512, 80), ("int8", 264, 48),
                                ("int4", 136, 28), ("int2", 72, 20)):
        e = epoch(messages)
        assert e.messages == messages
        assert (e.bytes_forward, e.bytes_backward) == (rows * (b256 + b40),) * 2
    assert epoch("int8").exchange_s < epoch("bf16").exchange_s < epoch("fp32").exchange_s
    assert epoch("int8", pack=1e-9).exchange_s > epoch("int8").exchange_s
    assert epoch("bf16", pack=1e-9).exchange_s == epoch("bf16").exchange_s  # a cast: no pack term
    assert epoch("auto", algo="0c").bytes_forward == 0.0


def test_the_exchanges_that_decode_into_their_table_pay_the_into_figure() -> None:
    """cd-0 decodes its received rows into its table (``pack_into_s_per_float``, which falls back
    to ``pack_s_per_float`` where a calibration lacks it): 2 x 2 x leaves x widths values per
    epoch at the into figure; cd-r's binned messages keep the plain one."""
    law = ReplicationLaw(a=1.0, b=0.0, leaf_in_fraction=0.5, leaf_out_fraction=0.8)
    free = NetworkModel(latency=0.0, bandwidth=1e30, allreduce_latency=0.0, allreduce_bandwidth=1e30)

    def exchange(algo: str, pack: float, pack_into: float) -> float:
        costs = ComputeCosts(**{**_costs().to_dict(), "pack_s_per_float": pack,
                                "pack_into_s_per_float": pack_into})
        return predict_epoch(4, algo, GRAPH, MODEL, costs, law, free, rf=2.0,
                             messages="int8").exchange_s
    leaves = (2.0 - 1.0) * GRAPH.num_nodes / 4
    widths = sum(MODEL.aggregated_widths(GRAPH, "cd-0", 4, True))
    assert exchange("cd-0", 1e-9, 3e-9) - exchange("cd-0", 1e-9, 0.0) == pytest.approx(
        2 * 2 * leaves * widths * 2e-9, rel=1e-9)
    assert exchange("cd-0", 1e-9, 1e-9) == exchange("cd-0", 1e-9, 0.0)
    assert exchange("cd-5", 1e-9, 3e-9) == exchange("cd-5", 1e-9, 0.0)


def test_an_integer_width_drops_the_gathers_and_scatters_that_a_term_counts() -> None:
    """The rows an integer width sends are encoded where they lie, and cd-0's received rows are
    decoded into their places, so those copies go: cd-0 per layer and direction copies its table
    once, then the leaf rows four times at float32 (gather and scatter of the reduce and of the
    broadcast) and not at all at an integer width; the replicas' cd-r three times and twice. cd-r
    at the root counts one copy per message row (the receiver's, from its mailbox), which stays."""
    law = ReplicationLaw(a=1.0, b=0.0, leaf_in_fraction=0.5, leaf_out_fraction=0.8)
    free = NetworkModel(latency=0.0, bandwidth=1e30, allreduce_latency=0.0, allreduce_bandwidth=1e30)
    costs = _costs()   # no pack term: the copies alone

    def exchange(algo: str, messages: str, **options) -> float:
        return predict_epoch(4, algo, GRAPH, MODEL, costs, law, free, rf=2.0, messages=messages,
                             **options).exchange_s
    leaves = (2.0 - 1.0) * GRAPH.num_nodes / 4
    widths = sum(MODEL.aggregated_widths(GRAPH, "cd-0", 4, True))
    for width in ("int8", "int2"):
        assert exchange("cd-0", "fp32") - exchange("cd-0", width) == pytest.approx(
            2 * 4 * leaves * widths * costs.copy_s_per_float, rel=1e-9)
        assert exchange("cd-5", "fp32", apply="replicas") - exchange(
            "cd-5", width, apply="replicas") == pytest.approx(
            leaves * widths / 5 * costs.copy_s_per_float, rel=1e-9)
        assert exchange("cd-5", width) == pytest.approx(exchange("cd-5", "fp32"), rel=1e-12)
    assert exchange("cd-0", "bf16") == pytest.approx(exchange("cd-0", "fp32"), rel=1e-12)  # a cast


def test_cd0_at_the_root_hides_each_layers_wire_behind_its_share_of_the_aggregation() -> None:
    """docs/design.md#overlap: per layer and direction, cd-0's two Alltoallv at the root hide
    behind up to aggregate x a_l / sum a / 2 (all of a short wire, that share of a long one);
    blocking (``overlap=False``) and on the replicas nothing hides."""
    law = ReplicationLaw(a=1.0, b=0.0, leaf_in_fraction=0.5, leaf_out_fraction=0.8)
    leaves = (2.0 - 1.0) * GRAPH.num_nodes / 4
    widths = MODEL.aggregated_widths(GRAPH, "cd-0", 4, True)
    shares = []
    for bandwidth in (1e7, 1e12):   # a wire longer than every share, and one shorter
        net = NetworkModel(latency=0.0, bandwidth=bandwidth, allreduce_latency=0.0,
                           allreduce_bandwidth=1e30)

        def epoch(apply: str, overlap: bool):
            return predict_epoch(4, "cd-0", GRAPH, MODEL, _costs(), law, net, rf=2.0, apply=apply,
                                 overlap=overlap)
        blocking = epoch("root", False)
        hidden = [min(2 * net.alltoallv(4, leaves * 4 * w), blocking.aggregate_s * w / sum(widths) / 2)
                  for w in widths]
        assert epoch("root", True).exchange_s == pytest.approx(blocking.exchange_s - 2 * sum(hidden),
                                                               rel=1e-9)
        assert epoch("replicas", True).exchange_s == epoch("replicas", False).exchange_s
        shares.append(hidden)
    slow, fast = shares
    assert slow == pytest.approx([blocking.aggregate_s * w / sum(widths) / 2 for w in widths])
    assert all(f < s for f, s in zip(fast, slow))


def test_an_absolute_fit_reads_a_shaped_links_rate_through_its_burst() -> None:
    """A token bucket passes its burst (256 KB) at line rate (10 GB/s) and meters the rest at
    50 MB/s: the relative fit, where every size weighs alike, reads the line rate; the absolute
    fit, where large messages weigh most, reads the metered rate."""
    sizes = [8 * 4 ** k for k in range(11)]  # 8 B ... 8.4 MB
    burst, line, rate = 256_000, 10e9, 50e6
    seconds = [s / line if s <= burst else burst / line + (s - burst) / rate for s in sizes]
    _, relative = fit_latency_bandwidth(sizes, seconds)
    _, absolute = fit_latency_bandwidth(sizes, seconds, relative=False)
    assert relative > 10 * rate
    assert absolute == pytest.approx(rate, rel=0.05)
