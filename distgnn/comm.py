"""All MPI communication of distgnn: the one module that imports mpi4py.

Thin typed wrappers over one communicator: its collectives, and the non-blocking point-to-point
calls (:meth:`Communicator.irecv`, :meth:`~Communicator.isend`, :meth:`~Communicator.testsome`,
:meth:`~Communicator.waitsome`, with one MPI datatype per row: :meth:`~Communicator.row_type`)
through which its row engine (:mod:`distgnn.row_exchange`) exchanges row blocks by a stored plan.
Every wrapper counts the bytes this rank sends, under a :class:`Traffic` kind and, for training
rows, also under their :class:`Direction`, so the trainer can report traffic without touching
MPI; a blocking collective marks this process as waiting in it (:data:`WAITS`, read by the hang
watchdog; docs/design.md#progress).

``DISTGNN_CHECK_COLLECTIVES=1`` makes every collective first compare, across ranks, which
collective each rank is starting (:meth:`Communicator.start_collective`): a mismatch, which would
otherwise hang the job, becomes one line naming the first collective that differs
(docs/design.md#one-mpi-surface).
"""
from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np
import torch

from distgnn.errors import CollectiveError
from distgnn.kernels.message_codec import MessageCodec
from distgnn.row_exchange import WAITS, Direction, PendingExchange, RowEngine, RowPlan, Traffic

#: the environment variable of the collective-order check (``1`` turns it on)
CHECK_COLLECTIVES = "DISTGNN_CHECK_COLLECTIVES"


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
    return {torch.float32: MPI.FLOAT, torch.float64: MPI.DOUBLE, torch.bfloat16: MPI.INT16_T,
            torch.uint8: MPI.UINT8_T}[dtype]


#: (element dtype, width) -> committed MPI datatype of one row, kept for the process's life
_ROW_TYPES: dict[tuple[torch.dtype, int], Any] = {}


def _row_type(dtype: torch.dtype, width: int):
    """The MPI datatype of one row: ``width`` contiguous elements of ``dtype`` (bfloat16 as its
    int16 bits; packed low-bit rows as bytes). Committed on first use and cached; MPI_Finalize frees it."""
    key = (dtype, width)
    if key not in _ROW_TYPES:
        _ROW_TYPES[key] = _mpi_type(dtype).Create_contiguous(width).Commit()
    return _ROW_TYPES[key]


class Communicator:
    """One MPI communicator plus byte counters (bytes sent by this rank, by kind).

    ``check_collectives`` (default: ``DISTGNN_CHECK_COLLECTIVES=1`` in the environment) turns on
    the collective-order check of :meth:`start_collective`; constructing a Communicator is then
    collective. Its row exchanges are its :attr:`row_engine`'s (:mod:`distgnn.row_exchange`).
    """

    def __init__(self, comm: Any = None, check_collectives: bool | None = None):
        self.comm = comm if comm is not None else _mpi().COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        #: bytes sent by this rank, by Traffic and Direction value (plain str keys)
        self.bytes_sent: dict[str, int] = defaultdict(int)
        if check_collectives is None:
            check_collectives = os.environ.get(CHECK_COLLECTIVES) == "1"
        #: collectives started on this communicator so far
        self.started = 0
        #: under the check: a duplicate on which the ranks compare each collective before it starts
        self._checker = self.comm.Dup() if check_collectives and self.size > 1 else None
        #: this communicator's row exchanges in flight, their progress engine and thread
        self.row_engine = RowEngine(self)

    def copies_rows(self, kind: Traffic) -> bool:
        """Whether an exchange of ``kind`` copies the rows it gathers and scatters
        (:meth:`RowEngine.copies_rows`; the ``rows_copied`` count follows it)."""
        return self.row_engine.copies_rows(kind)

    def set_messages(self, codec: MessageCodec, seed: int) -> None:
        """Training rows travel encoded by ``codec`` (:meth:`RowEngine.set_messages`)."""
        self.row_engine.set_messages(codec, seed)

    def start_epoch(self, epoch: int) -> None:
        """A training epoch starts (its rounding streams; :meth:`RowEngine.start_epoch`)."""
        self.row_engine.start_epoch(epoch)

    def stop_progress_thread(self) -> None:
        """End the row engine's progress thread (at exit, before MPI is finalised; idempotent)."""
        self.row_engine.stop_progress_thread()

    def start_collective(self, op: str, *kind: str) -> None:
        """Count a collective about to start. Under the check, every rank first shows the others
        (sequence number, ``op``, ``kind``): where they differ, every rank raises the same
        :class:`CollectiveError`, one line naming the collective and which ranks start what."""
        self.started += 1
        self.row_engine.poll()
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

    # -- the point-to-point calls of the row engine (distgnn.row_exchange) ------------------------
    def row_type(self, dtype: torch.dtype, width: int) -> Any:
        """The MPI datatype of one row of ``width`` elements of ``dtype`` (an opaque handle)."""
        return _row_type(dtype, width)

    def irecv(self, buf: np.ndarray, count: int, row_type: Any, peer: int, tag: int) -> Any:
        """Post the receive of ``count`` rows of ``row_type`` from ``peer`` into ``buf``; returns
        its request (an opaque handle for :meth:`testsome` and :meth:`waitsome`)."""
        return self.comm.Irecv([buf, count, row_type], peer, tag)

    def isend(self, buf: np.ndarray, count: int, row_type: Any, peer: int, tag: int) -> Any:
        """Post the send of ``count`` rows of ``row_type`` in ``buf`` to ``peer``; returns its
        request."""
        return self.comm.Isend([buf, count, row_type], peer, tag)

    def testsome(self, requests: list[Any]) -> list[int] | None:
        """Indices of ``requests`` complete now, without blocking (MPI_Testsome)."""
        return _mpi().Request.Testsome(requests)

    def waitsome(self, requests: list[Any]) -> list[int] | None:
        """Indices of ``requests`` complete, once at least one is (MPI_Waitsome; None: none
        active)."""
        return _mpi().Request.Waitsome(requests)

    def threads_allowed(self) -> bool:
        """Whether MPI allows calls from several threads (MPI_THREAD_MULTIPLE)."""
        MPI = _mpi()
        return MPI.Query_thread() == MPI.THREAD_MULTIPLE

    @contextmanager
    def _blocking(self, op: str, *kind: str) -> Iterator[None]:
        """Start the collective ``op`` (:meth:`start_collective`) and mark this process as
        waiting in it, for every rank, until it returns (:data:`WAITS`)."""
        WAITS.enter(f"{op}({', '.join(map(str, kind))})" if kind else op, None)
        try:
            self.start_collective(op, *kind)
            yield
        finally:
            WAITS.leave()

    def dup(self) -> "Communicator":
        """A separate communicator over the same ranks (its traffic never mixes with ours)."""
        self.start_collective("dup")
        return Communicator(self.comm.Dup(), self._checker is not None)

    def exchange_rows(self, rows: torch.Tensor, send: RowPlan, recv: RowPlan, kind: Traffic,
                      direction: Direction | None = None, gather: bool = False) -> torch.Tensor:
        """Alltoallv of row blocks by plan (:meth:`distgnn.row_exchange.RowEngine.exchange_rows`;
        ``gather``: ``rows`` is a table whose rows ``send.ids`` are sent)."""
        return self.row_engine.exchange_rows(rows, send, recv, kind, direction, gather)

    def exchange_rows_async(self, rows: torch.Tensor, send: RowPlan, recv: RowPlan,
                            kind: Traffic, direction: Direction | None = None,
                            gather: bool = False) -> PendingExchange:
        """Non-blocking :meth:`exchange_rows`; wait on the returned object
        (:meth:`distgnn.row_exchange.RowEngine.exchange_rows_async`)."""
        return self.row_engine.exchange_rows_async(rows, send, recv, kind, direction, gather)

    def allreduce_sum_(self, tensor: torch.Tensor,
                       kind: Traffic = Traffic.GRADIENTS) -> torch.Tensor:
        """Sum ``tensor`` over all ranks, in place; returns it."""
        kind = Traffic(kind)
        if self.size > 1:
            MPI = _mpi()
            with self._blocking("allreduce_sum_", kind):
                self.comm.Allreduce(MPI.IN_PLACE, tensor.numpy(), op=MPI.SUM)
            self.bytes_sent[kind.value] += int(tensor.numel() * tensor.element_size())
        return tensor

    def sum(self, value: float | int) -> float | int:
        """Sum of a Python number over ranks."""
        with self._blocking("sum"):
            return self.comm.allreduce(value, op=_mpi().SUM)

    def max(self, value: Any) -> Any:
        """Largest ``value`` over ranks (numbers, or tuples compared element by element)."""
        with self._blocking("max"):
            return self.comm.allreduce(value, op=_mpi().MAX)

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        """Every rank's ``obj`` (picklable), by rank, at ``root``; None elsewhere."""
        with self._blocking("gather"):
            return self.comm.gather(obj, root=root)

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable), by rank, at every rank."""
        with self._blocking("allgather"):
            return self.comm.allgather(obj)

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """``root``'s ``obj`` (picklable) at every rank."""
        with self._blocking("bcast"):
            return self.comm.bcast(obj, root=root)

    def alltoall(self, objs: list[Any]) -> list[Any]:
        """Send ``objs[j]`` (any picklable object, e.g. numpy arrays) to rank j; returns what each
        rank sent to this one, by rank. For bounded payloads (it pickles)."""
        with self._blocking("alltoall"):
            return self.comm.alltoall(objs)

    def node_sum_and_min(self, value: int, floor: int) -> tuple[int, int]:
        """(sum of ``value``, min of ``floor``) over the ranks sharing this rank's machine."""
        MPI = _mpi()
        with self._blocking("node_sum_and_min"):
            node = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
            try:
                return node.allreduce(value, op=MPI.SUM), node.allreduce(floor, op=MPI.MIN)
            finally:
                node.Free()

    def barrier(self) -> None:
        with self._blocking("barrier"):
            self.comm.Barrier()

    def quiet_barrier(self, poll_s: float = 0.005) -> None:
        """A barrier that sleeps ``poll_s`` seconds between polls instead of spinning a core as
        MPI's blocking calls do (for timings of compute alone on a shared machine)."""
        with self._blocking("quiet_barrier"):
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
