"""Vertex orders and 2 MB pages for the aggregation kernel, against DGL 1.1.3, in one run.

    python -m bench.orders [--graphs R24 P26 synth-reddit synth-products] [--dim 256]
                           [--threads 2] [--repeats 3] [--twin-scale 0.2]

For each graph, forward y = A x and backward A^T g (sum, F = --dim float32), timed in interleaved
rounds (minimum kept), lines for: ours in every vertex order of `distgnn partition --order`
(R24 and P26 renumbered by the same function the build uses, as one part holds them; the twins
fetched and partitioned at P = 1 by the CLI and read back as stored arrays); ours in the default
order with the rows and CSR on 2 MB pages; DGL as a user runs it (the given order, default
allocator); DGL on our default order with 2 MB pages (the like-for-like line); and ours with
bfloat16 rows (`--precision bf16`: half the gathered bytes, float32 sums; a lower precision, so
never counted toward a float32 figure). Also the time each order costs to compute, and for the
twins the whole `distgnn partition` time.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict

import numpy as np
import torch

from bench.common import interleaved_min, machine_line, markdown_table
from bench.graphs import BENCH_GRAPHS, bench_graph
from distgnn import _native
from distgnn.kernels import ops
from distgnn.host_memory import huge_page_bytes, huge_page_copy, thp_mode
from distgnn.partition.vertex_order import (DEFAULT_VERTEX_ORDER, VERTEX_ORDERS,
                                            block_permutation, relabel_csr)


def _transpose(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(indptr) - 1
    t_indptr, t_indices = np.empty(n + 1, dtype=np.int64), np.empty_like(indices)
    _native.csr_transpose(indptr, indices, n, t_indptr, t_indices)
    return t_indptr, t_indices


def ours(csr, x: torch.Tensor, g: torch.Tensor, threads: int) -> Dict[str, Callable[[], object]]:
    ip, ix, tip, tix = (torch.from_numpy(a) for a in csr)
    return {"fwd": lambda: ops.spmm(ip, ix, x, None, None, threads, True),
            "bwd": lambda: ops.spmm(tip, tix, g, None, None, threads, True)}


def dgl_cases(csr, x: torch.Tensor, g: torch.Tensor) -> Dict[str, Callable[[], object]]:
    from bench.kernels import _dgl_cases

    return _dgl_cases(torch.from_numpy(csr[0]), torch.from_numpy(csr[1]), x, g)


def twin_parts(name: str, scale: float, workdir: Path, orders) -> dict[str, tuple]:
    """{order: (stored CSR and transpose, partition seconds)} of twin ``name`` at P = 1."""
    import zarr

    cli = [sys.executable, "-m", "distgnn"]
    subprocess.run([*cli, "fetch", name, "--scale", str(scale), "--root", str(workdir), "--quiet"],
                   check=True, capture_output=True)
    graph = next(workdir.glob(f"{name}-x*/graph.zarr"))
    out = {}
    for order in orders:
        start = time.perf_counter()
        subprocess.run([*cli, "partition", str(graph), "--parts", "1", "--order", order, "--out",
                        str(workdir / order), "--quiet"], check=True, capture_output=True)
        seconds = time.perf_counter() - start
        part = zarr.open_group(str(workdir / order / "part_0.zarr"), mode="r")
        out[order] = (tuple(part[a][:] for a in ("indptr", "indices", "t_indptr", "t_indices")),
                      seconds)
    return out


def bench_graph_orders(name: str, dim: int, threads: int, repeats: int, twin_scale: float,
                       orders=VERTEX_ORDERS) -> list:
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        if name in BENCH_GRAPHS:
            indptr, indices = bench_graph(name)
            csrs, order_s = {}, {}
            for order in orders:
                start = time.perf_counter()
                perm = block_permutation(indptr, indices, len(indptr) - 1, order)
                ip, ix = (indptr, indices) if order == "none" else relabel_csr(indptr, indices, perm)
                order_s[order] = f"{time.perf_counter() - start:.1f} s to order"
                csrs[order] = (ip, ix, *_transpose(ip, ix))
        else:
            built = twin_parts(name, twin_scale, Path(tmp), orders)
            csrs = {o: c for o, (c, _) in built.items()}
            order_s = {o: f"{s:.1f} s partition" for o, (_, s) in built.items()}
    n = len(csrs["none"][0]) - 1
    gen = torch.Generator().manual_seed(0)
    x, g = torch.randn(n, dim, generator=gen), torch.randn(n, dim, generator=gen)
    default = csrs[DEFAULT_VERTEX_ORDER]
    huge_csr = tuple(huge_page_copy(a) for a in default)
    huge_x = torch.from_numpy(huge_page_copy(x.numpy()))
    huge_g = torch.from_numpy(huge_page_copy(g.numpy()))
    lines: Dict[str, Dict[str, Callable[[], object]]] = {
        f"ours, order {o}": ours(c, x, g, threads) for o, c in csrs.items()}
    lines[f"ours, order {DEFAULT_VERTEX_ORDER}, 2 MB pages"] = ours(huge_csr, huge_x, huge_g, threads)
    # --precision bf16: the gathered rows in bfloat16 (half the bytes), float32 sums
    lines[f"ours, order {DEFAULT_VERTEX_ORDER}, 2 MB pages, bf16 rows (not float32)"] = ours(
        huge_csr, huge_x.to(torch.bfloat16), huge_g.to(torch.bfloat16), threads)
    dgl_user, dgl_like = "DGL 1.1.3 as a user runs it (given order)", \
        f"DGL 1.1.3, order {DEFAULT_VERTEX_ORDER}, 2 MB pages (like for like)"
    lines[dgl_user] = dgl_cases(csrs["none"], x, g)
    lines[dgl_like] = dgl_cases(default, huge_x, huge_g)
    cases = {f"{line}|{d}": fn for line, fns in lines.items() for d, fn in fns.items()}
    for fn in cases.values():
        fn()  # warm up: page faults, DGL's formats
    huge = huge_page_bytes()
    best = interleaved_min(cases, repeats)
    rows = []
    for line in lines:
        row = [name, line]
        for d in ("fwd", "bwd"):
            t = best[f"{line}|{d}"]
            row += [f"{t * 1e3:.0f}", f"{best[f'{dgl_user}|{d}'] / t:.2f}x",
                    f"{best[f'{dgl_like}|{d}'] / t:.2f}x"]
        order = line.split("order ")[-1] if line.startswith("ours, order") else ""
        row.append(order_s.get(order, ""))
        rows.append(row)
    rows.append([name, f"(memory on 2 MB pages during the rounds: {(huge or 0) / 2**20:,.0f} MiB)",
                 *[""] * 7])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", nargs="+", default=["R24", "P26", "synth-reddit", "synth-products"])
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--twin-scale", type=float, default=0.2)
    parser.add_argument("--orders", nargs="+", default=list(VERTEX_ORDERS), choices=VERTEX_ORDERS,
                        help="vertex orders to time (none and the default are always included)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"Machine: {machine_line(args.threads)}; aggregation ISA {_native.aggregate_isa()}; "
          f"THP {thp_mode()}")
    print(f"F = {args.dim} float32, minimum of {args.repeats} interleaved rounds; twins at scale "
          f"{args.twin_scale}\n")
    header = ["graph", "kernel", "fwd ms", "fwd vs DGL", "fwd vs DGL like for like", "bwd ms",
              "bwd vs DGL", "bwd vs DGL like for like", "order cost"]
    for name in args.graphs:
        orders = [o for o in VERTEX_ORDERS
                  if o in args.orders or o in ("none", DEFAULT_VERTEX_ORDER)]
        print(markdown_table(header, bench_graph_orders(name, args.dim, args.threads, args.repeats,
                                                        args.twin_scale, orders)), flush=True)
        print()


if __name__ == "__main__":
    main()
