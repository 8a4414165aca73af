"""Checkpoint bookkeeping: only folders with a manifest count; two are kept; settings must match."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from distgnn.errors import DistgnnError
from distgnn.train import checkpoint as ckpt

HYPER = {"algo": "cd-0", "lr": 0.01}


def make(run: Path, epoch: int, manifest: bool, hyper: dict = HYPER) -> Path:
    folder = ckpt.checkpoint_dir(run, epoch)
    folder.mkdir(parents=True)
    (folder / "rank_0.pt").write_bytes(b"state")
    if manifest:
        ckpt.write_manifest(folder, epoch, hyper, num_parts=1)
    return folder


def test_a_checkpoint_without_manifest_is_ignored(tmp_path: Path) -> None:
    make(tmp_path, 5, manifest=True)
    make(tmp_path, 10, manifest=False)  # interrupted while writing
    epoch, folder = ckpt.newest_checkpoint(tmp_path, HYPER)
    assert epoch == 5 and folder.name == "epoch_000005"


def test_nothing_to_resume(tmp_path: Path) -> None:
    make(tmp_path, 3, manifest=False)
    assert ckpt.newest_checkpoint(tmp_path, HYPER) is None


def test_two_newest_are_kept(tmp_path: Path) -> None:
    for epoch in (2, 4, 6, 8):
        make(tmp_path, epoch, manifest=True)
    stale = make(tmp_path, 7, manifest=False)
    ckpt.prune(tmp_path)
    assert [e for e, _ in ckpt.complete_checkpoints(tmp_path)] == [6, 8]
    assert not stale.exists()


def test_other_hyperparameters_are_refused(tmp_path: Path) -> None:
    make(tmp_path, 5, manifest=True)
    with pytest.raises(DistgnnError, match="lr=0.01"):
        ckpt.newest_checkpoint(tmp_path, {**HYPER, "lr": 0.1})


def test_a_checkpoint_from_before_models_resumes_graphsage_only(tmp_path: Path) -> None:
    """A manifest without ``model`` was made by GraphSAGE: it resumes a sage run and refuses gcn."""
    make(tmp_path, 4, manifest=True)  # HYPER has no "model"
    assert ckpt.newest_checkpoint(tmp_path, {**HYPER, "model": "sage"})[0] == 4
    with pytest.raises(DistgnnError, match="model='sage', not 'gcn'"):
        ckpt.newest_checkpoint(tmp_path, {**HYPER, "model": "gcn"})


def test_a_checkpoint_of_another_format_is_refused(tmp_path: Path) -> None:
    """Format 1 (before distgnn/exchange) stored the exchange's state in another shape: refused
    in one line, not a KeyError deep in load_state_dict."""
    folder = make(tmp_path, 5, manifest=True)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["format"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DistgnnError, match="checkpoint format 1, this distgnn reads 2"):
        ckpt.newest_checkpoint(tmp_path, HYPER)


def test_a_checkpoint_of_another_partition_is_refused(tmp_path: Path) -> None:
    identity = ckpt.partition_identity({"P": 2, "assignment_checksum": "a" * 32,
                                        "vertex_order": "dbg"})
    folder = ckpt.checkpoint_dir(tmp_path, 5)
    folder.mkdir(parents=True)
    ckpt.write_manifest(folder, 5, HYPER, num_parts=2, partition=identity)
    assert ckpt.newest_checkpoint(tmp_path, HYPER, identity)[0] == 5
    with pytest.raises(DistgnnError, match="assignment_checksum='aaaa"):
        ckpt.newest_checkpoint(tmp_path, HYPER, {**identity, "assignment_checksum": "b" * 32})


def test_a_checkpoint_from_before_cdr_rules_resumes_the_first_rule_only(tmp_path: Path) -> None:
    """A cd-5 manifest without ``cdr_rule`` was made by the first rule (``delayed``): it resumes
    a run of that rule and refuses one of another (docs/design.md#cdr-rules)."""
    from distgnn.train.config import TrainConfig

    old = {k: v for k, v in TrainConfig(algo="cd-5", cdr_rule="delayed").hyperparameters().items()
           if k not in ("cdr_rule", "recompute_budget")}
    make(tmp_path, 4, manifest=True, hyper=old)
    same = TrainConfig(algo="cd-5", cdr_rule="delayed").hyperparameters()
    assert ckpt.newest_checkpoint(tmp_path, same)[0] == 4
    with pytest.raises(DistgnnError, match="cdr_rule='delayed', not 'recompute'"):
        ckpt.newest_checkpoint(tmp_path, TrainConfig(algo="cd-5", cdr_rule="recompute").hyperparameters())


def test_the_recompute_budget_is_a_hyperparameter_where_the_leaves_recompute(tmp_path: Path) -> None:
    """--recompute-budget (docs/design.md#cdr-rules) is recorded as in force: the default 1 for
    cd-r under the default rule, the given value, None where nothing recomputes (cd-0, the
    first rule, GAT); a checkpoint of one budget is not resumed under another."""
    from distgnn.train.config import TrainConfig

    assert TrainConfig(algo="cd-5").hyperparameters()["recompute_budget"] == 1.0
    assert TrainConfig(algo="cd-5", recompute_budget=0.5).hyperparameters()["recompute_budget"] == 0.5
    for config in (TrainConfig(algo="cd-0"), TrainConfig(algo="cd-5", cdr_rule="delayed"),
                   TrainConfig(algo="cd-5", model="gat"), TrainConfig(algo="cd-5", fresh_copies=True)):
        assert config.hyperparameters()["recompute_budget"] is None, config
    make(tmp_path, 3, manifest=True, hyper=TrainConfig(algo="cd-5").hyperparameters())
    with pytest.raises(DistgnnError, match="recompute_budget=1.0, not 0.5"):
        ckpt.newest_checkpoint(tmp_path, TrainConfig(algo="cd-5", recompute_budget=0.5).hyperparameters())


def test_fresh_copies_are_recorded_as_resolved_on_for_gat_under_cd_r(tmp_path: Path) -> None:
    """GAT's cd-r keeps its copies fresh unless told not to (docs/design.md#fresh-copies): the
    hyperparameters record the value in force, so a GAT cd-r checkpoint made with stale copies
    resumes only with --no-fresh-copies."""
    from distgnn.train.config import TrainConfig

    def fresh(**settings) -> bool:
        return TrainConfig(**settings).hyperparameters()["fresh_copies"]

    assert fresh(algo="cd-5", model="gat") is True
    assert fresh(algo="cd-5", model="gat", fresh_copies=False) is False
    assert fresh(algo="cd-5") is False and fresh(algo="cd-5", fresh_copies=True) is True
    assert fresh(algo="cd-0", model="gat") is False and fresh(algo="0c", model="gat") is False
    stale = TrainConfig(algo="cd-5", model="gat", fresh_copies=False).hyperparameters()
    make(tmp_path, 3, manifest=True, hyper=stale)
    with pytest.raises(DistgnnError, match="fresh_copies=False, not True"):
        ckpt.newest_checkpoint(tmp_path, TrainConfig(algo="cd-5", model="gat").hyperparameters())
    assert ckpt.newest_checkpoint(tmp_path, stale) is not None
