"""One epoch of each model of ``distgnn train --model`` against DGL 1.1.3 and PyG (``bench.epoch``
with the model's lines: ``distgnn train`` itself, DGL as users run it and on 2 MB pages, PyG).

    python -m bench.models [--graph R24] [--feat 602] [--threads 2] [--rounds 2] [--models gat gcn]

The shapes: a 2-layer GAT of 8 heads x 8 (dropout 0.6 on
features and attention) and a 3-layer GCN of hidden 256 (dropout 0.5). Each model's table is
``bench.epoch``'s own (its process per line, alternating rounds, the fastest epoch kept; a peer
that fails, e.g. out of memory under ``--mem-limit-gb``, is reported as such).
"""
from __future__ import annotations

import argparse
import subprocess
import sys

SHAPES = {
    "gat": ["--layers", "2", "--hidden", "8", "--heads", "8", "--dropout", "0.6"],
    "gcn": ["--layers", "3", "--hidden", "256", "--dropout", "0.5"],
    "gin": ["--layers", "3", "--hidden", "256", "--dropout", "0.5"],
}
LINES = ["ours, distgnn train", "DGL 1.1.3", "DGL 1.1.3, 2 MB pages", "PyG"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=sorted(SHAPES), default=["gat", "gcn"])
    parser.add_argument("--graph", default="R24")
    parser.add_argument("--feat", default="602")
    parser.add_argument("--threads", default="2")
    parser.add_argument("--rounds", default="2")
    parser.add_argument("--epochs", default="2")
    parser.add_argument("--mem-limit-gb", default="20")
    args = parser.parse_args()
    for model in args.models:
        print(f"## {model}\n", flush=True)
        subprocess.run([sys.executable, "-m", "bench.epoch", "--model", model, *SHAPES[model],
                        "--graph", args.graph, "--feat", args.feat, "--threads", args.threads,
                        "--rounds", args.rounds, "--epochs", args.epochs,
                        "--mem-limit-gb", args.mem_limit_gb, "--libs", *LINES], check=True)
        print(flush=True)


if __name__ == "__main__":
    main()
