"""Setting up $WARDEN_HOME and changing settings."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from warden.adapters.config_file import read_config, set_config_value
from warden.core.settings import coerce

if TYPE_CHECKING:
    from warden.bootstrap import App, Home

__all__ = ["init_home", "set_setting"]

_CONFIG_HEADER = """\
# Warden settings. `warden config show` lists every key with its value and source;
# `warden config set KEY VALUE` changes one. Environment variables WARDEN_<KEY>
# (dots as underscores, e.g. WARDEN_SANDBOX_MAX_FILE_SIZE_MB) override this file.

[sandbox]
"""


def init_home(app: App, *, reset_keys: bool = False) -> list[str]:
    """Create the home folders, config and database; returns what was new (idempotent).

    With `reset_keys`, make a new pepper and master key: every grant token and every stored
    secret made before stops working (the old key files are kept in keys/replaced-*/)."""
    from warden.adapters.home_state import mark

    created: list[str] = []
    home = app.home
    for path, mode in ((home.root, 0o700), (home.keys, 0o700), (home.layers, 0o755),
                       (home.archives, 0o700), (home.templates, 0o755), (app.root_dir, 0o755)):
        if not path.exists():
            path.mkdir(parents=True, mode=mode)
            created.append(path.name or str(path))
    if not home.config.exists():
        fd = os.open(home.config, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(_CONFIG_HEADER)
        created.append("config.toml")
    app.db  # opening migrates the registry to the current schema  # noqa: B018
    if reset_keys:
        stamp = app.clock().strftime("%Y%m%dT%H%M%S")
        created += app.keystore.reset(stamp)
        app.audit.record(actor="user", action="keys.reset", target=str(home.keys),
                         detail={"replaced_into": f"keys/replaced-{stamp}"})
    created += app.keystore.ensure()  # token pepper and secrets master key, mode 0600
    if mark(home.root, app.clock):  # from now on a lost registry or key file is an error
        created.append(".initialised")
    app.audit.record(actor="user", action="init", target=str(home.root),
                     detail={"created": created})
    return created


def set_setting(home: Home, key: str, raw: str) -> object:
    """Validate `raw` for `key`, then write it to config.toml; a bad value changes nothing.

    Only this key is judged, from the file alone (no App): `config set` is how a person fixes
    a wrong value, so another wrong value in the file must not stop it.
    """
    value = coerce(key, raw)
    read_config(home.config)  # a file that is not TOML at all: say so, write nothing
    home.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    set_config_value(home.config, key, value)
    return value
