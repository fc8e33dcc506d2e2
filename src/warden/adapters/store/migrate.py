"""Alembic, driven from code: `upgrade(url)` brings a registry to the head revision."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

_HERE = Path(__file__).resolve().parent


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(_HERE / "migrations"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, *, node: str | None = None, busy_timeout: float | None = None) -> None:
    """Apply every pending migration (idempotent); `node` names the migrating node (0007);
    `busy_timeout`: seconds SQLite waits for another process's lock (the registry's own)."""
    config = alembic_config(url)
    config.attributes["warden_node"] = node
    config.attributes["busy_timeout"] = busy_timeout
    command.upgrade(config, "head")


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head
