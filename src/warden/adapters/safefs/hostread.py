"""Reading files a bot controls, from the host side (health checks, repair, installs).

A bot can turn any file or folder of its workspace into a symlink, a FIFO or a device between
two commands. Host-side code that reads such a file with plain `open()` follows the link out
of the workspace, blocks forever on the FIFO, or reads `/dev/zero` until memory runs out. These
helpers resolve the path beneath a held descriptor of the root with no link at any depth
(safefs.root: openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), accept only regular files
(opened O_NONBLOCK, checked by fstat) and read a bounded size. Writes go through
`SafeRoot.write_bytes` (temp file, fsync, rename, no hard-linked target).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from warden.adapters.safefs.root import SafeRoot
from warden.core.errors import WardenError

__all__ = ["links_in", "read_heads", "read_small", "regular_dirs"]


def read_small(root: Path | str, rel: str, limit: int = 1 << 20, *, head: bool = False) -> bytes | None:
    """The bytes of regular file `rel` beneath `root` (at most `limit`), or None when it is
    missing, anything but a regular file, reached through a link, or larger (with `head`: its
    first `limit` bytes then)."""
    try:
        with SafeRoot.open(root, max_bytes=None if head else limit) as tree:
            return tree.read_head(rel, limit) if head else tree.read_bytes(rel)
    except WardenError:
        return None


def read_heads(root: Path | str, rels: Iterable[str], limit: int) -> Iterator[bytes | None]:
    """The first `limit` bytes of each regular file `rels` beneath `root` (None as read_small
    gives it), `root` opened once: opening it is most of a small read's cost (0.6 ms), and a
    bot's venv may hold 500,000 folders of package metadata (workspace.max_files). One at a
    time, as they are asked for: never all of them at once."""
    try:
        tree = SafeRoot.open(root)
    except WardenError:
        for _ in rels:
            yield None
        return
    with tree:
        for rel in rels:
            try:
                yield tree.read_head(rel, limit)
            except WardenError:
                yield None


def links_in(root: Path | str, rel: str) -> list[str]:
    """Names of the symbolic links in folder `rel` beneath `root` (none when a link is on the way)."""
    try:
        with SafeRoot.open(root) as tree:
            entries = tree.list(rel)
    except WardenError:
        return []
    return [e.name for e in entries if e.type == "symlink"]


def regular_dirs(root: Path | str, rel: str, suffix: str) -> list[str]:
    """Names of real directories (not links) ending with `suffix` in folder `rel` beneath `root`."""
    try:
        with SafeRoot.open(root) as tree:
            entries = tree.list(rel)
    except WardenError:
        return []
    return [e.name for e in entries if e.type == "dir" and e.name.endswith(suffix)]

