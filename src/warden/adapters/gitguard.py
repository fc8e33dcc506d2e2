"""Keeping a person's `git` from running a bot's program (see core/gitcontrol for the why).

Around every bot activity in a workspace (a run, a file-API write, a blob), Warden:
- before: finds the git control structures (`.git` entries at any depth, folders that look
  like repositories); those it has not seen before and that appeared while no bot was active
  are the person's, and their inodes are recorded; the person's `.git` entries are then bound
  read-only into the sandbox;
- after: finds them again and moves aside (renames `NAME.warden-quarantined-XXXX`, and a
  repository look-alike's `HEAD` likewise) every one whose inode is not the person's, so
  nothing a bot wrote is ever taken by git for a repository.

State (`<ws>/.warden/git.json`: the inodes of the person's structures) is written only when it
changes, read-modified-written under an exclusive flock; `.warden/` is read-only to bots.
Whether a bot was active since the last sweep (another run in progress, or one that died
before its sweep) is the caller's to say, from the registry's runs in progress: then every
unknown structure is the bot's. The walk is by descriptors, never following a link.

A workspace whose inotify-watched tree a past run in this process kept (adapters/quota.py) is
not walked whole again: its events name every entry made, removed or moved since the last
sweep, and only those folders are listed again (`scan_again`), with exactly the findings of a
full walk. Whatever the tree cannot vouch for (none kept, dropped events, a folder it does not
watch, a replaced workspace folder, a folder given by descriptor) is walked whole.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path

from warden.adapters.atomic import write_atomic
from warden.adapters.disk_usage import UsageTree
from warden.adapters.quota import kept_tree
from warden.adapters.safefs import SafeRoot
from warden.core.errors import WardenError
from warden.core.gitcontrol import QUARANTINE_SUFFIX, GitControl, GitSweep, is_git_name, judge, looks_like_git_dir

__all__ = ["GitGuard", "GitSweep", "HostGitDefuser", "HostGitGuards", "scan", "scan_again"]

STATE_DIR = ".warden"
STATE_FILE = "git.json"
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
PATH_MAX = 4096


Root = str | int  # a folder's path, or an open descriptor of it (an allowed path judged by inode)


def _root_fd(root: Root) -> int:
    """A new read descriptor of the root folder: a path is opened without following a final
    link; a descriptor (possibly O_PATH) is reopened through /proc, so it is that very inode."""
    if isinstance(root, int):
        return os.open(f"/proc/self/fd/{root}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return os.open(root, _DIR)
    except PermissionError:
        # The bot took the bits off the folder itself (see _open_folder): they come back.
        handle = os.open(root, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _open_up(handle)
        finally:
            os.close(handle)
        return os.open(root, _DIR)


def _open_up(fd: int) -> None:
    """Give u+rwx back to a folder of ours (open as O_PATH `fd`) that a bot closed off, through
    /proc/self/fd: the very inode, never a name a link could redirect."""
    info = os.fstat(fd)
    if not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(fd)
    if info.st_uid == os.geteuid() and info.st_mode & 0o700 != 0o700:
        os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(info.st_mode) | 0o700)


def scan(workspace: Root) -> list[GitControl]:
    """Every git control structure beneath `workspace`, without following links or entering
    any `.git` (the person's are read-only to bots; a bot's is moved aside whole).

    Folders are opened from the workspace's descriptor (openat2, no link at any depth), one at
    a time, so a deep tree needs no descriptor per level. Folders whose absolute path passes
    PATH_MAX are not entered: git cannot run there (getcwd fails), so nothing there can steer it.
    """
    try:
        fd = _root_fd(workspace)
    except OSError:
        return []
    listed = _Listed()
    with SafeRoot(fd) as root:
        _walk(root, fd, _room(fd), [""], listed)
    return listed.items()


def _room(root_fd: int) -> int:
    """How long a workspace-relative path may be for git to run there (see scan)."""
    return PATH_MAX - len(os.readlink(f"/proc/self/fd/{root_fd}").rstrip("/")) - 1


class _Listed:
    """What a sweep entered: each folder listed (workspace-relative, "" the root) with the
    subfolders it entered from there (name: inode), and the structures each listing found."""

    def __init__(self) -> None:
        self.folders: dict[str, dict[str, int]] = {}
        self.found: dict[str, list[GitControl]] = {}
        # False when a folder could not be opened or listed: what is in it may change with no
        # event to tell (its mode, say), so this listing is not kept for the next sweep.
        self.certain = True

    def items(self) -> list[GitControl]:
        return [item for found in self.found.values() for item in found]

    def drop(self, rel: str) -> None:
        """Forget folder `rel` and everything listed beneath it."""
        stack = [rel]
        while stack:
            top = stack.pop()
            self.found.pop(top, None)
            stack += [_join(top, name) for name in self.folders.pop(top, {})]


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


def _walk(root: SafeRoot, root_fd: int, room: int, starts: list[str], listed: _Listed,
          walked: set[str] | None = None) -> None:
    """List each of `starts` and every folder beneath, into `listed` (and their paths into `walked`)."""
    stack = list(starts)
    while stack:
        rel = stack.pop()
        if walked is not None:
            walked.add(rel)
        try:
            folder = _open_folder(root, root_fd, rel)
        except (OSError, WardenError):
            listed.certain = False
            continue  # became a link or vanished: a link is never entered
        try:
            found, subdirs, whole = _list(folder, rel, room)
        finally:
            os.close(folder)
        listed.certain &= whole
        listed.folders[rel] = subdirs
        if found:
            listed.found[rel] = found
        stack += [_join(rel, name) for name in subdirs]


# The last sweep's listing of each workspace whose watched tree a run kept (adapters/quota): it
# holds as long as that tree's inotify stream, which says what changed since, so it goes with it.
_LAST: weakref.WeakKeyDictionary[UsageTree, _Listed] = weakref.WeakKeyDictionary()


def scan_again(workspace: Root) -> list[GitControl]:
    """What scan(workspace) finds, listing again only the folders whose entries were made, removed
    or moved since this process's last sweep of it, as the quota watcher's kept tree of the
    workspace tells; a full scan wherever that tree cannot tell for sure.

    The kept tree's events are read continuously from its first walk (the kernel queues them
    between runs; dropped ones end the tree), so a listing kept with it misses no change. A
    folder given by descriptor (an allowed path) is scanned whole.
    """
    if not isinstance(workspace, str):
        return scan(workspace)
    with kept_tree(workspace) as tree:
        if tree is None:
            return scan(workspace)
        return _scan_watched(workspace, tree)


def _scan_watched(workspace: str, tree: UsageTree) -> list[GitControl]:
    last = _LAST.pop(tree, None)
    # What the events tell from here on is the next sweep's to look at.
    touched, tree.touched = tree.touched, set()
    try:
        fd = _root_fd(workspace)
    except OSError:
        return []
    with SafeRoot(fd) as root:
        info, room = os.fstat(fd), _room(fd)
        same_root = (info.st_dev, info.st_ino) == (tree.dev, tree.root_ino)
        fresh: set[str] = set()  # the folders listed by this sweep
        if last is not None and touched is not None and same_root and tree.unwatched is None:
            _update(root, fd, room, last, _touched_folders(workspace, touched), fresh)
        else:
            last = None
        if last is None or not last.certain:
            last, fresh = _Listed(), set()
            _walk(root, fd, room, [""], last, fresh)
    # The folders listed before were watched then, and no watch goes without an event that
    # touches the folder's name (disk_usage.UsageTree.handle): only the ones listed now need a look.
    if same_root and last.certain and tree.unwatched is None and _watched(last, fresh, tree):
        _LAST[tree] = last
    return last.items()


def _touched_folders(workspace: str, touched: set[tuple[str, str]]) -> dict[str, set[str]]:
    """The names touched in each folder, by workspace-relative folder path."""
    folders: dict[str, set[str]] = {}
    prefix = workspace + "/"
    for folder, name in touched:
        if folder == workspace:
            rel = ""
        elif folder.startswith(prefix):
            rel = folder[len(prefix):]
        else:
            continue
        folders.setdefault(rel, set()).add(name)
    return folders


def _update(root: SafeRoot, root_fd: int, room: int, listed: _Listed, touched: dict[str, set[str]],
            fresh: set[str]) -> None:
    """List again each folder of `listed` whose entries were touched, shallowest first; a touched
    subfolder (made, moved in, or its name reused) is listed whole, a gone one forgotten whole.
    Folders `listed` does not hold (inside a `.git`, too deep, beneath a folder listed whole
    here) need nothing. The folders listed go into `fresh`; `listed.certain` goes False where a
    listing failed: then scan whole."""
    for rel in sorted(touched, key=lambda r: r.count("/") + (r != "")):
        if rel not in listed.folders or rel in fresh:
            continue
        fresh.add(rel)
        try:
            folder = _open_folder(root, root_fd, rel)
        except (OSError, WardenError):
            listed.certain = False
            return
        try:
            found, subdirs, whole = _list(folder, rel, room)
        finally:
            os.close(folder)
        if not whole:
            listed.certain = False
            return
        names, before = touched[rel], listed.folders[rel]
        for name, ino in before.items():
            if name in names or subdirs.get(name) != ino:
                listed.drop(_join(rel, name))
        listed.folders[rel] = subdirs
        listed.found.pop(rel, None)
        if found:
            listed.found[rel] = found
        starts = [_join(rel, name) for name, ino in subdirs.items() if name in names or before.get(name) != ino]
        _walk(root, root_fd, room, starts, listed, fresh)


def _watched(listed: _Listed, fresh: set[str], tree: UsageTree) -> bool:
    """Whether the tree watches each folder of `fresh` that `listed` holds, as the very inode
    listed: else a change there could come with no event, and the listing is not kept."""
    for rel in fresh:
        subdirs = listed.folders.get(rel)
        if subdirs is None:
            continue  # could not be opened: then nothing is kept anyway (listed.certain)
        path = f"{tree.root}/{rel}" if rel else tree.root
        entries = tree.entries.get(path)
        if entries is None or path not in tree.dir_wd:
            return False
        for name, ino in subdirs.items():
            if entries.get(name) != (ino, True):
                return False
    return True


def _open_folder(root: SafeRoot, root_fd: int, rel: str) -> int:
    """Folder `rel`, opened for listing. A bot can take the read or search bit off its own
    folders to hide what is inside from a Warden that is not root: such folders (its own, so
    Warden's too) get u+rwx back, through an O_PATH descriptor (never a name a link could
    redirect), and are opened again."""
    try:
        return root.open_dir(rel)
    except PermissionError:
        pass
    except WardenError as exc:
        if exc.code != "denied":
            raise
    fd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root_fd)
    try:
        for part in ["", *[p for p in rel.split("/") if p]]:
            if part:
                nxt = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = nxt
            _open_up(fd)
    finally:
        os.close(fd)
    return root.open_dir(rel)


def _list(fd: int, rel: str, room: int) -> tuple[list[GitControl], dict[str, int], bool]:
    """The structures in folder `rel` (open as `fd`), its subfolders to visit (name: inode), and
    whether the listing was read whole."""
    found: list[GitControl] = []
    subdirs: dict[str, int] = {}
    names: set[str] = set()
    prefix = len(rel) + 1 if rel else 0
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                name = entry.name
                names.add(name)
                try:
                    # Only a git name needs its inode (an lstat); whether an entry is a folder
                    # comes with the listing (d_type; a link is never one): a node_modules of
                    # 20,000 files costs no syscall per file.
                    if is_git_name(name):
                        info = entry.stat(follow_symlinks=False)
                        found.append(GitControl(_join(rel, name), "dotgit", info.st_dev, info.st_ino))
                    elif entry.is_dir(follow_symlinks=False) and prefix + len(name) < room:
                        subdirs[name] = entry.inode()
                except OSError:
                    continue
    except OSError:
        return found, {}, False
    if looks_like_git_dir(names):  # the root too: git takes the workspace itself for a repository
        info = os.fstat(fd)
        found.append(GitControl(rel, "gitdir", info.st_dev, info.st_ino))
    return found, subdirs, True


def _quarantine(workspace: Root, item: GitControl) -> str | None:
    """Move `item` aside by descriptor; the new workspace-relative path, or None if it went away."""
    parent_rel, _, name = item.path.rpartition("/")
    if item.kind == "gitdir":
        # The folder is the bot's to name; only its HEAD makes git take it for a repository.
        parent_rel, name = item.path, "HEAD"
    try:
        dfd = _root_fd(workspace)
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
        new = f"{name}{QUARANTINE_SUFFIX}-{os.urandom(4).hex()}"
        os.rename(name, new, src_dir_fd=dfd, dst_dir_fd=dfd)
        if item.kind == "dotgit":
            # A renamed .git folder still looks like a repository (HEAD and refs): its HEAD goes
            # too, so git takes it for none even when asked to look inside.
            with contextlib.suppress(OSError):
                inner = os.open(new, _DIR, dir_fd=dfd)
                try:
                    os.rename("HEAD", f"HEAD{QUARANTINE_SUFFIX}", src_dir_fd=inner, dst_dir_fd=inner)
                finally:
                    os.close(inner)
        return f"{parent_rel}/{new}" if parent_rel else new
    except OSError:
        return None
    finally:
        os.close(dfd)


class GitGuard:
    """The git-control guard of one folder: a workspace (its state in its own `.warden/`), or
    an allowed read-write path, given as the descriptor it was judged by, with its state in
    the workspace's `.warden/` under `state_name`."""

    def __init__(self, workspace: Root, *, state_dir: str | None = None, state_name: str = STATE_FILE) -> None:
        self.workspace = workspace
        if state_dir is None:
            if not isinstance(workspace, str):
                raise ValueError("a folder given by descriptor needs a state_dir")
            state_dir = os.path.join(workspace, STATE_DIR)
        self._state_dir = state_dir
        self._state_name = state_name

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, object]]:
        os.makedirs(self._state_dir, mode=0o755, exist_ok=True)
        lock = os.open(os.path.join(self._state_dir, self._state_name + ".lock"),
                       os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self._read()
            yield state
            write_atomic(Path(self._state_dir, self._state_name), json.dumps(state).encode())
        finally:
            os.close(lock)

    def _read(self) -> dict[str, object]:
        path = os.path.join(self._state_dir, self._state_name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return {"known": []}
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
        # A damaged state file knows no person's structures: the safe side.
        state.setdefault("known", [])
        return state

    def _sweep(self, *, bot_active: bool) -> GitSweep:
        known = _known(self._read())
        keep, suspect = judge(scan_again(self.workspace), known, bot_active=bot_active)
        if suspect or {k.identity for k in keep} != known:
            # Something to move aside or to learn: again under the lock, against the state as it
            # is now (another run may have changed it since).
            with self._locked() as state:
                keep, suspect = judge(scan_again(self.workspace), _known(state), bot_active=bot_active)
                moved = tuple(new for item in suspect if (new := _quarantine(self.workspace, item)) is not None)
                # Only what is there now stays known: an inode freed by the person's `rm -rf`
                # must not vouch for a bot's new folder that happens to get it.
                state["known"] = [list(k) for k in sorted({k.identity for k in keep})]
        else:
            moved = ()
        return GitSweep(tuple(k.path for k in keep if k.kind == "dotgit"), moved)

    def defuse(self, folders: list[str] | None = None) -> GitSweep:
        """After a bot's file write or a blob: quarantine what is not the person's, in `folders`
        (workspace-relative; "" is the root) or, with None, anywhere."""
        if folders is None:
            return self._sweep(bot_active=True)
        found = _scan_folders(self.workspace, folders)
        if not found:
            return GitSweep((), ())  # the common case: no lock, no state written
        with self._locked() as state:
            known = _known(state)
            moved = [new for item in found
                     if item.identity not in known and (new := _quarantine(self.workspace, item))]
            return GitSweep((), tuple(moved))

    def before(self, *, bot_active: bool) -> GitSweep:
        """Before bot activity: the person's structures to protect. New ones are the person's
        when no bot was active since the last sweep (`bot_active` False: no other run in
        progress, none that died unswept), else they are moved aside."""
        return self._sweep(bot_active=bot_active)

    def after(self) -> GitSweep:
        """After bot activity: quarantine every structure that is not the person's."""
        return self._sweep(bot_active=True)

    def adopt(self, rel: str) -> None:
        """Record the `.git` folder at workspace path `rel` as the person's: Warden made it for
        them (`warden git clone`), so no sweep moves it aside, even one after a bot's run that
        was going on meanwhile, and runs get it read-only."""
        info = self._lstat(rel)
        if info is None or not stat.S_ISDIR(info.st_mode) or not is_git_name(rel.rpartition("/")[2]):
            raise ValueError(f"{rel} is not a .git folder")
        with self._locked() as state:
            known = _known(state) | {(info.st_dev, info.st_ino)}
            state["known"] = [list(k) for k in sorted(known)]

    def knows(self, rel: str) -> bool:
        """Whether the entry at workspace path `rel` is a folder known as the person's."""
        info = self._lstat(rel)
        return (info is not None and stat.S_ISDIR(info.st_mode)
                and (info.st_dev, info.st_ino) in _known(self._read()))

    def strangers(self) -> list[str]:
        """The git control structures in the folder that are not known as the person's (a bot's
        `.git`, `gitdir:` file or repository look-alike made while one of its processes ran,
        not yet moved aside), as workspace paths; "" is the folder itself."""
        known = _known(self._read())
        return sorted(item.path for item in scan(self.workspace) if item.identity not in known)

    def owns(self, rel: str) -> bool:
        """Whether the entry at workspace path `rel` (a `.git` folder, file or link) is known as
        the person's."""
        info = self._lstat(rel)
        return info is not None and (info.st_dev, info.st_ino) in _known(self._read())

    def _lstat(self, rel: str) -> os.stat_result | None:
        parent, _, name = rel.rpartition("/")
        try:
            fd = _root_fd(self.workspace)
        except OSError:
            return None
        try:
            with SafeRoot(fd) as root:
                folder = root.open_dir(parent) if parent else os.dup(fd)
                try:
                    return os.stat(name, dir_fd=folder, follow_symlinks=False)
                finally:
                    os.close(folder)
        except (OSError, WardenError):
            return None


def _known(state: dict[str, object]) -> set[tuple[int, int]]:
    raw = state.get("known")
    if not isinstance(raw, list):
        return set()
    return {(k[0], k[1]) for k in raw
            if isinstance(k, list) and len(k) == 2 and all(isinstance(v, int) for v in k)}


def _scan_folders(workspace: Root, folders: list[str]) -> list[GitControl]:
    """The git control structures in each of `folders` of the workspace (not below them)."""
    found: list[GitControl] = []
    try:
        root = SafeRoot(_root_fd(workspace))
    except OSError:
        return found
    with root:
        for rel in folders:
            try:
                fd = root.open_dir(rel)
            except (OSError, WardenError):
                continue
            try:
                found += _list(fd, rel, 0)[0]
            finally:
                os.close(fd)
    return found


class HostGitGuards:
    """The git guards of this host's folders (core.ports.GitGuards)."""

    def workspace(self, path: str) -> GitGuard:
        return GitGuard(path)

    def allowed_folder(self, path: str, fd: int, workspace: str) -> GitGuard:
        # One state file per allowed folder, named by its path, in the workspace's `.warden/`
        # (read-only to bots), never in the folder itself.
        import hashlib

        state = "git-" + hashlib.sha256(path.encode()).hexdigest()[:16] + ".json"
        return GitGuard(fd, state_dir=os.path.join(workspace, STATE_DIR), state_name=state)


class HostGitDefuser:
    """The GitDefuser port: bot-made repository look-alikes lose their HEAD after a write or blob."""

    def defuse(self, workspace: str, folders: Sequence[str] | None = None) -> tuple[str, ...]:
        return tuple(GitGuard(workspace).defuse(list(folders) if folders is not None else None).quarantined)
