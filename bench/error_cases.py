"""What a new user sees for each bad input and fault the reliability table lists: exit status and
the lines on stderr, measured by running each case as a user would.

    python -m bench.error_cases [--work DIR]

Prints one markdown row per case: the command, its exit status, the number of lines on stderr
(all, and those starting with ``distgnn``, the tool's own), whether it is clean (the exit status
it should have, no traceback, no MPI_ABORT, one error line of the tool's own) and the first of
those lines; then "N clean of M". The cases of a full disk and a read-only folder need root (a
private tmpfs and bind mount through ``unshare -m``); Slurm's answers come from stand-ins. Cases under
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


#: (case, clean) of every row printed, for the closing count
RESULTS: list[tuple[str, bool]] = []


def row(name: str, proc: subprocess.CompletedProcess | tuple[int, str], expect: int = 2,
        own: str = "distgnn") -> None:
    """One table row. Clean: exit ``expect``, no traceback, no MPI_ABORT, and (for a refusal)
    exactly one verdict line of the tool's own (lines starting with ``own``: ``distgnn``, or the
    Snakefile's config check under Snakemake, whose exit status on an error is always 1)."""
    code, err = (proc.returncode, proc.stderr) if hasattr(proc, "returncode") else proc
    lines = err.splitlines()
    ours = [line for line in lines if line.startswith(own)]
    first = (ours[0] if ours else (lines[0] if lines else "")).replace("|", "\\|")
    verdicts = [line for line in ours if own != "distgnn" or "error" in line or "interrupted" in line]
    clean = (code == expect and "Traceback" not in err and "MPI_ABORT" not in err
             and (expect == 0 or len(verdicts) == 1))
    RESULTS.append((name, clean))
    print(f"| {name} | {code} | {len(lines)} | {len(ours)} | {'yes' if clean else 'NO'} | "
          f"{first[:160]} |", flush=True)


def stand_ins(folder: Path, **scripts: str) -> dict[str, str]:
    """Executables ``name`` (shell bodies) first on PATH: a Slurm that answers as asked."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in scripts.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def owned_outputs(work: Path, graph: Path) -> None:
    """The cases of a run that owns its folder and writes only what it may (docs/design.md#run-folder,
    docs/design.md#write-faults)."""
    for parts in (2, 3):   # folders of their own: the cases above change p2 and p3
        assert run(CLI + ["partition", graph, "--parts", parts, "--out", f"own{parts}", "--quiet"],
                   work).returncode == 0
    train = mpi(2) + ["train", "own2", "--hidden", "16", "--threads", "1", "--quiet"]
    assert run(train + ["--epochs", "6", "--checkpoint-every", "2", "--out", "r-done"], work).returncode == 0
    row("predict --out the graph store", run(mpi(2) + ["predict", "r-done", "--out", graph], work))
    row("train --out a partition folder", run(train + ["--epochs", "1", "--out", "own3"], work))
    row("partition --out the graph store, --force",
        run(CLI + ["partition", graph, "--parts", 2, "--out", graph, "--force", "--quiet"], work))
    row("train --resume --epochs 3 on a finished 6-epoch run",
        run(train + ["--epochs", "3", "--resume", "--out", "r-done"], work))
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from distgnn.train.run_folder import RunLock; "
                               "lock = RunLock(Path('r-done')).acquire(); "
                               "print('locked', flush=True); time.sleep(120)"],
                              cwd=work, env=ENV, stdout=subprocess.PIPE, text=True)
    holder.stdout.readline()
    row("a second train on a run folder in use", run(train + ["--epochs", "1", "--out", "r-done"], work))
    holder.kill()
    holder.wait()
    damaged = work / "r-damaged"
    shutil.copytree(work / "r-done", damaged, dirs_exist_ok=True)
    os.truncate(damaged / "checkpoints" / "epoch_000004" / "rank_1.pt", 100)
    row("--resume with a truncated newest checkpoint (resumes from the one before)",
        run(train + ["--epochs", "6", "--checkpoint-every", "2", "--resume", "--out", damaged], work),
        expect=0)
    row("train --out a 300-character name", run(train + ["--epochs", "1", "--out", "x" * 300], work))
    if os.geteuid() == 0 and shutil.which("unshare"):
        cmd = " ".join(map(str, train))
        full = run(["unshare", "-m", "bash", "-c",
                    "mkdir -p disk && mount -t tmpfs -o size=2m tmpfs disk && dd if=/dev/zero "
                    f"of=disk/filler bs=4096 count=337 status=none && {cmd} --epochs 6 "
                    "--checkpoint-every 1 --out disk/run"], work)
        row("a full disk at the third checkpoint", full)
        ro = run(["unshare", "-m", "bash", "-c",
                  "mount --bind r-done/checkpoints r-done/checkpoints && mount -o remount,ro,bind "
                  f"r-done/checkpoints && {cmd} --epochs 6 --checkpoint-every 2 --resume --out r-done"],
                 work)
        row("--resume with a read-only checkpoints folder", ro)
    row("fetch synth-reddit --scale nan", run(CLI + ["fetch", "synth-reddit", "--scale", "nan",
                                                    "--root", "data-nan"], work))
    row("scaling-model estimate-memory --layers 0",
        run(CLI + ["scaling-model", "estimate-memory", "own2", "--layers", "0"], work))
    row("scaling-model estimate-memory --hidden -5",
        run(CLI + ["scaling-model", "estimate-memory", "own2", "--hidden", "-5"], work))


def slurm_cases(work: Path) -> None:
    """sbatch with no controller, and a job wider than its partition (stand-ins for sbatch and
    sinfo answering as Slurm's do), and a misspelt dataset in the workflow's config."""
    down = stand_ins(work / "bin-down", sinfo="exit 1", sbatch="echo 'sbatch: error: Batch job "
                     "submission failed: Unable to contact slurm controller (connect failure)' >&2; exit 1")
    row("launch --executor slurm with the controller down",
        run(CLI + ["launch", "own3", "--executor", "slurm", "--epochs", "1", "--log-dir", "logs-down"],
            work, env=down))
    print(f"| ... leaves files in its --log-dir | "
          f"{'yes' if any(p.is_file() for p in (work / 'logs-down').rglob('*')) else 'no'} | | | | |")
    two = stand_ins(work / "bin-two", sinfo="printf 'hosts*|mh1|1\\nhosts*|mh2|1\\n'",
                    sbatch="echo 'Submitted batch job 1'")
    row("launch of 3 parts, preset multihost, on two hosts",
        run(CLI + ["launch", "own3", "--executor", "slurm", "--preset", "multihost", "--epochs", "1",
                   "--log-dir", "logs-two"], work, env=two))
    config = work / "dataset-typo.yaml"
    config.write_text((REPO / "config" / "config.yaml").read_text().replace(
        "dataset: synth-reddit", "dataset: synth-redit"))
    row("config `dataset: synth-redit`, snakemake -n",
        run([sys.executable, "-m", "snakemake", "-n", "-c1", "--configfile", config, "-s",
             REPO / "Snakefile", "--directory", work], work), expect=1, own="Error in the config")


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
    print("| case | exit | stderr lines | distgnn lines | clean | first distgnn line |\n"
          "|---|---|---|---|---|---|")
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
             REPO / "Snakefile", "--directory", work], work), expect=1, own="Error in the config")
    row("train --threads -3", run(CLI + ["train", "p2", "--threads", "-3"], work))
    help_text = " ".join(run(CLI + ["train", "--help"], work).stdout.split())
    print(f"| train --help says what --threads 0 means | {'yes' if '0: all cores' in help_text else 'NO'} | | | | |")
    row("train --eval-every -1", run(CLI + ["train", "p2", "--eval-every", "-1"], work))
    # mpiexec exits 1 whatever its ranks return (they exit 130; docs/reliability.md)
    row("Ctrl-C of mpiexec -n 2 train (a checkpoint written)", interrupted_run(work, work / "p2"),
        expect=1)
    done = run(mpi(2) + ["train", "p2", "--epochs", "1", "--quiet", "--out", "r-ok"], work)
    summary = (work / "r-ok" / "summary.json").read_text() if done.returncode == 0 else ""
    print(f"| summary.json's MPI version has a NUL | {'yes' if chr(92) + 'u0000' in summary else 'no'} | | | | |")
    bad_graph = work / "data-bad"
    shutil.copytree(work / "data", bad_graph, dirs_exist_ok=True)
    damage_store = bad_graph / "synth-reddit-x0.002" / "graph.zarr" / "feat"
    chunk = next(p for p in sorted(damage_store.rglob("*")) if p.is_file() and p.name != "zarr.json")
    with open(chunk, "r+b") as f:
        f.truncate(10)
    proc = run(CLI + ["partition", bad_graph / "synth-reddit-x0.002" / "graph.zarr", "--parts", "2",
                      "--out", "p-damaged"], work)
    row("partition of a graph with a damaged feature chunk", proc)
    print(f"| ... leaves its --out folder | {'yes' if (work / 'p-damaged').exists() else 'no'} | | | | |")
    run(CLI + ["partition", graph, "--parts", "1", "--out", "p2", "--force", "--quiet"], work)
    stray = sorted(p.name for p in (work / "p2").glob("part_*.zarr"))
    print(f"| partition --parts 1 --force over a 2-part folder leaves | {' '.join(stray)} | | | | |")
    (work / "p3" / "part_3.zarr").mkdir()
    row("verify on a folder with a stray part_3.zarr", run(CLI + ["verify", "p3"], work))
    row("verify on a path that does not exist", run(CLI + ["verify", "no/such/folder"], work))
    row("inspect on a path that does not exist", run(CLI + ["inspect", "no/such/graph.zarr"], work))
    row("fetch cora on a machine without internet access",
        run(CLI + ["fetch", "cora", "--root", "data-cora"], work, timeout=300))
    owned_outputs(work, graph)
    slurm_cases(work)
    unclean = [name for name, clean in RESULTS if not clean]
    print(f"\n{len(RESULTS) - len(unclean)} clean of {len(RESULTS)}"
          + (f"; not clean: {'; '.join(unclean)}" if unclean else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
