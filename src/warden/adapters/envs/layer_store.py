"""The on-disk store of env layers: `$WARDEN_HOME/layers/<id>/` with its `layer.json`.

A layer is built in a private `.build-*` folder and renamed into place in one step, so a
crash or a failed build never leaves a half-made layer under its id. After the build every
file and folder loses its write bits: `chmod a-w` keeps honest users (and non-root
Warden) from editing a shared layer in place; inside sandboxes the layer is also mounted
read-only, which binds root too.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from warden.adapters.atomic import write_atomic
from warden.adapters.safefs.rename import exchange

__all__ = ["LayerStore", "make_read_only", "make_writable"]

LAYER_FILE = "layer.json"


def make_read_only(root: Path) -> None:
    """Drop every write bit below `root` (symlinks untouched: their mode means nothing)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o222)
        for name in dirnames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) & ~0o222)
    os.chmod(root, stat.S_IMODE(os.lstat(root).st_mode) & ~0o222)


def make_writable(root: Path) -> None:
    """Give the owner write bits back on folders (needed to delete a layer as non-root)."""
    if not root.exists():
        return
    os.chmod(root, stat.S_IMODE(os.lstat(root).st_mode) | 0o700)
    for dirpath, dirnames, _ in os.walk(root):
        for name in dirnames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) | 0o700)


def tree_digest(root: Path) -> str:
    """SHA-256 over a folder's content: every entry's path, kind, mode and bytes (or link
    target), in a fixed order, links never followed. `layer.json` itself is left out."""
    import hashlib

    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if rel == LAYER_FILE:
                continue
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            digest.update(f"{rel}\0{stat.S_IFMT(st.st_mode)}\0{stat.S_IMODE(st.st_mode) | 0o222}\0".encode())
            if stat.S_ISLNK(st.st_mode):
                digest.update(os.readlink(path).encode())
            elif stat.S_ISREG(st.st_mode):
                with open(path, "rb") as handle:
                    while chunk := handle.read(1 << 20):
                        digest.update(chunk)
            digest.update(b"\0")
        for name in dirnames:
            if not os.path.islink(os.path.join(dirpath, name)):
                digest.update(f"{os.path.normpath(os.path.join(rel_dir, name))}/\0".encode())
    return digest.hexdigest()


class LayerStore:
    """Layers on disk, addressed by id."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, layer_id: str) -> Path:
        return self.root / layer_id

    def exists(self, layer_id: str) -> bool:
        """Whether a whole layer is there (a folder with a layer.json that reads back)."""
        return self.read(layer_id) is not None

    def read(self, layer_id: str) -> dict[str, Any] | None:
        """The layer's layer.json; None when it is missing or not one Warden wrote (garbage,
        another layer's id): such a folder is a broken layer, rebuilt on next use."""
        try:
            data = json.loads((self.root / layer_id / LAYER_FILE).read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("id") != layer_id or not isinstance(data.get("kind"), str):
            return None
        return data

    def all(self) -> list[dict[str, Any]]:
        found = []
        if self.root.is_dir():
            for entry in sorted(self.root.iterdir()):
                if entry.name.startswith((".", "_")) or not entry.is_dir():
                    continue
                data = self.read(entry.name)
                if data is not None:
                    found.append(data)
        return found

    @contextlib.contextmanager
    def build_lock(self, layer_id: str) -> Iterator[None]:
        """One builder per layer id at a time, across processes."""
        fd = self._lock(layer_id, "lock", fcntl.LOCK_EX)
        try:
            yield
        finally:
            os.close(fd)

    def _lock_file(self, layer_id: str, kind: str) -> int:
        """The layer's lock file of `kind`: "lock" (one builder at a time) or "use" (beside it, not
        on it: a create holds its layer while it builds it, and two flocks on one file conflict
        even in one process). Never through a link (the store may be a cache homes share)."""
        self.root.mkdir(parents=True, exist_ok=True)
        return os.open(self.root / f".{layer_id}.{kind}", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                       0o600)

    def _lock(self, layer_id: str, kind: str, operation: int) -> int:
        """The layer's lock file of `kind`, opened and flocked with `operation` (BlockingIOError
        with LOCK_NB when another holds it). A prune removes the file of a layer it removed while
        it holds it exclusively (`_forget_locks`): a process that opened it just before waits on
        a file no longer at its name, so once locked the name is checked to still be that file,
        else the lock is taken again on the one there now."""
        while True:
            fd = self._lock_file(layer_id, kind)
            try:
                fcntl.flock(fd, operation)
                if _same_file(fd, self.root / f".{layer_id}.{kind}"):
                    return fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)

    @contextlib.contextmanager
    def hold(self, layer_ids: Sequence[str]) -> Iterator[None]:
        """Keep the layers from a prune while a workspace is set up on them: a shared lock each
        (several creates at once), which `removable` needs exclusive."""
        with contextlib.ExitStack() as held:
            for layer_id in sorted(set(layer_ids)):
                held.callback(os.close, self._lock(layer_id, "use", fcntl.LOCK_SH))
            yield

    @contextlib.contextmanager
    def removable(self, layer_id: str) -> Iterator[bool]:
        """Whether no one holds the layer; while True, no one can start to. Never waits: a prune
        passes over a layer a create is setting up rather than wait for it. A layer removed
        meanwhile (`remove`) loses its lock files as this ends, still held."""
        try:
            fd = self._lock(layer_id, "use", fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
            if not os.path.lexists(self.root / layer_id):
                self._forget_locks(layer_id, fd)
        finally:
            os.close(fd)

    def _forget_locks(self, layer_id: str, use_fd: int) -> None:
        """Remove the lock files of a layer that is gone, `use_fd` (its `.use`, locked exclusive)
        still held: its `.lock` too unless a builder holds it now (it is then left for the next
        prune or sweep)."""
        use = self.root / f".{layer_id}.use"
        if _same_file(use_fd, use):
            use.unlink()
        try:
            fd = os.open(self.root / f".{layer_id}.lock", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return  # none (never built here), or not a file Warden made
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return
            if _same_file(fd, self.root / f".{layer_id}.lock"):
                (self.root / f".{layer_id}.lock").unlink()
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def staging(self, layer_id: str) -> Iterator[Path]:
        """A private build folder; on success the caller `commit`s it, otherwise it is removed."""
        self.root.mkdir(parents=True, exist_ok=True)
        build = self.root / f".build-{layer_id}-{os.getpid()}-{secrets.token_hex(3)}"
        build.mkdir(mode=0o755)
        try:
            yield build
        finally:
            if build.exists():
                make_writable(build)
                shutil.rmtree(build, ignore_errors=True)

    def commit(self, build: Path, layer_id: str, info: dict[str, Any], *, replace: bool = False) -> dict[str, Any]:
        """Write layer.json (with the digest of what was built), seal the folder read-only and
        rename it to its id. `replace` (a rebuild): a whole layer there is swapped for the new one
        in one step, so the workspaces on it never find it missing, and then removed."""
        info = {**info, "tree_sha256": tree_digest(build)}
        write_atomic(build / LAYER_FILE, (json.dumps(info, indent=2, sort_keys=True) + "\n").encode())
        make_read_only(build)
        target = self.root / layer_id
        if replace and self.exists(layer_id):
            try:
                exchange(str(build), str(target))
            except OSError:
                self.remove(layer_id)  # no exchange here: the old one goes just before, as it did
            else:
                # The old layer now lies in the private build folder, which `staging` removes
                # (and `sweep` does, if this process is killed first).
                return self.read(layer_id) or info
        if target.exists() and not self.exists(layer_id):
            self.remove(layer_id)  # a broken layer (garbage layer.json) gives way to the new build
        try:
            os.rename(build, target)
        except OSError:
            if not self.exists(layer_id):
                raise
            # Another builder finished first; its layer has the same content.
        return self.read(layer_id) or info

    def tampered(self, layer_id: str) -> bool:
        """Whether the layer's files differ from what was built (a `.pth` added by hand, a file
        changed as root). Layers built before digests were recorded are taken as they are."""
        info = self.read(layer_id)
        recorded = info.get("tree_sha256") if info else None
        return isinstance(recorded, str) and tree_digest(self.path(layer_id)) != recorded

    def remove(self, layer_id: str) -> None:
        """Delete a layer: rename it out of its id first, so no reader sees half of it."""
        path = self.root / layer_id
        if not path.exists():
            return
        trash = self.root / f".trash-{layer_id}-{secrets.token_hex(3)}"
        os.rename(path, trash)
        make_writable(trash)
        shutil.rmtree(trash, ignore_errors=True)

    def sweep(self, *, dry_run: bool = False) -> int:
        """Remove build and trash folders that a crashed process left behind (and, in a layer
        cache, copies a killed home was publishing); how many (`dry_run`: found, left)."""
        removed = 0
        if not self.root.is_dir():
            return 0
        for entry in self.root.iterdir():
            # Lock files of layers pruned before a prune removed them (as `removable` does now).
            kind = entry.name.rsplit(".", 1)[-1]
            if not dry_run and entry.name.startswith(".") and kind in ("use", "lock"):
                layer_id = entry.name[1:-len(kind) - 1]
                if layer_id and not os.path.lexists(self.root / layer_id):
                    with self.removable(layer_id):
                        pass
                continue
            if entry.name.startswith((".build-", ".trash-", ".publish-")) and entry.is_dir():
                pid = entry.name.split("-")[-2] if entry.name.startswith((".build-", ".publish-")) else ""
                if pid.isdigit() and _alive(int(pid)):
                    continue
                if not dry_run:
                    make_writable(entry)
                    shutil.rmtree(entry, ignore_errors=True)
                removed += 1
        return removed


def _same_file(fd: int, path: Path) -> bool:
    """Whether `path` (never followed) names the file open as `fd`."""
    try:
        named = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def dir_size(root: Path) -> int:
    """Bytes of the files below `root`, symlinks not followed."""
    total = 0
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total
