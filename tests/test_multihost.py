"""cluster/multihost.sh: hosts with their own names, addresses and scratch; Open MPI between them
over TCP on the bridge; links cut and shaped on demand (docs/design.md#multihost)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from distgnn.vocabulary import message_row_bytes
from conftest import REPO, mpiexec, partitioned_twin, run_cli

pytestmark = pytest.mark.multihost
SCRIPT = REPO / "cluster" / "multihost.sh"
HOSTS = {"mh1": "10.77.0.11", "mh2": "10.77.0.12"}  # on the fabric (MPI's network)
MANAGEMENT = {"mh1": "10.78.0.11", "mh2": "10.78.0.12"}  # Slurm's network


def cluster(*args: str, timeout: float = 120, check: bool = True, cwd: Path = REPO,
            env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``cluster/multihost.sh ARGS`` (in ``cwd``, with ``env`` added to this environment)."""
    proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**os.environ, **(env or {})})
    if check:
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc


def srun(*command: str, timeout: float = 120) -> list[str]:
    """Lines of ``srun -N 2 -n 2 -w mh1,mh2 COMMAND`` from the controller, sorted (the hosts
    named: Slurm would otherwise take any two idle ones, mh3 while a job still holds mh1)."""
    proc = cluster("exec", "mhctl", "srun", "-N", "2", "-n", "2", "-w", "mh1,mh2", "--mpi=pmix", *command,
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
    lines = srun("sh", "-c", f"echo $(hostname) $(hostname -I) $(getent hosts $(hostname)) "
                 f"$(cat /scratch/{probe})")
    # its fabric and management addresses; its name resolves to the latter, as Slurm's NodeAddr
    assert lines == [f"{h} {a} {MANAGEMENT[h]} {MANAGEMENT[h]} {h} {h}" for h, a in HOSTS.items()]
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


def test_link_down_cuts_the_fabric_or_the_whole_host_and_up_brings_it_back(multihost) -> None:
    def reach(address: str) -> str:
        return cluster("exec", "mh1", sys.executable, "-c", CONNECT, address, "2").stdout.strip()

    assert reach(HOSTS["mh2"]) == reach(MANAGEMENT["mh2"]) == "connected"
    try:
        cluster("link", "mh2", "down")  # the fabric only: Slurm still reaches mh2
        assert reach(HOSTS["mh2"]).startswith("failed")
        assert reach(MANAGEMENT["mh2"]) == "connected"
        cluster("link", "mh2", "down", "--all")
        assert reach(MANAGEMENT["mh2"]).startswith("failed")
    finally:
        cluster("link", "mh2", "up")  # returns once Slurm serves mh2 again
    assert reach(HOSTS["mh2"]) == reach(MANAGEMENT["mh2"]) == "connected"
    assert cluster("link", "mh9", "down", check=False).returncode == 2
    assert cluster("link", "mh2", "down", "--al", check=False).returncode == 2


def losses(run: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_launch_puts_one_rank_on_each_host_stages_its_part_and_equals_one_process(
        multihost, tmp_path) -> None:
    graph, partdir = partitioned_twin(tmp_path, 2)
    _, four = partitioned_twin(tmp_path / "p4", 4)
    common = ["--algo", "cd-0", "--epochs", "3", "--layers", "2", "--hidden", "16", "--quiet"]
    one = tmp_path / "one"

    def one_process() -> subprocess.CompletedProcess:
        built = run_cli("partition", graph, "--parts", "1", "--method", "libra", "--out",
                        tmp_path / "libra-1", "--threads", "1", "--quiet")
        assert built.returncode == 0, built.stderr
        return run_cli("train", tmp_path / "libra-1", "--out", one, "--threads", "1", *common)

    int8 = ("--message-precision", "int8")
    with ThreadPoolExecutor(2) as pool:  # the runs on this host go on while the hosts' wait
        # the same run with both ranks on this host (shared memory), and one process (P = 1)
        local = pool.submit(mpiexec, 2, "train", partdir, "--out", tmp_path / "local",
                            "--threads", "1", *common)
        local8 = pool.submit(mpiexec, 2, "train", partdir, "--out", tmp_path / "local-int8",
                             "--threads", "1", *common, *int8)
        single = pool.submit(one_process)
        for parts, out, extra in ((partdir, "hosts", ()), (four, "hosts4", ()),
                                  (partdir, "hosts-int8", int8)):
            cluster("exec", "mhctl", sys.executable, "-m", "distgnn", "launch", str(parts),
                    "--executor", "slurm", "--preset", "multihost", "--log-dir",
                    str(tmp_path / f"logs-{out}"), "--out", str(tmp_path / out), *common, *extra,
                    timeout=600)
        local, local8, single = local.result(), local8.result(), single.result()
    summary = json.loads((tmp_path / "hosts" / "summary.json").read_text())
    assert summary["hosts_by_rank"] == ["mh1", "mh2"]
    # the hosts share this machine's cores, so no host's lone rank pins its threads (every one
    # would take core 0: docs/design.md#thread-pinning)
    cores = len(os.sched_getaffinity(0))
    assert summary["placement"]["cpus_by_host"] == {"mh1": cores, "mh2": cores}
    # the preset staged each part on its host's /scratch (stage_dir) and removed it after loading
    assert summary["partition_dir"] == str(partdir.resolve())
    assert srun("sh", "-c", "ls /scratch | grep -c ^distgnn- || true") == ["0", "0"]
    summary = json.loads((tmp_path / "hosts4" / "summary.json").read_text())
    assert summary["hosts_by_rank"] == ["mh1", "mh2", "mh3", "mh4"]
    # over TCP between hosts and through shared memory on one: the same losses, bit for bit
    assert local.returncode == 0, local.stderr[-2000:]
    assert losses(tmp_path / "hosts") == losses(tmp_path / "local")
    # cd-0 on 2 and on 4 hosts reproduces one process (P = 1) of the same graph
    assert single.returncode == 0, single.stderr[-2000:]
    assert losses(tmp_path / "hosts") == pytest.approx(losses(one), rel=1e-5)
    assert losses(tmp_path / "hosts4") == pytest.approx(losses(one), rel=1e-5)
    # int8 rows between the hosts: the same keyed rounding as on one host, bit for bit, the
    # bytes of 16-wide int8 rows (codes, scale, low: 24 bytes against 64) and near float32
    assert local8.returncode == 0, local8.stderr[-2000:]
    assert losses(tmp_path / "hosts-int8") == losses(tmp_path / "local-int8")
    assert losses(tmp_path / "hosts-int8") == pytest.approx(losses(tmp_path / "hosts"), rel=1e-2)
    assert losses(tmp_path / "hosts-int8") != losses(tmp_path / "hosts")
    sent = lambda run: json.loads((tmp_path / run / "summary.json").read_text())["bytes_forward"]  # noqa: E731
    assert sent("hosts-int8") == sent("hosts") * message_row_bytes(16, "int8") / 64


@pytest.mark.slow
def test_snakemake_profile_trains_and_predicts_on_the_hosts(multihost, tmp_path) -> None:
    import numpy as np
    import zarr
    from test_workflow import SLURM_TEST_OPTIONS, snakemake, tiny, workdir

    config = tiny(partition={"parts": [2]}, train={"algos": ["cd-0"], "epochs": 2})
    config["predict"] = {"enabled": True}
    wd = workdir(tmp_path, config)
    # the stages before training run here, as a user reruns single stages: every Slurm job the
    # executor plugin waits for costs 11 s or more of its status polling, whatever the job's length
    local = snakemake("--cores", "2", "--until", "build", cwd=wd)
    assert local.returncode == 0, (local.stdout + local.stderr)[-3000:]
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    graph = wd / "data/synth-reddit-x0.01/graph.zarr"
    with ThreadPoolExecutor(1) as pool:  # a one-part partition for the comparison, meanwhile
        one_part = pool.submit(run_cli, "partition", graph, "--parts", "1", "--out",
                               tmp_path / "one", "--threads", "1", "--quiet")
        proc = cluster("exec", "mhctl", sys.executable, "-m", "snakemake", "--profile",
                       "cluster/multihost", *SLURM_TEST_OPTIONS, cwd=wd, env={"PATH": path},
                       timeout=900)
        assert one_part.result().returncode == 0, one_part.result().stderr
    out = proc.stdout + proc.stderr
    # train was one job of a rank per host (submitit); predict a Slurm job; the report local
    assert "rule fetch" not in out and "rule build" not in out, out[-3000:]
    assert out.count("has been submitted with SLURM jobid") == 1, out[-3000:]
    assert "rule report" in out
    run = wd / "runs/synth-reddit-x0.01/libra-2/cd-0"
    assert json.loads((run / "summary.json").read_text())["hosts_by_rank"] == ["mh1", "mh2"]
    assert (wd / "reports/synth-reddit-x0.01/summary.csv").exists()
    # the hosts' predictions equal one process's of the same model on a one-part partition
    single = run_cli("predict", run, "--partdir", tmp_path / "one", "--out", tmp_path / "p1.zarr",
                     "--threads", "1", "--quiet")
    assert single.returncode == 0, single.stderr[-2000:]
    hosts = zarr.open_group(str(run / "predictions.zarr"), mode="r")["logits"][:]
    one = zarr.open_group(str(tmp_path / "p1.zarr"), mode="r")["logits"][:]
    np.testing.assert_allclose(hosts, one, rtol=1e-5, atol=1e-5 * np.abs(one).max())


@pytest.mark.slow
def test_a_node_local_run_folder_is_refused_naming_the_hosts(multihost, tmp_path) -> None:
    _, partdir = partitioned_twin(tmp_path, 2)
    run = f"/scratch/run-{uuid.uuid4().hex}"  # the same path on both hosts, other contents
    proc = cluster("exec", "mhctl", sys.executable, "-m", "distgnn", "launch", str(partdir),
                   "--executor", "slurm", "--preset", "multihost", "--log-dir",
                   str(tmp_path / "logs"), "--out", run, "--epochs", "2", "--quiet",
                   timeout=300, check=False, env={"DISTGNN_SHARED_PROBE_S": "2"})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert (f"--out {run}: not one folder for every rank: rank 1 (mh2) cannot see what rank 0 "
            f"(mh1) writes there") in out, out[-3000:]
    assert out.strip().splitlines()[-1].startswith("distgnn launch: error: job ")


# -- faults across hosts (docs/design.md#progress, docs/design.md#watchdog) ----------------------
FAULT_RUN = ["--algo", "cd-0", "--layers", "2", "--hidden", "16", "--eval-every", "0"]


def launch_on_hosts(partdir: Path, run: Path, logs: Path, *args: str) -> subprocess.Popen:
    """``distgnn launch`` of P ranks on hosts mh1..mhP from the controller, in the background,
    tiling off (so a resumed run can be compared with an uninterrupted one). The job is pinned to
    those hosts (the multihost preset plus sbatch's --nodelist): a requeued job would otherwise
    start on whichever hosts are free, and the faults below name mh2."""
    import yaml

    presets = logs.parent / "pinned-presets.yaml"
    if not presets.exists():
        pinned = dict(yaml.safe_load((REPO / "cluster" / "submitit.yaml").read_text())["multihost"])
        ranks = sum(1 for p in Path(partdir).glob("part_*.zarr"))
        pinned["slurm_additional_parameters"] = {"nodelist": ",".join(f"mh{i + 1}" for i in range(ranks))}
        presets.write_text(yaml.safe_dump({"pinned": pinned}))
    return subprocess.Popen(
        ["bash", str(SCRIPT), "exec", "mhctl", sys.executable, "-m", "distgnn", "launch",
         str(partdir), "--executor", "slurm", "--preset", "pinned", "--presets", str(presets),
         "--log-dir", str(logs), "--out", str(run), *FAULT_RUN, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "DISTGNN_TILES": "off"})


def checkpoints(run: Path) -> list[int]:
    """Epochs of the complete checkpoints in ``run`` (those with a manifest), ascending."""
    return sorted(int(p.parent.name.split("_")[1])
                  for p in (run / "checkpoints").glob("epoch_*/manifest.json"))


def wait_until(predicate, proc: subprocess.Popen, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the job ended before {what}: {proc.stderr.read()[-3000:]}")
        assert time.monotonic() < deadline, f"no {what} after {seconds} s"
        time.sleep(0.1)


def ended_within(proc: subprocess.Popen, since: float, bound: float) -> str:
    """Wait for the launch to end (it must fail); its stderr. Fails unless within ``bound``
    seconds of ``since``."""
    try:
        _, err = proc.communicate(timeout=bound + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"the job still ran {bound + 60:.0f} s after the fault")
    took = time.monotonic() - since
    print(f"the job ended {took:.1f} s after the fault")  # the figure docs/reliability.md cites
    assert proc.returncode != 0, err[-3000:]
    assert took < bound, f"the job ended {took:.0f} s after the fault (bound {bound} s)"
    return err


def job_lines(logs: Path, err: str, needle: str) -> list[str]:
    text = err + "".join(p.read_text(errors="replace") for p in logs.rglob("*.err"))
    return [line for line in text.splitlines() if needle in line]


def processes_on(host: str, needle: str) -> list[str]:
    """Command lines of the processes on ``host`` (its network namespace) that mention ``needle``."""
    pids = subprocess.run(["ip", "netns", "pids", f"dgmh-{host}"], capture_output=True,
                          text=True).stdout.split()
    found = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if needle in cmdline:
            found.append(f"{pid}: {cmdline}")
    return found


def job_state(job_id: str) -> str:
    show = cluster("exec", "mhctl", "scontrol", "show", "job", job_id, check=False).stdout
    state = re.search(r"JobState=(\S+)", show)
    restarts = re.search(r"Restarts=(\d+)", show)
    return f"{state.group(1) if state else '?'} restarts={restarts.group(1) if restarts else '?'}"


def settle(hosts: tuple[str, ...], quiet_s: float = 3.0, seconds: float = 60.0) -> None:
    """Wait until Slurm has shown ``hosts`` idle for ``quiet_s`` seconds on end. A host back in
    service may still be ending the requeued job's first run (slurmctld tells it to once it
    registers); the same job sent there before that is refused its step ("Requested nodes are
    busy"), as it would be on a cluster whose host came back at once."""
    deadline, since = time.monotonic() + seconds, None
    while time.monotonic() < deadline:
        states = cluster("exec", "mhctl", "sinfo", "-h", "-N", "-n", ",".join(hosts), "-o", "%t",
                         check=False).stdout.split()
        if len(states) == len(hosts) and set(states) == {"idle"}:
            since = since or time.monotonic()
            if time.monotonic() - since >= quiet_s:
                return
        else:
            since = None
        time.sleep(0.5)
    raise AssertionError(f"{hosts} not idle for {quiet_s} s within {seconds} s")


def wait_for_state(job_id: str, wanted: tuple[str, ...], seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while (state := job_state(job_id)) not in wanted and time.monotonic() < deadline:
        time.sleep(0.5)
    return state




def newest_job(logs: Path) -> str:
    """The id of the newest Slurm job that logged into ``logs`` (submitit: one folder per job)."""
    return str(max(int(p.name) for p in logs.iterdir() if p.name.isdigit()))


def wait_for_checkpoint(run: Path, epoch: int, proc: subprocess.Popen) -> None:
    wait_until(lambda: (checkpoints(run) or [0])[-1] >= epoch, proc, 240, f"checkpoint {epoch}")


def end_by_a_cut_link(proc: subprocess.Popen, logs: Path, resumed: bool) -> None:
    """mh2's fabric down, Slurm still reaching mh2: the watchdog ends the job within 40 s with one
    line naming each rank, its host and what it waits for; FAILED, not requeued. `resumed`: the
    launch was itself started with --resume, so its last line says to rerun it as it is."""
    job_id = newest_job(logs)
    restarts = job_state(job_id).split()[1]
    seen = set(job_lines(logs, "", "no rank has made progress"))
    try:
        cluster("link", "mh2", "down")
        cut = time.monotonic()
        err = ended_within(proc, cut, 40)
        # no rank is left on the cut-off host (a rank is a submitit task)
        assert processes_on("mh2", "submitit") == []
    finally:
        cluster("link", "mh2", "up")  # waits until Slurm serves mh2 again
    said = sorted(set(job_lines(logs, err, "no rank has made progress for more than 10 s "
                                           "(--hang-timeout)")) - seen)
    # the watchdog's line, relayed live and in the log, is one line; the launcher's last line
    # quotes it and says how to continue
    lines = [line for line in said if line.startswith("distgnn train: rank 0: error: ")]
    assert len(lines) == 1, (err[-2000:], said)
    last = err.strip().splitlines()[-1]
    assert last.startswith("distgnn launch: error: job ") and lines[0] in last, last
    # a launch started without --resume is told to add it; one started with it, to rerun it
    assert last.endswith("rerun this launch to continue from it" if resumed else
                         "rerun this launch with --resume to continue from it"), last
    # each rank and its host, grouped by what they wait for: an exchange names its peer; both in
    # the gradients' all-reduce are one group waiting for every rank; a rank whose part of a
    # gather left before the cut may already wait in the next epoch's exchange while rank 0
    # still waits in that gather
    assert (re.search(r"rank 0 \(mh1\) waits for (rank 1 \(mh2\) in exchange_rows|every rank in)",
                      lines[0])
            or "ranks 0 (mh1), 1 (mh2) wait for every rank in" in lines[0]), lines[0]
    assert re.search(r"rank 1 \(mh2\) waits for (rank 0 \(mh1\)|every rank)", lines[0]) \
        or "ranks 0 (mh1), 1 (mh2) wait for" in lines[0], lines[0]
    assert job_state(job_id) == f"FAILED {restarts}"  # the watchdog's end is no requeue


HOST_FAULTS = [  # (fault, heal, the watchdog's line)
    (("link", "mh2", "down", "--all"), ("link", "mh2", "up"),
     r"no rank has made progress for more than 10 s \(--hang-timeout\).*1 \(mh2\) waits? for"),
    (("lose", "mh2"), ("revive", "mh2"),
     r"silent for more than 10 s \(--hang-timeout\): rank 1 on mh2 \(epoch"),
]


def end_by_a_host_fault(proc: subprocess.Popen, partdir: Path, run: Path, logs: Path,
                        fault: tuple, heal: tuple, line: str,
                        args: list[str]) -> tuple[subprocess.Popen, bool]:
    """Slurm loses the host too: the watchdog ends the ranks (those on a cut-off host end
    themselves, no srun can reach them) with one line naming the node. Whoever is first decides
    the job's fate: Slurm, seeing the node fail, requeues the job, which resumes from the newest
    checkpoint once the host is back; the watchdog, ending the step first, leaves it FAILED, and
    an explicit relaunch with --resume continues. The launch that goes on, and whether it is a
    new one started with --resume (False: the same launch, its job requeued)."""
    job_id = newest_job(logs)
    restarts = int(job_state(job_id).split("restarts=")[1])  # a requeued job keeps its id
    ends = (f"PENDING restarts={restarts + 1}", f"FAILED restarts={restarts}")
    seen = set(job_lines(logs, "", "--hang-timeout"))
    try:
        cluster(*fault)
        hit = time.monotonic()
        state = wait_for_state(job_id, ends, 60)
        print(f"{' '.join(fault)}: {state} {time.monotonic() - hit:.1f} s after the fault")
        assert state in ends
        assert processes_on("mh2", "submitit") == []  # no rank left on the host
        assert time.monotonic() - hit < 60
        found = set(job_lines(logs, "", "--hang-timeout")) - seen
        assert any(re.search(line, l) for l in found), found
    finally:
        cluster(*heal)
    # the host's step of the job's first run ends once Slurm, reached again, tells it to: the
    # requeued job keeps its id, and a new step beside a stale one of the same id cannot
    # start (PMIx's socket is taken)
    deadline = time.monotonic() + 60
    while processes_on("mh2", "slurmstepd") and time.monotonic() < deadline:
        time.sleep(0.5)
    if state.startswith("PENDING"):
        settle(("mh1", "mh2"))
        cluster("exec", "mhctl", "scontrol", "update", f"JobId={job_id}", "StartTime=now")
        return proc, False
    assert proc.wait(timeout=120) != 0
    return launch_on_hosts(partdir, run, logs, *args, "--resume"), True


@pytest.mark.slow
def test_a_run_outlives_a_cut_link_a_cut_off_host_and_a_lost_host_and_equals_the_unbroken_run(
        multihost, tmp_path) -> None:
    """One run of two ranks on mh1 and mh2 (100 epochs, a checkpoint every 4, --hang-timeout 10,
    tiling off) meets three faults, each two checkpoints after it last (re)started: mh2 cut off whole,
    then mh2 lost whole (Slurm requeues the job, which adds --resume itself), then mh2's fabric
    link down (FAILED: relaunched with --resume). Each ends the job in bounded time and the run
    resumes from its newest checkpoint: in the end every epoch was trained once and the losses
    equal an uninterrupted run's to 1e-6."""
    _, partdir = partitioned_twin(tmp_path, 2, scale=0.01)
    run, logs = tmp_path / "run", tmp_path / "logs"
    # enough epochs, and slow enough ones (hidden 64), that the last fault lands before the run's
    # end: a fault reaches the hosts some tenths of a second after the checkpoint it waits for,
    # and a rank with a core of its own runs an epoch of hidden 16 in about 5 ms
    args = ["--epochs", "100", "--hidden", "64", "--checkpoint-every", "4", "--hang-timeout", "10"]
    proc = launch_on_hosts(partdir, run, logs, *args)
    resumed_after = [0]
    resumed = False  # whether the launch now running was started with --resume
    pool = ThreadPoolExecutor(1)
    reference = None
    try:
        for fault, heal, line in HOST_FAULTS:
            wait_for_checkpoint(run, resumed_after[-1] + 8, proc)
            # the uninterrupted run, on this host while the faults keep the hosts waiting
            reference = reference or pool.submit(
                mpiexec, 2, "train", partdir, "--out", tmp_path / "local", "--threads", "1",
                *FAULT_RUN, *args, env={"DISTGNN_TILES": "off"})
            proc, relaunched = end_by_a_host_fault(proc, partdir, run, logs, fault, heal, line,
                                                   args)
            resumed = resumed or relaunched
            resumed_after.append(checkpoints(run)[-1])
        wait_for_checkpoint(run, resumed_after[-1] + 8, proc)
        end_by_a_cut_link(proc, logs, resumed)
        resumed_after.append(checkpoints(run)[-1])
        proc = launch_on_hosts(partdir, run, logs, *args, "--resume")  # an explicit relaunch
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        pool.shutdown()
        cluster("link", "mh2", "up")
        cluster("revive", "mh2")
    assert proc.returncode == 0, err[-3000:]
    epochs = [json.loads(l)["epoch"] for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert epochs == list(range(1, 101))  # resumed after each fault: every epoch once
    logged = "".join(p.read_text(errors="replace") for p in logs.rglob("*.err"))
    print("resumed after epochs", resumed_after[1:])
    for kept in resumed_after[1:]:
        assert f"continuing after epoch {kept}" in logged
    local = reference.result()
    assert local.returncode == 0, local.stderr[-2000:]
    assert losses(run) == pytest.approx(losses(tmp_path / "local"), rel=1e-6)


@pytest.mark.slow
def test_a_straggling_link_slows_an_epoch_but_ends_nothing(multihost, tmp_path) -> None:
    """mh2's fabric slowed to 2 Mbit/s for 13 s mid-run (--hang-timeout 10): the first exchange of
    about 3 MiB a rank in that window takes over 10 s, but its 1 MiB pieces keep arriving (one per
    4 s), so the watchdog ends nothing; the job finishes and the slow epoch shows in
    metrics.jsonl."""
    from distgnn.data.fetch import fetch

    # the papers twin split at random: every rank exchanges ~3.2 MB per exchange at hidden 16,
    # while the gradients' all-reduce (one piece, however slow) stays at 78 KB
    graph = fetch("synth-papers100M", root=tmp_path / "data", scale=0.001, seed=0, threads=1)
    partdir = tmp_path / "random-2"
    built = run_cli("partition", graph, "--parts", "2", "--method", "random", "--out", partdir,
                    "--threads", "1", "--quiet")
    assert built.returncode == 0, built.stderr
    run, logs = tmp_path / "run", tmp_path / "logs"
    proc = launch_on_hosts(partdir, run, logs, "--epochs", "16", "--checkpoint-every", "0",
                           "--hang-timeout", "10")
    try:
        wait_until(lambda: epochs_of(run) >= 3, proc, 240, "third epoch")
        cluster("link", "mh2", "rate", "2mbit")
        time.sleep(13)
        cluster("link", "mh2", "rate", "off")
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster("link", "mh2", "rate", "off")
    assert proc.returncode == 0, err[-3000:]
    assert job_lines(logs, err, "--hang-timeout") == []
    records = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == list(range(1, 17))
    slowest = max(records, key=lambda r: r["time_exchange_wait_s"])
    print(f"slowest epoch {slowest['epoch']}: {slowest['epoch_time_s']:.1f} s, "
          f"{slowest['time_exchange_wait_s']:.1f} s waiting on exchanges")
    assert slowest["time_exchange_wait_s"] > 10  # the straggling link is visible ...
    assert sorted(r["epoch_time_s"] for r in records)[8] < 2  # ... and most others are fast


def epochs_of(run: Path) -> int:
    path = run / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0
