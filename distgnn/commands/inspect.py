"""distgnn inspect PATH: a readable summary of a graph store (later: partitions, runs)."""
from __future__ import annotations

import argparse
from pathlib import Path

from distgnn.errors import DistgnnError
from distgnn.options import existing_path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="summarise a graph store or partition folder")
    p.add_argument("path", help="a graph.zarr store or a partition folder")
    p.set_defaults(func=run)


def describe(path: Path) -> str:
    if (path / "indptr").exists() and (path / "feat").exists():
        from distgnn.data.graph_summary import describe_graph
        from distgnn.data.graph_store import GraphStore
        return describe_graph(GraphStore.open(path))
    if (path / "assignment.zarr").exists():
        from distgnn.partition.part_summary import describe_partition
        return describe_partition(path)
    if (path / "graph.zarr").exists():
        return describe(path / "graph.zarr")
    raise DistgnnError(f"{path}: not a graph store or partition folder")


def run(args: argparse.Namespace) -> int:
    print(describe(existing_path(args.path)))
    return 0
