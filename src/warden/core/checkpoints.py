"""Checkpoints and versions of a workspace: what is saved, the manifest, the rollback plan and
retention (pure).

A checkpoint is a manifest — one entry per folder, file and symlink of the workspace's content
— whose files point at content-addressed objects (sha256) in Warden's store; a version is one
earlier content of one path, kept when Warden's file API overwrote or deleted it. The adapter
(adapters/versions.py) reads and writes by descriptor; this module only decides, so every rule
is tested without a disk.

What is content: everything in the workspace folder except
- `.venv` and `node_modules` (at any depth): environments Warden links to shared layers, or a
  package manager rebuilds from the recorded manifests; large, and not the person's work;
- Warden's own files (`.warden/`, `.workspace.json`, `.workspace_configured`) and the shell rc
  files every run sees read-only (core/policy.py PROTECTED_WORKSPACE_PATHS), which blobs and bot
  writes may not touch either;
- git control data: any entry named `.git` (any letter case, any depth), anything gitguard
  moved aside (`*.warden-quarantined`), and the `HEAD` of a folder that looks like a repository
  (`HEAD` beside `refs`/`objects`/`commondir`). A person's repository is theirs and git keeps its
  own history; a bot's would make the person's `git` run programs it names (core/gitcontrol.py),
  and a rollback must never write one back. Leaving out the look-alike's `HEAD` is enough: without
  it no folder is a repository to git;
- Warden's temporary files (`*.warden-tmp`, a write cut short), never saved; a whole rollback
  removes them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from warden.core.errors import InvalidInput
from warden.core.gitcontrol import QUARANTINE_SUFFIX, is_git_name, looks_like_git_dir
from warden.core.policy import PROTECTED_WORKSPACE_PATHS

__all__ = [
    "ENV_NAMES",
    "FORMAT",
    "STABLE_NS",
    "Current",
    "Entry",
    "Manifest",
    "RollbackPlan",
    "Version",
    "check_id",
    "excluded",
    "excluded_name",
    "git_heads",
    "is_temp",
    "normalize_scope",
    "plan_rollback",
    "retain",
]

FORMAT = 1
# Environments (links to shared layers, or rebuilt by a package manager): never content.
ENV_NAMES = frozenset({".venv", "node_modules"})
_PROTECTED_TOP = frozenset(p.strip("/") for p in PROTECTED_WORKSPACE_PATHS)
_TEMP_SUFFIX = ".warden-tmp"
# A file's stat stamp (inode, size, mtime, ctime) may stand for its content only when its ctime
# was this much older than the moment it was read: a change in the same clock tick as the read
# would otherwise keep the stamp (git's "racy clean" problem). ctime cannot be set by a user.
# "Older than the capture" is older than its writeback of the filesystem (adapters/versions.py):
# a write through a mapping dirtied before it would change no stamp.
STABLE_NS = 2_000_000_000
_ID = re.compile(r"^[0-9a-f]{4,32}$")

Kind = Literal["file", "dir", "symlink"]


def excluded(parts: Sequence[str]) -> bool:
    """Whether workspace path `parts` (`["src", "a.py"]`) is outside what checkpoints hold."""
    return any(excluded_name(p, top=i == 0) for i, p in enumerate(parts))


def excluded_name(name: str, *, top: bool) -> bool:
    """Whether an entry named `name` (in the workspace's top folder when `top`) is left out,
    whatever its folder: a walk checks each name once, not each whole path again (a bot can nest
    folders thousands deep)."""
    return (top and name in _PROTECTED_TOP) or name in ENV_NAMES or is_git_name(name) or QUARANTINE_SUFFIX in name


def is_temp(name: str) -> bool:
    """A temporary file of Warden's atomic writes (adapters/safefs/root.py), cut short."""
    return name.endswith(_TEMP_SUFFIX)


def git_heads(folder: str, names: Iterable[str]) -> set[str]:
    """The paths to leave out of folder `folder` holding `names`: its `HEAD` when it looks like
    a repository to git."""
    listed = set(names)
    if not looks_like_git_dir(listed):
        return set()
    return {f"{folder}/HEAD" if folder else "HEAD"}


def normalize_scope(path: str | None) -> str | None:
    """A `--path` as a manifest path (`src/app`, no leading slash); None for the whole workspace."""
    if path is None:
        return None
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if any(p == ".." or "\0" in p for p in parts):
        raise InvalidInput(f"bad path {path!r}: give a path inside the workspace, without '..'")
    if not parts:
        return None
    if excluded(parts):
        raise InvalidInput(f"{path} is not part of checkpoints (environments, Warden's files and git "
                           "data are left out); give another path")
    return "/".join(parts)


def within_scope(path: str, scope: str | None) -> bool:
    return scope is None or path == scope or path.startswith(scope + "/")


def check_id(text: str) -> str:
    """A checkpoint or version id as typed (a unique prefix of at least 4 hex digits is enough)."""
    if not _ID.match(text):
        raise InvalidInput(f"bad id {text!r}: give the id `warden checkpoints NAME` shows (hex digits)")
    return text


@dataclass(frozen=True)
class Entry:
    """One folder, file or symlink of a checkpoint. `digest` is a file's sha256 (hex), `target` a
    link's text; `stamp` (inode, size, mtime_ns, ctime_ns) is what the file looked like when read,
    kept only when it was stable (STABLE_NS), so an unchanged file need not be read again."""

    path: str
    kind: Kind
    mode: int
    size: int = 0
    digest: str = ""
    target: str = ""
    stamp: tuple[int, int, int, int] | None = None

    def to_json(self) -> list[object]:
        data = self.digest if self.kind == "file" else self.target
        return [self.path, self.kind, self.mode, self.size, data, list(self.stamp) if self.stamp else None]

    @classmethod
    def from_json(cls, raw: object) -> Entry:
        if not isinstance(raw, list) or len(raw) != 6:
            raise ValueError("bad manifest entry")
        path, kind, mode, size, data, stamp = raw
        if kind not in ("file", "dir", "symlink") or not isinstance(path, str) or not isinstance(data, str):
            raise ValueError("bad manifest entry")
        parent, _, name = path.rpartition("/")
        if not name or name in (".", "..") or "\0" in name or excluded_name(name, top=not parent):
            raise ValueError(f"bad manifest path {path!r}")
        if kind == "file" and not re.fullmatch(r"[0-9a-f]{64}", data):
            raise ValueError("bad manifest digest")
        return cls(path, kind, int(mode) & 0o7777, int(size), data if kind == "file" else "",
                   data if kind == "symlink" else "",
                   tuple(int(x) for x in stamp) if isinstance(stamp, list) and len(stamp) == 4 else None)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Manifest:
    """One checkpoint: when, who, why, and the entries it holds (sorted by path)."""

    id: str
    workspace: str
    workspace_id: str
    created_at: str
    message: str
    actor: str
    entries: tuple[Entry, ...] = field(repr=False)
    added_bytes: int = 0  # what the store grew by: objects no earlier checkpoint or version held

    @property
    def files(self) -> int:
        return sum(1 for e in self.entries if e.kind == "file")

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries if e.kind == "file")

    def summary(self) -> dict[str, object]:
        return {"id": self.id, "workspace": self.workspace, "created_at": self.created_at,
                "message": self.message, "actor": self.actor, "files": self.files, "size": self.size,
                "added_bytes": self.added_bytes}

    def to_json(self) -> dict[str, object]:
        return {"format": FORMAT, "id": self.id, "workspace": self.workspace, "workspace_id": self.workspace_id,
                "created_at": self.created_at, "message": self.message, "actor": self.actor,
                "added_bytes": self.added_bytes, "entries": [e.to_json() for e in self.entries]}

    @classmethod
    def from_json(cls, raw: Mapping[str, object]) -> Manifest:
        if raw.get("format") != FORMAT:
            raise ValueError(f"unknown manifest format {raw.get('format')!r}")
        entries = raw.get("entries")
        if not isinstance(entries, list):
            raise ValueError("manifest without entries")
        parsed = tuple(Entry.from_json(e) for e in entries)
        # Each entry checked its own name; its folders must be entries (checked the same way) too,
        # so no path of a manifest lies in or below what checkpoints leave out.
        folders = {e.path for e in parsed if e.kind == "dir"}
        for entry in parsed:
            parent = entry.path.rpartition("/")[0]
            if parent and parent not in folders:
                raise ValueError(f"manifest entry {entry.path!r} without its folder")
        return cls(str(raw["id"]), str(raw["workspace"]), str(raw["workspace_id"]), str(raw["created_at"]),
                   str(raw.get("message", "")), str(raw.get("actor", "")),
                   parsed, int(raw.get("added_bytes", 0)))  # type: ignore[call-overload]


@dataclass(frozen=True)
class Current:
    """What a path of the workspace is now (from lstat, no link followed)."""

    kind: str  # file, dir, symlink, other (fifo, socket, device: always replaced or removed)
    mode: int
    stamp: tuple[int, int, int, int] = (0, 0, 0, 0)
    target: str = ""


@dataclass(frozen=True)
class RollbackPlan:
    """What a rollback does, in order: remove (deepest first), make folders (parents first),
    write files and links, then set folder modes (deepest first, so a read-only folder is
    filled before it closes)."""

    remove: tuple[str, ...]
    mkdirs: tuple[str, ...]
    writes: tuple[Entry, ...]
    chmods: tuple[tuple[str, int], ...]
    dir_modes: tuple[tuple[str, int], ...]

    @property
    def empty(self) -> bool:
        return not (self.remove or self.mkdirs or self.writes or self.chmods or self.dir_modes)

    def counts(self) -> dict[str, int]:
        return {"removed": len(self.remove), "written": len(self.writes) + len(self.chmods),
                "folders": len(self.mkdirs)}


def _depth_first(paths: Iterable[str]) -> list[str]:
    return sorted(paths, key=lambda p: (-p.count("/"), p))


def plan_rollback(current: Mapping[str, Current], target: Iterable[Entry], scope: str | None,
                  digests: Mapping[str, str] | None = None) -> RollbackPlan:
    """Turn the tree `current` (the workspace now, within `scope`) into `target` (a checkpoint's
    entries) for `scope` (None: the whole workspace's content). Nothing outside `scope` is
    touched; a parent folder the scope needs is made when missing. `digests`: the content of the
    workspace's files as just captured (path → digest), for those whose stamp cannot tell."""
    digests = digests or {}
    wanted = {e.path: e for e in target if within_scope(e.path, scope)}
    remove: set[str] = set()
    mkdirs: list[str] = []
    writes: list[Entry] = []
    chmods: list[tuple[str, int]] = []
    dir_modes: list[tuple[str, int]] = []
    for path, found in current.items():
        if not within_scope(path, scope):
            continue
        wants = wanted.get(path)
        if wants is None or (found.kind == "dir") != (wants.kind == "dir") or found.kind == "other":
            remove.add(path)
    # Only the top of a removed subtree is removed: its contents go with it. In tree order a
    # folder's contents follow it, so one pass finds the tops and what goes with them (no walk up
    # each path: a bot can nest folders thousands deep).
    tops: set[str] = set()
    cover = None
    for path in sorted(remove, key=_tree_order):
        if cover is not None and path.startswith(cover):
            continue
        tops.add(path)
        cover = path + "/"
    gone: set[str] = set()
    cover = None
    for path in sorted(current, key=_tree_order):
        if path in tops:
            cover = path + "/"
            gone.add(path)
        elif cover is not None and path.startswith(cover):
            gone.add(path)
        else:
            cover = None
    if scope is not None:
        for parent in _parents(scope):
            there = current.get(parent)
            if there is None or there.kind != "dir":
                mkdirs.append(parent)  # made (replacing a file or link there) so the scope has a home
    for path in sorted(wanted):
        want = wanted[path]
        now = None if path in gone else current.get(path)
        if want.kind == "dir":
            if now is None:
                mkdirs.append(path)
                dir_modes.append((path, want.mode))
            elif now.mode != want.mode:
                dir_modes.append((path, want.mode))
        elif want.kind == "symlink":
            if now is None or now.kind != "symlink" or now.target != want.target:
                writes.append(want)
        elif now is None or now.kind != "file" or (
                (want.stamp is None or now.stamp != want.stamp) and digests.get(path) != want.digest):
            # A file changed within STABLE_NS of its capture has no stamp to trust: the content
            # just captured says whether it holds these bytes. Without it, a rollback to a
            # checkpoint of an unchanged workspace rewrote every file saved in the last seconds
            # (their mtimes new, "3 written" of nothing).
            writes.append(want)
        elif now.mode != want.mode:
            chmods.append((path, want.mode))
    dir_modes.sort(key=lambda item: (-item[0].count("/"), item[0]))
    return RollbackPlan(tuple(_depth_first(tops)), tuple(mkdirs), tuple(writes), tuple(chmods), tuple(dir_modes))


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _tree_order(path: str) -> list[str]:
    return path.split("/")


@dataclass(frozen=True)
class Version:
    """One earlier content of one workspace path, kept when Warden's file API replaced or removed it."""

    id: str
    path: str  # workspace path as the file API names it (`/notes/a.txt`)
    created_at: str
    actor: str
    op: str  # write, delete, move
    size: int
    digest: str
    mode: int

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "path": self.path, "created_at": self.created_at, "actor": self.actor,
                "op": self.op, "size": self.size, "digest": self.digest, "mode": f"{self.mode:04o}"}

    @classmethod
    def from_json(cls, raw: Mapping[str, object]) -> Version:
        digest = str(raw["digest"])
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ValueError("bad version digest")
        return cls(str(raw["id"]), str(raw["path"]), str(raw["created_at"]), str(raw["actor"]), str(raw["op"]),
                   int(raw["size"]), digest, int(str(raw["mode"]), 8))  # type: ignore[call-overload]


def retain(versions: Sequence[Version], keep: int, max_size: int) -> tuple[list[Version], list[Version]]:
    """(kept, dropped): at most `keep` newest versions of each path, then the oldest dropped until
    the versions' content together is at most `max_size` bytes. `versions` is oldest first."""
    per_path: dict[str, int] = {}
    kept: list[Version] = []
    dropped: list[Version] = []
    for version in reversed(versions):  # newest first
        count = per_path.get(version.path, 0)
        if count < keep:
            per_path[version.path] = count + 1
            kept.append(version)
        else:
            dropped.append(version)
    kept.reverse()
    # Content kept twice (the same bytes at two paths or times) is stored once: count it once.
    sizes: dict[str, int] = {}
    for version in kept:
        sizes[version.digest] = version.size
    total = sum(sizes.values())
    while kept and total > max_size:
        oldest = kept.pop(0)
        dropped.append(oldest)
        if all(v.digest != oldest.digest for v in kept):
            total -= oldest.size
    dropped.sort(key=lambda v: v.created_at)
    return kept, dropped
