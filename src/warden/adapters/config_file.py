"""`$WARDEN_HOME/config.toml`: read with tomllib (fast), written with tomlkit (comments kept)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from warden.adapters.atomic import exclusive, write_atomic
from warden.core.errors import InvalidInput

__all__ = ["read_config", "set_config_value"]


def read_config(path: Path) -> dict[str, object]:
    """The file's tables, or {} when there is no file yet."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path}: not valid TOML ({exc}); fix or remove the file") from None
    except RecursionError:  # tomllib recurses: arrays nested thousands deep outrun the stack
        raise InvalidInput(f"{path}: not valid TOML (nested too deep); fix or remove the file") from None


def set_config_value(path: Path, key: str, value: object) -> None:
    """Set dotted `key` to `value` in the file, keeping its other content and comments."""
    # One writer at a time: a read, change and write of the whole file by two `config set` at
    # once kept only the last one's key (six at once: two kept), each saying it was set.
    with exclusive(path.with_name(f".{path.name}.lock")):
        _set(path, key, value)


def _set(path: Path, key: str, value: object) -> None:
    import tomlkit  # only writers pay for tomlkit's import

    try:
        document = tomlkit.parse(path.read_text("utf-8")) if path.exists() else tomlkit.document()
    except tomlkit.exceptions.ParseError as exc:
        raise InvalidInput(f"{path}: not valid TOML ({exc}); fix or remove the file") from None
    except RecursionError:
        raise InvalidInput(f"{path}: not valid TOML (nested too deep); fix or remove the file") from None
    *tables, leaf = key.split(".")
    node: tomlkit.container.Container | tomlkit.items.Table = document
    for name in tables:
        child = node.get(name)
        if child is None:
            child = tomlkit.table()
            node[name] = child
        node = child
    node[leaf] = value
    write_atomic(path, tomlkit.dumps(document).encode("utf-8"), mode=0o600)
