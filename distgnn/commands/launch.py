"""distgnn launch PARTDIR --algo ALGO --executor local|slurm|debug: run ``distgnn train`` via submitit."""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from distgnn.commands.train import add_train_options
from distgnn.errors import DistgnnError
from distgnn.progress import is_quiet
from distgnn.launch import launch, load_preset, num_parts
from distgnn.launch.placement import resolve_sockets
from distgnn.launch.submit import EXECUTORS, local_threads


def train_flags() -> list[tuple[str, str, bool, object]]:
    """(flag, dest, is_switch, the value a switch sets) of every ``distgnn train`` option (the
    trainer's own definitions)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_train_options(parser)
    return [(a.option_strings[0], a.dest, a.nargs == 0, a.const) for a in parser._actions]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("launch", help="run `distgnn train` as P MPI ranks through submitit",
                       description="Submit `distgnn train PARTDIR` (one MPI rank per partition) "
                                   "through submitit and wait: a Slurm job of P tasks under srun, "
                                   "a local job running mpiexec -n P, or in-process (debug).")
    p.add_argument("partdir", help="partition folder (assignment.zarr, part_<k>.zarr)")
    p.add_argument("--executor", choices=EXECUTORS, default="local",
                   help="where the ranks run (default: local)")
    p.add_argument("--preset", default=None,
                   help="submitit preset name in --presets (default: the executor's name)")
    p.add_argument("--presets", default=None,
                   help="presets YAML (default: cluster/submitit.yaml)")
    p.add_argument("--log-dir", default="logs/submitit",
                   help="submitit folder; each job's pickles and logs go to <log-dir>/<job id>")
    p.add_argument("--grace", type=float, default=None,
                   help="seconds a job may be gone from squeue without a result (default: preset's, 30)")
    # --algo, --epochs, ..., --threads, --out: passed to every rank
    add_train_options(p, threads_default="the preset's cpus_per_task, else locally the cores "
                                         "divided among the ranks")
    # Unset threads = the preset's cpus per task; unset out = the trainer's default folder.
    p.set_defaults(threads=None, out=None)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def rank_estimates(args: argparse.Namespace) -> list:
    """Each rank's memory estimate of the run ``args`` describe (from the partition attributes)."""
    from distgnn.commands.train import config_from_args
    from distgnn.models import registry
    from distgnn.scaling.rank_memory import estimate_run_memory

    exchange = config_from_args(args).exchange_spec()   # what the trainer checks (context.py)
    return estimate_run_memory(args.partdir, args.layers, args.hidden, exchange, model=args.model,
                               **registry.shape_spec(args.model).option_values(args))


def check_local_memory(args: argparse.Namespace) -> None:
    """Refuse before submitting a local run whose ranks together would not fit in what this
    machine lets them use (the trainer checks again on every machine it lands on)."""
    from distgnn.scaling.rank_memory import fits, memory_budget

    available, source = memory_budget()
    if not available:
        return
    ok, reason = fits(rank_estimates(args), available)
    if not ok:
        raise DistgnnError(f"{args.partdir}: the run would not fit in memory: {reason}, {source} "
                           f"(estimate from the partition attributes; --skip-memory-check starts "
                           f"it anyway)")


def node_estimates(args: argparse.Namespace, preset: dict, ranks: int) -> list[list]:
    """The ranks' memory estimates grouped by node: ranks fill nodes in order,
    ``ranks_per_node`` each (srun's block distribution)."""
    per_node = int(preset.get("ranks_per_node") or ranks)
    estimates = rank_estimates(args)
    return [estimates[first:first + per_node] for first in range(0, ranks, per_node)]


def sized_memory(args: argparse.Namespace, preset: dict, preset_name: str, ranks: int) -> dict:
    """The preset with ``mem_gb: auto`` replaced by the request the estimate gives (docs/design.md#job-memory):
    the largest node's estimated need times (1 + ``mem_margin``), whole GiB; refused in one line
    above the site's ``mem_gb_max``. A preset with a number (or nothing) is returned as it is."""
    from distgnn.launch.presets import DEFAULT_MEM_MARGIN

    if preset.get("mem_gb") != "auto":
        return preset
    margin = preset.get("mem_margin")
    margin = DEFAULT_MEM_MARGIN if margin is None else float(margin)
    need = max(sum(e.total for e in node) for node in node_estimates(args, preset, ranks))
    request = max(1, math.ceil(need * (1 + margin) / 2**30))
    cap = preset.get("mem_gb_max")
    if cap is not None and request > float(cap):
        raise DistgnnError(
            f"{args.partdir}: the ranks of one node need {need / 2**30:.2f} GiB (estimate), "
            f"{request} GiB with preset {preset_name}'s mem_margin {margin:g}: over its site cap "
            f"mem_gb_max {cap:g}; lower ranks_per_node or partition into more parts; nothing was "
            f"submitted")
    if not is_quiet():
        print(f"distgnn launch: asking Slurm for {request} GiB per node (estimate "
              f"{need / 2**30:.2f} GiB + {margin:.0%})", file=sys.stderr)
    return {**preset, "mem_gb": request}


def check_preset_memory(args: argparse.Namespace, preset: dict, preset_name: str, ranks: int) -> None:
    """Refuse before submitting a Slurm job whose ranks on one node would need more than the
    preset's ``mem_gb`` (the job's --mem: Slurm kills a rank that passes it)."""
    from distgnn.scaling.rank_memory import fits

    if preset.get("mem_gb") is None:
        return
    budget = int(float(preset["mem_gb"]) * 2**30)
    for node in node_estimates(args, preset, ranks):
        ok, reason = fits(node, budget)
        if not ok:
            raise DistgnnError(
                f"{args.partdir}: the ranks of one node would not fit in preset {preset_name}'s "
                f"mem_gb: {reason.replace('available', 'mem_gb')}; raise mem_gb, lower "
                f"ranks_per_node, or partition into more parts (--skip-memory-check submits it "
                f"anyway)")


def parser_default(dest: str) -> object:
    """The default of a ``distgnn train`` option."""
    parser = argparse.ArgumentParser(add_help=False)
    add_train_options(parser)
    return parser.get_default(dest)


def train_argv(args: argparse.Namespace, threads: int) -> list[str]:
    """The ``distgnn train`` command every rank runs, from the launch options."""
    argv = ["distgnn", "train", args.partdir]
    for flag, dest, switch, sets in train_flags():
        value = threads if dest == "threads" else getattr(args, dest)
        if switch:
            # a switch is passed when it set the value (--x and --no-x may share one dest)
            argv += [flag] if value is not None and value == sets and value != parser_default(dest) else []
        elif value is not None:
            argv += [flag, str(value)]
    if args.quiet:
        argv.append("--quiet")
    return argv


def how_to_continue(args: argparse.Namespace) -> str:
    """What a failed launch's line ends with: the newest complete checkpoint of its run folder
    and the flag that continues from it ('' when there is none)."""
    from distgnn.train.checkpoint import complete_checkpoints
    from distgnn.train.trainer import default_run_dir

    try:
        if args.out is not None:
            run_dir = Path(args.out)
        else:
            import zarr

            attrs = dict(zarr.open_group(str(Path(args.partdir) / "assignment.zarr"), mode="r").attrs)
            run_dir = default_run_dir(attrs, args.algo, args.apply, args.model)
        found = complete_checkpoints(run_dir)
    except Exception:  # noqa: BLE001 - a hint only: the failure itself is what gets reported
        return ""
    if not found:
        return ""
    epoch, folder = found[-1]
    return (f"; the newest checkpoint is {folder} (epoch {epoch}): rerun this launch with "
            f"--resume to continue from it" if not args.resume else
            f"; the newest checkpoint is {folder} (epoch {epoch}): rerun this launch to continue "
            f"from it")


def run(args: argparse.Namespace) -> int:
    from distgnn.commands.train import config_from_args
    from distgnn.train.config import check_config

    check_config(config_from_args(args))  # refuse bad options before anything is submitted
    ranks = num_parts(args.partdir)
    preset = load_preset(args.preset or args.executor, args.presets)
    if args.executor == "slurm":  # one rank per socket where the preset says socket
        preset = resolve_sockets(preset, args.preset or args.executor)
    if args.stage is None and preset.get("stage_dir"):
        args.stage = preset["stage_dir"]
    if args.threads is not None:
        threads = args.threads
    elif args.executor == "slurm":
        threads = int(preset.get("cpus_per_task", 1))
    else:
        threads = local_threads(preset, ranks)
    if args.executor != "slurm" and not args.skip_memory_check:
        check_local_memory(args)
    if args.executor == "slurm":
        preset = sized_memory(args, preset, args.preset or args.executor, ranks)
    if args.executor == "slurm" and not args.skip_memory_check:
        check_preset_memory(args, preset, args.preset or args.executor, ranks)
    start = time.perf_counter()
    try:
        result = launch(train_argv(args, threads), ranks, args.executor, preset, args.log_dir,
                        job_name=f"distgnn-{args.algo}-P{ranks}", grace_s=args.grace)
    except DistgnnError as exc:
        raise DistgnnError(f"{exc}{how_to_continue(args)}") from None
    print(f"{args.executor} job {result.job_id}: {ranks} ranks finished "
          f"({time.perf_counter() - start:.1f} s); logs in {result.folder}")
    return 0
