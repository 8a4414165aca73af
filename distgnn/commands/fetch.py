"""distgnn fetch DATASET: download or generate a dataset into <root>/<store>/graph.zarr."""
from __future__ import annotations

import argparse
import math
import time

from distgnn.data.catalog import DATASETS, DEFAULT_CHUNK_BUDGET, DEFAULT_CSR_BUDGET, FEATURE_DTYPES
from distgnn.errors import DistgnnError
from distgnn.options import add_threads_option, check_threads


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fetch", help="acquire a dataset into <root>/<store>/graph.zarr",
                       description="Download (or read from --source, or generate) a dataset and "
                                   "convert it, streaming, into the canonical graph store.")
    p.add_argument("dataset", help=f"one of: {', '.join(DATASETS)}")
    p.add_argument("--root", default="data", help="data root; the store folder is made under it (default: data)")
    p.add_argument("--source", help="folder (or archive) with pre-downloaded files instead of downloading")
    p.add_argument("--name", help="store folder name (default: dataset[-x<scale>][-d<D>][-l<F>][-seed<N>])")
    p.add_argument("--scale", type=float, default=1.0, help="synthetic twins: multiply vertices and edges")
    p.add_argument("--mean-degree", type=float, default=None, metavar="D",
                   help="synthetic twins: D x vertices edges instead of the scaled count (D <= N/50)")
    p.add_argument("--labelled-fraction", type=float, default=None, metavar="F",
                   help="synthetic twins: put a fraction F of the vertices in train/val/test, in the real "
                        "dataset's proportions (default: the real fraction; papers100M's is 1.4%%)")
    p.add_argument("--seed", type=int, default=0, help="twins: generator seed; others: split seed")
    p.add_argument("--undirected", action="store_true", help="also store the reverse of every edge")
    p.add_argument("--normalize-features", action="store_true",
                   help="divide each feature row by its sum, as the GCN and GAT papers do for the "
                        "citation graphs (store name gets -rownorm)")
    p.add_argument("--feature-dtype", choices=FEATURE_DTYPES, default="float32",
                   help="on-disk form of the features: float16 halves their disk (store name gets "
                        "-f16; readers widen to float32; docs/design.md#stores) (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="rebuild an existing store")
    p.add_argument("--chunk-mb", type=float, default=DEFAULT_CHUNK_BUDGET / 2**20,
                   help="memory budget of one streamed block, MiB (default: %(default)s)")
    p.add_argument("--csr-mb", type=float, default=DEFAULT_CSR_BUDGET / 2**20,
                   help="memory for the CSR's indices at once, MiB: a graph with more is built in "
                        "row ranges, one pass over the spooled edges each (default: %(default)s)")
    p.add_argument("--no-preflight", action="store_true",
                   help="skip the check that the conversion's memory and disk fit here "
                        "(docs/design.md#preflight)")
    add_threads_option(p, "native threads")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def check_numbers(args: argparse.Namespace) -> None:
    """Every numeric option in range (nan and inf refused), in one line naming it, before any
    estimate or write."""
    finite = math.isfinite
    for flag, value, ok, expected in (
            ("--scale", args.scale, lambda v: finite(v) and v > 0, "be a number > 0"),
            ("--mean-degree", args.mean_degree, lambda v: v is None or (finite(v) and v > 0),
             "be a number > 0"),
            ("--labelled-fraction", args.labelled_fraction, lambda v: v is None or 0 < v <= 1,
             "lie in (0, 1]"),
            ("--chunk-mb", args.chunk_mb, lambda v: finite(v) and v > 0, "be a number > 0"),
            ("--csr-mb", args.csr_mb, lambda v: finite(v) and v > 0, "be a number > 0")):
        if not ok(value):
            raise DistgnnError(f"{flag} must {expected}, got {value:g}")


def run(args: argparse.Namespace) -> int:
    from distgnn.data.fetch import check_existing_store, fetch, store_path

    check_numbers(args)
    check_threads(args.threads)
    start = time.perf_counter()
    target = store_path(args.root, args.dataset, args.scale, args.seed, args.name, args.mean_degree,
                        args.labelled_fraction, args.normalize_features, args.feature_dtype,
                        args.source)
    if target.exists() and not args.force:
        check_existing_store(target, args.dataset, args.source, args.scale, args.seed)
        print(f"{target} exists (--force rebuilds it)")
        return 0
    path = fetch(args.dataset, root=args.root, source=args.source, name=args.name, scale=args.scale,
                 seed=args.seed, undirected=args.undirected, force=args.force,
                 budget=int(args.chunk_mb * 2**20), threads=args.threads, mean_degree=args.mean_degree,
                 labelled_fraction=args.labelled_fraction,
                 normalize_features=args.normalize_features, feature_dtype=args.feature_dtype,
                 csr_budget=int(args.csr_mb * 2**20), preflight=not args.no_preflight)
    print(f"{path} ({time.perf_counter() - start:.1f} s)")
    return 0
