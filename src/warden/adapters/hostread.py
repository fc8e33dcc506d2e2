"""Reading files a bot controls, from the host side (health checks, repair).

A bot can turn any file of its workspace into a symlink, a FIFO or a device between two
commands. Host-side code that reads such a file with plain `open()` follows the link out of the
workspace, blocks forever on the FIFO, or reads `/dev/zero` until memory runs out. These
helpers open with O_NOFOLLOW | O_NONBLOCK, accept only regular files, and read a bounded size.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["read_small", "regular_dirs"]


def read_small(path: Path | str, limit: int = 1 << 20) -> bytes | None:
    """The bytes of regular file `path` (at most `limit`), or None when it is anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return data if len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def regular_dirs(parent: Path | str, suffix: str) -> list[str]:
    """Names of real directories (not links) in `parent` ending with `suffix`."""
    try:
        with os.scandir(parent) as entries:
            return [e.name for e in entries if e.name.endswith(suffix) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
