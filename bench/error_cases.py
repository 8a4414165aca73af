"""What a new user sees for each bad input and fault the reliability table lists: exit status and
the lines on stderr, measured by running each case as a user would.

    python -m bench.error_cases [--work DIR]

Prints one markdown row per case: the command, its exit status, the number of lines on stderr
(all, and those starting with ``distgnn``, the tool's own), and the first of those. Cases under
``mpiexec`` run without ``-q`` (one with it), so Open MPI's own note about ranks that exit
non-zero counts in "all lines". Needs Open MPI and runs as root or with OMPI_ALLOW_RUN_AS_ROOT set.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMP_NUM_THREADS": "1"}
CLI = [sys.executable, "-m", "distgnn"]


def mpi(ranks: int, quiet: bool = False) -> list[str]:
    return ["mpiexec", "--oversubscribe", *(["-q"] if quiet else []), "-n", str(ranks), *CLI]


def row(name: str, proc: subprocess.CompletedProcess | tuple[int, str]) -> None:
    code, err = (proc.returncode, proc.stderr) if hasattr(proc, "returncode") else proc
    lines = err.splitlines()
    ours = [line for line in lines if line.startswith("distgnn")]
    first = (ours[0] if ours else (lines[0] if lines else "")).replace("|", "\\|")
    print(f"| {name} | {code} | {len(lines)} | {len(ours)} | {first[:160]} |", flush=True)


def run(args: list, cwd: Path, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=cwd, env={**ENV, **kw.pop("env", {})},
                          capture_output=True, text=True, timeout=timeout, **kw)


def damage(parts: Path, k: int) -> None:
    chunk = next(p for p in sorted((parts / f"part_{k}.zarr" / "feat").rglob("*"))
                 if p.is_file() and p.name != "zarr.json")
    with open(chunk, "r+b") as f:
        f.truncate(10)


def interrupted_run(work: Path, parts: Path) -> tuple[int, str]:
    """mpiexec -n 2 distgnn train, SIGINT once a checkpoint exists."""
    out = work / "run-int"
    proc = subprocess.Popen(mpi(2) + ["train", str(parts), "--epochs", "100000", "--checkpoint-every",
                                      "2", "--eval-every", "0", "--threads", "1", "--quiet",
                                      "--out", str(out)],
                            cwd=work, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not list(out.glob("checkpoints/*/manifest.json")):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", help="scratch folder (default: a temporary one, removed)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="distgnn-errors-"))
    work.mkdir(parents=True, exist_ok=True)
    assert run(CLI + ["fetch", "synth-reddit", "--scale", "0.002", "--root", "data", "--quiet"],
               work).returncode == 0
    graph = work / "data" / "synth-reddit-x0.002" / "graph.zarr"
    for p in (2, 3):
        assert run(CLI + ["partition", graph, "--parts", p, "--out", f"p{p}", "--quiet"],
                   work).returncode == 0
    print("| case | exit | stderr lines | distgnn lines | first distgnn line |\n|---|---|---|---|---|")
    for p in (2, 3):
        bad = work / f"bad{p}"
        shutil.copytree(work / f"p{p}", bad, dirs_exist_ok=True)
        damage(bad, p - 1)
        row(f"truncated chunk in part_{p - 1}.zarr/feat, mpiexec -n {p} train",
            run(mpi(p) + ["train", bad, "--epochs", "1", "--out", f"r-bad{p}"], work))
    ro = work / "ro"
    ro.mkdir(exist_ok=True)
    mounted = run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", ro], work).returncode == 0
    if mounted:
        for p in (2, 3):
            row(f"--out on a read-only filesystem, mpiexec -n {p} train",
                run(mpi(p) + ["train", f"p{p}", "--epochs", "1", "--out", ro / "run"], work))
        run(["umount", ro], work)
    for p in (2, 3):
        row(f"a graph store as the partition folder, mpiexec -n {p} train",
            run(mpi(p) + ["train", graph, "--epochs", "1"], work))
    both = work / "both"
    shutil.copytree(work / "p3", both, dirs_exist_ok=True)
    damage(both, 1)
    damage(both, 2)
    row("two ranks' parts damaged, mpiexec -n 3 train",
        run(mpi(3) + ["train", both, "--epochs", "1", "--out", "r-both"], work))
    row("the same under mpiexec -q (Open MPI's own note left out)",
        run(mpi(3, quiet=True) + ["train", both, "--epochs", "1", "--out", "r-both"], work))
    config = work / "typo.yaml"
    config.write_text((REPO / "config" / "config.yaml").read_text().replace("  epochs:", "  epoch:"))
    row("config typo `epoch:` under `train:`, snakemake -n",
        run([sys.executable, "-m", "snakemake", "-n", "-c1", "--configfile", config, "-s",
             REPO / "Snakefile", "--directory", work], work))
    row("train --threads -3", run(CLI + ["train", "p2", "--threads", "-3"], work))
    help_text = " ".join(run(CLI + ["train", "--help"], work).stdout.split())
    print(f"| train --help says what --threads 0 means | {'yes' if '0: all cores' in help_text else 'NO'} | | | |")
    row("train --eval-every -1", run(CLI + ["train", "p2", "--eval-every", "-1"], work))
    row("Ctrl-C of mpiexec -n 2 train (a checkpoint written)", interrupted_run(work, work / "p2"))
    done = run(mpi(2) + ["train", "p2", "--epochs", "1", "--quiet", "--out", "r-ok"], work)
    summary = (work / "r-ok" / "summary.json").read_text() if done.returncode == 0 else ""
    print(f"| summary.json's MPI version has a NUL | {'yes' if chr(92) + 'u0000' in summary else 'no'} | | | |")
    bad_graph = work / "data-bad"
    shutil.copytree(work / "data", bad_graph, dirs_exist_ok=True)
    damage_store = bad_graph / "synth-reddit-x0.002" / "graph.zarr" / "feat"
    chunk = next(p for p in sorted(damage_store.rglob("*")) if p.is_file() and p.name != "zarr.json")
    with open(chunk, "r+b") as f:
        f.truncate(10)
    proc = run(CLI + ["partition", bad_graph / "synth-reddit-x0.002" / "graph.zarr", "--parts", "2",
                      "--out", "p-damaged"], work)
    row("partition of a graph with a damaged feature chunk", proc)
    print(f"| ... leaves its --out folder | {'yes' if (work / 'p-damaged').exists() else 'no'} | | | |")
    run(CLI + ["partition", graph, "--parts", "1", "--out", "p2", "--force", "--quiet"], work)
    stray = sorted(p.name for p in (work / "p2").glob("part_*.zarr"))
    print(f"| partition --parts 1 --force over a 2-part folder leaves | {' '.join(stray)} | | | |")
    (work / "p3" / "part_3.zarr").mkdir()
    row("verify on a folder with a stray part_3.zarr", run(CLI + ["verify", "p3"], work))
    row("verify on a path that does not exist", run(CLI + ["verify", "no/such/folder"], work))
    row("inspect on a path that does not exist", run(CLI + ["inspect", "no/such/graph.zarr"], work))
    row("fetch cora on a machine without internet access",
        run(CLI + ["fetch", "cora", "--root", "data-cora"], work, timeout=300))
    return 0


if __name__ == "__main__":
    sys.exit(main())
