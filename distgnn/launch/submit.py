"""Submit a command as P MPI ranks through submitit and wait for it."""
from __future__ import annotations

import contextlib
import io
import math
import os
import shutil
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import submitit

from distgnn.errors import DistgnnError
from distgnn.launch.placement import Shape, pending_reason, placement_problem, resolve_sockets
from distgnn.launch.tasks import MpiexecTask, RankTask
from distgnn.launch.watch import JobFailed, LogFollower, squeue_state, wait_for_tasks

EXECUTORS = ("local", "slurm", "debug")

def srun_args(preset: dict[str, Any]) -> list[str]:
    """srun options of every rank step: the MPI wire-up plugin (preset ``srun_mpi``, default
    ``pmix``, what Open MPI needs), one dead rank ending the step (always: the others would block
    in a collective forever), and the ranks' CPU binding (``srun_cpu_bind``, default ``cores``;
    null: none, for a cluster whose task plugin cannot bind), then ``slurm_srun_args``."""
    args = [f"--mpi={preset.get('srun_mpi') or 'pmix'}", "--kill-on-bad-exit=1"]
    bind = preset.get("srun_cpu_bind", "cores")
    if bind:
        args.append(f"--cpu-bind={bind}")
    return [*args, *preset.get("slurm_srun_args", [])]


@dataclass
class LaunchResult:
    """What a finished launch reports.

    Attributes:
        job_id: the scheduler's job id (Slurm) or submitit's local id.
        executor: ``local``, ``slurm`` or ``debug``.
        num_ranks: MPI ranks started.
        folder: submitit's folder (pickles and per-task logs).
        results: each task's return value.
    """
    job_id: str
    executor: str
    num_ranks: int
    folder: Path
    results: list[Any]


def slurm_parameters(preset: dict[str, Any], ranks: int, job_name: str) -> dict[str, Any]:
    """submitit AutoExecutor parameters of a Slurm job of ``ranks`` tasks from a preset."""
    per_node = int(preset.get("ranks_per_node") or ranks)
    nodes = math.ceil(ranks / per_node)
    if ranks % nodes:
        raise DistgnnError(f"cannot spread {ranks} ranks evenly over {nodes} nodes "
                           f"(preset ranks_per_node={per_node})")
    cpus = int(preset.get("cpus_per_task", 1))
    params: dict[str, Any] = {
        "name": job_name, "nodes": nodes, "tasks_per_node": ranks // nodes, "cpus_per_task": cpus,
        "timeout_min": int(preset.get("timeout_min", 60)),
        "slurm_srun_args": srun_args(preset),
        # Exported in the batch script, so every rank's step inherits them.
        "slurm_setup": [f"export OMP_NUM_THREADS={cpus}", "export OMP_PROC_BIND=close",
                        "export OMP_PLACES=cores", *preset.get("slurm_setup", [])],
    }
    if preset.get("mem_gb") not in (None, "auto"):   # auto: sized by distgnn launch beforehand
        params["mem_gb"] = preset["mem_gb"]
    for key in ("slurm_partition", "slurm_account", "slurm_qos", "slurm_constraint",
                "slurm_signal_delay_s", "slurm_additional_parameters"):
        if preset.get(key) is not None:
            params[key] = preset[key]
    return params


def local_threads(preset: dict[str, Any], ranks: int) -> int:
    """Threads per rank of a local run: the preset's cpus_per_task, else (unset, or ``socket``,
    which only a Slurm job resolves) the cores shared out."""
    if isinstance(preset.get("cpus_per_task"), int):
        return int(preset["cpus_per_task"])
    return max(1, (os.cpu_count() or 1) // ranks)


def submit_or_say_why(ex: submitit.AutoExecutor, task: Any, root: Path) -> Any:
    """``ex.submit(task)``; when sbatch refuses (no controller, a bad account), a
    :class:`DistgnnError` with sbatch's own last line, and the pickle, script and folders that
    submitit left under ``root`` (the log folder) for the job that never was removed."""
    def present() -> set[Path]:
        return set(root.rglob("*")) if root.is_dir() else set()

    before = present()
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):   # submitit prints sbatch's stderr itself
            return ex.submit(task)
    except (submitit.core.utils.FailedJobError, OSError) as exc:
        for leftover in sorted(present() - before, reverse=True):   # files before their folders
            if not leftover.is_dir():
                leftover.unlink(missing_ok=True)
            elif not any(leftover.iterdir()):
                leftover.rmdir()
        words = [line.strip() for line in (str(exc) or said.getvalue()).splitlines() if line.strip()]
        raise DistgnnError(f"Slurm refused the job: {words[-1] if words else type(exc).__name__}; "
                           f"nothing was submitted") from None



@contextlib.contextmanager
def sigint_reaches_the_job():
    """Start a local job with SIGINT at its default. submitit cancels a local job with SIGINT, and
    a launcher started with SIGINT ignored (``nohup``, ``cmd &`` in a script) would pass that on:
    the job would ignore its cancel and its ranks outlive the launch."""
    ignored = (threading.current_thread() is threading.main_thread()
               and signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
    if ignored:  # a handler, unlike SIG_IGN, is reset to the default in a started program
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)

def launch(argv: list[str], ranks: int, executor: str, preset: dict[str, Any], folder: str | Path,
           *, job_name: str = "distgnn-train", grace_s: float | None = None,
           deadline_s: float | None = None) -> LaunchResult:
    """Run ``argv`` as ``ranks`` MPI ranks through submitit and wait until it finishes.

    ``executor``: ``slurm`` = one job of ``ranks`` tasks under srun (each task runs ``argv`` in
    process, see ``RankTask``); ``local`` = one local submitit task that runs ``mpiexec -n ranks
    argv``; ``debug`` = the same in this very process (for pdb). Raises ``DistgnnError`` with a
    one-line summary when the job fails; the failing rank's error and the log tails go to stderr.
    """
    if executor not in EXECUTORS:
        raise DistgnnError(f"--executor {executor}: expected one of {', '.join(EXECUTORS)}")
    folder = Path(folder)
    grace = float(grace_s if grace_s is not None else preset.get("grace_s", 30))
    pending: dict[str, Any] = {}
    if executor == "slurm":
        preset = resolve_sockets(preset, job_name)
        params = slurm_parameters(preset, ranks, job_name)
        problem = placement_problem(Shape(params["nodes"], params["tasks_per_node"],
                                          params["cpus_per_task"]), preset.get("slurm_partition"))
        if problem:
            raise DistgnnError(f"{problem}; nothing was submitted")
        if shutil.which("srun") is None:  # submitit would raise its own RuntimeError
            raise DistgnnError("no srun on PATH: this machine has no Slurm client (install Slurm's "
                               "client tools, or run here with --executor local); nothing was submitted")
        ex = submitit.AutoExecutor(folder=folder / "%j", cluster="slurm")
        ex.update_parameters(**params)
        threads = int(preset.get("cpus_per_task", 1))
        job = submit_or_say_why(ex, RankTask(argv, threads), folder)
        tasks = [job.task(i) for i in range(ranks)] if ranks > 1 else [job]
        job_state = lambda: squeue_state(str(job.job_id))  # noqa: E731
        timeout_min = preset.get("pending_timeout_min")
        pending = {"pending_reason": lambda: pending_reason(str(job.job_id)),
                   "pending_limit_s": None if timeout_min is None else float(timeout_min) * 60}
    else:
        ex = submitit.AutoExecutor(folder=folder / "%j", cluster=executor)
        ex.update_parameters(name=job_name, timeout_min=int(preset.get("timeout_min", 60)),
                             tasks_per_node=1)
        with sigint_reaches_the_job():
            job = ex.submit(MpiexecTask(argv, ranks, local_threads(preset, ranks)))
        tasks = [job]
        job_state = lambda: "DONE" if job.done() else "RUNNING"  # noqa: E731
    print(f"distgnn launch: submitted {executor} job {job.job_id} ({ranks} ranks); "
          f"logs in {folder / str(job.job_id)}", file=sys.stderr, flush=True)
    follow = None
    try:
        if executor == "debug":
            results = [job.result()]  # the debug executor runs the task here, now
        else:
            # Relay rank 0's output (progress bars, per-epoch lines) into our own log, live.
            follow = LogFollower([tasks[0].paths.stdout, tasks[0].paths.stderr], sys.stderr)
            results = wait_for_tasks(tasks, str(job.job_id), job_state, grace_s=grace,
                                     deadline_s=deadline_s, follow=follow, **pending)
    except JobFailed as exc:
        job.cancel(check=False)  # the other ranks may still be alive
        if follow is not None:
            follow.poll()   # rank 0's last lines, relayed once (the report leaves them out)
        if exc.details:
            print(exc.details, file=sys.stderr, flush=True)
        raise DistgnnError(exc.summary) from None
    except submitit.core.utils.FailedJobError as exc:
        print(str(exc), file=sys.stderr, flush=True)
        raise DistgnnError(f"{executor} job {job.job_id} failed: "
                           f"{(str(exc).strip().splitlines() or ['?'])[-1]}") from None
    except BaseException:   # Ctrl-C, or any error of the watch itself: no job left running
        job.cancel(check=False)
        raise
    return LaunchResult(str(job.job_id), executor, ranks, folder / str(job.job_id), results)
