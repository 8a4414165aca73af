"""``distgnn report``: tables (CSV, Markdown) and plots (PNG) of the runs of one store."""
from distgnn.report.load import Run, load_runs
from distgnn.report.write_report import make_report

__all__ = ["Run", "load_runs", "make_report"]
