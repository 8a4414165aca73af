"""The partition commands: DAG stages, inspect, verify (and what it catches), bad input."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

from distgnn import cli
from distgnn.partition import part_writer as build_mod
from partition_helpers import make_store


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("g"), "powerlaw", n=50, seed=3)


@pytest.fixture(scope="module")
def built(graph, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("p") / "libra-3"
    assert cli.main(["partition", str(graph), "--parts", "3", "--out", str(out), "--quiet",
                     "--threads", "2"]) == 0
    return out


def run(argv, capsys) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_stages_equal_all_in_one(graph, built, tmp_path, capsys):
    out = tmp_path / "staged"
    code, text, _ = run(["partition", "assign", str(graph), "--parts", "3", "--out", str(out),
                         "--quiet"], capsys)
    assert code == 0 and "replication factor" in text
    for k in range(3):
        assert run(["partition", "build", str(out), "--part", str(k), "--quiet"], capsys)[0] == 0
    for path in sorted(built.rglob("*")):
        if path.is_file():
            assert (out / path.relative_to(built)).read_bytes() == path.read_bytes(), path


def test_default_out_and_attrs(graph, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert run(["partition", "assign", str(graph), "--parts", "2", "--method", "hash",
                "--quiet"], capsys)[0] == 0
    attrs = dict(zarr.open_group(str(tmp_path / "partitions/t-powerlaw/hash-2/assignment.zarr"),
                                 mode="r").attrs)
    assert attrs["graph"] == str(graph.resolve()) and attrs["store"] == "t-powerlaw"
    for key in ("replication_factor", "edge_balance", "root_balance",
                "cd0_bytes_per_layer_per_width", "graph_checksum"):
        assert key in attrs


def test_inspect_and_verify(built, capsys):
    code, text, _ = run(["inspect", str(built)], capsys)
    assert code == 0 and "replication factor" in text and "train roots" in text
    assert "partials out" in text and "rows in" in text
    rows = [line.split() for line in text.splitlines()]
    assert [r[-2:] for r in rows if r[-2:] == ["yes", "dbg"]] == [["yes", "dbg"]] * 3
    code, text, _ = run(["verify", str(built), "--quiet"], capsys)
    assert code == 0 and "OK" in text


def _copy(built: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(built, dst)
    return dst


def _verify_fails(folder: Path, capsys, needle: str) -> None:
    code, _, err = run(["verify", str(folder), "--quiet"], capsys)
    assert code != 0
    assert len(err.strip().splitlines()) == 1 and needle in err, err


def _rewrite(folder: Path, k: int, name: str, fn) -> None:
    array = zarr.open_group(str(folder / f"part_{k}.zarr"), mode="r+")[name]
    array[...] = fn(array[...])


def test_verify_catches_moved_edge(built, tmp_path, capsys):
    folder = _copy(built, tmp_path)
    # point one edge at another local source: the edge set no longer matches the graph's
    _rewrite(folder, 0, "indices", lambda a: np.where(np.arange(len(a)) == 0, (a[0] + 1) % 5, a))
    _rewrite(folder, 0, "t_indices", lambda a: a)  # keep the chunk valid, transposes now differ
    _verify_fails(folder, capsys, "part_0.zarr")


def test_verify_catches_leaf_mask(built, tmp_path, capsys):
    folder = _copy(built, tmp_path)
    is_root = zarr.open_group(str(folder / "part_1.zarr"), mode="r")["is_root"][:]
    assert (~is_root).any()
    _rewrite(folder, 1, "train_mask", lambda a: a | ~is_root)
    _verify_fails(folder, capsys, "train_mask")


def test_verify_catches_feature_change(built, tmp_path, capsys):
    folder = _copy(built, tmp_path)
    _rewrite(folder, 2, "feat", lambda a: a + np.float32(1e-3))
    _verify_fails(folder, capsys, "feat")


def test_verify_catches_comm_order(built, tmp_path, capsys):
    folder = _copy(built, tmp_path)
    group = zarr.open_group(str(folder / "part_0.zarr"), mode="r+")
    send = group["comm/leaf_send"]
    if send.shape[0] < 2:
        pytest.skip("no two leaves to swap")  # pragma: no cover
    send[...] = send[...][::-1]
    _verify_fails(folder, capsys, "leaf_send")


def test_verify_catches_corrupt_chunk(built, tmp_path, capsys):
    folder = _copy(built, tmp_path)
    chunk = next(p for p in sorted((folder / "part_1.zarr/feat").rglob("*"))
                 if p.is_file() and p.name != "zarr.json")
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    _verify_fails(folder, capsys, "corrupt")


def test_verify_catches_missing_part(built, tmp_path, capsys):
    folder = _copy(built, tmp_path)
    shutil.rmtree(folder / "part_2.zarr")
    _verify_fails(folder, capsys, "part_2.zarr: missing")


@pytest.mark.parametrize("argv,needle", [
    (["--parts", "0"], "--parts"),
    (["--parts", "51"], "--parts"),
    (["--parts", "2", "--method", "metis"], "unknown method 'metis'"),
])
def test_bad_request(graph, tmp_path, capsys, argv, needle):
    code, _, err = run(["partition", str(graph), "--out", str(tmp_path / "o"), *argv], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_store_without_csr(graph, tmp_path, capsys):
    broken = tmp_path / "broken" / "graph.zarr"
    shutil.copytree(graph, broken)
    shutil.rmtree(broken / "indices")
    code, _, err = run(["partition", str(broken), "--parts", "2", "--out", str(tmp_path / "o")],
                       capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "indices" in err, err


def test_build_without_part_or_assignment(tmp_path, capsys):
    code, _, err = run(["partition", "build", str(tmp_path), "--part", "0"], capsys)
    assert code == 2 and "no assignment" in err
    code, _, err = run(["partition", "build", str(tmp_path)], capsys)
    assert code == 2 and "--part" in err


def test_interrupted_build_leaves_no_part(graph, tmp_path, monkeypatch, capsys):
    out = tmp_path / "p"
    assert run(["partition", "assign", str(graph), "--parts", "2", "--out", str(out),
                "--quiet"], capsys)[0] == 0
    original = build_mod.gather_rows_multi
    calls = []

    def interrupted(source, targets, desc="gather"):
        calls.append(1)
        original(source, targets, desc)
        raise KeyboardInterrupt  # half way: structure and features written, labels not

    monkeypatch.setattr(build_mod, "gather_rows_multi", interrupted)
    code, _, _ = run(["partition", "build", str(out), "--part", "1", "--quiet"], capsys)
    assert code == 130 and calls
    assert sorted(p.name for p in out.iterdir()) == ["assignment.zarr"]
    monkeypatch.setattr(build_mod, "gather_rows_multi", original)
    _verify_fails(out, capsys, "part_0.zarr: missing")


def test_stale_tmp_does_not_count(graph, tmp_path, capsys):
    """A build killed hard leaves only its temporary folder, which nothing takes for a part."""
    out = tmp_path / "p"
    assert run(["partition", str(graph), "--parts", "2", "--out", str(out), "--quiet"], capsys)[0] == 0
    shutil.move(out / "part_1.zarr", out / ".part_1.zarr.tmp-12345")
    _verify_fails(out, capsys, "part_1.zarr: missing")
    code, text, _ = run(["inspect", str(out)], capsys)
    assert code == 0 and text.strip().splitlines()[-1].split()[-2] == "no"


def test_force_with_fewer_parts_removes_the_stray_parts(graph, built, tmp_path, capsys):
    """Repartitioning a P-part folder into fewer parts with --force removes the parts beyond the
    new count; verify refuses a folder that still holds one."""
    folder = _copy(built, tmp_path)
    before = len(list(folder.glob("part_*.zarr")))
    fewer = before - 1
    code, _, err = run(["partition", str(graph), "--parts", str(fewer), "--out", str(folder),
                        "--force", "--quiet"], capsys)
    assert code == 0, err
    assert sorted(p.name for p in folder.glob("part_*.zarr")) == [f"part_{k}.zarr"
                                                                  for k in range(fewer)]
    assert run(["verify", str(folder), "--quiet"], capsys)[0] == 0
    shutil.copytree(folder / "part_0.zarr", folder / f"part_{fewer}.zarr")
    _verify_fails(folder, capsys, f"stray part_{fewer}.zarr")


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_missing_path_is_named(tmp_path, capsys, command):
    missing = tmp_path / "no-such-folder"
    code, _, err = run([command, str(missing)], capsys)
    assert code == 2 and err.splitlines() == [f"distgnn {command}: error: {missing}: no such file "
                                              f"or folder"], err


def test_existing_assignment_needs_force(graph, built, capsys):
    code, _, err = run(["partition", "assign", str(graph), "--parts", "3", "--out", str(built)],
                       capsys)
    assert code == 2 and "--force" in err


def test_interrupted_partition_leaves_nothing(graph, tmp_path, monkeypatch, capsys):
    """An interrupted `distgnn partition` (assign + build) leaves no part and no assignment: an
    assignment without its parts must not look like a finished partition folder."""
    out = tmp_path / "p"
    original = build_mod.gather_rows_multi

    def interrupted(source, targets, desc=""):
        original(source, targets, desc)
        raise KeyboardInterrupt  # features of every part written, labels not

    monkeypatch.setattr(build_mod, "gather_rows_multi", interrupted)
    code, _, _ = run(["partition", str(graph), "--parts", "3", "--out", str(out), "--quiet"], capsys)
    assert code == 130
    assert not out.exists()  # the run made the folder: it goes too


def test_order_and_old_stream_spelling(graph, tmp_path, capsys):
    """--order names the vertex order (recorded per part, shown by inspect); its old values
    store/shuffle still mean the edge stream, with one line saying so; --stream is the new
    spelling, and the two contradicting is one line, exit 2."""
    out = tmp_path / "rcm"
    code, _, err = run(["partition", str(graph), "--parts", "2", "--order", "rcm", "--out",
                        str(out), "--quiet"], capsys)
    assert code == 0 and err == ""
    assert {zarr.open_group(str(out / f"part_{k}.zarr"), mode="r").attrs["vertex_order"]
            for k in range(2)} == {"rcm"}
    table = [line.split() for line in run(["inspect", str(out)], capsys)[1].splitlines()]
    assert [r[-2:] for r in table if r[-1:] == ["rcm"]] == [["yes", "rcm"]] * 2
    old, new = tmp_path / "old", tmp_path / "new"
    code, _, err = run(["partition", str(graph), "--parts", "2", "--method", "hdrf", "--order",
                        "store", "--out", str(old), "--quiet"], capsys)
    assert code == 0 and err.strip() == ("distgnn partition: --order store is now spelled --stream "
                                         "store (--order names the vertex order); taken as --stream")
    assert run(["partition", str(graph), "--parts", "2", "--method", "hdrf", "--stream", "store",
                "--out", str(new), "--quiet"], capsys)[0] == 0
    for folder in (old, new):
        assert zarr.open_group(str(folder / "assignment.zarr"), mode="r").attrs["order"] == "store"
    for path in sorted(new.rglob("*")):
        if path.is_file():
            assert (old / path.relative_to(new)).read_bytes() == path.read_bytes(), path
    code, _, err = run(["partition", str(graph), "--parts", "2", "--order", "shuffle", "--stream",
                        "store", "--out", str(tmp_path / "x")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "contradicts --stream" in err


def test_out_of_another_kind_is_refused_and_left_as_it_was(graph, built, tmp_path, capsys):
    """partition writes only into a new, empty or partition folder (docs/design.md#run-folder): a
    graph store, the dataset's folder, a run folder, a file or a folder of other files is refused
    in one line before anything is written, and left byte-identical; --force does not change that."""
    from test_run_folder import digest

    dataset = tmp_path / "data"
    shutil.copytree(graph.parent, dataset)
    store = dataset / graph.name
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text('{"epoch": 1}\n')
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    plain = tmp_path / "file"
    plain.write_text("x")
    cases = {store: "is a Zarr store, not a partition folder", dataset: "is a dataset folder",
             run_dir: "is a run folder", other: "holds files that are not distgnn partitions (notes.txt)",
             plain: "exists and is not a folder"}
    for out, words in cases.items():
        before = digest(out)
        for argv in (["partition"], ["partition", "assign"]):
            for force in ([], ["--force"]):
                code, _, err = run([*argv, str(graph), "--parts", "2", "--out", str(out), "--quiet",
                                    *force], capsys)
                lines = err.splitlines()
                assert code == 2 and len(lines) == 1, err
                assert lines[0].startswith(f"distgnn partition: error: --out {out}: {words}"), lines
                assert digest(out) == before, out
    # its own kind is replaced with --force, as before
    assert run(["partition", str(graph), "--parts", "3", "--out", str(built), "--quiet", "--force"],
               capsys)[0] == 0
