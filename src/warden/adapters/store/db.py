"""Database access for the registry.

Statements are plain SQL with `:name` parameters, portable between SQLite (>= 3.35, for
RETURNING) and PostgreSQL. The embedded default runs them on the standard library's
`sqlite3`; any other URL (PostgreSQL for several machines) runs them through SQLAlchemy
Core's `text()`. Why two executors: importing SQLAlchemy costs a few hundred milliseconds
(about 280 ms when measured), more than the whole budget of `warden run` (150 ms), and every
CLI command opens the registry. The schema itself is SQLAlchemy metadata migrated by Alembic
(schema.py, migrations/), which is imported only when the stored revision is behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from warden.core import stops
from warden.core.errors import Conflict, Locked, Unavailable, classify

__all__ = ["BUSY_TIMEOUT", "SCHEMA_REVISION", "Database", "Row", "Sql", "open_database"]

# The Alembic head revision this code expects; tests pin it against migrations/versions.
SCHEMA_REVISION = "0008"

Row = dict[str, Any]

# Seconds a statement waits for another process's lock before it fails as `locked`.
BUSY_TIMEOUT = 30.0


class _mapped:  # (lower case, as contextlib.suppress: used as `with _mapped(where):`)
    """sqlite3's "database is locked" as Locked and "database or disk is full" as Unavailable.

    A class rather than a generator-based context manager: it is entered around every statement,
    BEGIN and COMMIT (some sixty times a command), and @contextmanager costs ~1.4 µs an entry."""

    __slots__ = ("where",)

    def __init__(self, where: str) -> None:
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if isinstance(exc, sqlite3.OperationalError | OSError):
            mapped = self.of(exc, self.where)
            if mapped is not None:
                raise mapped from exc
        # None: whatever was raised goes on as it was

    @staticmethod
    def of(exc: sqlite3.OperationalError | OSError, where: str) -> Exception | None:
        """What `exc` is raised as (None: as it is)."""
        return classify(exc, where) or _no_room(exc, where)


# Less free space than this beside the registry, and SQLite's "disk I/O error" is a full disk.
_ROOM = 1 << 20


def _no_room(exc: BaseException, where: str) -> Unavailable | None:
    """SQLite's "disk I/O error" on a full disk as the full disk it is: SQLite says "database or
    disk is full" only when the database or its WAL cannot grow; the shared-memory index it
    makes beside them (-shm, as a registry is opened, or grows) fails as SQLITE_IOERR_SHMSIZE
    and the like, and "cannot reach the registry ...: disk I/O error" sent the person looking
    for a broken disk. Told by the free space where the registry is."""
    if "disk I/O error" not in str(exc):
        return None
    try:
        room = os.statvfs(os.path.dirname(where) or ".")
    except OSError:
        return None
    if room.f_bavail * room.f_frsize >= _ROOM:
        return None
    return Unavailable(f"no space left on {where}; free some space")


class Sql(Protocol):
    """Statements inside one transaction. `dialect` is "sqlite" or "postgresql"."""

    dialect: str

    def execute(self, sql: str, params: Mapping[str, object] | None = None) -> list[Row]: ...

    def executemany(self, sql: str, rows: Sequence[Mapping[str, object]]) -> None: ...


class Database(Protocol):
    url: str

    def transaction(self, *, write: bool = True) -> contextlib.AbstractContextManager[Sql]: ...

    def checkpoint(self) -> None: ...

    def give_back_ahead(self) -> None: ...

    def close(self) -> None: ...


class _SqliteTx:
    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection, where: str) -> None:
        self._conn = conn
        self._where = where

    def execute(self, sql: str, params: Mapping[str, object] | None = None) -> list[Row]:
        # What `with _mapped(...)` does, written out: this runs for every statement (some twenty
        # an exec), and the context manager's three calls were a tenth of the Python it costs.
        try:
            cursor = self._conn.execute(sql, dict(params or {}))
            if cursor.description is None:
                return []
            names = [column[0] for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        except sqlite3.IntegrityError as exc:
            raise Conflict(f"already exists or still in use ({exc})") from exc
        except (sqlite3.OperationalError, OSError) as exc:
            mapped = _mapped.of(exc, self._where)
            if mapped is not None:
                raise mapped from exc
            raise

    def executemany(self, sql: str, rows: Sequence[Mapping[str, object]]) -> None:
        with _mapped(self._where):
            self._conn.executemany(sql, [dict(r) for r in rows])


class _SqliteTransaction:
    """One transaction of a SqliteDatabase: begun as the block is entered, committed as it ends,
    rolled back when it raises. A class rather than a generator-based context manager: an exec
    makes four transactions, and @contextmanager costs several calls an entry and an exit."""

    __slots__ = ("_conn", "_db", "_where", "_write")

    def __init__(self, db: SqliteDatabase, write: bool) -> None:
        self._db = db
        self._write = write
        self._conn: sqlite3.Connection | None = None

    def __enter__(self) -> Sql:
        conn = self._conn = self._db._connection()
        where = self._where = str(self._db.path)
        try:
            # BEGIN IMMEDIATE takes the write lock at the start, so read-then-write sequences
            # (the audit hash chain, unique names) cannot interleave with another process.
            with _mapped(where):
                if self._write and threading.current_thread() is threading.main_thread():
                    _begin_in_slices(conn, self._db.busy_timeout)
                else:
                    conn.execute("BEGIN IMMEDIATE" if self._write else "BEGIN")
            return _SqliteTx(conn, where)
        except BaseException:
            # A person's stop raised as BEGIN returned (Python runs a signal's handler there; one
            # that came while BEGIN IMMEDIATE waited for another process's lock runs exactly
            # then) left the transaction begun with no __exit__ to end it: this thread held the
            # write lock until it exited, and its next transaction failed ("cannot start a
            # transaction within a transaction"): a run's release among them, its intent left
            # for a `run.lost` while its background process ran on to its own outcome.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        conn = self._conn
        if conn is None:  # never begun (its connection could not be opened)
            return
        if kind is not None:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return  # what the block raised goes on
        with _mapped(self._where):
            try:
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise


# On the main thread BEGIN IMMEDIATE waits for another process's write lock in slices of this
# many milliseconds. SQLite's own wait (busy_timeout) sleeps in C, and Python runs a signal's
# handler only once it returns: a person's Ctrl-C (or SIGTERM) on a command whose registry
# another process held (a `warden` suspended by Ctrl-Z mid-write, a long backup) did nothing
# until that one let go or BUSY_TIMEOUT (30 s) passed. It is handled between two slices now.
# Only the main thread gets a handler: the others wait in one, at no cost.
_BEGIN_SLICE_MS = 50


def _begin_in_slices(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """BEGIN IMMEDIATE, waiting up to `busy_timeout` seconds for the write lock as SQLite would,
    in slices a signal's handler can run between."""
    deadline = time.monotonic() + busy_timeout
    conn.execute(f"PRAGMA busy_timeout={_BEGIN_SLICE_MS}")
    try:
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                    raise
                stops.raise_unwritten()  # a stop a whole write holds, before it wrote anything
    finally:
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")


def _connect(path: Path, busy_timeout: float, *, create: bool = True) -> sqlite3.Connection:
    """A connection to `path`; `create` False: fails where there is no registry, makes none."""
    if create:
        conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    else:
        from urllib.parse import quote

        conn = sqlite3.connect(f"file:{quote(str(path))}?mode=rw", timeout=busy_timeout, isolation_level=None,
                               check_same_thread=False, uri=True)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
    return conn


# A connection this process opened before it knew it would need one, with the file it opened
# (device, inode): the home's daemon's spare opens the registry's while it waits (connecting,
# WAL and pragmas, the schema read: ~2 ms a client would otherwise wait for), and the run it
# serves takes it. Opened in this process, after its fork: an SQLite connection never crosses one.
_ahead: dict[Path, tuple[sqlite3.Connection, tuple[int, int]]] = {}


# Whether this process leaves its SQLite connections to its exit rather than closing them
# (`leave_open_at_exit`), and those it left.
_leave_open = False
_left_open: list[sqlite3.Connection] = []


def leave_open_at_exit() -> None:
    """This process ends by os._exit once its work is done (a child of the home's daemon): its
    connections to an SQLite registry are left to that exit, never closed.

    A close that is the registry's last checkpoints it (the WAL copied into the database file,
    which is synced) and removes the WAL; the next process's first commit then starts a new WAL,
    whose header SQLite syncs: 0.8–7 ms here, inside the next `warden run` its person waits for.
    An exit without the close loses nothing (every commit is in the WAL, as after a crash, which
    SQLite is made for); the WAL stays, and the daemon's heartbeat checkpoints it instead
    (`Database.checkpoint`).
    """
    global _leave_open
    _leave_open = True


def _file_at(path: Path) -> tuple[int, int] | None:
    """The (device, inode) of the regular file at `path`, None if there is none."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino) if stat.S_ISREG(info.st_mode) else None


def connect_ahead(path: Path) -> None:
    """Open this process's connection to the SQLite registry at `path` for its first use (see
    `_ahead`). Nothing if there is no registry there yet."""
    # Which file it is, taken before connecting: one renamed into place meanwhile (a restore)
    # then differs from it, and the connection, to the file set aside, is never used.
    opened = None if path in _ahead else _file_at(path)
    if opened is None:
        return
    conn = _connect(path, BUSY_TIMEOUT, create=False)  # a home being removed gets no new registry
    try:
        conn.execute("SELECT version_num FROM alembic_version").fetchall()  # reads the schema in
    except BaseException:
        conn.close()
        raise
    _ahead[path] = (conn, opened)


def _taken_ahead(path: Path) -> tuple[sqlite3.Connection, tuple[int, int]] | None:
    """The connection opened ahead for `path` and the file it opened, if that is still the
    registry's file there (a restore from backup renames another into place: that one is closed,
    never used)."""
    entry = _ahead.pop(path, None)
    if entry is None:
        return None
    conn, opened = entry
    if _file_at(path) != opened:
        conn.close()
        return None
    return entry


def sqlite_path(url: str | None, home: Path) -> Path | None:
    """The SQLite registry's file for `url` (None: the default in `home`), None for another database."""
    if url is None:
        return home / "warden.db"
    return Path(url[len("sqlite:///"):]) if url.startswith("sqlite:///") else None


class SqliteDatabase:
    """SQLite in WAL mode; one connection per thread, writes take the lock up front."""

    def __init__(self, path: Path, busy_timeout: float = BUSY_TIMEOUT) -> None:
        self.path = path
        self.url = f"sqlite:///{path}"
        self.busy_timeout = busy_timeout
        self._local = threading.local()
        # Once this registry was opened no connection makes it again: a file gone since was lost,
        # which a later connection (the daemon's heartbeat reconnects at each beat) must not hide
        # behind a new, empty one that `check_registry` then takes for the registry.
        self._opened = False

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            with _mapped(str(self.path)):
                taken = _taken_ahead(self.path)
                # This thread's connection and, adopted from `_ahead`, the file it opened.
                conn, self._local.ahead_file = taken if taken is not None else (None, None)
                if conn is None:
                    conn = _connect(self.path, self.busy_timeout, create=not self._opened)
                else:
                    conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
            self._local.conn = conn
            self._opened = True
        return conn

    def transaction(self, *, write: bool = True) -> contextlib.AbstractContextManager[Sql]:
        return _SqliteTransaction(self, write)

    def checkpoint(self) -> None:
        """Copy the WAL's committed pages into the database file and sync it, as the last
        connection's close does: the daemon's spare keeps a connection open while it waits, so
        no other close is the last, and without this commits would wait in the WAL (not synced
        at commit: synchronous=NORMAL) for the next automatic checkpoint, 1,000 pages on."""
        with _mapped(str(self.path)):
            self._connection().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def give_back_ahead(self) -> None:
        """Put this thread's connection back as the one opened ahead, if it was adopted from
        there (the daemon's spare, after its rehearsal: the next open of this registry, the run's,
        adopts it with the statements SQLite compiled meanwhile in its cache)."""
        conn, opened = getattr(self._local, "conn", None), getattr(self._local, "ahead_file", None)
        if conn is not None and opened is not None and not conn.in_transaction:
            _ahead[self.path] = (conn, opened)
            self._local.conn = None
            self._local.ahead_file = None

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            if _leave_open:
                _left_open.append(conn)  # referenced until the exit, so no finalizer closes it
            else:
                conn.close()
            self._local.conn = None


class _SqlalchemyTx:
    def __init__(self, conn: Any, dialect: str) -> None:
        self._conn = conn
        self.dialect = dialect

    def execute(self, sql: str, params: Mapping[str, object] | None = None) -> list[Row]:
        from sqlalchemy import exc as sa_exc
        from sqlalchemy import text

        try:
            result = self._conn.execute(text(sql), dict(params or {}))
        except sa_exc.IntegrityError as exc:
            raise Conflict(f"already exists or still in use ({exc.orig})") from exc
        except sa_exc.OperationalError as exc:  # locked, disk full: by cause; else as it came
            mapped = classify(exc.orig or exc)
            if mapped is None:
                raise
            raise mapped from exc
        if not result.returns_rows:
            return []
        return [dict(row._mapping) for row in result]

    def executemany(self, sql: str, rows: Sequence[Mapping[str, object]]) -> None:
        from sqlalchemy import text

        if rows:
            self._conn.execute(text(sql), [dict(r) for r in rows])


class SqlalchemyDatabase:
    """Any SQLAlchemy URL; used for PostgreSQL (`WARDEN_DATABASE_URL`)."""

    def __init__(self, url: str) -> None:
        from sqlalchemy import create_engine

        self.url = url
        try:
            self._engine = create_engine(url, pool_pre_ping=True)
        except Exception as exc:  # a missing driver or a malformed URL
            raise Unavailable(f"cannot use database {url.split('@')[-1]!r}: {exc}; "
                              "check WARDEN_DATABASE_URL and install warden[postgres]") from exc
        self.dialect = self._engine.dialect.name

    @contextlib.contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Sql]:
        """One transaction; the server gone (stopped, restarted, the network cut) is Unavailable,
        whether at connect or mid-transaction, rather than an internal error (a 500)."""
        from sqlalchemy import exc as sa_exc

        try:
            conn = self._engine.connect()  # the pool's ping reconnects a stale connection first
        except sa_exc.DBAPIError as exc:
            raise _unreachable(self.url, exc) from exc
        try:
            with conn, conn.begin():
                yield _SqlalchemyTx(conn, self.dialect)
        except sa_exc.DBAPIError as exc:
            if not exc.connection_invalidated:  # a disconnect, as the dialect tells it
                raise
            raise Unavailable(f"lost the connection to the registry at {self.url.split('@')[-1]} "
                              f"({_first_line(exc)}); what this command was writing may not have been saved; "
                              "try again when it is back", rule="registry.down") from exc

    def checkpoint(self) -> None:
        """Nothing: the database server keeps its own log."""

    def give_back_ahead(self) -> None:
        """Nothing: no connection is opened ahead to a database server."""

    def close(self) -> None:
        self._engine.dispose()


def _first_line(exc: BaseException) -> str:
    """The driver's own message, first line: psycopg's runs to three, SQLAlchemy adds its SQL and a link."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0].strip() if lines else type(exc).__name__


def _unreachable(url: str, exc: BaseException) -> Unavailable:
    return Unavailable(f"cannot reach the registry at {url.split('@')[-1]}: {_first_line(exc)}; "
                       "try again when it is back", rule="registry.down")


def _stored_revision(db: Database) -> str | None:
    try:
        with db.transaction(write=False) as tx:
            rows = tx.execute("SELECT version_num FROM alembic_version")
    except (sqlite3.OperationalError, Exception) as exc:  # no table yet
        if "alembic_version" in str(exc) or "no such table" in str(exc) or "does not exist" in str(exc):
            return None
        raise
    return str(rows[0]["version_num"]) if rows else None


def _private(path: Path) -> None:
    """The SQLite registry made (or kept) readable by its owner alone: it holds the audit log's
    commands and paths, the grants' token hashes and the sealed secrets. SQLite makes a new file
    by the umask (0644) and gives its -wal and -shm files the database file's mode."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        with contextlib.suppress(OSError):  # not ours to change (a read-only copy): as it is
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_mode & 0o077 and st.st_uid == os.geteuid():
                os.chmod(path, 0o600)
        return
    except OSError:
        return  # SQLite says why it cannot make it
    os.close(fd)


def open_database(url: str | None, home: Path, *, busy_timeout: float = BUSY_TIMEOUT,
                  node: str | None = None) -> Database:
    """Open the registry at `url` (default: SQLite in `home`), migrating it to SCHEMA_REVISION
    (`node`: the node that migrates, owner of workspaces whose metadata names no host)."""
    db: Database
    path = sqlite_path(url, home)
    if path is not None:
        _private(path)
        db = SqliteDatabase(path, busy_timeout)
        sa_url = f"sqlite:///{path}"
    else:
        sa_url = str(url)
        db = SqlalchemyDatabase(sa_url)
    try:
        current = _stored_revision(db)
    except (Locked, Unavailable):
        raise
    except Exception as exc:
        mapped = classify(exc) or (_no_room(exc, str(path)) if path is not None else None)
        if mapped is not None:
            raise mapped from exc
        raise _unreachable(db.url, exc) from exc
    if current != SCHEMA_REVISION:
        _migrate(sa_url, home, node, busy_timeout=busy_timeout, current=lambda: _stored_revision(db))
    return db


def _migrate(url: str, home: Path, node: str | None = None, *, busy_timeout: float = BUSY_TIMEOUT,
             current: Callable[[], str | None] | None = None) -> None:
    """Run Alembic to head, one process at a time (first use, upgrades)."""
    home.mkdir(parents=True, exist_ok=True)
    lock_fd = os.open(home / ".migrate.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        # The process this one waited for has usually migrated it: Alembic's exclusive
        # transaction would then only queue behind that process's first writes for nothing.
        if current is not None and current() == SCHEMA_REVISION:
            return
        from warden.adapters.store.migrate import upgrade

        try:
            upgrade(url, node=node, busy_timeout=busy_timeout)
        except Exception as exc:  # SQLAlchemy's wrapper: "locked", "full" by the driver's cause
            mapped = classify(getattr(exc, "orig", None) or exc)
            if mapped is None:
                raise
            raise mapped from exc
    finally:
        os.close(lock_fd)
