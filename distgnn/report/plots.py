"""The report's figures (matplotlib, Agg backend: no display needed)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from distgnn.report.load import Run  # noqa: E402
from distgnn.report.table import SPLIT_KEYS  # noqa: E402

_PARTS = (*SPLIT_KEYS, "time_other_s")
_LABELS = ("aggregate", "exchange wait", "dense", "allreduce", "other")


def _save(fig: plt.Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def epoch_time(table: pd.DataFrame, path: Path) -> None:
    """Stacked bars: steady-state epoch time split by component, grouped by P, one bar per algorithm
    (one panel per method)."""
    methods = sorted(table.method.unique())
    fig, axes = plt.subplots(1, len(methods), figsize=(6 * len(methods), 4), squeeze=False)
    colors = plt.get_cmap("tab10").colors
    for ax, method in zip(axes[0], methods):
        part = table[table.method == method]
        parts = sorted(part.num_parts.unique())
        algos = sorted(part.algo.unique())
        width = 0.8 / len(algos)
        highest = 0.0
        for j, algo in enumerate(algos):
            rows = [part[(part.num_parts == p) & (part.algo == algo)] for p in parts]
            x = np.arange(len(parts)) + (j - (len(algos) - 1) / 2) * width
            bottom = np.zeros(len(parts))
            for c, (key, label) in enumerate(zip(_PARTS, _LABELS)):
                ms = np.array([1e3 * float(r[key].iloc[0]) if len(r) else 0.0 for r in rows])
                ax.bar(x, ms, width * 0.95, bottom=bottom, color=colors[c],
                       label=label if j == 0 else None, edgecolor="black", linewidth=0.3)
                bottom += ms
            highest = max(highest, float(bottom.max()))
            for xi, top in zip(x, bottom):
                ax.text(xi, top, algo, ha="center", va="bottom", fontsize=7, rotation=90)
            # The parts are maxima over ranks and may overshoot: mark the epoch time itself.
            epoch = [1e3 * float(r.mean_epoch_time_s.iloc[0]) if len(r) else np.nan for r in rows]
            ax.plot(x, epoch, "k_", markersize=14, markeredgewidth=2,
                    label="epoch time" if j == 0 else None)
        ax.set_ylim(0, 1.2 * highest or 1.0)  # room for the algorithm labels above the bars
        ax.set_xticks(np.arange(len(parts)), [f"P={p}" for p in parts])
        ax.set_ylabel("epoch time (ms, steady state)")
        ax.set_title(f"{method}: epoch time by P and algorithm")
        ax.legend(fontsize=7)
    _save(fig, path)


def test_curves(runs: list[Run], path: Path, *, against: str) -> None:
    """Test metric per eval epoch against the epoch number (``against="epoch"``) or against the
    cumulative training time (``against="time"``); a panel per (method: rows, P: columns), a line
    per algorithm."""
    methods = sorted({r.key[1] for r in runs})
    parts = sorted({r.key[2] for r in runs})
    fig, axes = plt.subplots(len(methods), len(parts), figsize=(4.2 * len(parts), 3.2 * len(methods)),
                             squeeze=False, sharey=True)
    for ax, (method, p) in zip(axes.flat, [(m, p) for m in methods for p in parts]):
        for run in (r for r in runs if (r.key[1], r.key[2]) == (method, p)):
            wall = np.cumsum([float(e["epoch_time_s"]) for e in run.epochs])
            points = [(e["epoch"] if against == "epoch" else t, float(e["test"]))
                      for e, t in zip(run.epochs, wall) if e.get("test") is not None]
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker=".", label=run.key[3])
        ax.set_xlabel("epoch" if against == "epoch" else "training time (s)")
        ax.set_ylabel("test metric")
        ax.set_title(f"{method}, P={p}")
        ax.legend(fontsize=7)
    _save(fig, path)


def replication(table: pd.DataFrame, path: Path) -> None:
    """Replication factor against P, a line per partitioning method."""
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for method, part in table.groupby("method", sort=True):
        per_p = part.groupby("num_parts").replication_factor.first().sort_index()
        ax.plot(per_p.index, per_p.values, marker="o", label=method)
    ax.set_xlabel("partitions P")
    ax.set_ylabel("replication factor (replicas / N)")
    ax.set_xticks(sorted(table.num_parts.unique()))
    ax.set_title("vertex-cut replication")
    ax.legend()
    _save(fig, path)
