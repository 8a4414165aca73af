"""``distgnn inspect PARTDIR``: the assignment's quality figures and a per-partition table."""
from __future__ import annotations

from pathlib import Path

import zarr

from distgnn.partition import layout
from distgnn.partition.readers import open_assignment
from distgnn.partition.quality import format_quality


def moving_rows(part: zarr.Group) -> tuple[int, int]:
    """(partials its leaves send to their roots, source rows its leaves receive) per aggregation
    under apply-at-root: leaves with local in-edges, and leaves with local out-edges."""
    import numpy as np

    n_roots = int(part.attrs["n_roots"])
    in_degree = np.diff(part["indptr"][:])[n_roots:]
    out_degree = np.diff(part["t_indptr"][:])[n_roots:]
    return int(np.count_nonzero(in_degree)), int(np.count_nonzero(out_degree))


def describe_partition(folder: str | Path) -> str:
    """The assignment's figures and one row per part: its edges, vertices, roots (local ids
    ``[0, n_roots)``), training roots, split vertices, and the rows that move per aggregation under
    apply-at-root (leaf partials sent to roots, source rows received from roots)."""
    folder = Path(folder)
    _, attrs = open_assignment(folder)
    lines = [f"{folder}: {attrs['method']} vertex cut of {attrs['store']} into P={attrs['P']} "
             f"(seed {attrs['seed']}, edge order: {attrs['order']}, roots: {attrs.get('root_rule', 'balance')})",
             f"graph {attrs['graph']} ({attrs['num_nodes']:,} vertices, {attrs['num_edges']:,} edges)",
             format_quality(attrs),
             "roots are local ids [0, roots) of each part; per aggregation under --apply root a "
             "part sends 'partials out' leaf rows to roots and receives 'rows in' source rows "
             "(its leaves with local in- / out-edges); built 'old': rebuild (layout version 1); "
             "order: the part's vertex order (distgnn partition --order)",
             f"{'part':>5} {'edges':>14} {'vertices':>12} {'roots':>12} {'train roots':>12} "
             f"{'split':>12} {'partials out':>13} {'rows in':>12} {'built':>6} {'order':>11}"]
    for k in range(attrs["P"]):
        path = folder / layout.part_name(k)
        split = f"{attrs['part_split'][k]:,}" if "part_split" in attrs else "-"
        sent, received, built, order = "-", "-", "no", "-"
        if path.exists():
            group = zarr.open_group(str(path), mode="r")
            part = dict(group.attrs)
            if part.get("assignment_checksum") != attrs["checksum"]:
                built = "stale"
            elif part.get("layout_version", 1) != layout.LAYOUT_VERSION:
                built = "old"
            else:
                reduce_rows, bcast_rows = moving_rows(group)
                split, built = f"{part['num_split']:,}", "yes"
                order = part.get("vertex_order", "none")
                sent, received = f"{reduce_rows:,}", f"{bcast_rows:,}"
        lines.append(f"{k:>5} {attrs['part_edges'][k]:>14,} {attrs['part_vertices'][k]:>12,} "
                     f"{attrs['part_roots'][k]:>12,} {attrs['part_train_roots'][k]:>12,} "
                     f"{split:>12} {sent:>13} {received:>12} {built:>6} {order:>11}")
    return "\n".join(lines)
