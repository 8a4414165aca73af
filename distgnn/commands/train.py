"""distgnn train PARTDIR --algo ALGO: one MPI rank per partition (mpiexec -n P or srun -n P)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from distgnn.commands.ranks import (ABORT_MARKER, abort_marker, exit_on_launcher_sigterm,
                                    refuse_before_mpi, run_on_ranks)


def add_train_options(p: argparse.ArgumentParser, threads_default: str = "all") -> None:
    """The training options shared by ``train`` and ``launch`` (``threads_default``: what an
    unset ``--threads`` means, for the help)."""
    from distgnn.models import registry
    from distgnn.options import add_fresh_copies_options, add_threads_option
    from distgnn.train.config import TrainConfig
    from distgnn.vocabulary import APPLY_MODES, MESSAGE_PRECISIONS, PRECISION_CHOICES
    from distgnn.exchange.rules import DEFAULT_RECOMPUTE_BUDGET, rule_names, rules_help

    d = TrainConfig()
    p.add_argument("--algo", default=d.algo,
                   help="0c, cd-0, cd-<r> or cd-<r>-orig; cd-<r>-orig is the DistGNN paper's cd-r, "
                        "cd-<r> distgnn's variant that keeps the last delivered remote part between "
                        "deliveries (docs/design.md#algorithms; default: %(default)s)")
    p.add_argument("--epochs", type=int, default=d.epochs, help="default: %(default)s")
    p.add_argument("--model", default=d.model, metavar="MODEL",
                   help="; ".join(f"{name}: {registry.spec(name).summary}" for name in registry.names())
                        + "; or your own model class by import path, package.module:Class "
                          "(docs/design.md#own-model; docs/design.md#models; default: %(default)s)")
    for option in registry.all_options().values():  # the models' own (distgnn/models/registry.py)
        p.add_argument(option.flag, type=type(option.default), choices=option.choices, default=None,
                       help=f"{option.help} (--model {' and '.join(registry.takers(option.name))} "
                            f"only; default: {option.default})")
    p.add_argument("--layers", type=int, default=d.layers, help="graph layers (default: %(default)s)")
    p.add_argument("--hidden", type=int, default=d.hidden,
                   help="hidden width (gin: also each MLP's width; default: %(default)s)")
    p.add_argument("--lr", type=float, default=d.lr, help="Adam learning rate (default: %(default)s)")
    p.add_argument("--dropout", type=float, default=d.dropout, help="default: %(default)s")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay, help="default: %(default)s")
    p.add_argument("--seed", type=int, default=d.seed, help="model and dropout seed (default: %(default)s)")
    p.add_argument("--eval-every", type=int, default=d.eval_every,
                   help="evaluate every K epochs and at the last (0: never; default: %(default)s)")
    p.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every,
                   help="checkpoint every K epochs (0: never; default: %(default)s)")
    p.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint")
    add_threads_option(p, "threads per rank", d.threads, threads_default)
    p.add_argument("--precision", choices=PRECISION_CHOICES, default=d.precision,
                   help="fp32, or opt-in bf16: linear layers, gathered rows and the training "
                        "exchange in bfloat16; sums, loss, Adam and evaluation stay float32; "
                        "auto: bf16 where every rank's CPU multiplies bfloat16 natively (AMX or "
                        "AVX512-BF16), else fp32, said in summary.json "
                        "(docs/design.md#precision; default: %(default)s)")
    p.add_argument("--message-precision", choices=MESSAGE_PRECISIONS, default=d.message_precision,
                   help="how training rows and gradients travel between ranks: fp32, bf16, or "
                        "int8/int4/int2 codes with a float32 scale and low value per row (or per "
                        "--message-group columns), stochastically rounded where they are summed; "
                        "auto: fp32, bf16 under --precision bf16 (docs/design.md#message-precision; "
                        "default: %(default)s)")
    p.add_argument("--message-group", type=int, default=d.message_group, metavar="G",
                   help="with an integer --message-precision: one scale per G columns (0: per "
                        "row; default: %(default)s)")
    p.add_argument("--no-input-cache", action="store_true",
                   help="aggregate the input features every epoch instead of once at the start "
                        "(saves [n_k, F] float32 of memory per rank)")
    p.add_argument("--apply", choices=APPLY_MODES, default=d.apply,
                   help="where the dense work (linear layers, ReLU, dropout) runs: once per vertex at "
                        "its root (root), or on every replica as DistGNN does (replicas); auto: root "
                        "for cd-0 and cd-<r>, replicas for 0c and cd-<r>-orig (default: %(default)s)")
    gradients = p.add_mutually_exclusive_group()
    gradients.add_argument("--delayed-gradients", dest="delayed_gradients", action="store_true",
                           default=None,
                           help="cd-<r> under --apply root: each exchange's gradient travels back "
                                "and is consumed r epochs later (the default there; "
                                "docs/design.md#cd-r-at-the-root)")
    gradients.add_argument("--no-delayed-gradients", dest="delayed_gradients", action="store_false",
                           default=None, help="cd-<r> under --apply root: copies and remote parts are constants in "
                                "backward (no backward exchange but, under --fresh-copies, the broadcast's exact adjoint)")
    add_fresh_copies_options(
        p, "cd-<r> under --apply root: the roots send their rows to the leaves every epoch, exact "
           "with their adjoint, and only the leaves' partials are delayed: more accurate, more "
           "forward bytes (the default for GAT, whose stale copies do not train; "
           "docs/design.md#fresh-copies)",
        "cd-<r> under --apply root: the roots' rows reach the leaves in bins, r epochs late, for "
        "GAT too (accepted and without effect elsewhere, as the workflow passes it to every cd-r run)")
    p.add_argument("--cdr-rule", choices=rule_names(), default=None,
                   help="cd-<r> under --apply root, the delayed-update rule: " + rules_help()
                        + " (default: " + d.cdr_rule + "; docs/design.md#cdr-rules)")
    p.add_argument("--recompute-budget", type=float, default=None, metavar="B",
                   help="with a --cdr-rule that recomputes: at most B leaf rows per root "
                        "recompute layer 1's input (those with the most local out-edges; the "
                        "others read delayed copies; inf: every leaf that is a source; default: "
                        f"{DEFAULT_RECOMPUTE_BUDGET:g}; docs/design.md#cdr-rules)")
    p.add_argument("--out", help="run folder (default: runs/<store>/<method>-<P>/<algo>, plus "
                                 "-<apply> when --apply is not the algorithm's default, after "
                                 "<model>- for a model other than sage)")
    p.add_argument("--hang-timeout", type=float, default=d.hang_timeout_s, metavar="S",
                   help="end the job when a rank sends no heartbeat for S seconds (a frozen node), "
                        "naming it; a long epoch whose ranks are alive is never ended (0: off; "
                        "default: %(default)s)")
    p.add_argument("--no-huge-pages", action="store_true",
                   help="keep every buffer on ordinary 4 KB pages (by default the features, the CSR "
                        "and its transpose and torch's large tensors ask for 2 MB pages, which "
                        "the random row gathers of aggregation need far fewer TLB misses for)")
    p.add_argument("--stage", metavar="DIR", default=None,
                   help="node-local folder (e.g. /scratch) each rank copies its part to, checks "
                        "and loads from, then removes; the partition folder stays the run's "
                        "(docs/design.md#staging; launch: the preset's stage_dir)")
    p.add_argument("--skip-memory-check", action="store_true",
                   help="start even when the memory estimate exceeds what is available")


def config_from_args(args: argparse.Namespace):
    from distgnn.models import registry
    from distgnn.train.config import TrainConfig

    # the models' own options: refused when given for another model, else their defaults
    given = {name: getattr(args, name) for name in registry.all_options()}
    registry.check_options(args.model, given)
    return TrainConfig(algo=args.algo, model=args.model, epochs=args.epochs, layers=args.layers,
                       hidden=args.hidden,
                       **{name: getattr(TrainConfig, name) if value is None else value
                          for name, value in given.items()},
                       lr=args.lr, dropout=args.dropout,
                       weight_decay=args.weight_decay, seed=args.seed, eval_every=args.eval_every,
                       checkpoint_every=args.checkpoint_every, resume=args.resume,
                       threads=args.threads, memory_check=not args.skip_memory_check,
                       precision=args.precision, input_cache=not args.no_input_cache,
                       message_precision=args.message_precision,
                       message_group=args.message_group,
                       apply=args.apply, delayed_gradients=args.delayed_gradients,
                       fresh_copies=args.fresh_copies, cdr_rule=args.cdr_rule or TrainConfig.cdr_rule,
                       recompute_budget=args.recompute_budget,
                       hang_timeout_s=args.hang_timeout, huge_pages=not args.no_huge_pages,
                       stage_dir=args.stage)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train on a partition folder (one MPI rank per part)",
                       description="Full-batch training, one MPI rank per partition: "
                                   "mpiexec -n P distgnn train PARTDIR --algo cd-0")
    p.add_argument("partdir", help="partition folder (assignment.zarr, part_<k>.zarr)")
    add_train_options(p)
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(func=run)


class EpochLine:
    """One plain line per epoch on stderr (rank 0): loss, the metrics when evaluated, the epoch
    time and the time left at the mean pace so far. No carriage returns, so logs stay clean."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.done = 0

    def __call__(self, record: dict, epochs: int) -> None:
        self.seconds += record["epoch_time_s"]
        self.done += 1
        left = self.seconds / self.done * (epochs - record["epoch"])
        metrics = "".join(f" {k} {record[k]:.4f}" for k in ("train", "val", "test") if k in record)
        print(f"epoch {record['epoch']}/{epochs}: loss {record['loss']:.4f}{metrics} "
              f"({record['epoch_time_s']:.2f} s, {left:.0f} s left)", file=sys.stderr, flush=True)


def interrupted(run_dir: Path | None) -> str:
    """What an interrupted run says: where its newest complete checkpoint is, and how to go on."""
    from distgnn.train.checkpoint import complete_checkpoints

    found = complete_checkpoints(run_dir) if run_dir is not None else []
    if not found:
        return "interrupted before the first checkpoint (rerun the command to start again)"
    epoch, folder = found[-1]
    return (f"interrupted; the newest checkpoint is {folder} (epoch {epoch}): rerun the command "
            f"with --resume to continue from it")


def run(args: argparse.Namespace) -> int:
    from distgnn.thread_pinning import pin_threads_if_alone

    pin_threads_if_alone()  # before torch is imported: OpenMP reads it at start-up
    from distgnn.train.config import check_config

    refused = refuse_before_mpi("train", lambda: check_config(config_from_args(args)))
    if refused is not None:
        return refused
    if not args.no_huge_pages:
        # torch reads it at its first large allocation: 2 MB-aligned, MADV_HUGEPAGE buffers for
        # activations and the input cache (a user's own setting wins)
        os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    from distgnn.comm import Communicator
    from distgnn.train.trainer import Trainer

    comm = Communicator()
    trainer = None
    if comm.size > 1 and "SLURM_JOB_ID" not in os.environ:
        # mpiexec's Ctrl-C; under Slurm, SIGTERM is Slurm's own (preemption, requeue, time
        # limit), which submitit handles
        exit_on_launcher_sigterm(comm.rank, lambda: trainer.run_dir if trainer else None,
                                 interrupted, "train")

    def body():
        nonlocal trainer
        trainer = Trainer(args.partdir, config_from_args(args), args.out, comm,
                          on_epoch=None if args.quiet else EpochLine())
        if comm.rank == 0 and os.path.isdir(trainer.run_dir):  # an earlier job's, not this one's
            for stale in trainer.run_dir.glob(ABORT_MARKER.format(rank="*")):
                stale.unlink(missing_ok=True)
        return trainer.run()

    def mark_aborting() -> None:
        if trainer is not None:
            try:
                abort_marker(trainer.run_dir, comm.rank).touch()
            except OSError:
                pass  # no run folder yet: no Ctrl-C line will be printed for this job anyway

    try:
        status, summary = run_on_ranks("train", comm, body, on_abort=mark_aborting)
    except KeyboardInterrupt:  # Ctrl-C of a run without mpiexec (which turns it into SIGTERM)
        if comm.rank == 0:
            print(f"distgnn train: {interrupted(trainer.run_dir if trainer else None)}",
                  file=sys.stderr, flush=True)
        return 130
    if status:
        return status
    if summary is not None and not args.quiet:
        best = "" if summary["best_val"] is None else (
            f", best val {summary['best_val']:.4f}, test at best val {summary['test_at_best_val']:.4f}")
        print(f"{trainer.run_dir}: {summary['epochs']} epochs ({summary['apply']}), mean epoch "
              f"{summary['mean_epoch_time_s']:.3f} s{best}")
    return 0
