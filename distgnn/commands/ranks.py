"""How a command that runs as MPI ranks (``train``, ``predict``) reports failures: one line from
the rank that knows, and no rank left waiting."""
from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from distgnn.errors import CollectiveError, DistgnnError


def launcher_rank() -> int:
    """This process's rank as the launcher (mpiexec, srun) tells it, read without starting MPI;
    0 when not launched as a rank."""
    for name in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def refuse_before_mpi(command: str, check: Callable[[], Any]) -> int | None:
    """Run ``check`` (option validation) before MPI starts; on a bad option print one line from
    rank 0 only (every rank refuses alike) and return exit status 2, else None."""
    try:
        check()
    except DistgnnError as exc:
        if launcher_rank() == 0:
            print(f"distgnn {command}: error: {exc}", file=sys.stderr, flush=True)
        return 2
    return None


#: a rank about to end the job with MPI_Abort leaves this file in the run folder first, so the
#: SIGTERM that mpiexec then sends every other rank is not taken for the user's Ctrl-C
ABORT_MARKER = ".aborting-rank-{rank}"


def abort_marker(run_dir: Path, rank: int) -> Path:
    return run_dir / ABORT_MARKER.format(rank=rank)


def run_on_ranks(command: str, comm: Any, body: Callable[[], Any],
                 on_abort: Callable[[], None] = lambda: None) -> tuple[int, Any]:
    """(exit status, result of ``body()``). A :class:`CollectiveError` (raised on every rank
    alike) is printed by rank 0; a :class:`DistgnnError` on one rank (its part is damaged) is
    printed by that rank, which then ends the job; any other exception is a bug or a fault: its
    traceback, one line naming the rank, and the job ended. ``on_abort()`` runs just before a
    rank ends the job."""
    try:
        return 0, body()
    except CollectiveError as exc:
        if comm.rank == 0:
            print(f"distgnn {command}: error: {exc}", file=sys.stderr, flush=True)
        return 2, None
    except DistgnnError as exc:
        prefix = f"distgnn {command}: rank {comm.rank}: error: " if comm.size > 1 else f"distgnn {command}: error: "
        print(prefix + str(exc), file=sys.stderr, flush=True)
        if comm.size > 1:
            on_abort()
            comm.abort(2)
        return 2, None
    except Exception as exc:  # noqa: BLE001 - reported, then every rank is ended
        traceback.print_exc()
        print(f"distgnn {command}: rank {comm.rank}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        if comm.size > 1:
            on_abort()
            comm.abort(1)
        return 1, None


#: seconds a run may go on after Ctrl-C before the interrupt thread ends it itself
INTERRUPT_GRACE_S = 10.0


@contextmanager
def interrupts_end_the_run(rank: int, run_dir_of: Callable[[], Path | None],
                           interrupted: Callable[[Path | None], str], command: str,
                           launcher_sigterm: bool) -> Iterator[threading.Event]:
    """Inside it, an interrupt ends the run in bounded time; yields the event the main thread sets
    when it handles the interrupt itself. On leaving, the earlier signal set-up is restored (the
    watching thread stays blocked, as a daemon).

    Python runs a signal handler only between bytecodes, and a rank may be blocked inside MPI, so
    a thread waits on the signals' wake-up bytes. Ctrl-C (SIGINT) is the main thread's
    ``KeyboardInterrupt``; should the run still be going :data:`INTERRUPT_GRACE_S` later (twice in
    full-suite runs the main thread was found training on, the interrupt lost, cause not found),
    or at a second Ctrl-C, this thread prints ``interrupted(run_dir)`` from rank 0 and exits 130.
    With ``launcher_sigterm`` (under mpiexec, the user's Ctrl-C reaches the ranks as SIGTERM), a
    SIGTERM does the same at once, unless a rank left its abort marker (the job is ending because
    that rank failed, and said so); mpiexec itself then exits 1, its own status, whatever the
    ranks'."""
    handled = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield handled  # signals reach the main thread only: nothing to watch from here
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    earlier_fd = signal.set_wakeup_fd(write_fd)
    earlier_term = signal.getsignal(signal.SIGTERM)
    if launcher_sigterm:
        signal.signal(signal.SIGTERM, lambda signum, frame: None)  # the byte is the signal

    def finish() -> None:
        if handled.is_set():
            return  # the main thread is saying it and exiting
        if rank == 0:
            print(f"distgnn {command}: {interrupted(run_dir_of())}", file=sys.stderr, flush=True)
        os._exit(130)

    def watch() -> None:
        timer = None
        while True:
            got = os.read(read_fd, 1)
            if handled.is_set():
                continue
            if got[0] == signal.SIGINT:
                if timer is not None:
                    finish()  # a second Ctrl-C
                timer = threading.Timer(INTERRUPT_GRACE_S, finish)
                timer.daemon = True
                timer.start()
            elif got[0] == signal.SIGTERM and launcher_sigterm:
                run_dir = run_dir_of()
                if run_dir is not None and any(run_dir.glob(ABORT_MARKER.format(rank="*"))):
                    os._exit(1)
                finish()

    threading.Thread(target=watch, name="distgnn-interrupt", daemon=True).start()
    try:
        yield handled
    finally:
        # The thread is left blocked (never woken: a daemon thread that wakes while the
        # interpreter finalizes is ended with pthread_exit, which aborted ranks in a full-suite
        # run); no byte reaches it once the earlier set-up is back.
        handled.set()
        signal.set_wakeup_fd(earlier_fd)
        signal.signal(signal.SIGTERM, earlier_term)
