"""Outputs committed without a moment when they are missing, fsynced first, and the temporaries of
killed processes removed by the next run of the same stage, never those of a live process or of
another host (distgnn/atomic.py and its users: stores, predictions, checkpoints, spools)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import zarr

from conftest import write_npy_graph
from distgnn import atomic
from distgnn.data.fetch import fetch
from distgnn.partition.store_io import ScatteredRows
from distgnn.train import checkpoint
from distgnn.train.predict import write_rows_by_global_id
from distgnn.zarr_io import AtomicGroup

#: what a child holds open until it is killed: a store being written and a scratch spool beside it
HOLDER = textwrap.dedent("""
    import sys, time
    from distgnn import atomic
    from distgnn.zarr_io import AtomicGroup
    store = AtomicGroup(sys.argv[1], overwrite=True)
    spool = atomic.scratch_dir(sys.argv[1], "edges")
    spool.__enter__()
    print("ready", flush=True)
    time.sleep(600)
""")


def start_holder(target: Path) -> subprocess.Popen:
    """A process that has begun writing ``target`` (its temporaries exist when this returns)."""
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(target)], stdout=subprocess.PIPE,
                             text=True)
    assert child.stdout.readline().strip() == "ready"
    return child


def temporaries(target: Path) -> set[str]:
    """Names in ``target``'s folder that begin as ``target``'s temporaries do."""
    return {p.name for p in target.parent.iterdir() if p.name.startswith(f".{target.name}.")}


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped) on this host."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not atomic.process_alive(child.pid)
    return child.pid


def test_the_next_fetch_removes_a_killed_fetchs_temporaries_only(tmp_path: Path) -> None:
    source = tmp_path / "npy"
    write_npy_graph(source)
    target = tmp_path / "data" / "g" / "graph.zarr"
    target.parent.mkdir(parents=True)
    killed, live = start_holder(target), start_holder(target)
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        left_by_killed = temporaries(target) - {n for n in temporaries(target)
                                                if f".{live.pid}." in n}
        assert len(left_by_killed) == 2  # the store being written and the edge spool
        elsewhere = target.parent / f".graph.zarr.tmp@not-{atomic.host()}.{killed.pid}.0"
        other_target = target.parent / f".assignment.zarr.tmp@{atomic.host()}.{killed.pid}.0"
        for folder in (elsewhere, other_target):
            folder.mkdir()
        kept_before = temporaries(target) - left_by_killed

        fetch("npy", root=tmp_path / "data", source=source, name="g", force=True)

        assert target.is_dir()
        assert temporaries(target) == kept_before  # the live process's two, the other host's one
        assert len(kept_before) == 3 and other_target.is_dir()
    finally:
        live.kill()
        live.wait()


def test_a_part_build_removes_its_own_orphans_not_another_parts(tmp_path: Path) -> None:
    """Parallel per-part builds share the folder: part 0's build leaves part 1's spools alone."""
    pid, here = dead_pid(), atomic.host()
    mine = tmp_path / f".part_0.zarr.feat-rows@{here}.{pid}.3"
    theirs = tmp_path / f".part_1.zarr.feat-rows@{here}.{pid}.4"
    live = tmp_path / f".part_0.zarr.feat-rows@{here}.{os.getppid()}.5"
    for spool in (mine, theirs, live):
        spool.write_bytes(b"rows")
    with AtomicGroup(tmp_path / "part_0.zarr", overwrite=True) as store:
        store.commit({})
    assert not mine.exists() and theirs.exists() and live.exists()


def test_spools_are_named_as_temporaries_of_their_store(tmp_path: Path, monkeypatch) -> None:
    """The edge spool of a fetch and the row spool of a part build carry host and pid and name
    the store they build, so the next build of that store can remove them."""
    part = tmp_path / "part_2.zarr"
    writer = SimpleNamespace(array=SimpleNamespace(shape=(4, 3), dtype=np.float32, basename="feat"))
    rows = ScatteredRows(writer, np.array([3, 1, 0, 2]), part)
    assert atomic.owner(part, rows.path.name) == (atomic.host(), os.getpid())
    rows.close()

    import distgnn.data.store_writer as store_writer

    seen = []
    real = store_writer.build_csr
    monkeypatch.setattr(store_writer, "build_csr",
                        lambda source, work, *a: seen.append(work) or real(source, work, *a))
    source = tmp_path / "npy"
    write_npy_graph(source)
    target = fetch("npy", root=tmp_path / "data", source=source, name="g")
    assert [atomic.owner(target, w.name) for w in seen] == [(atomic.host(), os.getpid())]
    assert not seen[0].exists()


def test_a_checkpoint_file_removes_a_killed_writers_temporary(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    orphan = tmp_path / f".manifest.json.tmp@{atomic.host()}.{dead_pid()}.0"
    orphan.write_text("half")
    checkpoint.atomic_write_text("{}", path)
    assert path.read_text() == "{}" and not orphan.exists()


@pytest.fixture
def swappable(tmp_path: Path) -> None:
    """Skip where tmp_path's file system cannot swap two names in one step (the fallback's window
    is documented in distgnn/atomic.py)."""
    a, b = tmp_path / "swap-a", tmp_path / "swap-b"
    a.mkdir()
    b.mkdir()
    try:
        atomic.exchange(a, b)
    except OSError as exc:
        pytest.skip(f"no renameat2(RENAME_EXCHANGE) here: {exc}")
    finally:
        a.rmdir()
        b.rmdir()


def watch_target(monkeypatch, target: Path, version) -> list[tuple[str, object]]:
    """Record, after every rename, exchange or removal, the ``version(target)`` then in place
    (None: no store at ``target``)."""
    seen: list[tuple[str, object]] = []

    def watched(name, call):
        def wrapper(*args, **kwargs):
            result = call(*args, **kwargs)
            seen.append((name, version(target)))
            return result
        return wrapper

    for module, name in ((os, "replace"), (os, "rename"), (shutil, "rmtree"), (atomic, "exchange")):
        monkeypatch.setattr(module, name, watched(name, getattr(module, name)))
    return seen


def store_version(target: Path) -> object:
    """The ``version`` attribute of the store at ``target`` (None: none there), read from its
    metadata file (zarr itself cannot be called from inside its own file operations)."""
    try:
        return json.loads((target / "zarr.json").read_text())["attributes"].get("version")
    except (OSError, ValueError, KeyError):
        return None


def test_replacing_a_store_never_leaves_the_target_missing(tmp_path: Path, monkeypatch,
                                                           swappable) -> None:
    target = tmp_path / "graph.zarr"
    with AtomicGroup(target) as store:
        store.group.create_array("x", shape=(8,), dtype="i4")[:] = 1
        store.commit({"version": "old"})
    seen = watch_target(monkeypatch, target, store_version)
    with AtomicGroup(target, overwrite=True) as store:
        store.group.create_array("x", shape=(8,), dtype="i4")[:] = 2
        store.commit({"version": "new"})
    assert seen and all(v in ("old", "new") for _, v in seen), seen
    assert seen[-1][1] == "new" and temporaries(target) == set()


class OneRank:
    """The single-rank collectives :func:`write_rows_by_global_id` calls."""

    rank, size = 0, 1

    def bcast(self, value):
        return value

    def barrier(self) -> None:
        pass

    def alltoall(self, values):
        return values


def test_predict_replaces_its_store_without_a_missing_moment(tmp_path: Path, monkeypatch,
                                                             swappable) -> None:
    target = tmp_path / "predictions.zarr"
    gids = np.array([2, 0, 1])
    write_rows_by_global_id(OneRank(), target, {"logits": np.zeros((3, 2))}, gids, 3,
                            {"version": "old"})
    seen = watch_target(monkeypatch, target, store_version)
    write_rows_by_global_id(OneRank(), target, {"logits": np.ones((3, 2))}, gids, 3,
                            {"version": "new"})
    assert seen and all(v in ("old", "new") for _, v in seen), seen
    assert seen[-1][1] == "new" and temporaries(target) == set()
    assert (zarr.open_group(str(target), mode="r")["logits"][:] == 1).all()


def test_without_the_swap_the_old_store_is_renamed_aside_and_removed(tmp_path: Path,
                                                                     monkeypatch) -> None:
    """Where the file system refuses the swap: the new store in place, no aside left."""
    def refuse(a, b):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(atomic, "exchange", refuse)
    target = tmp_path / "graph.zarr"
    for version in ("old", "new"):
        with AtomicGroup(target, overwrite=True) as store:
            store.commit({"version": version})
    assert store_version(target) == "new" and temporaries(target) == set()


def fsync_log(monkeypatch) -> list[str]:
    """Paths fsynced from now on, in order."""
    log: list[str] = []
    real = os.fsync

    def fsync(fd):
        log.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return log


def test_a_store_is_fsynced_before_it_is_renamed_in(tmp_path: Path, monkeypatch) -> None:
    log = fsync_log(monkeypatch)
    at_rename: dict[str, set[str]] = {}
    real = os.replace

    def replace(src, dst):
        at_rename[str(src)] = set(log)
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    target = tmp_path / "graph.zarr"
    with AtomicGroup(target) as store:
        store.group.create_array("x", shape=(8,), dtype="i4")[:] = 1
        tmp = store.tmp
        written = {str(p) for p in [tmp, *tmp.rglob("*")]}
        store.commit({"version": "new"})
    assert written <= at_rename[str(tmp)], written - at_rename[str(tmp)]
    assert log[-1] == str(tmp_path)  # the rename itself, made durable


def test_a_checkpoint_file_is_fsynced_before_it_is_renamed_in(tmp_path: Path, monkeypatch) -> None:
    log = fsync_log(monkeypatch)
    renamed: list[tuple[str, list[str]]] = []
    real = os.replace
    monkeypatch.setattr(os, "replace",
                        lambda src, dst: renamed.append((str(src), list(log))) or real(src, dst))
    checkpoint.atomic_torch_save({"epoch": 3}, tmp_path / "rank_0.pt")
    [(tmp, synced)] = renamed
    assert synced == [tmp] and log[-1] == str(tmp_path)
