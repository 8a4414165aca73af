"""A Slurm job that cannot run ends in one line, never a wait for ever
(docs/design.md#launch-placement): sbatch's refusal (no controller) in its own words with nothing
left behind, a job larger than its partition refused before it is submitted, a pending job whose
reason can never clear (or that pends past the preset's deadline) cancelled with the reason.
Stand-ins for sbatch, sinfo and squeue answer as Slurm's own do; the last test asks the local
one-node Slurm itself."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, partitioned_twin, run_cli
from test_run_folder import digest
from distgnn.launch.placement import Shape, placement_problem

PRESETS = REPO / "cluster" / "submitit.yaml"


def stand_ins(folder: Path, **scripts: str) -> dict[str, str]:
    """Executables ``name`` -> shell body under ``folder``, first on PATH (the env to run with);
    an ``srun`` that does nothing unless given (submitit looks for one before it submits, and a
    machine without Slurm has none)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in {"srun": "exit 0", **scripts}.items():
        path = folder / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def one_line(proc, *words: str) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and all(w in lines[0] for w in words), lines
    return lines[0]


@pytest.fixture(scope="module")
def four_parts(tmp_path_factory) -> Path:
    return partitioned_twin(tmp_path_factory.mktemp("placement"), 4)[1]


@pytest.fixture(scope="module")
def two_parts(tmp_path_factory) -> Path:
    return partitioned_twin(tmp_path_factory.mktemp("placement2"), 2)[1]


def test_sbatch_refusing_is_its_own_words_and_leaves_nothing(four_parts, tmp_path) -> None:
    unreachable = "echo 'slurm_load_partitions: Unable to contact slurm controller (connect failure)' >&2; exit 1"
    env = stand_ins(tmp_path / "bin", sinfo=unreachable,
                    sbatch="echo 'sbatch: error: Batch job submission failed: Unable to contact slurm "
                           "controller (connect failure)' >&2; exit 1")
    logs, before = tmp_path / "logs", digest(four_parts)
    # the nodes' layout given by the site keys, so the launch gets as far as sbatch
    presets = tmp_path / "presets.yaml"
    presets.write_text((REPO / "cluster" / "submitit.yaml").read_text()
                       + "site:\n  ranks_per_node: socket\n  cpus_per_task: socket\n"
                         "  sockets_per_node: 2\n  cores_per_socket: 1\n")
    proc = run_cli("launch", four_parts, "--executor", "slurm", "--preset", "site", "--presets", presets,
                   "--epochs", "1", "--log-dir", logs, "--quiet", cwd=tmp_path, env=env)
    one_line(proc, "Slurm refused the job: sbatch: error: Batch job submission failed: Unable to "
                   "contact slurm controller", "nothing was submitted")
    assert not any(p.is_file() for p in logs.rglob("*")), sorted(logs.rglob("*"))
    # the slurm preset asks sinfo for the layout first: its words, nothing submitted
    proc = run_cli("launch", four_parts, "--executor", "slurm", "--epochs", "1", "--log-dir", logs,
                   "--quiet", cwd=tmp_path, env=env)
    one_line(proc, "sinfo cannot say", "Unable to contact slurm controller", "sockets_per_node")
    assert not any(p.is_file() for p in logs.rglob("*")), sorted(logs.rglob("*"))
    assert digest(four_parts) == before


def test_no_slurm_client_is_one_line_not_submitits_traceback(tmp_path, monkeypatch) -> None:
    from distgnn.errors import DistgnnError
    from distgnn.launch import submit

    real_which = submit.shutil.which
    monkeypatch.setattr(submit.shutil, "which", lambda name: None if name == "srun" else real_which(name))
    with pytest.raises(DistgnnError, match="no srun on PATH: .* --executor local"):
        submit.launch(["true"], 2, "slurm", {"ranks_per_node": 2, "cpus_per_task": 1}, tmp_path / "logs")
    assert not (tmp_path / "logs").exists()


def test_a_job_larger_than_its_partition_is_refused_before_submitting(four_parts, tmp_path) -> None:
    called, before = tmp_path / "sbatch-called", digest(four_parts)
    env = stand_ins(tmp_path / "bin", sinfo="printf 'hosts*|mh1|1\\nhosts*|mh2|1\\n'",
                    sbatch=f"touch {called}; echo 'Submitted batch job 1'")
    proc = run_cli("launch", four_parts, "--executor", "slurm", "--preset", "multihost",
                   "--epochs", "1", "--log-dir", tmp_path / "logs", "--quiet", cwd=tmp_path, env=env)
    one_line(proc, "Slurm partition 'hosts' cannot place the job", "4 nodes of 1 rank x 1 CPU",
             "2 nodes", "nothing was submitted")
    assert not called.exists() and digest(four_parts) == before


def test_placement_counts_nodes_and_cpus_per_node(tmp_path, monkeypatch) -> None:
    env = stand_ins(tmp_path / "bin", sinfo="printf 'debug*|a|8\\ndebug*|b|8\\nbig|c|64\\n'")
    monkeypatch.setenv("PATH", env["PATH"])
    assert placement_problem(Shape(2, 4, 2), None) is None            # 2 nodes x 8 CPUs
    assert "cannot place" in placement_problem(Shape(3, 1, 1), None)  # 3 nodes of 2
    assert "cannot place" in placement_problem(Shape(1, 4, 4), None)  # 16 CPUs on one node
    assert placement_problem(Shape(1, 4, 16), "big") is None
    assert "no partition 'gpu'" in placement_problem(Shape(1, 1, 1), "gpu")


def test_a_pending_job_ends_with_slurms_reason(tmp_path) -> None:
    from distgnn.launch.watch import JobFailed, wait_for_tasks

    from test_launch import _FakeTask

    tasks = [_FakeTask(tmp_path, 0)]
    start = time.monotonic()
    with pytest.raises(JobFailed, match="cannot start: Slurm keeps it pending with reason PartitionNodeLimit"):
        wait_for_tasks(tasks, "9", lambda: "PENDING", poll_s=0.01,
                       pending_reason=lambda: "PartitionNodeLimit")
    assert time.monotonic() - start < 1
    with pytest.raises(JobFailed, match=r"still pending after [0-9]+ s \(Slurm's reason: Resources"):
        wait_for_tasks(tasks, "9", lambda: "PENDING", poll_s=0.01, pending_limit_s=0.1,
                       pending_reason=lambda: "Resources")
    assert time.monotonic() - start < 10


@pytest.mark.slurm
def test_the_local_slurm_refuses_a_job_wider_than_its_node(local_slurm, four_parts, tmp_path) -> None:
    from distgnn.launch.placement import partition_nodes, socket_layout

    _, cpus = partition_nodes(None)
    sockets, cores = socket_layout(None)
    # the slurm preset puts a rank on each socket: one node more than the partition has
    wide = sockets * (len(cpus) + 1)
    parts = partitioned_twin(tmp_path, wide)[1] if wide != 4 else four_parts
    proc = run_cli("launch", parts, "--executor", "slurm", "--epochs", "1", "--log-dir",
                   tmp_path / "logs", "--quiet", cwd=tmp_path)
    one_line(proc, "cannot place the job", f"{len(cpus) + 1} nodes of {sockets} rank",
             f"x {cores} CPU", "nothing was submitted")


def test_error_line_prefers_distgnns_verdict_and_never_quotes_submitits_log() -> None:
    from distgnn.launch.watch import error_line

    verdict = ("distgnn train: rank 0: error: no rank has made progress for more than 10 s "
               "(--hang-timeout): rank 1 (mh2) waits for rank 0 (mh1) in exchange_rows")
    log = "\n".join(["epoch 9/52: loss 1.2", verdict, "Traceback (most recent call last):",
                     "ConnectionResetError: [Errno 104] Connection reset by peer",
                     "submitit INFO (2026-12-06 10:00:00,000) - Loading pickle: /x/1_submitted.pkl"])
    assert error_line(log) == verdict
    assert error_line("submitit INFO (2026) - Loading pickle: x\nsrun: error: mh2: task 1: Killed\n"
                      "submitit INFO (2026) - Job completed") == "srun: error: mh2: task 1: Killed"
    quoted = "distgnn.launch.tasks.MpiexecError: mpiexec -n 2 exited with status 1: " + verdict
    assert error_line(quoted) == verdict


@pytest.mark.mpi
def test_a_failed_launch_says_its_verdict_once_and_how_to_continue(two_parts, tmp_path) -> None:
    import json

    from conftest import fault_env

    run = tmp_path / "run"
    common = ["launch", two_parts, "--executor", "local", "--epochs", "6", "--checkpoint-every",
              "2", "--hidden", "16", "--quiet", "--log-dir", tmp_path / "logs", "--out", run]
    proc = run_cli(*common, cwd=tmp_path,
                   env=fault_env(DISTGNN_TEST_FAIL_RANK="1", DISTGNN_TEST_FAIL_EPOCH="4"))
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and last.startswith("distgnn launch: error: job "), proc.stderr[-3000:]
    assert "failed: task 0: distgnn train: rank 1: RuntimeError: injected failure" in last, last
    assert f"the newest checkpoint is {run}/checkpoints/epoch_000004 (epoch 4): rerun this launch " \
           f"with --resume" in last, last
    # the rank's verdict is relayed once from the log, not again in a report of the same log
    assert sum(line.startswith("distgnn train: rank 1: RuntimeError") for line in
               proc.stderr.splitlines()) == 1, proc.stderr[-5000:]
    proc = run_cli(*common, "--resume", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    unbroken = tmp_path / "unbroken"
    assert run_cli(*common[:-1], unbroken, cwd=tmp_path).returncode == 0
    losses = [[json.loads(line)["loss"] for line in (r / "metrics.jsonl").read_text().splitlines()]
              for r in (run, unbroken)]
    assert losses[0] == losses[1]


@pytest.mark.slurm
def test_the_local_slurm_gets_the_estimates_memory(local_slurm, two_parts, tmp_path) -> None:
    """The slurm preset's ``mem_gb: auto`` reaches Slurm itself: the finished job's requested
    memory per node, read back with scontrol, is the estimate plus the margin the launch named."""
    import re
    import subprocess

    logs = tmp_path / "logs"
    proc = run_cli("launch", two_parts, "--executor", "slurm", "--epochs", "1", "--hidden", "16",
                   "--log-dir", logs, "--out", tmp_path / "run", cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    asked = re.search(r"asking Slurm for (\d+) GiB per node \(estimate", proc.stderr)
    assert asked, proc.stderr[-3000:]
    job = next(p.name for p in logs.iterdir() if p.name.isdigit())
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
    assert re.search(rf"\bMinMemoryNode={asked.group(1)}G\b", shown), shown
    # the preset's socket layout, from the local Slurm's sinfo (each CPU a socket of one core)
    assert re.search(r"\bNumNodes=1\b", shown) and re.search(r"\bNumTasks=2\b", shown), shown
    assert re.search(r"\bCPUs/Task=1\b", shown), shown


def test_socket_presets_take_the_nodes_layout_from_the_site_keys_or_sinfo(tmp_path, monkeypatch) -> None:
    """``ranks_per_node: socket`` / ``cpus_per_task: socket`` (the slurm preset's default): one rank
    per socket with a thread per core, from the site keys where given, else sinfo's smallest node
    of the partition; neither is one line naming the keys."""
    from distgnn.errors import DistgnnError
    from distgnn.launch.placement import resolve_sockets
    from distgnn.launch.submit import slurm_parameters

    socket = {"ranks_per_node": "socket", "cpus_per_task": "socket"}
    env = stand_ins(tmp_path / "bin", sinfo="case \"$*\" in *%X*) printf 'cpu*|a|2|28\\ncpu*|b|2|24\\nbig|c|4|32\\n';; "
                                            "*) printf 'cpu*|a|56\\ncpu*|b|48\\nbig|c|128\\n';; esac")
    monkeypatch.setenv("PATH", env["PATH"])
    resolved = resolve_sockets(socket, "slurm")
    assert (resolved["ranks_per_node"], resolved["cpus_per_task"]) == (2, 24)   # node b is the smaller
    params = slurm_parameters(resolved, 8, "job")
    assert (params["nodes"], params["tasks_per_node"], params["cpus_per_task"]) == (4, 2, 24)
    assert "export OMP_NUM_THREADS=24" in params["slurm_setup"]
    big = resolve_sockets({**socket, "slurm_partition": "big"}, "slurm")
    assert (big["ranks_per_node"], big["cpus_per_task"]) == (4, 32)
    site = resolve_sockets({**socket, "sockets_per_node": 1, "cores_per_socket": 8}, "slurm")
    assert (site["ranks_per_node"], site["cpus_per_task"]) == (1, 8)
    assert resolve_sockets({"ranks_per_node": 3, "cpus_per_task": 5}, "x") == {"ranks_per_node": 3, "cpus_per_task": 5}
    stand_ins(tmp_path / "bin", sinfo="echo 'sinfo: error: Unable to contact slurm controller' >&2; exit 1")
    with pytest.raises(DistgnnError, match="set the site keys sockets_per_node and cores_per_socket"):
        resolve_sockets(socket, "slurm")


def test_the_slurm_preset_places_one_rank_per_socket_by_default() -> None:
    from distgnn.launch import load_preset

    preset = load_preset("slurm", PRESETS)
    assert preset["ranks_per_node"] == "socket" and preset["cpus_per_task"] == "socket"
