"""Partition invariants on random graphs of many shapes, every method, P = 1, 2, 3, 4, 8.

Checked here with plain numpy, independently of ``distgnn verify`` (which is also run)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import zarr

from distgnn.data.graph_store import GraphStore
from distgnn.partition.assign import assign_graph
from distgnn.partition.build import build_all
from distgnn.partition.layout import MASKS, METHODS
from distgnn.partition.verify import verify_partition
from distgnn.progress import set_quiet
from partition_helpers import make_store

SHAPES = ("uniform", "powerlaw", "star", "sparse")
set_quiet(True)


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("graphs")
    out = {s: make_store(root, s, seed=i) for i, s in enumerate(SHAPES)}
    out["multilabel"] = make_store(root / "ml", "powerlaw", n=40, seed=9, multilabel=True)
    return out


def partition(graph: Path, out: Path, parts: int, method: str, seed: int = 0,
              root_rule: str = "balance") -> list[zarr.Group]:
    assign_graph(graph, parts, method, seed, out, root_rule=root_rule)
    build_all(out, threads=2)
    return [zarr.open_group(str(out / f"part_{k}.zarr"), mode="r") for k in range(parts)]


def _load(part: zarr.Group) -> dict:
    out = {name: part[name][:] for name in part.array_keys()}
    out.update({f"comm/{name}": part["comm"][name][:] for name in part["comm"].array_keys()})
    out["attrs"] = dict(part.attrs)
    return out


def check_invariants(graph: Path, groups: list[zarr.Group]) -> None:
    parts = [_load(g) for g in groups]
    store = GraphStore.open(graph)
    indptr, indices = store.csr()
    n = store.num_nodes
    P = len(parts)
    dst = np.repeat(np.arange(n), np.diff(indptr))
    expect = np.sort(dst * n + indices)
    got, covered, roots = [], np.zeros(n, int), np.zeros(n, int)
    for k, part in enumerate(parts):
        l2g = part["local_to_global"][:]
        p_indptr, p_indices = part["indptr"][:], part["indices"][:]
        rows = l2g[np.repeat(np.arange(len(l2g)), np.diff(p_indptr))]
        got.append(rows * n + l2g[p_indices])
        # the transpose lists the same edges
        t_rows = np.repeat(np.arange(len(l2g)), np.diff(part["t_indptr"][:]))
        assert np.array_equal(np.sort(p_indices.astype(np.int64) * n + np.repeat(
            np.arange(len(l2g)), np.diff(p_indptr))),
            np.sort(t_rows * n + part["t_indices"][:]))
        covered[l2g] += 1
        is_root = part["is_root"][:]
        roots[l2g[is_root]] += 1
        assert np.array_equal(part["in_degree_global"][:], np.diff(indptr)[l2g])
        assert np.array_equal(part["feat"][:], store["feat"][:][l2g])
        assert np.array_equal(part["label"][:], store["label"][:][l2g])
        for m in MASKS:
            mask = part[m][:]
            assert not np.any(mask & ~is_root), f"{m} true at a leaf"
            assert np.array_equal(mask, store[m][:][l2g] & is_root)
        assert part["attrs"]["n_k"] == len(l2g) and part["attrs"]["m_k"] == len(p_indices)
        # layout version 2: the roots first, then the leaves, each block ascending by global id
        n_roots = part["attrs"]["n_roots"]
        assert part["attrs"]["layout_version"] == 2
        assert is_root[:n_roots].all() and not is_root[n_roots:].any()
        assert np.all(np.diff(l2g[:n_roots]) > 0) and np.all(np.diff(l2g[n_roots:]) > 0)
        assert part["attrs"]["k"] == k and part["attrs"]["P"] == P
    assert np.array_equal(np.sort(np.concatenate(got)), expect), "edges differ from the graph's"
    assert np.all(covered >= 1), "a vertex is on no partition"
    assert np.all(roots == 1), "a vertex without exactly one root"
    isolated = (np.diff(indptr) == 0) & (np.bincount(indices, minlength=n) == 0)
    assert np.all(covered[isolated] == 1), "an isolated vertex on several partitions"
    for m in MASKS:
        assert sum(int(p[m][:].sum()) for p in parts) == int(store[m][:].sum())
    # communication plan: k's send group towards j == j's receive group from k (global ids)
    for k in range(P):
        send, s_off = parts[k]["comm/leaf_send"][:], parts[k]["comm/leaf_send_offsets"][:]
        l2g_k = parts[k]["local_to_global"][:]
        assert len(s_off) == P + 1 and s_off[k] == s_off[k + 1]
        assert len(send) == int((~parts[k]["is_root"][:]).sum())
        for j in range(P):
            recv, r_off = parts[j]["comm/root_recv"][:], parts[j]["comm/root_recv_offsets"][:]
            a = l2g_k[send[s_off[j]:s_off[j + 1]]]
            b = parts[j]["local_to_global"][:][recv[r_off[k]:r_off[k + 1]]]
            assert np.array_equal(a, b)
            assert np.all(np.diff(a) > 0)
            if j != k:
                assert parts[j]["is_root"][:][recv[r_off[k]:r_off[k + 1]]].all()


# every method and P on the power-law graph; the other shapes at P = 3 (every method) and 8
CASES = ([("powerlaw", p, m) for p in (1, 2, 3, 4, 8) for m in METHODS]
         + [(s, 3, m) for s in SHAPES if s != "powerlaw" for m in METHODS]
         + [(s, 8, m) for s in SHAPES if s != "powerlaw" for m in ("libra", "random")])


@pytest.mark.parametrize("shape,parts,method", CASES)
def test_invariants(stores, tmp_path, shape, parts, method):
    built = partition(stores[shape], tmp_path / "p", parts, method, seed=parts)
    check_invariants(stores[shape], built)


@pytest.mark.parametrize("method", ["libra", "hdrf"])
def test_verify_accepts_and_multilabel(stores, tmp_path, method):
    built = partition(stores["multilabel"], tmp_path / "p", 3, method)
    check_invariants(stores["multilabel"], built)
    assert "OK" in verify_partition(tmp_path / "p")


def test_one_part_reproduces_graph(stores, tmp_path):
    (part,) = partition(stores["powerlaw"], tmp_path / "p", 1, "libra")
    store = GraphStore.open(stores["powerlaw"])
    n = store.num_nodes
    assert np.array_equal(part["local_to_global"][:], np.arange(n))
    for name in ("indptr", "indices", "feat", "label", *MASKS):
        assert np.array_equal(part[name][:], store[name][:]), name
    assert part["is_root"][:].all() and len(part["comm/leaf_send"][:]) == 0


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("method", METHODS)
def test_same_seed_same_bytes(stores, tmp_path, method):
    partition(stores["powerlaw"], tmp_path / "a", 4, method, seed=7)
    partition(stores["powerlaw"], tmp_path / "b", 4, method, seed=7)
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert a.keys() == b.keys() and a == b


def test_seed_changes_ties(stores, tmp_path):
    assign_graph(stores["uniform"], 4, "libra", 1, tmp_path / "a")
    assign_graph(stores["uniform"], 4, "libra", 2, tmp_path / "b")
    ea = zarr.open_group(str(tmp_path / "a/assignment.zarr"), mode="r")["edge_part"][:]
    eb = zarr.open_group(str(tmp_path / "b/assignment.zarr"), mode="r")["edge_part"][:]
    assert not np.array_equal(ea, eb)


@pytest.mark.parametrize("method", ["libra", "random"])
def test_roots_balanced(stores, tmp_path, method):
    """Roots (and training roots) are spread better than by a naive rule (lowest replica)."""
    _, attrs = assign_graph(stores["powerlaw"], 4, method, 0, tmp_path / "p")
    group = zarr.open_group(str(tmp_path / "p/assignment.zarr"), mode="r")
    replicas, root = group["replicas"][:, 0], group["root"][:]
    train = GraphStore.open(stores["powerlaw"])["train_mask"][:]
    assert np.all((replicas >> root.astype(np.uint64)) & np.uint64(1)), "root off its replicas"
    lowest = np.array([int(np.log2(int(r) & -int(r))) for r in replicas])
    for chosen, label in ((root, "roots"), (root[train], "train roots")):
        ours = np.bincount(chosen, minlength=4)
        naive = np.bincount(lowest if label == "roots" else lowest[train], minlength=4)
        assert ours.max() - ours.min() <= naive.max() - naive.min(), label
    ours = np.bincount(root[train], minlength=4)
    assert ours.tolist() == attrs["part_train_roots"]
    if method == "random":  # nearly every vertex is split, so the greedy choice is free
        assert ours.max() - ours.min() <= 1


@pytest.mark.parametrize("method", ["libra", "random"])
def test_roots_on_most_in_edges(stores, tmp_path, method):
    """--roots in-edges: every root holds the most in-edges of its vertex among the replicas, so
    roots hold a larger share of the edges than under `balance`; the parts pass every invariant and
    `verify`, and random parts keep their roots balanced."""
    graph = stores["powerlaw"]
    groups = partition(graph, tmp_path / "in-edges", 4, method, root_rule="in-edges")
    check_invariants(graph, groups)
    verify_partition(tmp_path / "in-edges")
    assign_graph(graph, 4, method, 0, tmp_path / "balance")
    indptr, _ = GraphStore.open(graph).csr()
    shares = {}
    for rule in ("in-edges", "balance"):
        group = zarr.open_group(str(tmp_path / rule / "assignment.zarr"), mode="r")
        edge_part, root, attrs = group["edge_part"][:], group["root"][:], dict(group.attrs)
        dst = np.repeat(np.arange(len(root)), np.diff(indptr))
        assert attrs["root_rule"] == rule
        assert attrs["root_edge_share"] == pytest.approx(np.mean(edge_part == root[dst]))
        shares[rule] = attrs["root_edge_share"]
        if rule == "in-edges":
            counts = np.zeros((len(root), 4), dtype=np.int64)  # tiny graph: a dense table is fine
            np.add.at(counts, (dst, edge_part), 1)
            assert np.array_equal(counts[np.arange(len(root)), root], counts.max(axis=1))
            if method == "random":
                train_roots = np.bincount(root[GraphStore.open(graph)["train_mask"][:]], minlength=4)
                assert train_roots.max() - train_roots.min() <= 0.2 * train_roots.mean()
    assert shares["in-edges"] > shares["balance"]


def test_no_temp_left(stores, tmp_path):
    partition(stores["star"], tmp_path / "p", 2, "hash")
    assert sorted(os.listdir(tmp_path / "p")) == ["assignment.zarr", "part_0.zarr", "part_1.zarr"]
