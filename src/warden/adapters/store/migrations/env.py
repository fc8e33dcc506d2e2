"""Alembic environment: online migrations only, URL from the caller's config."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from warden.adapters.store.schema import metadata

config = context.config
engine = create_engine(config.get_main_option("sqlalchemy.url") or "", poolclass=pool.NullPool)
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=metadata,
                      render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()
