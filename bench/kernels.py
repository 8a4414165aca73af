"""Aggregation kernel benchmark: ours against DGL 1.1.3, torch.sparse (CSR) and PyG, one run.

    python -m bench.kernels [--graphs R24 P26] [--dim 256] [--threads 2] [--repeats 3]

For each bench graph: forward y = A x (sum over in-neighbours, CSR by destination) and backward
A^T g, F = --dim float32 columns. Every case is timed in interleaved rounds (minimum kept). Lines:
ours and DGL 1.1.3 on the given order (DGL as a user runs it: default allocator); ours on the
part's default vertex order (the graph renumbered by the function ``distgnn partition`` uses, as
one part holds it: the arrays a P = 1 part stores), then also with the rows and CSR on 2 MB pages
(as ``distgnn train`` loads them); DGL given that order and 2 MB pages (the like-for-like line);
torch.sparse and PyG. Our outputs come from the output pool (an output nothing uses any more is
reused, as in training, distgnn/kernels/output_pool.py); one line allocates a fresh output per call
instead. The lines marked "as distgnn train" and plain "ours" run the library's own path, source
tiles chosen by measurement (distgnn/kernels/tiling.py; the choices are printed); "never tiled" lines
run the kernel untiled. Prints ms, the speedup over DGL as a user runs it and like for like, and
effective GB/s = (gathered m*F*4 + index bytes + output bytes) / time
(docs/design.md#kernels), beside a STREAM triad measured in the same run, as a markdown table. Extra
"ours" rows switch techniques off one at a time, to show which pay here. A case that fails (out of
memory under --mem-limit-gb) is reported as failed.
"""
from __future__ import annotations

import argparse
import resource
from typing import Callable, Dict, List, Optional

import numpy as np
import torch

from bench.common import interleaved_min, machine_line, markdown_table, stream_triad
from bench.graphs import bench_graph
from distgnn import _native
from distgnn.kernels import ops
from distgnn.host_memory import huge_page_copy
from distgnn.kernels.output_pool import POOL
from distgnn.partition.vertex_order import DEFAULT_VERTEX_ORDER, block_permutation, relabel_csr


def _dgl_cases(indptr: torch.Tensor, indices: torch.Tensor, x: torch.Tensor,
               g: torch.Tensor) -> Dict[str, Callable[[], object]]:
    from distgnn.compat import import_dgl

    dgl = import_dgl()
    import dgl.function as fn

    n = indptr.numel() - 1
    graph = dgl.graph(("csc", (indptr, indices.long(), torch.empty(0, dtype=torch.int64))),
                      num_nodes=n)
    graph.create_formats_()
    xg = x.detach().requires_grad_(True)  # shares x's memory

    def forward() -> torch.Tensor:
        with graph.local_scope():
            graph.srcdata["h"] = xg
            graph.update_all(fn.copy_u("h", "m"), fn.sum("m", "y"))
            return graph.dstdata["y"]

    y = forward()

    def backward() -> object:
        return torch.autograd.grad(y, xg, g, retain_graph=True)

    return {"fwd": lambda: forward(), "bwd": backward}


def _torch_sparse_cases(indptr: torch.Tensor, indices: torch.Tensor, t_indptr: torch.Tensor,
                        t_indices: torch.Tensor, x: torch.Tensor,
                        g: torch.Tensor) -> Dict[str, Callable[[], object]]:
    n = indptr.numel() - 1
    ones = torch.ones(indices.numel())
    a = torch.sparse_csr_tensor(indptr, indices.long(), ones, (n, x.shape[0]))
    at = torch.sparse_csr_tensor(t_indptr, t_indices.long(), ones, (x.shape[0], n))
    return {"fwd": lambda: torch.sparse.mm(a, x), "bwd": lambda: torch.sparse.mm(at, g)}


def _pyg_cases(indptr: torch.Tensor, indices: torch.Tensor, x: torch.Tensor,
               g: torch.Tensor) -> Dict[str, Callable[[], object]]:
    from torch_geometric.utils import spmm

    n = indptr.numel() - 1
    adj_t = torch.sparse_csr_tensor(indptr, indices.long(), torch.ones(indices.numel()), (n, x.shape[0]))
    cases: Dict[str, Callable[[], object]] = {"fwd": lambda: spmm(adj_t, x, reduce="sum")}
    if indices.numel() * x.shape[1] * 4 <= 2 ** 30:  # its autograd backward holds E x F values
        xg = x.detach().requires_grad_(True)
        y = spmm(adj_t, xg, reduce="sum")
        cases["bwd"] = lambda: torch.autograd.grad(y, xg, g, retain_graph=True)
    return cases


def bench_graph_kernels(name: str, dim: int, threads: int, repeats: int,
                        only: Optional[List[str]] = None,
                        skip: tuple[str, ...] = ()) -> List[List[str]]:
    ip_np, ix_np = bench_graph(name)
    indptr, indices = torch.from_numpy(ip_np), torch.from_numpy(ix_np)
    n, m = indptr.numel() - 1, indices.numel()
    t_indptr = torch.empty(n + 1, dtype=torch.int64)
    t_indices = torch.empty_like(indices)
    _native.csr_transpose(indptr, indices, n, t_indptr, t_indices)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, dim, generator=gen)
    g = x  # backward's incoming gradient: any [n, F] rows do; sharing x's saves 2 x 2.5 GB on P26
    graph_sorted = ops.rows_sorted(indptr, indices)

    def ours(**tuning: int) -> Dict[str, Callable[[], object]]:
        """The kernel with the given tuning (untiled unless tiles= says otherwise)."""
        return {"fwd": lambda: ops.spmm(indptr, indices, x, None, None, threads, graph_sorted, **tuning),
                "bwd": lambda: ops.spmm(t_indptr, t_indices, g, None, None, threads, True, **tuning)}

    def ours_as_trained(ip, ix, tip, tix, xs, gs) -> Dict[str, Callable[[], object]]:
        """The library's own path (ops.weighted_sum: cached plan, source tiles as measured)."""
        return {"fwd": lambda: ops.weighted_sum(ip, ix, xs, threads=threads),
                "bwd": lambda: ops.weighted_sum(tip, tix, gs, threads=threads)}

    # the default order's arrays (rows ascend in every order), plain and on 2 MB pages
    perm = block_permutation(ip_np, ix_np, n, DEFAULT_VERTEX_ORDER)
    o_ip, o_ix = relabel_csr(ip_np, ix_np, perm)
    o_tip, o_tix = np.empty(n + 1, dtype=np.int64), np.empty_like(o_ix)
    _native.csr_transpose(o_ip, o_ix, n, o_tip, o_tix)
    ordered = [torch.from_numpy(a) for a in (o_ip, o_ix, o_tip, o_tix)]
    huge = [torch.from_numpy(huge_page_copy(a)) for a in (o_ip, o_ix, o_tip, o_tix)]
    huge_x = huge_g = torch.from_numpy(huge_page_copy(x.numpy()))

    def ours_on(csr, xs: torch.Tensor, gs: torch.Tensor, **tuning: int) -> Dict[str, Callable[[], object]]:
        return {"fwd": lambda: ops.spmm(csr[0], csr[1], xs, None, None, threads, True, **tuning),
                "bwd": lambda: ops.spmm(csr[2], csr[3], gs, None, None, threads, True, **tuning)}

    def fresh_outputs(cases: Dict[str, Callable[[], object]]) -> Dict[str, Callable[[], object]]:
        """The same calls with a new output allocated each time (no reuse: the page faults of
        the first write land in the kernel, as for a library that allocates per call)."""
        def run(fn: Callable[[], object]) -> object:
            POOL.enabled = False
            try:
                return fn()
            finally:
                POOL.enabled = True
        return {d: (lambda fn=fn: run(fn)) for d, fn in cases.items()}

    failed: Dict[str, str] = {}

    def built(lib: str, make: Callable[[], Dict[str, Callable[[], object]]]) -> Dict[str, Callable[[], object]]:
        try:
            return make()
        except (RuntimeError, MemoryError) as exc:
            failed[f"{lib}|fwd"] = failed[f"{lib}|bwd"] = "failed: " + str(exc).splitlines()[0][-50:]
            return {}

    dgl_name, pyg_name = "DGL 1.1.3 update_all(copy_u, sum)", "PyG spmm (torch.sparse CSR adj_t)"
    like_name = f"DGL 1.1.3, order {DEFAULT_VERTEX_ORDER}, 2 MB pages (like for like)"
    libraries: Dict[str, Dict[str, Callable[[], object]]] = {
        "ours": ours_as_trained(indptr, indices, t_indptr, t_indices, x, g),
        dgl_name: built(dgl_name, lambda: _dgl_cases(indptr, indices, x, g)),
        f"ours, order {DEFAULT_VERTEX_ORDER} (a P = 1 part's arrays)": ours_as_trained(*ordered, x, g),
        f"ours, order {DEFAULT_VERTEX_ORDER}, 2 MB pages (as distgnn train)": ours_as_trained(*huge, huge_x, huge_g),
        f"ours, order {DEFAULT_VERTEX_ORDER}, 2 MB pages, never tiled": ours_on(huge, huge_x, huge_g),
        f"ours, order {DEFAULT_VERTEX_ORDER}, a fresh output per call": fresh_outputs(ours_as_trained(*ordered, x, g)),
        like_name: built(like_name, lambda: _dgl_cases(huge[0], huge[1], huge_x, huge_g)),
        "torch.sparse.mm (CSR)": _torch_sparse_cases(indptr, indices, t_indptr, t_indices, x, g),
        pyg_name: built(pyg_name, lambda: _pyg_cases(indptr, indices, x, g)),
        "ours, never tiled": ours(),
        "ours, no prefetch, never tiled": ours(prefetch=0),
        "plain OpenMP row loop (ours without blocks, prefetch, edge chunks)": ours(
            prefetch=0, block=256, chunk_edges=m + n),
    }
    measured = {"ours", *(k for k in libraries if k.startswith(f"ours, order {DEFAULT_VERTEX_ORDER}")
                          and "never tiled" not in k)}  # the lines on the library's own path
    if only:
        libraries = {k: v for k, v in libraries.items() if k in only}
    libraries = {k: v for k, v in libraries.items() if not any(s in k for s in skip)}
    cases = {f"{lib}|{d}": fn for lib, fns in libraries.items() for d, fn in fns.items()}
    for key, fn in list(cases.items()):  # warm up (lazy formats, page faults); drop what fails
        try:
            fn()
        except (RuntimeError, MemoryError) as exc:
            failed[key] = "failed: " + str(exc).splitlines()[0][-50:]
            del cases[key]
    for _ in range(16):  # let the measured tile choices settle (distgnn/kernels/tiling.py) before timing
        if all(r["tiles"] is not None for r in ops.tiling_report()):
            break
        for key, fn in cases.items():
            if key.split("|")[0] in measured:
                fn()
    best = interleaved_min(cases, repeats)
    for r in (r for r in ops.tiling_report() if r["rows"] == n):  # this graph's, both directions
        print(f"{name}: source tiles measured for {r['rows']} rows x {r['width']} ({r['dtype']}): "
              f"{r['tiles']} (fastest trial ms by tile count: {r['trial_ms']})")
    best.update({key: float("nan") for key in failed})
    index_bytes = m * indices.element_size() + (n + 1) * 8
    moved = m * dim * 4 + index_bytes + n * dim * 4
    base = {d: best.get(f"{dgl_name}|{d}", float("nan")) for d in ("fwd", "bwd")}
    like = {d: best.get(f"{like_name}|{d}", float("nan")) for d in ("fwd", "bwd")}
    rows = []
    for lib in libraries:
        row = [name, lib]
        for d in ("fwd", "bwd"):
            t = best.get(f"{lib}|{d}", float("nan"))
            if f"{lib}|{d}" in failed or f"{lib}|{d}" not in best:
                why = failed.get(f"{lib}|{d}", "skipped: autograd materialises E x F")
                row += [why, "-", "-", "-"]
                continue
            row += [f"{t * 1e3:.0f}", f"{base[d] / t:.2f}x", f"{like[d] / t:.2f}x", f"{moved / t / 1e9:.1f}"]
        rows.append(row)
    return rows


def gather_rates(dim: int, threads: int, repeats: int,
                 table_mib: tuple[int, ...] = (2, 8, 16, 32, 64, 256)) -> List[List[str]]:
    """Rate at which random rows of ``dim`` float32 can be summed from a table of a given size:
    the same kernel on uniform random rows (100 sources each, 16M gathers in all), so the only
    change between lines is whether the table fits in cache. It bounds what any aggregation kernel
    can reach on a graph whose gathers miss the cache (R24: a 238 MB table)."""
    rows = []
    m = 16_000_000 // max(1, dim // 64)
    gen = torch.Generator().manual_seed(1)
    for mib in table_mib:
        n_src = max(1, mib * 2 ** 20 // (dim * 4))
        x = torch.randn(n_src, dim, generator=gen)
        indptr = torch.arange(0, m + 1, 100, dtype=torch.int64)
        indices = torch.randint(0, n_src, (int(indptr[-1]),), generator=gen, dtype=torch.int32)
        y = torch.empty(indptr.numel() - 1, dim)
        fn = lambda: _native.aggregate_spmm(indptr, indices, x, y, None, None, threads)  # noqa: E731
        fn()
        best = interleaved_min({"g": fn}, repeats)["g"]
        rows.append([f"{mib}", f"{indices.numel() * dim * 4 / best / 1e9:.1f}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", nargs="+", default=["R24", "P26"])
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="ours and DGL only")
    parser.add_argument("--skip", nargs="+", default=[], metavar="TEXT",
                        help="leave out the lines whose name contains any TEXT (e.g. torch.sparse "
                             "PyG: on P26 they fail under the memory limit anyway)")
    parser.add_argument("--ceiling-mib", type=int, nargs="+", default=[2, 8, 16, 32, 64, 256],
                        help="table sizes of the gather-rate ceiling (2560: P26's table)")
    parser.add_argument("--mem-limit-gb", type=float, default=14.0,
                        help="address-space limit, so a baseline that materialises E x F messages "
                             "fails alone instead of waking the OOM killer on a shared machine")
    args = parser.parse_args()
    limit = int(args.mem_limit_gb * 2 ** 30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    torch.set_num_threads(args.threads)
    print(f"Machine: {machine_line(args.threads)}; aggregation ISA {_native.aggregate_isa()}")
    print(f"F = {args.dim} float32, minimum of {args.repeats} interleaved rounds; effective GB/s = "
          f"(m*F*4 + index bytes + output bytes) / time\n", flush=True)
    if not args.quick:
        print("Random-row gather rate of the kernel against the size of the table gathered from "
              f"(F = {args.dim}, uniform sources, {args.threads} threads):\n")
        print(markdown_table(["table MiB", "gathered GB/s"], gather_rates(
            args.dim, args.threads, args.repeats, tuple(args.ceiling_mib))) + "\n", flush=True)
    for name in args.graphs:  # one table per graph, printed as soon as it is measured
        before = stream_triad(args.threads)
        only = ["ours", "DGL 1.1.3 update_all(copy_u, sum)",
                f"ours, order {DEFAULT_VERTEX_ORDER}, 2 MB pages (as distgnn train)",
                f"DGL 1.1.3, order {DEFAULT_VERTEX_ORDER}, 2 MB pages (like for like)"] if args.quick else None
        rows = bench_graph_kernels(name, args.dim, args.threads, args.repeats, only,
                                   tuple(args.skip))
        after = stream_triad(args.threads)
        print(f"{name}: STREAM triad (float32, torch, {args.threads} threads) before/after: "
              f"{before:.1f} / {after:.1f} GB/s\n")
        print(markdown_table(["graph", "kernel", "fwd ms", "fwd vs DGL", "fwd vs DGL like for like",
                              "fwd GB/s", "bwd ms", "bwd vs DGL", "bwd vs DGL like for like",
                              "bwd GB/s"], rows) + "\n", flush=True)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
