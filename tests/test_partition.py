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
from distgnn.partition.part_writer import build_all
from distgnn.partition.layout import MASKS, METHODS
from distgnn.partition.part_checks import verify_partition
from distgnn.partition.vertex_order import VERTEX_ORDERS, local_degree
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
              root_rule: str = "balance", order: str = "dbg") -> list[zarr.Group]:
    assign_graph(graph, parts, method, seed, out, root_rule=root_rule)
    build_all(out, threads=2, order=order)
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
        # layout version 2: the roots first, then the leaves; each block ascending by global id
        # in vertex order none; every row's sources in ascending global id
        n_roots = part["attrs"]["n_roots"]
        assert part["attrs"]["layout_version"] == 2
        assert is_root[:n_roots].all() and not is_root[n_roots:].any()
        assert len(np.unique(l2g)) == len(l2g)
        if part["attrs"]["vertex_order"] == "none":
            assert np.all(np.diff(l2g[:n_roots]) > 0) and np.all(np.diff(l2g[n_roots:]) > 0)
        ascending = np.diff(l2g[p_indices]) >= 0  # duplicate edges repeat a source
        ends = p_indptr[1:-1]
        ascending[ends[(ends > 0) & (ends < len(p_indices))] - 1] = True  # across row ends
        assert ascending.all(), "a row's sources do not ascend by global id"
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


@pytest.mark.parametrize("shape,order,parts", [(s, o, 3) for s in SHAPES for o in VERTEX_ORDERS]
                         + [("powerlaw", o, 1) for o in VERTEX_ORDERS])
def test_invariants_every_vertex_order(stores, tmp_path, shape, order, parts):
    built = partition(stores[shape], tmp_path / "p", parts, "libra", order=order)
    check_invariants(stores[shape], built)
    assert all(p.attrs["vertex_order"] == order for p in built)


def _blocks(part: zarr.Group) -> list[slice]:
    n_roots, n_k = part.attrs["n_roots"], part.attrs["n_k"]
    return [slice(0, n_roots), slice(n_roots, n_k)]


@pytest.mark.parametrize("order", ["degree", "dbg", "first-touch"])
def test_vertex_order_keys(stores, tmp_path, order):
    """degree: local degree non-increasing in each block; dbg: its group (by the block's mean
    degree) non-increasing, global ids ascending inside a group; first-touch: vertices numbered as a row-major pass over
    the part's edges (in the none numbering) first meets them."""
    none = partition(stores["powerlaw"], tmp_path / "none", 3, "libra", order="none")
    built = partition(stores["powerlaw"], tmp_path / "o", 3, "libra", order=order)
    for ref, part in zip(none, built):
        l2g = part["local_to_global"][:]
        degree = local_degree(part["indptr"][:], part["indices"][:])
        for block in _blocks(part):
            d, g = degree[block], l2g[block]
            if order == "degree":
                assert np.all(np.diff(d) <= 0)
                assert np.all(np.diff(g)[np.diff(d) == 0] > 0)  # ties in global id order
            elif order == "dbg":
                group = np.searchsorted(np.array([0.5, 1, 2, 4, 8, 16, 32]) * d.mean(), d, "right")
                assert np.all(np.diff(group) <= 0)
                assert np.all(np.diff(g)[np.diff(group) == 0] > 0)
        if order == "first-touch":
            r_l2g, r_ip, r_ind = (ref[a][:] for a in ("local_to_global", "indptr", "indices"))
            seen, sequence = set(), []
            for v in range(len(r_l2g)):
                for u in [*r_ind[r_ip[v]:r_ip[v + 1]], v]:
                    if u not in seen:
                        seen.add(u)
                        sequence.append(int(u))
            n_roots = ref.attrs["n_roots"]
            expect = ([r_l2g[u] for u in sequence if u < n_roots]
                      + [r_l2g[u] for u in sequence if u >= n_roots])
            assert np.array_equal(l2g, expect)


def test_rcm_narrows_the_band(tmp_path):
    """A path graph numbered at random: reverse Cuthill-McKee gives back bandwidth 1."""
    from distgnn.data.store_writer import write_graph_store
    from distgnn.data.source import GraphSource

    n = 50
    rng = np.random.default_rng(3)
    ids = rng.permutation(n)
    src, dst = ids[:-1], ids[1:]
    source = GraphSource(
        name="path", num_nodes=n, num_classes=2, feat_dim=2,
        edges=lambda: iter([(src, dst)]),
        features=lambda rows: (np.zeros((min(rows, n - i), 2), np.float32) for i in range(0, n, rows)),
        labels=np.zeros(n, np.int64), masks={m: np.arange(n) < 10 for m in MASKS}, source="test",
        multilabel=False, directed=True, seed=0)
    graph = write_graph_store(source, tmp_path / "path" / "graph.zarr", threads=1)
    (none,) = partition(graph, tmp_path / "none", 1, "libra", order="none")
    (rcm,) = partition(graph, tmp_path / "rcm", 1, "libra", order="rcm")

    def bandwidth(part):
        ip, ind = part["indptr"][:], part["indices"][:]
        rows = np.repeat(np.arange(len(ip) - 1), np.diff(ip))
        return int(np.abs(rows - ind).max())

    assert bandwidth(none) > 10 and bandwidth(rcm) == 1


def test_one_part_reproduces_graph(stores, tmp_path):
    (part,) = partition(stores["powerlaw"], tmp_path / "p", 1, "libra", order="none")
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


def test_relabel_csr_is_what_a_one_part_build_stores(stores, tmp_path):
    """bench.orders renumbers the bench graphs with relabel_csr instead of building them: it
    gives the arrays a one-part build stores, for every order."""
    from distgnn.partition.vertex_order import block_permutation, relabel_csr

    store = GraphStore.open(stores["powerlaw"])
    indptr, indices = store.csr()
    for order in VERTEX_ORDERS:
        (part,) = partition(stores["powerlaw"], tmp_path / order, 1, "libra", order=order)
        perm = block_permutation(indptr, indices, len(indptr) - 1, order)
        assert np.array_equal(part["local_to_global"][:], perm)
        got = relabel_csr(indptr, indices, perm)
        assert np.array_equal(got[0], part["indptr"][:]) and np.array_equal(got[1], part["indices"][:])


@pytest.mark.parametrize("order", ["dbg", "rcm"])
def test_rows_through_the_scratch_file_and_streamed_agree(stores, tmp_path, monkeypatch, order):
    """A block with more runs of ascending ids than MAX_STREAMED_RUNS goes through a scratch file:
    the same part bytes as streaming it run by run, and no scratch file left behind."""
    from distgnn.partition import part_writer as build_mod

    streamed = partition(stores["powerlaw"], tmp_path / "streamed", 3, "libra", order=order)
    monkeypatch.setattr(build_mod, "MAX_STREAMED_RUNS", 0)
    scratch = partition(stores["powerlaw"], tmp_path / "scratch", 3, "libra", order=order)
    check_invariants(stores["powerlaw"], scratch)
    for a, b in zip(streamed, scratch):
        for name in ("feat", "label", "local_to_global", "indices"):
            assert np.array_equal(a[name][:], b[name][:]), name
    assert not [p for p in (tmp_path / "scratch").iterdir() if p.name.startswith(".")]
