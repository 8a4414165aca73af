"""User-facing errors: one line that names the file or option and what was expected."""


class DistgnnError(Exception):
    """An error caused by input or environment, reported to the user as one line (no traceback)."""
