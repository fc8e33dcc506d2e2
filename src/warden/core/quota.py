"""A workspace's disk and file quota: the budget arithmetic and its decisions (pure).

A workspace may hold `workspace.max_disk` bytes in at most `workspace.max_files` files, and
nothing may write when the filesystem of Warden's home has less than `workspace.min_free`
free (it holds the registry). The adapter (adapters/quota.py) measures and watches; this
module only decides, so every rule here is tested without touching a disk.

A file is charged the larger of its blocks (`st_blocks * 512`: what the disk really gives it,
metadata and preallocation included) and its length: writes through a shared mapping add
blocks without any inotify event, but never past the length, and every change of length
(write, truncate, fallocate, copy_file_range) does raise one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["DISK_KEY", "FILES_KEY", "FILE_SIZE_FLOOR", "FREE_KEY", "Quota", "Usage", "charge", "file_charge"]

# The smallest RLIMIT_FSIZE a run gets, whatever its budget (see Quota.file_size_cap).
FILE_SIZE_FLOOR = 64 * 1024

DISK_KEY = "workspace.max_disk"
FILES_KEY = "workspace.max_files"
FREE_KEY = "workspace.min_free"
_BLOCK = 4096


def charge(blocks: int, size: int) -> int:
    """The bytes one file counts for: its blocks on disk, or its length when that is larger."""
    return max(blocks * 512, size)


def _human(size: int) -> str:
    """In the largest binary unit it reaches: exact when it divides (`5M`), else one decimal (`5.1M`)."""
    for unit, factor in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= factor:
            return f"{size // factor}{unit}" if size % factor == 0 else f"{size / factor:.1f}{unit}"
    return f"{size}B"


class Usage(NamedTuple):
    """What a workspace holds: bytes charged and files (every entry below its folder).

    A tuple, not a dataclass: the watcher makes one per inotify event."""

    bytes: int
    files: int

    def plus(self, bytes_: int, files: int) -> Usage:
        return Usage(self.bytes + bytes_, self.files + files)


@dataclass(frozen=True)
class Quota:
    """The limits of one workspace and the free space kept for Warden's home."""

    max_bytes: int
    max_files: int
    min_free: int

    def file_size_cap(self, usage: Usage, file_size: int) -> int:
        """A run's RLIMIT_FSIZE: no single file may grow past the bytes left in the budget, but
        never below FILE_SIZE_FLOOR: bubblewrap writes the sandbox's /etc/passwd under the same
        limit, and a full workspace must still run the `rm` that empties it (the watcher stops a
        run that grows past the budget all the same)."""
        return min(file_size, max(FILE_SIZE_FLOOR, self.max_bytes - usage.bytes))

    def breach(self, start: Usage, now: Usage) -> str | None:
        """The setting a run broke (`workspace.max_disk`/`max_files`), or None.

        Only growth breaks it: a workspace already over its budget (the limit was lowered)
        may still run commands that delete files, and is stopped only when it grows.
        """
        if now.bytes > self.max_bytes and now.bytes > start.bytes:
            return DISK_KEY
        if now.files > self.max_files and now.files > start.files:
            return FILES_KEY
        return None

    def stop_note(self, key: str, now: Usage, workspace: str, *, stopped: bool = True) -> str:
        """The one line a run that broke `key` ends with (on its stderr); `stopped` False when
        the command ended on its own before Warden's kill reached it."""
        how = "warden: stopped:" if stopped else "warden: as the command ended,"
        if key == FREE_KEY:
            return (f"{how} workspace {workspace} was writing while the filesystem of Warden's home "
                    f"fell below {key} ({_human(self.min_free)} free); free disk space there, or lower {key}")
        if key == DISK_KEY:
            held = f"{_human(now.bytes)} of files, over {key} ({_human(self.max_bytes)})"
        else:
            held = f"{now.files:,} files, over {key} ({self.max_files:,})"
        return (f"{how} workspace {workspace} grew to {held}; delete files in it, or "
                f"raise the limit with `warden config set {key} VALUE`")

    def refusal(self, usage: Usage, add_bytes: int, add_files: int, what: str,
                workspace: str) -> tuple[str, str] | None:
        """(message, setting) when writing `add_bytes` in `add_files` new files would pass a
        limit, else None. A write that does not grow the workspace is never refused."""
        after = usage.plus(add_bytes, add_files)
        if add_bytes > 0 and after.bytes > self.max_bytes:
            return (f"{what} would take workspace {workspace} to {_human(after.bytes)}, over "
                    f"{DISK_KEY} ({_human(self.max_bytes)}; {_human(usage.bytes)} used): delete "
                    f"files in it or raise {DISK_KEY}", DISK_KEY)
        if add_files > 0 and after.files > self.max_files:
            return (f"{what} would take workspace {workspace} to {after.files:,} files, over "
                    f"{FILES_KEY} ({self.max_files:,}): delete files in it or raise {FILES_KEY}",
                    FILES_KEY)
        return None

    def over(self, usage: Usage, workspace: str) -> tuple[str, str] | None:
        """(message, setting) when workspace `workspace` holds more than a limit now (what
        its background processes wrote: no single write is checked there), else None."""
        if usage.bytes > self.max_bytes:
            return (f"workspace {workspace} holds {_human(usage.bytes)}, over {DISK_KEY} "
                    f"({_human(self.max_bytes)})", DISK_KEY)
        if usage.files > self.max_files:
            return (f"workspace {workspace} holds {usage.files:,} files, over {FILES_KEY} "
                    f"({self.max_files:,})", FILES_KEY)
        return None

    def free_problem(self, free: int, where: str) -> str | None:
        """Why nothing may write now (the home's filesystem is nearly full), or None."""
        if free >= self.min_free:
            return None
        return (f"only {_human(free)} is free on the filesystem of Warden's home ({where}), below "
                f"{FREE_KEY} ({_human(self.min_free)}); free disk space there, or lower {FREE_KEY}")


def file_charge(size: int) -> int:
    """What a file of `size` bytes written in one go will be charged: whole 4 KiB blocks."""
    return -(-size // _BLOCK) * _BLOCK
