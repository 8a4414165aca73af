"""Test-only fault injection for ``distgnn train`` processes, kept out of the production code.

Python imports ``sitecustomize`` at start-up from ``sys.path``; the tests that inject a fault put
this folder on ``PYTHONPATH`` (``tests/conftest.py``: ``fault_env``) with one of these variables,
and every rank's interpreter (under mpiexec, srun or Snakemake) patches the trainer as it is
imported:

* ``DISTGNN_TEST_FAIL_RANK=k`` (and ``DISTGNN_TEST_FAIL_EPOCH=e``, default 0): rank k raises at
  the start of epoch e (0-based), a bug on one rank.
* ``DISTGNN_TEST_FREEZE_LOADING_RANK=k``: rank k stops itself (SIGSTOP, a frozen node) as it
  starts loading its part.
* ``DISTGNN_TEST_FREEZE_START_RANK=k``: rank k stops itself (SIGSTOP) before the run's first
  collective, as a host cut off while the job starts leaves it.
* ``DISTGNN_TEST_SLOW_OUTPUTS_S=s``: rank 0 sleeps s seconds before writing ``model.pt`` and
  ``summary.json`` (a slow network filesystem).
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import signal
import sys
import time

TARGET = "distgnn.train.trainer"
VARIABLES = ("DISTGNN_TEST_FAIL_RANK", "DISTGNN_TEST_FREEZE_LOADING_RANK",
             "DISTGNN_TEST_FREEZE_START_RANK", "DISTGNN_TEST_SLOW_OUTPUTS_S")


def _rank(trainer) -> int:
    return trainer.comm.rank


def patch(module) -> None:
    """Wrap the trainer module's ``Trainer`` methods as the variables ask."""
    Trainer = module.Trainer
    fail_rank = os.environ.get("DISTGNN_TEST_FAIL_RANK")
    if fail_rank is not None:
        fail_epoch = int(os.environ.get("DISTGNN_TEST_FAIL_EPOCH", "0"))
        epoch_step = Trainer._epoch

        def failing_epoch(self, epoch, *args, **kwargs):
            if _rank(self) == int(fail_rank) and epoch == fail_epoch:
                raise RuntimeError(f"injected failure (DISTGNN_TEST_FAIL_RANK={fail_rank}) at "
                                   f"epoch {epoch + 1}")
            return epoch_step(self, epoch, *args, **kwargs)
        Trainer._epoch = failing_epoch
    frozen_rank = os.environ.get("DISTGNN_TEST_FREEZE_LOADING_RANK")
    if frozen_rank is not None:
        opened = module.open_rank

        def freezing_open(*args, **kwargs):
            comm = args[2] if len(args) > 2 else kwargs["comm"]
            if comm.rank == int(frozen_rank):
                os.kill(os.getpid(), signal.SIGSTOP)
            return opened(*args, **kwargs)
        module.open_rank = freezing_open
    start_rank = os.environ.get("DISTGNN_TEST_FREEZE_START_RANK")
    if start_rank is not None:
        checked = module.check_ranks

        def freezing_check(partition_dir, comm):
            if comm.rank == int(start_rank):
                os.kill(os.getpid(), signal.SIGSTOP)
            return checked(partition_dir, comm)
        module.check_ranks = freezing_check
    slow = os.environ.get("DISTGNN_TEST_SLOW_OUTPUTS_S")
    if slow is not None:
        write = Trainer._write_outputs

        def slow_write(self, *args, **kwargs):
            time.sleep(float(slow))
            return write(self, *args, **kwargs)
        Trainer._write_outputs = slow_write


class _PatchOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the trainer module through the normal path, then patches it once executed."""

    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        self.inner = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        patch(module)


if any(v in os.environ for v in VARIABLES):
    sys.meta_path.insert(0, _PatchOnImport())
