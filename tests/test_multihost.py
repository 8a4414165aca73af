"""cluster/multihost.sh: hosts with their own names, addresses and scratch; Open MPI between them
over TCP on the bridge; links cut and shaped on demand (docs/design.md#multihost)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import REPO, mpiexec, partitioned_twin

pytestmark = pytest.mark.multihost
SCRIPT = REPO / "cluster" / "multihost.sh"
HOSTS = {"mh1": "10.77.0.11", "mh2": "10.77.0.12"}


def cluster(*args: str, timeout: float = 120, check: bool = True, cwd: Path = REPO,
            env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``cluster/multihost.sh ARGS`` (in ``cwd``, with ``env`` added to this environment)."""
    proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**os.environ, **(env or {})})
    if check:
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc


def srun(*command: str, timeout: float = 120) -> list[str]:
    """Lines of ``srun -N 2 -n 2 COMMAND`` from the controller, sorted."""
    proc = cluster("exec", "mhctl", "srun", "-N", "2", "-n", "2", "--mpi=pmix", *command,
                   timeout=timeout)
    return sorted(proc.stdout.split("\n")[:-1])


def test_each_host_has_its_name_address_and_scratch(multihost) -> None:
    status = cluster("status").stdout
    for host, address in HOSTS.items():
        assert f"{host} ({address}): slurmd running" in status
    assert "mhctl (10.77.0.1): slurmctld running" in status
    probe = f"probe-{uuid.uuid4().hex}"
    # the first step writes each host's name into its /scratch, the second reads it back
    srun("sh", "-c", f"hostname > /scratch/{probe}")
    lines = srun("sh", "-c", f"echo $(hostname) $(hostname -I) $(cat /scratch/{probe})")
    assert lines == [f"{h} {a} {h}" for h, a in HOSTS.items()]
    assert not (Path("/scratch") / probe).exists()  # this host's /scratch is not theirs


MPI_PROBE = """
import json, os, socket, subprocess
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.rank + 1)
sockets = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True,
                         text=True).stdout.splitlines()
mine = [line.split()[2:4] for line in sockets if f"pid={os.getpid()}," in line]
print(json.dumps({"host": socket.gethostname(), "total": total, "tcp": mine}))
"""


def test_mpi_ranks_on_two_hosts_talk_tcp_over_the_bridge(multihost, tmp_path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(MPI_PROBE)
    ranks = [json.loads(line) for line in srun(sys.executable, str(probe))]
    assert sorted(r["host"] for r in ranks) == ["mh1", "mh2"]
    assert all(r["total"] == 3 for r in ranks)
    for r in ranks:
        mine = HOSTS[r["host"]]
        other = next(a for h, a in HOSTS.items() if h != r["host"])
        # an established TCP connection from this host's address to the other's
        assert any(local.startswith(mine + ":") and peer.startswith(other + ":")
                   for local, peer in r["tcp"]), r["tcp"]


RECEIVE = """
import socket, sys
server = socket.create_server(("0.0.0.0", int(sys.argv[1])))
print("ready", flush=True)
conn, _ = server.accept()
got = 0
while chunk := conn.recv(1 << 20):
    got += len(chunk)
conn.sendall(str(got).encode())
"""
SEND = """
import socket, sys, time
size = int(sys.argv[3])
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30) as conn:
    start = time.perf_counter()
    conn.sendall(bytes(size))
    conn.shutdown(socket.SHUT_WR)
    got = int(conn.recv(64))
    print(got, time.perf_counter() - start)
"""


def send_seconds(size: int, port: int) -> float:
    """Seconds to move ``size`` bytes from mh1 to mh2 over TCP (until mh2 has them all)."""
    receiver = subprocess.Popen(["bash", str(SCRIPT), "exec", "mh2", sys.executable, "-c", RECEIVE,
                                 str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout.readline().strip() == "ready"
        out = cluster("exec", "mh1", sys.executable, "-c", SEND, HOSTS["mh2"], str(port),
                      str(size)).stdout.split()
        assert int(out[0]) == size
        return float(out[1])
    finally:
        receiver.wait(timeout=30)


def test_link_rate_shapes_transfers(multihost) -> None:
    size = 4 << 20
    try:
        cluster("link", "mh1", "rate", "40mbit")
        shaped = send_seconds(size, 7301)
    finally:
        cluster("link", "mh1", "rate", "off")
    free = send_seconds(size, 7302)
    # 4 MiB at 40 Mbit/s, less tbf's 256 KiB burst: 0.79 s
    assert 0.6 < shaped < 5, shaped
    assert free < shaped / 3, (free, shaped)


CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], 6818), timeout=float(sys.argv[2])).close()
    print("connected")
except OSError as exc:
    print("failed", type(exc).__name__)
"""


def test_link_down_cuts_a_host_off_and_up_brings_it_back(multihost) -> None:
    def reach() -> str:
        return cluster("exec", "mh1", sys.executable, "-c", CONNECT, HOSTS["mh2"], "2").stdout.strip()

    assert reach() == "connected"
    try:
        cluster("link", "mh2", "down")
        assert reach().startswith("failed")
    finally:
        cluster("link", "mh2", "up")
    deadline = time.monotonic() + 10
    while reach() != "connected":
        assert time.monotonic() < deadline, "mh2 unreachable after link up"
        time.sleep(0.2)
    assert cluster("link", "mh9", "down", check=False).returncode == 2


def losses(run: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_launch_puts_one_rank_on_each_host_and_stages_its_part(multihost, tmp_path) -> None:
    _, partdir = partitioned_twin(tmp_path, 2)
    common = ["--algo", "cd-0", "--epochs", "3", "--layers", "2", "--hidden", "16", "--quiet"]
    cluster("exec", "mhctl", sys.executable, "-m", "distgnn", "launch", str(partdir),
            "--executor", "slurm", "--preset", "multihost", "--log-dir", str(tmp_path / "logs"),
            "--out", str(tmp_path / "hosts"), *common, timeout=600)
    summary = json.loads((tmp_path / "hosts" / "summary.json").read_text())
    assert summary["hosts_by_rank"] == ["mh1", "mh2"]
    # the preset staged each part on its host's /scratch (stage_dir) and removed it after loading
    assert summary["partition_dir"] == str(partdir.resolve())
    assert srun("sh", "-c", "ls /scratch | grep -c ^distgnn- || true") == ["0", "0"]
    # the same run with both ranks on this host (shared memory): the same losses, bit for bit
    local = mpiexec(2, "train", partdir, "--out", tmp_path / "local", "--threads", "1", *common)
    assert local.returncode == 0, local.stderr[-2000:]
    assert losses(tmp_path / "hosts") == losses(tmp_path / "local")


@pytest.mark.slow
def test_snakemake_profile_trains_on_the_hosts(multihost, tmp_path) -> None:
    from test_workflow import SLURM_TEST_OPTIONS, tiny, workdir

    wd = workdir(tmp_path, tiny(partition={"parts": [2]}, train={"algos": ["cd-0"], "epochs": 2}))
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    proc = cluster("exec", "mhctl", sys.executable, "-m", "snakemake", "--profile",
                   "cluster/multihost", *SLURM_TEST_OPTIONS, cwd=wd, env={"PATH": path},
                   timeout=900)
    out = proc.stdout + proc.stderr
    # fetch, assign, two builds and the report were Slurm jobs on the hosts
    assert out.count("has been submitted with SLURM jobid") == 5, out[-3000:]
    run = wd / "runs/synth-reddit-x0.01/libra-2/cd-0"
    assert json.loads((run / "summary.json").read_text())["hosts_by_rank"] == ["mh1", "mh2"]
    assert (wd / "reports/synth-reddit-x0.01/summary.csv").exists()


@pytest.mark.slow
def test_a_node_local_run_folder_is_refused_naming_the_hosts(multihost, tmp_path) -> None:
    _, partdir = partitioned_twin(tmp_path, 2)
    run = f"/scratch/run-{uuid.uuid4().hex}"  # the same path on both hosts, other contents
    proc = cluster("exec", "mhctl", sys.executable, "-m", "distgnn", "launch", str(partdir),
                   "--executor", "slurm", "--preset", "multihost", "--log-dir",
                   str(tmp_path / "logs"), "--out", run, "--epochs", "2", "--quiet",
                   timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert (f"--out {run}: not one folder for every rank: rank 1 (mh2) cannot see what rank 0 "
            f"(mh1) writes there") in out, out[-3000:]
    assert out.strip().splitlines()[-1].startswith("distgnn launch: error: job ")
