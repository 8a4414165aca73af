"""Per-rank memory estimate of a training run, from the partition's attributes and the model shape.

``estimate_rank_memory(partdir, k, layers, hidden, algo)`` is the figure the launcher checks before
starting ``distgnn train`` (it reads only attributes: no array is loaded). Components, in bytes:

* ``baseline``: the interpreter with torch, mpi4py, zarr and the native module imported
  (:data:`DEFAULT_BASELINE_BYTES`, or :func:`measure_baseline` on the machine at hand:
  ``distgnn scaling-model estimate-memory --measure-baseline``, ``bench/full_size.py``);
* ``runtime``: what a rank holds beyond its imports before any graph-sized tensor (thread pools,
  lazily loaded kernels, MPI's segments): :data:`RUNTIME_OVERHEAD_BYTES`, or :func:`fit_runtime`
  measured from a run on a graph too small to matter, where the other components are near zero;
* ``features``: feat float32 [n_k, F], labels, masks, and (``input_cache``) layer 0's aggregate
  of feat, float32 [n_k, F], and for 0c and cd-r at P > 1 with layer 0 aggregating first their
  own kept layer-0 aggregate, one more [n_k, F];
* ``graph``: CSR and its transpose (int64 indptr, int32 indices), ids, degrees, communication plans;
  under apply-at-root at P > 1 a second CSR and transpose over the compact tables (cd-0: and its
  overlap blocks, a third), with their
  row ids and position maps (docs/design.md#compact-rows);
* ``activations``: tensors autograd keeps between forward and backward (ReLU output and dropout
  output of every hidden layer, the logits) plus the working set of the widest layer (its local
  aggregate, exchanged total, scaled mean, both linear outputs and, in backward, their gradients);
* ``exchange``: cd-0's send/receive rows of one aggregation; for cd-r, every layer's remote part R
  [n_k, w] and the payloads in flight (r steps of leaf->root and root->leaf rows); GAT's cd-r
  tables ([z, el] and er copies, the leaves' delivered partials) are about as large;
* ``optimizer``: parameters, gradients, the flat all-reduce buffer and Adam's two moments.

Under apply-at-root (``apply`` resolving to ``root``) the dense rows are the part's roots: the input
cache, the saved activations and the widest layer's working set count n_roots rows, while the
features count all n_k rows. The kernel's source table and partials (compact: n_src and n_dst
rows) live only inside one aggregation and do not raise the peak: counting them overestimates the
root mode's peak. GAT
keeps an n_k-row working set (its partials m, s, q are as wide as its rows).

Calibrated against measured ``peak_rss_bytes`` (``bench/full_size.py`` prints the ratio; the fits
and their figures: bench/README.md, "Memory estimate calibration"); the constants below name the
counts of [n_k, width] float32 tensors they stand for.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from distgnn.errors import DistgnnError
from distgnn.exchange.spec import ExchangeSpec
from distgnn.host_memory import cgroup_memory_left, memory_budget, slurm_memory_bytes  # noqa: F401 (re-exported)
from distgnn.models import registry
from distgnn.models.registry import DEFAULT_MODEL
from distgnn.vocabulary import parse_algorithm, resolve_apply

#: RSS of ``python -c "import torch, mpi4py.MPI, zarr, distgnn._native, distgnn.train.trainer"``
#: as measure_baseline() found it on the development machine (bench/README.md, "Memory estimate
#: calibration"); the checks of ``launch`` and ``train`` use it; ``estimate-memory
#: --measure-baseline`` measures it here.
DEFAULT_BASELINE_BYTES = 241 * 2**20
#: What a rank holds beyond its imports before any graph-sized tensor (torch's and OpenMP's
#: thread pools, lazily loaded kernels, MPI's shared-memory segments): the intercept of measured
#: peak RSS against graph size (bench/README.md, "Memory estimate calibration").
RUNTIME_OVERHEAD_BYTES = 90 * 2**20
#: [n_k, w] float32 tensors autograd keeps per hidden layer: ReLU output, dropout output.
SAVED_PER_HIDDEN_LAYER = 2
#: [n_k, w] tensors alive at once inside the widest layer beyond the saved ones (in forward the
#: local aggregate and the scaled mean; in backward the gradient and its transpose aggregate), in
#: units of the layer's width; fitted as the slope of measured peak RSS against n_k (P = 1).
WORKING_SET_TENSORS = 2
#: Allocator slack: freed blocks below glibc's mmap threshold, torch's per-op temporaries.
SLACK = 1.10


@dataclass
class MemoryEstimate:
    """One rank's estimated peak resident memory, by component (bytes)."""

    k: int
    baseline: int
    features: int
    graph: int
    activations: int
    exchange: int
    optimizer: int
    runtime: int = RUNTIME_OVERHEAD_BYTES

    @property
    def body(self) -> int:
        """The graph- and model-sized components (bytes, before :data:`SLACK`)."""
        return self.features + self.graph + self.activations + self.exchange + self.optimizer

    @property
    def total(self) -> int:
        return int(self.baseline + self.runtime + SLACK * self.body)

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "total": self.total}


@dataclass
class PartShape:
    """The figures of one part the estimate needs (all from ``part_<k>.zarr`` attributes)."""

    n: int              #: local vertices n_k (roots and leaves)
    m: int              #: local edges m_k
    feat_dim: int
    num_classes: int
    multilabel: bool
    num_parts: int
    num_leaves: int     #: leaf replicas on this part (rows this rank sends to roots)
    num_split: int      #: split vertices with a replica here (leaves + split roots)
    num_roots: int = 0  #: roots on this part (the dense rows under apply-at-root)


def _algo_delay(algo: str) -> tuple[bool, int]:
    """(exchanges at all, delay r) of an algorithm name."""
    a = parse_algorithm(algo)
    return bool(a.exchange), int(a.delay)


def layer_widths(feat_dim: int, hidden: int, num_classes: int, layers: int,
                 model: str = DEFAULT_MODEL, **options: Any) -> list[tuple[int, int, int]]:
    """(in, out, aggregation width) per layer of ``model`` (its registered widths; ``options``:
    its own, e.g. ``heads``; a user's ``custom:`` model counts as GraphSAGE)."""
    return registry.shape_spec(model).layer_widths(feat_dim, hidden, num_classes, layers, **options)


def num_parameters(feat_dim: int, hidden: int, num_classes: int, layers: int,
                   model: str = DEFAULT_MODEL, **options: Any) -> int:
    """Parameter count of ``model`` (its registered count; a user's model counts as GraphSAGE)."""
    return registry.shape_spec(model).num_parameters(feat_dim, hidden, num_classes, layers, **options)


def estimate_shape(shape: PartShape, layers: int, hidden: int, algo: str | ExchangeSpec, k: int = 0,
                   baseline: int = DEFAULT_BASELINE_BYTES, input_cache: bool = True,
                   apply: str = "auto", model: str = DEFAULT_MODEL,
                   runtime: int = RUNTIME_OVERHEAD_BYTES, recompute: float = 0.0,
                   **options: Any) -> MemoryEstimate:
    """The estimate for a part given by its figures (pure arithmetic; see the module docstring;
    ``baseline`` and ``runtime`` in bytes; ``options``: the model's own, e.g. ``heads``).
    ``algo``: the run's :class:`~distgnn.exchange.spec.ExchangeSpec` (what a run checks: its apply
    mode, input cache and recompute budget are used), or an algorithm name with ``input_cache``,
    ``apply`` and ``recompute`` (leaf rows per root a recompute rule runs layer 0 on, ``inf`` for
    all) given apart."""
    f32, i64, i32 = 4, 8, 4
    n, m = shape.n, shape.m
    spec = registry.shape_spec(model)
    held = False   # a rule holding its delayed gradients: [n_k, w] more per summed layer
    if isinstance(algo, ExchangeSpec):
        input_cache = algo.input_cache and spec.input_cache
        apply, recompute = algo.apply, algo.recompute_budget or 0.0
        held = algo.cdr_at_root and algo.delayed_gradients and algo.rule.hold_gradients
        algo = algo.algorithm.name
    algorithm = parse_algorithm(algo)
    at_root = resolve_apply(apply, algorithm) == "root"
    dense = shape.num_roots if at_root and shape.num_roots else n   # rows of the dense work
    exchanges, delay = _algo_delay(algo)
    widths = spec.layer_widths(shape.feat_dim, hidden, shape.num_classes, layers, **options)
    label = n * shape.num_classes * f32 if shape.multilabel else n * i64
    kept = input_cache and not at_root and algorithm.keeps_own_input_aggregate(
        shape.num_parts, widths[0][2] == widths[0][0])
    features = (n + dense * (int(input_cache) + int(kept))) * shape.feat_dim * f32 + label + 4 * n
    plans = 2 * shape.num_leaves * i64 if shape.num_parts > 1 else 0
    graph = 2 * (n + 1) * i64 + 2 * m * i32 + 2 * n * i64 + 2 * n * f32 + plans
    if at_root and shape.num_parts > 1:
        # the compact tables' CSR and transpose and their position maps (an upper bound: where
        # every row has both kinds of edges they share the stored arrays)
        graph += 2 * (n + 1) * i64 + 2 * m * i32 + 4 * n * i64
        if delay == 0 and exchanges:
            # cd-0's overlap blocks: every edge once more, forward and transpose, with their
            # row pointers and scales (docs/design.md#overlap)
            graph += 4 * (n + 2) * i64 + 2 * m * i32 + 2 * n * f32
    saved = (sum(SAVED_PER_HIDDEN_LAYER * o for _, o, _ in widths[:-1]) + 2 * shape.num_classes
             + spec.extra_activations(widths, hidden))
    working = max(WORKING_SET_TENSORS * max(a, o) for _, o, a in widths)
    working_rows = n if spec.local_working_set else dense
    activations = (dense * saved + working_rows * working) * f32
    if recompute > 0 and at_root and shape.num_parts > 1:
        # the recomputed leaves' features, input aggregate and layer-0 output (an upper bound)
        extra = min(recompute * shape.num_roots, shape.num_leaves)
        features += extra * 2 * shape.feat_dim * f32
        activations += extra * SAVED_PER_HIDDEN_LAYER * widths[0][1] * f32
    exchange = 0
    if exchanges and shape.num_parts > 1:
        widest = max(a for _, _, a in widths)
        rows = shape.num_split  # leaf rows sent plus root rows received, about one per split vertex
        exchange = rows * widest * f32
        if delay > 0:
            # R [n_k, w] per layer, plus r steps of each message in flight (1/r of the rows
            # each; a prompt rule's one step is less), and held gradients (at most [n_k, w])
            exchange = sum(((2 if held else 1) * n + rows) * a * f32 for _, _, a in widths)
    params = spec.parameters(widths, hidden)
    optimizer = 5 * params * f32
    return MemoryEstimate(k, int(baseline), int(features), int(graph), int(activations),
                          int(exchange), int(optimizer), int(runtime))


def read_part_shape(partdir: str | os.PathLike, k: int) -> PartShape:
    """PartShape of ``partdir/part_<k>.zarr`` from its attributes (no array is read)."""
    import zarr

    path = Path(partdir) / f"part_{k}.zarr"
    if not path.exists():
        raise DistgnnError(f"{path}: missing part (expected a partition folder with part_<k>.zarr)")
    attrs = dict(zarr.open_group(str(path), mode="r").attrs)
    try:
        return PartShape(n=int(attrs["n_k"]), m=int(attrs["m_k"]), feat_dim=int(attrs["feat_dim"]),
                         num_classes=int(attrs["num_classes"]),
                         multilabel=bool(attrs.get("multilabel", False)), num_parts=int(attrs["P"]),
                         num_leaves=int(attrs.get("num_leaves", 0)),
                         num_split=int(attrs.get("num_split", 0)),
                         num_roots=int(attrs.get("num_roots", 0)))
    except KeyError as exc:
        raise DistgnnError(f"{path}: attribute {exc} missing (rebuild the partition)") from None


def assignment_part_shapes(partdir: str | os.PathLike) -> list[PartShape]:
    """PartShape of every part of ``partdir`` from ``assignment.zarr``'s per-part counts and the
    graph store's widths, before any part is built (docs/design.md#memory-estimate). An assignment
    made before it stored ``part_split`` has it counted from its replica bitsets; the widths come
    from a built part where the graph store has moved."""
    import zarr

    from distgnn.partition import layout
    from distgnn.partition.readers import open_assignment

    group, a = open_assignment(Path(partdir))
    parts = int(a["P"])
    split = a.get("part_split")
    if split is None:
        split = layout.part_vertex_counts(group["replicas"], parts)[1].tolist()
    widths = None
    for path in [Path(a["graph"])] + [Path(partdir) / layout.part_name(k) for k in range(parts)]:
        if path.exists():
            widths = dict(zarr.open_group(str(path), mode="r").attrs)
            break
    if widths is None:
        raise DistgnnError(f"{a['graph']}: missing graph store (the assignment's graph; its widths "
                           f"are needed when no part of {partdir} is built)")
    try:
        return [PartShape(n=int(a["part_vertices"][k]), m=int(a["part_edges"][k]),
                          feat_dim=int(widths["feat_dim"]), num_classes=int(widths["num_classes"]),
                          multilabel=bool(widths.get("multilabel", False)), num_parts=parts,
                          num_leaves=int(a["part_vertices"][k] - a["part_roots"][k]),
                          num_split=int(split[k]), num_roots=int(a["part_roots"][k]))
                for k in range(parts)]
    except KeyError as exc:
        raise DistgnnError(f"{Path(partdir) / layout.ASSIGNMENT}: attribute {exc} missing "
                           f"(reassign the partition)") from None


def estimate_rank_memory(partdir: str | os.PathLike, k: int, layers: int, hidden: int,
                         algo: str | ExchangeSpec,
                         baseline: int = DEFAULT_BASELINE_BYTES, input_cache: bool = True,
                         apply: str = "auto", model: str = DEFAULT_MODEL, recompute: float = 0.0,
                         **options: Any) -> int:
    """Estimated peak resident bytes of rank ``k`` training ``partdir`` (``model`` ``layers`` x
    ``hidden`` with its own ``options``, algorithm ``algo``, layer 0's input aggregate cached or
    not, ``--apply``, ``recompute`` as :func:`estimate_shape`)."""
    return estimate_shape(read_part_shape(partdir, k), layers, hidden, algo, k, baseline,
                          input_cache, apply, model, recompute=recompute, **options).total


def estimate_run_memory(partdir: str | os.PathLike, layers: int, hidden: int,
                        algo: str | ExchangeSpec,
                        baseline: int = DEFAULT_BASELINE_BYTES,
                        input_cache: bool = True, apply: str = "auto",
                        model: str = DEFAULT_MODEL, runtime: int = RUNTIME_OVERHEAD_BYTES,
                        recompute: float = 0.0, **options: Any) -> list[MemoryEstimate]:
    """The estimate of every rank of a run (one per part); ``max(e.total for e in ...)`` is the
    figure to compare with the memory per rank (bytes); ``recompute`` as
    :func:`estimate_shape`."""
    from distgnn.partition.part_loader import read_num_parts

    num_parts = read_num_parts(partdir)
    return [estimate_shape(read_part_shape(partdir, k), layers, hidden, algo, k, baseline,
                           input_cache, apply, model, runtime, recompute=recompute, **options)
            for k in range(num_parts)]


def fit_runtime(measured_peak: int, estimate: MemoryEstimate) -> int:
    """The ``runtime`` (bytes) that makes ``estimate``'s total equal a measured peak RSS
    (``measured_peak``, bytes) of the run it estimates: on a graph too small to matter, what a rank
    holds beyond its imports on this machine (may be negative where the imports' measured
    baseline already holds it)."""
    return int(measured_peak - estimate.baseline - SLACK * estimate.body)


def measure_baseline() -> int:
    """Peak RSS (bytes) of a fresh interpreter that imports what a training rank imports."""
    code = ("import resource, torch, mpi4py.MPI, zarr, numpy, distgnn._native, distgnn.train.trainer;"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)")
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise DistgnnError(f"measuring the interpreter baseline failed: {out.stderr.strip()[-300:]}")
    return int(out.stdout.strip().splitlines()[-1])


def available_memory_bytes() -> int:
    """Bytes this machine's ranks may use (:func:`memory_budget`, without saying what sets them);
    0 where unknown."""
    return memory_budget()[0]


def fits(estimates: list[MemoryEstimate], budget_bytes: int) -> tuple[bool, str]:
    """Whether all ranks on one machine fit in ``budget_bytes`` together, and a one-line reason."""
    need = sum(e.total for e in estimates)
    ok = need <= budget_bytes
    return ok, (f"needs {need / 2**30:.2f} GiB for {len(estimates)} rank(s) "
                f"({'<=' if ok else '>'} {budget_bytes / 2**30:.2f} GiB available)")

