"""Native graph ops (distgnn.kernels.ops) against their plain torch references (ops_reference)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from distgnn import _native
from distgnn.kernels import ops
import ops_reference as ref
from distgnn.errors import DistgnnError


def power_law_graph(n_dst: int, n_src: int, num_edges: int, seed: int,
                    index_dtype: torch.dtype = torch.int32) -> tuple[torch.Tensor, torch.Tensor]:
    """A CSR by destination with heavy-tailed in- and out-degrees, about a fifth of the rows empty
    and some sources never used (isolated), rows unsorted."""
    rng = np.random.default_rng(seed)
    w_dst = rng.pareto(1.2, n_dst) + 1e-3
    w_dst[rng.random(n_dst) < 0.2] = 0.0
    w_src = rng.pareto(1.2, n_src) + 1e-3
    w_src[rng.random(n_src) < 0.1] = 0.0
    dst = rng.choice(n_dst, num_edges, p=w_dst / w_dst.sum())
    src = rng.choice(n_src, num_edges, p=w_src / w_src.sum())
    order = np.argsort(dst, kind="stable")
    indptr = np.zeros(n_dst + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n_dst), out=indptr[1:])
    return torch.from_numpy(indptr), torch.from_numpy(src[order]).to(index_dtype)


@pytest.fixture(params=ops.supported_isas())
def isa(request):
    """Every instruction set the kernels can run with on this host, in turn (DISTGNN_ISA)."""
    assert ops.set_isa(request.param) in (request.param, "native")
    yield request.param
    ops.set_isa("host")


def test_openmp_enabled() -> None:
    assert _native.openmp_enabled()
    assert _native.aggregate_isa() in ("avx512", "avx2", "base", "native")


def test_isa_override_and_refusals() -> None:
    """Names above the host, or unknown, are refused in one line (also from DISTGNN_ISA, by the
    CLI: exit 2); 'host' restores the host's own."""
    import os
    import subprocess
    import sys

    assert ops.supported_isas("base") == ("base",) and ops.supported_isas("avx512") == ops.ISAS
    host = _native.aggregate_host_isa()
    for bad in ["sse4", *[i for i in ops.ISAS if i not in ops.supported_isas()]]:
        with pytest.raises(DistgnnError, match=f"this host runs up to {host}"):
            ops.set_isa(bad)
        assert _native.aggregate_isa() == host
    env = {**os.environ, "DISTGNN_ISA": "avx1024"}
    proc = subprocess.run([sys.executable, "-m", "distgnn", "train", "/nonexistent", "--quiet"],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "DISTGNN_ISA" in proc.stderr
    env["DISTGNN_ISA"] = "base"
    proc = subprocess.run([sys.executable, "-c", "from distgnn import _native; from distgnn.kernels import ops; "
                           "print(_native.aggregate_isa())"], env=env, capture_output=True, text=True)
    assert proc.stdout.strip() in ("base", "native")


@pytest.mark.parametrize("norm", ["sum", "mean", "gcn", "sym"])
def test_gradcheck_float64(norm: str, isa: str) -> None:
    indptr, indices = power_law_graph(12, 15, 60, seed=1)
    x = torch.randn(15, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: ops.aggregate(indptr, indices, t, norm), (x,))
    degree = torch.randint(0, 9, (12,))  # a "global" degree unrelated to the local rows
    assert torch.autograd.gradcheck(lambda t: ops.aggregate(indptr, indices, t, norm, degree=degree), (x,))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("F", [1, 7, 33, 41, 256, 300])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("norm", ["sum", "mean", "gcn", "sym"])
def test_aggregate_matches_reference(norm: str, index_dtype: torch.dtype, F: int, threads: int,
                                     isa: str) -> None:
    indptr, indices = power_law_graph(300, 400, 6000, seed=F + threads, index_dtype=index_dtype)
    x = torch.randn(400, F, requires_grad=True)
    y = ops.aggregate(indptr, indices, x, norm, threads=threads)
    assert y.shape == (300, F) and y.dtype == torch.float32
    grad = torch.randn_like(y)
    (gx,) = torch.autograd.grad(y, x, grad)
    # Exact references in float64; float32 error is bounded relative to the sum of |terms| (n eps, n up to ~1000).
    x64 = x.detach().double().requires_grad_(True)
    y64 = ref.aggregate(indptr, indices, x64, norm)
    (g64,) = torch.autograd.grad(y64, x64, grad.double())
    xa = x64.detach().abs().requires_grad_(True)
    ya = ref.aggregate(indptr, indices, xa, norm)
    (ga,) = torch.autograd.grad(ya, xa, grad.double().abs())
    assert ((y.double() - y64).abs() <= 1e-4 * ya + 1e-6).all()
    assert ((gx.double() - g64).abs() <= 1e-4 * ga + 1e-6).all()


@pytest.mark.parametrize("norm", ["mean", "gcn"])
def test_global_degree_and_stored_transpose(norm: str) -> None:
    indptr, indices = power_law_graph(200, 250, 3000, seed=5)
    degree = (indptr[1:] - indptr[:-1]) + torch.randint(0, 4, (200,))
    t_indptr = torch.empty(251, dtype=torch.int64)
    t_indices = torch.empty_like(indices)
    _native.csr_transpose(indptr, indices, 250, t_indptr, t_indices)
    x = torch.randn(250, 17, dtype=torch.float64, requires_grad=True)
    y = ops.aggregate(indptr, indices, x, norm, degree=degree, transpose=(t_indptr, t_indices))
    (gx,) = torch.autograd.grad(y, x, torch.ones_like(y))
    x2 = x.detach().clone().requires_grad_(True)
    y_ref = ref.aggregate(indptr, indices, x2, norm, degree=degree)
    (g_ref,) = torch.autograd.grad(y_ref, x2, torch.ones_like(y_ref))
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(gx, g_ref)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("tiles", [1, 3, 200])
@pytest.mark.parametrize("block", [8, 48, 256])
@pytest.mark.parametrize("chunk_edges", [1, 50])
def test_tuning_options_and_hub_rows(block: int, chunk_edges: int, tiles: int, weighted: bool,
                                     isa: str) -> None:
    """Column blocks (narrowest, masked-width, widest), hub rows cut into many pieces
    (chunk_edges 1: a piece per edge; 50: hubs and packed rows), prefetch on, source tiles (rows
    sorted) including more tiles than sources, with and without a per-row weight."""
    indptr, indices = power_law_graph(150, 150, 5000, seed=block)
    for v in range(150):  # sort rows
        indices[indptr[v]:indptr[v + 1]] = indices[indptr[v]:indptr[v + 1]].sort().values
    assert ops.rows_sorted(indptr, indices)
    x = torch.randn(150, 70, dtype=torch.float64)
    s = torch.rand(150, dtype=torch.float64)
    w = torch.rand(150, dtype=torch.float64) + 0.5 if weighted else None
    y = ops.spmm(indptr, indices, x, s, x[:100], 2, sorted=True, weight=w, chunk_edges=chunk_edges,
                 block=block, prefetch=3, tiles=tiles)
    torch.testing.assert_close(y, ref.weighted_sum(indptr, indices, x, s, w, 100), rtol=1e-4, atol=1e-4)


def test_rows_sorted() -> None:
    indptr = torch.tensor([0, 2, 2, 4], dtype=torch.int64)
    assert ops.rows_sorted(indptr, torch.tensor([1, 5, 0, 3], dtype=torch.int32))
    assert not ops.rows_sorted(indptr, torch.tensor([1, 5, 3, 0], dtype=torch.int32))


def test_empty_graph_and_no_edges() -> None:
    x = torch.randn(4, 5, requires_grad=True)
    indptr = torch.zeros(4, dtype=torch.int64)
    indices = torch.zeros(0, dtype=torch.int32)
    y = ops.aggregate(indptr, indices, x, "gcn")
    torch.testing.assert_close(y, x[:3].detach())
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.tensor([1.0, 1, 1, 0])[:, None].expand(4, 5))
    empty = ops.aggregate(torch.zeros(1, dtype=torch.int64), indices, x, "mean")
    assert empty.shape == (0, 5)


def test_bad_inputs_raise_one_line_errors() -> None:
    indptr, indices = power_law_graph(10, 10, 50, seed=0)
    x = torch.randn(10, 4)
    with pytest.raises(DistgnnError, match="norm"):
        ops.aggregate(indptr, indices, x, "max")
    with pytest.raises(DistgnnError, match="rows"):
        ops.aggregate(indptr, indices, x[:5], "sum")
    with pytest.raises(DistgnnError, match="indptr"):
        ops.aggregate(indptr.to(torch.int32), indices, x)
    with pytest.raises(DistgnnError, match="degree"):
        ops.aggregate(indptr, indices, x, "mean", degree=torch.ones(3))
    with pytest.raises(DistgnnError, match="gcn"):
        ops.aggregate(indptr[:1].clone() if False else torch.tensor([0, 0, 0], dtype=torch.int64),
                      torch.zeros(0, dtype=torch.int32), torch.randn(1, 4), "gcn")
    with pytest.raises(TypeError):  # the native layer refuses mixed dtypes instead of copying
        _native.aggregate_spmm(indptr, indices, x, torch.empty(10, 4, dtype=torch.float64))


def test_transpose_cache_is_reused() -> None:
    indptr, indices = power_law_graph(30, 30, 200, seed=3)
    x = torch.randn(30, 4, requires_grad=True)
    ops.aggregate(indptr, indices, x, "mean").sum().backward()
    graph = ops.native_graph(indptr, indices, 1)
    assert 30 in graph._transposes and graph._transposes[30].sorted
    first = graph._transposes[30]
    ops.aggregate(indptr, indices, x, "mean").sum().backward()
    assert ops.native_graph(indptr, indices, 1)._transposes[30] is first


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gather_and_scatter_add_rows(dtype: torch.dtype) -> None:
    x = torch.randn(50, 33, dtype=dtype)
    rows = torch.tensor([3, 7, 3, 49, 0, 7, 7], dtype=torch.int64)
    torch.testing.assert_close(ops.gather_rows(x, rows, threads=2), ref.gather_rows(x, rows))
    src = torch.randn(7, 33, dtype=dtype)
    y = torch.randn(50, 33, dtype=dtype)
    expect = ref.scatter_add_rows(y.clone(), rows, src)
    torch.testing.assert_close(ops.scatter_add_rows(y, rows.to(torch.int32), src, threads=2), expect)
    with pytest.raises(ValueError):
        ops.gather_rows(x, torch.tensor([50]))


def test_dropout_matches_reference_and_keys(isa) -> None:
    gids = torch.arange(1000, 3000, dtype=torch.int64)
    mask = ops.dropout_mask(64, 0.3, seed=7, epoch=2, layer=1, global_ids=gids)
    torch.testing.assert_close(mask, ref.dropout_mask(64, 0.3, 7, 2, 1, gids), rtol=0, atol=0)
    keep = (mask > 0).double().mean().item()
    assert abs(keep - 0.7) < 0.01  # 128,000 draws: the standard error is 0.0013
    torch.testing.assert_close(mask[mask > 0], torch.full_like(mask[mask > 0], 1 / 0.7))
    # equal keys -> equal masks (also for a replica of a vertex at another position, int32 ids)
    again = ops.dropout_mask(64, 0.3, 7, 2, 1, gids.flip(0).to(torch.int32))
    torch.testing.assert_close(again, mask.flip(0), rtol=0, atol=0)
    for other in [(8, 2, 1), (7, 3, 1), (7, 2, 2)]:
        different = ops.dropout_mask(64, 0.3, *other, global_ids=gids)
        assert (different != mask).float().mean() > 0.3
    assert not torch.equal(mask[0], mask[1])  # vertices differ
    assert not torch.equal(mask[:, 0], mask[:, 1])  # columns differ


@pytest.mark.parametrize("width", [1, 37, 256])
def test_dropout_is_the_same_bits_on_every_instruction_set(isa, width: int) -> None:
    """The vectorised column loops (AVX-512, AVX2) draw the reference's masks exactly, float32
    and float64, widths that do not fill a vector, 63-bit ids."""
    gids = torch.randint(0, 2**62, (300,))
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(300, width, dtype=dtype)
        torch.testing.assert_close(ops.dropout(x, 0.4, 3, 5, 2, gids), ref.dropout(x, 0.4, 3, 5, 2, gids),
                                   rtol=0, atol=0)
        torch.testing.assert_close(ops.dropout_mask(width, 0.4, 3, 5, 2, gids, dtype=dtype),
                                   ref.dropout_mask(width, 0.4, 3, 5, 2, gids, dtype), rtol=0, atol=0)


@pytest.mark.parametrize("width", [7, 256])
def test_relu_dropout_is_relu_then_dropout_bit_for_bit(isa, width: int) -> None:
    """One pass for ReLU then the keyed dropout: the values of the two ops in turn exactly, on
    every instruction set; its gradient (read from the output, no mask drawn) equals theirs."""
    gids = torch.randint(0, 2**40, (200,))
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(200, width, dtype=dtype, requires_grad=True)
        fused = ops.relu_dropout(x, 0.3, 4, 6, 1, gids)
        plain = ops.dropout(torch.relu(x), 0.3, 4, 6, 1, gids)
        torch.testing.assert_close(fused, plain, rtol=0, atol=0)
        torch.testing.assert_close(fused, ref.dropout(torch.relu(x), 0.3, 4, 6, 1, gids), rtol=0, atol=0)
        g = torch.randn_like(x)
        (got,) = torch.autograd.grad(fused, x, g)
        (want,) = torch.autograd.grad(plain, x, g)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    x = torch.randn(30, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: ops.relu_dropout(t, 0.5, 1, 0, 3, gids[:30]), (x,))
    nan = torch.tensor([[float("nan"), -1.0, 2.0]]).repeat(40, 1)
    out = ops.relu_dropout(nan, 0.0001, 0, 0, 0, torch.arange(40))
    assert torch.isnan(out[:, 0]).all() and (out[:, 1] == 0).all()  # ReLU keeps NaN, as torch's
    assert torch.count_nonzero(ops.relu_dropout(torch.ones(4, 4), 1.0, 0, 0, 0, torch.arange(4))) == 0
    with pytest.raises(DistgnnError, match="p must lie"):
        ops.relu_dropout(x, 0.0, 1, 0, 3, gids[:30])


@pytest.mark.parametrize("width", [7, 256])
def test_relu_dropout_of_bf16_rows_is_the_float32_pass_cast_to_bf16(isa, width: int) -> None:
    """bfloat16 rows (--precision bf16's layer outputs): the float32 computation of ReLU then the
    keyed dropout, rounded to bfloat16 as torch rounds (nearest even, a NaN stays NaN), on every
    instruction set; the gradient likewise, the float32 one (from the float32 output) rounded."""
    gids = torch.randint(0, 2**40, (300,))
    x = torch.randn(300, width).to(torch.bfloat16)
    x[0, 0], x[1, 0], x[2, 0] = float("nan"), float("inf"), -float("inf")
    x[3] = 3e38  # rounding a scaled value past bfloat16's largest gives an infinity
    x = x.requires_grad_()
    fused = ops.relu_dropout(x, 0.3, 4, 6, 1, gids)
    wide = ref.dropout(torch.relu(x.detach().float()), 0.3, 4, 6, 1, gids)
    assert fused.dtype == torch.bfloat16
    nan = torch.isnan(wide)  # (torch's own casts give NaN as 0xffff or 0x7fc0: any quiet NaN)
    assert torch.equal(torch.isnan(fused.detach()), nan) and nan[0, 0]
    torch.testing.assert_close(fused.detach().view(torch.int16)[~nan],
                               wide.to(torch.bfloat16).view(torch.int16)[~nan], rtol=0, atol=0)
    assert fused[3].isinf().any()
    g = torch.randn(300, width).to(torch.bfloat16)
    (got,) = torch.autograd.grad(fused, x, g)
    scale = torch.tensor(1 / (1 - round(0.3 * 2**24) / 2**24), dtype=torch.float32)
    want = torch.where(wide > 0, g.float() * scale, 0.0).to(torch.bfloat16)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.view(torch.int16), want.view(torch.int16), rtol=0, atol=0)


def test_the_layer_stack_takes_relu_and_dropout_in_one_pass_with_the_same_training() -> None:
    """GraphSAGE's forward with a dropout that offers ``after_relu`` (the trainer's keyed one)
    uses it, and its logits and gradients equal the two-op path's exactly."""
    from distgnn.models.sage import GraphSAGE

    torch.manual_seed(0)
    model = GraphSAGE(12, 16, 5, layers=3, dropout=0.5)
    x, gids = torch.randn(50, 12), torch.arange(50)
    aggregate = lambda i, h: 0.5 * h + 0.5 * h.roll(1, 0)  # noqa: E731  (any differentiable map)
    calls = []

    def plain(i, h):
        return ops.dropout(h, 0.5, 9, 2, i, gids)

    def with_fusion(i, h):
        return ops.dropout(h, 0.5, 9, 2, i, gids)

    def after_relu(i, h):
        calls.append(i)
        return ops.relu_dropout(h, 0.5, 9, 2, i, gids)

    with_fusion.after_relu = after_relu
    outputs = []
    for dropout in (plain, with_fusion):
        model.zero_grad()
        out = model(x, aggregate, dropout)
        out.square().sum().backward()
        outputs.append((out.detach(), [p.grad.clone() for p in model.parameters()]))
    assert calls == [1, 2]
    torch.testing.assert_close(outputs[0][0], outputs[1][0], rtol=0, atol=0)
    for a, b in zip(outputs[0][1], outputs[1][1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_dropout_forward_backward(isa) -> None:
    gids = torch.randint(0, 10**9, (40,))
    x = torch.randn(40, 9, dtype=torch.float64, requires_grad=True)
    y = ops.dropout(x, 0.5, 1, 0, 3, gids)
    torch.testing.assert_close(y, ref.dropout(x, 0.5, 1, 0, 3, gids))
    assert torch.autograd.gradcheck(lambda t: ops.dropout(t, 0.5, 1, 0, 3, gids), (x,))
    assert ops.dropout(x, 0.5, 1, 0, 3, gids, training=False) is x
    assert torch.count_nonzero(ops.dropout(x, 1.0, 1, 0, 3, gids)) == 0
    with pytest.raises(DistgnnError, match="global_ids"):
        ops.dropout(x, 0.5, 1, 0, 3, gids[:3])


@pytest.mark.parametrize("F", [7, 41, 64, 256])
@pytest.mark.parametrize("norm", ["sum", "mean", "gcn", "sym"])
def test_bf16_rows_sum_in_float32(norm: str, F: int, isa: str) -> None:
    """bfloat16 rows: the result is float32 and equals the float64 reference over the same
    (bfloat16-rounded) rows to float32 rounding, since the kernel widens exactly and sums in
    float32; backward gathers bfloat16 gradient rows, so it matches the reference to bfloat16
    rounding of the gradient (2**-8 relative)."""
    indptr, indices = power_law_graph(300, 400, 6000, seed=F)
    x = torch.randn(400, F).to(torch.bfloat16).requires_grad_(True)
    y = ops.aggregate(indptr, indices, x, norm)
    assert y.dtype == torch.float32 and y.shape == (300, F)
    grad = torch.randn_like(y)
    (gx,) = torch.autograd.grad(y, x, grad)
    assert gx.dtype == torch.bfloat16
    x64 = x.detach().double().requires_grad_(True)
    y64 = ref.aggregate(indptr, indices, x64, norm)
    (g64,) = torch.autograd.grad(y64, x64, grad.double())
    ya = ref.aggregate(indptr, indices, x64.detach().abs(), norm)
    assert ((y.double() - y64).abs() <= 1e-5 * ya + 1e-6).all()
    xa = x64.detach().abs().requires_grad_(True)
    (ga,) = torch.autograd.grad(ref.aggregate(indptr, indices, xa, norm), xa, grad.double().abs())
    assert ((gx.double() - g64).abs() <= 2 ** -7 * ga + 1e-6).all()
    # the float32 rows of the same values give the same forward result to rounding
    y32 = ops.aggregate(indptr, indices, x.detach().float(), norm)
    torch.testing.assert_close(y, y32, rtol=1e-5, atol=1e-5)


def test_chunk_plan_is_built_once_and_a_stale_one_refused() -> None:
    """The kernel's chunk plan is cached with the graph (one per thread count, also for the
    transpose), gives the result of a plan built per call, and a plan of another CSR is refused."""
    indptr, indices = power_law_graph(200, 200, 4000, seed=8)
    x = torch.randn(200, 24, requires_grad=True)
    y = ops.aggregate(indptr, indices, x, "mean", threads=2)
    y.sum().backward()
    graph = ops.native_graph(indptr, indices, 2)
    plan = graph.plan(2)
    assert plan.dtype == torch.int64 and plan.shape[1] == 5 and graph.plan(2) is plan
    assert 2 in graph._transposes[200]._plans
    assert int(plan[-1, 1]) == 200 and int(plan[0, 0]) == 0
    torch.testing.assert_close(y, ops.spmm(indptr, indices, x.detach(), ops.row_scale(
        "mean", graph.local_degree, torch.float32), None, 2))
    hubs = torch.from_numpy(_native.aggregate_plan(indptr, 2, chunk_edges=3))
    assert (hubs[:, 4] >= 0).any()  # hub pieces, numbered in order
    torch.testing.assert_close(ops.spmm(indptr, indices, x.detach(), None, None, 2, plan=hubs),
                               ref.weighted_sum(indptr, indices, x.detach()), rtol=1e-5, atol=1e-5)
    other, _ = power_law_graph(200, 200, 4000, seed=9)
    for stale in (torch.from_numpy(_native.aggregate_plan(other, 2)), plan[:-1], plan[:, :4].contiguous()):
        with pytest.raises(ValueError, match="plan"):
            ops.spmm(indptr, indices, x.detach(), None, None, 2, plan=stale)


@pytest.mark.parametrize("norm", ["mean", "gcn", "sym"])
def test_self_rows_and_fused_scaling_gradcheck(norm: str, isa: str) -> None:
    """The degree scaling (and the self term on the first self_rows rows only, a part's roots;
    sym: each source row's weight from a global out-degree) inside the kernel, forward and
    backward (the transpose with the scale and the weight swapped)."""
    indptr, indices = power_law_graph(14, 18, 70, seed=2)
    x = torch.randn(18, 5, dtype=torch.float64, requires_grad=True)
    degree = torch.randint(0, 9, (14,))
    src_degree = torch.randint(0, 9, (18,)) if norm == "sym" else None
    for k in (0, 6, 14):
        fn = lambda t: ops.aggregate(indptr, indices, t, norm, degree=degree, self_rows=k,  # noqa: E731
                                     src_degree=src_degree)
        assert torch.autograd.gradcheck(fn, (x,))
        torch.testing.assert_close(fn(x), ref.aggregate(indptr, indices, x, norm, degree, self_rows=k,
                                                        src_degree=src_degree))
    with pytest.raises(DistgnnError, match="self_rows"):
        ops.aggregate(indptr, indices, x, "gcn", self_rows=15)


def test_weighted_sum_matches_reference_for_each_row_type(isa: str) -> None:
    """weighted_sum (the distributed aggregation's building block) in float32, float64 and over
    bfloat16 rows (float32 result), against the reference."""
    indptr, indices = power_law_graph(300, 400, 6000, seed=4)
    scale, weight = torch.rand(300) + 0.1, torch.rand(400) + 0.1
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5), (torch.bfloat16, 1e-5)):
        x = torch.randn(400, 41).to(dtype)
        s = scale.to(torch.float64) if dtype == torch.float64 else scale
        w = weight.to(torch.float64) if dtype == torch.float64 else weight
        y = ops.weighted_sum(indptr, indices, x, s, w, self_rows=250)
        expect = ref.weighted_sum(indptr, indices, x.double(), s.double(), w.double(), 250)
        assert y.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
        # rounding is relative to the sum of magnitudes (a sum that cancels keeps its terms' error)
        magnitude = ref.weighted_sum(indptr, indices, x.double().abs(), s.double(), w.double(), 250)
        assert ((y.double() - expect).abs() <= tol * magnitude + tol).all()
    with pytest.raises(DistgnnError, match="self_rows"):
        ops.weighted_sum(indptr, indices, torch.randn(400, 4), self_rows=301)
