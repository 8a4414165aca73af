"""The run folder's probe (distgnn/train/shared_folder.py, docs/design.md#shared-run-folder): how long
a rank looks for rank 0's file, and what it answers."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from distgnn.errors import CollectiveError
from distgnn.train import shared_folder
from distgnn.train.shared_folder import PROBE_WAIT_ENV, PROBE_WAIT_S, check_shared_folder


class RankOfTwo:
    """Rank ``rank`` of two, alone: ``bcast`` answers what rank 0 would send (``sent``, in order);
    ``gather`` keeps what this rank gave."""

    def __init__(self, rank: int, sent: list) -> None:
        self.rank, self.size, self.sent, self.gathered = rank, 2, list(sent), []

    def bcast(self, value: object) -> object:
        return value if self.rank == 0 else self.sent.pop(0)

    def barrier(self) -> None:
        pass

    def gather(self, value: object) -> list | None:
        self.gathered.append(value)
        return None


def test_the_wait_is_ten_seconds_unless_the_environment_says_otherwise(monkeypatch) -> None:
    monkeypatch.delenv(PROBE_WAIT_ENV, raising=False)
    assert shared_folder.probe_wait_s() == PROBE_WAIT_S == 10.0
    monkeypatch.setenv(PROBE_WAIT_ENV, " 2.5 ")
    assert shared_folder.probe_wait_s() == 2.5
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv(PROBE_WAIT_ENV, bad)
        with pytest.raises(CollectiveError, match=rf"^{PROBE_WAIT_ENV}='{bad}': expected seconds >= 0$"):
            shared_folder.probe_wait_s()


def test_a_rank_that_cannot_see_the_probe_says_so_after_the_wait(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(PROBE_WAIT_ENV, "0.3")
    elsewhere = tmp_path / "not-here"  # the folder rank 0 wrote into does not exist on this host
    comm = RankOfTwo(1, sent=["abcd", None])
    start = time.monotonic()
    check_shared_folder(elsewhere, comm)
    took = time.monotonic() - start
    assert comm.gathered[0][1] is False
    assert 0.3 <= took < PROBE_WAIT_S


def test_a_rank_that_sees_the_probe_answers_at_once(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv(PROBE_WAIT_ENV, raising=False)
    (tmp_path / ".shared-probe-abcd").write_text("host0")
    comm = RankOfTwo(1, sent=["abcd", None])
    start = time.monotonic()
    check_shared_folder(tmp_path, comm)
    assert comm.gathered[0][1] is True
    assert time.monotonic() - start < PROBE_WAIT_S


def test_rank_zero_names_the_ranks_that_cannot_see(tmp_path: Path) -> None:
    class Root(RankOfTwo):
        def gather(self, value: object) -> list:
            return [value, ("node7", False)]

    with pytest.raises(CollectiveError, match=r"^--out .*: not one folder for every rank: rank 1 "
                                              r"\(node7\) cannot see what rank 0 \(.+\) writes"):
        check_shared_folder(tmp_path, Root(0, sent=[]))
    assert list(tmp_path.iterdir()) == []  # the probe is removed
