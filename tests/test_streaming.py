"""Conversion streams features: peak memory growth stays well below the feature bytes."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from conftest import write_npy_graph

# Runs the real CLI in a child and prints the child's peak RSS (KiB); a probe per measurement, so
# RUSAGE_CHILDREN covers exactly one conversion.
PROBE = """
import resource, subprocess, sys
subprocess.run([sys.executable, '-m', 'distgnn', 'fetch', 'npy', '--quiet', '--root', sys.argv[1],
                '--source', sys.argv[2], '--chunk-mb', sys.argv[3], '--threads', '1'], check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def peak_rss_bytes(root: Path, source: Path, budget_bytes: int) -> int:
    proc = subprocess.run([sys.executable, "-c", PROBE, str(root), str(source),
                           str(budget_bytes / 2**20)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip().splitlines()[-1]) * 1024


def write_features_in_blocks(path: Path, num_nodes: int, feat_dim: int) -> None:
    rng = np.random.default_rng(0)
    with open(path, "wb") as f:  # written block by block, never whole in memory
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (num_nodes, feat_dim)})
        for _ in range(0, num_nodes, 8000):
            rng.standard_normal((8000, feat_dim), dtype=np.float32).tofile(f)


def test_feature_conversion_streams(tmp_path: Path) -> None:
    num_nodes, feat_dim = 64_000, 256  # 62.5 MiB of float32 features
    feature_bytes = num_nodes * feat_dim * 4
    budget = feature_bytes // 8
    big, small = tmp_path / "big", tmp_path / "small"
    write_npy_graph(big, num_nodes=num_nodes, num_edges=20_000, feat_dim=1)
    write_features_in_blocks(big / "feat.npy", num_nodes, feat_dim)
    # Baseline: the same command on a graph with 1/64 of the feature bytes (imports, CSR, labels).
    write_npy_graph(small, num_nodes=num_nodes, num_edges=20_000, feat_dim=1)
    write_features_in_blocks(small / "feat.npy", num_nodes, feat_dim // 64)
    baseline = peak_rss_bytes(tmp_path / "data-small", small, budget)
    peak = peak_rss_bytes(tmp_path / "data-big", big, budget)
    growth = peak - baseline
    assert growth < feature_bytes / 2, (f"peak grew by {growth / 2**20:.1f} MiB for "
                                        f"{feature_bytes / 2**20:.1f} MiB of features")
