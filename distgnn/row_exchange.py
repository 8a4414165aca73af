"""The point-to-point row engine: row exchanges by a stored plan, their progress and their bytes.

Row blocks are exchanged by a stored plan (:class:`RowPlan`): a send list of local row ids grouped
by destination rank (offsets [P+1]) and a receive list grouped by source rank. Every exchange
counts the bytes this rank sends, under a :class:`Traffic` kind and, for training rows, also under
their :class:`Direction`, so the trainer can report traffic without touching MPI.

A row exchange sends each peer its rows point to point, in pieces of at most :data:`PIECE_BYTES`
counted in one MPI datatype per row (``width`` contiguous elements), so every count stays far
below a C int (Debian's Open MPI 4.1 has no MPI-4 large-count calls) and a wait knows which peers
it still waits for (:class:`WaitState`, read by the hang watchdog; docs/design.md#progress).
While an exchange is in flight a thread of the communicator completes its pieces and posts the
next ones every :data:`PROGRESS_INTERVAL_S`, so a delayed exchange moves while the rank computes
instead of inside its next MPI call (``DISTGNN_PROGRESS_THREAD=off``: no thread;
docs/design.md#progress-thread).

This module never touches MPI itself: it reaches it through the small point-to-point methods of
its communicator (:class:`RowTransport`, which :class:`distgnn.comm.Communicator` implements; the
communicator owns one :class:`RowEngine` and forwards ``exchange_rows`` to it).
"""
from __future__ import annotations

import atexit
import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from enum import Enum
from functools import partial
from typing import Any, Callable, Protocol

import numpy as np
import torch

from distgnn.kernels.message_codec import MessageCodec, stream_key
from distgnn.kernels.output_pool import POOL

#: the environment variable that turns the progress thread off (``off``)
PROGRESS_THREAD = "DISTGNN_PROGRESS_THREAD"
#: seconds between the progress thread's passes while a row exchange is in flight
PROGRESS_INTERVAL_S = 0.002


class StrEnum(str, Enum):
    """enum.StrEnum of Python 3.11, kept here so that 3.10 runs too: a member prints as its value."""

    def __str__(self) -> str:
        return str(self.value)


class Traffic(StrEnum):
    """What a message carries: the key its bytes are counted under (the value is the key)."""

    FORWARD = "forward"        #: training rows of the forward pass
    BACKWARD = "backward"      #: their gradients
    GRADIENTS = "gradients"    #: the all-reduced parameter gradients
    EVAL = "eval"              #: evaluation (and the input cache)
    SETUP = "setup"            #: once per run: plans, degrees
    BENCH = "bench"            #: the MPI microbenchmark's own messages


#: the traffic ``--message-precision`` encodes: training rows (evaluation, set-up and the
#: benchmark travel as they are)
ENCODED = (Traffic.FORWARD, Traffic.BACKWARD)
#: how training rows travel unless a run says otherwise
FULL_PRECISION = MessageCodec("fp32")


class Direction(StrEnum):
    """Which way training rows move (counted besides their kind)."""

    REDUCE = "reduce"          #: leaf replicas to their roots
    BROADCAST = "broadcast"    #: roots to their leaf replicas


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


class RowTransport(Protocol):
    """What the row engine needs of its communicator (:class:`distgnn.comm.Communicator`, which
    alone touches MPI): its rank and size, its collective count and byte counters, and
    non-blocking point-to-point calls whose requests are opaque handles."""

    rank: int
    size: int
    started: int
    bytes_sent: dict[str, int]

    def start_collective(self, op: str, *kind: str) -> None: ...

    def row_type(self, dtype: torch.dtype, width: int) -> Any: ...

    def irecv(self, buf: np.ndarray, count: int, row_type: Any, peer: int, tag: int) -> Any: ...

    def isend(self, buf: np.ndarray, count: int, row_type: Any, peer: int, tag: int) -> Any: ...

    def testsome(self, requests: list[Any]) -> list[int] | None: ...

    def waitsome(self, requests: list[Any]) -> list[int] | None: ...

    def threads_allowed(self) -> bool: ...


class PendingExchange:
    """A posted row exchange; :meth:`wait` returns the received rows [R, F].

    Its receives are all posted; its sends to each peer are queued and posted
    :data:`SEND_WINDOW` at a time by its communicator's progress engine
    (:meth:`RowEngine._progress`), which runs in every wait, at the start of every MPI call of
    that communicator and, between calls, on the communicator's progress thread, so pieces keep
    moving while the rank computes."""

    def __init__(self, engine: "RowEngine", recvs: list[tuple[int, Any]],
                 sends: dict[int, deque], recv: torch.Tensor, keep_alive: Any, call: str,
                 finish: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 codec: MessageCodec | None = None):
        self._engine, self._call = engine, call
        self._recv, self._keep_alive = recv, keep_alive
        self._finish = finish  # the rows as used from the rows as received (a codec's decode)
        self._codec = codec    # the codec that encoded them (None: they travel as used)
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

    def _complete(self) -> None:
        if not self.done:
            WAITS.enter(self._call, self.outstanding())
            try:
                with self._engine._lock:
                    self._engine._progress(until=self)
            finally:
                WAITS.leave()
        self._keep_alive = None

    def wait(self) -> torch.Tensor:
        self._complete()
        if self._finish is not None:  # rows sent in fewer bytes than they are used in
            self._recv, self._finish = self._finish(self._recv), None
        return self._recv

    def wait_into(self, table: torch.Tensor, ids: torch.Tensor, add: bool = False) -> None:
        """:meth:`wait`, the received rows landing in ``table`` at ``ids``: added in the order
        of ``ids`` (``table.index_add_``) with ``add``, else assigned (``ids`` distinct). Rows of
        an integer width are decoded straight into their place (no decoded copy;
        docs/design.md#message-precision), with the same bits."""
        self._complete()
        # rows still in their wire form go through their codec; rows as used, through float32's
        codec = self._codec if self._finish is not None and self._codec is not None else FULL_PRECISION
        self._finish = None
        codec.decode_into(self._recv, table, ids, add)


class RowEngine:
    """The row exchanges of one communicator: posting them, the progress engine that completes
    their pieces, and the progress thread that runs it between the communicator's calls."""

    def __init__(self, comm: RowTransport):
        self.comm = comm
        #: row exchanges posted and not yet complete (their sends still to be posted or done)
        self._in_flight: list[PendingExchange] = []
        #: held by whoever runs the progress engine or changes ``_in_flight`` (this process's main
        #: thread or the progress thread): MPI (at MPI_THREAD_MULTIPLE) allows calls from both
        #: threads, but never two waits on one request
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopping = False
        #: how training rows travel (:data:`ENCODED` kinds; docs/design.md#message-precision)
        self.messages: MessageCodec = FULL_PRECISION
        #: the rounding stream: (seed, epoch) and the encoded exchanges so far in that epoch
        self._stream: tuple[int, int] = (0, 0)
        self._encoded = 0

    def copies_rows(self, kind: Traffic) -> bool:
        """Whether an exchange of ``kind`` copies the rows it gathers and scatters: not where an
        integer width encodes them in place and decodes them into place (``gather=True``,
        :meth:`PendingExchange.wait_into`; float32 tables: bfloat16 ones still pass through a
        converted copy, which this does not count)."""
        return not (Traffic(kind) in ENCODED and self.messages.bits is not None)

    def set_messages(self, codec: MessageCodec, seed: int) -> None:
        """Send training rows with ``codec``; its stochastic rounding draws from streams keyed by
        ``seed``, the epoch (:meth:`start_epoch`), the exchange's number in the epoch and the
        rank, so a rerun and a resume send the same bytes."""
        self.messages, self._stream, self._encoded = codec, (seed, 0), 0

    def start_epoch(self, epoch: int) -> None:
        """Training epoch ``epoch`` starts: its exchanges draw from their own streams."""
        self._stream, self._encoded = (self._stream[0], epoch), 0

    def _start_progress_thread(self) -> None:
        """Start the progress thread, once, where MPI allows calls from several threads."""
        if (self._thread is not None or self.comm.size == 1
                or os.environ.get(PROGRESS_THREAD, "on").lower() in ("off", "0", "no")):
            return
        if not self.comm.threads_allowed():
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

    def poll(self) -> None:
        """One pass of the progress engine, without blocking, if an exchange is in flight (at the
        start of each of the communicator's MPI calls)."""
        if self._in_flight:
            with self._lock:
                self._progress()

    def _progress(self, until: PendingExchange | None = None) -> None:
        """Complete what has arrived for every row exchange in flight and post the sends that
        frees: one pass without blocking, or, with ``until``, until that exchange is complete
        (each completion reported to :data:`WAITS`). Waiting on every exchange at once, not on
        ``until`` alone, keeps the others' sends flowing, so no two ranks can wait on each other's
        queued pieces."""
        comm = self.comm
        while True:
            self._in_flight = [x for x in self._in_flight if not x.done]
            if until is not None and until.done:
                return
            owners = [(x, i) for x in self._in_flight for i in range(len(x.requests))]
            if not owners:
                return
            flat = [x.requests[i] for x, i in owners]
            done = (comm.testsome if until is None else comm.waitsome)(flat)
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

    def exchange_rows(self, rows: torch.Tensor, send: RowPlan, recv: RowPlan, kind: Traffic,
                      direction: Direction | None = None, gather: bool = False) -> torch.Tensor:
        """Alltoallv: rank i sends ``rows`` (already ordered as ``send``, [S, F]; with
        ``gather``, a table whose rows ``send.ids`` are sent) so that rank j gets block j;
        returns the rows received, ordered as ``recv`` ([R, F]). The bytes sent are counted
        under ``kind`` and, when given, ``direction`` (members or their string values)."""
        pending = self.exchange_rows_async(rows, send, recv, kind, direction, gather)
        return pending.wait()

    def exchange_rows_async(self, rows: torch.Tensor, send: RowPlan, recv: RowPlan,
                            kind: Traffic, direction: Direction | None = None,
                            gather: bool = False) -> PendingExchange:
        """Non-blocking :meth:`exchange_rows`; wait on the returned object. Each peer's rows
        travel as point-to-point messages of at most :data:`PIECE_BYTES` (at least one row), in
        one row datatype, tagged by this collective's number, so a wait can tell which peers it
        still waits for. ``gather``: ``rows`` is a table and its rows ``send.ids`` are sent; an
        integer message width encodes them in place (no gathered copy)."""
        comm = self.comm
        kind = Traffic(kind)
        direction = None if direction is None else Direction(direction)
        sc, sd = send.counts, send.offsets[:-1]
        rc, rd = recv.counts, recv.offsets[:-1]
        rows = rows.detach()
        width = rows.shape[1] if rows.dim() == 2 else 1
        finish = None
        codec = self.messages
        encoded = kind in ENCODED and codec.changes_rows and rows.is_floating_point()
        in_place = encoded and codec.bits is not None  # an integer width reads the rows by id
        if gather and not in_place:
            # into a reused buffer: a fresh one costs a page fault per 4 KB
            # (docs/design.md#output-buffers)
            table, ids = rows, send.ids
            rows = POOL.empty((len(ids),) + tuple(table.shape[1:]), table.dtype)
            torch.index_select(table, 0, ids, out=rows)
        if encoded:
            # partial sums and gradients are summed where they arrive: stochastic rounding, so
            # their rounding errors do not add up to a bias
            stochastic = kind is Traffic.BACKWARD or direction is Direction.REDUCE
            key = stream_key(self._stream[0], self._stream[1], self._encoded, comm.rank)
            self._encoded += 1
            finish = partial(codec.decode, width=width, dtype=rows.dtype)
            rows = codec.encode(rows.reshape(-1, width), stochastic, key,
                                send.ids if gather and in_place else None)
            width = rows.shape[1]
        rows = rows.contiguous()
        row_type = comm.row_type(rows.dtype, width)
        recv_rows = POOL.empty((int(recv.offsets[-1]), width), rows.dtype)
        send_buf, recv_buf = _buffer(rows).reshape(-1, width), _buffer(recv_rows)
        call = f"exchange_rows({kind}{'' if direction is None else f', {direction}'})"
        comm.start_collective("exchange_rows", *((kind,) if direction is None else (kind, direction)))
        tag = comm.started % TAG_SPAN
        piece = max(1, PIECE_BYTES // max(1, width * rows.element_size()))  # rows per piece

        def pieces(start: int, count: int) -> list[tuple[int, int]]:
            return [(lo, min(piece, start + count - lo)) for lo in range(start, start + count, piece)]

        me = comm.rank
        if rc[me]:  # this rank's own block is a copy (the plans give it the same count both ways)
            recv_buf[rd[me]:rd[me] + rc[me]] = send_buf[sd[me]:sd[me] + sc[me]]
        recvs, sends = [], {}
        for peer in (p for p in range(comm.size) if p != me):
            recvs += [(peer, comm.irecv(recv_buf[lo:lo + n], n, row_type, peer, tag))
                      for lo, n in pieces(int(rd[peer]), int(rc[peer]))]
            posts = deque(partial(comm.isend, send_buf[lo:lo + n], n, row_type, peer, tag)
                          for lo, n in pieces(int(sd[peer]), int(sc[peer])))
            if posts:
                sends[peer] = posts
        # what leaves this rank: payload, scales and padding, not its own block
        sent = int((rows.shape[0] - sc[me]) * width * rows.element_size())
        comm.bytes_sent[kind.value] += sent
        if direction is not None:
            comm.bytes_sent[direction.value] += sent
        pending = PendingExchange(self, recvs, sends, recv_rows, send_buf, call, finish,
                                  codec if encoded else None)
        if not pending.done:
            with self._lock:
                self._in_flight.append(pending)
            self._start_progress_thread()
            self._wake.set()
        return pending
