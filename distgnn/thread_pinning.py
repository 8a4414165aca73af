"""One thread per core for a rank that has its CPUs to itself (docs/design.md#thread-pinning).

OpenMP (torch's dense work and our kernels) lets the operating system move a team's threads
between CPUs. On a small machine the dense work of a whole run then sometimes lands slower by a
third, all epochs alike (two threads sharing a core for a while, the other idle): three runs of the
same computation at P = 1 read 10, 10 and 14 ms an epoch. Pinning each thread of the team to its
own core (``OMP_PROC_BIND=close``, ``OMP_PLACES=cores``, within the process's CPU set) removes that.

It is safe only when no other rank runs inside the same CPU set: several unbound ranks on one
host would pin their first threads to the same cores. So it is set when this process is the only
rank on its host (a plain ``distgnn train``, ``mpiexec -n 1``, or a one-task Slurm step per node),
and never when the user chose a placement (any ``OMP_PROC_BIND``, ``OMP_PLACES``,
``GOMP_CPU_AFFINITY`` or ``KMP_AFFINITY`` set). OpenMP reads these at start-up, so
:func:`pin_threads_if_alone` must run before torch is imported; called later (``train`` from a
Python session or a notebook, where torch is loaded already) it changes nothing: the setting would
not reach this process's threads, yet it would bind the thread that next starts an OpenMP runtime
(our kernels bring their own) to one CPU, and every process started from it after.
"""
from __future__ import annotations

import os
import re
import sys
from typing import Container, Mapping

#: a user's own thread placement: any of these set means we leave placement alone
USER_PLACEMENT = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY")


def ranks_on_this_host(env: Mapping[str, str]) -> int | None:
    """How many ranks the launcher started on this host (None: not known). Open MPI says it
    directly; a Slurm step gives its tasks per node as ``2(x3),1``, this node's first."""
    if "OMPI_COMM_WORLD_LOCAL_SIZE" in env:
        return int(env["OMPI_COMM_WORLD_LOCAL_SIZE"])
    if "SLURM_STEP_ID" in env and "SLURM_STEP_TASKS_PER_NODE" in env:
        tasks = env["SLURM_STEP_TASKS_PER_NODE"].split(",")
        node = int(env.get("SLURM_NODEID", "0"))
        per_node: list[int] = []
        for item in tasks:
            m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item.strip())
            if m is None:
                return None
            per_node += [int(m.group(1))] * int(m.group(2) or 1)
        return per_node[node] if node < len(per_node) else None
    if any(name in env for name in ("PMI_RANK", "PMIX_RANK", "SLURM_PROCID")):
        return None  # some other launcher: it places its ranks
    return 1  # no launcher: a process of its own


def pin_threads_if_alone(env: os._Environ | dict = os.environ,
                         loaded: Container[str] = sys.modules) -> bool:
    """Set one thread per core (``OMP_PROC_BIND=close``, ``OMP_PLACES=cores``) in ``env`` when
    this process is its host's only rank, the user set no placement and torch is not yet among the
    ``loaded`` modules; whether it did."""
    if "torch" in loaded:
        return False
    if any(name in env for name in USER_PLACEMENT):
        return False
    if ranks_on_this_host(env) != 1:
        return False
    env["OMP_PROC_BIND"] = "close"
    env["OMP_PLACES"] = "cores"
    return True
