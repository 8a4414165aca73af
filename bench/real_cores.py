"""The report of a scaling check on real cores: measured epochs at P = 1 ... 16 beside the scaling
model's predictions, from the ``--json`` file that ``python -m bench.scaling`` writes (also a
partial one, from a run cut off at its deadline).

    python -m bench.real_cores RESULTS.json [--out REPORT.txt]

bench/device_scaling.sh runs it last. Speedups are against cd-0 at P = 1 on one thread (the model's
calibration run) and against cd-0 at P = 1 on T threads, unbound (``--one-socket-threads``, one
socket); the exchange share is the median steady epoch's time waiting on exchanges over its epoch
time; accuracy is the test accuracy evaluated at the last epoch (``--final-eval``). Reads JSON
only: no torch, no MPI.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ALGO_ORDER = {"cd-0": 0, "cd-5": 1, "0c": 2}


def _f(x, fmt: str = "{:.3f}", missing: str = "-") -> str:
    return missing if x is None else fmt.format(x)


def _pct(x) -> str:
    return _f(None if x is None else 100 * x, "{:+.1f}%")


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A plain-text table, columns padded (readable in a terminal and in markdown)."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    return [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows]


def report(d: dict) -> str:
    out: list[str] = []
    say = out.append
    m, o = d.get("machine", {}), d.get("options", {})
    say(f"Scaling on real cores: {m.get('cpu', '?')}, {m.get('cores_visible', '?')} cores visible "
        f"({m.get('affinity', '?')} in this process's affinity), load average at start "
        + ", ".join(f"{x:.2f}" for x in m.get("load_average", [])) + f"; Python {m.get('python', '?')}")
    say(f"started {d.get('started_utc', '?')} UTC, {d.get('elapsed_s', 0):.0f} s of bench.scaling; "
        f"synth-reddit --scale {o.get('scale')}, {o.get('epochs')} steady-state epochs asked per run "
        f"(cd-5: 10 more first), GraphSAGE 3 layers hidden 256; mpiexec {o.get('mpiexec_args')!r}, "
        f"1 thread per rank")
    g = d.get("graph")
    if g:
        say(f"graph {g['name']}: {g['num_nodes']:,} vertices, {g['num_edges']:,} edges, {g['feat_dim']} "
            f"features, {g['num_classes']} classes; libra RF " + ", ".join(
                f"P={p}: {r:.3f}" for p, r in d.get("rf", {}).items()))
    net, mb = d.get("network"), d.get("microbench", {})
    if net:
        say(f"MPI on this machine (2 ranks): Alltoallv latency {net['latency'] * 1e6:.1f} us, bandwidth "
            f"{net['bandwidth'] / 1e9:.2f} GB/s; copies {mb.get('copy_s_per_float', 0) * 1e9:.2f} ns/float; "
            f"2 ranks computing at once: aggregation {mb.get('concurrency_agg', 0):.2f}x, dense "
            f"{mb.get('concurrency_dense', 0):.2f}x slower")
    for p, c in sorted(d.get("concurrency_at", {}).items(), key=lambda kv: int(kv[0])):
        say(f"bench.concurrency, {p} ranks computing at once: aggregation {c['concurrency_agg']:.2f}x, dense "
            f"{c['concurrency_dense']:.2f}x slower than one alone")
    c = d.get("costs")
    if c:
        say(f"costs fitted on P = 1 (1 thread): aggregation {c['agg_s_per_edge_col'] * 1e9:.3f} ns per "
            f"edge-column, dense {c['dense_s_per_vertex_unit'] * 1e12:.2f} ps per vertex-width^2, overhead "
            f"{c['overhead_s']:.3f} s, a row costs {c['agg_row_per_edge']:.1f} edges")
    say("")

    p1, sock = d.get("p1"), d.get("one_socket")
    base1 = p1.get("epoch_time_s") if p1 else None
    baseT = sock.get("epoch_time_s") if sock else None
    T = sock.get("threads") if sock else o.get("one_socket_threads")
    header = ["P", "algo", "apply", "epoch s", "epochs (steady)", "speedup vs P=1 1 thr",
              f"vs P=1 {T or '?'} thr", "exchange share", "test acc", "predicted s", "error",
              "pred. P-rank conc.", "error", "status"]
    rows = []

    def add(r: dict, label: str, predicted=None, pred_p=None, err=None, err_p=None) -> None:
        e = r.get("epoch_time_s")
        wait = r.get("time_exchange_wait_s")
        rows.append([str(r.get("P")), label, r.get("apply", "-"), _f(e),
                     f"{r.get('epochs_done', '-')} ({r.get('steady_epochs', '-')})",
                     _f(base1 / e if base1 and e else None, "{:.2f}x"),
                     _f(baseT / e if baseT and e else None, "{:.2f}x"),
                     _f(wait / e if e and wait is not None else None, "{:.1%}"),
                     _f(r.get("test"), "{:.4f}"), _f(predicted), _pct(err), _f(pred_p), _pct(err_p),
                     r.get("status", "-")])

    if p1:
        pred = p1.get("predicted_s")
        add(p1, "cd-0, 1 thread", pred, None, (pred - base1) / base1 if pred and base1 else None)
    if sock:
        add(sock, f"cd-0, {sock['threads']} threads")
    runs = sorted(d.get("runs", []), key=lambda r: (r["P"], ALGO_ORDER.get(r["algo"], 9), r.get("label", "")))
    for r in runs:
        pred = r.get("predicted", {}).get("total_s")
        pred_p = r.get("predicted_at_p_concurrency", {}).get("total_s")
        add(r, r.get("label", r["algo"]), pred, pred_p, r.get("error"), r.get("error_at_p_concurrency"))
    say("Measured (median of the steady epochs) and predicted epoch time; test accuracy at the last "
        "epoch (cd-5 runs 10 epochs more than cd-0 and 0c, so its accuracy is not like for like):")
    say("")
    out.extend(table(header, rows))
    say("")

    parts = [["P", "algo", "aggregate s meas/pred", "dense s meas/pred", "exchange wait s meas/pred",
              "allreduce s meas/pred", "RF", "peak RSS MiB/rank", "wall s"]]
    for r in runs:
        pr = r.get("predicted", {})
        if not pr:
            continue
        pair = lambda k, pk: f"{_f(r.get(k))}/{_f(pr.get(pk))}"
        parts.append([str(r["P"]), r.get("label", r["algo"]), pair("time_aggregate_s", "aggregate_s"),
                      pair("time_dense_s", "dense_s"), pair("time_exchange_wait_s", "exchange_s"),
                      pair("time_allreduce_s", "allreduce_s"), _f(r.get("replication_factor"), "{:.2f}"),
                      _f(r["peak_rss_bytes"] / 2 ** 20 if r.get("peak_rss_bytes") else None, "{:,.0f}"),
                      _f(r.get("wall_s"), "{:.0f}")])
    if len(parts) > 1:
        say("Where the time goes (measured median as metrics.jsonl records it / model, per epoch):")
        say("")
        out.extend(table(parts[0], parts[1:]))
        say("")
    for r in runs:
        if r.get("status") not in ("ok", None):
            say(f"{r.get('label', r['algo'])} at P = {r['P']}: {r['status']}"
                + (f": {r['error_text'].strip().splitlines()[-1][:300]}" if r.get("error_text") else ""))
    if d.get("skipped"):
        say("skipped: " + "; ".join(d["skipped"]))
    if d.get("validation_failures") is not None:
        say("model outside 25%: " + ("; ".join(d["validation_failures"]) or "none"))
    elif runs:
        say("bench.scaling did not finish (cut off): the table holds the runs it completed")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.real_cores", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="the --json file of python -m bench.scaling")
    p.add_argument("--out", help="also write the report here")
    args = p.parse_args(argv)
    path = Path(args.results)
    if not path.exists():
        print(f"{path}: no results (bench.scaling wrote none)")
        return 1
    text = report(json.loads(path.read_text()))
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
