"""distgnn verify PARTDIR [--graph GRAPH.zarr]: check a partition folder against its graph."""
from __future__ import annotations

import argparse

from distgnn.progress import set_quiet


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="check a partition folder's invariants and checksums",
                       description="Read every chunk of the assignment and every part (crc32c) "
                                   "and check every partition invariant against the graph store; "
                                   "exit non-zero naming the first violation.")
    p.add_argument("partdir", help="partition folder (holding assignment.zarr and part_<k>.zarr)")
    p.add_argument("--graph", help="graph store (default: the path recorded in the assignment)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from distgnn.partition.verify import verify_partition

    set_quiet(args.quiet)
    print(verify_partition(args.partdir, args.graph))
    return 0
