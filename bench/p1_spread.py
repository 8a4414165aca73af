"""How far apart the demo's P = 1 rows read when nothing differs: cd-0, 0c and cd-5 compute the same
thing on one part, so the spread of their median steady epochs (the report's figure) is this
machine's run-to-run noise. Rounds alternate the three; each run is launched as the demo launches
it (``--via launch``: ``distgnn launch --executor local``) or as ``distgnn train`` itself.

    python -m bench.p1_spread PARTDIR [--rounds 5] [--epochs 20] [--via launch|train] [--work DIR]

PARTDIR: a one-part partition (the demo's: ``distgnn partition data/synth-reddit-x0.01/graph.zarr
--parts 1``). The options of every run are the demo config's (hidden 64, 2 layers, lr 0.01,
dropout 0.5, evaluation every 2 epochs).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ALGOS = ("cd-0", "0c", "cd-5")
DEMO_OPTIONS = ["--hidden", "64", "--layers", "2", "--lr", "0.01", "--dropout", "0.5",
                "--eval-every", "2", "--checkpoint-every", "10"]


def one_run(partdir: str, algo: str, run: Path, epochs: int, via: str) -> None:
    if via == "launch":
        argv = ["distgnn", "launch", partdir, "--algo", algo, "--executor", "local", "--preset", "local",
                "--log-dir", str(run.parent / f"{run.name}-logs"), "--out", str(run)]
    else:
        argv = ["distgnn", "train", partdir, "--algo", algo, "--out", str(run), "--quiet"]
    proc = subprocess.run([*argv, "--epochs", str(epochs), *DEMO_OPTIONS], capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("partdir")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--via", choices=["launch", "train"], default="launch")
    parser.add_argument("--algos", default=",".join(ALGOS),
                        help="comma-separated runs of a round, repeats allowed (default: %(default)s)")
    parser.add_argument("--work", help="run folders here (default: a new temp folder)")
    args = parser.parse_args(argv)
    algos = args.algos.split(",")
    labels = [f"{a}#{algos[:i].count(a) + 1}" if algos.count(a) > 1 else a for i, a in enumerate(algos)]
    from distgnn.report.load import load_runs
    from distgnn.report.table import epoch_split

    work = Path(args.work or tempfile.mkdtemp(prefix="p1-spread-"))
    spreads = []
    for r in range(args.rounds):
        median = {}
        for algo, label in zip(algos, labels):  # a folder each: load_runs refuses two of one key
            one_run(args.partdir, algo, work / f"round{r}" / label / "run", args.epochs, args.via)
            (run,) = load_runs(work / f"round{r}" / label)
            median[label] = 1000 * epoch_split(run)["median_epoch_time_s"]
        spread = 100 * (max(median.values()) / min(median.values()) - 1)
        spreads.append(spread)
        load = Path("/proc/loadavg").read_text().split()[0]
        print(f"round {r}: " + " / ".join(f"{a} {v:.2f}" for a, v in median.items())
              + f" ms; spread {spread:.1f}%  (load {load})", flush=True)
    print(f"spread over {args.rounds} rounds ({args.via}): median {sorted(spreads)[len(spreads) // 2]:.1f}%, "
          f"worst {max(spreads):.1f}%, rounds within 10%: {sum(s <= 10 for s in spreads)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
