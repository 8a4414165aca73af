"""Graph attention in the mergeable form a vertex-cut needs (native/include/distgnn/attention.hpp).

For each destination v and head h over its in-edges u -> v (plus the self loop when v < n_self),
with e_uv = LeakyReLU(el[u, h] + er[v, h]):

* ``m[v, h]`` = max_u e_uv, ``s[v, h]`` = sum_u exp(e_uv - m), ``q[v, h]`` = sum_u exp(e_uv - m)
  d_uvh z[u, h] (d: keyed attention dropout);
* the attention output is q / s; partials of one vertex from several parts merge exactly
  (:func:`merge`), which is how GAT runs on a vertex-cut (docs/design.md#attention-across-parts).

``local_attention`` is differentiable in z, el and er (m is a constant of the result: the
gradient does not depend on it); backward is one native pass over the CSR and one over its
transpose.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Optional, Tuple

import torch

from distgnn import _native
from distgnn.errors import DistgnnError
from distgnn.kernels.ops import native_graph, thread_count
from distgnn.kernels.output_pool import POOL

#: LeakyReLU slope of the GAT paper (and of DGL's GATConv default)
SLOPE = 0.2


@dataclass(frozen=True)
class AttentionDropout:
    """Keyed attention dropout: edge (u -> v), head h keeps its weight with probability 1 - p,
    drawn from (seed, epoch, layer, global id of u, global id of v, h), scaled by 1 / (1 - p)."""

    p: float
    seed: int
    epoch: int
    layer: int
    src_gids: torch.Tensor   #: int64 [n_src]
    dst_gids: torch.Tensor   #: int64 [n_dst]

    def native(self) -> dict[str, Any]:
        return {"p": float(self.p), "seed": int(self.seed), "epoch": int(self.epoch),
                "layer": int(self.layer), "src_gids": self.src_gids.contiguous(),
                "dst_gids": self.dst_gids.contiguous()}


class _LocalAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, z: torch.Tensor, el: torch.Tensor, er: torch.Tensor, graph: Any,
                n_self: int, drop: dict[str, Any], threads: int,
                timer: Callable[[], ContextManager]) -> Tuple[torch.Tensor, ...]:
        n_dst, H = er.shape
        m = torch.empty((n_dst, H), dtype=z.dtype)
        s = torch.empty((n_dst, H), dtype=z.dtype)
        q = POOL.empty((n_dst, z.shape[1]), z.dtype)   # the kernel writes every row
        with timer():
            _native.attention_forward(graph.indptr, graph.indices, z, el, er, n_self, SLOPE, m, s,
                                      q, threads=threads, **drop)
        ctx.graph, ctx.n_self, ctx.drop, ctx.threads, ctx.timer = graph, n_self, drop, threads, timer
        ctx.save_for_backward(z, el, er, m)
        ctx.mark_non_differentiable(m)
        return m, s, q

    @staticmethod
    def backward(ctx: Any, _gm: Any, gs: Optional[torch.Tensor], gq: Optional[torch.Tensor]):
        z, el, er, m = ctx.saved_tensors
        gs = torch.zeros_like(m) if gs is None else gs.contiguous()
        gq = torch.zeros((m.shape[0], z.shape[1]), dtype=z.dtype) if gq is None else gq.contiguous()
        t = ctx.graph.transpose(z.shape[0])
        gz, gel, ger = POOL.empty(tuple(z.shape), z.dtype), torch.empty_like(el), torch.empty_like(er)
        with ctx.timer():
            _native.attention_backward(ctx.graph.indptr, ctx.graph.indices, t.indptr, t.indices, z,
                                       el, er, ctx.n_self, SLOPE, m, gq, gs, gz, gel, ger,
                                       threads=ctx.threads, **ctx.drop)
        return gz, gel, ger, None, None, None, None, None


def local_attention(indptr: Any, indices: Any, z: torch.Tensor, el: torch.Tensor, er: torch.Tensor,
                    n_self: int = 0, dropout: Optional[AttentionDropout] = None,
                    threads: int = 0, timer: Optional[Callable[[], ContextManager]] = None,
                    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(m [n_dst, H], s [n_dst, H], q [n_dst, H, D]) of the module docstring over a CSR by
    destination; z [n_src, H, D], el [n_src, H], er [n_dst, H], float32 or float64; the self loop
    for the first ``n_self`` destinations (needs n_src >= n_self). Rows without any term: m = -inf,
    s = 0, q = 0. ``timer()``: a context manager around each native call, forward and backward
    (the trainer's aggregation clock)."""
    if z.dim() != 3 or el.shape != z.shape[:2] or er.dim() != 2 or er.shape[1] != z.shape[1]:
        raise DistgnnError(f"attention: expected z [n, H, D], el [n, H], er [n_dst, H]; got "
                           f"{tuple(z.shape)}, {tuple(el.shape)}, {tuple(er.shape)}")
    if z.dtype not in (torch.float32, torch.float64) or el.dtype != z.dtype or er.dtype != z.dtype:
        raise DistgnnError("attention: z, el and er must share one dtype, float32 or float64")
    graph = native_graph(indptr, indices, threads)
    n_src, H, D = z.shape
    if graph.bound > n_src or er.shape[0] != graph.n_dst or not 0 <= n_self <= min(n_src, graph.n_dst):
        raise DistgnnError(f"attention: indices reach {graph.bound}, z has {n_src} rows, er "
                           f"{er.shape[0]} (graph: {graph.n_dst}), n_self {n_self}")
    drop = dropout.native() if dropout is not None and dropout.p > 0 else {"p": 0.0}
    m, s, q = _LocalAttention.apply(z.reshape(n_src, H * D).contiguous(), el.contiguous(),
                                    er.contiguous(), graph, int(n_self), drop, thread_count(threads),
                                    timer or nullcontext)
    return m, s, q.view(-1, H, D)


def merge(m: torch.Tensor, s: torch.Tensor, q: torch.Tensor, ids: torch.Tensor, m_in: torch.Tensor,
          s_in: torch.Tensor, q_in: torch.Tensor) -> torch.Tensor:
    """The attention output [n, H, D] of n vertices from their own partials (m, s [n, H],
    q [n, H, D]) and received ones (m_in, s_in [R, H], q_in [R, H, D], row i belonging to vertex
    ids[i]): with M = max of every m, out = sum exp(m_k - M) q_k / sum exp(m_k - M) s_k.
    Differentiable in s, q, s_in and q_in (m and M are constants of the result)."""
    big = m.detach().clone()
    if ids.numel():
        big.scatter_reduce_(0, ids.unsqueeze(1).expand_as(m_in), m_in.detach(), "amax")
    own = torch.exp(m.detach() - big).nan_to_num(0.0)   # -inf - -inf: a row with no term
    total_s, total_q = s * own, q * own.unsqueeze(2)
    if ids.numel():
        theirs = torch.exp(m_in.detach() - big[ids]).nan_to_num(0.0)
        total_s = total_s.index_add(0, ids, s_in * theirs)
        total_q = total_q.index_add(0, ids, q_in * theirs.unsqueeze(2))
    return total_q / total_s.unsqueeze(2)


def attend(indptr: Any, indices: Any, z: torch.Tensor, el: torch.Tensor, er: torch.Tensor,
           n_self: Optional[int] = None, dropout: Optional[AttentionDropout] = None,
           threads: int = 0) -> torch.Tensor:
    """Softmax attention over in-edges and self loops (default: every destination), [n_dst, H, D]:
    one process's GAT aggregation (DGL's GATConv on ``dgl.add_self_loop(g)``)."""
    n_dst = er.shape[0]
    m, s, q = local_attention(indptr, indices, z, el, er, n_dst if n_self is None else n_self,
                              dropout, threads)
    return q / s.unsqueeze(2)
