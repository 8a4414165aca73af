"""Will a long stage fit on this machine? Before ``fetch``, ``partition assign`` and
``partition build`` start, their peak memory and the disk they write are estimated from sizes
known beforehand and compared with what the machine offers: a stage that would not fit stops with
one line saying how much it needs and how much there is, instead of an out-of-memory kill or a
full disk hours later (docs/design.md#preflight). ``--no-preflight`` skips the check.

The coefficients are upper bounds of what the code holds, checked against runs at papers100M size
(docs/scale.md#papers-size).
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from distgnn import host_memory
from distgnn.errors import DistgnnError

GiB = 2**30
#: the interpreter, numpy, zarr and their buffers, bytes
BASELINE_BYTES = 400 << 20


@dataclass
class StageNeeds:
    """A stage's estimated peak memory and disk (bytes), and what they are made of."""

    stage: str            #: e.g. "fetch synth-papers100M"
    memory: int
    disk: int
    disk_path: Path       #: where the stage writes (the disk checked is this path's filesystem)
    memory_detail: str    #: e.g. "indices 1.0 GiB + 111,059,956 vertices x 40 B"
    disk_detail: str


def free_disk_bytes(path: str | os.PathLike) -> int:
    """Free bytes on the filesystem that holds ``path`` (or its nearest existing parent)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def check(needs: StageNeeds, memory_bytes: tuple[int, str] | None = None,
          disk_free: int | None = None) -> str:
    """Raise one line when ``needs`` exceeds this machine's memory budget
    (:func:`distgnn.host_memory.memory_budget`, or ``memory_bytes``) or the free disk
    under ``needs.disk_path`` (or ``disk_free``); otherwise return a one-line summary."""
    if memory_bytes is None:
        memory_bytes = host_memory.memory_budget()
    have, source = memory_bytes
    free = free_disk_bytes(needs.disk_path) if disk_free is None else disk_free
    skip = "; --no-preflight skips this check"
    if have and needs.memory > have:
        raise DistgnnError(f"{needs.stage}: needs about {_size(needs.memory)} of memory "
                           f"({needs.memory_detail}), {_size(have)} available ({source}){skip}")
    if needs.disk > free:
        raise DistgnnError(f"{needs.stage}: needs about {_size(needs.disk)} of disk under "
                           f"{needs.disk_path} ({needs.disk_detail}), {_size(free)} free{skip}")
    return (f"{needs.stage}: needs about {_size(needs.memory)} of memory ({_size(have)} available) "
            f"and {_size(needs.disk)} of disk ({_size(free)} free)")


def _size(b: float) -> str:
    """Bytes as MiB below 1 GiB, GiB above (one decimal)."""
    return f"{b / 2**20:.1f} MiB" if b < GiB else f"{b / GiB:.1f} GiB"




#: bytes per vertex a conversion holds at its peak: offsets and the in-degree counts or range
#: cursor (16), the twin model or a reader's labels (<= 18), labels widened to int64 (8), masks (3)
FETCH_VERTEX_BYTES = 48


def fetch_needs(stage: str, target: Path, num_nodes: int, pairs: int, add_reverse: bool,
                feat_dim: int, feature_bytes: int, block_budget: int, csr_budget: int) -> StageNeeds:
    """A conversion's peak: one range of CSR indices (at most ``csr_budget``), per-vertex arrays
    and a few streamed blocks; its disk: the larger of the edge spool (removed before the
    features are written) and the store itself, uncompressed."""
    index_bytes = 4 if num_nodes < 2**31 else 8
    edges = pairs * (2 if add_reverse else 1)
    indices = min(edges * index_bytes, max(csr_budget, 1))
    memory = BASELINE_BYTES + indices + num_nodes * FETCH_VERTEX_BYTES + 8 * block_budget
    spool = pairs * 2 * index_bytes
    store = edges * index_bytes + num_nodes * (8 + 8 + 3 + feat_dim * feature_bytes)
    return StageNeeds(
        stage, memory, max(spool, store), target,
        f"CSR indices {_size(indices)} at once + {num_nodes:,} vertices x {FETCH_VERTEX_BYTES} B",
        f"edge spool {_size(spool)}, then the store {_size(store)}: features "
        f"{_size(num_nodes * feat_dim * feature_bytes)}, CSR {_size(edges * index_bytes)}")


def assign_needs(stage: str, out: Path, num_nodes: int, num_edges: int, parts: int,
                 shuffled: bool, in_edges_rule: bool, window_edges: int) -> StageNeeds:
    """An assignment's peak: ``edge_part`` (1 or 2 bytes per edge), per-vertex offsets, degrees,
    replica bitsets, roots and train mask, a window of sources (streamed) or every source plus
    the shuffle's permutation and destinations; its disk: the assignment, uncompressed."""
    words = (parts + 63) // 64
    part_bytes = 1 if parts <= 255 else 2
    index_bytes = 4 if num_nodes < 2**31 else 8
    vertex = 8 + 8 + 8 * words + 4 + 1 + (8 * words if in_edges_rule else 0)
    if shuffled:
        edge = part_bytes + 2 * index_bytes + (4 if num_edges < 2**32 else 8)
        window = 0
    else:
        edge, window = part_bytes, 2 * min(window_edges, num_edges) * index_bytes
    memory = BASELINE_BYTES + num_edges * edge + num_nodes * vertex + window
    disk = num_edges * part_bytes + num_nodes * (8 * words + 4)
    stream = ("every source, the shuffle's permutation and destinations" if shuffled
              else "a window of sources")
    return StageNeeds(stage, memory, disk, out,
                      f"{num_edges:,} edges x {edge} B ({stream}) + {num_nodes:,} vertices x {vertex} B",
                      f"edge_part {_size(num_edges * part_bytes)}, replicas and roots "
                      f"{_size(num_nodes * (8 * words + 4))}")


#: bytes per vertex of the graph a part build holds: offsets, replica bitsets' share, root,
#: masks and the global-to-local map
BUILD_VERTEX_BYTES = 8 + 4 + 3 + 4


def build_needs(stage: str, folder: Path, num_nodes: int, num_edges: int, parts: int,
                part_vertices: list[int], part_edges: list[int], feat_dim: int, feature_bytes: int,
                label_bytes: int) -> StageNeeds:
    """Building the parts ``part_vertices``/``part_edges`` (one entry per part built): the whole
    graph's CSR and assignment in memory plus the largest part's arrays; disk: every part built,
    uncompressed (rows: features, label, ids, degrees, masks; edges: CSR and transpose)."""
    words = (parts + 63) // 64
    part_bytes = 1 if parts <= 255 else 2
    index_bytes = 4 if num_nodes < 2**31 else 8
    graph = num_edges * (index_bytes + part_bytes) + num_nodes * (BUILD_VERTEX_BYTES + 8 * words)
    row_bytes = feat_dim * feature_bytes + label_bytes + 8 + 8 + 1 + 3 + 16 + 16
    # a part's structure is held whole (ids, degrees, offsets, CSR and transpose, plan); its
    # feature rows stream through
    largest = max((n * 64 + m * 8 for n, m in zip(part_vertices, part_edges)), default=0)
    disk = sum(n * row_bytes + m * 8 for n, m in zip(part_vertices, part_edges))
    return StageNeeds(stage, BASELINE_BYTES + graph + largest, disk, folder,
                      f"the graph's CSR and assignment {_size(graph)} + the largest part's "
                      f"structure {_size(largest)}",
                      f"{len(part_vertices)} part(s), {sum(part_vertices):,} vertex rows x "
                      f"{row_bytes} B + {sum(part_edges):,} edges x 8 B")
