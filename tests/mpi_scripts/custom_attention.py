"""Run under ``mpiexec -n P``: a user's attention model (two layers, 2 heads, the ``attend``
callable of distgnn/models/base.py; layer 0 hands only z, the output layer also its (h, W)) trained
through distgnn.train_model. argv: PARTDIR OUT ALGO EPOCHS [APPLY]; rank 0 prints the summary's
model name."""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
import zarr
from torch import nn

import distgnn

HEADS, HIDDEN = 2, 4


class TwoHeadAttention(nn.Module):
    norm = "sum"             # attend does the normalising; aggregate is not called
    uses_attention = True

    def __init__(self, in_dim: int, classes: int) -> None:
        super().__init__()
        self.fc = nn.ModuleList([nn.Linear(in_dim, HEADS * HIDDEN, bias=False),
                                 nn.Linear(HEADS * HIDDEN, classes, bias=False)])
        self.scores = nn.ParameterList([nn.Parameter(0.1 * torch.randn(2, HEADS, HIDDEN)),
                                        nn.Parameter(0.1 * torch.randn(2, 1, classes))])

    def forward(self, x, aggregate, dropout=None, attend=None):
        h = x
        for i, (fc, a) in enumerate(zip(self.fc, self.scores)):
            if i > 0:
                h = F.elu(h)
                h = dropout(i, h) if dropout is not None else h
            z = fc(h).view(h.shape[0], a.shape[1], -1)
            el, er = (z * a[0]).sum(-1), (z * a[1]).sum(-1)
            out = attend(i, z, el, er, inputs=(h, fc.weight)) if i else attend(i, z, el, er)
            h = out.flatten(1) if i == 0 else out.mean(1)
        return h


def main() -> None:
    partdir, out, algo, epochs, *apply = sys.argv[1:]
    attrs = zarr.open_group(f"{partdir}/part_0.zarr", mode="r").attrs
    torch.manual_seed(0)
    model = TwoHeadAttention(int(attrs["feat_dim"]), int(attrs["num_classes"]))
    summary = distgnn.train_model(partdir, model, out=out, algo=algo, epochs=int(epochs), lr=0.01,
                                  dropout=0.3, threads=1, eval_every=2,
                                  apply=apply[0] if apply else "auto")
    if summary is not None:
        print("model", summary["model"])


if __name__ == "__main__":
    main()
