"""Shared test helpers."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("OUTDATED_IGNORE", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")

REPO = Path(__file__).resolve().parents[1]


#: tests/fault_injection: a sitecustomize that patches the trainer in every process started with
#: :func:`fault_env` (test-only faults, none of them in the production code)
FAULTS = REPO / "tests" / "fault_injection"


def sigint_at_default() -> None:
    """``preexec_fn`` of a process a test interrupts with SIGINT: the signal at its default, as
    for a command started at a terminal. A suite started in the background by a non-interactive
    shell (``cmd &``) passes SIGINT on ignored, and Python then installs no KeyboardInterrupt:
    the Ctrl-C tests hung that way in fresh-clone runs started with nohup."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def fault_env(**variables: str) -> dict[str, str]:
    """Environment for a ``distgnn train`` subprocess (and its ranks) with a test fault:
    ``variables`` as tests/fault_injection/sitecustomize.py documents them."""
    path = os.pathsep.join(p for p in (str(FAULTS), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, **variables}


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``python -m distgnn ARGS`` in a subprocess; returns the completed process (text)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "distgnn", *map(str, args)], cwd=cwd,
                          env=full_env, capture_output=True, text=True, timeout=timeout)


def write_npy_graph(folder: Path, num_nodes: int = 50, num_edges: int = 300, feat_dim: int = 7,
                    num_classes: int = 4, seed: int = 0, masks: bool = True) -> dict[str, np.ndarray]:
    """Write a small random graph in the npy-folder format; returns the arrays written."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {
        "src": rng.integers(0, num_nodes, num_edges).astype(np.int64),
        "dst": rng.integers(0, num_nodes, num_edges).astype(np.int64),
        "feat": rng.standard_normal((num_nodes, feat_dim)).astype(np.float32),
        "label": rng.integers(0, num_classes, num_nodes).astype(np.int64),
    }
    if masks:
        split = rng.integers(0, 3, num_nodes)
        arrays.update(train_mask=split == 0, val_mask=split == 1, test_mask=split == 2)
    for name, value in arrays.items():
        np.save(folder / f"{name}.npy", value)
    return arrays


def reference_csr(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR by destination with sorted rows, by plain numpy (the test oracle)."""
    order = np.lexsort((src, dst))
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=num_nodes), out=indptr[1:])
    return indptr, src[order]


@pytest.fixture
def npy_graph(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    folder = tmp_path / "npy"
    return folder, write_npy_graph(folder)


def mpiexec(num_ranks: int, *args: str, env: dict | None = None, timeout: float = 300,
            module: bool = True, launcher_options: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run ``python -m distgnn ARGS`` (or ``python ARGS`` when not ``module``) under
    ``mpiexec --oversubscribe [launcher_options] -n num_ranks``, one thread per rank."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    command = ["mpiexec", "--oversubscribe", *launcher_options, "-n", str(num_ranks), sys.executable]
    command += ["-m", "distgnn"] if module else []
    return subprocess.run(command + [str(a) for a in args], env=full_env, capture_output=True,
                          text=True, timeout=timeout)


#: set by scripts/test.sh when it runs without root: the reason the host tests are skipped
HOST_TESTS_SKIPPED = "DISTGNN_HOST_TESTS_SKIPPED"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without root there is no Slurm to install or start and no network namespace to make: the
    tests marked ``slurm`` or ``multihost`` are skipped with scripts/test.sh's reason."""
    reason = os.environ.get(HOST_TESTS_SKIPPED)
    if not reason:
        return
    for item in items:
        if item.get_closest_marker("slurm") or item.get_closest_marker("multihost"):
            item.add_marker(pytest.mark.skip(reason=reason))


def slurm_snapshot() -> str:
    """What the local Slurm says right now: its queue, its node and its logs' last lines."""
    parts = []
    for command in (["squeue", "-a", "-t", "all", "-o", "%i %T %r %M %D %C %j"],
                    ["sinfo", "-N", "-o", "%N %t %c %X %Y %E"]):
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=20)
            parts.append(f"$ {' '.join(command)}\n{done.stdout}{done.stderr}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            parts.append(f"$ {' '.join(command)}\n{exc}")
    for log in ("/var/log/slurm/slurmctld.log", "/var/log/slurm/slurmd.log"):
        try:
            parts.append(f"--- {log}\n" + "\n".join(Path(log).read_text(errors="replace").splitlines()[-15:]))
        except OSError:
            pass
    return "\n".join(parts)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed Slurm test reports the local Slurm's queue, node state and log tails beside it."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and item.get_closest_marker("slurm"):
        report.sections.append(("local Slurm at the failure", slurm_snapshot()))


@pytest.fixture(scope="session")
def local_slurm():
    """The one-node Slurm of cluster/local-slurm.sh, started for the session and stopped after."""
    script = REPO / "cluster" / "local-slurm.sh"
    was_running = subprocess.run(["bash", str(script), "status"], capture_output=True).returncode == 0
    subprocess.run(["bash", str(script), "start"], check=True, timeout=600)
    yield
    if not was_running:
        subprocess.run(["bash", str(script), "stop"], check=True, timeout=60)


@pytest.fixture(scope="session")
def multihost():
    """The emulated four-host cluster of cluster/multihost.sh, started for the session (unless it
    runs already, as scripts/test.sh starts it) and stopped after."""
    script = REPO / "cluster" / "multihost.sh"
    was_running = subprocess.run(["bash", str(script), "status"], capture_output=True).returncode == 0
    subprocess.run(["bash", str(script), "start", "--hosts", "4"], check=True, timeout=600)
    yield
    if not was_running:
        subprocess.run(["bash", str(script), "stop"], check=True, timeout=60)


def partitioned_twin(root: Path, parts: int, scale: float = 0.002, method: str = "libra",
                     seed: int = 0) -> tuple[Path, Path]:
    """Fetch synth-reddit at ``scale`` under ``root`` and partition it with the CLI; returns
    (graph store, partition folder)."""
    from distgnn.data.fetch import fetch

    graph = fetch("synth-reddit", root=root / "data", scale=scale, seed=seed, threads=1)
    folder = root / f"{method}-{parts}"
    proc = run_cli("partition", graph, "--parts", parts, "--method", method, "--out", folder,
                   "--threads", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    return graph, folder
