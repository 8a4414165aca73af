"""Real-format readers (OGB csv.gz and npz, Planetoid pickles, Reddit npz) end to end through
``fetch`` into ``graph.zarr``, checked against plain numpy references."""
from __future__ import annotations

import functools
import pickle
from pathlib import Path

import numpy as np
import pytest

from distgnn import cli
from distgnn.data import ogb_source, planetoid, reddit
from distgnn.data.fetch import fetch
from distgnn.data.graph_store import GraphStore
from distgnn.errors import DistgnnError

try:
    from tests import formats
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    import formats


def reference_csr(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR by destination (row v = in-neighbours of v, sorted), from plain numpy."""
    order = np.lexsort((src, dst))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))])
    return indptr, src[order]


def check_csr(store: GraphStore, src: np.ndarray, dst: np.ndarray) -> None:
    indptr, indices = store.csr()
    want_ptr, want_idx = reference_csr(store.num_nodes, np.asarray(src), np.asarray(dst))
    np.testing.assert_array_equal(indptr, want_ptr)
    np.testing.assert_array_equal(indices, want_idx)
    assert store.num_edges == len(src)


def mask_of(n: int, ids) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[np.asarray(ids, dtype=np.int64)] = True
    return mask


def assert_no_store(root: Path) -> None:
    assert not [p for p in root.rglob("*") if "graph.zarr" in p.name], "a (partial) store was left"


def random_edges(rng: np.random.Generator, n: int, e: int) -> np.ndarray:
    return rng.integers(0, n, size=(e, 2))


def random_split(rng: np.random.Generator, candidates: np.ndarray) -> dict[str, np.ndarray]:
    order = rng.permutation(candidates)
    a, b = len(order) // 2, 3 * len(order) // 4
    return {"train": order[:a], "valid": order[a:b], "test": order[b:]}


# --- OGB csv.gz layout -----------------------------------------------------------------------

def make_products(tmp_path: Path, seed: int = 0, n: int = 40, e: int = 150, f: int = 5):
    rng = np.random.default_rng(seed)
    edges = random_edges(rng, n, e)
    feat = rng.standard_normal((n, f)).astype(np.float32)
    labels = rng.integers(0, 47, size=n)
    ids = random_split(rng, np.arange(n))
    folder = formats.write_ogb_csv(tmp_path / "products", num_nodes=n, edges=edges, labels=labels,
                                   split="sales_ranking", ids=ids, node_feat=feat)
    return folder, edges, feat, labels, ids


def test_products_csv_streams_into_an_undirected_store(tmp_path, monkeypatch):
    folder, edges, feat, labels, ids = make_products(tmp_path)
    monkeypatch.setattr(ogb_source, "EDGE_BLOCK", 17)  # several edge blocks
    path = fetch("ogbn-products", root=tmp_path / "data", source=folder, budget=5 * 4 * 7)
    store = GraphStore.open(path)
    n = len(feat)
    # listed once in the source: stored in both directions
    check_csr(store, np.concatenate([edges[:, 0], edges[:, 1]]),
              np.concatenate([edges[:, 1], edges[:, 0]]))
    np.testing.assert_array_equal(store["feat"][:], feat)
    np.testing.assert_array_equal(store["label"][:], labels)
    assert store["label"].dtype == np.int64
    for key, part in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
        np.testing.assert_array_equal(store[key][:], mask_of(n, ids[part]))
    attrs = store.attrs
    assert attrs["num_classes"] == 47 and attrs["feat_dim"] == 5 and not attrs["directed"]
    assert not attrs["multilabel"] and attrs["name"] == "ogbn-products"


def test_products_from_zip_via_cli_matches_folder(tmp_path):
    folder, *_ = make_products(tmp_path, seed=1)
    archive = formats.zip_folder(folder, tmp_path / "products.zip", "products")
    from_folder = fetch("ogbn-products", root=tmp_path / "a", source=folder)
    rc = cli.main(["fetch", "ogbn-products", "--source", str(archive), "--root",
                   str(tmp_path / "b"), "--quiet"])
    assert rc == 0
    from_zip = tmp_path / "b" / "ogbn-products" / "graph.zarr"
    assert GraphStore.open(from_zip).attrs["checksum"] == GraphStore.open(from_folder).attrs["checksum"]


def test_proteins_mean_edge_features_and_multilabel(tmp_path):
    rng = np.random.default_rng(2)
    n, e = 30, 90
    edges = random_edges(rng, n - 1, e)  # vertex n-1 stays isolated
    edge_feat = rng.random((e, 8)).astype(np.float32)
    labels = rng.integers(0, 2, size=(n, 112))
    ids = random_split(rng, np.arange(n))
    folder = formats.write_ogb_csv(tmp_path / "proteins", num_nodes=n, edges=edges, labels=labels,
                                   split="species", ids=ids, edge_feat=edge_feat)
    store = GraphStore.open(fetch("ogbn-proteins", root=tmp_path / "data", source=folder))
    src = np.concatenate([edges[:, 0], edges[:, 1]])
    dst = np.concatenate([edges[:, 1], edges[:, 0]])
    check_csr(store, src, dst)
    sums = np.zeros((n, 8))
    count = np.zeros(n)
    for (u, v), ef in zip(edges, edge_feat.astype(np.float64)):
        sums[u] += ef
        sums[v] += ef
        count[u] += 1
        count[v] += 1
    want = sums / np.maximum(count, 1)[:, None]
    feat = store["feat"][:]
    assert feat.shape == (n, 8) and feat.dtype == np.float32
    np.testing.assert_allclose(feat, want, rtol=1e-6, atol=1e-7)
    assert not feat[n - 1].any()
    label = store["label"][:]
    assert label.dtype == np.float32 and label.shape == (n, 112)
    np.testing.assert_array_equal(label, labels)
    attrs = store.attrs
    assert attrs["multilabel"] and attrs["num_classes"] == 112 and attrs["feat_dim"] == 8


def test_ogb_label_out_of_range_is_refused(tmp_path):
    folder, edges, feat, labels, ids = make_products(tmp_path)
    labels = labels.copy()
    labels[7] = 47  # products has 47 classes: 0..46
    formats.write_csv_gz(folder / "raw" / "node-label.csv.gz", labels)
    with pytest.raises(DistgnnError, match=r"node-label\.csv\.gz: label 47 of vertex 7 is outside"):
        fetch("ogbn-products", root=tmp_path / "data", source=folder)
    assert_no_store(tmp_path / "data")


# --- OGB binary (papers100M) layout ------------------------------------------------------------

@pytest.mark.parametrize("fortran", [False, True])
@pytest.mark.parametrize("undirected", [False, True])
def test_papers_binary_directed_with_missing_labels(tmp_path, monkeypatch, fortran, undirected):
    rng = np.random.default_rng(3)
    n, e, f = 50, 200, 6
    edge_index = rng.integers(0, n, size=(2, e))
    feat = rng.standard_normal((n, f)).astype(np.float32)
    labels = rng.integers(0, 172, size=n).astype(np.float64)
    unlabelled = rng.random(n) < 0.4
    labels[unlabelled] = np.nan
    ids = random_split(rng, np.flatnonzero(~unlabelled))
    folder = formats.write_ogb_binary(tmp_path / "papers100M-bin", edge_index=edge_index,
                                      node_feat=feat, node_label=labels[:, None], split="time",
                                      ids=ids, fortran=fortran)
    monkeypatch.setattr(ogb_source, "EDGE_BLOCK", 23)
    path = fetch("ogbn-papers100M", root=tmp_path / "data", source=tmp_path, budget=f * 4 * 9,
                 undirected=undirected)
    store = GraphStore.open(path)
    src, dst = edge_index
    if undirected:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    check_csr(store, src, dst)
    assert store.attrs["directed"] is (not undirected)
    np.testing.assert_array_equal(store["feat"][:], feat)
    label = store["label"][:]
    assert label.dtype == np.int64
    np.testing.assert_array_equal(label[unlabelled], -1)
    np.testing.assert_array_equal(label[~unlabelled], labels[~unlabelled].astype(np.int64))
    np.testing.assert_array_equal(store["val_mask"][:], mask_of(n, ids["valid"]))
    assert store.attrs["num_classes"] == 172


# --- Planetoid pickles -------------------------------------------------------------------------

def make_planetoid(tmp_path: Path, name: str, gaps: bool):
    """A small citation graph; with ``gaps``, some vertices in the test range are missing from
    tx/ty/test.index (Citeseer's isolated vertices)."""
    rng = np.random.default_rng(4)
    num_all, num_test_range, c, f = 40, 20, 3, 7
    n = num_all + num_test_range
    test_range = np.arange(num_all, n)
    missing = rng.choice(test_range[:-1], size=4, replace=False) if gaps else np.array([], int)
    test_ids = rng.permutation(np.setdiff1d(test_range, missing))
    feat = (rng.random((n, f)) < 0.3).astype(np.float32)
    labels = rng.integers(0, c, size=n)
    feat[missing] = 0
    labels[missing] = -1
    num_train = 2 * c
    graph = {}
    for u in range(n):
        if u in missing:
            continue
        graph[u] = [int(v) for v in rng.integers(0, n, size=rng.integers(0, 4)) if v not in missing]
    graph[0] = graph[0] + [0, 1, 1]  # a self-loop and a duplicate, as the real files have
    folder = formats.write_planetoid(tmp_path / name, name, feat=feat, labels=labels,
                                     num_classes=c, num_all=num_all, num_train=num_train,
                                     test_ids=test_ids, graph=graph)
    return folder, feat, labels, num_train, test_ids, graph, missing


@pytest.mark.parametrize("name,gaps", [("cora", False), ("citeseer", True)])
def test_planetoid_standard_split_symmetric_graph(tmp_path, monkeypatch, name, gaps):
    folder, feat, labels, num_train, test_ids, graph, missing = make_planetoid(tmp_path, name, gaps)
    monkeypatch.setattr(planetoid, "NUM_VAL", 10)  # 500 in the real split; the graph is tiny
    store = GraphStore.open(fetch(name, root=tmp_path / "data", source=folder))
    n = len(feat)
    assert store.num_nodes == n
    pairs = {(u, v) for u, vs in graph.items() for v in vs if u != v}
    pairs |= {(v, u) for u, v in pairs}
    src, dst = (np.array(x, dtype=np.int64) for x in zip(*sorted(pairs)))
    check_csr(store, src, dst)
    np.testing.assert_array_equal(store["feat"][:], feat)
    np.testing.assert_array_equal(store["label"][:], labels)
    np.testing.assert_array_equal(store["train_mask"][:], mask_of(n, np.arange(num_train)))
    np.testing.assert_array_equal(store["val_mask"][:], mask_of(n, np.arange(num_train, num_train + 10)))
    np.testing.assert_array_equal(store["test_mask"][:], mask_of(n, test_ids))
    assert not store["test_mask"][:][missing].any()
    assert store.attrs["num_classes"] == 3 and not store.attrs["directed"]


def test_normalize_features_divides_each_row_by_its_sum(tmp_path, monkeypatch):
    """fetch --normalize-features (the GCN/GAT papers' preprocessing): rows sum to 1, empty rows
    stay zero, the store is named -rownorm beside the raw one and says so in its attributes."""
    folder, feat, *_ = make_planetoid(tmp_path, "citeseer", True)
    monkeypatch.setattr(planetoid, "NUM_VAL", 10)
    raw = GraphStore.open(fetch("citeseer", root=tmp_path / "data", source=folder))
    assert cli.main(["fetch", "citeseer", "--root", str(tmp_path / "data"), "--source", str(folder),
                     "--normalize-features", "--quiet"]) == 0
    store = GraphStore.open(tmp_path / "data" / "citeseer-rownorm" / "graph.zarr")
    total = feat.sum(axis=1, keepdims=True)
    want = np.divide(feat, total, out=np.zeros_like(feat), where=total > 0)
    np.testing.assert_allclose(store["feat"][:], want, rtol=1e-6)
    assert (total == 0).any() and not store["feat"][:][total[:, 0] == 0].any()
    np.testing.assert_array_equal(raw["feat"][:], feat)
    assert store.attrs["normalize_features"] and not raw.attrs["normalize_features"]


def test_planetoid_label_rows_must_be_one_hot(tmp_path):
    folder, *_ = make_planetoid(tmp_path, "cora", False)
    ty = pickle.loads((folder / "ind.cora.ty").read_bytes())
    ty[2] = 1  # vertex with every class at once
    (folder / "ind.cora.ty").write_bytes(pickle.dumps(ty, protocol=2))
    with pytest.raises(DistgnnError, match="not one-hot"):
        fetch("cora", root=tmp_path / "data", source=folder)
    assert_no_store(tmp_path / "data")


def test_planetoid_label_width_mismatch_is_refused(tmp_path):
    folder, *_ = make_planetoid(tmp_path, "cora", False)
    ty = pickle.loads((folder / "ind.cora.ty").read_bytes())
    ty = np.concatenate([ty, np.zeros((len(ty), 1), ty.dtype)], axis=1)  # a 4th class
    (folder / "ind.cora.ty").write_bytes(pickle.dumps(ty, protocol=2))
    with pytest.raises(DistgnnError, match=r"ind\.cora\.ty: 4 classes, but ind\.cora\.ally has 3"):
        fetch("cora", root=tmp_path / "data", source=folder)


def test_planetoid_pickle_cannot_run_code(tmp_path):
    folder, *_ = make_planetoid(tmp_path, "cora", False)

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    (folder / "ind.cora.graph").write_bytes(pickle.dumps(Evil(), protocol=2))
    with pytest.raises(DistgnnError, match=r"ind\.cora\.graph: .*builtin\w*\.print"):
        fetch("cora", root=tmp_path / "data", source=folder)


# --- Reddit npz ------------------------------------------------------------------------------

#: the Reddit reader fetch calls (it picks DGL's loader when DGL is importable)
READ_REDDIT = reddit.read_reddit


def force_reddit_reader(monkeypatch, reader: str) -> None:
    """Make ``fetch`` read Reddit with ``reader`` (``own`` or ``dgl``), DGL installed or not."""
    monkeypatch.setattr(reddit, "read_reddit", functools.partial(READ_REDDIT, reader=reader))


def make_reddit(tmp_path: Path, fmt: str = "coo", sub: str = "reddit", symmetric: bool = True):
    rng = np.random.default_rng(5)
    n, e, f = 45, 160, 9
    pairs = np.unique(rng.integers(0, n, size=(e, 2)), axis=0)
    if symmetric:  # both directions, as published
        pairs = np.unique(np.concatenate([pairs, pairs[:, ::-1]]), axis=0)
    pairs = rng.permutation(pairs)
    feat = rng.standard_normal((n, f)).astype(np.float32)
    labels = rng.integers(0, reddit.NUM_CLASSES, size=n)
    node_types = rng.integers(1, 4, size=n)
    folder = formats.write_reddit(tmp_path / sub, feat=feat, labels=labels, node_types=node_types,
                                  src=pairs[:, 0], dst=pairs[:, 1], fmt=fmt)
    return folder, pairs, feat, labels, node_types


@pytest.mark.parametrize("symmetric", [True, False])  # one-way edges pin down the direction
def test_reddit_own_reader_matches_reference_and_dgl(tmp_path, monkeypatch, symmetric):
    folder, pairs, feat, labels, node_types = make_reddit(tmp_path, symmetric=symmetric)
    monkeypatch.setattr(reddit, "EDGE_BLOCK", 31)
    force_reddit_reader(monkeypatch, "own")
    own = GraphStore.open(fetch("reddit", root=tmp_path / "own", source=folder, budget=9 * 4 * 8))
    n = len(feat)
    check_csr(own, pairs[:, 0], pairs[:, 1])
    np.testing.assert_array_equal(own["feat"][:], feat)
    np.testing.assert_array_equal(own["label"][:], labels)
    for key, kind in (("train_mask", 1), ("val_mask", 2), ("test_mask", 3)):
        np.testing.assert_array_equal(own[key][:], node_types == kind)
    assert own.attrs["num_classes"] == 41 and not own.attrs["directed"]

    force_reddit_reader(monkeypatch, "dgl")
    via_dgl = GraphStore.open(fetch("reddit", root=tmp_path / "dgl", source=folder))
    assert via_dgl.attrs["checksum"] == own.attrs["checksum"]
    assert not list(folder.glob("*.bin")) and not list(folder.rglob("dgl_graph*"))
    assert n == via_dgl.num_nodes


def test_reddit_csr_file_and_zip_give_the_same_store(tmp_path, monkeypatch):
    force_reddit_reader(monkeypatch, "own")
    coo, *_ = make_reddit(tmp_path, "coo", "coo")
    csr, *_ = make_reddit(tmp_path, "csr", "csr")
    archive = formats.zip_folder(coo, tmp_path / "reddit.zip", "")
    sums = [GraphStore.open(fetch("reddit", root=tmp_path / kind, source=src)).attrs["checksum"]
            for kind, src in (("a", coo), ("b", csr), ("c", archive))]
    assert sums[0] == sums[1] == sums[2]


def test_reddit_label_out_of_range_is_refused(tmp_path, monkeypatch):
    force_reddit_reader(monkeypatch, "own")
    folder, pairs, feat, labels, node_types = make_reddit(tmp_path)
    labels[3] = 41
    formats.write_reddit(folder, feat=feat, labels=labels, node_types=node_types,
                         src=pairs[:, 0], dst=pairs[:, 1])
    with pytest.raises(DistgnnError, match=r"reddit_data\.npz\[label\]: label 41 of vertex 3"):
        fetch("reddit", root=tmp_path / "data", source=folder)


# --- offline downloads and damaged files -----------------------------------------------------

DEAD = "http://127.0.0.1:9"


@pytest.mark.parametrize("dataset", ["cora", "reddit", "ogbn-products"])
def test_unreachable_download_is_one_line(tmp_path, monkeypatch, capsys, dataset):
    monkeypatch.setattr(planetoid, "URL", DEAD + "/ind.{name}.{ext}")
    monkeypatch.setattr(reddit, "URL", DEAD + "/reddit.zip")
    real_meta = ogb_source.ogb_meta
    monkeypatch.setattr(ogb_source, "ogb_meta", lambda d: ogb_source.OgbMeta(
        **{**real_meta(d).__dict__, "url": DEAD + "/products.zip"}))
    rc = cli.main(["fetch", dataset, "--root", str(tmp_path / "data"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1, err
    assert dataset in err and DEAD in err and "--source" in err
    assert_no_store(tmp_path / "data")
    assert not [p for p in (tmp_path / "data").rglob("*") if p.is_file()], "partial download left"


def _papers(tmp_path: Path) -> Path:
    rng = np.random.default_rng(6)
    n = 20
    labels = rng.integers(0, 5, size=n).astype(np.float64)
    return formats.write_ogb_binary(tmp_path / "papers100M-bin", edge_index=rng.integers(0, n, (2, 60)),
                                    node_feat=rng.random((n, 300)).astype(np.float32),
                                    node_label=labels[:, None], split="time",
                                    ids=random_split(rng, np.arange(n)))


@pytest.mark.parametrize("case", ["feat-truncated", "edge-missing", "edge-count", "label-short",
                                  "npz-truncated", "pickle-truncated", "pickle-missing",
                                  "reddit-truncated"])
def test_damaged_source_is_one_line_and_leaves_no_store(tmp_path, monkeypatch, case):
    force_reddit_reader(monkeypatch, "own")
    if case.startswith("pickle"):
        dataset, (folder, *_) = "cora", make_planetoid(tmp_path, "cora", False)
        target = folder / "ind.cora.allx"
    elif case == "reddit-truncated":
        dataset, (folder, *_) = "reddit", make_reddit(tmp_path)
        target = folder / "reddit_data.npz"
    elif case == "npz-truncated":
        dataset, folder = "ogbn-papers100M", _papers(tmp_path)
        target = folder / "raw" / "data.npz"
    else:
        dataset, (folder, *_) = "ogbn-products", make_products(tmp_path, n=400, f=20)
        target = folder / "raw" / {"feat-truncated": "node-feat.csv.gz",
                                   "label-short": "node-label.csv.gz"}.get(case, "edge.csv.gz")
    if case.endswith("missing"):
        target.unlink()
    elif case == "edge-count":
        formats.write_csv_gz(folder / "raw" / "num-edge-list.csv.gz", np.array([151]))
    elif case == "label-short":
        formats.write_csv_gz(target, np.zeros(399, dtype=np.int64))  # 400 vertices
    else:
        formats.truncate(target, 0.6)
    with pytest.raises(DistgnnError) as info:
        fetch(dataset, root=tmp_path / "data", source=folder)
    message = str(info.value)
    assert "\n" not in message
    named = "edge.csv.gz" if case == "edge-count" else target.name
    assert named in message, message
    assert_no_store(tmp_path / "data")


# --- downloads from a local HTTP server ------------------------------------------------------

@pytest.fixture(autouse=True)
def _no_retry_pauses(monkeypatch):
    from distgnn.data import download

    monkeypatch.setattr(download, "RETRY_DELAYS_S", (0.0, 0.0))


class _Server:
    """Serves a folder on 127.0.0.1 (a stand-in for the publisher's server; no network)."""

    def __init__(self, folder: Path, truncate_to: int | None = None, cut_first: int = 10**9):
        import functools
        import http.server
        import threading

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def copyfile(self, source, outputfile):
                server.requests += 1
                if truncate_to is None or server.requests > cut_first:
                    return super().copyfile(source, outputfile)
                outputfile.write(source.read(truncate_to))  # then close: a cut connection

        server = self
        self.requests = 0
        handler = functools.partial(Handler, directory=str(folder))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("dataset", ["cora", "reddit", "ogbn-products"])
def test_download_then_convert_matches_source(tmp_path, monkeypatch, dataset):
    force_reddit_reader(monkeypatch, "own")
    served = tmp_path / "served"
    served.mkdir()
    if dataset == "cora":
        monkeypatch.setattr(planetoid, "NUM_VAL", 10)
        folder, *_ = make_planetoid(tmp_path, "cora", False)
        for path in folder.iterdir():
            (served / path.name).write_bytes(path.read_bytes())
    elif dataset == "reddit":
        folder, *_ = make_reddit(tmp_path)
        formats.zip_folder(folder, served / "reddit.zip", "")
    else:
        folder, *_ = make_products(tmp_path)
        formats.zip_folder(folder, served / "products.zip", "products")
    server = _Server(served)
    try:
        monkeypatch.setattr(planetoid, "URL", server.url + "/ind.{name}.{ext}")
        monkeypatch.setattr(reddit, "URL", server.url + "/reddit.zip")
        real_meta = ogb_source.ogb_meta
        monkeypatch.setattr(ogb_source, "ogb_meta", lambda d: ogb_source.OgbMeta(
            **{**real_meta(d).__dict__, "url": server.url + "/products.zip"}))
        downloaded = GraphStore.open(fetch(dataset, root=tmp_path / "dl"))
    finally:
        server.close()
    local = GraphStore.open(fetch(dataset, root=tmp_path / "local", source=folder))
    assert downloaded.attrs["checksum"] == local.attrs["checksum"]
    assert server.url in downloaded.attrs["source"]
    leftovers = [p.name for p in (tmp_path / "dl").rglob("*") if ".part" in p.name or p.suffix == ".zip"]
    assert not leftovers


def test_cut_download_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    served = tmp_path / "served"
    served.mkdir()
    (served / "reddit.zip").write_bytes(b"x" * 100_000)
    server = _Server(served, truncate_to=1000)
    try:
        monkeypatch.setattr(reddit, "URL", server.url + "/reddit.zip")
        with pytest.raises(DistgnnError) as info:
            fetch("reddit", root=tmp_path / "data")
    finally:
        server.close()
    message = str(info.value)
    assert "\n" not in message and "reddit" in message and server.url in message
    assert "--source" in message and "1000 of 100000 bytes" in message
    assert not [p for p in (tmp_path / "data").rglob("*") if p.is_file()]


def _closed_port() -> int:
    import socket

    with socket.socket() as s:  # bound, then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("offline", ["no network", "refused"])
def test_offline_fetch_names_the_url_and_source_once(tmp_path, monkeypatch, capsys, offline):
    """Without network (the host name does not resolve) one line: the URL and the --source hint,
    the dataset named once; a refused connection is retried, each notice naming it once."""
    import socket

    from distgnn.data.download import RETRY_DELAYS_S

    if offline == "no network":
        def no_dns(*args, **kwargs):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

        monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    else:
        monkeypatch.setattr(planetoid, "URL",
                            f"http://127.0.0.1:{_closed_port()}/ind.{{name}}.{{ext}}")
    url = planetoid.URL.format(name="cora", ext=planetoid.EXTS[0])
    assert cli.main(["fetch", "cora", "--root", str(tmp_path / "data")]) == 2
    lines = capsys.readouterr().err.splitlines()
    retries = 0 if offline == "no network" else len(RETRY_DELAYS_S)
    assert len(lines) == retries + 1 and not any("cora: cora" in l for l in lines), lines
    for notice in lines[:-1]:
        assert notice.startswith(f"cora: cannot download {url} (") and "retrying" in notice
    assert lines[-1].startswith(f"distgnn fetch: error: cora: cannot download {url} (")
    assert "--source DIR" in lines[-1]
    assert not (tmp_path / "data").exists()


def test_cut_download_is_retried_and_checked(tmp_path, capsys):
    """The first transfer is cut: the second attempt completes; a wrong published SHA-256 is
    refused in one line and leaves nothing."""
    import hashlib

    from distgnn.data.download import download
    from distgnn.progress import set_quiet

    set_quiet(False)  # an earlier test's --quiet may still be set in this process
    served = tmp_path / "served"
    served.mkdir()
    payload = bytes(range(256)) * 400
    (served / "a.bin").write_bytes(payload)
    server = _Server(served, truncate_to=1000, cut_first=1)
    try:
        got = download(server.url + "/a.bin", tmp_path / "dl" / "a.bin", dataset="demo",
                       sha256=hashlib.sha256(payload).hexdigest())
        assert got.read_bytes() == payload and server.requests == 2
        assert "retrying" in capsys.readouterr().err
        with pytest.raises(DistgnnError) as info:
            download(server.url + "/a.bin", tmp_path / "dl2" / "a.bin", dataset="demo", sha256="0" * 64)
    finally:
        server.close()
    assert "SHA-256" in str(info.value) and "\n" not in str(info.value)
    assert not [p for p in (tmp_path / "dl2").rglob("*") if p.is_file()]


def test_csv_blocks_hold_at_most_the_requested_rows(tmp_path):
    from distgnn.data.csv_stream import iter_csv

    rows = np.arange(23 * 3, dtype=np.int64).reshape(23, 3)
    formats.write_csv_gz(tmp_path / "a.csv.gz", rows)
    blocks = list(iter_csv(tmp_path / "a.csv.gz", 10, np.int64, width=3))
    assert [len(b) for b in blocks] == [10, 10, 3]
    np.testing.assert_array_equal(np.concatenate(blocks), rows)
    with pytest.raises(DistgnnError, match="3 columns, expected 4"):
        list(iter_csv(tmp_path / "a.csv.gz", 10, np.int64, width=4))


def test_undirected_flag_does_not_double_symmetric_sources(tmp_path, monkeypatch):
    """cora and reddit already hold both directions: --undirected must not add a second copy."""
    force_reddit_reader(monkeypatch, "own")
    cora, *_ = make_planetoid(tmp_path, "cora", False)
    red, *_ = make_reddit(tmp_path)
    for dataset, folder in (("cora", cora), ("reddit", red)):
        plain = GraphStore.open(fetch(dataset, root=tmp_path / "plain", source=folder))
        undirected = GraphStore.open(fetch(dataset, root=tmp_path / "und", source=folder,
                                           undirected=True))
        assert undirected.num_edges == plain.num_edges
        assert undirected.attrs["checksum"] == plain.attrs["checksum"]
