"""One-process training (no mpiexec): outputs, keys, multi-label, learning."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import run_cli, sigint_at_default
from distgnn.data.fetch import fetch

METRIC_KEYS = {"epoch", "loss", "epoch_time_s", "time_aggregate_s", "time_exchange_wait_s",
               "time_dense_s", "time_allreduce_s", "bytes_forward", "bytes_backward",
               "bytes_gradients", "peak_rss_bytes"}


def one_part(tmp_path: Path, dataset: str, scale: float) -> Path:
    graph = fetch(dataset, root=tmp_path / "data", scale=scale, threads=1)
    folder = tmp_path / "parts"
    proc = run_cli("partition", graph, "--parts", "1", "--out", folder, "--quiet")
    assert proc.returncode == 0, proc.stderr
    return folder


@pytest.mark.slow
def test_single_process_run_learns_and_writes_outputs(tmp_path: Path) -> None:
    folder = one_part(tmp_path, "synth-reddit", 0.005)
    run = tmp_path / "run"
    proc = run_cli("train", folder, "--algo", "cd-0", "--epochs", "30", "--hidden", "32",
                   "--eval-every", "10", "--threads", "1", "--out", run, "--lr", "0.02")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert [l["epoch"] for l in lines] == list(range(1, 31))
    for line in lines:
        assert METRIC_KEYS <= line.keys()
        assert line["bytes_forward"] == 0 and line["bytes_gradients"] == 0  # one rank: no traffic
    evaluated = [l for l in lines if "val" in l]
    assert [l["epoch"] for l in evaluated] == [10, 20, 30]
    assert lines[-1]["loss"] < 0.5 * lines[0]["loss"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best_val"] > 0.5  # 41 classes: chance is about 0.05
    state = torch.load(run / "model.pt", weights_only=False)
    assert state["in_dim"] == 602 and state["num_classes"] == 41
    assert "layers.0.fc_neigh.weight" in state["model"]


def test_mpi_library_version_has_no_nul() -> None:
    """Open MPI's version string ends in a NUL, which summary.json must not carry."""
    from distgnn.train import provenance

    mpi = provenance.versions()["mpi"]
    assert mpi and "\0" not in mpi and mpi == mpi.strip(), repr(mpi)
    assert provenance.first_line("Some MPI v1.2, build 3\0") == "Some MPI v1.2, build 3"


@pytest.mark.slow
def test_multilabel_twin_trains_with_roc_auc(tmp_path: Path) -> None:
    folder = one_part(tmp_path, "synth-proteins", 0.01)
    run = tmp_path / "run"
    proc = run_cli("train", folder, "--algo", "cd-0", "--epochs", "15", "--hidden", "32",
                   "--eval-every", "15", "--threads", "1", "--out", run, "--lr", "0.02")
    assert proc.returncode == 0, proc.stderr
    last = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()][-1]
    assert 0.5 < last["val"] <= 1.0  # ROC-AUC averaged over tasks, above chance


@pytest.mark.parametrize("option,value,needle", [
    ("--epochs", "0", "--epochs"), ("--dropout", "1.5", "--dropout"), ("--layers", "0", "--layers"),
    ("--eval-every", "-1", "--eval-every must be >= 0 (0: never), got -1"),
    ("--checkpoint-every", "-2", "--checkpoint-every must be >= 0 (0: never), got -2")])
def test_bad_options_are_one_line(tmp_path: Path, option: str, value: str, needle: str) -> None:
    folder = one_part(tmp_path, "synth-reddit", 0.002)
    proc = run_cli("train", folder, option, value, "--out", tmp_path / "run")
    assert proc.returncode == 2
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr


@pytest.mark.slow
def test_bf16_dense_work_is_close_to_fp32_but_not_identical(tmp_path: Path) -> None:
    """--precision bf16 runs the linear layers in bfloat16: losses move by bf16 rounding (about
    1e-2 relative), not by zero and not by a different model; it still learns."""
    folder = one_part(tmp_path, "synth-reddit", 0.005)
    losses = {}
    for precision in ("fp32", "bf16"):
        run = tmp_path / precision
        proc = run_cli("train", folder, "--algo", "cd-0", "--epochs", "20", "--hidden", "32",
                       "--eval-every", "20", "--threads", "1", "--out", run, "--lr", "0.02",
                       "--precision", precision, "--quiet")
        assert proc.returncode == 0, proc.stderr
        lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
        losses[precision] = torch.tensor([l["loss"] for l in lines])
        summary = json.loads((run / "summary.json").read_text())
        assert summary["hyperparameters"]["precision"] == precision
    fp32, bf16 = losses["fp32"], losses["bf16"]
    assert not torch.equal(fp32, bf16)
    assert abs(float(bf16[0] / fp32[0]) - 1) < 0.02  # same initial model, bf16 rounding only
    assert float(bf16[-1]) < 0.5 * float(bf16[0])  # it learns
    assert summary["best_val"] > 0.5
    proc = run_cli("train", folder, "--precision", "fp16", "--out", tmp_path / "bad")
    assert proc.returncode != 0 and "--precision" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_bf16_inputs_cast_once_train_as_autocast_casting_every_call(tmp_path: Path, monkeypatch,
                                                                      model: str) -> None:
    """Under --precision bf16 a model that ``takes_bf16_input`` gets layer 0's features and
    input cache in bfloat16, cast once (distgnn/train/context.py): its losses equal, bit for bit,
    those of the same model fed float32 and cast by autocast on every call, with layer 0 linear
    before (602 -> 32) and after (602 -> 640) aggregation."""
    from distgnn.cli import main
    from distgnn.models.registry import spec
    from distgnn.train import context

    folder = one_part(tmp_path, "synth-reddit", 0.005)
    cls = type(spec(model).build(602, 32, 41, 2, 0.5))
    dtypes = []
    original = context.cast_constant_inputs
    monkeypatch.setattr(context, "cast_constant_inputs",
                        lambda ctx, dtype: (original(ctx, dtype), dtypes.append(ctx.x.dtype)))
    for hidden in ("32", "640"):
        losses = {}
        for once in (True, False):
            monkeypatch.setattr(cls, "takes_bf16_input", once)
            run = tmp_path / f"{model}-h{hidden}-{once}"
            assert main(["train", str(folder), "--model", model, "--epochs", "4", "--hidden", hidden,
                         "--eval-every", "0", "--threads", "1", "--out", str(run), "--quiet",
                         "--precision", "bf16"]) == 0
            losses[once] = [json.loads(l)["loss"] for l in (run / "metrics.jsonl").read_text().splitlines()]
        assert losses[True] == losses[False], (hidden, losses)
    assert dtypes == [torch.bfloat16, torch.bfloat16]  # cast once per run that takes it


def test_bf16_hidden_layers_take_bfloat16_rows_from_the_fused_relu_dropout(tmp_path: Path) -> None:
    """Under --precision bf16 the trainer's dropout (float32 on its own) still offers the layer
    stack its fused ReLU + dropout, which keeps a bfloat16 layer output in bfloat16: every hidden
    layer of GraphSAGE receives bfloat16 rows in training, none cast back to float32."""
    from distgnn import train_model
    from distgnn.models.sage import GraphSAGE

    folder = one_part(tmp_path, "synth-reddit", 0.005)
    model = GraphSAGE(602, 32, 41, layers=3, dropout=0.5)
    seen = []
    for layer in model.layers[1:]:
        layer.register_forward_pre_hook(lambda module, args: seen.append((module.training, args[0].dtype)))
    train_model(folder, model, out=tmp_path / "run", epochs=2, eval_every=0, threads=1,
                precision="bf16")
    training = [dtype for is_training, dtype in seen if is_training]
    assert len(training) == 4 and set(training) == {torch.bfloat16}, seen


@pytest.mark.slow
def test_input_cache_equals_aggregating_every_epoch(tmp_path: Path) -> None:
    """Layer 0's aggregate of the input computed once (the default) gives the per-epoch losses
    and accuracies of --no-input-cache to float tolerance, with layer 0 linear before (602 -> 32)
    and after (602 -> 640) aggregation."""
    folder = one_part(tmp_path, "synth-reddit", 0.005)
    for hidden in ("32", "640"):
        runs = {}
        for flag in ([], ["--no-input-cache"]):
            run = tmp_path / f"h{hidden}{''.join(flag)}"
            proc = run_cli("train", folder, "--algo", "cd-0", "--epochs", "8", "--hidden", hidden,
                           "--eval-every", "4", "--threads", "1", "--out", run, "--quiet", *flag)
            assert proc.returncode == 0, proc.stderr
            runs[bool(flag)] = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
            summary = json.loads((run / "summary.json").read_text())
            assert (summary["input_cache_time_s"] > 0) == (not flag)
        cached, every_epoch = runs[False], runs[True]
        torch.testing.assert_close(torch.tensor([l["loss"] for l in cached]),
                                   torch.tensor([l["loss"] for l in every_epoch]), rtol=1e-5, atol=0)
        for a, b in zip(cached, every_epoch):
            if "val" in a:
                assert abs(a["val"] - b["val"]) < 0.01 and abs(a["test"] - b["test"]) < 0.01


@pytest.mark.slow
def test_epoch_lines_resume_notes_and_quiet(tmp_path: Path) -> None:
    """One `epoch E/N` line per epoch on stderr; --resume without a checkpoint says so and starts
    afresh, with one it says where it continues; --quiet prints nothing."""
    folder = one_part(tmp_path, "synth-reddit", 0.002)
    run = tmp_path / "run"
    common = ("--hidden", "16", "--threads", "1", "--out", run, "--checkpoint-every", "1",
              "--eval-every", "2", "--resume")
    proc = run_cli("train", folder, "--epochs", "3", *common)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == f"distgnn train: --resume: no checkpoint under {run / 'checkpoints'}; starting at epoch 1"
    epochs = [l for l in lines if l.startswith("epoch ")]
    assert [l.split(":")[0] for l in epochs] == ["epoch 1/3", "epoch 2/3", "epoch 3/3"], proc.stderr
    assert " val " in epochs[1] and " val " not in epochs[0] and "s left)" in epochs[0]
    assert "\r" not in proc.stderr
    proc = run_cli("train", folder, "--epochs", "5", *common)
    assert proc.returncode == 0, proc.stderr
    # the last epoch of a run leaves model.pt, not a checkpoint: the newest one is after epoch 2
    assert "--resume: continuing after epoch 2 from " in proc.stderr.splitlines()[0]
    assert [l.split(":")[0] for l in proc.stderr.splitlines() if l.startswith("epoch ")] == \
        ["epoch 3/5", "epoch 4/5", "epoch 5/5"]
    proc = run_cli("train", folder, "--epochs", "2", "--quiet", *common[:-1], "--out", tmp_path / "q")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_vertex_order_and_huge_pages_change_no_result(tmp_path: Path) -> None:
    """A part in vertex order dbg on 2 MB pages (the defaults) trains to the losses and accuracies
    of one in order none on ordinary pages (float rounding apart: the sums run in another order);
    summary.json says what was asked and how much memory the kernel gave on huge pages."""
    from distgnn.host_memory import thp_mode

    graph = fetch("synth-reddit", root=tmp_path / "data", scale=0.02, threads=1)  # feat: 11 MB
    results = {}
    for order, flag in (("dbg", []), ("none", ["--no-huge-pages"])):
        folder = tmp_path / order
        proc = run_cli("partition", graph, "--parts", "1", "--order", order, "--out", folder, "--quiet")
        assert proc.returncode == 0, proc.stderr
        run = tmp_path / f"run-{order}"
        proc = run_cli("train", folder, "--epochs", "4", "--hidden", "16", "--eval-every", "2",
                       "--threads", "1", "--out", run, "--quiet", *flag)
        assert proc.returncode == 0, proc.stderr
        results[order] = ([json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()],
                          json.loads((run / "summary.json").read_text()))
    (ordered, huge), (plain, small) = results["dbg"], results["none"]
    torch.testing.assert_close(torch.tensor([l["loss"] for l in ordered]),
                               torch.tensor([l["loss"] for l in plain]), rtol=1e-5, atol=0)
    assert [l.get("val") for l in ordered] == pytest.approx([l.get("val") for l in plain], abs=1e-3)
    assert huge["huge_pages"]["requested"] and not small["huge_pages"]["requested"]
    assert huge["huge_pages"]["thp_mode"] == thp_mode()
    if thp_mode() in ("madvise", "always"):
        assert huge["huge_pages"]["bytes_by_rank"][0] >= 2 << 20


def test_a_clean_up_failing_under_ctrl_c_is_still_the_interrupt(capsys) -> None:
    """Ctrl-C inside torch.save made its zip writer's clean-up raise RuntimeError ("unexpected
    pos"), which was reported as a crash with exit 1 (seen once in a full suite): the interrupt
    behind an error is the interrupt; an error of its own is still a crash report."""
    from types import SimpleNamespace

    from distgnn.commands.ranks import run_on_ranks

    comm = SimpleNamespace(rank=0, size=1)

    def save_cut_short() -> None:
        try:
            raise KeyboardInterrupt
        finally:
            raise RuntimeError("unexpected pos 832 vs 726")

    with pytest.raises(KeyboardInterrupt):
        run_on_ranks("train", comm, save_cut_short)

    def plain_bug() -> None:
        raise RuntimeError("a bug")

    assert run_on_ranks("train", comm, plain_bug) == (1, None)
    assert "distgnn train: rank 0: RuntimeError: a bug" in capsys.readouterr().err


@pytest.mark.slow
def test_ctrl_c_names_the_newest_checkpoint_and_resume(tmp_path: Path) -> None:
    """SIGINT to `distgnn train` (no mpiexec): one line saying it was interrupted, where the
    newest complete checkpoint is and that --resume continues from it; exit 130."""
    folder = one_part(tmp_path, "synth-reddit", 0.002)
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "distgnn", "train", str(folder), "--epochs",
                             "1000000", "--checkpoint-every", "3", "--eval-every", "0", "--threads",
                             "1", "--out", str(run), "--quiet"], stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_at_default)
    deadline = time.monotonic() + 120
    while not list(run.glob("checkpoints/*/manifest.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    try:  # generous: the signal waits while the kernel finishes an fsync, slow on a busy disk
        err = proc.communicate(timeout=180)[1]
    except subprocess.TimeoutExpired:  # still running: its stacks (distgnn's SIGUSR1), then fail
        proc.send_signal(signal.SIGUSR1)
        time.sleep(2)
        proc.kill()
        pytest.fail("no exit 180 s after SIGINT; its threads' stacks:\n" + proc.communicate()[1])
    assert proc.returncode == 130, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("distgnn train: interrupted"), err
    assert "--resume" in lines[0], err
    newest = max(run.glob("checkpoints/*/manifest.json")).parent
    assert f"the newest checkpoint is {newest} " in lines[0], err
