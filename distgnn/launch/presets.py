"""Named submitit presets for the train job (``cluster/submitit.yaml``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from distgnn.errors import DistgnnError

#: Keys a preset may set. ``ranks_per_node``, ``grace_s``, ``pending_timeout_min``, ``stage_dir``,
#: ``srun_mpi``, ``srun_cpu_bind``, ``mem_margin``, ``mem_gb_max``, ``sockets_per_node`` and
#: ``cores_per_socket`` are ours (and ``mem_gb: auto``, ``ranks_per_node`` / ``cpus_per_task: socket``);
#: the others are submitit's AutoExecutor parameters (``slurm_*`` ones only reach Slurm).
PRESET_KEYS = {
    "ranks_per_node", "cpus_per_task", "mem_gb", "timeout_min", "slurm_partition", "slurm_account",
    "slurm_qos", "slurm_constraint", "slurm_signal_delay_s", "slurm_additional_parameters",
    "slurm_setup", "slurm_srun_args", "grace_s", "pending_timeout_min", "stage_dir", "srun_mpi",
    "srun_cpu_bind", "mem_margin", "mem_gb_max", "sockets_per_node", "cores_per_socket",
}
#: ``mem_margin`` when a preset with ``mem_gb: auto`` gives none: the request is the estimate x 1.25
DEFAULT_MEM_MARGIN = 0.25


def default_presets_file() -> Path:
    """``cluster/submitit.yaml`` under the working directory, else the one beside this package."""
    here = Path("cluster/submitit.yaml")
    if here.is_file():
        return here
    return Path(__file__).resolve().parents[2] / "cluster" / "submitit.yaml"


def load_preset(name: str, path: str | Path | None = None) -> dict[str, Any]:
    """The preset ``name`` of the YAML file ``path`` (a mapping of preset name -> settings)."""
    import yaml

    path = Path(path) if path is not None else default_presets_file()
    try:
        presets = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise DistgnnError(f"{path}: cannot read submitit presets ({exc})") from exc
    if not isinstance(presets, dict) or not presets:
        raise DistgnnError(f"{path}: expected a mapping of preset names to settings")
    if name not in presets:
        raise DistgnnError(f"--preset {name}: not in {path} (known: {', '.join(presets)})")
    preset = presets[name] or {}
    if not isinstance(preset, dict):
        raise DistgnnError(f"{path}: preset {name!r} must be a mapping")
    unknown = sorted(set(preset) - PRESET_KEYS)
    if unknown:
        raise DistgnnError(f"{path}: preset {name!r} has unknown keys {unknown} "
                           f"(allowed: {', '.join(sorted(PRESET_KEYS))})")
    for key in ("ranks_per_node", "cpus_per_task", "sockets_per_node", "cores_per_socket"):
        value = preset.get(key)
        socket_ok = key in ("ranks_per_node", "cpus_per_task")
        if value is None or (socket_ok and value == "socket"):
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise DistgnnError(f"{path}: preset {name!r}: {key} must be an integer >= 1"
                               f"{', socket' if socket_ok else ''} or null, got {value!r}")
    for key, allowed, auto in (("mem_gb", "a number > 0, auto or null", True),
                               ("mem_gb_max", "a number > 0 or null", False),
                               ("mem_margin", "a number >= 0 or null", False)):
        value = preset.get(key)
        if value is None or (auto and value == "auto"):
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
        if not number or value < 0 or (value == 0 and key != "mem_margin") or value == float("inf"):
            raise DistgnnError(f"{path}: preset {name!r}: {key} must be {allowed}, got {value!r}")
    return preset
