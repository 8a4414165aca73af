"""Packaging: the native module is built with OpenMP, and environment.yml matches pyproject.toml."""
from __future__ import annotations

import re
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from conftest import REPO

# conda-forge spells a few packages differently from PyPI.
CONDA_NAMES = {"torch": "pytorch-cpu", "torch-geometric": "pytorch_geometric"}
PIP_ONLY = {"dgl"}  # no conda-forge build of DGL 1.1.3: listed under pip in environment.yml


#: the Python of environment.yml and workflow/envs/distgnn.yaml (requirements marked for another
#: Python, such as tomli below 3.11, are not theirs to carry)
ENV_PYTHON = {"python_version": "3.11"}


def _for_env_python(requirements: list[str]) -> list[str]:
    from packaging.requirements import Requirement

    return [r for r in requirements
            if Requirement(r).marker is None or Requirement(r).marker.evaluate(ENV_PYTHON)]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower()


def test_native_module_has_openmp() -> None:
    from distgnn import _native

    assert _native.openmp_enabled()
    assert _native.max_threads() >= 1


def _environment_names(path: Path) -> tuple[set[str], set[str]]:
    """(conda packages, pip packages) a conda environment file lists."""
    conda, pip = set(), set()
    in_pip = False
    for line in path.read_text().splitlines():
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
    return conda, pip


def _lacking(wanted: set[str], conda: set[str], pip: set[str]) -> list[str]:
    missing = []
    for name in sorted(wanted):
        if name in PIP_ONLY:
            if name not in pip:
                missing.append(f"{name} (pip section)")
        elif CONDA_NAMES.get(name, name) not in conda:
            missing.append(name)
    return missing


def test_environment_yml_matches_pyproject() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = pyproject["project"]
    wanted = {_name(r) for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        wanted |= {_name(r) for r in _for_env_python(extra)}
    conda, pip = _environment_names(REPO / "environment.yml")
    missing = _lacking(wanted, conda, pip)
    assert not missing, f"environment.yml lacks: {missing}"
    build = {_name(r) for r in pyproject["build-system"]["requires"]}
    assert build <= conda, f"environment.yml lacks build requirements {build - conda}"


def test_the_rules_environment_has_every_runtime_package() -> None:
    """workflow/envs/distgnn.yaml (`snakemake --sdm conda`) runs the distgnn CLI in every rule: it
    needs every runtime dependency and the build requirements (Snakemake itself runs outside)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    wanted = {_name(r) for r in pyproject["project"]["dependencies"]} - {
        "snakemake", "snakemake-executor-plugin-slurm"}
    conda, pip = _environment_names(REPO / "workflow" / "envs" / "distgnn.yaml")
    assert not _lacking(wanted, conda, pip), f"workflow/envs/distgnn.yaml lacks: {_lacking(wanted, conda, pip)}"
    build = {_name(r) for r in pyproject["build-system"]["requires"]}
    assert build <= conda, f"workflow/envs/distgnn.yaml lacks build requirements {build - conda}"


def test_building_the_cli_does_not_initialise_mpi() -> None:
    """Only a training rank may initialise MPI: a singleton MPI_Init in a launcher or test process
    leaves variables in its C environment that make a child `mpiexec` fail."""
    import subprocess
    import sys

    code = ("import sys, distgnn.cli as c; c.build_parser(); import distgnn.train.trainer, "
            "distgnn.launch, distgnn.scaling.rank_memory, distgnn.report; "
            "print('mpi4py.MPI' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# import name -> distribution name, where they differ
IMPORT_NAMES = {"yaml": "pyyaml", "torch_geometric": "torch-geometric", "snakemake_executor_plugin_slurm":
                "snakemake-executor-plugin-slurm", "sklearn": "scikit-learn",
                "google_crc32c": "google-crc32c"}
# declared for what they bring at run time, not imported by name in distgnn/
RUNTIME_ONLY = {
    "snakemake": "the workflow runner (Snakefile)",
    "snakemake-executor-plugin-slurm": "the Slurm profile's executor",
    "jsonschema": "Snakemake's validate() of the config (Snakefile)",
    "ogb": "dataset metadata, read from its master.csv found by importlib.util.find_spec",
}


def test_declared_dependencies_are_the_imported_ones() -> None:
    """Every third-party module that distgnn/ imports is declared, and every declared run-time
    dependency is imported somewhere (or listed above with its reason)."""
    import ast
    import sys

    imported = set()
    for path in (REPO / "distgnn").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = {IMPORT_NAMES.get(m, m).lower() for m in imported
                   if m not in sys.stdlib_module_names and m not in {"distgnn", "__future__"}}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {_name(r) for r in project["dependencies"]}
    optional = {_name(r) for extra in project["optional-dependencies"].values() for r in extra}
    assert third_party <= declared | optional, f"imported, not declared: {third_party - declared - optional}"
    unused = declared - third_party - set(RUNTIME_ONLY)
    assert not unused, f"declared, never imported by distgnn/: {sorted(unused)}"


def test_command_line_help_imports_no_heavy_module() -> None:
    """`distgnn --help` and every subcommand's parser come up without torch, zarr, matplotlib,
    pandas or MPI (they are imported when a command runs)."""
    import subprocess
    import sys

    code = ("import sys, distgnn.cli as c; c.build_parser(); "
            "print(sorted(m for m in ('torch', 'zarr', 'matplotlib', 'pandas', 'mpi4py') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_train_defaults_are_the_config_defaults() -> None:
    """Every key of config/config.yaml's train section that is a `distgnn train` option has the
    same default on the command line."""
    from dataclasses import fields

    import yaml

    from distgnn.train.config import TrainConfig

    train = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["train"]
    defaults = {f.name: f.default for f in fields(TrainConfig)}
    shared = sorted(set(train) & set(defaults))
    assert {"epochs", "eval_every", "checkpoint_every", "hidden", "lr", "apply"} <= set(shared)
    differ = {k: (train[k], defaults[k]) for k in shared if train[k] != defaults[k]}
    assert not differ, f"config.yaml vs distgnn train defaults: {differ}"
