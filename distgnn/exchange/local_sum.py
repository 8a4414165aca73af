"""The local step of every exchange: each part sums its own in-edges with the native kernel."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from distgnn.kernels import ops
from distgnn.exchange.norms import KernelWeights
from distgnn.partition.part_loader import PartitionData
from distgnn.timers import Timers


@dataclass(frozen=True)
class KernelGraph:
    """The edges a local kernel runs over: CSR by destination row (``indptr`` int64 [n_dst + 1],
    ``indices`` into the source rows) and its transpose (CSR by source row over destination rows,
    for backward; None where only the forward runs)."""

    indptr: torch.Tensor
    indices: torch.Tensor
    t_indptr: torch.Tensor | None = None
    t_indices: torch.Tensor | None = None

    @classmethod
    def of(cls, part: PartitionData) -> "KernelGraph":
        """A part's own edges over its local ids."""
        return cls(part.indptr, part.indices, part.t_indptr, part.t_indices)

    @property
    def n_dst(self) -> int:
        """Output rows the forward writes."""
        return int(self.indptr.shape[0]) - 1

    @property
    def n_src(self) -> int:
        """Source rows (rows the transpose writes; needs the transpose)."""
        return int(self.t_indptr.shape[0]) - 1


@dataclass(frozen=True)
class LocalKernel:
    """The native kernel over one part's edges (:class:`KernelGraph`) with fixed weights
    (:class:`KernelWeights`)."""

    graph: KernelGraph
    weights: KernelWeights
    threads: int
    timers: Timers

    def __call__(self, src: torch.Tensor) -> torch.Tensor:
        """Partials [n_dst, w] of the graph's destination rows from the source rows ``src``
        [n_src, w], with the kernel on the transpose as backward (autograd)."""
        return LocalSum.apply(src, self)

    def forward_rows(self, src: torch.Tensor) -> torch.Tensor:
        """The partials [n_dst, w] without autograd (``src`` read as it is)."""
        w, g = self.weights, self.graph
        self.timers.rows("written", g.n_dst)
        return ops.weighted_sum(g.indptr, g.indices, src, scale=w.scale,
                                weight=w.weight, self_rows=w.self_rows, threads=self.threads)

    def transposed(self, grad: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The local sum's backward, the adjoint of diag(scale) (A + S) diag(weight): the kernel
        over the transpose with the forward's ``scale`` as the weight of each gradient row and its
        ``weight`` as the scale, the first ``self_rows`` rows' own term; the gradient rows gathered
        in the forward rows' ``dtype`` (bfloat16 rows: bfloat16 gradient rows, float32 sums),
        returned in it. grad [n_dst, w] -> [n_src, w]."""
        w, g = self.weights, self.graph
        self.timers.rows("written", g.n_src)
        return ops.weighted_sum(g.t_indptr, g.t_indices,
                                grad.to(dtype).contiguous(), scale=w.weight, weight=w.scale,
                                self_rows=w.self_rows, threads=self.threads).to(dtype)


class LocalSum(torch.autograd.Function):
    """:meth:`LocalKernel.__call__`: forward the kernel, backward the kernel on the transpose."""

    @staticmethod
    def forward(ctx, src: torch.Tensor, kernel: LocalKernel) -> torch.Tensor:
        ctx.kernel, ctx.dtype = kernel, src.dtype
        with kernel.timers("aggregate"):
            return kernel.forward_rows(src.detach())

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        with ctx.kernel.timers("aggregate"):
            return ctx.kernel.transposed(grad, ctx.dtype), None
