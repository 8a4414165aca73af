"""distgnn report --runs runs/<store> --out reports/<store>: tables and plots of a store's runs."""
from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="summary.csv, summary.md and PNG plots of a store's runs",
                       description="Read every summary.json (and the metrics.jsonl beside it) "
                                   "under --runs and write the report into --out.")
    p.add_argument("--runs", required=True, help="folder of runs, e.g. runs/<store>")
    p.add_argument("--out", required=True, help="report folder, e.g. reports/<store>")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from distgnn.report import make_report

    paths = make_report(args.runs, args.out)
    if not args.quiet:
        for path in paths:
            print(path)
    return 0
