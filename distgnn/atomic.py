"""Temporaries beside an output, and committing them without a moment when the output is missing.

Every stage writes its output (a store, a checkpoint file, a report file) under a temporary name
beside it and renames it into place when complete. This module names those temporaries, removes
the ones a killed process left, and does the rename:

* **Names.** A temporary of ``DIR/NAME`` is ``DIR/.NAME.<tag>@<host>.<pid>.<seq>``: ``tag`` says
  what it is (``tmp``: the output being written; ``old``: a replaced output on its way out;
  ``edges``, ``feat-rows``: scratch spools), ``host`` and ``pid`` the process that made it, ``seq``
  a counter of this process (several temporaries of one output at once).
* **Orphans.** :func:`remove_orphans` (called by a stage before it writes ``DIR/NAME``) removes the
  temporaries of that one output whose process is gone *on this host*. A temporary of a live
  process (a parallel build of the same folder), of another host (the folder is shared: its
  processes cannot be checked from here) or of another output is never touched.
* **Durability.** Before the rename every file of the new output and every folder in it is
  fsynced, and after it the parent folder, so a crash just after a commit keeps the new content.
* **No window.** A folder cannot be renamed over a non-empty one, and deleting the old one first
  (as distgnn did) leaves a moment with no output at all. :func:`commit_dir` swaps the two names in
  one step (Linux ``renameat2(RENAME_EXCHANGE)``: local file systems, tmpfs; not NFS) and then
  removes the old folder, now under the temporary name. Where the swap is refused it falls back to
  renaming the old folder aside and the new one in: two renames microseconds apart, the only
  moment without the output, and the aside is removed after (or, after a kill, by the next run).
  A file is replaced by ``os.replace``, atomic everywhere.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import itertools
import os
import re
import shutil
import socket
import threading
from pathlib import Path
from typing import Callable, Iterator

#: tags of the output being written and of a replaced one on its way out
TMP, OLD = "tmp", "old"
_SEQ = itertools.count()
_SEQ_LOCK = threading.Lock()
#: renameat2's flag that swaps the two names (linux/fs.h)
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def host() -> str:
    """This machine's name, as temporaries carry it."""
    return socket.gethostname()


def temp_path(target: str | os.PathLike, tag: str = TMP) -> Path:
    """A fresh temporary name beside ``target`` (module docstring); ``tag``: letters, digits,
    ``-`` and ``_``. Nothing is created."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", tag):
        raise ValueError(f"temporary tag {tag!r}: letters, digits, '-' and '_' only")
    target = Path(target)
    with _SEQ_LOCK:
        seq = next(_SEQ)
    return target.parent / f".{target.name}.{tag}@{host()}.{os.getpid()}.{seq}"


def owner(target: str | os.PathLike, candidate: str) -> tuple[str, int] | None:
    """(host, pid) of the process that made ``candidate`` (a name in ``target``'s folder), or
    None when it is not a temporary of ``target``."""
    name = re.escape(Path(target).name)
    found = re.fullmatch(rf"\.{name}\.[A-Za-z0-9_-]+@(.+)\.(\d+)\.(\d+)", candidate)
    return (found.group(1), int(found.group(2))) if found else None


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_orphans(target: str | os.PathLike) -> list[Path]:
    """Remove the temporaries of ``target`` left by processes of this host that are gone; returns
    what was removed. Temporaries of live processes and of other hosts are kept."""
    target = Path(target)
    if not target.parent.is_dir():
        return []
    here, removed = host(), []
    for entry in target.parent.iterdir():
        made_by = owner(target, entry.name)
        if made_by is None or made_by[0] != here or process_alive(made_by[1]):
            continue
        remove(entry)
        removed.append(entry)
    return removed


def remove(path: Path) -> None:
    """Remove a file or a folder tree; nothing when it is missing."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def fsync_path(path: str | os.PathLike) -> None:
    """fsync one file or folder (a folder: its entries, e.g. a rename inside it)."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if os.path.isdir(path) else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: str | os.PathLike) -> None:
    """fsync every file and folder under ``root`` (``root`` last)."""
    for folder, _, files in os.walk(root, topdown=False):
        for name in files:
            fsync_path(os.path.join(folder, name))
        fsync_path(folder)


def _libc_renameat2() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.renameat2
    except (OSError, AttributeError):
        return None


_renameat2 = _libc_renameat2()


def exchange(a: str | os.PathLike, b: str | os.PathLike) -> None:
    """Swap the names ``a`` and ``b`` in one step (both must exist); OSError where the system or
    the file system cannot (EINVAL, ENOSYS, ...)."""
    if _renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(a))


def commit_dir(tmp: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Move the finished folder ``tmp`` to ``target`` (replacing any folder there), durably and with
    ``target`` present at every moment where the file system can swap names (module docstring).
    Returns ``target``."""
    tmp, target = Path(tmp), Path(target)
    fsync_tree(tmp)
    if target.exists():
        try:
            exchange(tmp, target)   # tmp now holds the old folder
            old = tmp
        except OSError:
            old = temp_path(target, OLD)
            os.replace(target, old)
            os.replace(tmp, target)
        fsync_path(target.parent)
        remove(old)
    else:
        os.replace(tmp, target)
        fsync_path(target.parent)
    return target


def write_file(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` on a temporary name beside ``path``, fsync it, rename it to ``path``
    and fsync the folder (an error removes the temporary). Returns ``path``."""
    path = Path(path)
    remove_orphans(path)
    tmp = temp_path(path)
    try:
        write(tmp)
        fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)
    return path


@contextlib.contextmanager
def scratch_dir(target: str | os.PathLike, tag: str) -> Iterator[Path]:
    """A temporary folder beside ``target`` for spools of its build, removed on exit (after a kill,
    by the next build of ``target``: :func:`remove_orphans`)."""
    path = temp_path(target, tag)
    path.mkdir()
    try:
        yield path
    finally:
        remove(path)
