"""distgnn partition: vertex-cut partitioning of a graph store (docs/design.md#partitioning; its
files: docs/design.md#pipeline).

Three forms share one parser (the first positional picks the form):

* ``distgnn partition GRAPH.zarr --parts P [--method M] [--seed N] [--roots R] [--stream S]
  [--order O] [--out DIR] [--threads T]``: assign, then build every part;
* ``distgnn partition assign GRAPH.zarr --parts P [--method M] [--seed N] [--roots R] [--stream S]
  [--out DIR]``;
* ``distgnn partition build DIR --part K [--order O] [--threads T]``.

``--order`` is the parts' vertex order (:mod:`distgnn.partition.vertex_order`); its values
``store`` and ``shuffle``, the edge stream's earlier spelling, still name the stream (``--stream``).
"""
from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

from distgnn.errors import DistgnnError
from distgnn.options import add_threads_option, check_threads
from distgnn.partition.layout import METHODS, ORDERS, ROOT_RULES, default_out
from distgnn.partition.vertex_order import DEFAULT_VERTEX_ORDER, VERTEX_ORDERS
from distgnn.progress import set_quiet

STAGES = ("assign", "build")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "partition", help="vertex-cut partition a graph store (assign + build)",
        usage="distgnn partition [assign] GRAPH.zarr --parts P [--method M] [--seed N] [--order O] "
              "[--out DIR]\n       distgnn partition build DIR --part K [--order O] [--threads T]",
        description="Assign every edge to one of P partitions (writing DIR/assignment.zarr) and "
                    "build DIR/part_<k>.zarr for each k. `assign` and `build` run one stage.")
    p.add_argument("first", metavar="[assign|build] PATH", help="GRAPH.zarr, or a stage name")
    p.add_argument("path", nargs="?", help=argparse.SUPPRESS)
    p.add_argument("--parts", type=int, help="number of partitions P")
    p.add_argument("--method", default="libra", help=f"one of {', '.join(METHODS)} (default: libra)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the tie-breaking rule and of the shuffled order (default: 0)")
    p.add_argument("--stream", choices=ORDERS,
                   help="edge stream of libra/hdrf: the store's CSR order or a seeded shuffle "
                        "(default: store for libra, shuffle for hdrf)")
    p.add_argument("--order", choices=VERTEX_ORDERS + ORDERS, default=None,
                   help=f"vertex order of each part's local ids, for the kernel's locality: "
                        f"{', '.join(VERTEX_ORDERS)} (default: {DEFAULT_VERTEX_ORDER}; see "
                        f"docs/design.md#vertex-order). store/shuffle: the old spelling of --stream")
    p.add_argument("--roots", choices=ROOT_RULES, default="balance",
                   help="root of a split vertex: any replica, balancing roots per part (balance); "
                        "or a replica holding the most of its in-edges, then balancing (in-edges: "
                        "fresher cd-r and 0c aggregates; default: balance)")
    p.add_argument("--out", help="partition folder (default: partitions/<store>/<method>-<P>)")
    p.add_argument("--part", type=int, help="build: the partition K to build")
    add_threads_option(p, "native threads")
    p.add_argument("--force", action="store_true", help="replace an existing assignment")
    p.add_argument("--no-preflight", action="store_true",
                   help="skip the checks that the stages' memory and disk fit here "
                        "(docs/design.md#preflight)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def _print_assignment(out, attrs) -> None:
    from distgnn.partition.quality import format_quality, part_table

    print(f"{out}/assignment.zarr: {attrs['method']} P={attrs['P']} seed={attrs['seed']} "
          f"order={attrs['order']} roots={attrs['root_rule']} "
          f"({attrs['assign_seconds']:.2f} s assign)")
    print(format_quality(attrs))
    print(part_table(attrs))
    empty = [k for k in range(attrs["P"]) if attrs["part_edges"][k] == 0]
    if empty:
        import sys

        print(f"distgnn partition: warning: part{'s' if len(empty) > 1 else ''} "
              f"{', '.join(map(str, empty))} of {attrs['P']} hold no edge (more parts than the "
              f"graph can fill; their ranks would only hold isolated vertices)", file=sys.stderr)


def _remove_outputs(out) -> None:
    """Remove the assignment and every part store of a folder whose build failed."""
    import shutil

    from distgnn.partition import layout

    for store in [Path(out) / layout.ASSIGNMENT, *Path(out).glob("part_*.zarr")]:
        shutil.rmtree(store, ignore_errors=True)


def _missing_folders(out: Path) -> list[Path]:
    """``out`` and those of its parents that do not exist yet (the run would create them),
    deepest first."""
    return list(itertools.takewhile(lambda p: not p.exists(), (out, *out.parents)))


def _remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (deepest first) while they are empty: those a failed run created."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (something else wrote there) or already gone
            if folder.exists():
                return


def split_order(args: argparse.Namespace) -> tuple[str | None, str]:
    """(edge stream, vertex order) from --stream and --order (whose values store/shuffle are the
    old spelling of --stream)."""
    stream, order = args.stream, args.order or DEFAULT_VERTEX_ORDER
    if args.order in ORDERS:
        import sys

        if args.stream is not None and args.stream != args.order:
            raise DistgnnError(f"--order {args.order} (the old spelling of --stream) contradicts "
                               f"--stream {args.stream}")
        print(f"distgnn partition: --order {args.order} is now spelled --stream {args.order} "
              f"(--order names the vertex order); taken as --stream", file=sys.stderr)
        stream, order = args.order, DEFAULT_VERTEX_ORDER
    return stream, order


def run(args: argparse.Namespace) -> int:
    set_quiet(args.quiet)
    check_threads(args.threads)
    stream, order = split_order(args)
    stage, path = (args.first, args.path) if args.first in STAGES else (None, args.first)
    if stage is None and args.path is not None:
        raise DistgnnError(f"unexpected argument '{args.path}' (one GRAPH.zarr, or a stage: "
                           f"{', '.join(STAGES)})")
    if path is None:
        raise DistgnnError(f"partition {stage}: missing {'DIR' if stage == 'build' else 'GRAPH.zarr'}")
    start = time.perf_counter()
    if stage == "build":
        from distgnn.partition.part_writer import build_part

        if args.part is None:
            raise DistgnnError("partition build: --part K is required")
        out = build_part(path, args.part, args.threads, order=order, preflight=not args.no_preflight)
        print(f"{out} ({time.perf_counter() - start:.1f} s)")
        return 0
    if args.parts is None:
        raise DistgnnError("--parts: required (number of partitions)")
    from distgnn.partition.assign import assign_graph
    from distgnn.partition.part_writer import build_all

    out = Path(args.out or default_out(Path(path), args.method, args.parts))
    new_folders = _missing_folders(out)
    try:
        out, attrs = assign_graph(path, args.parts, args.method, args.seed, out, args.threads,
                                  overwrite=args.force, order=stream, root_rule=args.roots,
                                  preflight=not args.no_preflight)
        if stage is None:
            try:
                build_all(out, args.threads, order=order, preflight=not args.no_preflight)
            except BaseException:
                _remove_outputs(out)  # an assignment without its parts must not look complete
                raise
    except BaseException:
        _remove_empty(new_folders)
        raise
    # the statistics once every input has been read: a damaged chunk is the only thing reported
    _print_assignment(out, attrs)
    if stage is None:
        print(f"{out}: {args.parts} parts built, vertex order {order} "
              f"({time.perf_counter() - start:.1f} s in all)")
    return 0
