"""Constant layers: a layer whose input never changes in training (layer 0 reading the stored
features, aggregating before its linear map) keeps its training aggregate once the algorithm can
no longer change it, and later steps return it without the kernel or messages
(docs/design.md#degrees)."""
from __future__ import annotations

import torch


class SettledLayers:
    """The kept training aggregates of the constant ``layers``."""

    def __init__(self, layers: frozenset[int]):
        self.layers = frozenset(layers)
        self._kept: dict[int, torch.Tensor] = {}

    def get(self, layer: int) -> torch.Tensor | None:
        """The kept aggregate of ``layer``, or None while it may still change."""
        return self._kept.get(layer)

    def offer(self, layer: int, out: torch.Tensor, final: bool) -> None:
        """Keep ``out`` for a constant ``layer`` when ``final`` (it can no longer change)."""
        if final and layer in self.layers:
            self._kept[layer] = out.detach()

    def clear(self) -> None:
        """Forget every kept aggregate (a restored state recomputes them)."""
        self._kept = {}
