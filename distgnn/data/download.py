"""Shared download and archive helpers for the dataset readers.

Downloads stream to a temporary sibling name and are renamed when complete, so a file at the final
path is always whole. A refused or cut transfer is retried (:data:`RETRY_DELAYS_S`; not when the
host name does not resolve or no route leads there: no network, which waiting does not mend); a
file is kept only when its size equals the server's Content-Length and, when the caller knows it,
its SHA-256 equals the published one. A server that cannot be reached gives one line naming the
dataset, the URL and the ``--source`` option that points at pre-downloaded files. (Our own ~30
lines rather than pooch: the readers need the streaming progress bar, the one-line errors and the
atomic rename they already had; retries and the digest were what was missing.)
"""
from __future__ import annotations

import errno
import hashlib
import http.client
import os
import shutil
import socket
import sys
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from distgnn.errors import DistgnnError
from distgnn.progress import is_quiet, progress

#: Seconds to wait for the server to accept the connection (and for each later read).
TIMEOUT_S = 20.0
BLOCK = 1 << 20
#: Pauses before the second, third ... attempt of a failed download (s); an HTTP error status
#: (404, 403) is not retried.
RETRY_DELAYS_S = (2.0, 8.0)


def _offline(dataset: str, url: str, reason: object, source_help: str) -> DistgnnError:
    return DistgnnError(f"{dataset}: cannot download {url} ({reason}); download it where the network "
                        f"is reachable and pass --source {source_help}")


def download(url: str, dest: str | os.PathLike, *, dataset: str, source_help: str = "PATH",
             timeout: float = TIMEOUT_S, sha256: str | None = None) -> Path:
    """Download ``url`` to ``dest`` (streamed, with a progress bar, retried) and return ``dest``.

    An existing ``dest`` is reused (it only ever appears complete). ``source_help`` says what
    ``--source`` should point at, for the error message; ``sha256`` (hex), when given, must match.
    """
    dest = Path(dest)
    if dest.is_file():
        return dest
    for attempt, delay in enumerate(RETRY_DELAYS_S):
        try:
            _download_once(url, dest, dataset, source_help, timeout, sha256)
            return dest
        except _Retryable as exc:
            if not is_quiet():
                print(f"{dataset}: cannot download {url} ({exc}); retrying in {delay:g} s "
                      f"(attempt {attempt + 2} of {len(RETRY_DELAYS_S) + 1})", file=sys.stderr,
                      flush=True)
            time.sleep(delay)
    try:  # the last attempt
        _download_once(url, dest, dataset, source_help, timeout, sha256)
    except _Retryable as exc:
        raise _offline(dataset, url, exc, source_help) from None
    return dest


class _Retryable(Exception):
    """A failure worth another attempt (connection refused or cut); its text is the reason."""


def _no_network(exc: BaseException) -> bool:
    """Whether ``exc`` says this machine has no network (the host name does not resolve, or no
    route): asking again a few seconds later will not help."""
    reason = getattr(exc, "reason", exc)
    return isinstance(reason, socket.gaierror) or (
        isinstance(reason, OSError) and reason.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH))


def _download_once(url: str, dest: Path, dataset: str, source_help: str, timeout: float,
                   sha256: str | None) -> None:
    """One attempt; a failure worth retrying raises :class:`_Retryable`."""
    tmp = dest.with_name(f".{dest.name}.part-{os.getpid()}")
    try:
        try:
            request = urllib.request.Request(url, headers={"User-Agent": "distgnn"})
            response = urllib.request.urlopen(request, timeout=timeout)
        except urllib.error.HTTPError as exc:  # the server answered: asking again will not help
            raise _offline(dataset, url, f"HTTP {exc.code} {exc.reason}", source_help) from exc
        except ValueError as exc:  # not a URL at all
            raise _offline(dataset, url, exc, source_help) from exc
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            if _no_network(exc):
                raise _offline(dataset, url, reason, source_help) from exc
            raise _Retryable(reason) from exc
        dest.parent.mkdir(parents=True, exist_ok=True)  # only once the server answered
        with response, open(tmp, "wb") as out:
            total = response.headers.get("Content-Length")
            total = int(total) if total and total.isdigit() else None
            bar = progress(desc=f"{dataset}: download {url.rsplit('/', 1)[-1]}", total=total,
                           unit="B", unit_scale=True, unit_divisor=1024)
            received = 0
            digest = hashlib.sha256()
            with bar:
                while True:
                    try:
                        block = response.read(BLOCK)
                    except (http.client.HTTPException, OSError, socket.timeout) as exc:
                        raise _Retryable(f"interrupted after {received} bytes: {exc}") from exc
                    if not block:
                        break
                    out.write(block)
                    digest.update(block)
                    received += len(block)
                    bar.update(len(block))
        if total is not None and received != total:
            raise _Retryable(f"connection closed after {received} of {total} bytes")
        if sha256 is not None and digest.hexdigest() != sha256.lower():
            raise DistgnnError(f"{dataset}: {url}: SHA-256 {digest.hexdigest()} is not the "
                               f"published {sha256.lower()} (file damaged or replaced upstream)")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def extract_zip(archive: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Unpack ``archive`` into the folder ``dest`` (created; unpacked under a temporary name and
    renamed when complete). Returns ``dest``."""
    archive, dest = Path(archive), Path(dest)
    tmp = dest.with_name(f".{dest.name}.unzip-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            for info in progress(members, desc=f"unzip {archive.name}", unit=" files"):
                zf.extract(info, tmp)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except zipfile.BadZipFile as exc:
        raise DistgnnError(f"{archive}: not a valid zip archive ({exc}); delete it and retry") from exc
    except (EOFError, zipfile.LargeZipFile, OSError) as exc:
        if isinstance(exc, FileNotFoundError) and not archive.exists():
            raise DistgnnError(f"{archive}: file not found") from exc
        raise DistgnnError(f"{archive}: cannot unpack ({exc})") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


@contextmanager
def npz_errors(label: str) -> Iterator[None]:
    """Turn decompression failures while reading an .npz member into one DistgnnError line."""
    try:
        yield
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise DistgnnError(f"{label}: archive damaged or truncated ({exc})") from exc
