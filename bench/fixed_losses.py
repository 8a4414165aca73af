"""Losses of a fixed set of short runs, to show that a change of structure changes no arithmetic.

    python -m bench.fixed_losses --out before.json            # on the old code
    python -m bench.fixed_losses --out after.json --compare before.json

The runs: synth-reddit ``--scale 0.01``, Libra into P = 2 (``--parts``), 5 epochs, one thread per
rank, ``DISTGNN_TILES=off`` (the tiling choice is timed, so it could change the rounding), for
cd-0, cd-5, 0c and GAT cd-5 (``--model gat --heads 2``) under their default apply mode, plus the
replicas mode's cd-5 and cd-5-orig, cd-5 ``--fresh-copies``, and shorter delays (cd-2, cd-3) with
GAT, GCN, GIN, bf16 and without the input cache, whose deliveries start within a few epochs (run
``--epochs 12`` to see every cd-r rule deliver), and the other cd-r rules at the root (the
retired ones through ``python -m bench.retired_rules``, which registers them).
``--partition DIR`` trains on an existing partition folder instead (e.g. a directed graph, whose
leaves often lack local in- or out-edges). Every epoch's loss is written with
``repr`` precision; ``--compare`` prints each run's verdict and exits 1 unless every loss is equal
bit for bit.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: name -> the ``distgnn train`` options of that run
RUNS: dict[str, list[str]] = {
    "cd-0": ["--algo", "cd-0"],
    "cd-5": ["--algo", "cd-5"],
    "0c": ["--algo", "0c"],
    "gat-cd-5": ["--algo", "cd-5", "--model", "gat", "--heads", "2"],
    "gat-cd-5-stale": ["--algo", "cd-5", "--model", "gat", "--heads", "2", "--no-fresh-copies"],
    "cd-5-prompt": ["--algo", "cd-5", "--cdr-rule", "prompt"],
    "cd-5-replicas": ["--algo", "cd-5", "--apply", "replicas"],
    "cd-5-orig": ["--algo", "cd-5-orig"],
    "cd-5-fresh": ["--algo", "cd-5", "--fresh-copies"],
    "gat-cd-0": ["--algo", "cd-0", "--model", "gat", "--heads", "2"],
    "cd-2": ["--algo", "cd-2"],
    "cd-2-replicas": ["--algo", "cd-2", "--apply", "replicas"],
    "gat-cd-2-fresh": ["--algo", "cd-2", "--model", "gat", "--heads", "2", "--fresh-copies"],
    "gcn-cd-3": ["--algo", "cd-3", "--model", "gcn"],
    "gcn-cd-3-replicas": ["--algo", "cd-3", "--model", "gcn", "--apply", "replicas"],
    "gcn-0c": ["--algo", "0c", "--model", "gcn"],
    "gin-cd-2": ["--algo", "cd-2", "--model", "gin"],
    "cd-3-bf16": ["--algo", "cd-3", "--precision", "bf16"],
    "cd-2-no-input-cache": ["--algo", "cd-2", "--no-input-cache"],
    "cd-3-delayed": ["--algo", "cd-3", "--cdr-rule", "delayed"],
    "cd-3-warm": ["--algo", "cd-3", "--cdr-rule", "warm"],
    "cd-2-present": ["--algo", "cd-2", "--cdr-rule", "present"],
    "cd-2-warm-recompute-half": ["--algo", "cd-2", "--cdr-rule", "warm-recompute",
                                 "--recompute-budget", "0.5"],
    "gcn-cd-2-delayed": ["--algo", "cd-2", "--model", "gcn", "--cdr-rule", "delayed"],
}


REPO = Path(__file__).resolve().parents[1]


def run(cmd: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")


def losses(work: Path, parts: int, epochs: int, partdir: Path | None = None
           ) -> dict[str, list[float]]:
    env = {**os.environ, "DISTGNN_TILES": "off", "OMPI_ALLOW_RUN_AS_ROOT": "1",
           "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMP_NUM_THREADS": "1"}
    exe = [sys.executable, "-m", "distgnn"]
    if partdir is None:
        run(exe + ["fetch", "synth-reddit", "--scale", "0.01", "--root", str(work), "--name", "g"],
            env)
        partdir = work / f"libra-{parts}"
        run(exe + ["partition", str(work / "g" / "graph.zarr"), "--parts", str(parts), "--method",
                   "libra", "--out", str(partdir)], env)
    else:
        from distgnn.partition.part_loader import read_num_parts

        parts = read_num_parts(partdir)
    from bench.retired_rules import NAMES as RETIRED_NAMES

    retired = [sys.executable, "-m", "bench.retired_rules"]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    out: dict[str, list[float]] = {}
    for name, options in RUNS.items():
        run_dir = work / "runs" / name
        rule = options[options.index("--cdr-rule") + 1] if "--cdr-rule" in options else None
        run(["mpiexec", "--oversubscribe", "-n", str(parts)]
            + (retired if rule in RETIRED_NAMES else exe)
            + ["train", str(partdir), "--epochs", str(epochs), "--threads", "1", "--quiet",
               "--out", str(run_dir)] + options, env)
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        out[name] = [r["loss"] for r in records]
        print(f"{name}: {out[name]}", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON file for {run: [loss per epoch]}")
    parser.add_argument("--compare", help="an earlier --out file: exit 1 unless every loss is equal")
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--partition", type=Path,
                        help="an existing partition folder to train on instead (its P is used)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="distgnn-fixed-") as tmp:
        got = losses(Path(tmp), args.parts, args.epochs, args.partition)
    Path(args.out).write_text(json.dumps(got, indent=1) + "\n")
    if not args.compare:
        return 0
    before = json.loads(Path(args.compare).read_text())
    same = True
    for name in RUNS:
        equal = before.get(name) == got[name]
        same &= equal
        print(f"{name}: {'equal bit for bit' if equal else 'DIFFERENT'}"
              + ("" if equal else f" (before {before.get(name)}, after {got[name]})"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
