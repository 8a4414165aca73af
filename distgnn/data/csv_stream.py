"""Read headerless numeric ``.csv.gz`` files (OGB's raw layout) in row blocks.

pandas parses one block at a time, so memory stays at one block whatever the file size. Every
parse or decompression failure becomes one :class:`DistgnnError` line naming the file.
"""
from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from distgnn.errors import DistgnnError

#: Slices parsed per yielded block (bounds the tokenizer's memory to about one block).
PARSE_SLICES = 8
_READ_ERRORS = (EOFError, OSError, zlib.error, gzip.BadGzipFile, ValueError, TypeError,
                pd.errors.ParserError)


def _fail(path: Path, exc: BaseException) -> DistgnnError:
    if isinstance(exc, EOFError):
        what = "file truncated (compressed stream ends early)"
    else:
        what = f"unreadable ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    return DistgnnError(f"{path}: {what}; expected a headerless numeric csv.gz")


def iter_csv(path: str | os.PathLike, rows: int, dtype: type | np.dtype,
             width: int | None = None) -> Iterator[np.ndarray]:
    """Yield consecutive blocks [<= rows, width] of the csv.gz at ``path`` as ``dtype``.

    An empty file yields nothing. ``width`` (columns) is checked when given. The text is parsed
    in slices of ``rows / PARSE_SLICES`` rows: pandas' tokenizer holds several times the parsed
    bytes, so parsing a whole block at once would take far more memory than the block itself.
    """
    path = Path(path)
    if not path.is_file():
        raise DistgnnError(f"{path}: file not found")
    rows = max(1, rows)
    pending: list[np.ndarray] = []
    count = 0
    try:
        reader = pd.read_csv(path, header=None, chunksize=max(1, rows // PARSE_SLICES),
                             dtype=dtype, compression="gzip", engine="c")
        with reader:
            for frame in reader:
                part = frame.to_numpy(dtype=dtype)
                del frame
                if width is not None and part.shape[1] != width:
                    raise DistgnnError(f"{path}: {part.shape[1]} columns, expected {width}")
                pending.append(part)
                count += len(part)
                while count >= rows:
                    joined = np.concatenate(pending) if len(pending) > 1 else pending[0]
                    pending = [joined[rows:]] if count > rows else []
                    count -= rows
                    yield joined[:rows]
        if count:
            yield np.concatenate(pending)
    except pd.errors.EmptyDataError:
        return
    except _READ_ERRORS as exc:
        raise _fail(path, exc) from exc


def read_csv(path: str | os.PathLike, dtype: type | np.dtype, width: int | None = None,
             rows: int = 1 << 20) -> np.ndarray:
    """Read a whole (small) csv.gz into one array [R, width]."""
    blocks = list(iter_csv(path, rows, dtype, width))
    if not blocks:
        return np.zeros((0, width or 1), dtype=dtype)
    return np.concatenate(blocks)


def num_columns(path: str | os.PathLike) -> int:
    """Columns of the first row of a csv.gz (0 for an empty file)."""
    for block in iter_csv(path, 1, np.float64):
        return block.shape[1]
    return 0
