"""Papers100M size on one machine: fetch, verify, assign (libra, hdrf) at P = 16..128 and build
a few parts of the full-size twin, each stage measured (wall time, peak memory, disk).

    python -m bench.papers_scale --work DIR [--scale 1] [--parts 16 32 64 128]
                                 [--methods libra hdrf] [--build-parts 128] [--results FILE.json]
                                 [--stages fetch verify assign build estimate calibrate]
                                 [--redo STAGE ...] [--calibration CAL.json]
                                 [--calibrate-with OTHER.jsonl ...]

Every stage runs the ``distgnn`` command a user would run, in a child process (peak RSS from
wait4; wall time around it; load average before it); its record is appended to ``--results`` as
soon as it ends, and a stage already recorded there is skipped, so a run cut short resumes where
it stopped. Stages:

* ``fetch``: ``distgnn fetch synth-papers100M --scale S --feature-dtype float16`` (the store's
  disk is measured after it);
* ``verify``: ``distgnn verify`` on the store (every chunk read back, invariants checked);
* ``assign``: ``distgnn partition assign`` for each method and P, libra and hdrf both in store
  order (streamed) and hdrf in its default shuffled order, which the preflight refuses at this
  size (its one line is recorded); RF, balance of edges and roots per part, assign seconds (the
  native stage, from reading the CSR to the result), disk of ``assignment.zarr``;
* ``build``: ``distgnn partition build DIR --part K`` for the two largest parts and the median
  part of libra at ``--build-parts``: time, peak, size on disk; then every part's size is
  extrapolated from a fit size = a n_k + b m_k over the built ones (the assignment's counts), and
  the built parts are removed (the next step does not need them);
* ``estimate``: ``distgnn scaling-model estimate-memory --part K`` for the built parts;
* ``calibrate`` (not run unless named): libra's measured RF(P) into ``--calibration``'s papers
  law (:func:`calibrate`), from ``--results`` and any ``--calibrate-with`` files of the same
  scale (another run's P, e.g. P = 2, 4, 8 beside 16..128).

Raw output: ``--results`` (JSON lines); the summary tables are printed.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import markdown_table

DATASET = "synth-papers100M"


def peak_run(cmd: list[str], log: Path) -> dict[str, Any]:
    """Run ``cmd`` (output appended to ``log``): wall seconds, peak RSS bytes (wait4), exit
    status, the last line of its output, and the load average before it."""
    load = os.getloadavg()
    start = time.perf_counter()
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(map(str, cmd))}\n")
        out.flush()
        proc = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    return {"cmd": " ".join(map(str, cmd)), "wall_s": round(wall, 1),
            "peak_bytes": usage.ru_maxrss * 1024, "rc": os.waitstatus_to_exitcode(status),
            "last_line": lines[-1] if lines else "", "load_before": [round(x, 2) for x in load]}


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


class Results:
    """Stage records, one JSON object per line, keyed by ``stage``."""

    def __init__(self, path: Path, redo: list[str], scale: float):
        self.path, self.scale = path, scale
        self.records: dict[str, dict[str, Any]] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                record = json.loads(line)
                if record.get("scale") != scale:
                    sys.exit(f"{path}: holds results at --scale {record.get('scale')}, not {scale} "
                             f"(choose another --results)")
                if not any(record["stage"].startswith(r) for r in redo):
                    self.records[record["stage"]] = record

    def done(self, stage: str) -> bool:
        return stage in self.records

    def add(self, record: dict[str, Any]) -> None:
        record["at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        record["scale"] = self.scale
        self.records[record["stage"]] = record
        with open(self.path, "w") as out:
            for r in self.records.values():
                out.write(json.dumps(r) + "\n")
        print(f"{record['stage']}: {record.get('wall_s', '-')} s, peak "
              f"{record.get('peak_bytes', 0) / 2**30:.2f} GiB, rc {record.get('rc')}: "
              f"{record.get('last_line', '')[:160]}", flush=True)


def calibrate(results: Results, path: Path, scale: float, others: list[Results] = ()) -> None:
    """Put the RF measured with libra on the twin at ``scale`` into the calibration's papers law
    (docs/scale.md#papers-size): the law refitted on the measured P, the measurements used at
    those P; the law it replaces is kept as ``papers_replication_extrapolated``."""
    from distgnn.scaling.replication import ReplicationLaw, fit_replication

    records = [r for res in (results, *others) for r in res.records.values()]
    measured = {int(r["stage"].rsplit("P=", 1)[1]): r for r in records
                if r["stage"].startswith("assign libra store") and r.get("rc") == 0}
    if len(measured) < 2:
        sys.exit("calibrate: needs libra's RF at two or more P (run the assign stage)")
    parts = sorted(measured)
    cal = json.loads(path.read_text())
    old = ReplicationLaw.from_dict(cal["papers_replication"])
    law = fit_replication(parts, [measured[p]["rf"] for p in parts],
                          [measured[p]["edge_balance"] for p in parts])
    # per-part vertex balance and the leaf fractions are not measured at this size: kept from
    # the law fitted on the small twin (docs/scale.md says so)
    law.vertex_balance, law.leaf_in_fraction, law.leaf_out_fraction = (
        old.vertex_balance, old.leaf_in_fraction, old.leaf_out_fraction)
    law.measured = {p: float(measured[p]["rf"]) for p in parts}
    law.measured_on = (f"synth-papers100M --scale {scale:g} (libra, store order; "
                       f"bench/papers_scale.py, {max(measured[p]['at'][:10] for p in parts)})")
    cal.setdefault("papers_replication_extrapolated", cal["papers_replication"])
    cal["papers_replication"] = law.to_dict()
    path.write_text(json.dumps(cal, indent=1) + "\n")
    print(f"{path}: papers law now {law.describe()}; before {old.describe()}", flush=True)


def distgnn(*args: Any) -> list[str]:
    return [sys.executable, "-m", "distgnn", *map(str, args)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path, help="data and partitions go here")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--parts", type=int, nargs="+", default=[16, 32, 64, 128])
    ap.add_argument("--methods", nargs="+", default=["libra", "hdrf"])
    ap.add_argument("--build-parts", type=int, default=128, help="P of the libra partition whose parts are built")
    ap.add_argument("--stages", nargs="+", default=["fetch", "verify", "assign", "build", "estimate"])
    ap.add_argument("--redo", nargs="*", default=[], help="stage names (prefixes) to run again")
    ap.add_argument("--results", type=Path,
                    default=Path(f"bench/results/papers-scale-{datetime.date.today()}.jsonl"))
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--calibration", type=Path, default=Path("docs/scale-calibration.json"),
                    help="stage calibrate: the calibration whose papers law takes the measured RF")
    ap.add_argument("--calibrate-with", type=Path, nargs="*", default=[],
                    help="stage calibrate: other results files (same --scale) whose RF joins --results'")
    args = ap.parse_args(argv)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    log = work / "papers_scale.log"
    results = Results(args.results, args.redo, args.scale)
    store_dir = work / "data" / (f"{DATASET}-x{args.scale:g}-f16" if args.scale != 1 else f"{DATASET}-f16")
    graph = store_dir / "graph.zarr"
    print(f"{os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB, "
          f"free disk {shutil.disk_usage(work).free / 2**30:.1f} GiB; results -> {args.results}", flush=True)

    if "fetch" in args.stages and not results.done("fetch"):
        record = peak_run(distgnn("fetch", DATASET, "--scale", args.scale, "--feature-dtype", "float16",
                                  "--root", work / "data", "--threads", args.threads, "--force"), log)
        record.update(stage="fetch", store_bytes=disk_bytes(store_dir),
                      arrays={p.name: disk_bytes(p) for p in graph.iterdir() if p.is_dir()})
        results.add(record)
    if "verify" in args.stages and not results.done("verify"):
        results.add({"stage": "verify", **peak_run(distgnn("verify", graph), log)})

    if "assign" in args.stages:
        import zarr

        runs = [(m, "store", P) for m in args.methods for P in args.parts]
        runs += [("hdrf", "shuffle", max(args.parts))] if "hdrf" in args.methods else []
        for method, stream, P in runs:
            stage = f"assign {method} {stream} P={P}"
            if results.done(stage):
                continue
            out = work / "parts" / f"{method}-{stream}-{P}"
            record = peak_run(distgnn("partition", "assign", graph, "--parts", P, "--method", method,
                                      "--stream", stream, "--out", out, "--threads", args.threads,
                                      "--force"), log)
            record["stage"] = stage
            if record["rc"] == 0:
                attrs = dict(zarr.open_group(str(out / "assignment.zarr"), mode="r").attrs)
                edges, roots = np.array(attrs["part_edges"]), np.array(attrs["part_roots"])
                text = log.read_text()
                assign_s = float(text[text.rindex("(", 0, text.rindex(" s assign)")) + 1:
                                      text.rindex(" s assign)")])
                record.update(rf=attrs["replication_factor"], assign_s=assign_s,
                              edge_balance=float(edges.max() / edges.mean()),
                              root_balance=float(roots.max() / roots.mean()),
                              assignment_bytes=disk_bytes(out / "assignment.zarr"))
            results.add(record)
            if record["rc"] == 0 and not (method == "libra" and P == args.build_parts):
                shutil.rmtree(out)  # only the partition whose parts are built is kept

    if "build" in args.stages or "estimate" in args.stages:
        import zarr

        folder = work / "parts" / f"libra-store-{args.build_parts}"
        attrs = dict(zarr.open_group(str(folder / "assignment.zarr"), mode="r").attrs)
        n_k, m_k = np.array(attrs["part_vertices"]), np.array(attrs["part_edges"])
        size_order = np.argsort(n_k)
        chosen = list(dict.fromkeys([int(size_order[-1]), int(size_order[-2]),
                                     int(size_order[len(size_order) // 2])]))
        for k in chosen:
            stage = f"build libra P={args.build_parts} part {k}"
            if "build" not in args.stages or results.done(stage):
                continue
            record = peak_run(distgnn("partition", "build", folder, "--part", k, "--threads", args.threads), log)
            record.update(stage=stage, n_k=int(n_k[k]), m_k=int(m_k[k]),
                          part_bytes=disk_bytes(folder / f"part_{k}.zarr"))
            results.add(record)
        if "estimate" in args.stages:
            for k in chosen:
                stage = f"estimate libra P={args.build_parts} part {k}"
                if results.done(stage) or not (folder / f"part_{k}.zarr").exists():
                    continue
                proc = subprocess.run(distgnn("scaling-model", "estimate-memory", folder, "--part", k,
                                              "--json"), capture_output=True, text=True)
                rows = json.loads(proc.stdout) if proc.returncode == 0 else []
                results.add({"stage": stage, "rc": proc.returncode, "estimate": rows,
                             "last_line": (f"estimate {rows[0]['estimate_bytes'] / 2**30:.2f} GiB per rank"
                                           if rows else proc.stderr.strip()[-300:])})
        built = [results.records[s] for s in results.records if s.startswith(f"build libra P={args.build_parts}")
                 and results.records[s]["rc"] == 0]
        if built:
            # a part is rows (features, label, ids, degrees, masks, offsets) and edges (its CSR and
            # transpose, int32 each: 8 B); the bytes per row are measured on the built parts (parts
            # of one partition are too alike in shape to fit both terms)
            row = float(np.mean([(r["part_bytes"] - 8 * r["m_k"]) / r["n_k"] for r in built]))
            total = float(row * n_k.sum() + 8 * m_k.sum())
            results.add({"stage": f"extrapolate libra P={args.build_parts}", "bytes_per_vertex_row": row,
                         "bytes_per_edge": 8, "all_parts_bytes": total,
                         "from_parts": [r["stage"] for r in built],
                         "last_line": f"all {args.build_parts} parts about {total / 1e9:.0f} GB "
                                      f"({row:.0f} B per vertex row, measured on {len(built)} built "
                                      f"parts, + 8 B per edge)"})
        for k in chosen:
            shutil.rmtree(folder / f"part_{k}.zarr", ignore_errors=True)

    if "calibrate" in args.stages:
        calibrate(results, args.calibration, args.scale,
                  [Results(path, [], args.scale) for path in args.calibrate_with])

    rows = []
    for r in results.records.values():
        rows.append([r["stage"], str(r.get("wall_s", "-")), f"{r.get('peak_bytes', 0) / 2**30:.2f}",
                     f"{r['rf']:.3f}" if "rf" in r else "-", str(round(r["assign_s"])) if "assign_s" in r else "-",
                     f"{r['edge_balance']:.4f} / {r['root_balance']:.4f}" if "rf" in r else "-",
                     f"{max(r.get('store_bytes', 0), r.get('assignment_bytes', 0), r.get('part_bytes', 0)) / 1e9:.2f}",
                     str(r.get("rc", "-"))])
    print(markdown_table(["stage", "wall s", "peak GiB", "RF", "assign s", "balance edges / roots",
                          "disk GB", "rc"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
