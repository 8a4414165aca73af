"""Whether Slurm can place a job at all, asked before it is submitted and while it waits
(docs/design.md#launch-placement).

A job of more nodes than its partition has, or of more CPUs per node than a node offers, is
accepted by ``sbatch`` and then pends for ever (reason ``PartitionNodeLimit`` and the like). The
launcher asks ``sinfo`` first and refuses such a job in one line; while a job pends it reads
``squeue``'s reason, ends a job whose reason can never clear, and ends any job still pending past
the preset's ``pending_timeout_min``.
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass

from distgnn.errors import DistgnnError

#: ``ranks_per_node`` / ``cpus_per_task`` value meaning one rank per socket, a thread per core
SOCKET = "socket"

#: squeue reasons of a pending job that waiting will not clear: the job asks for what the
#: partition, its account or its QOS cannot give (squeue(1), "JOB REASON CODES")
NEVER_PLACED = {"PartitionNodeLimit", "PartitionConfig", "PartitionTimeLimit", "BadConstraints",
                "InvalidAccount", "InvalidQOS", "QOSMaxNodePerJobLimit", "QOSMaxCpuPerJobLimit",
                "AssocMaxNodesPerJobLimit", "AssocMaxCpuPerJobLimit"}


@dataclass(frozen=True)
class Shape:
    """What a job asks for: ``nodes`` nodes, ``tasks_per_node`` ranks of ``cpus_per_task`` CPUs."""
    nodes: int
    tasks_per_node: int
    cpus_per_task: int

    @property
    def cpus_per_node(self) -> int:
        return self.tasks_per_node * self.cpus_per_task


def _sinfo_rows(partition: str | None, columns: str) -> tuple[dict[str, list[list[str]]], str | None, str]:
    """``sinfo -N`` of ``partition`` (every partition when None), one row per node with the
    ``columns`` after the partition's name (e.g. ``%N|%c``): ({partition: [the row's other
    fields]}, the default partition, why there are none when sinfo cannot be asked)."""
    command = ["sinfo", "-h", "-N", "-o", f"%P|{columns}"] + (["-p", partition] if partition else [])
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {}, None, f"sinfo: {exc}"
    if proc.returncode != 0:
        words = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        return {}, None, words[-1] if words else f"sinfo exited with {proc.returncode}"
    rows: dict[str, list[list[str]]] = {}
    default = None
    width = columns.count("|") + 2
    for line in proc.stdout.splitlines():
        fields = line.strip().split("|")
        if len(fields) != width:
            continue
        name = fields[0].rstrip("*")
        if fields[0].endswith("*"):
            default = name
        rows.setdefault(name, []).append(fields[1:])
    return rows, default, ""


def partition_nodes(partition: str | None) -> tuple[str, dict[str, int]] | None:
    """(the partition's name, its node -> CPUs) as ``sinfo`` reports them, the cluster's default
    partition when ``partition`` is None; None when sinfo cannot be asked (not installed, no
    controller: the submission itself will then say why)."""
    rows, default, why = _sinfo_rows(partition, "%N|%c")
    if why:
        return None
    name = partition or default
    if name is None or name not in rows:
        return (partition, {}) if partition else None
    return name, {node: int(cpus) for node, cpus in rows[name] if cpus.isdigit()}


def socket_layout(partition: str | None) -> tuple[int, int] | None:
    """(sockets per node, cores per socket) of a partition's nodes as ``sinfo`` reports them (the
    smallest over its nodes, so every node can take the job); None when sinfo cannot be asked or
    lists no node of the partition."""
    return _socket_layout(partition)[0]


def _socket_layout(partition: str | None) -> tuple[tuple[int, int] | None, str]:
    """:func:`socket_layout` and, where it is None, why (sinfo's last line, or what was missing)."""
    rows, default, why = _sinfo_rows(partition, "%N|%X|%Y")
    if why:
        return None, why
    found = [(int(s), int(c)) for _, s, c in rows.get(partition or default or "", [])
             if s.isdigit() and c.isdigit()]
    if not found:
        return None, f"sinfo lists no node of partition {partition or '(default)'}"
    return (min(s for s, _ in found), min(c for _, c in found)), ""


def resolve_sockets(preset: dict, preset_name: str) -> dict:
    """``preset`` with ``ranks_per_node: socket`` and ``cpus_per_task: socket`` made numbers: one
    rank per socket, as many threads as a socket has cores (docs/design.md#job-shape). The site
    keys ``sockets_per_node`` and ``cores_per_socket`` say so where given, else ``sinfo`` of the
    preset's partition; neither: one line naming the keys."""
    wanted = [k for k in ("ranks_per_node", "cpus_per_task") if preset.get(k) == SOCKET]
    if not wanted:
        return preset
    sockets, cores = preset.get("sockets_per_node"), preset.get("cores_per_socket")
    if sockets is None or cores is None:
        asked, why = _socket_layout(preset.get("slurm_partition"))
        if asked is None:
            raise DistgnnError(
                f"preset {preset_name!r}: {' and '.join(f'{k}: socket' for k in wanted)} needs the "
                f"nodes' sockets and cores, and sinfo cannot say ({why}): set the site keys "
                f"sockets_per_node and cores_per_socket; nothing was submitted")
        sockets, cores = sockets if sockets is not None else asked[0], cores if cores is not None else asked[1]
    resolved = dict(preset)
    if "ranks_per_node" in wanted:
        resolved["ranks_per_node"] = int(sockets)
    if "cpus_per_task" in wanted:
        resolved["cpus_per_task"] = int(cores)
    return resolved


def placement_problem(shape: Shape, partition: str | None) -> str | None:
    """One line saying why Slurm cannot place a job of ``shape`` in ``partition`` (None when it
    can, or when sinfo cannot be asked)."""
    nodes = partition_nodes(partition)
    if nodes is None:
        return None
    name, cpus = nodes
    if not cpus:
        return f"Slurm has no partition {name!r} (sinfo lists none by that name)"
    fitting = sum(1 for c in cpus.values() if c >= shape.cpus_per_node)
    if fitting >= shape.nodes:
        return None
    ask = (f"{shape.nodes} node{'s' if shape.nodes > 1 else ''} of {shape.tasks_per_node} rank"
           f"{'s' if shape.tasks_per_node > 1 else ''} x {shape.cpus_per_task} CPU"
           f"{'s' if shape.cpus_per_task > 1 else ''}")
    return (f"Slurm partition {name!r} cannot place the job: it asks for {ask}, and the "
            f"partition has {len(cpus)} node{'s' if len(cpus) != 1 else ''}, {fitting} with "
            f"{shape.cpus_per_node} CPUs free to give (sinfo); partition into fewer parts, or "
            f"change the preset's ranks_per_node / cpus_per_task")


def pending_reason(job_id: str) -> str:
    """squeue's reason of a job's wait (%r), '' when it is not listed or squeue cannot answer."""
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%r"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[0] if lines else ""
