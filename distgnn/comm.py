"""All MPI communication of distgnn: the one module that imports mpi4py.

Thin typed wrappers over one communicator. Row blocks are exchanged by a stored plan: a send list
of local row ids grouped by destination rank (offsets [P+1]) and a receive list grouped by source
rank. Every wrapper counts the bytes this rank sends, under a :class:`Traffic` kind and, for
training rows, also under their :class:`Direction`, so the trainer can report traffic without
touching MPI.

A row exchange sends each peer its rows point to point, in pieces of at most :data:`PIECE_BYTES`
counted in one MPI datatype per row (``width`` contiguous elements), so every count stays far
below a C int (Debian's Open MPI 4.1 has no MPI-4 large-count calls) and a wait knows which peers
it still waits for (:class:`WaitState`, read by the hang watchdog; docs/design.md#progress).
While an exchange is in flight a thread of the communicator completes its pieces and posts the
next ones every :data:`PROGRESS_INTERVAL_S`, so a delayed exchange moves while the rank computes
instead of inside its next MPI call (``DISTGNN_PROGRESS_THREAD=off``: no thread;
docs/design.md#progress-thread).

``DISTGNN_CHECK_COLLECTIVES=1`` makes every collective first compare, across ranks, which
collective each rank is starting (:meth:`Communicator._start`): a mismatch, which would otherwise
hang the job, becomes one line naming the first collective that differs
(docs/design.md#one-mpi-surface).
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections import defaultdict, deque
from contextlib import contextmanager
from functools import partial
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Iterator

import numpy as np
import torch

from distgnn.errors import CollectiveError, DistgnnError

#: the environment variable of the collective-order check (``1`` turns it on)
CHECK_COLLECTIVES = "DISTGNN_CHECK_COLLECTIVES"
#: the environment variable that turns the progress thread off (``off``)
PROGRESS_THREAD = "DISTGNN_PROGRESS_THREAD"
#: seconds between the progress thread's passes while a row exchange is in flight
PROGRESS_INTERVAL_S = 0.002


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


class WaitState:
    """What this process's main thread is waiting for inside MPI, for the watchdog's thread to
    read (docs/design.md#progress). One per process: every Communicator writes here.

    A wait is *stalled* for as long as nothing it waits for has completed: a row exchange makes
    progress with each piece (at most :data:`PIECE_BYTES`) that arrives or leaves, a blocking
    collective only when it returns. Outside MPI a rank is never stalled (it computes)."""

    def __init__(self) -> None:
        #: (call, ranks it waits for or None for every rank, monotonic time of the last progress);
        #: replaced whole, so the watchdog's thread always reads one consistent state
        self._state: tuple[str | None, tuple[int, ...] | None, float] = (None, None, time.monotonic())
        #: pieces completed in waits so far (a count, for tests and the curious)
        self.pieces = 0

    def enter(self, call: str, peers: tuple[int, ...] | None) -> None:
        self._state = (call, peers, time.monotonic())

    def advance(self, peers: tuple[int, ...] | None, pieces: int) -> None:
        self.pieces += pieces
        self._state = (self._state[0], peers, time.monotonic())

    def leave(self) -> None:
        self._state = (None, None, time.monotonic())

    def now(self) -> tuple[str | None, tuple[int, ...] | None, float]:
        """(the call waited in or None, the ranks it waits for (None: every rank), seconds since
        its last progress, 0 outside a wait)."""
        call, peers, since = self._state
        return call, peers, (time.monotonic() - since) if call is not None else 0.0


#: this process's wait (:class:`WaitState`)
WAITS = WaitState()
#: a row exchange moves each peer's rows in pieces of at most this many bytes (at least one row):
#: the unit in which the watchdog sees a slow link progress (docs/design.md#progress)
PIECE_BYTES = 1 << 20
#: row exchanges are tagged by their collective number modulo this (MPI promises tags to 32767)
TAG_SPAN = 32768


#: pieces a rank keeps in flight to each peer per exchange, the next posted as one completes.
#: Pieces in flight together share the link and complete together, at the end; a small window
#: makes them complete one after another, which is the progress the watchdog sees on a slow link
#: (docs/design.md#progress). Every receive is posted at once.
SEND_WINDOW = 2


class PendingExchange:
    """A posted row exchange; :meth:`wait` returns the received rows [R, F].

    Its receives are all posted; its sends to each peer are queued and posted
    :data:`SEND_WINDOW` at a time by its communicator's progress engine
    (:meth:`Communicator._progress`), which runs in every wait, at the start of every MPI call of
    that communicator and, between calls, on the communicator's progress thread, so pieces keep
    moving while the rank computes."""

    def __init__(self, comm: "Communicator", recvs: list[tuple[int, Any]],
                 sends: dict[int, deque], recv: torch.Tensor, keep_alive: Any, call: str,
                 dtype: torch.dtype | None = None):
        self._comm, self._call = comm, call
        self._recv, self._keep_alive = recv, keep_alive
        self._dtype = dtype or recv.dtype
        #: requests not yet complete, with their peer and whether each is a send
        self.requests: list[Any] = [r for _, r in recvs]
        self.peers: list[int] = [peer for peer, _ in recvs]
        self.sending: list[bool] = [False] * len(recvs)
        self._queued = sends  # peer -> the posts of its sends not yet made, in order
        for peer in list(sends):
            for _ in range(SEND_WINDOW):
                self._post_next(peer)

    def _post_next(self, peer: int) -> None:
        queue = self._queued.get(peer)
        if queue:
            self.requests.append(queue.popleft()())
            self.peers.append(peer)
            self.sending.append(True)

    def completed(self, indices: list[int]) -> None:
        """The requests at ``indices`` completed: drop them and post the sends they free."""
        freed = [self.peers[i] for i in indices if self.sending[i]]
        gone = set(indices)
        keep = [i for i in range(len(self.requests)) if i not in gone]
        self.requests = [self.requests[i] for i in keep]
        self.peers = [self.peers[i] for i in keep]
        self.sending = [self.sending[i] for i in keep]
        for peer in freed:
            self._post_next(peer)

    def outstanding(self) -> tuple[int, ...]:
        """Ranks with a piece of this exchange still to arrive or to leave."""
        return tuple(sorted(set(self.peers) | {p for p, q in self._queued.items() if q}))

    @property
    def done(self) -> bool:
        return not self.requests and not any(self._queued.values())

    def wait(self) -> torch.Tensor:
        if not self.done:
            WAITS.enter(self._call, self.outstanding())
            try:
                with self._comm._lock:
                    self._comm._progress(until=self)
            finally:
                WAITS.leave()
        self._keep_alive = None
        if self._recv.dtype != self._dtype:  # rows sent narrower than they are used
            self._recv = self._recv.to(self._dtype)
        return self._recv


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
        #: row exchanges posted and not yet complete (their sends still to be posted or done)
        self._in_flight: list[PendingExchange] = []
        #: under the check: a duplicate on which the ranks compare each collective before it starts
        self._checker = self.comm.Dup() if check_collectives and self.size > 1 else None
        #: held by whoever runs the progress engine or changes ``_in_flight`` (this process's main
        #: thread or the progress thread): MPI (at MPI_THREAD_MULTIPLE) allows calls from both
        #: threads, but never two waits on one request
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def _start_progress_thread(self) -> None:
        """Start the progress thread, once, where MPI allows calls from several threads."""
        if (self._thread is not None or self.size == 1
                or os.environ.get(PROGRESS_THREAD, "on").lower() in ("off", "0", "no")):
            return
        MPI = _mpi()
        if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
            return
        self._thread = threading.Thread(target=self._progress_loop, name="distgnn-progress", daemon=True)
        self._thread.start()
        atexit.register(self.stop_progress_thread)  # before mpi4py's MPI_Finalize (atexit is LIFO)

    def _progress_loop(self) -> None:
        """The progress thread: while an exchange is in flight, one pass of the progress engine
        every :data:`PROGRESS_INTERVAL_S` (skipped while the main thread runs it, in a wait);
        asleep otherwise."""
        while not self._stopping:
            if not self._in_flight:
                self._wake.wait()
                self._wake.clear()
                continue
            time.sleep(PROGRESS_INTERVAL_S)
            if self._lock.acquire(blocking=False):
                try:
                    if not self._stopping:
                        self._progress()
                finally:
                    self._lock.release()

    def stop_progress_thread(self) -> None:
        """End the progress thread (at exit, before MPI is finalised; idempotent)."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _start(self, op: str, *kind: str) -> None:
        """Count a collective about to start. Under the check, every rank first shows the others
        (sequence number, ``op``, ``kind``): where they differ, every rank raises the same
        :class:`CollectiveError`, one line naming the collective and which ranks start what."""
        self.started += 1
        if self._in_flight:
            with self._lock:
                self._progress()
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

    def _progress(self, until: PendingExchange | None = None) -> None:
        """Complete what has arrived for every row exchange in flight and post the sends that
        frees: one pass without blocking, or, with ``until``, until that exchange is complete
        (each completion reported to :data:`WAITS`). Waiting on every exchange at once, not on
        ``until`` alone, keeps the others' sends flowing, so no two ranks can wait on each other's
        queued pieces."""
        Request = _mpi().Request
        while True:
            self._in_flight = [x for x in self._in_flight if not x.done]
            if until is not None and until.done:
                return
            owners = [(x, i) for x in self._in_flight for i in range(len(x.requests))]
            if not owners:
                return
            flat = [x.requests[i] for x, i in owners]
            done = (Request.Testsome if until is None else Request.Waitsome)(flat)
            if not done:  # none yet (Testsome), or none active (Waitsome: cannot happen here)
                return
            by_exchange: dict[int, tuple[PendingExchange, list[int]]] = {}
            for j in done:
                x, i = owners[j]
                by_exchange.setdefault(id(x), (x, []))[1].append(i)
            for x, indices in by_exchange.values():
                x.completed(indices)
            if until is None:
                return
            WAITS.advance(until.outstanding(), len(done))

    @contextmanager
    def _blocking(self, op: str, *kind: str) -> Iterator[None]:
        """Start the collective ``op`` (:meth:`_start`) and mark this process as waiting in it,
        for every rank, until it returns (:data:`WAITS`)."""
        WAITS.enter(f"{op}({', '.join(map(str, kind))})" if kind else op, None)
        try:
            self._start(op, *kind)
            yield
        finally:
            WAITS.leave()

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
        """Non-blocking :meth:`exchange_rows`; wait on the returned object. Each peer's rows
        travel as point-to-point messages of at most :data:`PIECE_BYTES` (at least one row), in
        one row datatype, tagged by this collective's number, so a wait can tell which peers it
        still waits for."""
        kind = Traffic(kind)
        direction = None if direction is None else Direction(direction)
        sc, sd = send.counts, send.offsets[:-1]
        rc, rd = recv.counts, recv.offsets[:-1]
        rows = rows.detach().contiguous()
        used = rows.dtype
        if self.payload_dtype is not None and rows.is_floating_point():
            rows = rows.to(self.payload_dtype)
        width = rows.shape[1] if rows.dim() == 2 else 1
        row_type = _row_type(rows.dtype, width)
        recv_rows = torch.empty((int(recv.offsets[-1]), width), dtype=rows.dtype)
        send_buf, recv_buf = _buffer(rows).reshape(-1, width), _buffer(recv_rows)
        call = f"exchange_rows({kind}{'' if direction is None else f', {direction}'})"
        self._start("exchange_rows", *((kind,) if direction is None else (kind, direction)))
        tag = self.started % TAG_SPAN
        piece = max(1, PIECE_BYTES // max(1, width * rows.element_size()))  # rows per piece

        def pieces(start: int, count: int) -> list[tuple[int, int]]:
            return [(lo, min(piece, start + count - lo)) for lo in range(start, start + count, piece)]

        me = self.rank
        if rc[me]:  # this rank's own block is a copy (the plans give it the same count both ways)
            recv_buf[rd[me]:rd[me] + rc[me]] = send_buf[sd[me]:sd[me] + sc[me]]
        recvs, sends = [], {}
        for peer in (p for p in range(self.size) if p != me):
            recvs += [(peer, self.comm.Irecv([recv_buf[lo:lo + n], n, row_type], peer, tag))
                      for lo, n in pieces(int(rd[peer]), int(rc[peer]))]
            posts = deque(partial(self.comm.Isend, [send_buf[lo:lo + n], n, row_type], peer, tag)
                          for lo, n in pieces(int(sd[peer]), int(sc[peer])))
            if posts:
                sends[peer] = posts
        sent = int(rows.numel() * rows.element_size())
        self.bytes_sent[kind.value] += sent
        if direction is not None:
            self.bytes_sent[direction.value] += sent
        pending = PendingExchange(self, recvs, sends, recv_rows, send_buf, call, used)
        if not pending.done:
            with self._lock:
                self._in_flight.append(pending)
            self._start_progress_thread()
            self._wake.set()
        return pending

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
