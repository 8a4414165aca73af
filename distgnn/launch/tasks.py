"""The callables submitit runs: every Slurm task runs one rank; a local job runs ``mpiexec -n P``.

Both are ``submitit.helpers.Checkpointable``: on submitit's signal (SIGUSR2 by default, sent before
a time limit or on preemption) submitit calls ``checkpoint()`` in the task of global rank 0 only;
it returns the same task with ``--resume`` added, and submitit requeues the job, which then resumes
from the trainer's newest periodic checkpoint (docs/design.md#checkpoints). A job Slurm requeues
by itself (a node failure) resumes the same way (:func:`requeued_argv`). The trainer writes its own
checkpoints every ``--checkpoint-every`` epochs; nothing is saved here.
"""
from __future__ import annotations

import io
import os
import runpy
import subprocess
import sys

import submitit
from submitit.core.utils import copy_process_streams
from submitit.helpers import Checkpointable, DelayedSubmission

from distgnn.errors import DistgnnError
from distgnn.launch.watch import error_line


def with_resume(argv: list[str]) -> list[str]:
    """``argv`` with ``--resume`` appended unless it is there already."""
    return list(argv) if "--resume" in argv else [*argv, "--resume"]


def requeued_argv(argv: list[str]) -> list[str]:
    """``argv`` as this start of the job must run it: with ``--resume`` when Slurm has requeued
    the job (``SLURM_RESTART_COUNT`` > 0: a node failure, ``scontrol requeue``), so a requeue
    continues from the newest checkpoint instead of starting again, which would clear the run
    folder's checkpoints (submitit's own requeue, on preemption, adds it in ``checkpoint``)."""
    restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
    return with_resume(argv) if restarts.isdigit() and int(restarts) > 0 else list(argv)


def stop_process(process: subprocess.Popen, wait_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``wait_s`` seconds: ``process`` is gone when this returns."""
    process.terminate()
    try:
        process.wait(wait_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def thread_env(threads: int) -> dict[str, str]:
    """Environment pinning one rank's threads: ``threads`` OpenMP threads, kept close to the rank."""
    return {"OMP_NUM_THREADS": str(threads), "OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}


def run_in_process(argv: list[str]) -> None:
    """Run ``argv`` in this process: ``distgnn ...`` through the CLI, ``X.py ...`` as a script,
    anything else as a child process. Raises ``RuntimeError`` naming the rank when it fails."""
    rank = os.environ.get("SLURM_PROCID", os.environ.get("OMPI_COMM_WORLD_RANK", "?"))
    if argv[0] == "distgnn":
        from distgnn.cli import main

        code = main(argv[1:])
        if code:
            raise RuntimeError(f"rank {rank}: `{' '.join(argv)}` exited with status {code}")
    elif argv[0].endswith(".py"):
        saved = sys.argv
        sys.argv = list(argv)
        try:
            runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as exc:
            # Left as it is: submitit itself exits this way after requeueing a preempted job.
            if exc.code not in (0, None):
                raise
        finally:
            sys.argv = saved
    else:
        code = subprocess.call(argv)
        if code:
            raise RuntimeError(f"rank {rank}: `{' '.join(argv)}` exited with status {code}")


class RankTask(Checkpointable):
    """One MPI rank of a Slurm job (srun starts P of these; MPI is initialised in-process via PMIx).

    Attributes:
        argv: the command every rank runs, e.g. ``["distgnn", "train", PARTDIR, "--algo", "cd-5"]``.
        threads: threads per rank (= cpus per task).
    """

    def __init__(self, argv: list[str], threads: int) -> None:
        self.argv = list(argv)
        self.threads = threads

    def __call__(self) -> str:
        for key, value in thread_env(self.threads).items():
            os.environ.setdefault(key, value)
        env = submitit.JobEnvironment()
        # The trainer records the Slurm job id in summary.json; srun exports it, submitit knows it.
        os.environ.setdefault("SLURM_JOB_ID", str(env.job_id).split("_")[0])
        try:
            run_in_process(requeued_argv(self.argv))
        except BaseException as exc:
            # Let submitit write this rank's error, then MPI_Abort at exit instead of blocking in
            # MPI_Finalize while the other ranks wait in a collective (srun then ends the step).
            from distgnn.comm import abort_at_exit

            abort_at_exit(exc if isinstance(exc, SystemExit) else 1)
            raise
        return f"rank {env.global_rank} of {env.num_tasks} done"

    def checkpoint(self, *args: object, **kwargs: object) -> DelayedSubmission:
        return DelayedSubmission(RankTask(with_resume(self.argv), self.threads))


def mpiexec_argv(argv: list[str], ranks: int, cores: int, threads: int = 1) -> list[str]:
    """``mpiexec -n ranks ... argv``: each rank bound to ``threads`` cores of its own when they
    fit in ``cores`` (Open MPI's plain ``--bind-to core`` pins a rank to one core, so a single
    rank of 2 threads ran both on one core); unbound when they do not, and oversubscribed when
    the ranks alone exceed ``cores``."""
    cmd = ["mpiexec", "-n", str(ranks)]
    if ranks > cores:
        cmd += ["--oversubscribe", "--bind-to", "none"]
    elif ranks * threads > cores:
        cmd += ["--bind-to", "none"]
    else:
        cmd += ["--map-by", f"slot:PE={threads}", "--bind-to", "core"]
    return cmd + interpreter_argv(argv)


def interpreter_argv(argv: list[str]) -> list[str]:
    """``argv`` made runnable by this Python (so the ranks use the launcher's environment):
    ``distgnn ...`` -> ``python -m mpi4py -m distgnn ...``, ``X.py ...`` -> ``python -m mpi4py X.py``."""
    # `python -m mpi4py` turns an uncaught exception in one rank into MPI_Abort, so the others
    # never wait for it forever in a collective.
    if argv[0] == "distgnn":
        return [sys.executable, "-m", "mpi4py", "-m", "distgnn", *argv[1:]]
    if argv[0].endswith(".py"):
        return [sys.executable, "-m", "mpi4py", *argv]
    return list(argv)


class MpiexecError(RuntimeError):
    """``mpiexec`` of a local job ended with a non-zero status; the message is its ranks' verdict."""


class MpiexecTask(Checkpointable):
    """A local job: one submitit task that starts ``mpiexec -n ranks argv`` and waits for it.

    Attributes:
        argv: the command every rank runs.
        ranks: number of MPI ranks (= partitions).
        threads: threads per rank.
    """

    def __init__(self, argv: list[str], ranks: int, threads: int) -> None:
        self.argv = list(argv)
        self.ranks = ranks
        self.threads = threads

    def __call__(self) -> str:
        env = dict(os.environ, **thread_env(self.threads))
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers and CI run as root
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        cmd = mpiexec_argv(self.argv, self.ranks, len(os.sched_getaffinity(0)), self.threads)
        print(f"The following command is sent: \"{' '.join(cmd)}\"", flush=True)
        try:
            process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        except FileNotFoundError as exc:
            raise DistgnnError("mpiexec not found: install Open MPI (scripts/setup.sh)") from exc
        out, err = io.StringIO(), io.StringIO()
        with process:
            try:
                copy_process_streams(process, out, err, True)  # into this task's log, live
            except BaseException:
                # cancelled (submitit's SIGINT) or broken: mpiexec passes SIGTERM on to its ranks,
                # so none is left running after its job
                stop_process(process)
                raise
            status = process.wait()
        if status:
            # the ranks' output is in this task's log already: the error says only how mpiexec
            # ended and the ranks' own verdict, not their whole stderr again
            raise MpiexecError(f"mpiexec -n {self.ranks} exited with status {status}: "
                               f"{error_line(err.getvalue())}")
        return out.getvalue().strip()

    def checkpoint(self, *args: object, **kwargs: object) -> DelayedSubmission:
        return DelayedSubmission(MpiexecTask(with_resume(self.argv), self.ranks, self.threads))
