"""Helpers shared by the benchmarks: timing by interleaved repeats, machine line, STREAM triad."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import torch


def machine_line(threads: int) -> str:
    """One line naming the CPU, the cores seen, the threads used, the load and the date (UTC)."""
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"{model}, {os.cpu_count()} cores visible, {threads} threads used, load average {load} "
            f"(shared machine), torch {torch.__version__}, {now}")


def add_codec_table_options(parser) -> None:
    """The options of the codec benches (bench.message_codec, bench.gather_encode): row widths,
    repeats, threads per call, and where to write the table."""
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 172, 256])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 0],
                        help="threads per call (0: all cores)")
    parser.add_argument("--out", default=None, help="also write the table here")


def table_row(lines: List[str], *cells: object) -> None:
    """Append one markdown row of ``cells`` to ``lines`` and print it at once (long benches)."""
    line = "| " + " | ".join(str(c) for c in cells) + " |"
    lines.append(line)
    print(line, flush=True)


def finish_table(lines: List[str], out: str | None) -> None:
    """Print and append the load average after a table's runs; write ``lines`` to ``out`` when
    given (a bench's ``--out``)."""
    tail = f"\nload average after: {os.getloadavg()[0]:.2f}"
    print(tail)
    lines.append(tail)
    if out:
        Path(out).write_text("\n".join(lines) + "\n")


def interleaved_median(cases: Dict[str, Callable[[], object]], repeats: int) -> Dict[str, float]:
    """Seconds per case: the median over ``repeats`` rounds, cases interleaved within each round
    (as :func:`interleaved_min`)."""
    times: Dict[str, List[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def interleaved_min(cases: Dict[str, Callable[[], object]], repeats: int) -> Dict[str, float]:
    """Seconds per case: the minimum over ``repeats`` rounds, cases interleaved within each round
    so that a burst of load from other processes hits every case alike."""
    best = {name: float("inf") for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def stream_triad(threads: int, n: int = 32 * 1024 * 1024, repeats: int = 5) -> float:
    """STREAM triad a = b + s * c in float32 with torch on ``threads`` threads; GB/s (3 arrays
    moved, write-allocate not counted, as STREAM reports)."""
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        b = torch.rand(n)
        c = torch.rand(n)
        a = torch.empty(n)
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            torch.add(b, c, alpha=3.0, out=a)
            best = min(best, time.perf_counter() - start)
        return 3 * n * 4 / best / 1e9
    finally:
        torch.set_num_threads(old)


def markdown_table(header: List[str], rows: List[List[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


#: environment of the MPI runs of the benches: Open MPI as root, one OpenMP thread per rank
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OUTDATED_IGNORE": "1",
           "OMP_NUM_THREADS": "1"}


def run_logged(*args, log: Path, timeout: float | None = None, env: Dict[str, str] | None = None) -> None:
    """Run a command with :data:`MPI_ENV` (then ``env``), its output to ``log``; exit with the
    log's tail when it fails. With ``timeout`` (seconds) the command runs in its own process group,
    which is ended (SIGTERM, SIGKILL 10 s later) when the time is up, and :class:`TimeoutError`
    is raised; it is ended too when this process is stopped meanwhile (an exception, SystemExit)."""
    cmd = [str(a) for a in args]
    full_env = {**os.environ, **MPI_ENV, **(env or {})}
    with open(log, "w") as out:
        if timeout is None:
            returncode = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=full_env).returncode
        else:
            import signal

            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=full_env,
                                    start_new_session=True)
            try:
                returncode = proc.wait(timeout=max(timeout, 0.0))
            except BaseException as exc:  # the time is up, or this process is being stopped
                for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
                    try:
                        os.killpg(proc.pid, sig)
                    except ProcessLookupError:
                        break
                    try:
                        proc.wait(timeout=wait)
                        break
                    except subprocess.TimeoutExpired:
                        continue
                if isinstance(exc, subprocess.TimeoutExpired):
                    raise TimeoutError(f"stopped after {timeout:.0f} s: {' '.join(cmd)}") from None
                raise
    if returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, args))}\n{Path(log).read_text()[-3000:]}")


def work_folder(path: str | None, prefix: str) -> Path:
    """The bench's work folder: ``path`` (made if missing), or a new temporary one."""
    import tempfile

    folder = Path(path or tempfile.mkdtemp(prefix=prefix))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Transcript:
    """``say(line)`` prints a line and keeps it, so a bench can also append its whole output to a
    results file (:meth:`append_to`)."""

    def __init__(self) -> None:
        self.lines: List[str] = []

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        self.lines.append(line)

    def append_to(self, path: str | None) -> None:
        if path:
            with open(path, "a") as f:
                f.write("\n".join(self.lines) + "\n\n")
