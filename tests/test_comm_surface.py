"""distgnn.comm is the one MPI surface: no other module imports mpi4py; traffic kinds are enums
whose values are the recorded keys; row exchanges move each peer's rows point to point in pieces
counted in rows (one MPI datatype per row), no larger than PIECE_BYTES; DISTGNN_CHECK_COLLECTIVES turns a rank that skips a collective into
one line instead of a hang. The in-process tests use a fake communicator (a real one would start
MPI in the pytest process)."""
from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import distgnn.comm as comm_module
import distgnn.row_exchange as row_module
from conftest import REPO, mpiexec
from distgnn.comm import Communicator
from distgnn.errors import CollectiveError
from distgnn.kernels.message_codec import MessageCodec, stream_key
from distgnn.row_exchange import Direction, RowPlan, Traffic

SCRIPTS = Path(__file__).parent / "mpi_scripts"


# -- only distgnn/comm.py imports mpi4py ----------------------------------------------------------
def mpi4py_imports(path: Path) -> list[int]:
    """Lines of ``path`` that import mpi4py: import statements and ``__import__`` /
    ``importlib.import_module`` calls with a literal name. A string that merely holds such code
    (the memory estimate's command for a child interpreter that measures the imports' memory, the
    launcher's ``python -m mpi4py`` argv) imports nothing in this process and is not one."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.level == 0 else []
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and getattr(node.func, "id", getattr(node.func, "attr", None))
              in ("__import__", "import_module")):
            names = [str(node.args[0].value)]
        else:
            continue
        if any(name == "mpi4py" or name.startswith("mpi4py.") for name in names):
            lines.append(node.lineno)
    return sorted(lines)


def test_only_comm_imports_mpi4py(tmp_path: Path) -> None:
    files = sorted((REPO / "distgnn").rglob("*.py"))
    assert len(files) > 50
    offenders = [f"{f.relative_to(REPO)}:{line}" for f in files
                 if f != REPO / "distgnn" / "comm.py" for line in mpi4py_imports(f)]
    assert offenders == [], offenders
    # the checker sees every form of import, and only imports
    module = tmp_path / "m.py"
    module.write_text("import mpi4py\nfrom mpi4py.run import set_abort_status\n"
                      "x = __import__('mpi4py').MPI.MAX\nimport importlib\n"
                      "importlib.import_module('mpi4py.MPI')\ncode = 'import mpi4py'\n"
                      "import mpi4pyx\n")
    assert mpi4py_imports(module) == [1, 2, 3, 5]


# -- traffic kinds and directions -----------------------------------------------------------------
class FakeRequest:
    """A posted message of the fake communicator: (which call, the message, the peer, the tag)."""

    def __init__(self, call: str, message: list, peer: int, tag: int) -> None:
        self.call, self.message, self.peer, self.tag, self.done = call, message, peer, tag, False


def wait_some(requests: list) -> list[int] | None:
    """MPI_Waitsome on fake requests: completes every pending one at once (None: none left)."""
    pending = [i for i, r in enumerate(requests) if not r.done]
    for i in pending:
        requests[i].done = True
    return pending or None


class FakeComm:
    """Enough of an mpi4py communicator for Communicator: rank 0 of ``size``; Isend and Irecv keep
    their arguments and complete at the first wait; Dup gives a checker whose allgather returns
    ``seen``."""

    def __init__(self, size: int = 2, seen: list | None = None) -> None:
        self.size, self.seen, self.calls = size, seen, []

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's names
        return 0

    def Get_size(self) -> int:  # noqa: N802
        return self.size

    def Isend(self, message: list, peer: int, tag: int) -> FakeRequest:  # noqa: N802
        self.calls.append(FakeRequest("send", message, peer, tag))
        return self.calls[-1]

    def Irecv(self, message: list, peer: int, tag: int) -> FakeRequest:  # noqa: N802
        self.calls.append(FakeRequest("recv", message, peer, tag))
        return self.calls[-1]

    def Dup(self) -> "FakeComm":  # noqa: N802
        return self

    def allgather(self, mine: object) -> list:
        return self.seen if self.seen is not None else [mine] * self.size


class FakeType:
    """An MPI datatype: ``count`` contiguous copies of ``base``."""

    def __init__(self, base: str, count: int = 1) -> None:
        self.base, self.count = base, count

    def Create_contiguous(self, count: int) -> "FakeType":  # noqa: N802
        return FakeType(self.base, self.count * count)

    def Commit(self) -> "FakeType":  # noqa: N802
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeType) and (self.base, self.count) == (other.base, other.count)


@pytest.fixture
def fake_mpi(monkeypatch):
    """distgnn.comm with a fake MPI module (and an empty row-type cache)."""
    fake = SimpleNamespace(FLOAT=FakeType("float"), DOUBLE=FakeType("double"),
                           INT16_T=FakeType("int16"), UINT8_T=FakeType("uint8"), SUM="sum", MAX="max", IN_PLACE=None,
                           Request=SimpleNamespace(Waitsome=wait_some, Testsome=lambda requests: []),
                           # single-threaded, as far as distgnn.comm asks: no progress thread
                           THREAD_SINGLE=0, THREAD_MULTIPLE=3, Query_thread=lambda: 0)
    monkeypatch.setattr(comm_module, "_mpi", lambda: fake)
    monkeypatch.setattr(comm_module, "_ROW_TYPES", {}, raising=False)
    return fake


def plan(offsets: list[int]) -> RowPlan:
    """A plan with these offsets [P+1] (its ids, unused by the exchange, left empty)."""
    return RowPlan(torch.arange(0), np.array(offsets, dtype=np.int64))


def test_kinds_and_directions_are_the_recorded_strings(fake_mpi) -> None:
    assert [k.value for k in Traffic] == ["forward", "backward", "gradients", "eval", "setup", "bench"]
    assert [d.value for d in Direction] == ["reduce", "broadcast"]
    assert json.dumps({Traffic.FORWARD: 1, "x": Direction.REDUCE}) == '{"forward": 1, "x": "reduce"}'
    comm = Communicator(FakeComm())
    p = plan([0, 1, 2])
    comm.exchange_rows(torch.ones(2, 3), p, p, Traffic.FORWARD, Direction.REDUCE)
    comm.exchange_rows(torch.ones(2, 3), p, p, "backward", "broadcast")  # the values still work
    # one row of three float32 leaves the rank each time (its own row is copied, not counted)
    assert dict(comm.bytes_sent) == {"forward": 12, "reduce": 12, "backward": 12, "broadcast": 12}
    assert all(type(k) is str for k in comm.bytes_sent)
    with pytest.raises(ValueError, match="forwad"):  # a misspelt kind is refused, not counted
        comm.exchange_rows(torch.ones(2, 3), p, p, "forwad")


# -- pieces counted in rows --------------------------------------------------------------------------
@pytest.mark.parametrize("width", [1, 3, 128])
@pytest.mark.parametrize("dtype, messages, base", [(torch.float32, "fp32", "float"),
                                                   (torch.float64, "fp32", "double"),
                                                   (torch.float32, "bf16", "int16"),
                                                   (torch.float32, "int4", "uint8")])
def test_pieces_are_counted_in_rows(fake_mpi, width: int, dtype, messages, base: str) -> None:
    fake = FakeComm(size=3)
    comm = Communicator(fake)
    codec = MessageCodec(messages)
    comm.set_messages(codec, seed=0)
    send, recv = plan([0, 1, 1, 4]), plan([0, 1, 4, 6])  # rank 0 keeps one row of its own
    rows = torch.arange(4 * width, dtype=dtype).reshape(4, width)
    got = comm.exchange_rows(rows, send, recv, Traffic.FORWARD)
    assert got.shape == (6, width) and got.dtype == dtype
    # its own block is copied, not sent (and read as every other row is)
    assert torch.equal(got[0], codec.decode(codec.encode(rows[:1]), width, dtype)[0])
    moved = [(r.call, r.peer, r.message[1]) for r in fake.calls]
    assert moved == [("recv", 1, 3), ("recv", 2, 2), ("send", 2, 3)]
    row_width = codec.row_bytes(width) if codec.bits else width
    for r in fake.calls:
        buf, n, row_type = r.message
        assert row_type == FakeType(base, row_width) and buf.shape == (n, row_width)
        assert r.tag == comm.started
    assert comm.bytes_sent["forward"] == 3 * (codec.row_bytes(width) if dtype == torch.float32 else 8 * width)
    sent = fake.calls[2].message[0]
    assert np.shares_memory(sent, sent.base) and sent.base is not None  # a view, not a copy
    comm.exchange_rows(rows, send, recv, Traffic.FORWARD)
    assert fake.calls[3].message[2] is fake.calls[0].message[2]  # committed once, then reused
    assert fake.calls[3].tag == fake.calls[0].tag + 1  # each exchange has its own tag


def test_training_rows_travel_encoded_keyed_by_epoch_and_exchange(fake_mpi) -> None:
    """Under an integer width only training rows are encoded: partial sums (reduce) and every
    gradient stochastically, keyed by (seed, epoch, exchange number in the epoch, rank); forward
    broadcasts to nearest; set-up and evaluation rows travel exactly."""
    fake = FakeComm(size=2)
    comm = Communicator(fake)
    codec = MessageCodec("int2")
    comm.set_messages(codec, seed=11)
    send, recv = plan([0, 0, 5]), plan([0, 0, 0])
    rows = torch.randn(5, 40)
    comm.start_epoch(3)
    calls = [(Traffic.FORWARD, Direction.REDUCE), (Traffic.SETUP, None),
             (Traffic.FORWARD, Direction.BROADCAST), (Traffic.BACKWARD, Direction.BROADCAST),
             (Traffic.EVAL, None)]
    for kind, direction in calls:
        comm.exchange_rows(rows, send, recv, kind, direction)
    sent = [torch.from_numpy(np.array(r.message[0])) for r in fake.calls]
    assert torch.equal(sent[0], codec.encode(rows, stochastic=True, key=stream_key(11, 3, 0, 0)))
    assert torch.equal(sent[1], rows) and torch.equal(sent[4], rows)
    assert torch.equal(sent[2], codec.encode(rows))  # nearest: no key
    assert torch.equal(sent[3], codec.encode(rows, stochastic=True, key=stream_key(11, 3, 2, 0)))
    assert not torch.equal(sent[0], sent[3])
    assert comm.bytes_sent["forward"] == 2 * 5 * codec.row_bytes(40) == 2 * 5 * 20
    assert comm.bytes_sent["setup"] == 5 * 40 * 4
    comm.start_epoch(3)  # the same epoch again (a resume): the same bytes
    comm.exchange_rows(rows, send, recv, Traffic.FORWARD, Direction.REDUCE)
    assert torch.equal(torch.from_numpy(np.array(fake.calls[-1].message[0])), sent[0])


@pytest.mark.parametrize("messages", ["fp32", "bf16", "int4"])
def test_a_gathering_exchange_sends_the_bytes_of_the_gathered_rows(fake_mpi, messages) -> None:
    """``gather=True`` sends the rows ``send.ids`` of a table (an integer width encodes them in
    place): the same pieces, bytes, counts and received rows as the rows gathered first."""
    ids = torch.tensor([7, 2, 2, 9, 0], dtype=torch.int64)
    send = RowPlan(ids, np.array([0, 1, 5], dtype=np.int64))   # one row kept, four to rank 1
    recv = plan([0, 1, 3])
    table = torch.randn(10, 24)
    runs = []
    for gather in (False, True):
        fake = FakeComm(size=2)
        comm = Communicator(fake)
        comm.set_messages(MessageCodec(messages), seed=5)
        comm.start_epoch(2)
        got = comm.exchange_rows(table if gather else table[ids], send, recv, Traffic.FORWARD,
                                 Direction.REDUCE, gather=gather)
        sent = [np.array(r.message[0]) for r in fake.calls if r.call == "send"]
        runs.append((got, sent, dict(comm.bytes_sent)))
    (got, sent, counted), (got_g, sent_g, counted_g) = runs
    assert torch.equal(got[:1], got_g[:1]) and counted == counted_g   # its own block (the fake
    # communicator delivers nothing from rank 1)
    assert len(sent) == len(sent_g) == 1 and np.array_equal(sent[0], sent_g[0])


def test_a_large_block_travels_in_pieces_of_at_most_piece_bytes(fake_mpi, monkeypatch) -> None:
    monkeypatch.setattr(row_module, "PIECE_BYTES", 3 * 16)  # three rows of 4 float32
    fake = FakeComm()
    comm = Communicator(fake)
    rows = torch.arange(8 * 4, dtype=torch.float32).reshape(8, 4)
    comm.exchange_rows(rows, plan([0, 0, 8]), plan([0, 0, 0]), Traffic.FORWARD)
    pieces = [r.message[0] for r in fake.calls]
    assert [r.call for r in fake.calls] == ["send"] * 3
    assert [len(p) for p in pieces] == [3, 3, 2]
    assert np.array_equal(np.concatenate(pieces), rows.numpy())  # in order, every row once
    monkeypatch.setattr(row_module, "PIECE_BYTES", 8)  # under one row: still one row a piece
    comm.exchange_rows(rows[:2], plan([0, 0, 2]), plan([0, 0, 0]), Traffic.FORWARD)
    assert [len(r.message[0]) for r in fake.calls[3:]] == [1, 1]


def test_a_wait_names_the_peers_it_still_waits_for(fake_mpi) -> None:
    """WaitState during a wait: the call and the outstanding peers; after it, nothing."""
    seen = []

    def wait_one(requests: list) -> list[int] | None:
        seen.append(row_module.WAITS.now())
        pending = [i for i, r in enumerate(requests) if not r.done]
        if pending:
            requests[pending[0]].done = True
        return pending[:1] or None

    fake_mpi.Request = SimpleNamespace(Waitsome=wait_one, Testsome=lambda requests: [])
    comm = Communicator(FakeComm(size=3))
    before = row_module.WAITS.pieces
    comm.exchange_rows(torch.ones(3, 2), plan([0, 0, 1, 3]), plan([0, 0, 2, 3]), "forward", "reduce")
    # posted in order: receive from 1, receive from 2, send to 1, send to 2; one completes a call,
    # and the wait returns as soon as the last has
    call = "exchange_rows(forward, reduce)"
    assert [(c, peers) for c, peers, _ in seen] == [(call, (1, 2))] * 3 + [(call, (2,))]
    assert row_module.WAITS.pieces - before == 4
    assert row_module.WAITS.now() == (None, None, 0.0)


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_rows_arrive_under_mpiexec(ranks: int) -> None:
    proc = mpiexec(ranks, str(SCRIPTS / "exchange_rows.py"), module=False, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr[-3000:]


# -- DISTGNN_CHECK_COLLECTIVES ----------------------------------------------------------------------
def test_a_mismatch_names_the_collective_and_the_ranks(fake_mpi) -> None:
    seen = [(1, "sum"), (1, "exchange_rows(forward, reduce)"), (1, "sum")]
    comm = Communicator(FakeComm(size=3, seen=seen), check_collectives=True)
    with pytest.raises(CollectiveError) as err:
        comm.sum(1)
    line = str(err.value)
    assert "\n" not in line and "collective #1" in line, line
    assert "ranks 0, 2: sum; rank 1: exchange_rows(forward, reduce)" in line, line
    agreeing = Communicator(FakeComm(size=3), check_collectives=True)
    p = plan([0, 1, 1, 1])
    agreeing.exchange_rows(torch.ones(1, 2), p, p, Traffic.EVAL)
    assert agreeing.started == 1


def run_bounded(ranks: int, args: list[str], env: dict, timeout: float
                ) -> subprocess.CompletedProcess:
    """``mpiexec -n ranks python ARGS``, ended (mpiexec, then its process group) after
    ``timeout`` seconds, which fails the test: a hung job must not outlive it."""
    command = ["mpiexec", "--oversubscribe", "-n", str(ranks), sys.executable, *args]
    proc = subprocess.Popen(command, env={**os.environ, "OMP_NUM_THREADS": "1", **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()  # mpiexec ends its ranks
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        pytest.fail(f"{' '.join(args)} still running after {timeout} s (a hang)")
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


@pytest.mark.mpi
def test_a_rank_that_skips_an_exchange_is_one_line_not_a_hang() -> None:
    """Without the switch the script is not run: a mismatched collective is erroneous in MPI, and
    it hangs or, as Open MPI 4.1 did here after ~30 s, fails deep in MPI (MPI_ERR_INTERN)."""
    script, check = str(SCRIPTS / "skip_exchange.py"), {"DISTGNN_CHECK_COLLECTIVES": "1"}
    start = time.monotonic()
    proc = run_bounded(2, [script, "skip"], check, timeout=90)
    assert proc.returncode == 2, proc.stderr
    ours = [l for l in proc.stderr.splitlines() if l.startswith("distgnn skip_exchange")]
    assert len(ours) == 1, proc.stderr
    assert "collective #2 differs" in ours[0] and "DISTGNN_CHECK_COLLECTIVES" in ours[0], ours
    assert "rank 0: exchange_rows(forward, broadcast); rank 1: exchange_rows(forward, reduce)" \
        in ours[0], ours
    assert "Traceback" not in proc.stderr, proc.stderr
    assert time.monotonic() - start < 60
    agree = run_bounded(2, [script, "same"], check, timeout=90)
    assert agree.returncode == 0, agree.stderr


def test_the_progress_thread_posts_the_window_while_the_rank_computes(fake_mpi, monkeypatch) -> None:
    """Where MPI allows threads, pieces that leave while this rank makes no MPI call free the next
    ones at once: the progress thread completes them and posts the rest, so the exchange is done
    before its wait; with DISTGNN_PROGRESS_THREAD=off the window stays where it was."""
    monkeypatch.setattr(row_module, "PIECE_BYTES", 16)  # one row of 4 float32 a piece
    fake_mpi.Request.Testsome = lambda requests: [i for i, r in enumerate(requests)
                                                  if not r.done and not setattr(r, "done", True)]
    rows = torch.arange(6 * 4, dtype=torch.float32).reshape(6, 4)
    for setting, threads in (("off", 3), ("on", 0), ("on", 3)):  # thread level 3: MULTIPLE
        monkeypatch.setenv(row_module.PROGRESS_THREAD, setting)
        fake_mpi.Query_thread = lambda: threads
        fake = FakeComm()
        comm = Communicator(fake)
        pending = comm.exchange_rows_async(rows, plan([0, 0, 6]), plan([0, 0, 0]), Traffic.FORWARD)
        deadline = time.monotonic() + (5 if setting == "on" and threads == 3 else 0.2)
        while not pending.done and time.monotonic() < deadline:
            time.sleep(0.01)  # computing: no MPI call on this thread
        comm.stop_progress_thread()
        if setting == "on" and threads == 3:
            assert pending.done and len(fake.calls) == 6
            assert np.array_equal(np.concatenate([r.message[0] for r in fake.calls]), rows.numpy())
        else:
            assert not pending.done and len(fake.calls) == row_module.SEND_WINDOW
        assert not comm.row_engine._thread or not comm.row_engine._thread.is_alive()


@pytest.mark.mpi
def test_a_posted_exchange_completes_while_the_ranks_compute() -> None:
    """Real MPI, 2 ranks: 8 MiB each way, 8 pieces of which 2 are posted at once, then compute
    with no MPI call: with the progress thread the exchange completes before its wait; without it
    (DISTGNN_PROGRESS_THREAD=off) the queued pieces wait for the next MPI call (the rows arrive
    either way)."""
    script = str(SCRIPTS / "progress_thread.py")
    for setting, expected in (("on", "True"), ("off", "False")):
        proc = run_bounded(2, [script], {row_module.PROGRESS_THREAD: setting}, timeout=90)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.strip() == f"done before the wait: {expected}", (setting, proc.stdout)


def test_sends_to_a_peer_keep_a_window_of_pieces_in_flight(fake_mpi, monkeypatch) -> None:
    """Five pieces to rank 1: SEND_WINDOW posted at once, the next as one completes, whether in
    the exchange's own wait or in a later MPI call of the communicator (which completes what has
    arrived without blocking); in order, every row once."""
    monkeypatch.setattr(row_module, "PIECE_BYTES", 16)  # one row of 4 float32 a piece
    fake = FakeComm()
    comm = Communicator(fake)
    rows = torch.arange(5 * 4, dtype=torch.float32).reshape(5, 4)
    pending = comm.exchange_rows_async(rows, plan([0, 0, 5]), plan([0, 0, 0]), Traffic.FORWARD)
    assert len(fake.calls) == row_module.SEND_WINDOW == 2
    fake_mpi.Request.Testsome = lambda requests: [0] if not requests[0].done and not setattr(
        requests[0], "done", True) else []  # the first piece in flight has left
    comm.exchange_rows(torch.zeros(0, 4), plan([0, 0, 0]), plan([0, 0, 0]), Traffic.EVAL)
    assert len(fake.calls) == 3 and not pending.done  # the next piece went out meanwhile
    pending.wait()
    assert pending.done and [len(r.message[0]) for r in fake.calls] == [1] * 5
    assert np.array_equal(np.concatenate([r.message[0] for r in fake.calls]), rows.numpy())


def overlap_case(seed: int = 3) -> SimpleNamespace:
    """One rank's overlapped cd-0 sum (distgnn/exchange/overlap.py) whose leaf copies are copies of
    its own roots: blocks, plans and a float64 torch reference of the whole kernel, some source
    rows never written (zero), the leaves' partials added at their roots."""
    from distgnn.exchange.local_sum import KernelGraph
    from distgnn.exchange.norms import KernelWeights
    from distgnn.exchange.overlap import OverlapBlocks

    g = torch.Generator().manual_seed(seed)
    n_roots, copies, unwritten, leaf_dst, edges, width = 30, 10, 3, 12, 500, 5
    n_src, n_dst = n_roots + copies + unwritten, n_roots + leaf_dst
    dst = torch.randint(0, n_dst, (edges,), generator=g)
    src = torch.randint(0, n_src, (edges,), generator=g)

    def csr(rows: torch.Tensor, cols: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        order = torch.argsort(rows, stable=True)
        indptr = torch.zeros(n + 1, dtype=torch.int64)
        torch.cumsum(torch.bincount(rows, minlength=n), 0, out=indptr[1:])
        return indptr, cols[order].to(torch.int32)
    scale = torch.rand(n_dst, generator=g) + 0.5
    weight = torch.rand(n_src, generator=g) + 0.5
    blocks = OverlapBlocks.split(KernelGraph(*csr(dst, src, n_dst), *csr(src, dst, n_src)),
                                 KernelWeights(scale, n_roots, weight), n_roots)
    copied = torch.randint(0, n_roots, (copies,), generator=g)       # the roots each copy is of
    at_root = torch.randint(0, n_roots, (leaf_dst,), generator=g)    # the root of each leaf row
    one = lambda ids: RowPlan(ids, np.array([0, len(ids)], dtype=np.int64))  # noqa: E731
    plans = SimpleNamespace(bcast_root=one(copied), bcast_leaf=one(n_roots + torch.arange(copies)),
                            reduce_leaf=one(n_roots + torch.arange(leaf_dst)), reduce_root=one(at_root))

    def reference(h: torch.Tensor) -> torch.Tensor:
        table = torch.cat([h, h[copied], h.new_zeros(unwritten, width)])
        own = torch.arange(n_roots)
        y = h.new_zeros(n_dst, width).index_add(0, dst, weight[src].double().unsqueeze(1) * table[src])
        y = y.index_add(0, own, weight[own].double().unsqueeze(1) * table[own])
        y = scale.double().unsqueeze(1) * y
        return y[:n_roots].index_add(0, at_root, y[n_roots:])
    return SimpleNamespace(blocks=blocks, plans=plans, reference=reference, n_roots=n_roots,
                           copies=copies, leaf_dst=leaf_dst,
                           h=torch.randn(n_roots, width, generator=g),
                           grad=torch.randn(n_roots, width, generator=g))


def test_cd0s_overlapped_sum_shows_nothing_of_a_reused_blocks_contents(fake_mpi, monkeypatch) -> None:
    """cd-0's overlapped sum takes its tables and the rows it sends from the output pool
    (docs/design.md#output-buffers). With every pooled block handed out full of NaN (what a
    reused block may hold), its result and its gradient equal a plain torch reference of the
    whole kernel (:func:`overlap_case`)."""
    from distgnn.exchange.overlap import OverlappedSum
    from distgnn.kernels.output_pool import POOL
    from distgnn.timers import Timers

    handed = POOL.empty

    def poisoned(shape, dtype):
        return handed(shape, dtype).fill_(float("nan"))
    monkeypatch.setattr(POOL, "empty", poisoned)
    case = overlap_case()
    h = case.h.clone().requires_grad_(True)
    out = OverlappedSum.apply(h, case.blocks, case.plans, Communicator(FakeComm(size=1)), Timers(),
                              Traffic.FORWARD, 1)
    out.backward(case.grad)
    h_ref = case.h.double().requires_grad_(True)
    want = case.reference(h_ref)
    want.backward(case.grad.double())
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(h.grad.double(), h_ref.grad, rtol=1e-5, atol=1e-5)


def test_rows_copied_leaves_out_what_an_integer_width_reads_and_writes_in_place(fake_mpi) -> None:
    """``rows_copied`` counts the rows cd-0's overlapped sum copies: the roots into its table, and
    at float32 the rows each exchange gathers and scatters, which at an integer width the codec
    reads and writes in place (forward: 10 copies out and in, 12 partials out and in; backward
    the same two plans the other way)."""
    from distgnn.exchange.overlap import OverlappedSum
    from distgnn.timers import Timers

    case = overlap_case()
    counted = {}
    for messages in ("fp32", "int8"):
        comm, timers = Communicator(FakeComm(size=1)), Timers()
        comm.set_messages(MessageCodec(messages), seed=1)
        comm.start_epoch(1)
        h = case.h.clone().requires_grad_(True)
        OverlappedSum.apply(h, case.blocks, case.plans, comm, timers, Traffic.FORWARD,
                            1).backward(case.grad)
        counted[messages] = timers.row_counts["copied"]
    assert counted["int8"] == 2 * case.n_roots
    assert counted["fp32"] == counted["int8"] + 2 * (2 * case.copies + 2 * case.leaf_dst)


@pytest.mark.parametrize("messages", ["fp32", "bf16", "int8", "int2"])
def test_rows_waited_into_a_table_are_the_rows_waited_then_scattered(fake_mpi, messages) -> None:
    """``wait_into`` (an integer width decodes each row in its place) leaves a table as
    ``wait()`` and then ``index_add_`` (ids repeated) or an assignment (ids distinct) leave it, bit
    for bit: one rank whose own block is the whole exchange."""
    table = torch.randn(12, 24)
    send = RowPlan(torch.tensor([3, 0, 7, 7, 11], dtype=torch.int64), np.array([0, 5]))
    for ids, add in ((torch.tensor([2, 9, 2, 0, 9]), True), (torch.tensor([4, 1, 8, 6, 10]), False)):
        recv = RowPlan(ids, np.array([0, 5]))
        results = []
        for into in (False, True):
            comm = Communicator(FakeComm(size=1))
            comm.set_messages(MessageCodec(messages), seed=5)
            comm.start_epoch(1)
            target = torch.ones(12, 24)
            pending = comm.exchange_rows_async(table, send, recv, Traffic.FORWARD,
                                               Direction.REDUCE, gather=True)
            if into:
                pending.wait_into(target, ids, add)
            elif add:
                target.index_add_(0, ids, pending.wait())
            else:
                target[ids] = pending.wait()
            results.append(target)
        assert torch.equal(*results), (messages, add)
