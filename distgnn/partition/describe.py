"""``distgnn inspect PARTDIR``: the assignment's quality figures and a per-partition table."""
from __future__ import annotations

from pathlib import Path

import zarr

from distgnn.partition import layout
from distgnn.partition.build import open_assignment
from distgnn.partition.quality import format_quality


def describe_partition(folder: str | Path) -> str:
    folder = Path(folder)
    _, attrs = open_assignment(folder)
    lines = [f"{folder}: {attrs['method']} vertex cut of {attrs['store']} into P={attrs['P']} "
             f"(seed {attrs['seed']}, edge order: {attrs['order']}, roots: {attrs.get('root_rule', 'balance')})",
             f"graph {attrs['graph']} ({attrs['num_nodes']:,} vertices, {attrs['num_edges']:,} edges)",
             format_quality(attrs),
             f"{'part':>5} {'edges':>14} {'vertices':>12} {'roots':>12} {'train roots':>12} "
             f"{'split':>12} {'built':>6}"]
    for k in range(attrs["P"]):
        path = folder / layout.part_name(k)
        split, built = "-", "no"
        if path.exists():
            part = dict(zarr.open_group(str(path), mode="r").attrs)
            if part.get("assignment_checksum") == attrs["checksum"]:
                split, built = f"{part['num_split']:,}", "yes"
            else:
                built = "stale"
        lines.append(f"{k:>5} {attrs['part_edges'][k]:>14,} {attrs['part_vertices'][k]:>12,} "
                     f"{attrs['part_roots'][k]:>12,} {attrs['part_train_roots'][k]:>12,} "
                     f"{split:>12} {built:>6}")
    return "\n".join(lines)
