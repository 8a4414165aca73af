"""How many leaf rows ``--cdr-rule recompute`` recomputes, and which share of the leaves' local
out-edges they cover, per ``--recompute-budget`` (docs/delayed-updates.md#recomputed-copies).

A leaf row (a replica that is not its vertex's root) is a *source* when it has local out-edges:
layer 1 reads it, so the rule either recomputes it or reads a delayed copy. Under budget B each
part recomputes its floor(B x roots) sources with the most local out-edges
(:func:`distgnn.exchange.recompute.choose_recomputed`'s order); *edges covered* is the share of
all leaf out-edges that start at a recomputed row, over every part.

    python -m bench.recompute_cover PARTDIR [PARTDIR ...] [--budgets 0.5 1]
"""
from __future__ import annotations

import argparse
import math

import torch

from distgnn.partition.part_loader import load_partition, read_num_parts


def cover(partition_dir: str, budgets: list[float]) -> dict:
    """{"roots", "rows", "sources", "covered": {B: share of leaf out-edges}} over every part."""
    roots = rows = sources = leaf_edges = 0
    covered = dict.fromkeys(budgets, 0)
    for k in range(read_num_parts(partition_dir)):
        part = load_partition(partition_dir, k)
        n_roots = int(part.is_root.sum())
        out_degree = (part.t_indptr[1:] - part.t_indptr[:-1])[~part.is_root]
        degrees = out_degree[out_degree > 0]
        # stable descending order: equal degrees keep their local order, as the rule breaks ties
        degrees = degrees[torch.argsort(-degrees, stable=True)]
        roots += n_roots
        rows += len(part.is_root)
        sources += len(degrees)
        leaf_edges += int(degrees.sum())
        for b in budgets:
            covered[b] += int(degrees[:math.floor(b * n_roots)].sum())
    return {"roots": roots, "rows": rows, "sources": sources,
            "covered": {b: c / leaf_edges for b, c in covered.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("partitions", nargs="+", metavar="PARTDIR")
    parser.add_argument("--budgets", type=float, nargs="+", default=[0.5, 1.0])
    args = parser.parse_args(argv)
    print("| partition | RF | roots | sources (x roots) | "
          + " | ".join(f"B = {b:g}: edges covered" for b in args.budgets) + " | all sources |")
    print("|---" * (4 + len(args.budgets) + 1) + "|")
    for folder in args.partitions:
        c = cover(folder, args.budgets)
        print(f"| {folder} | {c['rows'] / c['roots']:.2f} | {c['roots']:,} | {c['sources']:,} "
              f"({c['sources'] / c['roots']:.2f}x) | "
              + " | ".join(f"{100 * c['covered'][b]:.1f}%" for b in args.budgets) + " | 100% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
