"""One training step and one evaluation, on a rank's context (:class:`RankContext`).

A step: forward over the rows the dense work runs on with the algorithm's aggregation, loss
summed over this rank's root training vertices divided by the global training count, backward,
gradients summed over ranks (one allreduce), Adam. Evaluation: the exact aggregation, no dropout,
metrics counted at roots (docs/design.md#evaluation).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from distgnn.kernels import ops
from distgnn.kernels.precision import dense_autocast, in_dtype, in_float32
from distgnn.train.adam import Adam
from distgnn.train.context import RankContext
from distgnn.train.metrics import loss_sum, mean_roc_auc

LayerFn = Callable[[int, torch.Tensor], torch.Tensor]


def keyed_dropout(ctx: RankContext, epoch: int) -> LayerFn:
    """The model's ``dropout(layer, h)`` for a training epoch: masks keyed by (seed, epoch, layer,
    global id, column), so every replica of a vertex draws the same one."""
    p, seed, gids = ctx.config.dropout, ctx.config.seed, ctx.part.local_to_global
    if ctx.train_rows is not None:
        gids = gids.index_select(0, ctx.train_rows)

    def apply(layer: int, h: torch.Tensor) -> torch.Tensor:
        # h holds the first rows of the part (its roots under apply-at-root, or all), or under
        # --cdr-rule recompute the first of ctx.train_rows (the roots, then recomputed leaves)
        return ops.dropout(h, p, seed, epoch, layer, gids[:h.shape[0]], training=True,
                           threads=ctx.config.threads)

    def after_relu(layer: int, h: torch.Tensor) -> torch.Tensor:
        """apply(layer, relu(h)) in one pass (the built-in layer stack's ReLU then dropout)."""
        if p == 0.0 or h.dtype not in (torch.float32, torch.float64, torch.bfloat16):
            return apply(layer, torch.relu(h))
        return ops.relu_dropout(h, p, seed, epoch, layer, gids[:h.shape[0]], threads=ctx.config.threads)

    apply.after_relu = after_relu  # type: ignore[attr-defined]
    return apply


def attend(ctx: RankContext, epoch: int | None) -> Callable[..., torch.Tensor]:
    """GAT's ``attend(layer, z, el, er, inputs=None)`` (distgnn/models/base.py): the
    aggregation's attention, with the keyed attention dropout in a training epoch (None:
    evaluation, no dropout). Under --precision bf16 the layer's maps ran in bfloat16 and the
    attention itself runs in float32 (its softmax sums exponentials of unlike size): z, el, er and
    the inputs are widened on the way in, outside the dense work's autocast."""
    from distgnn.kernels.attention import AttentionDropout

    p, seed, gids = ctx.config.dropout, ctx.config.seed, ctx.part.local_to_global
    widen = ctx.config.precision != "fp32"

    def call(layer: int, z: torch.Tensor, el: torch.Tensor, er: torch.Tensor,
             inputs: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        drop = None
        if epoch is not None and p > 0:
            drop = AttentionDropout(p, seed, epoch, layer, gids, gids)
        if not widen:
            return ctx.aggregation.attention(layer, z, el, er, drop, inputs)
        z, el, er = z.float(), el.float(), er.float()
        inputs = None if inputs is None else (inputs[0].float(), inputs[1].float())
        with torch.autocast("cpu", enabled=False):
            return ctx.aggregation.attention(layer, z, el, er, drop, inputs)
    return call


def forward(ctx: RankContext, dropout: LayerFn | None, epoch: int | None = None) -> torch.Tensor:
    """Logits [rows, classes] in float32 (dense work in bf16 under --precision bf16);
    ``epoch``: the training epoch (None: evaluation)."""
    precision = ctx.config.precision
    aggregate = in_dtype(ctx.aggregation, torch.bfloat16) if precision == "bf16" else ctx.aggregation
    if dropout is not None and precision != "fp32":
        # dropout alone runs in float32; ReLU then dropout (the layer stack's fused pass) keeps a
        # bfloat16 layer output in bfloat16 for the next layer's maps and aggregation
        dropout = in_float32(dropout, keep=("after_relu",))
    cached, x = ctx.input_aggregate, ctx.x
    if ctx.aggregation.training and not ctx.exchange.trains_on_input_cache(ctx.comm.size):
        cached = None
    if ctx.aggregation.training and ctx.train_rows is not None:
        cached, x = ctx.train_input_aggregate, ctx.train_x
    with dense_autocast(precision):
        # a user's model that never takes the input cache need not accept the keyword
        extra = {} if cached is None else {"x_aggregate": cached}
        if getattr(ctx.model, "uses_attention", False):
            extra["attend"] = attend(ctx, epoch)
        logits = ctx.model(x, aggregate, dropout, **extra)
    return logits.float()


def train_step(ctx: RankContext, optimizer: Adam, epoch: int, train_ids: torch.Tensor,
               global_train_count: int) -> float:
    """One epoch's step; returns the loss summed over ranks (the same on every rank)."""
    ctx.model.train()
    ctx.aggregation.train()
    ctx.comm.start_epoch(epoch)  # the epoch's rounding streams (docs/design.md#message-precision)
    optimizer.zero_grad(set_to_none=False)
    logits = forward(ctx, keyed_dropout(ctx, epoch), epoch)
    loss = loss_sum(logits[train_ids], ctx.part.label[train_ids], ctx.multilabel) / global_train_count
    loss.backward()
    with ctx.timers("allreduce"):
        grads = [p.grad for p in ctx.model.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads])
        ctx.comm.allreduce_sum_(flat, "gradients")
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
        total_loss = ctx.comm.sum(float(loss.detach()))
    optimizer.step()
    return total_loss


@torch.no_grad()
def infer(ctx: RankContext) -> torch.Tensor:
    """Logits [rows, classes] of the current model with the exact aggregation and no dropout;
    the model is left in training mode."""
    ctx.model.eval()
    ctx.aggregation.eval()
    try:
        return forward(ctx, None)
    finally:
        ctx.model.train()
        ctx.aggregation.train()


@torch.no_grad()
def evaluate(ctx: RankContext) -> dict[str, float]:
    """Exact distributed evaluation (cd-0 aggregation, no dropout): accuracy, or mean ROC-AUC for
    multi-label, of train, val and test at the roots."""
    logits = infer(ctx)
    comm, out = ctx.eval_comm, {}
    for name, key in (("train", "train_mask"), ("val", "val_mask"), ("test", "test_mask")):
        ids = torch.nonzero(ctx.part.masks[key][:ctx.rows]).flatten()
        if ctx.multilabel:
            gathered = comm.gather((logits[ids].numpy(), ctx.part.label[ids].numpy()))
            value = None
            if comm.rank == 0:
                scores = np.concatenate([g[0] for g in gathered])
                labels = np.concatenate([g[1] for g in gathered])
                value = mean_roc_auc(scores, labels) if len(labels) else float("nan")
            out[name] = comm.bcast(value)
        else:
            correct = int((logits[ids].argmax(1) == ctx.part.label[ids]).sum())
            total = comm.sum(len(ids))
            out[name] = comm.sum(correct) / total if total else float("nan")
    return out
