"""How long a run on two emulated hosts takes to end after a host's fabric link is cut: seconds
from the cut to the watchdog's verdict on the launcher's stderr, and to the launcher's return.

    python -m bench.cut_link [--hang-timeout 10] [--repeats 3] [--work DIR]

Needs root and the emulated cluster (``bash cluster/multihost.sh start --hosts 2``). Each repeat
launches ``distgnn launch PARTDIR --executor slurm --preset multihost`` on the controller host,
waits for the run's first checkpoint, cuts mh2's fabric link, reads the launcher's stderr as it
comes, heals the link, and prints one row; then the same with the link cut before the launch
(the ranks' first collective meets it: the start-up guard's case); then the medians and the last
launcher's whole stderr.
"""
from __future__ import annotations

import argparse
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "cluster" / "multihost.sh"


def cluster(*args: str) -> None:
    subprocess.run(["bash", str(SCRIPT), *args], check=True, capture_output=True, timeout=300)


def one_cut(partdir: Path, work: Path, hang_timeout: float, k: int,
            when: str) -> tuple[float, float, list[str]]:
    """(seconds to the verdict line, seconds to the launcher's return, its stderr's lines), the
    link cut ``when`` = "training" (after the run's first checkpoint) or "start" (before the
    launch: the ranks' first collective meets it)."""
    run, logs = work / f"run-{when}-{k}", work / f"logs-{when}-{k}"
    shutil.rmtree(run, ignore_errors=True)
    if when == "start":
        cluster("link", "mh2", "down")
        cut = time.monotonic()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen(["bash", str(SCRIPT), "exec", "mhctl", sys.executable, "-m", "distgnn",
                             "launch", str(partdir), "--executor", "slurm", "--preset", "multihost",
                             "--log-dir", str(logs), "--out", str(run), "--epochs", "100000",
                             "--eval-every", "0", "--checkpoint-every", "4", "--hang-timeout",
                             str(hang_timeout), "--quiet"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put((time.monotonic(), l)) for l in proc.stderr],
                     daemon=True).start()
    deadline = time.monotonic() + 300
    while when == "training" and not list(run.glob("checkpoints/*/manifest.json")):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit(f"no checkpoint within 300 s (launcher status {proc.poll()})")
        time.sleep(0.2)
    if when == "training":
        cluster("link", "mh2", "down")
        cut = time.monotonic()
    verdict_at, said = None, []
    try:
        proc.wait(timeout=300)
        returned = time.monotonic() - cut
    finally:
        cluster("link", "mh2", "up")
    while not lines.empty():
        at, line = lines.get()
        said.append(line.rstrip("\n"))
        if verdict_at is None and "--hang-timeout" in line and "error:" in line:
            verdict_at = at - cut
    return (verdict_at if verdict_at is not None else float("nan")), returned, said


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hang-timeout", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", help="a folder every host sees (default: a new one under /tmp)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="distgnn-cut-"))
    work.mkdir(parents=True, exist_ok=True)
    from distgnn.data.fetch import fetch

    graph = fetch("synth-reddit", root=work / "data", scale=0.01, threads=1)
    partdir = work / "parts2"
    if not partdir.exists():
        subprocess.run([sys.executable, "-m", "distgnn", "partition", str(graph), "--parts", "2",
                        "--out", str(partdir), "--quiet"], check=True)
    print(f"load average {os.getloadavg()[0]:.2f}; --hang-timeout {args.hang_timeout:g}")
    print("| link cut | repeat | cut -> verdict (s) | cut -> launcher returns (s) |\n|---|---|---|---|")
    rows: dict[str, list[tuple[float, float]]] = {"training": [], "start": []}
    for k in range(args.repeats):
        for when in rows:  # alternating
            verdict_s, return_s, said = one_cut(partdir, work, args.hang_timeout, k, when)
            rows[when].append((verdict_s, return_s))
            print(f"| {when} | {k} | {verdict_s:.1f} | {return_s:.1f} |", flush=True)
    for when, got in rows.items():
        print(f"median, cut {when}: verdict {statistics.median(r[0] for r in got):.1f} s, launcher "
              f"returns {statistics.median(r[1] for r in got):.1f} s after the cut")
    verdicts = [line for line in said if "--hang-timeout" in line and "error:" in line]
    print(f"the last launcher's stderr ({len(said)} lines; the verdict {len(verdicts)} time(s)):")
    print("\n".join("    " + line for line in said))
    return 0


if __name__ == "__main__":
    sys.exit(main())
