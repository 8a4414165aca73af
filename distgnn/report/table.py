"""The summary table: one row per (store, method, P, algorithm)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from distgnn.models.registry import FIRST_MODEL
from distgnn.report.load import Run
from distgnn.vocabulary import parse_algorithm, steady_start

#: Epoch-time components of metrics.jsonl, in stacking order; "other" is the rest of the epoch.
SPLIT_KEYS = ("time_aggregate_s", "time_exchange_wait_s", "time_dense_s", "time_allreduce_s")

COLUMNS = ("store", "method", "num_parts", "algo", "model", "precision", "apply", "replication_factor", "mean_epoch_time_s",
           "median_epoch_time_s", *SPLIT_KEYS, "time_other_s", "bytes_forward", "bytes_backward", "bytes_gradients",
           "peak_rss_bytes", "best_val", "test_at_best_val", "final_test", "speedup_vs_p1",
           "epochs", "slurm_job_id", "hosts", "oversubscribed", "precision_reason")


#: the mark after the epoch time of a run measured with more threads than CPUs on a host
OVERSUBSCRIBED = "(oversubscribed)"


def _accuracy(value: Any) -> str:
    """An accuracy for the table; n/a for a run that never evaluated (``--eval-every 0``)."""
    return "n/a" if value is None or pd.isna(value) else f"{float(value):.4f}"


def hosts_label(hosts_by_rank: list[str] | None) -> str:
    """The machines a run used, from ``summary.json``'s ``hosts_by_rank``: ``mh1, mh2``, or
    ``16 hosts (node001 ... node016)`` past three; empty for runs from before it was recorded."""
    hosts = list(dict.fromkeys(hosts_by_rank or []))
    if len(hosts) <= 3:
        return ", ".join(hosts)
    return f"{len(hosts)} hosts ({hosts[0]} ... {hosts[-1]})"


def steady(run: Run) -> list[dict[str, Any]]:
    """The steady-state epochs of a run, by the trainer's own rule (``steady_state_from_epoch`` in
    summary.json; older runs: the same rule, :func:`~distgnn.vocabulary.steady_start`);
    all of them when that would leave none."""
    start = run.summary.get("steady_state_from_epoch")
    skip = (int(start) - 1 if start is not None
            else steady_start(parse_algorithm(str(run.summary["algo"])), len(run.epochs)))
    return run.epochs[skip:] or run.epochs


def epoch_split(run: Run) -> dict[str, float]:
    """The median seconds of a steady-state epoch ("median_epoch_time_s") and of each of its
    components, and what they leave of it ("time_other_s"). Medians: an epoch slowed by something
    else on the machine (a burst of another process, a page-cache flush) moves a mean by several
    percent on a small graph, and runs of the same computation then read differently."""
    epochs = steady(run)
    split = {k: float(np.median([float(e[k]) for e in epochs])) for k in SPLIT_KEYS}
    total = float(np.median([float(e["epoch_time_s"]) for e in epochs]))
    split["time_other_s"] = max(0.0, total - sum(split.values()))
    split["median_epoch_time_s"] = total
    return split


def summary_table(runs: list[Run]) -> pd.DataFrame:
    """One row per run with the COLUMNS above.

    ``speedup_vs_p1`` = the P = 1 run's median steady epoch (same store and algorithm; same
    method when there is one) over this run's; empty when there is no P = 1 run.
    """
    rows = []
    for run in runs:
        s = run.summary
        row = {k: s.get(k) for k in COLUMNS if k in s}
        row["algo"], row["apply"] = run.key[3], run.apply
        row["model"] = str(s.get("model", FIRST_MODEL))  # runs from before --model
        row["precision"] = str((s.get("hyperparameters") or {}).get("precision", "fp32"))
        row["precision_reason"] = str(s.get("precision_reason") or "")
        row["hosts"] = hosts_label(s.get("hosts_by_rank"))
        # runs from before it was recorded: unknown, shown unmarked
        row["oversubscribed"] = bool((s.get("placement") or {}).get("oversubscribed", False))
        row.update(epoch_split(run))
        rows.append(row)
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    speedups = []
    for _, row in table.iterrows():
        base = table[(table.store == row.store) & (table.algo == row.algo) & (table.num_parts == 1)]
        same = base[base.method == row.method]
        base = same if len(same) else base
        speedups.append(float(base.median_epoch_time_s.iloc[0]) / float(row.median_epoch_time_s)
                        if len(base) and row.median_epoch_time_s else float("nan"))
    table["speedup_vs_p1"] = speedups
    return table.sort_values(["store", "method", "num_parts", "algo"]).reset_index(drop=True)


def _mib(value: Any) -> str:
    return "" if pd.isna(value) else f"{float(value) / 2**20:,.2f}"


def p1_spread_lines(part: pd.DataFrame) -> list[str]:
    """One line per (method, model, precision) with several algorithms at P = 1: how far apart
    their epochs read there, where they compute the same thing: this machine's noise between
    runs, the yardstick for the differences at larger P (bench/README.md, "The demo's P = 1
    rows")."""
    out = []
    one = part[(part.num_parts == 1) & part.median_epoch_time_s.notna()]
    for (method, model, precision), rows in one.groupby(["method", "model", "precision"], sort=True):
        if len(rows) < 2:
            continue
        ms = 1e3 * rows.median_epoch_time_s.astype(float)
        lo, hi = float(ms.min()), float(ms.max())
        out += ["", f"At P = 1 ({method}, {model}, {precision}) the {len(rows)} algorithms' epochs "
                    f"read {lo:.1f}-{hi:.1f} ms, {100 * (hi / lo - 1):.0f}% apart for the same "
                    f"computation: differences of that size between rows are noise."]
    return out


def markdown(table: pd.DataFrame) -> str:
    """The table as GitHub Markdown, one section per store (times in ms, bytes in MiB)."""
    lines = []
    for store, part in table.groupby("store", sort=True):
        lines += [f"# {store}", "",
                  "cd-<r>-orig is the DistGNN paper's cd-r; cd-<r> is distgnn's variant (it keeps "
                  "the last delivered remote part between deliveries); a run label ending in "
                  "-replicas or -root names a non-default apply mode, one starting with gcn- or "
                  "gin- the model (docs/design.md#models).",
                  "",
                  "Per epoch, steady state (epoch 1 and, for cd-r, the first 2r left out). Times in ms, "
                  "the median over the steady epochs, each the max over ranks (so the parts may add up to more than the epoch; "
                  "other = what they leave unexplained, if anything), bytes in MiB (sum over "
                  "ranks), peak memory of the largest rank; speedup = epoch time of P = 1 over "
                  "this one.", "",
                  "At P = 1 every algorithm is the same computation (no remote parts): differences "
                  "between their times there are machine noise. Ranks that share a machine's cores "
                  "(the demo runs P = 4 on 2 cores) cannot go faster than one rank with all of them: "
                  "a speedup below 1 there measures oversubscription, not the algorithm.", "",
                  "| method | P | algo | model | precision | apply | repl. factor | epoch ms | aggregate "
                  "| exchange wait | dense | allreduce | other | fwd MiB | bwd MiB | grad MiB | peak RSS MiB "
                  "| best val | test @ best val | speedup | hosts |",
                  "|" + "---|" * 21]
        for _, r in part.iterrows():
            ms = [f"{1e3 * float(r[k]):.1f}" for k in ("median_epoch_time_s", *SPLIT_KEYS, "time_other_s")]
            if r.oversubscribed:
                ms[0] += f" {OVERSUBSCRIBED}"
            lines.append(
                f"| {r.method} | {r.num_parts} | {r.algo} | {r.model} | {r.precision} | {r['apply']} | {float(r.replication_factor):.3f} | "
                + " | ".join(ms)
                + f" | {_mib(r.bytes_forward)} | {_mib(r.bytes_backward)} | {_mib(r.bytes_gradients)}"
                f" | {_mib(r.peak_rss_bytes)} | {_accuracy(r.best_val)} | {_accuracy(r.test_at_best_val)}"
                f" | {'' if pd.isna(r.speedup_vs_p1) else f'{r.speedup_vs_p1:.2f}x'} | {r.hosts} |")
        lines += p1_spread_lines(part)
        chosen = sorted({reason for reason in part.precision_reason if reason.startswith("auto")})
        if chosen:
            lines += ["", "precision: " + "; ".join(chosen) + " (--precision auto)."]
        if part.oversubscribed.any():
            lines += ["", f"{OVERSUBSCRIBED}: a host ran more threads than it has CPUs "
                          f"(summary.json's placement), so this time measures the sharing of cores, "
                          f"not the algorithm."]
        lines.append("")
    return "\n".join(lines)
