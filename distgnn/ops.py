"""Differentiable graph operations on native kernels (torch tensors in, torch tensors out).

* :func:`aggregate` -- neighbour aggregation over a CSR by destination (sum, mean, gcn).
* :func:`dropout` -- dropout keyed by (seed, epoch, layer, global vertex id, column).
* :func:`gather_rows`, :func:`scatter_add_rows` -- row moves for split-vertex communication.

All tensors live on the CPU; the native module sees them zero-copy through DLPack.
"""
from __future__ import annotations

import os
import weakref
from typing import Any, Optional, Tuple

import numpy as np
import torch

from distgnn import _native
from distgnn.errors import DistgnnError

NORMS = ("sum", "mean", "gcn")
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


def _threads(threads: int) -> int:
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
        self.bound = _native.aggregate_index_bound(indices, _threads(threads))
        if self.bound < 0:
            raise DistgnnError("aggregate: indices must be non-negative")
        self.local_degree = (indptr[1:] - indptr[:-1])
        self.sorted = rows_sorted(indptr, indices)
        self._transposes: dict[int, Tuple[torch.Tensor, torch.Tensor, bool]] = {}

    def transpose(self, n_src: int) -> Tuple[torch.Tensor, torch.Tensor, bool]:
        """(t_indptr, t_indices, sorted) of the CSR by source (csr_transpose sorts its rows)."""
        if n_src not in self._transposes:
            t_indptr = torch.empty(n_src + 1, dtype=torch.int64)
            t_indices = torch.empty(self.indices.numel(), dtype=self.indices.dtype)
            _native.csr_transpose(self.indptr, self.indices, n_src, t_indptr, t_indices)
            self._transposes[n_src] = (t_indptr, t_indices, True)
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


def _graph(indptr: Any, indices: Any, threads: int) -> _Graph:
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
    """Per-destination scale: None for sum, 1/max(deg, 1) for mean, 1/(deg + 1) for gcn."""
    if norm == "sum":
        return None
    deg = degree.to(dtype)
    if norm == "mean":
        return 1.0 / deg.clamp(min=1)
    return 1.0 / (deg + 1)


def spmm(indptr: torch.Tensor, indices: torch.Tensor, x: torch.Tensor, scale: Optional[torch.Tensor],
         self_term: Optional[torch.Tensor], threads: int = 0, sorted: bool = False,
         **tuning: int) -> torch.Tensor:
    """y[v] = scale[v] * (sum_{u in row v} x[u] + self_term[v]) (no checks, no autograd).

    x [n_src, F]; result [len(indptr) - 1, F]; self_term covers the first len(self_term) rows.
    bfloat16 x (and self_term): summed in float32, result float32.
    ``sorted``: rows ascend (allows source tiling). ``tuning``: chunk_edges, block, prefetch,
    tiles (see native/include/distgnn/aggregate.hpp)."""
    if x.dtype == torch.bfloat16:  # bfloat16 rows, float32 sums and result
        y = torch.empty(indptr.numel() - 1, x.shape[1], dtype=torch.float32)
        tuning.pop("tiles", None)
        _native.aggregate_spmm_bf16(indptr, indices, x.view(torch.int16), y,
                                    None if scale is None else scale.float(),
                                    None if self_term is None else self_term.view(torch.int16),
                                    _threads(threads), sorted=sorted, **tuning)
        return y
    y = torch.empty(indptr.numel() - 1, x.shape[1], dtype=x.dtype)
    _native.aggregate_spmm(indptr, indices, x, y, scale, self_term, _threads(threads),
                           sorted=sorted, **tuning)
    return y


class _Aggregate(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, graph: _Graph, scale: Optional[torch.Tensor], gcn: bool,
                threads: int, t_graph: Optional[Tuple[torch.Tensor, torch.Tensor, bool]]) -> torch.Tensor:
        ctx.graph, ctx.scale, ctx.gcn, ctx.threads, ctx.t_graph = graph, scale, gcn, threads, t_graph
        ctx.n_src, ctx.x_dtype = x.shape[0], x.dtype
        x = x.contiguous()
        return spmm(graph.indptr, graph.indices, x, scale, x if gcn else None, threads, graph.sorted)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        if not ctx.needs_input_grad[0]:
            return (None,) * 6
        g = grad.contiguous()
        if ctx.scale is not None:
            g = g * ctx.scale.unsqueeze(1)
        if ctx.x_dtype == torch.bfloat16:  # the gradient rows gathered in bfloat16 too
            g = g.to(torch.bfloat16)
        t_indptr, t_indices, t_sorted = ctx.t_graph if ctx.t_graph is not None else ctx.graph.transpose(ctx.n_src)
        gx = spmm(t_indptr, t_indices, g, None, g if ctx.gcn else None, ctx.threads, t_sorted)
        return gx.to(ctx.x_dtype), None, None, None, None, None


def aggregate(indptr: Any, indices: Any, x: torch.Tensor, norm: str = "sum",
              degree: Optional[torch.Tensor] = None,
              transpose: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
              threads: int = 0) -> torch.Tensor:
    """Aggregate source rows into destinations over a CSR by destination, differentiable in ``x``.

    ``indptr`` int64 [n_dst + 1], ``indices`` int32/int64 [E] (source ids in [0, n_src)),
    ``x`` float32/float64 [n_src, F], or bfloat16 (half the gathered bytes: summed in float32,
    the result float32; backward gathers the gradient rows in bfloat16 and returns a bfloat16
    gradient); returns [n_dst, F]:

    * ``sum``:  y[v] = sum_{u in row v} x[u]
    * ``mean``: y[v] = sum / max(deg[v], 1)
    * ``gcn``:  y[v] = (sum + x[v]) / (deg[v] + 1)   (needs n_src >= n_dst)

    ``degree`` [n_dst] (any numeric dtype) overrides the local row length (e.g. a global degree).
    ``transpose``: a stored (t_indptr [n_src + 1], t_indices [E]) CSR by source for backward;
    otherwise one is built on first backward and cached with the graph (keyed on the ``indices``
    tensor object, so pass the same tensors each call). ``threads`` <= 0: torch's thread count.
    """
    if norm not in NORMS:
        raise DistgnnError(f"aggregate: norm must be one of {', '.join(NORMS)}, got {norm!r}")
    if not isinstance(x, torch.Tensor) or x.dtype not in _ROWS or x.dim() != 2 or x.device.type != "cpu":
        raise DistgnnError("aggregate: x must be a 2-D float32, float64 or bfloat16 CPU tensor")
    graph = _graph(indptr, indices, threads)
    n_src = x.shape[0]
    if graph.bound > n_src:
        raise DistgnnError(f"aggregate: indices reach source {graph.bound - 1} but x has {n_src} rows")
    if norm == "gcn" and n_src < graph.n_dst:
        raise DistgnnError(f"aggregate: gcn needs x.shape[0] >= number of destinations "
                           f"({graph.n_dst}), got {n_src}")
    if degree is not None:
        degree = _as_tensor(degree, "degree")
        if degree.shape != (graph.n_dst,):
            raise DistgnnError(f"aggregate: degree must have shape [{graph.n_dst}], got {tuple(degree.shape)}")
    scale = row_scale(norm, graph.local_degree if degree is None else degree,
                      torch.float32 if x.dtype == torch.bfloat16 else x.dtype)
    t_graph = None
    if transpose is not None:
        t_indptr, t_indices = (_as_tensor(t, "transpose") for t in transpose)
        if (t_indptr.dtype != torch.int64 or t_indptr.numel() != n_src + 1
                or t_indices.dtype != graph.indices.dtype or t_indices.numel() != graph.indices.numel()):
            raise DistgnnError(f"aggregate: transpose must be (int64 [{n_src + 1}], "
                               f"{graph.indices.dtype} [{graph.indices.numel()}])")
        t_graph = (t_indptr, t_indices, rows_sorted(t_indptr, t_indices))
    return _Aggregate.apply(x, graph, scale, norm == "gcn", threads, t_graph)


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, p: float, key: Tuple[int, int, int],
                gids: torch.Tensor, threads: int) -> torch.Tensor:
        ctx.p, ctx.key, ctx.threads = p, key, threads
        ctx.save_for_backward(gids)
        out = torch.empty_like(x)
        _native.dropout_apply(x.contiguous(), gids, out, p, *key, _threads(threads))
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        (gids,) = ctx.saved_tensors
        out = torch.empty_like(grad, memory_format=torch.contiguous_format)
        _native.dropout_apply(grad.contiguous(), gids, out, ctx.p, *ctx.key, _threads(ctx.threads))
        return out, None, None, None, None


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
    _native.dropout_mask(gids, out, float(p), *_check_key(seed, epoch, layer), _threads(threads))
    return out


def gather_rows(x: torch.Tensor, rows: torch.Tensor, threads: int = 0) -> torch.Tensor:
    """x[rows] as a new contiguous tensor [len(rows), F] (no autograd)."""
    out = torch.empty(rows.numel(), x.shape[1], dtype=x.dtype)
    _native.gather_rows(x.contiguous(), rows.contiguous(), out, _threads(threads))
    return out


def scatter_add_rows(y: torch.Tensor, rows: torch.Tensor, x: torch.Tensor, threads: int = 0) -> torch.Tensor:
    """y[rows[i]] += x[i] in place (rows may repeat); returns y. y must be contiguous."""
    if not y.is_contiguous():
        raise DistgnnError("scatter_add_rows: y must be contiguous")
    _native.scatter_add_rows(x.contiguous(), rows.contiguous(), y, _threads(threads))
    return y
