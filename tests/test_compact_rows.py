"""Compact row tables at the root (docs/design.md#compact-rows) against the full local tables.

A hand-built part of six local rows, roots 0 and 1: leaf 2 has only local in-edges, leaf 3 only
out-edges, leaf 4 both, leaf 5 only out-edges. The compact kernel must give, at its rows, exactly
what the kernel over all local rows gives there, forward and transposed, with sym's weights and
the roots' own term.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from distgnn.kernels import ops
from distgnn.exchange.compact import compact_rows
from distgnn.exchange.norms import kernel_weights
from distgnn.exchange.plans import RootPlans
from distgnn.row_exchange import RowPlan

#: local edges (source, destination)
EDGES = [(3, 0), (5, 0), (4, 1), (0, 2), (4, 2), (1, 4), (3, 4), (0, 1)]
N, ROOTS = 6, 2


def csr(pairs: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR by the second of each pair over the first, int64 indptr, int32 indices."""
    pairs = sorted(pairs, key=lambda e: (e[1], e[0]))
    indptr = np.zeros(N + 1, np.int64)
    np.add.at(indptr, [d + 1 for _, d in pairs], 1)
    return (torch.from_numpy(np.cumsum(indptr)),
            torch.tensor([s for s, _ in pairs], dtype=torch.int32))


def part() -> SimpleNamespace:
    indptr, indices = csr(EDGES)
    t_indptr, t_indices = csr([(d, s) for s, d in EDGES])
    return SimpleNamespace(num_local=N, indptr=indptr, indices=indices, t_indptr=t_indptr,
                           t_indices=t_indices)


def test_tables_hold_the_rows_that_carry_something() -> None:
    rows = compact_rows(part(), ROOTS)
    assert rows.destinations.tolist() == [0, 1, 2, 4]
    assert rows.sources.tolist() == [0, 1, 3, 4, 5]
    assert rows.dst_position.tolist() == [0, 1, 2, -1, 3, -1]
    assert rows.src_position.tolist() == [0, 1, -1, 2, 3, 4]
    # leaf plans become table positions; roots' rows stay
    plans = RootPlans(RowPlan(torch.tensor([4, 2]), np.array([0, 2])),
                      RowPlan(torch.tensor([0, 1]), np.array([0, 2])),
                      RowPlan(torch.tensor([5, 3, 4]), np.array([0, 3])),
                      RowPlan(torch.tensor([1, 0, 0]), np.array([0, 3])))
    moved = rows.plans(plans)
    assert moved.reduce_leaf.ids.tolist() == [3, 2] and moved.bcast_leaf.ids.tolist() == [4, 2, 3]
    assert moved.reduce_root is plans.reduce_root and moved.bcast_root is plans.bcast_root


def test_compact_kernel_equals_the_full_one_at_its_rows() -> None:
    p = part()
    rows = compact_rows(p, ROOTS)
    in_degree = torch.tensor([3, 2, 2, 1, 3, 1])    # global, larger than local
    out_degree = torch.tensor([4, 2, 1, 2, 3, 1])
    full = kernel_weights("sym", in_degree, out_degree, ROOTS)
    x = torch.randn(N, 5, dtype=torch.float64).float()
    expect = ops.weighted_sum(p.indptr, p.indices, x, scale=full.scale, weight=full.weight,
                              self_rows=ROOTS)
    w = rows.weights(full)
    got = ops.weighted_sum(rows.graph.indptr, rows.graph.indices, x[rows.sources], scale=w.scale,
                           weight=w.weight, self_rows=ROOTS)
    assert torch.equal(got, expect[rows.destinations])
    fw = rows.feature_weights(full)
    got = ops.weighted_sum(rows.feature_graph.indptr, rows.feature_graph.indices, x,
                           scale=fw.scale, weight=fw.weight, self_rows=ROOTS)
    assert torch.equal(got, expect[rows.destinations])
    # transposed: the gradient of the partials, zero at rows that are not destinations
    grad = torch.randn(N, 5)
    grad[[3, 5]] = 0.0
    expect_t = ops.weighted_sum(p.t_indptr, p.t_indices, grad, scale=full.weight,
                                weight=full.scale, self_rows=ROOTS)
    got_t = ops.weighted_sum(rows.graph.t_indptr, rows.graph.t_indices, grad[rows.destinations],
                             scale=w.weight, weight=w.scale, self_rows=ROOTS)
    assert torch.equal(got_t, expect_t[rows.sources])
    assert rows.graph.n_dst == 4 and rows.graph.n_src == 5


def test_every_row_carrying_something_keeps_the_stored_arrays() -> None:
    """A part whose rows all have both kinds of edges (P = 1) reuses its own arrays."""
    p = part()
    p.indptr, p.indices = csr(EDGES + [(2, 3), (2, 5)])
    p.t_indptr, p.t_indices = csr([(d, s) for s, d in EDGES + [(2, 3), (2, 5)]])
    rows = compact_rows(p, N)
    assert rows.graph.indices is p.indices and rows.graph.t_indices is p.t_indices
    assert rows.graph.indptr is p.indptr and rows.graph.t_indptr is p.t_indptr
