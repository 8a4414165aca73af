"""Losses and evaluation metrics counted at root replicas (each vertex once)."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def loss_sum(logits: torch.Tensor, labels: torch.Tensor, multilabel: bool) -> torch.Tensor:
    """Summed loss over the given rows: cross-entropy, or BCE summed over tasks (multi-label)."""
    if multilabel:
        return F.binary_cross_entropy_with_logits(logits, labels.float(), reduction="sum") / labels.shape[1]
    return F.cross_entropy(logits, labels, reduction="sum")


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve of one binary task (rank formulation, ties averaged); NaN when a
    class is absent."""
    positives = labels > 0.5
    n_pos, n_neg = int(positives.sum()), int((~positives).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores), dtype=np.float64)
    sorted_scores = scores[order]
    # average ranks over ties
    boundaries = np.flatnonzero(np.diff(sorted_scores)) + 1
    starts = np.concatenate(([0], boundaries))
    ends = np.concatenate((boundaries, [len(scores)]))
    for s, e in zip(starts, ends):
        ranks[order[s:e]] = (s + e + 1) / 2.0
    return float((ranks[positives].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def mean_roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC-AUC averaged over the tasks (columns) that have both classes, as OGB does."""
    values = [roc_auc(scores[:, j], labels[:, j]) for j in range(labels.shape[1])]
    values = [v for v in values if not np.isnan(v)]
    return float(np.mean(values)) if values else float("nan")
