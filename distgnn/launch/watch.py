"""Wait for a submitted job without ever waiting forever (docs/design.md#launch).

submitit learns a Slurm job's state from ``sacct``; on a cluster without accounting a job that dies
before writing its result file (e.g. an abort inside MPI_Init) would be waited for forever. Here the
result files of the tasks are read directly, and the scheduler is asked (``squeue``) whether the job
is still queued or running: once it is not, and no result file appears within a grace period, the
job is reported as failed with the tail of its logs.
"""
from __future__ import annotations

import pickle
import re
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

#: squeue states of a job that is still on its way (anything else, or no line, means it is over).
ACTIVE_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
                 "REQUEUE_FED", "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "PREEMPTED"}


class JobFailed(Exception):
    """The job ended without every task succeeding; ``str()`` is a multi-line report."""

    def __init__(self, summary: str, details: str) -> None:
        super().__init__(f"{summary}\n{details}")
        self.summary = summary
        self.details = details


#: Final states of a job that failed: its tasks have exited, so results need no long grace.
FAILED_STATES = {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
                 "DEADLINE"}
#: Grace after a failed final state (result files are written before a task exits).
FAILED_GRACE_S = 2.0


def squeue_state(job_id: str) -> str:
    """The job's state as ``squeue`` reports it (also recent final states); '' when not listed."""
    try:
        out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"],
                             capture_output=True, text=True, timeout=30).stdout
    except subprocess.TimeoutExpired:
        return "RUNNING"  # a slow controller is no evidence that the job is gone
    states = [line.strip() for line in out.splitlines() if line.strip()]
    active = [st for st in states if st in ACTIVE_STATES]
    return active[0] if active else (states[0] if states else "")


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a text file ('' when it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def log_tails(tasks: list[Any], lines: int = 30, skip: frozenset[int] = frozenset()) -> str:
    """The stderr (else stdout) tail of each task but those in ``skip`` (already relayed), headed
    by its log file's path."""
    parts = []
    for i, task in enumerate(tasks):
        if i in skip:
            continue
        for path in (task.paths.stderr, task.paths.stdout):
            text = tail(path, lines)
            if text:
                parts.append(f"--- task {i}: {path} (last {lines} lines)\n{text}")
                break
        else:
            parts.append(f"--- task {i}: no log at {task.paths.stdout}")
    return "\n".join(parts)


#: The last line of a Python traceback: ``SomeError: message``.
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\w*: ")
#: Wrappers that only repeat what the command printed.
_WRAPPERS = ("submitit.core.utils.FailedJobError", "subprocess.CalledProcessError")


#: distgnn's own one-line verdicts (``distgnn train: rank 1: error: ...``, the watchdog's too,
#: ``distgnn train: rank 1: RuntimeError: ...``), also where an exception's message quotes one
_OWN_ERROR = re.compile(r"distgnn [a-z-]+: (rank \d+: )?(error: |[A-Za-z_]\w*(Error|Exception)\w*: )")
#: submitit's own log lines (``submitit INFO (date) - Loading pickle: ...``): never the cause
_SUBMITIT_LOG = re.compile(r"^submitit (DEBUG|INFO|WARNING|ERROR) ")


def error_line(text: str) -> str:
    """The most telling line of an error text: distgnn's own error line (a rank's, the hang
    watchdog's verdict), else the innermost ``XError: message`` of the command (not submitit's
    wrappers), else the last non-blank line that is neither submitit's own log nor a rule of
    dashes."""
    lines = [ln.strip() for ln in text.splitlines()]
    own = [m for m in map(_OWN_ERROR.search, lines) if m]
    if own:
        return own[-1].string[own[-1].start():]
    found = [ln for ln in lines if _EXC_LINE.match(ln) and not ln.startswith(_WRAPPERS)]
    if found:
        return found[-1]
    rest = [ln for ln in lines if ln and set(ln) != {"-"} and not _SUBMITIT_LOG.match(ln)]
    return rest[-1] if rest else "(no message)"


def read_outcome(path: Path) -> tuple[str, Any] | None:
    """``("success", value)`` or ``("error", traceback_text)`` from a result pickle, None if absent."""
    if not path.exists():
        return None
    for _ in range(10):  # the file may be caught mid-write on a network filesystem
        try:
            with path.open("rb") as fh:
                return pickle.load(fh)
        except (EOFError, pickle.UnpicklingError):
            time.sleep(0.2)
    return ("error", f"unreadable result file {path}")


class LogFollower:
    """Copies what a task appends to its log files to a stream (progress of rank 0, live)."""

    def __init__(self, paths: list[Path], stream: Any) -> None:
        self.offsets = {p: 0 for p in paths}
        self.stream = stream

    def poll(self) -> None:
        for path, offset in self.offsets.items():
            try:
                with path.open("rb") as fh:
                    fh.seek(offset)
                    data = fh.read()
            except OSError:
                continue
            if data:
                self.offsets[path] = offset + len(data)
                self.stream.write(data.decode(errors="replace"))
                self.stream.flush()


def wait_for_tasks(tasks: list[Any], job_id: str, job_state: Callable[[], str], *,
                   grace_s: float = 30.0, poll_s: float = 1.0,
                   deadline_s: float | None = None, follow: LogFollower | None = None,
                   pending_reason: Callable[[], str] | None = None,
                   pending_limit_s: float | None = None) -> list[Any]:
    """Wait until every task of job ``job_id`` wrote a successful result, and return the results.

    ``tasks`` are submitit jobs (one per task, with ``.paths``); ``job_state()`` is the job's
    scheduler state (one of ACTIVE_STATES while it is queued or running; '' once unknown). Raises ``JobFailed`` as soon as one task reports an
    error (its traceback first, then every task's log tail), when the job is no longer active and
    some result is still missing ``grace_s`` seconds later, or after ``deadline_s`` seconds.
    ``follow``, if given, is polled every round (to relay task 0's log as it grows; the report
    then leaves that log's tail out, as it was printed already). While the
    job is PENDING, ``pending_reason()`` (the scheduler's reason) ends it at once when the reason
    can never clear (:data:`distgnn.launch.placement.NEVER_PLACED`), and ``pending_limit_s``
    ends it when it has pended that long, each with the reason.
    """
    from distgnn.launch.placement import NEVER_PLACED

    pending_since: float | None = None
    relayed = frozenset({0}) if follow is not None else frozenset()   # task 0's log, relayed live
    start = time.monotonic()
    inactive_since: float | None = None
    limit, state = grace_s, ""
    last_check = -1e9
    while True:
        if follow is not None:
            follow.poll()
        outcomes = [read_outcome(t.paths.result_pickle) for t in tasks]
        errors = [(i, o[1]) for i, o in enumerate(outcomes) if o is not None and o[0] != "success"]
        if errors:
            summary = f"job {job_id} failed: task {errors[0][0]}: {error_line(str(errors[0][1]))}"
            details = "\n".join(f"--- task {i} error:\n{str(err).strip()}" for i, err in errors
                                 if i not in relayed)   # a relayed task's log holds its error
            raise JobFailed(summary, "\n".join(t for t in (details, log_tails(tasks, skip=relayed)) if t))
        if all(o is not None for o in outcomes):
            return [o[1] for o in outcomes]
        now = time.monotonic()
        if now - last_check >= max(poll_s, 2.0):  # do not hammer the controller
            last_check = now
            state = job_state()
            pending_since = (pending_since or now) if state == "PENDING" else None
            if pending_since is not None and pending_reason is not None:
                reason = pending_reason() or "none given"
                if reason in NEVER_PLACED:
                    raise JobFailed(f"job {job_id} cannot start: Slurm keeps it pending with reason "
                                    f"{reason} (the job asks for more than its partition, account "
                                    f"or QOS allows); it was cancelled", "")
                if pending_limit_s is not None and now - pending_since > pending_limit_s:
                    raise JobFailed(f"job {job_id} still pending after {now - pending_since:.0f} s "
                                    f"(Slurm's reason: {reason}; the preset's pending_timeout_min); "
                                    f"it was cancelled", "")
            if state in ACTIVE_STATES:
                inactive_since = None
            else:
                inactive_since = now if inactive_since is None else inactive_since
                limit = min(grace_s, FAILED_GRACE_S) if state in FAILED_STATES else grace_s
        if inactive_since is not None and now - inactive_since > limit:
            missing = [i for i, o in enumerate(outcomes) if o is None]
            tails = log_tails(tasks)
            summary = (f"job {job_id} ended ({state or 'no longer listed by the scheduler'}) and "
                       f"tasks {missing} left no result file within {limit:.0f} s; "
                       f"last error: {error_line(tails)}")
            raise JobFailed(summary, log_tails(tasks, skip=relayed))
        if deadline_s is not None and now - start > deadline_s:
            waiting = f"state {state or 'unknown'}"
            if state == "PENDING" and pending_reason is not None:
                waiting += f", Slurm's reason: {pending_reason() or 'none given'}"
            raise JobFailed(f"job {job_id} did not finish within {deadline_s:.0f} s ({waiting}); "
                            f"it was cancelled", log_tails(tasks, skip=relayed))
        time.sleep(poll_s)
