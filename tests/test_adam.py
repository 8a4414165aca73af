"""distgnn's Adam equals torch.optim.Adam bit for bit, and its state round-trips."""
from __future__ import annotations

import pytest
import torch

from distgnn.train.adam import Adam


@pytest.mark.parametrize("weight_decay", [0.0, 5e-4])
def test_adam_equals_torch_bit_for_bit(weight_decay: float) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    twin = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    twin.load_state_dict(model.state_dict())
    ours = Adam(model.parameters(), lr=0.03, weight_decay=weight_decay)
    theirs = torch.optim.Adam(twin.parameters(), lr=0.03, weight_decay=weight_decay)
    x, y = torch.randn(64, 7), torch.randint(0, 3, (64,))
    for _ in range(60):
        for net, opt in ((model, ours), (twin, theirs)):
            opt.zero_grad(set_to_none=False)
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(a, b)


def test_state_round_trip_continues_identically() -> None:
    torch.manual_seed(1)
    w = torch.nn.Parameter(torch.randn(4, 3))

    def run(opt, param, steps):
        for _ in range(steps):
            opt.zero_grad()
            (param ** 2).sum().backward()
            opt.step()

    a = Adam([w], lr=0.1)
    run(a, w, 5)
    saved = a.state_dict()
    w2 = torch.nn.Parameter(w.detach().clone())
    b = Adam([w2], lr=0.1)
    b.load_state_dict(saved)
    run(a, w, 5)
    run(b, w2, 5)
    assert torch.equal(w, w2)
    from distgnn.errors import DistgnnError

    with pytest.raises(DistgnnError):
        b.load_state_dict({"kind": "torch"})
