"""Adam, the same update as ``torch.optim.Adam`` on CPU (its single-tensor path, L2 weight decay),
without torch.optim's start-up cost.

Why not ``torch.optim.Adam``: constructing it imports ``torch._dynamo`` (torch 2.13), seconds of
CPU that every rank of every training job, prediction and test run would pay before its first
step, P times over on a node of P ranks (bench/README.md, "Start-up: Adam without
torch.optim"). The update below is torch's, operation for operation, so the two agree bit for bit
(tests/test_adam.py checks it against ``torch.optim.Adam`` over many steps, with and without
weight decay).
"""
from __future__ import annotations

from typing import Any, Iterable

import torch

from distgnn.errors import DistgnnError


class Adam:
    """Adam over ``params`` (tensors with ``.grad``): ``step()``, ``zero_grad()``,
    ``state_dict()``/``load_state_dict()`` (step count and both moments, per parameter)."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None:
        self.params = list(params)
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.steps = [0.0] * len(self.params)
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]

    def zero_grad(self, set_to_none: bool = False) -> None:
        for p in self.params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_()
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = self.betas
        for i, param in enumerate(self.params):
            grad = param.grad
            if grad is None:
                continue
            self.steps[i] += 1.0
            step = self.steps[i]
            if self.weight_decay != 0:
                grad = grad.add(param, alpha=self.weight_decay)
            exp_avg, exp_avg_sq = self.exp_avg[i], self.exp_avg_sq[i]
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            bias_correction1 = 1 - beta1 ** step
            bias_correction2 = 1 - beta2 ** step
            step_size = self.lr / bias_correction1
            denom = (exp_avg_sq.sqrt() / bias_correction2 ** 0.5).add_(self.eps)
            param.addcdiv_(exp_avg, denom, value=-step_size)

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "distgnn.Adam", "lr": self.lr, "betas": self.betas, "eps": self.eps,
                "weight_decay": self.weight_decay, "steps": list(self.steps),
                "exp_avg": [t.clone() for t in self.exp_avg],
                "exp_avg_sq": [t.clone() for t in self.exp_avg_sq]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "distgnn.Adam" or len(state["steps"]) != len(self.params):
            raise DistgnnError("the checkpoint's optimizer state is not distgnn's Adam for this "
                               "model (made by an older distgnn?): train into a new --out")
        self.steps = [float(s) for s in state["steps"]]
        for mine, saved in zip(self.exp_avg + self.exp_avg_sq, state["exp_avg"] + state["exp_avg_sq"]):
            mine.copy_(saved)
