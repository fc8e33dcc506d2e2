"""Files in a workspace, the path-policy files, disk quota, settings and the home's key files."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from warden.core.ports.registry import Clock

if TYPE_CHECKING:
    from warden.core.changes import Coalescer
    from warden.core.context import TerminalContext
    from warden.core.quota import Quota, Usage

__all__ = [
    "ConfigFile",
    "DiskUsage",
    "FileEntry",
    "HomeFiles",
    "KeyFiles",
    "MountJudge",
    "PolicyFiles",
    "QuotaWatch",
    "SafeRoots",
    "StateDocs",
    "TerminalStore",
    "WorkspaceRoot",
]


class FileEntry(Protocol):
    """One directory entry or stat result; a link is a link, its target is never read."""

    @property
    def name(self) -> str: ...

    @property
    def type(self) -> str:
        """file, dir, symlink, fifo, socket, device, other"""
        ...

    @property
    def size(self) -> int: ...

    @property
    def mode(self) -> int: ...

    @property
    def mtime(self) -> float: ...

    @property
    def nlink(self) -> int: ...

    def to_json(self) -> dict[str, object]: ...


class WorkspaceRoot(Protocol):
    """A workspace folder held open: every path beneath it is opened without following links."""

    def read_bytes(self, path: str, *, room: Callable[[int], None] | None = None) -> bytes:
        """The file's bytes; `room(size)` is told its size before they are read (it may refuse)."""
        ...

    def open_file(self, path: str, *, room: Callable[[int], None] | None = None) -> tuple[int, int]:
        """(A descriptor of the regular file, its size); `room(size)` as read_bytes calls it. The
        caller reads and closes it."""
        ...

    def read_pieces(self, path: str, take: Callable[[bytes, int], bool], *, piece: int = 1 << 20) -> int:
        """The file handed to `take(piece, size)` a piece at a time until it returns False; the
        bytes read."""
        ...

    def read_text(self, path: str, encoding: str = "utf-8") -> str: ...

    def stat(self, path: str) -> FileEntry: ...

    def exists(self, path: str) -> bool: ...

    def list(self, path: str) -> Sequence[FileEntry]: ...

    def write_bytes(self, path: str, data: bytes) -> int: ...

    def write_text(self, path: str, text: str, encoding: str = "utf-8") -> int: ...

    def mkdir(self, path: str) -> bool: ...

    def delete(self, path: str, *, recursive: bool = False) -> str: ...

    def move(self, source: str, destination: str, *, sha256: str | None = None) -> str:
        """Rename beneath the root, never replacing the destination; the type of what moved. With
        `sha256`, a file whose bytes must have that digest, placed as a new file (a copy, then the
        source removed), never the inode a process may hold open."""
        ...


class SafeRoots(Protocol):
    def open(self, root: str, *, max_bytes: int | None = None, use_openat2: bool | None = None,
             ) -> contextlib.AbstractContextManager[WorkspaceRoot]:
        """Hold folder `root` open (reads past `max_bytes` refused; `use_openat2` None: where it works)."""
        ...


class PolicyFiles(Protocol):
    """The path lists and zones.yaml on disk: read without following links, changed under a lock."""

    def read_doc(self, path: str, shown: str | None = None) -> dict[str, object]:
        """A path-list document ({} when the file is missing); its errors name it `shown` when given."""
        ...

    def update_doc(self, path: str, change: Callable[[dict[str, object]], Mapping[str, object]],
                   ) -> dict[str, object]:
        """Read, `change` and write back the document, one writer at a time."""
        ...

    def read_zones_doc(self, path: str, shown: str | None = None) -> object:
        """The parsed zones.yaml (None when missing); its errors name it `shown` when given."""
        ...

    def stamp(self, paths: Sequence[str]) -> tuple[tuple[int, int, int], ...]:
        """What identifies the files' content now, cheaply (to know when a cache is stale)."""
        ...

    def identity(self, paths: Sequence[str]) -> tuple[tuple[int, ...], ...]:
        """What each path is now, its links not followed: device, inode, type and mode, size,
        modification and change times (zeros where nothing is). Any write, rename or replacement
        changes it: what a decision read from the files may be kept by. A path changed within the
        last second is unequal to any identity given before (its clock may not yet show the next)."""
        ...

    def is_link(self, path: str) -> bool: ...

    def make_folder(self, path: str) -> None:
        """Make folder `path` (mode 0755) unless it is there."""
        ...


class MountJudge(Protocol):
    """Judging a host folder a person allows (`sandbox add`) by what it is, not by its name."""

    def judge(self, path: str, *, home: str, workspaces_root: str, own_workspace: str | None) -> str | None:
        """Why `path` can never be mounted (a link on its way, Warden's state inside), or None."""
        ...


class QuotaWatch(Protocol):
    """One run's watch over its workspace's disk use (enter it to measure, then `arm` it)."""

    @property
    def start(self) -> Usage: ...

    @property
    def breach(self) -> str | None:
        """The setting the workspace passed (the run was stopped), or None."""
        ...

    @property
    def at(self) -> Usage | None: ...

    @property
    def notes(self) -> list[str]: ...

    @property
    def changes(self) -> Coalescer | None:
        """What the run changed in the workspace (core.changes), None where it was not watched."""
        ...

    def arm(self, stop: Callable[[], None]) -> None:
        """Once the command runs: watch from now on, counting what it wrote since the entry, and
        call `stop` (once) when the workspace passes its quota, at once if it has already."""
        ...

    def take(self) -> bool:
        """Before `arm`: whether the caller's loop keeps the watch from now on (core.runs.RunWatch),
        so that `arm` starts no thread."""
        ...

    def fileno(self) -> int: ...

    def due(self) -> float | None: ...

    def look(self) -> None: ...

    def __enter__(self) -> QuotaWatch: ...

    def __exit__(self, *exc: object) -> None: ...


class DiskUsage(Protocol):
    """What workspace folders hold on disk, and how full the disk under Warden's home is."""

    def nearest_existing(self, path: str) -> str:
        """`path`, or its nearest ancestor that exists (the home may not be made yet)."""
        ...

    def free_bytes(self, path: str) -> int:
        """Bytes an unprivileged writer may still use on the filesystem holding `path`."""
        ...

    def measure(self, root: str) -> Usage:
        """What folder `root` (links resolved first) holds now, in whole blocks, links not followed."""
        ...

    def watch(self, root: str, quota: Quota, *, home: str) -> QuotaWatch: ...


class ConfigFile(Protocol):
    """$WARDEN_HOME/config.toml."""

    def read(self) -> dict[str, object]:
        """The file's tables ({} when there is none); InvalidInput when it is not TOML."""
        ...

    def set_value(self, key: str, value: object) -> None:
        """Set dotted `key` in the file (made, with its folder, when missing), comments kept."""
        ...


class HomeFiles(Protocol):
    """The folders and marker files of $WARDEN_HOME."""

    def make_folder(self, path: str, mode: int) -> bool:
        """Make folder `path` (and its parents) unless it exists; True when it was made."""
        ...

    def create_config(self, path: str, text: str) -> bool:
        """Write a new config file (mode 0600) unless one exists; True when it was made."""
        ...

    def mark(self, clock: Clock) -> bool:
        """Mark the home set up (from then on a lost registry or key file is an error); True when new."""
        ...


class KeyFiles(Protocol):
    """The token pepper and secrets master key files."""

    def ensure(self) -> list[str]:
        """Create the key files that are missing; their names."""
        ...

    def reset(self, stamp: str) -> list[str]:
        """New keys; the old files kept in keys/replaced-`stamp`/."""
        ...


class TerminalStore(Protocol):
    """Each terminal's working context (core/context.py), kept in the home."""

    def read(self, terminal: str) -> TerminalContext: ...

    def change(self, terminal: str, how: Callable[[TerminalContext], TerminalContext]) -> TerminalContext:
        """Apply `how` to the stored context atomically (one change at a time per terminal)."""
        ...


class StateDocs(Protocol):
    """Small JSON documents of the home, one per key (a workspace's saved states)."""

    def read(self, key: str) -> dict[str, object]: ...

    def change(self, key: str, how: Callable[[dict[str, object]], dict[str, object]]) -> dict[str, object]:
        """Apply `how` to the stored document atomically (one change at a time per key)."""
        ...
