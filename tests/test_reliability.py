"""Bad input and inconsistent inputs: one clear line, a non-zero exit, nothing partial left."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import fault_env, mpiexec, partitioned_twin, run_cli


def one_line(proc: subprocess.CompletedProcess, prefix: str = "distgnn") -> str:
    assert proc.returncode != 0, proc.stdout
    ours = [l for l in proc.stderr.splitlines() if l.startswith(prefix)]
    assert len(ours) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return ours[0]


@pytest.fixture(scope="module")
def two_parts(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("rel")
    return partitioned_twin(root, 2)


def copy_parts(parts: Path, tmp_path: Path) -> Path:
    target = tmp_path / parts.name
    shutil.copytree(parts, target)
    return target


def mounted_tmpfs(mount: Path, options: str):
    """A tmpfs mounted at ``mount`` with ``options`` for the test's duration (needs root)."""
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"this test needs root to mount a tmpfs: {proc.stderr}"
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    yield from mounted_tmpfs(tmp_path / "full", "size=512k")


def test_full_disk_during_fetch_keeps_nothing(small_tmpfs: Path) -> None:
    # past the preflight (which refuses this fetch before it starts): the disk fills mid-write
    line = one_line(run_cli("fetch", "synth-reddit", "--scale", "0.01", "--root", small_tmpfs, "--quiet",
                            "--no-preflight"))
    assert ("No space left on device" in line or "disk full" in line) and "graph.zarr" in line
    leftovers = [p.name for p in small_tmpfs.rglob("*") if p.is_file()]
    assert leftovers == []


def test_the_preflight_refuses_a_fetch_the_disk_cannot_hold(small_tmpfs: Path) -> None:
    line = one_line(run_cli("fetch", "synth-reddit", "--scale", "0.01", "--root", small_tmpfs, "--quiet"))
    assert f"of disk under {small_tmpfs}" in line and "MiB free" in line
    assert list(small_tmpfs.iterdir()) == []


def test_unwritable_output_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    line = one_line(run_cli("fetch", "synth-reddit", "--scale", "0.002", "--root", blocker / "data"))
    assert "a-file" in line


def test_empty_graph_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "npy"
    folder.mkdir()
    np.save(folder / "src.npy", np.zeros(0, np.int64))
    np.save(folder / "dst.npy", np.zeros(0, np.int64))
    np.save(folder / "feat.npy", np.zeros((0, 3), np.float32))
    np.save(folder / "label.npy", np.zeros(0, np.int64))
    line = one_line(run_cli("fetch", "npy", "--source", folder, "--root", tmp_path / "data"))
    assert "no vertices" in line
    assert not any(p.name == "graph.zarr" for p in (tmp_path / "data").rglob("*"))


@pytest.mark.mpi
def test_missing_part_is_named(two_parts, tmp_path: Path) -> None:
    parts = copy_parts(two_parts[1], tmp_path)
    shutil.rmtree(parts / "part_1.zarr")
    line = one_line(mpiexec(2, "train", parts, "--epochs", "1", "--out", tmp_path / "run"))
    assert "part_1.zarr" in line and "missing" in line


@pytest.mark.mpi
def test_parts_from_different_assignments_are_refused(two_parts, tmp_path: Path) -> None:
    graph, parts = two_parts
    parts = copy_parts(parts, tmp_path)
    other = tmp_path / "other"
    assert run_cli("partition", graph, "--parts", "2", "--method", "random", "--out", other,
                   "--quiet").returncode == 0
    shutil.rmtree(parts / "part_1.zarr")
    shutil.copytree(other / "part_1.zarr", parts / "part_1.zarr")
    line = one_line(mpiexec(2, "train", parts, "--epochs", "1", "--out", tmp_path / "run"))
    assert "disagrees" in line


@pytest.mark.mpi
def test_changed_graph_store_is_refused(two_parts, tmp_path: Path) -> None:
    graph, parts = two_parts
    graph_copy = tmp_path / "graph.zarr"
    shutil.copytree(graph, graph_copy)
    parts = copy_parts(parts, tmp_path)
    for part in parts.glob("part_*.zarr"):  # point the parts at the copy, then change the copy
        zarr.open_group(str(part), mode="r+").attrs["graph"] = str(graph_copy)
    zarr.open_group(str(graph_copy), mode="r+").attrs["checksum"] = "0" * 32
    line = one_line(mpiexec(2, "train", parts, "--epochs", "1", "--out", tmp_path / "run"))
    assert "graph store changed" in line


@pytest.mark.mpi
def test_divergence_stops_with_the_epoch_and_keeps_the_last_checkpoint(two_parts, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = mpiexec(2, "train", two_parts[1], "--epochs", "30", "--lr", "1e30", "--checkpoint-every", "1",
                   "--eval-every", "0", "--out", run, "--quiet")
    line = one_line(proc)
    assert "diverged" in line and "at epoch" in line
    bad_epoch = int(line.split("at epoch ")[1].split(":")[0])
    manifests = sorted(run.glob("checkpoints/*/manifest.json"))
    assert manifests, "a good checkpoint must remain"
    newest = json.loads(manifests[-1].read_text())["epoch"]
    assert newest < bad_epoch
    assert not (run / "summary.json").exists()


@pytest.mark.mpi
def test_unwritable_run_folder(two_parts, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    line = one_line(mpiexec(2, "train", two_parts[1], "--epochs", "1", "--out", blocker / "run"))
    assert "--out" in line


@pytest.mark.mpi
def test_run_that_would_not_fit_is_refused_before_it_starts(two_parts, tmp_path: Path) -> None:
    # 602 x 3,000,000 weights alone are 7 GB, with their gradient and Adam's moments 29 GB
    line = one_line(mpiexec(2, "train", two_parts[1], "--hidden", "3000000", "--epochs", "1",
                            "--out", tmp_path / "run"))
    assert "would not fit in memory" in line and "GiB" in line
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    line = one_line(run_cli("launch", two_parts[1], "--executor", "local", "--hidden", "3000000",
                            "--epochs", "1", "--out", tmp_path / "run", "--log-dir", tmp_path / "logs"))
    assert "would not fit in memory" in line and "GiB" in line
    assert not (tmp_path / "logs").exists()  # nothing was submitted


@pytest.mark.mpi
def test_the_memory_check_holds_the_slurm_jobs_request_not_the_nodes_free_memory(
        two_parts, tmp_path: Path) -> None:
    """Under Slurm a rank is killed for passing the job's --mem, however much the node has free."""
    line = one_line(mpiexec(2, "train", two_parts[1], "--epochs", "1", "--out", tmp_path / "run",
                            env={"SLURM_MEM_PER_NODE": "8"}))  # MiB
    assert "would not fit in memory" in line and "(the Slurm job's memory request;" in line, line


def _damage_first_chunk(array_folder: Path) -> Path:
    chunk = sorted(p for p in (array_folder / "c").rglob("*") if p.is_file())[0]
    chunk.write_bytes(chunk.read_bytes()[:-7])
    return chunk


def test_damaged_feature_chunk_fails_partition_in_one_line_leaving_nothing(two_parts, tmp_path: Path) -> None:
    graph = tmp_path / "graph.zarr"
    shutil.copytree(two_parts[0], graph)
    _damage_first_chunk(graph / "feat")
    out = tmp_path / "parts"
    proc = run_cli("partition", graph, "--parts", "2", "--out", out, "--threads", "1", "--quiet")
    line = one_line(proc, "distgnn partition: error:")
    assert proc.returncode == 2
    assert f"{graph}/feat, chunk 0" in line and "corrupted" in line, line
    assert proc.stdout == ""  # no partition statistics before (or after) the error
    assert not out.exists()  # nor the folder the run created


def test_verify_checks_a_graph_store(two_parts, tmp_path: Path) -> None:
    proc = run_cli("verify", two_parts[0], "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout
    graph = tmp_path / "graph.zarr"
    shutil.copytree(two_parts[0], graph)
    _damage_first_chunk(graph / "label")
    line = one_line(run_cli("verify", graph), "distgnn verify: error:")
    assert f"{graph}/label" in line and "chunk" in line, line


@pytest.mark.slow
def test_warnings_for_parts_without_edges_and_too_few_training_vertices(tmp_path: Path) -> None:
    """A twin of 23 vertices (41 classes) in 8 parts: partition warns about the empty parts, train
    about the training vertices; both still succeed."""
    from distgnn.data.fetch import fetch

    graph = fetch("synth-reddit", root=tmp_path / "data", scale=0.0001, threads=1)
    proc = run_cli("partition", graph, "--parts", "8", "--out", tmp_path / "p8", "--quiet")
    assert proc.returncode == 0, proc.stderr
    warned = [l for l in proc.stderr.splitlines() if l.startswith("distgnn partition: warning: part")]
    assert len(warned) == 1 and "hold no edge" in warned[0], proc.stderr
    proc = run_cli("partition", graph, "--parts", "1", "--out", tmp_path / "p1", "--quiet")
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    proc = run_cli("train", tmp_path / "p1", "--epochs", "1", "--hidden", "8", "--threads", "1",
                   "--out", tmp_path / "run")
    assert proc.returncode == 0, proc.stderr
    warned = [l for l in proc.stderr.splitlines() if "warning" in l]
    assert len(warned) == 1 and "for 41 classes" in warned[0], proc.stderr


def test_snakemake_timestamp_in_a_store_raises_no_warning(two_parts, tmp_path: Path) -> None:
    """Snakemake leaves `.snakemake_timestamp` inside directory outputs; reading the stores must
    not warn about it (it used to, on every rank of every job)."""
    parts = copy_parts(two_parts[1], tmp_path)
    for store in parts.iterdir():
        (store / ".snakemake_timestamp").touch()
    proc = run_cli("inspect", parts, env={"PYTHONWARNINGS": "always"})
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr


@pytest.mark.mpi
def test_damaged_part_chunk_fails_train_in_one_line_naming_the_chunk(two_parts, tmp_path: Path) -> None:
    parts = copy_parts(two_parts[1], tmp_path)
    _damage_first_chunk(parts / "part_1.zarr" / "feat")
    proc = mpiexec(2, "train", parts, "--epochs", "1", "--hidden", "8", "--out", tmp_path / "run")
    ours = [l for l in proc.stderr.splitlines() if l.startswith("distgnn train")]
    assert proc.returncode != 0 and len(ours) == 1, proc.stderr[-3000:]
    assert "part_1.zarr/feat, chunk 0" in ours[0] and "corrupted" in ours[0], ours[0]
    assert "Traceback" not in proc.stderr


@pytest.fixture(scope="module")
def one_part(tmp_path_factory) -> tuple[Path, Path]:
    return partitioned_twin(tmp_path_factory.mktemp("rel1"), 1)


def test_requeue_before_the_first_checkpoint_writes_each_epoch_once(one_part, tmp_path: Path) -> None:
    """A requeued job starts with --resume; with no checkpoint yet it starts at epoch 1 and must
    not append its epochs to those the killed job wrote."""
    run = tmp_path / "run"
    common = ["train", one_part[1], "--epochs", "3", "--checkpoint-every", "10", "--eval-every", "0",
              "--out", run, "--quiet", "--threads", "1"]
    assert run_cli(*common).returncode == 0
    proc = run_cli(*common, "--resume")
    assert proc.returncode == 0, proc.stderr
    epochs = [json.loads(line)["epoch"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1, 2, 3]


def test_checkpoint_of_another_partition_is_refused(one_part, tmp_path: Path) -> None:
    """The same graph and P in another vertex order numbers the rows otherwise: a checkpoint's
    per-row state must not be loaded into it."""
    graph, dbg = one_part
    plain = tmp_path / "plain"
    assert run_cli("partition", graph, "--parts", "1", "--order", "none", "--out", plain,
                   "--threads", "1", "--quiet").returncode == 0
    run = tmp_path / "run"
    common = ["--algo", "cd-0", "--epochs", "3", "--checkpoint-every", "1", "--eval-every", "0",
              "--out", run, "--quiet", "--threads", "1"]
    assert run_cli("train", dbg, *common).returncode == 0
    line = one_line(run_cli("train", plain, *common, "--resume"))
    assert "vertex_order='dbg'" in line and "'none'" in line and "--resume" in line


def test_parts_of_another_assignment_are_refused(one_part, tmp_path: Path) -> None:
    """assignment.zarr is read for the replication factor: it must be the one the parts were
    built from."""
    parts = copy_parts(one_part[1], tmp_path)
    zarr.open_group(str(parts / "assignment.zarr"), mode="r+").attrs["checksum"] = "0" * 32
    line = one_line(run_cli("train", parts, "--epochs", "1", "--out", tmp_path / "run",
                            "--threads", "1"))
    assert "is not the assignment the parts were built from" in line


@pytest.mark.mpi
def test_slow_final_write_is_not_taken_for_a_hang(two_parts, tmp_path: Path) -> None:
    """Rank 0 writes summary.json and model.pt after the other ranks have stopped beating: a
    write slower than --hang-timeout must not end a successful run."""
    run = tmp_path / "run"
    proc = mpiexec(2, "train", two_parts[1], "--epochs", "2", "--hang-timeout", "1", "--out", run,
                   "--quiet", env=fault_env(DISTGNN_TEST_SLOW_OUTPUTS_S="4"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (run / "summary.json").exists() and (run / "model.pt").exists()


@pytest.mark.mpi
def test_a_rank_frozen_while_loading_is_caught(two_parts, tmp_path: Path) -> None:
    """The watchdog runs from before the parts are loaded: a rank whose node freezes then is
    named, and the job ends."""
    start = time.monotonic()
    proc = mpiexec(2, "train", two_parts[1], "--epochs", "2", "--hang-timeout", "3", "--out",
                   tmp_path / "run", env=fault_env(DISTGNN_TEST_FREEZE_LOADING_RANK="1"), timeout=120)
    assert proc.returncode != 0
    assert time.monotonic() - start < 60
    assert f"rank 1 on {socket.gethostname()} (loading its part)" in proc.stderr, proc.stderr[-2000:]



@pytest.mark.mpi
@pytest.mark.parametrize("frozen, speaker", [(1, 0), (0, 1)])
def test_a_rank_frozen_before_the_first_collective_ends_the_job(two_parts, tmp_path: Path,
                                                                frozen: int, speaker: int) -> None:
    """Before the run folder exists there are no heartbeats: a rank frozen (or cut off) before
    start-up's first collective once left the others waiting in MPI for ever. The start-up guard
    ends the job in one line from rank 0, or from rank 1 when rank 0 is the frozen one."""
    start = time.monotonic()
    proc = mpiexec(2, "train", two_parts[1], "--epochs", "2", "--hang-timeout", "2", "--out",
                   tmp_path / "run", timeout=120,
                   env={**fault_env(DISTGNN_TEST_FREEZE_START_RANK=str(frozen)),
                        "DISTGNN_SHARED_PROBE_S": "0"})
    assert proc.returncode != 0
    assert time.monotonic() - start < 60
    lines = [line for line in proc.stderr.splitlines() if line.startswith("distgnn train")]
    errors = [line for line in lines if "error" in line]
    assert len(errors) == 1, proc.stderr[-2000:]
    assert errors[0].startswith(f"distgnn train: rank {speaker}: error: starting, rank {speaker} "
                                f"on {socket.gethostname()} waited "), errors
    assert "inside MPI (" in errors[0] and "--hang-timeout 2)" in errors[0]
    # mpiexec ends the job with SIGCONT and SIGTERM: a stopped rank 0 wakes and says it was
    # interrupted (a node really frozen or gone says nothing)
    assert set(lines) - set(errors) <= ({"distgnn train: interrupted before the first checkpoint "
                                         "(rerun the command to start again)"} if frozen == 0 else set())


THREADS_COMMANDS = {"fetch": ["synth-reddit"], "partition": ["graph.zarr", "--parts", "2"],
                    "train": ["parts"], "launch": ["parts"], "predict": ["run"]}


@pytest.mark.parametrize("command", sorted(THREADS_COMMANDS))
def test_negative_threads_is_one_line_and_help_says_zero_is_all_cores(
        command: str, tmp_path: Path, capsys, monkeypatch) -> None:
    """Every command with --threads refuses a negative count, naming the option and the value,
    before it reads anything; its --help says what 0 means."""
    from distgnn import cli

    monkeypatch.chdir(tmp_path)
    assert cli.main([command, *THREADS_COMMANDS[command], "--threads", "-3"]) == 2
    out, err = capsys.readouterr()
    assert err.splitlines() == [f"distgnn {command}: error: --threads must be >= 0 (0: all cores), "
                                f"got -3"], err
    assert not list(tmp_path.iterdir())
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--threads T" in help_text and "(0: all cores;" in help_text, help_text


@pytest.fixture
def read_only_folder(tmp_path: Path):
    yield from mounted_tmpfs(tmp_path / "ro", "ro,size=64k")


def damage_feature_chunk(parts: Path, k: int) -> None:
    chunk = next(p for p in sorted((parts / f"part_{k}.zarr" / "feat").rglob("*"))
                 if p.is_file() and p.name != "zarr.json")
    with open(chunk, "r+b") as f:
        f.truncate(10)


def agreed_error(proc: subprocess.CompletedProcess, quiet: bool) -> str:
    """The run's one error line: exit 2, no MPI_Abort banner nor ORTE_ERROR_LOG; with mpiexec -q
    (Open MPI's own note about ranks that exit non-zero silenced) nothing else at all."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "MPI_ABORT" not in proc.stderr and "ORTE_ERROR_LOG" not in proc.stderr, proc.stderr
    line = one_line(proc)
    if quiet:
        assert proc.stderr.splitlines() == [line], proc.stderr
    return line


@pytest.fixture(scope="module")
def three_parts(tmp_path_factory) -> tuple[Path, Path]:
    return partitioned_twin(tmp_path_factory.mktemp("rel3"), 3)


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("case", ["damaged-part", "read-only-out", "graph-store"])
def test_a_set_up_error_on_one_rank_is_one_agreed_line(case: str, ranks: int, two_parts,
                                                       three_parts, tmp_path: Path,
                                                       request) -> None:
    """An error one rank finds while it sets up ends every rank through MPI's normal
    finalisation: rank 0 prints one line naming the rank and host, exit 2, no abort banner, no
    finished-looking run (docs/design.md#errors-across-ranks)."""
    graph, parts = two_parts if ranks == 2 else three_parts
    run = tmp_path / "run"
    if case == "damaged-part":
        parts = copy_parts(parts, tmp_path)
        damage_feature_chunk(parts, ranks - 1)
        expected = f"rank {ranks - 1} ("
    elif case == "read-only-out":
        run = request.getfixturevalue("read_only_folder") / "run"
        expected = "rank 0 ("
    else:
        parts = graph           # a graph store, not a partition folder: every rank alike
        expected = "not a partition folder"
    # Open MPI's own note (without -q) is the same whatever the error: checked on one case
    for quiet in (False, True) if case == "damaged-part" else (True,):
        proc = mpiexec(ranks, "train", parts, "--epochs", "1", "--out", run, "--quiet",
                       launcher_options=("-q",) if quiet else ())
        line = agreed_error(proc, quiet)
        assert expected in line and "distgnn train: error:" in line, line
        assert not (run / "summary.json").exists()


@pytest.mark.mpi
def test_two_ranks_failing_at_once_give_one_line_naming_the_lowest(three_parts, tmp_path: Path) -> None:
    parts = copy_parts(three_parts[1], tmp_path)
    damage_feature_chunk(parts, 1)
    damage_feature_chunk(parts, 2)
    line = agreed_error(mpiexec(3, "train", parts, "--epochs", "1", "--out", tmp_path / "run",
                                launcher_options=("-q",)), quiet=True)
    assert "rank 1 (" in line and "part_1.zarr" in line and "part_2.zarr" not in line
