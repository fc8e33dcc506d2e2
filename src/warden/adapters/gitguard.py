"""Keeping a person's `git` from running a bot's program (see core/gitcontrol for the why).

Around every bot activity in a workspace (a run, a file-API write, a blob), Warden:
- before: finds the git control structures (`.git` entries at any depth, folders that look
  like repositories); those it has not seen before and that appeared while no bot was active
  are the person's, and their inodes are recorded; the person's `.git` entries are then bound
  read-only into the sandbox;
- after: finds them again and moves aside (renames `NAME.warden-quarantined-XXXX`, and a
  repository look-alike's `HEAD` likewise) every one whose inode is not the person's, so
  nothing a bot wrote is ever taken by git for a repository.

State (`<ws>/.warden/git.json`: the person's inodes and the runs in progress with their pid)
is read-modified-written under an exclusive flock; `.warden/` is read-only to bots. A run
that died before its sweep stays listed with a dead pid, so the next activity treats every
unknown structure as the bot's. The walk is by descriptors, never following a link.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from warden.adapters.atomic import write_atomic
from warden.adapters.processes import alive, start_time
from warden.adapters.safefs import SafeRoot
from warden.core.errors import WardenError
from warden.core.gitcontrol import QUARANTINE_SUFFIX, GitControl, is_git_name, judge, looks_like_git_dir

__all__ = ["GitGuard", "GitSweep", "scan"]

STATE_DIR = ".warden"
STATE_FILE = "git.json"
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
PATH_MAX = 4096


@dataclass(frozen=True)
class GitSweep:
    """What one sweep found: the person's `.git` paths (to protect) and what it moved aside."""

    protected: tuple[str, ...]
    quarantined: tuple[str, ...]


def scan(workspace: str) -> list[GitControl]:
    """Every git control structure beneath `workspace`, without following links or entering
    any `.git` (the person's are read-only to bots; a bot's is moved aside whole).

    Folders are opened from the workspace's descriptor (openat2, no link at any depth), one at
    a time, so a deep tree needs no descriptor per level. Folders whose absolute path passes
    PATH_MAX are not entered: git cannot run there (getcwd fails), so nothing there can steer it.
    """
    found: list[GitControl] = []
    try:
        root = SafeRoot.open(workspace)
    except WardenError:
        return found
    room = PATH_MAX - len(workspace.rstrip("/")) - 1
    with root:
        stack = [""]
        while stack:
            rel = stack.pop()
            try:
                fd = root.open_dir(rel)
            except (OSError, WardenError):
                continue  # became a link or vanished: a link is never entered
            try:
                stack += _list(fd, rel, found, room)
            finally:
                os.close(fd)
    return found


def _list(fd: int, rel: str, found: list[GitControl], room: int) -> list[str]:
    """Note the structures in folder `rel` (open as `fd`); its subfolders to visit."""
    subdirs: list[str] = []
    names: set[str] = set()
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                names.add(entry.name)
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                path = f"{rel}/{entry.name}" if rel else entry.name
                if is_git_name(entry.name):
                    found.append(GitControl(path, "dotgit", info.st_dev, info.st_ino))
                elif stat.S_ISDIR(info.st_mode) and len(path) < room:
                    subdirs.append(path)
    except OSError:
        return []
    if rel and looks_like_git_dir(names):
        info = os.fstat(fd)
        found.append(GitControl(rel, "gitdir", info.st_dev, info.st_ino))
    return subdirs


def _quarantine(workspace: str, item: GitControl) -> str | None:
    """Move `item` aside by descriptor; the new workspace-relative path, or None if it went away."""
    parent_rel, _, name = item.path.rpartition("/")
    if item.kind == "gitdir":
        # The folder is the bot's to name; only its HEAD makes git take it for a repository.
        parent_rel, name = item.path, "HEAD"
    try:
        dfd = os.open(workspace, _DIR)
    except OSError:
        return None
    try:
        for part in [p for p in parent_rel.split("/") if p]:
            nxt = os.open(part, _DIR, dir_fd=dfd)
            os.close(dfd)
            dfd = nxt
        if item.kind == "dotgit":
            # The inode must still be the one judged: a name swapped since is judged next time.
            info = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if (info.st_dev, info.st_ino) != item.identity:
                return None
        new = f"{name}{QUARANTINE_SUFFIX}-{secrets.token_hex(4)}"
        os.rename(name, new, src_dir_fd=dfd, dst_dir_fd=dfd)
        return f"{parent_rel}/{new}" if parent_rel else new
    except OSError:
        return None
    finally:
        os.close(dfd)


class GitGuard:
    """The git-control guard of one workspace folder."""

    def __init__(self, workspace: str) -> None:
        self.workspace = workspace
        self._state_dir = os.path.join(workspace, STATE_DIR)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, object]]:
        os.makedirs(self._state_dir, mode=0o755, exist_ok=True)
        lock = os.open(os.path.join(self._state_dir, STATE_FILE + ".lock"),
                       os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self._read()
            yield state
            write_atomic(Path(self._state_dir, STATE_FILE), json.dumps(state).encode())
        finally:
            os.close(lock)

    def _read(self) -> dict[str, object]:
        path = os.path.join(self._state_dir, STATE_FILE)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return {"known": [], "active": {}}
        try:
            raw = os.read(fd, 1 << 22) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        finally:
            os.close(fd)
        try:
            state = json.loads(raw or b"{}")
        except ValueError:
            state = {}
        if not isinstance(state, dict):
            state = {}
        # A damaged state file knows no person's structures and an unknown run: the safe side.
        state.setdefault("known", [])
        state.setdefault("active", {"unknown": 0} if raw else {})
        return state

    def _sweep(self, state: dict[str, object], *, bot_active: bool) -> GitSweep:
        keep, suspect = judge(scan(self.workspace), _known(state), bot_active=bot_active)
        moved = [new for item in suspect if (new := _quarantine(self.workspace, item)) is not None]
        # Only what is there now stays known: an inode freed by the person's `rm -rf` must not
        # vouch for a bot's new folder that happens to get it.
        state["known"] = [list(k) for k in sorted({k.identity for k in keep})]
        return GitSweep(tuple(k.path for k in keep if k.kind == "dotgit"), tuple(moved))

    def defuse(self, folders: list[str] | None = None) -> GitSweep:
        """After a bot's file write or a blob: quarantine what is not the person's, in `folders`
        (workspace-relative; "" is the root) or, with None, anywhere."""
        if folders is not None:
            found = [item for rel in folders for item in _scan_folder(self.workspace, rel)]
            if not found:
                return GitSweep((), ())  # the common case: no lock, no state written
        with self._locked() as state:
            if folders is None:
                return self._sweep(state, bot_active=True)
            known = _known(state)
            moved = [new for item in found
                     if item.identity not in known and (new := _quarantine(self.workspace, item))]
            return GitSweep((), tuple(moved))

    def before(self, run_id: str) -> GitSweep:
        """Before bot activity: record the person's new structures (or, after a run that died
        unswept, quarantine unknown ones) and register the activity."""
        with self._locked() as state:
            active = state.get("active")
            active = dict(active) if isinstance(active, dict) else {}
            bot_active = any(not _alive(pid) for pid in active.values()) or bool(active)
            sweep = self._sweep(state, bot_active=bot_active)
            active = {k: v for k, v in active.items() if _alive(v)}
            active[run_id] = _me()
            state["active"] = active
        return sweep

    def after(self, run_id: str) -> GitSweep:
        """After bot activity: quarantine every structure that is not the person's."""
        with self._locked() as state:
            sweep = self._sweep(state, bot_active=True)
            active = state.get("active")
            active = dict(active) if isinstance(active, dict) else {}
            active.pop(run_id, None)
            state["active"] = {k: v for k, v in active.items() if _alive(v)}
        return sweep


def _known(state: dict[str, object]) -> set[tuple[int, int]]:
    raw = state.get("known")
    if not isinstance(raw, list):
        return set()
    return {(k[0], k[1]) for k in raw
            if isinstance(k, list) and len(k) == 2 and all(isinstance(v, int) for v in k)}


def _scan_folder(workspace: str, rel: str) -> list[GitControl]:
    """The git control structures in one folder of the workspace (not below it)."""
    found: list[GitControl] = []
    try:
        with SafeRoot.open(workspace) as root:
            fd = root.open_dir(rel)
    except (OSError, WardenError):
        return found
    try:
        _list(fd, rel, found, 0)
    finally:
        os.close(fd)
    return found


def _me() -> list[int]:
    """This process as a run registration: (pid, start time), so a reused pid is not mistaken."""
    return [os.getpid(), start_time(os.getpid()) or 0]


def _alive(entry: object) -> bool:
    """Whether the Warden process of a registered run still lives."""
    if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(v, int) for v in entry)):
        return False
    return alive(int(entry[0]), int(entry[1]))
