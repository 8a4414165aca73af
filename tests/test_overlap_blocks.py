"""cd-0's overlap blocks (distgnn/exchange/overlap.py) against a plain torch reference: the four
blocks of a random compact graph sum, forward and backward, to the whole kernel and its adjoint,
every edge counted once."""
from __future__ import annotations

import pytest
import torch

from distgnn.exchange.local_sum import KernelGraph
from distgnn.exchange.norms import KernelWeights
from distgnn.exchange.overlap import OverlapBlocks


def csr(dst: torch.Tensor, src: torch.Tensor, n_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR by ``dst`` (int64 indptr [n_rows + 1], int32 indices = ``src``), edges in input order
    within a row."""
    order = torch.argsort(dst, stable=True)
    indptr = torch.zeros(n_rows + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(dst, minlength=n_rows), 0, out=indptr[1:])
    return indptr, src[order].to(torch.int32)


def reference(dst, src, x, scale, weight, n_out, self_rows):
    """y[v] = scale[v] (sum over edges u -> v of weight[u] x[u] + (v < self_rows) weight[v] x[v])."""
    y = torch.zeros(n_out, x.shape[1], dtype=torch.float64)
    y.index_add_(0, dst, weight[src].unsqueeze(1) * x[src])
    own = torch.arange(self_rows)
    y[own] += weight[own].unsqueeze(1) * x[own]
    return scale.unsqueeze(1) * y


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_blocks_sum_to_the_kernel_and_its_adjoint(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    n_roots, n_dst, n_src, edges, width = 30, 55, 48, 400, 7
    dst = torch.randint(0, n_dst, (edges,), generator=g)
    src = torch.randint(0, n_src, (edges,), generator=g)
    indptr, indices = csr(dst, src, n_dst)
    t_indptr, t_indices = csr(src, dst, n_src)
    scale = torch.rand(n_dst, generator=g, dtype=torch.float64).float() + 0.5
    weight = torch.rand(n_src, generator=g, dtype=torch.float64).float() + 0.5
    blocks = OverlapBlocks.split(KernelGraph(indptr, indices, t_indptr, t_indices),
                                 KernelWeights(scale, n_roots, weight), n_roots)
    x = torch.randn(n_src, width, generator=g)
    grad = torch.randn(n_dst, width, generator=g)
    # forward, then backward: the adjoint diag(weight) (A^T + S^T) diag(scale) on [n_dst, w]
    for (early, late, own), rows, want in (
            ((blocks.leaves_from_roots, blocks.leaves_from_copies, blocks.roots), x,
             reference(dst, src, x.double(), scale.double(), weight.double(), n_dst, n_roots)),
            ((blocks.copies_from_roots, blocks.copies_from_leaves, blocks.root_sources), grad,
             reference(src, dst, grad.double(), weight.double(), scale.double(), n_src, n_roots))):
        got = torch.cat([own(rows, 1), early(rows, 1) + late(rows, 1)])
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
        # the early block reads no leaf row (they have not arrived): garbage there changes nothing
        poisoned = rows.clone()
        poisoned[n_roots:] = float("nan")
        assert torch.equal(early(poisoned, 1), early(rows, 1))
    # every edge in exactly one forward block and one backward block
    forward = [blocks.leaves_from_roots, blocks.leaves_from_copies, blocks.roots]
    backward = [blocks.copies_from_roots, blocks.copies_from_leaves, blocks.root_sources]
    assert sum(len(b.indices) for b in forward) == sum(len(b.indices) for b in backward) == edges
