"""bench.gather_encode runs end to end on a small table: a row per ISA, thread count, width and
integer width, with the fused path's bytes checked against the gathered rows' before timing."""
from __future__ import annotations

import subprocess
import sys

from conftest import REPO
from distgnn.kernels import ops


def test_the_bench_writes_one_row_per_isa_width_and_codec(tmp_path) -> None:
    out = tmp_path / "table.txt"
    run = subprocess.run([sys.executable, "-m", "bench.gather_encode", "--table", "300", "--send", "50",
                          "--widths", "20", "33", "--repeats", "1", "--threads", "1", "--out", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    rows = [line.split("|")[1:-1] for line in out.read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| isa")]
    assert {(r[0].strip(), r[2].strip(), r[3].strip()) for r in rows} == {
        (isa, width, codec) for isa in ops.supported_isas() for width in ("20", "33")
        for codec in ("int8", "int4", "int2")}
    assert all(float(r[-1].strip().rstrip("x")) > 0 for r in rows)
    assert "load average after" in out.read_text()
