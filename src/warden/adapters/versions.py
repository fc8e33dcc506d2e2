"""The checkpoint and version store in Warden's home (`$WARDEN_HOME/versions/NAME/`).

Layout of one workspace's store (folders 0700, Warden's alone):

    owner                 the workspace id the store belongs to (a later workspace of the same
                          name never sees an earlier one's checkpoints)
    objects/ab/cdef…      file contents named by their sha256, read-only copies (0444)
    checkpoints/ID.json   one manifest per checkpoint (core/checkpoints.py)
    versions.json         the index of kept versions of single paths
    usage                 the bytes the store held when last measured (the quota reads it)
    capturing             present while a capture runs: found by the next one, the orphans of a
                          killed capture are collected
    tmp/                  objects being written
    lock                  flock'ed by each change

Objects are copies, never hard links: a hard link to a workspace file is the same inode, and a
bot writing the file in place would change the "saved" content. (A reflink would be as safe and
cheaper, but depends on the filesystem; a copy works everywhere.) Crash safety: objects are
renamed into place, then the filesystem is synced, then the manifest is renamed into place; a
kill at any moment leaves at worst unreferenced objects (collected later) and never a manifest
naming a missing one.

Workspaces are read and written by descriptor (adapters/safefs/trees.py): a folder a bot swapped
for a symlink is neither read through nor written through.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from warden.adapters.atomic import write_atomic
from warden.adapters.safefs.trees import (
    DIR_FLAGS,
    READ_FLAGS,
    Dirs,
    apply_plan,
    no_space,
    open_folder,
    open_to_read,
    scan_tree,
    stamp_of,
    stamps_hold,
    syncfs,
    unreadable_folder,
    walk_tree,
)
from warden.adapters.version_usage import folder_index, kept_bytes, read_text
from warden.core.checkpoints import (
    STABLE_NS,
    Current,
    Entry,
    Manifest,
    RollbackPlan,
    Version,
    excluded_name,
    git_heads,
    is_temp,
)
from warden.core.errors import NotFound, TooLarge, WardenError
from warden.core.quota import file_charge

__all__ = ["HostVersionStore"]

_SMALL = 1 << 20  # files up to this size are read in one go and hashed before anything is written
_CHUNK = 1 << 20


@dataclass
class _Captured:
    entries: list[Entry] = field(default_factory=list)
    added_bytes: int = 0


class _Objects:
    """Writing objects into one store: hash while copying, rename into place unless present."""

    def __init__(self, store: Path, budget: int | None) -> None:
        self.objects = store / "objects"
        self.tmp = store / "tmp"
        self.budget = budget
        self.added = 0
        self.disk = 0  # what the new objects take on disk, in whole blocks (as the quota counts)
        self._made: set[str] = set()  # fan-out folders known to exist (one mkdir each, not one per object)

    def path(self, digest: str) -> Path:
        return self.objects / digest[:2] / digest[2:]

    def _name(self, digest: str) -> str:
        return f"{self.objects}/{digest[:2]}/{digest[2:]}"

    def has(self, digest: str) -> bool:
        return os.path.exists(self._name(digest))

    def _charge(self, size: int, what: str) -> None:
        self.added += size
        self.disk += file_charge(size)
        if self.budget is not None and self.added > self.budget:
            raise TooLarge(f"saving {what} would pass what the workspace may still keep ({self.budget:,} "
                           "bytes left under workspace.max_disk); delete files or old versions, or raise it",
                           rule="workspace.max_disk")

    def _place(self, tmp: str, digest: str) -> None:
        target = self._name(digest)
        if os.path.exists(target):
            os.unlink(tmp)
            return
        if digest[:2] not in self._made:
            with contextlib.suppress(FileExistsError):
                os.mkdir(f"{self.objects}/{digest[:2]}", 0o700)
            self._made.add(digest[:2])
        os.chmod(tmp, 0o444)
        os.rename(tmp, target)

    def add(self, fd: int, size: int, what: str) -> tuple[str, int]:
        """(digest, bytes read) of the open file `fd`, stored as an object."""
        if size <= _SMALL:
            data = os.read(fd, size + 1)
            while len(data) <= size and (more := os.read(fd, size + 1 - len(data))):
                data += more  # a short read (or a file that grew while read: cut below)
            data = data[:size] if len(data) > size else data
            digest = hashlib.sha256(data).hexdigest()
            if self.has(digest):
                return digest, len(data)
            self._charge(len(data), what)
            tmp = f"{self.tmp}/{os.urandom(8).hex()}.part"
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(out, view):]
                finally:
                    os.close(out)
                self._place(tmp, digest)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
            return digest, len(data)
        hasher = hashlib.sha256()
        tmp = f"{self.tmp}/{os.urandom(8).hex()}.part"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        total = 0
        try:
            try:
                while chunk := os.read(fd, _CHUNK):
                    total += len(chunk)
                    self._charge(len(chunk), what)
                    hasher.update(chunk)
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(out, view):]
            finally:
                os.close(out)
            digest = hasher.hexdigest()
            if self.has(digest):
                self.added -= total  # already kept: it costs nothing new
                self.disk -= file_charge(total)
            self._place(tmp, digest)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return digest, total


class HostVersionStore:
    """The VersionStore port over `$WARDEN_HOME/versions`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _store(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise WardenError(f"bad workspace name for the version store: {name!r}")
        return self.root / name

    def _owner(self, store: Path) -> str | None:
        return read_text(store / "owner")

    # -- the lock --------------------------------------------------------------------------
    def _index(self, folder: str) -> Path:
        """Where the store of workspace folder `folder` is named (the quota knows folders, not names)."""
        return folder_index(self.root, folder)

    @contextlib.contextmanager
    def lock(self, name: str, owner: str, folder: str) -> Iterator[None]:
        store = self._store(name)
        try:
            for made in (self.root, self.root / ".folders", store, store / "objects", store / "checkpoints",
                         store / "tmp"):
                made.mkdir(mode=0o700, exist_ok=True)
            fd = os.open(store / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise no_space(exc, str(self.root)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            found = self._owner(store)
            if found != owner:
                if found is not None:
                    self._empty(store)  # left by a destroyed workspace of the same name
                write_atomic(store / "owner", owner.encode(), mode=0o600)
            index = self._index(folder)
            if read_text(index) != name:
                write_atomic(index, name.encode(), mode=0o600)
            yield
        finally:
            os.close(fd)  # closing releases the flock

    def _empty(self, store: Path) -> None:
        import shutil

        for child in ("objects", "checkpoints", "tmp"):
            shutil.rmtree(store / child, ignore_errors=True)
            (store / child).mkdir(mode=0o700, exist_ok=True)
        for child in ("versions.json", "usage"):
            (store / child).unlink(missing_ok=True)

    # -- capture -----------------------------------------------------------------------------
    def capture(self, name: str, folder: str, *, known: Mapping[str, Entry], budget: int | None,
                now_ns: int) -> _Captured:
        objects = _Objects(self._store(name), budget)
        out = _Captured()
        root_fd = open_folder(folder)
        try:
            # Written back first, so every page a process has mapped is clean: a write through a
            # shared mapping changes mtime and ctime at its write fault only, and a page still
            # dirty since before took the bot's bytes after they were read here with no stamp
            # changed (a rollback to this checkpoint then kept them). Now any such write faults
            # and stamps the file anew, and a fault since `now_ns` (taken before) is not steady.
            syncfs(root_fd)
            if not stamps_hold(root_fd):
                now_ns = 0  # nothing is steady: every file is read and no stamp kept
            for rel, dirnames, filenames, dfd in walk_tree(root_fd, strict=True):
                top = not rel
                skip = git_heads(rel, [*dirnames, *filenames])
                # A folder swapped for a link since it was listed is saved as the link it is now.
                real: list[str] = []
                for d in sorted(d for d in dirnames if not excluded_name(d, top=top)):
                    try:
                        st = os.stat(d, dir_fd=dfd, follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    except PermissionError:
                        raise unreadable_folder(rel) from None
                    if stat.S_ISDIR(st.st_mode):
                        real.append(d)
                        out.entries.append(Entry(f"{rel}/{d}" if rel else d, "dir", stat.S_IMODE(st.st_mode)))
                    else:
                        filenames.append(d)
                dirnames[:] = real
                for fname in sorted(filenames):
                    path = f"{rel}/{fname}" if rel else fname
                    if excluded_name(fname, top=top) or is_temp(fname) or path in skip:
                        continue
                    entry = self._capture_one(dfd, fname, path, known.get(path), objects, now_ns)
                    if entry is not None:
                        out.entries.append(entry)
        except OSError as exc:
            raise no_space(exc, f"Warden's home ({self.root})") from None
        finally:
            os.close(root_fd)
            self._bump(name, objects.disk)  # also what a failure left: counted until collected
        out.entries.sort(key=lambda e: e.path)
        out.added_bytes = objects.added
        return out

    def _capture_one(self, dfd: int, fname: str, path: str, known: Entry | None, objects: _Objects,
                     now_ns: int) -> Entry | None:
        try:
            st = os.stat(fname, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return None  # removed while we walked: what we read is what was there
        except PermissionError:  # its folder cannot be searched (a file's own mode: open_to_read)
            raise unreadable_folder(path.rpartition("/")[0]) from None
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            try:
                return Entry(path, "symlink", 0o777, target=os.readlink(fname, dir_fd=dfd))
            except FileNotFoundError:
                return None
        if not stat.S_ISREG(st.st_mode):
            return None  # FIFOs, sockets, devices are not content
        stamp = stamp_of(st)
        if (known is not None and known.kind == "file" and known.stamp == stamp
                and objects.has(known.digest)):
            return Entry(path, "file", mode, known.size, known.digest, stamp=stamp)
        try:
            fd = open_to_read(dfd, fname)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):
                return None  # swapped for a link or a socket since the stat
            raise
        if fd is None:
            return None
        try:
            before = os.fstat(fd)
            if not stat.S_ISREG(before.st_mode):
                return None
            digest, size = objects.add(fd, before.st_size, path)
            after = os.fstat(fd)
        finally:
            os.close(fd)
        # The stamp may stand for these bytes only when nothing changed while they were read
        # and the file had been still for a while (STABLE_NS).
        steady = stamp_of(after) == stamp_of(before) and after.st_ctime_ns + STABLE_NS < now_ns
        return Entry(path, "file", stat.S_IMODE(before.st_mode), size, digest,
                     stamp=stamp_of(after) if steady else None)

    def begin_capture(self, name: str) -> bool:
        """Mark a capture under way; True when the last one was cut short (its objects are orphans)."""
        marker = self._store(name) / "capturing"
        cut_short = marker.exists()
        if not cut_short:
            marker.touch(mode=0o600)
        return cut_short

    def end_capture(self, name: str) -> None:
        (self._store(name) / "capturing").unlink(missing_ok=True)

    # -- manifests ---------------------------------------------------------------------------
    def save_manifest(self, name: str, manifest: Manifest) -> None:
        store = self._store(name)
        fd = os.open(store, DIR_FLAGS)
        try:
            syncfs(fd)  # the objects first, then the manifest that names them
        finally:
            os.close(fd)
        data = json.dumps(manifest.to_json(), separators=(",", ":")).encode()
        try:
            # Counted first: a count that then fails (a full disk) leaves no manifest, where the
            # checkpoint was saved yet said failed; a manifest that then fails is counted until
            # the next measure (the safe side of the budget).
            self._bump(name, file_charge(len(data)))
            write_atomic(store / "checkpoints" / f"{manifest.id}.json", data, mode=0o600)
        except OSError as exc:
            raise no_space(exc, f"Warden's home ({self.root})") from None

    def drop_manifest(self, name: str, checkpoint: str) -> None:
        path = self._store(name) / "checkpoints" / f"{checkpoint}.json"
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return
        path.unlink()
        self._bump(name, -file_charge(size))

    def manifests(self, name: str, owner: str) -> list[Manifest]:
        store = self._store(name)
        if self._owner(store) != owner:
            return []
        found: list[Manifest] = []
        try:
            names = os.listdir(store / "checkpoints")
        except FileNotFoundError:
            return []
        for file in names:
            if not file.endswith(".json") or file.startswith("."):
                continue
            try:
                found.append(Manifest.from_json(json.loads((store / "checkpoints" / file).read_bytes())))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # unreadable: never offered for a rollback
        found.sort(key=lambda m: (m.created_at, m.id))
        return found

    # -- the workspace now, and rollback -----------------------------------------------------------------
    def scan(self, folder: str, scope: str | None) -> dict[str, Current]:
        return scan_tree(folder, scope)

    def apply(self, name: str, folder: str, plan: RollbackPlan) -> None:
        apply_plan(folder, plan, _Objects(self._store(name), None).path)

    # -- versions of single paths ------------------------------------------------------------------
    def keep_file(self, name: str, folder: str, path: str, *, max_bytes: int) -> list[tuple[str, int, str, int]]:
        objects = _Objects(self._store(name), max_bytes)
        parts = [p for p in path.split("/") if p]
        if not parts:
            return []
        kept: list[tuple[str, int, str, int]] = []
        try:
            root_fd = os.open(folder, DIR_FLAGS)
        except OSError:
            return []
        dirs = Dirs(root_fd)
        try:
            try:
                parent, leaf = dirs.parent("/".join(parts))
                st = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
            except OSError:
                return []  # missing, or reached through a link: nothing of the workspace to keep
            if stat.S_ISREG(st.st_mode):
                if st.st_size > max_bytes:
                    return []  # larger than every version together may be: not read at all
                got = self._keep_one(parent, leaf, "/" + "/".join(parts), objects)
                return [got] if got else []
            if not stat.S_ISDIR(st.st_mode):
                return []
            top = os.open(leaf, DIR_FLAGS, dir_fd=parent)
            try:
                for here, dirnames, filenames, dfd in walk_tree(top):
                    rel = "/".join([*parts, *([here] if here else [])])
                    dirnames[:] = sorted(d for d in dirnames if not excluded_name(d, top=False))
                    for fname in sorted(filenames):
                        if excluded_name(fname, top=False) or is_temp(fname):
                            continue
                        got = self._keep_one(dfd, fname, f"/{rel}/{fname}", objects)
                        if got:
                            kept.append(got)
            finally:
                os.close(top)
        except TooLarge:
            pass  # what fits under versions.max_size is kept; the rest is not (the audit says how many)
        finally:
            dirs.close()
            os.close(root_fd)
            self._bump(name, objects.disk)
        return kept

    @staticmethod
    def _keep_one(dfd: int, fname: str, path: str, objects: _Objects) -> tuple[str, int, str, int] | None:
        try:
            fd = os.open(fname, READ_FLAGS, dir_fd=dfd)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            digest, size = objects.add(fd, st.st_size, path)
        finally:
            os.close(fd)
        return path, size, digest, stat.S_IMODE(st.st_mode)

    def versions(self, name: str, owner: str) -> list[Version]:
        store = self._store(name)
        if self._owner(store) != owner:
            return []
        try:
            raw = json.loads((store / "versions.json").read_bytes())
        except (FileNotFoundError, ValueError):
            return []
        out: list[Version] = []
        for item in raw if isinstance(raw, list) else []:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                out.append(Version.from_json(item))
        return out

    def save_versions(self, name: str, versions: Sequence[Version]) -> None:
        store = self._store(name)
        fd = os.open(store, DIR_FLAGS)
        try:
            syncfs(fd)
        finally:
            os.close(fd)
        data = json.dumps([v.to_json() for v in versions], separators=(",", ":")).encode()
        try:
            old = (store / "versions.json").stat().st_size
        except FileNotFoundError:
            old = 0
        write_atomic(store / "versions.json", data, mode=0o600)
        self._bump(name, file_charge(len(data)) - file_charge(old))

    def read_object(self, name: str, digest: str, *, max_bytes: int) -> bytes:
        path = _Objects(self._store(name), None).path(digest)
        try:
            fd = os.open(path, READ_FLAGS)
        except FileNotFoundError:
            raise NotFound(f"the saved content {digest[:12]} is gone from the store") from None
        try:
            size = os.fstat(fd).st_size
            if size > max_bytes:
                raise TooLarge(f"the saved content is {size:,} bytes, over the limit of {max_bytes:,} "
                               "(sandbox.max_file_size_mb)")
            chunks = []
            while chunk := os.read(fd, _CHUNK):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    # -- housekeeping ------------------------------------------------------------------------------
    def collect(self, name: str, live: Collection[str]) -> int:
        store = self._store(name)
        freed = 0
        for sub in _listdir(store / "objects"):
            for rest in _listdir(store / "objects" / sub):
                if sub + rest in live:
                    continue
                path = store / "objects" / sub / rest
                with contextlib.suppress(FileNotFoundError):
                    freed += path.lstat().st_blocks * 512
                    path.unlink()
        for part in _listdir(store / "tmp"):
            with contextlib.suppress(FileNotFoundError):
                (store / "tmp" / part).unlink()
        return freed

    def usage_at(self, folder: str) -> int:
        """What the store of the workspace at `folder` holds (0 when it has none)."""
        return kept_bytes(self.root, folder)

    def usage(self, name: str) -> int:
        try:
            return int((self._store(name) / "usage").read_text())
        except (FileNotFoundError, ValueError):
            return 0

    def _bump(self, name: str, delta: int) -> None:
        """Add `delta` bytes to the remembered usage (a full `measure` after each small change
        would walk every object)."""
        if delta:
            store = self._store(name)
            if store.is_dir():
                write_atomic(store / "usage", str(max(0, self.usage(name) + delta)).encode(), mode=0o600)

    def measure(self, name: str) -> int:
        store = self._store(name)
        total = 0
        for dirpath, _dirs, files in os.walk(store):
            for file in files:
                with contextlib.suppress(OSError):
                    st = os.lstat(os.path.join(dirpath, file))
                    total += max(st.st_blocks * 512, st.st_size)
        if store.is_dir():
            write_atomic(store / "usage", str(total).encode(), mode=0o600)
        return total

    def remove(self, name: str) -> bool:
        from warden.adapters.workspace_io import remove_in_background

        store = self._store(name)
        if not store.exists():
            return False
        for index in _listdir(self.root / ".folders"):
            if read_text(self.root / ".folders" / index) == name:
                (self.root / ".folders" / index).unlink(missing_ok=True)
        target = self.root / f".trash-{name}-{os.urandom(4).hex()}"
        os.rename(store, target)
        remove_in_background(target)
        return True


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []


