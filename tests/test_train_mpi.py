"""The MPI trainer: cd-0 equals single-process training for any P; traffic; resume; failures."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import fault_env, mpiexec, run_cli
from distgnn.data.fetch import fetch

pytestmark = pytest.mark.mpi
EPOCHS = 20


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    return fetch("synth-reddit", root=root, scale=0.002, seed=1, threads=1)


def libra_parts(graph: Path, root: Path, counts=(1, 2, 3, 4)) -> dict[int, Path]:
    """{P: partition folder} of ``graph`` cut by Libra into each P of ``counts``."""
    out = {}
    for parts in counts:
        folder = root / f"libra-{parts}"
        proc = run_cli("partition", graph, "--parts", parts, "--method", "libra", "--out", folder,
                       "--threads", "1", "--quiet")
        assert proc.returncode == 0, proc.stderr
        out[parts] = folder
    return out


@pytest.fixture(scope="module")
def partitions(graph: Path, tmp_path_factory) -> dict[int, Path]:
    return libra_parts(graph, tmp_path_factory.mktemp("parts"))


def train(partdir: Path, parts: int, out: Path, *extra: str, env: dict | None = None,
          check: bool = True):
    args = ["train", partdir, "--out", out, "--threads", "1", "--hidden", "16", "--quiet", *extra]
    proc = mpiexec(parts, *args, env=env)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def train_many(partdir: Path | None, parts: int,
               runs: dict[Path, tuple] | list[tuple[Path, tuple]], env: dict | None = None) -> None:
    """``train(partdir, parts, out, *extra)`` for each ``out: extra`` of ``runs`` (or each pair,
    in order: one folder may come twice), in one mpiexec launch (tests/mpi_scripts/train_many.py:
    the same CLI runs, one after another). With ``partdir`` None, each ``extra`` starts with its
    own partition folder."""
    def command(out: Path, extra: tuple) -> list[str]:
        folder, extra = (extra[0], extra[1:]) if partdir is None else (partdir, extra)
        return ["train", str(folder), "--out", str(out), "--threads", "1", "--hidden", "16",
                "--quiet", *map(str, extra)]

    pairs = runs.items() if isinstance(runs, dict) else runs
    argv = [command(out, extra) for out, extra in pairs]
    proc = mpiexec(parts, str(Path(__file__).parent / "mpi_scripts" / "train_many.py"), json.dumps(argv),
                   module=False, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]


def losses(run_dir: Path) -> np.ndarray:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return np.array([json.loads(line)["loss"] for line in lines])


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# (graph, aggregator, input cache, apply): layer 0 maps first on the reddit twin (602 -> 16) and
# aggregates the stored features first on the proteins twin (8 -> 16); auto is root for cd-0
CD0_CASES = [("reddit", "mean", True, "auto"), ("reddit", "gcn", True, "auto"),
             ("reddit", "gcn", False, "root"), ("narrow", "mean", False, "root")]


@pytest.mark.slow
def test_cd0_equals_single_process(partitions, narrow_partitions, tmp_path: Path) -> None:
    """cd-0 (under root, the default) equals one process for P = 2, 3, 4 (dropout 0.5): mean and
    gcn, layer 0 mapping first (reddit: its rows broadcast) and aggregating the stored features
    first in training (narrow, cache off), the input cache on and off; losses to 1e-5 relative,
    weights to 1e-4 of the largest, evaluation equal. One launch per P runs every case."""
    def extra(case: tuple) -> tuple:
        graph_kind, aggregator, cache, apply = case
        layers = ("--layers", "2") if cache else ()
        return ("--algo", "cd-0", "--apply", apply, "--epochs", EPOCHS, "--dropout", "0.5",
                "--aggregator", aggregator, "--eval-every", "5", *layers,
                *(() if cache else ("--no-input-cache",)))

    folders = {"reddit": partitions, "narrow": narrow_partitions}
    runs = {(case, p): tmp_path / f"{'-'.join(map(str, case))}-p{p}" for case in CD0_CASES for p in (1, 2, 3, 4)}
    for parts in (1, 2, 3, 4):
        train_many(None, parts, {runs[case, parts]: (folders[case[0]][parts], *extra(case))
                                 for case in CD0_CASES})
    for case in CD0_CASES:
        reference = losses(runs[case, 1])
        assert len(reference) == EPOCHS and reference[-1] < reference[0], case
        for parts in (2, 3, 4):
            _assert_same_training(runs[case, 1], runs[case, parts], f"P={parts} {case}")
            summary = json.loads((runs[case, parts] / "summary.json").read_text())
            assert summary["num_parts"] == parts and summary["algo"] == "cd-0"
            assert summary["apply"] == "root" and summary["hyperparameters"]["apply"] in (case[3], "root")
            for key in ("store", "method", "num_parts", "algo", "epochs", "hyperparameters", "seeds",
                        "versions", "git_commit", "slurm_job_id", "partition_dir", "replication_factor",
                        "mean_epoch_time_s", "best_val", "test_at_best_val", "final_test",
                        "bytes_forward", "bytes_backward", "bytes_gradients", "peak_rss_bytes"):
                assert key in summary, key
            assert summary["bytes_forward"] > 0 and summary["bytes_backward"] > 0


def test_delayed_traffic_and_0c(partitions, tmp_path: Path) -> None:
    """Steady-state forward bytes of cd-r are 1/r of cd-0's under the same apply mode (cd-r and
    cd-0 at the root by default, cd-r-orig on the replicas); at the root cd-r's delayed gradients
    are 1/r of cd-0's backward bytes, on the replicas there is no backward exchange; 0c exchanges
    no aggregates (only gradients)."""
    parts, epochs = 3, 10
    bytes_forward, bytes_backward = {}, {}
    cases = (("cd-0", "root"), ("cd-0", "replicas"), ("cd-2", "root"), ("cd-3", "root"),
             ("cd-3-orig", "replicas"), ("0c", "replicas"))
    # every layer aggregates every epoch (no cached layer-0 aggregate), as in DistGNN
    train_many(partitions[parts], parts, {
        tmp_path / f"{algo}-{apply}": ("--algo", algo, "--epochs", epochs, "--eval-every", "0",
                                       "--no-input-cache", "--apply", apply) for algo, apply in cases})
    for algo, apply in cases:
        run = tmp_path / f"{algo}-{apply}"
        recs = records(run)
        assert json.loads((run / "summary.json").read_text())["apply"] == apply
        steady = recs[6:]  # past 2r epochs for r <= 3
        bytes_forward[algo, apply] = np.mean([r["bytes_forward"] for r in steady])
        backward = np.mean([r["bytes_backward"] for r in steady])
        if algo == "cd-0" or apply == "replicas":
            bytes_backward[algo, apply] = backward
            assert algo == "cd-0" or backward == 0, algo
        else:  # cd-r at the root: delayed gradients, 1/r of cd-0's backward rows
            assert backward == pytest.approx(bytes_backward["cd-0", "root"] / int(algo[3:]), rel=0.25)
        assert all(r["bytes_gradients"] > 0 for r in recs)
        assert all(r["bytes_forward"] == r["bytes_broadcast"] + r["bytes_reduce"] - r["bytes_backward"]
                   for r in recs), algo
    assert bytes_forward["0c", "replicas"] == 0
    for algo, r, apply in (("cd-2", 2, "root"), ("cd-3", 3, "root"), ("cd-3-orig", 3, "replicas")):
        # split vertices fall into r bins of slightly different sizes
        assert bytes_forward[algo, apply] == pytest.approx(bytes_forward["cd-0", apply] / r, rel=0.25), algo


def test_input_cache_skips_layer0_exchange_and_keeps_0c_and_cdr_training(partitions, tmp_path: Path) -> None:
    """With layer 0's input aggregate computed once (the default), cd-0 trains exactly as before but
    exchanges only layer 1 (both layers are 16 wide here: half the bytes); 0c and cd-r under its
    first rule train as without the cache (it serves their exact evaluation only; cd-r's default
    rule trains layer 0 on it, docs/design.md#cdr-rules)."""
    parts, epochs = 3, 8
    algos, flags = ("cd-0", "0c", "cd-2"), ((), ("--no-input-cache",))
    train_many(partitions[parts], parts, {
        tmp_path / f"{algo}{''.join(flag)}": ("--algo", algo, "--epochs", epochs, "--eval-every", "4",
                                              *(("--cdr-rule", "delayed") if algo == "cd-2" else ()),
                                              *flag) for algo in algos for flag in flags})
    for algo in algos:
        runs = {bool(flag): tmp_path / f"{algo}{''.join(flag)}" for flag in flags}
        cached, every_epoch = records(runs[False]), records(runs[True])
        np.testing.assert_allclose(losses(runs[False]), losses(runs[True]), rtol=1e-5, err_msg=algo)
        for a, b in zip(cached, every_epoch):
            if "val" in a:
                assert a["val"] == pytest.approx(b["val"], abs=0.01), algo
        forward = [np.mean([r["bytes_forward"] for r in recs[4:]]) for recs in (cached, every_epoch)]
        if algo == "cd-0":
            assert forward[0] == pytest.approx(forward[1] / 2, rel=1e-9)
        else:
            assert forward[0] == forward[1], algo


def test_cdr_rules_warm_steps_are_cd0_and_input_sends_no_layer0(partitions, tmp_path: Path) -> None:
    """--cdr-rule (docs/design.md#cdr-rules), cd-2 on three parts, both layers 16 wide, layer 0
    mapping first: warm-input's first r = 2 epochs are cd-0's (same losses, same bytes both
    ways) and later ones are not; input (and warm-input) send no layer-0 rows, so their steady
    bytes are half of the first rule's; the summary records the rule."""
    parts, epochs, r = 3, 8, 2
    rules = ("delayed", "input", "warm-input")
    runs = {rule: tmp_path / rule for rule in rules}
    train_many(partitions[parts], parts, {
        tmp_path / "cd-0": ("--algo", "cd-0", "--epochs", epochs, "--eval-every", "0"),
        **{run: ("--algo", f"cd-{r}", "--cdr-rule", rule, "--epochs", epochs, "--eval-every", "0")
           for rule, run in runs.items()}})
    exact, warm = records(tmp_path / "cd-0"), records(runs["warm-input"])
    for e in range(r):
        assert warm[e]["loss"] == pytest.approx(exact[e]["loss"], rel=1e-5)
        for kind in ("bytes_forward", "bytes_backward"):
            assert warm[e][kind] == exact[e][kind] > 0, (kind, e)
    assert any(abs(w["loss"] - x["loss"]) > 1e-4 for w, x in zip(warm[r:], exact[r:]))
    steady = {rule: [rec["bytes_forward"] for rec in records(run)[2 * r:]] for rule, run in runs.items()}
    assert steady["input"] == steady["warm-input"]
    assert steady["input"] == pytest.approx([f / 2 for f in steady["delayed"]], rel=1e-12)
    for rule, run in runs.items():
        assert json.loads((run / "summary.json").read_text())["hyperparameters"]["cdr_rule"] == rule


def test_cdr_recompute_moves_no_copies_and_budget_zero_is_input(partitions, tmp_path: Path) -> None:
    """--cdr-rule recompute (docs/design.md#cdr-rules), cd-2 on three parts: the leaves compute
    layer 1's source rows themselves (every source leaf: budget inf), so no copies move
    (without delayed gradients, where each
    direction counts forward rows only: nothing is broadcast, and the partials reduced are
    `input`'s, which also broadcasts copies); with --recompute-budget 0 no leaf recomputes and
    the run is `input`'s bit for bit; the summary records rule, budget and the rows
    recomputed."""
    parts, epochs = 3, 5
    names = ("input", "budget0", "input-nodg", "recompute-nodg")
    runs = {name: tmp_path / name for name in names}
    common = ("--algo", "cd-2", "--epochs", epochs, "--eval-every", "0")
    nodg = ("--no-delayed-gradients",)
    train_many(partitions[parts], parts, {
        runs["input"]: (*common, "--cdr-rule", "input"),
        runs["budget0"]: (*common, "--cdr-rule", "recompute", "--recompute-budget", "0"),
        runs["input-nodg"]: (*common, "--cdr-rule", "input", *nodg),
        runs["recompute-nodg"]: (*common, "--cdr-rule", "recompute", "--recompute-budget", "inf",
                                 *nodg)})
    for got, want in zip(records(runs["recompute-nodg"]), records(runs["input-nodg"])):
        assert got["bytes_broadcast"] == 0 < want["bytes_broadcast"]
        assert got["bytes_reduce"] == want["bytes_reduce"] > 0
    recomputed, plain = losses(runs["recompute-nodg"]), losses(runs["input-nodg"])
    assert np.all(np.isfinite(recomputed)) and any(abs(a - b) > 1e-6 for a, b in zip(recomputed, plain))
    np.testing.assert_array_equal(losses(runs["budget0"]), losses(runs["input"]))
    summary = {name: json.loads((run / "summary.json").read_text()) for name, run in runs.items()}
    assert (summary["budget0"]["hyperparameters"]["cdr_rule"],
            summary["budget0"]["hyperparameters"]["recompute_budget"]) == ("recompute", 0.0)
    assert summary["recompute-nodg"]["hyperparameters"]["recompute_budget"] == float("inf")
    assert summary["recompute-nodg"]["recomputed_rows"] > 0 == summary["budget0"]["recomputed_rows"]
    assert summary["input"]["recomputed_rows"] is None


@pytest.fixture(scope="module")
def narrow_input_parts(tmp_path_factory) -> Path:
    """Three Libra parts of a twin whose 8 input features are narrower than hidden 16, so layer 0
    aggregates the constant features before its linear map."""
    root = tmp_path_factory.mktemp("narrow")
    store = fetch("synth-proteins", root=root, scale=0.005, mean_degree=8, seed=1, threads=1)
    return libra_parts(store, root, (3,))[3]


def test_0c_and_cdr_keep_their_settled_layer0_aggregate(narrow_input_parts, tmp_path: Path) -> None:
    """With the input cache on, 0c (at once) and cd-2 (on the replicas from step 3r = 6, at the
    root from step 2r = 4) keep their own layer-0 aggregate of the constant input and train bit for
    bit as when recomputing it every epoch; cd-2 sends no layer-0 rows from step 2r = 4 on (on the
    replicas forward bytes are layer 1's 16 columns of 8 + 16; at the root, where layer 0 only
    reduces, the reduce bytes are). cd-2-orig's layer-0 aggregate alternates, so it is unchanged."""
    parts, epochs = 3, 10
    cases = (("0c", "auto"), ("cd-2", "replicas"), ("cd-2", "root"), ("cd-2-orig", "auto"))
    # (at the root under the first rule, without delayed gradients: bytes_reduce is then forward
    # rows only; the default rule trains layer 0 on the input cache, docs/design.md#cdr-rules)
    train_many(narrow_input_parts, parts, {
        tmp_path / f"{algo}-{apply}{flag}": (
            "--algo", algo, "--epochs", epochs, "--eval-every", "5", "--apply", apply,
            *([flag] if flag else []),
            *(["--no-delayed-gradients", "--cdr-rule", "delayed"] if (algo, apply) == ("cd-2", "root")
              else []))
        for algo, apply in cases for flag in ("", "--no-input-cache")})
    for algo, apply in cases:
        runs = {flag: tmp_path / f"{algo}-{apply}{flag}" for flag in ("", "--no-input-cache")}
        kept, every = records(runs[""]), records(runs["--no-input-cache"])
        np.testing.assert_array_equal(losses(runs[""]), losses(runs["--no-input-cache"]),
                                      err_msg=f"{algo} {apply}")
        key = "bytes_reduce" if apply == "root" else "bytes_forward"
        forward = [[r[key] for r in recs[4:]] for recs in (kept, every)]
        if algo == "cd-2":
            assert all(f > 0 for f in forward[0])
            assert forward[0] == pytest.approx([f * 16 / 24 for f in forward[1]], rel=1e-12)
        else:
            assert forward[0] == forward[1], algo


RESUME_CASES = [
    ("cd-0", False, "auto", ()), ("cd-3", False, "auto", ()), ("cd-3", True, "auto", ()),
    ("cd-3", True, "replicas", ()), ("cd-3", False, "auto", ("--fresh-copies",)),
    ("cd-3", False, "auto", ("--model", "gat", "--heads", "2", "--hidden", "8", "--no-fresh-copies")),
    ("cd-0", False, "auto", ("--message-precision", "int8")),
    ("cd-3", False, "auto", ("--message-precision", "int2")),
    ("cd-3", False, "auto", ("--cdr-rule", "prompt"))]


@pytest.fixture(scope="module")
def resumed_runs(partitions, narrow_input_parts, tmp_path_factory) -> dict[int, tuple]:
    """For each case of RESUME_CASES (by index): (whole run, broken run, the broken launch, what
    it left: a summary or not, its complete checkpoints). The
    broken run's rank 1 fails in epoch 12 (checkpoints every 5), then it is resumed. Each failing
    launch is its own mpiexec; the uninterrupted runs, and then the resumes, share one launch per
    world size (tests/mpi_scripts/train_many.py)."""
    root = tmp_path_factory.mktemp("resume")
    runs, wholes, resumes = {}, {2: [], 3: []}, {2: [], 3: []}
    for i, (algo, narrow, apply, extra) in enumerate(RESUME_CASES):
        parts, folder = (3, narrow_input_parts) if narrow else (2, partitions[2])
        common = (folder, "--algo", algo, "--epochs", EPOCHS, "--checkpoint-every", 5,
                  "--eval-every", 0, "--apply", apply, *extra)
        whole, broken = root / f"{i}-whole", root / f"{i}-broken"
        wholes[parts].append((whole, common))
        proc = train(folder, parts, broken, *map(str, common[1:]), check=False,
                     env=fault_env(DISTGNN_TEST_FAIL_RANK="1", DISTGNN_TEST_FAIL_EPOCH="12"))
        resumes[parts].append((broken, (*common, "--resume")))
        left = {"summary": (broken / "summary.json").exists(),
                "checkpoints": sorted(p.parent.name for p in (broken / "checkpoints").glob("*/manifest.json"))}
        runs[i] = (whole, broken, proc, left)
    for parts in (2, 3):
        train_many(None, parts, wholes[parts] + resumes[parts])
    return runs


@pytest.mark.parametrize("case", range(len(RESUME_CASES)),
                         ids=["-".join((a, "narrow" if n else "wide", ap, *e)) for a, n, ap, e in RESUME_CASES])
def test_resume_after_a_failed_rank_continues_exactly(resumed_runs, case: int) -> None:
    """Resuming at epoch 10 gives the uninterrupted losses (cd-3 resumes with messages in flight
    under both apply modes, at the root with its delayed gradients in flight; GAT's cd-3 with its
    attention copies and partials in flight; the prompt rule with its held gradients);
    ``narrow``: layer 0 aggregates
    the constant input first, so cd-3 has kept its settled layer-0 aggregate since step 6 (root)
    or 9 (replicas); int8 and int2 rows: the stochastic rounding draws the same after a resume)."""
    algo, _, apply, extra = RESUME_CASES[case]
    whole, broken, proc, left = resumed_runs[case]
    assert proc.returncode != 0
    assert "rank 1" in proc.stderr and "injected failure" in proc.stderr
    assert "interrupted" not in proc.stderr  # the other ranks end without a Ctrl-C line
    # what the failed launch left: no summary, the checkpoints of epochs 5 and 10
    assert left == {"summary": False, "checkpoints": ["epoch_000005", "epoch_000010"]}
    epochs = [r["epoch"] for r in records(broken)]
    assert epochs == list(range(1, EPOCHS + 1))  # every epoch exactly once
    np.testing.assert_array_equal(losses(broken), losses(whole))  # bit for bit
    # cd-r at the root sends its gradients back, 1/r of the rows every epoch, unless told not to
    sends_gradients = algo == "cd-0" or (algo == "cd-3" and apply != "replicas"
                                         and "--no-delayed-gradients" not in extra)
    assert all((r["bytes_backward"] > 0) == sends_gradients for r in records(whole)), (algo, apply)


def test_resume_refuses_other_hyperparameters(partitions, tmp_path: Path) -> None:
    run = tmp_path / "run"
    train(partitions[2], 2, run, "--algo", "cd-0", "--epochs", "4", "--checkpoint-every", "2")
    proc = train(partitions[2], 2, run, "--algo", "cd-0", "--epochs", "6", "--lr", "0.5",
                 "--resume", check=False)
    assert proc.returncode != 0
    lines = [l for l in proc.stderr.splitlines() if "error" in l]
    assert len(lines) == 1 and "lr" in lines[0], proc.stderr


def test_rank_count_must_equal_parts(partitions, tmp_path: Path) -> None:
    proc = train(partitions[3], 2, tmp_path / "run", "--epochs", "1", check=False)
    assert proc.returncode != 0
    # ours is one line; mpiexec adds its own trailer about the non-zero exit
    lines = [l for l in proc.stderr.splitlines() if l.startswith("distgnn")]
    assert len(lines) == 1 and "3 parts but 2 ranks" in lines[0], proc.stderr


@pytest.mark.parametrize("option,value,needle", [("--lr", "-0.01", "--lr"), ("--eval-every", "-1", "--eval-every"),
                                                 ("--algo", "cd-abc", "unknown algorithm"),
                                                 ("--epochs", "0", "--epochs")])
def test_bad_options_at_two_ranks_are_one_line_from_rank_0(partitions, tmp_path: Path, option: str,
                                                          value: str, needle: str) -> None:
    """Refused before MPI starts or any part loads: one line (rank 0's), exit 2, no traceback, no
    MPI_ABORT banner, no run folder."""
    proc = mpiexec(2, "train", partitions[2], option, value, "--out", tmp_path / "r")
    assert proc.returncode == 2, proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    ours = [l for l in lines if l.startswith("distgnn train: error:")]
    assert len(ours) == 1 and needle in ours[0], proc.stderr
    assert "Traceback" not in proc.stderr and "MPI_ABORT" not in proc.stderr, proc.stderr
    assert not (tmp_path / "r").exists()


def test_bad_algorithm_names(partitions, tmp_path: Path) -> None:
    for name in ("cd-x", "cd--1", "cd-0-orig", "1c"):
        proc = run_cli("train", partitions[1], "--algo", name, "--out", tmp_path / "r")
        assert proc.returncode == 2 and "unknown algorithm" in proc.stderr, name


# -- apply at the root (docs/design.md#apply-at-root) ------------------------------

@pytest.fixture(scope="module")
def narrow_partitions(tmp_path_factory) -> dict[int, Path]:
    """Libra parts (P = 1..4) of a twin with 8 input features under hidden 16: layer 0 aggregates
    the stored features first (under root nothing is broadcast for it)."""
    root = tmp_path_factory.mktemp("narrow-all")
    store = fetch("synth-proteins", root=root, scale=0.005, mean_degree=8, seed=1, threads=1)
    return libra_parts(store, root)


def _assert_same_training(reference: Path, run: Path, label: str) -> None:
    """Losses to 1e-5 relative, weights to 1e-4 of the largest, evaluation equal."""
    np.testing.assert_allclose(losses(run), losses(reference), rtol=1e-5, err_msg=label)
    ref_model = torch.load(reference / "model.pt", weights_only=False)["model"]
    model = torch.load(run / "model.pt", weights_only=False)["model"]
    largest = max(float(t.abs().max()) for t in ref_model.values())
    for name, value in model.items():
        assert float((value - ref_model[name]).abs().max()) <= 1e-4 * largest, (label, name)
    ref_eval = [r for r in records(reference) if "val" in r]
    got_eval = [r for r in records(run) if "val" in r]
    assert [r["val"] for r in got_eval] == pytest.approx([r["val"] for r in ref_eval], abs=1e-9), label


def test_cd0_replicas_equals_root(partitions, tmp_path: Path) -> None:
    """cd-0 is exact under both apply modes, mean and gcn (whose self term each part's kernel
    adds at the root only): --apply replicas at P = 3 gives root's training, and its run folder
    carries the mode."""
    common = ("--algo", "cd-0", "--epochs", "10", "--eval-every", "5")
    train_many(partitions[3], 3, {tmp_path / f"{apply}-{agg}": (*common, "--apply", apply, "--aggregator", agg)
                                  for apply in ("root", "replicas") for agg in ("mean", "gcn")})
    for agg in ("mean", "gcn"):
        _assert_same_training(tmp_path / f"root-{agg}", tmp_path / f"replicas-{agg}", f"replicas vs root, {agg}")
    summary = json.loads((tmp_path / "replicas-mean" / "summary.json").read_text())
    assert summary["apply"] == "replicas"
    from distgnn.train.trainer import default_run_dir

    attrs = {"store": "s", "method": "libra", "P": 3}
    assert default_run_dir(attrs, "cd-0", "replicas").name == "cd-0-replicas"
    assert default_run_dir(attrs, "cd-0").name == "cd-0"


# (model, graph, input cache, apply): GCN's layer 0 maps first on the reddit twin (602 -> 16) and
# aggregates the stored features first on the narrow one (8 -> 16); GIN always aggregates first
MODEL_CASES = [("gcn", "reddit", True, "replicas"), ("gcn", "narrow", False, "root"),
               ("gin", "reddit", True, "root"), ("gin", "narrow", False, "replicas")]


def test_gcn_and_gin_cd0_equal_single_process(partitions, narrow_partitions, tmp_path: Path) -> None:
    """GCN (D^-1/2 (A + I) D^-1/2 with the global out-degree reduced at load time) and GIN (sum,
    learned eps) under cd-0 at P = 3 equal one process, under both apply modes, the input cache on
    and off; cd-5 and 0c run (finite losses; GCN's fall). Run folders and summaries carry the model; --aggregator with
    another model is refused in one line."""
    folders = {"reddit": partitions, "narrow": narrow_partitions}

    def extra(case: tuple, parts: int) -> tuple:
        model, graph_kind, cache, apply = case
        return (folders[graph_kind][parts], "--model", model, "--algo", "cd-0", "--apply", apply,
                "--epochs", "10", "--dropout", "0.5", "--eval-every", "5",
                *(() if cache else ("--no-input-cache",)))

    runs = {(case, p): tmp_path / f"{'-'.join(map(str, case))}-p{p}" for case in MODEL_CASES for p in (1, 3)}
    train_many(None, 1, {runs[case, 1]: extra(case, 1) for case in MODEL_CASES})
    delayed = {tmp_path / f"{model}-{algo}": (partitions[3], "--model", model, "--algo", algo,
                                              "--epochs", "12", "--eval-every", "6")
               for model in ("gcn", "gin") for algo in ("cd-5", "0c")}
    train_many(None, 3, {**{runs[case, 3]: extra(case, 3) for case in MODEL_CASES}, **delayed})
    for case in MODEL_CASES:
        reference = losses(runs[case, 1])
        assert reference[-1] < reference[0], case
        _assert_same_training(runs[case, 1], runs[case, 3], f"P=3 {case}")
        summary = json.loads((runs[case, 3] / "summary.json").read_text())
        assert summary["model"] == case[0] and summary["hyperparameters"]["model"] == case[0]
    for run in delayed:  # GIN's unnormalised sums on this dense twin make its loss noisy
        values = losses(run)
        assert len(values) == 12 and np.isfinite(values).all(), run.name
        assert values[-1] < values[0] or run.name.startswith("gin"), run.name
    from distgnn.train.trainer import default_run_dir

    attrs = {"store": "s", "method": "libra", "P": 3}
    assert default_run_dir(attrs, "cd-0", "auto", "gcn").name == "gcn-cd-0"
    assert default_run_dir(attrs, "0c", "auto", "gin").name == "gin-0c"
    proc = run_cli("train", partitions[1], "--model", "gcn", "--aggregator", "gcn", "--out", tmp_path / "x")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--aggregator" in proc.stderr


def _moving_leaves(folder: Path, parts: int) -> tuple[int, int, int, int]:
    """(leaves, leaves with local in-edges, leaves with local out-edges, roots) over all parts."""
    import zarr

    total = with_in = with_out = roots = 0
    for k in range(parts):
        g = zarr.open_group(str(folder / f"part_{k}.zarr"), mode="r")
        n_roots = int(g.attrs["n_roots"])
        roots += n_roots
        in_degree = np.diff(g["indptr"][:])[n_roots:]
        out_degree = np.diff(g["t_indptr"][:])[n_roots:]
        total += len(in_degree)
        with_in += int(np.count_nonzero(in_degree))
        with_out += int(np.count_nonzero(out_degree))
    return total, with_in, with_out, roots


def test_root_posts_only_rows_that_carry_something(graph, tmp_path: Path) -> None:
    """Bytes counted at the send: every epoch, each of the two 16-wide aggregations broadcasts one
    row per leaf with local out-edges and reduces one per leaf with local in-edges, forward and
    (adjoint) backward. Random edge placement leaves many leaves without local in-edges and many
    without local out-edges, so pruning shows. The kernel writes only compact tables
    (docs/design.md#compact-rows): forward the roots and the leaves with local in-edges, backward
    the roots and the leaves with local out-edges; no table row is zeroed."""
    parts = 4
    folder = tmp_path / "random-4"
    proc = run_cli("partition", graph, "--parts", parts, "--method", "random", "--out", folder,
                   "--threads", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    leaves, with_in, with_out, roots = _moving_leaves(folder, parts)
    assert with_in < 0.9 * leaves and with_out < 0.9 * leaves
    run = tmp_path / "run"
    train(folder, parts, run, "--algo", "cd-0", "--epochs", "3", "--eval-every", "0",
          "--no-input-cache")
    row = 16 * 4
    for r in records(run):
        assert r["bytes_forward"] == 2 * row * (with_in + with_out)
        assert r["bytes_backward"] == 2 * row * (with_in + with_out)
        assert r["bytes_broadcast"] == 2 * row * (with_out + with_in)  # forward rows + reduce adjoint
        assert r["bytes_reduce"] == 2 * row * (with_in + with_out)
        assert r["rows_written"] == 2 * ((roots + with_in) + (roots + with_out))
        assert r["rows_zeroed"] == 0
    # replicas sends every leaf both ways, every layer
    rep = tmp_path / "rep"
    train(folder, parts, rep, "--algo", "cd-0", "--epochs", "2", "--eval-every", "0",
          "--no-input-cache", "--apply", "replicas")
    assert records(rep)[-1]["bytes_forward"] == 2 * row * 2 * leaves


def test_resume_reads_checkpoints_with_tables_over_local_ids(graph, tmp_path: Path) -> None:
    """Checkpoints written before the compact tables (docs/design.md#compact-rows) hold a cd-r
    layer's source table over every local row; resuming from one, rewritten so, continues
    exactly. Random edge placement leaves rows out of the compact tables, so the two differ; the
    first rule's leaf rows are delivered copies (the default rule recomputes them every step, so
    a misread table would not show)."""
    from distgnn.exchange.compact import compact_rows
    from distgnn.partition.part_loader import load_partition

    parts, folder = 2, tmp_path / "random-2"
    proc = run_cli("partition", graph, "--parts", parts, "--method", "random", "--out", folder,
                   "--threads", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    common = ["--algo", "cd-3", "--cdr-rule", "delayed", "--epochs", "12", "--checkpoint-every", "6",
              "--eval-every", "0"]
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    train(folder, parts, whole, *common)
    proc = train(folder, parts, broken, *common, check=False,
                 env=fault_env(DISTGNN_TEST_FAIL_RANK="1", DISTGNN_TEST_FAIL_EPOCH="8"))
    assert proc.returncode != 0
    widened = 0
    for k in range(parts):
        path = broken / "checkpoints" / "epoch_000006" / f"rank_{k}.pt"
        state = torch.load(path, weights_only=False)
        assert state["exchange"].pop("table_rows") == "sources"
        part = load_partition(folder, k)
        sources = compact_rows(part, part.num_roots).sources
        for layer in state["exchange"]["sums"].values():
            if layer["table"] is not None:
                table = layer["table"].new_zeros((part.num_local, layer["table"].shape[1]))
                table[sources] = layer["table"]
                widened += int(part.num_local > len(sources))
                layer["table"] = table
        torch.save(state, path)
    assert widened > 0
    train(folder, parts, broken, *common, "--resume")
    np.testing.assert_allclose(losses(broken)[6:], losses(whole)[6:], rtol=1e-6)


def test_apply_refusals_and_old_layout(partitions, tmp_path: Path) -> None:
    for algo, extra in (("0c", ["--apply", "root"]), ("cd-3-orig", ["--apply", "root"]),
                        ("cd-0", ["--delayed-gradients"]), ("cd-3", ["--delayed-gradients", "--apply", "replicas"]),
                        ("cd-0", ["--fresh-copies"]), ("cd-3", ["--fresh-copies", "--apply", "replicas"]),
                        ("cd-0", ["--cdr-rule", "delayed"]), ("cd-3", ["--cdr-rule", "delayed", "--apply", "replicas"])):
        proc = run_cli("train", partitions[1], "--algo", algo, *extra, "--out", tmp_path / "r")
        lines = [l for l in proc.stderr.splitlines() if l.strip()]
        words = ("DistGNN's scheme" if "root" in extra else f"{extra[0]}: only for cd-<r>")
        assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], (algo, extra, proc.stderr)
    proc = run_cli("train", partitions[1], "--apply", "master", "--out", tmp_path / "r")
    assert proc.returncode == 2 and "--apply: invalid choice" in proc.stderr
    # a part in the old layout (no layout_version) is refused in one line that says how to rebuild
    import shutil
    import zarr

    old = tmp_path / "old"
    shutil.copytree(partitions[2], old)
    group = zarr.open_group(str(old / "part_1.zarr"), mode="r+")
    del group.attrs["layout_version"]
    proc = train(old, 2, tmp_path / "r2", "--epochs", "1", check=False)
    lines = [l for l in proc.stderr.splitlines() if l.startswith("distgnn")]
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert "part_1.zarr" in lines[0] and "layout version 1" in lines[0] and "partition build" in lines[0]
    proc = run_cli("verify", old)
    assert proc.returncode == 2 and "layout version 1" in proc.stderr


def test_bf16_rows_halve_the_exchange_and_stay_close(partitions, tmp_path: Path) -> None:
    """--precision bf16 also gathers and exchanges bfloat16 rows: at P = 3 every training byte
    count is half of float32's (the same rows posted, 2 bytes a value), for cd-0 and for cd-3 under
    root, GraphSAGE and GAT (its maps in bfloat16, its attention in float32, its partials sent in
    bfloat16); the losses stay within bfloat16 rounding of float32's and of bf16 at P = 1.
    --precision auto trains as the precision this CPU has natively, said in summary.json."""
    gat = ("--model", "gat", "--heads", "4", "--hidden", "8", "--dropout", "0.6", "--lr", "0.005")
    cases = [(model, algo, precision, parts) for model in ("sage", "gat")
             for algo, precision, parts in (("cd-0", "fp32", 3), ("cd-0", "bf16", 3), ("cd-3", "fp32", 3),
                                            ("cd-3", "bf16", 3), ("cd-0", "bf16", 1))]
    cases += [("sage", "cd-0", "fp32", 1), ("sage", "cd-0", "auto", 1)]
    runs = {case: tmp_path / "-".join(map(str, case)) for case in cases}
    for parts in (3, 1):
        train_many(partitions[parts], parts, {
            runs[model, algo, precision, p]: (*(gat if model == "gat" else ()), "--algo", algo,
                                              "--epochs", 8, "--eval-every", 4, "--precision", precision)
            for model, algo, precision, p in cases if p == parts})
    for model in ("sage", "gat"):
        for algo in ("cd-0", "cd-3"):
            fp32, bf16 = records(runs[model, algo, "fp32", 3]), records(runs[model, algo, "bf16", 3])
            for a, b in zip(fp32, bf16):
                for key in ("bytes_forward", "bytes_backward", "bytes_broadcast", "bytes_reduce"):
                    assert a[key] > 0 and b[key] * 2 == a[key], (model, algo, key, a["epoch"])
                assert b["bytes_gradients"] == a["bytes_gradients"]  # the weights' allreduce: float32
            # GAT's cd-3 (fresh copies) trains at losses of 8-15 on this tiny graph in 8 epochs,
            # where bf16's rounding moves an epoch by up to 6%
            np.testing.assert_allclose(losses(runs[model, algo, "bf16", 3]),
                                       losses(runs[model, algo, "fp32", 3]),
                                       rtol=6e-2 if (model, algo) == ("gat", "cd-3") else 3e-2)
        np.testing.assert_allclose(losses(runs[model, "cd-0", "bf16", 3]),
                                   losses(runs[model, "cd-0", "bf16", 1]), rtol=3e-2)
        assert json.loads((runs[model, "cd-3", "bf16", 3] / "summary.json").read_text())[
            "hyperparameters"]["precision"] == "bf16"
    # auto: the precision this CPU multiplies natively, the same training as asking for it
    from distgnn.cpu_precision import native_bf16_flag

    chosen = "fp32" if native_bf16_flag() is None else "bf16"
    summary = json.loads((runs["sage", "cd-0", "auto", 1] / "summary.json").read_text())
    assert summary["hyperparameters"]["precision"] == chosen
    assert summary["precision_reason"].startswith(f"auto chose {chosen}")
    assert (losses(runs["sage", "cd-0", "auto", 1]) == losses(runs["sage", "cd-0", chosen, 1])).all()


def test_message_widths_cut_the_bytes_and_repeat_bit_for_bit(partitions, tmp_path: Path) -> None:
    """--message-precision at P = 3 (every training row is 16 wide here): each training byte
    count of cd-0 is float32's times row_bytes(16) / 64 (codes, scales and padding; the weights'
    allreduce stays float32); int8's losses stay within 1% of float32's. A rerun of int2 cd-3
    (stochastic rounding) repeats its losses bit for bit (a resume: the resume test's cases)."""
    from distgnn.kernels.message_codec import MessageCodec

    widths = ("fp32", "int8", "int4", "int2")
    runs = {w: tmp_path / f"cd0-{w}" for w in widths}
    common = ("--eval-every", 5)
    cdr = ("--algo", "cd-3", "--message-precision", "int2", "--epochs", 10, *common)
    sequence = [(runs[w], ("--algo", "cd-0", "--message-precision", w, "--epochs", 10, *common))
                for w in widths]
    sequence += [(tmp_path / "cdr-a", cdr), (tmp_path / "cdr-b", cdr)]
    train_many(partitions[3], 3, sequence)
    fp32 = records(runs["fp32"])
    for w in widths[1:]:
        ratio = MessageCodec(w).row_bytes(16) / 64
        for a, b in zip(fp32, records(runs[w])):
            for key in ("bytes_forward", "bytes_backward", "bytes_broadcast", "bytes_reduce"):
                assert a[key] > 0 and b[key] == a[key] * ratio, (w, key, a["epoch"])
            assert b["bytes_gradients"] == a["bytes_gradients"]
        assert np.isfinite(losses(runs[w])).all()
    np.testing.assert_allclose(losses(runs["int8"]), losses(runs["fp32"]), rtol=1e-2)
    assert not np.array_equal(losses(runs["int8"]), losses(runs["fp32"]))  # it did round
    np.testing.assert_array_equal(losses(tmp_path / "cdr-a"), losses(tmp_path / "cdr-b"))


def test_overlap_changes_only_the_order_of_additions(partitions, tmp_path: Path) -> None:
    """cd-0's overlapped exchanges (docs/design.md#overlap) against the blocking ones
    (DISTGNN_OVERLAP=off) at P = 3, GraphSAGE and GCN (its own-row term): the same bytes, losses
    equal to float tolerance; and the blocks are really summed (the runs are not the same bits)."""
    runs = {}
    for overlap in ("on", "off"):
        train_many(partitions[3], 3, {tmp_path / f"{model}-{overlap}": (
            "--algo", "cd-0", "--model", model, "--epochs", "6", "--eval-every", "3")
            for model in ("sage", "gcn")}, env={"DISTGNN_OVERLAP": overlap})
        for model in ("sage", "gcn"):
            runs[model, overlap] = records(tmp_path / f"{model}-{overlap}")
    for model in ("sage", "gcn"):
        on, off = runs[model, "on"], runs[model, "off"]
        for a, b in zip(on, off):
            for key in ("bytes_forward", "bytes_backward", "bytes_broadcast", "bytes_reduce"):
                assert a[key] == b[key] > 0, (model, key)
        np.testing.assert_allclose([r["loss"] for r in on], [r["loss"] for r in off], rtol=1e-6)
        assert [r["loss"] for r in on] != [r["loss"] for r in off], model


def test_custom_model_example_trains_exactly_at_two_ranks(partitions, tmp_path: Path) -> None:
    """examples/custom_layer.py (a user's gated layer through distgnn.train_model) under mpiexec:
    cd-0 at P = 2 has P = 1's losses; the summary names the user's model and the run is
    refused by distgnn predict in one line."""
    example = Path(__file__).resolve().parents[1] / "examples" / "custom_layer.py"
    for parts in (1, 2):
        proc = mpiexec(parts, str(example), str(partitions[parts]), "--out", str(tmp_path / f"p{parts}"),
                       "--epochs", "8", module=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "best val" in proc.stdout
    np.testing.assert_allclose(losses(tmp_path / "p2"), losses(tmp_path / "p1"), rtol=1e-5)
    assert losses(tmp_path / "p1")[-1] < losses(tmp_path / "p1")[0]
    summary = json.loads((tmp_path / "p2" / "summary.json").read_text())
    assert summary["model"] == "custom:GatedSAGE" and summary["num_parts"] == 2
    proc = run_cli("predict", tmp_path / "p1")
    assert proc.returncode == 2 and "GatedSAGE" in proc.stderr and proc.stderr.count("\n") == 1
    assert "--model examples.custom_layer:GatedSAGE" not in proc.stderr  # names the form, not a guess
    assert "package.module:GatedSAGE" in proc.stderr


def test_a_model_class_by_import_path_trains_and_predicts_from_the_command_line(partitions, tmp_path: Path) -> None:
    """``distgnn train --model examples.custom_layer:GatedSAGE`` (the example's class by import
    path, docs/design.md#own-model) trains as the example's Python call does, bit for bit under the
    same seed and settings; the run records the path, and ``distgnn predict`` rebuilds the class."""
    import os

    root = Path(__file__).resolve().parents[1]
    env = {"PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    example = root / "examples" / "custom_layer.py"
    proc = mpiexec(2, str(example), str(partitions[2]), "--out", str(tmp_path / "api"), "--epochs", "6",
                   module=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the example's own settings: hidden 32, cd-0, lr 0.01, dropout 0.5, one thread, eval every 5, seed 0
    proc = mpiexec(2, "train", partitions[2], "--model", "examples.custom_layer:GatedSAGE", "--algo", "cd-0",
                   "--hidden", "32", "--lr", "0.01", "--dropout", "0.5", "--threads", "1",
                   "--eval-every", "5", "--seed", "0", "--epochs", "6", "--out", tmp_path / "cli", "--quiet",
                   env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_allclose(losses(tmp_path / "cli"), losses(tmp_path / "api"), rtol=1e-6)
    summary = json.loads((tmp_path / "cli" / "summary.json").read_text())
    assert summary["hyperparameters"]["model"] == "examples.custom_layer:GatedSAGE"
    proc = mpiexec(2, "predict", tmp_path / "cli", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import zarr

    logits = zarr.open_group(str(tmp_path / "cli" / "predictions.zarr"), mode="r")["logits"]
    graph = zarr.open_group(str(partitions[2] / "part_0.zarr"), mode="r").attrs
    assert logits.shape[1] == int(graph["num_classes"]) and np.isfinite(logits[:]).all()
    # a class that cannot be imported is one line, exit 2, before any rank loads its part
    proc = mpiexec(2, "train", partitions[2], "--model", "examples.nowhere:Net", "--out", tmp_path / "bad",
                   env=env)
    assert proc.returncode == 2 and "cannot import Net from examples.nowhere" in proc.stderr, proc.stderr
    assert not (tmp_path / "bad").exists()


def test_the_custom_layer_examples_commands_run_as_printed(tmp_path: Path) -> None:
    """The commands at the top of examples/custom_layer.py, run as a user copies them (from the
    project's root: the example's path is relative to it), each ends 0 and the run trains."""
    import os
    import shlex
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    doc = (root / "examples" / "custom_layer.py").read_text().split('"""')[1]
    commands = [line.strip() for line in doc.splitlines() if line.startswith("    ")
                and line.split()[0] in ("distgnn", "mpiexec")]
    assert [c.split()[0] for c in commands] == ["distgnn", "distgnn", "mpiexec"], commands
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for command in commands:
        argv = shlex.split(command.replace("examples/custom_layer.py", str(root / "examples" / "custom_layer.py")))
        argv = [sys.executable if a == "python" else a for a in argv]
        if argv[0] == "mpiexec":
            argv.insert(1, "--oversubscribe")
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (command, proc.stderr[-3000:])
    assert len(losses(tmp_path / "runs" / "gated")) == 20


def test_the_summary_says_when_the_ranks_oversubscribed_their_host(partitions, tmp_path: Path) -> None:
    """Two ranks each with as many threads as this process has CPUs run twice as many threads as
    the host has: summary.json's placement says oversubscribed; one thread each is oversubscribed
    only on a one-CPU machine."""
    import os
    import socket

    cpus = len(os.sched_getaffinity(0))
    for threads, expected in ((cpus, True), (1, cpus < 2)):
        run = tmp_path / f"t{threads}"
        proc = mpiexec(2, "train", partitions[2], "--epochs", "1", "--threads", str(threads),
                       "--out", run, "--quiet")
        assert proc.returncode == 0, proc.stderr[-3000:]
        seats = json.loads((run / "summary.json").read_text())["placement"]
        assert seats["threads_by_rank"] == [threads, threads]
        assert seats["threads_by_host"] == {socket.gethostname(): 2 * threads}
        assert seats["oversubscribed"] is expected, seats


def test_custom_attention_model_trains_exactly_and_delayed(partitions, tmp_path: Path) -> None:
    """A user's attention model through distgnn.train_model (the attend callable of
    distgnn/models/base.py): cd-0 at P = 2 has P = 1's losses; cd-2 at the root trains (its output
    layer in the input form); cd-2 on the replicas is refused in one line naming the model."""
    script = str(Path(__file__).parent / "mpi_scripts" / "custom_attention.py")
    for parts in (1, 2):
        proc = mpiexec(parts, script, str(partitions[parts]), str(tmp_path / f"p{parts}"), "cd-0", "8",
                       module=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "model custom:TwoHeadAttention" in proc.stdout
    np.testing.assert_allclose(losses(tmp_path / "p2"), losses(tmp_path / "p1"), rtol=1e-5)
    proc = mpiexec(2, script, str(partitions[2]), str(tmp_path / "cd2"), "cd-2", "8", module=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    delayed = losses(tmp_path / "cd2")
    assert np.isfinite(delayed).all() and delayed[-1] < delayed[0]
    proc = mpiexec(2, script, str(partitions[2]), str(tmp_path / "bad"), "cd-2", "8", "replicas",
                   module=False)
    assert proc.returncode != 0
    assert "train_model(custom:TwoHeadAttention): cd-2 on the replicas has no attention rule" in proc.stderr


def test_gat_cd0_equals_single_process(partitions, tmp_path: Path) -> None:
    """GAT (2 layers, 4 heads x 8, dropout 0.6 on every layer's input and on the attention
    weights) under cd-0 equals one process for P = 2, 3, 4 at the root, and on the replicas at
    P = 3: losses to 1e-5 over 20 epochs, weights, evaluation; 0c (local softmax) and cd-3 at the
    root run. With stale copies (`--no-fresh-copies`) and 4 x 16 hidden columns (wider than the
    41 classes: every layer in the z form)
    cd-3 posts over any 3 steady epochs exactly cd-0's rows of one epoch; with 4 x 8 the output
    layer takes the input form (32 <= 41 columns), so its rows are narrower: fewer bytes, the same
    every 3 epochs. cd-r on the replicas, cd-r-orig and --heads with another model are refused in
    one line."""
    common = ("--model", "gat", "--heads", "4", "--hidden", "8", "--dropout", "0.6", "--lr", "0.005",
              "--epochs", str(EPOCHS), "--eval-every", "5")
    run = {p: tmp_path / f"root-p{p}" for p in (1, 2, 3, 4)}
    for parts in (1, 2, 4):
        train_many(partitions[parts], parts, {run[parts]: (*common, "--algo", "cd-0")})
    train_many(partitions[3], 3, {run[3]: (*common, "--algo", "cd-0"),
                                  tmp_path / "replicas": (*common, "--algo", "cd-0", "--apply", "replicas"),
                                  tmp_path / "0c": (*common, "--algo", "0c"),
                                  # the bins' bytes: stale copies (GAT's default keeps them fresh)
                                  tmp_path / "cd3": (*common, "--algo", "cd-3", "--no-fresh-copies"),
                                  tmp_path / "cd0-wide": (*common, "--algo", "cd-0", "--hidden", "16"),
                                  tmp_path / "cd3-wide": (*common, "--algo", "cd-3", "--hidden", "16",
                                                          "--no-fresh-copies")})
    reference = losses(run[1])
    assert reference[-1] < reference[0]
    for parts in (2, 3, 4):
        _assert_same_training(run[1], run[parts], f"GAT P={parts}")
    _assert_same_training(run[1], tmp_path / "replicas", "GAT replicas P=3")
    summary = json.loads((run[4] / "summary.json").read_text())
    assert summary["model"] == "gat" and summary["hyperparameters"]["heads"] == 4
    assert summary["bytes_broadcast"] > 0 and summary["bytes_reduce"] > 0
    zero_c = losses(tmp_path / "0c")
    assert np.isfinite(zero_c).all() and zero_c[-1] < zero_c[0]
    for name in ("cd3", "cd3-wide"):
        assert np.isfinite(losses(tmp_path / name)).all()
        assert losses(tmp_path / name)[-1] < losses(tmp_path / name)[0]
    delayed, exact = records(tmp_path / "cd3-wide"), records(tmp_path / "cd0-wide")
    narrow = records(tmp_path / "cd3")
    for e in range(6, EPOCHS - 3):  # from epoch 2r on, every bin's messages move once per r
        # forward, and the copies' gradients (leaves to roots, as wide as cd-0's)
        for key in ("bytes_forward", "bytes_reduce"):
            assert sum(r[key] for r in delayed[e:e + 3]) == exact[e][key], (key, e)
            assert 0 < sum(r[key] for r in narrow[e:e + 3]) < records(run[3])[e][key], (key, e)
            assert sum(r[key] for r in narrow[e:e + 3]) == sum(r[key] for r in narrow[6:9]), (key, e)
        # a partial's delayed gradient travels as H + H D values, cd-0's as 2H + H D
        assert 0 < sum(r["bytes_broadcast"] for r in delayed[e:e + 3]) < exact[e]["bytes_broadcast"]
    for bad, needle in ((("--model", "gat", "--algo", "cd-5", "--apply", "replicas"), "cd-5"),
                        (("--model", "gat", "--algo", "cd-5-orig"), "cd-5-orig"),
                        (("--heads", "4",), "--heads")):
        proc = run_cli("train", partitions[1], *bad, "--out", tmp_path / "bad")
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr
