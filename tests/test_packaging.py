"""Packaging: the native module is built with OpenMP, and environment.yml matches pyproject.toml."""
from __future__ import annotations

import re
import tomllib

from conftest import REPO

# conda-forge spells a few packages differently from PyPI.
CONDA_NAMES = {"torch": "pytorch-cpu", "torch-geometric": "pytorch_geometric"}
PIP_ONLY = {"dgl"}  # no conda-forge build of DGL 1.1.3: listed under pip in environment.yml


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower()


def test_native_module_has_openmp() -> None:
    from distgnn import _native

    assert _native.openmp_enabled()
    assert _native.max_threads() >= 1


def test_environment_yml_matches_pyproject() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = pyproject["project"]
    wanted = {_name(r) for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        wanted |= {_name(r) for r in extra}
    conda, pip = set(), set()
    in_pip = False
    for line in (REPO / "environment.yml").read_text().splitlines():
        stripped = line.split("#")[0].rstrip()
        if re.match(r"^\s+- pip:\s*$", stripped):
            in_pip = True
            continue
        m = re.match(r"^(\s+)- ([A-Za-z0-9_.\-]+)", stripped)
        if not m:
            continue
        (pip if in_pip and len(m.group(1)) > 4 else conda).add(_name(m.group(2)))
        if len(m.group(1)) <= 2:
            in_pip = False
    missing = []
    for name in sorted(wanted):
        if name in PIP_ONLY:
            if name not in pip:
                missing.append(f"{name} (pip section)")
        elif CONDA_NAMES.get(name, name) not in conda:
            missing.append(name)
    assert not missing, f"environment.yml lacks: {missing}"
    build = {_name(r) for r in pyproject["build-system"]["requires"]}
    assert build <= conda, f"environment.yml lacks build requirements {build - conda}"


def test_building_the_cli_does_not_initialise_mpi() -> None:
    """Only a training rank may initialise MPI: a singleton MPI_Init in a launcher or test process
    leaves variables in its C environment that make a child `mpiexec` fail."""
    import subprocess
    import sys

    code = ("import sys, distgnn.cli as c; c.build_parser(); import distgnn.train.trainer, "
            "distgnn.launch, distgnn.train.memory_estimate, distgnn.report; "
            "print('mpi4py.MPI' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
