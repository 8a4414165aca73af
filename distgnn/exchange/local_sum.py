"""The local step of every exchange: each part sums its own in-edges with the native kernel."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from distgnn import ops
from distgnn.exchange.norms import KernelWeights
from distgnn.train.partition_data import PartitionData
from distgnn.train.timers import Timers


@dataclass(frozen=True)
class LocalKernel:
    """The native kernel over one part's edges with fixed weights (:class:`KernelWeights`)."""

    part: PartitionData
    weights: KernelWeights
    threads: int
    timers: Timers

    def __call__(self, src: torch.Tensor) -> torch.Tensor:
        """Partials [n_k, w] of every local vertex from the source rows ``src`` [n_k, w], with the
        kernel on the transpose as backward (autograd)."""
        return LocalSum.apply(src, self)

    def forward_rows(self, src: torch.Tensor) -> torch.Tensor:
        """The partials [n_k, w] without autograd (``src`` read as it is)."""
        w = self.weights
        return ops.weighted_sum(self.part.indptr, self.part.indices, src, scale=w.scale,
                                weight=w.weight, self_rows=w.self_rows, threads=self.threads)

    def transposed(self, grad: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The local sum's backward, the adjoint of diag(scale) (A + S) diag(weight): the kernel
        over the transpose with the forward's ``scale`` as the weight of each gradient row and its
        ``weight`` as the scale, the first ``self_rows`` rows' own term; the gradient rows gathered
        in the forward rows' ``dtype`` (bfloat16 rows: bfloat16 gradient rows, float32 sums),
        returned in it. grad [n_k, w] -> [n_k, w]."""
        w = self.weights
        return ops.weighted_sum(self.part.t_indptr, self.part.t_indices,
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
