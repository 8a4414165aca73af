"""The canonical graph store: content, checksums, atomic writes, damaged chunks."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from conftest import reference_csr, run_cli, write_npy_graph
from distgnn.data.fetch import fetch
from distgnn.data.graph_store import GraphStore, store_name
from distgnn.errors import DistgnnError


def test_npy_folder_round_trip(tmp_path: Path) -> None:
    folder = tmp_path / "npy"
    arrays = write_npy_graph(folder, num_nodes=60, num_edges=400)
    path = fetch("npy", root=tmp_path / "data", source=folder, name="g")
    assert path == tmp_path / "data" / "g" / "graph.zarr"
    store = GraphStore.open(path)
    indptr, indices = store.csr()
    ref_indptr, ref_indices = reference_csr(arrays["src"], arrays["dst"], 60)
    np.testing.assert_array_equal(indptr, ref_indptr)
    np.testing.assert_array_equal(indices, ref_indices)
    assert indices.dtype == np.int32
    np.testing.assert_array_equal(store.read("feat"), arrays["feat"])
    np.testing.assert_array_equal(store.read("label"), arrays["label"])
    for mask in ("train_mask", "val_mask", "test_mask"):
        np.testing.assert_array_equal(store.read(mask), arrays[mask])
    attrs = store.attrs
    assert (attrs["num_nodes"], attrs["num_edges"], attrs["num_classes"], attrs["feat_dim"]) == (
        60, 400, int(arrays["label"].max()) + 1, 7)
    assert attrs["directed"] is True and attrs["multilabel"] is False


def test_undirected_stores_both_directions(tmp_path: Path) -> None:
    folder = tmp_path / "npy"
    arrays = write_npy_graph(folder, num_nodes=30, num_edges=100)
    store = GraphStore.open(fetch("npy", root=tmp_path, source=folder, undirected=True))
    src = np.concatenate([arrays["src"], arrays["dst"]])
    dst = np.concatenate([arrays["dst"], arrays["src"]])
    ref_indptr, ref_indices = reference_csr(src, dst, 30)
    indptr, indices = store.csr()
    np.testing.assert_array_equal(indptr, ref_indptr)
    np.testing.assert_array_equal(indices, ref_indices)
    assert store.attrs["num_edges"] == 200 and store.attrs["directed"] is False


def test_missing_masks_get_a_seeded_split(tmp_path: Path) -> None:
    folder = tmp_path / "npy"
    write_npy_graph(folder, masks=False)
    a = GraphStore.open(fetch("npy", root=tmp_path / "a", source=folder, seed=3))
    b = GraphStore.open(fetch("npy", root=tmp_path / "b", source=folder, seed=3))
    masks = [a.read(m) for m in ("train_mask", "val_mask", "test_mask")]
    assert sum(m.sum() for m in masks) == 50 and not (masks[0] & masks[1]).any()
    assert a.attrs["checksum"] == b.attrs["checksum"]


def test_checksum_tracks_content(tmp_path: Path) -> None:
    folder = tmp_path / "npy"
    write_npy_graph(folder, seed=1)
    first = GraphStore.open(fetch("npy", root=tmp_path / "a", source=folder)).attrs["checksum"]
    arrays = write_npy_graph(folder, seed=1)
    arrays["feat"][3, 2] += 1.0
    np.save(folder / "feat.npy", arrays["feat"])
    second = GraphStore.open(fetch("npy", root=tmp_path / "b", source=folder)).attrs["checksum"]
    assert first != second


def test_store_names() -> None:
    assert store_name("synth-reddit", 0.01) == "synth-reddit-x0.01"
    assert store_name("synth-reddit", 1.0, 2) == "synth-reddit-seed2"
    assert store_name("cora") == "cora"
    assert store_name("cora", name="mine") == "mine"


def test_every_array_has_a_checksum_codec(tmp_path: Path) -> None:
    folder = tmp_path / "npy"
    write_npy_graph(folder)
    store = GraphStore.open(fetch("npy", root=tmp_path, source=folder))
    for name in store.group.array_keys():
        codecs = [type(c).__name__ for c in store[name].metadata.codecs]
        assert "Crc32cCodec" in codecs, (name, codecs)


def _one_line_error(proc) -> str:
    assert proc.returncode != 0, proc.stdout
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_deleted_chunk_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "npy"
    write_npy_graph(folder)
    path = fetch("npy", root=tmp_path, source=folder)
    os.remove(path / "label" / "c" / "0")
    with pytest.raises(DistgnnError, match="label.*missing"):
        GraphStore.open(path)
    line = _one_line_error(run_cli("inspect", path))
    assert "label" in line and "missing" in line


def test_corrupted_chunk_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "npy"
    write_npy_graph(folder)
    path = fetch("npy", root=tmp_path, source=folder)
    chunk = path / "indices" / "c" / "0"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    line = _one_line_error(run_cli("inspect", path))
    assert "indices" in line and "corrupted" in line


@pytest.mark.parametrize("case", ["missing_file", "truncated", "label_out_of_range",
                                  "mask_length", "nan_feature", "edge_out_of_range",
                                  "no_training_vertex"])
def test_bad_input_leaves_no_store(tmp_path: Path, case: str) -> None:
    folder = tmp_path / "npy"
    arrays = write_npy_graph(folder)
    expect = {"missing_file": "feat.npy", "truncated": "feat.npy", "label_out_of_range": "label.npy",
              "mask_length": "val_mask.npy", "nan_feature": "feat.npy", "edge_out_of_range": "src.npy",
              "no_training_vertex": "train_mask.npy"}[case]
    if case == "missing_file":
        os.remove(folder / "feat.npy")
    elif case == "truncated":
        raw = (folder / "feat.npy").read_bytes()
        (folder / "feat.npy").write_bytes(raw[: len(raw) - 40])
    elif case == "label_out_of_range":
        arrays["label"][5] = -5
        np.save(folder / "label.npy", arrays["label"])
    elif case == "mask_length":
        np.save(folder / "val_mask.npy", arrays["val_mask"][:-3])
    elif case == "nan_feature":
        arrays["feat"][7, 1] = np.nan
        np.save(folder / "feat.npy", arrays["feat"])
    elif case == "edge_out_of_range":
        arrays["src"][11] = 50
        np.save(folder / "src.npy", arrays["src"])
    elif case == "no_training_vertex":
        np.save(folder / "train_mask.npy", np.zeros(50, dtype=bool))
    proc = run_cli("fetch", "npy", "--source", folder, "--root", tmp_path / "data", "--quiet")
    line = _one_line_error(proc)
    assert expect in line, line
    store_dir = tmp_path / "data" / "npy"
    leftovers = list(store_dir.iterdir()) if store_dir.exists() else []
    assert not any(p.name == "graph.zarr" or p.name.startswith(".graph.zarr") for p in leftovers), leftovers


def test_unknown_dataset_is_one_line(tmp_path: Path) -> None:
    line = _one_line_error(run_cli("fetch", "ogbn-nope", "--root", tmp_path))
    assert "unknown dataset 'ogbn-nope'" in line
    assert not (tmp_path / "ogbn-nope").exists()


def test_existing_store_is_kept_unless_forced(tmp_path: Path) -> None:
    folder = tmp_path / "npy"
    write_npy_graph(folder)
    proc = run_cli("fetch", "npy", "--source", folder, "--root", tmp_path, "--quiet")
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("fetch", "npy", "--source", folder, "--root", tmp_path, "--quiet")
    assert proc.returncode == 0 and "exists" in proc.stdout


def test_npy_stores_are_named_after_their_folder_and_another_graph_is_never_reused(tmp_path: Path) -> None:
    """Two npy folders make two stores named after them; a store of one name that holds another
    graph (two folders of one name, a --name given to two datasets) is refused in one line and
    kept byte-identical, where it used to say "exists" and train the first graph again."""
    from test_run_folder import digest

    first, second = tmp_path / "a" / "cites", tmp_path / "b" / "friends"
    write_npy_graph(first, num_nodes=40, seed=1)
    write_npy_graph(second, num_nodes=70, seed=2)
    data = tmp_path / "data"
    for folder in (first, second):
        proc = run_cli("fetch", "npy", "--source", folder, "--root", data, "--quiet")
        assert proc.returncode == 0, proc.stderr
    assert GraphStore.open(data / "cites" / "graph.zarr").num_nodes == 40
    assert GraphStore.open(data / "friends" / "graph.zarr").num_nodes == 70
    again = run_cli("fetch", "npy", "--source", first, "--root", data, "--quiet")
    assert again.returncode == 0 and "exists" in again.stdout        # the same graph: kept
    before = digest(data / "cites")
    namesake = tmp_path / "c" / "cites"
    write_npy_graph(namesake, num_nodes=30, seed=3)
    line = _one_line_error(run_cli("fetch", "npy", "--source", namesake, "--root", data))
    assert f"{data / 'cites' / 'graph.zarr'} exists and holds another graph (source {first.resolve()}" in line
    assert "give --name for a store of its own, or --force to replace it" in line
    line = _one_line_error(run_cli("fetch", "synth-reddit", "--scale", "0.002", "--name", "cites",
                                   "--root", data))
    assert "holds another graph (dataset npy" in line
    assert digest(data / "cites") == before
    with pytest.raises(DistgnnError, match="holds another graph"):
        fetch("npy", root=data, source=namesake)
    assert store_name("npy", source=namesake) == "cites" and store_name("npy") == "npy"


@pytest.mark.parametrize("multilabel", [False, True])
def test_a_graph_in_memory_makes_the_store_its_npy_folder_makes(tmp_path: Path, multilabel: bool) -> None:
    """numpy arrays, a scipy matrix, a DGLGraph and a PyG Data of one graph each write the store
    the npy folder of the same arrays gives: the same CSR, features, labels and masks
    (docs/design.md#own-graphs); without masks, the same seeded split."""
    import scipy.sparse
    import torch

    from distgnn.data import arrays as own

    folder = tmp_path / "g"
    a = write_npy_graph(folder, num_nodes=60, num_edges=400, seed=4)
    if multilabel:
        a["label"] = (np.random.default_rng(0).random((60, 3)) < 0.4).astype(np.float32)
        np.save(folder / "label.npy", a["label"])
    reference = GraphStore.open(fetch("npy", root=tmp_path / "npy", source=folder))
    masks = {k: a[k] for k in ("train_mask", "val_mask", "test_mask")}
    made = {"arrays": own.write_arrays(tmp_path / "out", "arrays", a["src"], a["dst"], a["feat"],
                                       a["label"], masks),
            "scipy": own.write_scipy(tmp_path / "out", "scipy",
                                     scipy.sparse.coo_matrix((np.ones(400), (a["src"], a["dst"])),
                                                             shape=(60, 60)).tocsr(),
                                     a["feat"], a["label"], masks)}
    import dgl
    from torch_geometric.data import Data

    g = dgl.graph((torch.from_numpy(a["src"]), torch.from_numpy(a["dst"])), num_nodes=60)
    g.ndata["feat"], g.ndata["label"] = torch.from_numpy(a["feat"]), torch.from_numpy(a["label"])
    for k, v in masks.items():
        g.ndata[k] = torch.from_numpy(v)
    made["dgl"] = own.write_dgl(tmp_path / "out", "dgl", g)
    made["pyg"] = own.write_pyg(tmp_path / "out", "pyg", Data(
        x=torch.from_numpy(a["feat"]), y=torch.from_numpy(a["label"]),
        edge_index=torch.from_numpy(np.stack([a["src"], a["dst"]])), **{k: torch.from_numpy(v) for k, v in masks.items()}))
    ref_indptr, ref_indices = reference.csr()
    for kind, path in made.items():
        store = GraphStore.open(path)
        indptr, indices = store.csr()
        # scipy's matrix sums duplicate edges into one entry: compare its edge set
        if kind == "scipy":
            assert set(zip(np.repeat(np.arange(60), np.diff(indptr)), indices)) == \
                set(zip(np.repeat(np.arange(60), np.diff(ref_indptr)), ref_indices))
        else:
            np.testing.assert_array_equal(indptr, ref_indptr, err_msg=kind)
            np.testing.assert_array_equal(indices, ref_indices, err_msg=kind)
        for key in ("feat", "label", "train_mask", "val_mask", "test_mask"):
            np.testing.assert_array_equal(store.read(key), reference.read(key), err_msg=f"{kind} {key}")
        assert store.attrs["multilabel"] is multilabel and store.attrs["name"] == kind
    # without masks: the npy folder's seeded split
    unsplit = own.write_arrays(tmp_path / "out", "unsplit", a["src"], a["dst"], a["feat"], a["label"], seed=5)
    for k in masks:
        (folder / f"{k}.npy").unlink()
    split = GraphStore.open(fetch("npy", root=tmp_path / "npy2", source=folder, seed=5))
    for k in masks:
        np.testing.assert_array_equal(GraphStore.open(unsplit).read(k), split.read(k))
    with pytest.raises(DistgnnError, match="exists .* force=True"):
        own.write_arrays(tmp_path / "out", "arrays", a["src"], a["dst"], a["feat"], a["label"])
    # a folder of that name holding anything but a dataset is left as it was
    run = tmp_path / "out" / "a-run"
    run.mkdir()
    (run / "summary.json").write_text("{}")
    (tmp_path / "out" / "notes").mkdir()
    (tmp_path / "out" / "notes" / "todo.txt").write_text("mine")
    for name, needle in (("a-run", "is a run folder, not a dataset folder"),
                         ("notes", "holds files that are not a distgnn dataset")):
        with pytest.raises(DistgnnError, match=needle):
            own.write_arrays(tmp_path / "out", name, a["src"], a["dst"], a["feat"], a["label"], force=True)
        assert not (tmp_path / "out" / name / "graph.zarr").exists()
    with pytest.raises(DistgnnError, match="give all of train_mask, val_mask, test_mask or none"):
        own.write_arrays(tmp_path / "out", "x", a["src"], a["dst"], a["feat"], a["label"],
                         {"train_mask": masks["train_mask"]})
