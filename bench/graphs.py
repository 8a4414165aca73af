"""Bench graphs shared by the kernel and partition benchmarks (generated in seconds from a seed).

* R24: Reddit's 232,965 vertices, about 24M directed edges, power-law degrees, no communities.
* P26: ogbn-products' 2,449,029 vertices, about 26M directed edges, power-law degrees.
"""
from __future__ import annotations

import numpy as np

from distgnn.data.synthetic import power_law_csr

BENCH_GRAPHS = {"R24": (232_965, 24_000_000), "P26": (2_449_029, 26_000_000)}


def bench_graph(name: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(indptr int64 [N+1], indices int32 [E]) of bench graph ``name`` (CSR by destination)."""
    num_nodes, num_edges = BENCH_GRAPHS[name]
    return power_law_csr(num_nodes, num_edges, seed=seed)


if __name__ == "__main__":
    import time

    for graph in BENCH_GRAPHS:
        start = time.perf_counter()
        indptr, indices = bench_graph(graph)
        deg = np.diff(indptr)
        print(f"{graph}: {len(deg):,} vertices, {len(indices):,} edges, max in-degree {deg.max():,}, "
              f"{time.perf_counter() - start:.1f} s")
