"""Downloads into the user cache: where the cache is, whether downloading is allowed, one URL's bytes, and files
written so that a download cut short leaves nothing half-written.

Used by the MNIST and MR polarity sources; nothing here imports torch or torchvision (a run that finds its data
cached, or falls back to the bundled digits, pays no import for the download path).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from distbench.errors import UserError

NO_DOWNLOAD_ENV = "DISTBENCH_NO_DOWNLOAD"
TIMEOUT_S = 30  # per connection attempt; a machine without a network fails at once (no route, no name)


def cache_dir() -> Path:
    return Path(os.environ.get("DISTBENCH_CACHE", Path.home() / ".cache" / "distbench"))


def downloads_allowed() -> bool:
    """DISTBENCH_NO_DOWNLOAD=1 (tests, air-gapped machines) skips every download attempt."""
    return os.environ.get(NO_DOWNLOAD_ENV, "") not in ("1", "true", "yes")


@contextlib.contextmanager
def no_downloads() -> Iterator[None]:
    """Within: downloads_allowed() is False (a process that must read what another one fetched, not fetch again)."""
    before = os.environ.get(NO_DOWNLOAD_ENV)
    os.environ[NO_DOWNLOAD_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(NO_DOWNLOAD_ENV, None)
        else:
            os.environ[NO_DOWNLOAD_ENV] = before


def fetch(url: str, timeout: float = TIMEOUT_S) -> bytes | None:
    """The bytes at `url`; None when there is no network (offline, refused, no such host, not found)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read()
    except http.client.HTTPException as e:  # e.g. IncompleteRead: the connection broke mid-way
        raise UserError(f"the download of {url} failed ({type(e).__name__}); try again or pass --data-dir") from e
    except OSError:  # URLError, HTTPError, timeouts: nothing to be had there now
        return None


def md5(blob: bytes) -> str:
    return hashlib.md5(blob, usedforsecurity=False).hexdigest()


def write_atomically(path: Path, data: bytes) -> None:
    """`data` at `path`, written to a temporary file beside it and renamed: the file is whole or absent."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
