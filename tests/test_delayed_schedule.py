"""cd-r and cd-r-orig follow docs/design.md step by step, on the replicas and at the root
(docs/design.md#algorithms, docs/design.md#apply-at-root, docs/design.md#cd-r-at-the-root).

A hand-built graph over three partitions (tests/mpi_scripts/delayed_schedule.py) has split vertex
0 with two leaves, and edges whose source is a leaf. Here the expected aggregate of every replica
(or, under apply-at-root, of every root) at every step is derived independently from the rule as
docs/design.md states it, and compared with what the ranks computed.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import mpiexec

sys.path.insert(0, str(Path(__file__).parent / "mpi_scripts"))
import delayed_schedule as graph  # noqa: E402

pytestmark = pytest.mark.mpi
SCRIPT = Path(__file__).parent / "mpi_scripts" / "delayed_schedule.py"


def partial(part: int, v: int, step: int) -> np.ndarray:
    """p_part(step)[v]: sum of h_step[u] over part's local edges u -> v."""
    h = graph.features(step).numpy().astype(np.float32)
    return sum((h[u] for u, w in graph.EDGES[part] if w == v), np.zeros(graph.WIDTH, np.float32))


def expected(r: int, original: bool, steps: int) -> list[dict]:
    """Per rank and step: {v: aggregate / degree} for the split vertices that rank holds."""
    split = sorted(graph.ROOT)
    holders = {v: [k for k in range(3) if v in graph.VERTICES[k]] for v in split}
    remote = {(k, v): np.zeros(graph.WIDTH, np.float32) for v in split for k in holders[v]}
    delivered = {key: False for key in remote}
    values = [[{} for _ in range(steps)] for _ in range(3)]
    for e in range(steps):
        for v in split:
            root, leaves = graph.ROOT[v], [k for k in holders[v] if k != graph.ROOT[v]]
            moving = v % r == e % r
            agg = {k: partial(k, v, e) for k in holders[v]}  # default: own fresh partial
            if moving and e >= r:  # the root's delivery: leaves' partials of step e - r
                leaves_sum = sum(partial(i, v, e - r) for i in leaves)
                remote[(root, v)] = leaves_sum
                delivered[(root, v)] = True
                if original:
                    agg[root] = partial(root, v, e) + leaves_sum
            if moving and e >= 2 * r:  # each leaf's delivery: the root's reply of step e - r
                for i in leaves:
                    total = partial(root, v, e - r) + sum(partial(j, v, e - 2 * r) for j in leaves)
                    remote[(i, v)] = total - partial(i, v, e - 2 * r)
                    delivered[(i, v)] = True
                    if original:
                        agg[i] = total
            for k in holders[v]:
                a = agg[k] if original else partial(k, v, e) + remote[(k, v)]
                local_degree = sum(1 for _, w in graph.EDGES[k] if w == v)
                if original:
                    degree = graph.GLOBAL_IN_DEGREE[v] if delivered[(k, v)] else local_degree
                else:
                    degree = graph.GLOBAL_IN_DEGREE[v]
                values[k][e][v] = a / degree
    return values


def root_of(u: int) -> int:
    return graph.ROOT.get(u, next(k for k in range(3) if u in graph.VERTICES[k]))


def constant_stride(step: int, r: int) -> int:
    return r


def growing_stride(step: int, r: int) -> int:
    """The stride of the ``-grow`` runs: every bin moves at steps < GROW_STEPS, one bin after."""
    return 1 if step < graph.GROW_STEPS else r


def moves(u: int, s: int, r: int, stride=constant_stride) -> bool:
    """Whether vertex u's row moves at step s: its bin (u mod r) is s modulo the step's stride
    (docs/design.md#prompt-delivery; stride r: u mod r = s mod r, cd-r's own bins)."""
    k = stride(s, r)
    return (u % r) % k == s % k


def last_delivered(e: int, u: int, r: int, warm: bool = False, lag: int | None = None,
                   stride=constant_stride) -> int | None:
    """Under root cd-r: the step whose message of vertex u is the latest consumed by step e (posted
    at a step where u's bin moves, consumed ``lag`` steps later: r, or 1 under a prompt rule), or
    None before the first delivery. ``warm`` (--cdr-rule warm): steps < r are cd-0's and post
    nothing; from step r on, until u's first delayed message arrives, what the last warm step
    (r - 1) delivered."""
    lag = r if lag is None else lag
    candidates = [s for s in range(r if warm else 0, e - lag + 1) if moves(u, s, r, stride)]
    if candidates:
        return candidates[-1]
    return r - 1 if warm and e >= r else None


def expected_root(r: int, steps: int, fresh: bool = False, warm: bool = False,
                  present: bool = False, current: frozenset = frozenset(),
                  lag: int | None = None, stride=constant_stride) -> list[dict]:
    """Per rank and step: {v: aggregate / degree} for every root of that rank, under apply-at-root
    (r = 0: cd-0, exact; ``fresh``: --fresh-copies, every copy is the current row; ``warm``:
    --cdr-rule warm, steps < r exact, then the delayed rule starting from step r - 1's copies
    and partials; ``current``: the (part, leaf) pairs whose row is the current one, as a leaf
    that recomputes it reads it; ``present``: --cdr-rule present, the same sums divided by the number of edges
    whose source row was present in the partial that holds them, not by the degree; ``lag`` and
    ``stride``: a prompt rule's, as :func:`last_delivered` takes them)."""
    def row(k: int, u: int, e: int) -> np.ndarray:
        """The row of source u that part k's kernel reads at step e."""
        if root_of(u) == k or (k, u) in current or r == 0 or fresh or (warm and e < r):
            return graph.features(e).numpy().astype(np.float32)[u]
        s = last_delivered(e, u, r, warm, lag, stride)
        return np.zeros(graph.WIDTH, np.float32) if s is None else \
            graph.features(s).numpy().astype(np.float32)[u]

    def root_partial(k: int, v: int, e: int) -> np.ndarray:
        return sum((row(k, u, e) for u, w in graph.EDGES[k] if w == v), np.zeros(graph.WIDTH, np.float32))

    def is_present(k: int, u: int, e: int) -> bool:
        return root_of(u) == k or fresh or last_delivered(e, u, r) is not None

    def mean(v: int, parts: list[tuple[int, int]]) -> np.ndarray:
        degree = sum(1 for p in graph.EDGES.values() for _, w in p if w == v)
        if present:
            degree = sum(1 for i, s in parts for u, w in graph.EDGES[i] if w == v and is_present(i, u, s))
        return sum(root_partial(i, v, s) for i, s in parts) / max(degree, 1)

    return per_root(r, steps, mean, warm, lag, stride)


def per_root(r: int, steps: int, value, warm: bool = False, lag: int | None = None,
             stride=constant_stride) -> list[dict]:
    """values[k][e][v] = value(v, parts) for every root v (on rank k) and step e, with parts the
    (part, step) of each partial v's root combines at step e: its own of step e, and each leaf's
    as last delivered (of step e under cd-0 and in warm steps; none before the first delivery)."""
    values = [[{} for _ in range(steps)] for _ in range(3)]
    for e in range(steps):
        for v in range(graph.NUM_GLOBAL):
            k = root_of(v)
            parts = [(k, e)]
            for i in (i for i in range(3) if i != k and v in graph.VERTICES[i]):
                s = e if r == 0 or (warm and e < r) else last_delivered(e, v, r, warm, lag, stride)
                if s is not None:
                    parts.append((i, s))
            values[k][e][v] = value(v, parts)
    return values


def expected_attention(r: int, steps: int, fresh: bool = False, form: str = "z") -> list[dict]:
    """Per rank and step: {v: attention output [HEADS * WIDTH]} of every root under apply-at-root
    (r = 0: cd-0, exact). cd-r as docs/design.md#attention-under-cd-r states it: a part reads its
    roots' fresh [z, el] and er, and its leaves' copies as last delivered (zero before); a root
    merges its fresh partial with each leaf's partial as last delivered (none before), so the
    output is the softmax over the union of those edges' scores, each scored as its part saw it when
    computing (``fresh``: --fresh-copies, every copy is the current row). ``form``: ``z`` weights
    graph.attention_inputs' z; on graph.layer_inputs (z = h W^T), ``inputs`` weights the copies of
    h and maps the merge by the root's current W (the input form), ``z-of-inputs`` weights copies
    of z (the z form on the same layer)."""
    if form == "z":
        inputs = [tuple(t.numpy().astype(np.float32) for t in graph.attention_inputs(e))
                  for e in range(steps)]
    else:
        layer = [[t.numpy().astype(np.float32) for t in graph.layer_inputs(e)] for e in range(steps)]
        weights = [w.reshape(graph.HEADS, graph.WIDTH, graph.IN) for _, w, _, _ in layer]
        inputs = [(np.einsum("hdi,ni->nhd", weights[e], h) if form == "z-of-inputs"
                   else np.repeat(h[:, None, :], graph.HEADS, 1), el, er)
                  for e, (h, _, el, er) in enumerate(layer)]

    def version(k: int, u: int, e: int) -> int | None:
        """The step of u's row that part k reads at step e (None: a zero copy)."""
        return e if root_of(u) == k or r == 0 or fresh else last_delivered(e, u, r)

    def terms(k: int, v: int, e: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """(weight [HEADS], value [HEADS, WIDTH]) of each edge part k scores for v at step e."""
        sources = [u for u, w in graph.EDGES[k] if w == v] + ([v] if root_of(v) == k else [])
        t_dst = version(k, v, e)
        er = np.zeros(graph.HEADS, np.float32) if t_dst is None else inputs[t_dst][2][v]
        out = []
        for u in sources:
            t = version(k, u, e)
            z, el = ((np.zeros_like(inputs[0][0][u]), np.zeros(graph.HEADS, np.float32))
                     if t is None else (inputs[t][0][u], inputs[t][1][u]))
            score = el + er
            out.append((np.exp(np.where(score > 0, score, 0.2 * score)), z))
        return out

    def softmax(v: int, parts: list[tuple[int, int]]) -> np.ndarray:
        edges = [term for i, s in parts for term in terms(i, v, s)]
        total = sum(w for w, _ in edges)
        merged = sum(w[:, None] * z for w, z in edges) / total[:, None]
        if form == "inputs":  # the root's W of its current step, parts[0]
            merged = np.einsum("hi,hdi->hd", merged, weights[parts[0][1]])
        return merged.flatten()

    return per_root(r, steps, softmax)


#: steps of the gradient runs: delayed gradients settle by step 4 at r = 1
GRADIENT_STEPS = 8
#: --recompute-budget B of the recompute runs, and the (part, leaf) pairs that recompute under
#: it: part 0 (3 roots) holds leaf 4, a source of 4->1, part 2 (2 roots) leaf 0, of 0->3
BUDGETS = {0.0: frozenset(), 0.4: frozenset({(0, 4)}), 0.5: frozenset({(0, 4), (2, 0)})}
#: the attention runs: the z form (z given), and a layer that hands (h, W) (the input form)
ATTENTION_FORMS = ("gat", "gat-inputs")
GRADIENT_KINDS = ("root-grad", "root-gat-grad", "root-gat-inputs-grad")


#: steps of the cd-0 runs (exact at every step)
EXACT_STEPS = 3
PARTS = len(graph.VERTICES)


def steps_for(r: int) -> int:
    return 4 * r + 2


@pytest.fixture(scope="module")
def computed() -> dict:
    """What the ranks computed, for every algorithm, in one mpiexec run."""
    specs = ([f"cd-0:{EXACT_STEPS}", f"cd-0@root:{EXACT_STEPS}"]
             + [f"cd-{r}{suffix}:{steps_for(r)}" for r in (1, 2, 3) for suffix in ("", "-orig")]
             + [f"cd-{r}@root:{steps_for(r)}" for r in (1, 2, 3)]
             + [f"cd-{r}@root-fresh:{steps_for(r)}" for r in (1, 3)]
             + [f"cd-{r}@root{fresh}-warm:{steps_for(r)}" for r in (1, 2, 3)
                for fresh in ("", "-fresh")]
             + [f"cd-1@root-grad-warm:{GRADIENT_STEPS}"]
             + [f"cd-{r}@root{fresh}-present:{steps_for(r)}" for r in (1, 2, 3)
                for fresh in ("", "-fresh")]
             + [f"cd-{r}@root-recompute{warm}:{steps_for(r)}" for r in (1, 2, 3)
                for warm in ("", "-warm")]
             + [f"cd-{r}@root-recompute-b{b}:{steps_for(r)}" for r in (1, 3) for b in BUDGETS]
             + [f"cd-1@root-grad-recompute:{GRADIENT_STEPS}"]
             + [f"cd-3@root{recompute}-{timing}:{steps_for(3)}"
                for recompute in ("", "-recompute") for timing in ("prompt", "grow")]
             + [f"cd-3@root-grad{timing}:{GRADIENT_STEPS}" for timing in ("", "-hold", "-prompt-hold")]
             + [f"cd-0@root-{gat}:3" for gat in ATTENTION_FORMS]
             + [f"cd-{r}@root-{gat}:{steps_for(r)}" for r in (1, 2, 3) for gat in ATTENTION_FORMS]
             + [f"cd-{r}@root-{gat}-fresh:{steps_for(r)}" for r in (1, 3) for gat in ATTENTION_FORMS]
             + [f"cd-{r}@{kind}{fresh}:{GRADIENT_STEPS if r else 1}" for r in (0, 1)
                for kind in GRADIENT_KINDS for fresh in ("", "-fresh") if r or not fresh])
    proc = mpiexec(3, SCRIPT, *specs, module=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("r", [1, 2, 3])
@pytest.mark.parametrize("original", [False, True])
def test_schedule_matches_the_rule(computed: dict, r: int, original: bool) -> None:
    steps = steps_for(r)
    algo = f"cd-{r}" + ("-orig" if original else "")
    got = computed[algo]
    want = expected(r, original, steps)
    assert len(got) == PARTS and all(len(steps_of_k) == steps for steps_of_k in got)
    for k in range(3):
        for e in range(steps):
            assert set(got[k][e]) == {str(v) for v in want[k][e]}, f"{algo}: part {k} at step {e}"
            for v, value in want[k][e].items():
                np.testing.assert_allclose(got[k][e][str(v)], value, rtol=1e-5, atol=1e-6,
                                           err_msg=f"{algo}: vertex {v} on part {k} at step {e}")


def split_vertices_on(k: int) -> set[str]:
    """The split vertices part k holds (a root or a leaf of each): the rows the replicas mode reports."""
    return {str(v) for v in graph.ROOT if v in graph.VERTICES[k]}


def test_cd0_is_exact_every_step(computed: dict) -> None:
    got = computed["cd-0"]
    assert len(got) == PARTS and all(len(steps) == EXACT_STEPS for steps in got)
    for k in range(PARTS):
        for e in range(EXACT_STEPS):
            assert set(got[k][e]) == split_vertices_on(k), f"cd-0: part {k} at step {e}"
            for v, value in got[k][e].items():
                v = int(v)
                total = sum(partial(p, v, e) for p in range(PARTS))
                np.testing.assert_allclose(value, total / graph.GLOBAL_IN_DEGREE[v], rtol=1e-5)


def assert_roots_match(name: str, got: list, want: list[dict], steps: int) -> None:
    """Every root's value on every rank at every step equals the expectation."""
    for k in range(3):
        for e in range(steps):
            assert set(got[k][e]) == {str(v) for v in want[k][e]}
            for v, value in want[k][e].items():
                np.testing.assert_allclose(got[k][e][str(v)], value, rtol=1e-5, atol=1e-6,
                                           err_msg=f"{name}: vertex {v} on part {k} at step {e}")


@pytest.mark.parametrize("kind", ["", "-gat", "-gat-inputs"], ids=["sum", "attention", "attention-inputs"])
@pytest.mark.parametrize("r, fresh", [(0, False), (1, False), (2, False), (3, False), (1, True),
                                      (3, True)])
def test_root_schedule_matches_the_rule(computed: dict, r: int, fresh: bool, kind: str) -> None:
    """Under apply-at-root: cd-0 exact at every step; cd-r's copies and R as the rule states
    (with --fresh-copies: current copies, R as without). ``-gat``: GAT's attention at the
    roots, where cd-0 is the one-process softmax and cd-r merges stale partials computed from the
    copies a part held at its step; ``-gat-inputs``: a layer handing its (h, W), whose cd-r
    partials weight copies of h and whose merge the root maps by its current W."""
    steps = 3 if r == 0 else steps_for(r)
    name = f"cd-{r}@root{kind}" + ("-fresh" if fresh else "")
    got = computed[name]
    if kind:
        want = expected_attention(r, steps, fresh, "inputs" if kind == "-gat-inputs" else "z")
    else:
        want = expected_root(r, steps, fresh)
    assert_roots_match(name, got, want, steps)


@pytest.mark.parametrize("r", [1, 2, 3])
@pytest.mark.parametrize("fresh", [False, True], ids=["delayed-copies", "fresh-copies"])
def test_root_warm_schedule_matches_the_rule(computed: dict, r: int, fresh: bool) -> None:
    """--cdr-rule warm at the root: cd-0's aggregate at steps < r; from step r the delayed
    rule, each copy and each leaf's partial as last delivered, and until a bin's first delayed
    delivery those of the last warm step (r - 1), never zero."""
    steps = steps_for(r)
    name = f"cd-{r}@root" + ("-fresh" if fresh else "") + "-warm"
    got, want = computed[name], expected_root(r, steps, fresh, warm=True)
    assert_roots_match(name, got, want, steps)


@pytest.mark.parametrize("r", [1, 2, 3])
@pytest.mark.parametrize("fresh", [False, True], ids=["delayed-copies", "fresh-copies"])
def test_root_present_schedule_matches_the_rule(computed: dict, r: int, fresh: bool) -> None:
    """--cdr-rule present at the root: the first rule's copies and partials, each root's sum
    divided by the number of its edges whose source row was present where it was summed (the
    mean over what is present), which is the degree once every row has arrived."""
    steps = steps_for(r)
    name = f"cd-{r}@root" + ("-fresh" if fresh else "") + "-present"
    assert_roots_match(name, computed[name], expected_root(r, steps, fresh, present=True), steps)


@pytest.mark.parametrize("r", [1, 2, 3])
@pytest.mark.parametrize("warm", [False, True], ids=["recompute", "warm-recompute"])
def test_root_recompute_schedule_matches_the_rule(computed: dict, r: int, warm: bool) -> None:
    """--cdr-rule recompute at the root (layer 1): each leaf computes its sources' rows itself,
    so every row a part's kernel reads is the current one, and only the leaves' partials are
    delayed (R as the first rule, or as warm's with warm-recompute): the expectation of fresh
    copies, reached with no broadcast at all."""
    steps = steps_for(r)
    name = f"cd-{r}@root-recompute" + ("-warm" if warm else "")
    want = expected_root(r, steps, fresh=True, warm=warm)
    assert_roots_match(name, computed[name], want, steps)


@pytest.mark.parametrize("r", [1, 3])
@pytest.mark.parametrize("budget", sorted(BUDGETS))
def test_root_recompute_budget_schedule_matches_the_rule(computed: dict, r: int,
                                                         budget: float) -> None:
    """--recompute-budget B: only floor(B * roots) leaves of each part recompute (those with the
    most local out-edges); the others read delayed copies as under the first rule: at B = 0 it
    is the first rule, at 0.5 every leaf here recomputes."""
    steps = steps_for(r)
    name = f"cd-{r}@root-recompute-b{budget}"
    want = expected_root(r, steps, current=BUDGETS[budget])
    assert_roots_match(name, computed[name], want, steps)


def test_root_recompute_budget_expectations_differ() -> None:
    """Guard: the three budgets' expectations are not the same numbers."""
    steps = steps_for(3)
    got = [expected_root(3, steps, current=BUDGETS[b]) for b in sorted(BUDGETS)]
    for a, b in ((0, 1), (1, 2)):
        assert any(not np.allclose(got[a][k][e][v], got[b][k][e][v]) for k in range(3)
                   for e in range(steps) for v in got[a][k][e])


def test_root_recompute_gradients_sum_to_the_exact_ones(computed: dict) -> None:
    """--cdr-rule recompute with delayed gradients: the gradients of a vertex's rows, summed over
    the ranks that compute one (its root's and each recomputing leaf's, each reaching the weights
    on its own rank), equal cd-0's gradient of the root's row once the delayed ones flow (step 4),
    and differ before (step 0: nothing has arrived)."""
    exact, got = computed["cd-0@root-grad"], computed["cd-1@root-grad-recompute"]
    want = {int(v): np.asarray(g) for k in range(3) for v, g in exact[k][0].items()}

    def summed(e: int) -> dict[int, np.ndarray]:
        total: dict[int, np.ndarray] = {}
        for k in range(3):
            for g, grad in got[k][e]["rows"]:
                total[g] = total.get(g, 0.0) + np.asarray(grad)
        return total

    assert set(summed(0)) == set(want)
    for e in range(4, GRADIENT_STEPS):
        for v, grad in summed(e).items():
            np.testing.assert_allclose(grad, want[v], rtol=1e-5, atol=1e-6,
                                       err_msg=f"recompute: vertex {v} at step {e}")
    assert any(not np.allclose(g, want[v]) for v, g in summed(0).items())


def test_root_present_expectation_is_scaled_then_the_rule() -> None:
    """Guard: the present expectation differs from the first rule's early and equals it once
    every row has arrived (from step 4r - 1)."""
    r, steps = 2, steps_for(2)
    present, first = expected_root(2, steps, present=True), expected_root(2, steps)
    keys = [(k, e, v) for k in range(3) for e in range(steps) for v in present[k][e]]
    assert any(not np.allclose(present[k][e][v], first[k][e][v]) for k, e, v in keys if e < r)
    assert all(np.allclose(present[k][e][v], first[k][e][v]) for k, e, v in keys if e >= 4 * r - 1)


def test_root_warm_expectation_is_exact_then_delayed() -> None:
    """Guard: the warm expectation equals cd-0's at steps < r, differs from the first rule's
    there, and differs from cd-0's later (the copies and R lag)."""
    r, steps = 2, steps_for(2)
    warm, first, exact = (expected_root(2, steps, warm=True), expected_root(2, steps),
                          expected_root(0, steps))
    keys = [(k, e, v) for k in range(3) for e in range(steps) for v in warm[k][e]]
    assert all(np.allclose(warm[k][e][v], exact[k][e][v]) for k, e, v in keys if e < r)
    assert any(not np.allclose(warm[k][e][v], first[k][e][v]) for k, e, v in keys if e < r)
    assert any(not np.allclose(warm[k][e][v], exact[k][e][v]) for k, e, v in keys if e >= r)


def test_root_warm_gradients_are_exact_while_warm(computed: dict) -> None:
    """--cdr-rule warm: in its warm step cd-1's input gradient at every root is cd-0's (the
    exchange's exact adjoint), where the first rule's differs; from step 4 on it is cd-0's too
    (the delayed gradients flow)."""
    exact, warm = computed["cd-0@root-grad"], computed["cd-1@root-grad-warm"]
    for k in range(3):
        for v in exact[k][0]:
            for e in [0] + list(range(4, GRADIENT_STEPS)):
                np.testing.assert_allclose(warm[k][e][v], exact[k][0][v], rtol=1e-5, atol=1e-6,
                                           err_msg=f"warm: root {v} on part {k} at step {e}")


def test_root_expectation_uses_stale_copies() -> None:
    """Guard: under root cd-2 the rule's values differ from the exact ones (copies and R lag)."""
    delayed, exact = expected_root(2, steps_for(2)), expected_root(0, steps_for(2))
    assert any(not np.allclose(delayed[k][e][v], exact[k][e][v]) for k in range(3)
               for e in range(2, steps_for(2)) for v in delayed[k][e])


def test_the_variants_differ() -> None:
    """Guard: the expectations of cd-r and cd-r-orig are not the same numbers."""
    plain, orig = expected(2, False, steps_for(2)), expected(2, True, steps_for(2))
    assert any(not np.allclose(plain[k][e][v], orig[k][e][v]) for k in range(3)
               for e in range(steps_for(2)) for v in plain[k][e])


def test_root_attention_expectation_is_stale_then_exact() -> None:
    """Guard: the cd-2 expectations (delayed and fresh copies) differ from the exact one and from
    each other."""
    steps = steps_for(2)
    delayed, exact, fresh = (expected_attention(2, steps), expected_attention(0, steps),
                             expected_attention(2, steps, fresh=True))
    for a, b in ((delayed, exact), (fresh, exact), (delayed, fresh)):
        assert any(not np.allclose(a[k][e][v], b[k][e][v]) for k in range(3)
                   for e in range(steps) for v in a[k][e])
    assert any(not np.allclose(expected_root(2, steps, True)[k][e][v], expected_root(2, steps)[k][e][v])
               for k in range(3) for e in range(steps) for v in delayed[k][e])


def test_input_form_expectation_applies_todays_weight() -> None:
    """Guard: on a layer z = h W^T, cd-0's expectations of the two forms agree, and cd-2's differ
    (stale z carries the W of its step; the input form today's)."""
    exact = [expected_attention(0, 3, form=form) for form in ("inputs", "z-of-inputs")]
    for k in range(3):
        for e in range(3):
            for v in exact[0][k][e]:
                np.testing.assert_allclose(exact[0][k][e][v], exact[1][k][e][v], rtol=1e-5, atol=1e-6)
    steps = steps_for(2)
    inputs, z = (expected_attention(2, steps, form=form) for form in ("inputs", "z-of-inputs"))
    assert any(not np.allclose(inputs[k][e][v], z[k][e][v]) for k in range(3)
               for e in range(steps) for v in inputs[k][e])


@pytest.mark.parametrize("fresh", [False, True], ids=["delayed-copies", "fresh-copies"])
@pytest.mark.parametrize("kind", GRADIENT_KINDS, ids=["sum", "attention", "attention-inputs"])
def test_delayed_gradients_settle_to_the_exact_ones(computed: dict, kind: str, fresh: bool) -> None:
    """Delayed gradients are the adjoint of cd-r's messages: with the same inputs and loss at every
    step, cd-1's input gradient at every root (through partials, copies and the leaves' kernels,
    including edges between two leaves) equals cd-0's once the delayed ones flow (step 4), and
    differs before (step 0: nothing has arrived)."""
    exact = computed[f"cd-0@{kind}"]
    got = computed[f"cd-1@{kind}" + ("-fresh" if fresh else "")]
    if kind == "root-gat-inputs-grad":  # W's gradient: each rank's share differs, not the sum
        total = np.sum([exact[k][0]["W"] for k in range(3)], axis=0)
        for e in range(4, GRADIENT_STEPS):
            np.testing.assert_allclose(np.sum([got[k][e]["W"] for k in range(3)], axis=0), total,
                                       rtol=1e-5, atol=1e-6, err_msg=f"{kind}: W at step {e}")
    roots = [[v for v in exact[k][0] if v != "W"] for k in range(3)]
    for k in range(3):
        for v in roots[k]:
            for e in range(4, GRADIENT_STEPS):
                np.testing.assert_allclose(got[k][e][v], exact[k][0][v], rtol=1e-5, atol=1e-6,
                                           err_msg=f"{kind}: root {v} on part {k} at step {e}")
    assert any(not np.allclose(got[k][0][v], exact[k][0][v]) for k in range(3) for v in roots[k])


@pytest.mark.parametrize("recompute", [False, True], ids=["copies", "recompute"])
@pytest.mark.parametrize("timing", ["prompt", "grow"])
def test_root_prompt_schedule_matches_the_rule(computed: dict, recompute: bool, timing: str) -> None:
    """A prompt rule (docs/design.md#prompt-delivery): each copy and partial is taken at the step
    after its post, not r steps later, and a step moves the bins b = step (mod stride): stride r
    (``prompt``: one bin a step, as cd-r) or 1 at steps < 2 and r after (``grow``: every bin, then
    one). With copies (the first rule's) and with recompute (only the partials delayed); r = 3."""
    r = 3
    steps = steps_for(r)
    name = f"cd-{r}@root{'-recompute' if recompute else ''}-{timing}"
    stride = constant_stride if timing == "prompt" else growing_stride
    want = expected_root(r, steps, fresh=recompute, lag=1, stride=stride)
    assert_roots_match(name, computed[name], want, steps)


def test_root_prompt_expectations_differ_from_cd_r() -> None:
    """Guard: a row taken one step after its post, or every bin moving, is not cd-r's schedule."""
    steps = steps_for(3)
    cdr = expected_root(3, steps)
    for stride in (constant_stride, growing_stride):
        prompt = expected_root(3, steps, lag=1, stride=stride)
        assert any(not np.allclose(prompt[k][e][v], cdr[k][e][v]) for k in range(3)
                   for e in range(steps) for v in prompt[k][e])
    # vertex 4, bin 1 of 3: every bin at steps 0 and 1, then bin 1 at step 4
    assert [moves(4, s, 3, growing_stride) for s in range(5)] == [True, True, False, False, True]


def test_held_gradients_reach_the_exact_ones_where_bins_alone_do_not(computed: dict) -> None:
    """Held delayed gradients (docs/design.md#held-gradients): with the same inputs and loss at
    every step, cd-3's input gradient at every root equals cd-0's once every bin's gradient has
    arrived (taken r = 3 steps after its post, or 1 under a prompt rule: from step 6 at the
    latest), because every leaf row adds its last delivered gradient at every step; without
    holding, a step adds only the gradients of the bin that arrived, and stays off."""
    exact = computed["cd-0@root-grad"]
    for timing in ("-hold", "-prompt-hold"):
        got = computed[f"cd-3@root-grad{timing}"]
        for k in range(3):
            for v in exact[k][0]:
                for e in range(6, GRADIENT_STEPS):
                    np.testing.assert_allclose(got[k][e][v], exact[k][0][v], rtol=1e-5, atol=1e-6,
                                               err_msg=f"{timing}: root {v} on part {k} at step {e}")
    plain = computed["cd-3@root-grad"]
    assert any(not np.allclose(plain[k][e][v], exact[k][0][v]) for k in range(3)
               for v in exact[k][0] for e in range(6, GRADIENT_STEPS))
