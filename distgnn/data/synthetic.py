"""Synthetic twins of the benchmark graphs: same size, width, class count and task kind.

A twin is a degree-corrected planted-partition graph (a Chung-Lu graph with communities):

* every vertex gets a community (one per class; sizes skewed like real class balances) and a
  power-law weight ``w`` (Pareto, exponent :data:`DEGREE_EXPONENT`), so degrees are heavy-tailed;
* each edge picks its destination with probability proportional to ``w``; with probability
  :data:`HOMOPHILY` its source comes from the destination's community (again by ``w``), otherwise
  from the whole graph. Undirected twins store both directions of each sampled pair;
* features are ``class centroid + Gaussian noise``, with the noise large enough that a vertex's
  own features are a weak signal and the mean over its neighbours a strong one;
* multi-label twins (proteins) draw each of the 112 labels from a per-community probability.

``--scale S`` multiplies vertices and edges by S, keeping the mean degree, except that the mean
in-degree is capped at N/50 (so the graph stays sparse: edges <= N^2/50). ``--mean-degree D`` sets
the mean in-degree instead (edges = D N, also at most N/50): a low-degree twin with many vertices,
which the real dataset's degree and the cap do not give at small scales. ``--labelled-fraction F``
puts a fraction F of the vertices in train/val/test (the real split's proportions) instead of the
real fraction: papers100M labels 1.4% of its vertices, too few to measure accuracy at small
scales. Output is deterministic for a seed and independent of the memory budget: randomness is drawn per fixed-size block from a
``SeedSequence`` keyed by (seed, stream, block).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distgnn import _native
from distgnn.data.source import GraphSource
from distgnn.errors import DistgnnError

DEGREE_EXPONENT = 2.3     #: Pareto exponent of vertex weights (degree tail ~ d^-exponent)
HOMOPHILY = 0.75          #: probability that an edge stays inside its destination's community
CENTROID_NORM = 2.0       #: expected length of a class centroid; the noise has unit variance per feature
MAX_DEGREE_FRACTION = 50  #: mean degree is capped at N / MAX_DEGREE_FRACTION
EDGE_BLOCK = 1 << 21      #: pairs per randomness block
FEATURE_BLOCK = 4096      #: rows per randomness block
SEARCH_BUCKET = 4         #: vertices per bucket of the weighted draws' search table


@dataclass(frozen=True)
class TwinSpec:
    """Shape of the real dataset a twin imitates."""

    num_nodes: int
    num_edges: int            #: directed edges stored (both directions counted when undirected)
    feat_dim: int
    num_classes: int
    split: tuple[int, int, int]   #: train, val, test vertex counts of the real dataset
    multilabel: bool = False
    directed: bool = False
    num_communities: int = 0  #: 0 = one community per class


TWINS: dict[str, TwinSpec] = {
    # Reddit (DGL): 232,965 vertices, 114,615,892 directed edges, 602 features, 41 classes.
    "synth-reddit": TwinSpec(232_965, 114_615_892, 602, 41, (153_431, 23_831, 55_703)),
    # ogbn-products: 2,449,029 vertices, 61,859,140 undirected edges, 100 features, 47 classes.
    "synth-products": TwinSpec(2_449_029, 123_718_280, 100, 47, (196_615, 39_323, 2_213_091)),
    # ogbn-proteins: 132,534 vertices, 39,561,252 undirected edges, 8 features, 112 binary tasks.
    "synth-proteins": TwinSpec(132_534, 79_122_504, 8, 112, (86_619, 21_236, 24_679),
                               multilabel=True, num_communities=8),
    # ogbn-papers100M: 111,059,956 vertices, 1,615,685,872 directed edges, 128 features,
    # 172 classes, about 1.5M labelled vertices.
    "synth-papers100M": TwinSpec(111_059_956, 1_615_685_872, 128, 172,
                                 (1_207_179, 125_265, 214_338), directed=True),
}


def twin_size(spec: TwinSpec, scale: float, mean_degree: float | None = None) -> tuple[int, int]:
    """(vertices, directed edges) of a twin at ``scale``: both scaled, mean degree capped at N/50;
    ``mean_degree`` sets edges = mean_degree x vertices instead (it must respect the same cap)."""
    n = max(2, int(round(spec.num_nodes * scale)))
    if mean_degree is not None:
        if not 0 < mean_degree <= n / MAX_DEGREE_FRACTION:
            raise DistgnnError(f"--mean-degree must lie in (0, N/{MAX_DEGREE_FRACTION} = "
                               f"{n / MAX_DEGREE_FRACTION:g}] for {n} vertices, got {mean_degree:g}")
        m = int(round(n * mean_degree))
    else:
        m = int(round(spec.num_edges * scale))
    m = min(m, (n * n) // MAX_DEGREE_FRACTION)
    if not spec.directed:
        m -= m % 2
    return n, max(m, 2)


def _rng(seed: int, stream: int, block: int = 0) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, stream, block]))


class _TwinModel:
    """The random quantities shared by edges, features and labels: 16 bytes per vertex kept
    (community int16, community-sorted order int32 below 2^31 vertices, cumulative weight float64,
    community in sorted order int16), which the whole fetch holds."""

    def __init__(self, spec: TwinSpec, n: int, m: int, seed: int):
        self.spec, self.n, self.m, self.seed = spec, n, m, seed
        k = spec.num_communities or spec.num_classes
        rng = _rng(seed, 1)
        # Skewed community sizes (like real class balance): Dirichlet with small concentration,
        # floored so that every community exists.
        sizes = rng.dirichlet(np.full(k, 1.5)) * 0.8 + 0.2 / k
        self.community = rng.choice(k, size=n, p=sizes / sizes.sum()).astype(np.int16)
        self.num_communities = k
        weights = (1.0 - rng.random(n)) ** (-1.0 / (DEGREE_EXPONENT - 1.0))
        mean_degree = m / n
        # No vertex's expected degree above half the graph.
        weights = np.minimum(weights, max(1.0, 0.5 * n / max(mean_degree, 1e-9)) * weights.mean())
        self.order = np.argsort(self.community, kind="stable").astype(
            np.int32 if n < 2**31 else np.int64)
        weights = weights[self.order]
        self.cumulative = np.cumsum(weights)
        del weights
        self.total = self.cumulative[-1]
        self.sorted_community = self.community[self.order]
        bounds = np.searchsorted(self.sorted_community, np.arange(k + 1))
        starts = np.concatenate(([0.0], self.cumulative))[bounds]
        self.community_low = starts[:-1]
        self.community_high = starts[1:]
        # one bucket per SEARCH_BUCKET positions narrows each weighted draw's search (2 bytes per
        # vertex): the same positions as a full binary search, far fewer cache misses
        buckets = max(1, n // SEARCH_BUCKET)
        self.bucket_scale = buckets / self.total
        self.bucket_bounds = np.empty(buckets + 1, dtype=np.int64)
        _native.search_bucket_bounds(self.cumulative, self.bucket_scale, self.bucket_bounds)

    def _sample(self, low: np.ndarray | float, high: np.ndarray | float, u: np.ndarray) -> np.ndarray:
        """Positions (in community-sorted order) drawn with probability proportional to weight:
        ``searchsorted(cumulative, low + u (high - low), side="right")``, at most n - 1."""
        target = np.ascontiguousarray(np.broadcast_to(low + u * (high - low), u.shape), dtype=np.float64)
        pos = np.empty(len(target), dtype=np.int64)
        _native.search_right(self.cumulative, self.bucket_bounds, self.bucket_scale, target, pos, 0)
        return np.minimum(pos, self.n - 1)

    def edge_pairs(self):
        """Yield (src, dst) int64 blocks: the sampled pairs (one direction)."""
        pairs = self.m if self.spec.directed else self.m // 2
        for block, start in enumerate(range(0, pairs, EDGE_BLOCK)):
            count = min(EDGE_BLOCK, pairs - start)
            rng = _rng(self.seed, 2, block)
            dst_pos = self._sample(0.0, self.total, rng.random(count))
            comm = self.sorted_community[dst_pos]
            inside = rng.random(count) < HOMOPHILY
            low = np.where(inside, self.community_low[comm], 0.0)
            high = np.where(inside, self.community_high[comm], self.total)
            src_pos = self._sample(low, high, rng.random(count))
            src, dst = self.order[src_pos], self.order[dst_pos]  # ids in [0, n): int32 or int64
            loops = src == dst
            src[loops] = (src[loops] + 1) % self.n  # no self loops
            yield src, dst

    def centroids(self) -> np.ndarray:
        rng = _rng(self.seed, 3)
        f = self.spec.feat_dim
        return (rng.standard_normal((self.num_communities, f)) * (CENTROID_NORM / np.sqrt(f))
                ).astype(np.float32)

    def feature_blocks(self, rows: int):
        """Yield feature rows in blocks of at most ``rows``; content independent of ``rows``."""
        centroids = self.centroids()
        f = self.spec.feat_dim
        for block, start in enumerate(range(0, self.n, FEATURE_BLOCK)):
            end = min(start + FEATURE_BLOCK, self.n)
            rng = _rng(self.seed, 4, block)
            x = rng.standard_normal((end - start, f), dtype=np.float32)
            x += centroids[self.community[start:end]]
            for sub in range(0, end - start, rows):
                yield x[sub:sub + rows]

    def labels(self) -> np.ndarray:
        if not self.spec.multilabel:
            return self.community.copy()
        rng = _rng(self.seed, 5)
        # Each community has a probability per task, mostly near 0 or 1 so labels carry signal.
        prob = rng.beta(0.4, 0.4, size=(self.num_communities, self.spec.num_classes))
        out = np.empty((self.n, self.spec.num_classes), dtype=np.float32)
        for start in range(0, self.n, 1 << 16):
            end = min(start + (1 << 16), self.n)
            u = _rng(self.seed, 6, start >> 16).random((end - start, self.spec.num_classes))
            out[start:end] = u < prob[self.community[start:end]]
        return out

    def masks(self, labelled_fraction: float | None) -> dict[str, np.ndarray]:
        """Disjoint train/val/test masks: the real split's fractions of the vertices, or the split's
        proportions scaled to cover ``labelled_fraction`` of them."""
        if labelled_fraction is None:
            fractions = [c / self.spec.num_nodes for c in self.spec.split]
        else:
            fractions = [labelled_fraction * c / sum(self.spec.split) for c in self.spec.split]
        rng = _rng(self.seed, 7)
        order = rng.permutation(self.n)
        counts = np.maximum(1, np.round(np.array(fractions) * self.n).astype(np.int64))
        out, start = {}, 0
        for name, count in zip(("train_mask", "val_mask", "test_mask"), counts):
            mask = np.zeros(self.n, dtype=bool)
            mask[order[start:start + count]] = True
            out[name] = mask
            start += count
        return out


def make_twin(dataset: str, scale: float = 1.0, seed: int = 0,
              mean_degree: float | None = None, labelled_fraction: float | None = None) -> GraphSource:
    """A :class:`GraphSource` for the twin ``dataset`` (one of :data:`TWINS`); ``mean_degree``
    overrides the scaled mean in-degree (see :func:`twin_size`); ``labelled_fraction`` (0, 1] puts
    that fraction of the vertices in train/val/test instead of the real dataset's fraction (which
    for papers100M, 1.4%, leaves few test vertices at small scales), keeping the split's proportions."""
    if dataset not in TWINS:
        raise DistgnnError(f"unknown twin '{dataset}' (choose from {', '.join(TWINS)})")
    if not scale > 0:
        raise DistgnnError(f"--scale must be positive, got {scale}")
    if labelled_fraction is not None and not 0 < labelled_fraction <= 1:
        raise DistgnnError(f"--labelled-fraction must lie in (0, 1], got {labelled_fraction:g}")
    spec = TWINS[dataset]
    n, m = twin_size(spec, scale, mean_degree)
    model = _TwinModel(spec, n, m, seed)
    labels = model.labels()
    covered = labelled_fraction if labelled_fraction is not None else sum(spec.split) / spec.num_nodes
    masks = model.masks(labelled_fraction)
    if not spec.multilabel and covered < 1:
        # papers100M-style: only the split vertices carry labels.
        labelled = masks["train_mask"] | masks["val_mask"] | masks["test_mask"]
        labels[~labelled] = -1
    return GraphSource(
        name=dataset, num_nodes=n, num_classes=spec.num_classes, feat_dim=spec.feat_dim,
        edges=model.edge_pairs, features=model.feature_blocks, labels=labels, masks=masks,
        source="synthetic", multilabel=spec.multilabel, directed=spec.directed,
        add_reverse=not spec.directed, allow_unlabelled=True, scale=scale, seed=seed,
        mean_degree=mean_degree, labelled_fraction=labelled_fraction,
        num_pairs=m if spec.directed else m // 2,
    )


def power_law_csr(num_nodes: int, num_edges: int, seed: int = 0,
                  exponent: float = DEGREE_EXPONENT, threads: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A directed Chung-Lu graph without communities, as a CSR by destination.

    Both endpoints of each of ``num_edges`` edges are drawn with probability proportional to a
    Pareto weight (tail exponent ``exponent``), so in- and out-degrees are heavy-tailed. Returns
    (indptr int64 [N+1], indices int32 [E]) with sorted rows; deterministic for ``seed``.
    """
    rng = _rng(seed, 11)
    weights = (1.0 - rng.random(num_nodes)) ** (-1.0 / (exponent - 1.0))
    weights = np.minimum(weights, 0.5 * num_nodes / max(num_edges / num_nodes, 1e-9) * weights.mean())
    cumulative = np.cumsum(weights)
    counts = np.zeros(num_nodes, dtype=np.int64)
    blocks = []
    for block, start in enumerate(range(0, num_edges, EDGE_BLOCK)):
        count = min(EDGE_BLOCK, num_edges - start)
        r = _rng(seed, 12, block)
        ends = np.searchsorted(cumulative, r.random((2, count)) * cumulative[-1], side="right")
        ends = np.minimum(ends, num_nodes - 1)
        src, dst = ends[0].astype(np.int32), ends[1].astype(np.int32)
        _native.csr_count_by_row(dst, counts)
        blocks.append((src, dst))
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.empty(num_edges, dtype=np.int32)
    cursor = indptr[:-1].copy()
    for src, dst in blocks:
        _native.csr_scatter(dst, src, cursor, indices, num_nodes)
    _native.csr_sort_rows(indptr, indices, threads)
    return indptr, indices
