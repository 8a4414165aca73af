"""Writers of small datasets in each real on-disk format, for the loader tests.

Each writer takes the ground truth (what the store should hold) and lays it out the way the
publisher does: OGB's raw csv.gz and binary npz layouts with split folders, Planetoid's
``ind.<name>.*`` pickles (including Citeseer's gaps in the test ids), DGL's two Reddit npz files.
"""
from __future__ import annotations

import gzip
import pickle
import zipfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import scipy.sparse as sp


def write_csv_gz(path: Path, rows: np.ndarray) -> None:
    """A headerless csv.gz, one row per line (float32-exact: 9 significant digits)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = np.asarray(rows)
    if rows.ndim == 1:
        rows = rows[:, None]
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(",".join("" if (isinstance(v, float) and np.isnan(v)) else
                             (f"{v:.9g}" if isinstance(v, float) else str(v))
                             for v in row.tolist()) + "\n")


def write_split(folder: Path, split: str, ids: dict[str, np.ndarray]) -> None:
    """``split/<split>/{train,valid,test}.csv.gz``."""
    for part in ("train", "valid", "test"):
        write_csv_gz(folder / "split" / split / f"{part}.csv.gz", np.asarray(ids[part], np.int64))


def write_ogb_csv(folder: Path, *, num_nodes: int, edges: np.ndarray, labels: np.ndarray,
                  split: str, ids: dict[str, np.ndarray], node_feat: np.ndarray | None = None,
                  edge_feat: np.ndarray | None = None) -> Path:
    """OGB's csv layout (products, proteins): ``raw/*.csv.gz`` and ``split/<split>/``.

    ``edges`` int [E, 2] (each undirected edge once), ``labels`` [N] or [N, T]."""
    raw = folder / "raw"
    write_csv_gz(raw / "edge.csv.gz", np.asarray(edges, np.int64))
    write_csv_gz(raw / "num-node-list.csv.gz", np.array([num_nodes]))
    write_csv_gz(raw / "num-edge-list.csv.gz", np.array([len(edges)]))
    if node_feat is not None:
        write_csv_gz(raw / "node-feat.csv.gz", node_feat.astype(np.float64))
    if edge_feat is not None:
        write_csv_gz(raw / "edge-feat.csv.gz", edge_feat.astype(np.float64))
        write_csv_gz(raw / "node_species.csv.gz", np.full(num_nodes, 3702))
    write_csv_gz(raw / "node-label.csv.gz", labels)
    write_split(folder, split, ids)
    (folder / "RELEASE_v1.txt").write_text("test dataset\n")
    return folder


def write_ogb_binary(folder: Path, *, edge_index: np.ndarray, node_feat: np.ndarray,
                     node_label: np.ndarray, split: str, ids: dict[str, np.ndarray],
                     fortran: bool = False) -> Path:
    """OGB's binary layout (papers100M): ``raw/data.npz``, ``raw/node-label.npz`` (float labels
    [N, 1], NaN where unlabelled) and ``split/<split>/``. ``fortran`` stores edge_index
    column-major (interleaved pairs), as a transposed array would be saved."""
    raw = folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    edge_index = np.asarray(edge_index, np.int64)
    edge_index = np.asfortranarray(edge_index) if fortran else np.ascontiguousarray(edge_index)
    n = len(node_feat)
    np.savez_compressed(raw / "data.npz", edge_index=edge_index,
                        num_nodes_list=np.array([n]), num_edges_list=np.array([edge_index.shape[1]]),
                        node_feat=node_feat.astype(np.float32),
                        node_year=np.full((n, 1), 2020, np.int64))
    np.savez_compressed(raw / "node-label.npz", node_label=node_label.astype(np.float64))
    write_split(folder, split, ids)
    return folder


def write_planetoid(folder: Path, name: str, *, feat: np.ndarray, labels: np.ndarray,
                    num_classes: int, num_all: int, num_train: int, test_ids: np.ndarray,
                    graph: dict[int, list[int]]) -> Path:
    """The eight ``ind.<name>.*`` files as Planetoid publishes them.

    ``feat`` [N, F] and ``labels`` [N] are the truth; vertices ``< num_all`` go to allx/ally (the
    first ``num_train`` also to x/y); ``test_ids`` (in file order) to tx/ty/test.index. Vertices at
    or above ``num_all`` that are not in ``test_ids`` are Citeseer-style gaps: written nowhere.
    """
    folder.mkdir(parents=True, exist_ok=True)
    onehot = np.zeros((len(labels), num_classes), dtype=np.int32)
    have = labels >= 0
    onehot[np.flatnonzero(have), labels[have]] = 1

    def dump(ext: str, obj: object) -> None:
        # protocol 2 with the module paths of the published (Python 2 era) files
        data = pickle.dumps(obj, protocol=2)
        for new, old in ((b"scipy.sparse._csr\n", b"scipy.sparse.csr\n"),
                         (b"numpy._core.multiarray\n", b"numpy.core.multiarray\n")):
            data = data.replace(new, old)
        (folder / f"ind.{name}.{ext}").write_bytes(data)

    dump("x", sp.csr_matrix(feat[:num_train].astype(np.float32)))
    dump("y", onehot[:num_train])
    dump("allx", sp.csr_matrix(feat[:num_all].astype(np.float32)))
    dump("ally", onehot[:num_all])
    dump("tx", sp.csr_matrix(feat[test_ids].astype(np.float32)))
    dump("ty", onehot[test_ids])
    dd = defaultdict(list)
    for u, vs in graph.items():
        dd[u] = list(vs)
    dump("graph", dd)
    (folder / f"ind.{name}.test.index").write_text("".join(f"{i}\n" for i in test_ids))
    return folder


def write_reddit(folder: Path, *, feat: np.ndarray, labels: np.ndarray, node_types: np.ndarray,
                 src: np.ndarray, dst: np.ndarray, fmt: str = "coo") -> Path:
    """DGL's ``reddit_data.npz`` and ``reddit_graph.npz`` (scipy ``save_npz`` of the adjacency,
    entry (src, dst) = edge src -> dst)."""
    folder.mkdir(parents=True, exist_ok=True)
    n = len(feat)
    np.savez_compressed(folder / "reddit_data.npz", feature=feat.astype(np.float32),
                        label=labels.astype(np.int64), node_types=node_types.astype(np.int32),
                        node_ids=np.arange(n))
    adj = sp.coo_matrix((np.ones(len(src), np.float32), (src, dst)), shape=(n, n))
    if fmt != "coo":
        # tocsr sums duplicates: only pass duplicate-free edges with fmt="csr"/"csc"
        adj = adj.asformat(fmt)
    sp.save_npz(folder / "reddit_graph.npz", adj)
    return folder


def zip_folder(folder: Path, archive: Path, top: str) -> Path:
    """Zip ``folder`` with its files under ``top/`` (as OGB and DGL archives are laid out)."""
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, f"{top}/{path.relative_to(folder)}" if top else str(path.relative_to(folder)))
    return archive


def truncate(path: Path, keep: float = 0.5) -> None:
    """Cut ``path`` to a fraction of its bytes (a partial download)."""
    data = path.read_bytes()
    path.write_bytes(data[:max(1, int(len(data) * keep))])
