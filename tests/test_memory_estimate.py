"""The memory estimate (distgnn.scaling.rank_memory): the components add up, grow with what
they must, and refuse bad folders."""
from __future__ import annotations

import pytest

from distgnn.errors import DistgnnError
from distgnn.scaling.rank_memory import (PartShape, estimate_rank_memory, estimate_shape, fits,
                                           layer_widths, num_parameters)


def shape(n=10_000, m=1_000_000, parts=2, leaves=2_000, split=4_000) -> PartShape:
    return PartShape(n=n, m=m, feat_dim=602, num_classes=41, multilabel=False, num_parts=parts,
                     num_leaves=leaves, num_split=split, num_roots=n - leaves)


def test_widths_and_parameters_match_the_model():

    from distgnn.models import GraphSAGE

    assert layer_widths(602, 256, 41, 3) == [(602, 256, 256), (256, 256, 256), (256, 41, 41)]
    model = GraphSAGE(602, 256, 41, 3, "mean")
    assert num_parameters(602, 256, 41, 3) == sum(p.numel() for p in model.parameters())


def test_components_scale_with_the_part():
    small = estimate_shape(shape(), 3, 256, "cd-0")
    big = estimate_shape(shape(n=20_000, m=2_000_000, leaves=4_000, split=8_000), 3, 256, "cd-0")
    assert big.features == pytest.approx(2 * small.features, rel=1e-3)
    assert big.activations == pytest.approx(2 * small.activations, rel=1e-3)
    assert big.total > small.total > small.baseline
    # features are n x F float32 plus labels and masks
    assert small.features >= 10_000 * 602 * 4
    # cd-r keeps R per layer and payloads in flight: more than cd-0, which is more than 0c
    zero_c = estimate_shape(shape(), 3, 256, "0c")
    cd5 = estimate_shape(shape(), 3, 256, "cd-5")
    assert zero_c.exchange == 0 < small.exchange < cd5.exchange
    # one part: no exchange buffers whatever the algorithm
    assert estimate_shape(shape(parts=1), 3, 256, "cd-5").exchange == 0
    d = small.as_dict()
    assert d["total"] == small.total


def test_fits():
    e = [estimate_shape(shape(), 2, 64, "cd-0")] * 2
    ok, reason = fits(e, 10 * 2**30)
    assert ok and "2 rank(s)" in reason
    ok, _ = fits(e, e[0].total)
    assert not ok


def test_reads_partition_attrs(tmp_path):
    import zarr

    with pytest.raises(DistgnnError, match="part_0.zarr"):
        estimate_rank_memory(tmp_path, 0, 2, 64, "cd-0")
    g = zarr.open_group(str(tmp_path / "part_0.zarr"), mode="w")
    g.attrs.update({"n_k": 100, "m_k": 1000, "feat_dim": 8, "num_classes": 3, "P": 1})
    assert estimate_rank_memory(tmp_path, 0, 2, 64, "cd-0") > 0
    bad = zarr.open_group(str(tmp_path / "bad" / "part_0.zarr"), mode="w")
    bad.attrs.update({"n_k": 100})
    with pytest.raises(DistgnnError, match="m_k"):
        estimate_rank_memory(tmp_path / "bad", 0, 2, 64, "cd-0")


def test_apply_at_root_keeps_dense_rows_for_roots_only():
    """Under root the input cache, the saved activations and the working set count the roots'
    rows (n - leaves): activations shrink by exactly the roots' share; the features still count
    all n; GAT keeps its n-row working set; the graph adds the compact tables' arrays; one part:
    no difference."""
    replicas = estimate_shape(shape(), 3, 256, "cd-0", apply="replicas")
    root = estimate_shape(shape(), 3, 256, "cd-0", apply="root")
    leaves, f32 = 2_000, 4
    assert replicas.features - root.features == leaves * 602 * f32   # the input cache's leaf rows
    assert root.activations == pytest.approx(replicas.activations * (10_000 - leaves) / 10_000, rel=1e-9)
    gat = [estimate_shape(shape(), 2, 8, "cd-0", apply=a, model="gat", heads=8) for a in ("root", "replicas")]
    assert gat[1].activations * (10_000 - leaves) / 10_000 < gat[0].activations < gat[1].activations
    assert root.optimizer == replicas.optimizer
    # the compact tables' CSR, transpose and position maps (docs/design.md#compact-rows), and
    # cd-0's overlap blocks: every edge once more each way, row pointers, scales (#overlap)
    n, m = 10_000, shape().m
    compact = 2 * (n + 1) * 8 + 2 * m * 4 + 4 * n * 8
    blocks = 4 * (n + 2) * 8 + 2 * m * 4 + 2 * n * 4
    assert root.graph - replicas.graph == compact + blocks
    cd5 = [estimate_shape(shape(), 3, 256, "cd-5", apply=a) for a in ("root", "replicas")]
    assert cd5[0].graph - cd5[1].graph == compact  # cd-r runs no overlap
    assert estimate_shape(shape(), 3, 256, "cd-0").total == root.total      # auto is root for cd-0
    assert estimate_shape(shape(), 3, 256, "0c").total == estimate_shape(shape(), 3, 256, "0c", apply="replicas").total
    one = shape(parts=1, leaves=0, split=0)
    assert estimate_shape(one, 3, 256, "cd-0", apply="root").total == \
        estimate_shape(one, 3, 256, "cd-0", apply="replicas").total


@pytest.mark.parametrize("name", ["sage", "gcn", "gin"])
def test_widths_and_parameters_follow_the_model(name: str) -> None:
    """Each model's parameter count equals its module's; GIN aggregates at its input width (its
    MLP is not linear) and keeps more activations than GCN at the same widths."""
    from distgnn.models import build_model

    model = build_model(name, 602, 256, 41, 3)
    assert num_parameters(602, 256, 41, 3, name) == sum(p.numel() for p in model.parameters())
    aggregated = [a for _, _, a in layer_widths(602, 256, 41, 3, name)]
    assert aggregated == ([602, 256, 256] if name == "gin" else [256, 256, 41])
    if name == "gin":
        assert (estimate_shape(shape(), 3, 256, "cd-0", model="gin").activations
                > estimate_shape(shape(), 3, 256, "cd-0", model="gcn").activations)


def test_gat_widths_and_parameters_follow_its_heads() -> None:
    from distgnn.models import build_model

    model = build_model("gat", 602, 8, 41, 2, heads=8)
    assert num_parameters(602, 8, 41, 2, "gat", heads=8) == sum(p.numel() for p in model.parameters())
    assert layer_widths(602, 8, 41, 2, "gat", heads=8) == [(602, 64, 72), (64, 41, 42)]


def test_recompute_counts_the_recomputed_leaf_rows():
    """--cdr-rule recompute (docs/design.md#cdr-rules): the leaves that recompute add their
    features, input aggregate and layer-0 output; the budget bounds them at budget x roots, and
    all leaves is the most (an unbounded budget)."""
    f32, leaves = 4, 2_000
    base = estimate_shape(shape(), 3, 256, "cd-5")
    half = estimate_shape(shape(), 3, 256, "cd-5", recompute=0.125)  # 0.125 x 8,000 roots
    every = estimate_shape(shape(), 3, 256, "cd-5", recompute=float("inf"))
    assert half.features - base.features == 1_000 * 2 * 602 * f32
    assert every.features - base.features == leaves * 2 * 602 * f32
    assert base.total < half.total < every.total
    assert estimate_shape(shape(), 3, 256, "cd-5", recompute=10.0).total == every.total


def test_held_gradients_count_one_more_table_per_summed_layer():
    """--cdr-rule prompt holds the last delivered gradient of every partial row
    (docs/design.md#held-gradients): [n_k, w] more per summed layer than recompute, whose
    estimate is otherwise the same."""
    from distgnn.exchange.spec import resolve_exchange

    specs = {rule: resolve_exchange("cd-5", "root", rule=rule, layers=3) for rule in ("recompute", "prompt")}
    got = {rule: estimate_shape(shape(), 3, 256, spec) for rule, spec in specs.items()}
    widths = [a for _, _, a in layer_widths(602, 256, 41, 3)]
    assert got["prompt"].exchange - got["recompute"].exchange == sum(shape().n * a * 4 for a in widths)
    for part in ("features", "graph", "activations", "optimizer"):
        assert getattr(got["prompt"], part) == getattr(got["recompute"], part)
    assert got["prompt"].total > got["recompute"].total


@pytest.mark.parametrize("parts", [5, 150])
def test_split_mask_is_two_or_more_replicas(parts: int) -> None:
    import numpy as np

    from distgnn.partition import layout

    rng = np.random.default_rng(parts)
    bits = rng.random((500, parts)) < rng.choice([0.0, 0.004, 0.02, 0.5], (500, 1))
    words = np.zeros((500, layout.words(parts)), dtype=np.uint64)
    for p in range(parts):
        words[:, p // 64] |= bits[:, p].astype(np.uint64) << np.uint64(p % 64)
    want = bits.sum(axis=1) >= 2
    assert want.any() and (~want).any() and (bits.sum(axis=1) == 1).any()
    assert np.array_equal(layout.split_mask(words, rows_per_chunk=64), want)
    vertices, split = layout.part_vertex_counts(words, parts)
    assert np.array_equal(vertices, bits.sum(axis=0))
    assert np.array_equal(split, (bits & want[:, None]).sum(axis=0))


@pytest.fixture(scope="module")
def assigned(tmp_path_factory):
    """A Libra assignment into 3 parts of a power-law graph, parts 0 and 2 built."""
    from distgnn.partition.assign import assign_graph
    from distgnn.partition.part_writer import build_part
    from partition_helpers import make_store

    root = tmp_path_factory.mktemp("assigned")
    graph = make_store(root, "powerlaw", n=400)
    out = root / "libra-3"
    assign_graph(graph, 3, "libra", 0, out)
    for k in (0, 2):
        build_part(out, k, threads=1)
    return out


def test_assignment_gives_the_built_parts_figures(assigned) -> None:
    import zarr

    from distgnn.scaling.rank_memory import assignment_part_shapes, read_part_shape

    shapes = assignment_part_shapes(assigned)
    assert len(shapes) == 3 and all(s.num_leaves > 0 and s.num_split > s.num_leaves for s in shapes)
    for k in (0, 2):
        assert shapes[k] == read_part_shape(assigned, k)
    # an assignment made before part_split was stored: counted from its replica bitsets
    group = zarr.open_group(str(assigned / "assignment.zarr"), mode="r+")
    saved = group.attrs["part_split"]
    try:
        del group.attrs["part_split"]
        assert assignment_part_shapes(assigned) == shapes
    finally:
        group.attrs["part_split"] = saved


def test_estimate_memory_cli_before_and_beside_built_parts(assigned, capsys) -> None:
    import json

    from distgnn import cli
    from distgnn.scaling.rank_memory import estimate_rank_memory
    from distgnn.zarr_io import store_bytes

    args = ["scaling-model", "estimate-memory", str(assigned), "--layers", "2", "--hidden", "16"]
    assert cli.main(args + ["--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["built"] for r in rows] == ["yes", "no", "yes"]
    assert rows[1]["disk_bytes"] is None
    for k in (0, 2):
        assert rows[k]["disk_bytes"] == store_bytes(assigned / f"part_{k}.zarr") > 0
        assert rows[k]["estimate_bytes"] == estimate_rank_memory(assigned, k, 2, 16, "cd-0")
    assert cli.main(args + ["--part", "1"]) == 0
    text = capsys.readouterr().out
    assert "max over ranks" in text and "(part 1)" in text and len(text.splitlines()) == 4
    assert cli.main(args + ["--part", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--part" in err and "0 <= K < 3" in err
    # the copies' options as distgnn train takes them: --no-fresh-copies anywhere, --fresh-copies
    # only where it applies (cd-<r> at the root)
    assert cli.main(args + ["--algo", "cd-5", "--no-fresh-copies", "--json"]) == 0
    assert cli.main(args + ["--algo", "cd-0", "--no-fresh-copies", "--json"]) == 0
    capsys.readouterr()
    assert cli.main(args + ["--algo", "cd-0", "--fresh-copies"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--fresh-copies" in err


# -- what the ranks may use: the node, the cgroup, the Slurm job --------------------------------
def fake_machine(tmp_path, available_gib: float, cgroup: tuple[str, float] | None):
    """A /proc/meminfo with MemAvailable, and a cgroup v2 tree whose job folder has memory.max
    ``cgroup[0]`` ('max' or bytes) and memory.current ``cgroup[1]`` GiB (its parent: no limit)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal: 99999999 kB\nMemAvailable: {int(available_gib * 2**20)} kB\n")
    proc_cgroup, root = tmp_path / "cgroup", tmp_path / "sys"
    proc_cgroup.write_text("0::/job_7/step_0\n" if cgroup else "")
    if cgroup:
        for folder, limit, used in ((root, "max", 0), (root / "job_7", cgroup[0], cgroup[1]),
                                    (root / "job_7" / "step_0", "max", cgroup[1])):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "memory.max").write_text(f"{limit}\n")
            (folder / "memory.current").write_text(f"{int(used * 2**30)}\n")
    return str(meminfo), str(proc_cgroup), str(root)


def test_the_budget_is_the_least_of_node_cgroup_and_slurm_request(tmp_path) -> None:
    from distgnn.scaling.rank_memory import memory_budget

    files = fake_machine(tmp_path, 8, (str(2 * 2**30), 0.5))
    assert memory_budget(*files, env={}) == (int(1.5 * 2**30), "the cgroup's memory.max less its use")
    assert memory_budget(*files, env={"SLURM_MEM_PER_NODE": "1024"}) == (
        2**30, "the Slurm job's memory request")
    assert memory_budget(*files, env={"SLURM_MEM_PER_CPU": "300", "SLURM_CPUS_ON_NODE": "2"}) == (
        600 * 2**20, "the Slurm job's memory request")
    free = fake_machine(tmp_path / "free", 8, ("max", 0.5))
    assert memory_budget(*free, env={}) == (8 * 2**30, "the node's MemAvailable")
    plain = fake_machine(tmp_path / "plain", 3, None)
    assert memory_budget(*plain, env={"SLURM_MEM_PER_NODE": "0"}) == (3 * 2**30, "the node's MemAvailable")


def test_a_slurm_launch_over_the_presets_mem_gb_is_refused_before_submitting(tmp_path) -> None:
    from conftest import partitioned_twin, run_cli

    _, parts = partitioned_twin(tmp_path, 2)
    presets = tmp_path / "presets.yaml"
    presets.write_text("small:\n  ranks_per_node: 1\n  mem_gb: 0.01\n"
                       "roomy:\n  ranks_per_node: 2\n  mem_gb: 64\n  timeout_min: 1\n")
    proc = run_cli("launch", parts, "--executor", "slurm", "--preset", "small", "--presets",
                   presets, "--log-dir", tmp_path / "logs", "--out", tmp_path / "run")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    line = proc.stderr.strip()
    assert "the ranks of one node would not fit in preset small's mem_gb" in line, line
    assert "(> 0.01 GiB mem_gb)" in line, line
    assert not (tmp_path / "logs").exists()  # nothing was submitted


def test_mem_gb_auto_asks_for_the_estimate_plus_the_margin_and_refuses_past_the_sites_cap(tmp_path) -> None:
    """``mem_gb: auto``: the request per node is the largest node's estimate x (1 + mem_margin) in
    whole GiB, said in one line and written into the job (sbatch's --mem); above ``mem_gb_max``
    it is refused in one line before anything is submitted (docs/design.md#job-memory)."""
    import json
    import math
    import os
    import sys
    from pathlib import Path

    from conftest import partitioned_twin, run_cli

    _, parts = partitioned_twin(tmp_path, 2)
    presets = tmp_path / "presets.yaml"
    presets.write_text("capped:\n  ranks_per_node: 2\n  mem_gb: auto\n  mem_margin: 0.5\n"
                       "  mem_gb_max: 0.5\n"
                       "sized:\n  ranks_per_node: 2\n  mem_gb: auto\n  mem_margin: 0.5\n  timeout_min: 1\n"
                       "bad:\n  mem_gb: lots\n")
    proc = run_cli("launch", parts, "--executor", "slurm", "--preset", "capped", "--presets",
                   presets, "--log-dir", tmp_path / "logs", "--out", tmp_path / "run")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "over its site cap mem_gb_max 0.5" in proc.stderr and "nothing was submitted" in proc.stderr
    assert not (tmp_path / "logs").exists()
    proc = run_cli("launch", parts, "--executor", "slurm", "--preset", "bad", "--presets", presets)
    assert proc.returncode == 2 and "mem_gb must be a number > 0, auto or null, got 'lots'" in proc.stderr

    # a stand-in sbatch keeps the script it was given and refuses (nothing runs)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sinfo").write_text("#!/bin/sh\nprintf 'debug*|n1|64\\n'\n")
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\ncp \"$1\" {tmp_path}/script.sh\n"
                                    "echo 'sbatch: error: stand-in' >&2; exit 1\n")
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")   # submitit looks for srun before it submits
    for tool in ("sinfo", "sbatch", "srun"):
        (bin_dir / tool).chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    shape = ["--algo", "cd-0", "--layers", "2", "--hidden", "64"]
    proc = run_cli("launch", parts, "--executor", "slurm", "--preset", "sized", "--presets", presets,
                   "--log-dir", tmp_path / "logs2", "--out", tmp_path / "run", *shape, env=env)
    estimate = run_cli("scaling-model", "estimate-memory", parts, *shape, "--json")   # what a user reads
    need = sum(row["estimate_bytes"] for row in json.loads(estimate.stdout))
    request = max(1, math.ceil(need * 1.5 / 2**30))
    assert f"asking Slurm for {request} GiB per node (estimate {need / 2**30:.2f} GiB + 50%)" in proc.stderr
    assert f"#SBATCH --mem={request}GB" in (tmp_path / "script.sh").read_text()
