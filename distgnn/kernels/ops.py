"""Differentiable graph operations on native kernels (torch tensors in, torch tensors out).

* :func:`aggregate` -- neighbour aggregation over a CSR by destination (sum, mean, gcn).
* :func:`weighted_sum` -- the same kernel without autograd, with per-row scale and weight.
* :func:`dropout` -- dropout keyed by (seed, epoch, layer, global vertex id, column).
* :func:`gather_rows`, :func:`scatter_add_rows` -- row moves for split-vertex communication.

All tensors live on the CPU; the native module sees them zero-copy through DLPack.
"""
from __future__ import annotations

import os
import time
import weakref
from typing import Any, Optional, Tuple

import numpy as np
import torch

from distgnn import _native
from distgnn.kernels import tiling
from distgnn.errors import DistgnnError
from distgnn.kernels.output_pool import POOL
from distgnn.vocabulary import NORMS, SELF_TERM_NORMS  # noqa: F401  (ops.NORMS: the exchange's checks)
#: instruction sets of the aggregation kernels, narrowest first (native/include/distgnn/aggregate.hpp)
ISAS = ("base", "avx2", "avx512")
#: environment variable that runs the kernels with a narrower instruction set than the host's
ISA_ENV = "DISTGNN_ISA"
_FLOATS = (torch.float32, torch.float64)
#: row dtypes :func:`aggregate` takes: float32/float64, and bfloat16 rows summed in float32
_ROWS = (*_FLOATS, torch.bfloat16)
_INDEX = (torch.int32, torch.int64)


def supported_isas(host: str | None = None) -> tuple[str, ...]:
    """The instruction sets the kernels can run with here: every one up to the host's."""
    host = host or _native.aggregate_host_isa()
    return ISAS if host == "native" else ISAS[:ISAS.index(host) + 1]


def set_isa(name: str, source: str = "set_isa") -> str:
    """Run the aggregation kernels with instruction set ``name`` (one of :data:`ISAS`, at most the
    host's; ``host``: the host's own again), for testing every path on one machine. One-line
    :class:`DistgnnError` for a name that is unknown or above the host; returns the ISA now used."""
    host = _native.aggregate_host_isa()
    if name != "host" and (name not in ISAS or name not in supported_isas(host)):
        raise DistgnnError(f"{source}: expected one of {', '.join(supported_isas(host))} (this "
                           f"host runs up to {host}) or 'host', got {name!r}")
    if host != "native":
        _native.aggregate_set_isa(name)
    return _native.aggregate_isa()


if os.environ.get(ISA_ENV):
    set_isa(os.environ[ISA_ENV], ISA_ENV)


def thread_count(threads: int) -> int:
    """The kernel's thread count: ``threads``, or torch's when 0 (all cores)."""
    return threads if threads > 0 else torch.get_num_threads()


def _as_tensor(a: Any, name: str) -> torch.Tensor:
    if isinstance(a, np.ndarray):
        a = torch.from_numpy(a)
    if not isinstance(a, torch.Tensor):
        raise DistgnnError(f"aggregate: {name} must be a torch tensor or numpy array, got {type(a).__name__}")
    if a.device.type != "cpu":
        raise DistgnnError(f"aggregate: {name} must be on the CPU, got {a.device}")
    return a.contiguous()


class _Graph:
    """A validated CSR (indptr int64 [n_dst + 1], indices int32/int64 [E]) and its lazily built
    transpose (by source: [n_src + 1], [E]) for one source count n_src."""

    def __init__(self, indptr: torch.Tensor, indices: torch.Tensor, threads: int) -> None:
        if indptr.dtype != torch.int64 or indptr.dim() != 1 or indptr.numel() < 1:
            raise DistgnnError(f"aggregate: indptr must be a 1-D int64 tensor, got {indptr.dtype} "
                               f"with shape {tuple(indptr.shape)}")
        if indices.dtype not in _INDEX or indices.dim() != 1:
            raise DistgnnError(f"aggregate: indices must be a 1-D int32 or int64 tensor, got "
                               f"{indices.dtype} with shape {tuple(indices.shape)}")
        self.indptr, self.indices = indptr, indices
        self.n_dst = indptr.numel() - 1
        if int(indptr[0]) != 0 or int(indptr[-1]) != indices.numel():
            raise DistgnnError(f"aggregate: indptr must run from 0 to len(indices) = {indices.numel()}, "
                               f"got {int(indptr[0])}..{int(indptr[-1])}")
        if self.n_dst > 0 and bool((indptr[1:] < indptr[:-1]).any()):
            raise DistgnnError("aggregate: indptr must be non-decreasing")
        self.bound = _native.aggregate_index_bound(indices, thread_count(threads))
        if self.bound < 0:
            raise DistgnnError("aggregate: indices must be non-negative")
        self.local_degree = (indptr[1:] - indptr[:-1])
        self.sorted = rows_sorted(indptr, indices)
        self._transposes: dict[int, _Graph] = {}
        self._plans: dict[int, torch.Tensor] = {}
        self._tiling: dict[tuple, tiling.TileChoice] = {}

    def tile_choice(self, x: torch.Tensor, threads: int) -> tiling.TileChoice:
        """The measured choice of source tiles for rows like ``x`` ([n_src, F], its dtype) with
        ``threads`` threads (:mod:`distgnn.kernels.tiling`), made once per such key."""
        key = (x.shape[0], x.shape[1], x.dtype, thread_count(threads))
        if key not in self._tiling:
            options = (tiling.candidates(self.n_dst, x.shape[0], self.indices.numel(),
                                         x.shape[1] * x.element_size()) if self.sorted else (1,))
            self._tiling[key] = tiling.TileChoice(options)
        return self._tiling[key]

    def tiling_report(self) -> list[dict[str, Any]]:
        """Each measured choice of this graph and its transposes (keys with more than one
        candidate only), for a run's summary."""
        out = []
        for (n_src, width, dtype, threads), choice in self._tiling.items():
            if len(choice.options) > 1:
                out.append({"rows": self.n_dst, "sources": n_src, "edges": int(self.indices.numel()),
                            "width": width, "dtype": str(dtype).replace("torch.", ""),
                            "threads": threads, **choice.report()})
        for t in self._transposes.values():
            out += t.tiling_report()
        return out

    def plan(self, threads: int) -> torch.Tensor:
        """The kernel's chunk plan of this CSR for ``threads`` threads, int64 [n_chunks, 5], built
        once (native ``aggregate_plan``) instead of on every call."""
        threads = thread_count(threads)
        if threads not in self._plans:
            self._plans[threads] = torch.from_numpy(_native.aggregate_plan(self.indptr, threads))
        return self._plans[threads]

    def transpose(self, n_src: int) -> "_Graph":
        """The CSR by source for n_src sources, built once (csr_transpose sorts its rows)."""
        if n_src not in self._transposes:
            t_indptr = torch.empty(n_src + 1, dtype=torch.int64)
            t_indices = torch.empty(self.indices.numel(), dtype=self.indices.dtype)
            _native.csr_transpose(self.indptr, self.indices, n_src, t_indptr, t_indices)
            self._transposes[n_src] = _Graph(t_indptr, t_indices, 0)
        return self._transposes[n_src]


def rows_sorted(indptr: torch.Tensor, indices: torch.Tensor) -> bool:
    """Whether every row's indices ascend (lets the kernel tile sources)."""
    if indices.numel() < 2:
        return True
    ok = indices[1:] >= indices[:-1]
    ends = indptr[1:-1] - 1  # comparisons across a row boundary do not count
    ok[ends[(ends >= 0) & (ends < ok.numel())]] = True
    return bool(ok.all())


# Keyed by id() of the indices tensor, with weak references to both tensors: the entry, with its
# transpose, is dropped when the indices tensor dies, and a reused id never matches a dead entry.
_GRAPHS: dict[int, Tuple[Any, Any, _Graph]] = {}


def native_graph(indptr: Any, indices: Any, threads: int) -> _Graph:
    """The native module's view of a CSR (indptr int64 [n + 1], indices int32 [nnz]), kept per
    indices tensor so its transposes and tiling choices are made once."""
    if isinstance(indices, torch.Tensor) and isinstance(indptr, torch.Tensor):
        hit = _GRAPHS.get(id(indices))
        if hit is not None and hit[0]() is indices and hit[1]() is indptr:
            return hit[2]
        g = _Graph(_as_tensor(indptr, "indptr"), _as_tensor(indices, "indices"), threads)
        if g.indices is indices and g.indptr is indptr:
            key = id(indices)
            _GRAPHS[key] = (weakref.ref(indices), weakref.ref(indptr), g)
            weakref.finalize(indices, _GRAPHS.pop, key, None)
        return g
    return _Graph(_as_tensor(indptr, "indptr"), _as_tensor(indices, "indices"), threads)


def row_scale(norm: str, degree: torch.Tensor, dtype: torch.dtype) -> Optional[torch.Tensor]:
    """Per-destination scale: None for sum, 1/max(deg, 1) for mean, 1/(deg + 1) for gcn,
    (deg + 1)^-1/2 for sym (the in-degree side of GCN's D^-1/2 (A + I) D^-1/2)."""
    if norm == "sum":
        return None
    deg = degree.to(dtype)
    if norm == "mean":
        return 1.0 / deg.clamp(min=1)
    if norm == "sym":
        return (deg + 1).rsqrt()
    return 1.0 / (deg + 1)


def source_weight(norm: str, out_degree: torch.Tensor, dtype: torch.dtype) -> Optional[torch.Tensor]:
    """Per-source weight of a gathered row: (out_deg + 1)^-1/2 for sym (the out-degree side of
    D^-1/2 (A + I) D^-1/2, self loop counted), None (1) for every other norm."""
    if norm != "sym":
        return None
    return (out_degree.to(dtype) + 1).rsqrt()


def _bits(t: torch.Tensor) -> torch.Tensor:
    """A bfloat16 tensor as the int16 view of its bits (what the native kernels take); others as
    they are."""
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


def spmm(indptr: torch.Tensor, indices: torch.Tensor, x: torch.Tensor, scale: Optional[torch.Tensor],
         self_term: Optional[torch.Tensor], threads: int = 0, sorted: bool = False,
         weight: Optional[torch.Tensor] = None, plan: Optional[torch.Tensor] = None,
         **tuning: int) -> torch.Tensor:
    """y[v] = scale[v] * (sum_{u in row v} weight[u] x[u] + weight[v] self_term[v]) (no checks
    beyond the native ones, no autograd).

    x [n_src, F]; result [len(indptr) - 1, F]; self_term covers the first len(self_term) rows;
    scale [n_dst] and weight [n_src] float (None: 1). bfloat16 x (and self_term): summed in
    float32, result float32; a large result reuses the memory of an earlier one that nothing uses
    any more (:mod:`distgnn.kernels.output_pool`). ``sorted``: rows ascend (allows source tiling).
    ``plan``: the CSR's chunk plan (:meth:`_Graph.plan`). ``tuning``: chunk_edges, block,
    prefetch, tiles (see native/include/distgnn/aggregate.hpp)."""
    if x.dtype == torch.bfloat16:  # bfloat16 rows, float32 sums and result
        y = POOL.empty((indptr.numel() - 1, x.shape[1]), torch.float32)
        _native.aggregate_spmm_bf16(indptr, indices, _bits(x), y,
                                    None if scale is None else scale.float(),
                                    None if self_term is None else _bits(self_term),
                                    thread_count(threads), sorted=sorted,
                                    weight=None if weight is None else weight.float(), plan=plan,
                                    **tuning)
        return y
    y = POOL.empty((indptr.numel() - 1, x.shape[1]), x.dtype)
    _native.aggregate_spmm(indptr, indices, x, y, scale, self_term, thread_count(threads),
                           sorted=sorted, weight=weight, plan=plan, **tuning)
    return y


def _run(graph: _Graph, x: torch.Tensor, scale: Optional[torch.Tensor],
         weight: Optional[torch.Tensor], self_rows: int, threads: int) -> torch.Tensor:
    """The kernel over a validated graph with its cached plan; x's own first self_rows rows
    are the self term. Source tiles as :mod:`distgnn.kernels.tiling` chooses (timed while it measures)."""
    x = x.contiguous()
    self_term = x[:self_rows] if self_rows > 0 else None
    plan = graph.plan(threads)

    def call(tiles: int) -> torch.Tensor:
        return spmm(graph.indptr, graph.indices, x, scale, self_term, threads, graph.sorted,
                    weight=weight, plan=plan, tiles=tiles)

    fixed = tiling.fixed(graph.sorted)
    if fixed is not None:
        return call(fixed)
    choice = graph.tile_choice(x, threads)
    if choice.chosen is not None:
        return call(choice.chosen)
    tiles = choice.next()
    start = time.perf_counter()
    y = call(tiles)
    choice.record(tiles, time.perf_counter() - start)
    return y


def tiling_report() -> list[dict[str, Any]]:
    """The source-tiling choices measured so far in this process, one dict per (graph, width,
    dtype, threads) that had more than one candidate: rows, sources, edges, width, dtype,
    threads, tiles (None while still measuring) and trial_ms (tile count -> fastest trial)."""
    out = []
    for ref_indices, _, graph in list(_GRAPHS.values()):
        if ref_indices() is not None:
            out += graph.tiling_report()
    return out


def weighted_sum(indptr: Any, indices: Any, x: torch.Tensor, scale: Optional[torch.Tensor] = None,
                 weight: Optional[torch.Tensor] = None, self_rows: int = 0,
                 threads: int = 0) -> torch.Tensor:
    """y[v] = scale[v] * (sum_{u in row v} weight[u] x[u] + (v < self_rows ? weight[v] x[v] : 0)),
    no autograd: the building block of a distributed aggregation and of its backward (run on the
    transpose with ``weight`` = the forward's scale).

    x [n_src, F] float32/float64/bfloat16 (bfloat16: float32 result); scale [n_dst] and weight
    [n_src] float32 (x's dtype for float64), None for 1. The graph is validated and its chunk
    plan built once per ``indices`` tensor (as :func:`aggregate`)."""
    graph = native_graph(indptr, indices, threads)
    if graph.bound > x.shape[0] or self_rows > min(x.shape[0], graph.n_dst):
        raise DistgnnError(f"weighted_sum: x has {x.shape[0]} rows; indices reach {graph.bound} "
                           f"and self_rows is {self_rows}")
    return _run(graph, x, scale, weight, self_rows, threads)


class _Aggregate(torch.autograd.Function):
    """y = diag(s) (A x + S x), S the identity on the first self_rows rows; the backward is the
    kernel on the transpose with the scale as per-row weight: x' = A^T (s g) + S^T (s g)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, graph: _Graph, scale: Optional[torch.Tensor], self_rows: int,
                threads: int, t_graph: Optional[_Graph],
                weight: Optional[torch.Tensor] = None) -> torch.Tensor:
        ctx.graph, ctx.scale, ctx.self_rows, ctx.threads, ctx.t_graph = graph, scale, self_rows, threads, t_graph
        ctx.n_src, ctx.x_dtype, ctx.weight = x.shape[0], x.dtype, weight
        return _run(graph, x, scale, weight, self_rows, threads)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        if not ctx.needs_input_grad[0]:
            return (None,) * 7
        g = grad.to(ctx.x_dtype) if ctx.x_dtype == torch.bfloat16 else grad  # gradient rows in bfloat16 too
        t_graph = ctx.t_graph if ctx.t_graph is not None else ctx.graph.transpose(ctx.n_src)
        # the adjoint of diag(s) (A + S) diag(w): diag(w) (A^T + S^T) diag(s)
        gx = _run(t_graph, g, ctx.weight, ctx.scale, ctx.self_rows, ctx.threads)
        return gx.to(ctx.x_dtype), None, None, None, None, None, None


def aggregate(indptr: Any, indices: Any, x: torch.Tensor, norm: str = "sum",
              degree: Optional[torch.Tensor] = None,
              transpose: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
              threads: int = 0, self_rows: Optional[int] = None,
              src_degree: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Aggregate source rows into destinations over a CSR by destination, differentiable in ``x``.

    ``indptr`` int64 [n_dst + 1], ``indices`` int32/int64 [E] (source ids in [0, n_src)),
    ``x`` float32/float64 [n_src, F], or bfloat16 (half the gathered bytes: summed in float32,
    the result float32; backward gathers the gradient rows in bfloat16 and returns a bfloat16
    gradient); returns [n_dst, F]:

    * ``sum``:  y[v] = sum_{u in row v} x[u]
    * ``mean``: y[v] = sum / max(deg[v], 1)
    * ``gcn``:  y[v] = (sum + x[v]) / (deg[v] + 1)   (needs n_src >= n_dst)
    * ``sym``:  y[v] = (deg[v] + 1)^-1/2 (sum_u (out[u] + 1)^-1/2 x[u] + (deg[v] + 1)^-1/2 x[v]),
      GCN's D^-1/2 (A + I) D^-1/2 with self loops counted (needs n_src >= n_dst)

    ``degree`` [n_dst] (any numeric dtype) overrides the local row length (e.g. a global degree);
    ``src_degree`` [n_src] (sym) the sources' out-degree counted over this CSR.
    ``self_rows`` (gcn, sym): add the self term x[v] to the first ``self_rows`` destinations only
    (default all; a part's roots, when the leaves' partials are summed at the root).
    The degree scaling runs inside the kernel, forward and backward (no pass of its own).
    ``transpose``: a stored (t_indptr [n_src + 1], t_indices [E]) CSR by source for backward;
    otherwise one is built on first backward and cached with the graph (keyed on the ``indices``
    tensor object, so pass the same tensors each call). ``threads`` <= 0: torch's thread count.
    """
    if norm not in NORMS:
        raise DistgnnError(f"aggregate: norm must be one of {', '.join(NORMS)}, got {norm!r}")
    if not isinstance(x, torch.Tensor) or x.dtype not in _ROWS or x.dim() != 2 or x.device.type != "cpu":
        raise DistgnnError("aggregate: x must be a 2-D float32, float64 or bfloat16 CPU tensor")
    graph = native_graph(indptr, indices, threads)
    n_src = x.shape[0]
    if graph.bound > n_src:
        raise DistgnnError(f"aggregate: indices reach source {graph.bound - 1} but x has {n_src} rows")
    if norm in SELF_TERM_NORMS and n_src < graph.n_dst:
        raise DistgnnError(f"aggregate: {norm} needs x.shape[0] >= number of destinations "
                           f"({graph.n_dst}), got {n_src}")
    if degree is not None:
        degree = _as_tensor(degree, "degree")
        if degree.shape != (graph.n_dst,):
            raise DistgnnError(f"aggregate: degree must have shape [{graph.n_dst}], got {tuple(degree.shape)}")
    dtype = torch.float32 if x.dtype == torch.bfloat16 else x.dtype
    scale = row_scale(norm, graph.local_degree if degree is None else degree, dtype)
    weight = None
    if norm == "sym":
        if src_degree is None:
            src_degree = torch.bincount(graph.indices.long(), minlength=n_src)
        src_degree = _as_tensor(src_degree, "src_degree")
        if src_degree.shape != (n_src,):
            raise DistgnnError(f"aggregate: src_degree must have shape [{n_src}], got {tuple(src_degree.shape)}")
        weight = source_weight(norm, src_degree, dtype)
    n_self = 0
    if norm in SELF_TERM_NORMS:
        n_self = graph.n_dst if self_rows is None else int(self_rows)
        if not 0 <= n_self <= graph.n_dst:
            raise DistgnnError(f"aggregate: self_rows must lie in [0, {graph.n_dst}], got {self_rows}")
    t_graph = None
    if transpose is not None:
        t_indptr, t_indices = (t if isinstance(t, torch.Tensor) else _as_tensor(t, "transpose")
                               for t in transpose)
        if (t_indptr.dtype != torch.int64 or t_indptr.numel() != n_src + 1
                or t_indices.dtype != graph.indices.dtype or t_indices.numel() != graph.indices.numel()):
            raise DistgnnError(f"aggregate: transpose must be (int64 [{n_src + 1}], "
                               f"{graph.indices.dtype} [{graph.indices.numel()}])")
        t_graph = native_graph(t_indptr, t_indices, threads)  # validated once per tensor, like the graph
        if t_graph.bound > graph.n_dst:
            raise DistgnnError(f"aggregate: transpose indices reach destination {t_graph.bound - 1} "
                               f"but the graph has {graph.n_dst}")
    return _Aggregate.apply(x, graph, scale, n_self, threads, t_graph, weight)


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, p: float, key: Tuple[int, int, int],
                gids: torch.Tensor, threads: int) -> torch.Tensor:
        ctx.p, ctx.key, ctx.threads = p, key, threads
        ctx.save_for_backward(gids)
        out = POOL.empty(tuple(x.shape), x.dtype)   # the kernel writes every entry
        _native.dropout_apply(x.contiguous(), gids, out, p, *key, thread_count(threads))
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        (gids,) = ctx.saved_tensors
        out = POOL.empty(tuple(grad.shape), grad.dtype)
        _native.dropout_apply(grad.contiguous(), gids, out, ctx.p, *ctx.key, thread_count(ctx.threads))
        return out, None, None, None, None


class _ReluDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, p: float, key: Tuple[int, int, int],
                gids: torch.Tensor, threads: int) -> torch.Tensor:
        ctx.p, ctx.threads = p, threads
        out = POOL.empty(tuple(x.shape), x.dtype)   # the kernel writes every entry
        apply = _native.relu_dropout_apply_bf16 if x.dtype == torch.bfloat16 else _native.relu_dropout_apply
        apply(_bits(x.contiguous()), gids, _bits(out), p, *key, thread_count(threads))
        ctx.save_for_backward(out)  # the next layer keeps it anyway: no memory of its own
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        (out,) = ctx.saved_tensors
        grad_in = POOL.empty(tuple(out.shape), out.dtype)
        backward = (_native.relu_dropout_backward_bf16 if out.dtype == torch.bfloat16
                    else _native.relu_dropout_backward)
        backward(_bits(grad.to(out.dtype).contiguous()), _bits(out), _bits(grad_in), ctx.p,
                 thread_count(ctx.threads))
        return grad_in, None, None, None, None


def relu_dropout(x: torch.Tensor, p: float, seed: int, epoch: int, layer: int, global_ids: Any,
                 threads: int = 0) -> torch.Tensor:
    """``dropout(relu(x), ...)`` in one pass over x [n, F] (float32/float64), the same values bit for
    bit; its backward reads only the output (an entry passes its gradient, scaled, where the
    output is positive) and draws no mask. bfloat16 x: computed in float32, the output (and the
    input's gradient) rounded to bfloat16, the bits of the float32 computation cast to bfloat16.
    Training only (p > 0)."""
    if not 0.0 < p <= 1.0:
        raise DistgnnError(f"relu_dropout: p must lie in (0, 1], got {p}")
    if x.dtype not in _ROWS or x.dim() != 2:
        raise DistgnnError("relu_dropout: x must be a 2-D float32, float64 or bfloat16 tensor")
    return _ReluDropout.apply(x, float(p), _check_key(seed, epoch, layer),
                              _check_gids(global_ids, x.shape[0]), threads)


def _check_key(seed: int, epoch: int, layer: int) -> Tuple[int, int, int]:
    for name, value in (("seed", seed), ("epoch", epoch), ("layer", layer)):
        if not 0 <= int(value) < 2 ** 64:
            raise DistgnnError(f"dropout: {name} must lie in [0, 2**64), got {value}")
    return int(seed), int(epoch), int(layer)


def _check_gids(global_ids: Any, n: int) -> torch.Tensor:
    gids = _as_tensor(global_ids, "global_ids")
    if gids.dtype not in _INDEX or gids.shape != (n,):
        raise DistgnnError(f"dropout: global_ids must be int32/int64 with shape [{n}], got "
                           f"{gids.dtype} {tuple(gids.shape)}")
    return gids


def dropout(x: torch.Tensor, p: float, seed: int, epoch: int, layer: int, global_ids: Any,
            training: bool = True, threads: int = 0) -> torch.Tensor:
    """Dropout whose mask depends only on (seed, epoch, layer, global_ids[i], column).

    x float32/float64 [n, F], global_ids int32/int64 [n]; kept entries are scaled by 1/(1 - p)
    (p quantised to 2^-24). Identity when not training or p == 0. Differentiable in x: the
    backward recomputes the same mask instead of storing it."""
    if not 0.0 <= p <= 1.0:
        raise DistgnnError(f"dropout: p must lie in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if x.dtype not in _FLOATS or x.dim() != 2:
        raise DistgnnError("dropout: x must be a 2-D float32 or float64 tensor")
    return _Dropout.apply(x, float(p), _check_key(seed, epoch, layer), _check_gids(global_ids, x.shape[0]),
                          threads)


def dropout_mask(num_cols: int, p: float, seed: int, epoch: int, layer: int, global_ids: Any,
                 dtype: torch.dtype = torch.float32, threads: int = 0) -> torch.Tensor:
    """The scaled mask [len(global_ids), num_cols] that :func:`dropout` multiplies by."""
    gids = _check_gids(global_ids, len(global_ids))
    out = torch.empty(gids.numel(), num_cols, dtype=dtype)
    _native.dropout_mask(gids, out, float(p), *_check_key(seed, epoch, layer), thread_count(threads))
    return out


def gather_rows(x: torch.Tensor, rows: torch.Tensor, threads: int = 0) -> torch.Tensor:
    """x[rows] as a new contiguous tensor [len(rows), F] (no autograd)."""
    out = torch.empty(rows.numel(), x.shape[1], dtype=x.dtype)
    _native.gather_rows(x.contiguous(), rows.contiguous(), out, thread_count(threads))
    return out


def scatter_add_rows(y: torch.Tensor, rows: torch.Tensor, x: torch.Tensor, threads: int = 0) -> torch.Tensor:
    """y[rows[i]] += x[i] in place (rows may repeat); returns y. y must be contiguous."""
    if not y.is_contiguous():
        raise DistgnnError("scatter_add_rows: y must be contiguous")
    _native.scatter_add_rows(x.contiguous(), rows.contiguous(), y, thread_count(threads))
    return y
