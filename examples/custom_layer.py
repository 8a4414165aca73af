"""A user's own GNN layer trained distributed by distgnn (docs/design.md#own-model).

    distgnn fetch synth-reddit --scale 0.002 --root data
    distgnn partition data/synth-reddit-x0.002/graph.zarr --parts 2 --out parts
    mpiexec -n 2 python examples/custom_layer.py parts --out runs/gated --epochs 20

The layer is a gated GraphSAGE variant: out = W_self h_v + g_v * W_neigh mean_{u in N(v)} h_u,
with a per-vertex gate g_v = sigmoid(a . h_v) learned from the vertex's own row. The model never
sees MPI or the partition: distgnn hands it ``aggregate(layer, h)`` (here the neighbour mean,
exact across parts under cd-0) and a keyed ``dropout(layer, h)``.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

import distgnn


class GatedSAGELayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.fc_self = nn.Linear(in_dim, out_dim)
        self.fc_neigh = nn.Linear(in_dim, out_dim, bias=False)
        self.gate = nn.Linear(in_dim, 1)

    def forward(self, h: torch.Tensor, aggregate) -> torch.Tensor:
        neigh = aggregate(h)                  # [n_dst, in_dim]: destinations are h's first rows
        own = h[: neigh.shape[0]]
        return self.fc_self(own) + torch.sigmoid(self.gate(own)) * self.fc_neigh(neigh)


class GatedSAGE(nn.Module):
    norm = "mean"                   # what every aggregate(layer, h) call computes
    aggregates_input_first = True   # layer 0 aggregates x itself: no broadcast of the features

    def __init__(self, in_dim: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([GatedSAGELayer(in_dim, hidden), GatedSAGELayer(hidden, classes)])

    def forward(self, x, aggregate, dropout=None):
        h = x
        for i, layer in enumerate(self.layers):
            if i > 0:
                h = F.relu(h)
                h = dropout(i, h) if dropout is not None else F.dropout(h, 0.5, self.training)
            h = layer(h, lambda t, i=i: aggregate(i, t))
        return h


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("partdir")
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=32)
    args = parser.parse_args()

    import zarr

    attrs = zarr.open_group(f"{args.partdir}/part_0.zarr", mode="r").attrs
    torch.manual_seed(0)
    model = GatedSAGE(int(attrs["feat_dim"]), args.hidden, int(attrs["num_classes"]))
    summary = distgnn.train_model(args.partdir, model, out=args.out, epochs=args.epochs,
                                  algo="cd-0", lr=0.01, dropout=0.5, threads=1, eval_every=5)
    if summary is not None:  # rank 0
        print(f"{args.out}: best val {summary['best_val']:.4f}, "
              f"test at best val {summary['test_at_best_val']:.4f}")


if __name__ == "__main__":
    main()
