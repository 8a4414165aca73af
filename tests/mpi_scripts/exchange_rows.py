"""Run under ``mpiexec -n P`` (P = 2 or 3): row exchanges of widths 1, 3 and 128, in float32,
float64 and float32 sent as bfloat16, whole and cut into pieces of one row, through
distgnn.comm.Communicator (its row engine, distgnn.row_exchange), against the rows each rank must
receive. A spy on the communicator checks that MPI is handed pieces counted in rows of one
whole-row datatype, no larger than PIECE_BYTES allows, covering every row sent. Rank 0 prints ``ok`` when every rank agrees; exit 1
otherwise."""
from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch

import distgnn.row_exchange as row_exchange
from distgnn.comm import Communicator
from distgnn.kernels.message_codec import MessageCodec
from distgnn.row_exchange import RowPlan


class Spy:
    """The real communicator, with each Isend's and Irecv's (message, peer) kept."""

    def __init__(self, comm: Any) -> None:
        self._comm, self.sends, self.recvs = comm, [], []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._comm, name)

    def Isend(self, message: list, peer: int, tag: int) -> Any:  # noqa: N802 - mpi4py's name
        self.sends.append((message, peer))
        return self._comm.Isend(message, peer, tag)

    def Irecv(self, message: list, peer: int, tag: int) -> Any:  # noqa: N802
        self.recvs.append((message, peer))
        return self._comm.Irecv(message, peer, tag)


def count(src: int, dst: int) -> int:
    """Rows rank ``src`` sends to rank ``dst`` (0 to 3; some blocks are empty)."""
    return (src + 2 * dst) % 4


def block(src: int, dst: int, width: int) -> torch.Tensor:
    """The rows ``src`` sends ``dst``: small integers, exact in bfloat16, [count, width]."""
    r = torch.arange(count(src, dst)).unsqueeze(1)
    c = torch.arange(width).unsqueeze(0) % 4
    return (src * 64 + dst * 16 + r * 4 + c).to(torch.float32)


def plan(counts: list[int]) -> RowPlan:
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return RowPlan(torch.arange(int(offsets[-1])), offsets)


def main() -> int:
    spy = Spy(Communicator().comm)
    comm = Communicator(spy)
    me, size = comm.rank, comm.size
    send = plan([count(me, j) for j in range(size)])
    recv = plan([count(i, me) for i in range(size)])
    failures = []
    for dtype, messages in ((torch.float32, "fp32"), (torch.float64, "fp32"),
                            (torch.float32, "bf16"), (torch.float32, "int4")):
        codec = MessageCodec(messages)
        comm.set_messages(codec, seed=0)
        for width in (1, 3, 128):
            row_bytes = codec.row_bytes(width) if dtype == torch.float32 else 8 * width
            for piece_rows in (None, 1):
                row_exchange.PIECE_BYTES = (1 << 20) if piece_rows is None else piece_rows * row_bytes
                spy.sends.clear(), spy.recvs.clear()
                rows = torch.cat([block(me, j, width) for j in range(size)]).to(dtype)
                got = comm.exchange_rows(rows, send, recv, "forward")
                want = torch.cat([block(i, me, width) for i in range(size)]).to(dtype)
                if codec.bits:  # forward rows without a direction round to nearest: no key
                    want = codec.decode(codec.encode(want), width, dtype)
                case = f"{dtype} as {messages}, width {width}, pieces of {piece_rows or 'any'} rows"
                if got.dtype != dtype or not torch.equal(got, want):
                    failures.append(f"{case}: wrong rows")
                for calls, counts in ((spy.sends, send.counts), (spy.recvs, recv.counts)):
                    moved = [0] * size
                    for (buf, n, row_type), peer in calls:
                        moved[peer] += n
                        if row_type.Get_size() != row_bytes or len(buf) != n:
                            failures.append(f"{case}: a piece of {n} rows in {row_type.Get_size()}"
                                            f"-byte rows, buffer of {len(buf)}")
                        if piece_rows is not None and n > piece_rows:
                            failures.append(f"{case}: a piece of {n} rows")
                    moved[me] = counts[me]  # its own block is copied, never sent
                    if moved != list(counts):
                        failures.append(f"{case}: pieces move {moved} rows, not {list(counts)}")
    if comm.allgather(me) != list(range(size)):
        failures.append("allgather")
    everyone = comm.gather(failures)
    if me == 0:
        bad = [f"rank {r}: {f}" for r, fs in enumerate(everyone) for f in fs]
        print("\n".join(bad) if bad else "ok", flush=True)
    return 1 if comm.bcast(any(everyone) if me == 0 else None) else 0


if __name__ == "__main__":
    sys.exit(main())
