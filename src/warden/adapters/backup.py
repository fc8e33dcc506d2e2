"""`warden backup` and `warden restore`: a home's state in one file, and back.

A backup is a gzip'd tar holding a consistent snapshot of the SQLite registry (the sqlite3
online backup API: a transaction-consistent copy while other processes keep writing), the
keys, the settings, the global path lists, the user's templates and the init marker; with
`--workspaces`, the workspaces' folders, their checkpoints and versions, and the archives too.
It is written to a temporary file, fsynced and renamed, readable by the owner only (it holds the keys). A registry on
PostgreSQL is not copied (back it up with pg_dump); the keys still are, since every node
needs the same ones.

Restore refuses a home that already holds a registry unless told to replace it (the files it
replaces are kept beside, renamed `*.replaced-TIME`), and extracts only the names a backup
holds: no absolute paths, no `..`, no devices, links only inside workspaces.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import sqlite3
import tarfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

from warden.adapters.processes import alive
from warden.core.errors import Conflict, InvalidInput, NotFound

__all__ = ["STATE_FILES", "backup_home", "restore_home"]

# What a home's state is, beside the registry (relative to $WARDEN_HOME).
STATE_FILES = ("config.toml", "sandbox_paths.json", ".initialised", "keys", "templates")
_WITH_WORKSPACES = ("workspaces", "archives", "versions")
_FORMAT = b"warden-backup 1\n"


def _add_tree(tar: tarfile.TarFile, path: Path, arcname: str) -> None:
    """Add `path` as `arcname`, folders entry by entry, links as links (never followed). A
    stack, not recursion: a workspace's folders can nest deeper than Python's recursion limit."""
    stack = [(path, arcname)]
    while stack:
        here, name = stack.pop()
        if not os.path.lexists(here):
            continue
        tar.add(here, arcname=name, recursive=False)
        if here.is_dir() and not here.is_symlink():
            stack += [(here / child, f"{name}/{child}") for child in sorted(os.listdir(here), reverse=True)]


def backup_home(home: Path, db_path: Path | None, target: Path, *, workspaces_root: Path,
                include_workspaces: bool) -> dict[str, object]:
    """Write a backup of `home` to `target`; what it holds."""
    target = target.absolute()
    if target.exists() and target.is_dir():
        raise InvalidInput(f"{target} is a folder; give a file name for the backup")
    target.parent.mkdir(parents=True, exist_ok=True)
    held: list[str] = []
    # A backup killed mid-way (kill -9) left its half-written file beside the target (with the
    # keys in it) and its registry copy in the home, for good: both are named after the writer's
    # pid, and the next backup removes those whose writer is dead.
    _remove_dead(target.parent, _partial(target.name))
    _remove_dead(home, _SCRATCH)
    tmp_name = str(target.parent / f".{target.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp_name)  # a dead process's of this pid (the pid is this one's now)
    fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as raw:
            os.fchmod(raw.fileno(), 0o600)
            with tarfile.open(fileobj=raw, mode="w:gz") as tar:
                info = tarfile.TarInfo("WARDEN-BACKUP")
                info.size = len(_FORMAT)
                info.mtime = int(time.time())
                tar.addfile(info, io.BytesIO(_FORMAT))
                if db_path is not None and db_path.exists():
                    with _scratch(home) as scratch:
                        copy = scratch / "warden.db"
                        source = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
                        try:
                            dest = sqlite3.connect(copy)
                            with contextlib.closing(dest):
                                source.backup(dest)
                        finally:
                            source.close()
                        tar.add(copy, arcname="warden.db")
                    held.append("warden.db")
                for rel in STATE_FILES:
                    if os.path.lexists(home / rel):
                        _add_tree(tar, home / rel, rel)
                        held.append(rel)
                if include_workspaces:
                    if workspaces_root.is_dir():
                        tar.add(workspaces_root, arcname="workspaces", recursive=False)
                        for child in sorted(os.listdir(workspaces_root)):
                            if not child.startswith("."):  # the trash and staging folders
                                _add_tree(tar, workspaces_root / child, f"workspaces/{child}")
                        held.append("workspaces")
                    if (home / "archives").is_dir():
                        _add_tree(tar, home / "archives", "archives")
                        held.append("archives")
                    if (home / "versions").is_dir():  # the workspaces' checkpoints and kept versions
                        tar.add(home / "versions", arcname="versions", recursive=False)
                        for child in sorted(os.listdir(home / "versions")):
                            if not child.startswith(".trash-"):  # stores of destroyed workspaces
                                _add_tree(tar, home / "versions" / child, f"versions/{child}")
                        held.append("versions")
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    return {"file": str(target), "holds": held, "size": target.stat().st_size}


# `.backup.PID.tmp` in the home: the registry's copy while it is packed (the sweeper's pattern for
# a dead process's temporary files, services/sweeper.py, matches it too).
_SCRATCH = re.compile(r"\.backup\.(\d+)\.tmp")
_STAGING = re.compile(r"\.restore\.(\d+)\.tmp")  # `warden restore`'s unpacked backup


def _partial(name: str) -> re.Pattern[str]:
    """A backup to `name` being written: `.NAME.PID.tmp` beside it."""
    return re.compile(re.escape(f".{name}.") + r"(\d+)\.tmp")


@contextlib.contextmanager
def _scratch(home: Path, what: str = "backup") -> Iterator[Path]:
    """A folder of this process's own in `home` (0700), `.WHAT.PID.tmp`, removed after."""
    path = home / f".{what}.{os.getpid()}.tmp"
    shutil.rmtree(path, ignore_errors=True)  # a dead process's of this pid
    path.mkdir(mode=0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _remove_dead(folder: Path, pattern: re.Pattern[str]) -> None:
    """Remove the entries of `folder` that `pattern` names with the pid of a dead process."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        match = pattern.fullmatch(name)
        if match is None or alive(int(match[1])):
            continue
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()


def _check_member(member: tarfile.TarInfo) -> str:
    name = member.name
    parts = name.rstrip("/").split("/")
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        # Only plain names: `a/./b` or `a//b` would slip past the link check by spelling.
        raise InvalidInput(f"backup entry {name!r} is not a plain relative path inside a home; this is "
                           "not a Warden backup")
    top = parts[0]
    if top not in (*STATE_FILES, "warden.db", "WARDEN-BACKUP", *_WITH_WORKSPACES):
        raise InvalidInput(f"backup entry {name!r} is not part of a Warden home; this is not a Warden backup")
    if not (member.isfile() or member.isdir() or (member.issym() and top in _WITH_WORKSPACES and len(parts) > 2)):
        # Links only inside a workspace (a venv's python), never a top-level folder of the home
        # or a workspace itself: `workspaces -> /elsewhere` would send every later write there.
        raise InvalidInput(f"backup entry {name!r} is a {member.type!r} entry; a Warden backup holds only "
                           "files and folders")
    return top


def _no_path_through_links(members: list[tarfile.TarInfo]) -> None:
    """No entry may lie below a link the backup itself makes: extracting `a/link -> /etc` and
    then `a/link/passwd` would write through the link, out of the home."""
    links = {m.name.rstrip("/") for m in members if m.issym() or m.islnk()}
    for member in members:
        parts = member.name.rstrip("/").split("/")
        for depth in range(1, len(parts)):
            if "/".join(parts[:depth]) in links:
                raise InvalidInput(f"backup entry {member.name!r} lies below a link; this is not a Warden backup")


def restore_home(source: Path, home: Path, *, replace: bool) -> dict[str, object]:
    """Restore the backup `source` into `home`; what was restored and what was set aside."""
    if not source.is_file():
        raise NotFound(f"no backup file {source}")
    try:
        with tarfile.open(source, mode="r:gz") as tar:
            return _restore(tar, source, home, replace=replace)
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise InvalidInput(f"{source} is not a Warden backup ({exc})") from None
    except OSError as exc:
        if exc.errno is not None:  # a real I/O error (disk full, permissions): as it is
            raise
        raise InvalidInput(f"{source} is not a Warden backup ({exc})") from None  # gzip's BadGzipFile


def _restore(tar: tarfile.TarFile, source: Path, home: Path, *, replace: bool) -> dict[str, object]:
    members = tar.getmembers()
    if not any(m.name == "WARDEN-BACKUP" for m in members):
        raise InvalidInput(f"{source} is not a Warden backup (no WARDEN-BACKUP entry)")
    tops = {_check_member(m) for m in members} - {"WARDEN-BACKUP"}
    _no_path_through_links(members)
    present = [t for t in sorted(tops) if os.path.lexists(home / t)]
    if "warden.db" in present and not replace:
        raise Conflict(f"{home} already holds a registry; `warden restore {source} --yes` replaces it "
                       "(what it replaces is kept beside it as *.replaced-TIME)")
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    set_aside: list[str] = []
    # The staging folder holds the backup's keys and registry: named after this pid (as backup's
    # scratch), a killed restore's is removed by the next one and by the sweeper.
    _remove_dead(home, _STAGING)
    with _scratch(home, "restore") as staging:
        wanted = [m for m in members if m.name != "WARDEN-BACKUP"]
        if hasattr(tarfile, "tar_filter"):  # Python >= 3.11.4: the library checks once more
            tar.extractall(staging, members=wanted, filter="tar")
        else:  # the checks above and _no_path_through_links are the whole guard then
            tar.extractall(staging, members=wanted)  # noqa: S202 - every member checked above
        if "warden.db" in tops:
            # The old registry's write-ahead log must never meet the restored database.
            for wal in ("warden.db-wal", "warden.db-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.rename(home / wal, home / f"{wal}.replaced-{stamp}")
        for top in sorted(tops):
            if os.path.lexists(home / top):
                aside = home / f"{top}.replaced-{stamp}"
                os.rename(home / top, aside)
                set_aside.append(str(aside))
            os.rename(staging / top, home / top)
    return {"restored": sorted(tops), "set_aside": set_aside}
