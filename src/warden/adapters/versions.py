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

Workspaces are read and written by descriptor: `os.fwalk` (no link followed, each folder
opened relative to its parent's descriptor) and `O_NOFOLLOW` opens relative to a held folder,
so a folder a bot swapped for a symlink is neither read through nor written through.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import hashlib
import json
import os
import stat
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from warden.adapters.atomic import write_atomic
from warden.adapters.version_usage import folder_index, kept_bytes, read_text
from warden.core.checkpoints import (
    STABLE_NS,
    Current,
    Entry,
    Manifest,
    RollbackPlan,
    Version,
    excluded,
    git_heads,
    is_temp,
)
from warden.core.errors import Conflict, Denied, NotFound, TooLarge, Unavailable, WardenError
from warden.core.quota import file_charge

__all__ = ["HostVersionStore"]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_SMALL = 1 << 20  # files up to this size are read in one go and hashed before anything is written
_CHUNK = 1 << 20


@dataclass
class _Captured:
    entries: list[Entry] = field(default_factory=list)
    added_bytes: int = 0


def _syncfs(fd: int) -> None:
    """Make everything written on the filesystem holding `fd` durable (one call for thousands of
    objects, instead of an fsync each), so a manifest renamed after it never names lost bytes."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syncfs(fd) == 0:
            return
    except (OSError, AttributeError):
        pass
    os.sync()


def _stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "symlink" if stat.S_ISLNK(mode) else "other"


def _no_space(exc: OSError, where: str) -> WardenError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return Unavailable(f"no space left on the filesystem of {where}; free some space")
    return WardenError(f"{where}: {exc.strerror or exc}")


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
            raise _no_space(exc, str(self.root)) from None
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
        try:
            root_fd = os.open(folder, _DIR)
        except OSError as exc:
            raise _folder_error(exc, folder) from None
        try:
            for dirpath, dirnames, filenames, dfd in os.fwalk(".", dir_fd=root_fd, follow_symlinks=False):
                rel = dirpath[2:] if dirpath != "." else ""
                base = rel.split("/") if rel else []
                skip = git_heads(rel, [*dirnames, *filenames])
                # fwalk lists a symlink to a folder among the folders (it never descends into
                # it): such a name is a link, saved as one.
                real: list[str] = []
                for d in sorted(d for d in dirnames if not excluded([*base, d])):
                    try:
                        st = os.stat(d, dir_fd=dfd, follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        real.append(d)
                        out.entries.append(Entry(f"{rel}/{d}" if rel else d, "dir", stat.S_IMODE(st.st_mode)))
                    else:
                        filenames.append(d)
                dirnames[:] = real
                for fname in sorted(filenames):
                    path = f"{rel}/{fname}" if rel else fname
                    if excluded([*base, fname]) or is_temp(fname) or path in skip:
                        continue
                    entry = self._capture_one(dfd, fname, path, known.get(path), objects, now_ns)
                    if entry is not None:
                        out.entries.append(entry)
        except OSError as exc:
            raise _no_space(exc, f"Warden's home ({self.root})") from None
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
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            try:
                return Entry(path, "symlink", 0o777, target=os.readlink(fname, dir_fd=dfd))
            except FileNotFoundError:
                return None
        if not stat.S_ISREG(st.st_mode):
            return None  # FIFOs, sockets, devices are not content
        stamp = _stamp(st)
        if (known is not None and known.kind == "file" and known.stamp == stamp
                and objects.has(known.digest)):
            return Entry(path, "file", mode, known.size, known.digest, stamp=stamp)
        try:
            fd = _open_to_read(dfd, fname)
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
        steady = _stamp(after) == _stamp(before) and after.st_ctime_ns + STABLE_NS < now_ns
        return Entry(path, "file", stat.S_IMODE(before.st_mode), size, digest,
                     stamp=_stamp(after) if steady else None)

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
        fd = os.open(store, _DIR)
        try:
            _syncfs(fd)  # the objects first, then the manifest that names them
        finally:
            os.close(fd)
        data = json.dumps(manifest.to_json(), separators=(",", ":")).encode()
        try:
            write_atomic(store / "checkpoints" / f"{manifest.id}.json", data, mode=0o600)
        except OSError as exc:
            raise _no_space(exc, f"Warden's home ({self.root})") from None
        self._bump(name, file_charge(len(data)))

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

    # -- reading the workspace now -----------------------------------------------------------------
    def scan(self, folder: str, scope: str | None) -> dict[str, Current]:
        found: dict[str, Current] = {}
        try:
            root_fd = os.open(folder, _DIR)
        except OSError as exc:
            raise _folder_error(exc, folder) from None
        try:
            start_fd, prefix = root_fd, ""
            if scope is not None:
                opened = self._scan_scope(root_fd, scope, found)
                if opened is None:
                    return found
                start_fd, prefix = opened, scope
            try:
                for dirpath, dirnames, filenames, dfd in os.fwalk(".", dir_fd=start_fd, follow_symlinks=False):
                    rel = dirpath[2:] if dirpath != "." else ""
                    rel = f"{prefix}/{rel}" if prefix and rel else (prefix or rel)
                    base = rel.split("/") if rel else []
                    dirnames[:] = [d for d in dirnames if not excluded([*base, d])]
                    for child in [*dirnames, *filenames]:
                        if excluded([*base, child]):
                            continue
                        with contextlib.suppress(FileNotFoundError):
                            found[f"{rel}/{child}" if rel else child] = _current(dfd, child)
            finally:
                if start_fd != root_fd:
                    os.close(start_fd)
        finally:
            os.close(root_fd)
        return found

    def _scan_scope(self, root_fd: int, scope: str, found: dict[str, Current]) -> int | None:
        """Record the scope's parents and the scope itself; a descriptor of the scope when it is a
        real folder (to walk), else None."""
        parts = scope.split("/")
        current = os.dup(root_fd)
        try:
            for index, part in enumerate(parts):
                path = "/".join(parts[: index + 1])
                try:
                    now = _current(current, part)
                except FileNotFoundError:
                    return None
                found[path] = now
                if now.kind != "dir":
                    return None
                nxt = os.open(part, _DIR, dir_fd=current)
                os.close(current)
                current = nxt
            fd, current = current, -1
            return fd
        finally:
            if current >= 0:
                os.close(current)

    # -- rollback ----------------------------------------------------------------------------------
    def apply(self, name: str, folder: str, plan: RollbackPlan) -> None:
        objects = _Objects(self._store(name), None)
        try:
            root_fd = os.open(folder, _DIR)
        except OSError as exc:
            raise _folder_error(exc, folder) from None
        dirs = _Dirs(root_fd)
        opened: list[tuple[int, int]] = []  # folders made writable for the rollback: (fd, mode to put back)

        def in_folder(path: str, work: Callable[[int, str], object]) -> None:
            parent, leaf = dirs.parent(path)
            try:
                work(parent, leaf)
            except PermissionError:
                # A folder whose mode forbids writing (a bot's chmod 555; Warden runs as the same
                # user): opened up for the rollback, its mode put back at the end.
                mode = stat.S_IMODE(os.fstat(parent).st_mode)
                if mode & 0o700 == 0o700:
                    raise
                opened.append((os.dup(parent), mode))
                os.fchmod(parent, mode | 0o700)
                work(parent, leaf)

        try:
            for path in plan.remove:
                in_folder(path, _remove)
            dirs.forget()
            for path in plan.mkdirs:
                in_folder(path, _make_dir)
            for entry in plan.writes:
                if entry.kind == "symlink":
                    in_folder(entry.path, functools.partial(_put_link, entry.target))
                else:
                    in_folder(entry.path, functools.partial(_put_file, objects.path(entry.digest), entry.mode))
            for path, mode in plan.chmods:
                in_folder(path, functools.partial(_chmod_file, mode))
            for fd, mode in opened:
                os.fchmod(fd, mode)
            for path, mode in plan.dir_modes:
                os.fchmod(dirs.open(path), mode)
            _syncfs(root_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise Conflict(f"workspace folder {folder} changed during the rollback (a link where a folder "
                               "was); run the rollback again") from None
            raise _no_space(exc, f"workspace folder {folder}") from None
        finally:
            for fd, _mode in opened:
                os.close(fd)
            dirs.close()
            os.close(root_fd)

    # -- versions of single paths ------------------------------------------------------------------
    def keep_file(self, name: str, folder: str, path: str, *, max_bytes: int) -> list[tuple[str, int, str, int]]:
        objects = _Objects(self._store(name), max_bytes)
        parts = [p for p in path.split("/") if p]
        if not parts:
            return []
        kept: list[tuple[str, int, str, int]] = []
        try:
            root_fd = os.open(folder, _DIR)
        except OSError:
            return []
        dirs = _Dirs(root_fd)
        try:
            try:
                parent, leaf = dirs.parent("/".join(parts))
                st = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
            except OSError:
                return []  # missing, or reached through a link: nothing of the workspace to keep
            if stat.S_ISREG(st.st_mode):
                got = self._keep_one(parent, leaf, "/" + "/".join(parts), objects)
                return [got] if got else []
            if not stat.S_ISDIR(st.st_mode):
                return []
            top = os.open(leaf, _DIR, dir_fd=parent)
            try:
                for dirpath, dirnames, filenames, dfd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
                    rel = "/".join([*parts, *([dirpath[2:]] if dirpath != "." else [])])
                    dirnames[:] = sorted(d for d in dirnames if not excluded([*rel.split("/"), d]))
                    for fname in sorted(filenames):
                        if excluded([*rel.split("/"), fname]) or is_temp(fname):
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
            fd = os.open(fname, _READ, dir_fd=dfd)
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
        fd = os.open(store, _DIR)
        try:
            _syncfs(fd)
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
            fd = os.open(path, _READ)
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


def _folder_error(exc: OSError, folder: str) -> WardenError:
    if exc.errno == errno.ENOENT:
        return NotFound(f"the workspace folder {folder} is missing; `warden health NAME --repair` re-creates it")
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return Denied(f"the workspace folder {folder} is not a real folder (a link?); Warden works only on "
                      "a real folder", rule="deny: symbolic link")
    return WardenError(f"{folder}: {exc.strerror or exc}")


def _open_to_read(dfd: int, name: str) -> int | None:
    """`name` opened to read, no link followed. A file its mode makes unreadable (a bot's chmod
    000; Warden runs as the same user) is made readable for the moment of the open and its mode
    put back: left out, a whole rollback would remove it. None when it cannot be read at all."""
    try:
        return os.open(name, _READ, dir_fd=dfd)
    except PermissionError:
        pass
    path_fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    try:
        st = os.fstat(path_fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        proc = f"/proc/self/fd/{path_fd}"
        try:
            os.chmod(proc, stat.S_IMODE(st.st_mode) | 0o400)
        except OSError:
            return None  # another user's file: not Warden's to read
        try:
            # Not O_NOFOLLOW: /proc/self/fd/N is a magic link to this very inode, never a path.
            return os.open(proc, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        finally:
            os.chmod(proc, stat.S_IMODE(st.st_mode))
    finally:
        os.close(path_fd)


def _current(dfd: int, name: str) -> Current:
    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    kind = _kind(st.st_mode)
    if kind == "symlink":
        return Current("symlink", 0o777, target=os.readlink(name, dir_fd=dfd))
    return Current(kind, stat.S_IMODE(st.st_mode), _stamp(st) if kind == "file" else (0, 0, 0, 0))


class _Dirs:
    """Folders beneath a held root, each opened component by component with O_NOFOLLOW (a link
    anywhere on the way fails with ELOOP: nothing is written through it); kept open for the
    entries that follow (a rollback writes in path order)."""

    def __init__(self, root_fd: int) -> None:
        self.root_fd = root_fd
        self._open: dict[str, int] = {}

    def open(self, path: str) -> int:
        if not path:
            return self.root_fd
        fd = self._open.get(path)
        if fd is not None:
            return fd
        parent_path, _, leaf = path.rpartition("/")
        parent = self.open(parent_path)
        try:
            fd = os.open(leaf, _DIR, dir_fd=parent)
        except NotADirectoryError:
            # O_DIRECTORY|O_NOFOLLOW on a link says ENOTDIR: name the real reason.
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path) from None
        if len(self._open) > 512:
            self.forget()
        self._open[path] = fd
        return fd

    def parent(self, path: str) -> tuple[int, str]:
        parent_path, _, leaf = path.rpartition("/")
        return self.open(parent_path), leaf

    def forget(self) -> None:
        for fd in self._open.values():
            os.close(fd)
        self._open.clear()

    def close(self) -> None:
        self.forget()


def _remove(parent: int, leaf: str) -> None:
    try:
        st = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return  # gone already (a rollback run again after a crash)
    if stat.S_ISDIR(st.st_mode):
        import shutil

        # rmtree with dir_fd walks by descriptors and never follows links.
        shutil.rmtree(leaf, dir_fd=parent)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leaf, dir_fd=parent)


def _make_dir(parent: int, leaf: str) -> None:
    for _ in range(3):
        try:
            os.mkdir(leaf, 0o700, dir_fd=parent)  # its mode is set once it is filled
            return
        except FileExistsError:
            st = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                return
            os.unlink(leaf, dir_fd=parent)  # a file or a link where the folder belongs
    raise OSError(errno.EAGAIN, f"cannot make folder {leaf!r}: it keeps changing")


def _tmp_name(leaf: str) -> str:
    return f".{leaf[:64]}.{os.urandom(6).hex()}.warden-tmp"


def _put_file(source: Path, mode: int, parent: int, leaf: str) -> None:
    """Replace `leaf` with a copy of object `source`: a new file beside it, renamed over it."""
    tmp = _tmp_name(leaf)
    src = os.open(source, _READ)
    try:
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                      dir_fd=parent)
        try:
            try:
                size = os.fstat(src).st_size
                copied = 0
                while copied < size:
                    sent = os.copy_file_range(src, out, size - copied)
                    if sent == 0:
                        break
                    copied += sent
                os.fchmod(out, mode & 0o7777 & ~0o6000)  # never set setuid/setgid on the host
            finally:
                os.close(out)
            # No fsync per file: the whole rollback is synced once at its end (syncfs); a crash
            # before it leaves files a second run of the same rollback rewrites.
            os.rename(tmp, leaf, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=parent)
            raise
    finally:
        os.close(src)


def _put_link(target: str, parent: int, leaf: str) -> None:
    tmp = _tmp_name(leaf)
    os.symlink(target, tmp, dir_fd=parent)
    try:
        os.rename(tmp, leaf, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=parent)
        raise


def _chmod_file(mode: int, parent: int, leaf: str) -> None:
    """Set a file's mode through an O_PATH descriptor (its mode may forbid opening it to read;
    O_NOFOLLOW: a link there is never changed through)."""
    fd = os.open(leaf, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.chmod(f"/proc/self/fd/{fd}", mode & 0o7777 & ~0o6000)
    finally:
        os.close(fd)
