"""One thread per core for a rank alone on its host, never for ranks sharing one (docs:
docs/design.md#thread-pinning)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from distgnn.thread_pinning import USER_PLACEMENT, pin_threads_if_alone, ranks_on_this_host


@pytest.mark.parametrize("env, ranks", [
    ({}, 1),                                                     # a plain process
    ({"OMPI_COMM_WORLD_LOCAL_SIZE": "1"}, 1),                    # mpiexec -n 1, or one per host
    ({"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, 4),
    ({"SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURM_NODEID": "1"}, 1),
    ({"SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "2,1", "SLURM_NODEID": "0"}, 2),
    ({"SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "2,1", "SLURM_NODEID": "1"}, 1),
    ({"SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "3"}, 1),
    ({"SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "odd", "SLURM_NODEID": "0"}, None),
    ({"PMI_RANK": "0"}, None),                                   # another launcher: unknown
])
def test_ranks_on_this_host(env, ranks) -> None:
    assert ranks_on_this_host(env) == ranks


def test_pins_only_a_rank_alone_and_never_over_the_users_choice() -> None:
    alone: dict[str, str] = {"OMPI_COMM_WORLD_LOCAL_SIZE": "1"}
    assert pin_threads_if_alone(alone, loaded=())
    assert alone["OMP_PROC_BIND"] == "close" and alone["OMP_PLACES"] == "cores"
    shared = {"OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    assert not pin_threads_if_alone(shared, loaded=()) and "OMP_PROC_BIND" not in shared
    unknown = {"PMIX_RANK": "3"}
    assert not pin_threads_if_alone(unknown, loaded=()) and "OMP_PLACES" not in unknown
    for name in ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY"):
        users = {name: "spread"}
        assert not pin_threads_if_alone(users, loaded=()) and users == {name: "spread"}


def test_train_called_in_a_running_python_leaves_its_threads_and_environment_alone(tmp_path) -> None:
    """`train` run from a Python session where torch is loaded (a notebook, this test suite): the
    placement could no longer reach torch's threads, and set anyway it bound the session's main
    thread, and every process it started afterwards, to one CPU."""
    assert not pin_threads_if_alone({}, loaded={"torch"})
    probe = ("import json, os, sys\n"
             "import torch\n"
             "from distgnn.cli import main\n"
             "before = sorted(os.sched_getaffinity(0))\n"
             "main(['fetch', 'synth-reddit', '--scale', '0.002', '--root', sys.argv[1], '--name', 'g', '--quiet'])\n"
             "main(['partition', sys.argv[1] + '/g/graph.zarr', '--parts', '1', '--out', sys.argv[1] + '/p',\n"
             "      '--quiet'])\n"
             "status = main(['train', sys.argv[1] + '/p', '--epochs', '1',\n"
             "               '--out', sys.argv[1] + '/run', '--quiet'])\n"
             "print(json.dumps([status, before, sorted(os.sched_getaffinity(0)),\n"
             "                  os.environ.get('OMP_PROC_BIND'), os.environ.get('OMP_PLACES')]))\n")
    env = {k: v for k, v in os.environ.items() if k not in USER_PLACEMENT + ("OMPI_COMM_WORLD_LOCAL_SIZE",)}
    proc = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    status, before, after, bind, places = json.loads(proc.stdout.strip().splitlines()[-1])
    assert status == 0 and after == before and (bind, places) == (None, None)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to see two threads apart")
def test_a_process_alone_runs_its_dense_threads_one_per_core() -> None:
    """What `distgnn train` does before torch starts: after it, torch's threads each sit on one
    CPU of their own; without it (a user's OMP_PROC_BIND=false) they may run anywhere."""
    probe = ("import glob, json, os\n"
             "from distgnn.thread_pinning import pin_threads_if_alone\n"
             "pin_threads_if_alone()\n"
             "import torch\n"
             "torch.set_num_threads(2)\n"
             "a = torch.randn(512, 512)\n"
             "for _ in range(20): a @ a\n"
             "print(json.dumps(sorted(sorted(os.sched_getaffinity(int(t.split('/')[-1])))\n"
             "                        for t in glob.glob('/proc/self/task/*'))))\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY",
                        "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_STEP_ID", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")}
    pinned = json.loads(subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                                       text=True, check=True).stdout)
    free = json.loads(subprocess.run([sys.executable, "-c", probe], env={**env, "OMP_PROC_BIND": "false"},
                                     capture_output=True, text=True, check=True).stdout)
    one_cpu = [cpus for cpus in pinned if len(cpus) == 1]
    assert len({c[0] for c in one_cpu}) >= 2, pinned      # the team's threads on two CPUs apart
    assert all(len(cpus) > 1 for cpus in free), free      # unpinned: every thread may move
