"""MPI microbenchmark (run under ``mpiexec -n 2``): ping-pong, Alltoallv and Allreduce times
against message size, and the copy cost around an exchange (clone, gather, scatter-add of rows).

    mpiexec -n 2 python -m distgnn.scaling.microbench OUT.json [--repeats 11] [--max-bytes B]

Rank 0 writes ``{"pingpong"|"alltoall"|"allreduce": {"bytes": [...], "seconds": [...]},
"copy_s_per_float": x, "pack_s_per_float": x, "pack_into_s_per_float": x, "concurrency_agg": s, "concurrency_dense": s, "network": NetworkModel
fitted}``; times are medians over repeats. The concurrency figures are how much slower a rank
computes while the other rank computes too (1 when ranks do not share a machine).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from distgnn.comm import Communicator
from distgnn.kernels.message_codec import MessageCodec
from distgnn.row_exchange import RowPlan, Traffic


def _median_time(fn, repeats: int, comm: Communicator) -> float:
    """The slowest rank's median time of ``fn`` over ``repeats`` runs, in seconds."""
    times = []
    for _ in range(repeats):
        comm.barrier()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    # the slower rank sets the collective's time
    return float(comm.max(float(np.median(times))))


def run(out: Path, repeats: int = 11, max_bytes: int = 8 * 4 ** 11) -> dict:
    from distgnn.scaling.network import fitted_network

    comm = Communicator()
    rank, size = comm.rank, comm.size
    if size != 2:
        raise SystemExit("microbench: run under mpiexec -n 2")
    sizes = [8 * 4 ** i for i in range(12) if 8 * 4 ** i <= max_bytes]  # 8 B ... 33.5 MB
    result: dict = {"pingpong": {"bytes": [], "seconds": []}, "alltoall": {"bytes": [], "seconds": []},
                    "allreduce": {"bytes": [], "seconds": []}}
    for nbytes in sizes:
        buf = np.zeros(nbytes // 4, dtype=np.float32)

        def pingpong() -> None:
            if rank == 0:
                comm.send(buf, dest=1)
                comm.recv(buf, source=1)
            else:
                comm.recv(buf, source=0)
                comm.send(buf, dest=0)
        t = _median_time(pingpong, repeats, comm) / 2
        result["pingpong"]["bytes"].append(nbytes)
        result["pingpong"]["seconds"].append(t)
    width = 64
    for nbytes in sizes[3:]:
        rows = max(1, nbytes // (4 * width))
        x = torch.randn(rows, width)
        # every row goes to the other rank, and as many come back: one exchange of S bytes each way
        offsets = np.array([0, 0, rows] if rank == 0 else [0, rows, rows], dtype=np.int64)
        plan = RowPlan(torch.arange(rows), offsets)
        t = _median_time(lambda: comm.exchange_rows(x, plan, plan, Traffic.BENCH), repeats, comm)
        result["alltoall"]["bytes"].append(rows * width * 4)
        result["alltoall"]["seconds"].append(t)
    for nbytes in sizes[2:]:
        g = torch.ones(nbytes // 4, dtype=torch.float32)
        t = _median_time(lambda: comm.allreduce_sum_(g, Traffic.BENCH), repeats, comm)
        result["allreduce"]["bytes"].append(nbytes)
        result["allreduce"]["seconds"].append(t)
    result["copy_s_per_float"] = copy_cost(repeats, comm)
    result["pack_s_per_float"] = pack_cost(repeats)
    result["pack_into_s_per_float"] = pack_cost(repeats, into=True)
    result.update(concurrency(comm, repeats))
    net = fitted_network(result["pingpong"], result["alltoall"], result["allreduce"])
    result["network"] = net.to_dict()
    if rank == 0:
        out.write_text(json.dumps(result, indent=1))
    return result


def copy_cost(repeats: int, comm: Communicator, pooled: bool = True, n: int = 200_000,
              width: int = 64) -> float:
    """Seconds per float32 value of the copies around one cd-0 exchange, as in its
    reduce-broadcast: the table [n, width] copied, a quarter of its rows (random ids) gathered,
    scatter-added and written back (``n * width + 3 * n / 4 * width`` values). ``pooled`` (as the
    exchanges copy now, docs/design.md#output-buffers): into buffers made once; otherwise the
    copy and the gather land in fresh tensors (a page fault per 4 KB)."""
    x = torch.randn(n, width)
    ids = torch.randperm(n)[: n // 4]
    total, rows = torch.empty_like(x), torch.empty(len(ids), width)

    def copies() -> None:
        if pooled:
            total.copy_(x)
            torch.index_select(total, 0, ids, out=rows)
            got, into = rows, total
        else:
            into = x.clone()
            got = into[ids]
        into.index_add_(0, ids, got)
        into[ids] = got
    return _median_time(copies, repeats, comm) / (n * width + 3 * len(ids) * width)


def pack_cost(repeats: int, n: int = 100_000, width: int = 256, fused: bool = True,
              into: bool = False) -> float:
    """Seconds to encode one float32 value in int8 with stochastic rounding and decode it again
    (one thread; the codec's cost per value sent, docs/design.md#message-precision). ``fused``
    (as exchanges send): the ``n`` rows are read in place from a table of ``4 n`` (sorted random
    ids, as a plan's), the gather being the encode's read; else from ``n`` contiguous rows. They
    are decoded into a buffer made once (a float32 exchange allocates its received rows too, so
    the allocation is not the codec's), or with ``into`` (as cd-0's exchanges receive) into the
    rows of a table of ``4 n`` at such ids, added to them, the add being the decode's write."""
    codec = MessageCodec("int8", threads=1)
    generator = torch.Generator().manual_seed(0)
    table = torch.randn(4 * n if fused else n, width, generator=generator)
    ids = torch.randperm(4 * n, generator=generator)[:n].sort().values if fused else None
    at = torch.randperm(4 * n, generator=generator)[:n].sort().values
    target = torch.zeros(4 * n, width) if into else torch.empty(n, width)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        wire = codec.encode(table, True, 1, ids)
        if into:
            codec.decode_into(wire, target, at, add=True)
        else:
            codec.decode(wire, width, out=target)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) / (n * width)


def concurrency(comm: Communicator, repeats: int, rounds: int = 3) -> dict:
    """Slowdown of one rank's compute when both ranks compute at once on this machine (shared
    cores, caches and memory bandwidth), for the aggregation kernel and for dense work:
    ``{"concurrency_agg": t_both / t_alone, "concurrency_dense": ...}``. Alone and together
    alternate for ``rounds`` rounds and the fastest median of each is kept, so a short burst of
    other work on a shared host (a virtual machine's cores can move) does not set the factor."""
    from distgnn.kernels import ops

    rank = comm.rank
    rng = np.random.default_rng(rank)
    n, deg, w = 50_000, 20, 256
    indptr = torch.arange(0, (n + 1) * deg, deg, dtype=torch.int64)
    indices = torch.from_numpy(rng.integers(0, n, n * deg).astype(np.int32))
    x = torch.randn(n, w)
    weight = torch.randn(w, w)

    def agg() -> None:
        ops.aggregate(indptr, indices, x, norm="sum", threads=1)

    def dense() -> None:
        torch.relu(x @ weight).sum()

    def timed(fn) -> float:
        fn()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return float(np.median(times))

    out = {}
    for name, fn in (("agg", agg), ("dense", dense)):
        alone, both = float("inf"), float("inf")
        for _ in range(rounds):
            if rank == 0:
                alone = min(alone, timed(fn))
            comm.quiet_barrier()
            both = min(both, timed(fn))
            comm.quiet_barrier()
        alone, both = comm.bcast(alone), comm.max(both)
        out[f"concurrency_{name}"] = max(both / alone, 1.0)
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m distgnn.scaling.microbench")
    p.add_argument("out")
    p.add_argument("--repeats", type=int, default=11)
    p.add_argument("--max-bytes", type=int, default=8 * 4 ** 11,
                   help="largest message (default 33.5 MB; sizes are 8 B times powers of 4)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    run(Path(args.out), args.repeats, args.max_bytes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
