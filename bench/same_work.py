"""The same `distgnn` commands under two checkouts of distgnn, alternated: is one code slower?

    python -m bench.same_work --python old=/path/to/old/.venv/bin/python \\
                              --python new=.venv/bin/python [--rounds 3] [--work DIR]

Each checkout fetches `synth-reddit --scale 0.01` and partitions it (Libra, P = 1 and 2) with its
own code, into a folder of its own (the store format may differ between them). Then, for
``--rounds`` rounds, each of the runs below under each checkout in turn (the order flips every
round): the wall time of the whole command (start-up included, as a test sees it) and the median
epoch of its ``metrics.jsonl``. The minimum over rounds is printed, with the ratio of the second
checkout to the first. ``DISTGNN_TILES=off``, one thread per rank, 5 epochs: the fixed runs of
bench.fixed_losses (cd-0, cd-5, 0c, GAT cd-5 at P = 2) and cd-0 in one process.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from functools import cache
from pathlib import Path

import numpy as np

from bench.common import MPI_ENV, machine_line, work_folder

#: stands for ``--cdr-rule delayed`` where a checkout has that option, else for nothing: the rule
#: cd-r had before the option existed
FIRST_RULE = "<first rule>"
#: name -> (ranks, distgnn train options)
RUNS: dict[str, tuple[int, list[str]]] = {
    "cd-0 P=1": (1, ["--algo", "cd-0"]),
    "cd-0 P=2": (2, ["--algo", "cd-0"]),
    "cd-5 P=2, each one's default rule": (2, ["--algo", "cd-5"]),
    "cd-5 P=2, the first rule": (2, ["--algo", "cd-5", FIRST_RULE]),
    "0c P=2": (2, ["--algo", "0c"]),
    "gat cd-5 P=2": (2, ["--algo", "cd-5", "--model", "gat", "--heads", "2"]),
}


def prepare(python: str, folder: Path) -> dict[int, Path]:
    """Fetch and partition with ``python``'s distgnn into ``folder``: {P: partition folder}."""
    env = {**os.environ, **MPI_ENV}
    graph = folder / "data" / "synth-reddit-x0.01" / "graph.zarr"
    if not graph.exists():
        subprocess.run([python, "-m", "distgnn", "fetch", "synth-reddit", "--scale", "0.01", "--root",
                        str(folder / "data")], check=True, env=env, capture_output=True)
    parts = {}
    for p in (1, 2):
        out = folder / f"libra-{p}"
        if not (out / f"part_{p - 1}.zarr").exists():
            subprocess.run([python, "-m", "distgnn", "partition", str(graph), "--parts", str(p), "--out",
                            str(out), "--quiet"], check=True, env=env, capture_output=True)
        parts[p] = out
    return parts


@cache
def has_cdr_rule(python: str) -> bool:
    """Whether this checkout's ``distgnn train`` has ``--cdr-rule``."""
    help_text = subprocess.run([python, "-m", "distgnn", "train", "--help"], capture_output=True, text=True,
                               env={**os.environ, **MPI_ENV}).stdout
    return "--cdr-rule" in help_text


def run_once(python: str, parts: dict[int, Path], ranks: int, options: list[str], out: Path) -> tuple[float, float]:
    """(wall s of the command, median epoch s) of one training run."""
    env = {**os.environ, **MPI_ENV, "DISTGNN_TILES": "off"}
    rule = ["--cdr-rule", "delayed"] if has_cdr_rule(python) else []
    options = [o for opt in options for o in (rule if opt == FIRST_RULE else [opt])]
    cmd = [python, "-m", "distgnn", "train", str(parts[ranks]), *options, "--epochs", "5", "--threads", "1",
           "--out", str(out), "--quiet"]
    if ranks > 1:
        cmd = ["mpiexec", "--oversubscribe", "-n", str(ranks), *cmd]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    epochs = [json.loads(l)["epoch_time_s"] for l in (out / "metrics.jsonl").read_text().splitlines()]
    return wall, float(np.median(epochs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", action="append", required=True, metavar="NAME=PATH",
                        help="a checkout's interpreter (its venv has that checkout installed); twice")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work")
    args = parser.parse_args(argv)
    sides = dict(s.split("=", 1) for s in args.python)
    if len(sides) != 2:
        parser.error("--python: give exactly two, NAME=PATH each")
    work = work_folder(args.work, "bench-same-work-")
    print(machine_line(1), flush=True)
    parts = {name: prepare(py, work / name) for name, py in sides.items()}
    names = list(sides)
    best: dict[tuple[str, str], list[float]] = {}
    for round_ in range(args.rounds):
        order = names if round_ % 2 == 0 else names[::-1]
        for run, (ranks, options) in RUNS.items():
            for name in order:
                out = work / name / "runs" / f"{run.replace(' ', '-')}-{round_}"
                wall, epoch = run_once(sides[name], parts[name], ranks, options, out)
                old = best.get((run, name), [float("inf"), float("inf")])
                best[(run, name)] = [min(old[0], wall), min(old[1], epoch)]
        print(f"round {round_ + 1} done, load average {os.getloadavg()[0]:.1f}", flush=True)
    a, b = names
    print(f"\n| run | wall s {a} | wall s {b} | {b} / {a} | epoch s {a} | epoch s {b} | {b} / {a} |")
    print("|---|---|---|---|---|---|---|")
    for run in RUNS:
        (wa, ea), (wb, eb) = best[(run, a)], best[(run, b)]
        print(f"| {run} | {wa:.2f} | {wb:.2f} | {wb / wa:.3f} | {ea:.4f} | {eb:.4f} | {eb / ea:.3f} |")
    total_a = sum(best[(r, a)][0] for r in RUNS)
    total_b = sum(best[(r, b)][0] for r in RUNS)
    print(f"\nall runs' wall time: {a} {total_a:.1f} s, {b} {total_b:.1f} s, {b} / {a} = {total_b / total_a:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
