"""The Snakemake workflow: lint, dry run, config validation, real runs (local profile and Slurm)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, fault_env

TINY = REPO / "tests" / "data" / "workflow_tiny.yaml"
#: Options only the local test cluster needs (no accounting: poll with squeue, and soon).
SLURM_TEST_OPTIONS = ["--slurm-status-command", "squeue",
                      "--slurm-init-seconds-before-status-checks", "1"]


NO_SLURM_BIN = REPO / "tests" / "data" / "no-slurm-bin"


def snakemake(*args: str, cwd: Path = REPO, env: dict | None = None,
              timeout: float = 600) -> subprocess.CompletedProcess:
    """Run snakemake (this Python's) with the venv's ``distgnn`` first on PATH; unless the run uses
    the Slurm profile, a stand-in ``scontrol`` that answers at once comes first (see its file)."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    if "cluster/slurm" not in args:
        path = f"{NO_SLURM_BIN}{os.pathsep}{path}"
    full_env = {**os.environ, "PATH": path, **(env or {})}
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def job_stats(output: str) -> dict[str, int]:
    """The "Job stats" table snakemake prints: rule -> number of jobs (without the total)."""
    table = output[output.index("Job stats:"):]
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^(\w+)\s+(\d+)$", table, flags=re.M) if m.group(1) != "total"}


def workdir(tmp: Path, config: dict) -> Path:
    """A copy of the workflow (Snakefile, rules, schema, profiles) with ``config`` as its config."""
    tmp.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "workflow", "cluster"):
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp / name)
    (tmp / "config").mkdir()
    (tmp / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    return tmp


def tiny(**changes) -> dict:
    config = yaml.safe_load(TINY.read_text())
    for section, values in changes.items():
        config[section].update(values)
    return config


def test_lint_is_clean():
    proc = snakemake("--lint")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Lints for" not in proc.stdout + proc.stderr


def test_schema_uses_the_one_algorithm_grammar():
    import yaml

    from distgnn.vocabulary import ALGO_PATTERN

    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    assert schema["properties"]["train"]["properties"]["algos"]["items"]["pattern"] == f"^(?:{ALGO_PATTERN})$"


def test_schema_and_config_know_the_vertex_orders():
    from distgnn.partition.vertex_order import DEFAULT_VERTEX_ORDER, VERTEX_ORDERS

    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    order = schema["properties"]["partition"]["properties"]["order"]
    assert tuple(order["enum"]) == VERTEX_ORDERS and order["default"] == DEFAULT_VERTEX_ORDER
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert config["partition"]["order"] == DEFAULT_VERTEX_ORDER


def test_schema_takes_what_the_cli_takes_for_the_eval_and_checkpoint_intervals():
    """The config's eval_every and checkpoint_every start where the CLI's do (0: never)."""
    from distgnn.errors import DistgnnError
    from distgnn.train.config import TrainConfig, check_config

    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    train = schema["properties"]["train"]["properties"]
    for key in ("eval_every", "checkpoint_every"):
        lowest = train[key]["minimum"]
        check_config(TrainConfig(**{key: lowest}))
        with pytest.raises(DistgnnError):
            check_config(TrainConfig(**{key: lowest - 1}))


def test_a_local_train_job_takes_every_core(tmp_path):
    """Timed runs never share cores (docs/design.md#timed-runs): locally every train job holds
    all of --cores, whatever its P; the other rules keep their own counts."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    proc = snakemake("-n", "-c3", cwd=workdir(tmp_path, config))
    assert proc.returncode == 0, proc.stderr
    jobs = proc.stdout.split("rule ")[1:]
    trains = [job for job in jobs if job.startswith("train:")]
    assert len(trains) == job_stats(proc.stdout)["train"] > 0
    assert all(re.search(r"^\s+threads: 3$", job, flags=re.M) for job in trains), trains[0]
    assert not any(re.search(r"^\s+threads: 3$", job, flags=re.M) for job in jobs
                   if job.startswith(("assign:", "report:")))


def test_dry_run_of_default_config_lists_the_jobs(tmp_path):
    # in a copy of the workflow: outputs of an earlier `scripts/demo.sh` in the working tree
    # must not turn the dry run into "Nothing to be done"
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    proc = snakemake("-n", "-p", cwd=workdir(tmp_path, config))
    assert proc.returncode == 0, proc.stderr
    parts, methods = config["partition"]["parts"], config["partition"]["methods"]
    algos, stores = config["train"]["algos"], len(config["datasets"])
    assert job_stats(proc.stdout) == {
        "fetch": stores, "assign": stores * len(methods) * len(parts),
        "build": stores * len(methods) * sum(parts),
        "train": stores * len(methods) * len(parts) * len(algos), "report": stores, "all": 1}
    # The default experiment: cd-0, cd-5, 0c on 1, 2, 4 partitions of a small twin.
    assert set(algos) == {"cd-0", "cd-5", "0c"} and parts == [1, 2, 4]
    assert "distgnn launch partitions/synth-reddit-x0.01/libra-4 --algo cd-5" in proc.stdout
    assert "--executor local" in proc.stdout
    assert "--no-input-cache" not in proc.stdout and "--no-huge-pages" not in proc.stdout
    assert "--roots balance" in proc.stdout
    assert f"--order {config['partition']['order']}" in proc.stdout


@pytest.mark.slow
def test_twin_options_reach_fetch_and_the_store_name(tmp_path):
    config = tiny(train={"algos": ["cd-0"]})
    config["datasets"][0]["mean_degree"] = 8
    config["datasets"][0]["labelled_fraction"] = 0.5
    config["datasets"][0]["normalize_features"] = True
    wd = workdir(tmp_path, config)
    proc = snakemake("-n", "-p", cwd=wd)
    assert proc.returncode == 0, proc.stderr
    assert "--mean-degree 8" in proc.stdout and "--labelled-fraction 0.5" in proc.stdout
    assert "--normalize-features" in proc.stdout
    assert "data/synth-reddit-x0.01-d8-l0.5-rownorm/graph.zarr" in proc.stdout


def test_input_cache_and_huge_pages_false_reach_the_train_command(tmp_path):
    wd = workdir(tmp_path, tiny(train={"algos": ["cd-0"], "input_cache": False,
                                       "huge_pages": False}, partition={"order": "rcm"}))
    proc = snakemake("-n", "-p", cwd=wd)
    assert proc.returncode == 0, proc.stderr
    assert "--algo cd-0" in proc.stdout and "--no-input-cache" in proc.stdout
    assert "--no-huge-pages" in proc.stdout and "--order rcm" in proc.stdout


@pytest.mark.parametrize("messages", ["int4", {"cd-1": "int2", "cd-0": "bf16"}])
def test_message_precision_reaches_the_algorithms_that_send_rows(tmp_path, messages):
    """One width for every algorithm that sends training rows, or one per algorithm; 0c gets
    none (it would refuse it); --message-group only with an integer width."""
    wd = workdir(tmp_path, tiny(train={"algos": ["cd-0", "cd-1", "0c"], "message_precision": messages,
                                       "message_group": 32}))
    proc = snakemake("-n", "-p", cwd=wd)
    assert proc.returncode == 0, proc.stderr
    lines = {algo: next(line for line in proc.stdout.splitlines()
                        if "distgnn launch" in line and f"--algo {algo} " in line)
             for algo in ("cd-0", "cd-1", "0c")}
    want = ({"cd-0": "int4", "cd-1": "int4"} if isinstance(messages, str) else messages)
    for algo, width in want.items():
        assert f"--message-precision {width}" in lines[algo]
        assert ("--message-group 32" in lines[algo]) == (width != "bf16")
    assert "--message" not in lines["0c"]


def test_predict_enabled_adds_one_predict_job_per_run(tmp_path):
    config = tiny(train={"algos": ["cd-0", "cd-1"]})
    config["predict"] = {"enabled": True, "layer": 0}
    proc = snakemake("-n", "-p", cwd=workdir(tmp_path, config))
    assert proc.returncode == 0, proc.stderr
    assert job_stats(proc.stdout)["predict"] == 4  # P = 1, 2 x two algorithms
    assert ("mpiexec --oversubscribe -n 2 distgnn predict runs/synth-reddit-x0.01/libra-2/cd-1 "
            "--threads 1 --quiet --layer 0") in proc.stdout


def test_model_names_the_run_folders_and_reaches_the_train_command(tmp_path):
    """train.model gcn: run folders gcn-<algo>[-apply] (the wildcard accepts them, predict finds
    them), --model gcn on the command and GraphSAGE's --aggregator left out."""
    config = tiny(train={"algos": ["cd-0", "0c"], "model": "gcn", "apply": "replicas"})
    config["predict"] = {"enabled": True}
    proc = snakemake("-n", "-p", cwd=workdir(tmp_path, config))
    assert proc.returncode == 0, proc.stderr
    assert "/gcn-cd-0-replicas/summary.json" in proc.stdout and "/gcn-0c/summary.json" in proc.stdout
    assert "/gcn-cd-0-replicas/predictions.zarr" in proc.stdout
    commands = [l for l in proc.stdout.splitlines() if "distgnn launch" in l]
    assert commands and all("--model gcn" in l and "--aggregator" not in l for l in commands)
    assert any("--algo cd-0 " in l for l in commands) and any("--algo 0c " in l for l in commands)
    config = tiny(train={"algos": ["cd-0"], "model": "gat", "heads": 4})
    proc = snakemake("-n", "-p", cwd=workdir(tmp_path / "gat", config))
    assert proc.returncode == 0, proc.stderr
    assert "/gat-cd-0/summary.json" in proc.stdout and "--model gat" in proc.stdout
    assert "--heads 4" in proc.stdout
    # a user's class by import path (docs/design.md#own-model): <Class>-<algo> folders, predicted too
    config = tiny(train={"algos": ["cd-0"], "model": "examples.custom_layer:GatedSAGE"})
    config["predict"] = {"enabled": True}
    proc = snakemake("-n", "-p", cwd=workdir(tmp_path / "own", config))
    assert proc.returncode == 0, proc.stderr
    assert "/GatedSAGE-cd-0/summary.json" in proc.stdout and "/GatedSAGE-cd-0/predictions.zarr" in proc.stdout
    assert "--model examples.custom_layer:GatedSAGE" in proc.stdout
    config = tiny(train={"algos": ["cd-0"], "model": "examples.custom_layer"})  # no :Class
    proc = snakemake("-n", "-p", cwd=workdir(tmp_path / "bad", config))
    assert proc.returncode != 0 and "train.model 'examples.custom_layer': expected" in proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr  # one line, no schema dump


@pytest.mark.slow
def test_apply_names_the_run_folders_and_reaches_the_train_command(tmp_path):
    """train.apply: replicas gives <algo>-replicas folders where it is not the default (cd-0, cd-2)
    and plain ones where it is (0c); delayed_gradients: false, fresh_copies: true (or false) and cdr_rule: delayed reach cd-r's command only; root with 0c
    is refused at load time, naming the config keys."""
    wd = workdir(tmp_path / "a", tiny(train={"algos": ["cd-0", "cd-2", "0c"], "apply": "replicas"}))
    proc = snakemake("-n", "-p", cwd=wd)
    assert proc.returncode == 0, proc.stderr
    assert "/cd-0-replicas/summary.json" in proc.stdout and "/cd-2-replicas/summary.json" in proc.stdout
    assert "/0c/summary.json" in proc.stdout and "0c-replicas" not in proc.stdout
    assert "--algo cd-0 " in proc.stdout and "--apply replicas" in proc.stdout
    wd = workdir(tmp_path / "b", tiny(train={"algos": ["cd-0", "cd-2"], "delayed_gradients": False,
                                             "fresh_copies": True, "cdr_rule": "delayed"}))
    proc = snakemake("-n", "-p", cwd=wd)
    assert proc.returncode == 0, proc.stderr
    commands = [l for l in proc.stdout.splitlines() if "distgnn launch" in l]
    assert commands and all(("--no-delayed-gradients" in l) == ("--algo cd-2" in l) for l in commands)
    assert all(("--fresh-copies" in l) == ("--algo cd-2" in l) for l in commands)
    assert all(("--cdr-rule delayed" in l) == ("--algo cd-2" in l) for l in commands)
    # fresh_copies: false (GAT's copies stale, as asked) reaches cd-r's command only; unset, none
    wd = workdir(tmp_path / "d", tiny(train={"algos": ["cd-0", "cd-2"], "fresh_copies": False}))
    proc = snakemake("-n", "-p", cwd=wd)
    commands = [l for l in proc.stdout.splitlines() if "distgnn launch" in l]
    assert proc.returncode == 0 and commands, proc.stderr
    assert all(("--no-fresh-copies" in l) == ("--algo cd-2" in l) for l in commands)
    wd = workdir(tmp_path / "c", tiny(train={"algos": ["cd-0", "0c"], "apply": "root"}))
    proc = snakemake("-n", "-p", cwd=wd)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "config train.apply / train.algos: --apply root: 0c" in out


@pytest.mark.slow
def test_root_rule_reaches_the_assign_command(tmp_path):
    wd = workdir(tmp_path, tiny(partition={"roots": "in-edges"}, train={"algos": ["cd-0"]}))
    proc = snakemake("-n", "-p", cwd=wd)
    assert proc.returncode == 0, proc.stderr
    assert "--roots in-edges" in proc.stdout and "--roots balance" not in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("section,key,value", [("train", "epochs", "three"),
                                                ("partition", "roots", "most"),
                                                ("train", "algos", ["cd-zero"]),
                                                ("train", "precision", "fp16"),
                                                ("train", "input_cache", "yes")])
def test_invalid_config_is_refused_before_any_job(tmp_path, section, key, value):
    config = tiny()
    config[section][key] = value
    wd = workdir(tmp_path, config)
    proc = snakemake("-c1", cwd=wd)
    assert proc.returncode != 0
    assert "Error validating config file" in proc.stderr
    assert f"'{key}'" in proc.stderr or f"['{key}']" in proc.stderr
    assert not (wd / "data").exists() and not (wd / "logs").exists()


@pytest.mark.slow
def test_misspelt_config_key_is_one_line(tmp_path):
    """`epoch:` for `epochs:` under train: one line naming the key, its section and the nearest
    valid key, not the schema and config dumped by validate()."""
    config = tiny()
    config["train"]["epoch"] = config["train"].pop("epochs")
    wd = workdir(tmp_path, config)
    proc = snakemake("-c1", cwd=wd)
    assert proc.returncode != 0
    lines = [l for l in (proc.stdout + proc.stderr).splitlines() if l.strip()]
    assert len(lines) == 1, proc.stdout + proc.stderr
    assert all(word in lines[0] for word in ("'epoch'", "'train'", "'epochs'")), lines[0]
    assert not (wd / "data").exists() and not (wd / "logs").exists()


@pytest.mark.parametrize("dry", [True, False])
def test_misspelt_dataset_is_one_line_in_the_dry_run(tmp_path, dry):
    """`dataset: synth-redit`: the schema takes any string; the dry run (and a real one) refuse it
    in one line naming it and the nearest known name, before any job."""
    config = tiny()
    config["datasets"][0]["dataset"] = "synth-redit"
    wd = workdir(tmp_path, config)
    proc = snakemake("-c1", *(["-n"] if dry else []), cwd=wd)
    lines = [l for l in (proc.stdout + proc.stderr).splitlines() if l.strip()]
    assert proc.returncode != 0 and len(lines) == 1, proc.stdout + proc.stderr
    assert all(w in lines[0] for w in ("'synth-redit'", "'datasets[0]'", "'synth-reddit'")), lines[0]
    assert not (wd / "data").exists() and not (wd / "logs").exists()


@pytest.mark.parametrize("section,key,needles", [
    ("partition", "bogus", ("'bogus'", "'partition'", "valid keys:")),
    ("datasets", "scael", ("'scael'", "'datasets[0]'", "'scale'")),
    (None, "trian", ("'trian'", "top level", "'train'")),
])
def test_unknown_config_key_names_section_and_nearest_key(section, key, needles):
    from distgnn.workflow_config import unknown_key_in

    config = tiny()
    target = config if section is None else config[section]
    (target[0] if isinstance(target, list) else target)[key] = 1
    message = unknown_key_in(config, REPO / "workflow" / "schemas" / "config.schema.yaml")
    assert message is not None and all(n in message for n in needles), message
    assert unknown_key_in(tiny(), REPO / "workflow" / "schemas" / "config.schema.yaml") is None


@pytest.mark.slow
@pytest.mark.mpi
def test_tiny_local_run_then_epochs_change_reruns_train_and_report(tmp_path):
    wd = workdir(tmp_path, tiny(partition={"parts": [2]}, train={"algos": ["cd-0"], "epochs": 2}))
    proc = snakemake("--profile", "cluster/local", cwd=wd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert job_stats(proc.stderr + proc.stdout) == {"fetch": 1, "assign": 1, "build": 2, "train": 1,
                                                    "report": 1, "all": 1}
    report = wd / "reports" / "synth-reddit-x0.01"
    for name in ("summary.md", "epoch_time.png", "test_vs_epoch.png", "test_vs_time.png",
                 "replication.png"):
        assert (report / name).stat().st_size > 0, name
    table = pd.read_csv(report / "summary.csv")
    assert list(table.num_parts) == [2] and list(table.epochs) == [2]
    summary = json.loads((wd / "runs/synth-reddit-x0.01/libra-2/cd-0/summary.json").read_text())
    assert summary["num_parts"] == 2 and summary["slurm_job_id"] is None
    # A log per job, and the launcher's submitit folder under logs/.
    assert (wd / "logs/train/synth-reddit-x0.01/libra-2/cd-0.log").exists()
    assert list((wd / "logs/submitit/synth-reddit-x0.01/libra-2/cd-0").glob("*/*_0_log.out"))

    config = yaml.safe_load((wd / "config" / "config.yaml").read_text())
    config["train"]["epochs"] = 3
    (wd / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    proc = snakemake("--profile", "cluster/local", cwd=wd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert job_stats(proc.stderr + proc.stdout) == {"train": 1, "report": 1, "all": 1}
    assert list(pd.read_csv(report / "summary.csv").epochs) == [3]

    # predictions on request: 2 ranks, the run's final test accuracy from its logits
    target = "runs/synth-reddit-x0.01/libra-2/cd-0/predictions.zarr"
    proc = snakemake("--profile", "cluster/local", target, cwd=wd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert job_stats(proc.stderr + proc.stdout) == {"predict": 1}
    import zarr

    logits = zarr.open_group(str(wd / target), mode="r")["logits"][:]
    graph = zarr.open_group(str(wd / "data/synth-reddit-x0.01/graph.zarr"), mode="r")
    test = graph["test_mask"][:]
    summary = json.loads((wd / "runs/synth-reddit-x0.01/libra-2/cd-0/summary.json").read_text())
    assert float((logits[test].argmax(1) == graph["label"][:][test]).mean()) == pytest.approx(
        summary["final_test"], abs=1e-12)


@pytest.fixture(scope="module")
def slurm_workdir(local_slurm, tmp_path_factory):
    """The tiny config (P = 2, cd-0) run once through the Slurm profile on the local Slurm."""
    wd = workdir(tmp_path_factory.mktemp("slurm"), tiny(partition={"parts": [2]},
                                                        train={"algos": ["cd-0"], "epochs": 2}))
    proc = snakemake("--profile", "cluster/slurm", *SLURM_TEST_OPTIONS, cwd=wd)
    return wd, proc


@pytest.mark.slurm
@pytest.mark.slow
def test_tiny_slurm_run(slurm_workdir):
    wd, proc = slurm_workdir
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    # fetch, assign and build went through the executor plugin as Slurm jobs (report is local)...
    assert len(re.findall(r"has been submitted with SLURM jobid", out)) == 1 + 1 + 2
    # ... and train was a local rule that submitted one submitit Slurm job of 2 ranks.
    summary = json.loads((wd / "runs/synth-reddit-x0.01/libra-2/cd-0/summary.json").read_text())
    assert summary["num_parts"] == 2
    log = (wd / "logs/train/synth-reddit-x0.01/libra-2/cd-0.log").read_text()
    submitted = re.search(r"submitted slurm job (\d+) \(2 ranks\)", log)
    assert submitted and str(summary["slurm_job_id"]) == submitted.group(1)
    folder = wd / "logs/submitit/synth-reddit-x0.01/libra-2/cd-0" / submitted.group(1)
    assert (folder / f"{submitted.group(1)}_1_log.out").exists()  # the second rank's log
    assert (wd / "reports/synth-reddit-x0.01/summary.csv").exists()


@pytest.mark.slurm
@pytest.mark.slow
def test_slurm_failing_rank_fails_the_workflow_quickly(slurm_workdir):
    wd, first = slurm_workdir
    assert first.returncode == 0
    start = time.monotonic()
    proc = snakemake("--profile", "cluster/slurm", *SLURM_TEST_OPTIONS, "--forcerun", "train",
                     cwd=wd, env=fault_env(DISTGNN_TEST_FAIL_RANK="1"), timeout=120)
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    assert elapsed < 60, f"took {elapsed:.0f} s"
    log = (wd / "logs/train/synth-reddit-x0.01/libra-2/cd-0.log").read_text()
    assert "rank 1" in log and "injected failure (DISTGNN_TEST_FAIL_RANK=1)" in log
