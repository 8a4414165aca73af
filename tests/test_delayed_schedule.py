"""cd-r and cd-r-orig follow docs/design.md step by step, on the replicas and at the root.

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


def last_delivered(e: int, u: int, r: int) -> int | None:
    """Under root cd-r: the step whose message of vertex u is the latest consumed by step e (posted
    at a step of u's bin, consumed r steps later), or None before the first delivery."""
    candidates = [s for s in range(e - r + 1) if s % r == u % r]
    return candidates[-1] if candidates else None


def expected_root(r: int, steps: int) -> list[dict]:
    """Per rank and step: {v: aggregate / degree} for every root of that rank, under apply-at-root
    (r = 0: cd-0, exact)."""
    def row(k: int, u: int, e: int) -> np.ndarray:
        """The row of source u that part k's kernel reads at step e."""
        if root_of(u) == k or r == 0:
            return graph.features(e).numpy().astype(np.float32)[u]
        s = last_delivered(e, u, r)
        return np.zeros(graph.WIDTH, np.float32) if s is None else \
            graph.features(s).numpy().astype(np.float32)[u]

    def root_partial(k: int, v: int, e: int) -> np.ndarray:
        return sum((row(k, u, e) for u, w in graph.EDGES[k] if w == v), np.zeros(graph.WIDTH, np.float32))

    values = [[{} for _ in range(steps)] for _ in range(3)]
    for e in range(steps):
        for v in range(graph.NUM_GLOBAL):
            k = root_of(v)
            a = root_partial(k, v, e)
            for i in (i for i in range(3) if i != k and v in graph.VERTICES[i]):
                s = e if r == 0 else last_delivered(e, v, r)
                if s is not None:
                    a = a + root_partial(i, v, s)
            degree = sum(1 for p in graph.EDGES.values() for _, w in p if w == v)
            values[k][e][v] = a / max(degree, 1)
    return values


def steps_for(r: int) -> int:
    return 4 * r + 2


@pytest.fixture(scope="module")
def computed() -> dict:
    """What the ranks computed, for every algorithm, in one mpiexec run."""
    specs = (["cd-0:3", "cd-0@root:3"]
             + [f"cd-{r}{suffix}:{steps_for(r)}" for r in (1, 2, 3) for suffix in ("", "-orig")]
             + [f"cd-{r}@root:{steps_for(r)}" for r in (1, 2, 3)])
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
    for k in range(3):
        for e in range(steps):
            for v, value in want[k][e].items():
                np.testing.assert_allclose(got[k][e][str(v)], value, rtol=1e-5, atol=1e-6,
                                           err_msg=f"{algo}: vertex {v} on part {k} at step {e}")


def test_cd0_is_exact_every_step(computed: dict) -> None:
    got = computed["cd-0"]
    for k in range(3):
        for e in range(3):
            for v, value in got[k][e].items():
                v = int(v)
                total = sum(partial(p, v, e) for p in range(3))
                np.testing.assert_allclose(value, total / graph.GLOBAL_IN_DEGREE[v], rtol=1e-5)


@pytest.mark.parametrize("r", [0, 1, 2, 3])
def test_root_schedule_matches_the_rule(computed: dict, r: int) -> None:
    """Under apply-at-root: cd-0 exact at every step; cd-r's copies and R as the rule states."""
    steps = 3 if r == 0 else steps_for(r)
    got = computed[f"cd-{r}@root"]
    want = expected_root(r, steps)
    for k in range(3):
        for e in range(steps):
            assert set(got[k][e]) == {str(v) for v in want[k][e]}
            for v, value in want[k][e].items():
                np.testing.assert_allclose(got[k][e][str(v)], value, rtol=1e-5, atol=1e-6,
                                           err_msg=f"cd-{r}@root: vertex {v} on part {k} at step {e}")


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
