"""Where a run came from: versions, git commit, Slurm job id."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any


def versions() -> dict[str, Any]:
    import numpy
    import torch
    import zarr

    from distgnn.comm import mpi_library_version

    from importlib.metadata import PackageNotFoundError, version

    try:
        own = version("distgnn")
    except PackageNotFoundError:
        own = "unknown"   # run from a source tree that was never installed
    return {"distgnn": own, "torch": torch.__version__, "numpy": numpy.__version__,
            "zarr": zarr.__version__, "mpi": first_line(mpi_library_version())}


def first_line(text: str) -> str:
    """The first line of a C library's version string, without the NUL that may end it (Open
    MPI's does) or surrounding blanks."""
    return (text.replace("\0", "").splitlines() or [""])[0].strip()


def git_commit() -> str | None:
    """The commit of the distgnn checkout this code runs from, if it is one."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def slurm_job_id() -> str | None:
    return os.environ.get("SLURM_JOB_ID")
