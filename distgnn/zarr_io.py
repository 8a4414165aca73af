"""Zarr v3 storage shared by every distgnn store (graph, assignment, partitions).

Every array carries a crc32c checksum codec and is written with ``write_empty_chunks=True``, so
each chunk exists on disk and :func:`open_checked` can refuse a store with a missing chunk (zarr
would otherwise return the fill value silently). Stores are written under a temporary name beside
the target and renamed into place only when complete (:class:`AtomicGroup`, :mod:`distgnn.atomic`).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import zarr
import zarr.codecs

from distgnn import atomic
from distgnn.errors import DistgnnError

# Snakemake marks a finished directory output with a `.snakemake_timestamp` file inside it; every
# store is one, and zarr warns about the stranger on each open (on every rank). It is harmless.
warnings.filterwarnings("ignore", message=r"Object at \.snakemake_timestamp is not recognized",
                        category=UserWarning)

#: Target size of one chunk in bytes (uncompressed).
CHUNK_BYTES = 8 << 20


def codecs_for(dtype: np.dtype) -> dict[str, Any]:
    """Compressor list for an array: fast lz4 (shuffled by item size) then a crc32c checksum."""
    return {
        "compressors": [
            zarr.codecs.BloscCodec(cname="lz4", clevel=3, shuffle="shuffle",
                                   typesize=np.dtype(dtype).itemsize),
            zarr.codecs.Crc32cCodec(),
        ]
    }


def rows_per_chunk(row_shape: tuple[int, ...], dtype: np.dtype, target: int = CHUNK_BYTES) -> int:
    """Rows per chunk so one chunk holds about ``target`` bytes (at least 1024 rows)."""
    row_bytes = int(np.prod(row_shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return max(1024, target // max(row_bytes, 1))


def create_array(group: zarr.Group, name: str, shape: tuple[int, ...], dtype: Any,
                 chunk_rows: int | None = None, fill_value: Any = None) -> zarr.Array:
    """Create a row-chunked, checksummed array in ``group`` (every chunk written, even empty)."""
    dtype = np.dtype(dtype)
    rows = chunk_rows or rows_per_chunk(tuple(shape[1:]), dtype)
    rows = max(1, min(rows, max(shape[0], 1)))
    return group.create_array(
        name=name, shape=shape, dtype=dtype, chunks=(rows, *shape[1:]),
        fill_value=fill_value if fill_value is not None else 0,
        config={"write_empty_chunks": True}, **codecs_for(dtype))


class ChecksummedWriter:
    """Writes one array in row order while hashing its content (for the store checksum)."""

    def __init__(self, array: zarr.Array):
        self.array = array
        self.cursor = 0
        self.hasher = hashlib.blake2b(digest_size=16)

    def write(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=self.array.dtype)
        end = self.cursor + block.shape[0]
        if end > self.array.shape[0]:
            raise DistgnnError(f"array '{self.array.basename}': more rows than its {self.array.shape[0]}")
        self.array[self.cursor:end] = block
        self.hasher.update(memoryview(block).cast("B"))
        self.cursor = end

    def finish(self) -> str:
        if self.cursor != self.array.shape[0]:
            raise DistgnnError(f"array '{self.array.basename}': wrote {self.cursor} of "
                               f"{self.array.shape[0]} rows")
        if self.array.shape[0] == 0:
            self.array[...] = self.array.fill_value  # still write the (empty) chunk layout
        return self.hasher.hexdigest()


def write_array(group: zarr.Group, name: str, data: np.ndarray) -> str:
    """Write an in-memory array chunk by chunk; return its content digest."""
    writer = ChecksummedWriter(create_array(group, name, data.shape, data.dtype))
    step = writer.array.chunks[0]
    for start in range(0, len(data), step):
        writer.write(data[start:start + step])
    return writer.finish()


def combine_digests(digests: dict[str, str]) -> str:
    """One content checksum for a store from its per-array digests (order-independent)."""
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(digests):
        h.update(name.encode() + b"=" + digests[name].encode() + b";")
    return h.hexdigest()


class AtomicGroup:
    """A zarr group written under a temporary sibling name and renamed to ``path`` on commit.

    Use as a context manager: an exception (or a missing :meth:`commit`) removes the temporary
    folder, so nothing partial ever sits at ``path``. Opening one first removes the temporaries of
    ``path`` that killed processes of this host left (:func:`distgnn.atomic.remove_orphans`);
    :meth:`commit` replaces an old store without a moment when ``path`` is missing
    (:func:`distgnn.atomic.commit_dir`).
    """

    def __init__(self, path: str | os.PathLike, overwrite: bool = False):
        self.path = Path(path)
        if self.path.exists() and not overwrite:
            raise DistgnnError(f"{self.path} already exists (use --force to replace it)")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DistgnnError(f"cannot create output folder {self.path.parent}: {exc.strerror}") from exc
        if not os.access(self.path.parent, os.W_OK):
            raise DistgnnError(f"output folder {self.path.parent} is not writable")
        atomic.remove_orphans(self.path)
        self.tmp = atomic.temp_path(self.path)
        self.group = zarr.open_group(str(self.tmp), mode="w")
        self.committed = False

    def commit(self, attrs: dict[str, Any]) -> Path:
        """Write the attributes last, then move the finished group into place (fsynced, replacing
        any old store in one step)."""
        self.group.update_attributes(attrs)
        atomic.commit_dir(self.tmp, self.path)
        self.committed = True
        return self.path

    def __enter__(self) -> "AtomicGroup":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if not self.committed:
            shutil.rmtree(self.tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            free = shutil.disk_usage(self.path.parent).free
            if free < (1 << 20):  # a short write carries no errno: say what the disk says
                reason += f"; disk full: {free} bytes free"
            raise DistgnnError(f"{self.path}: cannot write ({reason}); nothing was kept") from exc


def open_checked(path: str | os.PathLike, required: tuple[str, ...] = ()) -> zarr.Group:
    """Open a store read-only, refusing one whose arrays lack chunks or a required array.

    Raises :class:`DistgnnError` naming the store and the array.
    """
    path = Path(path)
    if not path.exists():
        raise DistgnnError(f"{path}: no such store")
    try:
        group = zarr.open_group(str(path), mode="r")
    except Exception as exc:  # zarr raises several types for a non-store folder
        inside = sorted(p.name for p in path.glob("*.zarr")) if path.is_dir() else []
        hint = f"; it holds {', '.join(inside[:3])}: pass one of those" if inside else ""
        raise DistgnnError(f"{path}: not a zarr store ({type(exc).__name__}){hint}") from exc
    names = array_names(group)
    for name in required:
        if name not in names:
            raise DistgnnError(f"{path}: missing array '{name}'")
    for name in sorted(names):
        check_chunks_present(group[name], f"{path}/{name}")
    return group


def store_bytes(path: str | os.PathLike) -> int:
    """Bytes of the files of a store (or any folder) on disk."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def array_names(group: zarr.Group) -> set[str]:
    """Paths (relative to ``group``, ``a/b`` for nested groups) of every array inside it."""
    return {name for name, member in group.members(max_depth=None) if isinstance(member, zarr.Array)}


def check_chunks_present(array: zarr.Array, label: str) -> None:
    """Raise if any chunk of ``array`` is missing on disk (zarr would return the fill value)."""
    if array.nchunks_initialized != array.nchunks:
        raise DistgnnError(f"{label}: {array.nchunks - array.nchunks_initialized} of "
                           f"{array.nchunks} chunks are missing (store damaged or incomplete)")


def array_label(array: zarr.Array) -> str:
    """The array's path on disk, e.g. ``data/x/graph.zarr/feat`` (its name when not on disk)."""
    root = getattr(array.store, "root", None)
    return f"{root}/{array.path}" if root is not None else str(array.name)


def read(array: zarr.Array, selection: Any = slice(None), label: str | None = None) -> np.ndarray:
    """``array[selection]``, turning a checksum mismatch or undecodable chunk into one clear line
    (naming ``label``, by default the array's path, and the rows of ``selection``)."""
    try:
        return array[selection]
    except Exception as exc:
        rows = ""
        if isinstance(selection, slice) and selection != slice(None):
            step = array.chunks[0]
            start, stop = selection.start or 0, min(selection.stop or array.shape[0], array.shape[0])
            first, last = start // step, max(start, stop - 1) // step
            rows = f", chunk {first}" if first == last else f", chunks {first}-{last}"
            rows += f" (rows {start}-{stop - 1})"
        raise DistgnnError(f"{label or array_label(array)}{rows}: cannot read chunk data, store "
                           f"corrupted ({type(exc).__name__}: {exc})") from exc


def chunk_slices(array: zarr.Array) -> range:
    """Start rows of the array's chunks (one chunk = ``array.chunks[0]`` rows)."""
    return range(0, array.shape[0], array.chunks[0])


def read_chunked(array: zarr.Array, label: str | None = None,
                 allocate=np.empty, dtype: Any = None) -> np.ndarray:
    """The whole array, read one chunk at a time into one preallocated result (zarr's own
    whole-array read holds decode buffers for many chunks at once, about 40% more memory on a
    large array); a damaged chunk is named. ``allocate(shape, dtype)`` makes the result (e.g.
    :func:`distgnn.host_memory.huge_page_array`); ``dtype`` (default: the array's) converts chunk by
    chunk, so a float16 array is widened without a second whole copy."""
    if array.ndim == 0:
        return read(array, slice(None), label)
    out = allocate(array.shape, np.dtype(dtype) if dtype is not None else array.dtype)
    step = array.chunks[0]
    for start in chunk_slices(array):
        out[start:start + step] = read(array, slice(start, start + step), label)
    return out


def verify_checksums(group: zarr.Group, label: str, progress_desc: str | None = None) -> None:
    """Read every chunk of every array, so the crc32c codec checks it; raise on the first bad one."""
    for name in sorted(array_names(group)):
        verify_array(group[name], f"{label}/{name}", progress_desc or f"verify {name}")


def verify_array(array: zarr.Array, label: str, progress_desc: str | None = None) -> None:
    """Read every chunk of one array (the crc32c codec checks each); raise naming the first bad one."""
    from distgnn.progress import progress

    check_chunks_present(array, label)
    step = array.chunks[0]
    for start in progress(chunk_slices(array), desc=progress_desc or f"verify {label}"):
        read(array, slice(start, start + step), label)
