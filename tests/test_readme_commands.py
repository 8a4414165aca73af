"""The commands the README prints run as a user copies them (docs: README.md).

Every fenced bash block of the README is read; each command in it is either run here, in order, in
one working folder, or named below with the test that runs it instead, so a command added to the
README without either fails :func:`test_every_readme_command_is_accounted_for`. Two changes are
made to what is printed, both what the README itself tells a user on a machine like this one:
``mpiexec --oversubscribe`` (more ranks than cores) and ``OMP_NUM_THREADS=1``. Snakemake commands
run as dry runs (``-n``) of the tiny test config: the whole DAG runs in tests/test_workflow.py.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

README = REPO / "README.md"
#: commands another test runs, by their first words
ELSEWHERE = {
    "bash scripts/demo.sh": "CI runs it after the suite (README's first command; bench/clean_image.sh)",
    "bash scripts/test.sh": "CI's own command",
    "bash cluster/multihost.sh": "tests/test_readme_several_hosts.py and the multihost tests",
}
#: the Python blocks that need a user's own names (MyModel, "parts") are not run
PYTHON_SKIPPED = ("MyModel(...)",)


def readme_blocks(language: str) -> list[list[str]]:
    """The README's fenced blocks of ``language``: each a list of commands (comments dropped,
    backslash continuations joined)."""
    blocks, current, inside = [], None, False
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            if inside:
                blocks.append(current)
                inside = False
            elif line.strip() == f"```{language}":
                current, inside = [], True
            continue
        if inside:
            current.append(line)
    out = []
    for block in blocks:
        joined = "\n".join(block).replace("\\\n", " ")
        out.append(joined.splitlines() if language == "python" else
                   [c for c in (line.split("  #")[0].split(" #")[0].strip() for line in joined.splitlines())
                    if c and not c.startswith("#")])
    return out


def elsewhere(command: str) -> bool:
    return any(command.startswith(prefix) for prefix in ELSEWHERE)


def test_every_readme_command_is_accounted_for() -> None:
    commands = [c for block in readme_blocks("bash") for c in block]
    assert len(commands) >= 15, commands
    runnable = ("distgnn ", "mpiexec ", "snakemake ", "export ", "PYTHONPATH=")
    unknown = [c for c in commands if not elsewhere(c) and not c.startswith(runnable)]
    assert not unknown, f"README commands neither run here nor named in ELSEWHERE: {unknown}"


def _env() -> dict[str, str]:
    bin_dir = Path(sys.executable).parent
    return {**os.environ, "OMP_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def _argv(command: str, partdir: str) -> tuple[list[str], dict[str, str]]:
    env = _env()
    words = shlex.split(command.replace("PARTDIR", partdir))
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):   # VAR=value before the command
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    if words[0] == "mpiexec" and "--oversubscribe" not in words:
        words.insert(1, "--oversubscribe")
    return words, env


@pytest.mark.slow
@pytest.mark.mpi
def test_the_readme_commands_run_as_printed(tmp_path: Path) -> None:
    """Every bash block's commands in order in one folder (docs/ and examples/ beside them, as in
    the project's root), then the Python block that opens the stores."""
    for name in ("docs", "examples", "Snakefile", "workflow", "cluster"):
        (tmp_path / name).symlink_to(REPO / name)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text((REPO / "tests" / "data" / "workflow_tiny.yaml").read_text())
    partdir = "partitions/synth-reddit-x0.01/libra-4"
    ran = []
    for block in readme_blocks("bash"):
        for command in block:
            if elsewhere(command) or command.startswith("export "):
                continue   # export: the environment _env() gives every command
            if "--model examples.custom_layer" in command:   # the example's own P = 2 folder `parts`
                proc = subprocess.run(["distgnn", "partition", "data/synth-reddit-x0.01/graph.zarr",
                                       "--parts", "2", "--out", "parts", "--quiet"], cwd=tmp_path,
                                      env=_env(), capture_output=True, text=True, timeout=600)
                assert proc.returncode == 0, proc.stderr[-3000:]
            argv, env = _argv(command, partdir)
            if argv[0] == "snakemake":
                argv = [sys.executable, "-m", "snakemake", *argv[1:], "-n"]
            proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
            assert proc.returncode == 0, (command, proc.stderr[-3000:])
            ran.append(command)
    assert any(c.startswith("distgnn launch") for c in ran) and any("scaling-model" in c for c in ran)
    assert (tmp_path / "runs/synth-reddit-x0.01/libra-4/cd-5/predictions.zarr").is_dir()
    assert (tmp_path / "reports/synth-reddit-x0.01/summary.md").is_file()
    for block in readme_blocks("python"):
        source = "\n".join(block)
        if any(s in source for s in PYTHON_SKIPPED):
            continue
        proc = subprocess.run([sys.executable, "-c", source], cwd=tmp_path, env=_env(),
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (source, proc.stderr[-3000:])
