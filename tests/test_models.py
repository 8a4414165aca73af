"""GraphSAGE (distgnn.models) against DGL 1.1.3's SAGEConv: same weights, outputs and gradients."""
from __future__ import annotations

import pytest
import torch

from distgnn import ops
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


@pytest.mark.parametrize("in_dim,out_dim", [(24, 8), (8, 24)])  # linear before / after aggregation
@pytest.mark.parametrize("aggregator", ["mean", "gcn"])
def test_layer_equals_dgl_sageconv(aggregator: str, in_dim: int, out_dim: int) -> None:
    dgl_nn = import_dgl().nn.pytorch
    indptr, indices = power_law_graph(N, N, 1500, seed=in_dim)  # has empty rows
    torch.manual_seed(0)
    ours = SAGELayer(in_dim, out_dim, aggregator).double()
    theirs = dgl_nn.SAGEConv(in_dim, out_dim, aggregator).double()
    with torch.no_grad():  # non-zero biases so they are compared too
        for p in ours.parameters():
            p.uniform_(-1, 1)
    missing = theirs.load_state_dict(ours.state_dict(), strict=True)
    assert not missing.missing_keys and not missing.unexpected_keys
    assert ours.lin_before_mp == (in_dim > out_dim)
    x = torch.randn(N, in_dim, dtype=torch.float64, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    y = ours(x, _agg(indptr, indices, aggregator))
    y_dgl = theirs(_dgl_graph(indptr, indices), x2)
    torch.testing.assert_close(y, y_dgl)
    grad = torch.randn_like(y)
    y.backward(grad)
    y_dgl.backward(grad)
    torch.testing.assert_close(x.grad, x2.grad)
    ours_grads = {k: p.grad for k, p in ours.named_parameters()}
    for k, p in theirs.named_parameters():
        torch.testing.assert_close(ours_grads[k], p.grad, msg=k)


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
