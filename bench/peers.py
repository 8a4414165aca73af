"""distgnn against SAR (IntelLabs/SAR, sequential aggregation and rematerialisation), side by side.

    python -m bench.peers --sar PATH [--dataset synth-reddit] [--scale 0.43] [--mean-degree 20]
                          [--epochs 6] [--repeats 3] [--cores 2] [--check-epochs E]
                          [--exact-epochs 1] [--work DIR] [--out FILE]

PATH is a checkout of https://github.com/IntelLabs/SAR (the folder holding the ``sar`` package;
it is put on ``sys.path`` of the SAR workers, nothing is installed). SAR needs ``ifaddr``
(``pip install --no-deps ifaddr``). Without ``--sar``, or when PATH has no ``sar`` package, the
bench prints one line saying it is skipped and exits 0.

What it measures, on one machine:

1. Fetches the synthetic twin with ``distgnn fetch`` (default ``synth-reddit --scale 0.43
   --mean-degree 20``: about 100K vertices and 2.0M edges, 602 features, 41 classes), exports it
   to a DGL graph (edges src -> dst from the store's CSR by destination; ndata features, labels and
   masks) and partitions it for SAR with DGL's ``partition_graph`` (METIS, one halo hop, balanced
   edges and training vertices, as SAR's example does) at world size 1 and 2, and for distgnn with
   Libra (``distgnn partition --method libra``) at P = 1 and 2.
2. Trains the same model on both: 3-layer GraphSAGE (mean), hidden 256, ReLU and dropout 0.5
   between layers, Adam lr 0.01, loss = cross-entropy summed over the training vertices / their
   count, from **the same initial weights** (``torch.manual_seed(0)`` then
   ``distgnn.models.GraphSAGE``: what ``distgnn train --seed 0`` builds; saved and loaded into the
   SAR workers' DGL ``SAGEConv`` layers, whose parameter names are the same). Same threads:
   world size 1 x ``cores`` threads and world size 2 x ``cores / 2`` threads (``--threads`` and
   ``OMP_NUM_THREADS`` for distgnn; ``torch.set_num_threads`` and ``OMP_NUM_THREADS`` in each SAR
   worker). distgnn runs ``distgnn train --algo cd-0`` under ``mpiexec``; SAR runs one process per
   worker (written in this file, ``--worker`` mode), gloo on 127.0.0.1 only, SAR's defaults
   (sequential rematerialisation on, pipeline depth 1).
3. Each system alone, alternating (ours, ours under ``--precision bf16``, SAR, ... at each world
   size) for ``--repeats`` rounds of ``--epochs`` epochs; SAR runs float32, as it ships. Per
   system and world size: the median of the steady epochs (epoch 1 left out) over all rounds, an
   epoch being the slowest worker's time from zero_grad to the optimiser step (no evaluation);
   the dense seconds of those epochs and the GFLOP/s the linear layers' work gives over them
   (ours: distgnn's dense timer, which also holds ReLU, dropout, the loss and Adam; SAR: its
   ``nn.Linear`` modules' forward and backward, timed by hooks: the narrower span, so the
   comparison leans SAR's way); the peak memory per worker (RSS high-water mark from
   ``getrusage``: distgnn's ``peak_rss_bytes_by_rank``, the SAR workers' own figure; the largest
   over rounds); the ratio SAR epoch / this epoch.
4. Exactness, each printed epoch by epoch (relative loss difference): our cd-0 losses at world
   size 1 against 2 with dropout 0.5 (its keyed dropout masks do not depend on the partition;
   they must agree to 1e-5 over the first ``--exact-epochs`` epochs, else the exit status is 1);
   SAR's losses at world size 1 against 2 with dropout 0 (each SAR worker draws its masks from its
   own generator, so only dropout 0 compares); ours against SAR at world size 1, dropout 0, for
   ``--check-epochs`` epochs (same weights, same model: the two must train the same network).
   With this model the first Adam steps are large (the loss starts above 10) and amplify the
   rounding of different summation orders (Adam's first step moves every weight by about lr
   whatever the size of its gradient, so a gradient near zero takes the sign its rounding gives
   it): both systems' world size 1 vs 2 differences grow from about 1e-7 at epoch 1 to 1e-5 at
   epoch 2 and about 1e-4 by epoch 6 on the default twin (ours 9.9e-8, 2.1e-5, ..., 1.2e-4 with
   dropout 0.5; SAR's 0, 1.5e-5, ..., 1.8e-4 at dropout 0), which is why only epoch 1 is checked
   by default and later epochs are printed.

The load average is printed before and after, with the machine line. The figures are meaningful
only on a quiet machine: the two systems run one after the other, never together.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bench.common import MPI_ENV, Transcript, machine_line, markdown_table, run_logged, work_folder

LAYERS, HIDDEN, LR, AGGREGATOR, SEED = 3, 256, 0.01, "mean", 0
#: the timed systems, in the order each round runs them, and their table labels
SYSTEMS = ("ours", "ours bf16", "SAR")
LABELS = {"ours": "distgnn cd-0 (Libra)", "ours bf16": "distgnn cd-0, --precision bf16 (Libra)",
          "SAR": "SAR (METIS), float32 as it ships"}
#: tolerance of our world size 1 against 2 losses (relative)
OURS_RTOL = 1e-5


# -- small helpers --------------------------------------------------------------------------------
def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as one string."""
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def mib(b: float) -> str:
    """Bytes as MiB, no decimals."""
    return f"{b / 2**20:,.0f}"


def max_rel_diff(a: Sequence[float], b: Sequence[float]) -> float:
    """Largest |a_i - b_i| / |a_i| over the common epochs (dimensionless)."""
    n = min(len(a), len(b))
    x, y = np.asarray(a[:n], dtype=np.float64), np.asarray(b[:n], dtype=np.float64)
    return float(np.max(np.abs(x - y) / np.maximum(np.abs(x), 1e-30))) if n else float("nan")


def steady_median(epoch_s: Sequence[Sequence[float]]) -> float:
    """Median, in seconds, of the epoch times of several runs with each run's epoch 1 left out
    (all epochs when a run has only one)."""
    steady = [t for run in epoch_s for t in (run[1:] if len(run) > 1 else run)]
    return float(np.median(steady))


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the SAR workers' rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, chars: int = 3000) -> str:
    """The last ``chars`` characters of a log file ('' when missing)."""
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def sar_missing(path: str | None) -> str | None:
    """Why the SAR side cannot run (None when it can): no ``--sar``, no ``sar`` package under
    PATH, or SAR's one extra dependency (ifaddr) not importable."""
    if not path:
        return "no --sar PATH given (a checkout of https://github.com/IntelLabs/SAR)"
    if not (Path(path) / "sar" / "__init__.py").is_file():
        return f"{path} holds no sar package (expected {Path(path) / 'sar' / '__init__.py'})"
    import importlib.util

    if importlib.util.find_spec("ifaddr") is None:
        return "SAR imports ifaddr, which is not installed (pip install --no-deps ifaddr)"
    return None


# -- data -----------------------------------------------------------------------------------------
def fetch_twin(python: str, dataset: str, scale: float, mean_degree: float | None, work: Path) -> Path:
    """``distgnn fetch`` the twin under ``work/data``; the path of its ``graph.zarr``."""
    from distgnn.data.fetch import store_path

    graph = store_path(work / "data", dataset, scale, mean_degree=mean_degree)
    if not graph.exists():
        extra = ["--mean-degree", mean_degree] if mean_degree is not None else []
        run_logged(python, "-m", "distgnn", "fetch", dataset, "--root", work / "data", "--scale", scale,
                   *extra, "--quiet", log=work / "fetch.log")
    return graph


def export_dgl(graph: Path):
    """The store as a ``dgl.DGLGraph``: edge u -> v for each u in row v of the CSR by destination;
    ndata ``features`` float32 [N, F], ``labels`` int64 [N], ``train_mask``/``val_mask``/
    ``test_mask`` bool [N] (the names SAR's example looks up)."""
    import dgl
    import zarr

    g = zarr.open_group(str(graph), mode="r")
    indptr, indices = g["indptr"][:], g["indices"][:]
    n = len(indptr) - 1
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    out = dgl.graph((torch.from_numpy(indices.astype(np.int64)), torch.from_numpy(dst)), num_nodes=n)
    out.ndata["features"] = torch.from_numpy(g["feat"][:].astype(np.float32, copy=False))
    out.ndata["labels"] = torch.from_numpy(g["label"][:].astype(np.int64))
    for mask in ("train_mask", "val_mask", "test_mask"):
        out.ndata[mask] = torch.from_numpy(g[mask][:].astype(bool))
    return out


def partition_sar(python: str, graph: Path, world_sizes: Sequence[int], work: Path) -> dict[int, Path]:
    """DGL's METIS partitioning of the exported store into each of ``world_sizes`` parts, under
    ``work/parts/metis-<W>`` (kept when present), in a child process (this file's
    ``--sar-partition`` mode; DGL's progress goes to its log). The JSON file of each, which SAR's
    ``load_dgl_partition_data`` reads, by world size."""
    out = {ws: work / "parts" / f"metis-{ws}" for ws in world_sizes}
    todo = [ws for ws in world_sizes if not (out[ws] / "twin.json").exists()]
    if todo:
        run_logged(python, "-m", "bench.peers", "--sar-partition", graph, work / "parts", *todo,
                   log=work / "partition-metis.log")
    return {ws: folder / "twin.json" for ws, folder in out.items()}


def sar_partition_main(argv: list[str]) -> int:
    """``--sar-partition GRAPH FOLDER W [W ...]``: export GRAPH to DGL and write
    ``FOLDER/metis-<W>`` for each W with ``dgl.distributed.partition_graph`` (METIS, one halo hop,
    balanced edges and training vertices, as SAR's example)."""
    import dgl

    graph, folder, sizes = Path(argv[0]), Path(argv[1]), [int(w) for w in argv[2:]]
    g = export_dgl(graph)
    print(g, flush=True)
    for ws in sizes:
        dgl.distributed.partition_graph(g, "twin", ws, str(folder / f"metis-{ws}"), num_hops=1,
                                        part_method="metis", balance_ntypes=g.ndata["train_mask"],
                                        balance_edges=True)
    return 0


def partition_ours(python: str, graph: Path, parts: int, out: Path, work: Path) -> Path:
    """``distgnn partition --method libra`` into ``parts`` parts under ``out`` (kept when present)."""
    if not (out / f"part_{parts - 1}.zarr").exists():
        run_logged(python, "-m", "distgnn", "partition", graph, "--parts", parts, "--method", "libra",
                   "--out", out, "--quiet", "--force", log=work / f"partition-{out.name}.log")
    return out


# -- the model, both sides ------------------------------------------------------------------------
class SARGraphSAGE(nn.Module):
    """The SAR side's GraphSAGE: ``layers`` DGL ``SAGEConv`` (mean) in ``self.layers``, ReLU then
    dropout before every layer but the first, exactly as ``distgnn.models.GraphSAGE``; its state
    dict names are distgnn's (``layers.{i}.fc_neigh.weight``, ``layers.{i}.fc_self.weight``,
    ``layers.{i}.fc_self.bias``)."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int, dropout: float) -> None:
        super().__init__()
        from dgl.nn import SAGEConv

        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.layers = nn.ModuleList(SAGEConv(dims[i], dims[i + 1], AGGREGATOR) for i in range(layers))
        self.dropout = dropout

    def forward(self, graph, x: torch.Tensor) -> torch.Tensor:
        """x [n_local, in_dim] -> logits [n_local, out_dim] (``graph``: SAR's shard manager)."""
        h = x
        for i, conv in enumerate(self.layers):
            if i > 0:
                h = F.dropout(F.relu(h), self.dropout, self.training)
            h = conv(graph, h)
        return h


def initial_state(in_dim: int, classes: int, path: Path) -> dict[str, tuple[int, ...]]:
    """Save distgnn's initial weights (seed 0: what ``distgnn train --seed 0`` starts from) to
    ``path``; check they load, name for name and shape for shape, into :class:`SARGraphSAGE`.
    Returns the names and shapes."""
    from distgnn.models import GraphSAGE

    torch.manual_seed(SEED)
    state = GraphSAGE(in_dim, HIDDEN, classes, LAYERS, AGGREGATOR, 0.5).state_dict()
    theirs = SARGraphSAGE(in_dim, HIDDEN, classes, LAYERS, 0.5).state_dict()
    ours = {k: tuple(v.shape) for k, v in state.items()}
    if ours != {k: tuple(v.shape) for k, v in theirs.items()}:
        sys.exit(f"state dicts differ: distgnn {ours} against SAGEConv "
                 f"{ {k: tuple(v.shape) for k, v in theirs.items()} }")
    torch.save(state, path)
    return ours


# -- runs -----------------------------------------------------------------------------------------
@dataclass
class Run:
    """One training run: per-epoch global loss and epoch seconds (slowest worker), peak RSS bytes
    per worker."""

    losses: list[float]
    epoch_s: list[float]
    peak_rss_bytes: list[int]
    #: per epoch, the slowest worker's seconds in the linear layers (ours: distgnn's dense
    #: timer, which also holds ReLU, dropout, the loss and Adam; SAR: its nn.Linear modules'
    #: forward and backward, timed by hooks)
    dense_s: list[float]


def run_ours(python: str, partdir: Path, parts: int, threads: int, dropout: float, epochs: int,
             run: Path, precision: str = "fp32") -> Run:
    """``mpiexec -n parts distgnn train partdir --algo cd-0 --precision precision`` with
    ``threads`` threads per rank; exits with the log's tail when it fails."""
    from distgnn.launch.tasks import mpiexec_argv

    # each rank bound to `threads` cores of its own, as `distgnn launch` binds them (Open MPI's
    # default binds a rank of 2 or fewer to ONE core: a 1 x 2 run then computed on one core)
    train = ["distgnn", "train", partdir, "--algo", "cd-0", "--epochs", epochs, "--layers", LAYERS,
             "--hidden", HIDDEN, "--aggregator", AGGREGATOR, "--lr", LR, "--dropout", dropout,
             "--seed", SEED, "--threads", threads, "--eval-every", 0, "--out", run, "--quiet",
             "--skip-memory-check", "--precision", precision]
    cmd = mpiexec_argv([str(c) for c in train], parts, parts * threads, threads)
    log = run.with_suffix(".log")
    run.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        proc = subprocess.run([str(c) for c in cmd], stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, **MPI_ENV, "OMP_NUM_THREADS": str(threads)})
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{tail(log)}")
    records = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines() if l.strip()]
    summary = json.loads((run / "summary.json").read_text())
    if summary["placement"]["oversubscribed"]:
        sys.exit(f"{run}: its ranks shared cores ({summary['placement']}); the timing would mislead")
    return Run([r["loss"] for r in records], [r["epoch_time_s"] for r in records],
               [int(b) for b in summary["peak_rss_bytes_by_rank"]], [r["time_dense_s"] for r in records])


def run_sar(python: str, sar: str, part_json: Path, world_size: int, threads: int, dropout: float,
            epochs: int, init: Path, run: Path) -> Run:
    """``world_size`` SAR worker processes (this file's ``--worker`` mode) on ``part_json``, gloo
    on 127.0.0.1, ``threads`` threads each; exits with a failed worker's log tail."""
    run.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "GLOO_SOCKET_IFNAME": "lo",
           "SAR_SOCKET_NAME": "lo", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    procs, logs = [], []
    for rank in range(world_size):
        cmd = [python, "-m", "bench.peers", "--worker", "--sar", sar, "--part-json", part_json,
               "--rank", rank, "--world-size", world_size, "--port", port, "--threads", threads,
               "--epochs", epochs, "--dropout", dropout, "--init", init, "--out", run / f"rank_{rank}.json"]
        logs.append(run / f"rank_{rank}.log")
        with open(logs[-1], "w") as out:
            procs.append(subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=subprocess.STDOUT,
                                          env=env, cwd=Path(__file__).resolve().parent.parent))
    failed = None
    while any(p.poll() is None for p in procs) and failed is None:
        time.sleep(0.05)
        failed = next((k for k, p in enumerate(procs) if p.poll() not in (None, 0)), None)
    if failed is None:
        failed = next((k for k, p in enumerate(procs) if p.returncode != 0), None)
    if failed is not None:
        for p in procs:  # the workers this function started, one by one
            if p.poll() is None:
                p.kill()
                p.wait()
        sys.exit(f"failed ({procs[failed].returncode}): SAR worker {failed} of {world_size} "
                 f"({run})\n{tail(logs[failed])}")
    results = [json.loads((run / f"rank_{k}.json").read_text()) for k in range(world_size)]
    return Run(results[0]["losses"], results[0]["epoch_s"], [r["peak_rss_bytes"] for r in results],
               results[0]["dense_s"])


# -- the SAR worker -------------------------------------------------------------------------------
class LinearTimer:
    """Seconds spent in the forward and backward of every ``nn.Linear`` of a module (hooks: from
    a module's call to its return, and from its output gradient to its input gradient), summed in
    ``seconds``. The backward of a Linear computes its input and weight gradients in one node, so
    both are inside the hooks' span."""

    def __init__(self, module: nn.Module) -> None:
        self.seconds = 0.0
        self._start: dict[int, float] = {}
        for lin in (m for m in module.modules() if isinstance(m, nn.Linear)):
            lin.register_forward_pre_hook(self._begin)
            lin.register_forward_hook(lambda m, _i, _o: self._end(m))
            lin.register_full_backward_pre_hook(lambda m, _g: self._begin(m, None))
            lin.register_full_backward_hook(lambda m, _gi, _go: self._end(m))

    def _begin(self, module: nn.Module, _inputs) -> None:
        self._start[id(module)] = time.perf_counter()

    def _end(self, module: nn.Module) -> None:
        self.seconds += time.perf_counter() - self._start.pop(id(module))


def worker_main(argv: list[str]) -> int:
    """One SAR worker: load its DGL partition, build SAR's full-graph shard manager, train
    :class:`SARGraphSAGE` from the saved initial weights, write ``--out`` (JSON: per-epoch global
    loss and slowest-worker epoch seconds, this worker's peak RSS bytes)."""
    p = argparse.ArgumentParser(prog="python -m bench.peers --worker")
    p.add_argument("--sar", required=True)
    p.add_argument("--part-json", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--dropout", type=float, required=True)
    p.add_argument("--init", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    sys.path.insert(0, a.sar)
    import torch.distributed as dist

    import sar

    # our own rendezvous on the loopback; SAR then keeps this process group (it sets up its own,
    # on the first non-loopback interface, only when none exists)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank,
                            world_size=a.world_size, timeout=datetime.timedelta(seconds=600))
    sar.initialize_comms(a.rank, a.world_size, "127.0.0.1", "gloo", master_port_number=a.port)
    part = sar.load_dgl_partition_data(a.part_json, a.rank, torch.device("cpu"))
    x = sar.suffix_key_lookup(part.node_features, "features").float()
    labels = sar.suffix_key_lookup(part.node_features, "labels").long()
    train = sar.suffix_key_lookup(part.node_features, "train_mask").bool().nonzero().view(-1)
    graph = sar.construct_full_graph(part)
    del part
    n_train_t = torch.tensor([train.numel()], dtype=torch.long)
    dist.all_reduce(n_train_t, op=dist.ReduceOp.SUM)
    top = torch.tensor([int(labels.max()) + 1], dtype=torch.long)
    dist.all_reduce(top, op=dist.ReduceOp.MAX)
    n_train = int(n_train_t)
    state = torch.load(a.init, weights_only=True)
    classes = int(state[f"layers.{LAYERS - 1}.fc_self.bias"].shape[0])
    if int(top) > classes:
        raise SystemExit(f"labels reach {int(top)} classes but the initial weights have {classes}")
    model = SARGraphSAGE(x.shape[1], HIDDEN, classes, LAYERS, a.dropout)
    model.load_state_dict(state, strict=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    dense = LinearTimer(model)
    model.train()
    losses, epoch_s, dense_s = [], [], []
    for _ in range(a.epochs):
        dist.barrier()
        dense.seconds = 0.0
        start = time.perf_counter()
        optimizer.zero_grad()
        logits = model(graph, x)
        loss = F.cross_entropy(logits[train], labels[train], reduction="sum") / n_train
        loss.backward()
        sar.gather_grads(model)
        total = loss.detach().clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        optimizer.step()
        elapsed = torch.tensor([time.perf_counter() - start, dense.seconds], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        losses.append(float(total))
        epoch_s.append(float(elapsed[0]))
        dense_s.append(float(elapsed[1]))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    Path(a.out).write_text(json.dumps({"rank": a.rank, "losses": losses, "epoch_s": epoch_s,
                                       "dense_s": dense_s,
                                       "peak_rss_bytes": peak, "n_local": int(x.shape[0]),
                                       "n_train_global": n_train}))
    dist.barrier()
    dist.destroy_process_group()
    return 0


# -- the bench ------------------------------------------------------------------------------------
def configs(cores: int) -> list[tuple[int, int]]:
    """(world size, threads per worker): 1 x cores and 2 x cores / 2."""
    return [(1, cores), (2, max(1, cores // 2))]


def timing_rounds(args, python: str, parts_ours: dict[int, Path], parts_sar: dict[int, Path],
                  init: Path, work: Path, say: Callable[[str], None]) -> dict[tuple[str, int], list[Run]]:
    """``--repeats`` rounds; in each, at each world size, ours, ours bf16, then SAR (each alone),
    dropout 0.5. Runs by (system, world size)."""
    runs: dict[tuple[str, int], list[Run]] = {}
    for rnd in range(args.repeats):
        for ws, threads in configs(args.cores):
            for system in SYSTEMS:
                name = f"{system.replace(' ', '-')}-ws{ws}-r{rnd}"
                t0 = time.perf_counter()
                if system.startswith("ours"):
                    r = run_ours(python, parts_ours[ws], ws, threads, 0.5, args.epochs,
                                 work / "runs" / name, "bf16" if system == "ours bf16" else "fp32")
                else:
                    r = run_sar(python, args.sar, parts_sar[ws], ws, threads, 0.5, args.epochs, init,
                                work / "runs" / name)
                runs.setdefault((system, ws), []).append(r)
                say(f"  round {rnd + 1}/{args.repeats} {system} {ws} x {threads}: "
                    f"{time.perf_counter() - t0:.1f} s wall, loss {r.losses[0]:.4f} -> {r.losses[-1]:.4f}")
    return runs


def results_table(runs: dict[tuple[str, int], list[Run]], cores: int, flops: float) -> str:
    """The markdown table: per system and world size the median steady epoch (s), its dense
    seconds and the dense GFLOP/s they give (``flops`` per epoch: the linear layers' work, the
    same on every side), peak MiB per worker (largest over rounds), SAR epoch / this epoch, loss
    epoch 1 -> last (round 1)."""
    rows = []
    for ws, threads in configs(cores):
        sar = steady_median([r.epoch_s for r in runs["SAR", ws]])
        for system in SYSTEMS:
            rs = runs[system, ws]
            med = steady_median([r.epoch_s for r in rs])
            dense = steady_median([r.dense_s for r in rs])
            peaks = np.max(np.array([r.peak_rss_bytes for r in rs]), axis=0)
            rows.append([LABELS[system], f"{ws} x {threads}", f"{med:.3f}", f"{dense:.3f}",
                         f"{flops / dense / 1e9:.0f}", " / ".join(mib(b) for b in peaks),
                         "-" if system == "SAR" else f"{sar / med:.2f}x",
                         f"{rs[0].losses[0]:.4f} -> {rs[0].losses[-1]:.4f}"])
    return markdown_table(["system", "world size x threads", "epoch s (median, steady)",
                           "dense s", "dense GFLOP/s", "peak MiB per worker",
                           "SAR epoch / this epoch", "loss, epoch 1 -> last"], rows)


def exactness(args, python: str, runs: dict[tuple[str, int], list[Run]], parts_ours: dict[int, Path],
              parts_sar: dict[int, Path], init: Path, work: Path, say: Callable[[str], None]) -> bool:
    """Loss agreement checks (see the module docstring), each printed epoch by epoch (relative
    difference). True when ours at world size 1 and 2 agree to :data:`OURS_RTOL` over the first
    ``--exact-epochs`` epochs; later epochs are printed, not checked: the large early Adam steps
    amplify rounding (different summation orders), and SAR's own world size 1 vs 2 run at dropout
    0, printed next, shows how fast."""
    def per_epoch(a: Sequence[float], b: Sequence[float]) -> str:
        return ", ".join(f"{max_rel_diff(a[i:i + 1], b[i:i + 1]):.1e}" for i in range(min(len(a), len(b))))

    a, b = runs["ours", 1][0].losses, runs["ours", 2][0].losses
    first = min(args.exact_epochs, len(a))
    ours = max_rel_diff(a[:first], b[:first])
    ok = ours <= OURS_RTOL
    say(f"ours cd-0, dropout 0.5, world size 1 vs 2: max relative loss difference {ours:.2e} over "
        f"epochs 1-{first} ({'agree' if ok else 'DISAGREE'} to {OURS_RTOL:g}); per epoch: {per_epoch(a, b)}")
    e = args.check_epochs or args.epochs
    (_, t1), (_, t2) = configs(args.cores)
    sar1 = run_sar(python, args.sar, parts_sar[1], 1, t1, 0.0, e, init, work / "runs" / "check-SAR-ws1")
    sar2 = run_sar(python, args.sar, parts_sar[2], 2, t2, 0.0, e, init, work / "runs" / "check-SAR-ws2")
    ours0 = run_ours(python, parts_ours[1], 1, t1, 0.0, e, work / "runs" / "check-ours-ws1")
    say(f"SAR, dropout 0, world size 1 vs 2: max relative loss difference "
        f"{max_rel_diff(sar1.losses, sar2.losses):.2e} over {e} epochs; per epoch: "
        f"{per_epoch(sar1.losses, sar2.losses)}")
    say(f"ours vs SAR, dropout 0, world size 1 (same initial weights): max relative loss difference "
        f"{max_rel_diff(ours0.losses, sar1.losses):.2e} over {e} epochs (epoch 1: "
        f"{ours0.losses[0]:.6f} vs {sar1.losses[0]:.6f}); per epoch: {per_epoch(ours0.losses, sar1.losses)}")
    return ok


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        return worker_main(argv[1:])
    if argv[:1] == ["--sar-partition"]:
        return sar_partition_main(argv[1:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sar", help="SAR checkout (the folder holding the sar package)")
    p.add_argument("--dataset", default="synth-reddit")
    p.add_argument("--scale", type=float, default=0.43)
    p.add_argument("--mean-degree", type=float, default=20.0,
                   help="twin's in-edges per vertex (distgnn fetch --mean-degree; default 20)")
    p.add_argument("--epochs", type=int, default=6, help="epochs per timed run (default 6)")
    p.add_argument("--repeats", type=int, default=3, help="rounds of alternating runs (default 3)")
    p.add_argument("--cores", type=int, default=2,
                   help="threads in all: world size 1 x cores, 2 x cores/2 (default 2)")
    p.add_argument("--check-epochs", type=int, default=None,
                   help="epochs of the dropout-0 exactness runs (default: --epochs)")
    p.add_argument("--exact-epochs", type=int, default=1,
                   help="epochs over which ours at world size 1 and 2 must agree to 1e-5 (default 1)")
    p.add_argument("--work", help="work folder (kept; default: a temporary folder)")
    p.add_argument("--out", help="also append the output to this file")
    args = p.parse_args(argv)
    why = sar_missing(args.sar)
    if why:
        print(f"bench.peers: skipped: {why}")
        return 0
    args.sar = str(Path(args.sar).resolve())
    if min(args.epochs, args.repeats, args.cores, args.exact_epochs, args.check_epochs or 1) < 1:
        p.error("--epochs, --repeats, --cores, --check-epochs and --exact-epochs must be >= 1")
    work = work_folder(args.work, "bench-peers-")
    say = Transcript()

    python = sys.executable
    say(f"`python -m bench.peers {' '.join(argv)}`")
    say(f"machine: {machine_line(args.cores)}")
    say(f"load average before: {load_average()}")
    sar_commit = subprocess.run(["git", "-C", args.sar, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip() or "unknown commit"
    import zarr
    from importlib.metadata import version

    graph = fetch_twin(python, args.dataset, args.scale, args.mean_degree, work)
    attrs = dict(zarr.open_group(str(graph), mode="r").attrs)
    parts_ours = {ws: partition_ours(python, graph, ws, work / "parts" / f"libra-{ws}", work)
                  for ws, _ in configs(args.cores)}
    parts_sar = partition_sar(python, graph, [ws for ws, _ in configs(args.cores)], work)
    init = work / "init.pt"
    names = initial_state(int(attrs["feat_dim"]), int(attrs["num_classes"]), init)
    say(f"**{graph.parent.name}**: {attrs['num_nodes']:,} vertices, {attrs['num_edges']:,} edges, "
        f"{attrs['feat_dim']} features, {attrs['num_classes']} classes; GraphSAGE ({AGGREGATOR}) "
        f"{LAYERS} layers, hidden {HIDDEN}, dropout 0.5, Adam lr {LR}; {args.epochs} epochs x "
        f"{args.repeats} rounds per system and world size, alternating; SAR {sar_commit} "
        f"(DGL {version('dgl')}), distgnn cd-0; initial weights shared, state dict names match "
        f"({len(names)} tensors)")
    runs = timing_rounds(args, python, parts_ours, parts_sar, init, work, say)
    say("")
    from bench.epoch import dense_flops

    dims = [int(attrs["feat_dim"])] + [HIDDEN] * (LAYERS - 1) + [int(attrs["num_classes"])]
    flops = dense_flops(int(attrs["num_nodes"]), dims, AGGREGATOR)
    say(results_table(runs, args.cores, flops))
    say(f"dense GFLOP/s: the linear layers' {flops / 1e9:.0f} GFLOP per epoch (the same on every "
        f"side) over the dense seconds: ours, distgnn's dense timer (the linear layers with ReLU, "
        f"dropout, the loss and Adam); SAR, its nn.Linear modules' forward and backward only (hooks)")
    say("")
    ok = exactness(args, python, runs, parts_ours, parts_sar, init, work, say)
    say(f"load average after: {load_average()}; work folder {work}")
    say.append_to(args.out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
