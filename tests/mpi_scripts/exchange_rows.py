"""Run under ``mpiexec -n P`` (P = 2 or 3): row exchanges of widths 1, 3 and 128, in float32,
float64 and float32 sent as bfloat16, through distgnn.comm.Communicator, against the rows each rank
must receive. A spy on the communicator checks that MPI is handed counts and displacements in rows
and a datatype of one whole row. Rank 0 prints ``ok`` when every rank agrees; exit 1 otherwise."""
from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch

from distgnn.comm import Communicator, RowPlan


class Spy:
    """The real communicator, with each Ialltoallv's arguments kept."""

    def __init__(self, comm: Any) -> None:
        self._comm, self.calls = comm, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._comm, name)

    def Ialltoallv(self, send: list, recv: list) -> Any:  # noqa: N802 - mpi4py's name
        self.calls.append((send, recv))
        return self._comm.Ialltoallv(send, recv)


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
    for dtype, payload in ((torch.float32, None), (torch.float64, None),
                           (torch.float32, torch.bfloat16)):
        comm.payload_dtype = payload
        for width in (1, 3, 128):
            rows = torch.cat([block(me, j, width) for j in range(size)]).to(dtype)
            got = comm.exchange_rows(rows, send, recv, "forward")
            want = torch.cat([block(i, me, width) for i in range(size)]).to(dtype)
            case = f"{dtype} as {payload or dtype}, width {width}"
            if got.dtype != dtype or not torch.equal(got, want):
                failures.append(f"{case}: wrong rows")
            (s_buf, (sc, sd), s_type), (_, (rc, rd), r_type) = spy.calls[-1]
            elsize = torch.empty(0, dtype=payload or dtype).element_size()
            if list(sc) != list(send.counts) or list(sd) != list(send.offsets[:-1]) \
                    or list(rc) != list(recv.counts) or list(rd) != list(recv.offsets[:-1]):
                failures.append(f"{case}: counts/displacements not in rows: {list(sc)} {list(sd)}")
            if s_type.Get_size() != width * elsize or r_type.Get_size() != width * elsize:
                failures.append(f"{case}: MPI datatype of {s_type.Get_size()} bytes, not one row")
    if comm.allgather(me) != list(range(size)):
        failures.append("allgather")
    everyone = comm.gather(failures)
    if me == 0:
        bad = [f"rank {r}: {f}" for r, fs in enumerate(everyone) for f in fs]
        print("\n".join(bad) if bad else "ok", flush=True)
    return 1 if comm.bcast(any(everyone) if me == 0 else None) else 0


if __name__ == "__main__":
    sys.exit(main())
