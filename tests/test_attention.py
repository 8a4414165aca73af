"""Graph attention kernels (distgnn.kernels.attention) against the edge-by-edge torch reference: partials,
merge across parts, keyed attention dropout, gradients (float64 gradcheck)."""
from __future__ import annotations

import pytest
import torch

import ops_reference as ref
from distgnn.kernels.attention import AttentionDropout, attend, local_attention, merge
from distgnn.errors import DistgnnError
from test_ops import power_law_graph


def _inputs(n_src: int, n_dst: int, heads: int, width: int, dtype=torch.float64, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n_src, heads, width, dtype=dtype, generator=g)
    el = torch.randn(n_src, heads, dtype=dtype, generator=g)
    er = torch.randn(n_dst, heads, dtype=dtype, generator=g)
    return z, el, er


def _dropout(n_src: int, n_dst: int, p: float = 0.4, layer: int = 1) -> AttentionDropout:
    return AttentionDropout(p, seed=3, epoch=2, layer=layer, src_gids=torch.arange(n_src) * 7 + 1,
                            dst_gids=torch.arange(n_dst) * 7 + 1)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("heads,width", [(1, 1), (3, 5), (8, 8)])
@pytest.mark.parametrize("p", [0.0, 0.5])
def test_partials_match_the_reference(p: float, heads: int, width: int, index_dtype, threads: int) -> None:
    """m, s, q with the self loop on a prefix of the destinations, rows without any term
    (m = -inf, s = q = 0), float32 and float64."""
    indptr, indices = power_law_graph(60, 80, 700, seed=heads, index_dtype=index_dtype)
    z, el, er = _inputs(80, 60, heads, width)
    drop = _dropout(80, 60, p) if p else None
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        args = [t.to(dtype) for t in (z, el, er)]
        m, s, q = local_attention(indptr, indices, *args, n_self=25, dropout=drop, threads=threads)
        m_ref, s_ref, q_ref = ref.local_attention(indptr, indices, *args, n_self=25, dropout=drop)
        torch.testing.assert_close(m, m_ref, rtol=tol, atol=tol)
        torch.testing.assert_close(s, s_ref, rtol=tol, atol=tol)
        torch.testing.assert_close(q, q_ref, rtol=tol, atol=tol)
    empty = (indptr[1:] == indptr[:-1]) & (torch.arange(60) >= 25)
    assert empty.any() and torch.isinf(m[empty]).all() and (s[empty] == 0).all()


@pytest.mark.parametrize("p", [0.0, 0.3])
def test_gradcheck_float64(p: float) -> None:
    indptr, indices = power_law_graph(12, 15, 50, seed=4)
    z, el, er = (t.requires_grad_(True) for t in _inputs(15, 12, 2, 3, seed=1))
    drop = _dropout(15, 12, p) if p else None

    # s and q alone move with m; their ratio (and any merge of partials) does not, which is why
    # backward may hold m constant: check the ratio, on one part and on two merged parts
    def fn(z, el, er):
        _, s, q = local_attention(indptr, indices, z, el, er, n_self=12, dropout=drop)
        return q / s.unsqueeze(2)

    assert torch.autograd.gradcheck(fn, (z, el, er))
    first = torch.cat([indices[indptr[v]:(indptr[v] + indptr[v + 1]) // 2] for v in range(12)])
    second = torch.cat([indices[(indptr[v] + indptr[v + 1]) // 2:indptr[v + 1]] for v in range(12)])
    ptr_a = torch.tensor([0] + [int((indptr[v + 1] - indptr[v]) // 2) for v in range(12)]).cumsum(0)
    ptr_b = torch.tensor([0] + [int(indptr[v + 1] - indptr[v]) - int((indptr[v + 1] - indptr[v]) // 2)
                               for v in range(12)]).cumsum(0)

    def merged(z, el, er):
        a = local_attention(ptr_a, first, z, el, er, n_self=12, dropout=drop)
        b = local_attention(ptr_b, second, z, el, er, n_self=0, dropout=drop)
        return merge(*a, torch.arange(12), *b)

    assert torch.autograd.gradcheck(merged, (z, el, er))
    torch.testing.assert_close(merged(z, el, er), fn(z, el, er))
    # and the normalised output of one process, against the reference's autograd
    out = attend(indptr, indices, z, el, er, dropout=drop)
    _, s_ref, q_ref = ref.local_attention(indptr, indices, z, el, er, n_self=12, dropout=drop)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (z, el, er), grad)
    want = torch.autograd.grad(q_ref / s_ref.unsqueeze(2), (z, el, er), grad)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_partials_of_three_parts_merge_to_the_one_process_attention() -> None:
    """A destination's in-edges dealt to three parts (the self loop on the first only): merging
    the parts' (m, s, q) gives the one-process attention to 1e-5 in float32, and its gradients."""
    indptr, indices = power_law_graph(40, 40, 600, seed=8)
    z, el, er = (t.float().requires_grad_(True) for t in _inputs(40, 40, 4, 6, seed=2))
    drop = _dropout(40, 40)
    full = attend(indptr, indices, z, el, er, dropout=drop)
    lengths = (indptr[1:] - indptr[:-1]).tolist()
    rows = [indices[indptr[v]:indptr[v + 1]] for v in range(40)]
    parts = []
    for k in range(3):  # edge j of every row goes to part j mod 3
        kept = [r[k::3] for r in rows]
        ptr = torch.tensor([0] + [len(r) for r in kept]).cumsum(0)
        parts.append(local_attention(ptr, torch.cat(kept), z, el, er, n_self=40 if k == 0 else 0,
                                     dropout=drop))
    assert max(lengths) >= 6  # some vertex has in-edges on all three parts
    ids = torch.arange(40)
    (m0, s0, q0), rest = parts[0], parts[1:]
    merged = merge(m0, s0, q0, torch.cat([ids, ids]), *(torch.cat(t) for t in zip(*rest)))
    torch.testing.assert_close(merged, full, rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(full)
    for a, b in zip(torch.autograd.grad(merged, (z, el, er), grad),
                    torch.autograd.grad(full, (z, el, er), grad)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_attention_dropout_is_keyed_by_edge_and_head() -> None:
    """The same edge draws the same mask whichever part computes it (its global ids), and another
    epoch draws another."""
    indptr, indices = power_law_graph(30, 30, 300, seed=1)
    z, el, er = _inputs(30, 30, 2, 4)
    a = attend(indptr, indices, z, el, er, dropout=_dropout(30, 30))
    b = attend(indptr, indices, z, el, er, dropout=_dropout(30, 30))
    c = attend(indptr, indices, z, el, er, dropout=_dropout(30, 30, layer=2))
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, c)


def test_bad_shapes_are_refused() -> None:
    indptr, indices = power_law_graph(10, 10, 40, seed=0)
    z, el, er = _inputs(10, 10, 2, 3)
    with pytest.raises(DistgnnError, match="expected z"):
        local_attention(indptr, indices, z, el[:, :1], er)
    with pytest.raises(DistgnnError, match="one dtype"):
        local_attention(indptr, indices, z.float(), el, er)
    with pytest.raises(DistgnnError, match="n_self"):
        local_attention(indptr, indices, z, el, er, n_self=11)


def test_delayed_partial_gradients_travel_free_of_the_max() -> None:
    """cd-r's delayed gradient of a partial (distgnn/exchange/attention_delayed.py) travels as the
    gradient of (log-mass, local output): the same whatever max m the partial was expressed with,
    and mapped back exactly onto the partial it came from."""
    from distgnn.exchange.attention_delayed import extensive_gradient, intensive_gradient

    torch.manual_seed(0)
    H, D, n = 3, 4, 5
    m = torch.randn(n, H, dtype=torch.float64)
    s = torch.rand(n, H, dtype=torch.float64) + 1
    q = torch.randn(n, H, D, dtype=torch.float64)
    own = (torch.randn(n, H, dtype=torch.float64), torch.rand(n, H, dtype=torch.float64) + 1,
           torch.randn(n, H, D, dtype=torch.float64))
    weight = torch.randn(n, H, D, dtype=torch.float64)
    forms = []
    for shift in (0.0, 2.5):  # the same partial, expressed relative to m + shift
        rows = torch.cat([m + shift, s * torch.exp(torch.tensor(-shift)),
                          (q * torch.exp(torch.tensor(-shift))).reshape(n, H * D)], 1).requires_grad_()
        out = merge(*own, torch.arange(n), rows[:, :H], rows[:, H:2 * H], rows[:, 2 * H:].view(n, H, D))
        (out * weight).sum().backward()
        forms.append((rows.detach(), rows.grad))
    (rows0, grad0), (rows1, grad1) = forms
    assert not torch.allclose(grad0, grad1)  # the raw gradients differ by exp(shift)
    torch.testing.assert_close(intensive_gradient(rows0, grad0, H), intensive_gradient(rows1, grad1, H))
    back = extensive_gradient(rows1, intensive_gradient(rows0, grad0, H), H)
    torch.testing.assert_close(back[:, H:], grad1[:, H:])
    assert back[:, :H].abs().max() == 0
