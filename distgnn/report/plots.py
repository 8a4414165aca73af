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
        highest, any_over = 0.0, False
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
            over = [bool(r.oversubscribed.iloc[0]) if len(r) and "oversubscribed" in r else False
                    for r in rows]
            any_over = any_over or any(over)
            for xi, top, shared in zip(x, bottom, over):
                ax.text(xi, top, f"{algo} (oversubscribed)" if shared else algo, ha="center",
                        va="bottom", fontsize=7, rotation=90)
            # The parts are maxima over ranks and may overshoot: mark the epoch time itself.
            epoch = [1e3 * float(r.median_epoch_time_s.iloc[0]) if len(r) else np.nan for r in rows]
            ax.plot(x, epoch, "k_", markersize=14, markeredgewidth=2,
                    label="epoch time" if j == 0 else None)
        # room for the algorithm labels above the bars
        ax.set_ylim(0, (1.6 if any_over else 1.2) * highest or 1.0)
        ax.set_xticks(np.arange(len(parts)), [f"P={p}" for p in parts])
        ax.set_ylabel("epoch time (ms, steady state)")
        ax.set_title(f"{method}: epoch time by P and algorithm")
        ax.legend(fontsize=7)
    _save(fig, path)


def metric_name(multilabel: bool) -> str:
    """The test metric the trainer reports for a store: mean ROC-AUC over tasks (multi-label) or
    accuracy."""
    return "ROC-AUC" if multilabel else "accuracy"


def _mean_with_range(ax: plt.Axes, xs: list[float], series: np.ndarray, label: str,
                     color: object = None) -> object:
    """One line: ``series`` [runs, len(xs)] averaged over runs, the runs' range shaded when there are
    several. Returns the line's colour."""
    line, = ax.plot(xs, series.mean(0), marker="." if len(xs) < 40 else None, label=label, color=color)
    if len(series) > 1:
        ax.fill_between(xs, series.min(0), series.max(0), color=line.get_color(), alpha=0.2)
    return line.get_color()


def _test_points(epochs: list[dict], against: str = "epoch") -> tuple[list[float], list[float]]:
    """(x, test metric) of the eval epochs of one run's metrics.jsonl lines; x is the epoch number
    or the cumulative training time (s)."""
    wall = np.cumsum([float(e["epoch_time_s"]) for e in epochs])
    points = [(e["epoch"] if against == "epoch" else t, float(e["test"]))
              for e, t in zip(epochs, wall) if e.get("test") is not None]
    return ([p[0] for p in points], [p[1] for p in points])


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
            xs, ys = _test_points(run.epochs, against)
            if xs:
                _mean_with_range(ax, xs, np.array([ys]), run.key[3])
        ax.set_xlabel("epoch" if against == "epoch" else "training time (s)")
        ax.set_ylabel("test metric")
        ax.set_title(f"{method}, P={p}")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        else:   # no run of this panel evaluated (--eval-every 0)
            ax.text(0.5, 0.5, "not evaluated", ha="center", va="center", transform=ax.transAxes)
    _save(fig, path)


def learning_curves(curves: dict[str, list[list[dict]]], path: Path, *, title: str,
                    metric: str = "accuracy", window: float = 15.0) -> None:
    """Two panels against the epoch: training loss (log scale) and the test metric (%), a line per
    label of ``curves`` (e.g. an algorithm) averaged over its runs (e.g. seeds), the runs' range
    shaded. ``curves[label]`` holds each run's metrics.jsonl lines; the runs of a label share their
    eval epochs. The metric axis shows the top ``window`` points."""
    fig, (loss_ax, test_ax) = plt.subplots(1, 2, figsize=(11, 4))
    top = 0.0
    for label, runs in curves.items():
        epochs = [e["epoch"] for e in runs[0]]
        color = _mean_with_range(loss_ax, epochs, np.array([[e["loss"] for e in r] for r in runs]), label)
        xs = _test_points(runs[0])[0]
        test = 100 * np.array([_test_points(r)[1] for r in runs])
        if xs:
            _mean_with_range(test_ax, xs, test, label, color)
            top = max(top, float(test.max()))
    fig.suptitle(title)
    loss_ax.set(yscale="log", xlabel="epoch", ylabel="training loss", title="training loss (band: runs' range)")
    test_ax.set(xlabel="epoch", ylabel=f"test {metric} (%)", ylim=(top - window, top + 1),
                title=f"test {metric} (exact evaluation)")
    for ax in (loss_ax, test_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
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
