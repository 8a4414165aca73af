"""Human-readable summaries of a graph store (``distgnn inspect``)."""
from __future__ import annotations

import numpy as np

from distgnn.data.graph_store import MASKS, GraphStore


def degree_stats(degrees: np.ndarray) -> dict[str, float]:
    """min, mean, median, p99, max of a degree array, and the count of zeros."""
    if degrees.size == 0:
        return {"min": 0, "mean": 0.0, "median": 0.0, "p99": 0.0, "max": 0, "zeros": 0}
    return {
        "min": int(degrees.min()), "mean": float(degrees.mean()),
        "median": float(np.median(degrees)), "p99": float(np.percentile(degrees, 99)),
        "max": int(degrees.max()), "zeros": int((degrees == 0).sum()),
    }


def _fmt_stats(stats: dict[str, float]) -> str:
    return (f"min {stats['min']}  mean {stats['mean']:.2f}  median {stats['median']:.0f}  "
            f"p99 {stats['p99']:.0f}  max {stats['max']}  zero {stats['zeros']}")


def describe_graph(store: GraphStore) -> str:
    attrs = store.attrs
    lines = [f"graph store {store.path}"]
    for key in ("name", "num_nodes", "num_edges", "num_classes", "feat_dim", "multilabel",
                "directed", "source", "scale", "seed", "checksum"):
        lines.append(f"  {key:<12} {attrs.get(key)}")
    lines.append("arrays:")
    for name in sorted(store.group.array_keys()):
        arr = store[name]
        lines.append(f"  {name:<12} {str(arr.dtype):<8} {str(list(arr.shape)):<18} chunks {list(arr.chunks)}")
    indptr, indices = store.csr()
    n = len(indptr) - 1
    in_degree = np.diff(indptr)
    out_degree = np.bincount(indices, minlength=n)
    lines.append("degrees:")
    lines.append(f"  in   {_fmt_stats(degree_stats(in_degree))}")
    lines.append(f"  out  {_fmt_stats(degree_stats(out_degree))}")
    isolated = int(((in_degree == 0) & (out_degree == 0)).sum())
    lines.append(f"  isolated vertices {isolated}")
    masks = {k: store.read(k) for k in MASKS}
    lines.append("masks:")
    for k, v in masks.items():
        lines.append(f"  {k:<12} {int(v.sum()):>10}  ({100.0 * v.mean() if n else 0:.1f}%)")
    overlap = int((masks["train_mask"] & (masks["val_mask"] | masks["test_mask"])).sum())
    lines.append(f"  train overlapping val/test: {overlap}")
    labels = store.read("label")
    if attrs.get("multilabel"):
        positive = labels.mean(axis=0) if n else np.zeros(labels.shape[1])
        lines.append(f"labels: {labels.shape[1]} binary tasks, positive rate min "
                     f"{positive.min():.3f} mean {positive.mean():.3f} max {positive.max():.3f}")
    else:
        labelled = labels[labels >= 0]
        counts = np.bincount(labelled, minlength=int(attrs.get("num_classes", 0)))
        lines.append(f"labels: {labelled.size} labelled of {n}; class sizes min {counts.min() if counts.size else 0}"
                     f" median {int(np.median(counts)) if counts.size else 0} max {counts.max() if counts.size else 0}")
        top = np.argsort(counts)[::-1][:5]
        share = ", ".join(f"{c}: {100.0 * counts[c] / max(labelled.size, 1):.1f}%" for c in top)
        lines.append(f"  largest classes {share}")
    return "\n".join(lines)
