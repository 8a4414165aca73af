"""All MPI communication of distgnn: the one module that imports mpi4py.

Thin typed wrappers over one communicator. Row blocks are exchanged by a stored plan: a send list
of local row ids grouped by destination rank (offsets [P+1]) and a receive list grouped by source
rank. Every wrapper counts the bytes this rank sends, under a kind (``forward``, ``backward``,
``gradients``, ``eval``, ``setup``) and, for training rows, also under their direction
(``reduce``: leaf replicas to roots; ``broadcast``: roots to leaf replicas), so the trainer can
report traffic without touching MPI.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


def _mpi():
    """mpi4py's MPI module, imported on first use: importing it initialises MPI, which must not
    happen in processes that only build parsers or read partitions (a singleton MPI_Init leaves
    variables in the C environment that make a later child ``mpiexec`` fail)."""
    from mpi4py import MPI

    return MPI


def _mpi_type(dtype: torch.dtype):
    MPI = _mpi()
    return {torch.float32: MPI.FLOAT, torch.float64: MPI.DOUBLE, torch.bfloat16: MPI.INT16_T}[dtype]


def _buffer(t: torch.Tensor) -> np.ndarray:
    """A numpy view of a contiguous tensor (bfloat16, which numpy lacks, as its int16 bits)."""
    return t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()


@dataclass
class RowPlan:
    """Which local rows go to (or come from) each peer.

    ``ids[offsets[j]:offsets[j+1]]`` are the local row ids exchanged with rank j, in the order both
    sides agreed on (sorted by global id).
    """

    ids: torch.Tensor       #: int64 [R]
    offsets: np.ndarray     #: int64 [P+1]

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.offsets)

    def subset(self, keep: torch.Tensor) -> "RowPlan":
        """The rows where ``keep`` (bool [R], one per row) holds, each group keeping its order."""
        group = np.repeat(np.arange(len(self.offsets) - 1), self.counts)
        counts = np.bincount(group[keep.numpy()], minlength=len(self.offsets) - 1)
        offsets = np.zeros(len(self.offsets), dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return RowPlan(self.ids[keep], offsets)


class PendingExchange:
    """A posted non-blocking row exchange; :meth:`wait` returns the received rows [R, F]."""

    def __init__(self, request: Any, recv: torch.Tensor, keep_alive: Any,
                 dtype: torch.dtype | None = None):
        self._request, self._recv, self._keep_alive = request, recv, keep_alive
        self._dtype = dtype or recv.dtype

    def wait(self) -> torch.Tensor:
        if self._request is not None:
            self._request.Wait()
            self._request, self._keep_alive = None, None
            if self._recv.dtype != self._dtype:  # rows sent narrower than they are used
                self._recv = self._recv.to(self._dtype)
        return self._recv

    @property
    def done(self) -> bool:
        return self._request is None


class Communicator:
    """One MPI communicator plus byte counters (bytes sent by this rank, by kind)."""

    def __init__(self, comm: Any = None):
        self.comm = comm if comm is not None else _mpi().COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.bytes_sent: dict[str, int] = defaultdict(int)
        #: when set (bfloat16 under --precision bf16), floating rows travel in this dtype and are
        #: received in their own: half the bytes, counted as sent
        self.payload_dtype: torch.dtype | None = None

    def dup(self) -> "Communicator":
        """A separate communicator over the same ranks (its traffic never mixes with ours)."""
        return Communicator(self.comm.Dup())

    def _layout(self, send: RowPlan, recv: RowPlan, width: int):
        send_counts = send.counts * width
        recv_counts = recv.counts * width
        send_displ = send.offsets[:-1] * width
        recv_displ = recv.offsets[:-1] * width
        return send_counts, send_displ, recv_counts, recv_displ

    def exchange_rows(self, rows: torch.Tensor, send: RowPlan, recv: RowPlan, kind: str,
                      direction: str | None = None) -> torch.Tensor:
        """Alltoallv: rank i sends ``rows`` (already ordered as ``send``, [S, F]) so that rank j
        gets block j; returns the rows received, ordered as ``recv`` ([R, F]). The bytes sent are
        counted under ``kind`` and, when given, ``direction``."""
        pending = self.exchange_rows_async(rows, send, recv, kind, direction)
        return pending.wait()

    def exchange_rows_async(self, rows: torch.Tensor, send: RowPlan, recv: RowPlan,
                            kind: str, direction: str | None = None) -> PendingExchange:
        """Non-blocking :meth:`exchange_rows` (Ialltoallv); wait on the returned object."""
        rows = rows.detach().contiguous()
        used = rows.dtype
        if self.payload_dtype is not None and rows.is_floating_point():
            rows = rows.to(self.payload_dtype)
        width = rows.shape[1] if rows.dim() == 2 else 1
        mpi_type = _mpi_type(rows.dtype)
        recv_rows = torch.empty((int(recv.offsets[-1]), width), dtype=rows.dtype)
        sc, sd, rc, rd = self._layout(send, recv, width)
        send_buf = _buffer(rows)
        request = self.comm.Ialltoallv([send_buf, (sc, sd), mpi_type],
                                       [_buffer(recv_rows), (rc, rd), mpi_type])
        sent = int(rows.numel() * rows.element_size())
        self.bytes_sent[kind] += sent
        if direction is not None:
            self.bytes_sent[direction] += sent
        return PendingExchange(request, recv_rows, send_buf, used)

    def allreduce_sum_(self, tensor: torch.Tensor, kind: str = "gradients") -> torch.Tensor:
        """Sum ``tensor`` over all ranks, in place; returns it."""
        if self.size > 1:
            MPI = _mpi()
            self.comm.Allreduce(MPI.IN_PLACE, tensor.numpy(), op=MPI.SUM)
            self.bytes_sent[kind] += int(tensor.numel() * tensor.element_size())
        return tensor

    def sum(self, value: float | int) -> float | int:
        """Sum of a Python number over ranks."""
        return self.comm.allreduce(value, op=_mpi().SUM)

    def max(self, value: Any) -> Any:
        """Largest ``value`` over ranks (numbers, or tuples compared element by element)."""
        return self.comm.allreduce(value, op=_mpi().MAX)

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        return self.comm.gather(obj, root=root)

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return self.comm.bcast(obj, root=root)

    def alltoall(self, objs: list[Any]) -> list[Any]:
        """Send ``objs[j]`` (any picklable object, e.g. numpy arrays) to rank j; returns what each
        rank sent to this one, by rank. For bounded payloads (it pickles)."""
        return self.comm.alltoall(objs)

    def node_sum_and_min(self, value: int, floor: int) -> tuple[int, int]:
        """(sum of ``value``, min of ``floor``) over the ranks sharing this rank's machine."""
        MPI = _mpi()
        node = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            return node.allreduce(value, op=MPI.SUM), node.allreduce(floor, op=MPI.MIN)
        finally:
            node.Free()

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, code: int = 1) -> None:
        """End every rank of the job (used when one rank fails, so no rank hangs)."""
        self.comm.Abort(code)
