"""Alembic environment: online migrations only, URL from the caller's config.

Every migration runs in one transaction, the version stamp included, on SQLite too: there
pysqlite would otherwise commit each CREATE TABLE on its own, and a process killed half-way
through (a first `warden` command interrupted) would leave tables without a version, which
every later start fails to migrate ("table workspaces already exists"). SQLite's DDL is
transactional once the driver leaves the transaction to us (SQLAlchemy's documented recipe).
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import create_engine, event, pool

from warden.adapters.store.schema import metadata

config = context.config
url = config.get_main_option("sqlalchemy.url") or ""
# SQLite waits as long as the registry's own connections for another process's lock (pysqlite's
# default is 5 s: on a loaded machine a `warden init` beside three others failed "locked").
waits = config.attributes.get("busy_timeout")
engine = create_engine(url, poolclass=pool.NullPool,
                       connect_args={"timeout": waits} if waits is not None and url.startswith("sqlite") else {})
if engine.dialect.name == "sqlite":
    @event.listens_for(engine, "connect")
    def _no_driver_transactions(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin_exclusive(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN EXCLUSIVE")

with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=metadata, transactional_ddl=True,
                      render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()
