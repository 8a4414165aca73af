"""Small writers shared by the assignment and part builders (all checksummed, chunk-aligned)."""
from __future__ import annotations

import numpy as np
import zarr

from distgnn.zarr_io import ChecksummedWriter, create_array


def read_whole(array: zarr.Array) -> np.ndarray:
    """Read an array chunk by chunk into one preallocated result (zarr's own whole-array read
    holds decode buffers for many chunks at once, about 40% more memory on a large array)."""
    out = np.empty(array.shape, dtype=array.dtype)
    step = array.chunks[0]
    for start in range(0, array.shape[0], step):
        out[start:start + step] = array[start:start + step]
    return out


def read_csr(store) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) of a :class:`~distgnn.data.graph_store.GraphStore`, read chunk-wise."""
    return read_whole(store["indptr"]), read_whole(store["indices"])


def write_array(group: zarr.Group, name: str, data: np.ndarray) -> str:
    """Write an in-memory array chunk by chunk; return its content digest."""
    writer = ChecksummedWriter(create_array(group, name, data.shape, data.dtype))
    step = writer.array.chunks[0]
    for start in range(0, len(data), step):
        writer.write(data[start:start + step])
    return writer.finish()


class ChunkAlignedWriter:
    """Buffers row blocks of any size and writes them to ``array`` in whole chunks (so zarr never
    reads back a partial chunk). Memory: at most one chunk plus one incoming block."""

    def __init__(self, array: zarr.Array):
        self.writer = ChecksummedWriter(array)
        self.step = array.chunks[0]
        self.pending: list[np.ndarray] = []
        self.rows = 0

    def write(self, block: np.ndarray) -> None:
        if not len(block):
            return
        self.pending.append(block)
        self.rows += len(block)
        if self.rows >= self.step:
            data = np.concatenate(self.pending) if len(self.pending) > 1 else self.pending[0]
            whole = (len(data) // self.step) * self.step
            self.writer.write(data[:whole])
            rest = data[whole:]
            self.pending = [rest.copy()] if len(rest) else []
            self.rows = len(rest)

    def finish(self) -> str:
        if self.pending:
            self.writer.write(np.concatenate(self.pending))
            self.pending, self.rows = [], 0
        return self.writer.finish()


def gather_rows(source: zarr.Array, rows: np.ndarray, out: ChunkAlignedWriter) -> None:
    """Write ``source[rows]`` (rows ascending) to ``out``, reading ``source`` one chunk at a time,
    so memory does not depend on the row width or on the number of rows."""
    step = source.chunks[0]
    n = source.shape[0]
    bounds = np.searchsorted(rows, np.arange(0, n + step, step, dtype=np.int64))
    for c in range(len(bounds) - 1):
        lo, hi = int(bounds[c]), int(bounds[c + 1])
        if hi == lo:
            continue
        first, last = int(rows[lo]), int(rows[hi - 1]) + 1
        block = source[first:last]
        out.write(block[rows[lo:hi] - first])


def gather_rows_multi(source: zarr.Array, targets: list[tuple[np.ndarray, ChunkAlignedWriter]],
                      desc: str = "gather") -> None:
    """:func:`gather_rows` for several (rows, writer) targets at once: each chunk of ``source``
    that any target needs is read once."""
    from distgnn.progress import progress

    step = source.chunks[0]
    edges = np.arange(0, source.shape[0] + step, step, dtype=np.int64)
    bounds = [np.searchsorted(rows, edges) for rows, _ in targets]
    for c in progress(range(len(edges) - 1), desc=desc):
        spans = [(int(b[c]), int(b[c + 1])) for b in bounds]
        needed = [(lo, hi) for lo, hi in spans if hi > lo]
        if not needed:
            continue
        first = min(int(rows[lo]) for (rows, _), (lo, hi) in zip(targets, spans) if hi > lo)
        last = max(int(rows[hi - 1]) for (rows, _), (lo, hi) in zip(targets, spans) if hi > lo) + 1
        block = source[first:last]
        for (rows, writer), (lo, hi) in zip(targets, spans):
            if hi > lo:
                writer.write(block[rows[lo:hi] - first])
