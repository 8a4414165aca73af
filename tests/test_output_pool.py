"""Reused kernel outputs (distgnn/kernels/output_pool.py): a block comes back only when nothing uses it,
free blocks stay under their budget, and a reused output is written whole by the kernel."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from distgnn.kernels import ops
from ops_reference import aggregate as aggregate_reference
from distgnn.kernels.output_pool import POOL, OutputPool, reuse_outputs

MB = 1 << 20


@pytest.fixture
def pool_on():
    """The kernels' pool turned on (whatever DISTGNN_REUSE_OUTPUTS or an earlier test said) and
    emptied, so a freed output is handed out again; its setting restored afterwards."""
    was = POOL.enabled
    POOL.release()
    reuse_outputs(True)
    yield POOL
    reuse_outputs(was)


def test_a_freed_output_is_handed_out_again() -> None:
    pool = OutputPool(max_idle_bytes=64 * MB)
    y = pool.empty((1024, 1024), torch.float32)
    ptr = y.data_ptr()
    del y
    again = pool.empty((1024, 1024), torch.float32)
    assert again.data_ptr() == ptr
    assert pool.held_bytes() == 4 * MB and pool.idle_bytes() == 0


def test_a_live_view_keeps_its_block() -> None:
    pool = OutputPool(max_idle_bytes=64 * MB)
    y = pool.empty((1024, 1024), torch.float32)
    y.fill_(3.0)
    tail = y[512:].t()          # a view outlives the tensor it came from
    del y
    other = pool.empty((1024, 1024), torch.float32)
    other.fill_(-1.0)
    assert other.data_ptr() != tail.data_ptr()
    assert bool((tail == 3.0).all())
    assert pool.held_bytes() == 8 * MB


def test_other_shapes_of_one_size_share_a_block_and_small_requests_bypass() -> None:
    pool = OutputPool(max_idle_bytes=64 * MB)
    ptr = pool.empty((2048, 512), torch.float32).data_ptr()
    assert pool.empty((1024, 512), torch.float64).data_ptr() == ptr
    small = pool.empty((16, 16), torch.float32)
    assert small.shape == (16, 16) and pool.held_bytes() == 4 * MB


def test_free_blocks_stay_within_the_budget_longest_unused_released_first() -> None:
    pool = OutputPool(max_idle_bytes=10 * MB)
    a = pool.empty((1024, 1024), torch.float32)         # 4 MB, handed out first
    b = pool.empty((1536, 1024), torch.float32)         # 6 MB
    del a, b                                            # 10 MB free: within budget
    assert pool.idle_bytes() == 10 * MB
    c = pool.empty((2048, 1024), torch.float32)         # 8 MB new: 2 MB left for free blocks
    assert pool.idle_bytes() == 0 and pool.held_bytes() == 8 * MB
    d = pool.empty((1024, 1024), torch.float32)         # 4 MB new again; c in use is kept
    del c
    e = pool.empty((1536, 1024), torch.float32)         # needs 6: frees c (8 MB), keeps nothing
    assert pool.held_bytes() == 10 * MB and d.data_ptr() != e.data_ptr()


def test_disabled_pool_allocates_afresh() -> None:
    pool = OutputPool(max_idle_bytes=64 * MB, enabled=False)
    pool.empty((1024, 1024), torch.float32)
    assert pool.held_bytes() == 0


def test_aggregate_writes_every_row_of_a_reused_output(pool_on: OutputPool) -> None:
    """Rows without in-edges are zeroed too, so a reused block's old contents never leak."""
    rng = np.random.default_rng(0)
    n, F = 6000, 300                                    # 7.2 MB outputs: pooled
    degree = rng.integers(0, 4, n)
    degree[::7] = 0
    indptr = torch.from_numpy(np.concatenate([[0], np.cumsum(degree)]).astype(np.int64))
    indices = torch.from_numpy(rng.integers(0, n, int(degree.sum())).astype(np.int64))
    held = pool_on.held_bytes()
    for norm in ("sum", "mean", "gcn"):
        x = torch.randn(n, F, requires_grad=True)
        first = ops.aggregate(indptr, indices, torch.full((n, F), float("nan")), norm)
        ptr = first.data_ptr()
        del first
        y = ops.aggregate(indptr, indices, x, norm)
        assert y.data_ptr() == ptr  # the NaN-filled block, reused
        torch.testing.assert_close(y, aggregate_reference(indptr, indices, x.detach(), norm))
        g = torch.randn(n, F)
        y.backward(g)
        x_ref = x.detach().clone().requires_grad_(True)
        aggregate_reference(indptr, indices, x_ref, norm).backward(g)
        torch.testing.assert_close(x.grad, x_ref.grad)
    assert pool_on.held_bytes() > held


def test_reuse_is_off_under_the_environment_variable() -> None:
    code = "from distgnn.kernels.output_pool import POOL; print(POOL.enabled)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "DISTGNN_REUSE_OUTPUTS": "0"}).stdout
    assert out.strip() == "False"


def test_attention_and_dropout_write_every_row_of_a_reused_output(pool_on: OutputPool) -> None:
    """The other kernels drawing from the pool (attention's q and its gradient in z, dropout
    forward and backward) leave nothing of a reused block's old contents either."""
    from distgnn.kernels.attention import local_attention
    from ops_reference import dropout as dropout_reference
    from ops_reference import local_attention as attention_reference

    rng = np.random.default_rng(1)
    n, H, D = 4000, 4, 80                               # q and z: 5.1 MB, pooled
    degree = rng.integers(0, 5, n)
    degree[::5] = 0
    indptr = torch.from_numpy(np.concatenate([[0], np.cumsum(degree)]).astype(np.int64))
    indices = torch.from_numpy(rng.integers(0, n, int(degree.sum())).astype(np.int64))
    el, er = torch.randn(n, H), torch.randn(n, H)
    stale = torch.full((n, H, D), float("nan"), requires_grad=True)
    _, _, q = local_attention(indptr, indices, stale, el, er, n_self=n // 2)
    q.backward(torch.full((n, H, D), float("nan")))    # q's block and stale.grad's hold NaN
    stale_blocks = {q.data_ptr(), stale.grad.data_ptr()}
    del q, stale
    z = torch.randn(n, H, D, requires_grad=True)
    _, s, q = local_attention(indptr, indices, z, el, er, n_self=n // 2)
    assert q.data_ptr() in stale_blocks  # a NaN-filled block, reused
    z_ref = z.detach().clone().requires_grad_(True)
    _, s_ref, q_ref = attention_reference(indptr, indices, z_ref, el, er, n_self=n // 2)
    torch.testing.assert_close(q, q_ref)
    g = torch.randn(n, H, D)
    (q * g).sum().backward()
    (q_ref * g).sum().backward()
    torch.testing.assert_close(z.grad, z_ref.grad)

    gids = torch.arange(n)
    x = torch.randn(n, 400, requires_grad=True)
    stale = torch.full((n, 400), float("nan"), requires_grad=True)
    dropped = ops.dropout(stale, 0.3, 7, 1, 0, gids)
    dropped.backward(torch.full((n, 400), float("nan")))
    stale_blocks = {dropped.data_ptr(), stale.grad.data_ptr()}
    del stale, dropped
    y = ops.dropout(x, 0.3, 7, 1, 0, gids)
    assert y.data_ptr() in stale_blocks
    torch.testing.assert_close(y, dropout_reference(x.detach(), 0.3, 7, 1, 0, gids))
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad, dropout_reference(torch.ones(n, 400), 0.3, 7, 1, 0, gids))
