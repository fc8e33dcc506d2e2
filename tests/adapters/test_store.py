"""The registry store: migrations, WAL, and concurrent writers."""

from __future__ import annotations

import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from warden.adapters.store import db as db_module
from warden.adapters.store.db import SCHEMA_REVISION, SqliteDatabase, connect_ahead, open_database
from warden.adapters.store.migrate import head_revision
from warden.adapters.store.registry import SqlRegistry
from warden.bootstrap import App
from warden.core.errors import Conflict, Locked


def test_schema_revision_matches_alembic_head() -> None:
    assert head_revision() == SCHEMA_REVISION


def test_sqlite_is_in_wal_mode(app: App, home: Path) -> None:
    app.workspaces.list()
    with sqlite3.connect(home / "warden.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_reopening_does_not_migrate_again(home: Path) -> None:
    open_database(None, home).close()
    with sqlite3.connect(home / "warden.db") as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(SCHEMA_REVISION,)]
    open_database(None, home).close()


def test_same_name_twice_conflicts(app: App) -> None:
    app.workspaces.create("one")
    with pytest.raises(Conflict):
        app.workspaces.create("one")


def test_concurrent_audit_appends_keep_the_chain(app: App) -> None:
    def write(i: int) -> None:
        app.audit.record(actor="t", action="op", target=str(i))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write, range(40)))
    count, broken = app.audit.verify()
    assert count == 40 and broken is None


def test_a_migration_that_dies_half_way_leaves_nothing_half_made(tmp_path: Path) -> None:
    """A first command killed between two CREATE TABLEs must not leave tables without a version
    (every later start would fail with "table ... already exists")."""
    import sqlite3

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from warden.adapters.store.db import open_database
    from warden.adapters.store.migrate import upgrade

    created: list[str] = []

    def die_on_the_second_table(conn: object, cursor: object, statement: str, *args: object) -> None:
        if statement.lstrip().upper().startswith("CREATE TABLE"):
            created.append(statement)
            if len(created) == 2:
                raise KeyboardInterrupt  # as if killed here

    event.listen(Engine, "before_cursor_execute", die_on_the_second_table)
    try:
        with pytest.raises(KeyboardInterrupt):
            upgrade(f"sqlite:///{tmp_path / 'warden.db'}")
    finally:
        event.remove(Engine, "before_cursor_execute", die_on_the_second_table)
    with sqlite3.connect(tmp_path / "warden.db") as conn:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert tables == []
    db = open_database(None, tmp_path)  # the next start migrates cleanly
    try:
        with db.transaction() as tx:
            assert tx.execute("SELECT count(*) AS n FROM workspaces") == [{"n": 0}]
    finally:
        db.close()


def _holding_the_write_lock(path: Path, seconds: float) -> threading.Thread:
    """Another process's writer: holds the registry's write lock for `seconds` from now."""
    held = threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(seconds)
        conn.execute("COMMIT")
        conn.close()

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(5)
    return thread


def test_a_migration_waits_for_another_process_as_the_registry_does(tmp_path: Path) -> None:
    """Alembic's connection used pysqlite's own 5 s for another process's lock, whatever the
    registry waits (30 s, WARDEN_DB_BUSY_TIMEOUT): a `warden init` beside three others on a
    loaded machine failed "locked". Shown by a short wait being kept, not waited past."""
    from alembic import command

    from warden.adapters.store.migrate import alembic_config

    command.upgrade(alembic_config(f"sqlite:///{tmp_path / 'warden.db'}"), "0007")
    with sqlite3.connect(tmp_path / "warden.db") as conn:
        conn.execute("PRAGMA journal_mode=WAL")  # as every registry Warden made: readers never wait
    writer = _holding_the_write_lock(tmp_path / "warden.db", 1.5)
    started = time.monotonic()
    try:
        with pytest.raises(Locked):
            open_database(None, tmp_path, busy_timeout=0.2)
        assert time.monotonic() - started < 1.5
    finally:
        writer.join()
    open_database(None, tmp_path).close()  # the lock gone, it migrates
    with sqlite3.connect(tmp_path / "warden.db") as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(SCHEMA_REVISION,)]


def test_a_process_that_waited_for_another_ones_migration_does_not_migrate_again(tmp_path: Path) -> None:
    """Four first commands at once: each saw no schema, one migrated while the others waited for
    the migration lock; those then found it done rather than queueing an exclusive transaction
    behind the first one's writes (which, on a loaded machine, ran out their wait)."""
    db = open_database(None, tmp_path)
    writer = _holding_the_write_lock(tmp_path / "warden.db", 1.5)
    try:
        db_module._migrate(f"sqlite:///{tmp_path / 'warden.db'}", tmp_path, busy_timeout=0.2,
                           current=lambda: db_module._stored_revision(db))
    finally:
        writer.join()
        db.close()


def _first_connection(path: Path) -> sqlite3.Connection:
    return SqliteDatabase(path)._connection()


def test_a_connection_opened_ahead_is_the_one_the_next_open_uses_once(home: Path) -> None:
    """The daemon's spare connects to the registry while it waits; the run it then serves opens
    the registry and gets that connection, and only that one open does."""
    open_database(None, home).close()
    path = home / "warden.db"
    connect_ahead(path)
    ahead = db_module._ahead[path][0]
    assert _first_connection(path) is ahead
    assert _first_connection(path) is not ahead


def test_a_registry_renamed_into_place_is_not_written_through_a_connection_opened_before(home: Path) -> None:
    """A restore renames another registry file into place: a connection opened ahead on the
    file it replaced must not be used (its writes would go to the file set aside)."""
    open_database(None, home).close()
    path = home / "warden.db"
    connect_ahead(path)
    ahead = db_module._ahead[path][0]
    aside = home / "warden.db.replaced"
    path.rename(aside)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    fresh = sqlite3.connect(path)
    fresh.execute("CREATE TABLE restored (x)")
    fresh.commit()
    fresh.close()
    conn = _first_connection(path)
    assert conn is not ahead
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'restored'").fetchall() == [("restored",)]
    with pytest.raises(sqlite3.ProgrammingError):  # the one opened ahead was closed, not kept
        ahead.execute("SELECT 1")


def test_connecting_ahead_never_makes_a_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A home being removed (its registry gone between the look and the connection) gets no new,
    empty registry from a spare that connects ahead."""
    path = tmp_path / "warden.db"
    connect_ahead(path)  # nothing there: nothing done
    monkeypatch.setattr(db_module, "_file_at", lambda where: (0, 0))  # gone right after the look
    with pytest.raises(sqlite3.OperationalError):
        connect_ahead(path)
    assert list(tmp_path.iterdir()) == [] and path not in db_module._ahead


def test_a_checkpoint_puts_commits_in_the_file_while_another_connection_stays_open(home: Path) -> None:
    """With another connection open (the waiting spare's), closing is no checkpoint: `checkpoint`
    copies the write-ahead log into the database file itself."""
    open_database(None, home).close()
    path = home / "warden.db"
    other = sqlite3.connect(path)
    other.execute("SELECT 1 FROM alembic_version").fetchall()
    db = SqliteDatabase(path)
    marker = f"checkpoint-marker-{id(db)}"
    with db.transaction() as tx:
        tx.execute("CREATE TABLE IF NOT EXISTS probe (text TEXT)")
        tx.execute("INSERT INTO probe VALUES (:t)", {"t": marker})
    assert marker.encode() not in path.read_bytes()  # in the write-ahead log only
    db.checkpoint()
    assert marker.encode() in path.read_bytes()
    db.close()
    other.close()


def test_a_registry_renamed_into_place_while_a_connection_is_opened_ahead_is_not_written_through_it(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restore may rename another registry into place while the spare connects: the file its
    connection opened is then the one set aside, and the run it serves must not write there."""
    open_database(None, home).close()
    path = home / "warden.db"
    restored = home / "restored.db"
    sqlite3.connect(restored).execute("CREATE TABLE restored (x)").connection.close()
    connect = db_module._connect

    def restored_meanwhile(where: Path, busy_timeout: float, *, create: bool = True) -> sqlite3.Connection:
        conn = connect(where, busy_timeout, create=create)
        path.rename(home / "warden.db.replaced")  # what adapters/backup.py's restore does
        restored.rename(path)
        return conn

    monkeypatch.setattr(db_module, "_connect", restored_meanwhile)
    connect_ahead(path)
    monkeypatch.setattr(db_module, "_connect", connect)
    ahead = db_module._ahead[path][0]
    conn = _first_connection(path)
    assert conn is not ahead
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'restored'").fetchall() == [("restored",)]
    conn.close()


def test_a_registry_lost_after_it_was_opened_is_not_made_again_empty(home: Path) -> None:
    """The daemon's heartbeat reconnects through the same registry at each beat: a registry
    removed meanwhile must stay missing (`check_registry` then calls it lost), not come back as a
    new, empty file the next command would take for the registry."""
    db = open_database(None, home)
    db.close()
    path = home / "warden.db"
    for name in ("warden.db", "warden.db-wal", "warden.db-shm"):
        (home / name).unlink(missing_ok=True)
    with pytest.raises(sqlite3.OperationalError), db.transaction() as tx:
        tx.execute("SELECT 1")
    assert not path.exists() and not Path(f"{path}-wal").exists()


def test_a_rehearsal_reads_on_the_connection_opened_ahead_writes_nothing_and_gives_it_back(
        home: Path, environ: dict[str, str]) -> None:
    """The daemon's spare rehearses the registry reads of a run in the last run's workspace on
    the connection it opened ahead: that connection, its statements compiled, is still the one
    the run's open adopts, and nothing was written."""
    from warden.bootstrap import bootstrap

    setup = bootstrap(home, environ=environ)
    record = setup.workspaces.create("rh", template="minimal")
    setup.close()
    path = home / "warden.db"
    connect_ahead(path)
    ahead = db_module._ahead[path][0]
    changes = ahead.total_changes
    spare = bootstrap(home, environ=environ)
    spare.rehearse_run(record.path)
    assert db_module._ahead[path][0] is ahead and ahead.total_changes == changes and not ahead.in_transaction
    assert _first_connection(path) is ahead
    spare.rehearse_run("/no/such/workspace")  # nothing to read: still given back
    spare.close()


def test_a_write_held_by_another_connection_is_locked_and_an_sql_error_stays_itself(tmp_path: Path) -> None:
    # Every statement, BEGIN and COMMIT maps SQLite's errors by cause (db._mapped): "database is
    # locked" reaches the caller as Locked (the CLI's and the API's `locked`), caused by SQLite's
    # own error; any other SQL error goes on as it was.
    from warden.core.errors import Locked

    path = tmp_path / "reg.db"
    waiting = SqliteDatabase(path, busy_timeout=0.05)
    with waiting.transaction() as sql:  # connected (WAL) before the other takes the lock
        sql.execute("CREATE TABLE t (x)")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # holds the write lock
    try:
        with pytest.raises(Locked) as locked, waiting.transaction():
            pass
        assert isinstance(locked.value.__cause__, sqlite3.OperationalError)
        with waiting.transaction(write=False) as sql:
            with pytest.raises(sqlite3.OperationalError, match="no such table"):
                sql.execute("SELECT * FROM missing")
            assert sql.execute("SELECT count(*) AS n FROM t") == [{"n": 0}]
        waiting.close()
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_a_block_that_raises_is_rolled_back_and_a_held_lock_is_locked(home: Path) -> None:
    """The SQLite transaction and statement, written out as classes (one exec runs four and some
    twenty of them): a block that raises leaves nothing written and the connection free for the
    next; "database is locked", at BEGIN or at a statement, is Locked."""
    from warden.core.errors import Locked

    db = open_database(None, home)
    try:
        with pytest.raises(RuntimeError), db.transaction() as sql:
            sql.execute("UPDATE alembic_version SET version_num = 'gone'")
            raise RuntimeError("the block failed")
        with db.transaction(write=False) as sql:
            assert sql.execute("SELECT version_num FROM alembic_version") == [{"version_num": SCHEMA_REVISION}]
        other = sqlite3.connect(home / "warden.db", isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            waiting = SqliteDatabase(home / "warden.db", busy_timeout=0.05)
            with pytest.raises(Locked), waiting.transaction():
                pass
            with pytest.raises(Locked), waiting.transaction(write=False) as sql:
                sql.execute("UPDATE alembic_version SET version_num = 'gone'")
            waiting.close()
        finally:
            other.execute("ROLLBACK")
            other.close()
        with db.transaction(write=False) as sql:
            assert sql.execute("SELECT version_num FROM alembic_version") == [{"version_num": SCHEMA_REVISION}]
    finally:
        db.close()


@pytest.mark.parametrize("layer", ["database", "registry"])
def test_a_stop_as_begin_returns_leaves_no_transaction_open(home: Path, layer: str) -> None:
    """Ctrl-C (or the CLI's SIGTERM) while BEGIN IMMEDIATE waits for another process's lock is
    handled by Python as BEGIN returns, inside the transaction's __enter__: the transaction was left
    begun with no __exit__ to end it, this thread held the write lock for as long as it lived, and
    its next transaction failed. A stress of stopped `warden run --detach` found the run's release
    failing so (its intent audited `run.lost` while its process ran on to its own outcome)."""
    open_database(None, home).close()
    database = SqliteDatabase(home / "warden.db", busy_timeout=30)
    store = database if layer == "database" else SqlRegistry(database)
    other = sqlite3.connect(home / "warden.db", isolation_level=None, timeout=0, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another process's write: this thread's BEGIN waits for it

    def stop_then_let_go() -> None:
        time.sleep(0.3)  # the BEGIN below is waiting by now
        import os
        import signal

        os.kill(os.getpid(), signal.SIGINT)  # handled in the main thread once BEGIN returns
        time.sleep(0.2)
        other.execute("COMMIT")

    helper = threading.Thread(target=stop_then_let_go)
    helper.start()
    try:
        with pytest.raises(KeyboardInterrupt), store.transaction():
            time.sleep(5)  # not reached: the stop comes as the transaction begins
    finally:
        helper.join()
    other.close()
    _nothing_held(home, store)
    database.close()


def _nothing_held(home: Path, store: SqliteDatabase | SqlRegistry) -> None:
    """Another connection takes the write lock at once, and this thread's next transaction of
    `store` begins and commits."""
    other = sqlite3.connect(home / "warden.db", isolation_level=None, timeout=0)
    other.execute("BEGIN IMMEDIATE")
    other.execute("ROLLBACK")
    other.close()
    with store.transaction():
        pass


def test_a_stop_between_the_two_layers_begun_leaves_no_transaction_open(home: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry's transaction wraps the database's: a stop raised once the database's had
    begun but before the registry's was returned (as a call there returns) left it open too."""
    from warden.adapters.store import registry as registry_module

    open_database(None, home).close()
    database = SqliteDatabase(home / "warden.db", busy_timeout=30)
    store = registry_module.SqlRegistry(database)
    wrap = registry_module.SqlTx

    def stopped(sql: object) -> object:
        monkeypatch.setattr(registry_module, "SqlTx", wrap)  # once
        raise KeyboardInterrupt

    monkeypatch.setattr(registry_module, "SqlTx", stopped)
    with pytest.raises(KeyboardInterrupt), store.transaction():
        pass
    _nothing_held(home, store)
    database.close()


def test_a_stop_while_begin_waits_for_another_process_is_handled_at_once(home: Path) -> None:
    """Ctrl-C on a command whose registry another process holds (a `warden` suspended by Ctrl-Z
    as it wrote, a long backup): SQLite's wait for the lock sleeps in C, and Python handled the
    stop only once the other let go or 30 s passed. Now within a slice of the wait; the lock is
    still waited for as long as before by a command nobody stops, and nothing is left held."""
    import os
    import signal

    open_database(None, home).close()
    database = SqliteDatabase(home / "warden.db", busy_timeout=30)
    other = sqlite3.connect(home / "warden.db", isolation_level=None, timeout=0, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another process's write, held past this test's stop
    stopped_at: list[float] = []

    def stop() -> None:
        time.sleep(0.3)  # the BEGIN below is waiting by now
        stopped_at.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    helper = threading.Thread(target=stop)
    helper.start()
    try:
        with pytest.raises(KeyboardInterrupt), database.transaction():
            pass
        handled_at = time.monotonic()
    finally:
        helper.join()
        other.execute("ROLLBACK")
    assert handled_at - stopped_at[0] < 1.0, f"the stop waited {handled_at - stopped_at[0]:.1f} s for the lock"
    with database.transaction() as sql:  # nothing held; the wait is SQLite's whole one again
        assert sql.execute("PRAGMA busy_timeout") == [{"timeout": 30000}]
    other.execute("BEGIN IMMEDIATE")
    other.execute("ROLLBACK")
    other.close()
    database.close()
