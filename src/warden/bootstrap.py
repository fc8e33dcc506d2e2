"""The one place that reads settings and the environment and wires adapters into services."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

from warden.adapters.config_file import read_config
from warden.adapters.store.db import Database, open_database
from warden.core.settings import Settings, resolve
from warden.services.audit import AuditLog
from warden.services.workspaces import WorkspaceService

__all__ = ["App", "Home", "bootstrap", "load_settings"]


@dataclass(frozen=True)
class Home:
    """The layout of $WARDEN_HOME."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.toml"

    @property
    def keys(self) -> Path:
        return self.root / "keys"

    @property
    def layers(self) -> Path:
        return self.root / "layers"

    @property
    def archives(self) -> Path:
        return self.root / "archives"

    @property
    def templates(self) -> Path:
        return self.root / "templates"

    @property
    def sandbox_paths(self) -> Path:
        """Global allowed/denied paths (seed 004's file format)."""
        return self.root / "sandbox_paths.json"

    @classmethod
    def locate(cls, home: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> Home:
        raw = home if home is not None else environ.get("WARDEN_HOME") or "~/.warden"
        return cls(Path(os.path.expanduser(raw)).absolute())


def utc_now() -> datetime:
    return datetime.now(UTC)


def load_settings(home: Home, environ: Mapping[str, str]) -> Settings:
    return resolve(read_config(home.config), environ, file_label=str(home.config))


class App:
    """Wired services for one process; heavier services are built on first use."""

    def __init__(self, home: Home, settings: Settings, environ: Mapping[str, str],
                 clock: Callable[[], datetime]) -> None:
        self.home = home
        self.settings = settings
        self.environ = environ
        self.clock = clock

    @cached_property
    def root_dir(self) -> Path:
        configured = self.settings.get_str("sandbox.root_dir")
        return Path(os.path.expanduser(configured)).absolute() if configured else self.home.root / "workspaces"

    @cached_property
    def db(self) -> Database:
        self.home.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        return open_database(self.environ.get("WARDEN_DATABASE_URL"), self.home.root)

    @cached_property
    def audit(self) -> AuditLog:
        return AuditLog(self.db, self.clock)

    @cached_property
    def workspaces(self) -> WorkspaceService:
        return WorkspaceService(self.db, self.audit, self.root_dir, self.clock)

    def close(self) -> None:
        if "db" in self.__dict__:
            self.db.close()


def bootstrap(home: str | os.PathLike[str] | None = None, *,
              environ: Mapping[str, str] | None = None,
              clock: Callable[[], datetime] | None = None) -> App:
    """Read $WARDEN_HOME and its settings, and wire the real adapters."""
    env = dict(os.environ) if environ is None else dict(environ)
    located = Home.locate(home, env)
    return App(located, load_settings(located, env), env, clock or utc_now)
