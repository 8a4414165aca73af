"""Launching ``distgnn train`` through submitit: Slurm (one job of P tasks), local (mpiexec), debug.

``launch(...)`` submits and waits; the submitted callables live in ``tasks``, the waiting (with a
guard against jobs that vanish without a result) in ``watch``, the presets in ``presets``.
"""
from distgnn.launch.partdir import num_parts
from distgnn.launch.presets import load_preset
from distgnn.launch.submit import LaunchResult, launch

__all__ = ["LaunchResult", "launch", "load_preset", "num_parts"]
