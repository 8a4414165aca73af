"""The built-in models (distgnn.models) against DGL 1.1.3's SAGEConv, GraphConv and GINConv: same
weights, outputs and gradients."""
from __future__ import annotations

import pytest
import torch

from distgnn.kernels import ops
from distgnn.compat import import_dgl
from distgnn.models import GraphSAGE, SAGELayer
from test_ops import power_law_graph

N = 120


def _dgl_graph(indptr: torch.Tensor, indices: torch.Tensor):
    dgl = import_dgl()
    dst = torch.repeat_interleave(torch.arange(N), indptr[1:] - indptr[:-1])
    return dgl.graph((indices.long(), dst), num_nodes=N)


def _agg(indptr: torch.Tensor, indices: torch.Tensor, norm: str):
    return lambda h: ops.aggregate(indptr, indices, h, norm)


def _copy_uniform(module: torch.nn.Module) -> None:
    with torch.no_grad():  # non-zero biases and eps so they are compared too
        for p in module.parameters():
            p.uniform_(-1, 1)


def _compare_layer(ours: torch.nn.Module, theirs: torch.nn.Module, g, aggregate, in_dim: int) -> None:
    """Same state dict, outputs, input gradient and parameter gradients (float64)."""
    missing = theirs.load_state_dict(ours.state_dict(), strict=True)
    assert not missing.missing_keys and not missing.unexpected_keys
    x = torch.randn(N, in_dim, dtype=torch.float64, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    y, y_dgl = ours(x, aggregate), theirs(g, x2)
    torch.testing.assert_close(y, y_dgl)
    grad = torch.randn_like(y)
    y.backward(grad)
    y_dgl.backward(grad)
    torch.testing.assert_close(x.grad, x2.grad)
    ours_grads = {k: p.grad for k, p in ours.named_parameters()}
    for k, p in theirs.named_parameters():
        torch.testing.assert_close(ours_grads[k], p.grad, msg=k)


@pytest.mark.parametrize("in_dim,out_dim", [(24, 8), (8, 24)])  # linear before / after aggregation
@pytest.mark.parametrize("aggregator", ["mean", "gcn"])
def test_layer_equals_dgl_sageconv(aggregator: str, in_dim: int, out_dim: int) -> None:
    dgl_nn = import_dgl().nn.pytorch
    indptr, indices = power_law_graph(N, N, 1500, seed=in_dim)  # has empty rows
    torch.manual_seed(0)
    ours = SAGELayer(in_dim, out_dim, aggregator).double()
    theirs = dgl_nn.SAGEConv(in_dim, out_dim, aggregator).double()
    _copy_uniform(ours)
    assert ours.lin_before_mp == (in_dim > out_dim)
    _compare_layer(ours, theirs, _dgl_graph(indptr, indices), _agg(indptr, indices, aggregator), in_dim)


@pytest.mark.parametrize("aggregator", ["mean", "gcn"])
def test_model_equals_stack_of_sageconv(aggregator: str) -> None:
    dgl_nn = import_dgl().nn.pytorch
    indptr, indices = power_law_graph(N, N, 1500, seed=9)
    torch.manual_seed(1)
    model = GraphSAGE(30, 16, 5, layers=3, aggregator=aggregator, dropout=0.5).eval()
    convs = [dgl_nn.SAGEConv(a, b, aggregator) for a, b in [(30, 16), (16, 16), (16, 5)]]
    for i, conv in enumerate(convs):
        conv.load_state_dict({k[len(f"layers.{i}."):]: v for k, v in model.state_dict().items()
                              if k.startswith(f"layers.{i}.")})
    x = torch.randn(N, 30)
    g = _dgl_graph(indptr, indices)
    h = x
    for i, conv in enumerate(convs):
        h = conv(g, torch.relu(h) if i > 0 else h)
    y = model(x, lambda i, t: ops.aggregate(indptr, indices, t, aggregator))
    torch.testing.assert_close(y, h, rtol=1e-4, atol=1e-5)
    assert sorted(model.state_dict()) == sorted(
        f"layers.{i}.{k}" for i in range(3) for k in (
            ["fc_neigh.weight", "fc_self.weight", "fc_self.bias"] if aggregator == "mean"
            else ["fc_neigh.weight", "bias"]))


def test_dropout_callable_between_layers() -> None:
    indptr, indices = power_law_graph(N, N, 800, seed=2)
    model = GraphSAGE(6, 8, 3, layers=3, aggregator="mean", dropout=0.5).train()
    seen: list[tuple[int, tuple[int, ...]]] = []

    def drop(i: int, h: torch.Tensor) -> torch.Tensor:
        seen.append((i, tuple(h.shape)))
        return ops.dropout(h, 0.5, seed=3, epoch=0, layer=i, global_ids=torch.arange(h.shape[0]))

    y = model(torch.randn(N, 6), lambda i, t: ops.aggregate(indptr, indices, t, "mean"), drop)
    y.sum().backward()
    assert seen == [(1, (N, 8)), (2, (N, 8))]
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("in_dim", [30, 10])  # layer 0 linear before / after aggregation
@pytest.mark.parametrize("aggregator", ["mean", "gcn"])
def test_precomputed_input_aggregate_gives_the_same_model(aggregator: str, in_dim: int) -> None:
    """Layer 0 fed with aggregate(0, x) computed beforehand: same logits and parameter gradients,
    and layer 0's aggregation is not called."""
    indptr, indices = power_law_graph(N, N, 1500, seed=4)  # has empty rows
    torch.manual_seed(2)
    model = GraphSAGE(in_dim, 16, 5, layers=3, aggregator=aggregator, dropout=0.0).double()
    x = torch.randn(N, in_dim, dtype=torch.float64)
    calls: list[int] = []

    def aggregate(i: int, t: torch.Tensor) -> torch.Tensor:
        calls.append(i)
        return ops.aggregate(indptr, indices, t, aggregator)

    y = model(x, aggregate)
    y.square().sum().backward()
    plain = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad()
    assert calls == [0, 1, 2]
    calls.clear()
    cached = ops.aggregate(indptr, indices, x, aggregator)
    y_cached = model(x, aggregate, x_aggregate=cached)
    y_cached.square().sum().backward()
    assert calls == [1, 2]
    torch.testing.assert_close(y_cached, y)
    for k, p in model.named_parameters():
        torch.testing.assert_close(p.grad, plain[k], msg=k)
    with pytest.raises(Exception, match="constant input"):
        model(x.clone().requires_grad_(True), aggregate, x_aggregate=cached)


@pytest.mark.parametrize("in_dim,out_dim", [(24, 8), (8, 24)])  # linear before / after aggregation
def test_gcn_layer_equals_dgl_graphconv_with_self_loops(in_dim: int, out_dim: int) -> None:
    """D^-1/2 (A + I) D^-1/2 h W + b against GraphConv(norm="both") on add_self_loop(g): the
    graph is directed (in- and out-degrees differ) and has vertices without in- or out-edges."""
    dgl = import_dgl()
    from distgnn.models import GCNLayer

    indptr, indices = power_law_graph(N, N, 1500, seed=in_dim + 1)
    torch.manual_seed(0)
    ours = GCNLayer(in_dim, out_dim).double()
    theirs = dgl.nn.pytorch.GraphConv(in_dim, out_dim, norm="both").double()
    _copy_uniform(ours)
    g = dgl.add_self_loop(_dgl_graph(indptr, indices))
    _compare_layer(ours, theirs, g, _agg(indptr, indices, "sym"), in_dim)


def test_gin_layer_equals_dgl_ginconv() -> None:
    dgl = import_dgl()
    from distgnn.models import GINLayer

    indptr, indices = power_law_graph(N, N, 1500, seed=3)
    torch.manual_seed(0)
    ours = GINLayer(12, 5, 9).double()
    mlp = torch.nn.Sequential(torch.nn.Linear(12, 9), torch.nn.ReLU(), torch.nn.Linear(9, 5))
    theirs = dgl.nn.pytorch.GINConv(mlp, "sum", init_eps=0.0, learn_eps=True).double()
    _copy_uniform(ours)
    _compare_layer(ours, theirs, _dgl_graph(indptr, indices), _agg(indptr, indices, "sum"), 12)


@pytest.mark.parametrize("name", ["gcn", "gin"])
def test_gcn_and_gin_models_equal_stacks_of_dgl_layers(name: str) -> None:
    """Three layers with ReLU between, each loading the model's layer state one-to-one; the
    cached input aggregate gives the same logits (the trainer's input cache)."""
    dgl = import_dgl()
    dgl_nn = dgl.nn.pytorch
    from distgnn.models import build_model

    indptr, indices = power_law_graph(N, N, 1500, seed=11)
    torch.manual_seed(1)
    model = build_model(name, 30, 16, 5, layers=3, dropout=0.5).eval()
    norm = {"gcn": "sym", "gin": "sum"}[name]
    assert model.norm == norm and model.aggregates_input_first == (name == "gin")
    g = _dgl_graph(indptr, indices)
    if name == "gcn":
        convs = [dgl_nn.GraphConv(a, b, norm="both") for a, b in [(30, 16), (16, 16), (16, 5)]]
        g = dgl.add_self_loop(g)
    else:
        convs = [dgl_nn.GINConv(torch.nn.Sequential(torch.nn.Linear(a, 16), torch.nn.ReLU(),
                                                    torch.nn.Linear(16, b)), "sum", learn_eps=True)
                 for a, b in [(30, 16), (16, 16), (16, 5)]]
    for i, conv in enumerate(convs):
        conv.load_state_dict({k[len(f"layers.{i}."):]: v for k, v in model.state_dict().items()
                              if k.startswith(f"layers.{i}.")})
    x = torch.randn(N, 30)
    h = x
    for i, conv in enumerate(convs):
        h = conv(g, torch.relu(h) if i > 0 else h)
    aggregate = lambda i, t: ops.aggregate(indptr, indices, t, norm)  # noqa: E731
    y = model(x, aggregate)
    torch.testing.assert_close(y, h, rtol=1e-4, atol=1e-5)
    cached = model(x, aggregate, x_aggregate=ops.aggregate(indptr, indices, x, norm))
    torch.testing.assert_close(cached, y, rtol=1e-5, atol=1e-6)


def _attend(indptr: torch.Tensor, indices: torch.Tensor):
    from distgnn.kernels.attention import attend

    return lambda i, z, el, er, inputs=None: attend(indptr, indices, z, el, er)


@pytest.mark.parametrize("heads", [1, 4])
def test_gat_layer_equals_dgl_gatconv_with_self_loops(heads: int) -> None:
    dgl = import_dgl()
    from distgnn.models.gat import GATLayer

    indptr, indices = power_law_graph(N, N, 1500, seed=heads)
    torch.manual_seed(0)
    ours = GATLayer(12, 5, heads).double()
    theirs = dgl.nn.pytorch.GATConv(12, 5, heads).double()
    _copy_uniform(ours)
    g = dgl.add_self_loop(_dgl_graph(indptr, indices))
    attend = _attend(indptr, indices)
    _compare_layer(ours, theirs, g, lambda z, el, er, **kw: attend(0, z, el, er, **kw), 12)


def test_gat_model_equals_a_stack_of_gatconv() -> None:
    """Two hidden layers of 4 heads concatenated with ELU, one output head; eval mode."""
    dgl = import_dgl()
    from distgnn.models import build_model

    indptr, indices = power_law_graph(N, N, 1500, seed=5)
    torch.manual_seed(3)
    model = build_model("gat", 20, 6, 5, layers=3, heads=4, dropout=0.6).eval()
    dims = [(20, 6, 4), (24, 6, 4), (24, 5, 1)]
    convs = [dgl.nn.pytorch.GATConv(a, b, h) for a, b, h in dims]
    for i, conv in enumerate(convs):
        conv.load_state_dict({k[len(f"layers.{i}."):]: v for k, v in model.state_dict().items()
                              if k.startswith(f"layers.{i}.")})
    g = dgl.add_self_loop(_dgl_graph(indptr, indices))
    x = torch.randn(N, 20)
    h = x
    for i, conv in enumerate(convs):
        out = conv(g, h)
        h = torch.nn.functional.elu(out.flatten(1)) if i < 2 else out.mean(1)
    y = model(x, attend=_attend(indptr, indices))
    torch.testing.assert_close(y, h, rtol=1e-4, atol=1e-5)


def test_sage_adds_its_two_maps_as_plus_does_in_either_precision() -> None:
    """The self and neighbour maps are added into the self map's own output (no new tensor): the
    same bits as `+` in float32, and under bf16 autocast a float32 neighbour sum still promotes
    the result to float32 (added in place into a bfloat16 tensor it would be rounded)."""
    from distgnn.models.base import first_rows
    from distgnn.models.sage import SAGELayer

    torch.manual_seed(0)
    layer = SAGELayer(24, 16, "mean")
    h = torch.randn(50, 24)
    # any map of the rows to 30 destinations, summed in float32 as the kernel sums bfloat16 rows
    aggregate = lambda t: t[:30].float() * 0.5 + t[20:50].float() * 0.25
    for autocast in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            got = layer(h, aggregate)
            h_neigh = aggregate(layer.fc_neigh(h))
            want = layer.fc_self(first_rows(h, 30)) + h_neigh
        assert got.dtype == want.dtype == torch.float32
        assert torch.equal(got, want)


def test_gcn_keeps_a_bf16_output_under_autocast_and_float32_bits_without() -> None:
    """GCN's affine map: under bf16 autocast the bias joins the GEMM and the layer's output stays
    bfloat16 (the next layer takes it as it is), close to float32's; without autocast it is
    ``a @ W + b`` bit for bit (cd-0's equality with one process rests on it)."""
    from distgnn.models.gcn import GCNLayer

    torch.manual_seed(0)
    layer = GCNLayer(16, 8)
    torch.nn.init.uniform_(layer.bias)
    a = torch.randn(30, 16)
    plain = layer(a, lambda h: h, h_aggregate=a)
    assert plain.dtype == torch.float32 and torch.equal(plain, a @ layer.weight + layer.bias)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = layer(a, lambda h: h, h_aggregate=a)
        low_aggregated = layer(a, lambda h: h)   # 16 -> 8 maps first: aggregate(a W) + b, float32
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low.float(), plain, rtol=2e-2, atol=2e-2)
    assert low_aggregated.dtype == torch.float32
