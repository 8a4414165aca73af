"""The scaling model's network term measured over a link between emulated hosts.

    python -m bench.link [--rates 300mbit,1200mbit] [--scale 0.05] [--epochs 5] [--work DIR]
                         [--calibration OUT.json] [--json OUT.json] [--no-four-hosts]

Needs root and the emulated cluster of ``cluster/multihost.sh`` (started here with 4 hosts when it
is not running, and stopped again at the end). Every rank runs on a host of its own; Open MPI
moves rows over TCP on the emulated fabric, whose links ``multihost.sh link HOST rate R`` shapes
(tbf, both ways).

1. For each rate in ``--rates``: the MPI microbenchmark (:mod:`distgnn.scaling.microbench`) with
   one rank on mh1 and one on mh2, fitted into a network model (latency, bandwidth) of that rate.
   With the copy cost and the two-ranks-on-one-machine slowdown it measures, these make a
   calibration of their own (``--calibration``); the headline one, docs/scale-calibration.json,
   keeps its network.
2. Compute costs from cd-0 at P = 1 on this machine (1 thread), as ``bench.scaling`` fits them.
3. At each rate: cd-0, cd-5 (the default rule), cd-5 ``--fresh-copies`` and 0c, each at its
   default apply mode, cd-0 and cd-5 at ``--message-precision int8``, and cd-0 with its exchanges
   blocking (``DISTGNN_OVERLAP=off``, predicted without the model's overlap term), at P = 2 on
   two hosts (one core each): steady epoch, exchange wait and bytes
   measured beside the model's prediction under that rate's network and the measured slowdown of
   two ranks sharing the machine. The error must stay within 25%; the share of cd-0's epoch spent
   waiting on exchanges is printed (a useful check has a rate where it is 20-50%). For cd-5 the
   wait is compared with the time its bytes take on the link: a wait near that time means its
   transfers do not hide behind compute.
4. Unless ``--no-four-hosts``: cd-0 and cd-5 at P = 4 on four hosts (which share 2 cores, so only
   bytes are compared with the model).
5. What the progress thread costs where exchanges are fast: cd-0 and cd-5 at P = 2 on this one
   host (shared memory), with and without it, alternated for ``--rounds`` rounds (median epochs).

Exits 1 when a P = 2 prediction misses by more than 25% (the table is printed first).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import machine_line, run_logged, work_folder
from bench.scaling import LAYERS, HIDDEN, TOLERANCE, Variant, read_metrics, replication_law, train

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "cluster" / "multihost.sh"
CONTENDERS = (Variant("cd-0"), Variant("cd-5"), Variant("cd-5", fresh_copies=True), Variant("0c"),
              Variant("cd-0", messages="int8"), Variant("cd-5", messages="int8"))
#: cd-0 once more with its exchanges blocking (the code before docs/design.md#overlap), predicted
#: without the overlap term
BLOCKING = {"DISTGNN_OVERLAP": "off"}
#: cd-5 once more with its exchanges moved only inside MPI calls (no progress thread: the code
#: before docs/design.md#progress-thread), to show what the thread changes
WITHOUT_THREAD = {"DISTGNN_PROGRESS_THREAD": "off"}
CD0_AND_CD5 = (Variant("cd-0"), Variant("cd-5"))


def cluster(*args: str, log: Path | None = None, timeout: float = 600) -> str:
    """``cluster/multihost.sh ARGS``: its output (appended to ``log``); exits with it on failure."""
    proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)
    if log is not None:
        with open(log, "a") as f:
            f.write(f"$ multihost.sh {' '.join(args)}\n{proc.stdout}{proc.stderr}")
    if proc.returncode != 0:
        sys.exit(f"multihost.sh {' '.join(args)} failed:\n{(proc.stdout + proc.stderr)[-2000:]}")
    return proc.stdout


def set_rate(hosts: int, rate: str | None, log: Path) -> None:
    """Shape every host's fabric link to ``rate`` both ways (None: unshaped)."""
    for i in range(1, hosts + 1):
        cluster("link", f"mh{i}", "rate", rate or "off", log=log)


def on_hosts(parts: int) -> tuple:
    """The command that starts P ranks from the controller, one on each of mh1..mhP."""
    hosts = ",".join(f"mh{i}" for i in range(1, parts + 1))
    return ("bash", SCRIPT, "exec", "mhctl", "srun", "-N", parts, "-n", parts, "-w", hosts, "--mpi=pmix")


def median(records: list[dict], key: str) -> float:
    return float(np.median([r[key] for r in records]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="300mbit,1200mbit",
                        help="link rates, tc syntax, comma-separated (default 300mbit,1200mbit)")
    parser.add_argument("--scale", type=float, default=0.05, help="synth-reddit scale (default 0.05)")
    parser.add_argument("--epochs", type=int, default=5, help="steady epochs per run (default 5)")
    parser.add_argument("--repeats", type=int, default=5, help="microbenchmark repeats (default 5)")
    parser.add_argument("--max-bytes", type=int, default=8 * 4 ** 10,
                        help="the microbenchmark's largest message (default 8.4 MB)")
    parser.add_argument("--work")
    parser.add_argument("--calibration", help="write this link's calibration here (JSON)")
    parser.add_argument("--json", help="write every figure here (JSON)")
    parser.add_argument("--no-four-hosts", action="store_true", help="skip the P = 4 byte check")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of step 5 (default 2; 0 skips it)")
    args = parser.parse_args(argv)
    from dataclasses import replace

    import zarr

    from distgnn.data.fetch import fetch
    from distgnn.data.graph_store import GraphStore
    from distgnn.scaling.costs import GraphShape, ModelShape, fit_costs, measure_row_cost
    from distgnn.scaling.model import predict_epoch
    from distgnn.scaling.network import fitted_network

    rates = [r.strip() for r in args.rates.split(",") if r.strip()]
    work = work_folder(args.work, "bench-link-")
    python = sys.executable
    hosts = 2 if args.no_four_hosts else 4
    clog = work / "cluster.log"
    was_running = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True).returncode == 0
    cluster("start", "--hosts", str(hosts), log=clog)
    out: dict = {"machine": machine_line(1), "options": vars(args), "rates": {}, "runs": []}

    def say(line: str = "") -> None:
        print(line, flush=True)

    def dump() -> None:
        if args.json:
            tmp = Path(args.json + ".tmp")
            tmp.write_text(json.dumps(out, indent=1, default=str) + "\n")
            tmp.replace(args.json)

    say(out["machine"])
    failures = []
    try:
        graph_path = fetch("synth-reddit", root=work / "data", scale=args.scale)
        attrs = dict(zarr.open_group(str(graph_path), mode="r").attrs)
        graph = GraphShape(int(attrs["num_nodes"]), int(attrs["num_edges"]), int(attrs["feat_dim"]),
                           int(attrs["num_classes"]), name=graph_path.parent.name)
        # the law needs RF at two P >= 2: P = 4 is assigned even where no run uses its parts
        built = {1, 2} | ({4} if hosts >= 4 else set())
        law, rfs, dirs = replication_law(python, graph_path, work, [1, 2, 4], build=built)
        say(f"{graph.name}: {graph.num_nodes:,} vertices, {graph.num_edges:,} edges; libra RF "
            + ", ".join(f"P={p}: {r:.3f}" for p, r in rfs.items()))

        # 1. the network at each rate
        nets = {}
        for rate in rates:
            set_rate(hosts, rate, clog)
            mb_path = work / f"microbench-{rate}.json"
            run_logged(*on_hosts(2), python, "-m", "distgnn.scaling.microbench", mb_path, "--repeats",
                       args.repeats, "--max-bytes", args.max_bytes, log=work / f"microbench-{rate}.log")
            mb = json.loads(mb_path.read_text())
            # the token bucket passes its burst at line rate: let the large messages set the slope
            net = fitted_network(mb["pingpong"], mb["alltoall"], mb["allreduce"], relative=False)
            net.source = f"measured between emulated hosts over a {rate} link (tbf), absolute fit"
            nets[rate] = (net, mb)
            out["rates"][rate] = {"network": net.to_dict(), "microbench": mb}
            say(f"link {rate}: Alltoallv latency {net.latency * 1e6:.0f} us, bandwidth "
                f"{net.bandwidth * 8 / 1e6:.0f} Mbit/s; Allreduce {net.allreduce_latency * 1e6:.0f} us, "
                f"{net.allreduce_bandwidth * 8 / 1e6:.0f} Mbit/s; two ranks computing at once: "
                f"aggregation {mb['concurrency_agg']:.2f}x, dense {mb['concurrency_dense']:.2f}x")
            dump()
        set_rate(hosts, None, clog)

        # 2. compute costs from P = 1 on this machine
        model = ModelShape(LAYERS, HIDDEN)
        p1 = train(python, dirs[1], "cd-0", 1, args.epochs, work / "runs" / "cd-0-P1", work / "train-P1.log")
        row_cost, _, _ = measure_row_cost(*GraphStore.open(graph_path).csr(), width=HIDDEN, threads=1)
        mb0 = nets[rates[0]][1]
        costs = replace(fit_costs(p1, graph, model, mb0["copy_s_per_float"], threads=1,
                                  concurrency_agg=mb0["concurrency_agg"],
                                  concurrency_dense=mb0["concurrency_dense"], agg_row_per_edge=row_cost),
                        pack_s_per_float=mb0["pack_s_per_float"],
                        pack_into_s_per_float=mb0["pack_into_s_per_float"])
        out["costs"] = costs.to_dict()
        say(f"P = 1, 1 thread: epoch {median(p1, 'epoch_time_s'):.3f} s (aggregation "
            f"{median(p1, 'time_aggregate_s'):.3f}, dense {median(p1, 'time_dense_s'):.3f})")
        say()

        # 3. P = 2 on two hosts at each rate
        say("| link | algo | apply | epoch s meas / pred | error | exchange wait s meas / pred | "
            "wait / epoch | allreduce s meas / pred | bytes/epoch/rank MB meas / pred | "
            "link time of those bytes s |")
        say("|---|---|---|---|---|---|---|---|---|---|")
        for rate in rates:
            net, mb = nets[rate]
            set_rate(hosts, rate, clog)
            rate_costs = replace(costs, concurrency_agg=mb["concurrency_agg"],
                                 concurrency_dense=mb["concurrency_dense"])
            cases = ([(c, None, "") for c in CONTENDERS]
                     + [(Variant("cd-5"), WITHOUT_THREAD, " (no progress thread)"),
                        (Variant("cd-0"), BLOCKING, " (blocking)")])
            for v, env, suffix in cases:
                name = v.name + suffix.replace(" (", "-").rstrip(")").replace(" ", "-")
                run = work / "runs" / f"{name}-P2-{rate}"
                recs = train(python, dirs[2], v.algo, 2, args.epochs, run, work / f"train-{name}-P2-{rate}.log",
                             *v.options(), env=env, launcher=on_hosts(2))
                pred = predict_epoch(2, v.algo, graph, model, rate_costs, law, net, rf=rfs[2],
                                     ranks_per_node=2, overlap=env is not BLOCKING,
                                     **v.model_options())
                meas, wait = median(recs, "epoch_time_s"), median(recs, "time_exchange_wait_s")
                sent = (median(recs, "bytes_forward") + median(recs, "bytes_backward")) / 2
                predicted_sent = pred.bytes_forward + pred.bytes_backward
                err = (pred.total_s - meas) / meas
                # the link carries both directions at once: one rank's bytes take sent / bandwidth
                link_s = sent / net.bandwidth
                label = " ".join([v.algo] + v.options()) + suffix
                say(f"| {rate} | {label} | {pred.apply} | {meas:.3f} / {pred.total_s:.3f} | {100 * err:+.1f}% | "
                    f"{wait:.3f} / {pred.exchange_s:.3f} | {100 * wait / meas:.0f}% | "
                    f"{median(recs, 'time_allreduce_s'):.3f} / {pred.allreduce_s:.3f} | {sent / 1e6:.2f} / {predicted_sent / 1e6:.2f} | {link_s:.3f} |")
                out["runs"].append({"rate": rate, "P": 2, "label": label, "algo": v.algo, "apply": pred.apply,
                                    "measured_s": meas, "wait_s": wait, "bytes_per_rank": sent,
                                    "progress_thread": env is not WITHOUT_THREAD,
                                    "overlap": env is not BLOCKING, "allreduce_s": median(recs, "time_allreduce_s"),
                                    "link_s": link_s, "error": err,
                                    "predicted": pred.__dict__ | {"total_s": pred.total_s},
                                    "epoch_times_s": [r["epoch_time_s"] for r in read_metrics(run)],
                                    "waits_s": [r["time_exchange_wait_s"] for r in read_metrics(run)]})
                dump()
                if abs(err) > TOLERANCE:
                    failures.append(f"{label} over {rate}: predicted {pred.total_s:.3f} s, measured {meas:.3f} s")
        set_rate(hosts, None, clog)
        say()

        # 4. P = 4 on four hosts: bytes only
        if hosts >= 4:
            say("| P = 4, four hosts | bytes forward / rank MB meas / pred | backward meas / pred |")
            say("|---|---|---|")
            for v in CD0_AND_CD5:
                run = work / "runs" / f"{v.name}-P4"
                recs = train(python, dirs[4], v.algo, 4, args.epochs, run, work / f"train-{v.name}-P4.log",
                             *v.options(), launcher=on_hosts(4))
                pred = predict_epoch(4, v.algo, graph, model, costs, law, nets[rates[0]][0], rf=rfs[4],
                                     ranks_per_node=4, **v.model_options())
                fwd, bwd = median(recs, "bytes_forward") / 4, median(recs, "bytes_backward") / 4
                say(f"| {' '.join([v.algo] + v.options())} | {fwd / 1e6:.3f} / {pred.bytes_forward / 1e6:.3f} | "
                    f"{bwd / 1e6:.3f} / {pred.bytes_backward / 1e6:.3f} |")
                out["runs"].append({"P": 4, "label": " ".join([v.algo] + v.options()), "bytes_forward": fwd,
                                    "bytes_backward": bwd, "predicted_forward": pred.bytes_forward,
                                    "predicted_backward": pred.bytes_backward})
                dump()
        # 5. the thread's cost on one host
        if args.rounds:
            say()
            say("| one host, P = 2 | round | epoch s with the progress thread | without |")
            say("|---|---|---|---|")
        for round_ in range(args.rounds):
            for v in CD0_AND_CD5:
                times = {}
                for thread in ((True, False) if round_ % 2 == 0 else (False, True)):
                    name = f"{v.name}-P2-local-{'thread' if thread else 'no-thread'}-{round_}"
                    recs = train(python, dirs[2], v.algo, 2, args.epochs, work / "runs" / name,
                                 work / f"train-{name}.log", *v.options(),
                                 env=None if thread else WITHOUT_THREAD)
                    times[thread] = median(recs, "epoch_time_s")
                say(f"| {' '.join([v.algo] + v.options())} | {round_ + 1} | {times[True]:.3f} | {times[False]:.3f} |")
                out["runs"].append({"P": 2, "host": "one", "label": v.name, "round": round_ + 1,
                                    "with_thread_s": times[True], "without_thread_s": times[False]})
                dump()
        if args.calibration:
            Path(args.calibration).write_text(json.dumps({
                "graph": graph.__dict__, "costs": costs.to_dict(), "replication": law.to_dict(),
                "networks": {rate: n.to_dict() for rate, (n, _) in nets.items()},
                "network": nets[rates[0]][0].to_dict(),
                "source": f"bench.link over emulated hosts, {time.strftime('%Y-%m-%d')}"}, indent=1) + "\n")
    finally:
        try:
            set_rate(hosts, None, clog)
        finally:
            if not was_running:
                cluster("stop", log=clog)
    dump()
    if failures:
        say("off by more than 25%: " + "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
