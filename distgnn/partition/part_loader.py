"""Load one partition (``part_<k>.zarr``, docs/design.md#stores) into typed tensors for training."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from distgnn.row_exchange import RowPlan
from distgnn.errors import DistgnnError
from distgnn.partition.layout import check_layout
from distgnn.zarr_io import open_checked, read_chunked

PART_ARRAYS = ("local_to_global", "indptr", "indices", "t_indptr", "t_indices", "in_degree_global",
               "is_root", "feat", "label", "train_mask", "val_mask", "test_mask",
               "comm/leaf_send", "comm/leaf_send_offsets", "comm/root_recv",
               "comm/root_recv_offsets")


@dataclass
class PartitionData:
    """One rank's share of the graph; every id is local to the partition unless named global."""

    k: int                          #: partition index (= MPI rank)
    num_parts: int                  #: P
    attrs: dict[str, Any]           #: the part store's attributes
    local_to_global: torch.Tensor   #: int64 [n_k]
    indptr: torch.Tensor            #: int64 [n_k + 1], CSR by destination over local edges
    indices: torch.Tensor           #: int32/int64 [m_k]
    t_indptr: torch.Tensor          #: transpose (CSR by source), for backward
    t_indices: torch.Tensor
    in_degree_global: torch.Tensor  #: int64 [n_k]: in-degree in the whole graph
    is_root: torch.Tensor           #: bool [n_k]
    feat: torch.Tensor              #: float32 [n_k, F]
    label: torch.Tensor             #: int64 [n_k] or float32 [n_k, C]
    masks: dict[str, torch.Tensor]  #: train/val/test, bool [n_k], true only at roots
    leaf_send: RowPlan              #: my leaf replicas, grouped by the rank holding their root
    root_recv: RowPlan              #: my roots, grouped by the rank holding the leaf

    @property
    def num_local(self) -> int:
        return int(self.local_to_global.shape[0])

    @property
    def num_roots(self) -> int:
        """n_roots: local ids [0, n_roots) are this part's roots (layout version 2)."""
        return int(self.attrs["n_roots"])

    @property
    def local_degree(self) -> torch.Tensor:
        """In-degree over this partition's edges only, int64 [n_k]."""
        return self.indptr[1:] - self.indptr[:-1]


def part_path(partition_dir: str | os.PathLike, k: int) -> Path:
    return Path(partition_dir) / f"part_{k}.zarr"


def read_assignment_attrs(partition_dir: str | os.PathLike) -> dict[str, Any]:
    """The attributes of a partition folder's ``assignment.zarr`` (P under ``P``)."""
    assignment = Path(partition_dir) / "assignment.zarr"
    if not assignment.exists():
        raise DistgnnError(f"{partition_dir}: not a partition folder (no assignment.zarr)")
    import zarr

    attrs = dict(zarr.open_group(str(assignment), mode="r").attrs)
    if "P" not in attrs and "num_parts" in attrs:
        attrs["P"] = attrs["num_parts"]
    if "P" not in attrs:
        raise DistgnnError(f"{assignment}: no P attribute")
    return attrs


def read_num_parts(partition_dir: str | os.PathLike) -> int:
    """P of a partition folder, from its assignment store's attributes."""
    return int(read_assignment_attrs(partition_dir)["P"])


#: the arrays every epoch sweeps (gathered rows and the CSR walked per aggregation)
HUGE_PAGE_ARRAYS = ("feat", "indptr", "indices", "t_indptr", "t_indices")


def load_partition(partition_dir: str | os.PathLike, k: int,
                   huge_pages: bool = False) -> PartitionData:
    """Read ``part_<k>.zarr`` fully into memory (refusing missing or damaged chunks); with
    ``huge_pages``, the arrays of :data:`HUGE_PAGE_ARRAYS` into 2 MB-page buffers."""
    path = part_path(partition_dir, k)
    if not path.exists():
        raise DistgnnError(f"{path}: missing part (partition folder incomplete)")
    group = open_checked(path, PART_ARRAYS)
    check_layout(path, dict(group.attrs))
    from distgnn.host_memory import huge_page_array

    # feat is float32 in memory whatever its on-disk form (float16 stores widen chunk by chunk)
    arrays = {name: read_chunked(group[name], f"{path}/{name}",
                                 huge_page_array if huge_pages and name in HUGE_PAGE_ARRAYS
                                 else np.empty, np.float32 if name == "feat" else None)
              for name in PART_ARRAYS}
    attrs = dict(group.attrs)
    t = {name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in arrays.items()}
    num_parts = int(attrs.get("P", attrs.get("num_parts", 0)))
    if int(attrs.get("k", k)) != k:
        raise DistgnnError(f"{path}: attribute k={attrs.get('k')} but file is part {k}")
    return PartitionData(
        k=k, num_parts=num_parts, attrs=attrs,
        local_to_global=t["local_to_global"].long(), indptr=t["indptr"].long(),
        indices=t["indices"], t_indptr=t["t_indptr"].long(), t_indices=t["t_indices"],
        in_degree_global=t["in_degree_global"].long(), is_root=t["is_root"].bool(),
        feat=t["feat"], label=t["label"],
        masks={m: t[m].bool() for m in ("train_mask", "val_mask", "test_mask")},
        leaf_send=RowPlan(t["comm/leaf_send"].long(), arrays["comm/leaf_send_offsets"].astype(np.int64)),
        root_recv=RowPlan(t["comm/root_recv"].long(), arrays["comm/root_recv_offsets"].astype(np.int64)),
    )
