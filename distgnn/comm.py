"""All MPI communication of distgnn: the one module that imports mpi4py.

Thin typed wrappers over one communicator. Row blocks are exchanged by a stored plan: a send list
of local row ids grouped by destination rank (offsets [P+1]) and a receive list grouped by source
rank. Every wrapper counts the bytes this rank sends, under a :class:`Traffic` kind and, for
training rows, also under their :class:`Direction`, so the trainer can report traffic without
touching MPI.

Rows travel as one MPI datatype per row (``width`` contiguous elements), so Alltoallv's counts and
displacements, C ints, are in rows: a rank may send up to 2^31 - 1 rows to a peer however wide
they are (Debian's Open MPI 4.1 has no MPI-4 large-count calls).

``DISTGNN_CHECK_COLLECTIVES=1`` makes every collective first compare, across ranks, which
collective each rank is starting (:meth:`Communicator._start`): a mismatch, which would otherwise
hang the job, becomes one line naming the first collective that differs
(docs/design.md#one-mpi-surface).
"""
from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import torch

from distgnn.errors import CollectiveError, DistgnnError

#: the environment variable of the collective-order check (``1`` turns it on)
CHECK_COLLECTIVES = "DISTGNN_CHECK_COLLECTIVES"
#: the largest count or displacement MPI takes (a C int), in rows
C_INT_MAX = 2**31 - 1


class Traffic(StrEnum):
    """What a message carries: the key its bytes are counted under (the value is the key)."""

    FORWARD = "forward"        #: training rows of the forward pass
    BACKWARD = "backward"      #: their gradients
    GRADIENTS = "gradients"    #: the all-reduced parameter gradients
    EVAL = "eval"              #: evaluation (and the input cache)
    SETUP = "setup"            #: once per run: plans, degrees
    BENCH = "bench"            #: the MPI microbenchmark's own messages


class Direction(StrEnum):
    """Which way training rows move (counted besides their kind)."""

    REDUCE = "reduce"          #: leaf replicas to their roots
    BROADCAST = "broadcast"    #: roots to their leaf replicas


def _mpi():
    """mpi4py's MPI module, imported on first use: importing it initialises MPI, which must not
    happen in processes that only build parsers or read partitions (a singleton MPI_Init leaves
    variables in the C environment that make a later child ``mpiexec`` fail)."""
    from mpi4py import MPI

    return MPI


def mpi_library_version() -> str:
    """The MPI library's version text as it reports it (MPI_Get_library_version; several lines)."""
    return _mpi().Get_library_version()


def abort_at_exit(status: int | SystemExit) -> None:
    """If MPI is running in this process, end the job with MPI_Abort(``status``) when the process
    exits instead of waiting in MPI_Finalize for ranks stuck in a collective (mpi4py's
    ``set_abort_status``; a SystemExit gives its code). Nothing when MPI never started."""
    if "mpi4py.MPI" in sys.modules:
        from mpi4py.run import set_abort_status

        set_abort_status(status)


def _mpi_type(dtype: torch.dtype):
    MPI = _mpi()
    return {torch.float32: MPI.FLOAT, torch.float64: MPI.DOUBLE, torch.bfloat16: MPI.INT16_T}[dtype]


#: (element dtype, width) -> committed MPI datatype of one row, kept for the process's life
_ROW_TYPES: dict[tuple[torch.dtype, int], Any] = {}


def _row_type(dtype: torch.dtype, width: int):
    """The MPI datatype of one row: ``width`` contiguous elements of ``dtype`` (bfloat16 as its
    int16 bits). Committed on first use and cached; MPI_Finalize frees it."""
    key = (dtype, width)
    if key not in _ROW_TYPES:
        _ROW_TYPES[key] = _mpi_type(dtype).Create_contiguous(width).Commit()
    return _ROW_TYPES[key]


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


def _in_rows(plan: RowPlan) -> tuple[np.ndarray, np.ndarray]:
    """(counts, displacements) of ``plan``, int64 [P] each, in rows, as Alltoallv takes them; a
    :class:`DistgnnError` in one line when one exceeds a C int (2^31 - 1 rows)."""
    counts, displs = plan.counts, plan.offsets[:-1]
    biggest = max(int(counts.max(initial=0)), int(displs.max(initial=0)))
    if biggest > C_INT_MAX:
        raise DistgnnError(f"a row exchange of {int(plan.offsets[-1])} rows needs a count or "
                           f"offset of {biggest} rows, over MPI's limit of {C_INT_MAX} "
                           "(a C int); partition into more parts")
    return counts, displs


class Communicator:
    """One MPI communicator plus byte counters (bytes sent by this rank, by kind).

    ``check_collectives`` (default: ``DISTGNN_CHECK_COLLECTIVES=1`` in the environment) turns on
    the collective-order check of :meth:`_start`; constructing a Communicator is then collective.
    """

    def __init__(self, comm: Any = None, check_collectives: bool | None = None):
        self.comm = comm if comm is not None else _mpi().COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        #: bytes sent by this rank, by Traffic and Direction value (plain str keys)
        self.bytes_sent: dict[str, int] = defaultdict(int)
        #: when set (bfloat16 under --precision bf16), floating rows travel in this dtype and are
        #: received in their own: half the bytes, counted as sent
        self.payload_dtype: torch.dtype | None = None
        if check_collectives is None:
            check_collectives = os.environ.get(CHECK_COLLECTIVES) == "1"
        #: collectives started on this communicator so far
        self.started = 0
        #: under the check: a duplicate on which the ranks compare each collective before it starts
        self._checker = self.comm.Dup() if check_collectives and self.size > 1 else None

    def _start(self, op: str, *kind: str) -> None:
        """Count a collective about to start. Under the check, every rank first shows the others
        (sequence number, ``op``, ``kind``): where they differ, every rank raises the same
        :class:`CollectiveError`, one line naming the collective and which ranks start what."""
        self.started += 1
        if self._checker is None:
            return
        call = f"{op}({', '.join(map(str, kind))})" if kind else op
        everyone = self._checker.allgather((self.started, call))
        if len(set(everyone)) == 1:
            return
        ranks: dict[tuple[int, str], list[int]] = {}
        for r, seen in enumerate(everyone):
            ranks.setdefault(seen, []).append(r)
        who = "; ".join(f"rank{'s' * (len(rs) > 1)} {', '.join(map(str, rs))}: {c}"
                        for (_, c), rs in ranks.items())
        raise CollectiveError(f"{CHECK_COLLECTIVES}: collective #{self.started} differs between "
                              f"ranks ({who}); every rank must start the same collectives in the "
                              "same order (a model: aggregate/attend alike on every rank)")

    def dup(self) -> "Communicator":
        """A separate communicator over the same ranks (its traffic never mixes with ours)."""
        self._start("dup")
        return Communicator(self.comm.Dup(), self._checker is not None)

    def exchange_rows(self, rows: torch.Tensor, send: RowPlan, recv: RowPlan, kind: Traffic,
                      direction: Direction | None = None) -> torch.Tensor:
        """Alltoallv: rank i sends ``rows`` (already ordered as ``send``, [S, F]) so that rank j
        gets block j; returns the rows received, ordered as ``recv`` ([R, F]). The bytes sent are
        counted under ``kind`` and, when given, ``direction`` (members or their string values)."""
        pending = self.exchange_rows_async(rows, send, recv, kind, direction)
        return pending.wait()

    def exchange_rows_async(self, rows: torch.Tensor, send: RowPlan, recv: RowPlan,
                            kind: Traffic, direction: Direction | None = None) -> PendingExchange:
        """Non-blocking :meth:`exchange_rows` (Ialltoallv); wait on the returned object. Counts
        and displacements are in rows of one row datatype (at most 2^31 - 1 each)."""
        kind = Traffic(kind)
        direction = None if direction is None else Direction(direction)
        sc, sd = _in_rows(send)
        rc, rd = _in_rows(recv)
        rows = rows.detach().contiguous()
        used = rows.dtype
        if self.payload_dtype is not None and rows.is_floating_point():
            rows = rows.to(self.payload_dtype)
        width = rows.shape[1] if rows.dim() == 2 else 1
        row_type = _row_type(rows.dtype, width)
        recv_rows = torch.empty((int(recv.offsets[-1]), width), dtype=rows.dtype)
        send_buf = _buffer(rows)
        self._start("exchange_rows", *((kind,) if direction is None else (kind, direction)))
        request = self.comm.Ialltoallv([send_buf, (sc, sd), row_type],
                                       [_buffer(recv_rows), (rc, rd), row_type])
        sent = int(rows.numel() * rows.element_size())
        self.bytes_sent[kind.value] += sent
        if direction is not None:
            self.bytes_sent[direction.value] += sent
        return PendingExchange(request, recv_rows, send_buf, used)

    def allreduce_sum_(self, tensor: torch.Tensor,
                       kind: Traffic = Traffic.GRADIENTS) -> torch.Tensor:
        """Sum ``tensor`` over all ranks, in place; returns it."""
        kind = Traffic(kind)
        if self.size > 1:
            MPI = _mpi()
            self._start("allreduce_sum_", kind)
            self.comm.Allreduce(MPI.IN_PLACE, tensor.numpy(), op=MPI.SUM)
            self.bytes_sent[kind.value] += int(tensor.numel() * tensor.element_size())
        return tensor

    def sum(self, value: float | int) -> float | int:
        """Sum of a Python number over ranks."""
        self._start("sum")
        return self.comm.allreduce(value, op=_mpi().SUM)

    def max(self, value: Any) -> Any:
        """Largest ``value`` over ranks (numbers, or tuples compared element by element)."""
        self._start("max")
        return self.comm.allreduce(value, op=_mpi().MAX)

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        """Every rank's ``obj`` (picklable), by rank, at ``root``; None elsewhere."""
        self._start("gather")
        return self.comm.gather(obj, root=root)

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable), by rank, at every rank."""
        self._start("allgather")
        return self.comm.allgather(obj)

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """``root``'s ``obj`` (picklable) at every rank."""
        self._start("bcast")
        return self.comm.bcast(obj, root=root)

    def alltoall(self, objs: list[Any]) -> list[Any]:
        """Send ``objs[j]`` (any picklable object, e.g. numpy arrays) to rank j; returns what each
        rank sent to this one, by rank. For bounded payloads (it pickles)."""
        self._start("alltoall")
        return self.comm.alltoall(objs)

    def node_sum_and_min(self, value: int, floor: int) -> tuple[int, int]:
        """(sum of ``value``, min of ``floor``) over the ranks sharing this rank's machine."""
        MPI = _mpi()
        self._start("node_sum_and_min")
        node = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            return node.allreduce(value, op=MPI.SUM), node.allreduce(floor, op=MPI.MIN)
        finally:
            node.Free()

    def barrier(self) -> None:
        self._start("barrier")
        self.comm.Barrier()

    def quiet_barrier(self, poll_s: float = 0.005) -> None:
        """A barrier that sleeps ``poll_s`` seconds between polls instead of spinning a core as
        MPI's blocking calls do (for timings of compute alone on a shared machine)."""
        self._start("quiet_barrier")
        request = self.comm.Ibarrier()
        while not request.Test():
            time.sleep(poll_s)

    def send(self, buf: np.ndarray, dest: int) -> None:
        """Send the contiguous array ``buf`` to rank ``dest`` (blocking, point to point)."""
        self.comm.Send(buf, dest=dest)

    def recv(self, buf: np.ndarray, source: int) -> None:
        """Receive into the contiguous array ``buf`` from rank ``source`` (blocking)."""
        self.comm.Recv(buf, source=source)

    def abort(self, code: int = 1) -> None:
        """End every rank of the job (used when one rank fails, so no rank hangs)."""
        self.comm.Abort(code)
