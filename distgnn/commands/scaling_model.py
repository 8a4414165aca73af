"""distgnn scaling-model: predicted epoch time and speedup for P = 1 ... 128 (docs/scale-model.md).

    distgnn scaling-model predict --calibration CAL.json [--graph ogbn-papers100M | --nodes N --edges E
        --feat F --classes C] [--layers 3 --hidden 256] [--parts 1 2 4 ... 128] [--algos cd-0 cd-5 0c]
        [--apply auto|root|replicas]
        [--network infiniband|measured] [--bandwidth-gbps B --latency-us L] [--compute-speedup S]
    distgnn scaling-model estimate-memory PARTDIR --layers L --hidden H --algo A [--part K] [--json]

CAL.json (written by ``python -m bench.scaling``) holds the compute costs measured on one rank, the
replication law fitted on P <= 16, and the network fitted to the MPI microbenchmark.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from distgnn.errors import DistgnnError
from distgnn.models import registry
from distgnn.options import add_fresh_copies_options
from distgnn.vocabulary import APPLY_MODES, MESSAGE_PRECISIONS

#: Shapes of the real graphs (vertices, directed edges aggregated over, features, classes).
GRAPHS = {
    "reddit": (232_965, 114_615_892, 602, 41),
    "ogbn-products": (2_449_029, 123_718_280, 100, 47),
    "ogbn-papers100M": (111_059_956, 1_615_685_872, 128, 172),
}
DEFAULT_PARTS = [1, 2, 4, 8, 16, 32, 64, 128]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("scaling-model", help="predict epoch time and speedup for P = 1 ... 128",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    pr = verbs.add_parser("predict", help="epoch time and speedup per algorithm and P")
    pr.add_argument("--calibration", required=True, help="CAL.json from python -m bench.scaling")
    pr.add_argument("--graph", choices=sorted(GRAPHS), help="a real graph's shape (default: the calibration graph)")
    pr.add_argument("--nodes", type=int)
    pr.add_argument("--edges", type=int)
    pr.add_argument("--feat", type=int)
    pr.add_argument("--classes", type=int)
    pr.add_argument("--model", default=registry.DEFAULT_MODEL, metavar="MODEL",
                    help=f"as distgnn train --model ({', '.join(registry.names())}, or a class's import path "
                         f"package.module:Class, costed as the default model): its widths and dense "
                         f"work (default: %(default)s)")
    pr.add_argument("--layers", type=int, default=3)
    pr.add_argument("--hidden", type=int, default=256)
    pr.add_argument("--no-input-cache", action="store_true",
                    help="model runs with distgnn train --no-input-cache (layer 0 aggregates every epoch)")
    pr.add_argument("--parts", type=int, nargs="+", default=DEFAULT_PARTS)
    pr.add_argument("--algos", nargs="+", default=["cd-0", "cd-5", "0c"])
    pr.add_argument("--apply", choices=APPLY_MODES, default="auto",
                    help="where the dense work runs, as distgnn train --apply (auto: root for cd-0 "
                         "and cd-<r>, replicas for 0c and cd-<r>-orig)")
    add_fresh_copies_options(
        pr, "cd-<r> at the root as under distgnn train --fresh-copies: the broadcast every step "
            "(blocking, with its adjoint), only the partials delayed (the default for GAT)",
        "cd-<r> at the root as under distgnn train --no-fresh-copies: the roots' rows in bins, "
        "r steps late, for GAT too")
    pr.add_argument("--cdr-rule", default=None, metavar="RULE",
                    help="cd-<r> at the root as under distgnn train --cdr-rule RULE (steady "
                         "state; default: the train default)")
    pr.add_argument("--recompute-budget", type=float, default=None, metavar="B",
                    help="as distgnn train --recompute-budget (recompute rules)")
    pr.add_argument("--message-precision", choices=MESSAGE_PRECISIONS, default="auto",
                    help="as distgnn train --message-precision, for every algorithm that sends "
                         "rows (default: %(default)s)")
    pr.add_argument("--message-group", type=int, default=0, metavar="G",
                    help="as distgnn train --message-group (default: %(default)s)")
    pr.add_argument("--network", choices=("infiniband", "measured"), default="infiniband",
                    help="100 Gb/s InfiniBand defaults, or the calibration's measured network")
    pr.add_argument("--bandwidth-gbps", type=float, help="override: link bandwidth in Gb/s")
    pr.add_argument("--latency-us", type=float, help="override: latency in microseconds")
    pr.add_argument("--compute-speedup", type=float, default=1.0,
                    help="one socket's compute speed over the calibrated rank's (default 1)")
    pr.add_argument("--replication", choices=("auto", "calibration", "papers"), default="auto",
                    help="RF law: the calibration graph's, or the papers100M twin's (auto: the "
                         "papers law for --graph ogbn-papers100M when the calibration has one)")
    pr.add_argument("--ranks-per-node", type=int, default=1,
                    help="ranks sharing one machine (applies the measured concurrency slowdown; default 1)")
    pr.add_argument("--json", action="store_true", help="print rows as JSON")
    pr.set_defaults(func=run_predict)
    me = verbs.add_parser("estimate-memory", help="per-rank memory estimate of a run")
    me.add_argument("partdir")
    me.add_argument("--model", default=registry.DEFAULT_MODEL, metavar="MODEL",
                    help=f"as distgnn train --model ({', '.join(registry.names())}, or a class's import path "
                         f"package.module:Class, estimated as the default model; default: %(default)s)")
    me.add_argument("--layers", type=int, default=3)
    me.add_argument("--hidden", type=int, default=256)
    me.add_argument("--algo", default="cd-0")
    me.add_argument("--no-input-cache", action="store_true", help="as distgnn train --no-input-cache")
    me.add_argument("--apply", choices=APPLY_MODES, default="auto",
                    help="as distgnn train --apply")
    add_fresh_copies_options(me, "as distgnn train --fresh-copies",
                             "as distgnn train --no-fresh-copies")
    me.add_argument("--cdr-rule", default=None, metavar="RULE",
                    help="as distgnn train --cdr-rule (default: the train default)")
    me.add_argument("--recompute-budget", type=float, default=None, metavar="B",
                    help="as distgnn train --recompute-budget")
    me.add_argument("--measure-baseline", action="store_true",
                    help="measure the interpreter's baseline here instead of the calibrated one")
    me.add_argument("--part", type=int, metavar="K",
                    help="estimate part K alone (default: every part)")
    me.add_argument("--json", action="store_true", help="print rows as JSON")
    me.set_defaults(func=run_memory)


def load_calibration(path: str | Path):
    """(graph, costs, law, measured network) from CAL.json."""
    from distgnn.scaling.costs import ComputeCosts, GraphShape
    from distgnn.scaling.network import NetworkModel
    from distgnn.scaling.replication import ReplicationLaw

    try:
        d = json.loads(Path(path).read_text())
        return (GraphShape(**d["graph"]), ComputeCosts.from_dict(d["costs"]),
                ReplicationLaw.from_dict(d["replication"]), NetworkModel.from_dict(d["network"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DistgnnError(f"--calibration {path}: not a calibration file from bench.scaling ({exc})") from None


def _papers_law(path: str | Path):
    from distgnn.scaling.replication import ReplicationLaw

    d = json.loads(Path(path).read_text()).get("papers_replication")
    return ReplicationLaw.from_dict(d) if d else None


def run_predict(args: argparse.Namespace) -> int:
    from distgnn.scaling.costs import GraphShape, ModelShape
    from distgnn.exchange.rules import FIRST_RULE, rule_class
    from distgnn.scaling.model import speedup_table
    from distgnn.scaling.network import NetworkModel

    check_shape(args)
    graph, costs, law, measured = load_calibration(args.calibration)
    papers_law = _papers_law(args.calibration)
    use_papers = args.replication == "papers" or (
        args.replication == "auto" and args.graph == "ogbn-papers100M" and papers_law is not None)
    if use_papers:
        if papers_law is None:
            raise DistgnnError(f"--replication papers: {args.calibration} has no papers_replication law")
        law = papers_law
    if args.graph:
        graph = GraphShape(*GRAPHS[args.graph], name=args.graph)
    if any(v is not None for v in (args.nodes, args.edges, args.feat, args.classes)):
        if None in (args.nodes, args.edges, args.feat, args.classes):
            raise DistgnnError("--nodes, --edges, --feat and --classes go together")
        graph = GraphShape(args.nodes, args.edges, args.feat, args.classes, name="custom")
    net = measured if args.network == "measured" else NetworkModel()
    if args.bandwidth_gbps:
        net.bandwidth = net.allreduce_bandwidth = args.bandwidth_gbps * 1e9 / 8
        net.source += f"; bandwidth {args.bandwidth_gbps} Gb/s"
    if args.latency_us:
        net.latency = net.allreduce_latency = args.latency_us * 1e-6
        net.source += f"; latency {args.latency_us} us"
    if min(args.parts) < 1:
        raise DistgnnError("--parts: every P must be >= 1")
    if args.cdr_rule is not None:
        rule_class(args.cdr_rule)
    rows = speedup_table(graph, ModelShape(args.layers, args.hidden, not args.no_input_cache, args.model), costs.scaled(args.compute_speedup),
                         law, net, args.algos, sorted(args.parts), args.ranks_per_node, args.apply,
                         args.fresh_copies, args.cdr_rule or default_rule(), args.recompute_budget,
                         args.message_precision, args.message_group)
    if args.json:
        print(json.dumps(rows))
        return 0
    print(format_table(rows, graph, law, net))
    return 0


def check_shape(args: argparse.Namespace) -> None:
    """``--layers`` and ``--hidden`` at least 1, in one line naming the option."""
    for flag, value in (("--layers", args.layers), ("--hidden", args.hidden)):
        if value < 1:
            raise DistgnnError(f"{flag} must be >= 1, got {value}")


def default_rule() -> str:
    """The rule ``distgnn train`` runs without ``--cdr-rule``."""
    from distgnn.exchange.rules import DEFAULT_RULE

    return DEFAULT_RULE


def exchange_from_args(args: argparse.Namespace):
    """The exchange spec of estimate-memory's run, as ``distgnn train`` with the same options
    resolves it (options that do not apply to ``--algo`` refused in one line)."""
    from distgnn.exchange.spec import resolve_exchange

    spec = registry.spec(args.model)
    return resolve_exchange(args.algo, args.apply, fresh_copies=args.fresh_copies,
                            rule=args.cdr_rule or default_rule(),
                            recompute_budget=args.recompute_budget,
                            input_cache=not args.no_input_cache, layers=args.layers,
                            layer_stack=spec.recomputes, attention=spec.attention)


def row_label(row: dict) -> str:
    """The algorithm of a prediction row as ``distgnn train`` spells it (``cd-5 --fresh-copies``;
    a row's ``copies_option`` names the copies only where they are not the run's default)."""
    from distgnn.exchange.rules import DEFAULT_RECOMPUTE_BUDGET, DEFAULT_RULE

    option = row.get("copies_option", "--fresh-copies" if row.get("fresh_copies") else "")
    label = row["algo"] + (f" {option}" if option else "")
    if row.get("rule") not in (None, DEFAULT_RULE) and not row.get("attention"):  # GAT has one rule
        label += f" --cdr-rule {row['rule']}"
    if row.get("recompute_budget") not in (None, DEFAULT_RECOMPUTE_BUDGET):
        label += f" --recompute-budget {row['recompute_budget']:g}"
    return label


def format_table(rows: list[dict], graph, law, net) -> str:
    lines = [f"graph {graph.name or 'calibration'}: {graph.num_nodes:,} vertices, {graph.num_edges:,} edges; "
             f"{law.describe()}; network: {net.source} ({net.bandwidth / 1e9:.2f} GB/s, "
             f"{net.latency * 1e6:.1f} us)", "",
             "| algo | apply | P | RF | epoch s | speedup | aggregate s | dense s | exchange s | allreduce s | dominant |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {row_label(r)} | {r['apply']} | {r['P']} | {r['rf']:.2f} | {r['epoch_s']:.4g} | {r['speedup']:.1f} | "
                     f"{r['aggregate_s']:.3g} | {r['dense_s']:.3g} | {r['exchange_s']:.3g} | "
                     f"{r['allreduce_s']:.3g} | {r['dominant']} |")
    return "\n".join(lines)


def memory_rows(args: argparse.Namespace) -> list[dict]:
    """One row per part estimated: its counts, the estimate from the assignment's attributes and,
    where the part is built, its size on disk (docs/design.md#memory-estimate)."""
    import zarr

    from distgnn.partition import layout
    from distgnn.partition.readers import open_assignment
    from distgnn.scaling.rank_memory import assignment_part_shapes, estimate_shape
    from distgnn.zarr_io import store_bytes

    from distgnn.scaling.rank_memory import DEFAULT_BASELINE_BYTES, measure_baseline

    check_shape(args)
    exchange = exchange_from_args(args)
    baseline = measure_baseline() if args.measure_baseline else DEFAULT_BASELINE_BYTES
    folder = Path(args.partdir)
    shapes = assignment_part_shapes(folder)
    checksum = open_assignment(folder)[1]["checksum"]
    if args.part is not None and not 0 <= args.part < len(shapes):
        raise DistgnnError(f"--part: expected 0 <= K < {len(shapes)}, got {args.part}")
    rows = []
    for k in [args.part] if args.part is not None else range(len(shapes)):
        shape, path = shapes[k], folder / layout.part_name(k)
        built = "no"
        if path.exists():
            attrs = dict(zarr.open_group(str(path), mode="r").attrs)
            built = "yes" if attrs.get("assignment_checksum") == checksum else "stale"
        estimate = estimate_shape(shape, args.layers, args.hidden, exchange, k, baseline,
                                  model=args.model)
        rows.append({"part": k, "vertices": shape.n, "edges": shape.m, "roots": shape.num_roots,
                     "split": shape.num_split, "estimate_bytes": estimate.total, "built": built,
                     "disk_bytes": store_bytes(path) if built != "no" else None})
    return rows


def run_memory(args: argparse.Namespace) -> int:
    rows = memory_rows(args)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    mib = 2 ** 20
    print(f"{args.partdir}: per-rank peak memory estimated from assignment.zarr ({args.model}, "
          f"{args.layers} x {args.hidden}, {args.algo}, --apply {args.apply}); 'on disk': a built "
          f"part's store as measured")
    print(f"{'part':>5} {'vertices':>13} {'edges':>15} {'roots':>13} {'split':>13} "
          f"{'estimate MiB':>13} {'built':>6} {'on disk MiB':>12}")
    for r in rows:
        disk = "-" if r["disk_bytes"] is None else f"{r['disk_bytes'] / mib:,.1f}"
        print(f"{r['part']:>5} {r['vertices']:>13,} {r['edges']:>15,} {r['roots']:>13,} "
              f"{r['split']:>13,} {r['estimate_bytes'] / mib:>13,.0f} {r['built']:>6} {disk:>12}")
    top = max(rows, key=lambda r: r["estimate_bytes"])
    print(f"max over ranks: {top['estimate_bytes'] / mib:,.0f} MiB (part {top['part']})")
    return 0
