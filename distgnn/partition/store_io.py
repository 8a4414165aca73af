"""Small writers shared by the assignment and part builders (all checksummed, chunk-aligned)."""
from __future__ import annotations

import os
from concurrent.futures import Executor, Future
from pathlib import Path

import google_crc32c
import numpy as np
import zarr
import zarr.codecs

from distgnn import _native, atomic
from distgnn.errors import DistgnnError
from distgnn.zarr_io import (ChecksummedWriter, create_array, read, read_chunked, rows_per_chunk,
                             write_array)  # noqa: F401 (write_array re-exported)


_NATIVE_GATHER = (np.dtype(np.float32), np.dtype(np.float64))


def read_csr(store) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) of a :class:`~distgnn.data.graph_store.GraphStore`, read chunk-wise."""
    return read_chunked(store["indptr"]), read_chunked(store["indices"])


def create_row_array(group: zarr.Group, name: str, shape: tuple[int, ...], dtype) -> zarr.Array:
    """A row-chunked array for vertex rows (features, labels) of a part: crc32c-checksummed but
    not compressed (feature rows rarely compress, and lz4 would cost more time than any other
    step of the build), every chunk written."""
    rows = max(1, min(rows_per_chunk(tuple(shape[1:]), dtype), max(shape[0], 1)))
    return group.create_array(name=name, shape=shape, dtype=dtype, chunks=(rows, *shape[1:]),
                              fill_value=0, config={"write_empty_chunks": True},
                              compressors=[zarr.codecs.Crc32cCodec()])


class SharedChunks:
    """The chunks of one array that several :class:`RowWriter` fill in part (where one writer's
    rows end and the next one's begin): each writer deposits its rows, and a chunk is written,
    whole, once all its rows are in (so no chunk is read back and rewritten, and the writers may
    finish in any order)."""

    def __init__(self, array: zarr.Array, executor: Executor | None = None):
        self.array, self.executor = array, executor
        self.step = array.chunks[0]
        self.open: dict[int, tuple[np.ndarray, int]] = {}
        self.pending: list[Future] = []

    def deposit(self, start: int, data: np.ndarray) -> None:
        """Rows ``data`` at ``start``, all inside one chunk."""
        first = start // self.step * self.step
        stop = min(first + self.step, self.array.shape[0])
        buf, filled = self.open.pop(first, (None, 0))
        if buf is None:
            buf = np.empty((stop - first, *self.array.shape[1:]), dtype=self.array.dtype)
        buf[start - first:start - first + len(data)] = data
        filled += len(data)
        if filled < stop - first:
            self.open[first] = (buf, filled)
        elif self.executor is None:
            self.array[first:stop] = buf
        else:
            self.pending.append(self.executor.submit(self.array.__setitem__, slice(first, stop), buf))

    def finish(self) -> None:
        """Wait for the writes; refuse a chunk some rows never reached."""
        for future in self.pending:
            future.result()
        self.pending = []
        if self.open:
            first = min(self.open)
            raise DistgnnError(f"array '{self.array.basename}': chunk at row {first} got "
                               f"{self.open[first][1]} of its rows")

    def drain(self) -> None:
        for future in self.pending:
            try:
                future.result()
            except Exception:  # noqa: BLE001 - the original error is already propagating
                pass
        self.pending = []


class RowWriter:
    """Writes selected rows of source blocks into ``array`` in order, through two preallocated
    chunk buffers (rows are gathered straight into one while the other, full, is written), so
    memory is two chunks whatever the number of rows. With an ``executor`` the chunk writes (zarr
    encode + file write, which release the GIL) run in the background, overlapping the gathers of
    this and other writers; at most one write per writer is in flight. The digest is a crc32c of
    the content.

    ``start``/``stop`` confine the writer to rows ``[start, stop)`` of the array (default: all),
    so several writers can fill one array's ranges side by side (a part's roots and its leaves,
    or the runs of a vertex order). Rows of a chunk shared with another writer's range go to
    ``shared`` (:class:`SharedChunks`, one per array), which writes that chunk once it is full;
    without ``shared``, when ``start`` is not on a chunk boundary the rows up to the next boundary
    are kept and written by :meth:`finish`, which must then run after the writer of the range
    before has finished."""

    def __init__(self, array: zarr.Array, executor: Executor | None = None, start: int = 0,
                 stop: int | None = None, shared: SharedChunks | None = None):
        self.array = array
        self.step = array.chunks[0]
        self.buffers = [np.empty((self.step, *array.shape[1:]), dtype=array.dtype) for _ in range(2)]
        self.current = 0
        self.pending: Future | None = None
        self.executor = executor
        self.fill = 0
        self.start = start
        self.stop = array.shape[0] if stop is None else stop
        self.cursor = start
        self.crc = 0
        self.head: tuple[int, np.ndarray] | None = None   #: rows sharing a chunk with the block before
        self.shared = shared

    @property
    def buf(self) -> np.ndarray:
        return self.buffers[self.current]

    def take(self, block: np.ndarray, rows: np.ndarray) -> None:
        """Append ``block[rows]`` (rows int64)."""
        native = block.ndim == 2 and block.dtype in _NATIVE_GATHER and block.flags.c_contiguous
        pos = 0
        while pos < len(rows):
            count = min(self._capacity() - self.fill, len(rows) - pos)
            out = self.buf[self.fill:self.fill + count]
            if native:  # one thread, without the GIL: overlaps the background chunk writes
                _native.gather_rows(block, rows[pos:pos + count], out, 1)
            else:
                np.take(block, rows[pos:pos + count], axis=0, out=out)
            self.fill += count
            pos += count
            if self.fill == self._capacity():
                self._flush()

    def _capacity(self) -> int:
        """Rows the current buffer takes: up to the next chunk boundary."""
        return self.step - self.cursor % self.step

    def _wait(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.result()  # re-raises a failed write here

    def _flush(self) -> None:
        if not self.fill:
            return
        end = self.cursor + self.fill
        if end > self.stop:
            raise DistgnnError(f"array '{self.array.basename}': more rows than its block "
                               f"[{self.start}, {self.stop})")
        data = self.buf[:self.fill]
        self.crc = google_crc32c.extend(self.crc, data)
        whole = self.cursor % self.step == 0 and (end % self.step == 0 or end == self.array.shape[0])
        if self.shared is not None and not whole:
            self.shared.deposit(self.cursor, data.copy())
            self.cursor, self.fill = end, 0
            return
        if self.cursor == self.start and self.start % self.step:
            self.head = (self.cursor, data.copy())  # shares a chunk with the block before
            self.cursor, self.fill = end, 0
            return
        self._wait()  # the other buffer is free again once its write is done
        if self.executor is None:
            self.array[self.cursor:end] = data
        else:
            self.pending = self.executor.submit(self.array.__setitem__, slice(self.cursor, end), data)
            self.current ^= 1
        self.cursor, self.fill = end, 0

    def drain(self) -> None:
        """Wait for an in-flight write, ignoring its error (before removing a failed output)."""
        try:
            self._wait()
        except Exception:  # noqa: BLE001 - the original error is already propagating
            pass

    def finish(self) -> str:
        self._flush()
        self._wait()
        if self.head is not None:
            at, data = self.head
            self.array[at:at + len(data)] = data
            self.head = None
        if self.cursor != self.stop:
            raise DistgnnError(f"array '{self.array.basename}': wrote {self.cursor - self.start} of "
                               f"{self.stop - self.start} rows")
        if self.array.shape[0] == 0:
            self.array[...] = self.array.fill_value  # still write the (empty) chunk layout
        return f"crc32c-{self.crc:08x}-{self.cursor - self.start}"


class ScatteredRows:
    """Feeds a :class:`RowWriter` whose block is not in ascending global id (a part in a vertex
    order): :meth:`take` accepts the block's rows in ascending global id (as
    :func:`gather_rows_multi` hands them out) and puts each at its place in a scratch file beside
    ``beside``, the store being built, named as its temporary (memory-mapped, so resident memory
    stays small: the pages are the OS's to write back; after a kill the next build of that store
    removes it, :func:`distgnn.atomic.remove_orphans`); :meth:`finish` streams the file, in the
    block's order, through the writer and removes it. ``gids``: the block's global ids in its own
    (local) order."""

    def __init__(self, writer: RowWriter, gids: np.ndarray, beside: str | os.PathLike):
        self.writer = writer
        self.place = np.argsort(gids, kind="stable")  # block position of the i-th smallest id
        self.gids = gids[self.place]
        self.cursor = 0
        shape = (len(gids), *writer.array.shape[1:])
        self.path: Path | None = None
        if len(gids) == 0:
            self.rows = np.empty(shape, dtype=writer.array.dtype)
            return
        self.path = atomic.temp_path(beside, f"{writer.array.basename}-rows")
        self.rows = np.memmap(self.path, dtype=writer.array.dtype, mode="w+", shape=shape)

    def take(self, block: np.ndarray, rows: np.ndarray) -> None:
        """Place ``block[rows]``, the next rows in ascending global id."""
        count = len(rows)
        self.rows[self.place[self.cursor:self.cursor + count]] = block[rows]
        self.cursor += count

    def finish(self) -> str:
        if self.cursor != len(self.place):
            raise DistgnnError(f"array '{self.writer.array.basename}': got {self.cursor} of "
                               f"{len(self.place)} rows")
        step = self.writer.step
        for start in range(0, len(self.place), step):
            chunk = np.ascontiguousarray(self.rows[start:start + step])
            self.writer.take(chunk, np.arange(len(chunk), dtype=np.int64))
        digest = self.writer.finish()
        self.close()
        return digest

    def drain(self) -> None:
        self.writer.drain()

    def close(self) -> None:
        """Remove the scratch file (also after a failure)."""
        self.rows = None
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None


def gather_rows_multi(source: zarr.Array, targets: list[tuple[np.ndarray, RowWriter]],
                      desc: str = "gather") -> None:
    """Write ``source[rows]`` to each target's writer (rows ascending within a target), reading
    ``source`` one chunk at a time, each chunk that any target needs once; memory does not depend
    on the row width or on the number of rows."""
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
        block = read(source, slice(first, last))
        for (rows, writer), (lo, hi) in zip(targets, spans):
            if hi > lo:
                writer.take(block, rows[lo:hi] - first)
