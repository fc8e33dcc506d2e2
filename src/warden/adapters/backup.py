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
import json
import os
import shutil
import sqlite3
import tarfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

from warden.adapters.atomic import naming
from warden.adapters.leftovers import HostLeftovers
from warden.adapters.processes import alive
from warden.core.errors import Conflict, InvalidInput, NotFound, classify

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
                include_workspaces: bool, keys_steady: contextlib.AbstractContextManager[None]) -> dict[str, object]:
    """Write a backup of `home` to `target`; what it holds. `keys_steady` is held from the
    registry's copy to the keys' (Keys.sealing): a rotation of the master key between the two
    left a backup whose secrets were sealed under a key it did not hold."""
    target = target.absolute()
    if target.exists() and target.is_dir():
        raise InvalidInput(f"{target} is a folder; give a file name for the backup")
    target.parent.mkdir(parents=True, exist_ok=True)
    held: list[str] = []
    # A backup killed mid-way (kill -9) left its half-written file beside the target (with the
    # keys in it) and its registry copy in the home, for good: both are named after the writer's
    # pid, and the next backup removes those whose writer is dead.
    _remove_dead(target.parent, f".{target.name}.")
    _remove_dead(home, ".backup.")
    tmp_name = str(target.parent / f".{target.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp_name)  # a dead process's of this pid (the pid is this one's now)
    fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        # The backup's folder may be on another device than the home: a refusal names it.
        with naming(target.parent), os.fdopen(fd, "wb") as raw:
            os.fchmod(raw.fileno(), 0o600)
            with tarfile.open(fileobj=raw, mode="w:gz") as tar:
                # Where it was made: a restore into another home moves the registry's paths there.
                manifest = _FORMAT + json.dumps({"home": str(home), "workspaces_root": str(workspaces_root)}).encode()
                info = tarfile.TarInfo("WARDEN-BACKUP")
                info.size = len(manifest)
                info.mtime = int(time.time())
                tar.addfile(info, io.BytesIO(manifest))
                with keys_steady:
                    held += _add_state(tar, home, db_path)
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


def _add_state(tar: tarfile.TarFile, home: Path, db_path: Path | None) -> list[str]:
    """The registry (a consistent copy, SQLite's backup API) and the home's state files, keys
    included, into `tar`; what was added."""
    held: list[str] = []
    if db_path is not None and db_path.exists():
        with _scratch(home) as scratch:
            copy = scratch / "warden.db"
            source = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
            try:
                dest = sqlite3.connect(copy)
                with contextlib.closing(dest):
                    try:
                        source.backup(dest)
                    except sqlite3.OperationalError as exc:
                        # The copy's disk (the home's), not the registry's: said "on the registry disk".
                        mapped = classify(exc, str(home))
                        if mapped is None:
                            raise
                        raise mapped from exc
            finally:
                source.close()
            tar.add(copy, arcname="warden.db")
        held.append("warden.db")
    for rel in STATE_FILES:
        if os.path.lexists(home / rel):
            _add_tree(tar, home / rel, rel)
            held.append(rel)
    return held


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


def _remove_dead(folder: Path, prefix: str) -> None:
    """Remove what a dead writer left in `folder` as `PREFIX` + `PID.tmp` (a partial backup, the
    registry's copy, a restore's staging), as the sweeper finds and removes such leftovers (only
    those of this prefix here: the backup's folder is the person's, its other files not ours)."""
    leftovers = HostLeftovers()
    for path, pid in leftovers.temp_archives(str(folder)):
        if os.path.basename(path).startswith(prefix) and not alive(pid):
            leftovers.remove_scratch(path)


def _made_in(tar: tarfile.TarFile, members: list[tarfile.TarInfo]) -> dict[str, str]:
    """Where the backup was made ({"home", "workspaces_root"}), as its WARDEN-BACKUP says; {}
    for a backup of before it said so (its registry's `init` event then names the home)."""
    member = next(m for m in members if m.name == "WARDEN-BACKUP")
    if not member.isfile() or member.size > 8192:
        return {}
    handle = tar.extractfile(member)
    lines = handle.read().split(b"\n", 1) if handle is not None else []
    try:
        made = json.loads(lines[1]) if len(lines) > 1 and lines[1].strip() else {}
    except ValueError:
        return {}
    return {k: v for k, v in made.items() if k in ("home", "workspaces_root") and isinstance(v, str)} \
        if isinstance(made, dict) else {}


# A live sandbox, a background process, a lease's holder, an instance: what the processes of the
# home the backup was made in had going, which are not the restored home's to reach or stop.
_RUNNING = ("starting", "running")


def _relocate(db: Path, made: dict[str, str], home: Path, with_workspaces: bool) -> dict[str, object]:
    """The restored registry made this home's when the backup comes from another one.

    Its workspaces' paths (the folder, the venv, the archive, the layers) named the other home's
    files: a restore into a second home on the same machine then ran commands in the first
    home's folders, and its `destroy` deleted them. Paths under the other home now name this one
    (its workspaces root, when the backup holds the workspaces, this home's `workspaces`); paths
    elsewhere stay. And what the other home had running is not this one's: its live sandboxes
    (whose sockets reach the other home's supervisors) are forgotten, their running processes
    recorded lost, leases and terminal locks let go, its instances dropped."""
    conn = sqlite3.connect(db)
    try:
        old_home = made.get("home") or _home_of(conn)
        if (old_home is None or not old_home.startswith("/") or not old_home.strip("/")
                or os.path.realpath(old_home) == os.path.realpath(home)):
            return {}  # the same home, or none a path could be under ("/" would move every path)
        moves = [(old_home, str(home))]
        old_root = made.get("workspaces_root")
        if (with_workspaces and old_root and old_root.startswith("/") and old_root.strip("/")
                and old_root != os.path.join(old_home, "workspaces")):
            moves.insert(0, (old_root, str(home / "workspaces")))

        def moved(text: str) -> str:
            for old, new in moves:
                if text == old or text.startswith(old.rstrip("/") + "/"):
                    return new + text[len(old.rstrip("/")):]
            return text

        def moved_all(value: object) -> object:
            if isinstance(value, str):
                return moved(value)
            if isinstance(value, list):
                return [moved_all(v) for v in value]
            if isinstance(value, dict):
                return {k: moved_all(v) for k, v in value.items()}
            return value

        now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
        # A backup made without --workspaces names workspaces whose files it lacks: here they are
        # `broken`, which no repair mends (an archived one's files are in its archive).
        without_files: list[str] = []
        with conn:
            for row_id, name, status, path, meta in conn.execute(
                    "SELECT id, name, status, path, meta FROM workspaces ORDER BY name").fetchall():
                try:
                    fields = json.loads(meta or "{}")
                except ValueError:
                    fields = {}
                conn.execute("UPDATE workspaces SET path = ?, meta = ? WHERE id = ?",
                             (moved(path), json.dumps(moved_all(fields)), row_id))
                if not with_workspaces and status != "archived" and not os.path.isdir(moved(path)):
                    without_files.append(name)
            lost = [r[0] for r in _each(conn, "SELECT id FROM live_processes WHERE status IN (?, ?)", _RUNNING)]
            _each(conn, "UPDATE live_processes SET status = 'lost', ended_at = ? WHERE status IN (?, ?)",
                  (now, *_RUNNING))
            sandboxes = len(_each(conn, "DELETE FROM live_sandboxes RETURNING id"))
            _each(conn, "UPDATE workspace_leases SET holders = '[]'")
            _each(conn, "UPDATE workspace_leases SET terminal_lock = NULL")
            _each(conn, "DELETE FROM instances")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all of it in the one file that is moved into place
        return {"moved_from": old_home, "sandboxes_forgotten": sandboxes, "processes_lost": lost,
                "workspaces_without_files": without_files}
    finally:
        conn.close()


def _each(conn: sqlite3.Connection, statement: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """`statement`'s rows; none where the backup's registry is older than its table or column
    (the migrations bring it up to date when the home is next opened)."""
    try:
        return conn.execute(statement, args).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc) or "no such column" in str(exc):
            return []
        raise


def _home_of(conn: sqlite3.Connection) -> str | None:
    """The home a registry was made in, for a backup that does not say: the folder its
    workspaces' folders are in (`HOME/workspaces/NAME`, all of them), else its first `init`
    event's target (a home copied elsewhere keeps its first one's)."""
    try:
        rows = conn.execute("SELECT name, path FROM workspaces").fetchall()
        roots = {os.path.dirname(path) for name, path in rows if os.path.basename(path) == name}
        if len(roots) == 1 and len(rows) == sum(1 for name, path in rows if os.path.basename(path) == name):
            root = roots.pop()
            if isinstance(root, str) and os.path.basename(root) == "workspaces" and root.startswith("/"):
                return os.path.dirname(root)
        row = conn.execute("SELECT target FROM audit_events WHERE action = 'init' ORDER BY seq LIMIT 1").fetchone()
    except sqlite3.Error:
        return None
    target = row[0] if row else None
    return target if isinstance(target, str) and target.startswith("/") else None


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
    _remove_dead(home, ".restore.")
    with _scratch(home, "restore") as staging:
        wanted = [m for m in members if m.name != "WARDEN-BACKUP"]
        if hasattr(tarfile, "tar_filter"):  # Python >= 3.11.4: the library checks once more
            tar.extractall(staging, members=wanted, filter="tar")
        else:  # the checks above and _no_path_through_links are the whole guard then
            tar.extractall(staging, members=wanted)  # noqa: S202 - every member checked above
        moved: dict[str, object] = {}
        if "warden.db" in tops:
            moved = _relocate(staging / "warden.db", _made_in(tar, members), home, "workspaces" in tops)
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
    return {"restored": sorted(tops), "set_aside": set_aside, **moved}
