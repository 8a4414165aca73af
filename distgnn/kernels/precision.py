"""Opt-in lower precision: ``--precision bf16``.

``fp32`` (the default) changes nothing. ``bf16`` runs each ``nn.Linear`` in bfloat16 through
``torch.autocast("cpu")`` (oneDNN's bf16 GEMM on CPUs with AVX512-BF16 or AMX), and the rows the
aggregation gathers are bfloat16 too (:func:`in_dtype`: the layer input is cast once, the kernel
widens each row exactly and sums in float32, so a sum's error is the rows' rounding only); the
training exchange carries bfloat16 rows (``--message-precision auto``: half the bytes,
counted as sent). Dropout, the loss and the optimizer state stay float32; ReLU and dropout between
layers compute in float32 and keep a bfloat16 layer output in bfloat16 (the next layer would cast
it anyway); a model that ``takes_bf16_input`` gets layer 0's features and input cache in
bfloat16, cast once.
The effect on accuracy is measured by ``bench/precision.py``; it is never counted toward float32
speed targets.
"""
from __future__ import annotations

import contextlib
from typing import Callable, ContextManager

import torch

from distgnn.vocabulary import check_precision

LayerFn = Callable[[int, torch.Tensor], torch.Tensor]


def dense_autocast(precision: str) -> ContextManager[None]:
    """Context for the model's forward pass: bf16 autocast for ``bf16``, nothing for ``fp32``."""
    if check_precision(precision) == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def in_dtype(fn: LayerFn, dtype: torch.dtype) -> LayerFn:
    """``fn(i, h)`` called with h cast to ``dtype`` (autograd casts the gradient back)."""

    def call(i: int, h: torch.Tensor) -> torch.Tensor:
        return fn(i, h if h.dtype == dtype else h.to(dtype))

    return call


def in_float32(fn: LayerFn, keep: tuple[str, ...] = ()) -> LayerFn:
    """``fn(i, h)`` called with h cast to float32 (a no-op for float32 input; autograd casts the
    gradient back); the attributes of ``fn`` named in ``keep`` carried over unchanged."""

    def call(i: int, h: torch.Tensor) -> torch.Tensor:
        return fn(i, h if h.dtype == torch.float32 else h.float())

    for name in keep:
        if hasattr(fn, name):
            setattr(call, name, getattr(fn, name))
    return call
