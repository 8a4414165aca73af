"""Fetch and partition at two sizes: the peak of what they allocate grows by at most 5 bytes per
edge (docs/design.md#preflight), for the twin and for OGB's binary file layout. That is what lets
a papers100M-size graph (1.6 billion edges) go through both on a 24 GiB machine.

Peaks are measured with tracemalloc (numpy's arrays and every Python buffer are traced), so the
figures are exact and independent of the allocator; the readers' blocks are made small so that
both sizes use full blocks and chunks, and only the graph's size differs."""
from __future__ import annotations

import functools
import tracemalloc
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

import formats
from distgnn import zarr_io
from distgnn.data import ogb_source, store_writer, synthetic
from distgnn.data.fetch import fetch
from distgnn.data.graph_store import GraphStore
from distgnn.partition import assign
from distgnn.partition.assign import assign_graph
from distgnn.progress import set_quiet

BYTES_PER_EDGE = 5.0
BLOCK = 1 << 20  # bytes of one streamed block (features, spool reads) and of CSR indices at once


def traced_peak(work: Callable[[], object]) -> int:
    """Peak bytes allocated while ``work`` runs (tracemalloc)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        work()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def growth_per_edge(peaks: dict[int, int]) -> float:
    (e1, p1), (e2, p2) = sorted(peaks.items())
    return (p2 - p1) / (e2 - e1)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    # zarr chunks of 64 KiB instead of 8 MiB: at both sizes every array's chunks are full size
    small_chunks = functools.partial(zarr_io.rows_per_chunk, target=64 << 10)
    monkeypatch.setattr(zarr_io, "rows_per_chunk", small_chunks)
    monkeypatch.setattr(store_writer, "rows_per_chunk", small_chunks)
    monkeypatch.setattr(synthetic, "EDGE_BLOCK", 1 << 16)
    # a forward seek in a compressed npz member reads and drops up to 16 MiB at a time
    monkeypatch.setattr(zipfile.ZipExtFile, "MAX_SEEK_READ", 1 << 16)
    monkeypatch.setattr(ogb_source, "EDGE_BLOCK", 1 << 16)
    monkeypatch.setattr(assign, "WINDOW_EDGES", 1 << 16)
    set_quiet(True)
    yield
    set_quiet(False)


def fetch_twin(root: Path, scale: float) -> Path:
    return fetch("synth-papers100M", root=root, scale=scale, budget=BLOCK, csr_budget=BLOCK,
                 threads=1, preflight=False)


def write_ogb(folder: Path, n: int, e: int) -> Path:
    rng = np.random.default_rng(n)
    ids = rng.permutation(n)
    labels = np.full(n, np.nan)
    labels[ids[: n // 6]] = rng.integers(0, 172, n // 6)
    split = {"train": ids[: n // 10], "valid": ids[n // 10: n // 8], "test": ids[n // 8: n // 6]}
    return formats.write_ogb_binary(folder / "ogbn_papers100M", edge_index=rng.integers(0, n, (2, e)),
                                    node_feat=rng.standard_normal((n, 16)).astype(np.float32),
                                    node_label=labels[:, None], split="time", ids=split)


def test_fetch_of_the_twin_grows_by_at_most_5_bytes_per_edge(tmp_path: Path) -> None:
    peaks = {}
    for scale in (0.001, 0.004):
        root = tmp_path / str(scale)
        peak = traced_peak(lambda: fetch_twin(root, scale))
        peaks[GraphStore.open(root / f"synth-papers100M-x{scale:g}" / "graph.zarr").num_edges] = peak
    assert growth_per_edge(peaks) <= BYTES_PER_EDGE, peaks


def test_fetch_of_ogb_binary_files_grows_by_at_most_5_bytes_per_edge(tmp_path: Path) -> None:
    peaks = {}
    for n, e in ((40_000, 600_000), (160_000, 2_400_000)):
        source = write_ogb(tmp_path / f"src{n}", n, e)
        peaks[e] = traced_peak(lambda: fetch("ogbn-papers100M", root=tmp_path / f"data{n}",
                                             source=source.parent, budget=BLOCK, csr_budget=BLOCK,
                                             threads=1, preflight=False))
    assert growth_per_edge(peaks) <= BYTES_PER_EDGE, peaks


@pytest.mark.parametrize("method", ["libra", "hdrf"])
def test_streamed_assignment_grows_by_at_most_5_bytes_per_edge(tmp_path: Path, method: str) -> None:
    peaks = {}
    for scale in (0.001, 0.004):
        graph = fetch_twin(tmp_path / "data", scale)
        store = GraphStore.open(graph)
        peaks[store.num_edges] = traced_peak(lambda: assign_graph(
            graph, 128, method, out=tmp_path / f"{method}-{scale}", threads=1, order="store",
            preflight=False))
    assert growth_per_edge(peaks) <= BYTES_PER_EDGE, peaks
