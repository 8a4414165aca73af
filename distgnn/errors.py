"""User-facing errors: one line that names the file or option and what was expected."""


class DistgnnError(Exception):
    """An error caused by input or environment, reported to the user as one line (no traceback)."""


class CollectiveError(DistgnnError):
    """A user error that every MPI rank detects alike (e.g. a wrong rank count): rank 0 reports it
    and every rank exits, without aborting the job."""


def os_error_line(exc: OSError) -> str:
    """An operating system's error as one line: its cause and the path it names, e.g. ``No space
    left on device (runs/x/checkpoints/epoch_000004/rank_1.pt)``."""
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"
