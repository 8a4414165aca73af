"""distgnn verify PARTDIR [--graph GRAPH.zarr] | GRAPH.zarr: check a partition folder against its graph,
or a graph store on its own."""
from __future__ import annotations

import argparse

from distgnn.errors import DistgnnError
from distgnn.progress import set_quiet


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="check a partition folder's or a graph store's invariants and checksums",
                       description="Read every chunk of the assignment and every part (crc32c) "
                                   "and check every partition invariant against the graph store; "
                                   "given a graph store, read its every chunk and check its CSR, "
                                   "sizes and masks. Exit non-zero naming the first violation.")
    p.add_argument("partdir", metavar="PATH",
                   help="partition folder (holding assignment.zarr and part_<k>.zarr) or a graph store")
    p.add_argument("--graph", help="graph store (default: the path recorded in the assignment)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    set_quiet(args.quiet)
    path = Path(args.partdir)
    if not (path / "assignment.zarr").exists() and (path / "indptr").is_dir():
        from distgnn.data.graph_checks import verify_graph_store

        if args.graph:
            raise DistgnnError(f"--graph: only for a partition folder ({path} is a graph store)")
        print(verify_graph_store(path))
        return 0
    from distgnn.partition.part_checks import verify_partition

    print(verify_partition(args.partdir, args.graph))
    return 0
