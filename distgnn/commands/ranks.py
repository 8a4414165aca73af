"""How a command that runs as MPI ranks (``train``, ``predict``) reports failures: one line from
the rank that knows, and no rank left waiting."""
from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Callable

from distgnn.errors import CollectiveError, DistgnnError, os_error_line


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


def interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C that ``exc`` was raised while handling, if any: a library's clean-up that fails
    because the interrupt cut its work short (torch.save's zip writer: "unexpected pos") must not
    turn the user's Ctrl-C into a crash report."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__context__
    return None


def run_on_ranks(command: str, comm: Any, body: Callable[[], Any],
                 on_abort: Callable[[], None] = lambda: None) -> tuple[int, Any]:
    """(exit status, result of ``body()``). A :class:`CollectiveError` (raised on every rank
    alike) is printed by rank 0; a :class:`DistgnnError` or an operating system's error on one
    rank (its part is damaged, its disk is full) is printed by that rank, which then ends the job; any other exception is a bug or a fault: its
    traceback, one line naming the rank, and the job ended. ``on_abort()`` runs just before a
    rank ends the job."""
    try:
        try:
            return 0, body()
        except Exception as exc:
            interrupt = interrupt_behind(exc)
            if interrupt is not None:
                raise interrupt from None
            raise
    except CollectiveError as exc:
        if comm.rank == 0:
            print(f"distgnn {command}: error: {exc}", file=sys.stderr, flush=True)
        return 2, None
    except (DistgnnError, OSError) as exc:
        prefix = f"distgnn {command}: rank {comm.rank}: error: " if comm.size > 1 else f"distgnn {command}: error: "
        text = os_error_line(exc) if isinstance(exc, OSError) else str(exc)
        print(prefix + text, file=sys.stderr, flush=True)
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


def exit_on_launcher_sigterm(rank: int, run_dir_of: Callable[[], Path | None],
                             interrupted: Callable[[Path | None], str], command: str) -> None:
    """Under mpiexec, the user's Ctrl-C reaches the ranks as SIGTERM. Python runs a signal
    handler only between bytecodes, and a rank may be blocked inside MPI, so a thread waits on
    the signal's wake-up byte instead: on SIGTERM, unless a rank left its abort marker (the job is
    ending because that rank failed, and said so), rank 0 prints ``interrupted(run_dir)`` and every
    rank exits 130 at once (mpiexec itself then exits 1: its own status, whatever the ranks')."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)  # the byte is the signal

    def watch() -> None:
        while True:
            got = os.read(read_fd, 1)
            if not got or got[0] != signal.SIGTERM:
                continue  # SIGINT: the main thread's KeyboardInterrupt handles it
            run_dir = run_dir_of()
            if run_dir is not None and os.path.isdir(run_dir) and any(run_dir.glob(ABORT_MARKER.format(rank="*"))):
                os._exit(1)
            if rank == 0:
                print(f"distgnn {command}: {interrupted(run_dir)}", file=sys.stderr, flush=True)
            os._exit(130)

    threading.Thread(target=watch, name="distgnn-sigterm", daemon=True).start()
