"""Read the runs of a store: every ``summary.json`` under a folder and the ``metrics.jsonl`` beside it.

Provenance (store, method, P, algorithm, apply mode) comes from ``summary.json`` (docs/design.md#summary-keys),
never from paths.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distgnn.errors import DistgnnError

#: summary.json keys the report needs (a subset of docs/design.md#summary-keys).
SUMMARY_KEYS = ("store", "method", "num_parts", "algo", "epochs", "replication_factor",
                "mean_epoch_time_s", "best_val", "test_at_best_val", "final_test", "bytes_forward",
                "bytes_backward", "bytes_gradients", "peak_rss_bytes")
#: metrics.jsonl keys of every epoch line (docs/design.md#metrics-keys); eval epochs add train, val, test.
METRIC_KEYS = ("epoch", "loss", "epoch_time_s", "time_aggregate_s", "time_exchange_wait_s",
               "time_dense_s", "time_allreduce_s", "bytes_forward", "bytes_backward",
               "bytes_gradients", "peak_rss_bytes")


@dataclass
class Run:
    """One training run.

    Attributes:
        path: its folder.
        summary: the parsed summary.json.
        epochs: the metrics.jsonl lines in order (one dict per epoch).
    """
    path: Path
    summary: dict[str, Any]
    epochs: list[dict[str, Any]]

    @property
    def key(self) -> tuple[str, str, int, str]:
        """(store, method, P, run label): the label is the algorithm, plus ``-<apply>`` when the
        run's apply mode is not the algorithm's default (as its run folder is named)."""
        s = self.summary
        return (str(s["store"]), str(s["method"]), int(s["num_parts"]), run_label(s))

    @property
    def apply(self) -> str:
        """``root`` or ``replicas`` (runs from before apply-at-root ran on the replicas)."""
        return str(self.summary.get("apply", "replicas"))


def run_label(summary: dict[str, Any]) -> str:
    """``cd-0``, ``cd-0-replicas``, ...: the algorithm, and the apply mode where it is not the
    algorithm's default, as the run folders are named."""
    from distgnn.models.registry import FIRST_MODEL, run_name

    # runs from before apply-at-root have no "apply": they ran on the replicas
    return run_name(str(summary["algo"]), str(summary.get("apply", "replicas")),
                    str(summary.get("hyperparameters", {}).get("model", FIRST_MODEL)))


def read_summary(path: Path) -> dict[str, Any]:
    try:
        summary = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DistgnnError(f"{path}: not a readable JSON file ({exc})") from exc
    if not isinstance(summary, dict):
        raise DistgnnError(f"{path}: expected a JSON object")
    missing = [k for k in SUMMARY_KEYS if k not in summary]
    if missing:
        raise DistgnnError(f"{path}: missing keys {', '.join(missing)} (docs/design.md#summary-keys)")
    return summary


def read_metrics(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise DistgnnError(f"{path}: missing (every run folder has metrics.jsonl beside summary.json)")
    epochs = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DistgnnError(f"{path}:{number}: not a JSON line ({exc.msg})") from exc
        missing = [k for k in METRIC_KEYS if k not in record]
        if missing:
            raise DistgnnError(f"{path}:{number}: missing keys {', '.join(missing)} (docs/design.md#metrics-keys)")
        epochs.append(record)
    if not epochs:
        raise DistgnnError(f"{path}: no epochs")
    return epochs


def load_runs(runs_dir: str | Path) -> list[Run]:
    """Every run under ``runs_dir`` (any depth), sorted by (store, method, P, algorithm)."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise DistgnnError(f"--runs {runs_dir}: not a folder")
    runs = []
    for summary_path in sorted(runs_dir.rglob("summary.json")):
        summary = read_summary(summary_path)
        runs.append(Run(summary_path.parent, summary, read_metrics(summary_path.parent / "metrics.jsonl")))
    if not runs:
        raise DistgnnError(f"--runs {runs_dir}: no summary.json found")
    seen: dict[tuple, Path] = {}
    for run in runs:
        if run.key in seen:
            raise DistgnnError(f"{run.path} and {seen[run.key]} are both runs of {run.key}")
        seen[run.key] = run.path
    return sorted(runs, key=lambda r: r.key)
