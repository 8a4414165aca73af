"""Plain torch/numpy references for every native kernel in :mod:`distgnn.kernels.ops` (used by tests).

Slow and obviously correct: no native code, autograd through ordinary torch ops.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def aggregate(indptr: torch.Tensor, indices: torch.Tensor, x: torch.Tensor, norm: str = "sum",
              degree: Optional[torch.Tensor] = None, self_rows: Optional[int] = None,
              src_degree: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Same contract as :func:`distgnn.kernels.ops.aggregate`, via index_add_ (differentiable in x)."""
    n_dst = indptr.numel() - 1
    local = indptr[1:] - indptr[:-1]
    dst = torch.repeat_interleave(torch.arange(n_dst), local)
    if norm == "sym":  # D^-1/2 (A + I) D^-1/2, self loops counted on both sides
        out = torch.bincount(indices.long(), minlength=x.shape[0]) if src_degree is None else src_degree
        x = x / (out.to(x.dtype) + 1).sqrt().unsqueeze(1)
    y = torch.zeros(n_dst, x.shape[1], dtype=x.dtype).index_add(0, dst, x[indices.long()])
    deg = (local if degree is None else degree).to(x.dtype).unsqueeze(1)
    if norm == "mean":
        y = y / deg.clamp(min=1)
    elif norm in ("gcn", "sym"):
        k = n_dst if self_rows is None else self_rows
        own = torch.cat([x[:k], x.new_zeros((n_dst - k, x.shape[1]))])
        y = (y + own) / ((deg + 1) if norm == "gcn" else (deg + 1).sqrt())
    return y


def weighted_sum(indptr: torch.Tensor, indices: torch.Tensor, x: torch.Tensor,
                 scale: Optional[torch.Tensor] = None, weight: Optional[torch.Tensor] = None,
                 self_rows: int = 0) -> torch.Tensor:
    """Same contract as :func:`distgnn.kernels.ops.weighted_sum`: scale[v] * (sum weight[u] x[u] +
    weight[v] x[v] for v < self_rows)."""
    n_dst = indptr.numel() - 1
    dst = torch.repeat_interleave(torch.arange(n_dst), indptr[1:] - indptr[:-1])
    xw = x if weight is None else x * weight.to(x.dtype).unsqueeze(1)
    y = torch.zeros(n_dst, x.shape[1], dtype=x.dtype).index_add(0, dst, xw[indices.long()])
    y[:self_rows] += xw[:self_rows]
    return y if scale is None else y * scale.to(x.dtype).unsqueeze(1)


def _mix(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def dropout_mask(num_cols: int, p: float, seed: int, epoch: int, layer: int,
                 global_ids: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The keyed dropout mask [len(global_ids), num_cols] (see native/include/distgnn/dropout.hpp)."""
    with np.errstate(over="ignore"):
        key = _mix(_mix(_mix(np.uint64(seed)) + np.uint64(epoch)) + np.uint64(layer))
        gids = global_ids.numpy().astype(np.int64).view(np.uint64)
        kv = _mix(key + gids)[:, None]
        h = _mix(kv + np.arange(num_cols, dtype=np.uint64)[None, :])
    thr = 0 if p <= 0 else (1 << 24) if p >= 1 else int(p * (1 << 24) + 0.5)
    keep = (h >> np.uint64(40)) >= np.uint64(thr)
    scale = 0.0 if thr >= (1 << 24) else 1.0 / (1.0 - thr / float(1 << 24))
    return torch.from_numpy(keep.astype(np.float64) * scale).to(dtype)


def dropout(x: torch.Tensor, p: float, seed: int, epoch: int, layer: int, global_ids: torch.Tensor,
            training: bool = True) -> torch.Tensor:
    if not training or p == 0.0:
        return x
    return x * dropout_mask(x.shape[1], p, seed, epoch, layer, global_ids, x.dtype)


def gather_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    return x[rows.long()].clone()


def scatter_add_rows(y: torch.Tensor, rows: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return y.index_add_(0, rows.long(), x)


def attention_mask(src_gids: torch.Tensor, dst_gids: torch.Tensor, heads: int, p: float, seed: int,
                   epoch: int, layer: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The keyed attention dropout mask [E, heads] of edges (src_gids[i] -> dst_gids[i]), as
    native/include/distgnn/attention.hpp draws it."""
    with np.errstate(over="ignore"):
        key = _mix(_mix(_mix(np.uint64(seed)) + np.uint64(epoch)) + np.uint64(layer))
        ku = _mix(key + src_gids.numpy().astype(np.int64).view(np.uint64))
        kv = _mix(ku + dst_gids.numpy().astype(np.int64).view(np.uint64))[:, None]
        h = _mix(kv + np.arange(heads, dtype=np.uint64)[None, :])
    thr = 0 if p <= 0 else int(p * (1 << 24) + 0.5)
    keep = (h >> np.uint64(40)) >= np.uint64(thr)
    return torch.from_numpy(keep.astype(np.float64) / (1.0 - thr / float(1 << 24))).to(dtype)


def local_attention(indptr: torch.Tensor, indices: torch.Tensor, z: torch.Tensor, el: torch.Tensor,
                    er: torch.Tensor, n_self: int = 0, dropout: Any = None,
                    slope: float = 0.2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Same contract as :func:`distgnn.kernels.attention.local_attention`, edge by edge in torch."""
    n_dst, heads = er.shape
    dst = torch.repeat_interleave(torch.arange(n_dst), indptr[1:] - indptr[:-1])
    src = torch.cat([indices.long(), torch.arange(n_self)])
    dst = torch.cat([dst, torch.arange(n_self)])
    e = torch.nn.functional.leaky_relu(el[src] + er[dst], slope)
    m = torch.full((n_dst, heads), -float("inf"), dtype=z.dtype)
    m = m.scatter_reduce(0, dst.unsqueeze(1).expand(-1, heads), e.detach(), "amax")
    w = torch.exp(e - m[dst])
    s = torch.zeros((n_dst, heads), dtype=z.dtype).index_add(0, dst, w)
    if dropout is not None and dropout.p > 0:
        w = w * attention_mask(dropout.src_gids[src], dropout.dst_gids[dst], heads, dropout.p,
                               dropout.seed, dropout.epoch, dropout.layer, z.dtype)
    q = torch.zeros((n_dst, *z.shape[1:]), dtype=z.dtype).index_add(0, dst, w.unsqueeze(2) * z[src])
    return m, s, q
