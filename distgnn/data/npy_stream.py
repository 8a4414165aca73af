"""Read .npy arrays (plain files or members of .npz archives) in row blocks without mmap.

Plain reads keep the resident memory at one block, which memory-mapping would not (mapped pages
count as resident once touched).
"""
from __future__ import annotations

import os
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np
from numpy.lib import format as npy_format

from distgnn.errors import DistgnnError


@dataclass
class NpyHeader:
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize


def read_header(stream: BinaryIO, label: str) -> NpyHeader:
    """Parse the header of an .npy stream, leaving the stream at the first data byte."""
    try:
        version = npy_format.read_magic(stream)
        reader = (npy_format.read_array_header_1_0 if version == (1, 0)
                  else npy_format.read_array_header_2_0)
        shape, fortran, dtype = reader(stream)
    except Exception as exc:
        raise DistgnnError(f"{label}: not a valid .npy array ({exc})") from exc
    if dtype.hasobject:
        raise DistgnnError(f"{label}: object arrays are not supported")
    return NpyHeader(tuple(shape), dtype, fortran)


@contextmanager
def open_npy(path: str | os.PathLike, member: str | None = None) -> Iterator[tuple[BinaryIO, NpyHeader, str]]:
    """Open ``path`` (an .npy file) or ``member`` of the .npz archive ``path``; yields
    (stream, header, label) with the stream at the first data byte; checks the size on disk."""
    path = Path(path)
    label = f"{path}" if member is None else f"{path}[{member}]"
    if not path.exists():
        raise DistgnnError(f"{label}: file not found")
    if member is None:
        with open(path, "rb") as stream:
            header = read_header(stream, label)
            available = path.stat().st_size - stream.tell()
            _check_size(header, available, label)
            yield stream, header, label
        return
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise DistgnnError(f"{path}: not a valid .npz archive ({exc})") from exc
    with archive:
        name = member if member.endswith(".npy") else member + ".npy"
        if name not in archive.namelist():
            raise DistgnnError(f"{path}: no array '{member}' (has {sorted(archive.namelist())})")
        with archive.open(name) as stream:
            header = read_header(stream, label)
            yield stream, header, label


def _check_size(header: NpyHeader, available: int, label: str) -> None:
    expected = int(np.prod(header.shape, dtype=np.int64)) * header.dtype.itemsize
    if available < expected:
        raise DistgnnError(f"{label}: file truncated ({available} of {expected} data bytes)")


def _read_exact(stream: BinaryIO, nbytes: int, label: str) -> bytes:
    data = stream.read(nbytes)
    if len(data) != nbytes:
        raise DistgnnError(f"{label}: file truncated (wanted {nbytes} more bytes, got {len(data)})")
    return data


def iter_rows(path: str | os.PathLike, rows_per_block: int, member: str | None = None,
              dtype: np.dtype | None = None) -> Iterator[np.ndarray]:
    """Yield consecutive row blocks ``[<= rows_per_block, ...]`` of a C-ordered array."""
    with open_npy(path, member) as (stream, header, label):
        if header.fortran_order and len(header.shape) > 1:
            raise DistgnnError(f"{label}: Fortran-ordered arrays are not supported; save it C-ordered")
        n = header.shape[0] if header.shape else 1
        for start in range(0, n, rows_per_block):
            count = min(rows_per_block, n - start)
            raw = _read_exact(stream, count * header.row_bytes, label)
            block = np.frombuffer(raw, dtype=header.dtype).reshape(count, *header.shape[1:])
            yield block.astype(dtype, copy=False) if dtype is not None else block


def load(path: str | os.PathLike, member: str | None = None) -> np.ndarray:
    """Read a whole (small) array, with the same checks as :func:`iter_rows`."""
    with open_npy(path, member) as (stream, header, label):
        count = int(np.prod(header.shape, dtype=np.int64))
        raw = _read_exact(stream, count * header.dtype.itemsize, label)
        order = "F" if header.fortran_order else "C"
        return np.frombuffer(raw, dtype=header.dtype).reshape(header.shape, order=order).copy()


def shape_of(path: str | os.PathLike, member: str | None = None) -> tuple[int, ...]:
    with open_npy(path, member) as (_, header, _label):
        return header.shape
