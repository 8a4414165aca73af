"""Message precision where bytes cost time: cd-0 and cd-5 at every ``--message-precision`` width
over a shaped link between emulated hosts, and what packing costs on one host.

    python -m bench.link_widths [--rates 400mbit,1gbit] [--scale 0.05] [--epochs 5] [--rounds 2]
                                [--widths fp32 bf16 int8 int4 int2] [--work DIR] [--json OUT.json]

Needs root and the emulated cluster of ``cluster/multihost.sh`` (started with 2 hosts when it is
not running, stopped again at the end), except with ``--rates ''``, which runs step 2 alone. The
synth-reddit twin is cut by Libra into 2 parts; the model is the scaling benchmark's (3-layer
GraphSAGE, hidden 256).

1. At each rate of ``--rates`` (both hosts' links shaped, both ways): cd-0 and cd-5 at P = 2, one
   rank on each host, for every width, and cd-0 at float32 and int8 once more with its exchanges
   blocking (``DISTGNN_OVERLAP=off``: the code before docs/design.md#overlap); ``--rounds`` rounds
   with the order alternated. Printed: median steady epoch, exchange wait and bytes per epoch per
   rank (forward + backward), each against float32 (overlapped) on the same algorithm and link.
2. On this one host (shared memory, 2 ranks): the same runs, so the cost of packing shows where
   bytes are nearly free (each width's epoch against float32's).

Exits 1 when, over the slowest link, cd-0 int8's epoch is above 0.6x of cd-0 float32's blocking
epoch, or cd-0 float32's exchange wait with the overlap above 0.8x of its blocking wait (the
tables are printed first).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from bench.common import machine_line, run_logged, work_folder
from bench.link import BLOCKING, SCRIPT, cluster, on_hosts, set_rate
from bench.scaling import train

WIDTHS = ("fp32", "bf16", "int8", "int4", "int2")
ALGOS = ("cd-0", "cd-5")
#: cd-0 int8's epoch over the slowest link, at most this fraction of cd-0 float32's (blocking)
TARGET_INT8 = 0.6
#: cd-0 float32's exchange wait with the overlap, at most this fraction of the blocking wait
TARGET_OVERLAP = 0.8


def steady(records: list[dict]) -> dict[str, float]:
    """Median steady epoch, exchange wait and training bytes per epoch (this rank's, rank 0)."""
    med = lambda key: float(np.median([r[key] for r in records]))  # noqa: E731
    return {"epoch_s": med("epoch_time_s"), "wait_s": med("time_exchange_wait_s"),
            "bytes": med("bytes_forward") + med("bytes_backward")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="400mbit,1gbit")
    parser.add_argument("--scale", type=float, default=0.05, help="synth-reddit scale (default 0.05)")
    parser.add_argument("--epochs", type=int, default=5, help="steady epochs per run (default 5)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per case (default 2)")
    parser.add_argument("--widths", nargs="+", default=list(WIDTHS), choices=WIDTHS)
    parser.add_argument("--no-one-host", action="store_true", help="skip step 2")
    parser.add_argument("--work")
    parser.add_argument("--json", help="write every figure here (JSON)")
    args = parser.parse_args(argv)
    if not args.rates.strip(", ") and args.no_one_host:
        parser.error("--rates '' with --no-one-host measures nothing")
    from distgnn.data.fetch import fetch

    rates = [r.strip() for r in args.rates.split(",") if r.strip()]
    work = work_folder(args.work, "bench-link-widths-")
    python = sys.executable
    clog = work / "cluster.log"
    # the emulated hosts only for the links (`--rates ''` measures the one host alone, no root)
    was_running = not rates or subprocess.run(["bash", str(SCRIPT), "status"],
                                              capture_output=True).returncode == 0
    if rates:
        cluster("start", "--hosts", "2", log=clog)
    out: dict = {"machine": machine_line(1), "options": vars(args), "runs": []}
    print(out["machine"], flush=True)
    try:
        graph = fetch("synth-reddit", root=work / "data", scale=args.scale)
        parts = work / "libra-2"
        if not parts.exists():
            run_logged(python, "-m", "distgnn", "partition", graph, "--parts", 2, "--method", "libra",
                       "--out", parts, "--quiet", log=work / "partition.log")
        places = [(rate, on_hosts(2)) for rate in rates]
        if not args.no_one_host:
            places.append(("one host", None))
        for place, launcher in places:
            if launcher is not None:
                set_rate(2, place, clog)
            figures: dict[str, list[dict]] = {}
            cases = [(algo, width, False) for algo in ALGOS for width in args.widths]
            cases += [("cd-0", width, True) for width in ("fp32", "int8") if width in args.widths]
            for round_ in range(args.rounds):
                for algo, width, blocking in (cases if round_ % 2 == 0 else list(reversed(cases))):
                    name = f"{algo} {width}" + (" blocking" if blocking else "")
                    tag = f"{place.replace(' ', '-')}-{name.replace(' ', '-')}-r{round_}"
                    records = train(python, parts, algo, 2, args.epochs, work / "runs" / tag,
                                    work / f"{tag}.log", "--message-precision", width,
                                    launcher=launcher, env=BLOCKING if blocking else None)
                    fig = steady(records)
                    figures.setdefault(name, []).append(fig)
                    out["runs"].append({"place": place, "case": name, "round": round_, **fig})
            if launcher is not None:
                set_rate(2, None, clog)
            out.setdefault("tables", {})[place] = table = {}
            print(f"\n## {place}: P = 2, 3-layer GraphSAGE 256, synth-reddit x{args.scale:g}, "
                  f"median of {args.rounds} rounds\n")
            print("| algo | width | epoch s | vs fp32 | exchange wait s | vs fp32 | MB/epoch/rank | vs fp32 |")
            print("|---|---|---|---|---|---|---|---|")
            for name in figures:
                m = {k: float(np.median([f[k] for f in figures[name]])) for k in ("epoch_s", "wait_s", "bytes")}
                table[name] = m
            for name, m in table.items():
                algo, width = name.split()[:2]
                base = table.get(f"{algo} fp32")
                rel = (lambda k: f"{m[k] / base[k]:.3f}" if base and base[k] else "-")  # noqa: E731
                print(f"| {algo} | {name.split(' ', 1)[1]} | {m['epoch_s']:.4f} | {rel('epoch_s')} | "
                      f"{m['wait_s']:.4f} | {rel('wait_s')} | {m['bytes'] / 1e6:.2f} | {rel('bytes')} |",
                      flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    finally:
        if rates:
            set_rate(2, None, clog)
        if not was_running:
            cluster("stop", log=clog)
    slowest = out["tables"].get(rates[0], {}) if rates else {}
    failed = False
    if {"cd-0 int8", "cd-0 fp32 blocking"} <= slowest.keys():
        ratio = slowest["cd-0 int8"]["epoch_s"] / slowest["cd-0 fp32 blocking"]["epoch_s"]
        print(f"\ncd-0 int8 epoch / cd-0 fp32 blocking epoch over {rates[0]}: {ratio:.3f} "
              f"(target <= {TARGET_INT8})")
        failed |= ratio > TARGET_INT8
    if {"cd-0 fp32", "cd-0 fp32 blocking"} <= slowest.keys():
        ratio = slowest["cd-0 fp32"]["wait_s"] / slowest["cd-0 fp32 blocking"]["wait_s"]
        print(f"cd-0 fp32 exchange wait overlapped / blocking over {rates[0]}: {ratio:.3f} "
              f"(target <= {TARGET_OVERLAP})")
        failed |= ratio > TARGET_OVERLAP
    if failed:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
