"""The out-of-core CSR build of a graph store: edges streamed once from a :class:`GraphSource`
(ids checked, in-degrees counted) into a spool on disk, then each range of rows' indices built from
one pass over the spool, within a memory budget (:class:`SpooledCsr`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from distgnn import _native
from distgnn.data.catalog import DEFAULT_CHUNK_BUDGET
from distgnn.data.source import GraphSource
from distgnn.errors import DistgnnError
from distgnn.progress import progress


class _EdgeSpool:
    """Edges written to two flat files as they stream in, read back in blocks (no mmap, so the
    resident size stays one block); ids as ``dtype`` (int32 below 2^31 vertices: 8 bytes of disk
    per pair)."""

    def __init__(self, folder: Path, dtype: np.dtype = np.dtype(np.int64)):
        self.src_path = folder / "src.bin"
        self.dst_path = folder / "dst.bin"
        self.src = open(self.src_path, "wb")
        self.dst = open(self.dst_path, "wb")
        self.dtype = np.dtype(dtype)
        self.count = 0

    def append(self, src: np.ndarray, dst: np.ndarray) -> None:
        src.astype(self.dtype, copy=False).tofile(self.src)
        dst.astype(self.dtype, copy=False).tofile(self.dst)
        self.count += len(src)

    def close(self) -> None:
        self.src.close()
        self.dst.close()

    def blocks(self, block: int):
        with open(self.src_path, "rb") as fs, open(self.dst_path, "rb") as fd:
            for _ in range(0, self.count, block):
                yield np.fromfile(fs, self.dtype, block), np.fromfile(fd, self.dtype, block)


@dataclass
class SpooledCsr:
    """A CSR by destination whose offsets are known and whose edges wait in a spool on disk:
    :meth:`row_ranges` splits the rows so that each range's indices fit a budget, and
    :meth:`indices` builds one range's (sorted rows) from one pass over the spool."""

    indptr: np.ndarray      #: int64 [N+1]
    spool: _EdgeSpool
    add_reverse: bool       #: each spooled pair stands for both directions
    block: int              #: pairs read from the spool at a time
    threads: int = 0

    @property
    def num_nodes(self) -> int:
        return len(self.indptr) - 1

    @property
    def index_dtype(self) -> np.dtype:
        return np.dtype(np.int32 if self.num_nodes < 2**31 else np.int64)

    def row_ranges(self, max_edges: int) -> list[tuple[int, int]]:
        """[lo, hi) row ranges in order, each with at most ``max_edges`` edges (or one row)."""
        n, out, lo = self.num_nodes, [], 0
        while lo < n:
            hi = int(np.searchsorted(self.indptr, self.indptr[lo] + max(1, max_edges), "right")) - 1
            hi = min(n, max(hi, lo + 1))
            out.append((lo, hi))
            lo = hi
        return out or [(0, 0)]

    def indices(self, lo: int, hi: int) -> np.ndarray:
        """The sources of rows [lo, hi), each row ascending: indices[indptr[lo]:indptr[hi]]."""
        n, base = self.num_nodes, int(self.indptr[lo])
        out = np.empty(int(self.indptr[hi]) - base, dtype=self.index_dtype)
        cursor = self.indptr[lo:hi] - base
        whole = lo == 0 and hi == n
        for src, dst in self.spool.blocks(self.block):
            for rows, cols in ((dst, src), (src, dst)) if self.add_reverse else ((dst, src),):
                if not whole:
                    keep = (rows >= lo) & (rows < hi)
                    rows, cols = rows[keep] - rows.dtype.type(lo), cols[keep]
                _native.csr_scatter(rows, cols, cursor, out, n)
        del cursor
        _native.csr_sort_rows(self.indptr[lo:hi + 1] - base, out, self.threads)
        return out


def build_csr(source: GraphSource, work_dir: Path, budget: int = DEFAULT_CHUNK_BUDGET,
              threads: int = 0) -> SpooledCsr:
    """Stream ``source.edges`` into a CSR by destination whose indices are built later, range by
    range (:class:`SpooledCsr`): this pass validates ids, counts in-degrees and spools the edges
    to ``work_dir``; the result is independent of the edge order and of the ranges.
    """
    n = source.num_nodes
    counts = np.zeros(n, dtype=np.int64)
    index_dtype = np.dtype(np.int32 if n < 2**31 else np.int64)
    spool = _EdgeSpool(work_dir, index_dtype)  # ids were checked against n before they are spooled
    edge_file = source.files.get("edges", "edges")
    seen = 0
    bar = progress(desc=f"{source.name}: edges", total=source.num_pairs, unit=" edges",
                   unit_scale=True)
    try:
        for src, dst in source.edges():
            src = np.ascontiguousarray(src, dtype=np.int64)
            dst = np.ascontiguousarray(dst, dtype=np.int64)
            if src.shape != dst.shape or src.ndim != 1:
                raise DistgnnError(f"{edge_file}: source and destination id lists differ in length")
            for rows, cols in ((dst, src), (src, dst)) if source.add_reverse else ((dst, src),):
                pos = _native.csr_count_by_row(rows, counts)
                if pos >= 0:
                    raise DistgnnError(f"{edge_file}: edge {seen + pos} has vertex id {rows[pos]} "
                                       f"outside [0, {n})")
                bad = np.flatnonzero((cols < 0) | (cols >= n))
                if bad.size:
                    raise DistgnnError(f"{edge_file}: edge {seen + bad[0]} has vertex id "
                                       f"{cols[bad[0]]} outside [0, {n})")
            spool.append(src, dst)
            seen += len(src)
            bar.update(len(src))
    finally:
        spool.close()
        bar.close()
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return SpooledCsr(indptr, spool, source.add_reverse, max(1, budget // 16), threads)
