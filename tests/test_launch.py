"""distgnn launch: submitit jobs of P MPI ranks, locally (mpiexec) and on the local one-node Slurm."""
from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
import zarr

from conftest import REPO
from distgnn.cli import build_parser
from distgnn.commands.launch import train_argv
from distgnn.errors import DistgnnError
from distgnn.launch import launch, load_preset, num_parts
from distgnn.launch.tasks import MpiexecTask, RankTask, mpiexec_argv, requeued_argv, with_resume

PROBE = str(REPO / "tests" / "mpi_scripts" / "launch_probe.py")
PRESETS = REPO / "cluster" / "submitit.yaml"


def test_num_parts_reads_assignment_attrs(tmp_path):
    group = zarr.open_group(str(tmp_path / "p" / "assignment.zarr"), mode="w")
    group.attrs["P"] = 3
    assert num_parts(tmp_path / "p") == 3
    group.attrs["P"] = "3"
    with pytest.raises(DistgnnError, match="assignment.zarr: attrs have no positive integer 'P'"):
        num_parts(tmp_path / "p")
    with pytest.raises(DistgnnError, match="nowhere/assignment.zarr: not a readable"):
        num_parts(tmp_path / "nowhere")


def test_presets_and_train_command(tmp_path):
    for name in ("local", "debug", "slurm"):
        assert isinstance(load_preset(name, PRESETS), dict)
    with pytest.raises(DistgnnError, match="--preset nope: not in"):
        load_preset("nope", PRESETS)
    bad = tmp_path / "bad.yaml"
    bad.write_text("x:\n  cpus: 2\n")
    with pytest.raises(DistgnnError, match=r"preset 'x' has unknown keys \['cpus'\]"):
        load_preset("x", bad)
    args = build_parser().parse_args(["launch", "parts", "--algo", "cd-5", "--executor", "slurm",
                                      "--epochs", "7", "--resume", "--out", "runs/x"])
    argv = train_argv(args, threads=3)
    assert argv[:2] == ["distgnn", "train"]
    train = build_parser().parse_args(argv[1:])  # the real trainer's parser accepts it
    assert (train.partdir, train.algo, train.epochs, train.threads) == ("parts", "cd-5", 7, 3)
    assert train.out == "runs/x" and train.resume
    assert train.delayed_gradients is None and "--no-delayed-gradients" not in argv
    # switches sharing one option (--delayed-gradients / --no-delayed-gradients) pass through as set
    for flag, value in (("--no-delayed-gradients", False), ("--delayed-gradients", True)):
        args = build_parser().parse_args(["launch", "parts", "--algo", "cd-5", flag, "--apply", "root"])
        argv = train_argv(args, threads=1)
        assert argv.count(flag) == 1 and len([a for a in argv if "delayed" in a]) == 1
        assert build_parser().parse_args(argv[1:]).delayed_gradients is value
    args = build_parser().parse_args(["launch", "parts", "--algo", "cd-5", "--fresh-copies"])
    assert build_parser().parse_args(train_argv(args, threads=1)[1:]).fresh_copies
    assert "--fresh-copies" not in train_argv(build_parser().parse_args(["launch", "parts"]), threads=1)
    # The checkpoint hook requeues the same command with --resume (once).
    assert with_resume(["a", "--resume"]) == ["a", "--resume"]
    resumed = RankTask(["distgnn", "train", "p"], 2).checkpoint().function
    assert isinstance(resumed, RankTask) and resumed.argv[-1] == "--resume"
    resumed = MpiexecTask(["distgnn", "train", "p"], 4, 1).checkpoint().function
    assert resumed.argv[-1] == "--resume" and resumed.ranks == 4


def test_a_job_slurm_requeued_resumes(monkeypatch) -> None:
    """A node failure's requeue (SLURM_RESTART_COUNT > 0) runs the command with --resume: without
    it the trainer would start again and clear the checkpoints it should continue from."""
    argv = ["distgnn", "train", "p"]
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    assert requeued_argv(argv) == argv
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    assert requeued_argv(argv) == argv
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    assert requeued_argv(argv) == [*argv, "--resume"]
    assert requeued_argv([*argv, "--resume"]) == [*argv, "--resume"]


def test_mpiexec_argv_oversubscribes_past_the_cores() -> None:
    oversub = mpiexec_argv(["x.py"], ranks=4, cores=2)
    assert oversub[:3] == ["mpiexec", "-n", "4"] and "--oversubscribe" in oversub
    assert "--oversubscribe" not in mpiexec_argv(["x.py"], ranks=2, cores=2)
    assert mpiexec_argv(["x.py"], ranks=1, cores=2, threads=2)[3:7] == ["--map-by", "slot:PE=2",
                                                                        "--bind-to", "core"]
    assert mpiexec_argv(["x.py"], ranks=2, cores=2, threads=2)[3:5] == ["--bind-to", "none"]


@pytest.mark.mpi
def test_a_local_rank_of_several_threads_gets_as_many_cores(tmp_path):
    """One rank of 2 threads on a machine of 2 or more cores may run on 2 of them: Open MPI's plain
    --bind-to core pinned it to one, so a P = 1 run computed on half the machine."""
    import os

    cores = len(os.sched_getaffinity(0))
    out = tmp_path / "probe.json"
    launch([PROBE, str(out)], 1, "local", {"cpus_per_task": 2, "timeout_min": 5}, tmp_path / "logs")
    record = json.loads(out.read_text())[0]
    assert record["omp_num_threads"] == "2"
    assert len(record["affinity"]) == min(2, cores), record


@pytest.mark.mpi
@pytest.mark.parametrize("executor", ["local", "debug"])
def test_launch_local_runs_mpiexec(tmp_path, executor):
    out = tmp_path / "probe.json"
    result = launch([PROBE, str(out)], 3, executor, load_preset(executor, PRESETS), tmp_path / "logs")
    records = json.loads(out.read_text())
    assert [r["rank"] for r in records] == [0, 1, 2]
    assert {r["size"] for r in records} == {3} and records[0]["sum"] == 3
    assert {r["omp_proc_bind"] for r in records} == {"close"}
    assert result.executor == executor and result.num_ranks == 3
    if executor == "local":
        assert (result.folder / f"{result.job_id}_0_log.out").exists()


@pytest.mark.mpi
def test_launch_local_failing_rank(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DISTGNN_TEST_FAIL_RANK", "1")
    start = time.monotonic()
    with pytest.raises(DistgnnError, match="RuntimeError: probe failure on rank 1"):
        launch([PROBE, str(tmp_path / "x.json")], 2, "local", load_preset("local", PRESETS),
               tmp_path / "logs")
    assert time.monotonic() - start < 60
    assert "probe failure on rank 1" in capsys.readouterr().err


@pytest.mark.parametrize("sigint", ["as started", "ignored"])
def test_a_watch_that_breaks_cancels_the_job(tmp_path, monkeypatch, sigint):
    # Anything that ends the wait early (a bug, a test's timeout, Ctrl-C) cancels the job: no ranks
    # left holding the allocation while the launcher is gone. Also when the launcher runs with
    # SIGINT ignored (nohup, `cmd &` in a script): submitit cancels a local job with SIGINT, which
    # the job would inherit ignored.
    import os
    import signal

    from distgnn.launch import submit

    script = tmp_path / "sleeper.py"
    script.write_text("import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\n"
                      "time.sleep(120)\n")
    pid_file = tmp_path / "pid"

    def broken_wait(*args, **kwargs):
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        raise RuntimeError("the watch broke")

    monkeypatch.setattr(submit, "wait_for_tasks", broken_wait)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if sigint == "ignored" else None
    try:
        with pytest.raises(RuntimeError, match="the watch broke"):
            launch([str(script), str(pid_file)], 1, "local", load_preset("local", PRESETS), tmp_path / "logs")
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail(f"rank process {pid} still ran 30 s after the launch failed")


@pytest.mark.slurm
def test_launch_slurm_ranks(local_slurm, tmp_path):
    out = tmp_path / "probe.json"
    preset = load_preset("slurm", PRESETS)
    result = launch([PROBE, str(out)], 2, "slurm", preset, tmp_path / "logs", deadline_s=240)
    records = json.loads(out.read_text())
    assert [r["rank"] for r in records] == [0, 1] and records[0]["sum"] == 1
    assert {r["slurm_job_id"] for r in records} == {result.job_id}
    from distgnn.launch.placement import socket_layout

    # the preset's cpus_per_task: socket, the cores of one of the local Slurm's sockets
    assert {r["omp_num_threads"] for r in records} == {str(socket_layout(None)[1])}
    # --cpu-bind=cores: each rank pinned to its own core(s).
    assert not set(records[0]["affinity"]) & set(records[1]["affinity"])
    script = (result.folder / f"{result.job_id}_submission.sh").read_text()
    assert "--mpi=pmix" in script and "--kill-on-bad-exit=1" in script and "--ntasks-per-node=2" in script


@pytest.mark.slurm
def test_launch_slurm_failing_rank(local_slurm, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DISTGNN_TEST_FAIL_RANK", "1")
    start = time.monotonic()
    with pytest.raises(DistgnnError, match="task 1: RuntimeError: probe failure on rank 1"):
        launch([PROBE, str(tmp_path / "x.json")], 2, "slurm", load_preset("slurm", PRESETS),
               tmp_path / "logs", deadline_s=240)
    assert time.monotonic() - start < 60
    assert "probe failure on rank 1" in capsys.readouterr().err


@pytest.mark.slurm
def test_launch_slurm_job_that_vanishes(local_slurm, tmp_path, capsys):
    # A rank that dies without submitit writing a result (as an abort in MPI_Init would): the
    # job ends and the launcher reports it with the log's tail instead of waiting forever.
    script = tmp_path / "die.py"
    script.write_text("import os, sys\nprint('dying on purpose', file=sys.stderr, flush=True)\n"
                      "os._exit(3)\n")
    start = time.monotonic()
    with pytest.raises(DistgnnError, match=r"ended \(FAILED\) and tasks \[0, 1\] left no result .* dying on purpose"):
        launch([str(script)], 2, "slurm", load_preset("slurm", PRESETS), tmp_path / "logs", grace_s=3,
               deadline_s=240)
    assert time.monotonic() - start < 60
    assert "dying on purpose" in capsys.readouterr().err


@pytest.mark.slurm
def test_launch_slurm_preemption_requeues_with_resume(local_slurm, tmp_path):
    # submitit's signal (SIGUSR2, as before a time limit or on preemption) reaches rank 0, whose
    # checkpoint() requeues the job with --resume; the launcher keeps waiting for the new run.
    out, started = tmp_path / "resumed.json", tmp_path / "started"
    argv = [str(REPO / "tests" / "mpi_scripts" / "requeue_probe.py"), str(out), str(started)]
    errors: list[BaseException] = []

    def preempt() -> None:
        try:
            deadline = time.monotonic() + 60
            while not started.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(1)
            job_id = next(p.name for p in (tmp_path / "logs").iterdir() if p.name.isdigit())
            subprocess.run(["scancel", "--signal=USR2", job_id], check=True)
            # Slurm holds a requeued job for a while (begin time): let it start at once.
            for _ in range(300):
                show = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True,
                                      text=True).stdout
                if "Restarts=1" in show and "JobState=PENDING" in show:
                    break
                time.sleep(0.2)
            subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True)
        except BaseException as exc:  # reported by the test body
            errors.append(exc)

    thread = threading.Thread(target=preempt, daemon=True)
    thread.start()
    result = launch(argv, 2, "slurm", load_preset("slurm", PRESETS), tmp_path / "logs",
                    deadline_s=120)
    thread.join(10)
    assert not errors, errors
    record = json.loads(out.read_text())
    assert record["argv"][-1] == "--resume" and record["size"] == 2
    assert record["slurm_job_id"] == result.job_id and record["restarts"] == "1"


class _FakeTask:
    """What wait_for_tasks reads of a submitit job: its paths."""

    def __init__(self, folder: Path, i: int) -> None:
        from types import SimpleNamespace

        self.paths = SimpleNamespace(result_pickle=folder / f"{i}_result.pkl",
                                     stdout=folder / f"{i}_log.out", stderr=folder / f"{i}_log.err")


def test_wait_for_tasks_outcomes(tmp_path):
    import pickle

    from distgnn.launch.watch import JobFailed, wait_for_tasks

    tasks = [_FakeTask(tmp_path, i) for i in range(2)]
    # Every task succeeded: their results, in task order.
    for i, t in enumerate(tasks):
        t.paths.result_pickle.write_bytes(pickle.dumps(("success", f"r{i}")))
    assert wait_for_tasks(tasks, "7", lambda: "RUNNING", poll_s=0.01) == ["r0", "r1"]
    # One error: reported at once, with its innermost exception line, while the job still runs.
    tasks[1].paths.result_pickle.write_bytes(pickle.dumps(
        ("error", "Traceback (most recent call last):\nValueError: bad part 1\n")))
    start = time.monotonic()
    with pytest.raises(JobFailed, match="job 7 failed: task 1: ValueError: bad part 1"):
        wait_for_tasks(tasks, "7", lambda: "RUNNING", poll_s=0.01)
    assert time.monotonic() - start < 1
    # No result and the job gone: after the grace, with the log's last error.
    for t in tasks:
        t.paths.result_pickle.unlink()
    tasks[0].paths.stderr.write_text("loading\nRuntimeError: MPI_Init failed\n")
    start = time.monotonic()
    with pytest.raises(JobFailed, match=r"job 7 ended \(no longer listed.*within 1 s; last error: "
                                        r"RuntimeError: MPI_Init failed"):
        wait_for_tasks(tasks, "7", lambda: "", grace_s=1, poll_s=0.05)
    assert 1 <= time.monotonic() - start < 5
    # A job that never ends: the deadline.
    with pytest.raises(JobFailed, match="did not finish within 0 s"):
        wait_for_tasks(tasks, "7", lambda: "PENDING", poll_s=0.01, deadline_s=0.2)


def test_srun_transport_settings_come_from_the_preset() -> None:
    from distgnn.launch.submit import slurm_parameters

    default = slurm_parameters({}, 2, "j")["slurm_srun_args"]
    assert default == ["--mpi=pmix", "--kill-on-bad-exit=1", "--cpu-bind=cores"]
    own = slurm_parameters({"srun_mpi": "pmi2", "srun_cpu_bind": "sockets",
                            "slurm_srun_args": ["--exclusive"]}, 2, "j")["slurm_srun_args"]
    assert own == ["--mpi=pmi2", "--kill-on-bad-exit=1", "--cpu-bind=sockets", "--exclusive"]
    hosts = slurm_parameters(load_preset("multihost", REPO / "cluster" / "submitit.yaml"), 2, "j")
    assert "--cpu-bind" not in " ".join(hosts["slurm_srun_args"])  # its Slurm cannot bind
    assert any("OMPI_MCA_btl_tcp_if_include" in line for line in hosts["slurm_setup"])
