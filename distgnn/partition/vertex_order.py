"""Locality orders of a part's local ids (``distgnn partition --order``, docs/design.md#vertex-order).

The aggregation kernel gathers one source row per edge, at random; on a power-law graph the rows
it gathers most (the hubs') are scattered over the whole table and its 4 KB pages. A part's build
owns its local numbering, so it can lay the rows out for locality. Each order permutes the root
block ``[0, n_roots)`` and the leaf block separately (roots stay first), from the part's own CSR:

* ``none``: ascending global id (the numbering before orders existed);
* ``degree``: hub sorting, by local degree (in + out) descending, ties in global id order;
* ``dbg``: degree-based grouping (Faldu et al., IISWC 2019): eight groups by local degree d
  against the block's mean degree D (d < D/2, < D, < 2D, ..., < 32D, and above), groups in
  descending degree, global id order kept inside a group, so the hubs are packed together while
  the rest keep whatever locality their ids had (and a block is at most eight runs of ascending
  global id, which the build streams without a scratch file);
* ``rcm``: reverse Cuthill-McKee on the symmetrised block (scipy), which narrows the band of the
  adjacency matrix: rows of neighbouring vertices end up close;
* ``first-touch``: the order in which a pass over the part's edges (destination by destination,
  as Libra streams them in store order: the sources of a row, then the row) first meets a vertex,
  so the sources that consecutive rows share sit side by side.

The degree counted is the part's local in-degree plus local out-degree: forward gathers a row once
per local out-edge, backward (over the transpose) once per local in-edge.
"""
from __future__ import annotations

import numpy as np

VERTEX_ORDERS = ("none", "degree", "dbg", "rcm", "first-touch")
#: chosen by `python -m bench.orders` (bench/README.md, "Vertex order and 2 MB pages")
DEFAULT_VERTEX_ORDER = "dbg"


def check_order(name: str) -> str:
    from distgnn.errors import DistgnnError

    if name not in VERTEX_ORDERS:
        raise DistgnnError(f"--order: expected one of {', '.join(VERTEX_ORDERS)}, got '{name}'")
    return name


def local_degree(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """In- plus out-degree (int64 [n]) of each row of a square CSR (indptr [n+1], indices [m])."""
    from distgnn import _native

    degree = np.diff(indptr)
    _native.csr_count_by_row(indices, degree)  # += out-degree, without a widened copy
    return degree


def _by_key(key: np.ndarray) -> np.ndarray:
    return np.argsort(key, kind="stable")


def _rcm(indptr: np.ndarray, indices: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Reverse Cuthill-McKee of block [lo, hi) (edges leaving the block ignored), as old ids - lo."""
    import scipy.sparse
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    n = hi - lo
    if n == 0:
        return np.empty(0, dtype=np.int64)
    rows = np.repeat(np.arange(lo, hi, dtype=np.int64), np.diff(indptr[lo:hi + 1]))
    cols = indices[indptr[lo]:indptr[hi]].astype(np.int64)
    inside = (cols >= lo) & (cols < hi)
    rows, cols = rows[inside] - lo, cols[inside] - lo
    adjacency = scipy.sparse.coo_matrix((np.ones(len(rows), dtype=np.int8), (rows, cols)),
                                        shape=(n, n)).tocsr()
    return np.asarray(reverse_cuthill_mckee((adjacency + adjacency.T).tocsr(),
                                            symmetric_mode=True), dtype=np.int64)


def _first_touch(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Position (int64 [n]) of each vertex's first appearance in the row-major edge pass."""
    from distgnn import _native

    first = np.empty(len(indptr) - 1, dtype=np.int64)
    _native.csr_first_touch(indptr, indices, first)
    return first


def block_permutation(indptr: np.ndarray, indices: np.ndarray, n_roots: int,
                      name: str) -> np.ndarray:
    """Old local id of each new local id (int64 [n]) for order ``name``; roots stay in
    ``[0, n_roots)``. ``indptr``/``indices``: the part's CSR by destination in the ``none``
    numbering (int64 [n+1], int32 [m])."""
    check_order(name)
    n = len(indptr) - 1
    if name == "none" or n == 0:
        return np.arange(n, dtype=np.int64)
    blocks = [(0, n_roots), (n_roots, n)]
    if name == "rcm":
        return np.concatenate([lo + _rcm(indptr, indices, lo, hi) for lo, hi in blocks])
    if name == "first-touch":
        key = _first_touch(indptr, indices)
    else:
        degree = local_degree(indptr, indices)
        if name == "degree":
            key = -degree
        else:
            key = np.concatenate([-dbg_group(degree[lo:hi]) for lo, hi in blocks])
    return np.concatenate([lo + _by_key(key[lo:hi]) for lo, hi in blocks])


#: dbg's group bounds in multiples of the block's mean degree: 8 groups
DBG_BOUNDS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


def dbg_group(degree: np.ndarray) -> np.ndarray:
    """dbg's group of each vertex (int64, 0..7, higher = higher degree) from its degree (int64 [n])
    and the mean degree of its block."""
    mean = float(degree.mean()) if len(degree) else 0.0
    return np.searchsorted(np.asarray(DBG_BOUNDS) * mean, degree, side="right").astype(np.int64)


def relabel_csr(indptr: np.ndarray, indices: np.ndarray,
                old_of_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A square CSR (indptr int64 [n+1], indices [m]) renumbered so that new vertex i is old
    vertex ``old_of_new[i]``, each row's sources kept in their old order (what a one-part build
    in that order stores: sources in ascending global id)."""
    n = len(indptr) - 1
    new_of_old = np.empty(n, dtype=np.int64)
    new_of_old[old_of_new] = np.arange(n, dtype=np.int64)
    degree = np.diff(indptr)[old_of_new]
    new_indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(degree, out=new_indptr[1:])
    edges = (np.repeat(indptr[old_of_new] - new_indptr[:-1], degree)
             + np.arange(new_indptr[-1], dtype=np.int64))
    return new_indptr, new_of_old[indices[edges]].astype(indices.dtype)
