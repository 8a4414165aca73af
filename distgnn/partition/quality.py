"""Quality figures of a vertex-cut assignment (stored in ``assignment.zarr`` attrs and printed).

* ``replication_factor``: replicas / N (an isolated vertex counts once; 1.0 = no vertex split).
* ``edge_balance``: max over parts of edges / mean edges (1.0 = perfect).
* ``root_balance`` and ``train_root_balance``: the same for roots and training roots.
* ``vertex_balance``: the same for replicas (vertices stored) per part.
* ``root_edge_share``: edges on the partition of their destination's root / all edges: the share
  of the aggregates that roots compute from fresh local data (cd-r's and 0c's roots lack the rest
  between deliveries; see ``--roots in-edges``).
* ``cd0_bytes_per_layer_per_width``: bytes one cd-0 aggregation moves in the forward pass per unit
  of feature width (float32): every leaf replica sends its partial to its root and receives the
  total back, so 2 * 4 bytes per leaf. Multiply by the layer's width; the backward pass moves the
  same amount again.
"""
from __future__ import annotations

from typing import Any

import numpy as np

#: bytes per value in the predicted communication (float32 aggregates)
VALUE_BYTES = 4


def _balance(values: np.ndarray) -> float:
    mean = float(np.mean(values)) if len(values) else 0.0
    return float(np.max(values)) / mean if mean > 0 else 1.0


def quality(num_nodes: int, edges: np.ndarray, vertices: np.ndarray, roots: np.ndarray,
            train_roots: np.ndarray, root_local_edges: int) -> dict[str, Any]:
    """Figures from per-part counts (each int [P]): edges, vertices (replicas), roots, training
    roots; and the number of edges on their destination's root partition."""
    replicas = int(np.sum(vertices))
    leaves = replicas - num_nodes
    num_edges = int(np.sum(edges))
    return {
        "root_edge_share": root_local_edges / num_edges if num_edges else 1.0,
        "replication_factor": replicas / num_nodes if num_nodes else 1.0,
        "edge_balance": _balance(edges),
        "vertex_balance": _balance(vertices),
        "root_balance": _balance(roots),
        "train_root_balance": _balance(train_roots),
        "num_replicas": replicas,
        "num_leaves": leaves,
        "cd0_bytes_per_layer_per_width": 2 * VALUE_BYTES * leaves,
    }


def format_quality(attrs: dict[str, Any]) -> str:
    """Readable lines of the quality figures in an assignment's attrs."""
    roots = ([f"roots ({attrs.get('root_rule', 'balance')}) hold {attrs['root_edge_share']:.1%} "
              f"of the edges into them"] if "root_edge_share" in attrs else [])  # older stores lack it
    return "\n".join([
        f"replication factor {attrs['replication_factor']:.4f} "
        f"({attrs['num_replicas']:,} replicas of {attrs['num_nodes']:,} vertices)",
        f"edge balance {attrs['edge_balance']:.4f}, vertex balance {attrs['vertex_balance']:.4f}, "
        f"root balance {attrs['root_balance']:.4f}, train-root balance "
        f"{attrs['train_root_balance']:.4f} (max / mean)",
        *roots,
        f"predicted cd-0 forward bytes per layer per unit width: "
        f"{attrs['cd0_bytes_per_layer_per_width']:,} ({attrs['num_leaves']:,} leaves x 2 x 4 B)",
    ])


def part_table(attrs: dict[str, Any]) -> str:
    """Per-partition table: edges, vertices, roots, training roots."""
    rows = [f"{'part':>5} {'edges':>14} {'vertices':>12} {'roots':>12} {'train roots':>12}"]
    for k in range(attrs["P"]):
        rows.append(f"{k:>5} {attrs['part_edges'][k]:>14,} {attrs['part_vertices'][k]:>12,} "
                    f"{attrs['part_roots'][k]:>12,} {attrs['part_train_roots'][k]:>12,}")
    return "\n".join(rows)
