"""distgnn predict RUNDIR [--out PATH] [--layer L]: every vertex's logits (and a hidden layer's
output) from a trained model, as a zarr store; one MPI rank per part, like train."""
from __future__ import annotations

import argparse
import sys

from distgnn.commands.ranks import refuse_before_mpi, run_on_ranks
from distgnn.errors import DistgnnError
from distgnn.options import add_threads_option, check_threads


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("predict", help="logits and embeddings of every vertex from a trained run",
                       description="Compute the trained model's logits for every vertex with the "
                                   "exact cd-0 aggregation (whatever algorithm trained it) and "
                                   "write them in global id order: RUNDIR/predictions.zarr with "
                                   "logits float32 [N, C] and, with --layer L, embeddings [N, "
                                   "hidden]. As many ranks as the run's parts: mpiexec -n P "
                                   "distgnn predict RUNDIR (no mpiexec for one part).")
    p.add_argument("rundir", help="a finished run folder (summary.json, model.pt)")
    p.add_argument("--out", help="output store (default: RUNDIR/predictions.zarr)")
    p.add_argument("--layer", type=int, help="also write hidden layer L's output after its ReLU "
                                             "(0 <= L < layers - 1) as `embeddings`")
    p.add_argument("--partdir", help="partition folder (default: the one recorded in summary.json)")
    add_threads_option(p, "threads per rank")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(func=run)


def _check(args: argparse.Namespace) -> None:
    from pathlib import Path

    from distgnn.train.predict import read_run

    check_threads(args.threads)
    read_run(Path(args.rundir))
    if args.layer is not None and args.layer < 0:
        raise DistgnnError(f"--layer: expected a hidden layer index >= 0, got {args.layer}")


def run(args: argparse.Namespace) -> int:
    refused = refuse_before_mpi("predict", lambda: _check(args))
    if refused is not None:
        return refused
    from distgnn.comm import Communicator
    from distgnn.train.predict import predict

    comm = Communicator()
    status, path = run_on_ranks("predict", comm, lambda: predict(
        args.rundir, args.out, args.layer, args.partdir, args.threads, comm))
    if status == 0 and comm.rank == 0 and not args.quiet:
        print(path, file=sys.stdout)
    return status
