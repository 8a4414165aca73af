"""``distgnn verify PARTDIR``: check every partition invariant; raise on the first violation.

Checked, in order: no ``part_<K>.zarr`` with K >= P (an earlier partitioning's) is left in the
folder; every chunk of the assignment and of every part reads back (crc32c); the
assignment matches the graph (checksum, sizes) and each part matches the assignment; per part:
the layout (roots first: ``local_to_global[:n_roots]`` the part's roots and the rest its leaves,
each block strictly ascending in vertex order ``none``, a permutation of its members in any other
order), the CSR and its transpose well formed and each other's
transpose, ``in_degree_global`` and ``is_root`` agree with the graph and the assignment; over all
parts: every vertex covered and with exactly one root, every global edge on exactly one part with
the right endpoints (compared destination block by destination block, so memory stays bounded),
masks only at roots with the graph's counts, features and labels equal to the graph's rows
(compared through one 64-bit fingerprint per row, so memory is 8 bytes per vertex), and
the communication plan pairs up: k's ``leaf_send`` group towards j and j's ``root_recv`` group from
k list the same global ids in the same order, and cover exactly the leaves and their roots.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import zarr

from distgnn.errors import DistgnnError
from distgnn.partition import layout
from distgnn.partition.readers import open_assignment, open_graph_for
from distgnn.partition.vertex_order import VERTEX_ORDERS
from distgnn.progress import progress
from distgnn.zarr_io import check_chunks_present, open_checked, verify_checksums

PART_ARRAYS = ("local_to_global", "indptr", "indices", "t_indptr", "t_indices",
               "in_degree_global", "is_root", "feat", "label", *layout.MASKS)
COMM_ARRAYS = ("leaf_send", "leaf_send_offsets", "root_recv", "root_recv_offsets")
#: edges per destination block in the edge comparison
EDGE_BLOCK = 1 << 24


def _fail(msg: str) -> None:
    raise DistgnnError(msg)


def _open_part(folder: Path, k: int, attrs: dict) -> zarr.Group:
    path = folder / layout.part_name(k)
    if not path.exists():
        _fail(f"{path}: missing (run `distgnn partition build {folder} --part {k}`)")
    group = open_checked(path, PART_ARRAYS)
    if "comm" not in group.group_keys():
        _fail(f"{path}: missing group 'comm'")
    for name in COMM_ARRAYS:
        if name not in group["comm"].array_keys():
            _fail(f"{path}/comm: missing array '{name}'")
        check_chunks_present(group["comm"][name], f"{path}/comm/{name}")
    pattrs = dict(group.attrs)
    if "checksum" not in pattrs:
        _fail(f"{path}: incomplete part (no checksum attribute)")
    if pattrs.get("assignment_checksum") != attrs["checksum"]:
        _fail(f"{path}: built from another assignment (rebuild it)")
    if pattrs.get("k") != k or pattrs.get("P") != attrs["P"]:
        _fail(f"{path}: attrs say k={pattrs.get('k')} P={pattrs.get('P')}, expected k={k} P={attrs['P']}")
    layout.check_layout(path, pattrs)
    return group


def _by_global_id(l2g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(local ids, their global ids) in ascending global id."""
    local = np.argsort(l2g, kind="stable")
    return local, l2g[local]


def _ranges(indptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Edge positions of ``rows`` (each row's [indptr[r], indptr[r+1]) in turn), int64."""
    lengths = indptr[rows + 1] - indptr[rows]
    total = int(lengths.sum())
    starts = np.repeat(indptr[rows] - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return starts + np.arange(total, dtype=np.int64)


def row_fingerprints(block: np.ndarray) -> np.ndarray:
    """One uint64 per row of ``block`` (any dtype and width): the sum of the row's 32-bit words
    (bytes when the row width is not a multiple of 4) times fixed odd multipliers, modulo 2**64.
    Any change of one word changes it; two different rows collide with probability about 2**-64."""
    rows = np.ascontiguousarray(block).reshape(len(block), -1)
    raw = rows.view(np.uint8).reshape(len(block), -1)
    words = raw.view(np.uint32) if raw.shape[1] % 4 == 0 else raw
    multipliers = (np.random.default_rng(0x5EED).integers(0, 2**63, words.shape[1], dtype=np.uint64)
                   * np.uint64(2) + np.uint64(1))
    with np.errstate(over="ignore"):
        return (words.astype(np.uint64) * multipliers).sum(axis=1, dtype=np.uint64)


def _check_csr(label: str, indptr: np.ndarray, indices: np.ndarray, n: int) -> None:
    if len(indptr) != n + 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0) \
            or indptr[-1] != len(indices):
        _fail(f"{label}: indptr is not a valid CSR offset array of {n} rows")
    if len(indices) and (indices.min() < 0 or indices.max() >= n):
        _fail(f"{label}: indices outside [0, {n})")


def verify_partition(folder: str | os.PathLike, graph: str | os.PathLike | None = None) -> str:
    """Check ``folder``; return a one-line summary, raise :class:`DistgnnError` on a violation."""
    folder = Path(folder)
    agroup, attrs = open_assignment(folder)
    stray = layout.stray_parts(folder, attrs["P"])
    if stray:
        _fail(f"{folder}: stray {', '.join(p.name for p in stray)} beyond the assignment's "
              f"P={attrs['P']} (left by an earlier partitioning; delete, or repartition with "
              f"--force)")
    verify_checksums(agroup, str(folder / layout.ASSIGNMENT))
    store = open_graph_for(attrs, graph)
    P, n = attrs["P"], store.num_nodes
    if attrs["num_nodes"] != n or attrs["num_edges"] != store.num_edges:
        _fail(f"{folder / layout.ASSIGNMENT}: sizes differ from the graph's")
    g_indptr, g_indices = store.csr()
    root = agroup["root"][:]
    replicas = agroup["replicas"][:]
    if root.shape != (n,) or root.min(initial=0) < 0 or root.max(initial=0) >= P:
        _fail(f"{folder / layout.ASSIGNMENT}: root must hold a partition in [0, {P}) per vertex")

    parts = []
    covered = np.zeros(n, dtype=np.int64)
    root_count = np.zeros(n, dtype=np.int64)
    for k in progress(range(P), desc="verify parts"):
        label = str(folder / layout.part_name(k))
        group = _open_part(folder, k, attrs)
        verify_checksums(group, label)
        verify_checksums(group["comm"], f"{label}/comm")
        l2g = group["local_to_global"][:]
        n_k, n_roots = len(l2g), int(group.attrs["n_roots"])
        order = group.attrs.get("vertex_order", "none")
        if order not in VERTEX_ORDERS:
            _fail(f"{label}: unknown vertex_order '{order}' (expected one of {', '.join(VERTEX_ORDERS)})")
        for block in (l2g[:n_roots], l2g[n_roots:]):
            if order == "none" and len(block) and np.any(np.diff(block) <= 0):
                _fail(f"{label}/local_to_global: its roots block [0, {n_roots}) or leaves block "
                      f"is not strictly ascending global ids (vertex order none)")
        if not np.array_equal(np.sort(l2g), layout.members(replicas, k)):
            _fail(f"{label}/local_to_global: differs from the assignment's replicas of part {k}")
        indptr, indices = group["indptr"][:], group["indices"][:]
        _check_csr(f"{label}/indptr", indptr, indices, n_k)
        t_indptr, t_indices = group["t_indptr"][:], group["t_indices"][:]
        _check_csr(f"{label}/t_indptr", t_indptr, t_indices, n_k)
        dst = np.repeat(np.arange(n_k, dtype=np.int64), np.diff(indptr))
        t_dst = np.repeat(np.arange(n_k, dtype=np.int64), np.diff(t_indptr))
        fwd = np.sort(indices.astype(np.int64) * max(n_k, 1) + dst)
        bwd = np.sort(t_dst * max(n_k, 1) + t_indices.astype(np.int64))
        if not np.array_equal(fwd, bwd):
            _fail(f"{label}/t_indices: not the transpose of indptr/indices")
        if group.attrs["m_k"] != len(indices) or group.attrs["n_k"] != n_k:
            _fail(f"{label}: attrs n_k/m_k differ from the arrays")
        if not np.array_equal(group["in_degree_global"][:], np.diff(g_indptr)[l2g]):
            _fail(f"{label}/in_degree_global: differs from the graph's in-degrees")
        is_root = group["is_root"][:]
        if not np.array_equal(is_root, root[l2g] == k):
            _fail(f"{label}/is_root: differs from the assignment's roots")
        if int(is_root.sum()) != n_roots or not is_root[:n_roots].all():
            _fail(f"{label}: local ids [0, n_roots = {n_roots}) are not exactly the part's roots")
        covered[l2g] += 1
        root_count[l2g[is_root]] += 1
        parts.append((group, l2g, indptr, indices, is_root))

    if np.any(covered == 0):
        _fail(f"vertex {int(np.flatnonzero(covered == 0)[0])} is on no partition")
    if np.any(root_count != 1):
        v = int(np.flatnonzero(root_count != 1)[0])
        _fail(f"vertex {v} has {root_count[v]} roots (expected exactly one)")

    _check_edges(folder, parts, g_indptr, g_indices, n)
    _check_vertex_data(folder, parts, store)
    _check_comm(folder, parts, root, replicas, P)
    return (f"{folder}: OK ({P} parts, {n:,} vertices, {store.num_edges:,} edges, every chunk "
            f"read and every invariant checked)")


def _check_edges(folder: Path, parts: list, g_indptr: np.ndarray, g_indices: np.ndarray,
                 n: int) -> None:
    """Every global edge on exactly one part: compare sorted (dst, src) keys block by block."""
    by_gid = [_by_global_id(l2g) for _, l2g, _, _, _ in parts]
    bounds = [0]
    while bounds[-1] < n:
        target = g_indptr[bounds[-1]] + EDGE_BLOCK
        bounds.append(max(bounds[-1] + 1, min(n, int(np.searchsorted(g_indptr, target, "right")) - 1)))
    for a, b in zip(bounds[:-1], bounds[1:]):
        expect = (np.repeat(np.arange(a, b, dtype=np.int64), np.diff(g_indptr[a:b + 1])) * n
                  + g_indices[g_indptr[a]:g_indptr[b]].astype(np.int64))
        got = []
        for (_, l2g, indptr, indices, _), (local, gids) in zip(parts, by_gid):
            rows = local[np.searchsorted(gids, a):np.searchsorted(gids, b)]
            dst = np.repeat(l2g[rows], indptr[rows + 1] - indptr[rows])
            got.append(dst * n + l2g[indices[_ranges(indptr, rows)]])
        got = np.sort(np.concatenate(got)) if got else np.empty(0, np.int64)
        if not np.array_equal(got, np.sort(expect)):
            if len(got) != len(expect):
                _fail(f"{folder}: destinations [{a}, {b}) have {len(got)} edges over all parts, "
                      f"the graph {len(expect)} (each edge must be on exactly one part)")
            i = int(np.flatnonzero(got != np.sort(expect))[0])
            _fail(f"{folder}: edge {int(got[i] % n)} -> {int(got[i] // n)} on the parts does not "
                  f"match the graph's edges (wrong endpoints or duplicated)")


def _check_vertex_data(folder: Path, parts: list, store) -> None:
    for name in layout.MASKS:
        full = store[name][:]
        total = 0
        for group, l2g, _, _, is_root in parts:
            mask = group[name][:]
            if np.any(mask & ~is_root):
                _fail(f"{folder / layout.part_name(group.attrs['k'])}/{name}: true at a leaf")
            if not np.array_equal(mask, full[l2g] & is_root):
                _fail(f"{folder / layout.part_name(group.attrs['k'])}/{name}: differs from the "
                      f"graph's {name} at its roots")
            total += int(mask.sum())
        if total != int(full.sum()):
            _fail(f"{folder}: {name} counts {total} over all parts, the graph {int(full.sum())}")
    for name in ("feat", "label"):
        src = store[name]
        expect = np.empty(src.shape[0], dtype=np.uint64)
        for a, b in progress(list(_chunk_spans(src)), desc=f"verify {name} rows"):
            expect[a:b] = row_fingerprints(src[a:b])
        for group, l2g, _, _, _ in parts:
            rows = group[name]
            for a, b in _chunk_spans(rows):
                bad = np.flatnonzero(row_fingerprints(rows[a:b]) != expect[l2g[a:b]])
                if len(bad):
                    _fail(f"{folder / layout.part_name(group.attrs['k'])}/{name}: row "
                          f"{a + int(bad[0])} differs from the graph's row "
                          f"{int(l2g[a + bad[0]])}")


def _chunk_spans(array) -> list[tuple[int, int]]:
    """[start, stop) of each chunk of rows of a zarr array."""
    step = max(1, array.chunks[0])
    return [(a, min(a + step, array.shape[0])) for a in range(0, array.shape[0], step)]


def _check_comm(folder: Path, parts: list, root: np.ndarray, replicas: np.ndarray, P: int) -> None:
    sends, recvs = [], []
    for group, l2g, _, _, is_root in parts:
        k = group.attrs["k"]
        label = folder / layout.part_name(k)
        comm = group["comm"]
        s, so = comm["leaf_send"][:], comm["leaf_send_offsets"][:]
        r, ro = comm["root_recv"][:], comm["root_recv_offsets"][:]
        for name, data, off in (("leaf_send", s, so), ("root_recv", r, ro)):
            if len(off) != P + 1 or off[0] != 0 or off[-1] != len(data) or np.any(np.diff(off) < 0):
                _fail(f"{label}/comm/{name}_offsets: expected P + 1 = {P + 1} ascending offsets "
                      f"ending at {len(data)}")
            if len(data) and (data.min() < 0 or data.max() >= len(l2g)):
                _fail(f"{label}/comm/{name}: local ids outside [0, {len(l2g)})")
        leaves = np.flatnonzero(~is_root)
        if len(s) != len(leaves) or not np.array_equal(np.sort(s), leaves):
            _fail(f"{label}/comm/leaf_send: does not list every leaf exactly once")
        for j in range(P):
            grp = l2g[s[so[j]:so[j + 1]]]
            if np.any(root[grp] != j) or np.any(np.diff(grp) <= 0):
                _fail(f"{label}/comm/leaf_send: group {j} holds vertices whose root is not on "
                      f"{j}, or is not sorted by global id")
            rgrp = l2g[r[ro[j]:ro[j + 1]]]
            expect_r = np.sort(l2g[is_root][((replicas[l2g[is_root], j // 64] >> np.uint64(j % 64))
                                             & np.uint64(1)).astype(bool)]) if j != k else l2g[:0]
            if not np.array_equal(rgrp, expect_r):
                _fail(f"{label}/comm/root_recv: group {j} is not the sorted roots with a leaf on {j}")
        sends.append((l2g, s, so))
        recvs.append((l2g, r, ro))
    for k in range(P):
        for j in range(P):
            l2g_k, s, so = sends[k]
            l2g_j, r, ro = recvs[j]
            a = l2g_k[s[so[j]:so[j + 1]]]
            b = l2g_j[r[ro[k]:ro[k + 1]]]
            if not np.array_equal(a, b):
                _fail(f"{folder}: leaf_send of part {k} towards {j} ({len(a)} ids) does not match "
                      f"root_recv of part {j} from {k} ({len(b)} ids)")
