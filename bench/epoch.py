"""One training epoch (forward, backward, Adam) of 3-layer GraphSAGE: ours against DGL and PyG.

    python -m bench.epoch [--graph R24] [--feat 602] [--classes 41] [--hidden 256] [--threads 2]
                          [--aggregator mean] [--epochs 3] [--rounds 2]

Each library runs in its own process (so peak RSS is its own), with the same graph, features,
labels, threads and hyperparameters. "ours" is what ``distgnn train`` runs by default: layer 0's
neighbour aggregate of the (constant) input features is computed once before the first epoch (its
one-off time is its own column) and layer 0 applies fc_neigh to it, so no epoch aggregates at layer
0; "ours, no input cache" (``--no-input-cache``) aggregates every layer every epoch as DGL and PyG
do; "ours, bf16 dense" is ours with the opt-in bf16 dense work, reported on its own line. Each
process times ``--epochs`` epochs after one warm-up and
keeps the fastest; rounds alternate the libraries and the minimum is kept. An epoch is split into
aggregation (the neighbour aggregation's forward and backward, bracketed by marks in the autograd
graph) and dense work (everything else: linear layers, ReLU, dropout, loss, Adam).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict

import numpy as np
import torch
import torch.nn.functional as F

from bench.common import machine_line, markdown_table

LIBS = ("ours", "ours, no input cache", "DGL 1.1.3", "PyG", "ours, bf16 dense")


class Clock:
    """Seconds spent in aggregation, forward and backward."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.one_off = 0.0   #: seconds spent once before the first epoch (ours: the input cache)
        self._bwd_start = 0.0


class _Mark(torch.autograd.Function):
    """Identity whose backward notes the time: 'out' marks (on the aggregation's output) run just
    before the aggregation's backward, 'in' marks (on its input) just after."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, clock: Clock, kind: str) -> torch.Tensor:
        ctx.clock, ctx.kind = clock, kind
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        now = time.perf_counter()
        if ctx.kind == "out":
            ctx.clock._bwd_start = now
        else:
            ctx.clock.seconds += now - ctx.clock._bwd_start
        return grad, None, None


def timed(clock: Clock, agg: Callable[[torch.Tensor], torch.Tensor], h: torch.Tensor) -> torch.Tensor:
    h = _Mark.apply(h, clock, "in")
    start = time.perf_counter()
    out = agg(h)
    clock.seconds += time.perf_counter() - start
    return _Mark.apply(out, clock, "out")


def build_ours(indptr: torch.Tensor, indices: torch.Tensor, args: argparse.Namespace, clock: Clock,
               precision: str = "fp32", input_cache: bool = True):
    from distgnn import ops
    from distgnn.models import GraphSAGE
    from distgnn.precision import dense_autocast, in_float32

    model = GraphSAGE(args.feat, args.hidden, args.classes, 3, args.aggregator, dropout=0.5)
    n = indptr.numel() - 1
    gids = torch.arange(n)
    state: Dict[str, Any] = {"epoch": 0, "x_aggregate": None}

    def aggregate(i: int, h: torch.Tensor) -> torch.Tensor:
        return timed(clock, lambda t: ops.aggregate(indptr, indices, t, args.aggregator), h)

    def dropout(i: int, h: torch.Tensor) -> torch.Tensor:
        return ops.dropout(h, 0.5, seed=0, epoch=state["epoch"], layer=i, global_ids=gids)

    def forward(x: torch.Tensor) -> torch.Tensor:
        if input_cache and state["x_aggregate"] is None:  # once, as the trainer does at start
            start = time.perf_counter()
            state["x_aggregate"] = ops.aggregate(indptr, indices, x, args.aggregator)
            clock.one_off = time.perf_counter() - start
        state["epoch"] += 1
        if precision == "fp32":
            return model(x, aggregate, dropout, x_aggregate=state["x_aggregate"])
        with dense_autocast(precision):
            return model(x, in_float32(aggregate), in_float32(dropout),
                         x_aggregate=state["x_aggregate"]).float()

    return model, forward


def build_ours_every_epoch(indptr: torch.Tensor, indices: torch.Tensor, args: argparse.Namespace,
                           clock: Clock):
    """Ours aggregating layer 0 every epoch (``--no-input-cache``), like the baselines."""
    return build_ours(indptr, indices, args, clock, input_cache=False)


def build_ours_bf16(indptr: torch.Tensor, indices: torch.Tensor, args: argparse.Namespace, clock: Clock):
    """Ours with the opt-in bf16 dense work (not counted toward the float32 target)."""
    return build_ours(indptr, indices, args, clock, "bf16")


def stacked(layers: torch.nn.ModuleList, x: torch.Tensor,
            call: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """The baselines' forward: the layers in turn, ReLU and dropout 0.5 between them."""
    h = x
    for i, layer in enumerate(layers):
        if i > 0:
            h = F.dropout(F.relu(h), 0.5, True)
        h = call(layer, h)
    return h


def build_dgl(indptr: torch.Tensor, indices: torch.Tensor, args: argparse.Namespace, clock: Clock):
    from distgnn.compat import import_dgl

    dgl = import_dgl()
    n = indptr.numel() - 1
    graph = dgl.graph(("csc", (indptr, indices.long(), torch.empty(0, dtype=torch.int64))), num_nodes=n)
    graph.create_formats_()
    original = graph.update_all

    def update_all(message: Any, reduce: Any, *rest: Any, **kw: Any) -> None:
        src = graph.srcdata["h"]
        graph.srcdata["h"] = _Mark.apply(src, clock, "in")
        start = time.perf_counter()
        original(message, reduce, *rest, **kw)
        clock.seconds += time.perf_counter() - start
        graph.dstdata[reduce.out_field] = _Mark.apply(graph.dstdata[reduce.out_field], clock, "out")

    graph.update_all = update_all
    dims = [args.feat, args.hidden, args.hidden, args.classes]
    layers = torch.nn.ModuleList(dgl.nn.pytorch.SAGEConv(dims[i], dims[i + 1], args.aggregator)
                                 for i in range(3))

    return layers, lambda x: stacked(layers, x, lambda layer, h: layer(graph, h))


def build_pyg(indptr: torch.Tensor, indices: torch.Tensor, args: argparse.Namespace, clock: Clock):
    from torch_geometric.nn import SAGEConv

    n = indptr.numel() - 1
    adj_t = torch.sparse_csr_tensor(indptr, indices.long(), torch.ones(indices.numel()), (n, n))
    dims = [args.feat, args.hidden, args.hidden, args.classes]
    layers = torch.nn.ModuleList(SAGEConv(dims[i], dims[i + 1], aggr=args.aggregator if
                                          args.aggregator == "mean" else "sum") for i in range(3))
    for layer in layers:
        original = layer.message_and_aggregate
        # PyG passes the pair (x_src, x_dst) and aggregates x_src.
        layer.message_and_aggregate = (lambda adj, x, original=original:
                                       timed(clock, lambda t: original(adj, (t, x[1])), x[0]))

    return layers, lambda x: stacked(layers, x, lambda layer, h: layer(h, adj_t))


BUILDERS = {"ours": build_ours, "ours, no input cache": build_ours_every_epoch,
            "DGL 1.1.3": build_dgl, "PyG": build_pyg,
            "ours, bf16 dense": build_ours_bf16}


def run_one(lib: str, data: str, args: argparse.Namespace) -> Dict[str, float]:
    """Warm-up plus ``args.epochs`` epochs of ``lib``; the fastest epoch and this process's peak RSS."""
    torch.set_num_threads(args.threads)
    arrays = np.load(data)
    indptr, indices = torch.from_numpy(arrays["indptr"]), torch.from_numpy(arrays["indices"])
    x = torch.from_numpy(arrays["feat"])
    y = torch.from_numpy(arrays["label"])
    train = torch.from_numpy(arrays["train"])
    torch.manual_seed(0)
    clock = Clock()
    model, forward = BUILDERS[lib](indptr, indices, args, clock)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    best = {"epoch_s": float("inf")}
    for epoch in range(args.epochs + 1):
        clock.seconds = 0.0
        start = time.perf_counter()
        opt.zero_grad()
        logits = forward(x)
        loss = F.cross_entropy(logits[train], y[train])
        loss.backward()
        opt.step()
        t = time.perf_counter() - start
        if epoch > 0 and t < best["epoch_s"]:
            best = {"epoch_s": t, "aggregate_s": clock.seconds, "dense_s": t - clock.seconds,
                    "loss": loss.item(), "one_off_s": clock.one_off}
    best["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="R24")
    parser.add_argument("--feat", type=int, default=602)
    parser.add_argument("--classes", type=int, default=41)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--aggregator", choices=["mean", "gcn"], default="mean")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--libs", nargs="+", default=list(LIBS))
    parser.add_argument("--mem-limit-gb", type=float, default=10.0,
                        help="address-space limit per library process (shared machine)")
    parser.add_argument("--child", nargs=2, metavar=("LIB", "DATA"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_one(args.child[0], args.child[1], args)))
        return

    from bench.graphs import bench_graph

    indptr, indices = bench_graph(args.graph)
    n = len(indptr) - 1
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "graph.npz")
        np.savez(data, indptr=indptr, indices=indices,
                 feat=rng.standard_normal((n, args.feat), dtype=np.float32),
                 label=rng.integers(0, args.classes, n), train=rng.random(n) < 0.66)
        del indptr, indices
        results: Dict[str, Dict[str, float]] = {}
        forwarded = ["--feat", str(args.feat), "--classes", str(args.classes), "--hidden", str(args.hidden),
                     "--aggregator", args.aggregator, "--threads", str(args.threads),
                     "--epochs", str(args.epochs)]
        failed: Dict[str, str] = {}
        limit = int(args.mem_limit_gb * 2 ** 30)

        def set_limit() -> None:  # a child that runs out fails alone (no OOM killer)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        for _ in range(args.rounds):
            for lib in args.libs:
                if lib in failed:
                    continue
                out = subprocess.run([sys.executable, "-m", "bench.epoch", *forwarded, "--child", lib, data],
                                     capture_output=True, text=True, preexec_fn=set_limit)
                if out.returncode != 0:
                    failed[lib] = (out.stderr.strip().splitlines() or ["?"])[-1][:80]
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                if lib not in results or r["epoch_s"] < results[lib]["epoch_s"]:
                    results[lib] = {**r, "peak_rss_gb": max(r["peak_rss_gb"],
                                                            results.get(lib, {}).get("peak_rss_gb", 0))}
    print(f"Machine: {machine_line(args.threads)}")
    print(f"3-layer GraphSAGE ({args.aggregator}), hidden {args.hidden}, {args.graph} with {args.feat} "
          f"random features and {args.classes} classes, float32, Adam; fastest of {args.epochs} epochs "
          f"x {args.rounds} rounds\n")
    base = results.get("DGL 1.1.3", {}).get("epoch_s")
    rows = []
    for lib, r in results.items():
        rows.append([lib, f"{r['epoch_s']:.2f}", f"{base / r['epoch_s']:.2f}x" if base else "-",
                     f"{r['aggregate_s']:.2f}", f"{r['dense_s']:.2f}", f"{r['peak_rss_gb']:.2f}",
                     f"{r['one_off_s']:.2f}" if r.get("one_off_s") else "-"])
    for lib, why in failed.items():
        rows.append([lib, f"failed: {why}", "-", "-", "-", "-", "-"])
    print(markdown_table(["model", "epoch s", "vs DGL", "aggregation s", "dense s", "peak RSS GB",
                          "once before epoch 1, s"], rows))
    if "ours, bf16 dense" in results:
        print("\n'ours, bf16 dense' is the opt-in --precision bf16 (linear layers in bfloat16): reported "
              "apart, not counted toward the float32 target; its accuracy effect: bench/precision.py")


if __name__ == "__main__":
    main()
