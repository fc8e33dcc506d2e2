"""Setting up $WARDEN_HOME and changing settings."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from warden.core.ports import Clock, ConfigFile, HomeFiles, KeyFiles
from warden.core.settings import coerce
from warden.services.audit import AuditLog

__all__ = ["HomeSetup", "set_setting"]

_CONFIG_HEADER = """\
# Warden settings. `warden config show` lists every key with its value and source;
# `warden config set KEY VALUE` changes one. Environment variables WARDEN_<KEY>
# (dots as underscores, e.g. WARDEN_SANDBOX_MAX_FILE_SIZE_MB) override this file.

[sandbox]
"""


class HomeSetup:
    """`warden init`: the folders, config file, registry and keys of $WARDEN_HOME."""

    def __init__(self, *, root: Path, folders: Sequence[tuple[Path, int]], config: Path, files: HomeFiles,
                 open_registry: Callable[[], object], keys: Callable[[], KeyFiles],
                 audit: Callable[[], AuditLog], clock: Clock) -> None:
        self.root = root
        self._folders = folders
        self._config = config
        self._files = files
        self._open_registry = open_registry
        self._keys = keys
        self._audit = audit
        self._clock = clock

    def init(self, *, reset_keys: bool = False) -> list[str]:
        """Create the home folders, config and database; returns what was new (idempotent).

        With `reset_keys`, make a new pepper and master key: every grant token and every stored
        secret made before stops working (the old key files are kept in keys/replaced-*/)."""
        created: list[str] = []
        for path, mode in self._folders:
            if self._files.make_folder(str(path), mode):
                created.append(path.name or str(path))
        if self._files.create_config(str(self._config), _CONFIG_HEADER):
            created.append("config.toml")
        self._open_registry()  # opening migrates the registry to the current schema
        keys = self._keys()
        if reset_keys:
            stamp = self._clock().strftime("%Y%m%dT%H%M%S")
            created += keys.reset(stamp)
            self._audit().record(actor="user", action="keys.reset", target=str(self.root / "keys"),
                                 detail={"replaced_into": f"keys/replaced-{stamp}"})
        created += keys.ensure()  # token pepper and secrets master key, mode 0600
        if self._files.mark(self._clock):  # from now on a lost registry or key file is an error
            created.append(".initialised")
        self._audit().record(actor="user", action="init", target=str(self.root), detail={"created": created})
        return created


def set_setting(config: ConfigFile, key: str, raw: str) -> object:
    """Validate `raw` for `key`, then write it to config.toml; a bad value changes nothing.

    Only this key is judged, from the file alone (no other setting): `config set` is how a
    person fixes a wrong value, so another wrong value in the file must not stop it.
    """
    value = coerce(key, raw)
    config.read()  # a file that is not TOML at all: say so, write nothing
    config.set_value(key, value)
    return value
